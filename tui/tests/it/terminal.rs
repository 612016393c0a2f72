//! End-to-end: the real `bmoe-top` binary in a real terminal (tmux), driven by keys, read back
//! with `capture-pane`. Skips with a printed reason when tmux is absent.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
use bmoe_telemetry::protocol::Progress;

static N: AtomicUsize = AtomicUsize::new(0);

/// One tmux server of its own (own socket, no user config), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(cmd: &str, w: u16, h: u16) -> Option<Tmux> {
        Tmux::start_env(cmd, w, h, &[("TERM", "xterm-256color")])
    }

    fn start_env(cmd: &str, w: u16, h: u16, env: &[(&str, &str)]) -> Option<Tmux> {
        if !Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            eprintln!("skipping: tmux is not installed (scripts/install-deps.sh installs it)");
            return None;
        }
        let socket = format!(
            "bmoe-top-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        // Keep the pane after the program exits so its exit code can be read. The environment
        // is set inside the pane: tmux gives panes its own TERM otherwise.
        let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let wrapped = format!("env {} {cmd}; echo EXIT=$?; sleep 60", vars.join(" "));
        let ok = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
            ])
            .args(["-x", &w.to_string(), "-y", &h.to_string()])
            .args(["sh", "-c", &wrapped])
            .env_remove("NO_COLOR")
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        Some(Tmux { socket })
    }

    fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane with its colour escapes (`capture-pane -e`).
    fn capture_escapes(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-e", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            let ok = Command::new("tmux")
                .args(["-L", &self.socket, "send-keys", "-t", "t", k])
                .status()
                .unwrap()
                .success();
            assert!(ok, "send-keys {k}");
        }
    }

    /// Waits (up to 15 s) until the screen satisfies `pred`; returns the screen.
    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        self.wait_long(what, 15, pred)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // kill-server leaves the socket file behind: ask for its path first, then remove it.
        let path = Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "display-message",
                "-p",
                "#{socket_path}",
            ])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|p| !p.is_empty());
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
        if let Some(p) = path {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_bmoe-top")
}

fn write_csv(dir: &Path, rows: u64) -> PathBuf {
    let path = dir.join("run.csv");
    let info = RunInfo {
        version: Some(2),
        engine: Some("test".into()),
        model: Some("Qwen3-30B-A3B-Q4_K_M.gguf".into()),
        n_expert_used: Some(8),
        threads: Some(4),
        moe_stream: Some(true),
        cache_mb: Some(3000),
        io_threads: Some(4),
        overlap: Some(true),
        dense_weights: Some("anon".into()),
        temp: Some(0.0),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(&path, &info).unwrap();
    for i in 1..=rows {
        w.write_row(&TokenRow {
            step: Some(i),
            steps: Some(rows),
            wall_ms: Some(50.0),
            io_ms: Some(80.0),
            stall_ms: Some(10.0),
            mgmt_ms: Some(2.0),
            cpu_ms: Some(120.0),
            read_bytes: Some(50 << 20),
            cache_hit_pct: Some(60.0),
            majflt: Some(0),
            loop_overhead_ms: Some(0.0),
            ..TokenRow::default()
        })
        .unwrap();
    }
    let mut t = SummaryTrailer::new();
    t.push("tokens", rows.to_string());
    t.push("tok/s", "20.000");
    t.push("s/tok", "0.050");
    w.write_summary(&t).unwrap();
    path
}

#[test]
fn replay_in_a_real_terminal_pauses_steps_seeks_and_quits() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path(), 100);
    let cmd = format!("{} --replay {} --paused", bin(), csv.display());
    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    let s = t.wait_for("paused start", |s| {
        s.contains("token 0/100") && s.contains("paused")
    });
    assert!(s.contains("paused"), "{s}");
    assert!(s.contains("Qwen3-30B-A3B-Q4_K_M"), "{s}");
    t.keys(&["Right", "Right", "Right"]);
    let s = t.wait_for("three steps", |s| s.contains("token 3/100"));
    // 4 compute threads: compute bar 120/4 = 30 ms; overlap -> flash wait is the 10 ms stall
    assert!(s.contains("30 ms cpu÷4"), "{s}");
    assert!(s.contains("10 ms stall, overlap"), "{s}");
    t.keys(&["Left"]);
    t.wait_for("one step back", |s| s.contains("token 2/100"));
    t.keys(&["?"]);
    t.wait_for("help", |s| s.contains("pause / resume"));
    t.keys(&["?"]);
    t.wait_for("help closed", |s| !s.contains("pause / resume"));
    t.keys(&["+", "+"]);
    t.wait_for("speed 4× ladder step", |s| s.contains("5× token 2/100"));
    t.keys(&["Space"]);
    let s = t.wait_for("end of replay", |s| s.contains("token 100/100"));
    let s = if s.contains("done (# summary)") {
        s
    } else {
        t.wait_for("summary", |s| s.contains("done (# summary)"))
    };
    assert!(s.contains("avg"), "{s}");
    t.keys(&["t"]);
    t.wait_for("details pane", |s| {
        s.contains("reading as: overlap (stated)")
    });
    t.keys(&["q"]);
    t.wait_for("clean exit", |s| s.contains("EXIT=0"));
}

