//! `bmoe-cli --session`: the model loads once and serves JSON requests from stdin, one per line,
//! answering with `BMOE_*` lines on stdout (the seed's "Session mode" section; docs/session.md).
//!
//! Two threads. A **reader** parses stdin lines into [`Request`]s and queues them in order; a
//! `cancel` is not queued: it raises the context's abort flag at once (the decode in flight stops
//! between two graph nodes) and records how many requests it covers — every `generate`/`decide`
//! read before it, none read after — so a cancel can neither be lost to a race with the start of
//! its turn nor leak into the next one. The **main** thread owns the [`Engine`] and answers the
//! queue in order, one request at a time; stdout is written by it only, so lines never interleave.
//!
//! A conversation is kept between `generate` requests: `clear_kv:false` appends the new user
//! message to the held history, renders the whole history with the model's template, and
//! prefills only the tokens after the longest prefix the KV already holds
//! (`llama_memory_seq_rm` drops the divergent tail). A rejected request (`BMOE_ERROR` with
//! `fatal:false`) leaves the conversation and the KV exactly as they were; a cancelled turn is
//! rolled back the same way.
//!
//! Ctrl-C (SIGINT) follows llama-cli's habit: while a request runs it cancels that request as a
//! `cancel` would (the abort flag stops the decode in flight) and the session goes on; with no
//! request running it ends the session (exit 130); a second SIGINT before the first was handled
//! exits at once. An output file that stops on a write error (a full disk) is reported on every
//! `generate` answered after it, as a non-fatal `BMOE_ERROR` before its `BMOE_DONE`, and the
//! session then exits 1 when it ends.

use crate::chat::{Message, PREFILLED_REASONING};
use crate::cli::RunConfig;
use crate::decide::{DecideSetup, PrefixState, decide};
use crate::error::{EngineError, ExitStatus};
use crate::ffi::Token;
use crate::sinks::SinkError;
use crate::turn::load::load_model;
use crate::turn::{Engine, Generation, Turn};
use bmoe_telemetry::protocol::{
    Begin, DecideRequest, Done, ErrorRecord, GenerateRequest, Ready, Request, round_to,
};
use std::cell::Cell;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

/// The KV sequence the conversation lives in (`llama_batch_get_one` decodes into it).
const SEQ: i32 = 0;

const MIB: f64 = 1024.0 * 1024.0;

/// How often the idle session looks at the SIGINT flag.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// A request the main loop runs (`cancel` and `close` are the reader's own business).
#[derive(Debug)]
enum Work {
    /// `generate`.
    Generate(GenerateRequest),
    /// `decide`.
    Decide(DecideRequest),
}

impl Work {
    fn id(&self) -> i64 {
        match self {
            Work::Generate(g) => g.id,
            Work::Decide(d) => d.id,
        }
    }
}

/// What the reader hands the main loop, in stdin order.
#[derive(Debug)]
enum Inbound {
    /// A `generate` or `decide`, numbered from 1 in arrival order.
    Work { seq: u64, work: Work },
    /// A line that is not a request the session accepts.
    Invalid { id: i64, msg: String },
    /// `close`, or the end of stdin.
    Close,
}

/// The cancel bookkeeping shared by the reader and the main loop.
#[derive(Debug, Default)]
struct Cancels {
    /// Every request numbered up to this one is cancelled.
    upto: AtomicU64,
}

impl Cancels {
    fn covers(&self, seq: u64) -> bool {
        self.upto.load(Ordering::SeqCst) >= seq
    }
}

/// The `id` of a request line that failed to parse, when it has an integer one (`0` otherwise),
/// so the client can match the error to what it sent.
fn id_of(line: &str) -> i64 {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("id").and_then(serde_json::Value::as_i64))
        .unwrap_or(0)
}

/// Classifies one stdin line (already known to be non-blank).
fn classify(line: &str) -> Result<Request, (i64, String)> {
    Request::parse(line).map_err(|e| {
        (
            id_of(line),
            format!("{e} — one JSON object per line, e.g. {{\"cmd\":\"generate\",\"id\":1,\"prompt\":\"hi\"}} (see docs/session.md)"),
        )
    })
}

