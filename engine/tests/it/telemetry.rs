//! Telemetry and memory-policy tests on real runs of `bmoe-cli` over models synthesised at test
//! time: every CSV column and summary key exists and parses with `bmoe-telemetry`, the figures
//! obey the seed's invariants, `--cache-mb auto` stays inside a memory cgroup, the dense-weight
//! policies keep byte-identity, and `--n-expert-used` / `--load-all` change what is read.

use crate::cgroup::TestCgroup;
use bmoe_gguf::GgmlType;
use bmoe_gguf::ModelInfo;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::{MetricsFile, RunInfo, TOKEN_COLUMNS};
use bmoe_telemetry::protocol::{LineKind, Record, parse_line};
use bmoe_telemetry::summary::PerfReport;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const MIB: f64 = 1024.0 * 1024.0;

struct Model {
    path: PathBuf,
    info: ModelInfo,
}

struct Models {
    dir: tempfile::TempDir,
    tiny: Model,
    /// F32 experts, 32 per layer, 4 layers: ~100 MiB of experts (for the cgroup test).
    wide: Model,
}

fn synth(dir: &Path, name: &str, edit: impl FnOnce(&mut SynthOptions)) -> Model {
    let mut o = SynthOptions::preset(Preset::Tiny);
    edit(&mut o);
    let s = write_model(&o, &dir.join(name)).expect("synthesise model");
    Model {
        path: s.paths[0].clone(),
        info: s.info,
    }
}

fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        // under the target dir, not /tmp: tmpfs refuses O_DIRECT
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let tiny = synth(dir.path(), "tiny.gguf", |_| {});
        let wide = synth(dir.path(), "wide.gguf", |o| {
            o.expert_type = GgmlType::F32;
            o.n_expert = 32;
            o.n_layer = 4;
        });
        Models { dir, tiny, wide }
    })
}

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
}

const BASE: [&str; 8] = [
    "-p",
    "Hello world, telemetry",
    "-t",
    "2",
    "-c",
    "256",
    "-n",
    "12",
];

fn run(model: &Path, extra: &[&str]) -> Output {
    cli()
        .arg("-m")
        .arg(model)
        .args(BASE)
        .args(extra)
        .output()
        .expect("run bmoe-cli")
}

fn ok(out: &Output, what: &str) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what} failed:\n{stderr}");
    (stdout, stderr)
}

fn csv_path(name: &str) -> PathBuf {
    models().dir.path().join(name)
}

fn logits(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("logits-hash "))
        .collect()
}

/// The keys the `# summary` trailer carries on every plain or streamed run.
const SUMMARY_KEYS: [&str; 27] = [
    "tokens",
    "s/tok",
    "tok/s",
    "read_MiB",
    "io_s",
    "compute_s/tok",
    "io_s/tok",
    "cache_hit_pct",
    "n_prompt",
    "load_s",
    "prefill_s",
    "prefill_tps",
    "stall_s/tok",
    "mgmt_s/tok",
    "cache_resident_MiB",
    "cache_budget_MiB",
    "cache_resizes",
    "majflt/tok",
    "cpu_s/tok",
    "loop_overhead_s/tok",
    "evictions",
    "rereads",
    "prefill_cpu_s",
    "prefill_read_mib",
    "prefill_io_s",
    "prefill_stall_s",
    "prefill_mgmt_s",
];

fn every_preamble_key_is_set(info: &RunInfo) {
    // RunInfo writes only keys that are set: re-render and look for each known key
    let lines = info.to_lines().expect("preamble renders").join(" ");
    for keys in RunInfo::KEY_LINES {
        for k in *keys {
            assert!(
                lines.contains(&format!(" {k}=")),
                "preamble lacks {k}: {lines}"
            );
        }
    }
}

