//! `bmoe-cli --session` driven over real pipes, on models synthesised at test time: a
//! conversation that reuses its KV prefix and answers exactly as a one-shot run of the same
//! rendered history, cancel mid-prefill, mid-generation and while queued, malformed requests that
//! leave the session serving, EOF, close and the fatal paths (load failure, expert read error),
//! the warm expert cache across turns, `think_ctl` from the model's template, the sampler reseeded
//! per new chat, decide over the wire, and the session's CSV and traces spanning turns.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use bmoe_engine::internals::{ChatTemplate, Message, ThinkCtl};
use bmoe_gguf::synth::tokenizer::CHAT_TEMPLATE;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::protocol::{Decide, Done, ErrorRecord, LineKind, Ready, Record, parse_line};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

/// How long any single protocol line may take before the test calls the session hung.
const LINE_TIMEOUT: Duration = Duration::from_secs(120);

struct Models {
    dir: tempfile::TempDir,
    tiny: PathBuf,
    /// The tiny model with a harmony-style (channel) chat template.
    channels: PathBuf,
    /// The tiny model with a template that owns a `<think>` span and ignores `enable_thinking`.
    owns_span: PathBuf,
}

/// A channel-style template: reasoning is an `analysis` section, `enable_thinking` is ignored.
const CHANNELS_TEMPLATE: &str = "{% for m in messages %}{% if m.role == 'assistant' %}{% if m.thinking %}<|a|>analysis<|m|>{{ m.thinking }}<|e|>{% endif %}<|a|>final<|m|>{{ m.content }}<|e|>{% else %}<|{{ m.role }}|>{{ m.content }}<|e|>{% endif %}{% endfor %}{% if add_generation_prompt %}<|a|>{% endif %}";

/// An LFM2.5-style template: a `<think>` span of its own, `enable_thinking` ignored.
const OWNS_SPAN_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and m.reasoning_content is defined %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A copy of `model` whose chat template is `template`, padded with a Jinja comment to the
/// length of the synthetic one so every offset in the file stays where it was.
fn with_template(model: &std::path::Path, template: &str, out: &std::path::Path) -> PathBuf {
    let bytes = std::fs::read(model).unwrap();
    let old = CHAT_TEMPLATE.as_bytes();
    let at = bytes
        .windows(old.len())
        .position(|w| w == old)
        .expect("the synthetic template is in the file");
    let pad = old
        .len()
        .checked_sub(template.len() + 4)
        .expect("template fits");
    let new = format!("{template}{{#{}#}}", " ".repeat(pad));
    assert_eq!(new.len(), old.len());
    let mut patched = bytes;
    patched[at..at + old.len()].copy_from_slice(new.as_bytes());
    std::fs::write(out, patched).unwrap();
    out.to_path_buf()
}

fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        // under the target dir, not /tmp: tmpfs refuses O_DIRECT
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let s = write_model(
            &SynthOptions::preset(Preset::Tiny),
            &dir.path().join("tiny.gguf"),
        )
        .expect("synthesise model");
        let tiny = s.paths[0].clone();
        Models {
            channels: with_template(&tiny, CHANNELS_TEMPLATE, &dir.path().join("channels.gguf")),
            owns_span: with_template(
                &tiny,
                OWNS_SPAN_TEMPLATE,
                &dir.path().join("owns-span.gguf"),
            ),
            tiny,
            dir,
        }
    })
}

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
}

/// A running session: requests in through stdin, protocol lines out through a reader thread.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr_path: PathBuf,
    /// Every stdout line received so far.
    seen: Vec<String>,
}

impl Session {
    fn start(extra: &[&str]) -> Session {
        Session::start_on(&models().tiny, extra)
    }