#[test]
fn without_a_source_the_three_ways_are_listed_one_per_line() {
    // stdin and stdout are the pane's terminal: no pipe, no --replay, no command.
    let Some(t) = Tmux::start(bin(), 100, 24) else {
        return;
    };
    let s = t.wait_for("exit with the hint", |s| s.contains("EXIT=1"));
    let lines: Vec<&str> = s.lines().map(str::trim_end).collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{s}"))
    };
    let hint = at("hint: give bmoe-top one of three sources:");
    let replay = at("  bmoe-top --replay run.csv ");
    let spawn = at("  bmoe-top -- bmoe-cli ");
    let pipe = at("  bmoe-cli … --progress | bmoe-top ");
    assert_eq!(
        (replay, spawn, pipe),
        (hint + 1, hint + 2, hint + 3),
        "one way per line, under the hint:\n{s}"
    );
    // Not one line that reads as a shell pipeline of three programs.
    assert!(
        !lines.iter().any(|l| l.contains("run.csv | bmoe-top")),
        "{s}"
    );
}

fn progress_line(i: u64, n: u64, text: &str) -> String {
    Progress {
        step: i,
        steps: n,
        wall_ms: 100.0,
        io_ms: 40.0,
        compute_ms: 50.0,
        mgmt_ms: 10.0,
        read_mb: 20.0,
        cache_hit_pct: 70.0,
        cpu_ms: 300.0,
        delta_text: text.into(),
        ..Progress::default()
    }
    .to_line()
}

#[test]
fn spawned_child_streams_and_ctrl_c_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let lines = dir.path().join("lines.txt");
    let body: Vec<String> = (1..=5)
        .map(|i| progress_line(i, 5, &format!("w{i} ")))
        .collect();
    std::fs::write(&lines, body.join("\n") + "\n").unwrap();
    // A real child: prints protocol lines, then waits until SIGINT, which it reports on stderr
    // and answers with exit code 7.
    let script = dir.path().join("engine.sh");
    std::fs::write(
        &script,
        format!(
            "trap 'echo got SIGINT >&2; exit 7' INT\ncat {}\necho 'engine log line' >&2\nwhile :; do sleep 0.05; done\n",
            lines.display()
        ),
    )
    .unwrap();
    let cmd = format!("{} -- sh {}", bin(), script.display());
    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    let s = t.wait_for("streamed tokens", |s| s.contains("token 5/5"));
    assert!(s.contains("w1 w2 w3 w4 w5"), "{s}");
    t.keys(&["C-c"]);
    let s = t.wait_for("child exit", |s| s.contains("exit status: 7"));
    assert!(!s.contains("EXIT="), "bmoe-top must outlive its child: {s}");
    t.keys(&["t"]);
    t.wait_for("stderr in the log pane", |s| s.contains("got SIGINT"));
    t.keys(&["q"]);
    t.wait_for("clean exit", |s| s.contains("EXIT=0"));
}

