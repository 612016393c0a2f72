//! Report renderers: markdown (one table per sweep × model × device), csv, json, jsonl.

use std::fmt::Write as _;

use anyhow::Result;
use indexmap::IndexMap;

use super::{CellRow, Report, TurnRow};

/// Three significant-ish digits for a rate or a time.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "—".into();
    }
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn range(r: Option<(f64, f64)>) -> String {
    r.map_or("—".into(), |(a, b)| format!("{}–{}", num(a), num(b)))
}

/// Superscript footnote mark `n` (1-based).
fn sup(n: usize) -> String {
    const DIGITS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    n.to_string()
        .bytes()
        .map(|b| DIGITS[usize::from(b - b'0')])
        .collect()
}

/// The across-run interval cell: the interval when it is a result, else `uninformative` with a
/// footnote (pushed onto `notes`) that gives the reason and the raw bounds.
fn across_runs(st: &super::stats::CellStats, notes: &mut Vec<String>, cell: &str) -> String {
    match (&st.reps_ci_note, st.reps_ci_raw) {
        (Some(why), Some((lo, hi))) => {
            notes.push(format!(
                "`{cell}`: {why}; Student t gives {}–{} tok/s",
                num(lo),
                num(hi)
            ));
            format!("uninformative{}", sup(notes.len()))
        }
        _ => range(st.reps_ci),
    }
}

