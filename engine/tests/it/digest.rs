//! The end-of-run digest on a real terminal (`script` gives `bmoe-cli` a pty): the panel's four
//! bars, what was streamed and what the cache saved, with the run's own figures — and nothing of
//! it when the output is piped.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use crate::tiny::{Tiny, synth_tiny};
use bmoe_telemetry::summary::PerfReport;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

fn tiny() -> &'static Tiny {
    static M: OnceLock<Tiny> = OnceLock::new();
    M.get_or_init(synth_tiny)
}

const BIN: &str = env!("CARGO_BIN_EXE_bmoe-cli");

fn args() -> Vec<String> {
    [
        "-m",
        tiny().path.to_str().unwrap(),
        "--moe-stream",
        "--cache-mb",
        "1",
        "-p",
        "hello",
        "-n",
        "24",
        "-t",
        "1",
        "--ignore-eos",
    ]
    .map(String::from)
    .to_vec()
}

/// The number after `key` on the line that starts with `prefix`.
fn number_after(text: &str, prefix: &str, key: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{text}"));
    let at = line
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} not in {line:?}"))
        + key.len();
    let num: String = line[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse()
        .unwrap_or_else(|_| panic!("no number after {key:?} in {line:?}"))
}

#[test]
fn a_terminal_gets_the_digest_with_the_runs_own_figures() {
    let command = format!("{BIN} {}", args().join(" "));
    let o = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let seen = String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n");
    assert!(o.status.success(), "{seen}");
    let report = PerfReport::parse(&seen);
    let stream = report.moe_stream.expect("moe-stream: line");
    let cache = report.moe_cache.expect("moe-cache: line");
    let generation = report.generation.expect("generation: line");
    for bar in [
        "  compute ",
        "  flash wait ",
        "  cache mgmt ",
        "  unattributed ",
    ] {
        let line = seen
            .lines()
            .find(|l| l.starts_with(bar))
            .unwrap_or_else(|| panic!("no {bar:?} bar in:\n{seen}"));
        assert!(line.contains(" ms  ") && line.contains('%'), "{line}");
        assert_eq!(line.matches(['█', '░']).count(), 20, "{line}");
    }
    let tok_s = number_after(&seen, "  wall ", "per token in all (");
    assert!(
        (tok_s - generation.tok_s).abs() < 0.051,
        "{tok_s} vs {}",
        generation.tok_s
    );
    let read = number_after(&seen, "  streamed ", "streamed");
    assert!(
        (read - stream.read_mib).abs() < 0.051,
        "{read} vs {}",
        stream.read_mib
    );
    let hit = number_after(&seen, "  cache    ", "MiB answered");
    assert!(
        (hit - cache.hit_pct).abs() < 0.051,
        "{hit} vs {}",
        cache.hit_pct
    );
    assert!(
        seen.contains("  text         random: this synthetic model"),
        "{seen}"
    );
}

#[test]
fn piped_output_has_no_digest() {
    let o = Command::new(BIN).args(args()).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    for text in [&stderr, &stdout] {
        assert!(
            !text.contains("unattributed") && !text.contains('█'),
            "{text}"
        );
    }
    assert!(PerfReport::parse(&stdout).generation.is_some());
}
