//! `bmoe-bench report` reproduces hand-computed statistics on small CSVs written with the
//! telemetry writer: per-run tok/s, the mean ± Student-t interval across runs, the within-run
//! bootstrap bounds, flash MiB/token, hit %, the s/token split, baseline ratios, and the
//! exclusion of warm-up and stochastic runs.

use std::path::Path;
use std::process::Command;

use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
use serde_json::{Value, json};

fn write_run(root: &Path, dir: &str, walls: &[f64], compute: &[f64], hit: f64, temp: Option<f64>) {
    let info = RunInfo {
        engine: Some("test-1".into()),
        model: Some("tiny.gguf".into()),
        temp,
        ..RunInfo::default()
    };
    write_run_info(root, dir, walls, compute, hit, &info);
}

fn write_run_info(
    root: &Path,
    dir: &str,
    walls: &[f64],
    compute: &[f64],
    hit: f64,
    info: &RunInfo,
) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    let mut w = MetricsWriter::create(d.join("metrics.csv"), info).expect("create");
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

/// Writes `recs` as the results directory's `results.jsonl`, one record per line.
fn write_records(root: &Path, recs: &[Value]) {
    let text: String = recs.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(root.join("results.jsonl"), text).expect("jsonl");
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
    write_records(root, &recs);

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
    // t(1) at 0.975 = tan(0.475 π).
    let half = 12.706_204_736_174_693 * sd / 2f64.sqrt();
    let close = |v: &Value, want: f64| (v.as_f64().expect("number") - want).abs() < 1e-9;
    assert_eq!(a["runs"], 2);
    assert!(close(&a["tok_s"], mean), "{a}");
    assert!(close(&a["tok_s_sd"], sd), "{a}");
    // Two runs: the t interval is computed but is not a result (it even reaches below 0).
    assert!(
        close(&a["reps_ci_raw"][0], mean - half) && close(&a["reps_ci_raw"][1], mean + half),
        "{a}"
    );
    assert!(mean - half < 0.0);
    assert!(a["reps_ci"].is_null(), "{a}");
    assert_eq!(
        a["reps_ci_note"],
        "uninformative: 2 runs (< 3), lower bound below 0 for a positive rate"
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
    assert_eq!(r["note"], "uninformative: 2 runs on a side (< 3)");
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
    // Neither the t interval nor the ratio interval is presented as a result.
    assert!(
        md.contains(&format!(
            "| a | 2 | {:.3} ± {:.3} | uninformative¹ |",
            mean, sd
        )),
        "{md}"
    );
    assert!(
        md.contains(&format!(
            "¹ `a`: uninformative: 2 runs (< 3), lower bound below 0 for a positive rate; Student t gives {:.2}–{:.2} tok/s.",
            mean - half,
            mean + half
        )),
        "{md}"
    );
    // footnotes in row order: a's interval, b's interval, b's ratio (a is the baseline: 1)
    let (ok, md, _) = report(root, &["--baseline", "a"]);
    assert!(ok);
    assert!(
        md.contains(&format!("{:.3}× (CI uninformative³)", 20.0 / mean)),
        "{md}"
    );
    assert!(
        md.contains("³ `b` vs `a`: uninformative: 2 runs on a side (< 3); the bootstrap gives ["),
        "{md}"
    );
    let (ok, csv, _) = report(root, &["-f", "csv"]);
    assert!(ok);
    assert!(
        csv.lines()
            .nth(2)
            .expect("row b")
            .starts_with("s,tiny,local,b,cache=8,2,20,0,,,"),
        "{csv}"
    );
    let header: Vec<&str> = csv.lines().next().expect("header").split(',').collect();
    let row_a: Vec<&str> = csv.lines().nth(1).expect("row a").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    assert_eq!(row_a[col("ci_reps_lo")], "");
    assert!(row_a[col("ci_reps_raw_lo")].starts_with('-'), "{csv}");
    assert!(row_a[col("ci_reps_note")].starts_with("\"uninformative: 2 runs"));
    assert_eq!(row_a[col("ratio_lo")], "");

    // A baseline that does not exist is an error with a hint.
    let (ok, _, err) = report(root, &["--baseline", "zzz"]);
    assert!(!ok);
    assert!(
        err.contains("baseline cell `zzz`") && err.contains("hint: cells: a, b"),
        "{err}"
    );
}

#[test]
fn across_run_intervals_are_results_only_when_informative() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    // cell a: 9, 10, 11 tok/s (one 1000/x ms token each); cell b: 1, 10, 19 tok/s.
    let mut recs = Vec::new();
    for (cell, rates) in [("a", [9.0, 10.0, 11.0]), ("b", [1.0, 10.0, 19.0])] {
        for (i, r) in rates.iter().enumerate() {
            let rep = format!("r{}", i + 1);
            write_run(
                root,
                &format!("s/{cell}/{rep}"),
                &[1000.0 / r],
                &[1.0],
                0.0,
                None,
            );
            recs.push(record(recs.len(), cell, &rep, false));
        }
    }
    write_records(root, &recs);

    let (ok, out, err) = report(root, &["-f", "json"]);
    assert!(ok, "{err}");
    let cells: Vec<Value> = serde_json::from_str(&out).expect("json");
    // a: 10 ± t(2) × 1 / √3 = 10 ± 2.484
    // t(2) at 0.975 = 0.95 / √(2 · 0.975 · 0.025).
    let h = 4.302_652_729_749_462 / 3f64.sqrt();
    let lo = cells[0]["reps_ci"][0].as_f64().expect("a is a result");
    // (the CSV keeps wall_ms to 3 decimals: 111.111 ms is 9.000009 tok/s)
    assert!((lo - (10.0 - h)).abs() < 1e-4, "{}", cells[0]);
    assert!(cells[0]["reps_ci_note"].is_null());
    // b: 10 ± 4.303 × 9 / √3 = 10 ± 22.4: three runs, but the bound below 0 gives it away.
    assert!(cells[1]["reps_ci"].is_null(), "{}", cells[1]);
    assert_eq!(
        cells[1]["reps_ci_note"],
        "uninformative: lower bound below 0 for a positive rate"
    );
    let (ok, md, _) = report(root, &[]);
    assert!(ok);
    assert!(
        md.contains("| a | 3 | 10.00 ± 1.000 | 7.516–12.48 |"),
        "{md}"
    );
    assert!(md.contains("± 9.000 | uninformative¹ |"), "{md}");
    assert!(
        md.contains("¹ `b`: uninformative: lower bound below 0"),
        "{md}"
    );
}