#[test]
fn streamed_csv_has_every_column_and_key_and_obeys_the_invariants() {
    let m = &models().tiny;
    let path = csv_path("stream.csv");
    let out = run(
        &m.path,
        &[
            "--moe-stream",
            "--cache-mb",
            "1",
            "--io-threads",
            "2",
            "--progress",
            "--csv",
            path.to_str().unwrap(),
        ],
    );
    let (stdout, _) = ok(&out, "streamed run");
    let f = MetricsFile::read(&path).expect("CSV parses");
    assert!(f.truncated.is_none());
    assert_eq!(f.header, TOKEN_COLUMNS.map(String::from).to_vec());
    every_preamble_key_is_set(&f.info);
    assert_eq!(f.info.moe_stream, Some(true));
    assert_eq!(f.info.cache_mb, Some(1));
    assert_eq!(f.info.n_expert_used, Some(u64::from(m.info.n_expert_used)));
    let cycle = m.info.cache_cycle_bytes as f64 / MIB;
    assert_eq!(f.info.cache_cycle_mb, Some(cycle.ceil() as u64));
    assert!(f.info.engine.as_deref().is_some_and(|e| !e.is_empty()));

    // one row per token, every cell filled
    let progress: Vec<_> = stdout
        .lines()
        .filter_map(|l| match parse_line(l) {
            LineKind::Record(Record::Progress(p)) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(f.rows.len(), progress.len());
    assert!(!f.rows.is_empty());
    for (i, r) in f.rows.iter().enumerate() {
        for col in TOKEN_COLUMNS {
            assert!(r.get_f64(col).is_some(), "row {i} column {col} is empty");
        }
        let v = |c: &str| r.get_f64(c).unwrap();
        assert_eq!(v("step") as usize, i + 1);
        assert!(
            v("io_ms") <= v("wall_ms") + 1e-3,
            "serial io_ms > wall_ms: {r:?}"
        );
        assert!(v("compute_ms") >= 0.0);
        let hit = v("cache_hit_pct");
        assert!((0.0..=100.0).contains(&hit), "hit% {hit}");
        assert_eq!(v("stall_ms"), 0.0);
        let frac = v("dense_resident_frac");
        assert!(frac == -1.0 || (0.0..=1.0).contains(&frac));
        if cfg!(target_os = "linux") {
            for c in [
                "rss_mib",
                "rss_anon_mib",
                "rss_file_mib",
                "mem_available_mib",
            ] {
                assert!(v(c) > 0.0, "{c} = 0 on Linux");
            }
            assert!(v("rss_mib") >= v("rss_anon_mib"));
            assert!(frac > 0.0, "the dense probe runs on Linux");
        }
        assert_eq!(v("cache_budget_mib"), 1.0);
        assert_eq!(v("mtp_batch"), 1.0);
        assert!(v("loop_overhead_ms") >= 0.0);
        // the wire carries the same token
        let p = &progress[i];
        assert_eq!(p.step, i as u64 + 1);
        assert!((p.wall_ms - v("wall_ms")).abs() <= 0.051);
    }

    // Σ read_bytes = the moe-stream: MiB = the trailer's read_MiB
    let perf = PerfReport::parse(&stdout);
    let stream = perf.moe_stream.expect("moe-stream: line");
    let sum: u64 = f.rows.iter().map(|r| r.read_bytes.unwrap()).sum();
    assert!((sum as f64 / MIB - stream.read_mib).abs() <= 0.05 + 1e-9);
    let t = f.summaries.last().expect("# summary trailer");
    for k in SUMMARY_KEYS {
        assert!(t.get_f64(k).is_some(), "trailer lacks {k}: {t:?}");
    }
    assert!((t.get_f64("read_MiB").unwrap() - sum as f64 / MIB).abs() <= 0.05 + 1e-9);
    assert_eq!(t.get_u64("tokens"), Some(f.rows.len() as u64));
    // one decode routes top-k distinct experts per layer
    let per_layer: Vec<u64> = m.info.layers.iter().map(|l| l.expert_bytes).collect();
    let k = u64::from(m.info.n_expert_used);
    let demand = t.get_f64("token_demand_MiB").expect("token_demand_MiB");
    let want = per_layer.iter().sum::<u64>() * k;
    assert!(
        (demand - want as f64 / MIB).abs() <= 0.05,
        "{demand} vs {want}"
    );
    let widest = t.get_f64("layer_demand_MiB").expect("layer_demand_MiB");
    assert!((widest - (per_layer.iter().max().unwrap() * k) as f64 / MIB).abs() <= 0.05);
    let mode = perf.mode.expect("mode: line").to_string();
    assert_eq!(mode, "mode: expert streaming, cache 1 MiB, dense mmap");
    assert!(perf.compute.is_some() && perf.prefill.is_some());
}

#[test]
fn plain_run_csv_marks_streaming_off() {
    let m = &models().tiny;
    let path = csv_path("plain.csv");
    let out = run(&m.path, &["--csv", path.to_str().unwrap()]);
    let (stdout, _) = ok(&out, "plain run");
    let f = MetricsFile::read(&path).expect("CSV parses");
    every_preamble_key_is_set(&f.info);
    assert_eq!(f.info.moe_stream, Some(false));
    assert_eq!(f.info.o_direct, Some(false));
    for r in &f.rows {
        assert_eq!(r.cache_hit_pct, Some(-1.0));
        assert_eq!(r.read_bytes, Some(0));
        assert_eq!(r.io_ms, Some(0.0));
        assert_eq!(r.dense_resident_frac.map(|f| f > 0.0), Some(true));
    }
    let mode = PerfReport::parse(&stdout).mode.expect("mode:").to_string();
    assert!(mode.contains("--moe-stream"), "{mode}");
    assert!(PerfReport::parse(&stdout).moe_stream.is_none());
}

#[test]
fn n_expert_used_changes_the_routing_width_and_is_bounded() {
    let m = &models().tiny;
    let per_token = |k: Option<&str>, load_all: bool| -> (u64, Vec<u64>) {
        let path = csv_path(&format!("k{}-{load_all}.csv", k.unwrap_or("d")));
        let mut args = vec![
            "--moe-stream",
            "--cache-mb",
            "0",
            "--csv",
            path.to_str().unwrap(),
        ];
        if let Some(k) = k {
            args.extend(["--n-expert-used", k]);
        }
        if load_all {
            args.push("--load-all");
        }
        ok(&run(&m.path, &args), "routing-width run");
        let f = MetricsFile::read(&path).unwrap();
        (
            f.info.n_expert_used.unwrap(),
            f.rows.iter().map(|r| r.read_bytes.unwrap()).collect(),
        )
    };
    // cache off: every token reads top-k experts in every layer (slices are page aligned)
    let per_expert: u64 = m.info.layers.iter().map(|l| l.expert_bytes).sum();
    let (k_default, rows) = per_token(None, false);
    assert_eq!(k_default, u64::from(m.info.n_expert_used));
    assert!(
        rows.iter().all(|&b| b == k_default * per_expert),
        "{rows:?}"
    );
    let (k1, rows1) = per_token(Some("1"), false);
    assert_eq!(k1, 1);
    assert!(rows1.iter().all(|&b| b == per_expert), "{rows1:?}");
    let (_, all) = per_token(None, true);
    let n = u64::from(m.info.n_expert);
    assert!(all.iter().all(|&b| b == n * per_expert), "{all:?}");

    let too_many = (m.info.n_expert + 1).to_string();
    let out = run(&m.path, &["--n-expert-used", &too_many]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "exceeds the model's expert count ({})",
            m.info.n_expert
        )) && err.contains("hint:"),
        "{err}"
    );
}

