//! `--overlap` gates: reads hidden behind compute must change nothing that is computed — token
//! ids and every step's logits hash equal the resident run's over the serial gate matrix, for
//! the userfaultfd path and for the staged fallback (`--overlap-kind staged`) — plus the
//! negative control, the stall accounting, the telemetry keys, the failure path, the traces and
//! session mode.

use crate::gates::{
    CACHE_SIZES, PROMPT, assert_identical, cli, models, resident_args, run, trace, trace_full,
};
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::summary::PerfReport;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The two overlap mechanisms, as extra flags.
const KINDS: [&[&str]; 2] = [&["--overlap"], &["--overlap", "--overlap-kind", "staged"]];

/// Which overlap a run said it ran (`overlap=uffd|staged` on the streaming line).
fn kind_of(stderr: &str) -> Option<&str> {
    let at = stderr.find(" overlap=")?;
    stderr[at + " overlap=".len()..].split_whitespace().next()
}

/// `base` with the kind's flags appended.
fn with(base: &[&'static str], kind: &[&'static str]) -> Vec<&'static str> {
    base.iter().chain(kind).copied().collect()
}

/// Every config under both kinds must equal the resident run; the default kind must be
/// userfaultfd where the machine allows it (said on stderr otherwise).
fn assert_overlap_identical(model: &Path, configs: &[&[&'static str]]) {
    for kind in KINDS {
        let all: Vec<Vec<&str>> = configs.iter().map(|c| with(c, kind)).collect();
        let refs: Vec<&[&str]> = all.iter().map(Vec::as_slice).collect();
        assert_identical(model, &refs);
    }
    let (_, _, stderr) = trace_full(model, &with(configs[0], KINDS[0]));
    match kind_of(&stderr) {
        Some("uffd") => {}
        Some("staged") => {
            assert!(
                stderr.contains("userfaultfd") && stderr.contains("staged"),
                "a fallback must say why:\n{stderr}"
            );
            eprintln!("note: userfaultfd refused here; --overlap ran staged:\n{stderr}");
        }
        other => panic!("no overlap kind on stderr ({other:?}):\n{stderr}"),
    }
}

#[test]
fn overlap_matches_resident_across_the_serial_gate_matrix() {
    // cache off / evicting / holding everything × lanes 1 and 4 × O_DIRECT on and off, as a
    // pairwise cover: every pair of values of two of the three knobs runs at least once
    let configs: [&[&str]; 6] = [
        &["--moe-stream", "--cache-mb", "0", "--io-threads", "1"],
        &[
            "--moe-stream",
            "--cache-mb",
            "0",
            "--io-threads",
            "4",
            "--no-odirect",
        ],
        &[
            "--moe-stream",
            "--cache-mb",
            "1",
            "--io-threads",
            "1",
            "--no-odirect",
        ],
        &["--moe-stream", "--cache-mb", "1", "--io-threads", "4"],
        &["--moe-stream", "--cache-mb", "64", "--io-threads", "1"],
        &[
            "--moe-stream",
            "--cache-mb",
            "64",
            "--io-threads",
            "4",
            "--no-odirect",
        ],
    ];
    assert_overlap_identical(&models().q8, &configs);
}

#[test]
fn overlap_covers_every_quant_the_split_model_and_every_architecture() {
    let m = models();
    for model in [&m.f32, &m.q4k, &m.split3] {
        assert_overlap_identical(
            model,
            &[
                &["--moe-stream"],
                &["--moe-stream", "--cache-mb", "1", "--io-threads", "1"],
            ],
        );
    }
    // every architecture over the full cache matrix (off, evicting, holding everything)
    for model in [&m.qwen2moe, &m.gpt_oss, &m.gemma4, &m.lfm2moe, &m.qwen35moe] {
        assert_overlap_identical(model, &CACHE_SIZES);
    }
}

#[test]
fn overlap_streams_deepseek4_and_bailingmoe3_identically() {
    // the two architectures with hash-routed / group-limited routing and MLA / KDA attention,
    // over the full cache matrix (off, evicting, holding everything)
    let m = models();
    for model in [&m.deepseek4, &m.bailingmoe3] {
        assert_overlap_identical(model, &CACHE_SIZES);
    }
}

#[test]
fn overlap_streams_tensors_that_share_pages_with_their_neighbours() {
    // real GGUF files align tensors to 32 bytes: expert tensors then share their first and last
    // pages with neighbouring tensors, which userfaultfd must never see as missing or install
    // over (the refill writes those pages whole)
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    for preset in [Preset::Tiny, Preset::GptOssTiny] {
        let mut o = SynthOptions::preset(preset);
        o.alignment = 32;
        let path = dir.path().join(format!("{preset:?}-a32.gguf"));
        let model = write_model(&o, &path).expect("synthesise").paths[0].clone();
        assert_overlap_identical(
            &model,
            &[
                &["--moe-stream"],
                &["--moe-stream", "--cache-mb", "1", "--no-odirect"],
            ],
        );
    }
}

#[test]
fn overlap_covers_split_prefills() {
    assert_overlap_identical(
        &models().q4k,
        &[
            &["--moe-stream", "--ubatch", "4"],
            &["--moe-stream", "--ubatch", "4", "--cache-mb", "1"],
        ],
    );
}

#[test]
fn poisoning_a_routed_expert_still_changes_the_output_under_overlap() {
    let m = &models().q8;
    let (resident, _) = trace(m, &[]);
    for kind in KINDS {
        let (unrouted, _) = trace(
            m,
            &with(&["--moe-stream", "--test-poison", "unrouted"], kind),
        );
        assert_eq!(unrouted, resident, "{kind:?}: unrouted NaN changes nothing");
        let cached = with(
            &[
                "--moe-stream",
                "--cache-mb",
                "1",
                "--test-poison",
                "unrouted",
            ],
            kind,
        );
        let (got, _, stderr) = trace_full(m, &cached);
        let args = resident_args(&cached, &stderr);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(got, trace(m, &a).0, "{kind:?}");
        for cache in ["0", "1"] {
            let (routed, _) = trace(
                m,
                &with(
                    &[
                        "--moe-stream",
                        "--cache-mb",
                        cache,
                        "--test-poison",
                        "routed",
                    ],
                    kind,
                ),
            );
            assert_ne!(
                routed, resident,
                "{kind:?} cache {cache}: NaN in a routed expert must change the output"
            );
        }
    }
}

/// A streamed `--overlap` run with `--csv`, its stdout and the file.
fn csv_run(kind: &[&'static str], cache: &str, n: &str) -> (String, String, MetricsFile) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let csv = dir.path().join("m.csv");
    let out = cli()
        .arg("-m")
        .arg(&models().q8)
        .args([
            "-p",
            PROMPT,
            "-n",
            n,
            "-t",
            "2",
            "-c",
            "256",
            "--ignore-eos",
        ])
        .args(["--moe-stream", "--cache-mb", cache, "--csv"])
        .arg(&csv)
        .args(kind)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let file = MetricsFile::read(&csv).expect("read csv");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        file,
    )
}

#[test]
fn stall_is_a_union_within_each_token_and_vanishes_when_the_cache_holds_everything() {
    for kind in KINDS {
        let (stdout, stderr, file) = csv_run(kind, "0", "12");
        let expected_kind = kind_of(&stderr).expect("kind on stderr");
        if kind == KINDS[1] {
            assert_eq!(expected_kind, "staged", "--overlap-kind staged runs staged");
        }
        let extra = &file.info.extra;
        assert_eq!(file.info.overlap, Some(true), "{kind:?}");
        assert_eq!(extra.get("overlap_kind"), Some(expected_kind), "{kind:?}");
        let rows = &file.rows;
        assert_eq!(rows.len(), 12);
        let mut any_stall = false;
        for r in rows {
            let (wall, stall, mgmt) = (r.wall_ms.unwrap(), r.stall_ms.unwrap(), r.mgmt_ms.unwrap());
            assert!(
                stall <= wall + 0.01,
                "{kind:?}: stall {stall} > wall {wall}"
            );
            // the residual subtracts the stall, not the lanes' busy time (which may exceed wall)
            let compute = r.compute_ms.unwrap();
            assert!(
                (compute - (wall - stall - mgmt).max(0.0)).abs() < 0.01,
                "{kind:?}: compute {compute} != wall {wall} - stall {stall} - mgmt {mgmt}"
            );
            assert!(r.drain_ms.unwrap() >= 0.0);
            any_stall |= stall > 0.0;
        }
        // the staged overlap always waits for the first projection; under userfaultfd a token
        // stalls only if a compute thread touched a page before its lane installed it, which a
        // loaded machine may never show on this tiny model (the 17 GB benchmark measures it)
        if expected_kind == "staged" {
            assert!(
                any_stall,
                "{kind:?}: the cache is off, tokens wait for reads"
            );
        }
        let report = PerfReport::parse(&stdout);
        let overlap_line = report.moe_overlap.expect("moe-overlap line");
        let trailer = file.summaries.last().expect("trailer");
        let stall_tok: f64 = trailer
            .get("stall_s/tok")
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!((overlap_line.stall_s_per_token - stall_tok).abs() < 0.0015);
        assert!(trailer.get("drain_s/tok").is_some(), "{trailer:?}");
        assert!(trailer.get("prefill_stall_s").is_some());
        assert!(
            stdout.contains(&format!("overlap ({expected_kind})")),
            "mode line names the kind:\n{stdout}"
        );
        // a cache holding every expert: once warm, tokens read nothing and never stall
        let (_, _, held) = csv_run(kind, "64", "24");
        let warm: Vec<_> = held
            .rows
            .iter()
            .filter(|r| r.read_bytes == Some(0))
            .collect();
        assert!(
            !warm.is_empty(),
            "{kind:?}: a 64 MiB cache holds the tiny model"
        );
        for r in warm {
            assert!(
                r.stall_ms.unwrap() < 0.05,
                "{kind:?}: a token that read nothing stalled {:?} ms",
                r.stall_ms
            );
        }
    }
}

/// Runs `cmd`, killing it after `limit` (a hang is a failure, not a stuck CI).
fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let t0 = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "bmoe-cli hung for {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_failed_read_under_overlap_exits_1_with_the_error_and_no_answer() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let model = dir.path().join("live.gguf");
    std::fs::copy(&models().q8, &model).expect("copy");
    let bytes = std::fs::read(&model).expect("read");
    // the last experts of the file are gone: set-up succeeds, a later read comes back short
    let replacement = dir.path().join("short.gguf");
    std::fs::write(&replacement, &bytes[..bytes.len() * 9 / 10]).expect("write");
    for kind in KINDS {
        std::fs::copy(&replacement, dir.path().join("again.gguf")).expect("copy");
        let out = output_within(
            cli()
                .env(
                    "BMOE_TEST_REPLACE_AFTER_LOAD",
                    dir.path().join("again.gguf"),
                )
                .arg("-m")
                .arg(&model)
                .args(["--moe-stream", "--cache-mb", "0", "-p", PROMPT, "-n", "8"])
                .args(["-t", "2", "-c", "256", "--progress", "--ignore-eos"])
                .args(kind),
            Duration::from_secs(120),
        );
        std::fs::copy(&models().q8, &model).expect("restore");
        let err = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{kind:?} stderr:\n{err}");
        assert!(
            err.contains("expert read") && err.contains("live.gguf") && err.contains("offset"),
            "{kind:?}: {err}"
        );
        assert!(
            !stdout.contains("=== answer ===") && !stdout.contains("generation:"),
            "{kind:?}: {stdout}"
        );
    }
}

#[test]
fn overlap_flags_need_their_prerequisites() {
    for (args, says) in [
        (&["--overlap"][..], "--overlap requires --moe-stream"),
        (
            &["--moe-stream", "--overlap-kind", "staged"],
            "--overlap-kind requires --overlap",
        ),
        (
            &["--moe-stream", "--overlap", "--overlap-kind", "fast"],
            "--overlap-kind expects uffd|staged",
        ),
    ] {
        let out = run(&models().q8, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(says) && err.contains("hint:"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn traces_under_overlap_route_as_serial_and_the_lanes_read() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let m = &models().q8;
    let traced = |name: &str, extra: &[&str]| {
        let (route, io, compute) = (
            dir.path().join(format!("{name}-route.csv")),
            dir.path().join(format!("{name}-io.csv")),
            dir.path().join(format!("{name}-compute.csv")),
        );
        let out = cli()
            .arg("-m")
            .arg(m)
            .args([
                "-p",
                PROMPT,
                "-n",
                "6",
                "-t",
                "2",
                "-c",
                "256",
                "--ignore-eos",
            ])
            .args(["--moe-stream", "--cache-mb", "1", "--io-threads", "3"])
            .arg("--route-trace")
            .arg(&route)
            .arg("--io-trace")
            .arg(&io)
            .arg("--compute-trace-layers")
            .arg(&compute)
            .args(extra)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (route, io, compute)
    };
    let experts = |p: &Path| -> Vec<(i64, u32, u32, u32)> {
        bmoe_telemetry::trace::RouteTraceReader::open(p)
            .expect("route trace")
            .map(|r| {
                let r = r.expect("row");
                (r.step, r.layer, r.slot, r.expert)
            })
            .collect()
    };
    let (serial_route, _, _) = traced("serial", &[]);
    for (i, kind) in KINDS.iter().enumerate() {
        let (route, io, compute) = traced(&format!("ov{i}"), kind);
        assert_eq!(experts(&route), experts(&serial_route), "{kind:?}");
        let head = std::fs::read_to_string(&compute).expect("compute trace");
        assert!(head.contains("overlap=1"), "{kind:?}: {head}");
        let reads: Vec<_> = bmoe_telemetry::trace::IoTraceReader::open(&io)
            .expect("io trace")
            .map(|r| r.expect("row"))
            .collect();
        assert!(!reads.is_empty(), "{kind:?}");
        // under overlap every lane is a worker: lanes 0..3, none of them the eval thread
        assert!(reads.iter().all(|r| r.lane < 3), "{kind:?}");
        assert!(
            reads.iter().all(|r| r.read_bytes >= r.req_bytes),
            "{kind:?}"
        );
    }
}

#[test]
fn a_session_answers_the_same_with_and_without_overlap() {
    let transcript = |extra: &[&str]| -> Vec<String> {
        let mut child = cli()
            .arg("-m")
            .arg(&models().q8)
            .args([
                "--moe-stream",
                "--cache-mb",
                "1",
                "--session",
                "--decide",
                "-t",
                "2",
            ])
            .args(["-c", "512", "--ignore-eos"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        {
            use std::io::Write;
            let stdin = child.stdin.as_mut().expect("stdin");
            for line in [
                r#"{"cmd":"generate","id":1,"prompt":"hello","n_predict":5}"#,
                r#"{"cmd":"generate","id":2,"prompt":" again","n_predict":4,"clear_kv":false}"#,
                r#"{"cmd":"decide","id":3,"prefix":"Is it","suffix":" yes?","choices":["yes","no"]}"#,
                r#"{"cmd":"close"}"#,
            ] {
                writeln!(stdin, "{line}").expect("write");
            }
        }
        let out = child.wait_with_output().expect("session");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // what was generated and scored, not how long it took
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l.split_once(' ')?.1).ok()?;
                let keep = ["delta_text", "text", "choice_logp", "best", "n_past"];
                let picked: Vec<String> = keep
                    .iter()
                    .filter_map(|k| v.get(*k).map(|x| format!("{k}={x}")))
                    .collect();
                (!picked.is_empty()).then(|| picked.join(" "))
            })
            .collect()
    };
    let serial = transcript(&[]);
    assert!(
        serial.iter().any(|l| l.contains("choice_logp")),
        "{serial:?}"
    );
    for kind in KINDS {
        assert_eq!(transcript(kind), serial, "{kind:?}");
    }
}
