//! A full disk under every output file, for real: a 64 KiB tmpfs nearly filled, the CSV or a
//! trace written into it. The run must not pass for a good one — one-shot: it still reports,
//! then exits 1 with the sink's error; session: a non-fatal `BMOE_ERROR` naming the sink before
//! each later `BMOE_DONE`, exit 1 at the end — and the file must end at a complete row. Mounting
//! needs root: elsewhere the tests say they were skipped and pass.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use crate::tiny::{Tiny, synth_tiny};
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::protocol::{LineKind, Record, parse_line};
use bmoe_telemetry::trace::{ComputeTraceReader, IoTraceReader, RouteTraceReader};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

fn tiny() -> &'static Tiny {
    static M: OnceLock<Tiny> = OnceLock::new();
    M.get_or_init(synth_tiny)
}

/// A 64 KiB tmpfs with 56 KiB taken: two pages left, fewer than any sink below writes.
struct FullDisk {
    dir: tempfile::TempDir,
}

impl FullDisk {
    fn mount(test: &str) -> Option<FullDisk> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            println!("{test}: skipped — mounting a small tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            println!("{test}: skipped — mount -t tmpfs failed");
            return None;
        }
        let disk = FullDisk { dir };
        std::fs::write(disk.dir.path().join("filler"), vec![0u8; 56 << 10]).unwrap();
        Some(disk)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// The output flags, each with the reader that checks its file.
const SINKS: [&str; 5] = [
    "--csv",
    "--route-trace",
    "--io-trace",
    "--compute-trace",
    "--compute-trace-layers",
];

/// The file holds whole rows only, at least one: what a reader takes as data is data.
fn check_whole_rows(flag: &str, path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes.last(), Some(&b'\n'), "{flag}: the file ends mid-line");
    let (rows, truncated) = match flag {
        "--csv" => {
            let f = MetricsFile::read(path).unwrap();
            assert!(
                f.summaries.is_empty(),
                "{flag}: a trailer fits no full disk"
            );
            (f.rows.len(), f.truncated.is_some())
        }
        "--route-trace" => {
            let mut r = RouteTraceReader::open(path).unwrap();
            let n = r.by_ref().map(Result::unwrap).count();
            (n, r.truncated().is_some())
        }
        "--io-trace" => {
            let mut r = IoTraceReader::open(path).unwrap();
            let n = r.by_ref().map(Result::unwrap).count();
            (n, r.truncated().is_some())
        }
        _ => {
            let mut r = ComputeTraceReader::open(path).unwrap();
            let n = r.by_ref().map(Result::unwrap).count();
            (n, r.truncated().is_some())
        }
    };
    assert!(!truncated, "{flag}: a torn last row");
    assert!(rows > 0, "{flag}: no row fitted");
}

fn cli(flag: &str, path: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"));
    c.arg("-m")
        .arg(&tiny().path)
        // -t 1: with two threads a loaded machine stalls every ggml barrier
        .args(["-t", "1", "-c", "1024", "--ignore-eos"])
        .args(["--moe-stream", "--cache-mb", "1"])
        .arg(flag)
        .arg(path);
    c
}

fn says_full(text: &str, flag: &str, path: &Path) -> bool {
    text.contains(&format!("writing {flag} {}", path.display()))
        && text.contains("No space left on device")
}

#[test]
fn a_full_disk_fails_a_one_shot_run_after_its_report() {
    let Some(disk) = FullDisk::mount("a_full_disk_fails_a_one_shot_run_after_its_report") else {
        return;
    };
    for flag in SINKS {
        let path = disk.file("out.csv");
        let o = cli(flag, &path)
            .args(["-p", "Hello world, full disk", "-n", "400"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag}: stderr:\n{stderr}");
        let error = stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{flag}: no error line:\n{stderr}"));
        assert!(says_full(error, flag, &path), "{flag}: {error}");
        assert!(
            stderr.contains(&format!("\nhint: free space on the disk that holds {flag}")),
            "{flag}: {stderr}"
        );
        // the run itself went on: its answer and summary are all there
        assert!(
            stdout.contains("generation: 400 tokens"),
            "{flag}: {stdout}"
        );
        check_whole_rows(flag, &path);
        std::fs::remove_file(&path).unwrap();
    }
}

fn session(flag: &str, path: &Path) -> Output {
    let mut child = cli(flag, path)
        .arg("--session")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let requests = [
        r#"{"cmd":"generate","id":1,"prompt":"Hello world, full disk","n_predict":400}"#,
        r#"{"cmd":"generate","id":2,"prompt":"Hello","n_predict":4}"#,
    ];
    writeln!(stdin, "{}", requests.join("\n")).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn a_full_disk_is_reported_on_the_session_protocol() {
    let Some(disk) = FullDisk::mount("a_full_disk_is_reported_on_the_session_protocol") else {
        return;
    };
    for flag in SINKS {
        let path = disk.file("out.csv");
        let o = session(flag, &path);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag}: stderr:\n{stderr}");
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("error: ") && says_full(l, flag, &path)),
            "{flag}: {stderr}"
        );
        // each turn's first answer is the sink's error, then its BMOE_DONE
        let mut answers: Vec<(i64, &'static str)> = Vec::new();
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            match parse_line(line) {
                LineKind::Record(Record::Error(e)) => {
                    assert!(!e.fatal, "{flag}: {e:?}");
                    assert!(says_full(&e.msg, flag, &path), "{flag}: {}", e.msg);
                    assert!(e.msg.contains("hint: "), "{flag}: {}", e.msg);
                    answers.push((e.id, "error"));
                }
                LineKind::Record(Record::Done(d)) => {
                    assert!(!d.cancelled);
                    answers.push((d.id, "done"));
                }
                _ => {}
            }
        }
        assert_eq!(
            answers,
            vec![(1, "error"), (1, "done"), (2, "error"), (2, "done")],
            "{flag}"
        );
        check_whole_rows(flag, &path);
        std::fs::remove_file(&path).unwrap();
    }
}
