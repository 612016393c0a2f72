//! Byte-identity gates: a streamed run must produce the same token ids AND the same logits (hash
//! of every step's logits) as the resident run, on models bmoe-gguf synthesises at test time.
//! Plus the negative controls that prove the gate can fail, and the failure paths.

use bmoe_gguf::GgmlType;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::protocol::{LineKind, Record, parse_line};
use bmoe_telemetry::summary::PerfReport;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub(crate) const PROMPT: &str = "Hello world, this is a streaming test.";

pub(crate) struct Models {
    _dir: tempfile::TempDir,
    pub(crate) q8: PathBuf,
    pub(crate) f32: PathBuf,
    pub(crate) q4k: PathBuf,
    pub(crate) split3: PathBuf,
    pub(crate) qwen2moe: PathBuf,
    pub(crate) gpt_oss: PathBuf,
    pub(crate) gemma4: PathBuf,
    pub(crate) lfm2moe: PathBuf,
    pub(crate) qwen35moe: PathBuf,
    pub(crate) deepseek4: PathBuf,
    pub(crate) bailingmoe3: PathBuf,
}

fn synth(dir: &Path, name: &str, preset: Preset, edit: impl FnOnce(&mut SynthOptions)) -> PathBuf {
    let mut o = SynthOptions::preset(preset);
    edit(&mut o);
    let s = write_model(&o, &dir.join(name)).expect("synthesise model");
    s.paths[0].clone()
}

/// Every test model, built once per test binary.
pub(crate) fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        // under the target dir, not /tmp: tmpfs refuses O_DIRECT, which would make that gate vacuous
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let d = dir.path();
        Models {
            q8: synth(d, "tiny-q8.gguf", Preset::Tiny, |o| {
                o.expert_type = GgmlType::Q8_0
            }),
            f32: synth(d, "tiny-f32.gguf", Preset::Tiny, |o| {
                o.expert_type = GgmlType::F32
            }),
            q4k: synth(d, "tiny-q4k.gguf", Preset::Tiny, |o| {
                o.expert_type = GgmlType::Q4_K
            }),
            split3: synth(d, "tiny-split.gguf", Preset::Tiny, |o| o.n_split = 3),
            qwen2moe: synth(d, "qwen2moe.gguf", Preset::Qwen2MoeTiny, |_| {}),
            gpt_oss: synth(d, "gpt-oss.gguf", Preset::GptOssTiny, |_| {}),
            gemma4: synth(d, "gemma4.gguf", Preset::Gemma4Tiny, |_| {}),
            lfm2moe: synth(d, "lfm2moe.gguf", Preset::Lfm2MoeTiny, |_| {}),
            qwen35moe: synth(d, "qwen35moe.gguf", Preset::Qwen35MoeTiny, |_| {}),
            deepseek4: synth(d, "deepseek4.gguf", Preset::DeepSeek4Tiny, |_| {}),
            bailingmoe3: synth(d, "bailingmoe3.gguf", Preset::BailingMoe3Tiny, |_| {}),
            _dir: dir,
        }
    })
}

pub(crate) fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
}

pub(crate) fn run(model: &Path, extra: &[&str]) -> Output {
    run_env(model, extra, &[])
}

/// [`run`] with the environment variables `env` set.
pub(crate) fn run_env(model: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    cli()
        .envs(env.iter().copied())
        .arg("-m")
        .arg(model)
        .args([
            "-p",
            PROMPT,
            "-n",
            "12",
            "-t",
            "2",
            "-c",
            "256",
            "--dump-logits-hash",
        ])
        .args(extra)
        .output()
        .expect("run bmoe-cli")
}

/// (token, logits hash) per step, from a successful run.
pub(crate) fn trace(model: &Path, extra: &[&str]) -> (Vec<(String, String)>, String) {
    let (steps, stdout, _) = trace_full(model, extra);
    (steps, stdout)
}

