//! `decide` on real llama.cpp, on models bmoe-gguf synthesises at test time: log-probabilities
//! against an independent computation, prefix reuse changing nothing but the work done, request
//! errors, cancel, and a conversation in the KV surviving a decide bit for bit — through the
//! library, and through `bmoe-cli --session --decide` over real pipes (a chat continued after
//! decides answers as without them; streamed experts score exactly as resident ones).

use bmoe_engine::internals::MoeHook;
use bmoe_engine::internals::logits_hash;
use bmoe_engine::internals::{ChatTemplate, ThinkCtl};
use bmoe_engine::internals::{Context, ContextOptions, Model, ModelOptions, Token};
use bmoe_engine::internals::{DecideError, DecideSetup, PrefixState, decide};
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::protocol::{Decide, DecideRequest, Done, LineKind, Record, parse_line};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

struct Models {
    _dir: tempfile::TempDir,
    tiny: PathBuf,
    gpt_oss: PathBuf,
}

fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let synth = |name: &str, preset| {
            let s = write_model(&SynthOptions::preset(preset), &dir.path().join(name))
                .expect("synthesise model");
            s.paths[0].clone()
        };
        Models {
            tiny: synth("tiny.gguf", Preset::Tiny),
            gpt_oss: synth("gpt-oss.gguf", Preset::GptOssTiny),
            _dir: dir,
        }
    })
}

fn load(path: &Path) -> Model {
    Model::load(path, &ModelOptions::default()).expect("load model")
}

fn context(model: &Model, n_ctx: u32, abort: Arc<AtomicBool>) -> Context<'_, MoeHook> {
    let opts = ContextOptions {
        n_ctx,
        n_batch: n_ctx,
        n_ubatch: n_ctx,
        n_threads: 2,
        n_rs_seq: 0,
        device_offload: false,
    };
    Context::new(model, opts, None, abort).expect("context")
}

fn template(model: &Model) -> ChatTemplate {
    let src = model
        .meta_str("tokenizer.chat_template")
        .expect("synthetic models carry a chat template");
    let bos = String::from_utf8_lossy(&model.token_piece(model.bos())).into_owned();
    ChatTemplate::new(&src, &bos, &bos).expect("template parses")
}

/// Rendered with the model's template, prefill unsplit.
fn chat(t: &ChatTemplate) -> DecideSetup<'_> {
    DecideSetup {
        template: Some(t),
        think_ctl: t.think_ctl(),
        prefill_chunk: None,
    }
}

/// Raw `prefix + suffix`, prefill unsplit.
const RAW: DecideSetup<'static> = DecideSetup {
    template: None,
    think_ctl: ThinkCtl::Template,
    prefill_chunk: None,
};

fn request(id: i64, prefix: &str, suffix: &str, choices: &[&str], reuse: bool) -> DecideRequest {
    DecideRequest {
        id,
        prefix: prefix.into(),
        suffix: suffix.into(),
        choices: choices.iter().map(|c| c.to_string()).collect(),
        reuse_prefix: Some(reuse),
    }
}

const DOC: &str = "The streaming engine reads only the experts each token routes to. ";
const CHOICES: &[&str] = &["A", "B", "yes", "no", "maybe", "Paris", "0"];

/// Log-softmax written out independently of the engine (two passes, f64).
fn reference_logp(logits: &[f32], tok: Token) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let z: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[tok as usize] as f64 - max - z.ln()
}

/// Greedy continuation of whatever sequence 0 holds, after `first` is decided from the logits
/// now in the context: the token ids and a hash of every step's logits.
fn greedy(ctx: &mut Context<'_, MoeHook>, n: usize) -> (Vec<Token>, Vec<u64>) {
    let mut toks = Vec::new();
    let mut hashes = Vec::new();
    for _ in 0..n {
        let logits = ctx.last_logits();
        hashes.push(logits_hash(logits));
        let tok = logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |b, (i, &v)| {
                if v > b.1 { (i, v) } else { b }
            })
            .0 as Token;
        toks.push(tok);
        ctx.decode(&mut [tok]).expect("decode");
    }
    (toks, hashes)
}