/// Session cells: one table row per turn (decode figures from the CSV rows of that turn,
/// prefill and context from the engine's `BMOE_DONE`).
fn turn_table(s: &mut String, rows: &[&CellRow], notes: &mut Vec<String>) {
    if rows.iter().all(|r| r.turns.is_empty()) {
        return;
    }
    let _ = writeln!(
        s,
        "Per turn (session cells):\n\n| cell | turn | runs | tok/s (mean ± sd) | 95% CI across runs | prefill s | n_prompt | n_past | request→answer s | flash MiB/tok | hit % |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    );
    let opt = |x: Option<f64>, f: fn(f64) -> String| x.map_or("—".to_string(), f);
    for r in rows {
        for t in &r.turns {
            let st = &t.stats;
            let tps = match st.runs {
                0 => "—".to_string(),
                1 => num(st.tok_s),
                _ => format!("{} ± {}", num(st.tok_s), num(st.tok_s_sd)),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label(),
                t.turn,
                st.runs,
                tps,
                across_runs(st, notes, &format!("{} turn {}", r.label(), t.turn)),
                opt(t.prefill_s, |v| format!("{v:.3}")),
                opt(t.n_prompt, |v| format!("{v:.0}")),
                opt(t.n_past, |v| format!("{v:.0}")),
                opt(t.wall_s, |v| format!("{v:.3}")),
                if st.runs == 0 {
                    "—".into()
                } else {
                    num(st.flash_mib_tok)
                },
                st.hit_pct.map_or("—".into(), |h| format!("{h:.1}")),
            );
        }
    }
    s.push('\n');
}

fn groups(report: &Report) -> IndexMap<(String, String, String), Vec<&CellRow>> {
    let mut g: IndexMap<(String, String, String), Vec<&CellRow>> = IndexMap::new();
    for r in &report.rows {
        g.entry((r.sweep.clone(), r.model.clone(), r.device.clone()))
            .or_default()
            .push(r);
    }
    g
}

/// The markdown report.
pub fn markdown(report: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {} — {}\n", report.campaign, report.root.display());
    if let Some(c) = &report.incomplete {
        let _ = writeln!(
            s,
            "**Incomplete: {} of {} planned runs recorded** (warm-ups included): the sweep was interrupted or is still running, and `bmoe-bench sweep MANIFEST -o {} --resume` runs the rest. Short cells:\n",
            c.recorded,
            c.planned,
            report.root.display()
        );
        for cell in &c.short {
            let _ = writeln!(
                s,
                "- sweep `{}` · `{}`: {}",
                cell.sweep,
                cell.cell,
                cell.runs_text()
            );
        }
        s.push('\n');
    }
    if !report.skipped.is_empty() {
        let _ = writeln!(
            s,
            "**Skipped input** ({} item(s), not in the tables):\n",
            report.skipped.len()
        );
        for k in &report.skipped {
            let _ = writeln!(s, "- {k}");
        }
        s.push('\n');
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(s, "**Warnings:**\n");
        for w in &report.warnings {
            let _ = writeln!(s, "- {w}");
        }
        s.push('\n');
    }
    let base = report.baseline.as_deref();
    for ((sweep, model, device), rows) in groups(report) {
        let _ = writeln!(
            s,
            "## sweep `{sweep}` · model `{model}` · device `{device}`\n"
        );
        let mut head = String::from(
            "| cell | runs | tok/s (mean ± sd) | 95% CI across runs | 95% CI within runs | flash MiB/tok | hit % | compute s/tok | io s/tok | stall s/tok | mgmt s/tok |",
        );
        let mut rule = String::from("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        if let Some(b) = base {
            let _ = write!(head, " vs `{b}` |");
            rule.push_str("--:|");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        let mut excluded = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        for r in &rows {
            let st = &r.stats;
            let tps = if st.runs == 0 {
                "—".to_string()
            } else if st.runs == 1 {
                num(st.tok_s)
            } else {
                format!("{} ± {}", num(st.tok_s), num(st.tok_s_sd))
            };
            let _ = write!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label(),
                st.runs,
                tps,
                across_runs(st, &mut notes, &r.label()),
                range(st.within_ci),
                if st.runs == 0 {
                    "—".into()
                } else {
                    num(st.flash_mib_tok)
                },
                st.hit_pct.map_or("—".into(), |h| format!("{h:.1}")),
                if st.runs == 0 {
                    "—".into()
                } else {
                    format!("{:.4}", st.compute_s_tok)
                },
                if st.runs == 0 {
                    "—".into()
                } else {
                    format!("{:.4}", st.io_s_tok)
                },
                if st.runs == 0 {
                    "—".into()
                } else {
                    format!("{:.4}", st.stall_s_tok)
                },
                if st.runs == 0 {
                    "—".into()
                } else {
                    format!("{:.4}", st.mgmt_s_tok)
                },
            );
            if base.is_some() {
                let v = r
                    .vs_baseline
                    .as_ref()
                    .map_or("—".into(), |x| match &x.note {
                        Some(why) => {
                            notes.push(format!(
                                "`{}` vs `{}`: {why}; the bootstrap gives [{:.3}, {:.3}]",
                                r.label(),
                                base.unwrap_or_default(),
                                x.low,
                                x.high
                            ));
                            format!("{:.3}× (CI uninformative{})", x.ratio, sup(notes.len()))
                        }
                        None if x.method == "baseline" => "1 (baseline)".to_string(),
                        None => format!(
                            "{:.3}× [{:.3}, {:.3}]{}",
                            x.ratio,
                            x.low,
                            x.high,
                            if x.method == "tokens" { "ᵗ" } else { "" }
                        ),
                    });
                let _ = write!(s, " {v} |");
            }
            s.push('\n');
            for e in &r.excluded {
                excluded.push(format!("{}: {e}", r.cell));
            }
        }
        s.push('\n');
        turn_table(&mut s, &rows, &mut notes);
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(s, "{} {n}.", sup(i + 1));
        }
        if !notes.is_empty() {
            s.push('\n');
        }
        if !excluded.is_empty() {
            let _ = writeln!(s, "Not averaged: {}.\n", excluded.join("; "));
        }
    }
    let trims: std::collections::BTreeSet<usize> = match report.trim {
        Some(t) => [t].into(),
        None => report
            .records
            .iter()
            .map(|r| r.discard_tokens as usize)
            .collect(),
    };
    let trim = trims
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("/");
    let _ = writeln!(
        s,
        "tok/s = tokens / Σ decode wall per run (first {trim} token(s) trimmed), averaged over runs; sd = sample standard deviation across runs. \
CI across runs: Student t over the per-run tok/s, reported only from 3 runs on and with a lower bound above 0 \
(otherwise it is marked uninformative and its bounds are given in a note, not as a result). CI within runs: an interval for the same mean of per-run tok/s, from token noise only — a percentile bootstrap \
that redraws the tokens of each run and averages the runs' tok/s ({} resamples, seed {}); tokens are autocorrelated, so it is narrower than the truth.{}\n",
        report.boot.resamples,
        report.boot.seed,
        if base.is_some() {
            " Ratios: tok/s over the baseline's, bootstrap CI over runs; ᵗ = over tokens (fewer than 2 runs on a side); the baseline row is 1 by definition."
        } else {
            ""
        }
    );
    s
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v}"))
}

