//! `--row-stream`: the token embedding bound to reserved address space, its rows fetched from
//! the file before each decode. Gates: the output equals the resident run (token ids and logits
//! hashes) with the row cache off, evicting and holding, serial and `--overlap`; the trailer's
//! counts equal a count made here from the tokens the run decoded and the table's layout; a tied
//! head does not qualify; a fetch that fails for real (the file replaced by a shorter one after
//! load) prints the FAILED line and exits non-zero.

use bmoe_gguf::GgufModel;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::{MetricsFile, SummaryTrailer};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// All printable ASCII bytes outside the synthetic tokenizer's merges: each is one byte token,
/// whose id is the byte value (the vocabulary lists the 256 byte tokens first, by byte).
const PROMPT: &str = "zqxjkvbwyfmgpud";
const VOCAB: u64 = 8192;
const PAGE: u64 = 4096;

/// The tiny preset with an 8192-token vocabulary (F32 rows of 1 KiB: an 8 MiB table).
fn model(dir: &Path, name: &str, tied: bool) -> PathBuf {
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.set_vocab(VOCAB).expect("vocab size");
    o.tied_output = tied;
    write_model(&o, &dir.join(name)).expect("synthesise").paths[0].clone()
}

/// (file offset, bytes) of the token embedding.
fn table(model: &Path) -> (u64, u64) {
    let m = GgufModel::open(model).expect("open model");
    let t = m
        .tensors()
        .iter()
        .find(|t| t.info.name == "token_embd.weight")
        .expect("token_embd.weight");
    (t.info.file_offset, t.info.n_bytes)
}

struct Run {
    stderr: String,
    /// The summary lines.
    stdout: String,
    /// (token, hash) per step, from `--dump-logits-hash`.
    steps: Vec<(i32, String)>,
    trailer: SummaryTrailer,
}

fn cli(model: &Path, csv: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"));
    c.arg("-m")
        .arg(model)
        .args([
            "-p",
            PROMPT,
            "-n",
            "12",
            "-t",
            "2",
            "-c",
            "256",
            "--ignore-eos",
        ])
        .args(["--dump-logits-hash", "--csv"])
        .arg(csv)
        .args(extra);
    c
}

fn run(model: &Path, csv: &Path, extra: &[&str]) -> Run {
    let out = cli(model, csv, extra).output().expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{extra:?}:\n{stderr}");
    let steps = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("logits-hash "))
        .map(|l| {
            let tok = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("token="))
                .and_then(|t| t.parse().ok())
                .expect("token= field");
            let hash = l.split_whitespace().last().unwrap_or_default().to_string();
            (tok, hash)
        })
        .collect::<Vec<_>>();
    assert!(steps.len() >= 12, "{extra:?}: {stderr}");
    let f = MetricsFile::read(csv).expect("metrics CSV parses");
    let trailer = f.summaries.last().expect("a summary trailer").clone();
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        steps,
        trailer,
    }
}

fn key(t: &SummaryTrailer, k: &str) -> f64 {
    t.get_f64(k)
        .unwrap_or_else(|| panic!("trailer key {k} missing"))
}

/// Every row the run decoded: the prompt's byte tokens, BOS when the prompt carried one, and
/// every generated token that was fed back.
fn decoded_rows(r: &Run) -> BTreeSet<u64> {
    let mut rows: BTreeSet<u64> = PROMPT.bytes().map(u64::from).collect();
    let n_prompt = key(&r.trailer, "n_prompt") as usize;
    assert!(
        n_prompt == PROMPT.len() || n_prompt == PROMPT.len() + 1,
        "every prompt byte is one token: {n_prompt}"
    );
    if n_prompt == PROMPT.len() + 1 {
        // BOS = the first control token, right after the byte tokens, merges and fillers
        rows.insert(VOCAB - 5);
    }
    rows.extend(r.steps.iter().map(|s| s.0 as u64));
    rows
}

