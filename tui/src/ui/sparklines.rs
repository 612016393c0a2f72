//! The two history rows: token time and flash read per token.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::{Paragraph, Sparkline, Widget};

use super::LABEL_W;
use crate::state::RunState;
use crate::theme::Theme;

/// Token ms and flash MiB of the latest tokens, as many as the row is wide, each with its last
/// and largest value.
pub(super) struct Sparklines<'a> {
    run: &'a RunState,
    theme: &'a Theme,
}

impl<'a> Sparklines<'a> {
    /// Rows it draws.
    pub(super) const HEIGHT: u16 = 2;

    /// The histories of `run`.
    pub(super) fn new(run: &'a RunState, theme: &'a Theme) -> Self {
        Sparklines { run, theme }
    }
}

impl Widget for Sparklines<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let (run, theme) = (self.run, self.theme);
        let rows = Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).split(area);
        let specs = [
            ("token ms", &run.wall_hist, theme.compute()),
            ("flash MiB", &run.read_hist, theme.flash()),
        ];
        for ((label, hist, style), row) in specs.into_iter().zip(rows.iter()) {
            let last = hist.last().copied();
            let max = hist.iter().copied().fold(0.0_f64, f64::max);
            let tail = format!(
                " last {} max {}",
                last.map_or_else(|| "—".into(), |v| format!("{v:.0}")),
                if hist.is_empty() {
                    "—".into()
                } else {
                    format!("{max:.0}")
                }
            );
            let [l, s, r] = Layout::horizontal([
                Constraint::Length(LABEL_W as u16),
                Constraint::Min(4),
                Constraint::Length(tail.chars().count() as u16 + 1),
            ])
            .areas(*row);
            Paragraph::new(format!(" {label}")).render(l, buf);
            let n = s.width as usize;
            let start = hist.len().saturating_sub(n);
            let data: Vec<u64> = hist[start..]
                .iter()
                .map(|v| (v.max(0.0) * 100.0).round() as u64)
                .collect();
            Sparkline::default().data(&data).style(style).render(s, buf);
            Paragraph::new(tail).style(theme.dim()).render(r, buf);
        }
    }
}
