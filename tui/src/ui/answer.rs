//! The answer pane: the streamed text (or, in a session, the conversation).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Text};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::conversation::conversation_text;
use super::pane_block;
use crate::state::{App, Focus, RunState, SourceKind};
use crate::theme::Theme;

/// The answer pane, scrolled to its tail unless the user scrolled back.
pub(super) struct AnswerPane<'a> {
    app: &'a App,
    theme: &'a Theme,
}

impl<'a> AnswerPane<'a> {
    /// The answer pane of `app`.
    pub(super) fn new(app: &'a App, theme: &'a Theme) -> Self {
        AnswerPane { app, theme }
    }
}

impl Widget for AnswerPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let (app, theme) = (self.app, self.theme);
        let focused = app.focus == Focus::Answer;
        let title = if app.kind == SourceKind::Session {
            " conversation ".to_string()
        } else if app.run.text.reasoning().is_empty() {
            " answer ".to_string()
        } else {
            " answer · thinking in italics ".to_string()
        };
        let block = pane_block(title, focused, theme);
        let inner = block.inner(area);
        let para =
            Paragraph::new(answer_text(&app.run, theme, &app.kind)).wrap(Wrap { trim: false });
        let total = para.line_count(inner.width) as u16;
        let tail = total.saturating_sub(inner.height);
        let scroll = tail.saturating_sub(app.answer_scroll.min(tail));
        para.block(block).scroll((scroll, 0)).render(area, buf);
    }
}

/// One generation's lines: the thinking span (italic, `│ ` gutter) then the answer.
pub(super) fn push_generation(
    lines: &mut Vec<Line<'static>>,
    reasoning: &str,
    answer: &str,
    theme: &Theme,
) {
    if !reasoning.is_empty() {
        lines.push(Line::styled(
            "thinking",
            theme.reasoning().add_modifier(Modifier::BOLD),
        ));
        for l in reasoning.split('\n') {
            lines.push(Line::styled(format!("│ {l}"), theme.reasoning()));
        }
        lines.push(Line::raw(""));
    }
    if !answer.is_empty() {
        for l in answer.split('\n') {
            lines.push(Line::styled(l.to_string(), theme.answer()));
        }
    }
}

/// The streamed answer with the thinking span set apart.
pub fn answer_text(run: &RunState, theme: &Theme, kind: &SourceKind) -> Text<'static> {
    let mut lines: Vec<Line> = Vec::new();
    push_generation(&mut lines, &run.reasoning(), &run.answer(), theme);
    // An engine that failed says why on stderr: show its last words where the answer would be.
    let failed = run.ended.as_deref().is_some_and(|e| {
        e.contains("exit status") && !e.ends_with("exit status: 0") || e.contains("signal")
    });
    if failed && run.totals.tokens == 0 {
        lines.push(Line::styled(
            format!(
                "the engine ended before the first token ({})",
                run.ended.as_deref().unwrap_or("")
            ),
            theme.warn(),
        ));
        for l in run.log.iter().rev().take(6).rev() {
            lines.push(Line::styled(l.clone(), theme.warn()));
        }
        return Text::from(lines);
    }
    if *kind == SourceKind::Session {
        return conversation_text(run, theme);
    }
    if lines.is_empty() {
        let why = match kind {
            SourceKind::Replay => "(a metrics CSV records no text)",
            _ if run.totals.tokens > 0 && !run.streams_text => {
                "(this run streams no text: baseline or an engine without deltas)"
            }
            _ if run.totals.tokens == 0 && run.ended.is_none() => {
                "(waiting for the first token: model load and prompt prefill)"
            }
            _ => "(waiting for text)",
        };
        lines.push(Line::styled(why, theme.dim()));
    }
    Text::from(lines)
}
