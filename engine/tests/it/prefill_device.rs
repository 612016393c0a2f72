//! `--prefill-device` on a real Vulkan device (issue #22; lavapipe on a machine without a GPU):
//! prompt batches run on the device, decode stays on the CPU, streamed experts reach the device,
//! and the `prefill_dev_*` figures say what ran there. Built only with the `prefill-device`
//! feature (`scripts/test-prefill-device.sh`).

use crate::gates::cli;
use crate::tiny::{Tiny, synth_tiny};
use bmoe_engine::internals::{Context, ContextOptions, Model, ModelOptions, MoeHook};
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::protocol::{Decide, LineKind, Record, parse_line};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// The device bmoe offers first (`Vulkan0`: lavapipe here, a GPU elsewhere).
const DEVICE: &str = "Vulkan0";

/// Over a hundred tokens with the tiny models' byte vocabulary: one prefill decode, or the
/// 64-token decodes of a cache-0 streamed run, at or above ggml-vulkan's offload threshold (32
/// tokens); a short tail decode stays on the CPU.
const PROMPT: &str = "The quick brown fox jumps over the lazy dog while the engine streams \
                      its experts from flash, layer by layer, for the prompt's sake.";

/// Largest |device − CPU| of the first token's logits, relative to the largest |CPU logit|.
/// Measured on lavapipe (Mesa 22.3, ggml-vulkan of llama-cpp-sys-2 0.1.161): 3.8e-3 (f32
/// experts), 7.4e-3 (Q4_K), 1.16e-2 (Q8_0), 1.26e-2 (qwen2moe), the same with
/// `GGML_VK_DISABLE_F16=1` (ggml-vulkan's matmuls take their activations as f16 / q8_1 where
/// the CPU keeps f32 / q8_K). Twice the largest; the negative control below (one token less of
/// prompt) lands far above it.
const LOGITS_TOLERANCE: f64 = 2.5e-2;

/// Largest |device − CPU| of a `decide` choice's log-probability, nats. Measured on lavapipe
/// (the four-layer tiny model, three choices near −5.5 to −6.0): 0.030, 0.013 and 2e-5. Twice
/// the largest.
const LOGP_TOLERANCE: f64 = 0.06;

fn run(model: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    cli()
        .arg("-m")
        .arg(model)
        .args(["-p", PROMPT, "-n", "12", "-t", "2", "-c", "256"])
        .args(["--dump-logits-hash"])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .expect("run bmoe-cli")
}

/// (token, logits hash) per step of a successful run.
fn steps(out: &Output) -> Vec<String> {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    err.lines()
        .filter(|l| l.starts_with("logits-hash "))
        .map(str::to_string)
        .collect()
}

fn tokens(steps: &[String]) -> Vec<&str> {
    steps
        .iter()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("token=")))
        .collect()
}

/// The `# summary` trailer's value of `key` in a CSV file.
fn trailer_value(csv: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(csv).ok()?;
    let line = text.lines().find(|l| l.starts_with("# summary"))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_string))
}

fn num(csv: &Path, key: &str) -> f64 {
    trailer_value(csv, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} missing from the trailer of {}", csv.display()))
}

