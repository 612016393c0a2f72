//! Warnings about the runs a cell averages: runs that started on a loaded machine, and runs
//! whose tok/s is an outlier among the cell's.
//!
//! **Loaded** (per run, from the device state probed just before it): the 1-minute load
//! average minus what this sweep's own previous run on the device still contributes to it
//! (its threads × (1 − e^(−duration/60 s)) × e^(−gap/60 s): the kernel's exponential average)
//! is the load of other work; the run is loaded when that exceeds `CPUs − threads + 0.5`, i.e.
//! when the other work leaves fewer free CPUs than the run's threads (half a CPU of slack for
//! an idle machine's background). Threads come from the CSV preamble (`threads=`), else all
//! CPUs. A device that did not report its CPU count (results from before it was probed) gets
//! no load warning.
//!
//! **Outliers** (per cell of at least 4 runs): Tukey's fences on the per-run tok/s, a run
//! below Q1 − 1.5·IQR or above Q3 + 1.5·IQR (quartiles by linear interpolation).

use indexmap::IndexMap;

use super::CellRow;
use super::stats::RunFigures;
use crate::sweep::results::RunRecord;

/// Fewest runs for which the outlier rule is applied (quartiles of 3 numbers flag nothing
/// meaningful).
pub const MIN_RUNS_FOR_OUTLIERS: usize = 4;

/// What the warnings found in one cell, by run name (`r1`, ...).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellFlags {
    /// Runs outside Tukey's fences.
    pub outliers: Vec<String>,
    /// Runs that started on a loaded machine.
    pub loaded: Vec<String>,
}

/// The (sweep, cell) key of the flags.
pub type Key = (String, String);

/// Whether record `i` is one the cell averages (the same rule as the report's table).
fn counted(r: &RunRecord, s: Option<&RunFigures>) -> bool {
    !r.warmup && r.status == "ok" && s.is_some_and(|s| s.flag.is_none() && s.decode.tokens() > 0)
}

/// Tukey's fences (Q1 − 1.5·IQR, Q3 + 1.5·IQR) of `v`; `None` below
/// [`MIN_RUNS_FOR_OUTLIERS`] values.
pub fn tukey_fences(v: &[f64]) -> Option<(f64, f64)> {
    if v.len() < MIN_RUNS_FOR_OUTLIERS {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let q1 = bmoe_stats::percentile_linear(&s, 0.25);
    let q3 = bmoe_stats::percentile_linear(&s, 0.75);
    let iqr = q3 - q1;
    Some((q1 - 1.5 * iqr, q3 + 1.5 * iqr))
}

/// The other work's load when run `i` started (see the module docs), and the threshold it is
/// judged against; `None` when the device state lacks the load or the CPU count.
fn load_of(
    records: &[RunRecord],
    stats: &[Option<RunFigures>],
    i: usize,
) -> Option<(f64, f64, f64, u32)> {
    let r = &records[i];
    let st = r.state_before.as_ref()?;
    let load1 = st.load?[0];
    let ncpu = st.ncpu?;
    let threads_of = |k: usize| {
        stats[k]
            .as_ref()
            .and_then(|s| s.threads)
            .map_or(f64::from(ncpu), |t| t as f64)
    };
    // The previous run on the same device (in run order) is still in the 1-minute average.
    let prev = records[..i]
        .iter()
        .enumerate()
        .rev()
        .find(|(_, p)| p.device == r.device && p.started_unix > 0.0);
    let residue = prev.map_or(0.0, |(k, p)| {
        let gap = (r.started_unix - (p.started_unix + p.duration_s)).max(0.0);
        threads_of(k) * (1.0 - (-p.duration_s / 60.0).exp()) * (-gap / 60.0).exp()
    });
    let other = (load1 - residue).max(0.0);
    let threads = threads_of(i);
    Some((other, load1, threads, ncpu))
}

/// The warnings (one line each) and the flags per cell.
pub fn warnings(
    rows: &[CellRow],
    records: &[RunRecord],
    stats: &[Option<RunFigures>],
) -> (Vec<String>, IndexMap<Key, CellFlags>) {
    let mut lines = Vec::new();
    let mut flags: IndexMap<Key, CellFlags> = IndexMap::new();
    for row in rows {
        let idx: Vec<usize> = (0..records.len())
            .filter(|&i| {
                records[i].sweep == row.sweep
                    && records[i].cell == row.cell
                    && counted(&records[i], stats[i].as_ref())
            })
            .collect();
        let mut f = CellFlags::default();
        let mut worst: Option<(f64, f64, f64, u32)> = None;
        for &i in &idx {
            if let Some((other, load1, threads, ncpu)) = load_of(records, stats, i)
                && other > f64::from(ncpu) - threads + 0.5
            {
                f.loaded.push(records[i].rep.clone());
                if worst.is_none_or(|w| other > w.0) {
                    worst = Some((other, load1, threads, ncpu));
                }
            }
        }
        if let Some((other, load1, threads, ncpu)) = worst {
            lines.push(format!(
                "sweep `{}` · `{}`: {} of {} run(s) started on a loaded machine ({}): 1-min load up to {load1:.1}, {other:.1} of it other work, with {threads:.0} thread(s) on {ncpu} CPU(s) (loaded: other load > CPUs − threads + 0.5) — their tok/s is lower and noisier than on an idle machine",
                row.sweep,
                row.cell,
                f.loaded.len(),
                idx.len(),
                f.loaded.join(", ")
            ));
        }
        let ts: Vec<f64> = idx
            .iter()
            .filter_map(|&i| stats[i].as_ref().map(|s| s.decode.tok_s))
            .collect();
        if let Some((lo, hi)) = tukey_fences(&ts) {
            let out: Vec<String> = idx
                .iter()
                .zip(&ts)
                .filter(|(_, t)| **t < lo || **t > hi)
                .map(|(&i, t)| format!("{} ({t:.3} tok/s)", records[i].rep))
                .collect();
            if !out.is_empty() {
                f.outliers = idx
                    .iter()
                    .zip(&ts)
                    .filter(|(_, t)| **t < lo || **t > hi)
                    .map(|(&i, _)| records[i].rep.clone())
                    .collect();
                lines.push(format!(
                    "sweep `{}` · `{}`: outlier run(s) {} outside Tukey's fences {lo:.3}–{hi:.3} tok/s (1.5 × IQR beyond the quartiles of {} runs) — look at their state.json and stderr.txt before trusting the mean",
                    row.sweep,
                    row.cell,
                    out.join(", "),
                    ts.len()
                ));
            }
        }
        flags.insert((row.sweep.clone(), row.cell.clone()), f);
    }
    (lines, flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_flag_the_far_run_only() {
        assert_eq!(tukey_fences(&[1.0, 2.0, 3.0]), None);
        let (lo, hi) = tukey_fences(&[10.0, 10.5, 11.0, 10.2, 30.0]).expect("5 runs");
        assert!(lo < 10.0 && hi > 11.0 && hi < 30.0, "{lo} {hi}");
    }
}
