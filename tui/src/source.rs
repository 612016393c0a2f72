//! Where lines come from: a spawned child, stdin, and the terminal itself, each on its own
//! thread feeding one channel, so the event loop blocks in one place.
//!
//! A session (`--session`) is a spawned child whose stdin is kept: [`SessionWriter`] writes the
//! requests; its stdout is the same [`Msg::Line`] stream, decoded by the same
//! [`crate::decode::LineDecoder`].

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Sender;
use std::thread;

use anyhow::{Context, Result};
use bmoe_telemetry::protocol::Request;

/// One message to the event loop.
#[derive(Debug)]
pub enum Msg {
    /// A stdout line of the engine (or of stdin).
    Line(String),
    /// A stderr line of the spawned engine.
    Stderr(String),
    /// The line source ended; the text says how.
    Eof(String),
    /// A terminal event (key, mouse, resize).
    Term(crossterm::event::Event),
    /// Reading the terminal failed.
    TermError(String),
}

/// Reads `reader` line by line (lossy UTF-8, so a bad byte never stops the stream) and sends each
/// line through `wrap`; sends [`Msg::Eof`] with `end` at the end.
pub fn pump<R: Read + Send + 'static>(
    reader: R,
    tx: Sender<Msg>,
    wrap: fn(String) -> Msg,
    end: Option<String>,
    mut tee: Option<File>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut r = BufReader::with_capacity(64 * 1024, reader);
        let mut buf = Vec::with_capacity(4096);
        let mut why = end.clone();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) => break,
                Ok(_) => {
                    if let Some(f) = tee.as_mut() {
                        // A full disk must not stop the panel; the log pane still has the line.
                        let _ = f.write_all(&buf).and_then(|()| f.flush());
                    }
                    while matches!(buf.last(), Some(b'\n' | b'\r')) {
                        buf.pop();
                    }
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if tx.send(wrap(line)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    why = Some(format!("read error: {e}"));
                    break;
                }
            }
        }
        if let Some(w) = why {
            let _ = tx.send(Msg::Eof(w));
        }
    })
}

/// Spawns `cmd` with stdout and stderr piped into the channel (stderr also appended to
/// `log` when given). Stdin is closed: a one-shot run reads none.
pub fn spawn(cmd: &[String], log: Option<&Path>, tx: &Sender<Msg>) -> Result<Child> {
    spawn_with(cmd, log, tx, Stdio::null())
}

/// Spawns an engine session: as [`spawn`], with its stdin kept for requests.
pub fn spawn_session(
    cmd: &[String],
    log: Option<&Path>,
    tx: &Sender<Msg>,
) -> Result<(Child, SessionWriter)> {
    let mut child = spawn_with(cmd, log, tx, Stdio::piped())?;
    let stdin = child.stdin.take();
    Ok((child, SessionWriter { stdin }))
}

/// Writes session requests to the engine's stdin, one JSON line each.
#[derive(Debug)]
pub struct SessionWriter {
    stdin: Option<ChildStdin>,
}

impl SessionWriter {
    /// Writes one request line and flushes it.
    ///
    /// # Errors
    /// The engine closed its stdin (it exited) or the session was closed here.
    pub fn send(&mut self, req: &Request) -> Result<()> {
        let w = self
            .stdin
            .as_mut()
            .context("the session's stdin is closed")?;
        let mut line = req.to_line();
        line.push('\n');
        w.write_all(line.as_bytes())
            .and_then(|()| w.flush())
            .context("cannot write to the engine's stdin (has it exited?)")
    }

    /// Sends `close` and closes stdin (EOF ends the session too, should the write fail).
    pub fn close(&mut self) {
        if self.stdin.is_some() {
            let _ = self.send(&Request::Close);
        }
        self.stdin = None;
    }
}

fn spawn_with(cmd: &[String], log: Option<&Path>, tx: &Sender<Msg>, stdin: Stdio) -> Result<Child> {
    let (prog, args) = cmd
        .split_first()
        .context("no command after `--`\nhint: bmoe-top -- bmoe-cli -m model.gguf --progress …")?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!("failed to start `{prog}`\nhint: check that it is on PATH or give its path")
        })?;
    let tee = match log {
        Some(p) => Some(
            File::create(p)
                .with_context(|| format!("cannot create the stderr log {}", p.display()))?,
        ),
        None => None,
    };
    if let Some(out) = child.stdout.take() {
        pump(
            out,
            tx.clone(),
            Msg::Line,
            Some("stdout closed".into()),
            None,
        );
    }
    if let Some(err) = child.stderr.take() {
        pump(err, tx.clone(), Msg::Stderr, None, tee);
    }
    Ok(child)
}

/// Reads the protocol from stdin.
pub fn stdin(tx: &Sender<Msg>) {
    pump(
        std::io::stdin(),
        tx.clone(),
        Msg::Line,
        Some("stdin closed".into()),
        None,
    );
}

/// Forwards terminal events. crossterm reads `/dev/tty` when stdin is a pipe, so keys work
/// with `bmoe-cli … | bmoe-top` too.
pub fn terminal(tx: &Sender<Msg>) {
    let tx = tx.clone();
    thread::spawn(move || {
        loop {
            let msg = match crossterm::event::read() {
                Ok(ev) => Msg::Term(ev),
                Err(e) => Msg::TermError(e.to_string()),
            };
            let stop = matches!(msg, Msg::TermError(_));
            if tx.send(msg).is_err() || stop {
                return;
            }
        }
    });
}

/// Sends SIGINT to the child: what Ctrl-C would have done had the terminal not been in raw mode.
pub fn interrupt(child: &Child) -> Result<()> {
    signal(child, nix::sys::signal::Signal::SIGINT)
}

/// Sends `sig` to the child.
pub fn signal(child: &Child, sig: nix::sys::signal::Signal) -> Result<()> {
    let pid = i32::try_from(child.id()).context("child pid out of range")?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
        .with_context(|| format!("cannot signal the engine (pid {pid})"))
}
