//! `bmoe-analyze metrics` on inputs that are not a plain list of good metrics CSVs: a directory
//! of runs without the bench matrix names, files without `wall_ms`, empty files, other traces.

use crate::common::{run, shared_path, text};

use std::path::Path;
use std::process::Output;

const METRICS: &str = "# bmoe_metrics v1\n# model=toy.gguf arch=toy n_layer=2 n_expert=8 n_expert_used=2 threads=4 n_ctx=512\n\
# moe_stream=1 cache_mb=100 dense_weights=anon\n\
step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n\
1,3,100.0,1.0,50.0,0,0.0,0.0\n2,3,200.0,1.0,50.0,0,0.0,0.0\n3,3,300.0,1.0,50.0,0,0.0,0.0\n";

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write temp file");
    p.display().to_string()
}

/// Failure on stderr with the message and a hint, nothing on stdout.
fn assert_fails(out: &Output, message: &str, hint: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        out.stdout.is_empty(),
        "no partial output: {}",
        text(&out.stdout)
    );
    assert!(err.contains(message), "{err}");
    assert!(err.contains(&format!("\nhint: {hint}")), "{err}");
}

#[test]
fn a_directory_of_runs_without_matrix_names_is_reported_run_by_run() {
    let Some(dir) = shared_path("realdata/2026-07-20-cache-replay") else {
        return;
    };
    let d = dir.display().to_string();
    let out = run(&["metrics", &d]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("====="), "no empty bench tables: {stdout}");
    for run in [
        "qwen-lru_a.csv",
        "qwen-lru_b.csv",
        "qwen-lfu_a.csv",
        "qwen-lfu_b.csv",
        "cliff_k4_c1500.csv",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.ends_with(run) && l.contains(" 256 ")),
            "{run} reported with its 256 tokens: {stdout}"
        );
    }
    assert!(err.contains("no bench matrix run"), "{err}");
    assert!(err.contains("skipping") && err.contains("qwen-curve.csv: not a metrics CSV"));
    let json = run(&["metrics", &d, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(8), "{v:#}");
    let md = run(&["metrics", &d, "--markdown", "/nonexistent/x.md"]);
    assert_fails(&md, "no bench matrix run", "leave out --markdown");
}

#[test]
fn toy_directory_runs_and_directories_without_metrics_fail() {
    let d = tempfile::tempdir().expect("tempdir");
    write(d.path(), "a.csv", METRICS);
    write(d.path(), "notes.csv", "x,y\n1,2\n");
    let out = run(&["metrics", &d.path().display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("200.00") && stdout.contains("a.csv"),
        "{stdout}"
    );

    let only_other = tempfile::tempdir().expect("tempdir");
    write(only_other.path(), "notes.csv", "x,y\n1,2\n");
    let out = run(&["metrics", &only_other.path().display().to_string()]);
    assert_fails(
        &out,
        "none of its CSV files is a metrics CSV",
        "pass a directory of bmoe metrics CSVs",
    );
}

#[test]
fn missing_wall_ms_empty_files_and_trim_name_the_file_and_the_cause() {
    let d = tempfile::tempdir().expect("tempdir");
    let nowall = METRICS
        .replace("steps,wall_ms,", "steps,")
        .replace(",3,100.0,", ",3,")
        .replace(",3,200.0,", ",3,")
        .replace(",3,300.0,", ",3,");
    let p = write(d.path(), "nowall.csv", &nowall);
    assert_fails(
        &run(&["metrics", &p]),
        &format!("{p}: the header has no `wall_ms` column; metrics needs each token's wall time"),
        "pass a bmoe metrics CSV",
    );
    let e = write(d.path(), "empty.csv", "");
    assert_fails(
        &run(&["metrics", &e]),
        &format!("{e}: no header and no token rows"),
        "pass the metrics CSV of a run that generated tokens",
    );
    let header_only: String = METRICS.lines().take(4).map(|l| format!("{l}\n")).collect();
    let h = write(d.path(), "header.csv", &header_only);
    assert_fails(
        &run(&["metrics", &h]),
        &format!("{h}: no token rows"),
        "pass the metrics CSV of a run that generated tokens",
    );
    let good = write(d.path(), "good.csv", METRICS);
    assert_fails(
        &run(&["metrics", &good, "--trim", "3"]),
        &format!("{good}: --trim 3 drops all 3 token rows"),
        "use a --trim below 3",
    );
    // One bad file among good ones fails too (never a partial table).
    assert_fails(
        &run(&["metrics", &good, &p]),
        "no `wall_ms` column",
        "pass a bmoe metrics CSV",
    );
    // --compare names the file the same way.
    assert_fails(
        &run(&["metrics", "--compare", &good, &p]),
        &format!("{p}: the header has no `wall_ms` column"),
        "pass a bmoe metrics CSV",
    );
}

#[test]
fn a_route_trace_given_to_metrics_points_to_the_route_command() {
    let d = tempfile::tempdir().expect("tempdir");
    let route = write(
        d.path(),
        "t.route.csv",
        "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer=1 n_expert=8 n_expert_used=2\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n0,1,0,0,0,1,0.5,0,1\n",
    );
    assert_fails(
        &run(&["metrics", &route]),
        &format!("{route}: this is a route trace, not a metrics CSV"),
        &format!("read it with `bmoe-analyze route {route}` (or `replay` / `drop`)"),
    );
    let io = write(d.path(), "x.io.csv", "# io_trace v1\n");
    assert_fails(
        &run(&["metrics", "--compare", &io, &route]),
        "this is an io trace",
        &format!("read it with `bmoe-analyze io {io}`"),
    );
    if let Some(q) = shared_path("realdata/2026-07-15-route-trace/qwen.route.csv") {
        let q = q.display().to_string();
        assert_fails(
            &run(&["metrics", &q]),
            "this is a route trace, not a metrics CSV",
            &format!("read it with `bmoe-analyze route {q}`"),
        );
    }
}

#[test]
fn an_empty_directory_is_an_error_naming_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let shown = d.path().display().to_string();
    assert_fails(
        &run(&["metrics", &shown]),
        &format!(
            "{shown}: no *.csv file in this directory or its subdirectories; it holds nothing (an empty directory)"
        ),
        "pass a bench-analyze session directory (<model>_<config>.csv files), metrics CSV files, or a directory holding them",
    );
    // The same directory among other paths fails the same way.
    let other = tempfile::tempdir().expect("tempdir");
    let run_csv = write(other.path(), "run.csv", METRICS);
    assert_fails(
        &run(&["metrics", &run_csv, &shown]),
        "no *.csv file in this directory or its subdirectories",
        "pass a bench-analyze session directory",
    );
}

