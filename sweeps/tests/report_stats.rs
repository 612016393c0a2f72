//! `bmoe-bench report` reproduces hand-computed statistics on small CSVs written with the
//! telemetry writer: per-run tok/s, the mean ± Student-t interval across runs, the within-run
//! bootstrap bounds, flash MiB/token, hit %, the s/token split, baseline ratios, and the
//! exclusion of warm-up and stochastic runs.

use std::path::Path;
use std::process::Command;

use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
use serde_json::{Value, json};

fn write_run(root: &Path, dir: &str, walls: &[f64], compute: &[f64], hit: f64, temp: Option<f64>) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    let info = RunInfo {
        engine: Some("test-1".into()),
        model: Some("tiny.gguf".into()),
        temp,
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(d.join("metrics.csv"), &info).expect("create");
    for (i, (wall, c)) in walls.iter().zip(compute).enumerate() {
        w.write_row(&TokenRow {
            step: Some(i as u64 + 1),
            steps: Some(walls.len() as u64),
            wall_ms: Some(*wall),
            compute_ms: Some(*c),
            io_ms: Some(wall - c),
            read_bytes: Some(1 << 20),
            ..TokenRow::default()
        })
        .expect("row");
    }
    let mut t = SummaryTrailer::new();
    t.push("tokens", walls.len().to_string());
    t.push_f64("cache_hit_pct", hit, 1);
    w.write_summary(&t).expect("trailer");
}

fn record(pos: usize, cell: &str, rep: &str, warmup: bool) -> Value {
    json!({"campaign": "hand", "sweep": "s", "cell": cell, "rep": rep, "warmup": warmup,
        "pass": if warmup { 0 } else { rep[1..].parse::<u32>().unwrap_or(0) }, "position": pos,
        "device": "local", "device_kind": "local", "model": "tiny", "status": "ok",
        "dir": format!("s/{cell}/{rep}"), "axes": {"cache": if cell == "a" { "0" } else { "8" }}})
}

fn report(root: &Path, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_bmoe-bench"))
        .arg("report")
        .arg(root)
        .args(args)
        .output()
        .expect("run");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn report_matches_hand_computed_statistics() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    write_run(root, "s/a/w1", &[900.0, 900.0], &[1.0, 1.0], 0.0, None);
    write_run(root, "s/a/r1", &[100.0, 200.0], &[80.0, 160.0], 40.0, None);
    write_run(root, "s/a/r2", &[100.0, 100.0], &[80.0, 80.0], 60.0, None);
    write_run(root, "s/b/r1", &[50.0, 50.0], &[10.0, 10.0], 90.0, None);
    write_run(
        root,
        "s/b/r2",
        &[50.0, 50.0, 50.0, 50.0],
        &[10.0; 4],
        90.0,
        None,
    );
    write_run(root, "s/b/r3", &[5.0, 5.0], &[1.0, 1.0], 90.0, Some(0.7));
    let recs = [
        record(0, "a", "w1", true),
        record(1, "a", "r1", false),
        record(2, "b", "r1", false),
        record(3, "a", "r2", false),
        record(4, "b", "r2", false),
        record(5, "b", "r3", false),
    ];
    let text: String = recs.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(root.join("results.jsonl"), text).expect("jsonl");

    let (ok, out, err) = report(root, &["-f", "json", "--baseline", "a"]);
    assert!(ok, "{err}");
    let cells: Vec<Value> = serde_json::from_str(&out).expect("json");
    assert_eq!(cells.len(), 2);
    let (a, b) = (&cells[0], &cells[1]);
    assert_eq!(a["cell"], "a");

    // a: runs of 2/0.3 s and 2/0.2 s; the warm-up is not averaged.
    let (r1, r2) = (2.0 / 0.3, 10.0);
    let mean = (r1 + r2) / 2.0;
    let sd = (((r1 - mean) * (r1 - mean) + (r2 - mean) * (r2 - mean)) / 1.0_f64).sqrt();
    let half = 12.706 * sd / 2f64.sqrt();
    let close = |v: &Value, want: f64| (v.as_f64().expect("number") - want).abs() < 1e-9;
    assert_eq!(a["runs"], 2);
    assert!(close(&a["tok_s"], mean), "{a}");
    assert!(close(&a["tok_s_sd"], sd), "{a}");
    assert!(
        close(&a["reps_ci"][0], mean - half) && close(&a["reps_ci"][1], mean + half),
        "{a}"
    );
    // Pooled walls 100, 200, 100, 100 ms: every bootstrap mean lies in [100, 200] ms.
    let (lo, hi) = (
        a["within_ci"][0].as_f64().expect("lo"),
        a["within_ci"][1].as_f64().expect("hi"),
    );
    assert!(
        (5.0..=10.0).contains(&lo) && (5.0..=10.0).contains(&hi) && lo < hi,
        "{a}"
    );
    assert!(close(&a["flash_mib_tok"], 1.0));
    assert!(close(&a["hit_pct"], 50.0));
    assert!(close(&a["compute_s_tok"], (0.120 + 0.080) / 2.0), "{a}");
    assert!(close(&a["io_s_tok"], (0.030 + 0.020) / 2.0), "{a}");
    assert!(
        a["excluded"][0]
            .as_str()
            .expect("excluded")
            .contains("warm-up")
    );
    assert!(close(&a["vs_baseline"]["ratio"], 1.0));

    // b: 20 tok/s twice; the stochastic run (temp=0.7, 200 tok/s) is excluded.
    assert_eq!(b["runs"], 2);
    assert!(
        close(&b["tok_s"], 20.0) && close(&b["tok_s_sd"], 0.0),
        "{b}"
    );
    assert!(
        b["excluded"][0]
            .as_str()
            .expect("excluded")
            .contains("stochastic"),
        "{b}"
    );
    // Ratio over runs: 20 / mean(a); resampled means of a are 20/3, 25/3 or 10 tok/s.
    let r = &b["vs_baseline"];
    assert!(close(&r["ratio"], 20.0 / mean), "{r}");
    assert_eq!(r["method"], "repetitions");
    assert!(
        r["low"].as_f64().expect("low") >= 2.0 - 1e-12
            && r["high"].as_f64().expect("high") <= 3.0 + 1e-12,
        "{r}"
    );

    // The markdown and csv agree with the json.
    let (ok, md, _) = report(root, &[]);
    assert!(ok);
    assert!(
        md.contains(&format!("| a | 2 | {:.3} ± {:.3} |", mean, sd)),
        "{md}"
    );
    assert!(md.contains("stochastic (temp>0)"), "{md}");
    let (ok, csv, _) = report(root, &["-f", "csv"]);
    assert!(ok);
    assert!(
        csv.lines()
            .nth(2)
            .expect("row b")
            .starts_with("s,tiny,local,b,cache=8,2,20,0,"),
        "{csv}"
    );

    // A baseline that does not exist is an error with a hint.
    let (ok, _, err) = report(root, &["--baseline", "zzz"]);
    assert!(!ok);
    assert!(
        err.contains("baseline cell `zzz`") && err.contains("hint: cells: a, b"),
        "{err}"
    );
}