fn assert_same_scores(a: &Decide, b: &Decide) {
    assert_eq!(a.choice_logp.len(), b.choice_logp.len());
    for (x, y) in a.choice_logp.iter().zip(&b.choice_logp) {
        assert_eq!(
            x.to_bits(),
            y.to_bits(),
            "{:?} vs {:?}",
            a.choice_logp,
            b.choice_logp
        );
    }
    assert_eq!(a.best, b.best);
}

#[test]
fn log_probs_match_a_plain_prefill_and_best_is_the_argmax() {
    let model = load(&models().tiny);
    let t = template(&model);
    let abort = Arc::new(AtomicBool::new(false));
    let mut ctx = context(&model, 512, abort);
    let mut kept = PrefixState::new();
    let req = request(7, DOC, "Which letter?", CHOICES, true);
    let d = decide(&mut ctx, chat(&t), &req, &mut kept).expect("decide");

    // the same prompt, rendered, tokenized and prefilled by hand: split where the engine
    // splits (end of the prefix, which it keeps), and in one piece
    let text = t.render(&format!("{DOC}Which letter?"), false).unwrap();
    assert!(text.ends_with("</think>\n\n"), "reasoning off: {text:?}");
    let toks = model.tokenize(&text).unwrap();
    let n_keep = kept.tokens().len();
    assert_eq!(kept.tokens(), &toks[..n_keep]);
    ctx.clear_memory();
    ctx.decode(&mut toks[..n_keep].to_vec()).unwrap();
    ctx.decode(&mut toks[n_keep..].to_vec()).unwrap();
    let logits = ctx.last_logits().to_vec();
    assert_eq!(logits.len(), model.n_vocab());
    ctx.clear_memory();
    ctx.decode(&mut toks.clone()).unwrap();
    let one_piece = ctx.last_logits().to_vec();

    assert_eq!(d.id, 7);
    assert!(!d.cancelled);
    assert_eq!(d.n_tokens as usize, toks.len());
    assert_eq!((d.n_reused, d.n_prefilled), (0, toks.len() as u64));
    assert_eq!(d.choice_logp.len(), CHOICES.len());
    let mut worst_one_piece = 0f64;
    for (i, choice) in CHOICES.iter().enumerate() {
        let first = model.tokenize_with(choice, false, false).unwrap()[0];
        let got = d.choice_logp[i];
        let want = reference_logp(&logits, first);
        assert!((got - want).abs() < 1e-9, "{choice}: {got} vs {want}");
        assert!(got < 0.0 && got.is_finite());
        let one = reference_logp(&one_piece, first);
        worst_one_piece = worst_one_piece.max((got - one).abs());
    }
    // a one-piece prefill is the same maths through other kernels (other summation orders):
    // close, not equal — which is why the engine splits the same way with and without reuse
    eprintln!("largest |logp difference| to a one-piece prefill: {worst_one_piece:.2e}");
    let argmax = (0..d.choice_logp.len())
        .max_by(|&a, &b| d.choice_logp[a].total_cmp(&d.choice_logp[b]))
        .unwrap();
    assert_eq!(d.best as usize, argmax);
    // the ranking is the logits' own: a choice's score tracks its first token's logit
    let by_logit = (0..CHOICES.len())
        .max_by(|&a, &b| {
            let la = logits[model.tokenize_with(CHOICES[a], false, false).unwrap()[0] as usize];
            let lb = logits[model.tokenize_with(CHOICES[b], false, false).unwrap()[0] as usize];
            la.total_cmp(&lb)
        })
        .unwrap();
    assert_eq!(d.best as usize, by_logit);
    assert!(d.prefill_s > 0.0 && d.store_s > 0.0 && d.restore_s == 0.0);
    assert!(d.prefix_state_mib > 0.0);
}