/// A cell whose runs differ a lot in speed (one fast run, two slow): the mean of per-run tok/s
/// is far above the pooled tokens / Σ wall, and the within-run interval must be an interval
/// for the mean shown next to it, in md, csv and json alike. The baseline row is `1`.
#[test]
fn within_run_interval_belongs_to_the_mean_it_is_printed_with() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    // 1000-ish, 10-ish and 5-ish tok/s: mean ≈ 338, pooled ≈ 12 / 1.2 s ≈ 10.
    write_run(root, "s/a/r1", &[0.9, 1.1, 1.0, 1.0], &[0.5; 4], 0.0, None);
    write_run(
        root,
        "s/a/r2",
        &[90.0, 110.0, 100.0, 100.0],
        &[50.0; 4],
        0.0,
        None,
    );
    write_run(
        root,
        "s/a/r3",
        &[180.0, 220.0, 200.0, 200.0],
        &[50.0; 4],
        0.0,
        None,
    );
    for (i, rep) in ["r1", "r2", "r3"].iter().enumerate() {
        write_run(
            root,
            &format!("s/b/{rep}"),
            &[50.0, 60.0, 40.0],
            &[10.0; 3],
            0.0,
            None,
        );
        let _ = i;
    }
    let recs = [
        record(0, "a", "r1", false),
        record(1, "b", "r1", false),
        record(2, "a", "r2", false),
        record(3, "b", "r2", false),
        record(4, "a", "r3", false),
        record(5, "b", "r3", false),
    ];
    write_records(root, &recs);

    let (ok, out, err) = report(root, &["-f", "json", "--baseline", "a"]);
    assert!(ok, "{err}");
    let cells: Vec<Value> = serde_json::from_str(&out).expect("json");
    let a = &cells[0];
    let point = a["tok_s"].as_f64().expect("tok_s");
    let (lo, hi) = (
        a["within_ci"][0].as_f64().expect("lo"),
        a["within_ci"][1].as_f64().expect("hi"),
    );
    assert!(point > 300.0, "{a}");
    assert!(lo < point && point < hi, "{point} not in [{lo}, {hi}]: {a}");
    assert_eq!(a["vs_baseline"]["method"], "baseline", "{a}");
    assert_eq!(a["vs_baseline"]["ratio"], 1.0);

    let (ok, out, err) = report(root, &["-f", "csv", "--baseline", "a"]);
    assert!(ok, "{err}");
    let mut lines = out.lines();
    let head: Vec<&str> = lines.next().expect("header").split(',').collect();
    let row: Vec<&str> = lines.next().expect("row a").split(',').collect();
    let col = |name: &str| row[head.iter().position(|h| *h == name).expect(name)];
    let num = |name: &str| col(name).parse::<f64>().expect(name);
    assert!(num("ci_tokens_lo") < num("avg_ts") && num("avg_ts") < num("ci_tokens_hi"));
    // The baseline against itself: ratio 1, no interval.
    assert_eq!(
        (col("ratio"), col("ratio_lo"), col("ratio_hi")),
        ("1", "", "")
    );
    assert_eq!(col("ratio_method"), "baseline");

    let (ok, md, err) = report(root, &["--baseline", "a"]);
    assert!(ok, "{err}");
    let line = md.lines().find(|l| l.starts_with("| a |")).expect("row a");
    assert!(line.ends_with("| 1 (baseline) |"), "{line}");
    assert!(
        md.contains("CI within runs: an interval for the same mean of per-run tok/s"),
        "{md}"
    );
}