    fn start_on(model: &std::path::Path, extra: &[&str]) -> Session {
        let m = models();
        let stderr_path = m.dir.path().join(format!(
            "session-{}-{}.err",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut child = cli()
            .arg("-m")
            .arg(model)
            // Turns run to n_predict whatever the CPU's rounding makes of the random weights.
            .args(["--session", "-t", "2", "-n", "8", "--ignore-eos"])
            .args(if extra.contains(&"-c") {
                &[][..]
            } else {
                &["-c", "512"][..]
            })
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("spawn bmoe-cli --session");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Session {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            stderr_path,
            seen: Vec::new(),
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write request");
        stdin.flush().unwrap();
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The next protocol record (every stdout line of a session must be one).
    fn next(&mut self) -> Record {
        let line = self.lines.recv_timeout(LINE_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "no line from the session ({e}); seen:\n{}\nstderr:\n{}",
                self.seen.join("\n"),
                self.stderr()
            )
        });
        self.seen.push(line.clone());
        match parse_line(&line) {
            LineKind::Record(r) => r,
            other => panic!("not a protocol record: {line:?} ({other:?})"),
        }
    }

    fn ready(&mut self) -> Ready {
        match self.next() {
            Record::Ready(r) => r,
            other => panic!("expected BMOE_READY, got {other:?}"),
        }
    }

    /// Skips per-token lines up to the request's terminal line.
    fn finish(&mut self) -> Record {
        loop {
            match self.next() {
                Record::Load(_) | Record::Progress(_) | Record::Begin(_) => {}
                other => return other,
            }
        }
    }

    fn done(&mut self, id: i64) -> Done {
        match self.finish() {
            Record::Done(d) if d.id == id => *d,
            other => panic!("expected BMOE_DONE for {id}, got {other:?}"),
        }
    }

    fn error(&mut self) -> ErrorRecord {
        match self.next() {
            Record::Error(e) => e,
            other => panic!("expected BMOE_ERROR, got {other:?}"),
        }
    }

    fn decide(&mut self, id: i64) -> Decide {
        match self.finish() {
            Record::Decide(d) if d.id == id => *d,
            other => panic!("expected BMOE_DECIDE for {id}, got {other:?}"),
        }
    }

    /// Closes stdin and waits: the exit status, any stdout lines still unread, and stderr.
    fn end(mut self) -> (std::process::ExitStatus, Vec<String>, String) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for the session");
        let rest: Vec<String> = self.lines.iter().collect();
        (status, rest, self.stderr())
    }
}

fn generate(id: i64, prompt: &str, n: usize, clear_kv: bool) -> String {
    format!(
        r#"{{"cmd":"generate","id":{id},"prompt":{},"n_predict":{n},"clear_kv":{clear_kv}}}"#,
        serde_json_string(prompt)
    )
}

fn serde_json_string(s: &str) -> String {
    // the requests are built by hand to test the wire itself; escaping the few characters the
    // prompts below use is enough
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `logits-hash step=N token=T hash=H` lines of stderr, split into one block per generation.
fn hash_blocks(stderr: &str) -> Vec<Vec<(i64, String)>> {
    let mut blocks: Vec<Vec<(i64, String)>> = Vec::new();
    for l in stderr.lines().filter(|l| l.starts_with("logits-hash ")) {
        let field = |k: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap()
                .to_string()
        };
        let step: usize = field("step=").parse().unwrap();
        let tok: i64 = field("token=").parse().unwrap();
        if step == 1 {
            blocks.push(Vec::new());
        }
        blocks.last_mut().unwrap().push((tok, field("hash=")));
    }
    blocks
}

/// The keys of a JSON object's top level, in file order (serde_json's map sorts them).
fn top_level_keys(json: &str) -> Vec<String> {
    let (mut keys, mut depth, mut in_str, mut escaped) = (Vec::new(), 0, false, false);
    let mut current = String::new();
    let mut last_string = String::new();
    for c in json.chars() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    in_str = false;
                    last_string = std::mem::take(&mut current);
                    continue;
                }
                _ => {}
            }
            current.push(c);
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ':' if depth == 1 => keys.push(std::mem::take(&mut last_string)),
            _ => {}
        }
    }
    keys
}

fn template() -> ChatTemplate {
    ChatTemplate::new(CHAT_TEMPLATE, "<|endoftext|>", "<|endoftext|>").unwrap()
}

