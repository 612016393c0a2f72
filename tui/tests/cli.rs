//! The binary's error paths: what failed, then a `hint:` line, exit code 1, never a panic.

use std::process::{Command, Stdio};

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-top"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run bmoe-top");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn missing_replay_file_names_it_and_hints() {
    let (code, err) = run(&["--replay", "/nonexistent/run.csv"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot replay /nonexistent/run.csv"), "{err}");
    assert!(err.contains("hint:"), "{err}");
}

#[test]
fn a_file_that_is_not_a_metrics_csv_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("notes.csv");
    std::fs::write(&p, "name,value\nalpha,1\n").expect("write");
    let (code, err) = run(&["--replay", p.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot replay"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn session_needs_an_engine_command_with_session() {
    // clap: --session without a command after `--` is a usage error.
    let (code, err) = run(&["--session"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("COMMAND"), "{err}");
    // A command without --session would never answer a request: refused before spawning.
    let (code, err) = run(&["--session", "--", "bmoe-cli", "-m", "m.gguf"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no `--session` flag"), "{err}");
    assert!(
        err.contains("hint: bmoe-top --session -- bmoe-cli -m model.gguf --session"),
        "{err}"
    );
}

#[test]
fn refuses_to_draw_into_a_pipe() {
    let (code, err) = run(&["--", "true"]);
    assert_eq!(code, 1);
    assert!(err.contains("stdout is not a terminal"), "{err}");
}

#[test]
fn bad_speed_is_a_usage_error() {
    let (code, err) = run(&["--replay", "x.csv", "--speed", "fast"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid speed `fast`"), "{err}");
}
