//! `report --export-json/--export-markdown` (hyperfine's exports: mean, sd, CI, median, min,
//! max, n per cell), the warnings about loaded machines and outlier runs, the rejection of a
//! run whose metrics hold a NaN duration, and the skipped lines of `results.jsonl` named by
//! file:line — on hand-written results whose numbers are known.

use std::path::Path;
use std::process::Command;

use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, TokenRow};
use serde_json::{Value, json};

/// A run of `walls` ms tokens with `threads` in its preamble.
fn write_run(root: &Path, dir: &str, walls: &[f64], threads: u64) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    let info = RunInfo {
        engine: Some("test-1".into()),
        model: Some("tiny.gguf".into()),
        threads: Some(threads),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(d.join("metrics.csv"), &info).expect("create");
    for (i, wall) in walls.iter().enumerate() {
        w.write_row(&TokenRow {
            step: Some(i as u64 + 1),
            steps: Some(walls.len() as u64),
            wall_ms: Some(*wall),
            ..TokenRow::default()
        })
        .expect("row");
    }
}

/// A counted run's record, started at `t` after a 1 s run, with the given 1-min load.
fn record(pos: usize, cell: &str, rep: &str, load1: f64) -> Value {
    json!({"campaign": "hand", "sweep": "s", "cell": cell, "rep": rep, "warmup": false,
        "pass": rep[1..].parse::<u32>().unwrap_or(0), "position": pos,
        "device": "local", "device_kind": "local", "model": "tiny", "status": "ok",
        "started_unix": 1000.0 + 100.0 * pos as f64, "duration_s": 1.0,
        "state_before": {"load": [load1, load1, load1], "ncpu": 4},
        "dir": format!("s/{cell}/{rep}"), "axes": {}})
}