#[test]
fn three_turn_conversation_reuses_the_kv_and_answers_as_one_shot_does() {
    let mut s = Session::start(&["--chatml", "--dump-logits-hash"]);
    let ready = s.ready();
    assert_eq!(ready.arch, "qwen3moe");
    assert_eq!(ready.n_ctx, 512);
    assert_eq!(ready.n_expert_used, 2);
    assert_eq!(ready.think_ctl.as_str(), "template");
    let prompts = [
        "Hello world, this is turn one.",
        "And a second message",
        "Third",
    ];
    let mut done = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        s.send(&generate(i as i64 + 1, p, 10, i == 0));
        done.push(s.done(i as i64 + 1));
    }
    // every key of the seed's BMOE_READY and BMOE_DONE, in the seed's order
    let keys = |tag: &str| {
        top_level_keys(&s.seen.iter().find(|l| l.starts_with(tag)).unwrap()[tag.len()..])
    };
    assert_eq!(
        keys("BMOE_READY "),
        ["load_s", "arch", "n_ctx", "think_ctl", "n_expert_used"]
    );
    assert_eq!(
        keys("BMOE_DONE "),
        [
            "id",
            "cancelled",
            "tokens",
            "tok_s",
            "prefill_s",
            "prefill_tps",
            "load_s",
            "cache_hit_pct",
            "n_prompt",
            "n_past",
            "compute_s_tok",
            "io_s_tok",
            "cache_resident_mib",
            "cache_budget_mib",
            "read_mib",
            "stall_s_tok",
            "mgmt_s_tok",
            "majflt_tok",
            "cpu_s_tok",
            "prefill_cpu_s",
            "prefill_read_mib",
            "prefill_io_s",
            "prefill_stall_s",
            "prefill_mgmt_s",
            "prefill_dev_tokens",
            "prefill_dev_nodes",
            "prefill_dev_read_mib",
            "prefill_dev_stall_s",
            "token_demand_mib",
            "mtp_drafted",
            "mtp_accepted",
            "mtp_decodes",
            "mtp_draft_s_tok",
            "drafted_steps",
            "loop_overhead_s_tok",
            "reasoning",
            "text"
        ]
    );
    let (status, rest, stderr) = s.end();
    assert!(status.success() && rest.is_empty(), "{rest:?}");

    // turn 1 is a new chat: everything prefilled
    assert_eq!(done[0].n_past, done[0].n_prompt + done[0].tokens);
    for w in done.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let reused = b.n_past - b.n_prompt - b.tokens;
        // the previous turn's whole prompt is still in the KV, and only what follows is prefilled
        assert!(
            reused >= a.n_past - a.tokens,
            "turn reused {reused} tokens, the previous prompt had {}",
            a.n_past - a.tokens
        );
        assert!(reused <= a.n_past);
        assert!(b.n_prompt < b.n_past - b.tokens);
        assert!(b.n_past > a.n_past);
    }

    // Turns 2 and 3 generate exactly what a one-shot run of the same rendered history does —
    // token ids and every step's logits hash — when the one-shot prefill is cut where the
    // session's KV was built (each turn's prefill batch, then its tokens one decode each), so
    // the floating-point work is the same. A stale or misplaced KV entry would change both.
    assert!(
        done[1].tokens > 0 && done[2].tokens > 0,
        "the comparison needs generated tokens: {done:?}"
    );
    let blocks = hash_blocks(&stderr);
    let with_tokens: Vec<usize> = (0..3).filter(|&i| done[i].tokens > 0).collect();
    assert_eq!(
        blocks.len(),
        with_tokens.len(),
        "one hash block per turn that generated"
    );
    let t = template();
    let mut history = Vec::new();
    let mut starts: Vec<u64> = Vec::new(); // where each decode now in the KV started
    for (i, p) in prompts.iter().enumerate() {
        history.push(Message::user(p));
        let d = &done[i];
        let reused = d.n_past - d.n_prompt - d.tokens;
        starts.retain(|&c| c < reused);
        if i > 0 {
            let rendered = t
                .render_turn(&history, true, ThinkCtl::Template)
                .unwrap()
                .text;
            let mut cuts: Vec<String> = starts.iter().map(u64::to_string).collect();
            cuts.push(reused.to_string());
            let out = cli()
                .arg("-m")
                .arg(&models().tiny)
                .args(["-p", &rendered, "-n", "10", "-t", "2", "-c", "512"])
                .arg("--ignore-eos")
                .arg("--dump-logits-hash")
                .arg(format!("--test-prefill-split={}", cuts.join(",")))
                .output()
                .unwrap();
            assert!(out.status.success());
            let one_shot = hash_blocks(&String::from_utf8_lossy(&out.stderr));
            let session = with_tokens
                .iter()
                .position(|&k| k == i)
                .map(|b| blocks[b].clone())
                .unwrap_or_default();
            assert_eq!(
                session,
                one_shot.first().cloned().unwrap_or_default(),
                "turn {} differs from a one-shot run of its rendered history",
                i + 1
            );
            assert_eq!(session.len() as u64, d.tokens);
        }
        starts.push(reused);
        let gen0 = d.n_past - d.tokens;
        starts.extend((0..d.tokens).map(|k| gen0 + k));
        history.push(Message::assistant(&d.text, &d.reasoning));
    }
}