#[test]
fn prefix_reuse_changes_the_work_not_the_scores() {
    let model = load(&models().tiny);
    let t = template(&model);
    let mut ctx = context(&model, 512, Arc::new(AtomicBool::new(false)));
    let mut kept = PrefixState::new();

    let first = decide(
        &mut ctx,
        chat(&t),
        &request(1, DOC, "Q1?", CHOICES, true),
        &mut kept,
    )
    .expect("first");
    assert_eq!(first.n_reused, 0);
    let n_keep = kept.tokens().len();
    assert!(n_keep > 5 && n_keep < first.n_tokens as usize);
    let state_mib = first.prefix_state_mib;

    // same prefix, another suffix: the kept prefix is restored, only the rest prefilled
    let reused = decide(
        &mut ctx,
        chat(&t),
        &request(2, DOC, "And the second question?", CHOICES, true),
        &mut kept,
    )
    .expect("reused");
    assert_eq!(reused.n_reused as usize, n_keep);
    assert_eq!(reused.n_prefilled, reused.n_tokens - reused.n_reused);
    assert!(reused.restore_s > 0.0 && reused.store_s == 0.0);
    assert_eq!(reused.prefix_state_mib, state_mib);

    let fresh = decide(
        &mut ctx,
        chat(&t),
        &request(3, DOC, "And the second question?", CHOICES, false),
        &mut kept,
    )
    .expect("fresh");
    assert_eq!((fresh.n_reused, fresh.n_prefilled), (0, fresh.n_tokens));
    assert_eq!(fresh.restore_s, 0.0);
    assert_eq!(
        fresh.store_s, 0.0,
        "reuse_prefix:false leaves the kept state alone"
    );
    assert_eq!(kept.tokens().len(), n_keep);
    assert_same_scores(&reused, &fresh);
    assert_ne!(
        first.choice_logp, reused.choice_logp,
        "a different question must change the scores (else this test proves nothing)"
    );

    // a prefix that shares only its start is not cut down to the shared part (its positions were
    // batched differently): prefilled cold, and kept in place of the old one
    let other = "The streaming engine reads every expert. ";
    let partial = decide(
        &mut ctx,
        chat(&t),
        &request(4, other, "Q?", CHOICES, true),
        &mut kept,
    )
    .expect("partial");
    assert_eq!(partial.n_reused, 0);
    assert!(partial.store_s > 0.0 && partial.restore_s == 0.0);
    assert_ne!(kept.tokens().len(), n_keep, "the new prefix is kept");
    let cold = decide(
        &mut ctx,
        chat(&t),
        &request(5, other, "Q?", CHOICES, false),
        &mut kept,
    )
    .expect("cold");
    assert_same_scores(&partial, &cold);

    // ...and the next question on that prefix restores it
    let again = decide(
        &mut ctx,
        chat(&t),
        &request(6, other, "Q2?", CHOICES, true),
        &mut kept,
    )
    .expect("again");
    assert_eq!(again.n_reused as usize, kept.tokens().len());
    let cold = decide(
        &mut ctx,
        chat(&t),
        &request(7, other, "Q2?", CHOICES, false),
        &mut kept,
    )
    .expect("cold");
    assert_same_scores(&again, &cold);
}

