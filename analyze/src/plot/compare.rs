//! `metrics --compare A B --plot`: the two runs' per-token wall times side by side — left, each
//! token's `wall_ms` in file order with the run's mean as a dashed line (warm-up, drift and
//! stalls show here); right, the empirical CDF of the same values (where the distributions
//! differ: a shift, a longer tail). Wall time is on a log axis so one slow first token does not
//! flatten the rest; a zero-wall row (a speculation follower) sits on the axis floor. The title carries the ratio of mean token time A/B, its
//! bootstrap 95 % CI and the verdict, from the same computation the text prints
//! ([`crate::metrics::require_ratio_ci`]).

use std::path::Path;

use bmoe_stats::BootstrapCi;
use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::prelude::*;

use super::{DrawResult, Figure, OrMsg, base, legend, render};
use crate::Result;
use crate::metrics::{RunStats, Verdict, require_ratio_ci};
use crate::pyfmt::f;

/// At most this many points per ECDF line (the SVG stays small on long runs).
const ECDF_POINTS: usize = 1500;

/// One run's series.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSeries {
    /// `A` or `B`.
    pub run: &'static str,
    /// `A: file.csv (256 tokens)`, with `[traced]` / `[stochastic]` when the run was.
    pub name: String,
    /// Number of the first token drawn (1-based, after `--trim`).
    pub first_token: usize,
    /// Per-token wall times (ms): [`RunStats::walls`].
    pub walls: Vec<f64>,
    /// Their mean (ms), as `--compare` prints it.
    pub mean_ms: f64,
    /// Empirical CDF: (wall ms, % of tokens at or below), thinned to 1500 points.
    pub ecdf: Vec<(f64, f64)>,
}

/// Everything the compare plot draws.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareSeries {
    /// Run A.
    pub a: RunSeries,
    /// Run B.
    pub b: RunSeries,
    /// Ratio of mean token time A / B and its bootstrap 95 % CI.
    pub ratio: BootstrapCi,
    /// What the CI says.
    pub verdict: Verdict,
}

impl CompareSeries {
    /// The title: `Per-token wall time - A/B = 0.672 (95% CI 0.514 .. 0.834), A is faster`,
    /// with the text's rounding.
    #[must_use]
    pub fn title(&self) -> String {
        format!(
            "Per-token wall time - A/B = {} (95% CI {} .. {}), {}",
            f(self.ratio.estimate, 3),
            f(self.ratio.low, 3),
            f(self.ratio.high, 3),
            self.verdict.short()
        )
    }
}