#[test]
fn row_stream_equals_resident_and_counts_what_it_reads() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let m = model(dir.path(), "rows.gguf", false);
    let (offset, bytes) = table(&m);
    assert_eq!(bytes, VOCAB * 256 * 4, "F32 rows of n_embd 256");
    assert_eq!(offset % PAGE, 0, "the table starts on a page");
    let csv = dir.path().join("m.csv");
    let resident = run(&m, &csv, &[]);
    assert!(
        resident.stdout.contains("generation:"),
        "{}",
        resident.stdout
    );
    assert!(!resident.stdout.contains("moe-rows:"));
    for k in [
        "row_table_MiB",
        "row_rows",
        "row_reads",
        "row_evictions",
        "row_io_errors",
    ] {
        assert_eq!(
            key(&resident.trailer, k),
            0.0,
            "{k} present and zero when off"
        );
    }
    let stream = ["--moe-stream", "--cache-mb", "0"];
    for overlap in [false, true] {
        // 0 = off; 0.01 MiB = 10 rows: evicts; 64 MiB holds the whole table
        for budget in ["0", "0.01", "64"] {
            let mut extra = stream.to_vec();
            extra.extend(["--row-stream", "--row-cache-mb", budget]);
            if overlap {
                extra.push("--overlap");
            }
            let r = run(&m, &csv, &extra);
            assert_eq!(
                r.steps, resident.steps,
                "{extra:?}: tokens and logits hashes"
            );
            let line = r
                .stdout
                .lines()
                .find(|l| l.starts_with("moe-rows: "))
                .unwrap_or_else(|| panic!("{extra:?}: no moe-rows line in {}", r.stdout));
            let t = &r.trailer;
            assert_eq!(
                line,
                format!(
                    "moe-rows: 8.0 MiB of row-gathered table(s) off the resident set, {:.1} MiB resident, {} rows gathered, {} reads ({:.1} MiB)",
                    key(t, "row_resident_MiB"),
                    key(t, "row_rows"),
                    key(t, "row_reads"),
                    key(t, "row_read_MiB")
                )
            );
            assert!(!r.stdout.contains("FAILED reads"));
            assert_eq!(key(t, "row_table_MiB"), 8.0);
            assert_eq!(key(t, "row_io_errors"), 0.0);
            let rows = decoded_rows(&r);
            let n_rows = key(t, "row_rows") as usize;
            let evictions = key(t, "row_evictions") as usize;
            if budget == "64" {
                // each distinct row fetched once; rows are 1 KiB, 4 to a page: the pages read
                // are the distinct pages of those rows, adjacent ones in one read
                assert_eq!(n_rows, rows.len(), "{extra:?}");
                assert_eq!(evictions, 0);
                let pages: BTreeSet<u64> = rows.iter().map(|r| r * 1024 / PAGE).collect();
                let runs = pages
                    .iter()
                    .filter(|p| **p == 0 || !pages.contains(&(**p - 1)))
                    .count();
                assert_eq!(key(t, "row_reads") as usize, runs, "{extra:?}");
                let read = key(t, "row_read_MiB");
                let want = (pages.len() as u64 * PAGE) as f64 / 1048576.0;
                assert!((read - want).abs() < 0.001, "{extra:?}: {read} vs {want}");
            } else {
                // a row dropped under the budget is fetched again when it comes back
                assert!(n_rows >= rows.len(), "{extra:?}: {n_rows} < {}", rows.len());
                assert!(evictions > 0, "{extra:?}: the budget forced evictions");
                // what is still cached at the end: the budget's rows (10 of 1 KiB), or only the
                // last decode's single row with the cache off
                let cap = if budget == "0" { 1 } else { 10 };
                assert!(
                    n_rows - evictions <= cap,
                    "{extra:?}: {n_rows} - {evictions}"
                );
            }
        }
    }
}

#[test]
fn random_feed_under_a_small_budget_evicts_and_still_matches() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let m = model(dir.path(), "rows.gguf", false);
    let csv = dir.path().join("m.csv");
    let feed = ["--feed-random", "7"];
    let resident = run(&m, &csv, &feed);
    let mut extra = feed.to_vec();
    extra.extend(["--moe-stream", "--row-stream", "--row-cache-mb", "0.005"]);
    let r = run(&m, &csv, &extra);
    assert_eq!(r.steps, resident.steps);
    let rows = decoded_rows(&r);
    let t = &r.trailer;
    let (n_rows, evictions) = (
        key(t, "row_rows") as usize,
        key(t, "row_evictions") as usize,
    );
    assert!(
        n_rows >= rows.len() && evictions > 0,
        "{n_rows} {evictions}"
    );
    // at most 5 rows (the budget) stay cached
    assert!(n_rows - evictions <= 5, "{n_rows} {evictions}");
}

#[test]
fn a_tied_head_does_not_qualify() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let m = model(dir.path(), "tied.gguf", true);
    let csv = dir.path().join("m.csv");
    let resident = run(&m, &csv, &[]);
    let r = run(&m, &csv, &["--moe-stream", "--row-stream"]);
    assert_eq!(r.steps, resident.steps);
    assert!(
        r.stdout.contains("generation:") && !r.stdout.contains("moe-rows:"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .contains("token_embd.weight stays resident — it is also the output head")
    );
    for k in [
        "row_table_MiB",
        "row_resident_MiB",
        "row_rows",
        "row_reads",
        "row_read_MiB",
    ] {
        assert_eq!(key(&r.trailer, k), 0.0, "{k}");
    }
}

#[test]
fn a_failed_row_fetch_prints_failed_and_exits_non_zero() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let m = model(dir.path(), "rows.gguf", false);
    let (offset, _) = table(&m);
    // the replacement ends where the table starts: every row read comes back empty
    let short = dir.path().join("short.gguf");
    std::fs::copy(&m, &short).expect("copy");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&short)
        .and_then(|f| f.set_len(offset))
        .expect("cut");
    let csv = dir.path().join("m.csv");
    let out = cli(&m, &csv, &["--moe-stream", "--row-stream"])
        .env("BMOE_TEST_REPLACE_AFTER_LOAD", &short)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines()
            .any(|l| l == "1 FAILED reads - this run's output is not trustworthy"),
        "{err}"
    );
    assert!(err.contains("moe-rows: 8.0 MiB"), "{err}");
    assert!(
        err.contains("--row-stream: reading rows of token_embd.weight failed"),
        "{err}"
    );
    assert!(err.contains("\nhint: "), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("generation:"));
}

#[test]
fn row_stream_needs_moe_stream() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let csv = dir.path().join("m.csv");
    let out = cli(Path::new("/nonexistent.gguf"), &csv, &["--row-stream"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--row-stream requires --moe-stream"), "{err}");
}

#[test]
fn row_stream_is_refused_with_decide() {
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .args(["-m", "/nonexistent.gguf", "--session", "--decide"])
        .args(["--moe-stream", "--row-stream"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--row-stream cannot be combined with --decide"),
        "{err}"
    );
}