#[test]
fn a_split_prefill_decodes_what_a_resident_ubatch_run_does() {
    // the engine's prefill split (expert cache smaller than a layer) cuts every decode into
    // chunks; a context whose physical batch is that chunk forms the same batches
    let model = load(&models().tiny);
    let t = template(&model);
    let split = DecideSetup {
        prefill_chunk: Some(2),
        ..chat(&t)
    };
    let mut wide = context(&model, 512, Arc::new(AtomicBool::new(false)));
    let mut kept = PrefixState::new();
    let stored = decide(
        &mut wide,
        split,
        &request(1, DOC, "Q?", CHOICES, true),
        &mut kept,
    )
    .expect("split, storing");
    let reused = decide(
        &mut wide,
        split,
        &request(2, DOC, "Q?", CHOICES, true),
        &mut kept,
    )
    .expect("split, reusing");
    assert!(reused.n_reused > 0);
    assert_same_scores(&stored, &reused);

    let opts = ContextOptions {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch: 2,
        n_threads: 2,
        n_rs_seq: 0,
        device_offload: false,
    };
    let mut narrow: Context<'_, MoeHook> =
        Context::new(&model, opts, None, Arc::new(AtomicBool::new(false))).expect("context");
    let mut other = PrefixState::new();
    let by_ubatch = decide(
        &mut narrow,
        chat(&t),
        &request(3, DOC, "Q?", CHOICES, true),
        &mut other,
    )
    .expect("ubatch 2");
    assert_same_scores(&stored, &by_ubatch);
}

#[test]
fn sliding_window_model_reuse_gives_the_same_scores() {
    // gpt-oss has sliding-window layers (an iSWA cache): a restored state still scores exactly
    // like a cold prefill
    let model = load(&models().gpt_oss);
    let mut ctx = context(&model, 512, Arc::new(AtomicBool::new(false)));
    let mut kept = PrefixState::new();
    let choices = &["A", "B", "C"];
    decide(
        &mut ctx,
        RAW,
        &request(1, DOC, "Q1?", choices, true),
        &mut kept,
    )
    .expect("store");
    let whole = decide(
        &mut ctx,
        RAW,
        &request(2, DOC, "Q2?", choices, true),
        &mut kept,
    )
    .expect("whole prefix reuse");
    assert!(whole.n_reused > 0);
    let cold = decide(
        &mut ctx,
        RAW,
        &request(3, DOC, "Q2?", choices, false),
        &mut kept,
    )
    .expect("cold");
    assert_same_scores(&whole, &cold);
    let part = "The streaming engine reads every expert. ";
    let partial = decide(
        &mut ctx,
        RAW,
        &request(4, part, "Q?", choices, true),
        &mut kept,
    )
    .expect("partial");
    let cold = decide(
        &mut ctx,
        RAW,
        &request(5, part, "Q?", choices, false),
        &mut kept,
    )
    .expect("cold");
    assert_same_scores(&partial, &cold);
}

#[test]
fn a_conversation_in_the_kv_survives_a_decide() {
    let model = load(&models().tiny);
    let t = template(&model);
    let mut ctx = context(&model, 512, Arc::new(AtomicBool::new(false)));
    let chat_text = t.render("Tell me about flash storage.", true).unwrap();
    let prompt = model.tokenize(&chat_text).unwrap();

    let last = prompt.len() - 1;
    let mut history = prompt[..last].to_vec();

    // reference: the history in the KV, then the turn's last token and a greedy answer
    ctx.decode(&mut history.clone()).unwrap();
    ctx.decode(&mut [prompt[last]]).unwrap();
    let (want, want_hashes) = greedy(&mut ctx, 12);

    // the same, with decides (storing, reusing, cold) while the history sits in the KV
    ctx.clear_memory();
    ctx.decode(&mut history).unwrap();
    let mut kept = PrefixState::new();
    for (i, reuse) in [true, true, false].into_iter().enumerate() {
        let req = request(i as i64, DOC, "Which?", CHOICES, reuse);
        decide(&mut ctx, chat(&t), &req, &mut kept).expect("decide");
        assert_eq!(ctx.seq_len(0), history.len(), "the conversation is back");
    }
    ctx.decode(&mut [prompt[last]]).unwrap();
    let (got, got_hashes) = greedy(&mut ctx, 12);
    assert_eq!(got, want, "tokens after the decides");
    assert_eq!(got_hashes, want_hashes, "logits after the decides");
}

