//! `bmoe-bench report` never averages runs of different comparability classes: a real
//! `--drop-cold-experts` cell (tiny model, real `bmoe-cli`) next to a plain one is labelled
//! lossy, and a plain cell one of whose runs is swapped at test time for the lossy run's own
//! metrics is split into one row per class, with a warning naming the run kept apart.

use std::path::Path;

use crate::sweep_common::*;

const MANIFEST: &str = r#"name = "classes"
binary = "{cli}"
[defaults]
n_predict = 4
repetitions = 2
[[model]]
id = "tiny"
preset = "tiny"
[axes.drop]
flag = "--drop-cold-experts"
[[sweep]]
name = "s"
flags = ["-t", "2", "--ignore-eos", "--moe-stream", "--cache-mb", "1"]
axes = { drop = [0, 1] }
"#;

fn cell_dirs(res: &Path) -> Vec<(String, String)> {
    records(res)
        .iter()
        .map(|r| {
            (
                r["cell"].as_str().unwrap_or_default().to_string(),
                r["dir"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn lossy_runs_are_labelled_and_never_averaged_with_plain_ones() {
    let Some(cli) = real_cli_or_skip(
        "lossy_runs_are_labelled_and_never_averaged_with_plain_ones",
        "--drop-cold-experts",
    ) else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    std::fs::write(
        t.path().join("m.toml"),
        MANIFEST.replace("{cli}", &cli.display().to_string()),
    )
    .expect("write");
    let o = run(t.path(), &["sweep", "m.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let res = t.path().join("res");
    let dirs = cell_dirs(&res);
    let (plain_cell, lossy_cell) = ("tiny_drop0", "tiny_drop1");
    let of = |cell: &str| -> Vec<String> {
        dirs.iter()
            .filter(|(c, _)| c == cell)
            .map(|(_, d)| d.clone())
            .collect()
    };
    assert_eq!(of(plain_cell).len(), 2, "{dirs:?}");
    assert_eq!(of(lossy_cell).len(), 2, "{dirs:?}");
    let lossy_csv = res.join(&of(lossy_cell)[0]).join("metrics.csv");
    let body = std::fs::read_to_string(&lossy_csv).expect("lossy metrics");
    assert!(
        body.contains("drop_cold_frac=1"),
        "the engine wrote the threshold"
    );

    // Two homogeneous cells: one row each, the lossy one labelled, no split warning.
    let o = run(t.path(), &["report", "res", "--format", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = rows["cells"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| rows.as_array().cloned().expect("report json: rows"));
    let row = |cell: &str| -> Vec<serde_json::Value> {
        rows.iter().filter(|r| r["cell"] == cell).cloned().collect()
    };
    assert_eq!(row(plain_cell).len(), 1);
    assert!(row(plain_cell)[0].get("class").is_none(), "{rows:?}");
    assert_eq!(row(lossy_cell).len(), 1);
    // the threshold from the preamble, and what the run really dropped from its trailer
    let label = row(lossy_cell)[0]["class"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        label.starts_with("lossy (drop_cold_frac=1, experts_dropped="),
        "{label}"
    );
    assert!(!String::from_utf8_lossy(&o.stderr).contains("comparability"));

    // A lossy run inside the plain cell: that cell splits, each row averages one class.
    let swapped = &of(plain_cell)[1];
    std::fs::copy(&lossy_csv, res.join(swapped).join("metrics.csv")).expect("swap");
    let o = run(t.path(), &["report", "res", "--format", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = rows["cells"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| rows.as_array().cloned().expect("report json: rows"));
    let split: Vec<&serde_json::Value> = rows.iter().filter(|r| r["cell"] == plain_cell).collect();
    assert_eq!(split.len(), 2, "{rows:?}");
    assert!(split[0].get("class").is_none());
    assert!(
        split[1]["class"]
            .as_str()
            .is_some_and(|c| c.starts_with("lossy (drop_cold_frac=1")),
        "{rows:?}"
    );
    for r in &split {
        assert_eq!(r["runs"], 1, "one run of each class: {r}");
    }
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.lines()
            .any(|l| l.contains(&format!("cell `{plain_cell}`"))
                && l.contains("2 comparability classes kept apart")
                && l.contains(swapped.as_str())),
        "{err}"
    );
    // and the markdown says it next to the row
    let o = run(t.path(), &["report", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.contains(&format!("| {plain_cell} [lossy] |")), "{md}");
    assert!(md.contains("comparability classes kept apart"), "{md}");
}
