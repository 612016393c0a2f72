//! Session-mode runs: the engine is driven one turn at a time, as a chat front end drives it.
//!
//! Each `generate` (or `decide`) request is written to the engine's stdin only after the previous
//! one was answered (`BMOE_DONE` / `BMOE_DECIDE` / `BMOE_ERROR` with its id), so a turn's timing
//! never includes a queue of requests it did not ask for, and every turn gets its own record.
//! The engine's stdout is copied line by line into `stdout.txt` while it is read.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bmoe_telemetry::protocol::{LineKind, Record, Request, parse_line};
use serde::{Deserialize, Serialize};

/// One turn of a session run (a `generate` or `decide` request and its answer).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnRecord {
    /// 1-based position of the request among the run's answered requests.
    pub turn: u32,
    /// Request id.
    pub id: i64,
    /// `generate` or `decide`.
    pub cmd: String,
    /// `done`, `cancelled`, `error` (the engine refused it), or `missing` (no answer: the engine
    /// exited or was killed first).
    pub status: String,
    /// Whether the request started a new chat (`clear_kv`).
    pub clear_kv: Option<bool>,
    /// Tokens generated.
    pub tokens: Option<u64>,
    /// Decode rate (`BMOE_DONE.tok_s`).
    pub tok_s: Option<f64>,
    /// Prompt prefill time, s.
    pub prefill_s: Option<f64>,
    /// Tokens prefilled this turn (the suffix after a reused KV prefix).
    pub n_prompt: Option<u64>,
    /// Context length after the turn.
    pub n_past: Option<u64>,
    /// Cumulative cache hit rate, percent.
    pub cache_hit_pct: Option<f64>,
    /// Flash read this turn, MiB.
    pub read_mib: Option<f64>,
    /// From writing the request to reading its answer, s: what a user waits, prefill included.
    pub wall_s: f64,
    /// The engine's message, for `error`.
    pub error: Option<String>,
}

/// What the stdout reader hands the driver.
enum Reply {
    /// An answer to request `id`.
    Answer(i64, Box<TurnRecord>),
    /// A fatal `BMOE_ERROR` without a request of its own: nothing more will be answered.
    Fatal(String),
}

/// A `BMOE_*` answer line as a turn record (fields the driver knows are filled in later).
fn answer(rec: Record) -> Option<Reply> {
    let fin = |x: f64| x.is_finite().then_some(x);
    let sampled = |x: f64| fin(x).filter(|v| *v >= 0.0);
    match rec {
        Record::Done(d) => Some(Reply::Answer(
            d.id,
            Box::new(TurnRecord {
                status: if d.cancelled { "cancelled" } else { "done" }.into(),
                tokens: Some(d.tokens),
                tok_s: fin(d.tok_s),
                prefill_s: sampled(d.prefill_s),
                n_prompt: Some(d.n_prompt),
                n_past: Some(d.n_past),
                cache_hit_pct: sampled(d.cache_hit_pct),
                read_mib: sampled(d.read_mib),
                ..TurnRecord::default()
            }),
        )),
        Record::Decide(d) => Some(Reply::Answer(
            d.id,
            Box::new(TurnRecord {
                status: if d.cancelled { "cancelled" } else { "done" }.into(),
                prefill_s: sampled(d.prefill_s),
                n_prompt: Some(d.n_prefilled),
                ..TurnRecord::default()
            }),
        )),
        Record::Error(e) => {
            let rec = TurnRecord {
                status: "error".into(),
                error: Some(e.msg.clone()),
                ..TurnRecord::default()
            };
            if e.fatal {
                // A fatal error ends the process: whatever it names, nothing else comes.
                Some(Reply::Fatal(e.msg))
            } else {
                Some(Reply::Answer(e.id, Box::new(rec)))
            }
        }
        _ => None,
    }
}

/// Copies the engine's stdout into `tee` line by line (flushed, so a killed run keeps what it
/// printed) and passes its answers on.
fn read_stdout<R: Read + Send + 'static>(
    out: R,
    mut tee: File,
    tx: mpsc::Sender<Reply>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let _ = tee.write_all(&buf).and_then(|()| tee.flush());
                    let line = String::from_utf8_lossy(&buf);
                    if let LineKind::Record(rec) = parse_line(line.trim_end())
                        && let Some(reply) = answer(rec)
                    {
                        // The driver may be gone (all turns answered): keep copying.
                        let _ = tx.send(reply);
                    }
                }
            }
        }
    })
}