#[test]
fn request_errors_are_rejected_before_touching_the_kv() {
    let model = load(&models().tiny);
    let t = template(&model);
    let mut ctx = context(&model, 256, Arc::new(AtomicBool::new(false)));
    let mut toks = model.tokenize("a conversation").unwrap();
    ctx.decode(&mut toks).unwrap();
    let mut kept = PrefixState::new();
    let mut run = |choices: &[&str], prefix: &str| {
        let e = decide(
            &mut ctx,
            chat(&t),
            &request(1, prefix, "", choices, true),
            &mut kept,
        )
        .expect_err("must be rejected");
        assert!(!e.is_fatal(), "{e}");
        assert!(!e.hint().is_empty());
        e
    };
    // the tiny vocabulary is byte-level: "yes" and "yellow" both start with the token "y"
    match run(&["no", "yes", "yellow"], "Q?") {
        DecideError::CollidingChoices {
            first,
            second,
            piece,
            ..
        } => assert_eq!((first, second, piece.as_str()), (1, 2, "y")),
        e => panic!("expected a collision, got {e}"),
    }
    assert!(matches!(run(&[], "Q?"), DecideError::NoChoices));
    assert!(matches!(
        run(&["a", ""], "Q?"),
        DecideError::EmptyChoice { index: 1 }
    ));
    match run(&["a", "b"], &"long ".repeat(300)) {
        DecideError::TooLong { n_tokens, n_ctx } => assert!(n_ctx == 256 && n_tokens > 256),
        e => panic!("expected too long, got {e}"),
    }
    assert_eq!(ctx.seq_len(0), toks.len());
    assert_eq!(kept.size_bytes(), 0);
}

#[test]
fn special_token_texts_in_a_choice_are_plain_text() {
    let model = load(&models().tiny);
    let mut ctx = context(&model, 256, Arc::new(AtomicBool::new(false)));
    let mut kept = PrefixState::new();
    // "<|im_end|>" as a choice is its characters, so it collides with "<b>" on "<"
    let e = decide(
        &mut ctx,
        RAW,
        &request(1, DOC, "", &["<|im_end|>", "<b>"], true),
        &mut kept,
    )
    .expect_err("collision on '<'");
    assert!(matches!(e, DecideError::CollidingChoices { .. }), "{e}");
}

#[test]
fn cancel_stops_the_decide_and_keeps_the_conversation() {
    let model = load(&models().tiny);
    let t = template(&model);
    let abort = Arc::new(AtomicBool::new(false));
    let mut ctx = context(&model, 256, Arc::clone(&abort));
    let mut toks = model.tokenize("a conversation").unwrap();
    ctx.decode(&mut toks).unwrap();
    let mut kept = PrefixState::new();
    abort.store(true, Ordering::SeqCst);
    let d = decide(
        &mut ctx,
        chat(&t),
        &request(9, DOC, "Q?", CHOICES, true),
        &mut kept,
    )
    .expect("a cancel is not an error");
    abort.store(false, Ordering::SeqCst);
    assert!(d.cancelled);
    assert_eq!(d.id, 9);
    assert_eq!(d.best, -1);
    assert!(d.choice_logp.is_empty());
    assert_eq!(ctx.seq_len(0), toks.len());
    assert_eq!(kept.size_bytes(), 0, "nothing half-prefilled is kept");
    let after = decide(
        &mut ctx,
        chat(&t),
        &request(10, DOC, "Q?", CHOICES, true),
        &mut kept,
    )
    .expect("the next request works");
    assert!(!after.cancelled && after.best >= 0);
}

/// Runs one `bmoe-cli --session` with `requests` on stdin (then EOF) and returns its protocol
/// records; panics with stderr when it fails.
fn session(extra: &[&str], requests: &[String]) -> Vec<Record> {
    session_full(extra, requests).0
}

