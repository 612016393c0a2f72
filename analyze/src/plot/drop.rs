//! The dropping trade-off of `drop --plot`: per phase, the share of the flash bytes a setting
//! would have saved against the share of router weight mass it would have discarded, for the
//! cache-aware thresholds `F × 1/k` and for the static top-k cut. Both curves start at the
//! origin, which is the trace as recorded (no dropping). A setting above and left of another
//! saves more reads for less lost mass.
//!
//! The points are the rows of the `threshold`, `static_k` and `phases` tables that
//! `drop --format json|csv` prints ([`tradeoff`]), so the picture and the report cannot differ.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

use super::{DrawResult, Figure, OrMsg, legend, render};
use crate::drop::DropTables;
use crate::pyfmt::f;
use crate::table::Table;
use crate::{AnalyzeError, Result};

/// One setting of one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct TradeoffPoint {
    /// `F=0.25` (threshold fraction of 1/k, as the text's `frac` column prints it) or `top-5`
    /// (static cut keeping the router's first 5 picks).
    pub label: String,
    /// Router weight mass lost (%), the x coordinate: the table's `mass_lost_pct`.
    pub mass_lost_pct: f64,
    /// Flash bytes saved (% of the phase's miss bytes), the y coordinate: `io_saved_pct`.
    pub io_saved_pct: f64,
}

/// One phase's panel.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseTradeoff {
    /// `decode` or `prefill`.
    pub phase: String,
    /// Experts routed per token (`n_expert_used`).
    pub k: i64,
    /// Routed experts replayed.
    pub routed: u64,
    /// Share of them that missed the cache (%).
    pub miss_pct: f64,
    /// Routings the run itself dropped (dropping was on while recording).
    pub recorded_dropped: u64,
    /// Cache-aware thresholds, ascending fraction.
    pub threshold: Vec<TradeoffPoint>,
    /// Static top-k cuts, in the text's order (keep k−1 down to 1).
    pub static_k: Vec<TradeoffPoint>,
}

/// One table row, read by column name.
struct Row<'a> {
    table: &'a Table,
    cells: &'a [Value],
}

impl<'a> Row<'a> {
    fn get(&self, name: &str) -> &'a Value {
        self.table
            .columns
            .iter()
            .position(|c| *c == name)
            .and_then(|i| self.cells.get(i))
            .unwrap_or(&Value::Null)
    }
}

/// The rows of `t` for `file` and `phase`.
fn rows<'a>(t: &'a Table, file: &'a str, phase: &'a str) -> impl Iterator<Item = Row<'a>> + 'a {
    t.rows
        .iter()
        .map(move |cells| Row { table: t, cells })
        .filter(move |r| {
            r.get("file").as_str() == Some(file) && r.get("phase").as_str() == Some(phase)
        })
}

fn float(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The panels of `file` (its name as the tables hold it), in the report's order — decode, then
/// prefill — leaving out a phase without rows.
#[must_use]
pub fn tradeoff(tables: &DropTables, file: &str) -> Vec<PhaseTradeoff> {
    ["decode", "prefill"]
        .into_iter()
        .filter_map(|phase| {
            let head = rows(&tables.phases, file, phase).next()?;
            let threshold = rows(&tables.threshold, file, phase)
                .map(|r| TradeoffPoint {
                    label: format!("F={:.2}", float(r.get("frac"))),
                    mass_lost_pct: float(r.get("mass_lost_pct")),
                    io_saved_pct: float(r.get("io_saved_pct")),
                })
                .collect();
            let static_k = rows(&tables.static_k, file, phase)
                .map(|r| TradeoffPoint {
                    label: format!("top-{}", r.get("keep_k").as_i64().unwrap_or(0)),
                    mass_lost_pct: float(r.get("mass_lost_pct")),
                    io_saved_pct: float(r.get("io_saved_pct")),
                })
                .collect();
            Some(PhaseTradeoff {
                phase: phase.to_string(),
                k: head.get("k").as_i64().unwrap_or(0),
                routed: head.get("routed").as_u64().unwrap_or(0),
                miss_pct: float(head.get("miss_pct")),
                recorded_dropped: head.get("recorded_dropped").as_u64().unwrap_or(0),
                threshold,
                static_k,
            })
        })
        .collect()
}

struct Tradeoff {
    title: String,
    panels: Vec<PhaseTradeoff>,
}

const THRESHOLD: RGBColor = RGBColor(49, 130, 189);
const STATIC_K: RGBColor = RGBColor(230, 85, 13);

/// Points with their labels: (mass lost %, io saved %, label).
type Labelled<'a> = Vec<(f64, f64, &'a str)>;

