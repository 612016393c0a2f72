//! SVG plots (plotters): tok/s per cell with its 95 % interval, and tok/s against one axis as
//! curves (one per combination of the other axes).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indexmap::IndexMap;
use plotters::prelude::*;

use super::{CellRow, Report};

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The whisker of a cell's dot (drawn at `tok_s`): the across-run interval, else the within-run
/// one — both are intervals for that same mean of per-run tok/s.
fn ci_of(r: &CellRow) -> (f64, f64) {
    r.stats
        .reps_ci
        .or(r.stats.within_ci)
        .unwrap_or((r.stats.tok_s, r.stats.tok_s))
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes every plot into `dir`; returns the files written.
///
/// # Errors
/// The directory or a file cannot be written; `x` names no axis of any cell.
pub fn write_all(report: &Report, dir: &Path, x: Option<&str>) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut groups: IndexMap<(String, String), Vec<&CellRow>> = IndexMap::new();
    for r in report.rows.iter().filter(|r| r.stats.runs > 0) {
        groups
            .entry((r.sweep.clone(), r.model.clone()))
            .or_default()
            .push(r);
    }
    let mut files = Vec::new();
    for ((sweep, model), rows) in &groups {
        let path = dir.join(format!(
            "tok_s-{}-{}.svg",
            file_safe(sweep),
            file_safe(model)
        ));
        cells_plot(
            &path,
            &format!("{sweep} · {model}: tok/s per cell (95% CI)"),
            rows,
        )
        .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", path.display()))?;
        files.push(path);
        if let Some(axis) = x {
            if !rows.iter().any(|r| r.axes.contains_key(axis)) {
                continue;
            }
            let path = dir.join(format!(
                "tok_s-vs-{}-{}-{}.svg",
                file_safe(axis),
                file_safe(sweep),
                file_safe(model)
            ));
            curve_plot(
                &path,
                &format!("{sweep} · {model}: tok/s vs {axis}"),
                axis,
                rows,
            )
            .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", path.display()))?;
            files.push(path);
        }
    }
    if let Some(axis) = x
        && !report.rows.iter().any(|r| r.axes.contains_key(axis))
    {
        return Err(crate::sweep::Hinted::new(
            format!("no cell has an axis `{axis}`"),
            "pass one of the manifest's axis names to --x",
        )
        .into());
    }
    Ok(files)
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn cells_plot(path: &Path, title: &str, rows: &[&CellRow]) -> DrawResult {
    let n = rows.len();
    let width = (160 + 90 * n as u32).clamp(480, 1600);
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = rows
        .iter()
        .map(|r| ci_of(r).1.max(r.stats.tok_s))
        .fold(0.0f64, f64::max)
        * 1.15
        + 1e-9;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)?;
    let labels: Vec<String> = rows.iter().map(|r| r.cell.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("tok/s")
        .draw()?;
    chart.draw_series(rows.iter().enumerate().map(|(i, r)| {
        let (lo, hi) = ci_of(r);
        ErrorBar::new_vertical(i as f64, lo, r.stats.tok_s, hi, COLORS[0].filled(), 12)
    }))?;
    chart.draw_series(
        rows.iter()
            .enumerate()
            .map(|(i, r)| Circle::new((i as f64, r.stats.tok_s), 4, COLORS[0].filled())),
    )?;
    root.present()?;
    Ok(())
}

fn curve_plot(path: &Path, title: &str, axis: &str, rows: &[&CellRow]) -> DrawResult {
    // Series = the other axes' values; points need a numeric x.
    let mut series: IndexMap<String, Vec<(f64, f64, f64, f64)>> = IndexMap::new();
    for r in rows {
        let Some(xv) = r.axes.get(axis).and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let key: Vec<String> = r
            .axes
            .iter()
            .filter(|(k, _)| k.as_str() != axis)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let (lo, hi) = ci_of(r);
        series
            .entry(if key.is_empty() {
                "all".into()
            } else {
                key.join(" ")
            })
            .or_default()
            .push((xv, r.stats.tok_s, lo, hi));
    }
    let pts: Vec<&(f64, f64, f64, f64)> = series.values().flatten().collect();
    if pts.is_empty() {
        return Err(format!("axis `{axis}` has no numeric values").into());
    }
    let (xmin, xmax) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    let pad = ((xmax - xmin) * 0.05).max(0.5);
    let ymax = pts.iter().map(|p| p.3.max(p.1)).fold(0.0f64, f64::max) * 1.15 + 1e-9;
    let root = SVGBackend::new(path, (720, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin - pad)..(xmax + pad), 0f64..ymax)?;
    chart.configure_mesh().x_desc(axis).y_desc("tok/s").draw()?;
    for (i, (name, mut p)) in series.into_iter().enumerate() {
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                p.iter().map(|q| (q.0, q.1)),
                color.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart.draw_series(
            p.iter()
                .map(|q| ErrorBar::new_vertical(q.0, q.2, q.1, q.3, color.filled(), 8)),
        )?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
