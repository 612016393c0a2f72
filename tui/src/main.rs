//! `bmoe-top`: the live telemetry panel.
//!
//! ```text
//! bmoe-top -- bmoe-cli -m model.gguf --moe-stream --progress -p "…"   # spawn and watch
//! bmoe-cli … --progress | bmoe-top                                     # read stdin
//! bmoe-top --replay run.csv --speed 10                                 # replay a metrics CSV
//! bmoe-top --session -- bmoe-cli -m model.gguf --session                # chat with a session
//! ```

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture,
};
use crossterm::execute;

use bmoe_top::decode::LineDecoder;
use bmoe_top::keys::{self, Action};
use bmoe_top::model::{Event, RunConfig};
use bmoe_top::source::{self, Msg};
use bmoe_top::state::{App, SourceKind, Speed};
use bmoe_top::theme::{ColorLevel, Theme};
use bmoe_top::{argv, replay, ui};

/// Colour choice.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ColorArg {
    /// From NO_COLOR, TERM and COLORTERM.
    Auto,
    /// 256 colours.
    Always,
    /// The 16 ANSI colours.
    Basic,
    /// No colour.
    Never,
}

/// Live telemetry panel for bmoe runs: attach to an engine, read its protocol from stdin, or
/// replay a recorded metrics CSV.
#[derive(Debug, Parser)]
#[command(
    name = "bmoe-top",
    version,
    after_help = "Keys: q / F10 / Esc quit · space pause · ←/→ step while paused · [ ] seek · +/- speed · t focus · ? / F1 help\nSession keys (--session): Enter send · Esc cancel · F1 (or ? on an empty prompt) help · F10 / Ctrl-D quit"
)]
struct Cli {
    /// Replay a metrics CSV written by `bmoe-cli --csv`.
    #[arg(long, value_name = "CSV", conflicts_with = "command")]
    replay: Option<PathBuf>,
    /// Replay pace: a multiple of recorded time (1, 10, 0.5…) or `max`.
    #[arg(long, default_value = "1", value_parser = Speed::parse)]
    speed: Speed,
    /// Start a replay paused at the first token.
    #[arg(long)]
    paused: bool,
    /// Drive an engine session: the command after `--` is `bmoe-cli … --session`; a prompt line
    /// sends `generate` requests, Esc sends `cancel`.
    #[arg(long, requires = "command", conflicts_with = "replay")]
    session: bool,
    /// Compute threads of the run, when the source does not say (stdin).
    #[arg(long, value_name = "N")]
    threads: Option<u32>,
    /// I/O lanes of the run, when the source does not say (stdin).
    #[arg(long, value_name = "N")]
    io_threads: Option<u32>,
    /// The run used --overlap (stdin; otherwise stated by argv, preamble or `mode:` line).
    #[arg(long)]
    overlap: bool,
    /// Also write the engine's stderr to this file.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Colours.
    #[arg(long, value_enum, default_value = "auto")]
    color: ColorArg,
    /// Frame-rate cap; the panel redraws only on change and at most this often.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=60))]
    fps: u32,
    /// The engine command to spawn, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// What the panel says when it added `--progress` to the engine's command line.
const PROGRESS_ADDED: &str = "added --progress to the bmoe-cli command line: without it the \
                              engine prints no per-token lines, only the end-of-run summary";

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn base_config(cli: &Cli) -> RunConfig {
    let mut c = RunConfig::default();
    if let Some(t) = cli.threads {
        c.set("threads", t.to_string());
    }
    if let Some(t) = cli.io_threads {
        c.set("io_threads", t.to_string());
    }
    if cli.overlap {
        c.set("overlap", "1");
    }
    c
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    if cli.session && !cli.command.iter().any(|a| a == "--session") {
        bail!(
            "--session drives an engine session, but the command after `--` has no `--session` flag\nhint: bmoe-top --session -- bmoe-cli -m model.gguf --session"
        );
    }
    // Said before the stdout check: with neither a source nor a pipe, how to give one is what
    // the user needs first.
    if cli.replay.is_none() && cli.command.is_empty() && std::io::stdin().is_terminal() {
        bail!(
            "nothing to show: no --replay file, no command after `--`, and stdin is a terminal\n\
             hint: give bmoe-top one of three sources:\n\
             \x20 bmoe-top --replay run.csv                   replay a recorded metrics CSV\n\
             \x20 bmoe-top -- bmoe-cli -m model.gguf -p …     spawn the engine and watch it\n\
             \x20 bmoe-cli … --progress | bmoe-top            read the engine's protocol from a pipe"
        );
    }
    // A replay file is read before anything touches the terminal, so a wrong path or a file
    // that is not a metrics CSV is reported as such even when stdout is not a terminal.
    let replay_events = match &cli.replay {
        Some(path) => Some(replay::load(path)?),
        None => None,
    };
    if !std::io::stdout().is_terminal() {
        bail!(
            "stdout is not a terminal: bmoe-top draws a full-screen panel\nhint: run it in a terminal; to keep the engine's lines, use `bmoe-cli … --progress | tee run.log | bmoe-top`"
        );
    }
    let level = match cli.color {
        ColorArg::Auto => ColorLevel::from_env(),
        ColorArg::Always => ColorLevel::Full,
        ColorArg::Basic => ColorLevel::Basic,
        ColorArg::Never => ColorLevel::None,
    };
    let theme = Theme::new(level);
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut child: Option<Child> = None;
    let mut writer: Option<source::SessionWriter> = None;
    let mut app = if let (Some(path), Some(events)) = (&cli.replay, replay_events) {
        let label = format!(
            "replay {}",
            path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            )
        );
        let mut app = App::new(SourceKind::Replay, label, base_config(&cli));
        for e in events {
            app.push(e);
        }
        app.speed = cli.speed;
        app.paused = cli.paused;
        // The preamble (everything before the first token) is shown at once.
        app.seek_tokens(0);
        app
    } else if !cli.command.is_empty() {
        let mut base = base_config(&cli);
        base.merge(&argv::facts(&cli.command));
        // A one-shot bmoe-cli without --progress prints no per-token lines: the panel adds the
        // flag rather than guess per-token figures from the end-of-run summary, and says so
        // (here, on the terminal left behind when the panel quits, and in the run's log).
        let added = if cli.session {
            None
        } else {
            argv::with_progress(&cli.command)
        };
        let command = added.as_ref().unwrap_or(&cli.command);
        if added.is_some() {
            eprintln!("bmoe-top: {PROGRESS_ADDED}");
        }
        let (c, kind) = if cli.session {
            let (c, w) = source::spawn_session(command, cli.log.as_deref(), &tx)?;
            writer = Some(w);
            (c, SourceKind::Session)
        } else {
            let c = source::spawn(command, cli.log.as_deref(), &tx)?;
            (c, SourceKind::Spawn)
        };
        // The argv's facts go to the run label and the details pane; the header names the program.
        let prog = cli.command[0].rsplit('/').next().unwrap_or(&cli.command[0]);
        let label = format!(
            "{}{} (pid {}{})",
            if cli.session { "session " } else { "" },
            bmoe_top::clean::clean(prog, false),
            c.id(),
            if added.is_some() {
                ", --progress added"
            } else {
                ""
            }
        );
        let mut app = App::new(kind, label, base);
        if added.is_some() {
            app.push(Event::Log(format!("bmoe-top: {PROGRESS_ADDED}")));
        }
        child = Some(c);
        app.child_alive = true;
        app
    } else {
        source::stdin(&tx);
        App::new(SourceKind::Stdin, "stdin", base_config(&cli))
    };

