//! Session mode on ratatui's `TestBackend`: the engine's lines are written with the
//! `bmoe-telemetry` record types and read back through the decoder the binary uses; the prompts
//! go through the same `App::submit` / `App::cancel` the key handler calls, and the requests they
//! return are checked as the JSON lines the engine would read.

#![allow(clippy::unwrap_used)] // test helpers: a failed write is a failed test

use crate::common::render;

use bmoe_telemetry::protocol::{Begin, Done, ErrorRecord, Progress, Ready, Request, ThinkCtl};
use bmoe_top::argv;
use bmoe_top::decode::LineDecoder;
use bmoe_top::keys::{self, Action};
use bmoe_top::session::TurnState;
use bmoe_top::state::{App, SourceKind};

const CMD: &str = "bmoe-cli -m /models/Qwen3-30B-A3B-Q4_K_M.gguf -t 4 --io-threads 4 --moe-stream --cache-mb 3000 -n 32 --session";

/// A session panel as `bmoe-top --session -- CMD` starts it, with its decoder.
struct Session {
    app: App,
    decoder: LineDecoder,
}

impl Session {
    fn new() -> Self {
        let argv: Vec<String> = CMD.split_whitespace().map(String::from).collect();
        let mut app = App::new(
            SourceKind::Session,
            "session bmoe-cli (pid 1)",
            argv::facts(&argv),
        );
        app.child_alive = true;
        Session {
            app,
            decoder: LineDecoder::new(),
        }
    }

    fn engine(&mut self, line: String) {
        for e in self.decoder.feed(&line) {
            self.app.push(e);
        }
    }

    fn ready(&mut self) {
        self.engine(
            Ready {
                load_s: 12.5,
                arch: "qwen3moe".into(),
                n_ctx: 4096,
                think_ctl: ThinkCtl::Template,
                n_expert_used: 8,
            }
            .to_line(),
        );
    }

    fn type_str(&mut self, s: &str) {
        for c in s.chars() {
            keys::apply(&mut self.app, Action::Type(c));
        }
    }

    /// Types `prompt`, presses Enter; returns the request line written to the engine.
    fn send(&mut self, prompt: &str) -> String {
        self.type_str(prompt);
        self.app.submit().expect("request accepted").to_line()
    }

    fn tokens(&mut self, from: u64, to: u64, steps: u64, text: &[(&str, &str)]) {
        for (i, step) in (from..=to).enumerate() {
            let (r, t) = text.get(i).copied().unwrap_or(("", ""));
            self.engine(
                Progress {
                    step,
                    steps,
                    wall_ms: 400.0,
                    io_ms: 150.0,
                    mgmt_ms: 20.0,
                    read_mb: 100.0,
                    cache_hit_pct: 60.0,
                    cpu_ms: 1200.0,
                    dense_resident_frac: 0.95,
                    delta_reasoning: r.into(),
                    delta_text: t.into(),
                    ..Progress::default()
                }
                .to_line(),
            );
        }
    }

    fn done(&mut self, id: i64, tokens: u64, cancelled: bool, text: &str, reasoning: &str) {
        self.engine(
            Done {
                id,
                cancelled,
                tokens,
                tok_s: 2.5,
                cache_hit_pct: 60.0,
                cpu_s_tok: 1.2,
                io_s_tok: 0.15,
                mgmt_s_tok: 0.02,
                read_mib: 100.0 * tokens as f64,
                prefill_s: 1.5,
                prefill_tps: 8.0,
                load_s: 12.5,
                n_prompt: 12,
                n_past: 40,
                text: text.into(),
                reasoning: reasoning.into(),
                ..Done::default()
            }
            .to_line(),
        );
    }
}

const FIRST: [(&str, &str); 6] = [
    ("Short ", ""),
    ("answer.", ""),
    ("", "Rayleigh "),
    ("", "scattering: "),
    ("", "blue light "),
    ("", "scatters more."),
];

#[test]
fn ready_with_a_prompt_being_typed() {
    let mut s = Session::new();
    let loading = render(&s.app, 80, 24);
    assert!(loading.contains("loading the model"), "{loading}");
    s.ready();
    s.type_str("Why is the sky blue?");
    let screen = render(&s.app, 80, 24);
    assert!(
        screen.contains("ready: qwen3moe · n_ctx 4096 · top-8"),
        "{screen}"
    );
    assert!(screen.contains(" › Why is the sky blue?█"), "{screen}");
    assert!(
        screen.contains("[new chat] Enter send · Esc cancel"),
        "{screen}"
    );
    insta::assert_snapshot!("session_ready_80x24", screen);
    // The session's longer key list fits 80x24 too, the closing note whole.
    s.app.help = true;
    let help = render(&s.app, 80, 24);
    assert!(help.contains("Ctrl-N"), "{help}");
    assert!(help.contains("(an upper bound)"), "{help}");
    insta::assert_snapshot!("session_help_80x24", help);
}

