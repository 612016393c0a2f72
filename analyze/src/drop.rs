//! route-drop-replay: what cache-aware expert dropping would save and cost on a recorded trace.
//!
//! Per phase, every routing cell (turn, step, layer) is replayed against thresholds
//! `frac × 1/k`: a routed expert is dropped when it is a cache miss, is not the cell's top-weight
//! expert, and weighs less than the threshold. A static top-k cut is printed for comparison.
//! Unlike the reference, routings with an unknown (NaN) weight are left out of the replay (the
//! reference meant to, but `float("nan")` parses) — see docs/analyze.md.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::pyfmt::f;
use crate::route::{Phase, RouteFilter, RouteTrace};
use crate::table::{Table, num};
use crate::{AnalyzeError, Result};

const FRACS: [f64; 4] = [0.25, 0.5, 0.75, 1.0];

struct Entry {
    slot: u16,
    weight: f64,
    miss: bool,
    bytes: u64,
    dropped: bool,
}

fn phase_cells(t: &RouteTrace, phase: u8) -> Vec<Vec<Entry>> {
    let rows = &t.rows;
    let mut id_of: HashMap<(u32, i32, u16), usize> = HashMap::new();
    let mut cells: Vec<Vec<Entry>> = Vec::new();
    for r in 0..rows.len() {
        if rows.phase[r] != phase || rows.weight[r].is_nan() {
            continue;
        }
        let key = (rows.turn[r], rows.step[r], rows.layer[r]);
        let next = cells.len();
        let id = *id_of.entry(key).or_insert(next);
        if id == next {
            cells.push(Vec::new());
        }
        cells[id].push(Entry {
            slot: rows.slot[r],
            weight: rows.weight[r],
            miss: rows.residency[r] == 0,
            bytes: rows.expert_bytes[r],
            dropped: rows.dropped[r],
        });
    }
    cells
}

fn pct(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { 100.0 * a / b }
}

/// The figures of the report as rows of three tables: one row per (file, phase, setting), and
/// one per (file, phase) with the phase header's counts.
#[derive(Debug, Clone)]
pub struct DropTables {
    /// `threshold` (file, phase, frac, thr_pct, io_saved_pct, mass_lost_pct).
    pub threshold: Table,
    /// `static_k` (file, phase, keep_k, io_saved_pct, mass_lost_pct).
    pub static_k: Table,
    /// `phases` (file, phase, k, cells, routed, miss_pct, recorded_dropped): the `[DECODE] …
    /// routing cells, … routed experts, …% misses` line of each phase that has rows.
    pub phases: Table,
}

impl Default for DropTables {
    fn default() -> Self {
        Self {
            threshold: Table::new(
                "threshold",
                &[
                    "file",
                    "phase",
                    "frac",
                    "thr_pct",
                    "io_saved_pct",
                    "mass_lost_pct",
                ],
            ),
            static_k: Table::new(
                "static_k",
                &["file", "phase", "keep_k", "io_saved_pct", "mass_lost_pct"],
            ),
            phases: Table::new(
                "phases",
                &[
                    "file",
                    "phase",
                    "k",
                    "cells",
                    "routed",
                    "miss_pct",
                    "recorded_dropped",
                ],
            ),
        }
    }
}

fn report_phase(
    out: &mut String,
    label: &str,
    cells: &[Vec<Entry>],
    k: i64,
    (name, tables): (&str, &mut DropTables),
) {
    let phase = label.to_lowercase();
    if cells.is_empty() {
        let _ = writeln!(out, "\n[{label}] no rows");
        return;
    }
    let key = (name, phase.as_str());
    phase_header(out, label, cells, k, key, &mut tables.phases);
    thresholds(out, cells, k, key, &mut tables.threshold);
    static_k(out, cells, k, key, &mut tables.static_k);
}