/// The reader thread's loop: stdin lines → `tx`, cancels → `abort` + `cancels`.
fn read_requests(
    mut input: impl BufRead,
    tx: &Sender<Inbound>,
    abort: &AtomicBool,
    cancels: &Cancels,
) {
    let mut read = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match input.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let item = match std::str::from_utf8(&buf) {
            Err(e) => Inbound::Invalid {
                id: 0,
                msg: format!("invalid request: the line is not UTF-8 ({e})"),
            },
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => match classify(line) {
                Ok(Request::Cancel) => {
                    cancels.upto.store(read, Ordering::SeqCst);
                    abort.store(true, Ordering::SeqCst);
                    continue;
                }
                Ok(Request::Close) => break,
                Ok(Request::Generate(g)) => {
                    read += 1;
                    Inbound::Work {
                        seq: read,
                        work: Work::Generate(g),
                    }
                }
                Ok(Request::Decide(d)) => {
                    read += 1;
                    Inbound::Work {
                        seq: read,
                        work: Work::Decide(d),
                    }
                }
                Err((id, msg)) => Inbound::Invalid { id, msg },
            },
        };
        if tx.send(item).is_err() {
            return;
        }
    }
    let _ = tx.send(Inbound::Close);
}

/// What a rejected or failed request becomes.
#[derive(Debug)]
enum Failure {
    /// The request cannot be served; the session is unchanged and goes on.
    Rejected(String),
    /// The engine is in an unknown state: the session ends.
    Fatal(EngineError),
}

/// The conversation the session holds between turns.
#[derive(Debug, Default)]
struct Conversation {
    /// Chat messages so far (with `--chatml`).
    history: Vec<Message>,
    /// Without `--chatml`: the raw text so far (prompts and answers concatenated).
    raw: String,
    /// The tokens sequence 0's KV holds, in order.
    kv: Vec<Token>,
    /// Generations started so far (the CSV's and the traces' `turn`).
    turns: u32,
}