#[test]
fn stdin_source_with_malformed_lines() {
    let dir = tempfile::tempdir().unwrap();
    let lines = dir.path().join("lines.txt");
    // Token 2 carries a form feed and an escape sequence, as a tiny random model really emits:
    // drawn as control pictures, they must not clear or move anything on the real terminal.
    let mut body: Vec<String> = (1..=4)
        .map(|i| progress_line(i, 4, if i == 2 { "f\u{c}e\u{1b}[2J " } else { "x " }))
        .collect();
    body.insert(2, "BMOE_PROGRESS {broken".into());
    std::fs::write(&lines, body.join("\n") + "\n").unwrap();
    let cmd = format!("cat {} | {} --threads 2", lines.display(), bin());
    let Some(t) = Tmux::start(&cmd, 100, 30) else {
        return;
    };
    let s = t.wait_for("stdin end", |s| s.contains("stdin closed"));
    assert!(s.contains("token 4/4"), "{s}");
    assert!(s.contains("1 malformed ignored (line 3"), "{s}");
    // --threads 2: compute = 300 / 2 = 150 ms
    assert!(s.contains("150 ms cpu÷2"), "{s}");
    assert!(s.contains("x f\u{240c}e\u{241b}[2J x x"), "{s}");
    // the layout survived: title on the first row, status on the last
    let rows: Vec<&str> = s.lines().collect();
    assert!(rows[0].contains("bmoe-top"), "{s}");
    assert!(rows[29].contains("malformed"), "{s}");
    t.keys(&["q"]);
    t.wait_for("clean exit", |s| s.contains("EXIT=0"));
}

#[test]
fn resizing_the_terminal_switches_layout() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path(), 10);
    let cmd = format!("{} --replay {} --paused", bin(), csv.display());
    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    let s = t.wait_for("narrow layout", |s| s.contains("┌ answer"));
    assert!(s.lines().any(|l| l.starts_with("┌ answer")), "{s}");
    assert!(!s.contains("┌ run"), "{s}");
    let ok = Command::new("tmux")
        .args([
            "-L",
            &t.socket,
            "resize-window",
            "-t",
            "t",
            "-x",
            "200",
            "-y",
            "60",
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok, "tmux resize-window");
    // wide: run details on the left, the answer in its own column on the right
    let s = t.wait_for("wide layout", |s| s.contains("┌ run"));
    let answer_row = s.lines().find(|l| l.contains("┌ answer")).unwrap();
    let col = answer_row[..answer_row.find("┌ answer").unwrap()]
        .chars()
        .count();
    assert!(col >= 84, "answer column starts at {col}: {s}");
    assert_eq!(s.lines().count(), 60, "{s}");
    t.keys(&["q"]);
    t.wait_for("clean exit", |s| s.contains("EXIT=0"));
}

/// The pid of bmoe-top under the pane's shell.
fn panel_pid(t: &Tmux) -> String {
    let out = Command::new("tmux")
        .args([
            "-L",
            &t.socket,
            "list-panes",
            "-t",
            "t",
            "-F",
            "#{pane_pid}",
        ])
        .output()
        .unwrap();
    let pane = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("pgrep")
            .args(["-P", &pane, "-x", "bmoe-top"])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !pid.is_empty() {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "bmoe-top not found under pane {pane}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn signals_from_outside_forward_sigint_and_end_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("engine.sh");
    std::fs::write(
        &script,
        format!(
            "trap 'echo got SIGINT >&2; exit 7' INT\necho '{}'\nwhile :; do sleep 0.05; done\n",
            progress_line(1, 9, "hi ")
        ),
    )
    .unwrap();
    let cmd = format!("{} -- sh {}", bin(), script.display());
    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    t.wait_for("first token", |s| s.contains("token 1/9"));
    let pid = panel_pid(&t);
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    t.wait_for("SIGINT forwarded to the engine", |s| {
        s.contains("exit status: 7")
    });
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // the panel left the alternate screen: the shell's own output is visible again
    let s = t.wait_for("clean exit on SIGTERM", |s| s.contains("EXIT=0"));
    assert!(!s.contains("token 1/9"), "{s}");
}

/// Foreground/background colour parameters in the SGR sequences of a captured pane.
fn colour_params(escaped: &str) -> Vec<String> {
    let mut out = Vec::new();
    for seq in escaped.split("\u{1b}[").skip(1) {
        let Some(end) = seq.find('m') else { continue };
        let params: Vec<&str> = seq[..end].split(';').collect();
        let mut i = 0;
        while i < params.len() {
            let p = params[i];
            if p == "38" || p == "48" {
                out.push(params[i..params.len().min(i + 3)].join(";"));
                i += 3;
                continue;
            }
            if let Ok(n) = p.parse::<u32>()
                && ((30..=37).contains(&n)
                    || (40..=47).contains(&n)
                    || (90..=97).contains(&n)
                    || (100..=107).contains(&n))
            {
                out.push(p.to_string());
            }
            i += 1;
        }
    }
    out
}

#[test]
fn colours_degrade_in_a_real_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path(), 10);
    let cmd = format!("{} --replay {} --paused", bin(), csv.display());
    let mut seen = Vec::new();
    for env in [
        vec![("TERM", "xterm-256color")],
        vec![("TERM", "xterm")],
        vec![("TERM", "xterm-256color"), ("NO_COLOR", "1")],
    ] {
        let Some(t) = Tmux::start_env(&cmd, 80, 24, &env) else {
            return;
        };
        t.wait_for("first frame", |s| s.contains("token 0/10"));
        seen.push(colour_params(&t.capture_escapes()));
        t.keys(&["q"]);
        t.wait_for("clean exit", |s| s.contains("EXIT=0"));
    }
    // crossterm writes the 16 ANSI colours as palette indices 0-15 (`38;5;6`): a 16-colour
    // terminal gets only those; a 256-colour one gets indices above 15 too.
    let index = |p: &String| p.rsplit(';').next().and_then(|n| n.parse::<u32>().ok());
    let is_extended = |p: &String| p.starts_with("38;5;") || p.starts_with("48;5;");
    let [full, basic, none] = [&seen[0], &seen[1], &seen[2]];
    assert!(
        full.iter()
            .any(|p| is_extended(p) && index(p).is_some_and(|n| n > 15)),
        "256 colours: {full:?}"
    );
    assert!(!basic.is_empty(), "16 colours: none at all");
    assert!(
        basic
            .iter()
            .all(|p| !is_extended(p) || index(p).is_some_and(|n| n <= 15)),
        "16 colours: {basic:?}"
    );
    assert!(
        basic
            .iter()
            .all(|p| !p.starts_with("38;2;") && !p.starts_with("48;2;"))
    );
    assert!(none.is_empty(), "NO_COLOR: {none:?}");
}

