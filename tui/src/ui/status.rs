//! The status line at the bottom: where the source stands, malformed lines, the engine's end.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::widgets::{Paragraph, Widget};

use super::format::truncate;
use crate::clean::clean;
use crate::session::TurnState;
use crate::state::{App, RunState, SourceKind, Speed};
use crate::theme::Theme;

/// The status line: play state, replay position or tokens held back, malformed lines, how the
/// engine ended, and the key hints.
pub(super) struct StatusBar<'a> {
    app: &'a App,
    theme: &'a Theme,
}

impl<'a> StatusBar<'a> {
    /// The status line of `app`.
    pub(super) fn new(app: &'a App, theme: &'a Theme) -> Self {
        StatusBar { app, theme }
    }
}

impl Widget for StatusBar<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let (app, theme) = (self.app, self.theme);
        let run = &app.run;
        let mut parts: Vec<String> = Vec::new();
        let state = if app.paused {
            "⏸ paused"
        } else if run.ended.is_some() && app.at_end() {
            "■ ended"
        } else if app.kind == SourceKind::Replay && app.at_end() {
            "■ end of file"
        } else {
            "▶"
        };
        parts.push(state.to_string());
        if app.kind == SourceKind::Session {
            parts.push(session_state(run));
        }
        if app.kind == SourceKind::Replay {
            parts.push(format!(
                "{} token {}/{}",
                match app.speed {
                    Speed::Max => "max".to_string(),
                    s => s.label(),
                },
                app.tokens_applied,
                app.tokens_total()
            ));
        } else if app.paused {
            parts.push(format!(
                "{} new behind",
                app.tokens_total().saturating_sub(app.tokens_applied)
            ));
        }
        match &run.last_malformed {
            Some((line, why)) => parts.push(format!(
                "{} malformed ignored (line {line}: {})",
                run.malformed,
                truncate(why, 28)
            )),
            None => parts.push("0 malformed".into()),
        }
        if let Some(e) = &run.ended {
            parts.push(e.clone());
        } else if app.interrupted {
            parts.push("interrupt sent".into());
        }
        parts.push(if app.kind == SourceKind::Session {
            "F1 help · ^D quit".into()
        } else {
            "? help · q quit".into()
        });
        Paragraph::new(format!(" {}", parts.join(" │ ")))
            .style(theme.status())
            .render(area, buf);
    }
}

/// Session mode: where the conversation stands, for the status line.
pub fn session_state(run: &RunState) -> String {
    let s = &run.session;
    if let Some((true, msg)) = &s.orphan_error {
        return format!("fatal: {}", truncate(&clean(msg, false), 40));
    }
    let ready = match &s.ready {
        None => return "loading the model".into(),
        Some(r) => r,
    };
    match s.turns.last() {
        None => format!("ready ({:.1} s load)", ready.load_s),
        Some(t) => match &t.state {
            TurnState::Sent => format!("#{} sent", t.id),
            TurnState::Generating if s.cancel_pending => format!("#{} cancel sent", t.id),
            TurnState::Generating => format!("#{} generating", t.id),
            TurnState::Done {
                cancelled: true,
                tokens,
                ..
            } => format!("#{} cancelled after {tokens} tokens · ready", t.id),
            TurnState::Done { tokens, .. } => match t.errors.last() {
                None => format!("#{} done, {tokens} tokens · ready", t.id),
                Some(msg) => format!(
                    "#{} done, {tokens} tokens · error: {} · ready",
                    t.id,
                    truncate(&clean(msg, false), 40)
                ),
            },
            TurnState::Error(msg) => {
                format!(
                    "#{} error: {} · ready",
                    t.id,
                    truncate(&clean(msg, false), 40)
                )
            }
        },
    }
}