/// Length of the common prefix of `a` and `b`.
fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Writes one protocol line and flushes (a closed stdout is the client's business).
fn emit(out: &mut dyn Write, line: &str) {
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Answers request `id` with a non-fatal `BMOE_ERROR`: the session goes on.
fn reject(out: &mut dyn Write, id: i64, msg: String) {
    emit(
        out,
        &ErrorRecord {
            id,
            fatal: false,
            msg,
        }
        .to_line(),
    );
}

/// The `BMOE_ERROR` message of an output file that stopped on a write error.
fn sink_message(e: &SinkError) -> String {
    format!(
        "{e} — {} is no longer written, so the record of this turn is incomplete; hint: {}",
        e.flag(),
        e.hint()
    )
}

/// Serves requests from stdin until `close`, EOF, a SIGINT while idle
/// ([`ExitStatus::Interrupted`]) or a fatal error. Everything the protocol carries goes to
/// `out` (stdout); notes and warnings to `note` (stderr).
///
/// # Errors
/// The load failure or the fatal error that ended the session (already reported on `out` as
/// `BMOE_ERROR` with `fatal:true`); at the end of a session, an output file that stopped on a
/// write error (reported on `out` as non-fatal `BMOE_ERROR`s while it ran).
pub fn serve(
    cfg: &RunConfig,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<ExitStatus, EngineError> {
    serve_from(cfg, std::io::BufReader::new(std::io::stdin()), out, note)
}

fn fatal(out: &mut dyn Write, id: i64, e: EngineError) -> EngineError {
    let msg = format!("{e}; hint: {}", e.hint());
    emit(
        out,
        &ErrorRecord {
            id,
            fatal: true,
            msg,
        }
        .to_line(),
    );
    e
}

/// [`serve`] reading requests from `input` (any line source, for embedding).
///
/// # Errors
/// As [`serve`].
pub fn serve_from(
    cfg: &RunConfig,
    input: impl BufRead + Send + 'static,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<ExitStatus, EngineError> {
    let loaded = load_model(cfg).map_err(|e| fatal(out, 0, e))?;
    let mut engine = Engine::open(cfg, &loaded, note).map_err(|e| fatal(out, 0, e))?;
    emit(
        out,
        &Ready {
            load_s: round_to(engine.load_s(), 3),
            arch: engine.arch().to_string(),
            n_ctx: u64::from(cfg.n_ctx),
            think_ctl: engine.think_ctl().to_wire(),
            n_expert_used: engine.n_expert_used(),
        }
        .to_line(),
    );
    let interrupt = engine.catch_sigint(true).map_err(|e| fatal(out, 0, e))?;
    let (tx, rx): (Sender<Inbound>, Receiver<Inbound>) = channel();
    let abort = engine.abort_flag();
    let cancels = Arc::new(Cancels::default());
    {
        let cancels = Arc::clone(&cancels);
        // detached: it may sit in a blocking read when the session ends, and the process exit
        // takes it down
        std::thread::Builder::new()
            .name("bmoe-stdin".into())
            .spawn(move || read_requests(input, &tx, &abort, &cancels))
            .map_err(|e| fatal(out, 0, EngineError::StdinThread(e)))?;
    }
    let mut conv = Conversation::default();
    let mut prefix = PrefixState::with_cap(cfg.decide_state_max_mib.saturating_mul(1 << 20));
    loop {
        let item = match rx.recv_timeout(IDLE_POLL) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) if interrupt.raised() => {
                return ended_by_idle_sigint(&mut engine, note);
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match item {
            Inbound::Close => break,
            Inbound::Invalid { id, msg } => reject(out, id, msg),
            Inbound::Work { seq, work } => {
                // a SIGINT belongs to this request only if the request saw it (and so was
                // cancelled by it); one that lands after the request's last look, say between its
                // BMOE_DONE and this loop, found no request running and ends the session
                let took_sigint = Cell::new(false);
                let cancelled = || {
                    if interrupt.raised() {
                        took_sigint.set(true);
                        return true;
                    }
                    cancels.covers(seq)
                };
                if !cancelled() {
                    engine.clear_abort();
                }
                let id = work.id();
                crate::vm::sigbus::set_request(id);
                let result = match &work {
                    Work::Generate(g) => {
                        generate(&mut engine, &mut conv, cfg, g, out, note, &cancelled)
                    }
                    Work::Decide(d) => {
                        run_decide(&mut engine, &mut prefix, cfg, d, out, note, &cancelled)
                    }
                };
                match result {
                    Ok(()) => {}
                    Err(Failure::Rejected(msg)) => reject(out, id, msg),
                    Err(Failure::Fatal(e)) => return Err(fatal(out, id, e)),
                }
                if took_sigint.get() {
                    // the next SIGINT is a first one again
                    let _ = writeln!(
                        note,
                        "bmoe: interrupted (Ctrl-C) during request {id}: it was cancelled there and the session goes on; Ctrl-C with no request running ends it"
                    );
                    interrupt.rearm();
                } else if interrupt.raised() {
                    return ended_by_idle_sigint(&mut engine, note);
                }
            }
        }
    }
    ended(&mut engine, ExitStatus::Success)
}

/// A SIGINT that found no request running ends the session with 130, saying so on stderr.
fn ended_by_idle_sigint(
    engine: &mut Engine<'_>,
    note: &mut dyn Write,
) -> Result<ExitStatus, EngineError> {
    let _ = writeln!(
        note,
        "bmoe: interrupted (Ctrl-C) with no request running: the session ends"
    );
    ended(engine, ExitStatus::Interrupted)
}

/// How a session that was not ended by a fatal error exits: with the first output file that
/// stopped on a write error, if one did.
fn ended(engine: &mut Engine<'_>, status: ExitStatus) -> Result<ExitStatus, EngineError> {
    match engine.take_sink_failure() {
        Some(e) => Err(e.into()),
        None => Ok(status),
    }
}

/// The new conversation a `generate` asks for, rendered and tokenized, before anything changes.
struct Plan {
    history: Vec<Message>,
    raw: String,
    tokens: Vec<Token>,
    split: crate::turn::ChatSplit,
    /// The turn starts past a prefilled, empty reasoning section.
    prefilled: bool,
}

fn plan(
    engine: &Engine<'_>,
    conv: &Conversation,
    cfg: &RunConfig,
    g: &GenerateRequest,
    n_predict: usize,
) -> Result<Plan, Failure> {
    if g.prompt.is_empty() {
        return Err(Failure::Rejected(
            "empty prompt: send the user message in \"prompt\"".into(),
        ));
    }
    let think = g.think.unwrap_or(cfg.think);
    let (mut history, mut raw) = if g.clear_kv() {
        (Vec::new(), String::new())
    } else {
        (conv.history.clone(), conv.raw.clone())
    };
    let (text, split, prefilled) = match engine.template() {
        Some(t) => {
            history.push(Message::user(&g.prompt));
            let turn = t
                .render_turn(&history, think, engine.think_ctl())
                .map_err(|e| Failure::Rejected(e.to_string()))?;
            (turn.text, Some(turn.split), turn.prefilled)
        }
        None => {
            raw.push_str(&g.prompt);
            (raw.clone(), None, false)
        }
    };
    let tokens = engine
        .tokenize(&text)
        .map_err(|e| Failure::Rejected(e.to_string()))?;
    if tokens.is_empty() {
        return Err(Failure::Rejected("empty prompt after tokenization".into()));
    }
    let n_ctx = cfg.n_ctx as usize;
    if tokens.len().saturating_add(n_predict) > n_ctx {
        return Err(Failure::Rejected(format!(
            "prompt + n_predict exceeds the session n_ctx ({n_ctx}): the conversation is {} tokens and n_predict is {n_predict}; start a new chat (clear_kv:true), lower n_predict, or open the session with a larger -c/--ctx-size",
            tokens.len()
        )));
    }
    Ok(Plan {
        history,
        raw,
        tokens,
        split,
        prefilled,
    })
}

/// Puts sequence 0's KV at `tokens[..n]` (dropping what follows); `false` when the cache
/// cannot cut a partial range (sliding-window caches), after which it is empty.
fn keep_kv_prefix(engine: &mut Engine<'_>, n: usize, held: usize) -> bool {
    let ctx = engine.ctx_mut();
    if n == 0 {
        ctx.clear_memory();
        return true;
    }
    if n < held {
        let p0 = i32::try_from(n).unwrap_or(i32::MAX);
        if !ctx.seq_rm(SEQ, p0, -1) {
            ctx.clear_memory();
            return false;
        }
    }
    if ctx.seq_len(SEQ) != n {
        // the mirror and the cache disagree: start from nothing rather than trust either
        ctx.clear_memory();
        return false;
    }
    true
}

fn generate(
    engine: &mut Engine<'_>,
    conv: &mut Conversation,
    cfg: &RunConfig,
    g: &GenerateRequest,
    out: &mut dyn Write,
    note: &mut dyn Write,
    cancelled: &dyn Fn() -> bool,
) -> Result<(), Failure> {
    let n_predict = match g.n_predict {
        Some(0) => {
            return Err(Failure::Rejected(
                "n_predict must be > 0 (omit it to use the session's -n)".into(),
            ));
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => cfg.n_predict,
    };
    let p = plan(engine, conv, cfg, g, n_predict)?;
    emit(out, &Begin { id: g.id }.to_line());
    if cancelled() {
        // cancelled while queued: nothing changes
        emit(
            out,
            &done_record(
                engine,
                g.id,
                &Generation {
                    cancelled: true,
                    ..Default::default()
                },
                conv.kv.len(),
            )
            .to_line(),
        );
        return Ok(());
    }
    let held = if g.clear_kv() { 0 } else { conv.kv.len() };
    let mut n_reused = if g.clear_kv() {
        0
    } else {
        common_prefix(&conv.kv, &p.tokens).min(p.tokens.len() - 1)
    };
    if !keep_kv_prefix(engine, n_reused, held) {
        n_reused = 0;
    }
    // from here the KV no longer holds the old conversation past n_reused
    conv.kv.truncate(n_reused);
    if g.clear_kv() {
        conv.history.clear();
        conv.raw.clear();
        engine.reset_sampler();
    }
    let turn = Turn {
        turn: conv.turns,
        tokens: &p.tokens,
        n_reused,
        n_predict,
        split: p.split,
        progress: true,
    };
    conv.turns += 1;
    let out_g = engine
        .generate(&turn, out, note, cancelled)
        .map_err(Failure::Fatal)?;
    let n_past = if out_g.cancelled {
        // roll the turn back: the conversation is as it was before this message
        let held = engine_len(engine);
        if !keep_kv_prefix(engine, n_reused, held) {
            // the cache could not cut the turn off and is empty now: the next turn prefills
            // the whole (unchanged) history
            conv.kv.clear();
        }
        conv.kv.len()
    } else {
        conv.kv = p.tokens;
        conv.kv.extend_from_slice(&out_g.tokens);
        if engine.template().is_some() {
            conv.history = p.history;
            // a prefilled turn's empty reasoning section is in the KV: the history renders it
            let reasoning = if p.prefilled && out_g.reasoning.is_empty() {
                PREFILLED_REASONING
            } else {
                &out_g.reasoning
            };
            conv.history
                .push(Message::assistant(&out_g.answer, reasoning));
        } else {
            conv.raw = p.raw;
            conv.raw.push_str(&out_g.text);
        }
        conv.kv.len()
    };
    for e in engine.sink_failures() {
        // before the BMOE_DONE, so a client that takes the first answer to a request as its
        // outcome records an error, not a good turn
        reject(out, g.id, sink_message(e));
    }
    emit(out, &done_record(engine, g.id, &out_g, n_past).to_line());
    Ok(())
}

/// How many positions the KV holds now.
fn engine_len(engine: &mut Engine<'_>) -> usize {
    engine.ctx_mut().seq_len(SEQ)
}

fn run_decide(
    engine: &mut Engine<'_>,
    prefix: &mut PrefixState,
    cfg: &RunConfig,
    d: &DecideRequest,
    out: &mut dyn Write,
    note: &mut dyn Write,
    cancelled: &dyn Fn() -> bool,
) -> Result<(), Failure> {
    if !cfg.decide {
        return Err(Failure::Rejected(
            "decide requests need a session opened with --decide (bmoe-cli --session --decide)"
                .into(),
        ));
    }
    // nothing is decoded token by token, so BEGIN goes out with the result: a rejected request
    // answers BMOE_ERROR alone, as a rejected generate does
    let rec = if cancelled() {
        Ok(bmoe_telemetry::protocol::Decide {
            id: d.id,
            cancelled: true,
            best: -1,
            ..Default::default()
        })
    } else {
        let think_ctl = engine.think_ctl();
        let prefill_chunk = engine.prefill_chunk();
        let (ctx, template) = engine.ctx_and_template();
        let setup = DecideSetup {
            template,
            think_ctl,
            prefill_chunk,
        };
        let rec = decide(ctx, setup, d, prefix);
        if matches!(&rec, Ok(r) if r.cancelled) {
            // the abort flag stopped it: asking the closure is how a SIGINT that raised the flag
            // counts as this request's, not as one with no request running
            let _ = cancelled();
        }
        if let Some(msg) = prefix.take_cap_note() {
            let _ = writeln!(note, "{msg}");
        }
        rec
    };
    match rec {
        Ok(rec) => {
            emit(out, &Begin { id: d.id }.to_line());
            emit(out, &rec.to_line());
            Ok(())
        }
        Err(e) if e.is_fatal() => Err(Failure::Fatal(EngineError::Decide(e))),
        Err(e) => Err(Failure::Rejected(format!("{e}; hint: {}", e.hint()))),
    }
}

/// The `BMOE_DONE` record of a turn, rounded to the decimals the seed's format lists.
fn done_record(engine: &Engine<'_>, id: i64, g: &Generation, n_past: usize) -> Done {
    let s = &g.summary;
    let t = &g.trailer;
    let n = s.n_gen.max(1) as f64;
    let sp = s.spec.unwrap_or_default();
    let s_tok = s.decode_s / n;
    let st = s.stream.unwrap_or_default();
    let io_tok = st.io_s / n;
    let mgmt_tok = s.mgmt_s() / n;
    let flash_tok = st.flash_wait_s() / n;
    let dev = t.prefill_dev.unwrap_or_default();
    Done {
        id,
        cancelled: g.cancelled,
        tokens: s.n_gen as u64,
        tok_s: round_to(
            if s.decode_s > 0.0 {
                s.n_gen as f64 / s.decode_s
            } else {
                0.0
            },
            3,
        ),
        prefill_s: round_to(s.prefill_s, 3),
        prefill_tps: round_to(
            if s.prefill_s > 0.0 {
                s.n_prompt as f64 / s.prefill_s
            } else {
                0.0
            },
            2,
        ),
        load_s: round_to(engine.load_s(), 3),
        cache_hit_pct: round_to(
            if s.stream.is_some() {
                st.cache_hit_pct
            } else {
                -1.0
            },
            1,
        ),
        n_prompt: s.n_prompt as u64,
        n_past: n_past as u64,
        compute_s_tok: round_to((s_tok - flash_tok - mgmt_tok).max(0.0), 4),
        io_s_tok: round_to(io_tok, 4),
        // at the trailer's cache_resident_MiB precision: the cache rarely holds whole MiB
        cache_resident_mib: round_to(st.resident_bytes as f64 / MIB, 1),
        cache_budget_mib: round_to(engine.cache_budget_mib(), 0),
        read_mib: round_to(st.read_bytes as f64 / MIB, 1),
        stall_s_tok: round_to(st.stall_s.unwrap_or(0.0) / n, 4),
        mgmt_s_tok: round_to(mgmt_tok, 4),
        majflt_tok: round_to(s.majflt as f64 / n, 2),
        cpu_s_tok: round_to(s.cpu_s / n, 4),
        prefill_cpu_s: round_to(t.prefill_cpu_s, 3),
        prefill_read_mib: round_to(t.prefill_read_bytes as f64 / MIB, 1),
        prefill_io_s: round_to(t.prefill_io_s, 3),
        prefill_stall_s: round_to(t.prefill_stall_s, 3),
        prefill_mgmt_s: round_to(t.prefill_mgmt_s, 3),
        prefill_dev_tokens: dev.tokens,
        prefill_dev_nodes: dev.nodes,
        prefill_dev_read_mib: round_to(dev.read_bytes as f64 / MIB, 1),
        prefill_dev_stall_s: round_to(dev.stall_s, 3),
        token_demand_mib: round_to(st.token_demand_bytes as f64 / MIB, 1),
        mtp_drafted: sp.drafted,
        mtp_accepted: sp.accepted,
        mtp_decodes: sp.decodes,
        mtp_draft_s_tok: round_to(sp.draft_s / n, 4),
        drafted_steps: sp.drafted_steps,
        loop_overhead_s_tok: round_to(t.loop_overhead_s / n, 4),
        reasoning: g.reasoning.clone(),
        text: g.answer.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(input: &str) -> (Vec<Inbound>, u64, bool) {
        let (tx, rx) = channel();
        let abort = AtomicBool::new(false);
        let cancels = Cancels::default();
        read_requests(input.as_bytes(), &tx, &abort, &cancels);
        drop(tx);
        (
            rx.into_iter().collect(),
            cancels.upto.load(Ordering::SeqCst),
            abort.load(Ordering::SeqCst),
        )
    }

    #[test]
    fn reader_numbers_work_and_cancel_covers_what_came_before() {
        let (items, upto, abort) = read_all(
            "{\"cmd\":\"generate\",\"id\":1,\"prompt\":\"a\"}\n\n{\"cmd\":\"generate\",\"id\":2,\"prompt\":\"b\"}\n{\"cmd\":\"cancel\"}\n{\"cmd\":\"generate\",\"id\":3,\"prompt\":\"c\"}\n",
        );
        assert!(abort);
        assert_eq!(upto, 2, "the cancel covers the two requests read before it");
        let seqs: Vec<u64> = items
            .iter()
            .filter_map(|i| match i {
                Inbound::Work { seq, .. } => Some(*seq),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert!(matches!(items.last(), Some(Inbound::Close)), "EOF closes");
    }

    #[test]
    fn reader_reports_bad_lines_with_their_id_and_stops_at_close() {
        let (items, _, abort) = read_all(
            "{\"cmd\":\"explode\",\"id\":7}\nnot json\n{\"cmd\":\"generate\",\"prompt\":\"x\"}\n{\"cmd\":\"close\"}\n{\"cmd\":\"generate\",\"id\":9,\"prompt\":\"never read\"}\n",
        );
        assert!(!abort);
        let errs: Vec<(i64, &str)> = items
            .iter()
            .filter_map(|i| match i {
                Inbound::Invalid { id, msg } => Some((*id, msg.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(errs.len(), 3);
        assert_eq!(errs[0].0, 7);
        assert!(errs[0].1.contains("explode"), "{}", errs[0].1);
        assert_eq!(errs[1].0, 0);
        assert!(errs[2].1.contains("id"), "{}", errs[2].1);
        assert_eq!(items.len(), 4, "nothing after close is read");
        assert!(matches!(items[3], Inbound::Close));
    }

    #[test]
    fn non_utf8_line_is_rejected_not_fatal() {
        let (tx, rx) = channel();
        let abort = AtomicBool::new(false);
        let cancels = Cancels::default();
        read_requests(
            &b"\xff\xfe\n{\"cmd\":\"close\"}\n"[..],
            &tx,
            &abort,
            &cancels,
        );
        drop(tx);
        let items: Vec<Inbound> = rx.into_iter().collect();
        assert!(matches!(&items[0], Inbound::Invalid { msg, .. } if msg.contains("UTF-8")));
    }

    #[test]
    fn cancel_and_close_may_carry_extra_keys() {
        let (_, upto, abort) = read_all(
            "{\"cmd\":\"generate\",\"id\":1,\"prompt\":\"a\"}\n{\"cmd\":\"cancel\",\"id\":1}\n",
        );
        assert!(abort && upto == 1);
        let (items, _, _) = read_all(
            "{\"cmd\":\"close\",\"id\":4}\n{\"cmd\":\"generate\",\"id\":1,\"prompt\":\"a\"}\n",
        );
        assert!(matches!(items.as_slice(), [Inbound::Close]), "{items:?}");
    }

    #[test]
    fn common_prefix_counts_equal_leading_tokens() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2]), 2);
    }
}
