//! The MTP (NextN) head bmoe-gguf synthesises on qwen35moe: real llama.cpp loads it and builds
//! an MTP draft context over it; the head leaves plain runs alone (resident and streamed give
//! the same tokens, with or without the head); `--mtp` without a head or with `--temp` is refused
//! with the reason; speculation refuses `--feed-random` and a misplaced `--mtp-p-min` instead of
//! ignoring them. The head really runs: the target's hidden states feed an MTP context that
//! drafts — and `--mtp` drives it end to end: every accepted token is the target's greedy
//! argmax (re-scored by a plain run), the seed's accounting holds, streamed drafts equal
//! resident ones, and the head's own experts stream through the cache.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use bmoe_engine::internals::{Context, ContextOptions, Model, ModelOptions, MoeHook, MtpHead};
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::protocol::{LineKind, Record, parse_line};
use bmoe_telemetry::summary::PerfReport;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

/// A qwen35moe-tiny with and without the head, same seed (same trunk), and the head model
/// rewritten so the head drafts what the target decodes ([`echo`]).
struct Pair {
    _dir: tempfile::TempDir,
    head: PathBuf,
    plain: PathBuf,
    echo: PathBuf,
}

fn pair() -> &'static Pair {
    static P: OnceLock<Pair> = OnceLock::new();
    P.get_or_init(|| {
        // under the target dir, not /tmp: tmpfs refuses O_DIRECT
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let write = |name: &str, mtp: u32| {
            let mut o = SynthOptions::preset(Preset::Qwen35MoeTiny);
            o.n_mtp_layers = mtp;
            write_model(&o, &dir.path().join(name)).unwrap().paths[0].clone()
        };
        let head = write("qwen35moe-mtp.gguf", 1);
        let echo = dir.path().join("qwen35moe-mtp-echo.gguf");
        echo_model(&head, &echo);
        Pair {
            head,
            plain: write("qwen35moe.gguf", 0),
            echo,
            _dir: dir,
        }
    })
}

/// `src` rewritten into a model whose MTP head drafts exactly what its trunk decodes: every
/// block's output projections (attention, linear attention, routed and shared experts) are
/// zeroed, so the trunk is a bigram model — the next token is `output(norm(embd(tok)))` — and
/// the head's `eh_proj` passes the token half of its input through, so with its own blocks
/// zeroed the head computes that same function of the token it is given. The experts are still
/// routed and (under `--moe-stream`) read; they just add nothing.
fn echo_model(src: &Path, dst: &Path) {
    std::fs::copy(src, dst).unwrap();
    let m = bmoe_gguf::GgufModel::open(dst).unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(dst).unwrap();
    let zero = [
        "attn_output.weight",
        "ssm_out.weight",
        "ffn_down_exps.weight",
        "ffn_down_shexp.weight",
    ];
    let mut patched = 0;
    for t in m.tensors() {
        let i = &t.info;
        let data = if zero.iter().any(|z| i.name.ends_with(z)) {
            vec![0u8; i.n_bytes as usize]
        } else if i.name.ends_with("nextn.eh_proj.weight") {
            identity_token_half(i)
        } else {
            continue;
        };
        f.seek(SeekFrom::Start(i.file_offset)).unwrap();
        f.write_all(&data).unwrap();
        patched += 1;
    }
    assert!(patched > 8, "only {patched} tensors patched");
}

/// A Q8_0 `[2e, e]` matrix whose row j is 1 at column j (the token half of the head's input)
/// and 0 elsewhere.
fn identity_token_half(i: &bmoe_gguf::TensorInfo) -> Vec<u8> {
    assert_eq!(i.ggml_type, bmoe_gguf::GgmlType::Q8_0, "{}", i.name);
    let (cols, rows) = (i.dims[0] as usize, i.dims[1] as usize);
    assert_eq!(cols, 2 * rows);
    let block = 34; // f16 scale + 32 × i8
    let row_bytes = cols / 32 * block;
    let mut out = vec![0u8; row_bytes * rows];
    for j in 0..rows {
        let b = j * row_bytes + (j / 32) * block;
        out[b..b + 2].copy_from_slice(&0x3c00u16.to_le_bytes()); // f16 1.0
        out[b + 2 + j % 32] = 1;
    }
    assert_eq!(out.len() as u64, i.n_bytes);
    out
}

