//! Pictures of the decode-analyze reports: compute share by op (or layer segment) from a
//! compute trace, and the per-read latency CDF of an io trace.

use std::collections::BTreeMap;
use std::path::Path;

use bmoe_telemetry::trace::{IoRow, IoTraceReader};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

use super::{DrawResult, Figure, OrMsg, base, frame, legend, render, shade};
use crate::decode::Report;
use crate::{AnalyzeError, Result};

/// Horizontal bars, first item at the top, each labelled with its share and ms/token.
struct ShareBars {
    title: String,
    y_desc: &'static str,
    /// (name, share %, ms/token).
    bars: Vec<(String, f64, f64)>,
}

impl Figure for ShareBars {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let n = self.bars.len();
        let longest = self.bars.iter().map(|b| b.0.len()).max().unwrap_or(4);
        let x_max = self.bars.iter().map(|b| b.1).fold(1.0, f64::max);
        // Item i is drawn at y = n-1-i so the list reads top-down like the text report.
        let y_of = |i: usize| (n - 1 - i) as f64;
        let names: Vec<&str> = self.bars.iter().map(|b| b.0.as_str()).collect();
        let mut chart = frame(root, &self.title, (longest as u32 * 8 + 20).clamp(60, 220))
            .build_cartesian_2d(0.0..x_max * 1.25, -0.5..n as f64 - 0.5)
            .msg()?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n.max(1))
            .y_label_formatter(&|y| {
                let r = y.round();
                if (y - r).abs() > 1e-6 || r < 0.0 || r as usize >= n {
                    return String::new();
                }
                names[n - 1 - r as usize].to_string()
            })
            .x_label_formatter(&|x| format!("{x:.0}"))
            .x_desc("share of measured compute time (%)")
            .y_desc(self.y_desc)
            .draw()
            .msg()?;
        let colour = shade(0.7);
        chart
            .draw_series(self.bars.iter().enumerate().map(|(i, b)| {
                let y = y_of(i);
                Rectangle::new([(0.0, y - 0.38), (b.1, y + 0.38)], colour.filled())
            }))
            .msg()?
            .label("share of compute time")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
        let size = if n > 24 { 10 } else { 14 };
        chart
            .draw_series(self.bars.iter().enumerate().map(|(i, b)| {
                Text::new(
                    format!("{:.1}% ({:.2} ms)", b.1, b.2),
                    (b.1 + x_max * 0.01, y_of(i)),
                    ("sans-serif", size).into_font().color(&BLACK).pos(
                        plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Left,
                            plotters::style::text_anchor::VPos::Center,
                        ),
                    ),
                )
            }))
            .msg()?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

fn cell_f64(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(0.0)
}

/// `compute --plot`: share of measured compute time per op (the `--top` ops of the report,
/// largest first, the rest as one `other ops` bar) or per layer segment (`pre`, `blk.N`, `post`
/// in layer order) for `--compute-trace-layers` traces. Same figures as the text report.
///
/// # Errors
/// An unwritable path or a drawing failure, naming `--plot PATH`.
pub fn compute_share(path: &Path, report: &Report) -> Result<()> {
    let Some(table) = report.tables.first() else {
        return Err(AnalyzeError::Empty {
            message: "compute report has no ops table".into(),
            hint: "this is a bug in bmoe-analyze; please report it with the trace".into(),
        });
    };
    let segments = table.name == "segments";
    let mut bars: Vec<(String, f64, f64)> = table
        .rows
        .iter()
        .map(|r| {
            (
                r.first().and_then(Value::as_str).unwrap_or("?").to_string(),
                cell_f64(r.get(2)),
                cell_f64(r.get(1)),
            )
        })
        .collect();
    let total_ms = cell_f64(report.meta.get("compute_ms_per_token"));
    let shown: f64 = bars.iter().map(|b| b.1).sum();
    if !segments && 100.0 - shown > 0.05 {
        let shown_ms: f64 = bars.iter().map(|b| b.2).sum();
        bars.push(("other ops".into(), 100.0 - shown, total_ms - shown_ms));
    }
    let model = report
        .meta
        .get("model")
        .and_then(Value::as_str)
        .map_or_else(|| "?".to_string(), base);
    let what = if segments { "layer segment" } else { "op" };
    render(
        path,
        &ShareBars {
            title: format!("Compute share by {what} - {model} ({total_ms:.2} ms/token measured)"),
            y_desc: if segments { "segment" } else { "op" },
            bars,
        },
    )
}

/// One CDF line: legend name, stroke width, (latency µs, cumulative %) points.
type CdfLine = (String, u32, Vec<(f64, f64)>);

