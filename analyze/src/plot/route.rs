//! Pictures of the route views: hot experts (layer × expert heat), reuse-distance histogram,
//! step × layer grid (top expert or cache hits).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{LEGEND_PANEL_PX, label_stride, legend_panel, text_px, viridis};
use super::{DrawResult, Figure, OrMsg, base, frame, hsl, render, shade};
use crate::Result;
use crate::route::{CellMode, Cells, RouteTrace, Span};

/// A heatmap: `cells` are (x, y, colour) unit squares on `x_range` × `y_range`, `legend` the
/// entries explaining the colours (drawn in a panel beside the data, headed `legend_title`).
struct Heatmap {
    title: String,
    x_desc: &'static str,
    y_desc: &'static str,
    x_range: (f64, f64),
    y_range: (f64, f64),
    cells: Vec<(f64, f64, RGBColor)>,
    legend_title: &'static str,
    legend: Vec<(String, RGBColor)>,
}

impl Figure for Heatmap {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        // The legend gets its own panel right of the data: over a heat map every corner is
        // data, so a legend box inside the chart always hides some cells.
        let width = root.dim_in_pixel().0;
        let (data, panel) = root.split_horizontally(width.saturating_sub(LEGEND_PANEL_PX));
        // Cell (x, y) is drawn centred on x, y, so an integer tick labels the cell it sits
        // under (not the border between two cells).
        let mut chart = frame(&data, &self.title, 55)
            .build_cartesian_2d(
                self.x_range.0 - 0.5..self.x_range.1 - 0.5,
                self.y_range.0 - 0.5..self.y_range.1 - 0.5,
            )
            .msg()?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .draw()
            .msg()?;
        chart
            .draw_series(self.cells.iter().map(|&(x, y, c)| {
                Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], c.filled())
            }))
            .msg()?;
        legend_panel(&panel, self.legend_title, &self.legend)
    }
}

fn n_expert(t: &RouteTrace) -> f64 {
    let seen = t.rows.expert.iter().copied().max().map_or(0, |m| m + 1);
    (t.meta.n_expert.max(0) as f64)
        .max(f64::from(seen))
        .max(1.0)
}

fn layer_range(cells: &Cells) -> (f64, f64) {
    let lo = cells.layers.first().copied().unwrap_or(0);
    let hi = cells.layers.last().copied().unwrap_or(0);
    (f64::from(lo), f64::from(hi) + 1.0)
}

/// `route --view hot --plot`: layer × expert, shaded by the expert's share of the layer's
/// activations (the hot experts are the dark squares).
///
/// # Errors
/// An unwritable path or a drawing failure, naming `--plot PATH`.
pub fn hot(path: &Path, t: &RouteTrace, cells: &Cells) -> Result<()> {
    let ne = n_expert(t);
    let mut max_share: f64 = 0.0;
    let mut per_layer = Vec::new();
    for (li, &layer) in cells.layers.iter().enumerate() {
        let mut counts = vec![0u64; ne as usize];
        for &c in &cells.by_layer[li] {
            for &r in cells.rows(c) {
                if let Some(n) = counts.get_mut(t.rows.expert[r as usize] as usize) {
                    *n += 1;
                }
            }
        }
        let total = counts.iter().sum::<u64>().max(1) as f64;
        for (e, &n) in counts.iter().enumerate() {
            if n > 0 {
                let share = n as f64 / total;
                max_share = max_share.max(share);
                per_layer.push((e as f64, f64::from(layer), share));
            }
        }
    }
    let squares = per_layer
        .into_iter()
        .map(|(x, y, share)| {
            (
                x,
                y,
                shade(0.15 + 0.85 * share / max_share.max(f64::MIN_POSITIVE)),
            )
        })
        .collect();
    render(
        path,
        &Heatmap {
            title: format!(
                "Hot experts per layer ({} routings) - {}",
                t.rows.len(),
                base(&t.meta.model)
            ),
            x_desc: "expert id",
            y_desc: "layer",
            x_range: (0.0, ne),
            y_range: layer_range(cells),
            cells: squares,
            legend_title: "share of the layer's routings",
            legend: vec![
                ("never routed".into(), WHITE),
                ("rarely routed".into(), shade(0.15)),
                (
                    format!("hottest ({:.1}% of its layer)", 100.0 * max_share),
                    shade(1.0),
                ),
            ],
        },
    )
}

/// Reuse distances (in positions, per layer and expert), all layers pooled.
fn reuse_distances(t: &RouteTrace, cells: &Cells) -> Vec<usize> {
    let ne = n_expert(t) as usize;
    let mut dists = Vec::new();
    for by_layer in &cells.by_layer {
        let mut last: Vec<Option<usize>> = vec![None; ne];
        for (idx, &c) in by_layer.iter().enumerate() {
            for &r in cells.rows(c) {
                if let Some(slot) = last.get_mut(t.rows.expert[r as usize] as usize) {
                    if let Some(p) = *slot {
                        dists.push(idx - p);
                    }
                    *slot = Some(idx);
                }
            }
        }
    }
    dists
}

