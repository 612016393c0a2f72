//! A writer process killed with SIGKILL keeps every row it reported written: the metrics
//! writer flushes per row, the trace writer per `flush()` (once per decode).
//!
//! The child is this test binary itself, re-run on the `#[ignore]`d helper below.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use bmoe_telemetry::metrics::{MetricsReader, MetricsWriter, RunInfo, TokenRow};
use bmoe_telemetry::trace::{RouteRow, RouteTraceInfo, RouteTraceReader, TraceWriter};

const ENV_OUT: &str = "BMOE_TELEMETRY_CHILD_OUT";
const ENV_KIND: &str = "BMOE_TELEMETRY_CHILD_KIND";
const ROWS_PER_DECODE: u32 = 6;
/// The helper's path from the crate root, the test binary's crate name included.
const HELPER_PATH: &str = concat!(module_path!(), "::helper_child_writer");

/// Child side: writes forever (bounded), reporting on stdout what is durable so far.
#[test]
#[ignore = "helper: run as a child process by the tests below"]
fn helper_child_writer() {
    let (Some(out), Some(kind)) = (std::env::var_os(ENV_OUT), std::env::var_os(ENV_KIND)) else {
        return;
    };
    let stdout = std::io::stdout();
    if kind == "metrics" {
        let mut w = MetricsWriter::create(&out, &RunInfo::default()).expect("create");
        for i in 1..=100_000u64 {
            w.write_row(&TokenRow {
                step: Some(i),
                wall_ms: Some(i as f64 * 0.5),
                ..TokenRow::default()
            })
            .expect("row");
            // write_row has flushed: this row is in the file now.
            writeln!(stdout.lock(), "durable {i}").expect("stdout");
            std::thread::sleep(Duration::from_millis(2));
        }
    } else {
        let mut w =
            TraceWriter::<_, RouteRow>::create(&out, &RouteTraceInfo::default()).expect("create");
        for step in 0..100_000i64 {
            for slot in 0..ROWS_PER_DECODE {
                w.write_row(&RouteRow {
                    turn: 0,
                    phase: 1,
                    step,
                    layer: 0,
                    slot,
                    expert: slot,
                    weight: 0.5,
                    residency: 1,
                    expert_bytes: 0,
                    dropped: Some(false),
                })
                .expect("row");
            }
            w.flush().expect("flush");
            writeln!(stdout.lock(), "durable {}", step + 1).expect("stdout");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Runs the child until it reports `target` durable units, SIGKILLs it, returns the last
/// count it reported.
fn run_and_kill(kind: &str, out: &std::path::Path, target: u64) -> u64 {
    // The harness names a test by its path without the crate name
    // (`killed_writer::helper_child_writer` in the `it` binary): that is what `--exact` matches.
    let helper = HELPER_PATH
        .split_once("::")
        .map_or(HELPER_PATH, |(_crate, name)| name);
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args(["--ignored", "--exact", helper, "--nocapture"])
        .env(ENV_OUT, out)
        .env(ENV_KIND, kind)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let mut last = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if let Some(n) = line.strip_prefix("durable ") {
            last = n.trim().parse().expect("count");
            if last >= target {
                break;
            }
        }
    }
    child.kill().expect("kill"); // SIGKILL on Unix: no destructor runs, no final flush
    child.wait().expect("wait");
    assert!(last >= target, "child stopped after {last} units");
    last
}

#[test]
fn killed_metrics_writer_keeps_every_reported_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("killed.csv");
    let reported = run_and_kill("metrics", &path, 40);
    let mut r = MetricsReader::open(&path).expect("open");
    let rows: Vec<TokenRow> = r.by_ref().collect::<Result<_, _>>().expect("rows");
    assert!(
        rows.len() as u64 >= reported,
        "{} rows on disk, {reported} reported durable",
        rows.len()
    );
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.step, Some(i as u64 + 1), "rows are contiguous");
    }
    // Each row is written whole, so a kill between rows never leaves half a line.
    assert!(r.truncated().is_none());
}

#[test]
fn killed_trace_writer_keeps_every_flushed_decode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("killed.route.csv");
    let decodes = run_and_kill("route", &path, 30);
    let mut r = RouteTraceReader::open(&path).expect("open");
    let rows: Vec<RouteRow> = r.by_ref().collect::<Result<_, _>>().expect("rows");
    assert!(
        rows.len() as u64 >= decodes * u64::from(ROWS_PER_DECODE),
        "{} rows on disk for {decodes} flushed decodes",
        rows.len()
    );
    assert!(r.truncated().is_none());
}
