//! The reasoning/answer split of a channel-format (harmony) model, end to end: the synthetic
//! gpt-oss model is written with a harmony chat template, and `bmoe-cli` runs it over real pipes
//! with `--test-force-text` making every turn generate a known channel sequence (random weights
//! never emit the markers by themselves). The decodes are real; only the token choice is forced.
//! The per-token deltas must add up to `BMOE_DONE`'s texts exactly, append-only (no `reset`), with
//! no marker in either, and a continued chat must reuse the whole previous turn's KV — which it
//! only can if the reasoning went back into the history where the template renders it.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use crate::chat_templates::synth_with_template;
use bmoe_gguf::synth::Preset;
use bmoe_telemetry::deltas::TextAccumulator;
use bmoe_telemetry::protocol::{Done, LineKind, Record, parse_line};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A harmony (gpt-oss) chat template reduced to user and assistant messages: reasoning is the
/// `analysis` channel (`message.thinking`), the answer the `final` one, `enable_thinking` ignored.
const HARMONY: &str = "{%- for message in messages -%}\
{%- if message.role == 'assistant' -%}\
{%- if message.thinking is defined and message.thinking -%}<|start|>assistant<|channel|>analysis<|message|>{{ message.thinking }}<|end|>{%- endif -%}\
<|start|>assistant<|channel|>final<|message|>{{ message.content }}<|return|>\
{%- else -%}<|start|>{{ message.role }}<|message|>{{ message.content }}<|end|>{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";

const REASONING: &str = "The user greets; reply in kind.";
const ANSWER: &str = "Hello, how can I help?";
const MARKERS: [&str; 7] = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|constrain|>",
];

/// What a harmony model generates after `<|start|>assistant` when it reasons, then answers.
fn harmony_output() -> String {
    format!(
        "<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>"
    )
}

struct Fixture {
    _dir: tempfile::TempDir,
    model: PathBuf,
}

/// The synthetic gpt-oss model with [`HARMONY`] as its chat template.
fn model() -> &'static Path {
    static M: OnceLock<Fixture> = OnceLock::new();
    &M.get_or_init(|| {
        // under the target dir, not /tmp: tmpfs refuses O_DIRECT
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let path = dir.path().join("gpt-oss-harmony.gguf");
        let model = synth_with_template(&path, Preset::GptOssTiny, HARMONY);
        Fixture { model, _dir: dir }
    })
    .model
}

/// Runs `bmoe-cli -m <harmony model> args…` with `stdin`; returns stdout's lines and stderr.
fn cli(args: &[&str], stdin: &str) -> (Vec<String>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(model())
        .args(["-t", "2", "-c", "2048", "--ignore-eos"])
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
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "bmoe-cli failed:\n{stderr}");
    let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
    (stdout.lines().map(str::to_string).collect(), stderr)
}

fn record(line: &str) -> Option<Record> {
    match parse_line(line) {
        LineKind::Record(r) => Some(r),
        LineKind::Malformed { tag, reason } => panic!("malformed BMOE_{tag}: {reason}: {line}"),
        _ => None,
    }
}

/// One generation as the wire carried it.
struct Turn {
    /// The deltas, accumulated as a reader does.
    streamed: TextAccumulator,
    /// Progress lines, and how many of them were resets.
    lines: usize,
    resets: usize,
    done: Option<Done>,
}

/// Splits a session's (or a one-shot `--progress` run's) records into generations.
fn turns(lines: &[String]) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    let fresh = || Turn {
        streamed: TextAccumulator::new(),
        lines: 0,
        resets: 0,
        done: None,
    };
    for l in lines {
        match record(l) {
            Some(Record::Begin(_)) => out.push(fresh()),
            Some(Record::Progress(p)) => {
                if out.last().is_none_or(|t| t.done.is_some()) {
                    out.push(fresh()); // one-shot: no BEGIN
                }
                let t = out.last_mut().unwrap();
                for m in MARKERS {
                    assert!(
                        !p.delta_reasoning.contains(m) && !p.delta_text.contains(m),
                        "{m} in a delta: {l}"
                    );
                }
                t.streamed.apply(&p);
                t.lines += 1;
                t.resets += usize::from(p.reset);
            }
            Some(Record::Done(d)) => out.last_mut().unwrap().done = Some(*d),
            _ => {}
        }
    }
    out
}