#[test]
fn quitting_stops_a_running_engine() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("stopped");
    let script = dir.path().join("engine.sh");
    std::fs::write(
        &script,
        format!(
            "trap 'touch {}; exit 7' INT\necho '{}'\nwhile :; do sleep 0.05; done\n",
            marker.display(),
            progress_line(1, 9, "hi ")
        ),
    )
    .unwrap();
    let cmd = format!("{} -- sh {}", bin(), script.display());
    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    t.wait_for("first token", |s| s.contains("token 1/9"));
    t.keys(&["q"]);
    t.wait_for("clean exit", |s| s.contains("EXIT=0"));
    assert!(marker.exists(), "the engine was not interrupted on quit");
}

/// The real engine for the session test: `$BMOE_CLI`, next to `bmoe-top` (one target directory,
/// as in CI), or on `PATH`.
fn engine_cli() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("BMOE_CLI") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(dir) = Path::new(bin()).parent() {
        candidates.push(dir.join("bmoe-cli"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("bmoe-cli")));
    }
    candidates.into_iter().find(|p| p.is_file())
}

impl Tmux {
    /// Waits (up to `secs`) until the screen satisfies `pred`; returns the screen.
    fn wait_long(&self, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut matched = None;
        loop {
            let s = self.capture();
            // A capture can land mid-frame (tmux reads the panel's output in chunks): accept a
            // screen only when it satisfies `pred` and is unchanged a moment later.
            let late = Instant::now() >= deadline;
            if pred(&s) {
                std::thread::sleep(Duration::from_millis(40));
                if self.capture() == s {
                    return s;
                }
                matched = Some(s);
            } else {
                assert!(
                    !late,
                    "timed out ({secs} s) waiting for {what}; screen:\n{s}"
                );
            }
            if late && let Some(m) = matched {
                // a screen that keeps changing (tokens streaming on a slow machine) may never
                // look still twice: the last match is the best there is, and the caller's
                // asserts print it if it was caught mid-frame
                return m;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (up to `secs`) until one capture satisfies `pred`, still or not: for a trigger on a
    /// screen that changes every frame, where only the moment matters.
    fn wait_seen(&self, what: &str, secs: u64, pred: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.capture();
            if pred(&s) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out ({secs} s) waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn type_line(&self, text: &str) {
        let ok = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "t", "-l", text])
            .status()
            .unwrap()
            .success();
        assert!(ok, "send-keys -l {text}");
        self.keys(&["Enter"]);
    }
}

#[test]
fn session_with_the_real_engine_answers_cancels_and_continues() {
    let Some(cli) = engine_cli() else {
        eprintln!(
            "skipping: bmoe-cli not found next to bmoe-top, in $BMOE_CLI or on PATH (cargo build -p bmoe-engine --bin bmoe-cli)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("session.csv");
    // The built-in tiny model; -n 30000 makes an uncapped request long enough to cancel (tens of
    // seconds even at the release build's ~1000 tok/s). --ignore-eos: whether greedy decoding of
    // random weights meets an end token depends on the CPU's rounding (one CI machine ended the
    // uncapped turn after 153 tokens), so every turn runs to its n_predict.
    let cmd = format!(
        "{} --session -- {} --session --moe-stream --cache-mb 2 -t 1 -c 32768 -n 30000 --ignore-eos --csv {}",
        bin(),
        cli.display(),
        csv.display()
    );
    let Some(t) = Tmux::start(&cmd, 100, 40) else {
        return;
    };
    t.wait_long("BMOE_READY", 120, |s| {
        s.contains("ready (") && s.contains("ready: qwen3moe")
    });

    // A capped turn: answered in full, DONE shown on the turn and in the status line.
    t.type_line("/n 6");
    t.wait_for("n_predict set", |s| {
        s.contains("n_predict 6 from the next request on")
    });
    t.type_line("hello the");
    let s = t.wait_long("first answer", 120, |s| s.contains("#1 done, 6 tokens"));
    assert!(s.contains("› hello the"), "{s}");
    assert!(s.contains("✓ 6 tokens ·"), "{s}");
    assert!(s.contains("done (BMOE_DONE): 6 tokens"), "{s}");
    assert!(s.contains("[continue, n 6]"), "{s}");

    // An uncapped turn (the engine's -n 30000), cancelled with Esc mid-generation.
    t.type_line("/n");
    t.type_line("count the experts");
    t.wait_seen("second turn generating", 120, |s| {
        s.contains("#2 generating") && s.contains("/30000")
    });
    t.keys(&["Escape"]);
    let s = t.wait_long("cancelled", 60, |s| s.contains("#2 cancelled after"));
    assert!(s.contains("⏹ cancelled after"), "{s}");

    // The session is still usable: a third prompt continues the chat and is answered.
    t.type_line("/n 4");
    // Pasted (bracketed paste, as a terminal pastes): the line break must not send half of it.
    let tmux = |args: &[&str]| {
        let ok = Command::new("tmux")
            .args(["-L", &t.socket])
            .args(args)
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux {args:?}");
    };
    tmux(&["set-buffer", "and\nagain"]);
    tmux(&["paste-buffer", "-p", "-t", "t"]);
    t.wait_for("pasted prompt", |s| s.contains(" › and again█"));
    t.keys(&["Enter"]);
    let s = t.wait_long("third answer", 120, |s| s.contains("#3 done, 4 tokens"));
    assert!(s.contains("› and again"), "{s}");
    assert!(!s.contains("new chat ──"), "one conversation: {s}");

    // Ctrl-D closes the session; the engine exits on its own and bmoe-top with it.
    t.keys(&["C-d"]);
    t.wait_long("clean exit", 30, |s| s.contains("EXIT=0"));
    // The engine's CSV saw the three turns: 6 + (cancelled) + 4 token rows with a turn column.
    let text = std::fs::read_to_string(&csv).unwrap();
    let header = text
        .lines()
        .find(|l| l.starts_with("step,"))
        .expect("CSV header");
    let turn_col = header
        .split(',')
        .position(|c| c == "turn")
        .expect("turn column");
    let mut turns: Vec<String> = text
        .lines()
        .filter(|l| l.as_bytes().first().is_some_and(u8::is_ascii_digit))
        .map(|l| l.split(',').nth(turn_col).unwrap_or("").to_string())
        .collect();
    turns.dedup();
    assert_eq!(turns.len(), 3, "turns in the CSV: {turns:?}");
}

#[test]
fn f1_and_question_mark_open_help_esc_closes_it_then_quits_and_f10_quits() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path(), 10);
    let cmd = format!("{} --replay {} --paused", bin(), csv.display());
    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    t.wait_for("first frame", |s| s.contains("token 0/10"));
    t.keys(&["F1"]);
    let s = t.wait_for("help by F1", |s| s.contains("pause / resume"));
    assert!(s.contains("q  F10  Esc"), "{s}");
    t.keys(&["Escape"]);
    let s = t.wait_for("help closed by Esc", |s| !s.contains("pause / resume"));
    assert!(
        !s.contains("EXIT="),
        "the first Esc only closes the help: {s}"
    );
    t.keys(&["?"]);
    t.wait_for("help by ?", |s| s.contains("pause / resume"));
    t.keys(&["F1"]);
    t.wait_for("help closed by F1", |s| !s.contains("pause / resume"));
    t.keys(&["Escape"]);
    t.wait_for("Esc quits", |s| s.contains("EXIT=0"));

    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    t.wait_for("first frame", |s| s.contains("token 0/10"));
    t.keys(&["F10"]);
    t.wait_for("F10 quits", |s| s.contains("EXIT=0"));
}

#[test]
fn session_help_keys_leave_question_marks_in_prompts() {
    // A stand-in session engine: announces nothing and reads requests until stdin closes.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("engine.sh");
    std::fs::write(&script, "cat > /dev/null\n").unwrap();
    let cmd = format!("{} --session -- sh {} --session", bin(), script.display());
    let Some(t) = Tmux::start(&cmd, 80, 24) else {
        return;
    };
    t.wait_for("prompt line", |s| s.contains("F1 help"));
    t.keys(&["?"]);
    let s = t.wait_for("help by ? on an empty prompt", |s| {
        s.contains("send the prompt")
    });
    assert!(s.contains("Ctrl-D  F10"), "{s}");
    t.keys(&["?"]);
    t.wait_for("help closed by ?", |s| !s.contains("send the prompt"));
    t.keys(&["F1"]);
    t.wait_for("help by F1", |s| s.contains("send the prompt"));
    t.keys(&["Escape"]);
    t.wait_for("help closed by Esc", |s| !s.contains("send the prompt"));
    let ok = Command::new("tmux")
        .args(["-L", &t.socket, "send-keys", "-t", "t", "-l", "why?"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let s = t.wait_for("? typed inside a prompt", |s| s.contains(" › why?█"));
    assert!(!s.contains("send the prompt"), "{s}");
    t.keys(&["F10"]);
    t.wait_for("F10 quits a session", |s| s.contains("EXIT=0"));
}

/// The panel's `flash <MiB> MiB/tok · <MiB/s> MiB/s` figures, read off a screen.
fn flash_figures(screen: &str) -> Option<(f64, f64)> {
    let line = screen
        .lines()
        .find(|l| l.trim_start().starts_with("flash ") && l.contains("MiB/tok"))?;
    let mut w = line.split_whitespace();
    w.next();
    let read = w.next()?.parse().ok()?;
    w.next(); // MiB/tok
    w.next(); // ·
    let bw = w.next()?.parse().ok()?;
    Some((read, bw))
}

/// The engine's own `moe-stream:` figures (`MiB/token` and `MiB/s`), read off the run pane,
/// which shows the end-of-run lines as printed (wrapped at word boundaries).
fn engine_moe_stream(screen: &str) -> (f64, f64) {
    let pane: Vec<String> = screen
        .lines()
        .filter_map(|l| {
            let start = l.find('│')? + '│'.len_utf8();
            let end = start + l[start..].find('│')?;
            Some(l[start..end].trim_end().to_string())
        })
        .collect();
    let text = pane.join(" ");
    let at = text
        .find("moe-stream: read")
        .unwrap_or_else(|| panic!("no moe-stream line in the run pane:\n{screen}"));
    let line = &text[at..];
    let number_before = |unit: &str| -> f64 {
        let end = line
            .find(unit)
            .unwrap_or_else(|| panic!("no {unit:?} in {line}"));
        line[..end]
            .trim_end()
            .rsplit([' ', '('])
            .next()
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no number before {unit:?} in {line}"))
    };
    (number_before(" MiB/token)"), number_before(" MiB/s)"))
}

/// The preamble's `key=value` of the engine's CSV.
fn preamble_value(csv: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(csv).unwrap();
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .flat_map(str::split_whitespace)
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in the preamble of {text}"))
        .to_string()
}

/// Runs the real engine under the panel (80 columns: the run pane is behind `t`) until it
/// ends; the final screen and the details pane.
fn attach_to_engine(extra: &str, csv: &Path) -> Option<(String, String)> {
    let cli = engine_cli().or_else(|| {
        eprintln!("skipping: bmoe-cli not found next to bmoe-top, in $BMOE_CLI or on PATH");
        None
    })?;
    let cmd = format!(
        "{} -- {} -p 'hello the' -n 8 --moe-stream --cache-mb 2 -t 1 --csv {}{extra}",
        bin(),
        cli.display(),
        csv.display()
    );
    let t = Tmux::start(&cmd, 120, 40)?;
    let end = t.wait_long("engine exit", 120, |s| s.contains("exit status: 0"));
    t.keys(&["t"]);
    let details = t.wait_for("details pane", |s| s.contains("reading as:"));
    t.keys(&["q"]);
    t.wait_for("clean exit", |s| s.contains("EXIT=0"));
    Some((end, details))
}

fn assert_engine_figures(end: &str) {
    // What the engine printed on its `moe-stream:` line is what the panel shows: the per-token
    // read (to the panel's 2 decimals below 1 MiB) and the bandwidth (0 decimals, both).
    let (want_read, want_bw) = engine_moe_stream(end);
    let (shown_read, shown_bw) =
        flash_figures(end).unwrap_or_else(|| panic!("no flash MiB/s figure on screen:\n{end}"));
    assert!(
        (shown_read - want_read).abs() < 0.051,
        "MiB/tok {shown_read} vs the engine's {want_read}:\n{end}"
    );
    assert_eq!(shown_bw, want_bw, "MiB/s vs the engine's:\n{end}");
}

#[test]
fn a_one_shot_engine_without_progress_gets_it_and_shows_the_engines_figures() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("run.csv");
    let Some((end, details)) = attach_to_engine("", &csv) else {
        return;
    };
    assert!(end.contains("--progress added"), "{end}");
    assert!(end.contains("token 8/8"), "{end}");
    assert!(!end.contains("(waiting for text)"), "{end}");
    assert_engine_figures(&end);
    assert!(
        details.contains("bmoe-top: added --progress"),
        "the log says so: {details}"
    );
}

#[test]
fn with_progress_the_lanes_and_bandwidth_are_the_engines_statement() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("run.csv");
    let Some((end, details)) = attach_to_engine(" --progress", &csv) else {
        return;
    };
    assert!(!end.contains("--progress added"), "{end}");
    assert_engine_figures(&end);
    // No --io-threads on the command line: the lanes are the engine's default, as its stderr
    // streaming line (and its CSV preamble) states them.
    let lanes = preamble_value(&csv, "io_threads");
    assert!(
        details.contains(&format!("compute threads, {lanes} I/O lanes")),
        "lanes {lanes}: {details}"
    );
    assert!(end.contains(&format!("{lanes} lanes")), "header: {end}");
}

#[test]
fn a_live_routing_edit_run_shows_its_dropped_and_substituted_share() {
    let Some(cli) = engine_cli() else {
        eprintln!(
            "skipping: bmoe-cli not found next to bmoe-top, in $BMOE_CLI or on PATH (cargo build -p bmoe-engine --bin bmoe-cli)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("edit.csv");
    // The built-in tiny model under a 1 MiB cache: misses enough for both edits to act.
    let cmd = format!(
        "{} -- {} --moe-stream --cache-mb 1 -t 1 -n 24 --ignore-eos --drop-cold-experts 1 --expert-substitute 1 -p 'Hello world, this is a test' --csv {}",
        bin(),
        cli.display(),
        csv.display()
    );
    let Some(t) = Tmux::start(&cmd, 140, 40) else {
        return;
    };
    let s = t.wait_long("substituted share", 120, |s| s.contains("substituted "));
    // The figures are the run's own ledger, from the trailer it wrote.
    let trailer = std::fs::read_to_string(&csv).unwrap();
    let key = |k: &str| -> u64 {
        trailer
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {trailer}"))
    };
    let (routed, dropped, reranked, sub) = (
        key("experts_routed"),
        key("experts_dropped"),
        key("experts_reranked"),
        key("experts_substituted"),
    );
    assert!(routed > 0 && sub > 0, "{trailer}");
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let share = |n: u64| 100.0 * n as f64 / routed as f64;
    let want_sub = format!(
        "substituted {sub}/{routed} ({:.1}%), {reranked} examined",
        share(sub)
    );
    let want_drop = format!("dropped {dropped}/{routed} ({:.1}%)", share(dropped));
    assert!(flat.contains(&want_sub), "{want_sub}: {s}");
    assert!(flat.contains(&want_drop), "{want_drop}: {s}");
    assert!(flat.contains("subst λ1"), "{s}");
    t.keys(&["q"]);
    t.wait_for("clean exit", |s| s.contains("EXIT=0"));
}