/// The prefill chunk a streamed run announced on stderr (`prefill split into decodes of ≤N
/// tokens`), when its cache could not hold a whole layer's experts.
fn split_chunk(stderr: &str) -> Option<u32> {
    let rest = stderr.split("prefill split into decodes of ≤").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The resident run a streamed run must equal: same batches, so `--ubatch` = the smaller of the
/// streamed run's own `--ubatch` and its announced prefill chunk.
pub(crate) fn resident_args(streamed_args: &[&str], streamed_stderr: &str) -> Vec<String> {
    let own = streamed_args
        .iter()
        .position(|&a| a == "--ubatch")
        .and_then(|i| streamed_args.get(i + 1))
        .and_then(|v| v.parse::<u32>().ok());
    match (own, split_chunk(streamed_stderr)) {
        (Some(a), Some(b)) => vec!["--ubatch".into(), a.min(b).to_string()],
        (Some(u), None) | (None, Some(u)) => vec!["--ubatch".into(), u.to_string()],
        (None, None) => Vec::new(),
    }
}

/// [`trace`] plus stderr.
pub(crate) fn trace_full(model: &Path, extra: &[&str]) -> (Vec<(String, String)>, String, String) {
    trace_full_env(model, extra, &[])
}

/// [`trace_full`] with the environment variables `env` set.
pub(crate) fn trace_full_env(
    model: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Vec<(String, String)>, String, String) {
    let out = run_env(model, extra, env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "bmoe-cli {extra:?} failed:\n{stderr}");
    let steps: Vec<(String, String)> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("logits-hash "))
        .map(|l| {
            let mut tok = String::new();
            let mut hash = String::new();
            for kv in l.split_whitespace() {
                if let Some(v) = kv.strip_prefix("token=") {
                    tok = v.to_string();
                } else if let Some(v) = kv.strip_prefix("hash=") {
                    hash = v.to_string();
                }
            }
            (tok, hash)
        })
        .collect();
    assert!(!steps.is_empty(), "no logits hashes in:\n{stderr}");
    (steps, stdout, stderr)
}

/// Every config streamed must equal the resident run with the same batches (a cache smaller
/// than a whole layer splits the prefill: the resident run then uses `--ubatch <chunk>`).
pub(crate) fn assert_identical(model: &Path, configs: &[&[&str]]) {
    let mut residents: std::collections::HashMap<Vec<String>, Vec<(String, String)>> =
        std::collections::HashMap::new();
    for cfg in configs {
        let (streamed, stdout, stderr) = trace_full(model, cfg);
        let args = resident_args(cfg, &stderr);
        let resident = residents.entry(args.clone()).or_insert_with(|| {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            trace(model, &a).0
        });
        assert_eq!(
            &streamed,
            resident,
            "{} streamed with {cfg:?} differs from the resident run with {args:?}",
            model.display()
        );
        assert!(
            stdout.contains("mode: expert streaming"),
            "{cfg:?}: not a streamed run:\n{stdout}"
        );
    }
}

pub(crate) fn perf(stdout: &str) -> PerfReport {
    PerfReport::parse(stdout)
}

#[test]
fn q8_streaming_matches_resident_across_cache_io_and_odirect() {
    let m = &models().q8;
    assert_identical(
        m,
        &[
            &["--moe-stream"],
            &["--moe-stream", "--cache-mb", "1"],
            &["--moe-stream", "--cache-mb", "64"],
            &["--moe-stream", "--io-threads", "1"],
            &["--moe-stream", "--io-threads", "4", "--cache-mb", "1"],
            &["--moe-stream", "--no-odirect"],
            &[
                "--moe-stream",
                "--no-odirect",
                "--cache-mb",
                "1",
                "--io-threads",
                "1",
            ],
        ],
    );
}

