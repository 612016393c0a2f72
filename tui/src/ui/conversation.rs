//! Session mode's conversation, drawn in the answer pane.

use ratatui::style::Modifier;
use ratatui::text::{Line, Text};

use super::answer::push_generation;
use crate::clean::clean;
use crate::session::TurnState;
use crate::state::RunState;
use crate::theme::Theme;

/// Session mode: the conversation, one turn after another, with the turn in flight streaming.
pub fn conversation_text(run: &RunState, theme: &Theme) -> Text<'static> {
    let s = &run.session;
    let mut lines: Vec<Line> = Vec::new();
    if let Some(r) = &s.ready {
        lines.push(Line::styled(
            format!(
                "ready: {} · n_ctx {} · top-{} · think {} · loaded in {:.2} s",
                clean(&r.arch, false),
                r.n_ctx,
                r.n_expert_used,
                clean(&r.think_ctl, false),
                r.load_s
            ),
            theme.dim(),
        ));
        lines.push(Line::raw(""));
    }
    for (i, t) in s.turns.iter().enumerate() {
        if t.clear_kv && i > 0 {
            lines.push(Line::styled("── new chat ──", theme.dim()));
        }
        lines.push(Line::styled(
            format!("› {}", clean(&t.prompt, true)),
            theme.headline().add_modifier(Modifier::BOLD),
        ));
        match &t.state {
            TurnState::Sent => lines.push(Line::styled("  (sent)", theme.dim())),
            TurnState::Generating => {
                let before = lines.len();
                push_generation(&mut lines, &run.reasoning(), &run.answer(), theme);
                if lines.len() == before {
                    lines.push(Line::styled("  (prefilling the prompt)", theme.dim()));
                }
            }
            TurnState::Done {
                cancelled,
                tokens,
                tok_s,
            } => {
                push_generation(
                    &mut lines,
                    &clean(&t.reasoning, true),
                    &clean(&t.text, true),
                    theme,
                );
                if *cancelled {
                    lines.push(Line::styled(
                        format!("⏹ cancelled after {tokens} tokens"),
                        theme.warn(),
                    ));
                } else {
                    lines.push(Line::styled(
                        format!("✓ {tokens} tokens · {tok_s:.2} tok/s"),
                        theme.ok(),
                    ));
                }
                for msg in &t.errors {
                    lines.push(Line::styled(
                        format!("✗ error: {}", clean(msg, true)),
                        theme.warn(),
                    ));
                }
            }
            TurnState::Error(msg) => lines.push(Line::styled(
                format!("✗ error: {}", clean(msg, true)),
                theme.warn(),
            )),
        }
        lines.push(Line::raw(""));
    }
    if let Some((fatal, msg)) = &s.orphan_error {
        lines.push(Line::styled(
            format!(
                "✗ engine error{}: {}",
                if *fatal { " (fatal)" } else { "" },
                clean(msg, true)
            ),
            theme.warn(),
        ));
    }
    if s.turns.is_empty() && s.orphan_error.is_none() {
        lines.push(Line::styled(
            if s.ready.is_some() {
                "(type a prompt below and press Enter)"
            } else {
                "(loading the model; you can type the first prompt already)"
            },
            theme.dim(),
        ));
    }
    Text::from(lines)
}
