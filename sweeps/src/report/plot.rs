//! SVG plots (plotters): tok/s per cell with its interval, and tok/s against one axis as curves
//! (one per combination of the other axes). Every plot says which interval its whiskers are:
//! across runs where that is a result, else within runs (token noise only).

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

/// Which interval a cell's whisker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whisker {
    /// The Student-t interval across runs (an informative one).
    Across,
    /// The within-run bootstrap over tokens: drawn where the across-run interval is missing
    /// or uninformative; an interval for the same mean, but token noise only (too narrow).
    Within,
    /// No interval at all.
    Bare,
}

impl Whisker {
    /// The legend text: what the whisker actually is.
    fn label(self) -> &'static str {
        match self {
            Whisker::Across => "95% CI across runs",
            Whisker::Within => "95% CI within runs (token noise only)",
            Whisker::Bare => "no interval",
        }
    }
}

/// The whisker of a cell's dot (drawn at `tok_s`): the across-run interval, else the within-run
/// one — both are intervals for that same mean of per-run tok/s — and which one it is.
fn ci_of(r: &CellRow) -> (Whisker, (f64, f64)) {
    match (r.stats.reps_ci, r.stats.within_ci) {
        (Some(ci), _) => (Whisker::Across, ci),
        (None, Some(ci)) => (Whisker::Within, ci),
        (None, None) => (Whisker::Bare, (r.stats.tok_s, r.stats.tok_s)),
    }
}

/// What the whiskers of `kinds` are, for a plot's title: one kind, or the across-run interval
/// with the within-run one where hollow.
fn whisker_caption(kinds: &[Whisker]) -> String {
    let has = |k| kinds.contains(&k);
    match (has(Whisker::Across), has(Whisker::Within)) {
        (true, true) => format!(
            "whiskers: {}; hollow: {}",
            Whisker::Across.label(),
            Whisker::Within.label()
        ),
        (true, false) => format!("whiskers: {}", Whisker::Across.label()),
        (false, true) => format!("whiskers: {}", Whisker::Within.label()),
        (false, false) => "no intervals".into(),
    }
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
        cells_plot(&path, &format!("{sweep} · {model}: tok/s per cell"), rows)
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
        .map(|r| ci_of(r).1.1.max(r.stats.tok_s))
        .fold(0.0f64, f64::max)
        * 1.15
        + 1e-9;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)?;
    let labels: Vec<String> = rows.iter().map(|r| r.label()).collect();
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
    // One series per kind of whisker, each labelled in the legend with what it is.
    let grey = RGBColor(128, 128, 128);
    for kind in [Whisker::Across, Whisker::Within, Whisker::Bare] {
        let pts: Vec<(usize, f64, f64, f64)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let (k, (lo, hi)) = ci_of(r);
                (k == kind).then_some((i, lo, r.stats.tok_s, hi))
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let color = if kind == Whisker::Across {
            COLORS[0]
        } else {
            grey
        };
        if kind != Whisker::Bare {
            chart.draw_series(pts.iter().map(|&(i, lo, y, hi)| {
                ErrorBar::new_vertical(i as f64, lo, y, hi, color.filled(), 12)
            }))?;
        }
        chart
            .draw_series(
                pts.iter()
                    .map(|&(i, _, y, _)| Circle::new((i as f64, y), 4, color.filled())),
            )?
            .label(kind.label())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y - 5), (x, y + 5)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// A point of a curve: x, tok/s, the whisker's bounds and kind.
type Point = (f64, f64, f64, f64, Whisker);

fn curve_plot(path: &Path, title: &str, axis: &str, rows: &[&CellRow]) -> DrawResult {
    // Series = the other axes' values; points need a numeric x.
    let mut series: IndexMap<String, Vec<Point>> = IndexMap::new();
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
        let (kind, (lo, hi)) = ci_of(r);
        series
            .entry(if key.is_empty() {
                "all".into()
            } else {
                key.join(" ")
            })
            .or_default()
            .push((xv, r.stats.tok_s, lo, hi, kind));
    }
    let pts: Vec<&Point> = series.values().flatten().collect();
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
    let kinds: Vec<Whisker> = pts.iter().map(|p| p.4).collect();
    let title = format!("{title} ({})", whisker_caption(&kinds));
    let root = SVGBackend::new(path, (720, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 15))
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
                .filter(|q| q.4 != Whisker::Bare)
                .map(|q| ErrorBar::new_vertical(q.0, q.2, q.1, q.3, color.filled(), 8)),
        )?;
        // A within-run whisker is marked hollow, as the title says.
        chart.draw_series(p.iter().map(|q| {
            let style = if q.4 == Whisker::Within {
                color.stroke_width(2)
            } else {
                color.filled()
            };
            Circle::new((q.0, q.1), 4, style)
        }))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
