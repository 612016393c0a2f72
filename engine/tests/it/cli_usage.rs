//! What `bmoe-cli` tells a user about their command line, on the real binary: llama.cpp flags it
//! does not take, flag values checked whether or not they take effect, `-f FILE`, `-V`, and the
//! answer's control characters on a terminal (a real pty, through `script`).

use crate::tiny::{Tiny, synth_tiny};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;

fn tiny() -> &'static Tiny {
    static M: OnceLock<Tiny> = OnceLock::new();
    M.get_or_init(synth_tiny)
}

const BIN: &str = env!("CARGO_BIN_EXE_bmoe-cli");

fn cli(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run bmoe-cli")
}

/// A short run of the tiny model with `extra`.
fn run(extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("-m")
        .arg(&tiny().path)
        .args(["-n", "4", "-t", "2", "-c", "128", "--ignore-eos"])
        .args(extra)
        .output()
        .expect("run bmoe-cli")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit status 2, and stderr's `error:` line says `says` and its `hint:` line `hint`.
fn refused(o: &Output, says: &str, hint: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let error = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
    let hinted = err.lines().find(|l| l.starts_with("hint: ")).unwrap_or("");
    assert!(error.contains(says), "error line: {err}");
    assert!(hinted.contains(hint), "hint line: {err}");
    assert!(o.stdout.is_empty(), "nothing ran");
}

#[test]
fn llama_cpp_flags_get_a_targeted_hint() {
    for (args, says, hint) in [
        (
            &["-ngl", "0"][..],
            "-ngl is a llama.cpp flag",
            "--moe-stream",
        ),
        (&["--n-gpu-layers", "99"], "CPU only", "--moe-stream"),
        (&["-fa"], "-fa is a llama.cpp flag", "-f FILE"),
        (&["--flash-attn", "on"], "--flash-attn", "drop it"),
        (&["-b", "512"], "-b is a llama.cpp flag", "--ubatch"),
        (&["--batch-size=512"], "--batch-size", "--ubatch"),
        (&["-cnv"], "-cnv is a llama.cpp flag", "--session"),
        (&["--conversation"], "interactive", "--session"),
        (
            &["--no-mmap"],
            "--no-mmap is a llama.cpp flag",
            "--dense-weights anon",
        ),
    ] {
        let mut a = vec!["-m", "x.gguf", "-p", "hi"];
        a.extend_from_slice(args);
        refused(&cli(&a), says, hint);
    }
    // a prompt that mentions one is still a prompt (this run fails later, on the model)
    let o = cli(&["-m", "/nonexistent/m.gguf", "-p", "what does -ngl 0 do?"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn version_is_named_like_the_other_programs() {
    for flag in ["-V", "--version"] {
        let o = cli(&[flag]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("bmoe-cli {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn prompt_file_runs_like_its_text_and_its_errors_name_it() {
    let dir = &tiny().dir;
    let prompt = dir.path().join("prompt.txt");
    std::fs::write(&prompt, "Hello from a file\n").expect("write prompt");
    let p = prompt.to_str().expect("utf-8 path");
    let inline = run(&["-p", "Hello from a file"]);
    assert!(inline.status.success(), "{}", stderr(&inline));
    for flag in ["-f", "--file"] {
        let from_file = run(&[flag, p]);
        assert!(from_file.status.success(), "{}", stderr(&from_file));
        let answer = |o: &Output| {
            let s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.split("\n\n").next().unwrap_or("").to_string()
        };
        assert!(answer(&from_file).starts_with("Hello from a file"));
        assert_eq!(answer(&from_file), answer(&inline));
    }
    let missing = dir.path().join("no-such-prompt.txt");
    let m = missing.to_str().expect("utf-8 path");
    refused(&run(&["-f", m]), m, "-p");
    refused(
        &run(&["-f", m]),
        "cannot read the prompt file",
        "check the path",
    );
    // -f and -p at once: clap's conflict, in the house style
    refused(&run(&["-f", p, "-p", "x"]), "cannot be used with", "--help");
}

#[test]
fn flag_values_are_checked_even_where_they_take_no_effect() {
    for (args, says, hint) in [
        (
            &["--cache-mb", "lots"][..],
            "--cache-mb expects a number of MiB or 'auto', got 'lots'",
            "--cache-mb 2048",
        ),
        (
            &["--top-p", "2"],
            "--top-p must be in (0, 1] (got 2)",
            "--top-p 0.9",
        ),
        (
            &["--io-threads", "0"],
            "--io-threads must be in 1..=8",
            "lanes",
        ),
        (&["--top-k", "-1"], "--top-k must be >= 0", "disables"),
        (
            &["--cache-ceil-mb", "-4"],
            "--cache-ceil-mb must be >= 0",
            "MiB",
        ),
    ] {
        refused(&run(args), says, hint);
    }
}

#[test]
fn valid_values_without_effect_are_warned_about_and_the_run_goes_ahead() {
    let o = run(&["-p", "hi", "--cache-mb", "64", "--top-p", "0.5"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("bmoe: warning: "))
        .collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings[0].contains("--top-p has no effect with greedy decoding")
            && warnings[0].contains("--temp"),
        "{err}"
    );
    assert!(
        warnings[1].contains("--cache-mb has no effect without --moe-stream")
            && warnings[1].contains("add --moe-stream"),
        "{err}"
    );
    // where they take effect, nothing is said
    let o = run(&[
        "-p",
        "hi",
        "--moe-stream",
        "--cache-mb",
        "64",
        "--temp",
        "0.5",
        "--top-p",
        "0.5",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("has no effect"), "{err}");
}

/// Text the tiny model is made to generate (`--test-force-text`): ESC sequences that would
/// recolour and clear the screen, BEL, SUB, DEL, a carriage return and other C0 controls.
const HOSTILE: &str = "ok\u{1b}[31mred\u{1b}[2J\u{7}\u{1a}\u{7f}\u{8}\r\u{0c}\tend";

fn hostile_args(model: &Path) -> Vec<String> {
    let mut a: Vec<String> = ["-m", model.to_str().expect("utf-8 path")]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(
        [
            "-p",
            "Hi",
            "-n",
            "40",
            "-t",
            "2",
            "-c",
            "128",
            "--ignore-eos",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    a.push("--test-force-text".into());
    a.push(HOSTILE.into());
    a
}

/// The controls of [`HOSTILE`] as a terminal must show them.
const SHOWN: &str =
    "ok\u{241b}[31mred\u{241b}[2J\u{2407}\u{241a}\u{2421}\u{2408}\u{240d}\u{240c}\tend";

#[test]
fn piped_answers_keep_every_byte() {
    let o = Command::new(BIN)
        .args(hostile_args(&tiny().path))
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(HOSTILE), "{out:?}");
    assert!(!out.contains('\u{241b}'), "{out:?}");
}

#[test]
fn a_terminal_sees_the_answers_controls_not_their_effect() {
    // a real pty: `script` runs bmoe-cli on one and copies what the terminal received
    let args: Vec<String> = hostile_args(&tiny().path)
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let command = format!("{BIN} {}", args.join(" "));
    let o = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script (util-linux)");
    assert!(o.status.success(), "{}", stderr(&o));
    let seen = String::from_utf8_lossy(&o.stdout);
    // the pty turns \n into \r\n (onlcr); that \r is the terminal's, not the model's
    let seen = seen.replace("\r\n", "\n");
    assert!(seen.contains(SHOWN), "{seen:?}");
    let answer_at = seen.find("ok\u{241b}").expect("answer");
    let bad = seen[answer_at..]
        .chars()
        .find(|&c| c != '\n' && c != '\t' && c.is_control());
    assert_eq!(bad, None, "a raw control reached the terminal: {seen:?}");
}
