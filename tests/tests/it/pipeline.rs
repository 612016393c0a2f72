//! What `bmoe-cli` writes, the other programs read: a streamed run of a synthetic model, its
//! protocol lines parsed with `bmoe-telemetry`, and its metrics CSV analysed by `bmoe-analyze`
//! with figures that must agree with the file itself.

use bmoe_e2e::workspace_bin;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::protocol::{LineKind, Record, parse_line};
use std::process::Command;

const TOKENS: usize = 8;

#[test]
fn engine_csv_and_protocol_feed_the_analyzer() {
    let (cli, analyze) = match (workspace_bin("bmoe-cli"), workspace_bin("bmoe-analyze")) {
        (Ok(c), Ok(a)) => (c, a),
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("SKIP engine_csv_and_protocol_feed_the_analyzer: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("tiny.gguf");
    let summary = write_model(&SynthOptions::preset(Preset::Tiny), &model).expect("synthesise");
    let csv = dir.path().join("run.csv");

    let out = Command::new(&cli)
        .arg("-m")
        .arg(&summary.paths[0])
        .args(["--moe-stream", "--cache-mb", "1", "-t", "2", "-c", "256"])
        .args([
            "-p",
            "The quick brown fox",
            "-n",
            &TOKENS.to_string(),
            "--progress",
            "--ignore-eos",
        ])
        .arg("--csv")
        .arg(&csv)
        .output()
        .expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bmoe-cli failed:\n{stderr}");

    // Every protocol line parses; one BMOE_PROGRESS per token, steps 1..=TOKENS.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut steps = Vec::new();
    let mut read_mb_wire = 0.0;
    for line in stdout.lines().filter(|l| l.starts_with("BMOE_")) {
        match parse_line(line) {
            LineKind::Record(Record::Progress(p)) => {
                steps.push(p.step);
                read_mb_wire += p.read_mb;
            }
            LineKind::Record(_) => {}
            other => panic!("not a valid protocol line: {line:?} -> {other:?}"),
        }
    }
    assert_eq!(steps, (1..=TOKENS as u64).collect::<Vec<_>>());

    // The CSV holds the same tokens, and its bytes agree with what the wire said.
    let file = MetricsFile::read(&csv).expect("engine CSV reads with bmoe-telemetry");
    assert_eq!(file.rows.len(), TOKENS);
    let walls: Vec<f64> = file
        .rows
        .iter()
        .map(|r| r.wall_ms.expect("wall_ms column"))
        .collect();
    let read_mib_csv: f64 = file
        .rows
        .iter()
        .map(|r| r.read_bytes.expect("read_bytes column") as f64)
        .sum::<f64>()
        / (1024.0 * 1024.0);
    // BMOE_PROGRESS rounds read_mb to 0.1 MiB per token.
    assert!(
        (read_mib_csv - read_mb_wire).abs() <= 0.05 * TOKENS as f64 + 1e-9,
        "CSV reads {read_mib_csv} MiB, protocol {read_mb_wire} MiB"
    );

    // bmoe-analyze reads the engine's file and reports the mean token time the file holds.
    let out = Command::new(&analyze)
        .arg("metrics")
        .arg(&csv)
        .args(["--format", "json"])
        .output()
        .expect("run bmoe-analyze");
    assert!(
        out.status.success(),
        "bmoe-analyze metrics failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let run = &report[0];
    assert_eq!(run["tokens"].as_u64(), Some(TOKENS as u64));
    let mean = walls.iter().sum::<f64>() / walls.len() as f64;
    let reported = run["mean_ms_per_token"]
        .as_f64()
        .expect("mean_ms_per_token");
    assert!(
        (reported - mean).abs() <= 1e-6 * mean.max(1.0),
        "analyzer mean {reported} ms vs file {mean} ms"
    );
    let (low, high) = (
        run["ci95_low_ms"].as_f64().expect("ci low"),
        run["ci95_high_ms"].as_f64().expect("ci high"),
    );
    assert!(
        low <= reported && reported <= high,
        "CI [{low}, {high}] excludes {reported}"
    );
    assert_eq!(run["instrumented"].as_bool(), Some(false));
    assert_eq!(run["stochastic"].as_bool(), Some(false));
}