#[test]
fn o_direct_is_really_used_unless_the_filesystem_refuses() {
    let out = run(&models().q8, &["--moe-stream"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    if err.contains("using buffered I/O") {
        eprintln!(
            "note: O_DIRECT unavailable on this filesystem; the O_DIRECT gate ran buffered:\n{err}"
        );
    } else {
        assert!(err.contains("o_direct=1"), "{err}");
    }
    let buffered = run(&models().q8, &["--moe-stream", "--no-odirect"]);
    assert!(String::from_utf8_lossy(&buffered.stderr).contains("o_direct=0"));
}

#[test]
fn small_cache_evicts_and_big_cache_holds_everything() {
    let m = &models().q8;
    let (_, small) = trace(m, &["--moe-stream", "--cache-mb", "1"]);
    let evictions = small
        .lines()
        .find(|l| l.starts_with("moe-cache:") && l.contains("evictions"));
    assert!(
        evictions.is_some(),
        "a 1 MiB cache must evict on this model:\n{small}"
    );
    let (_, big) = trace(m, &["--moe-stream", "--cache-mb", "64"]);
    assert!(
        !big.contains("evictions"),
        "a 64 MiB cache holds every expert:\n{big}"
    );
    let p = perf(&big);
    let hit = p.moe_cache.expect("moe-cache line").hit_pct;
    let (_, off) = trace(m, &["--moe-stream"]);
    assert!(
        perf(&off).moe_cache.is_none(),
        "cache off prints no moe-cache line"
    );
    let small_hit = perf(&small).moe_cache.expect("moe-cache").hit_pct;
    assert!(
        hit > small_hit,
        "bigger cache, better hit rate ({hit} vs {small_hit})"
    );
}

#[test]
fn f32_and_q4k_experts_stream_identically() {
    for m in [&models().f32, &models().q4k] {
        assert_identical(
            m,
            &[
                &["--moe-stream"],
                &["--moe-stream", "--cache-mb", "1", "--io-threads", "1"],
            ],
        );
    }
}

#[test]
fn split_three_shard_model_streams_identically() {
    let m = &models().split3;
    assert!(
        m.to_string_lossy().ends_with("-00001-of-00003.gguf"),
        "{}",
        m.display()
    );
    assert_identical(
        m,
        &[&["--moe-stream"], &["--moe-stream", "--cache-mb", "1"]],
    );
}

#[test]
fn other_registry_architectures_stream_identically() {
    // cache off / evicting / holding everything, as for every architecture
    for m in [&models().qwen2moe, &models().gpt_oss, &models().gemma4] {
        assert_identical(m, &CACHE_SIZES);
    }
}

#[test]
fn lfm2moe_conv_layers_and_dense_lead_stream_identically() {
    // layer 0 is dense (no experts to stream), layer 1 a MoE shortconv layer, layer 2 a MoE
    // attention layer. No cache, an evicting one (1 MiB: more than a token's 0.8 MiB cycle, less
    // than the 3.2 MiB of experts) and one holding every expert must all equal the resident run.
    let m = &models().lfm2moe;
    assert_identical(
        m,
        &[
            &["--moe-stream", "--cache-mb", "0"][..],
            &["--moe-stream", "--cache-mb", "1"],
            &["--moe-stream", "--cache-mb", "64"],
        ],
    );
}

#[test]
fn qwen35moe_linear_attention_and_shared_experts_stream_identically() {
    // layers 0-2 are gated-delta-net (recurrent state), layer 3 full attention; the shared
    // expert is dense and must stay resident while the routed ones stream. 4 layers × 8 experts
    // of 204 KiB: 1 MiB evicts, 64 MiB holds them all.
    let m = &models().qwen35moe;
    assert_identical(
        m,
        &[
            &["--moe-stream", "--cache-mb", "0"][..],
            &["--moe-stream", "--cache-mb", "1"],
            &["--moe-stream", "--cache-mb", "64"],
        ],
    );
}

/// Cache off, evicting (1 MiB, far below a tiny model's ~6 MiB of experts) and holding every
/// expert (64 MiB).
pub(crate) const CACHE_SIZES: [&[&str]; 3] = [
    &["--moe-stream", "--cache-mb", "0"],
    &["--moe-stream", "--cache-mb", "1"],
    &["--moe-stream", "--cache-mb", "64"],
];

#[test]
fn deepseek4_hash_routing_hyper_connections_and_shared_expert_stream_identically() {
    // layer 0 is routed by the token-id hash table (its ids come from a get_rows, not the
    // argsort), layers 1-3 by sqrt-softplus scores with CSA / HCA / CSA KV compression; the
    // shared expert is dense and stays on the mmap. 4 layers × 8 experts of 204 KiB.
    assert_identical(&models().deepseek4, &CACHE_SIZES);
}

#[test]
fn bailingmoe3_kda_mla_and_group_limited_routing_stream_identically() {
    // layer 0 is KDA with a dense MLP (no experts), layers 1-2 KDA, layer 3 MLA; routing picks
    // 2 of 4 expert groups before the top-2, and the shared expert is dense.
    assert_identical(&models().bailingmoe3, &CACHE_SIZES);
}

#[test]
fn split_prefill_and_sampling_stream_identically() {
    let m = &models().q4k;
    // several ubatches per prefill: each is its own graph with its own routing callbacks
    assert_identical(
        m,
        &[
            &["--moe-stream", "--ubatch", "4"][..],
            &["--moe-stream", "--ubatch", "4", "--cache-mb", "1"],
        ],
    );
    // a seeded sampler sees the same logits, so it draws the same tokens
    let sample = [
        "--temp", "0.8", "--top-k", "20", "--top-p", "0.9", "--seed", "7",
    ];
    let (resident, _) = trace(m, &sample);
    let mut streamed_args = sample.to_vec();
    streamed_args.push("--moe-stream");
    let (streamed, _) = trace(m, &streamed_args);
    assert_eq!(streamed, resident);
}

#[test]
fn poisoning_proves_only_routed_experts_are_read() {
    let m = &models().q8;
    let (resident, _) = trace(m, &[]);
    let (unrouted, _) = trace(m, &["--moe-stream", "--test-poison", "unrouted"]);
    assert_eq!(
        unrouted, resident,
        "NaN in unrouted experts must change nothing"
    );
    let cached = [
        "--moe-stream",
        "--cache-mb",
        "1",
        "--test-poison",
        "unrouted",
    ];
    let (unrouted_cached, _, stderr) = trace_full(m, &cached);
    let args = resident_args(&cached, &stderr);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(unrouted_cached, trace(m, &a).0);
    let (routed, _) = trace(m, &["--moe-stream", "--test-poison", "routed"]);
    assert_ne!(
        routed, resident,
        "NaN in a routed expert must change the output (else the gate cannot fail)"
    );
}

#[test]
fn progress_protocol_and_summary() {
    let m = &models().q8;
    let out = cli()
        .arg("-m")
        .arg(m)
        .args([
            "--moe-stream",
            "--cache-mb",
            "2",
            "-p",
            "hello",
            "-n",
            "8",
            "--ignore-eos",
            "-t",
            "2",
            "-c",
            "256",
            "--progress",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut steps = Vec::new();
    let mut loads = 0;
    for line in stdout.lines() {
        match parse_line(line) {
            LineKind::Record(Record::Progress(p)) => {
                assert_eq!(p.steps, 8);
                assert!(p.wall_ms > 0.0 && p.compute_ms >= 0.0 && p.compute_ms <= p.wall_ms);
                assert!((-1.0..=100.0).contains(&p.cache_hit_pct));
                steps.push(p.step);
            }
            LineKind::Record(Record::Load(l)) => {
                assert!(
                    l.mb > 0.0,
                    "BMOE_LOAD only on tokens that read experts: {line}"
                );
                loads += 1;
            }
            LineKind::Record(other) => panic!("unexpected record {other:?}"),
            LineKind::Malformed { .. } | LineKind::Unknown { .. } => {
                panic!("bad protocol line: {line}")
            }
            LineKind::Text(_) => {}
        }
    }
    assert_eq!(steps, (1..=8).collect::<Vec<u64>>());
    assert!(
        loads >= 1,
        "a 2 MiB cache on a fresh run must read experts:\n{stdout}"
    );
    let p = perf(&stdout);
    assert!(p.answer.is_some(), "answer banner");
    assert_eq!(p.generation.expect("generation line").tokens, 8);
    assert!(
        p.mode.is_some() && p.moe_stream.is_some() && p.moe_cache.is_some(),
        "{stdout}"
    );
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let s = p.moe_stream.expect("moe-stream");
    assert!(s.read_mib > 0.0);
}

#[test]
fn plain_mode_names_the_flag() {
    let (_, stdout) = trace(&models().q8, &[]);
    let mode = stdout
        .lines()
        .find(|l| l.starts_with("mode:"))
        .expect("mode line");
    assert!(
        mode.contains("--moe-stream") && mode.contains("qwen3moe"),
        "{mode}"
    );
    assert!(!stdout.contains("moe-stream:"));
}

#[test]
fn truncated_model_file_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cut = dir.path().join("cut.gguf");
    let bytes = std::fs::read(&models().q8).expect("read");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write");
    let out = run(&cut, &["--moe-stream"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error:") && err.contains("truncated") && err.contains("cut.gguf"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");
}

#[test]
fn read_error_after_load_aborts_without_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("live.gguf");
    std::fs::copy(&models().q8, &model).expect("copy");
    let info = bmoe_gguf::ModelInfo::from_model(&bmoe_gguf::GgufModel::open(&model).expect("open"))
        .expect("info");
    let first_expert = info
        .layers
        .iter()
        .flat_map(|l| l.expert_tensors.iter())
        .map(|t| t.file_offset)
        .min()
        .expect("expert tensors");
    let replacement = dir.path().join("short.gguf");
    let bytes = std::fs::read(&model).expect("read");
    std::fs::write(&replacement, &bytes[..first_expert as usize + 100]).expect("write");
    let out = cli()
        .env("BMOE_TEST_REPLACE_AFTER_LOAD", &replacement)
        .arg("-m")
        .arg(&model)
        .args([
            "--moe-stream",
            "-p",
            PROMPT,
            "-n",
            "4",
            "-t",
            "2",
            "-c",
            "256",
            "--progress",
        ])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{err}");
    assert!(
        err.contains("expert read")
            && err.contains("live.gguf")
            && err.contains("offset")
            && err.contains("errno"),
        "{err}"
    );
    assert!(
        !stdout.contains("=== answer ===") && !stdout.contains("BMOE_PROGRESS"),
        "{stdout}"
    );
}

#[test]
fn cli_basics() {
    let v = cli().arg("--version").output().expect("run");
    assert!(v.status.success());
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("bmoe-cli {}", env!("CARGO_PKG_VERSION"))
    );
    let l = cli().arg("--list-archs").output().expect("run");
    let text = String::from_utf8_lossy(&l.stdout);
    assert!(
        text.starts_with("supported MoE architectures:")
            && text.contains("  qwen3moe")
            && text.contains("  gemma4")
    );
    let bad = cli()
        .args(["-m", "x.gguf", "--moe-stream", "--io-threads", "9"])
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("error: --io-threads") && err.contains("hint:"),
        "{err}"
    );
    let missing = cli()
        .args(["-m", "/nonexistent/m.gguf"])
        .output()
        .expect("run");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/m.gguf"));
}

#[test]
fn without_model_flag_runs_the_builtin_tiny_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    for expect in ["synthesised now", "cached"] {
        let out = cli()
            .env("BMOE_CACHE_DIR", dir.path())
            .args([
                "--moe-stream",
                "--cache-mb",
                "2",
                "-p",
                "hello",
                "-n",
                "4",
                "--ignore-eos",
                "-t",
                "2",
                "--progress",
            ])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("built-in tiny") && err.contains(expect),
            "{err}"
        );
        let p = PerfReport::parse(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(p.generation.expect("generation").tokens, 4);
    }
}

