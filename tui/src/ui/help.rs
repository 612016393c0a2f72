//! The help popup: the keys of the current mode and how to read the bars.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Widget, Wrap};

use super::pane_block;
use crate::theme::Theme;

/// Keys of session mode, as the popup lists them.
const SESSION_KEYS: &[(&str, &str)] = &[
    ("Enter", "send the prompt (generate)"),
    ("Esc", "cancel the generation in flight"),
    ("Ctrl-N", "next prompt starts a new chat (clear_kv)"),
    ("Ctrl-R", "reasoning on / off for the next prompt (think)"),
    ("Ctrl-U", "clear the prompt line"),
    ("/n N  /n", "n_predict N for the next prompts; back to -n"),
    ("Ctrl-C", "cancel a generation; quit when idle"),
    ("Ctrl-D  F10", "quit (closes the session)"),
    ("Tab", "focus answer ↔ telemetry details"),
    (
        "↑ ↓ PgUp PgDn",
        "scroll the focused pane (mouse wheel: answer)",
    ),
    (
        "F1  ?",
        "help on / off (? on an empty prompt line); Esc closes",
    ),
];

/// Keys of the other modes (spawned, piped, replayed).
const REPLAY_KEYS: &[(&str, &str)] = &[
    (
        "q  F10  Esc",
        "quit (Ctrl-C: interrupt a spawned engine first)",
    ),
    ("space", "pause / resume"),
    ("← →", "one token back / forward while paused"),
    ("[ ]", "seek a tenth of the run back / forward"),
    ("Home End", "seek to start / end"),
    ("+ -", "replay speed up / down"),
    ("t", "focus answer ↔ telemetry details"),
    (
        "↑ ↓ PgUp PgDn",
        "scroll the focused pane (mouse wheel: answer)",
    ),
    ("?  F1", "help on / off; Esc closes it"),
];

/// The popup, centred over the area it is given (the whole frame) and clearing what it covers.
pub(super) struct HelpPopup<'a> {
    theme: &'a Theme,
    session: bool,
}

impl<'a> HelpPopup<'a> {
    /// The popup for session mode's keys (`session`) or the others'.
    pub(super) fn new(theme: &'a Theme, session: bool) -> Self {
        HelpPopup { theme, session }
    }
}

impl Widget for HelpPopup<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let rows = if self.session {
            SESSION_KEYS
        } else {
            REPLAY_KEYS
        };
        let mut keys = Vec::new();
        for (k, v) in rows.iter().copied() {
            keys.push(Line::from(vec![
                Span::styled(format!("{k:>14}  "), theme.headline()),
                Span::raw(v),
            ]));
        }
        // Short lines so the popup fits an 80x24 terminal without wrapping: the height below counts
        // wrapped rows, and anything past the frame would be cut off silently.
        let note = [
            Line::styled("bars: not rescaled to 100 %", theme.dim()),
            Line::styled(
                "compute = cpu ÷ compute threads (an upper bound)",
                theme.dim(),
            ),
        ];
        let w = 72.min(area.width.saturating_sub(2));
        let inner_w = usize::from(w.saturating_sub(2)).max(1);
        let rows_of = |lines: &[Line]| -> usize {
            lines
                .iter()
                .map(|l| l.width().max(1).div_ceil(inner_w))
                .sum()
        };
        let room = usize::from(area.height.saturating_sub(4));
        let mut lines = keys;
        lines.extend(note);
        // The title and the blank line before the note are the first to go on a short terminal.
        if rows_of(&lines) + 2 <= room {
            lines.insert(0, Line::styled("keys", theme.title()));
            let at = lines.len() - 2;
            lines.insert(at, Line::raw(""));
        }
        let h = (rows_of(&lines) as u16 + 2).min(area.height.saturating_sub(2));
        let popup = Rect {
            x: area.x + (area.width.saturating_sub(w)) / 2,
            y: area.y + (area.height.saturating_sub(h)) / 2,
            width: w,
            height: h,
        };
        Clear.render(popup, buf);
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(pane_block(" help ".into(), true, theme))
            .render(popup, buf);
    }
}