fn run(model: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(model)
        .args(["-p", "abcabcabcabc", "-n", "16", "-t", "2", "-c", "256"])
        .args(["--ignore-eos"])
        .args(extra)
        .output()
        .unwrap()
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "bmoe-cli failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    s.split("\n\ngeneration:").next().unwrap().to_string()
}

fn stderr_fail(out: &Output) -> String {
    assert!(!out.status.success(), "expected a refusal");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn llama_cpp_loads_the_synthesised_head_and_builds_an_mtp_context() {
    let p = pair();
    let opts = ModelOptions {
        load_mtp: true,
        ..ModelOptions::default()
    };
    let m = Model::load(&p.head, &opts).unwrap();
    assert_eq!(m.n_layer(), 4, "the head is not a trunk layer");
    assert_eq!(m.n_layer_nextn(), 1);
    assert!(
        m.mtp_context_builds(64),
        "llama.cpp refused the MTP context"
    );
    // the control: llama.cpp refuses an MTP context over a model without a head
    let m = Model::load(&p.plain, &opts).unwrap();
    assert_eq!(m.n_layer_nextn(), 0);
    assert!(!m.mtp_context_builds(64));
}

#[test]
fn the_head_leaves_plain_runs_alone() {
    let p = pair();
    let resident = stdout_ok(&run(&p.head, &[]));
    let streamed = stdout_ok(&run(&p.head, &["--moe-stream", "--cache-mb", "0"]));
    assert_eq!(resident, streamed, "streamed ≠ resident on the head model");
    let without = stdout_ok(&run(&p.plain, &[]));
    assert_eq!(resident, without, "the head changed the trunk's tokens");
}

#[test]
fn mtp_without_a_head_or_with_sampling_is_refused_with_the_reason() {
    let p = pair();
    let err = stderr_fail(&run(&p.plain, &["--mtp"]));
    assert!(err.contains("nextn_predict_layers"), "{err}");
    assert!(err.contains("hint:") && err.contains("--ngram"), "{err}");
    let err = stderr_fail(&run(&p.head, &["--mtp", "--temp", "0.7"]));
    assert!(err.contains("--mtp") && err.contains("--temp"), "{err}");
    assert!(err.contains("greedy") && err.contains("hint:"), "{err}");
}

#[test]
fn speculation_refuses_feed_random_and_a_misplaced_p_min() {
    let p = pair();
    for flag in ["--ngram", "--mtp"] {
        let err = stderr_fail(&run(&p.plain, &[flag, "--feed-random", "7"]));
        assert!(err.contains(flag) && err.contains("--feed-random"), "{err}");
        assert!(err.contains("hint:"), "{err}");
    }
    let err = stderr_fail(&run(&p.head, &["--mtp", "--mtp-p-min", "1.5"]));
    assert!(
        err.contains("--mtp-p-min") && err.contains("[0, 1]"),
        "{err}"
    );
    let err = stderr_fail(&run(&p.plain, &["--ngram", "--mtp-p-min", "0.5"]));
    assert!(
        err.contains("--mtp-p-min") && err.contains("--ngram"),
        "{err}"
    );
    let err = stderr_fail(&run(&p.plain, &["--mtp-p-min", "0.5"]));
    assert!(err.contains("without --mtp"), "{err}");
    // --feed-random alone still runs
    stdout_ok(&run(&p.plain, &["--feed-random", "7"]));
}

fn argmax(l: &[f32]) -> usize {
    (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b })
}