/// The curve of `pts` from the origin (no dropping), non-finite points left out.
fn curve(pts: &[TradeoffPoint]) -> Labelled<'_> {
    std::iter::once((0.0, 0.0, ""))
        .chain(
            pts.iter()
                .filter(|p| p.mass_lost_pct.is_finite() && p.io_saved_pct.is_finite())
                .map(|p| (p.mass_lost_pct, p.io_saved_pct, p.label.as_str())),
        )
        .collect()
}

/// Where a point's label goes (pixels from the point). The cache-aware curve lies above and
/// left of the static one, so its labels go up and to the left (up and to the right next to the
/// y axis) and the static cut's go down and to the right, keeping the two sets apart.
fn label_offset(label: &str, x_share: f64, upper: bool) -> (i32, i32) {
    if !upper {
        return (7, 4);
    }
    // About 7 px per character at 13 px; a panel's plotting area is about 420 px wide.
    let width = 7 * i32::try_from(label.chars().count()).unwrap_or(8);
    if x_share * 420.0 < f64::from(width + 12) {
        return (7, -16);
    }
    // End the label just left of the point.
    (-8 - width, -16)
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &PhaseTradeoff) -> DrawResult {
    let thr = curve(&p.threshold);
    let stat = curve(&p.static_k);
    let x_max = thr.iter().chain(&stat).map(|q| q.0).fold(1.0_f64, f64::max) * 1.15;
    let dropped = if p.recorded_dropped > 0 {
        format!(", {} dropped in the run", p.recorded_dropped)
    } else {
        String::new()
    };
    let caption = format!(
        "{}: {} routed, {}% misses{dropped}",
        p.phase,
        p.routed,
        f(p.miss_pct, 1)
    );
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..x_max, 0.0..105.0)
        .msg()?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("router weight mass lost (%)")
        .y_desc("flash bytes saved (% of miss bytes)")
        .draw()
        .msg()?;
    let share = 100.0 / p.k.max(1) as f64;
    let series: [(String, RGBColor, &Labelled, bool); 2] = [
        (
            format!("cache-aware: misses under F x 1/k ({}%)", f(share, 2)),
            THRESHOLD,
            &thr,
            true,
        ),
        ("static top-k cut".to_string(), STATIC_K, &stat, false),
    ];
    for (name, colour, pts, upper) in series {
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|q| (q.0, q.1)),
                colour.stroke_width(2),
            ))
            .msg()?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().skip(1).map(|&(x, y, label)| {
                EmptyElement::at((x, y))
                    + Circle::new((0, 0), 4, colour.filled())
                    + Text::new(
                        label.to_string(),
                        label_offset(label, x / x_max, upper),
                        ("sans-serif", 13),
                    )
            }))
            .msg()?;
    }
    chart
        .draw_series(std::iter::once(
            EmptyElement::at((0.0, 0.0)) + Rectangle::new([(-4, -4), (4, 4)], BLACK.filled()),
        ))
        .msg()?
        .label("no dropping (as recorded)")
        .legend(|(x, y)| Rectangle::new([(x + 6, y - 4), (x + 14, y + 4)], BLACK.filled()));
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

impl Figure for Tradeoff {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let body = root.titled(&self.title, ("sans-serif", 22)).msg()?;
        let n = self.panels.len().max(1);
        for (area, panel) in body.split_evenly((1, n)).iter().zip(&self.panels) {
            draw_panel(area, panel)?;
        }
        Ok(())
    }
}

/// `drop TRACE --plot`: one panel per phase with rows, from the report's tables for `file`.
///
/// # Errors
/// No phase of `file` has rows, an unwritable path or a drawing failure.
pub fn drop_tradeoff(path: &Path, tables: &DropTables, file: &str) -> Result<()> {
    let panels = tradeoff(tables, file);
    let Some(k) = panels.first().map(|p| p.k) else {
        return Err(AnalyzeError::Empty(format!(
            "{file}: no decode or prefill rows to replay; nothing to plot"
        )));
    };
    render(
        path,
        &Tradeoff {
            title: format!("Expert dropping: flash saved vs weight mass lost - {file} (k={k})"),
            panels,
        },
    )
}
