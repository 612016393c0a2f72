//! `--plot OUT.svg`: pictures of the replay curve and the route views (plotters, SVG backend).
//!
//! Only SVG is written: a PNG needs plotters' bitmap backend plus a TrueType font found through
//! system libraries (fontconfig), which the default build does not assume. Charts are rendered
//! into memory first and written in one go, so a failed write never leaves half a file behind
//! that looks complete.

use std::path::Path;

use plotters::prelude::*;

use crate::replay::ReplayReport;
use crate::route::{CellMode, Cells, RouteTrace, Span};
use crate::{AnalyzeError, Result};

const SIZE: (u32, u32) = (1000, 640);

/// Reject anything but `.svg` before any work is done.
pub fn check_path(path: &Path) -> Result<()> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(()),
        Some(e) if e.eq_ignore_ascii_case("png") => Err(AnalyzeError::Invalid {
            message: format!("--plot {}: PNG output is not supported by this build", path.display()),
            hint: "write .svg instead (e.g. --plot out.svg) and convert it if you need a bitmap: `rsvg-convert out.svg -o out.png`".into(),
        }),
        _ => Err(AnalyzeError::Invalid {
            message: format!("--plot {}: unknown plot format (the file name must end in .svg)", path.display()),
            hint: "name the output like `--plot out.svg`".into(),
        }),
    }
}

fn draw_err(path: &Path, e: impl std::fmt::Display) -> AnalyzeError {
    AnalyzeError::Invalid {
        message: format!("--plot {}: drawing failed: {e}", path.display()),
        hint: "report a bug with the command line".into(),
    }
}

/// Render with `draw` into an SVG string, then write it to `path`.
fn render(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<()>,
) -> Result<()> {
    check_path(path)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_err(path, e))?;
        draw(&root)?;
        root.present().map_err(|e| draw_err(path, e))?;
    }
    std::fs::write(path, svg).map_err(|e| AnalyzeError::Invalid {
        message: format!("--plot {}: cannot write the plot: {e}", path.display()),
        hint: "check that the directory exists and is writable, or pick another --plot path".into(),
    })
}

/// Light (0) to dark blue (1).
fn shade(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let c = |hi: f64, lo: f64| (hi + (lo - hi) * v).round() as u8;
    RGBColor(c(247.0, 8.0), c(251.0, 48.0), c(255.0, 107.0))
}

/// `replay --plot`: decode hit % against budget, one line per policy (Belady included).
pub fn replay_curve(path: &Path, rep: &ReplayReport) -> Result<()> {
    render(path, |root| {
        let x_max = rep
            .curve
            .iter()
            .map(|p| p.budget_mib)
            .fold(1.0_f64, f64::max);
        let title = format!("Decode hit rate vs cache budget - {}", rep.model);
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..x_max * 1.02, 0.0..100.0)
            .map_err(|e| draw_err(path, e))?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("cache budget (MiB)")
            .y_desc("decode hit rate (%)")
            .draw()
            .map_err(|e| draw_err(path, e))?;
        for (i, &policy) in rep.policies.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = rep
                .curve
                .iter()
                .filter(|p| p.policy == policy)
                .map(|p| (p.budget_mib, p.result.dec_hit_pct()))
                .collect();
            let width = if policy.name() == "belady" { 3 } else { 2 };
            chart
                .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(width)))
                .map_err(|e| draw_err(path, e))?
                .label(policy.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(width))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, colour.filled())))
                .map_err(|e| draw_err(path, e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw_err(path, e))
    })
}

/// A heatmap: `cells` are (x, y, colour) unit squares on `x_range` × `y_range`, `legend` the
/// entries explaining the colours.
#[allow(clippy::too_many_arguments)]
fn heatmap(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    x_range: (f64, f64),
    y_range: (f64, f64),
    cells: Vec<(f64, f64, RGBColor)>,
    legend: Vec<(String, RGBColor)>,
) -> Result<()> {
    render(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(x_range.0..x_range.1, y_range.0..y_range.1)
            .map_err(|e| draw_err(path, e))?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(|e| draw_err(path, e))?;
        chart
            .draw_series(
                cells
                    .into_iter()
                    .map(|(x, y, c)| Rectangle::new([(x, y), (x + 1.0, y + 1.0)], c.filled())),
            )
            .map_err(|e| draw_err(path, e))?;
        for (label, colour) in legend {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(|e| draw_err(path, e))?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw_err(path, e))
    })
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
pub fn hot(path: &Path, t: &RouteTrace, cells: &Cells) -> Result<()> {
    let ne = n_expert(t);
    let mut squares = Vec::new();
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
    for (x, y, share) in per_layer {
        squares.push((
            x,
            y,
            shade(0.15 + 0.85 * share / max_share.max(f64::MIN_POSITIVE)),
        ));
    }
    let title = format!(
        "Hot experts per layer ({} routings) - {}",
        t.rows.len(),
        base(&t.meta.model)
    );
    heatmap(
        path,
        &title,
        "expert id",
        "layer",
        (0.0, ne),
        layer_range(cells),
        squares,
        vec![
            ("never routed".into(), WHITE),
            ("rarely routed".into(), shade(0.15)),
            (
                format!("hottest ({:.1}% of its layer)", 100.0 * max_share),
                shade(1.0),
            ),
        ],
    )
}

