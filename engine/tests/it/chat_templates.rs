//! `think_ctl` and the reasoning/answer split on the **real** chat templates, end to end: for each
//! published template kept under `tests/fixtures/chat-templates/` (Qwen3, Qwen3.6, Gemma 4,
//! gpt-oss, LFM2.5-8B-A1B, LFM2), a tiny model is synthesised carrying it as
//! `tokenizer.chat_template`, and `bmoe-cli --chatml` runs it over real pipes. Random weights never
//! emit think markers or channels, so `--test-force-text` makes each turn generate a scripted
//! reasoned answer; the decodes are real, only the token choice is forced. Checked per template:
//! `BMOE_READY`'s `think_ctl`, `BMOE_DONE`'s reasoning and answer for `think:true` and
//! `think:false`, and the prompt a one-shot `--no-think` run renders (printed before the
//! generation).

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use bmoe_gguf::MetaValue;
use bmoe_gguf::synth::{Preset, SynthOptions, plan_model, write_plan};
use bmoe_gguf::writer::layout_model;
use bmoe_telemetry::protocol::{Done, LineKind, Record, parse_line};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/chat-templates/",
            $name
        ))
    };
}

/// One scripted generation and the split it must come out as.
struct Scripted {
    forced: &'static str,
    reasoning: &'static str,
    answer: &'static str,
}

/// A real template and what the engine must make of it.
struct Case {
    name: &'static str,
    template: &'static str,
    think_ctl: &'static str,
    on: Scripted,
    off: Scripted,
    /// How a `--no-think` prompt for "Hi there" ends: what `think=false` rendered.
    off_prompt_tail: &'static str,
}

const PROMPT: &str = "Hi there";

/// A model file carrying `template`, in `dir`.
fn model_with(dir: &Path, name: &str, template: &str) -> PathBuf {
    synth_with_template(&dir.join(format!("{name}.gguf")), Preset::Tiny, template)
}

/// `preset` synthesised at `path` with `template` as its `tokenizer.chat_template`; returns the
/// (first) file written. Shared with the harmony tests in `reasoning`.
pub(crate) fn synth_with_template(path: &Path, preset: Preset, template: &str) -> PathBuf {
    let opts = SynthOptions::preset(preset);
    let mut plan = plan_model(&opts, path).unwrap();
    let slot = plan
        .metadata
        .iter_mut()
        .find(|(k, _)| k == "tokenizer.chat_template")
        .expect("synthetic models carry a chat template");
    slot.1 = MetaValue::String(template.into());
    let specs: Vec<_> = plan.tensors.iter().map(|t| t.spec.clone()).collect();
    plan.layouts =
        layout_model(path, &plan.metadata, &specs, opts.alignment, opts.n_split).unwrap();
    write_plan(&plan, opts.seed, &mut |_, _| {}).unwrap().paths[0].clone()
}