#[test]
fn resident_hook_diagnostic_observes_every_routing_and_changes_nothing() {
    let m = &models().q8;
    let (plain, _) = trace(m, &[]);
    let out = cli()
        .env("BMOE_DIAG_RESIDENT_HOOK", "1")
        .arg("-m")
        .arg(m)
        .args(["-p", PROMPT, "-n", "12", "-t", "2", "-c", "256"])
        .arg("--dump-logits-hash")
        .output()
        .expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("mode: plain llama.cpp"),
        "still a resident run:\n{stdout}"
    );
    let hashes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("logits-hash "))
        .collect();
    let expected: Vec<String> = plain
        .iter()
        .enumerate()
        .map(|(i, (t, h))| format!("logits-hash step={} token={t} hash={h}", i + 1))
        .collect();
    assert_eq!(hashes, expected, "the hook must not change a single logit");
    // 2 MoE layers × (1 prefill + 12 decodes), each routing node observed once
    let line = stderr
        .lines()
        .find(|l| l.starts_with("bmoe: diag: resident hook observed"))
        .unwrap_or_else(|| panic!("no hook report in:\n{stderr}"));
    let nodes: u64 = line
        .split_whitespace()
        .nth(5)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    let decodes = hashes.len() as u64 + 1;
    assert_eq!(nodes, 2 * decodes, "{line}");
}

