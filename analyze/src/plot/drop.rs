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

/// One label per run of points that would draw on top of each other (closer than 2 % of the
/// x range and 3 points of y): `F=0.25/0.50` at the first of them.
fn merged_labels(pts: &[(f64, f64, &str)], x_max: f64) -> Vec<(f64, f64, String)> {
    let mut out: Vec<(f64, f64, String)> = Vec::new();
    for &(x, y, label) in pts {
        if let Some(last) = out.last_mut()
            && (x - last.0).abs() < 0.02 * x_max
            && (y - last.1).abs() < 3.0
        {
            let value = label.split_once(['=', '-']).map_or(label, |(_, v)| v);
            last.2.push('/');
            last.2.push_str(value);
            continue;
        }
        out.push((x, y, label.to_string()));
    }
    out
}

/// A label's box in pixels: left, top, right, bottom.
type PxBox = (i32, i32, i32, i32);

/// Text offsets tried for a label, best first (pixels from the point to the text's top-left
/// corner): beside the point, then one and two lines further away. The cache-aware curve lies
/// above and left of the static one, so its labels prefer up-left and the static cut's
/// down-right, which keeps the two sets apart.
fn candidates(width: i32, upper: bool) -> Vec<(i32, i32)> {
    let (l, r, up, down) = (-8 - width, 7, -18, 4);
    let (near, far, first, second) = if upper {
        (up, down, l, r)
    } else {
        (down, up, r, l)
    };
    let mut out = Vec::new();
    for step in [0, 14, 28] {
        let away = if near < 0 { -step } else { step };
        for dx in [first, second] {
            out.push((dx, near + away));
            out.push((dx, far - away));
        }
    }
    out
}

/// The first candidate offset whose box stays inside `area` and clear of `taken` (then taken
/// too); the best candidate when none is free, so no point goes unlabelled.
fn place(
    at: (i32, i32),
    label: &str,
    upper: bool,
    area: &(std::ops::Range<i32>, std::ops::Range<i32>),
    taken: &mut Vec<PxBox>,
) -> (i32, i32) {
    // About 7 px per character at 13 px.
    let width = 7 * i32::try_from(label.chars().count()).unwrap_or(8);
    let boxed = |(dx, dy): (i32, i32)| (at.0 + dx, at.1 + dy, at.0 + dx + width, at.1 + dy + 14);
    let all = candidates(width, upper);
    let free = all.into_iter().find(|&off| {
        let b = boxed(off);
        let inside =
            b.0 >= area.0.start && b.2 <= area.0.end && b.1 >= area.1.start && b.3 <= area.1.end;
        inside
            && taken
                .iter()
                .all(|t| b.2 <= t.0 || t.2 <= b.0 || b.3 <= t.1 || t.3 <= b.1)
    });
    let off = free.unwrap_or((7, -18));
    taken.push(boxed(off));
    off
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
    let area = chart.plotting_area().get_pixel_range();
    // The legend's corner (lower right) is not free for labels.
    let mut taken: Vec<PxBox> = vec![(area.0.end - 300, area.1.end - 75, area.0.end, area.1.end)];
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
            .draw_series(
                pts.iter()
                    .skip(1)
                    .map(|&(x, y, _)| Circle::new((x, y), 4, colour.filled())),
            )
            .msg()?;
        let labels: Vec<_> = merged_labels(&pts[1..], x_max)
            .into_iter()
            .map(|(x, y, label)| {
                let off = place(
                    chart.backend_coord(&(x, y)),
                    &label,
                    upper,
                    &area,
                    &mut taken,
                );
                (x, y, label, off)
            })
            .collect();
        chart
            .draw_series(labels.into_iter().map(|(x, y, label, off)| {
                EmptyElement::at((x, y)) + Text::new(label, off, ("sans-serif", 13))
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
        return Err(AnalyzeError::Empty {
            message: format!("{file}: no decode or prefill rows to replay; nothing to plot"),
            hint: "pass a route trace of a run that generated tokens".into(),
        });
    };
    render(
        path,
        &Tradeoff {
            title: format!("Expert dropping: flash saved vs weight mass lost - {file} (k={k})"),
            panels,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coincident_points_share_one_label() {
        let pts = [
            (0.0, 0.0, "F=0.25"),
            (0.5, 0.0, "F=0.50"),
            (4.4, 0.0, "F=0.75"),
            (9.5, 46.0, "F=1.00"),
        ];
        let got: Vec<String> = merged_labels(&pts, 80.0).into_iter().map(|l| l.2).collect();
        assert_eq!(got, ["F=0.25/0.50", "F=0.75", "F=1.00"]);
    }

    #[test]
    fn labels_avoid_each_other_and_stay_inside() {
        let area = (0..400, 0..300);
        let mut taken = Vec::new();
        // Two points 5 px apart near the left edge: the second label moves off the first.
        let a = place((10, 200), "F=0.25", true, &area, &mut taken);
        let b = place((15, 200), "F=0.50", true, &area, &mut taken);
        assert_eq!(a, (7, -18), "up-left leaves the area, so up-right");
        assert_ne!(b, a);
        let (ba, bb) = (taken[0], taken[1]);
        assert!(
            ba.2 <= bb.0 || bb.2 <= ba.0 || ba.3 <= bb.1 || bb.3 <= ba.1,
            "{ba:?} {bb:?}"
        );
        assert!(
            taken
                .iter()
                .all(|t| t.0 >= 0 && t.2 <= 400 && t.1 >= 0 && t.3 <= 300)
        );
        // A static-cut label prefers down-right.
        assert_eq!(place((200, 100), "top-5", false, &area, &mut taken), (7, 4));
    }
}