/// CDF lines (all lanes first) plus percentile marks (label, µs, %).
struct LatencyCdf {
    title: String,
    x_range: (f64, f64),
    lines: Vec<CdfLine>,
    marks: Vec<(String, f64, f64)>,
}

impl Figure for LatencyCdf {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let mut chart = frame(root, &self.title, 55)
            .build_cartesian_2d(
                (self.x_range.0..self.x_range.1)
                    .log_scale()
                    .with_key_points(super::axis::log_ticks(self.x_range.0, self.x_range.1)),
                0.0..100.0,
            )
            .msg()?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| super::axis::tick_label(*x))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("read latency (us, log scale)")
            .y_desc("reads at or below (%)")
            .draw()
            .msg()?;
        for (i, (name, width, pts)) in self.lines.iter().enumerate() {
            let colour = if i == 0 {
                BLACK.to_rgba()
            } else {
                // Lanes in colour-blind-safe categories (black is the all-lanes line).
                super::axis::category(1 + (i - 1) % (super::axis::OKABE_ITO.len() - 1)).to_rgba()
            };
            let width = *width;
            chart
                .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(width)))
                .msg()?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(width))
                });
        }
        for (label, x, y) in &self.marks {
            let c = RED.to_rgba();
            chart
                .draw_series(std::iter::once(Circle::new((*x, *y), 5, c.filled())))
                .msg()?
                .label(label.as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, c.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

/// At most this many points per CDF line (the SVG stays small on million-read traces).
const CDF_POINTS: usize = 1500;

/// The empirical CDF of sorted latencies (ns) as (µs, %) points, thinned to [`CDF_POINTS`].
fn cdf(sorted_ns: &[u64]) -> Vec<(f64, f64)> {
    let n = sorted_ns.len();
    let step = n.div_ceil(CDF_POINTS).max(1);
    let mut pts: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (sorted_ns[i] as f64 / 1e3, 100.0 * (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&last) = sorted_ns.last() {
        pts.push((last as f64 / 1e3, 100.0));
    }
    // A log axis cannot show 0 µs; clamp to the axis floor chosen by the caller.
    pts
}

/// `io --plot`: the CDF of per-read latency over the reads the report uses (decode rows, or
/// every row when the trace has none), all lanes thick and black, each lane thin when there
/// are 2 to 16 lanes; red dots mark p50/p90/p99 with the report's percentile rule.
///
/// # Errors
/// The trace cannot be read, an unwritable path or a drawing failure.
pub fn io_latency_cdf(path: &Path, trace: &Path) -> Result<()> {
    let reader = IoTraceReader::open(trace).map_err(|e| AnalyzeError::from_telemetry(trace, e))?;
    let model = reader.info().model.clone().unwrap_or_else(|| "?".into());
    // The report beside the plot already noted a cut-short last line.
    let (rows, _) = crate::decode::read_all(trace, reader)?;
    let (rows, _) = crate::decode::select(trace, rows, |r: &IoRow| r.phase)?;
    let mut all: Vec<u64> = rows.iter().map(|r| r.latency_ns).collect();
    all.sort_unstable();
    let mut lanes: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for r in &rows {
        lanes.entry(r.lane).or_default().push(r.latency_ns);
    }
    // Log axis: start at the smallest positive latency (a 0 ns read sits on the floor).
    let floor_us = all
        .iter()
        .find(|&&v| v > 0)
        .map_or(1.0, |&v| v as f64 / 1e3)
        / 1.2;
    let top_us = (all.last().copied().unwrap_or(1) as f64 / 1e3).max(floor_us * 10.0) * 1.2;
    let clamp = |pts: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        pts.into_iter().map(|(x, y)| (x.max(floor_us), y)).collect()
    };
    let mut lines = vec![(
        format!("all lanes ({} reads)", all.len()),
        3,
        clamp(cdf(&all)),
    )];
    if (2..=16).contains(&lanes.len()) {
        for (lane, mut v) in lanes {
            v.sort_unstable();
            lines.push((
                format!("lane {lane} ({} reads)", v.len()),
                1,
                clamp(cdf(&v)),
            ));
        }
    }
    let marks = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)]
        .into_iter()
        .filter_map(|(label, q)| {
            let v = bmoe_stats::percentile_nearest_floor(&all, q)? as f64 / 1e3;
            Some((format!("{label} {v:.1} us"), v.max(floor_us), 100.0 * q))
        })
        .collect();
    render(
        path,
        &LatencyCdf {
            title: format!("Per-read latency CDF - {}", base(&model)),
            x_range: (floor_us, top_us),
            lines,
            marks,
        },
    )
}