/// `--adaptive-threads` only changes how each token's work is split over threads: a run that
/// probes one thread between two-thread tokens gives the same tokens and logits as fixed -t 2,
/// streamed and resident, and reports how the tokens were split (stderr, CSV preamble).
#[test]
fn adaptive_threads_change_no_logit_and_report_the_split() {
    let m = &models().q8;
    for mode in [&[][..], &["--moe-stream", "--cache-mb", "1"][..]] {
        // the same run at a fixed -t 2 (streamed = resident is the other gates' business)
        let (fixed, _) = trace(m, mode);
        let dir = tempfile::tempdir().expect("tmp");
        let csv = dir.path().join("run.csv");
        let csv_arg = csv.to_string_lossy().into_owned();
        let mut args: Vec<&str> = mode.to_vec();
        args.extend(["--adaptive-threads", "--csv", &csv_arg]);
        let (steps, _, stderr) = trace_full(m, &args);
        assert_eq!(
            steps, fixed,
            "{args:?}: the thread count changed the output"
        );
        // 12 tokens: the governor probes one thread after its first 2 (threads.rs FIRST_PROBE)
        let line = stderr
            .lines()
            .find_map(|l| l.strip_prefix("bmoe: adaptive threads: "))
            .unwrap_or_else(|| panic!("no adaptive-threads report in:\n{stderr}"));
        let at = |t: &str| -> u64 {
            let counts = line.split("; ").next().unwrap_or_default();
            counts
                .split(", ")
                .find_map(|p| p.strip_suffix(&format!(" token(s) at -t {t}")))
                .and_then(|n| n.split_whitespace().last()?.parse().ok())
                .unwrap_or_else(|| panic!("no -t {t} count in {line:?}"))
        };
        assert!(at("1") >= 1, "no token ran with one thread: {line}");
        assert_eq!(at("1") + at("2"), steps.len() as u64, "{line}");
        let text = std::fs::read_to_string(&csv).expect("csv");
        let preamble: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
        assert!(
            preamble
                .iter()
                .any(|l| l.split_whitespace().any(|kv| kv == "threads_adaptive=1")),
            "{preamble:?}"
        );
        assert!(
            preamble
                .iter()
                .any(|l| l.split_whitespace().any(|kv| kv == "threads=2")),
            "{preamble:?}"
        );
    }
}

