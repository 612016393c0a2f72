//! The two halves of the toolkit checking each other on real routing: the real Qwen3-30B-A3B
//! route trace (`../shared/realdata/2026-07-15-route-trace/qwen.route.csv`) replayed by
//! `bmoe-cli --route-replay` into a small synthetic model of its shape (48 layers, 128 experts,
//! top-6), against `bmoe-analyze`'s offline predictions for the same routing:
//!
//! - the engine's `cache_hit_pct` at a budget against `bmoe-analyze replay`'s LRU simulation at
//!   that budget, on the run's own route trace;
//! - the engine's `experts_dropped / experts_routed` at `--drop-cold-experts F` against what
//!   `bmoe-analyze drop` predicts at F from the undropped run's trace (`io_saved` × misses).
//!
//! Replay fixes the ids and the weights, so every figure here is deterministic: it depends on
//! the trace and the cache policy, not on the model's random weights.

use bmoe_e2e::workspace_bin;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsReader;
use bmoe_telemetry::trace::{PHASE_DECODE, RouteTraceReader};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Cache budget of every run, MiB: about two token cycles of the test model, where the real
/// routing's hit rate sits near the middle of its curve.
const BUDGET_MIB: &str = "4";

fn real_trace() -> Option<PathBuf> {
    let shared = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let p = shared.join("realdata/2026-07-15-route-trace/qwen.route.csv");
    p.is_file().then_some(p)
}

fn cli_run(cli: &Path, model: &Path, trace: &Path, extra: &[&str], route: &Path, csv: &Path) {
    let out = Command::new(cli)
        .arg("-m")
        .arg(model)
        .args(["-t", "2", "-c", "512", "-p", "Hello", "-n", "400"])
        .args(["--moe-stream", "--cache-mb", BUDGET_MIB, "--route-replay"])
        .arg(trace)
        .arg("--route-trace")
        .arg(route)
        .arg("--csv")
        .arg(csv)
        .args(extra)
        .output()
        .expect("run bmoe-cli");
    assert!(
        out.status.success(),
        "bmoe-cli {extra:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `bmoe-analyze <args>` as a plain CSV table.
fn analyze_csv(bin: &Path, args: &[&str], file: &Path) -> Vec<Vec<String>> {
    let out = Command::new(bin)
        .args(args)
        .arg(file)
        .output()
        .expect("run bmoe-analyze");
    assert!(
        out.status.success(),
        "bmoe-analyze {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

fn trailer_f64(csv: &Path, key: &str) -> f64 {
    let mut r = MetricsReader::open(csv).expect("metrics csv");
    for row in r.by_ref() {
        row.expect("row");
    }
    let t = r.summaries().last().cloned().expect("trailer");
    t.get_f64(key)
        .unwrap_or_else(|| panic!("no {key} in the trailer"))
}

#[test]
fn replayed_real_routing_agrees_with_the_analysis() {
    let (cli, analyzer) = match (workspace_bin("bmoe-cli"), workspace_bin("bmoe-analyze")) {
        (Ok(c), Ok(a)) => (c, a),
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("SKIP replayed_real_routing_agrees_with_the_analysis: {why}");
            return;
        }
    };
    let Some(real) = real_trace() else {
        eprintln!("SKIP replayed_real_routing_agrees_with_the_analysis: no ../shared/realdata");
        return;
    };
    // under the target dir, not /tmp: tmpfs refuses O_DIRECT
    let base: PathBuf = bmoe_e2e::bin_dir().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base).unwrap_or_else(|_| tempfile::tempdir().expect("tmp"));
    let mut o = SynthOptions::preset(Preset::Tiny);
    // the trace's shape; small matrices (2 KiB per expert slice) keep the model at 42 MiB
    (o.n_layer, o.n_expert, o.n_expert_used) = (48, 128, 6);
    (o.n_embd, o.n_ff_exp, o.n_head, o.n_head_kv, o.head_dim) = (64, 32, 2, 1, 32);
    let model = dir.path().join("qwen-shape.gguf");
    let s = write_model(&o, &model).expect("synthesise");
    let p = |n: &str| dir.path().join(n);

    // (a) hit rate: the engine's LRU against the analysis's LRU on the same routings
    let (route, csv) = (p("replay.route.csv"), p("replay.csv"));
    cli_run(&cli, &s.paths[0], &real, &[], &route, &csv);
    let real_ids: Vec<u32> = RouteTraceReader::open(&real)
        .expect("real trace")
        .map(|r| r.expect("row"))
        .filter(|r| r.phase == PHASE_DECODE)
        .map(|r| r.expert)
        .collect();
    let own_ids: Vec<u32> = RouteTraceReader::open(&route)
        .expect("own trace")
        .map(|r| r.expect("row"))
        .filter(|r| r.phase == PHASE_DECODE)
        .map(|r| r.expert)
        .collect();
    assert_eq!(
        own_ids, real_ids,
        "the run routed every decode step as the trace did"
    );
    let engine_hit = trailer_f64(&csv, "cache_hit_pct");
    let v = analyze_csv(
        &analyzer,
        &[
            "replay",
            "--validate",
            BUDGET_MIB,
            "--budgets",
            BUDGET_MIB,
            "--policies",
            "lru",
            "--format",
            "csv",
            "--table",
            "validation",
        ],
        &route,
    );
    let lru_hit: f64 = v[0][2].parse().expect("hit_pct_cum");
    assert!(
        (engine_hit - lru_hit).abs() <= 2.0,
        "engine {engine_hit}% vs LRU replay {lru_hit}%"
    );

    // (b) dropping: the engine's measured drop rate against the static prediction at F
    let phases = analyze_csv(
        &analyzer,
        &["drop", "--format", "csv", "--table", "phases"],
        &route,
    );
    let decode = phases
        .iter()
        .find(|r| r[1] == "decode")
        .expect("decode row");
    let miss_pct: f64 = decode[5].parse().expect("miss_pct");
    let thresholds = analyze_csv(
        &analyzer,
        &["drop", "--format", "csv", "--table", "threshold"],
        &route,
    );
    for f in ["0.5", "0.75"] {
        let row = thresholds
            .iter()
            .find(|r| r[1] == "decode" && r[2].parse::<f64>().ok() == f.parse().ok())
            .expect("threshold row");
        let io_saved: f64 = row[4].parse().expect("io_saved_pct");
        // decode: one token per cell, every miss reads the same bytes → dropped / routed
        let predicted = io_saved * miss_pct / 100.0;
        let (r, c) = (p(&format!("drop{f}.route.csv")), p(&format!("drop{f}.csv")));
        cli_run(
            &cli,
            &s.paths[0],
            &real,
            &["--drop-cold-experts", f],
            &r,
            &c,
        );
        let measured =
            100.0 * trailer_f64(&c, "experts_dropped") / trailer_f64(&c, "experts_routed");
        assert!(
            (measured - predicted).abs() <= 2.0,
            "F={f}: engine dropped {measured:.2}% of routings, analysis predicted {predicted:.2}%"
        );
    }
}