#[test]
fn cancel_mid_generation_rolls_the_turn_back_and_the_session_goes_on() {
    // pseudo-random tokens never end the generation early: 4000 tokens take seconds
    let mut s = Session::start(&["--chatml", "-c", "4096", "--feed-random", "7"]);
    s.ready();
    s.send(&generate(1, "a long answer please", 4000, true));
    loop {
        if let Record::Progress(p) = s.next()
            && p.step >= 2
        {
            break;
        }
    }
    s.send(r#"{"cmd":"cancel"}"#);
    let d1 = s.done(1);
    assert!(d1.cancelled, "{d1:?}");
    assert!(d1.tokens >= 2 && d1.tokens < 4000, "{}", d1.tokens);
    // the cancelled turn is gone: continuing the chat starts from an empty conversation
    s.send(&generate(2, "short", 4, false));
    let d2 = s.done(2);
    assert!(!d2.cancelled);
    assert_eq!(d2.tokens, 4);
    assert_eq!(
        d2.n_past,
        d2.n_prompt + d2.tokens,
        "nothing of turn 1 may be reused"
    );
    // a cancel with nothing in flight is a no-op: the next request runs to the end
    s.send(r#"{"cmd":"cancel"}"#);
    s.send(&generate(3, "again", 3, false));
    let d3 = s.done(3);
    assert!(!d3.cancelled && d3.tokens == 3, "{d3:?}");
    assert!(d3.n_past > d2.n_past, "turn 3 continues turn 2");
    let (status, rest, _) = s.end();
    assert!(status.success() && rest.is_empty());
}

#[test]
fn a_cancel_covers_requests_still_queued() {
    let mut s = Session::start(&["-c", "4096", "--feed-random", "3"]);
    s.ready();
    // one write: the reader sees both generates and the cancel before the first turn can end
    s.send(&format!(
        "{}\n{}\n{}\n{}",
        generate(1, "first", 4000, true),
        generate(2, "second", 4000, true),
        r#"{"cmd":"cancel"}"#,
        generate(3, "third", 2, true)
    ));
    let d1 = s.done(1);
    let d2 = s.done(2);
    assert!(d1.cancelled && d2.cancelled, "{d1:?} {d2:?}");
    assert!(d1.tokens < 4000);
    assert_eq!(
        d2.tokens, 0,
        "a queued request is cancelled before it starts"
    );
    let d3 = s.done(3);
    assert!(
        !d3.cancelled && d3.tokens == 2,
        "the cancel does not reach later requests"
    );
    let (status, _, _) = s.end();
    assert!(status.success());
}

#[test]
fn malformed_requests_are_rejected_and_the_session_keeps_serving() {
    let mut s = Session::start(&["--chatml"]);
    s.ready();
    // (request line, the id its error must carry)
    let bad: [(&str, i64); 14] = [
        (r#"{"cmd":"generate","id":1,"prompt":"#, 0),
        ("not json at all", 0),
        ("[1,2,3]", 0),
        (r#"{"id":2,"prompt":"no cmd"}"#, 2),
        (r#"{"cmd":"explode","id":3}"#, 3),
        (r#"{"cmd":"generate","prompt":"no id"}"#, 0),
        (r#"{"cmd":"generate","id":"five","prompt":"x"}"#, 0),
        (r#"{"cmd":"generate","id":6,"prompt":""}"#, 6),
        (
            r#"{"cmd":"generate","id":7,"prompt":"x","n_predict":100000}"#,
            7,
        ),
        (r#"{"cmd":"generate","id":8,"prompt":"x","n_predict":0}"#, 8),
        (r#"{"cmd":"generate","id":9,"prompt":"x","think":"yes"}"#, 9),
        (
            r#"{"cmd":"decide","id":10,"prefix":"a","choices":["x","y"]}"#,
            10,
        ),
        (
            r#"{"cmd":"generate","id":14,"prompt":"x","n_predict":18446744073709551615}"#,
            14,
        ),
        (
            r#"{"cmd":"generate","id":15,"prompt":"x","n_predict":-3}"#,
            15,
        ),
    ];
    for (line, id) in bad {
        s.send(line);
        let e = s.error();
        assert!(!e.fatal, "{line}: {e:?}");
        assert_eq!(e.id, id, "{line}: {e:?}");
        assert!(!e.msg.is_empty());
    }
    // the messages say what was wrong
    let msgs: Vec<String> = s
        .seen
        .iter()
        .filter_map(|l| match parse_line(l) {
            LineKind::Record(Record::Error(e)) => Some(e.msg),
            _ => None,
        })
        .collect();
    assert!(msgs[4].contains("explode"), "{}", msgs[4]);
    assert!(msgs[5].contains("id"), "{}", msgs[5]);
    assert!(msgs[7].contains("empty prompt"), "{}", msgs[7]);
    assert!(
        msgs[8].contains("exceeds the session n_ctx (512)"),
        "{}",
        msgs[8]
    );
    assert!(msgs[11].contains("--decide"), "{}", msgs[11]);
    // a blank line is not a request and gets no answer; the session still answers
    s.send("");
    s.send(&generate(11, "still there?", 3, true));
    let d = s.done(11);
    assert_eq!(d.tokens + d.n_prompt, d.n_past);
    // a rejected continuation leaves the conversation as it was
    s.send(r#"{"cmd":"generate","id":12,"prompt":"x","n_predict":100000,"clear_kv":false}"#);
    assert_eq!(s.error().id, 12);
    s.send(&generate(13, "go on", 2, false));
    let d13 = s.done(13);
    assert!(d13.n_past - d13.n_prompt - d13.tokens >= d.n_past - d.tokens);
    // EOF ends the session cleanly: exit 0, nothing more on stdout
    let (status, rest, _) = s.end();
    assert!(status.success(), "exit {status:?}");
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn close_and_eof_end_the_session_and_a_load_failure_is_fatal() {
    let mut s = Session::start(&[]);
    s.ready();
    s.send(&format!(
        "{}\n{}\n{}",
        generate(1, "before close", 2, true),
        r#"{"cmd":"close"}"#,
        generate(2, "after close: never served", 2, true)
    ));
    let d = s.done(1);
    assert_eq!(d.tokens, 2);
    let status = s.child.wait().unwrap();
    assert!(status.success());
    let rest: Vec<String> = s.lines.iter().collect();
    assert!(rest.is_empty(), "nothing after close: {rest:?}");

    // EOF right after READY
    let s = Session::start(&[]);
    let (status, rest, _) = {
        let mut s = s;
        s.ready();
        s.end()
    };
    assert!(status.success() && rest.is_empty());

    // a model that cannot load: BMOE_ERROR fatal:true, exit 1, no READY
    let out = cli()
        .args(["--session", "-m", "/nonexistent/model.gguf"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    match lines.next().map(parse_line) {
        Some(LineKind::Record(Record::Error(e))) => {
            assert!(
                e.fatal && e.id == 0 && e.msg.contains("/nonexistent/model.gguf"),
                "{e:?}"
            )
        }
        other => panic!("expected a fatal BMOE_ERROR, got {other:?}"),
    }
    assert!(lines.next().is_none());
}

#[test]
fn the_expert_cache_stays_warm_across_turns() {
    let mut s = Session::start(&["--moe-stream", "--cache-mb", "64", "--chatml"]);
    s.ready();
    let prompt = "Warm cache: the same prompt twice.";
    s.send(&generate(1, prompt, 8, true));
    let d1 = s.done(1);
    s.send(&generate(2, prompt, 8, true));
    let d2 = s.done(2);
    assert!(d1.cache_hit_pct >= 0.0 && d2.cache_hit_pct <= 100.0);
    assert!(
        d2.cache_hit_pct > d1.cache_hit_pct,
        "turn 2 {} vs turn 1 {}",
        d2.cache_hit_pct,
        d1.cache_hit_pct
    );
    // the experts turn 1 read are still resident: turn 2 reads less from flash
    assert!(
        d2.read_mib + d2.prefill_read_mib < d1.read_mib + d1.prefill_read_mib,
        "{d1:?}\n{d2:?}"
    );
    assert_eq!(d1.cache_budget_mib, 64.0);
    assert!(d2.cache_resident_mib > 0.0);
    // same prompt, new chat each time, greedy: the same answer
    assert_eq!((d1.text.as_str(), d1.tokens), (d2.text.as_str(), d2.tokens));
    let (status, _, _) = s.end();
    assert!(status.success());
}

#[test]
fn decide_over_the_wire_scores_the_same_with_and_without_the_kept_prefix() {
    let mut s = Session::start(&["--chatml", "--decide"]);
    s.ready();
    let req = |id: i64, reuse: bool| {
        format!(
            r#"{{"cmd":"decide","id":{id},"prefix":"A long shared document. ","suffix":"Is it true?","choices":["yes","no","maybe"],"reuse_prefix":{reuse}}}"#
        )
    };
    s.send(&req(1, false));
    let cold = s.decide(1);
    s.send(&req(2, true));
    let stored = s.decide(2);
    s.send(&req(3, true));
    let reused = s.decide(3);
    assert_eq!(cold.choice_logp.len(), 3);
    assert!(reused.n_reused > 0, "{reused:?}");
    assert!(reused.n_prefilled < cold.n_prefilled);
    for d in [&stored, &reused] {
        assert_eq!(d.choice_logp, cold.choice_logp);
        assert_eq!(d.best, cold.best);
    }
    // colliding choices are a rejected request, not the end of the session
    s.send(r#"{"cmd":"decide","id":4,"prefix":"x","choices":["yes","yes"]}"#);
    let e = s.error();
    assert!(!e.fatal && e.id == 4, "{e:?}");
    // and a generate still works after decides
    s.send(&generate(5, "after deciding", 3, true));
    assert_eq!(s.done(5).tokens, 3);
    let (status, _, _) = s.end();
    assert!(status.success());
}

#[test]
fn session_csv_and_route_trace_span_the_turns() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let csv = dir.path().join("session.csv");
    let route = dir.path().join("route.csv");
    let io = dir.path().join("io.csv");
    let compute = dir.path().join("compute.csv");
    let mut s = Session::start(&[
        "--moe-stream",
        "--cache-mb",
        "64",
        "--csv",
        csv.to_str().unwrap(),
        "--route-trace",
        route.to_str().unwrap(),
        "--io-trace",
        io.to_str().unwrap(),
        "--compute-trace-layers",
        compute.to_str().unwrap(),
    ]);
    s.ready();
    let mut tokens = Vec::new();
    for id in 1..=3 {
        s.send(&generate(id, "metrics for every turn", 5, id == 1));
        tokens.push(s.done(id).tokens);
    }
    let (status, _, _) = s.end();
    assert!(status.success());

    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.matches("# bmoe_metrics v2").count(), 1, "one preamble");
    assert_eq!(text.matches("\nstep,").count(), 1, "one header");
    let file = MetricsFile::read(&csv).expect("the session CSV parses");
    let turns: Vec<u64> = file.rows.iter().map(|r| r.turn.unwrap()).collect();
    for (turn, n) in tokens.iter().enumerate() {
        let rows = turns.iter().filter(|&&t| t == turn as u64).count() as u64;
        assert_eq!(rows, *n, "turn {turn} rows");
    }
    assert_eq!(file.summaries.len(), 3, "one # summary trailer per turn");
    for (t, n) in file.summaries.iter().zip(&tokens) {
        assert_eq!(t.get("tokens"), Some(n.to_string().as_str()));
    }

    // every trace: one preamble, rows of every turn (the cache holds the experts after turn 1,
    // so the io trace — one row per read — only has to show turn 0)
    for (path, magic, turns) in [
        (&route, "# route_trace v1", 3),
        (&compute, "# compute_trace v1", 3),
        (&io, "# io_trace v1", 1),
    ] {
        let trace = std::fs::read_to_string(path).unwrap();
        assert_eq!(trace.matches(magic).count(), 1, "{magic}");
        for turn in 0..turns {
            assert!(
                trace.lines().any(|l| l.starts_with(&format!("{turn},"))),
                "{magic}: no rows for turn {turn}"
            );
        }
    }
}

#[test]
fn output_paths_are_checked_before_the_model_loads() {
    for (mode, args) in [
        ("one-shot", vec!["-n", "2"]),
        ("session", vec!["--session"]),
    ] {
        let out = cli()
            .arg("-m")
            .arg(&models().tiny)
            .args(["--moe-stream", "--csv", "/nonexistent-dir/x.csv"])
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{mode}: {stderr}");
        assert!(
            stderr.contains("cannot create --csv /nonexistent-dir/x.csv"),
            "{mode}: {stderr}"
        );
        // the streamer set-up line is printed after the load: it must not appear
        assert!(!stderr.contains("expert streaming ON"), "{mode}: {stderr}");
        assert!(!stdout.contains("BMOE_READY"), "{mode}: {stdout}");
    }
}

#[test]
fn think_ctl_is_decided_by_rendering_the_models_template() {
    let m = models();
    let ready = |model: &std::path::Path, extra: &[&str]| {
        let mut s = Session::start_on(model, extra);
        let r = s.ready();
        (s, r)
    };
    // the synthetic ChatML template reads enable_thinking
    let (s, r) = ready(&m.tiny, &["--chatml"]);
    assert_eq!(r.think_ctl.as_str(), "template");
    s.end();
    // without --chatml no template is used: the flag is all there is
    let (s, r) = ready(&m.owns_span, &[]);
    assert_eq!(r.think_ctl.as_str(), "template");
    s.end();
    // a model that owns its think span and ignores the flag cannot be asked not to reason
    let (s, r) = ready(&m.owns_span, &["--chatml"]);
    assert_eq!(r.think_ctl.as_str(), "none");
    s.end();
    // a channel format: think:false starts the turn past an empty, closed analysis section
    let (mut s, r) = ready(&m.channels, &["--chatml"]);
    assert_eq!(r.think_ctl.as_str(), "prefill");
    s.send(r#"{"cmd":"generate","id":1,"prompt":"hi","n_predict":2,"think":true}"#);
    let on = s.done(1);
    s.send(r#"{"cmd":"generate","id":2,"prompt":"hi","n_predict":2,"think":false}"#);
    let off = s.done(2);
    // <|user|>hi<|e|><|a|> against <|user|>hi<|e|><|a|>analysis<|m|>\n\n<|e|><|a|>final<|m|>:
    // 35 more bytes, a token per byte but for the vocabulary's few merges
    let grew = off.n_prompt - on.n_prompt;
    assert!(
        (30..=35).contains(&grew),
        "the prefilled section: {grew} tokens"
    );
    // the one-shot --no-think renders the same way (the prompt is echoed on stdout)
    let out = cli()
        .arg("-m")
        .arg(&m.channels)
        .args(["--chatml", "--no-think", "-p", "hi", "-n", "1", "-t", "2"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("<|user|>hi<|e|><|a|>analysis<|m|>\n\n<|e|><|a|>final<|m|>"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (status, _, _) = s.end();
    assert!(status.success());
}

#[test]
fn a_new_chat_reseeds_the_sampler() {
    let args = ["--temp", "0.9", "--seed", "42", "--dump-logits-hash"];
    let mut s = Session::start(&[&["--chatml"][..], &args[..]].concat());
    s.ready();
    let prompt = "Sample something";
    for id in 1..=2 {
        s.send(&generate(id, prompt, 12, true));
        s.done(id);
    }
    let (status, _, stderr) = s.end();
    assert!(status.success());
    let blocks = hash_blocks(&stderr);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        blocks[0], blocks[1],
        "two new chats with one seed sample the same tokens"
    );
    // and exactly what a one-shot run with that seed samples
    let rendered = template().render(prompt, true).unwrap();
    let out = cli()
        .arg("-m")
        .arg(&models().tiny)
        .args(["-p", &rendered, "-n", "12", "-t", "2", "-c", "512"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        hash_blocks(&String::from_utf8_lossy(&out.stderr))[0],
        blocks[0]
    );
}

#[test]
fn cancel_during_the_prefill_stops_it() {
    let mut s = Session::start(&["-c", "4096"]);
    s.ready();
    // ~2000 byte tokens: a prefill of a second or more here, cancelled within milliseconds
    let prompt: String = (0..400).map(|i| format!("w{i} ")).collect();
    s.send(&generate(1, &prompt, 2, true));
    match s.next() {
        Record::Begin(b) => assert_eq!(b.id, 1),
        other => panic!("expected BMOE_BEGIN, got {other:?}"),
    }
    s.send(r#"{"cmd":"cancel"}"#);
    let d = s.done(1);
    assert!(d.cancelled, "{d:?}");
    assert_eq!((d.tokens, d.n_prompt, d.n_past), (0, 0, 0), "{d:?}");
    // the KV holds nothing of it: a continuation prefills its whole (new) conversation
    s.send(&generate(2, "after", 2, false));
    let d2 = s.done(2);
    assert_eq!(d2.n_past, d2.n_prompt + d2.tokens);
    let (status, _, _) = s.end();
    assert!(status.success());
}

#[test]
fn a_read_error_mid_session_is_fatal_and_ends_the_process() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let model = dir.path().join("live.gguf");
    std::fs::copy(&models().tiny, &model).unwrap();
    let info =
        bmoe_gguf::ModelInfo::from_model(&bmoe_gguf::GgufModel::open(&model).unwrap()).unwrap();
    let first_expert = info
        .layers
        .iter()
        .flat_map(|l| l.expert_tensors.iter())
        .map(|t| t.file_offset)
        .min()
        .unwrap();
    // after the load, the model file is swapped for one cut short before the experts
    let short = dir.path().join("short.gguf");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&short, &bytes[..first_expert as usize + 100]).unwrap();
    let mut child = cli()
        .env("BMOE_TEST_REPLACE_AFTER_LOAD", &short)
        .arg("-m")
        .arg(&model)
        .args(["--session", "--moe-stream", "-t", "2", "-c", "256"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{}", generate(5, "read me", 4, true)).unwrap();
        writeln!(stdin, "{}", generate(6, "never served", 4, true)).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let records: Vec<Record> = stdout
        .lines()
        .map(|l| match parse_line(l) {
            LineKind::Record(r) => r,
            other => panic!("not a protocol line: {l} ({other:?})"),
        })
        .collect();
    assert!(
        matches!(records.first(), Some(Record::Ready(_))),
        "{stdout}"
    );
    match records.last() {
        Some(Record::Error(e)) => {
            assert!(e.fatal && e.id == 5, "{e:?}");
            assert!(e.msg.contains("live.gguf"), "{e:?}");
        }
        other => panic!("expected a fatal BMOE_ERROR last, got {other:?}"),
    }
    assert!(
        !records
            .iter()
            .any(|r| matches!(r, Record::Done(_)) || matches!(r, Record::Begin(b) if b.id == 6)),
        "nothing is served after the fatal error:\n{stdout}"
    );
}

#[test]
fn a_model_truncated_in_place_mid_session_ends_it_with_a_fatal_error() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let model = dir.path().join("cut-live.gguf");
    std::fs::copy(&models().tiny, &model).unwrap();
    let mut s = Session::start_on(&model, &[]);
    s.ready();
    s.send(&generate(1, "before the cut", 4, true));
    s.done(1);
    // cut in place while the session is idle: the mapping stays, its pages past 9000 bytes are
    // gone, and the next decode touches them (SIGBUS, which used to kill the process silently)
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(9000)
        .unwrap();
    s.send(&generate(2, "after the cut", 4, false));
    let e = match s.finish() {
        Record::Error(e) => e,
        other => panic!("expected a fatal BMOE_ERROR, got {other:?}"),
    };
    assert!(e.fatal && e.id == 2, "{e:?}");
    assert!(
        e.msg.contains("SIGBUS at 0x")
            && e.msg
                .contains("cut-live.gguf was truncated or changed while in use")
            && e.msg.contains("; hint: "),
        "{e:?}"
    );
    let (status, rest, stderr) = s.end();
    assert_eq!(status.code(), Some(1), "stderr:\n{stderr}");
    assert!(rest.is_empty(), "nothing after the fatal error: {rest:?}");
    assert!(
        stderr.contains("cut-live.gguf was truncated") && stderr.contains("\nhint: "),
        "{stderr}"
    );
}

#[test]
fn a_cancelled_turns_csv_trailer_says_so() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let csv = dir.path().join("cancel.csv");
    let mut s = Session::start(&[
        "-c",
        "4096",
        "--feed-random",
        "7",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    s.ready();
    // turn 0: cancelled mid-generation
    s.send(&generate(1, "a long answer please", 4000, true));
    loop {
        if let Record::Progress(p) = s.next()
            && p.step >= 2
        {
            break;
        }
    }
    s.send(r#"{"cmd":"cancel"}"#);
    let d1 = s.done(1);
    assert!(d1.cancelled, "{d1:?}");
    // turn 1: cancelled during its (long) prefill
    let prompt: String = (0..400).map(|i| format!("w{i} ")).collect();
    s.send(&generate(2, &prompt, 2, true));
    match s.next() {
        Record::Begin(b) => assert_eq!(b.id, 2),
        other => panic!("expected BMOE_BEGIN, got {other:?}"),
    }
    s.send(r#"{"cmd":"cancel"}"#);
    let d2 = s.done(2);
    assert!(d2.cancelled && d2.tokens == 0, "{d2:?}");
    // turn 2: runs to the end
    s.send(&generate(3, "short", 3, true));
    let d3 = s.done(3);
    assert!(!d3.cancelled, "{d3:?}");
    let (status, _, _) = s.end();
    assert!(status.success());

    let file = MetricsFile::read(&csv).expect("the session CSV parses");
    let t = &file.summaries;
    // a cancel that lands between BMOE_BEGIN and the prefill's start stops turn 1 before it
    // takes a turn number (nothing ran, so no trailer); otherwise it has one with tokens=0
    assert!(
        t.len() == 3 || t.len() == 2,
        "one trailer per started turn: {}",
        t.len()
    );
    assert_eq!(t[0].get("cancelled"), Some("1"));
    assert_eq!(t[0].get("tokens"), Some(d1.tokens.to_string().as_str()));
    if t.len() == 3 {
        assert_eq!(t[1].get("cancelled"), Some("1"));
        assert_eq!(t[1].get("tokens"), Some("0"));
    }
    let last = t.last().unwrap();
    assert_eq!(
        last.get("cancelled"),
        None,
        "a finished turn has no cancelled key"
    );
    assert_eq!(last.get("tokens"), Some("3"));
    // the trailers and the turn numbers stay one-to-one: the last turn's rows carry its index
    let last_turn = file.rows.last().unwrap().turn.unwrap();
    assert_eq!(last_turn, t.len() as u64 - 1);
}

#[test]
fn done_reports_the_cache_residency_the_trailer_does() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let csv = dir.path().join("resident.csv");
    let mut s = Session::start(&[
        "--moe-stream",
        "--cache-mb",
        "64",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    s.ready();
    s.send(&generate(1, "hello there", 6, true));
    let d = s.done(1);
    let (status, _, _) = s.end();
    assert!(status.success());
    let file = MetricsFile::read(&csv).expect("the session CSV parses");
    let trailer = file.summaries[0]
        .get_f64("cache_resident_MiB")
        .expect("cache_resident_MiB");
    assert!(trailer > 0.0, "the cache holds the routed experts");
    // the same figure at the same precision (one decimal), not a whole-MiB rounding of it
    assert_eq!(d.cache_resident_mib, trailer, "{d:?}");
}

#[test]
fn ngram_turns_in_a_session_report_their_drafts_and_keep_the_text() {
    let prompt = "abcabcabcabcabcabcabcabcabcabcabc";
    // two turns, the second continuing the first's KV — which the rejected drafts must not
    // have polluted
    let turns = [(1, true), (2, false)];
    let mut plain = Session::start(&["--moe-stream", "--cache-mb", "0"]);
    plain.ready();
    let mut want = Vec::new();
    for (id, clear) in turns {
        plain.send(&generate(id, prompt, 40, clear));
        let d = plain.done(id);
        assert_eq!((d.mtp_drafted, d.mtp_decodes), (0, 0));
        want.push(d);
    }
    let _ = plain.end();
    let mut s = Session::start(&[
        "--moe-stream",
        "--cache-mb",
        "0",
        "--ngram",
        "--ngram-min-match",
        "1",
    ]);
    s.ready();
    for ((id, clear), w) in turns.into_iter().zip(&want) {
        s.send(&generate(id, prompt, 40, clear));
        let d = s.done(id);
        assert_eq!(d.text, w.text, "turn {id}");
        assert_eq!((d.tokens, d.n_past), (40, w.n_past), "turn {id}: {d:?}");
        assert!(
            d.mtp_accepted > 0 && d.mtp_accepted <= d.mtp_drafted,
            "{d:?}"
        );
        assert!(
            d.mtp_decodes < d.tokens && d.drafted_steps <= d.mtp_decodes,
            "{d:?}"
        );
    }
    let (status, _, _) = s.end();
    assert!(status.success());
}