/// A prompt long enough that every expert of every layer is routed by some token, and that
/// takes several prefill chunks (about 270 tokens on the byte-level synthetic vocabulary).
fn long_prompt() -> String {
    (0..8)
        .map(|i| format!("token{i} the quick brown fox jumps; "))
        .collect()
}

/// A streamed run of [`long_prompt`] with the arena's resident bytes measured after every
/// load: (peak bytes, stderr, the run's logits trace).
fn peak_run(model: &Path, extra: &[&str]) -> (u64, String, Vec<(String, String)>) {
    let out = cli()
        .env("BMOE_TEST_PEAK_RESIDENT", "1")
        .arg("-m")
        .arg(model)
        .args(["-p", &long_prompt(), "-n", "4", "-t", "2", "-c", "512"])
        .args(["--moe-stream", "--dump-logits-hash"])
        .args(extra)
        .output()
        .expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{extra:?}:\n{stderr}");
    let peak = stderr
        .split("peak expert-resident bytes ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no peak report:\n{stderr}"));
    (peak, stderr.clone(), logits_lines(&stderr))
}

/// The `logits-hash` lines of a run's stderr.
fn logits_lines(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter(|l| l.starts_with("logits-hash "))
        .map(|l| (l.to_string(), String::new()))
        .collect()
}

/// The resident run of [`long_prompt`], cut into `--ubatch chunk` batches if given.
fn resident_long(model: &Path, chunk: Option<u32>) -> Vec<(String, String)> {
    let ubatch = chunk.map(|u| ["--ubatch".to_string(), u.to_string()]);
    let out = cli()
        .arg("-m")
        .arg(model)
        .args(["-p", &long_prompt(), "-n", "4", "-t", "2", "-c", "512"])
        .arg("--dump-logits-hash")
        .args(ubatch.iter().flatten())
        .output()
        .expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let steps = logits_lines(&stderr);
    assert_eq!(steps.len(), 4, "{stderr}");
    steps
}

