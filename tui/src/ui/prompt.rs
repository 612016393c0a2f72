//! Session mode's prompt line.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use crate::clean::clean;
use crate::session::Composer;
use crate::theme::Theme;

/// Session mode: the prompt being typed, the next request's settings, and the key hints (or why
/// the last Enter / Esc did nothing).
pub(super) struct PromptLine<'a> {
    composer: &'a Composer,
    theme: &'a Theme,
}

impl<'a> PromptLine<'a> {
    /// The line for `composer`'s state.
    pub(super) fn new(composer: &'a Composer, theme: &'a Theme) -> Self {
        PromptLine { composer, theme }
    }
}

impl Widget for PromptLine<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        prompt_line(self.composer, self.theme, area.width).render(area, buf);
    }
}

fn prompt_line(c: &Composer, theme: &Theme, width: u16) -> Paragraph<'static> {
    let mut flags = vec![if c.new_chat { "new chat" } else { "continue" }.to_string()];
    if !c.think {
        flags.push("think off".into());
    }
    if let Some(n) = c.n_predict {
        flags.push(format!("n {n}"));
    }
    let mode = format!("[{}]", flags.join(", "));
    let typed_w = c.input.chars().count() + 4;
    let right = match &c.notice {
        Some(n) => format!(" ⚠ {n} "),
        None => {
            // Hints give way to a long prompt; the mode tag stays.
            let full = format!(" {mode} Enter send · Esc cancel · F1 help ");
            if typed_w + full.chars().count() <= width as usize {
                full
            } else {
                format!(" {mode} ")
            }
        }
    };
    let right_w = right.chars().count();
    let room = (width as usize).saturating_sub(right_w + 4).max(8);
    // The tail of a long prompt stays visible, as in any line editor.
    let typed = clean(&c.input, false);
    let n = typed.chars().count();
    let shown: String = if n > room {
        let tail: String = typed.chars().skip(n - room + 1).collect();
        format!("…{tail}")
    } else {
        typed
    };
    let used = 3 + shown.chars().count() + 1;
    let pad = (width as usize).saturating_sub(used + right_w);
    Paragraph::new(Line::from(vec![
        Span::styled(" › ", theme.headline()),
        Span::raw(shown),
        Span::styled("█", theme.dim()),
        Span::raw(" ".repeat(pad)),
        Span::styled(
            right,
            if c.notice.is_some() {
                theme.warn()
            } else {
                theme.dim()
            },
        ),
    ]))
}