/// The first token's logits after a prefill of `tokens`, on the device or on the CPU, with what
/// the device computed.
/// max |a − b| / max |a|.
fn relative_diff(a: &[f32], b: &[f32]) -> (f64, f64) {
    let scale = a.iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
    let diff = a.iter().zip(b).fold(0f64, |m, (&x, &y)| {
        m.max((f64::from(x) - f64::from(y)).abs())
    });
    (diff, diff / scale.max(f64::MIN_POSITIVE))
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

fn first_logits(path: &Path, device: Option<&str>, tokens: &[i32]) -> (Vec<f32>, u64, u64) {
    let opts = ModelOptions {
        device: device.map(str::to_string),
        ..ModelOptions::default()
    };
    let model = Model::load(path, &opts).expect("load");
    let copts = ContextOptions {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        n_rs_seq: 0,
        device_offload: device.is_some(),
    };
    let mut ctx: Context<'_, MoeHook> =
        Context::new(&model, copts, None, Arc::new(AtomicBool::new(false))).expect("context");
    let mut batch = tokens.to_vec();
    ctx.decode(&mut batch).expect("prefill");
    let tally = ctx.device_tally();
    (ctx.last_logits().to_vec(), tally.nodes, tally.tokens)
}

#[test]
fn the_first_tokens_logits_match_the_cpu_prefill_within_the_tolerance() {
    let m = crate::gates::models();
    for path in [&m.q8, &m.f32, &m.q4k, &m.qwen2moe] {
        let model = Model::load(path, &ModelOptions::default()).expect("load");
        let mut toks = vec![model.bos()];
        toks.extend(model.tokenize(PROMPT).expect("tokenize"));
        drop(model);
        let (cpu, cpu_nodes, _) = first_logits(path, None, &toks);
        let (dev, nodes, dev_tokens) = first_logits(path, Some(DEVICE), &toks);
        assert_eq!(cpu_nodes, 0, "a CPU context counted device nodes");
        assert!(nodes > 0, "{}: nothing ran on {DEVICE}", path.display());
        assert_eq!(dev_tokens, toks.len() as u64, "{}", path.display());
        assert_eq!(cpu.len(), dev.len());
        let (diff, rel) = relative_diff(&cpu, &dev);
        let (c, d) = (argmax(&cpu), argmax(&dev));
        eprintln!(
            "{}: max |dev - cpu| = {diff:.3e} (relative {rel:.2e}); top-1 cpu {c} dev {d}, \
             cpu margin {:.3e}",
            path.display(),
            cpu[c] - cpu[d]
        );
        assert!(
            rel <= LOGITS_TOLERANCE,
            "{}: relative logits difference {rel:.2e} > {LOGITS_TOLERANCE:e}",
            path.display()
        );
        // a different pick is a near tie the kernels' difference can flip, nothing more
        assert!(
            f64::from(cpu[c] - cpu[d]) <= 2.0 * diff,
            "{}: the device picked {d}, {:.3e} below the CPU's {c}",
            path.display(),
            cpu[c] - cpu[d]
        );
        // negative control: one prompt token less moves the logits far past the tolerance
        let (short, _, _) = first_logits(path, None, &toks[..toks.len() - 1]);
        let (_, rel_short) = relative_diff(&cpu, &short);
        assert!(
            rel_short > 4.0 * LOGITS_TOLERANCE,
            "{}: the control differs by {rel_short:.2e} only",
            path.display()
        );
    }
}

/// 12 generated tokens equal the CPU run's on the tiny models whose routing has no near tie in
/// reach of the kernels' difference. Measured on lavapipe: Q4_K experts and qwen2moe 12 of 12;
/// Q8_0 experts 11 of 12 (the 12th flips); f32 experts 0 of 12 (the first token is a near tie,
/// which the logits test bounds).
#[test]
fn the_device_prefill_generates_the_cpu_text_on_the_tiny_models() {
    let m = crate::gates::models();
    for path in [&m.q4k, &m.qwen2moe] {
        let cpu = steps(&run(path, &[], &[]));
        let dev = steps(&run(path, &["--prefill-device", DEVICE], &[]));
        assert_eq!(cpu.len(), 12);
        assert_eq!(tokens(&cpu), tokens(&dev), "{}", path.display());
    }
}

#[test]
fn streamed_experts_reach_the_device_byte_identically_and_are_accounted() {
    let t = synth_tiny();
    let csv = t.dir.path().join("dev.csv");
    let io = t.dir.path().join("io.csv");
    let csv_s = csv.to_str().unwrap();
    let io_s = io.to_str().unwrap();
    // cache 0: only the routing layer's experts are in memory, read at the routing node, and
    // the prompt is split into 64-token decodes (each on the device)
    let streamed = run(
        &t.path,
        &[
            "--moe-stream",
            "--cache-mb",
            "0",
            "--prefill-device",
            DEVICE,
            "--csv",
            csv_s,
            "--io-trace",
            io_s,
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&streamed.stderr).into_owned();
    let chunk = err
        .split("prefill split into decodes of ≤")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("cache 0 splits the prefill")
        .to_string();
    // the same graph cuts on a resident run: the observing hook isolates every routing node
    // as the streamer does (ggml-vulkan fuses the router's ops when nothing cuts the graph)
    let resident = run(
        &t.path,
        &["--ubatch", &chunk, "--prefill-device", DEVICE],
        &[("BMOE_DIAG_RESIDENT_HOOK", "1")],
    );
    assert_eq!(steps(&streamed), steps(&resident), "{err}");
    // negative control: poisoning the routed experts after their load changes what the device
    // computes, poisoning the unrouted ones does not — it reads exactly the streamed bytes
    let stream_args = [
        "--moe-stream",
        "--cache-mb",
        "0",
        "--prefill-device",
        DEVICE,
    ];
    for (which, changes) in [("routed", true), ("unrouted", false)] {
        let mut args = stream_args.to_vec();
        args.extend(["--test-poison", which]);
        let poisoned = steps(&run(&t.path, &args, &[]));
        assert_eq!(
            poisoned != steps(&streamed),
            changes,
            "--test-poison {which}"
        );
    }

    let nodes = num(&csv, "prefill_dev_nodes");
    let dev_tokens = num(&csv, "prefill_dev_tokens");
    assert!(nodes > 0.0, "prefill_dev_nodes {nodes}");
    assert!(dev_tokens >= 64.0, "prefill_dev_tokens {dev_tokens}");
    assert!(num(&csv, "prefill_dev_stall_s") > 0.0);
    // the device decodes are the first `dev_tokens` positions: their expert reads in the io
    // trace (prefill rows, phase 0) are the arena's bytes
    let trace = std::fs::read_to_string(&io).unwrap();
    let mut header = None;
    let mut bytes = 0u64;
    for line in trace.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split(',').collect();
        let Some(h) = &header else {
            header = Some(cols.iter().map(|c| c.to_string()).collect::<Vec<_>>());
            continue;
        };
        let col = |name: &str| cols[h.iter().position(|c| c == name).unwrap()];
        if col("phase") == "0" && col("step").parse::<f64>().unwrap() < dev_tokens {
            bytes += col("read_bytes").parse::<u64>().unwrap();
        }
    }
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let dev_mib = num(&csv, "prefill_dev_read_mib");
    assert!(mib > 0.0);
    assert!(
        (mib - dev_mib).abs() <= 0.05,
        "io trace {mib:.3} MiB vs {dev_mib}"
    );
    assert_eq!(
        trailer_value(&csv, "prefill_device").as_deref(),
        None,
        "the device is a preamble key, not a trailer one"
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(
        text.contains("prefill_device=Vulkan0"),
        "the preamble names the device"
    );
}

#[test]
fn without_the_flag_nothing_runs_on_the_device_and_no_device_keys_are_written() {
    let t = synth_tiny();
    let csv = t.dir.path().join("cpu.csv");
    let out = run(&t.path, &["--csv", csv.to_str().unwrap()], &[]);
    assert!(out.status.success());
    assert_eq!(trailer_value(&csv, "prefill_dev_nodes"), None);
    let done = run(
        &t.path,
        &["--prefill-device", DEVICE, "--csv", csv.to_str().unwrap()],
        &[],
    );
    assert!(done.status.success());
    assert!(num(&csv, "prefill_dev_nodes") > 0.0);
}

#[test]
fn unverified_combinations_are_refused_by_name() {
    let t = synth_tiny();
    for (flags, named) in [
        (&["--moe-stream", "--overlap"][..], "--overlap"),
        (&["--moe-stream", "--predict-log"][..], "--predict-log"),
        (&["--moe-stream", "--row-stream"][..], "--row-stream"),
    ] {
        let mut args = flags.to_vec();
        args.extend(["--prefill-device", DEVICE]);
        let out = run(&t.path, &args, &[]);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--prefill-device cannot be combined with"),
            "{err}"
        );
        assert!(err.contains(named), "{err}");
        assert!(err.contains("hint:"), "{err}");
    }
}

#[test]
fn a_failure_during_a_device_prefill_ends_the_run_with_exit_1() {
    let t = synth_tiny();
    let cut = t.dir.path().join("cut.gguf");
    std::fs::copy(&t.path, &cut).unwrap();
    let out = run(
        &cut,
        &[
            "--moe-stream",
            "--cache-mb",
            "0",
            "--prefill-device",
            DEVICE,
        ],
        // right after the load the file is cut in place: the prefill's reads fail
        &[("BMOE_TEST_TRUNCATE_AFTER_LOAD", "9000")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cut.gguf was truncated or changed while in use"),
        "{err}"
    );
    assert!(err.contains("\nhint: "), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("generation:"));
}

/// The tiny preset with four MoE layers (the preset's two leave one layer to predict, and the
/// last layer of a decode that outputs nothing routes no token): three predicted layers.
fn four_layers() -> Tiny {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temp dir");
    let opts = SynthOptions {
        n_layer: 4,
        ..SynthOptions::preset(Preset::Tiny)
    };
    let s = write_model(&opts, &dir.path().join("t4.gguf")).expect("the model is written");
    Tiny {
        path: s.paths[0].clone(),
        dir,
    }
}

/// The `BMOE_TEST_ARENA_COUNTS` line's values (`routed`, `demand`, `read_ahead`, …).
fn arena_counts(out: &Output) -> BTreeMap<String, u64> {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("bmoe: test: prefill arena "))
        .unwrap_or_else(|| panic!("no arena line in\n{err}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse::<u64>().ok()?)))
        .collect()
}

/// The rows of a CSV trace (`#` lines skipped, the first other line the header).
fn trace_rows(path: &Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).expect("the trace is written");
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<String> = lines
        .next()
        .expect("a header")
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

/// Σ io-trace `read_bytes` of the prefill rows before position `dev_tokens`, in MiB.
fn prefill_read_mib(io: &Path, dev_tokens: f64) -> f64 {
    let bytes: u64 = trace_rows(io)
        .iter()
        .filter(|r| r["phase"] == "0" && r["step"].parse::<f64>().expect("a step") < dev_tokens)
        .map(|r| r["read_bytes"].parse::<u64>().expect("read bytes"))
        .sum();
    bytes as f64 / (1024.0 * 1024.0)
}

/// From a route trace: the (decode, layer, expert) triples the device decodes (prefill rows
/// before `dev_tokens`, one decode per `chunk` tokens) routed, and those a routing found not
/// resident (`residency=0`: read at the routing node).
fn routed_and_demand(route: &Path, dev_tokens: f64, chunk: usize) -> (u64, u64) {
    let mut routed = BTreeSet::new();
    let mut demand = BTreeSet::new();
    for r in trace_rows(route) {
        let step: usize = r["step"].parse().expect("a step");
        if r["phase"] != "0" || step as f64 >= dev_tokens {
            continue;
        }
        let key = (step / chunk, r["layer"].clone(), r["expert"].clone());
        if r["residency"] == "0" {
            demand.insert(key.clone());
        }
        routed.insert(key);
    }
    (routed.len() as u64, demand.len() as u64)
}

#[test]
fn the_predicted_arena_keeps_every_byte_and_its_counts_match_the_route_trace() {
    let t = four_layers();
    let dir = t.dir.path();
    // a 1 MiB cache is below a whole layer (8 experts of ~204 KiB): 64-token decodes, and room
    // for about five entries ahead of each layer's routing
    let base = [
        "--moe-stream",
        "--cache-mb",
        "1",
        "--prefill-device",
        DEVICE,
    ];
    let counts = [("BMOE_TEST_ARENA_COUNTS", "1")];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        run(&t.path, &a, &counts)
    };
    // byte identity, on runs without traces (the route trace cuts the graph at the weight
    // nodes too, which moves ggml-vulkan's fusions)
    let routed = with(&[]);
    let demand_only = with(&["--no-prefill-routed"]);
    let err = String::from_utf8_lossy(&routed.stderr).into_owned();
    let chunk = err
        .split("prefill split into decodes of ≤")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("a 1 MiB cache splits the prefill")
        .to_string();
    let resident = run(
        &t.path,
        &["--ubatch", &chunk, "--prefill-device", DEVICE],
        &[("BMOE_DIAG_RESIDENT_HOOK", "1")],
    );
    assert_eq!(steps(&routed), steps(&resident), "{err}");
    assert_eq!(steps(&routed), steps(&demand_only));
    let a = arena_counts(&routed);
    // the figures docs/engine.md quotes (`--nocapture`)
    let line = String::from_utf8_lossy(&routed.stderr)
        .lines()
        .find(|l| l.starts_with("bmoe: test: prefill arena "))
        .map(str::to_string);
    eprintln!("routed mode: {line:?}");
    assert!(a["read_ahead"] > 0, "the prediction read nothing: {a:?}");
    assert!(a["routed"] > 0 && a["demand"] < a["routed"], "{a:?}");
    let off = arena_counts(&demand_only);
    assert_eq!((off["routed"], off["demand"], off["read_ahead"]), (0, 0, 0));

    // the counts against the route trace, the reads against the io trace
    let chunk: usize = chunk.parse().unwrap();
    for (name, extra) in [
        ("routed", &[][..]),
        ("demand", &["--no-prefill-routed"][..]),
    ] {
        let (csv, route, io) = (
            dir.join(format!("{name}.csv")),
            dir.join(format!("{name}-route.csv")),
            dir.join(format!("{name}-io.csv")),
        );
        let mut args: Vec<&str> = extra.to_vec();
        args.extend([
            "--csv",
            csv.to_str().unwrap(),
            "--route-trace",
            route.to_str().unwrap(),
            "--io-trace",
            io.to_str().unwrap(),
        ]);
        let out = with(&args);
        let a = arena_counts(&out);
        eprintln!("{name} (traced): {a:?}");
        let dev_tokens = num(&csv, "prefill_dev_tokens");
        assert!(
            dev_tokens >= 64.0,
            "{name}: prefill_dev_tokens {dev_tokens}"
        );
        let (routed, demand) = routed_and_demand(&route, dev_tokens, chunk);
        if name == "routed" {
            assert_eq!((a["routed"], a["demand"]), (routed, demand), "{name}");
            assert!(demand < routed, "{name}: {routed} routed, {demand} demand");
        } else {
            assert_eq!((a["routed"], a["demand"]), (0, 0), "{name}");
            // every pair the device routed was read at its routing node or cached before
            assert!(
                routed > 0 && demand <= routed,
                "{name}: {routed} routed, {demand} demand"
            );
        }
        let (mib, dev_mib) = (
            prefill_read_mib(&io, dev_tokens),
            num(&csv, "prefill_dev_read_mib"),
        );
        assert!(mib > 0.0, "{name}");
        assert!(
            (mib - dev_mib).abs() <= 0.05,
            "{name}: io trace {mib:.3} MiB vs {dev_mib}"
        );
        // the seed lists the two counts in BMOE_DECIDE only: no such trailer keys
        assert_eq!(trailer_value(&csv, "prefill_dev_routed"), None);
    }
}

#[test]
fn no_prefill_routed_without_the_device_is_refused_with_a_hint() {
    let t = synth_tiny();
    let out = run(&t.path, &["--moe-stream", "--no-prefill-routed"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--no-prefill-routed requires --prefill-device"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");
}

/// One `bmoe-cli --session --decide` answering `request` (then EOF) on `model`: its `BMOE_DECIDE`.
fn decide_on(model: &Path, extra: &[&str], request: &str) -> Decide {
    let mut child = cli()
        .arg("-m")
        .arg(model)
        .args(["--session", "--decide", "-t", "2", "-c", "256"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bmoe-cli --session --decide");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{request}").expect("write the request");
    drop(stdin);
    let out = child.wait_with_output().expect("session output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{extra:?}: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| match parse_line(l) {
            LineKind::Record(Record::Decide(d)) => Some(*d),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{extra:?}: no BMOE_DECIDE; stderr:\n{err}"))
}

#[test]
fn a_decide_prefill_runs_on_the_device_and_reports_its_share() {
    let t = four_layers();
    // the prefix part (over a hundred tokens) is prefilled in 64-token decodes under a 1 MiB
    // cache, on the device; the short suffix stays on the CPU
    let request = serde_json::json!({
        "cmd": "decide", "id": 7, "prefix": PROMPT, "suffix": " Is it fast?",
        "choices": ["yes", "no", "maybe"], "reuse_prefix": false,
    })
    .to_string();
    let stream = ["--moe-stream", "--cache-mb", "1"];
    let with = |extra: &[&str]| {
        let mut a = stream.to_vec();
        a.extend_from_slice(extra);
        decide_on(&t.path, &a, &request)
    };
    let cpu = with(&[]);
    let routed = with(&["--prefill-device", DEVICE]);
    let demand_only = with(&["--prefill-device", DEVICE, "--no-prefill-routed"]);
    eprintln!("cpu: {cpu:?}\nrouted: {routed:?}\ndemand only: {demand_only:?}");

    // without the device every device key is zero, as the seed says
    assert_eq!(
        (
            cpu.prefill_dev_tokens,
            cpu.prefill_dev_read_mib,
            cpu.prefill_dev_stall_s,
            cpu.prefill_dev_routed,
            cpu.prefill_dev_demand
        ),
        (0, 0.0, 0.0, 0, 0)
    );
    for d in [&routed, &demand_only] {
        assert!(!d.cancelled);
        assert!(d.prefill_dev_tokens >= 64, "{d:?}");
        assert!(d.prefill_dev_tokens <= d.n_prefilled, "{d:?}");
        // the device decodes' reads are part of the prefill's
        assert!(d.prefill_dev_read_mib > 0.0, "{d:?}");
        assert!(d.prefill_dev_read_mib <= d.prefill_read_mib + 1e-3, "{d:?}");
        assert!(d.prefill_dev_stall_s > 0.0, "{d:?}");
    }
    assert!(
        routed.prefill_dev_routed > 0 && routed.prefill_dev_demand < routed.prefill_dev_routed,
        "{routed:?}"
    );
    assert_eq!(
        (
            demand_only.prefill_dev_routed,
            demand_only.prefill_dev_demand
        ),
        (0, 0)
    );
    // the arena keeps every byte: both modes compute the same device graph on the same bytes
    assert_eq!(routed.choice_logp, demand_only.choice_logp);
    // against the CPU prefill: the same choice, scores within the backends' rounding
    assert_eq!(routed.best, cpu.best, "{routed:?} vs {cpu:?}");
    for (dev, host) in routed.choice_logp.iter().zip(&cpu.choice_logp) {
        assert!(
            (dev - host).abs() <= LOGP_TOLERANCE,
            "log-probs {:?} (device) vs {:?} (CPU)",
            routed.choice_logp,
            cpu.choice_logp
        );
    }
}

#[test]
fn a_one_token_batch_stays_on_the_cpu_on_a_model_with_32_heads() {
    // ggml-vulkan measures a norm's multiply in rows, and a per-head norm has n_head rows per
    // token: with 32 heads a one-token batch (every decode) reached its threshold of 32
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temp dir");
    let opts = SynthOptions {
        n_head: 32,
        ..SynthOptions::preset(Preset::Tiny)
    };
    let model = write_model(&opts, &dir.path().join("h32.gguf"))
        .expect("the model is written")
        .paths[0]
        .clone();
    let csv = dir.path().join("m.csv");
    let one_token = |prompt: &str, env: &[(&str, &str)]| {
        let out = cli()
            .arg("-m")
            .arg(&model)
            .args(["-p", prompt, "-n", "4", "-t", "2", "-c", "256"])
            .args(["--prefill-device", DEVICE, "--csv", csv.to_str().unwrap()])
            .envs(env.iter().copied())
            .output()
            .expect("run bmoe-cli");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            num(&csv, "n_prompt"),
            num(&csv, "prefill_dev_tokens"),
            num(&csv, "prefill_dev_nodes"),
        )
    };
    // "H" is one token: the prompt's batch has a decode's shape
    assert_eq!(one_token("H", &[]), (1.0, 0.0, 0.0));
    // the control: with ggml's own threshold (a user's setting wins) the same batch offloads
    let (_, tokens, nodes) = one_token("H", &[("GGML_OP_OFFLOAD_MIN_BATCH", "32")]);
    assert!(tokens == 1.0 && nodes > 0.0, "{tokens} {nodes}");
    // and a long prompt still runs on the device
    let (n, tokens, _) = one_token(PROMPT, &[]);
    assert!(
        n > 100.0 && tokens == n,
        "{n} prompt tokens, {tokens} on the device"
    );
}
