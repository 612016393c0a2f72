//! The telemetry block's first row: the token rate and the run's progress.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::format::{ms, num2};
use crate::figures;
use crate::state::RunState;
use crate::theme::Theme;

/// Tok/s (the last token's, or the run's average once a summary arrived), the token time, and a
/// progress bar over the run's steps.
pub(super) struct Headline<'a> {
    run: &'a RunState,
    steps: u64,
    theme: &'a Theme,
    avg: bool,
}

impl<'a> Headline<'a> {
    /// Rows it draws.
    pub(super) const HEIGHT: u16 = 1;

    /// The headline of `run`, its progress counted against `steps`; run averages when `avg`.
    pub(super) fn new(run: &'a RunState, steps: u64, theme: &'a Theme, avg: bool) -> Self {
        Headline {
            run,
            steps,
            theme,
            avg,
        }
    }
}

impl Widget for Headline<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let line = headline(self.run, self.steps, self.theme, area.width, self.avg);
        Paragraph::new(line).render(area, buf);
    }
}

fn headline(run: &RunState, steps: u64, theme: &Theme, width: u16, avg: bool) -> Line<'static> {
    let mut spans = Vec::new();
    if avg {
        let n = run
            .summary
            .as_ref()
            .and_then(|s| s.tokens)
            .unwrap_or(run.totals.tokens);
        spans.push(Span::styled(
            format!(" {} tok/s", num2(run.avg_tok_s())),
            theme.headline(),
        ));
        let wall = run
            .avg_bars()
            .map(|b| format!(" ({}/tok)", ms(b.wall_ms)))
            .unwrap_or_default();
        spans.push(Span::styled(
            format!("{wall} avg · {n} tokens"),
            theme.dim(),
        ));
        if let Some(e) = experienced(run) {
            spans.push(Span::styled(format!(" · {e:.2} incl. loop"), theme.dim()));
        }
    } else {
        spans.push(Span::styled(
            format!(" {} tok/s", num2(run.live_tok_s())),
            theme.headline(),
        ));
        let wall = run
            .live_bars()
            .map(|b| format!(" ({})", ms(b.wall_ms)))
            .unwrap_or_default();
        spans.push(Span::styled(
            format!("{wall} live · {} avg", num2(run.avg_tok_s())),
            theme.dim(),
        ));
    }
    let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    let progress = format!("  token {}/{steps} ", run.step);
    let pct = figures::progress(run.step, steps);
    let pct_txt = format!(" {:>3.0}%", pct * 100.0);
    let bar_w = (width as usize)
        .saturating_sub(used + progress.chars().count() + pct_txt.len() + 1)
        .min(30);
    spans.push(Span::raw(progress));
    if bar_w >= 4 {
        let filled = (pct * bar_w as f64).round() as usize;
        spans.push(Span::styled("█".repeat(filled), theme.ok()));
        spans.push(Span::styled("░".repeat(bar_w - filled), theme.dim()));
        spans.push(Span::raw(pct_txt));
    }
    Line::from(spans)
}

fn experienced(run: &RunState) -> Option<f64> {
    if let Some(s) = &run.summary
        && let (Some(r), Some(o)) = (s.tok_s, s.loop_overhead_s_tok)
        && r > 0.0
        && o > 0.0
    {
        return Some(1.0 / (1.0 / r + o));
    }
    let t = &run.totals;
    (t.overhead_rows > 0 && t.loop_overhead_ms > 0.0)
        .then(|| figures::experienced_tok_s(t.tokens, t.wall_ms, t.loop_overhead_ms))
        .flatten()
}