/// Histogram of reuse distances in power-of-two buckets (bucket b holds [2^b, 2^(b+1))).
struct ReuseHistogram {
    title: String,
    buckets: Vec<u64>,
    total: f64,
}

/// The label of power-of-two bucket `b` (`1`, `2-3`, `4-7`, …).
fn bucket_label(b: usize) -> String {
    if b == 0 {
        "1".into()
    } else {
        format!("{}-{}", 1u64 << b, (1u64 << (b + 1)) - 1)
    }
}

/// Size of the bucket labels, px.
const BUCKET_LABEL_PX: u32 = 13;

/// The x positions of the bucket labels: the centre of every bar (`b + 0.5`), or of every k-th
/// bar from the first when the widest label would overlap its neighbour on `plot_px` pixels.
#[must_use]
pub fn bucket_label_positions(n: usize, plot_px: f64) -> Vec<f64> {
    let widest = (0..n)
        .map(|b| text_px(&bucket_label(b), f64::from(BUCKET_LABEL_PX)))
        .fold(0.0, f64::max);
    let stride = label_stride(widest, plot_px / n.max(1) as f64, 10.0);
    (0..n).step_by(stride).map(|b| b as f64 + 0.5).collect()
}

impl Figure for ReuseHistogram {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let n = self.buckets.len();
        let pct = |c: u64| 100.0 * c as f64 / self.total;
        let y_max = self.buckets.iter().map(|&c| pct(c)).fold(1.0, f64::max);
        // The plotting area is the picture less the margins and the y label area.
        let plot_px = f64::from(root.dim_in_pixel().0.saturating_sub(2 * 15 + 55 + 10));
        let ticks = bucket_label_positions(n, plot_px);
        let mut chart = frame(root, &self.title, 55)
            .build_cartesian_2d(0.0..n as f64, 0.0..y_max * 1.1)
            .msg()?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            // The bucket labels are drawn below, centred under their bars.
            .x_labels(0)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("reuse distance (steps between consecutive uses, power-of-two buckets), all layers pooled")
            .y_desc("share of reuses (%)")
            .draw()
            .msg()?;
        let style = TextStyle::from(("sans-serif", BUCKET_LABEL_PX).into_font())
            .pos(Pos::new(HPos::Center, VPos::Top));
        for x in ticks {
            let (px, py) = chart.backend_coord(&(x, 0.0));
            root.draw(&PathElement::new(vec![(px, py), (px, py + 5)], BLACK))
                .msg()?;
            let label = bucket_label(x.floor().max(0.0) as usize);
            root.draw(&Text::new(label, (px, py + 8), style.clone()))
                .msg()?;
        }
        let colour = shade(0.7);
        // One series: the title and the y axis say what it is, so no legend box over the bars.
        chart
            .draw_series(self.buckets.iter().enumerate().map(|(b, &c)| {
                let x = b as f64;
                Rectangle::new([(x + 0.1, 0.0), (x + 0.9, pct(c))], colour.filled())
            }))
            .msg()?;
        Ok(())
    }
}

/// `route --view reuse --plot`: histogram of reuse distances in power-of-two buckets.
///
/// # Errors
/// An unwritable path or a drawing failure, naming `--plot PATH`.
pub fn reuse(path: &Path, t: &RouteTrace, cells: &Cells) -> Result<()> {
    let dists = reuse_distances(t, cells);
    let mut buckets = vec![0u64; 1];
    for d in &dists {
        let b = (usize::BITS - 1 - d.max(&1).leading_zeros()) as usize;
        if buckets.len() <= b {
            buckets.resize(b + 1, 0);
        }
        buckets[b] += 1;
    }
    render(
        path,
        &ReuseHistogram {
            title: format!(
                "Reuse distance per (layer, expert) - {} reuses, {}",
                dists.len(),
                base(&t.meta.model)
            ),
            buckets,
            total: dists.len().max(1) as f64,
        },
    )
}