/// A `bmoe-bench sweep` results directory: the top-level files and two runs of one cell, plus
/// a run in flight (`.r3.tmp`) that must not be read.
fn bench_results(with_runs: bool) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    for f in ["results.jsonl", "manifest.toml", "plan.json"] {
        write(d.path(), f, "");
    }
    if with_runs {
        for (rep, body) in [
            ("r1", METRICS.to_string()),
            ("r2", METRICS.replace("300.0", "600.0")),
            (".r3.tmp", "garbage".to_string()),
        ] {
            let run = d.path().join("decode/c1000").join(rep);
            std::fs::create_dir_all(&run).expect("mkdir");
            write(&run, "metrics.csv", &body);
            write(&run, "stdout.txt", "tokens\n");
        }
    } else {
        std::fs::create_dir_all(d.path().join("decode/c1000")).expect("mkdir");
    }
    d
}

#[test]
fn a_bench_results_directory_reports_its_runs_and_points_to_bmoe_bench_report() {
    let d = bench_results(true);
    let shown = d.path().display().to_string();
    let out = run(&["metrics", &shown]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("====="), "no empty bench tables: {stdout}");
    let runs: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("metrics.csv"))
        .collect();
    assert_eq!(runs.len(), 2, "{stdout}");
    assert!(
        runs[0].contains(&format!("  {shown}/decode/c1000/r1/metrics.csv")),
        "{stdout}"
    );
    assert!(
        runs[0].contains(" 200.00 "),
        "mean of 100, 200, 300: {stdout}"
    );
    assert!(
        runs[1].contains("/r2/metrics.csv") && runs[1].contains(" 300.00 "),
        "{stdout}"
    );
    assert!(
        !err.contains(".r3.tmp"),
        "a run in flight is not read: {err}"
    );
    assert!(
        err.contains(&format!(
            "note: {shown}: no CSV file in the directory itself; reporting the 2 CSV file(s) of its subdirectories run by run; for per-cell means across repetitions (warm-ups left out) use `bmoe-bench report {shown}`"
        )),
        "{err}"
    );
    // The bench markdown needs matrix files.
    assert_fails(
        &run(&["metrics", &shown, "--markdown", "/nonexistent/x.md"]),
        "CSV file(s) in its subdirectories",
        "leave out --markdown",
    );
    // No finished run yet: say what is there and point to bmoe-bench.
    let empty = bench_results(false);
    let shown = empty.path().display().to_string();
    assert_fails(
        &run(&["metrics", &shown]),
        &format!(
            "{shown}: no *.csv file in this directory or its subdirectories; it holds 1 subdirectory, 3 other files (manifest.toml, plan.json, results.jsonl)"
        ),
        &format!(
            "this is a bmoe-bench results directory without finished runs; once runs have written their metrics.csv, `bmoe-bench report {shown}` gives the per-cell table"
        ),
    );
}