    // SIGTERM/SIGHUP end the panel cleanly (terminal restored, engine stopped); SIGINT from
    // outside is forwarded like Ctrl-C. The flags are polled by the event loop.
    let signals = Signals::default();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&signals.stop))
            .context("cannot install the SIGTERM/SIGHUP handler")?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&signals.interrupt))
        .context("cannot install the SIGINT handler")?;

    let mut terminal = ratatui::init();
    let _ = execute!(std::io::stdout(), EnableMouseCapture);
    if app.kind == SourceKind::Session {
        // A pasted prompt arrives whole, so its newlines do not send it line by line.
        let _ = execute!(std::io::stdout(), EnableBracketedPaste);
    }
    source::terminal(&tx);
    let csv = if cli.command.is_empty() || cli.session {
        None
    } else {
        replay::csv_of_argv(&cli.command)
    };
    let mut ends = Ends {
        child: &mut child,
        writer: &mut writer,
        csv,
    };
    let result = event_loop(
        &mut terminal,
        &mut app,
        &theme,
        &rx,
        &mut ends,
        cli.fps,
        &signals,
    );
    let _ = execute!(
        std::io::stdout(),
        DisableMouseCapture,
        DisableBracketedPaste
    );
    ratatui::restore();
    if let Some(w) = writer.as_mut() {
        // A session ends the way the contract says: `close` (and EOF); the engine gets a moment
        // to exit on its own before the signals.
        w.close();
        if let Some(c) = child.as_mut() {
            wait_exit(c, Duration::from_millis(1500));
        }
    }
    if let Some(c) = child.as_mut() {
        stop_child(c);
    }
    result
}

