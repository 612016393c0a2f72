//! `bmoe-bench sweep`'s progress bars in a real terminal (tmux), read back with
//! `capture-pane`: elapsed time moves while a run is going, and there is no ETA until a run
//! has finished. Skips with a printed reason when tmux is absent.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::sweep_common::*;

/// One tmux server of its own (own socket, no user config), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(cmd: &str) -> Option<Tmux> {
        if !Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            eprintln!("SKIP progress_in_a_terminal: tmux is not installed");
            return None;
        }
        let socket = format!("bmoe-bench-test-{}", std::process::id());
        let ok = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-s", "t", "-x", "120", "-y", "30"])
            .args(["sh", "-c", &format!("{cmd}; echo EXIT=$?; sleep 60")])
            .env("TERM", "xterm-256color")
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tmux new-session failed");
        Some(Tmux { socket })
    }

    fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "t"])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// The overall bar's line (`     sweep [...] 0/2 runs  00:00:01 elapsed...`).
fn bar_line(screen: &str) -> Option<String> {
    screen
        .lines()
        .find(|l| l.trim_start().starts_with("sweep [") && l.contains("elapsed"))
        .map(str::to_string)
}

#[test]
fn progress_in_a_terminal_ticks_and_hides_the_eta_until_a_run_ended() {
    let t = tempfile::tempdir().expect("tmp");
    // Each run takes 4 s: long enough to see the clock move during the first one.
    fake_engine(t.path(), 4.0);
    std::fs::write(
        t.path().join("m.toml"),
        "name = \"tty\"\nbinary = \"./fake-cli\"\n[defaults]\nn_predict = 4\n[[model]]\nid = \"tiny\"\npreset = \"tiny\"\n[axes.cache]\nflag = \"--cache-mb\"\n[[sweep]]\nname = \"s\"\naxes = { cache = [0, 8] }\n",
    )
    .expect("write");
    let cmd = format!(
        "cd '{}' && BMOE_CACHE_DIR='{}' '{}' sweep m.toml -o res",
        t.path().display(),
        t.path().join("cache").display(),
        env!("CARGO_BIN_EXE_bmoe-bench")
    );
    let Some(tmux) = Tmux::start(&cmd) else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut elapsed_seen: Vec<String> = Vec::new();
    let mut screen = String::new();
    // Until the first run's line ([1/2]) is printed: the bar never shows an ETA, and its
    // elapsed time changes.
    while Instant::now() < deadline {
        screen = tmux.capture();
        if screen.contains("[1/2]") {
            break;
        }
        if let Some(line) = bar_line(&screen) {
            assert!(
                !line.contains("ETA"),
                "an ETA before any run ended: {screen}"
            );
            let e = line
                .split_whitespace()
                .find(|w| w.len() == 8 && w.as_bytes()[2] == b':')
                .unwrap_or_default()
                .to_string();
            if elapsed_seen.last() != Some(&e) {
                elapsed_seen.push(e);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        screen.contains("[1/2]"),
        "the first run did not end: {screen}"
    );
    assert!(
        elapsed_seen.len() >= 2,
        "elapsed time did not move during the first run: {elapsed_seen:?}\n{screen}"
    );
    // During the second run, an ETA from the first one.
    let mut eta = None;
    while Instant::now() < deadline && eta.is_none() {
        screen = tmux.capture();
        eta = bar_line(&screen).filter(|l| l.contains(", ETA "));
        if screen.contains("EXIT=") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let eta = eta.unwrap_or_else(|| panic!("no ETA after the first run: {screen}"));
    assert!(!eta.contains("ETA 0s"), "{eta}");
    assert!(
        Path::new(&t.path().join("res/results.jsonl")).is_file(),
        "{screen}"
    );
}