/// A run whose preamble says it was traced (`route_trace=1`, as `bmoe-cli --route-trace`
/// writes it) is listed under "Not averaged" with the key that made it so, never averaged, and
/// a cell of only such runs gets no ratio.
#[test]
fn route_traced_runs_are_not_averaged_and_get_no_ratio() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    write_run(root, "s/a/r1", &[100.0, 100.0], &[80.0, 80.0], 50.0, None);
    write_run(root, "s/a/r2", &[100.0, 100.0], &[80.0, 80.0], 50.0, None);
    let mut traced = RunInfo {
        engine: Some("test-1".into()),
        model: Some("tiny.gguf".into()),
        temp: Some(0.0),
        predict_log: Some(false),
        prefetch_sync: Some(false),
        compute_trace_layers: Some(0),
        ..RunInfo::default()
    };
    traced.extra.insert("route_trace", "1");
    for rep in ["r1", "r2"] {
        write_run_info(
            root,
            &format!("s/b/{rep}"),
            &[5.0, 5.0],
            &[1.0, 1.0],
            90.0,
            &traced,
        );
    }
    let recs = [
        record(0, "a", "r1", false),
        record(1, "b", "r1", false),
        record(2, "a", "r2", false),
        record(3, "b", "r2", false),
    ];
    write_records(root, &recs);

    let (ok, out, err) = report(root, &["-f", "json", "--baseline", "a"]);
    assert!(ok, "{err}");
    let cells: Vec<Value> = serde_json::from_str(&out).expect("json");
    let b = cells.iter().find(|c| c["cell"] == "b").expect("cell b");
    assert_eq!(b["runs"], 0, "{b}");
    let excluded = b["excluded"].as_array().expect("excluded");
    assert_eq!(excluded.len(), 2, "{b}");
    for e in excluded {
        assert!(
            e.as_str().expect("text").contains("traced (route_trace)"),
            "{b}"
        );
    }
    assert!(b["vs_baseline"].is_null(), "{b}");

    let (ok, md, _) = report(root, &[]);
    assert!(ok);
    let not_averaged = md
        .lines()
        .find(|l| l.starts_with("Not averaged:"))
        .unwrap_or_else(|| panic!("no Not averaged line: {md}"));
    assert!(not_averaged.contains("traced (route_trace)"), "{md}");
}

/// `--findings` on an explicit-cells sweep (cells set different axes) of 3 repetitions whose
/// runs disagree: the cells are what varies, axis values sort as numbers, and the caveat does
/// not ask for the 3 repetitions there already were.
#[test]
fn findings_name_explicit_cells_sort_numbers_and_advise_by_cause() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    let cells: [(&str, Value); 4] = [
        ("mmap", json!({})),
        ("c0", json!({"stream": "true", "cache": "0"})),
        ("c16", json!({"stream": "true", "cache": "16"})),
        ("c2", json!({"stream": "true", "cache": "2"})),
    ];
    let mut lines = String::new();
    let mut pos = 0;
    for rep in ["r1", "r2", "r3"] {
        for (cell, axes) in &cells {
            // 1, 10 and 100 tok/s: a t interval over them reaches far below 0.
            let wall = match rep {
                "r1" => 1000.0,
                "r2" => 100.0,
                _ => 10.0,
            };
            write_run(
                root,
                &format!("s/{cell}/{rep}"),
                &[wall; 3],
                &[1.0; 3],
                0.0,
                None,
            );
            let mut rec = record(pos, cell, rep, false);
            rec["axes"] = axes.clone();
            lines.push_str(&format!("{rec}\n"));
            pos += 1;
        }
    }
    std::fs::write(root.join("results.jsonl"), lines).expect("jsonl");
    let (ok, _, err) = report(root, &["--findings"]);
    assert!(ok, "{err}");
    let f = std::fs::read_to_string(root.join("findings.md")).expect("findings.md");
    let varies = f
        .lines()
        .find(|l| l.starts_with("- what varies:"))
        .expect("what varies");
    assert_eq!(
        varies,
        "- what varies: `cache` ∈ {0, 2, 16, (not set)}; `stream` ∈ {true, (not set)} (4 cells: `mmap`, `c0`, `c16`, `c2`)"
    );
    let caveat = f
        .lines()
        .find(|l| l.starts_with("- across-run intervals not reported"))
        .expect("caveat");
    assert!(!caveat.contains("Run at least 3 repetitions"), "{caveat}");
    assert!(
        caveat.contains("The runs disagree too much for a Student-t interval"),
        "{caveat}"
    );
    assert!(f.contains("(3 repetition(s) per cell)"), "{f}");
}