fn base(model: &str) -> String {
    Path::new(model)
        .file_name()
        .map_or_else(|| model.to_string(), |s| s.to_string_lossy().into_owned())
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

/// `route --view reuse --plot`: histogram of reuse distances in power-of-two buckets.
pub fn reuse(path: &Path, t: &RouteTrace, cells: &Cells) -> Result<()> {
    let dists = reuse_distances(t, cells);
    // bucket b holds distances in [2^b, 2^(b+1)).
    let mut buckets = vec![0u64; 1];
    for d in &dists {
        let b = (usize::BITS - 1 - d.max(&1).leading_zeros()) as usize;
        if buckets.len() <= b {
            buckets.resize(b + 1, 0);
        }
        buckets[b] += 1;
    }
    let total = dists.len().max(1) as f64;
    let y_max = buckets
        .iter()
        .map(|&n| 100.0 * n as f64 / total)
        .fold(1.0, f64::max);
    let title = format!(
        "Reuse distance per (layer, expert) - {} reuses, {}",
        dists.len(),
        base(&t.meta.model)
    );
    render(path, |root| {
        let n = buckets.len();
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..n as f64, 0.0..y_max * 1.1)
            .map_err(|e| draw_err(path, e))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_labels(n.min(24))
            .x_label_formatter(&|x| {
                let b = x.floor() as u32;
                if b == 0 {
                    "1".into()
                } else {
                    format!("{}-{}", 1u64 << b, (1u64 << (b + 1)) - 1)
                }
            })
            .x_desc("reuse distance (steps between consecutive uses, power-of-two buckets)")
            .y_desc("share of reuses (%)")
            .draw()
            .map_err(|e| draw_err(path, e))?;
        let colour = shade(0.7);
        chart
            .draw_series(buckets.iter().enumerate().map(|(b, &c)| {
                let x = b as f64;
                Rectangle::new(
                    [(x + 0.1, 0.0), (x + 0.9, 100.0 * c as f64 / total)],
                    colour.filled(),
                )
            }))
            .map_err(|e| draw_err(path, e))?
            .label("reuses (all layers)")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw_err(path, e))
    })
}

/// `route --view matrix --plot`: step × layer. With `--cells hit` a cell's colour is its share
/// of routings served from RAM (residency 1 or 2); otherwise the hue is the slot-0 expert's id.
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
    let (Some(&first), Some(&last)) = (chosen.first(), chosen.last()) else {
        return Err(AnalyzeError::Empty(format!(
            "{}: no rows for that layer/step selection",
            t.path.display()
        )));
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
            // red (all misses) to green (all hits)
            hsl(0.33 * hits as f64 / rows.len() as f64)
        } else {
            hsl(f64::from(t.rows.expert[r0 as usize]) / ne * 0.85)
        };
        squares.push((f64::from(s), f64::from(l), colour));
    }
    if squares.is_empty() {
        return Err(AnalyzeError::Empty(format!(
            "{}: no rows for that layer/step selection",
            t.path.display()
        )));
    }
    let ys: Vec<f64> = squares.iter().map(|s| s.1).collect();
    let y_lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
    let y_hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max) + 1.0;
    let legend = if hit_mode {
        vec![
            ("all routings missed (read from flash)".into(), hsl(0.0)),
            ("half served from RAM".into(), hsl(0.165)),
            ("all served from RAM (hit)".into(), hsl(0.33)),
        ]
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
    let title = format!("Step x layer {what} - {}", base(&t.meta.model));
    heatmap(
        path,
        &title,
        "step",
        "layer",
        (f64::from(first), f64::from(last) + 1.0),
        (y_lo, y_hi),
        squares,
        legend,
    )
}

fn hsl(h: f64) -> RGBColor {
    let RGBAColor(r, g, b, _) = HSLColor(h, 0.8, 0.5).to_rgba();
    RGBColor(r, g, b)
}