/// Runs `bmoe-cli -m model args…` with `stdin`; returns stdout, after checking the exit.
fn cli(model: &Path, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(model)
        .args(["-t", "2", "-c", "2048", "--ignore-eos", "--chatml"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bmoe-cli");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bmoe-cli {args:?} failed:\n{stderr}");
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// A session on `model` forced to `forced`, one `generate` per entry of `turns` (`think`; every
/// turn after the first continues the chat): `(think_ctl, the BMOE_DONEs)`.
fn session(model: &Path, turns: &[bool], forced: &str) -> (String, Vec<Done>) {
    let requests: Vec<String> = turns
        .iter()
        .enumerate()
        .map(|(i, think)| {
            format!(
                r#"{{"cmd":"generate","id":{i},"prompt":"{PROMPT}","n_predict":400,"think":{think},"clear_kv":{}}}"#,
                i == 0
            )
        })
        .collect();
    let stdout = cli(
        model,
        &["--session", "--test-force-text", forced],
        &requests.join("\n"),
    );
    let (mut ctl, mut done) = (None, Vec::new());
    for line in stdout.lines() {
        match parse_line(line) {
            LineKind::Record(Record::Ready(r)) => ctl = Some(r.think_ctl.as_str().to_string()),
            LineKind::Record(Record::Done(d)) => done.push(*d),
            LineKind::Malformed { tag, reason } => panic!("malformed BMOE_{tag}: {reason}"),
            _ => {}
        }
    }
    assert_eq!(done.len(), turns.len(), "{stdout}");
    (ctl.expect("BMOE_READY"), done)
}

fn check(case: &Case) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let model = model_with(dir.path(), case.name, case.template);
    for (think, s) in [(true, &case.on), (false, &case.off)] {
        // two turns: the second renders the first (its reasoning handed back) into the history
        let (ctl, done) = session(&model, &[think, think], s.forced);
        assert_eq!(ctl, case.think_ctl, "{}: think_ctl", case.name);
        for d in &done {
            assert!(!d.cancelled);
            assert_eq!(
                (d.reasoning.as_str(), d.text.as_str()),
                (s.reasoning, s.answer),
                "{}: think={think}",
                case.name
            );
        }
        // the continued chat reused a KV prefix (the first prompt's head at least) and never
        // more than the first turn left
        let reused = done[1].n_past - done[1].tokens - done[1].n_prompt;
        assert!(
            reused > 0 && reused <= done[0].n_past,
            "{}: think={think}: reused {reused} of {}",
            case.name,
            done[0].n_past
        );
        eprintln!(
            "{} think={think}: turn 2 reused {reused} of turn 1's {} KV tokens",
            case.name, done[0].n_past
        );
    }
    // a one-shot run prints the rendered prompt, then the generation as it comes
    let stdout = cli(
        &model,
        &[
            "--no-think",
            "-p",
            PROMPT,
            "-n",
            "400",
            "--test-force-text",
            case.off.forced,
        ],
        "",
    );
    let expected = format!("{}{}", case.off_prompt_tail, case.off.forced);
    assert!(
        stdout.contains(&expected),
        "{}: --no-think rendered\n{stdout}\nexpected it to contain\n{expected:?}",
        case.name
    );
}

/// Qwen3's generation after an open prompt: a think span, then the answer.
const QWEN_ON: Scripted = Scripted {
    forced: "<think>\nThe user greets me.\n</think>\n\nHello, how can I help?",
    reasoning: "The user greets me.\n",
    answer: "Hello, how can I help?",
};
const PLAIN_ANSWER: Scripted = Scripted {
    forced: "Hello, how can I help?",
    reasoning: "",
    answer: "Hello, how can I help?",
};
const CHATML_OFF_TAIL: &str =
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

#[test]
fn qwen3_template_reads_enable_thinking() {
    check(&Case {
        name: "qwen3",
        template: fixture!("qwen3.jinja"),
        // enable_thinking=false closes an empty span in the prompt: the renders differ
        think_ctl: "template",
        on: QWEN_ON,
        off: PLAIN_ANSWER,
        off_prompt_tail: CHATML_OFF_TAIL,
    });
}

#[test]
fn qwen36_template_opens_the_span_in_the_prompt() {
    check(&Case {
        name: "qwen3.6",
        template: fixture!("qwen3.6.jinja"),
        // thinking on opens `<think>\n`, off closes it empty: the renders differ
        think_ctl: "template",
        // the prompt opened the span, so the model's text starts inside it
        on: Scripted {
            forced: "The user greets me.\n</think>\n\nHello, how can I help?",
            reasoning: "The user greets me.\n",
            answer: "Hello, how can I help?",
        },
        off: PLAIN_ANSWER,
        off_prompt_tail: CHATML_OFF_TAIL,
    });
}

#[test]
fn gemma4_template_reasons_in_a_thought_channel() {
    check(&Case {
        name: "gemma4",
        template: fixture!("gemma4.jinja"),
        // thinking on adds `<|think|>` in a system turn, off prefills an empty thought channel
        think_ctl: "template",
        on: Scripted {
            forced: "<|channel>thought\nThe user greets me.<channel|>Hello, how can I help?",
            reasoning: "The user greets me.",
            answer: "Hello, how can I help?",
        },
        off: PLAIN_ANSWER,
        off_prompt_tail: "<|turn>user\nHi there<turn|>\n<|turn>model\n<|channel>thought\n<channel|>",
    });
}

#[test]
fn gpt_oss_template_is_started_past_the_analysis_channel() {
    check(&Case {
        name: "gpt-oss",
        template: fixture!("gpt-oss.jinja"),
        // enable_thinking is never read; a continued assistant message opens the final channel
        // after an analysis one, and there is no think span → prefill
        think_ctl: "prefill",
        on: Scripted {
            forced: "<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello, how can I help?<|return|>",
            reasoning: "The user greets me.",
            answer: "Hello, how can I help?",
        },
        // the prompt ends inside the final body: all of it is answer
        off: Scripted {
            forced: "Hello, how can I help?<|return|>",
            reasoning: "",
            answer: "Hello, how can I help?",
        },
        off_prompt_tail: "<|start|>user<|message|>Hi there<|end|><|start|>assistant<|channel|>analysis<|message|>\n\n<|end|><|start|>assistant<|channel|>final<|message|>",
    });
}

#[test]
fn lfm25_template_reasons_whatever_is_asked() {
    // the model reasons on every turn in a span it opens itself
    let reasoned = || Scripted {
        forced: "<think>The user greets me.</think>Hello, how can I help?",
        reasoning: "The user greets me.",
        answer: "Hello, how can I help?",
    };
    check(&Case {
        name: "lfm2.5",
        template: fixture!("lfm2.5-8b-a1b.jinja"),
        // enable_thinking is never read, and a closed empty span opens no answer section after
        // it: the template owns its span → none
        think_ctl: "none",
        on: reasoned(),
        off: reasoned(),
        // nothing was prefilled: think=false renders the plain generation prompt
        off_prompt_tail: "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    });
}

#[test]
fn lfm2_template_has_nothing_to_suppress() {
    check(&Case {
        name: "lfm2",
        template: fixture!("lfm2.jinja"),
        // no think span of its own and a continuation that changes nothing → template
        think_ctl: "template",
        on: PLAIN_ANSWER,
        // a `<think>` in a non-reasoning model's answer is answer text
        off: Scripted {
            forced: "Use <think> tags? No.",
            reasoning: "",
            answer: "Use <think> tags? No.",
        },
        off_prompt_tail: "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    });
}

#[test]
fn a_template_that_cannot_render_fails_the_load_with_its_own_words() {
    // as real templates do when handed a chat they do not accept
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let model = model_with(
        dir.path(),
        "raising",
        "{{ raise_exception('This model needs a system message.') }}",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(&model)
        .args(["-t", "2", "--chatml", "-p", PROMPT, "-n", "4"])
        .output()
        .expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("chat template failed")
            && stderr.contains("one-message chat")
            && stderr.contains("This model needs a system message."),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
    // nothing was generated, and no summary pretends otherwise
    assert!(!String::from_utf8_lossy(&out.stdout).contains("generation:"));
    // a session says so on the wire, fatally, before any BMOE_READY
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(&model)
        .args(["-t", "2", "--chatml", "--session"])
        .stdin(Stdio::null())
        .output()
        .expect("run bmoe-cli");
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let errors: Vec<_> = stdout
        .lines()
        .filter_map(|l| match parse_line(l) {
            LineKind::Record(Record::Error(e)) => Some(e),
            LineKind::Record(Record::Ready(_)) => panic!("READY on a template that cannot render"),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{stdout}");
    assert!(
        errors[0].fatal && errors[0].msg.contains("one-message chat"),
        "{stdout}"
    );
}