#[test]
fn a_prefill_whose_union_exceeds_the_cache_is_split_and_stays_within_budget() {
    let m = &models().q8;
    let info =
        bmoe_gguf::info::ModelInfo::from_model(&bmoe_gguf::GgufModel::open(m).unwrap()).unwrap();
    let entry = info.layers.iter().map(|l| l.expert_bytes).max().unwrap();
    let whole_layer = entry * u64::from(info.n_expert);
    let layer_load = entry * u64::from(info.n_expert_used);
    let budget: u64 = 1 << 20;
    assert!(
        whole_layer > budget + layer_load,
        "the model must be able to overshoot"
    );
    let n_prompt = long_prompt().len() as u32;

    let csv = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (peak, stderr, streamed) = peak_run(
        m,
        &["--cache-mb", "1", "--csv", csv.path().to_str().unwrap()],
    );
    let chunk = split_chunk(&stderr).unwrap_or_else(|| panic!("no split note:\n{stderr}"));
    assert!(
        u64::from(chunk) * u64::from(info.n_expert_used) >= u64::from(info.n_expert),
        "a chunk of {chunk} tokens cannot route a whole layer: a tinier batch than needed"
    );
    assert!(chunk < n_prompt / 2, "the long prompt takes several chunks");
    assert!(
        peak <= budget + whole_layer,
        "resident expert memory {peak} B exceeds the {budget} B budget + one layer staged ({whole_layer} B)"
    );
    let preamble = std::fs::read_to_string(csv.path()).unwrap();
    assert!(
        preamble.contains(&format!(" n_ubatch={chunk} ")),
        "the CSV preamble states the effective ubatch:\n{}",
        preamble.lines().take(4).collect::<Vec<_>>().join("\n")
    );

    // cache off cuts the same batches (its compute buffer no bigger than a 1 MiB cache's) and
    // keeps at most the current layer
    let (peak_off, stderr_off, streamed_off) = peak_run(m, &["--cache-mb", "0"]);
    assert_eq!(split_chunk(&stderr_off), Some(chunk), "{stderr_off}");
    assert!(peak_off <= whole_layer, "cache off held {peak_off} B");

    // byte identity with the resident run that cuts the same batches
    let resident = resident_long(m, Some(chunk));
    assert_eq!(
        streamed, resident,
        "split prefill vs resident --ubatch {chunk}"
    );
    assert_eq!(
        streamed_off, resident,
        "cache off vs resident --ubatch {chunk}"
    );
}

#[test]
fn a_long_prefill_under_any_budget_matches_resident_serial_and_overlapped() {
    let m = &models().q8;
    let info =
        bmoe_gguf::info::ModelInfo::from_model(&bmoe_gguf::GgufModel::open(m).unwrap()).unwrap();
    let entry = info.layers.iter().map(|l| l.expert_bytes).max().unwrap();
    let whole_layer = entry * u64::from(info.n_expert);
    // a cache above one layer but below the model's experts: no split, evictions across layers
    let evicting_mb = whole_layer.div_ceil(1 << 20) + 1;
    assert!(
        evicting_mb << 20 < whole_layer * info.layers.len() as u64,
        "the evicting budget must be below the model's experts"
    );
    let evicting = evicting_mb.to_string();
    let mut residents = std::collections::HashMap::new();
    for lanes in [&[][..], &["--overlap"][..]] {
        for cache in ["0", "1", evicting.as_str()] {
            let mut args = vec!["--cache-mb", cache];
            args.extend_from_slice(lanes);
            let (_, stderr, streamed) = peak_run(m, &args);
            let chunk = split_chunk(&stderr);
            assert_eq!(chunk.is_some(), cache != evicting, "{args:?}:\n{stderr}");
            let resident = residents
                .entry(chunk)
                .or_insert_with(|| resident_long(m, chunk));
            assert_eq!(
                &streamed, resident,
                "{args:?} vs resident (chunk {chunk:?})"
            );
        }
    }
}

/// Tokens generated by one run (the `generation:` summary line).
fn generated(out: &Output) -> u64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    perf(&stdout).generation.expect("generation line").tokens
}

#[test]
fn ignore_eos_runs_every_turn_to_n_predict() {
    let m = &models().q8;
    // Hot sampling over the tiny model's 269-token vocabulary draws an end-of-generation token
    // within a few hundred steps (seeds 1-3 stopped after 4-162 tokens here): the control that
    // shows --ignore-eos is what keeps the other runs going.
    let sampled = |seed: &str, extra: &[&str]| {
        let out = cli()
            .arg("-m")
            .arg(m)
            .args(["-p", PROMPT, "-n", "1500", "-t", "2", "-c", "2048"])
            .args([
                "--temp", "3", "--top-k", "0", "--top-p", "1", "--seed", seed,
            ])
            .args(extra)
            .output()
            .expect("run bmoe-cli");
        generated(&out)
    };
    let free: Vec<u64> = ["1", "2", "3"].iter().map(|s| sampled(s, &[])).collect();
    assert!(
        free.iter().any(|&n| n < 1500),
        "no seed reached an end-of-generation token: {free:?}"
    );
    for seed in ["1", "2", "3"] {
        assert_eq!(sampled(seed, &["--ignore-eos"]), 1500, "seed {seed}");
        assert_eq!(
            sampled(seed, &["--ignore-eos", "--moe-stream", "--cache-mb", "0"]),
            1500,
            "streamed, seed {seed}"
        );
    }
    // Greedy: the banned tokens are skipped by the argmax, streamed and resident alike.
    let resident = trace(m, &["--ignore-eos"]).0;
    let streamed = trace(m, &["--ignore-eos", "--moe-stream", "--cache-mb", "0"]).0;
    assert_eq!(resident, streamed);
    let out = run(m, &["--ignore-eos"]);
    assert_eq!(generated(&out), 12);
}