fn report(root: &Path, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_bmoe-bench"))
        .arg("report")
        .arg(root)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn exports_warnings_and_rejections_on_known_numbers() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    // Cell a: five runs of 10 tok/s (100 ms tokens) but r3 at 1 tok/s: an outlier.
    // Cell b: four runs at 20 tok/s on 2 threads of 4 CPUs; r2 started under a load of 3
    // (other work 3 > 4 − 2 + 0.5: loaded), the others under 2 (not); r5's CSV has a NaN.
    let mut recs = Vec::new();
    for (k, rep) in ["r1", "r2", "r3", "r4", "r5"].iter().enumerate() {
        let wall = if *rep == "r3" { 1000.0 } else { 100.0 };
        write_run(root, &format!("s/a/{rep}"), &[wall, wall], 4);
        recs.push(record(2 * k, "a", rep, 0.0));
        write_run(root, &format!("s/b/{rep}"), &[50.0, 50.0], 2);
        recs.push(record(
            2 * k + 1,
            "b",
            rep,
            if *rep == "r2" { 3.0 } else { 2.0 },
        ));
    }
    let nan_csv = root.join("s/b/r5/metrics.csv");
    let csv = std::fs::read_to_string(&nan_csv).expect("csv");
    std::fs::write(&nan_csv, csv.replacen("\n2,2,50.000", "\n2,2,NaN", 1)).expect("w");
    assert!(
        std::fs::read_to_string(&nan_csv)
            .expect("csv")
            .contains("NaN")
    );
    let mut text: String = recs.iter().map(|r| format!("{r}\n")).collect();
    text.push_str("{\"hello\":\"world\"}\nnot json at all\n{\"campaign\":\"hand\",\"swe");
    std::fs::write(root.join("results.jsonl"), text).expect("jsonl");

    let json_out = root.join("export.json");
    let md_out = root.join("export.md");
    let (ok, md, err) = report(
        root,
        &[
            "--export-json",
            json_out.to_str().expect("utf8"),
            "--export-markdown",
            md_out.to_str().expect("utf8"),
            "--findings",
        ],
    );
    assert!(ok, "{err}");
    // Skipped lines, by file:line, on stderr and in the report.
    let jsonl = root.join("results.jsonl").display().to_string();
    for (line, why) in [
        (11, "not a run record"),
        (12, "not JSON"),
        (13, "torn last line"),
    ] {
        let want = format!("{jsonl}:{line}: {why}");
        assert!(err.contains(&want), "{want}: {err}");
        assert!(md.contains(&want), "{want}: {md}");
    }
    assert!(
        // The metrics reader refuses the NaN with the CSV's file:line (bmoe-telemetry's rule).
        err.contains("run s/b/r5: rejected:")
            && err.contains("metrics.csv:6: column `wall_ms`")
            && err.contains("(found \"NaN\")"),
        "{err}"
    );
    assert!(md.contains("r5 (s/b/r5): rejected:"), "{md}");
    // Warnings: r3 of a is an outlier, r2 of b loaded; nothing else.
    assert!(
        err.contains("sweep `s` · `a`: outlier run(s) r3 (1.000 tok/s)"),
        "{err}"
    );
    assert!(
        err.contains("sweep `s` · `b`: 1 of 4 run(s) started on a loaded machine (r2)"),
        "{err}"
    );
    assert!(!err.contains("sweep `s` · `a`: 1 of"), "{err}");

    let e: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_out).expect("export")).expect("json");
    assert_eq!(e["schema"], "bmoe-bench-export/1");
    assert_eq!(e["unit"], "tok/s");
    let cells = e["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2);
    let (a, b) = (&cells[0], &cells[1]);
    let close = |v: &Value, want: f64| (v.as_f64().expect("number") - want).abs() < 1e-9;
    assert_eq!(a["cell"], "a");
    assert_eq!(a["n"], 5);
    assert!(close(&a["mean"], (4.0 * 10.0 + 1.0) / 5.0), "{a}");
    assert!(close(&a["median"], 10.0) && close(&a["min"], 1.0) && close(&a["max"], 10.0));
    assert_eq!(a["outliers"], json!(["r3"]));
    assert_eq!(a["loaded_runs"], json!([]));
    assert_eq!(a["samples"].as_array().map(Vec::len), Some(5));
    assert_eq!(b["n"], 4, "the NaN run is not averaged: {b}");
    assert!(close(&b["mean"], 20.0) && close(&b["stddev"], 0.0), "{b}");
    assert_eq!(b["loaded_runs"], json!(["r2"]));
    assert!(b["ci"].is_array() || b["ci_note"].is_string(), "{b}");
    assert_eq!(e["skipped"].as_array().map(Vec::len), Some(4), "{e}");

    let f = std::fs::read_to_string(root.join("findings.md")).expect("findings");
    assert!(
        f.contains(&format!("- **Skipped input:** {jsonl}:13: torn last line")),
        "{f}"
    );
    assert!(
        f.contains("- **Warning:** sweep `s` · `a`: outlier run(s) r3"),
        "{f}"
    );
    let m = std::fs::read_to_string(&md_out).expect("md export");
    assert!(
        m.starts_with("| sweep | cell | n | mean ± sd [tok/s] | 95% CI [tok/s] | median [tok/s] | min [tok/s] | max [tok/s] |"),
        "{m}"
    );
    assert!(
        m.contains("| s | `a` (outliers) | 5 | 8.200 ± 4.025 |"),
        "{m}"
    );
    assert!(
        m.contains("| s | `b` (loaded) | 4 | 20.00 ± 0.000 |"),
        "{m}"
    );
}

#[test]
fn a_results_file_without_a_valid_record_is_refused() {
    let t = tempfile::tempdir().expect("tmp");
    std::fs::write(t.path().join("results.jsonl"), "{\"a\":1}\n[1,2]\n").expect("w");
    let (ok, out, err) = report(t.path(), &[]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.contains("results.jsonl has no valid run record: 2 line(s) skipped"),
        "{err}"
    );
    assert!(err.contains("results.jsonl:1: not a run record"), "{err}");
    assert!(
        err.contains("hint: is this a bmoe-bench results directory?"),
        "{err}"
    );
}
