//! `metrics --format json|csv`: the per-run table and the `--compare` record, built from the
//! same figures as the text so that the formats never disagree.

use std::path::Path;

use serde_json::{Value, json};

use crate::metrics::{self, RunStats};
use crate::table::{self, Table};

/// `metrics --format csv`: the `--format json` keys of a run, as the `runs` table's columns.
pub const RUN_COLUMNS: [&str; 10] = [
    "path",
    "tokens",
    "mean_ms_per_token",
    "ci95_low_ms",
    "ci95_high_ms",
    "tok_per_s",
    "median_tok_per_s",
    "p95_tok_per_s",
    "instrumented",
    "stochastic",
];

/// `metrics --compare A B --format csv`: one `compare` row.
pub const COMPARE_COLUMNS: [&str; 7] = [
    "a",
    "b",
    "a_mean_ms_per_token",
    "b_mean_ms_per_token",
    "ratio_a_over_b",
    "ci95_low",
    "ci95_high",
];

/// The `runs` table: each run's `--format json` keys as columns.
#[must_use]
pub fn runs_table(runs: &[RunStats]) -> Table {
    let mut t = Table::new("runs", &RUN_COLUMNS);
    for run in metrics::runs_json(runs).as_array().into_iter().flatten() {
        t.push(RUN_COLUMNS.iter().map(|c| run[*c].clone()).collect());
    }
    t
}

/// `metrics --compare A B --format csv`: the `compare` table, whose one row names the two files
/// as given (`a`, `b`) and carries the ratio of mean token time A/B with its bootstrap CI.
#[must_use]
pub fn compare_table(a: &Path, b: &Path, x: &RunStats, y: &RunStats) -> Table {
    let ci = metrics::ratio_ci(x, y);
    let mean =
        |r: &RunStats| metrics::runs_json(std::slice::from_ref(r))[0]["mean_ms_per_token"].clone();
    let mut t = Table::new("compare", &COMPARE_COLUMNS);
    t.push(vec![
        json!(a.display().to_string()),
        json!(b.display().to_string()),
        mean(x),
        mean(y),
        ci.map_or(Value::Null, |c| table::num(c.estimate)),
        ci.map_or(Value::Null, |c| table::num(c.low)),
        ci.map_or(Value::Null, |c| table::num(c.high)),
    ]);
    t
}

/// `metrics --compare A B --format json`: both runs' `--format json` records and the ratio of
/// mean token time A/B with its bootstrap CI (`null` when it cannot be estimated).
#[must_use]
pub fn compare_json(x: &RunStats, y: &RunStats) -> Value {
    let ci = metrics::ratio_ci(x, y);
    json!({
        "a": metrics::runs_json(std::slice::from_ref(x)),
        "b": metrics::runs_json(std::slice::from_ref(y)),
        "ratio_a_over_b": ci.map(|c| c.estimate),
        "ci95_low": ci.map(|c| c.low),
        "ci95_high": ci.map(|c| c.high),
    })
}