/// The `[PHASE] … routing cells` line and, when the run dropped routings itself, what it
/// dropped; `(name, phase)` label the `phases` row.
fn phase_header(
    out: &mut String,
    label: &str,
    cells: &[Vec<Entry>],
    k: i64,
    (name, phase): (&str, &str),
    table: &mut Table,
) {
    let entries: usize = cells.iter().map(Vec::len).sum();
    let misses = cells.iter().flatten().filter(|e| e.miss).count();
    let _ = writeln!(
        out,
        "\n[{label}] {} routing cells, {entries} routed experts, {}% misses",
        cells.len(),
        f(pct(misses as f64, entries as f64), 1)
    );
    let n_dropped = cells.iter().flatten().filter(|e| e.dropped).count();
    table.push(vec![
        json!(name),
        json!(phase),
        json!(k),
        json!(cells.len()),
        json!(entries),
        num(pct(misses as f64, entries as f64)),
        json!(n_dropped),
    ]);
    if n_dropped > 0 {
        let mut mass = 0.0;
        let mut dropped_mass = 0.0;
        for e in cells.iter().flatten() {
            mass += e.weight;
            if e.dropped {
                dropped_mass += e.weight;
            }
        }
        let _ = writeln!(
            out,
            "  recorded: dropping was ON for this run -- {n_dropped} routings dropped ({}%), {}% of the weight mass",
            f(pct(n_dropped as f64, entries as f64), 1),
            f(pct(dropped_mass, mass), 2)
        );
    }
}

/// The cache-aware threshold section: one line (and `threshold` row) per fraction of 1/k.
fn thresholds(
    out: &mut String,
    cells: &[Vec<Entry>],
    k: i64,
    (name, phase): (&str, &str),
    table: &mut Table,
) {
    let _ = writeln!(
        out,
        "\n  cache-aware threshold, as a fraction of the uniform share 1/k = {}%",
        f(100.0 / k as f64, 2)
    );
    let _ = writeln!(
        out,
        "  {:>6}  {:>8}  {:>9}  {:>10}   surviving experts per cell",
        "frac", "thr", "io_saved", "mass_lost"
    );
    for frac in FRACS {
        let thr = frac / k as f64;
        let (mut total, mut lost, mut miss_b, mut drop_b) = (0.0f64, 0.0f64, 0u64, 0u64);
        let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
        for cell in cells {
            let mut best = 0usize;
            for (i, e) in cell.iter().enumerate() {
                if e.weight > cell[best].weight {
                    best = i;
                }
            }
            let mut kept = 0usize;
            for (i, e) in cell.iter().enumerate() {
                total += e.weight;
                if e.miss {
                    miss_b += e.bytes;
                    if i != best && e.weight < thr {
                        drop_b += e.bytes;
                        lost += e.weight;
                        continue;
                    }
                }
                kept += 1;
            }
            *hist.entry(kept).or_default() += 1;
        }
        table.push(vec![
            json!(name),
            json!(phase),
            num(frac),
            num(100.0 * thr),
            num(pct(drop_b as f64, miss_b as f64)),
            num(pct(lost, total)),
        ]);
        let h: Vec<String> = hist
            .iter()
            .map(|(kept, n)| format!("{kept}:{}%", f(pct(*n as f64, cells.len() as f64), 0)))
            .collect();
        let _ = writeln!(
            out,
            "  {}  {}%  {}%  {}%   {}",
            crate::pyfmt::fw(frac, 6, 2),
            crate::pyfmt::fw(100.0 * thr, 7, 2),
            crate::pyfmt::fw(pct(drop_b as f64, miss_b as f64), 8, 1),
            crate::pyfmt::fw(pct(lost, total), 9, 2),
            h.join(" ")
        );
    }
}

/// The static top-k baseline section: one line (and `static_k` row) per kept count below k.
fn static_k(
    out: &mut String,
    cells: &[Vec<Entry>],
    k: i64,
    (name, phase): (&str, &str),
    table: &mut Table,
) {
    out.push_str(
        "\n  static-k baseline (--n-expert-used), same rows, for comparison at equal io_saved\n",
    );
    let _ = writeln!(
        out,
        "  {:>6}  {:>9}  {:>10}",
        "keep_k", "io_saved", "mass_lost"
    );
    for keep in (1..k).rev() {
        let (mut total, mut lost, mut miss_b, mut drop_b) = (0.0f64, 0.0f64, 0u64, 0u64);
        for e in cells.iter().flatten() {
            total += e.weight;
            if e.miss {
                miss_b += e.bytes;
            }
            if i64::from(e.slot) >= keep {
                lost += e.weight;
                if e.miss {
                    drop_b += e.bytes;
                }
            }
        }
        table.push(vec![
            json!(name),
            json!(phase),
            json!(keep),
            num(pct(drop_b as f64, miss_b as f64)),
            num(pct(lost, total)),
        ]);
        let _ = writeln!(
            out,
            "  {keep:6}  {}%  {}%",
            crate::pyfmt::fw(pct(drop_b as f64, miss_b as f64), 8, 1),
            crate::pyfmt::fw(pct(lost, total), 9, 2)
        );
    }
}

