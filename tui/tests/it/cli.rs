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

#[test]
fn a_missing_file_says_its_cause_once_and_how_to_get_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("nope.csv");
    let shown = p.to_str().expect("utf-8 path");
    let (code, err) = run(&["--replay", shown]);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    // The cause is on the error line, once; the hint line says what to do, without the cause.
    assert!(
        lines[0].starts_with(&format!("error: cannot replay {shown}: ")),
        "{err}"
    );
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
    assert!(lines[1].starts_with("hint: check the path;"), "{err}");
    assert!(lines[1].contains("bmoe-cli … --csv run.csv"), "{err}");
    assert!(!lines[1].contains("os error"), "{err}");
}

#[test]
fn a_trace_is_pointed_at_the_analyze_subcommand_that_reads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text, sub) in [
        (
            "run.route.csv",
            "# route_trace v1\nstep,phase,layer,slot,expert,weight,resident\n",
            "route",
        ),
        (
            "run.compute.csv",
            "# compute_trace v1\nstep,op\n",
            "compute",
        ),
        ("run.io.csv", "# io_trace v1\nstep,lane\n", "io"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        let shown = p.to_str().expect("utf-8 path");
        let (code, err) = run(&["--replay", shown]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("not a metrics CSV"), "{err}");
        assert!(
            err.contains(&format!(
                "hint: analyse it with `bmoe-analyze {sub} {shown}`"
            )),
            "{err}"
        );
        assert!(!err.contains("bmoe_telemetry"), "{err}");
    }
}

#[test]
fn an_empty_file_is_refused_before_the_screen_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("killed.csv");
    std::fs::write(&p, "").expect("write");
    let shown = p.to_str().expect("utf-8 path");
    let (code, err) = run(&["--replay", shown]);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(
        lines[0],
        format!(
            "error: cannot replay {shown}: the file is empty (0 bytes), so there is no run to show"
        ),
        "{err}"
    );
    assert!(lines[1].starts_with("hint: pass the metrics CSV"), "{err}");
    // Refused before the terminal check: the screen would never have opened.
    assert!(!err.contains("not a terminal"), "{err}");

    // Only a preamble, no header: refused the same way.
    std::fs::write(&p, "# bmoe_metrics v2\n# engine=x\n").expect("write");
    let (code, err) = run(&["--replay", shown]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("it has no header row and no token rows"),
        "{err}"
    );
}