#[test]
fn generating_streams_the_turn_in_flight() {
    let mut s = Session::new();
    s.ready();
    let req = s.send("Why is the sky blue?");
    assert_eq!(
        req,
        r#"{"cmd":"generate","id":1,"prompt":"Why is the sky blue?","think":true,"clear_kv":true}"#
    );
    let sent = render(&s.app, 80, 24);
    assert!(sent.contains("#1 sent"), "{sent}");
    s.engine(Begin { id: 1 }.to_line());
    s.tokens(1, 6, 32, &FIRST);
    // Enter while a generation is in flight is refused, and says why.
    s.type_str("next");
    assert!(s.app.submit().is_none());
    let screen = render(&s.app, 80, 24);
    assert!(screen.contains("token 6/32"), "{screen}");
    assert!(screen.contains("│ Short answer."), "{screen}");
    assert!(
        screen.contains("Rayleigh scattering: blue light scatters more."),
        "{screen}"
    );
    assert!(screen.contains("#1 generating"), "{screen}");
    assert!(
        screen.contains("⚠ #1 is still generating: Esc cancels it"),
        "{screen}"
    );
    // hand-worked: cpu 1200 / 4 threads = 300 ms compute of a 400 ms token; io 150 serial
    assert!(screen.contains("300 ms cpu÷4"), "{screen}");
    insta::assert_snapshot!("session_generating_80x24", screen);
}

#[test]
fn done_then_a_second_prompt_continues_the_chat() {
    let mut s = Session::new();
    s.ready();
    s.send("Why is the sky blue?");
    s.engine(Begin { id: 1 }.to_line());
    s.tokens(1, 6, 32, &FIRST);
    s.done(
        1,
        6,
        false,
        "Rayleigh scattering: blue light scatters more.",
        "Short answer.",
    );
    assert!(matches!(
        s.app.run.session.turns[0].state,
        TurnState::Done {
            cancelled: false,
            tokens: 6,
            ..
        }
    ));
    let req = s.send("And at sunset?");
    assert_eq!(
        req,
        r#"{"cmd":"generate","id":2,"prompt":"And at sunset?","think":true,"clear_kv":false}"#
    );
    s.engine(Begin { id: 2 }.to_line());
    s.tokens(1, 2, 32, &[("", "Longer "), ("", "path.")]);
    s.done(2, 2, false, "Longer path.", "");
    let screen = render(&s.app, 120, 40);
    // the first turn keeps its answer; the second follows it in the same chat
    assert!(screen.contains("› Why is the sky blue?"), "{screen}");
    assert!(screen.contains("✓ 6 tokens · 2.50 tok/s"), "{screen}");
    assert!(screen.contains("› And at sunset?"), "{screen}");
    assert!(screen.contains("Longer path."), "{screen}");
    assert!(!screen.contains("new chat ──"), "{screen}");
    assert!(screen.contains("#2 done, 2 tokens · ready"), "{screen}");
    assert!(screen.contains("done (BMOE_DONE): 2 tokens"), "{screen}");
    // a session's model was loaded before the prompt: no "TTFT incl. load", but the context
    assert!(screen.contains("context 40/4096 tokens"), "{screen}");
    assert!(!screen.contains("incl. load"), "{screen}");
    assert!(screen.contains(" [continue] Enter send"), "{screen}");
    insta::assert_snapshot!("session_done_120x40", screen);
}

#[test]
fn cancel_and_error_are_shown_on_their_turns() {
    let mut s = Session::new();
    s.ready();
    // Esc with nothing in flight says so and sends nothing.
    assert!(s.app.cancel().is_none());
    assert_eq!(
        s.app.composer.notice.as_deref(),
        Some("nothing is generating")
    );
    s.send("Count to a thousand");
    s.engine(Begin { id: 1 }.to_line());
    s.tokens(1, 3, 32, &[("", "1, "), ("", "2, "), ("", "3, ")]);
    assert_eq!(s.app.cancel(), Some(Request::Cancel));
    assert_eq!(Request::Cancel.to_line(), r#"{"cmd":"cancel"}"#);
    let pending = render(&s.app, 80, 24);
    assert!(pending.contains("#1 cancel sent"), "{pending}");
    assert!(s.app.cancel().is_none(), "one cancel per generation");
    s.done(1, 3, true, "1, 2, 3, ", "");
    // Ctrl-N: the next prompt starts a new chat.
    keys::apply(&mut s.app, Action::NewChat);
    let req = s.send(&"long ".repeat(20));
    assert!(req.contains(r#""clear_kv":true"#), "{req}");
    s.engine(
        ErrorRecord {
            id: 2,
            fatal: false,
            msg: "prompt (5000 tokens) + n_predict (32) exceeds n_ctx 4096".into(),
        }
        .to_line(),
    );
    let screen = render(&s.app, 100, 34);
    assert!(screen.contains("⏹ cancelled after 3 tokens"), "{screen}");
    assert!(screen.contains("── new chat ──"), "{screen}");
    assert!(screen.contains("✗ error: prompt (5000 tokens)"), "{screen}");
    assert!(screen.contains("#2 error: prompt"), "{screen}");
    insta::assert_snapshot!("session_error_100x34", screen);
    // A non-fatal error leaves the session usable.
    assert!(s.send("short").contains(r#""id":3"#));
}

#[test]
fn a_fatal_error_ends_the_session() {
    let mut s = Session::new();
    s.engine(
        ErrorRecord {
            id: 0,
            fatal: true,
            msg: "cannot load /models/x.gguf: not a GGUF file".into(),
        }
        .to_line(),
    );
    s.type_str("hello");
    assert!(s.app.submit().is_none());
    let screen = render(&s.app, 80, 24);
    assert!(screen.contains("fatal: cannot load"), "{screen}");
    assert!(screen.contains("the session has ended"), "{screen}");
}