#[test]
fn dense_weight_policies_keep_byte_identity() {
    let m = &models().tiny;
    let reference = {
        let out = run(&m.path, &["--dump-logits-hash"]);
        let (_, err) = ok(&out, "resident run");
        logits(&err).join("\n")
    };
    assert!(!reference.is_empty());
    for dense in ["mmap", "warm", "anon"] {
        let out = run(
            &m.path,
            &[
                "--moe-stream",
                "--cache-mb",
                "1",
                "--dense-weights",
                dense,
                "--dump-logits-hash",
            ],
        );
        let (stdout, err) = ok(&out, dense);
        assert_eq!(
            logits(&err).join("\n"),
            reference,
            "--dense-weights {dense}"
        );
        let mode = PerfReport::parse(&stdout).mode.unwrap().to_string();
        assert!(mode.ends_with(&format!("dense {dense}")), "{mode}");
        if dense == "anon" {
            assert!(err.contains("dense-weights=anon"), "{err}");
        }
    }
    let out = run(&m.path, &["--moe-stream", "--dense-weights", "ahwb"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Android only"));
}

#[test]
fn chatml_renders_the_models_template() {
    let m = &models().tiny;
    for (flags, tail) in [
        (&["--chatml"][..], "<|im_start|>assistant\n"),
        (
            &["--chatml", "--no-think"][..],
            "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        ),
    ] {
        let out = run(&m.path, flags);
        let (stdout, _) = ok(&out, "chatml run");
        let expected = format!("<|im_start|>user\nHello world, telemetry<|im_end|>\n{tail}");
        assert!(stdout.starts_with(&expected), "{flags:?}: {stdout:?}");
    }
}

#[test]
fn auto_cache_inside_a_memory_cgroup_stays_below_its_limit() {
    let m = &models().wide;
    let total_experts =
        m.info.layers.iter().map(|l| l.expert_bytes).sum::<u64>() * u64::from(m.info.n_expert);
    let limit: u64 = 160 << 20;
    assert!(
        total_experts > limit / 2,
        "the model must be big enough to matter"
    );
    let cg = match TestCgroup::create("auto-cache", limit) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: cannot make a memory cgroup here ({why})");
            return;
        }
    };
    let path = csv_path("auto.csv");
    let out = cg
        .command(Path::new(env!("CARGO_BIN_EXE_bmoe-cli")))
        .arg("-m")
        .arg(&m.path)
        .args(BASE)
        .args([
            "--moe-stream",
            "--cache-mb",
            "auto",
            "--cache-floor-mb",
            "32",
            "--csv",
            path.to_str().unwrap(),
        ])
        .output()
        .expect("run bmoe-cli in the cgroup");
    let (stdout, stderr) = ok(&out, "auto-cache run inside the cgroup");
    assert!(
        stderr.contains("memory cgroup limit"),
        "auto did not see the cgroup: {stderr}"
    );
    let f = MetricsFile::read(&path).unwrap();
    assert_eq!(f.info.cache_auto, Some(true));
    assert_eq!(
        f.info.extra.get("cgroup_limit_mb"),
        Some((limit >> 20).to_string().as_str())
    );
    let usage = f.summaries[0]
        .get_f64("cgroup_usage_MiB")
        .expect("cgroup usage");
    assert!(usage > 0.0 && usage <= (limit >> 20) as f64);
    let budget = f.info.cache_mb.unwrap();
    assert!(budget > 0, "{stderr}");
    assert!(
        budget * 1024 * 1024 + (32 << 20) <= limit,
        "budget {budget} MiB + floor exceeds the {} MiB limit",
        limit >> 20
    );
    assert!(
        f.rows
            .iter()
            .all(|r| r.cache_budget_mib == Some(budget as f64))
    );
    let cache = PerfReport::parse(&stdout)
        .moe_cache
        .expect("moe-cache: line");
    assert_eq!(cache.budget_mib, Some(budget as f64));
    let mode = PerfReport::parse(&stdout).mode.unwrap().to_string();
    assert!(mode.contains("cache auto"), "{mode}");
}

/// The tokens a run generated, from its `--dump-logits-hash` lines (`token=<id>` per step).
fn tokens(stderr: &str) -> Vec<String> {
    logits(stderr)
        .iter()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("token=")))
        .map(str::to_string)
        .collect()
}