/// [`session`] plus stderr.
fn session_full(extra: &[&str], requests: &[String]) -> (Vec<Record>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(&models().tiny)
        .args(["--session", "--decide", "--chatml", "-t", "2", "-n", "10"])
        .args(if extra.contains(&"-c") {
            &[][..]
        } else {
            &["-c", "512"][..]
        })
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bmoe-cli --session");
    let mut stdin = child.stdin.take().expect("stdin");
    for r in requests {
        writeln!(stdin, "{r}").expect("write a request");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("session output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "session failed: {stderr}");
    let records = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match parse_line(l) {
            LineKind::Record(r) => Some(r),
            LineKind::Malformed { tag, reason } => panic!("malformed BMOE_{tag}: {reason}"),
            _ => None,
        })
        .collect();
    (records, stderr.into_owned())
}

fn decide_line(id: i64, prefix: &str, suffix: &str, reuse: bool) -> String {
    serde_json::json!({
        "cmd": "decide", "id": id, "prefix": prefix, "suffix": suffix,
        "choices": CHOICES, "reuse_prefix": reuse,
    })
    .to_string()
}

fn generate_line(id: i64, prompt: &str, clear_kv: bool) -> String {
    serde_json::json!({"cmd": "generate", "id": id, "prompt": prompt, "clear_kv": clear_kv})
        .to_string()
}

fn dones(records: &[Record]) -> Vec<Done> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Done(d) => Some((**d).clone()),
            _ => None,
        })
        .collect()
}

fn decides(records: &[Record]) -> Vec<Decide> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Decide(d) => Some((**d).clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_chat_continued_after_decides_answers_as_without_them() {
    let turn1 = generate_line(1, "Tell me about flash storage.", true);
    let turn2 = generate_line(2, "And about page faults?", false);
    let plain = session(&[], &[turn1.clone(), turn2.clone()]);
    let with = session(
        &[],
        &[
            turn1,
            decide_line(10, DOC, "Which one?", true),
            decide_line(11, DOC, "Which other one?", true),
            decide_line(12, "Unrelated. ", "Q?", false),
            turn2,
        ],
    );
    let (a, b) = (dones(&plain), dones(&with));
    assert_eq!((a.len(), b.len()), (2, 2));
    assert_eq!(decides(&with).len(), 3);
    assert!(decides(&with).iter().all(|d| !d.cancelled && d.best >= 0));
    let ds = decides(&with);
    assert!(
        ds[1].n_reused > 0,
        "the second decide restored the kept prefix"
    );
    assert_eq!(ds[2].n_reused, 0, "reuse_prefix:false");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.text, y.text, "turn {} answer", x.id);
        assert_eq!(x.tokens, y.tokens);
        assert_eq!(
            (x.n_prompt, x.n_past),
            (y.n_prompt, y.n_past),
            "turn {}",
            x.id
        );
    }
    assert!(
        b[1].n_prompt < b[1].n_past,
        "turn 2 reused the conversation's KV prefix after the decides"
    );
}