/// `route --view matrix --plot`: step × layer. With `--cells hit` a cell's colour is its share
/// of routings served from RAM (residency 1 or 2); otherwise the hue is the slot-0 expert's id.
///
/// # Errors
/// An empty step/layer selection, an unwritable path or a drawing failure.
pub fn matrix(
    path: &Path,
    t: &RouteTrace,
    cells: &Cells,
    steps: &Span,
    layers: &Span,
    max_steps: i64,
    mode: CellMode,
) -> Result<()> {
    let mut chosen: Vec<i32> = cells
        .steps
        .iter()
        .copied()
        .filter(|&s| steps.contains(i64::from(s)))
        .collect();
    if !steps.is_active() && max_steps >= 0 {
        chosen.truncate(max_steps as usize);
    }
    let empty = || crate::route::matrix::empty_selection(t, cells);
    let (Some(&first), Some(&last)) = (chosen.first(), chosen.last()) else {
        return Err(empty());
    };
    let ne = n_expert(t);
    let hit_mode = mode == CellMode::Hit;
    let mut squares = Vec::new();
    for c in 0..cells.step.len() {
        let (s, l) = (cells.step[c], cells.layer[c]);
        if s < first
            || s > last
            || !layers.contains(i64::from(l))
            || chosen.binary_search(&s).is_err()
        {
            continue;
        }
        let rows = cells.rows(c as u32);
        let Some(&r0) = rows.first() else { continue };
        let colour = if hit_mode {
            let hits = rows
                .iter()
                .filter(|&&r| t.rows.residency[r as usize] != 0)
                .count();
            hit_colour(hits as f64 / rows.len() as f64)
        } else {
            hsl(f64::from(t.rows.expert[r0 as usize]) / ne * 0.85)
        };
        squares.push((f64::from(s), f64::from(l), colour));
    }
    if squares.is_empty() {
        return Err(empty());
    }
    let y_lo = squares.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    let y_hi = squares
        .iter()
        .map(|s| s.1)
        .fold(f64::NEG_INFINITY, f64::max)
        + 1.0;
    let legend = if hit_mode {
        hit_legend()
    } else {
        vec![
            ("slot-0 expert id 0".into(), hsl(0.0)),
            (
                format!("slot-0 expert id {}", (ne as u32).saturating_sub(1)),
                hsl(0.85),
            ),
        ]
    };
    let what = if hit_mode { "cache hits" } else { "top expert" };
    render(
        path,
        &Heatmap {
            title: format!("Step x layer {what} - {}", base(&t.meta.model)),
            x_desc: "step",
            y_desc: "layer",
            x_range: (f64::from(first), f64::from(last) + 1.0),
            y_range: (y_lo, y_hi),
            cells: squares,
            legend_title: if hit_mode {
                "served from RAM (residency 1, 2)"
            } else {
                "hue: the router's first pick"
            },
            legend,
        },
    )
}

/// Colour of a matrix cell whose routings were `share` (0..=1) served from RAM: viridis, dark
/// purple (all read from flash) to yellow (all hits) — no red/green pair, readable in
/// greyscale and under colour blindness.
#[must_use]
pub fn hit_colour(share: f64) -> RGBColor {
    viridis(share)
}

/// The hit scale's legend: five steps from all misses to all hits.
fn hit_legend() -> Vec<(String, RGBColor)> {
    [0.0, 0.25, 0.5, 0.75, 1.0]
        .into_iter()
        .map(|s| {
            let what = match s {
                0.0 => "0% (all read from flash)".to_string(),
                1.0 => "100% (all hits)".to_string(),
                s => format!("{:.0}%", 100.0 * s),
            };
            (what, hit_colour(s))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_labels_are_centred_and_thinned_regularly_only_when_they_would_overlap() {
        // Seven buckets on 900 px: every bar labelled, at its centre.
        assert_eq!(
            bucket_label_positions(7, 900.0),
            [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5]
        );
        // Twenty buckets (up to `524288-1048575`) on 600 px: every k-th from the first.
        let p = bucket_label_positions(20, 600.0);
        assert!(p.len() < 20 && p.len() >= 4, "{p:?}");
        assert_eq!(p[0], 0.5);
        let steps: Vec<f64> = p.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps.windows(2).all(|s| s[0] == s[1]), "regular: {steps:?}");
        // The kept labels do not overlap: each fits in its stride of slots.
        let slot = 600.0 / 20.0;
        let widest = text_px(&bucket_label(19), f64::from(BUCKET_LABEL_PX));
        assert!(
            steps[0] * slot >= widest,
            "{} px for {widest} px labels",
            steps[0] * slot
        );
        assert!(bucket_label_positions(0, 600.0).is_empty());
    }

    #[test]
    fn the_hit_colours_run_dark_to_light_without_red_or_green() {
        let l: Vec<f64> = (0..=10)
            .map(|i| super::super::axis::luminance(hit_colour(f64::from(i) / 10.0)))
            .collect();
        assert!(l.windows(2).all(|w| w[1] > w[0]), "{l:?}");
        let legend = hit_legend();
        assert_eq!(legend.first().map(|e| e.1), Some(hit_colour(0.0)));
        assert_eq!(legend.last().map(|e| e.0.as_str()), Some("100% (all hits)"));
    }
}