/// A running session: join it after the engine exited to get the turns.
pub struct Driver {
    handle: JoinHandle<Vec<TurnRecord>>,
    reader: JoinHandle<()>,
}

impl Driver {
    /// The turns, once the engine has exited (its stdout closed).
    pub fn finish(self) -> Vec<TurnRecord> {
        let turns = self.handle.join().unwrap_or_default();
        let _ = self.reader.join();
        turns
    }
}

/// Starts driving a session: `requests` (one JSON request per line) go to `stdin` one turn at a
/// time; stdout is copied into `tee`. After the last answer stdin is closed, which ends the
/// session (`close`).
pub fn drive<W, R>(stdin: W, stdout: R, tee: File, requests: &str) -> Driver
where
    W: Write + Send + 'static,
    R: Read + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let reader = read_stdout(stdout, tee, tx);
    let requests: Vec<String> = requests
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let handle = thread::spawn(move || run_turns(stdin, &rx, &requests));
    Driver { handle, reader }
}

fn run_turns<W: Write>(mut stdin: W, rx: &Receiver<Reply>, requests: &[String]) -> Vec<TurnRecord> {
    let mut turns = Vec::new();
    let mut gone = false;
    for line in requests {
        // Checked when the manifest was expanded; a line that does not parse is sent anyway
        // (the engine answers it with BMOE_ERROR) but not waited for.
        let (id, cmd, clear_kv) = match Request::parse(line) {
            Ok(Request::Generate(g)) => (Some(g.id), "generate", Some(g.clear_kv())),
            Ok(Request::Decide(d)) => (Some(d.id), "decide", None),
            Ok(Request::Cancel) => (None, "cancel", None),
            Ok(Request::Close) => (None, "close", None),
            Err(_) => (None, "invalid", None),
        };
        let mut turn = TurnRecord {
            turn: turns.len() as u32 + 1,
            id: id.unwrap_or(0),
            cmd: cmd.into(),
            clear_kv,
            status: "missing".into(),
            ..TurnRecord::default()
        };
        let started = Instant::now();
        if !gone {
            gone = stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.write_all(b"\n"))
                .and_then(|()| stdin.flush())
                .is_err();
        }
        let Some(id) = id else { continue };
        while !gone {
            // The engine's own timeout is the runner's; this only keeps the thread responsive.
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(Reply::Answer(got, rec)) if got == id => {
                    turn = TurnRecord {
                        turn: turn.turn,
                        id,
                        cmd: turn.cmd,
                        clear_kv: turn.clear_kv,
                        wall_s: started.elapsed().as_secs_f64(),
                        ..*rec
                    };
                    break;
                }
                Ok(Reply::Answer(..)) => {}
                Ok(Reply::Fatal(msg)) => {
                    turn.error = Some(format!("fatal engine error: {msg}"));
                    gone = true;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => gone = true,
            }
        }
        turns.push(turn);
    }
    // EOF on stdin ends the session.
    drop(stdin);
    turns
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmoe_telemetry::protocol::{Done, ErrorRecord};

    #[test]
    fn answers_become_turn_records() {
        let Some(Reply::Answer(3, r)) = answer(Record::Done(Box::new(Done {
            id: 3,
            cancelled: true,
            tokens: 7,
            tok_s: 12.5,
            prefill_s: 0.25,
            n_prompt: 9,
            n_past: 30,
            cache_hit_pct: -1.0,
            ..Done::default()
        }))) else {
            panic!("not an answer")
        };
        assert_eq!(r.status, "cancelled");
        assert_eq!(
            (r.tokens, r.n_prompt, r.n_past),
            (Some(7), Some(9), Some(30))
        );
        assert_eq!(r.cache_hit_pct, None, "-1 = no cache");
        let Some(Reply::Fatal(m)) = answer(Record::Error(ErrorRecord {
            id: 0,
            fatal: true,
            msg: "out of memory".into(),
        })) else {
            panic!("not fatal")
        };
        assert_eq!(m, "out of memory");
    }
}