#[test]
fn the_head_drafts_from_the_targets_hidden_states_and_its_kv_trims() {
    let p = pair();
    let opts = ModelOptions {
        load_mtp: true,
        ..ModelOptions::default()
    };
    let m = Model::load(&p.head, &opts).unwrap();
    let copts = ContextOptions {
        n_ctx: 128,
        n_batch: 128,
        n_ubatch: 128,
        n_threads: 2,
        n_rs_seq: 0,
        device_offload: false,
    };
    let mut tgt: Context<'_, MoeHook> =
        Context::new(&m, copts, None, Arc::new(AtomicBool::new(false))).unwrap();
    tgt.keep_nextn_states();
    let prompt = [97, 98, 99, 97];
    tgt.decode(&mut prompt.clone()).unwrap();
    // every position's state is kept (unmasked), not only the one with logits
    let h: Vec<Vec<f32>> = (0..4)
        .map(|i| tgt.nextn_state(i).unwrap().to_vec())
        .collect();
    assert!(
        h.iter()
            .all(|r| r.len() == m.n_embd() && r.iter().all(|x| x.is_finite()))
    );
    assert_ne!(h[0], h[3], "states of different positions are equal");
    let next = argmax(tgt.last_logits()) as i32;

    let mut head = MtpHead::new(&m, 128, 2).unwrap();
    // catch-up: the token at position p pairs with the target's state of p − 1
    let toks = [prompt[1], prompt[2], prompt[3], next];
    let rows: Vec<&[f32]> = h.iter().map(Vec::as_slice).collect();
    head.process(&toks, &rows, 1).unwrap();
    let l1 = head.logits().to_vec();
    assert_eq!(l1.len(), m.n_vocab());
    assert!(l1.iter().all(|x| x.is_finite()));
    let d1 = argmax(&l1) as i32;
    let s1 = head.state().unwrap().to_vec();
    assert!(s1.len() == m.n_embd() && s1.iter().all(|x| x.is_finite()));
    // the second draft step pairs the first draft with the head's own state
    head.process(&[d1], &[&s1], 5).unwrap();
    let l2 = head.logits().to_vec();
    // rejecting that draft trims the head's KV: the same step again gives the same logits
    assert!(head.seq_rm(5));
    head.process(&[d1], &[&s1], 5).unwrap();
    assert_eq!(
        head.logits(),
        &l2[..],
        "the trimmed KV still held the rejected draft"
    );
    // a state of the wrong width is refused, not read out of bounds
    assert!(head.process(&[d1], &[&s1[..8]], 6).is_err());

    // the control: no head, no MTP context
    let plain = Model::load(&p.plain, &opts).unwrap();
    assert!(MtpHead::new(&plain, 128, 2).is_err());
}

const PROMPT: &str = "abcabcabcabc";

/// The run's tokens by step and its verify groups (`spec-draft` lines), from
/// `--dump-logits-hash`'s stderr.
struct Traced {
    text: String,
    tokens: Vec<i32>,
    drafts: Vec<String>,
    stdout: String,
}

fn traced(model: &Path, extra: &[&str]) -> Traced {
    let mut args = vec!["--dump-logits-hash"];
    args.extend_from_slice(extra);
    let out = run(model, &args);
    let text = stdout_ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let mut tokens = Vec::new();
    let mut drafts = Vec::new();
    for l in err.lines() {
        if let Some(rest) = l.strip_prefix("logits-hash step=") {
            let tok = rest.split(" token=").nth(1).unwrap();
            tokens.push(tok.split(' ').next().unwrap().parse().unwrap());
        } else if l.starts_with("spec-draft ") {
            drafts.push(l.to_string());
        }
    }
    Traced {
        text,
        tokens,
        drafts,
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
    }
}

/// Steps whose token is not the target's greedy argmax (EOG banned, as `--ignore-eos` does)
/// after the prompt and the run's own earlier tokens, decoded one at a time by a plain context.
fn off_argmax(model: &Path, tokens: &[i32]) -> Vec<usize> {
    let m = Model::load(model, &ModelOptions::default()).unwrap();
    let copts = ContextOptions {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        n_rs_seq: 0,
        device_offload: false,
    };
    let mut ctx: Context<'_, MoeHook> =
        Context::new(&m, copts, None, Arc::new(AtomicBool::new(false))).unwrap();
    let mut prompt = m.tokenize(PROMPT).unwrap();
    ctx.decode(&mut prompt).unwrap();
    let mut off = Vec::new();
    for (i, &t) in tokens.iter().enumerate() {
        let l = ctx.last_logits();
        let best = (0..l.len())
            .filter(|&j| !m.is_eog(j as i32))
            .fold(None, |b: Option<usize>, j| match b {
                Some(b) if l[b] >= l[j] => Some(b),
                _ => Some(j),
            })
            .unwrap();
        if best as i32 != t {
            off.push(i + 1);
        }
        ctx.decode(&mut [t]).unwrap();
    }
    off
}

const MTP: &[&str] = &["--mtp", "--draft", "3"];

fn with<'a>(mode: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    mode.iter().chain(extra).copied().collect()
}

