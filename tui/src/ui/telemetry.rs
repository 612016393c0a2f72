//! The telemetry block: the headline, the bars, the readouts, memory and the histories, stacked.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::Widget;

use super::TELEMETRY_H;
use super::bars::AttributionBars;
use super::headline::Headline;
use super::memory::MemoryLine;
use super::readouts::Readouts;
use super::sparklines::Sparklines;
use crate::state::App;
use crate::theme::Theme;

/// Rows of text above the histories.
const TEXT_H: u16 =
    Headline::HEIGHT + AttributionBars::HEIGHT + Readouts::HEIGHT + MemoryLine::HEIGHT;

// The layout reserves TELEMETRY_H rows for the block: its parts must fill exactly that.
const _: () = assert!(TEXT_H + Sparklines::HEIGHT == TELEMETRY_H);

/// The live figures of the token last applied, or the run's averages once a summary arrived.
pub(super) struct Telemetry<'a> {
    app: &'a App,
    theme: &'a Theme,
}

impl<'a> Telemetry<'a> {
    /// The telemetry of `app`.
    pub(super) fn new(app: &'a App, theme: &'a Theme) -> Self {
        Telemetry { app, theme }
    }
}

impl Widget for Telemetry<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let (app, theme) = (self.app, self.theme);
        let run = &app.run;
        let avg = run.summary.is_some();
        // Before the first token of a replay, the steps of the run to come.
        let steps = if run.steps == 0 {
            app.next_token().map_or(0, |t| t.steps)
        } else {
            run.steps
        };
        let [text_area, spark_area] = Layout::vertical([
            Constraint::Length(TEXT_H),
            Constraint::Length(Sparklines::HEIGHT),
        ])
        .areas(area);
        let mut rest = text_area;
        let rows = take_rows(&mut rest, Headline::HEIGHT);
        Headline::new(run, steps, theme, avg).render(rows, buf);
        let rows = take_rows(&mut rest, AttributionBars::HEIGHT);
        AttributionBars::new(run, theme, avg).render(rows, buf);
        let rows = take_rows(&mut rest, Readouts::HEIGHT);
        Readouts::new(run, theme, avg).render(rows, buf);
        let rows = take_rows(&mut rest, MemoryLine::HEIGHT);
        MemoryLine::new(run, theme).render(rows, buf);
        Sparklines::new(run, theme).render(spark_area, buf);
    }
}

/// The top `n` rows of `rest` (fewer when it has fewer), which keeps the rows below them. A
/// terminal too short for the whole block loses its bottom rows, as one paragraph would.
fn take_rows(rest: &mut Rect, n: u16) -> Rect {
    let n = n.min(rest.height);
    let top = Rect { height: n, ..*rest };
    rest.y += n;
    rest.height -= n;
    top
}