fn generate(id: i64, prompt: &str, think: bool, clear_kv: bool) -> String {
    format!(
        r#"{{"cmd":"generate","id":{id},"prompt":"{prompt}","n_predict":400,"think":{think},"clear_kv":{clear_kv}}}"#
    )
}

#[test]
fn harmony_channels_split_into_reasoning_and_answer_over_the_wire() {
    let forced = harmony_output();
    let requests = [
        generate(1, "Hi there", true, true),
        generate(2, "And again", true, false),
    ]
    .join("\n");
    let (lines, stderr) = cli(
        &["--session", "--chatml", "--test-force-text", &forced],
        &requests,
    );
    let ready = lines.iter().find_map(|l| match record(l) {
        Some(Record::Ready(r)) => Some(r),
        _ => None,
    });
    assert_eq!(ready.unwrap().think_ctl.as_str(), "prefill", "{stderr}");
    let t = turns(&lines);
    assert_eq!(t.len(), 2, "{lines:#?}");
    for turn in &t {
        let done = turn.done.as_ref().unwrap();
        assert_eq!(done.reasoning, REASONING);
        assert_eq!(done.text, ANSWER);
        // the deltas are the final texts, appended: no reset was needed to get there
        assert_eq!(turn.streamed.reasoning(), done.reasoning);
        assert_eq!(turn.streamed.text(), done.text);
        assert_eq!(turn.resets, 0);
        // the markers reached the decoder as many tokens: the split saw them arrive in pieces
        assert!(
            done.tokens as usize > forced.len() / 2,
            "{} tokens",
            done.tokens
        );
        assert_eq!(turn.lines as u64, done.tokens);
    }
    // turn 2 continued the chat: the whole of turn 1 (prompt and generation) was a prefix of the
    // re-rendered history, so none of it was prefilled again
    let (d1, d2) = (t[0].done.as_ref().unwrap(), t[1].done.as_ref().unwrap());
    let reused = d2.n_past - d2.tokens - d2.n_prompt;
    assert_eq!(reused, d1.n_past, "turn 2 reused {reused} of {}", d1.n_past);
}

#[test]
fn a_turn_started_past_the_reasoning_is_all_answer() {
    let requests = [
        generate(1, "Hi there", false, true),
        generate(2, "And again", false, false),
    ]
    .join("\n");
    let forced = format!("{ANSWER}<|return|>");
    let (lines, _) = cli(
        &["--session", "--chatml", "--test-force-text", &forced],
        &requests,
    );
    let t = turns(&lines);
    assert_eq!(t.len(), 2);
    for turn in &t {
        let done = turn.done.as_ref().unwrap();
        assert_eq!((done.reasoning.as_str(), done.text.as_str()), ("", ANSWER));
        assert_eq!(turn.streamed.text(), ANSWER);
        assert_eq!(turn.streamed.reasoning(), "");
    }
    // the history gives turn 1 back its prefilled, empty analysis section: the KV is reused whole
    let (d1, d2) = (t[0].done.as_ref().unwrap(), t[1].done.as_ref().unwrap());
    assert_eq!(d2.n_past - d2.tokens - d2.n_prompt, d1.n_past);
}

#[test]
fn one_shot_deltas_split_by_channel_and_the_answer_block_holds_the_full_text() {
    let forced = harmony_output();
    let (lines, _) = cli(
        &[
            "--chatml",
            "--progress",
            "-p",
            "Hi there",
            "-n",
            "400",
            "--test-force-text",
            &forced,
        ],
        "",
    );
    let t = turns(&lines);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].streamed.reasoning(), REASONING);
    assert_eq!(t[0].streamed.text(), ANSWER);
    // the contract's `=== answer ===` block is the full generated text, markers included
    let banner = lines.iter().position(|l| l == "=== answer ===").unwrap();
    let perf = lines.iter().position(|l| l == "=== perf ===").unwrap();
    assert_eq!(lines[banner + 1..perf].join("\n"), forced);
}

#[test]
fn without_markers_everything_is_answer() {
    // random weights on a harmony template: whatever comes out has no channel, so it is all
    // answer, streamed as it comes (nothing is held back for good)
    let (lines, _) = cli(
        &["--session", "--chatml"],
        &generate(1, "Hi there", true, true).replace("400", "12"),
    );
    let t = turns(&lines);
    let done = t[0].done.as_ref().unwrap();
    assert_eq!(done.tokens, 12);
    assert_eq!(done.reasoning, "");
    assert_eq!(t[0].streamed.text(), done.text);
    assert_eq!(t[0].streamed.reasoning(), done.reasoning);
}