/// A model file truncated in place under the mapping (the default `--dense-weights mmap`) used
/// to kill the process with SIGBUS and no word; now it is an error naming the file, with a hint.
#[test]
fn model_truncated_in_place_after_load_is_an_error_not_a_silent_sigbus() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    for (name, extra) in [
        ("plain.gguf", &[][..]),
        ("streamed.gguf", &["--moe-stream", "--cache-mb", "0"][..]),
    ] {
        let model = dir.path().join(name);
        std::fs::copy(&models().q8, &model).expect("copy");
        let out = cli()
            // right after the load, the file is cut in place to its first 9000 bytes
            .env("BMOE_TEST_TRUNCATE_AFTER_LOAD", "9000")
            .arg("-m")
            .arg(&model)
            .args(["-p", PROMPT, "-n", "4", "-t", "2", "-c", "256"])
            .args(extra)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            std::fs::metadata(&model).expect("stat").len(),
            9000,
            "the hook truncated in place"
        );
        assert_eq!(out.status.code(), Some(1), "{extra:?} stderr:\n{err}");
        assert!(
            err.contains(
                "error: a page of the memory-mapped model could not be read (SIGBUS at 0x"
            ) && err.contains(&format!("{name} was truncated or changed while in use")),
            "{extra:?}: {err}"
        );
        assert!(err.contains("\nhint: "), "{extra:?}: {err}");
        assert!(!stdout.contains("generation:"), "{extra:?}: {stdout}");
    }
}

#[test]
fn usage_and_load_errors_end_with_a_true_hint() {
    // clap's usage errors: its message, then the project's hint line instead of its "try --help"
    for args in [
        &["--bogus"][..],
        &["-n"],
        &["--seed", "-3"],
        &["--seed", "4294967295"],
    ] {
        let out = cli().args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(
            err.ends_with("\nhint: bmoe-cli --help lists every flag\n"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("For more information"), "{args:?}: {err}");
    }
    let help = cli().arg("--help").output().expect("run");
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: bmoe-cli [OPTIONS]"));
    assert!(help.stderr.is_empty());

    let dir = tempfile::tempdir().expect("tempdir");
    let out = cli().arg("-m").arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-m/--model is a directory") && err.contains("hint: pass the .gguf file"),
        "{err}"
    );

    // a GGUF that parses but names an architecture llama.cpp does not know and has none of its
    // keys
    let bad = dir.path().join("unknown-arch.gguf");
    let mut gguf = b"GGUF".to_vec();
    gguf.extend(3u32.to_le_bytes());
    gguf.extend(0u64.to_le_bytes()); // tensors
    gguf.extend(1u64.to_le_bytes()); // key-value pairs
    for (i, s) in ["general.architecture", "nosucharch"].iter().enumerate() {
        gguf.extend((s.len() as u64).to_le_bytes());
        gguf.extend(s.as_bytes());
        if i == 0 {
            gguf.extend(8u32.to_le_bytes()); // string
        }
    }
    std::fs::write(&bad, gguf).expect("write gguf");
    for verbose in [false, true] {
        let mut c = cli();
        c.arg("-m").arg(&bad).args(["-n", "2"]);
        if verbose {
            c.env("BMOE_LLAMA_LOG", "1");
        } else {
            c.env_remove("BMOE_LLAMA_LOG");
        }
        let out = c.output().expect("run");
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        // bmoe-gguf's checks refuse it before llama.cpp sees it: the file and the unknown
        // name are given with what this build streams (not the first arch key it lacks)
        assert!(
            err.contains(&format!(
                "{}: unknown architecture 'nosucharch'; supported: {}",
                bad.display(),
                bmoe_gguf::MOE_ARCHITECTURES.join(", ")
            )),
            "{err}"
        );
        assert!(!err.contains("nosucharch.block_count"), "{err}");
        let hint = err.lines().last().unwrap_or_default();
        assert!(
            hint.starts_with("hint: bmoe streams only the MoE architectures listed")
                && hint.contains("--list-archs"),
            "{err}"
        );
    }
}