#[test]
fn sampled_run_records_its_seed_and_the_seed_reproduces_it() {
    let m = &models().tiny;
    let sampled = ["--temp", "0.8", "--ignore-eos", "--dump-logits-hash"];
    let first = csv_path("seed-drawn.csv");
    let mut args = sampled.to_vec();
    args.extend(["--csv", first.to_str().unwrap()]);
    let (_, err1) = ok(&run(&m.path, &args), "sampled run without --seed");
    let text = std::fs::read_to_string(&first).unwrap();
    // the preamble prints the floats as typed, not their f32 binary expansion
    assert!(
        text.contains("# temp=0.8 top_k=40 top_p=0.95 seed="),
        "{text}"
    );
    let seed = MetricsFile::read(&first).unwrap().info.seed.expect("seed=");
    assert_ne!(
        seed,
        u64::from(u32::MAX),
        "the seed llama.cpp drew is not recorded"
    );
    let drawn = tokens(&err1);
    assert_eq!(drawn.len(), 12, "{err1}");

    let again = csv_path("seed-given.csv");
    let seed_arg = seed.to_string();
    let mut args = sampled.to_vec();
    args.extend(["--seed", &seed_arg, "--csv", again.to_str().unwrap()]);
    let (_, err2) = ok(&run(&m.path, &args), "re-run with the recorded --seed");
    assert_eq!(
        tokens(&err2),
        drawn,
        "--seed {seed} did not reproduce the run"
    );
    assert_eq!(MetricsFile::read(&again).unwrap().info.seed, Some(seed));
}

#[test]
fn dense_probe_time_counts_as_cache_management() {
    // a plain run: the streamer manages nothing, so a row's mgmt_ms is the dense probe alone
    let m = &models().tiny;
    let path = csv_path("probe-mgmt.csv");
    let out = run(&m.path, &["--ignore-eos", "--csv", path.to_str().unwrap()]);
    ok(&out, "plain run with --csv");
    let f = MetricsFile::read(&path).unwrap();
    assert_eq!(f.rows.len(), 12);
    for r in &f.rows {
        let step = r.step.unwrap();
        let mgmt = r.mgmt_ms.unwrap();
        // probed on tokens 1, 9, … (every 8th): those rows carry its time, the rest none
        if (step - 1) % 8 == 0 {
            assert!(r.dense_resident_frac.unwrap() >= 0.0, "step {step} probed");
            assert!(
                mgmt > 0.0,
                "step {step}: the probe's time is not in mgmt_ms"
            );
            let wall = r.wall_ms.unwrap();
            assert!(
                mgmt <= wall,
                "step {step}: mgmt {mgmt} ms outside wall {wall} ms"
            );
        } else {
            assert_eq!(mgmt, 0.0, "step {step}");
        }
    }
    let probed: f64 = f.rows.iter().map(|r| r.mgmt_ms.unwrap()).sum();
    let trailer = f.summaries[0].get_f64("mgmt_s/tok").unwrap();
    // the trailer's mean over 12 tokens, at its 3 decimals
    assert!(
        (trailer - probed / 1e3 / 12.0).abs() <= 0.0005,
        "{trailer} vs {probed} ms"
    );
}