/// How the report names a trace: its file name (the `file` column of the tables).
#[must_use]
pub fn file_label(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// The report for one trace, or `None` when its preamble gives no `n_expert_used` (the
/// threshold is a fraction of 1/k, so there is nothing to replay).
#[must_use]
pub fn report(t: &RouteTrace) -> Option<String> {
    report_with_tables(t, &mut DropTables::default())
}

/// [`report`], also appending its figures (unrounded) to `tables`.
pub fn report_with_tables(t: &RouteTrace, tables: &mut DropTables) -> Option<String> {
    let k = t.meta.n_expert_used;
    if k <= 0 {
        return None;
    }
    // The static-k table has k-1 rows; no real router picks more than a few hundred experts.
    let k = k.min(4096);
    let mut out = String::new();
    let bar = "=".repeat(78);
    let name = file_label(&t.path);
    let _ = writeln!(
        out,
        "{bar}\n{name}   arch={}  n_expert={}  k={k}\n{bar}",
        t.meta.arch, t.meta.n_expert
    );
    report_phase(&mut out, "DECODE", &phase_cells(t, 1), k, (&name, tables));
    report_phase(&mut out, "PREFILL", &phase_cells(t, 0), k, (&name, tables));
    out.push('\n');
    Some(out)
}

/// What `drop` made of its traces, in argument order.
#[derive(Debug, Default)]
pub struct DropBatch {
    /// The text reports of the traces that were read, one after another.
    pub text: String,
    /// Their figures, unrounded.
    pub tables: DropTables,
    /// Why each other trace was rejected.
    pub errors: Vec<AnalyzeError>,
}

/// The report of every trace in `paths`. A trace that cannot be read, or whose preamble gives
/// no `n_expert_used`, becomes an error of the batch without stopping the others, so that one
/// bad file among many still leaves the rest reported. `note` gets each cut-short trace's note.
pub fn report_files(paths: &[PathBuf], note: &mut dyn FnMut(String)) -> DropBatch {
    let mut batch = DropBatch::default();
    for path in paths {
        match report_file(path, &mut batch.tables, note) {
            Ok(text) => batch.text.push_str(&text),
            Err(e) => batch.errors.push(e),
        }
    }
    batch
}

fn report_file(
    path: &Path,
    tables: &mut DropTables,
    note: &mut dyn FnMut(String),
) -> Result<String> {
    // The preamble alone decides whether a threshold can be expressed: a file of another kind
    // is refused before its rows are parsed.
    let meta = RouteTrace::read_meta(path)?;
    if meta.n_expert_used <= 0 {
        return Err(AnalyzeError::Invalid {
            message: format!(
                "{}: no n_expert_used in the preamble; cannot express a threshold",
                path.display()
            ),
            hint:
                "pass a route trace (`# route_trace v1` with a `# model=... n_expert_used=` line)"
                    .into(),
        });
    }
    let filter = RouteFilter {
        turn: None,
        phase: Phase::All,
        all_columns: true,
    };
    let t = crate::route::read_noted(
        path,
        filter,
        Some("drop (a routing's hit or miss decides what dropping it saves)"),
        note,
    )?;
    if t.total_rows == 0 {
        // As `route` and `replay`: a report of "no rows" per phase would read as a result.
        return Err(AnalyzeError::Empty {
            message: format!(
                "{}: no rows - is this a route trace? (a header and no routings)",
                path.display()
            ),
            hint: "the trace has no routing rows: record one with `bmoe-cli --route-trace FILE` on a run that generates tokens".into(),
        });
    }
    Ok(report_with_tables(&t, tables).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rejected_trace_is_an_error_of_the_batch() {
        let d = tempfile::tempdir().expect("tempdir");
        let io = d.path().join("io.csv");
        std::fs::write(&io, "# io_trace v1\nturn,phase\n").expect("write");
        let missing = d.path().join("missing.csv");
        let mut notes = Vec::new();
        let batch = report_files(&[io, missing], &mut |n| notes.push(n));
        assert!(batch.text.is_empty() && notes.is_empty());
        let errors: Vec<String> = batch.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].ends_with("no n_expert_used in the preamble; cannot express a threshold")
        );
        assert!(errors[1].contains("missing.csv"));
    }
}
