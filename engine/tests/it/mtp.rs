//! The MTP (NextN) head bmoe-gguf synthesises on qwen35moe: real llama.cpp loads it and builds
//! an MTP draft context over it; the head leaves plain runs alone (resident and streamed give
//! the same tokens, with or without the head); `--mtp` is refused with the precise reason; and
//! speculation refuses `--feed-random` and a misplaced `--mtp-p-min` instead of ignoring them.
//! And the head really runs: the target's hidden states feed an MTP context that drafts.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use bmoe_engine::internals::{Context, ContextOptions, Model, ModelOptions, MoeHook, MtpHead};
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

/// A qwen35moe-tiny with and without the head, same seed (same trunk).
struct Pair {
    _dir: tempfile::TempDir,
    head: PathBuf,
    plain: PathBuf,
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
        Pair {
            head: write("qwen35moe-mtp.gguf", 1),
            plain: write("qwen35moe.gguf", 0),
            _dir: dir,
        }
    })
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
fn mtp_is_refused_with_the_precise_reason() {
    let p = pair();
    let err = stderr_fail(&run(&p.plain, &["--mtp"]));
    assert!(err.contains("nextn_predict_layers"), "{err}");
    assert!(err.contains("hint:") && err.contains("--ngram"), "{err}");
    let err = stderr_fail(&run(&p.head, &["--mtp", "--draft", "2"]));
    assert!(err.contains("has an MTP head"), "{err}");
    assert!(err.contains("does not draft from it yet"), "{err}");
    assert!(err.contains("hint:"), "{err}");
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