/// The spawned engine and, in session mode, its request writer.
struct Ends<'a> {
    child: &'a mut Option<Child>,
    writer: &'a mut Option<source::SessionWriter>,
    /// The spawned engine's `--csv` file: its trailer completes the routing-edit ledger
    /// (substitution has no stdout line) once the engine has exited.
    csv: Option<PathBuf>,
}

/// Waits up to `limit` for the child to exit; true when it did.
fn wait_exit(c: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if matches!(c.try_wait(), Ok(Some(_))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Signal flags set by handlers, read by the event loop.
#[derive(Default)]
struct Signals {
    stop: Arc<AtomicBool>,
    interrupt: Arc<AtomicBool>,
}

fn stop_child(c: &mut Child) {
    if matches!(c.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = source::interrupt(c);
    if wait_exit(c, Duration::from_millis(1500)) {
        return;
    }
    let _ = c.kill();
    let _ = c.wait();
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    app: &mut App,
    theme: &Theme,
    rx: &mpsc::Receiver<Msg>,
    ends: &mut Ends<'_>,
    fps: u32,
    signals: &Signals,
) -> Result<()> {
    let frame = Duration::from_secs_f64(1.0 / f64::from(fps));
    let mut decoder = LineDecoder::new();
    let mut last_draw: Option<Instant> = None;
    let mut next_due = Instant::now();
    let mut stdout_done = false;
    loop {
        // Replay clock: show every token whose time has come.
        if app.kind == SourceKind::Replay && !app.paused {
            let budget = Instant::now() + Duration::from_millis(8);
            while let Some(next) = app.next_token() {
                let now = Instant::now();
                if now < next_due || now > budget {
                    break;
                }
                let delay = app.speed.delay(next);
                app.step_forward();
                // Catch up after a pause or a slow frame, but never run ahead of the clock.
                next_due = (next_due + delay)
                    .max(now.checked_sub(Duration::from_millis(250)).unwrap_or(now));
            }
            if app.next_token().is_none() && !app.at_end() {
                app.seek_tokens(usize::MAX);
            }
        } else {
            next_due = Instant::now();
        }

        let now = Instant::now();
        let can_draw = last_draw.is_none_or(|t| now >= t + frame);
        if app.dirty && can_draw {
            terminal
                .draw(|f| ui::draw(f, app, theme))
                .context("cannot draw to the terminal")?;
            app.dirty = false;
            last_draw = Some(now);
        }
        if app.quit || signals.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        if signals.interrupt.swap(false, Ordering::Relaxed) {
            interrupt_or_quit(app, ends)?;
        }

        // Wake at least every 250 ms so a signal is acted on promptly.
        let mut wait = Duration::from_millis(250);
        if app.dirty {
            wait = wait.min(last_draw.map_or(Duration::ZERO, |t| {
                (t + frame).saturating_duration_since(now)
            }));
        }
        if app.kind == SourceKind::Replay && !app.paused && app.next_token().is_some() {
            wait = wait.min(next_due.saturating_duration_since(now));
        }
        let first = match rx.recv_timeout(wait) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        let mut batch = 0;
        let mut msg = first;
        while let Some(m) = msg {
            handle(m, app, &mut decoder, ends, &mut stdout_done)?;
            batch += 1;
            msg = if batch < 4096 {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        if stdout_done
            && let Some(c) = ends.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            app.child_alive = false;
            // The engine wrote its CSV trailer before exiting: the substituted share (and a
            // dropped share the `moe-drop:` line did not give) comes from it.
            if let (Some(csv), Some(s)) = (ends.csv.as_deref(), app.run.summary.as_ref()) {
                let mut s = s.clone();
                if replay::fold_csv_ledger(&mut s, csv) {
                    app.push(Event::Summary(Box::new(s)));
                }
            }
            app.push(Event::Ended(format!("engine {status}")));
            *ends.child = None;
            *ends.writer = None;
        }
    }
}

fn handle(
    msg: Msg,
    app: &mut App,
    decoder: &mut LineDecoder,
    ends: &mut Ends<'_>,
    stdout_done: &mut bool,
) -> Result<()> {
    match msg {
        Msg::Line(l) => {
            for e in decoder.feed(&l) {
                app.push(e);
            }
        }
        Msg::Stderr(l) => {
            // The engine's own statement of its lanes and overlap outranks the argv's.
            if let Some(c) = bmoe_top::decode::stderr_facts(&l) {
                app.push(Event::Config(c));
            }
            app.push(Event::Log(l));
        }
        Msg::Eof(why) => {
            for e in decoder.finish() {
                app.push(e);
            }
            *stdout_done = true;
            if ends.child.is_none() {
                app.push(Event::Ended(why));
            }
        }
        Msg::Term(crossterm::event::Event::Paste(text)) if app.kind == SourceKind::Session => {
            keys::paste(app, &text);
        }
        Msg::Term(ev) => {
            let action = if app.kind == SourceKind::Session {
                keys::map_session(&ev, app.help, app.composer.input.is_empty())
            } else {
                keys::map(&ev)
            };
            match action {
                Some(Action::Interrupt) => interrupt_or_quit(app, ends)?,
                Some(Action::Send) => {
                    if let Some(req) = app.submit() {
                        send(app, ends, &req);
                    }
                }
                Some(Action::Cancel) => {
                    if let Some(req) = app.cancel() {
                        send(app, ends, &req);
                    }
                }
                Some(a) => keys::apply(app, a),
                None => {}
            }
        }
        Msg::TermError(e) => bail!("cannot read the terminal: {e}"),
    }
    Ok(())
}

/// Writes a session request; a failed write is shown, never fatal (the engine's exit status will
/// follow).
fn send(app: &mut App, ends: &mut Ends<'_>, req: &bmoe_telemetry::protocol::Request) {
    let result = match ends.writer.as_mut() {
        Some(w) => w.send(req),
        None => Err(anyhow::anyhow!("the session's stdin is closed")),
    };
    if let Err(e) = result {
        app.push(Event::Log(format!("request not sent: {e:#}")));
        app.composer.notice = Some(format!("not sent: {e}"));
    }
}

/// Ctrl-C / SIGINT: the first one goes to a running engine; without one (or the second time) the
/// panel quits. In a session it cancels the generation in flight instead, and quits when there
/// is none.
fn interrupt_or_quit(app: &mut App, ends: &mut Ends<'_>) -> Result<()> {
    if app.kind == SourceKind::Session {
        let s = &app.run.session;
        if app.child_alive && s.in_flight().is_some() && !s.cancel_pending {
            if let Some(req) = app.cancel() {
                send(app, ends, &req);
            }
        } else {
            app.quit = true;
        }
        return Ok(());
    }
    match ends.child.as_ref() {
        Some(c) if app.child_alive && !app.interrupted => {
            source::interrupt(c)?;
            app.interrupted = true;
            app.dirty = true;
        }
        _ => app.quit = true,
    }
    Ok(())
}
