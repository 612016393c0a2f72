//! Drawing: a pure function of [`App`] and [`Theme`] onto a ratatui frame.
//!
//! Narrow terminals (under 120 columns) stack telemetry over one bottom pane that `t` switches
//! between the answer and the run details; wide ones put the answer on the right.
//!
//! Every pane is a ratatui [`Widget`](ratatui::widgets::Widget) of its own module under `ui/`,
//! built from the state it shows; [`draw`] only decides where each one goes.

mod answer;
mod bars;
mod conversation;
mod details;
mod format;
mod header;
mod headline;
mod help;
mod memory;
mod prompt;
mod readouts;
mod sparklines;
mod status;
mod summary;
mod telemetry;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::Span;
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use crate::state::{App, Focus, SourceKind};
use crate::theme::Theme;
use answer::AnswerPane;
use details::DetailsPane;
use header::Header;
use help::HelpPopup;
use prompt::PromptLine;
use status::StatusBar;
use summary::Summary;
use telemetry::Telemetry;

pub use answer::answer_text;
pub use conversation::conversation_text;
pub use details::details_text;
pub use header::run_label;
pub use status::session_state;
pub use summary::summary_lines;

/// Smallest terminal the panel draws into; below it a one-line notice is shown.
pub const MIN_SIZE: (u16, u16) = (60, 16);
/// Width from which the answer moves to its own column.
pub const WIDE: u16 = 120;
/// Rows of the telemetry block.
pub const TELEMETRY_H: u16 = 11;

/// Width of a bar's or a history's label column.
const LABEL_W: usize = 15;
/// Width of a bar's value and note.
const VALUE_W: usize = 24;

/// Draws the whole panel.
pub fn draw(f: &mut Frame, app: &App, theme: &Theme) {
    let area = f.area();
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        let msg = format!(
            "terminal {}×{} is too small: bmoe-top needs {}×{} (q quits)",
            area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
        );
        f.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let session = app.kind == SourceKind::Session;
    let [header, body, prompt, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(u16::from(session)),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(Header::new(app, theme), header);
    f.render_widget(StatusBar::new(app, theme), status);
    if session {
        f.render_widget(PromptLine::new(&app.composer, theme), prompt);
    }

    let wide = area.width >= WIDE;
    let left_w = if wide {
        (area.width * 52 / 100).clamp(84, 110)
    } else {
        area.width
    };
    let summary = Summary::new(&app.run, theme, left_w);
    let summary_h = summary.height();
    if wide {
        let [left, right] =
            Layout::horizontal([Constraint::Length(left_w), Constraint::Min(30)]).areas(body);
        let [tele, summ, details] = Layout::vertical([
            Constraint::Length(TELEMETRY_H),
            Constraint::Length(summary_h),
            Constraint::Min(3),
        ])
        .areas(left);
        f.render_widget(Telemetry::new(app, theme), tele);
        f.render_widget(summary, summ);
        f.render_widget(DetailsPane::new(app, theme), details);
        f.render_widget(AnswerPane::new(app, theme), right);
    } else {
        let [tele, summ, bottom] = Layout::vertical([
            Constraint::Length(TELEMETRY_H),
            Constraint::Length(summary_h),
            Constraint::Min(3),
        ])
        .areas(body);
        f.render_widget(Telemetry::new(app, theme), tele);
        f.render_widget(summary, summ);
        match app.focus {
            Focus::Answer => f.render_widget(AnswerPane::new(app, theme), bottom),
            Focus::Telemetry => f.render_widget(DetailsPane::new(app, theme), bottom),
        }
    }
    if app.help {
        f.render_widget(HelpPopup::new(theme, session), area);
    }
}

/// A bordered pane titled `title`, its border highlighted when it has the focus.
fn pane_block(title: String, focused: bool, theme: &Theme) -> Block<'static> {
    Block::default()
        .borders(Borders::ALL)
        .border_style(if focused {
            theme.focus_border()
        } else {
            theme.border()
        })
        .title(Span::styled(title, theme.title()))
}

#[cfg(test)]
mod tests {
    use super::format::truncate;

    #[test]
    fn truncate_keeps_width() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate("abc", 0), "");
    }
}