/// One CSV row per cell.
pub fn csv(report: &Report) -> String {
    let mut s = String::from(
        "sweep,model,device,cell,axes,runs,avg_ts,stddev_ts,ci_reps_lo,ci_reps_hi,ci_tokens_lo,ci_tokens_hi,flash_mib_tok,hit_pct,compute_s_tok,io_s_tok,stall_s_tok,mgmt_s_tok,tokens,ratio,ratio_lo,ratio_hi,ratio_method,excluded,engine,ci_reps_raw_lo,ci_reps_raw_hi,ci_reps_note,ratio_note,turn,prefill_s,n_prompt,n_past,request_s\n",
    );
    for r in &report.rows {
        csv_row(&mut s, r, &r.stats, None);
        for t in &r.turns {
            csv_row(&mut s, r, &t.stats, Some(t));
        }
    }
    s
}

/// One CSV row: the whole cell (`turn` empty) or one of its turns (ratio columns empty).
fn csv_row(s: &mut String, r: &CellRow, st: &super::stats::CellStats, turn: Option<&TurnRow>) {
    {
        let axes: Vec<String> = r.axes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        // An interval flagged as uninformative is not written where a result is expected.
        let ratio = r.vs_baseline.as_ref().filter(|_| turn.is_none());
        let ratio_ci = ratio.filter(|x| x.note.is_none() && x.method != "baseline");
        let fields = [
            r.sweep.clone(),
            r.model.clone(),
            r.device.clone(),
            r.label(),
            axes.join(";"),
            st.runs.to_string(),
            format!("{}", st.tok_s),
            format!("{}", st.tok_s_sd),
            opt(st.reps_ci.map(|c| c.0)),
            opt(st.reps_ci.map(|c| c.1)),
            opt(st.within_ci.map(|c| c.0)),
            opt(st.within_ci.map(|c| c.1)),
            format!("{}", st.flash_mib_tok),
            opt(st.hit_pct),
            format!("{}", st.compute_s_tok),
            format!("{}", st.io_s_tok),
            format!("{}", st.stall_s_tok),
            format!("{}", st.mgmt_s_tok),
            format!("{}", st.tokens),
            opt(ratio.map(|x| x.ratio)),
            opt(ratio_ci.map(|x| x.low)),
            opt(ratio_ci.map(|x| x.high)),
            ratio.map_or(String::new(), |x| x.method.to_string()),
            r.excluded.len().to_string(),
            r.engine.clone().unwrap_or_default(),
            opt(st.reps_ci_raw.map(|c| c.0)),
            opt(st.reps_ci_raw.map(|c| c.1)),
            st.reps_ci_note.clone().unwrap_or_default(),
            ratio
                .and_then(|x| {
                    let why = x.note.as_ref()?;
                    Some(format!("{why}; bootstrap {}–{}", x.low, x.high))
                })
                .unwrap_or_default(),
            turn.map_or(String::new(), |t| t.turn.to_string()),
            opt(turn.and_then(|t| t.prefill_s)),
            opt(turn.and_then(|t| t.n_prompt)),
            opt(turn.and_then(|t| t.n_past)),
            opt(turn.and_then(|t| t.wall_s)),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
}

/// A JSON array of cells.
///
/// # Errors
/// Serialisation failure (non-finite numbers are written as null).
pub fn json(report: &Report) -> Result<String> {
    Ok(format!("{}\n", serde_json::to_string_pretty(&report.rows)?))
}

/// One JSON object per cell per line.
///
/// # Errors
/// Serialisation failure.
pub fn jsonl(report: &Report) -> Result<String> {
    let mut s = String::new();
    for r in &report.rows {
        s.push_str(&serde_json::to_string(r)?);
        s.push('\n');
    }
    Ok(s)
}