#[test]
fn every_accepted_mtp_token_is_the_targets_greedy_argmax_and_streaming_drafts_the_same() {
    let p = pair();
    let resident = traced(&p.head, MTP);
    assert_eq!(resident.tokens.len(), 16, "{:?}", resident.tokens);
    assert!(!resident.drafts.is_empty(), "no verify decode");
    assert_eq!(off_argmax(&p.head, &resident.tokens), Vec::<usize>::new());
    let perf = PerfReport::parse(&resident.stdout);
    let acc = perf.spec_acceptance.clone().expect("mtp: acceptance line");
    assert_eq!((acc.source.as_str(), acc.tokens), ("mtp", 16));
    assert!(acc.accepted <= acc.drafted && acc.decodes <= 16);
    assert!(acc.tokens_per_decode < 4.0);
    let cost = perf.spec_cost.expect("mtp: cost line");
    assert!(cost.effective_tok_s <= cost.reported_tok_s);
    assert!(perf.ngram_coverage.is_none(), "coverage is --ngram's line");
    // the head's experts are streamed tensors: they go through the cache like a trunk layer's,
    // and the drafts they give are the resident ones
    for mode in [
        &["--moe-stream", "--cache-mb", "0"][..],
        &["--moe-stream", "--cache-mb", "1"],
        &["--moe-stream", "--cache-mb", "64"],
        &["--moe-stream", "--overlap"],
    ] {
        let s = traced(&p.head, &with(mode, MTP));
        assert_eq!(s.drafts, resident.drafts, "drafts differ under {mode:?}");
        assert_eq!(s.text, resident.text, "text differs under {mode:?}");
        let line = s
            .stdout
            .lines()
            .find(|l| l.starts_with("mtp: of "))
            .unwrap_or_else(|| panic!("no mtp: streamed line under {mode:?}"));
        let head_mib: f64 = line
            .split(" MiB streamed, ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(head_mib > 0.0, "the head streamed nothing: {line}");
    }
}

#[test]
fn a_head_that_drafts_what_the_target_decodes_is_accepted_resident_and_streamed() {
    let p = pair();
    let resident = traced(&p.echo, MTP);
    let acc = PerfReport::parse(&resident.stdout).spec_acceptance.unwrap();
    assert!(
        acc.accepted * 2 > acc.drafted && acc.decodes < 16,
        "the echo head was not accepted: {acc:?}"
    );
    // a group confirms at most 1 + --draft tokens (exactly that when every draft is kept)
    assert!(acc.tokens_per_decode <= 4.0);
    // accepted drafts are the target's own argmax, re-scored one token at a time
    assert_eq!(resident.tokens.len(), 16);
    assert_eq!(off_argmax(&p.echo, &resident.tokens), Vec::<usize>::new());
    assert_eq!(resident.text, stdout_ok(&run(&p.echo, &[])));
    for mode in [
        &["--moe-stream", "--cache-mb", "0"][..],
        &["--moe-stream", "--cache-mb", "1"],
        &["--moe-stream", "--overlap"],
    ] {
        let s = traced(&p.echo, &with(mode, MTP));
        assert_eq!(s.drafts, resident.drafts, "drafts differ under {mode:?}");
        assert_eq!(s.text, resident.text, "text differs under {mode:?}");
    }
}

#[test]
fn mtp_p_min_cuts_drafts_and_changes_no_token() {
    let p = pair();
    let all = traced(&p.head, MTP);
    let cut = traced(&p.head, &with(MTP, &["--mtp-p-min", "1"]));
    // a probability of exactly 1 among the head's ten best is out of reach of a random head
    assert!(cut.drafts.is_empty(), "{:?}", cut.drafts);
    let acc = PerfReport::parse(&cut.stdout).spec_acceptance.unwrap();
    assert_eq!((acc.drafted, acc.decodes), (0, 16));
    assert_eq!(off_argmax(&p.head, &cut.tokens), Vec::<usize>::new());
    // no drafts: exactly the unspeculated greedy run
    assert_eq!(cut.text, stdout_ok(&run(&p.head, &[])));
    assert!(!all.drafts.is_empty());
}

#[test]
fn the_mtp_ledger_matches_the_seed_one_shot_progress_and_session() {
    let p = pair();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let csv = dir.path().join("mtp.csv");
    let out = run(
        &p.echo,
        &with(
            MTP,
            &[
                "--moe-stream",
                "--cache-mb",
                "0",
                "--csv",
                csv.to_str().unwrap(),
            ],
        ),
    );
    stdout_ok(&out);
    let f = MetricsFile::read(&csv).unwrap();
    let batches: Vec<u64> = f.rows.iter().map(|r| r.mtp_batch.unwrap()).collect();
    assert_eq!(batches.iter().sum::<u64>(), 16, "Σ mtp_batch = tokens");
    assert!(batches.iter().all(|&b| b <= 4), "{batches:?}");
    assert!(batches.iter().any(|&b| b > 1), "no group: {batches:?}");
    let t = &f.summaries[0];
    let decodes = batches.iter().filter(|&&b| b >= 1).count() as u64;
    assert_eq!(t.get_u64("mtp_decodes"), Some(decodes));
    assert_eq!(
        t.get_u64("mtp_accepted"),
        Some(batches.iter().map(|b| b.saturating_sub(1)).sum::<u64>())
    );
    let steps = t.get_u64("drafted_steps").unwrap();
    // every step drafts but the last (no room left): coverage = drafted_steps / decodes
    assert!(steps >= 1 && steps <= decodes, "{steps} of {decodes}");
    assert!(t.get_u64("mtp_drafted").unwrap() >= steps);
    let draft_s = t.get("mtp_draft_s/tok").unwrap().parse::<f64>().unwrap();
    assert!(draft_s > 0.0, "drafting cost nothing");
    crate::speculation::followers_carry_zeros(&f);
    assert!(f.rows.iter().skip(1).any(|r| r.mtp_draft_ms.unwrap() > 0.0));
    assert_eq!(f.info.spec.as_deref(), Some("mtp"));
    assert_eq!(f.info.spec_draft_max, Some(3));

    // --progress: the same tokens, the lines and the answer
    let prog = run(&p.echo, &with(MTP, &["--progress"]));
    assert!(prog.status.success());
    let perf = PerfReport::parse(&String::from_utf8_lossy(&prog.stdout));
    assert_eq!(perf.spec_acceptance.unwrap().tokens, 16);

    // a session: two turns on one KV, each with its own ledger in BMOE_DONE
    let requests = dir.path().join("requests.jsonl");
    let lines: Vec<String> = [(1, true), (2, false)]
        .iter()
        .map(|(id, clear)| {
            format!(
                r#"{{"cmd":"generate","id":{id},"prompt":"abcabc","n_predict":8,"clear_kv":{clear}}}"#
            )
        })
        .collect();
    std::fs::write(&requests, lines.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(&p.echo)
        .args([
            "--session",
            "-t",
            "2",
            "-n",
            "8",
            "-c",
            "256",
            "--ignore-eos",
        ])
        .args(MTP)
        .stdin(std::fs::File::open(&requests).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match parse_line(l) {
            LineKind::Record(Record::Done(d)) => Some(*d),
            _ => None,
        })
        .collect();
    assert_eq!(done.len(), 2);
    for d in &done {
        assert!(d.mtp_decodes >= 1 && d.mtp_decodes < 8, "{}", d.mtp_decodes);
        assert!(d.mtp_accepted > 0 && d.mtp_accepted <= d.mtp_drafted);
        assert!(d.drafted_steps >= 1 && d.drafted_steps <= d.mtp_decodes);
    }
}

#[test]
fn how_often_mtp_text_differs_from_the_unspeculated_greedy_run() {
    // the seed allows a difference (a verify decode is a wider batch); this counts it and
    // checks that wherever the texts part, the speculated token is still the target's argmax
    let p = pair();
    let mut differ = 0;
    let configs: [(&[&str], &str); 4] = [
        (&[], "3"),
        (&[], "1"),
        (&[], "5"),
        (&["--moe-stream", "--cache-mb", "0"], "3"),
    ];
    for (mode, draft) in configs {
        let plain = stdout_ok(&run(&p.head, mode));
        let args = with(mode, &["--mtp", "--draft", draft]);
        let s = traced(&p.head, &args);
        if s.text != plain {
            differ += 1;
        }
        assert_eq!(off_argmax(&p.head, &s.tokens), Vec::<usize>::new());
    }
    eprintln!(
        "mtp: {differ} of {} texts differ from the unspeculated run",
        configs.len()
    );
}
