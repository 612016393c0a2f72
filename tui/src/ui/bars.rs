//! The four attribution bars: compute, flash wait, cache management, unattributed.
//!
//! Each is drawn against the token's wall time and never rescaled to 100 %: the compute bar is
//! an upper bound (CPU time ÷ compute threads), and under overlap the terms may sum past the
//! wall time, so the remainder is clamped at 0 and says so.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::format::{ms, truncate};
use super::{LABEL_W, VALUE_W};
use crate::figures::{Bars, FlashTerm};
use crate::state::{Known, RunState};
use crate::theme::Theme;

/// The bars of the last token, or of the run's averages once a summary arrived (`avg`: every
/// label gets ` avg`).
pub(super) struct AttributionBars<'a> {
    run: &'a RunState,
    theme: &'a Theme,
    avg: bool,
}

impl<'a> AttributionBars<'a> {
    /// Rows it draws: one a bar.
    pub(super) const HEIGHT: u16 = 4;

    /// The bars of `run`; run averages when `avg`.
    pub(super) fn new(run: &'a RunState, theme: &'a Theme, avg: bool) -> Self {
        AttributionBars { run, theme, avg }
    }
}

impl Widget for AttributionBars<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let run = self.run;
        let bars = if self.avg {
            run.avg_bars()
        } else {
            run.live_bars()
        };
        let lines = bar_lines(run, bars, self.theme, area.width, self.avg);
        Paragraph::new(lines).render(area, buf);
    }
}

fn bar_lines(
    run: &RunState,
    bars: Option<Bars>,
    theme: &Theme,
    width: u16,
    avg: bool,
) -> Vec<Line<'static>> {
    let suffix = if avg { " avg" } else { "" };
    let bar_w = (width as usize)
        .saturating_sub(LABEL_W + VALUE_W + 2)
        .max(4);
    let (_, known) = run.overlap();
    let q = if known == Known::Inferred { "?" } else { "" };
    let Some(b) = bars else {
        return ["compute", "flash wait", "cache mgmt", "unattrib."]
            .iter()
            .map(|l| {
                bar(
                    &format!("{l}{suffix}"),
                    0.0,
                    "—".into(),
                    String::new(),
                    theme.dim(),
                    theme,
                    bar_w,
                )
            })
            .collect();
    };
    let threads = run.config.threads();
    let (c_fill, c_val, c_note) = match (b.compute_ms, threads) {
        (Some(c), Some(t)) => (b.fill(c), ms(c), format!("cpu÷{t} (≤)")),
        (None, None) => (0.0, "—".into(), "threads ?".into()),
        (None, Some(_)) => (0.0, "—".into(), "cpu unmeasured".into()),
        (Some(c), None) => (b.fill(c), ms(c), String::new()),
    };
    let streaming = run.streaming();
    let (f_val, f_note) = if streaming {
        let term = match b.flash_term {
            FlashTerm::Io => "io, serial",
            FlashTerm::Stall => "stall, overlap",
        };
        (ms(b.flash_ms), format!("{term}{q}"))
    } else {
        ("—".into(), "no streaming".into())
    };
    let (u_fill, u_val, u_note) = match b.unattributed_ms {
        None => (0.0, "—".to_string(), "needs compute".to_string()),
        Some(u) if b.overlapping() => (b.fill(u), ms(u), "clamped at 0".to_string()),
        Some(u) => (b.fill(u), ms(u), "off-CPU".to_string()),
    };
    vec![
        bar(
            &format!("compute{suffix}"),
            c_fill,
            c_val,
            c_note,
            theme.compute(),
            theme,
            bar_w,
        ),
        bar(
            &format!("flash wait{suffix}"),
            if streaming { b.fill(b.flash_ms) } else { 0.0 },
            f_val,
            f_note,
            theme.flash(),
            theme,
            bar_w,
        ),
        bar(
            &format!("cache mgmt{suffix}"),
            b.fill(b.mgmt_ms),
            ms(b.mgmt_ms),
            String::new(),
            theme.mgmt(),
            theme,
            bar_w,
        ),
        bar(
            &format!("unattrib.{suffix}"),
            u_fill,
            u_val,
            u_note,
            theme.unattributed(),
            theme,
            bar_w,
        ),
    ]
}

fn bar(
    label: &str,
    fill: f64,
    value: String,
    note: String,
    style: Style,
    theme: &Theme,
    width: usize,
) -> Line<'static> {
    let filled = ((fill.clamp(0.0, 1.0)) * width as f64).round() as usize;
    let value_note = truncate(&format!("{value:>8} {note}"), VALUE_W);
    Line::from(vec![
        Span::raw(format!(" {label:<w$}", w = LABEL_W - 1)),
        Span::styled("█".repeat(filled), style),
        Span::styled("░".repeat(width - filled), theme.dim()),
        Span::raw(" "),
        Span::raw(format!("{value_note:<VALUE_W$}")),
    ])
}
