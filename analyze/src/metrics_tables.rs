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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, name: &str, walls: &[f64]) -> RunStats {
        let mut text = String::from("step,steps,wall_ms\n");
        for (i, w) in walls.iter().enumerate() {
            text.push_str(&format!("{},{},{w}\n", i + 1, walls.len()));
        }
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write run");
        crate::metrics_files::read_run(&p, 0).expect("a run")
    }

    #[test]
    fn compare_table_and_json_carry_the_same_ratio() {
        let d = tempfile::tempdir().expect("tempdir");
        let x = run(d.path(), "a.csv", &[100.0, 110.0, 90.0, 100.0]);
        let y = run(d.path(), "b.csv", &[200.0, 210.0, 190.0, 200.0]);
        let t = compare_table(Path::new("a.csv"), Path::new("b.csv"), &x, &y);
        let csv = table::to_csv(&[t]);
        let row: Vec<&str> = csv.lines().nth(2).expect("one row").split(',').collect();
        assert_eq!(row[..5], ["a.csv", "b.csv", "100.0", "200.0", "0.5"]);
        let j = compare_json(&x, &y);
        assert_eq!(j["ratio_a_over_b"], 0.5);
        assert_eq!(row[5], j["ci95_low"].to_string());
        assert_eq!(row[6], j["ci95_high"].to_string());
    }

    #[test]
    fn runs_table_has_a_column_per_scalar_json_key() {
        let d = tempfile::tempdir().expect("tempdir");
        let runs = [run(d.path(), "a.csv", &[10.0, 20.0])];
        let csv = table::to_csv(&[runs_table(&runs)]);
        assert_eq!(csv.lines().nth(1), Some(RUN_COLUMNS.join(",").as_str()));
        let json = metrics::runs_json(&runs);
        let left_out: Vec<&str> = json[0]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .filter(|k| !RUN_COLUMNS.contains(k))
            .collect();
        // A list does not fit in a CSV cell; every other key is a column.
        assert_eq!(left_out, ["instrumented_by"]);
    }
}