#[test]
fn streamed_experts_score_exactly_as_resident_ones() {
    let requests = [
        decide_line(1, DOC, "Which letter?", true),
        decide_line(2, DOC, "Which number?", true),
        decide_line(3, DOC, "Which number?", false),
    ];
    let check = |resident: &[Decide], streamed: &[Decide], what: &str| {
        assert_eq!(streamed.len(), 3, "{what}");
        for (r, s) in resident.iter().zip(streamed) {
            assert_same_scores(r, s);
            assert_eq!((r.n_reused, r.n_prefilled), (s.n_reused, s.n_prefilled));
            assert_eq!(r.prefill_read_mib, 0.0, "resident reads no experts");
        }
        assert!(
            streamed[0].prefill_read_mib > 0.0,
            "{what}: the first decide streams"
        );
        assert!(streamed[1].n_reused > 0, "{what}");
    };
    let resident = decides(&session(&[], &requests));
    assert_same_scores(&resident[1], &resident[2]);
    let streamed = decides(&session(&["--moe-stream"], &requests));
    check(&resident, &streamed, "--moe-stream");

    // a cache smaller than a layer's experts splits every prefill; the resident run with that
    // physical batch decodes the same batches
    let (records, stderr) = session_full(&["--moe-stream", "--cache-mb", "1"], &requests);
    let chunk = stderr
        .split("prefill split into decodes of ≤")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no prefill split note in:\n{stderr}"))
        .to_string();
    let resident_split = decides(&session(&["--ubatch", &chunk], &requests));
    let split = decides(&records);
    check(&resident_split, &split, "--cache-mb 1");
    // below a layer, cache off and a 1 MiB cache cut the same waves (stream::prefill): each
    // wave re-reads its layers' unions, and the 1 MiB cache can only spare some of those reads
    assert!(
        split[0].prefill_read_mib > 0.0
            && split[0].prefill_read_mib <= streamed[0].prefill_read_mib,
        "1 MiB cache read {} MiB vs cache off {} MiB",
        split[0].prefill_read_mib,
        streamed[0].prefill_read_mib
    );
}

/// The `--decide-state-max-mib` notes in `stderr`.
fn cap_notes(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.starts_with("bmoe: note:") && l.contains("--decide-state-max-mib"))
        .count()
}

#[test]
fn a_prefix_state_over_the_cap_is_not_kept() {
    // ~1 KiB of KV per token on the tiny model: a 1300-token prefix is over 1 MiB, DOC's is not
    let long = DOC.repeat(22);
    let requests = [
        decide_line(1, &long, "Which one?", true),
        decide_line(2, &long, "Which one?", true),
        decide_line(3, DOC, "Which one?", true),
        decide_line(4, DOC, "Which other?", true),
    ];
    let (records, stderr) = session_full(&["-c", "2048", "--decide-state-max-mib", "1"], &requests);
    let d = decides(&records);
    assert_eq!(d.len(), 4, "{stderr}");
    assert!(d[0].n_tokens > 1100, "premise: {} tokens", d[0].n_tokens);
    // over the cap: saved, measured, dropped; the same prefix again prefills in full
    for over in &d[..2] {
        assert_eq!(over.n_reused, 0);
        assert_eq!(over.prefix_state_mib, 0.0);
    }
    assert_same_scores(&d[0], &d[1]);
    // under the cap: kept, and the next call with that prefix restores it
    assert!(d[2].prefix_state_mib > 0.0 && d[2].prefix_state_mib < 1.0);
    assert_eq!(d[2].n_reused, 0);
    assert!(d[3].n_reused > 0, "{:?}", d[3]);
    assert_eq!(d[3].prefix_state_mib, d[2].prefix_state_mib);
    // said once, though two states went over
    assert_eq!(cap_notes(&stderr), 1, "{stderr}");
    assert!(
        stderr.contains("hint: raise --decide-state-max-mib"),
        "{stderr}"
    );

    // the default cap keeps the long state
    let (records, stderr) = session_full(&["-c", "2048"], &requests[..2]);
    let d = decides(&records);
    assert!(d[0].prefix_state_mib > 1.0, "{:?}", d[0]);
    assert!(d[1].n_reused > 1000);
    assert_eq!(cap_notes(&stderr), 0, "{stderr}");
}

#[test]
fn a_cap_of_zero_never_keeps_a_state() {
    let requests = [
        decide_line(1, DOC, "Which one?", true),
        decide_line(2, DOC, "Which other?", true),
    ];
    let (records, stderr) = session_full(&["--decide-state-max-mib", "0"], &requests);
    let d = decides(&records);
    assert_eq!(d.len(), 2, "{stderr}");
    for x in &d {
        assert_eq!((x.n_reused, x.prefix_state_mib, x.store_s), (0, 0.0, 0.0));
    }
    assert_eq!(cap_notes(&stderr), 1, "{stderr}");
}
