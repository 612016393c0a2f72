//! `report --export-json FILE` and `--export-markdown FILE`, as hyperfine exports: one entry per
//! cell with the mean, standard deviation, the across-run interval, median, min, max, the run
//! count and the samples, plus the runs the warnings name. The JSON schema is documented in
//! docs/sweeps.md (`bmoe-bench-export/1`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::Report;
use super::render::num;

/// The schema identifier of the JSON export.
pub const SCHEMA: &str = "bmoe-bench-export/1";

/// One cell of the export.
#[derive(Debug, Serialize)]
struct Entry<'a> {
    sweep: &'a str,
    model: &'a str,
    device: &'a str,
    cell: &'a str,
    /// The runs' comparability class with its evidence, only when it is not plain.
    #[serde(skip_serializing_if = "Option::is_none")]
    class: Option<&'a str>,
    axes: &'a indexmap::IndexMap<String, String>,
    n: usize,
    mean: Option<f64>,
    stddev: Option<f64>,
    median: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    ci: Option<(f64, f64)>,
    ci_note: Option<&'a str>,
    samples: &'a [f64],
    outliers: Vec<String>,
    loaded_runs: Vec<String>,
    excluded: &'a [String],
}

/// The whole export.
#[derive(Debug, Serialize)]
struct Export<'a> {
    schema: &'static str,
    results_dir: String,
    campaign: &'a str,
    unit: &'static str,
    ci_level: f64,
    outlier_rule: &'static str,
    cells: Vec<Entry<'a>>,
    skipped: &'a [String],
    warnings: &'a [String],
}

/// (median, min, max) of the samples; `None` without any.
fn spread(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some((bmoe_stats::percentile_linear(&s, 0.5), s[0], s[s.len() - 1]))
}

fn entries(report: &Report) -> Vec<Entry<'_>> {
    report
        .rows
        .iter()
        .map(|r| {
            let st = &r.stats;
            let n = st.samples_ts.len();
            let flags = report
                .flags
                .get(&(r.sweep.clone(), r.cell.clone()))
                .cloned()
                .unwrap_or_default();
            let sp = spread(&st.samples_ts);
            Entry {
                sweep: &r.sweep,
                model: &r.model,
                device: &r.device,
                cell: &r.cell,
                class: r.class.as_deref(),
                axes: &r.axes,
                n,
                mean: (n > 0).then_some(st.tok_s),
                stddev: (n > 1).then_some(st.tok_s_sd),
                median: sp.map(|s| s.0),
                min: sp.map(|s| s.1),
                max: sp.map(|s| s.2),
                ci: st.reps_ci,
                ci_note: st.reps_ci_note.as_deref(),
                samples: &st.samples_ts,
                outliers: flags.outliers,
                loaded_runs: flags.loaded,
                excluded: &r.excluded,
            }
        })
        .collect()
}

/// The JSON export.
///
/// # Errors
/// Serialisation.
pub fn json(report: &Report) -> Result<String> {
    let e = Export {
        schema: SCHEMA,
        results_dir: report.root.display().to_string(),
        campaign: &report.campaign,
        unit: "tok/s",
        ci_level: 0.95,
        outlier_rule: "tukey-1.5-iqr",
        cells: entries(report),
        skipped: &report.skipped,
        warnings: &report.warnings,
    };
    Ok(serde_json::to_string_pretty(&e)? + "\n")
}

/// The Markdown export: one table of every cell, then the warnings.
pub fn markdown(report: &Report) -> String {
    let mut s = String::from(
        "| sweep | cell | n | mean ± sd [tok/s] | 95% CI [tok/s] | median [tok/s] | min [tok/s] | max [tok/s] |\n|:---|:---|--:|--:|--:|--:|--:|--:|\n",
    );
    let opt = |v: Option<f64>| v.map_or_else(|| "—".to_string(), num);
    for e in entries(report) {
        let mean = match (e.mean, e.stddev) {
            (Some(m), Some(sd)) => format!("{} ± {}", num(m), num(sd)),
            (m, _) => opt(m),
        };
        let ci = match (e.ci, e.n) {
            (Some((lo, hi)), _) => format!("{}–{}", num(lo), num(hi)),
            (None, n) if n < 2 => "—".to_string(),
            (None, _) => "uninformative".to_string(),
        };
        let mut marks = String::new();
        if !e.outliers.is_empty() {
            marks.push_str(" (outliers)");
        }
        if !e.loaded_runs.is_empty() {
            marks.push_str(" (loaded)");
        }
        if let Some(c) = e.class {
            marks.push_str(&format!(" [{c}]"));
        }
        let _ = writeln!(
            s,
            "| {} | `{}`{marks} | {} | {mean} | {ci} | {} | {} | {} |",
            e.sweep,
            e.cell,
            e.n,
            opt(e.median),
            opt(e.min),
            opt(e.max)
        );
    }
    for w in report.skipped.iter().map(|k| format!("skipped {k}")) {
        let _ = writeln!(s, "\n- {w}");
    }
    if !report.warnings.is_empty() {
        s.push('\n');
        for w in &report.warnings {
            let _ = writeln!(s, "- warning: {w}");
        }
    }
    s
}

/// Writes an export file (atomically).
///
/// # Errors
/// I/O errors, naming the file.
pub fn write(path: &Path, text: &str) -> Result<()> {
    crate::sweep::results::write_atomic(path, text.as_bytes())
        .with_context(|| format!("cannot write the export {}", path.display()))
}