fn ecdf(walls: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = walls.iter().copied().filter(|w| w.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let step = n.div_ceil(ECDF_POINTS).max(1);
    let mut pts: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (sorted[i], 100.0 * (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&last) = sorted.last()
        && pts.last().is_some_and(|p| p.1 < 100.0)
    {
        pts.push((last, 100.0));
    }
    pts
}

fn series(which: &'static str, r: &RunStats, trim: usize) -> RunSeries {
    let mut tags = String::new();
    if r.instrumented {
        tags.push_str(" [traced]");
    }
    if r.stochastic {
        tags.push_str(" [stochastic]");
    }
    RunSeries {
        run: which,
        name: format!(
            "{which}: {} ({} tokens){tags}",
            base(&r.path.display().to_string()),
            r.walls.len()
        ),
        first_token: trim + 1,
        walls: r.walls.clone(),
        mean_ms: bmoe_stats::mean(&r.walls),
        ecdf: ecdf(&r.walls),
    }
}

/// The series of `a` and `b` (read with `--trim trim`).
///
/// # Errors
/// B's mean token time is 0 (the ratio is undefined), as `--compare` says.
pub fn compare_series(a: &RunStats, b: &RunStats, trim: usize) -> Result<CompareSeries> {
    let ratio = require_ratio_ci(a, b)?;
    Ok(CompareSeries {
        a: series("A", a, trim),
        b: series("B", b, trim),
        verdict: Verdict::of(&ratio),
        ratio,
    })
}

/// Wall-time tick labels ([`super::axis::tick_label`]: whole ms from 10 up).
fn ms_label(x: &f64) -> String {
    super::axis::tick_label(*x)
}

/// The log wall-time axis over `lo..hi` with labels a reader can read values off (1-2-5 per
/// decade, or finer inside one decade: [`super::axis::log_ticks`]), instead of plotters'
/// decade-only labels (196–2441 ms was labelled at 1000 and 2000 alone).
fn ms_axis(lo: f64, hi: f64) -> WithKeyPoints<LogCoord<f64>> {
    let ticks = super::axis::log_ticks(lo, hi);
    (lo..hi).log_scale().with_key_points(ticks)
}

const COLOURS: [RGBColor; 2] = [RGBColor(49, 130, 189), RGBColor(230, 85, 13)];

struct ComparePlot(CompareSeries);

impl ComparePlot {
    fn runs(&self) -> [(&RunSeries, RGBColor); 2] {
        [(&self.0.a, COLOURS[0]), (&self.0.b, COLOURS[1])]
    }

    /// The wall-time axis (log scale: one slow first token must not flatten the rest):
    /// from just under the smallest positive wall to just over the largest, at least 4x wide.
    fn ms_range(&self) -> (f64, f64) {
        let walls = || {
            self.runs()
                .into_iter()
                .flat_map(|(r, _)| r.walls.iter().copied())
                .filter(|w| w.is_finite() && *w > 0.0)
        };
        let lo = walls().fold(f64::INFINITY, f64::min);
        let hi = walls().fold(0.0, f64::max);
        if !lo.is_finite() {
            return (0.1, 1.0);
        }
        let (lo, hi) = (lo / 1.15, hi * 1.15);
        (lo, hi.max(lo * 4.0))
    }

    fn over_tokens<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        let first = self.0.a.first_token as f64;
        let last = self
            .runs()
            .iter()
            .map(|(r, _)| (r.first_token + r.walls.len()) as f64)
            .fold(first + 1.0, f64::max);
        let (lo, hi) = self.ms_range();
        let mut chart = ChartBuilder::on(area)
            .caption("wall_ms of each token, in file order", ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(first..last, ms_axis(lo, hi))
            .msg()?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&ms_label)
            .x_desc("token (metrics row after --trim)")
            .y_desc("wall ms per token (log scale)")
            .draw()
            .msg()?;
        for (r, colour) in self.runs() {
            let start = r.first_token as f64;
            chart
                .draw_series(LineSeries::new(
                    r.walls
                        .iter()
                        .enumerate()
                        .map(|(i, &w)| (start + i as f64, w.max(lo))),
                    colour.stroke_width(1),
                ))
                .msg()?;
            let end = start + r.walls.len().saturating_sub(1) as f64;
            chart
                .draw_series(DashedLineSeries::new(
                    [(start, r.mean_ms), (end.max(start + 1.0), r.mean_ms)],
                    10,
                    6,
                    colour.stroke_width(3),
                ))
                .msg()?;
        }
        Ok(())
    }

    fn distribution<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        let (lo, hi) = self.ms_range();
        let mut chart = ChartBuilder::on(area)
            .caption("ECDF of wall_ms, dashed: the mean", ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(ms_axis(lo, hi), 0.0..100.0)
            .msg()?;
        chart
            .configure_mesh()
            .x_label_formatter(&ms_label)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("wall ms per token (log scale)")
            .y_desc("tokens at or below (%)")
            .draw()
            .msg()?;
        for (r, colour) in self.runs() {
            chart
                .draw_series(LineSeries::new(
                    r.ecdf.iter().map(|&(x, y)| (x.max(lo), y)),
                    colour.stroke_width(2),
                ))
                .msg()?
                .label(r.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
            chart
                .draw_series(DashedLineSeries::new(
                    [(r.mean_ms, 0.0), (r.mean_ms, 100.0)],
                    8,
                    5,
                    colour.stroke_width(2),
                ))
                .msg()?
                .label(format!("{} mean {} ms/tok", r.run, f(r.mean_ms, 2)))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], colour.stroke_width(3))
                });
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

impl Figure for ComparePlot {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let body = root.titled(&self.0.title(), ("sans-serif", 22)).msg()?;
        let (left, right) = body.split_horizontally(body.dim_in_pixel().0 / 2);
        self.over_tokens(&left)?;
        self.distribution(&right)
    }
}

/// `metrics --compare A B --plot`: both runs' per-token wall times over the tokens and as
/// ECDFs, titled with the A/B ratio of means, its bootstrap 95 % CI and the verdict.
///
/// # Errors
/// B's mean token time is 0, an unwritable path or a drawing failure.
pub fn compare_runs(path: &Path, a: &RunStats, b: &RunStats, trim: usize) -> Result<()> {
    render(path, &ComparePlot(compare_series(a, b, trim)?))
}
