//! `--auto` end to end through the real binary (issue #18 §3): on a model that fits it runs
//! plain and says why; on a model larger than the memory it may use (a real memory cgroup, or
//! the documented test-only MemAvailable override where no cgroup can be made) it streams with
//! the settings it prints, and the output equals the resident run's, byte for byte; flags
//! given explicitly win. The rule itself is unit-tested over many facts (engine/src/auto).

use crate::cgroup::TestCgroup;
use bmoe_gguf::GgmlType;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsFile;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The test-only override of the usable memory `--auto` reads (engine/src/auto/measure.rs).
const MEM_OVERRIDE_ENV: &str = "BMOE_TEST_AUTO_MEM_AVAILABLE_MB";

struct Models {
    dir: tempfile::TempDir,
    tiny: PathBuf,
    /// F32 experts, 64 per layer, 4 layers: about 200 MiB, most of it experts.
    big: PathBuf,
}

fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        // under the target dir, not /tmp: tmpfs refuses O_DIRECT (the lane probe needs it)
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let synth = |name: &str, edit: &dyn Fn(&mut SynthOptions)| {
            let mut o = SynthOptions::preset(Preset::Tiny);
            edit(&mut o);
            write_model(&o, &dir.path().join(name))
                .expect("synthesise model")
                .paths[0]
                .clone()
        };
        let tiny = synth("tiny.gguf", &|_| {});
        let big = synth("big.gguf", &|o| {
            o.expert_type = GgmlType::F32;
            o.n_expert = 64;
            o.n_layer = 4;
        });
        Models { dir, tiny, big }
    })
}

const BASE: [&str; 7] = [
    "-p",
    "Hello world, auto",
    "-c",
    "256",
    "-n",
    "8",
    "--dump-logits-hash",
];

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_bmoe-cli"))
}

fn finish(c: &mut Command, what: &str) -> (String, String) {
    let out: Output = c.output().expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what} failed:\n{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

fn logits(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("logits-hash "))
        .collect()
}

/// `--auto`'s lines, without the `bmoe: auto: ` prefix.
fn auto_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("bmoe: auto: "))
        .collect()
}

/// The flags `--auto` says reproduce its run.
fn same_run(stderr: &str) -> Vec<String> {
    auto_lines(stderr)
        .iter()
        .find_map(|l| l.strip_prefix("the same run without --auto: "))
        .expect("the reproducing flags")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn value<'a>(flags: &'a [String], flag: &str) -> Option<&'a str> {
    let i = flags.iter().position(|f| f == flag)?;
    flags.get(i + 1).map(String::as_str)
}

/// The plain (resident) run the auto run must equal, at its thread count.
fn resident(model: &Path, threads: &str) -> String {
    let (_, err) = finish(
        Command::new(bin())
            .arg("-m")
            .arg(model)
            .args(BASE)
            .args(["-t", threads]),
        "resident run",
    );
    logits(&err).join("\n")
}

#[test]
fn a_model_that_fits_runs_plain_and_auto_says_why() {
    let m = models();
    let csv = m.dir.path().join("fits.csv");
    let (_, err) = finish(
        Command::new(bin())
            .arg("-m")
            .arg(&m.tiny)
            .args(BASE)
            .args(["--auto", "--csv", csv.to_str().unwrap()])
            .env_remove(MEM_OVERRIDE_ENV),
        "auto on the tiny model",
    );
    let lines = auto_lines(&err);
    assert!(
        lines[0].starts_with("streaming off — the model (") && lines[0].ends_with("[measured]"),
        "{lines:?}"
    );
    assert!(lines[0].contains("fits the memory"), "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("threads ")), "{lines:?}");
    // a plain run has no streaming settings to explain
    for s in ["cache ", "dense ", "overlap ", "io-threads "] {
        assert!(!lines.iter().any(|l| l.starts_with(s)), "{s}: {lines:?}");
    }
    let flags = same_run(&err);
    assert!(!flags.contains(&"--moe-stream".to_string()), "{flags:?}");
    let threads = value(&flags, "-t").expect("-t");
    let f = MetricsFile::read(&csv).expect("CSV");
    assert_eq!(f.info.moe_stream, Some(false));
    assert_eq!(
        f.info.threads.map(|t| t.to_string()).as_deref(),
        Some(threads)
    );
    assert_eq!(logits(&err).join("\n"), resident(&m.tiny, threads));
}

#[test]
fn a_model_larger_than_its_memory_streams_with_the_printed_settings_and_matches_resident() {
    let m = models();
    let model_bytes = std::fs::metadata(&m.big).unwrap().len();
    let limit: u64 = 160 << 20;
    assert!(model_bytes > limit + (32 << 20), "the model must not fit");
    let csv = m.dir.path().join("oversize.csv");
    let cg = TestCgroup::create("auto", limit);
    let mut cmd = match &cg {
        Ok(cg) => cg.command(bin()),
        Err(why) => {
            // no cgroup here: the documented override stands in for a small machine
            eprintln!("no memory cgroup ({why}): using {MEM_OVERRIDE_ENV}");
            let mut c = Command::new(bin());
            c.env(MEM_OVERRIDE_ENV, "160");
            c
        }
    };
    cmd.arg("-m")
        .arg(&m.big)
        .args(BASE)
        .args(["--auto", "--csv", csv.to_str().unwrap()]);
    let (_, err) = finish(&mut cmd, "auto on the oversize model");
    let lines = auto_lines(&err);
    assert!(
        lines[0].starts_with("streaming on — the model (") && lines[0].contains("larger than"),
        "{lines:?}"
    );
    if cg.is_ok() {
        assert!(lines[0].contains("memory cgroup"), "{lines:?}");
    }
    for s in [
        "cache auto — ",
        "dense ",
        "overlap ",
        "io-threads ",
        "threads ",
    ] {
        let l = lines
            .iter()
            .find(|l| l.starts_with(s))
            .unwrap_or_else(|| panic!("{s}: {lines:?}"));
        assert!(l.ends_with("[measured]") || l.ends_with("[assumed]"), "{l}");
    }
    let lanes = lines.iter().find(|l| l.starts_with("io-threads ")).unwrap();
    assert!(
        lanes.contains("O_DIRECT reads of") && lanes.ends_with("[measured]"),
        "the probe ran on the model file: {lanes}"
    );
    let flags = same_run(&err);
    let f = MetricsFile::read(&csv).expect("CSV");
    // the preamble records the resolved values through its usual keys
    assert_eq!(f.info.moe_stream, Some(true));
    assert_eq!(f.info.cache_auto, Some(true));
    assert_eq!(f.info.overlap, Some(true));
    assert_eq!(
        f.info.io_threads.map(|t| t.to_string()).as_deref(),
        value(&flags, "--io-threads")
    );
    assert_eq!(
        f.info.dense_weights.as_deref(),
        value(&flags, "--dense-weights")
    );
    let threads = value(&flags, "-t").expect("-t").to_string();
    assert_eq!(f.info.threads.map(|t| t.to_string()), Some(threads.clone()));
    // lossless: the resident run's tokens and logits, byte for byte
    assert_eq!(logits(&err).join("\n"), resident(&m.big, &threads));
}

#[test]
fn flags_given_explicitly_win_over_auto() {
    let m = models();
    let csv = m.dir.path().join("given.csv");
    let (_, err) = finish(
        Command::new(bin())
            .arg("-m")
            .arg(&m.tiny)
            .args(BASE)
            .args([
                "--auto",
                "--moe-stream",
                "--io-threads",
                "1",
                "-t",
                "1",
                "--csv",
                csv.to_str().unwrap(),
            ])
            .env_remove(MEM_OVERRIDE_ENV),
        "auto with given flags",
    );
    let lines = auto_lines(&err);
    for flag in ["--moe-stream", "--io-threads", "-t/--threads"] {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!(
                "{flag} given on the command line: kept (--auto alone: "
            ))),
            "{flag}: {lines:?}"
        );
    }
    let f = MetricsFile::read(&csv).expect("CSV");
    assert_eq!(f.info.moe_stream, Some(true));
    assert_eq!(f.info.io_threads, Some(1));
    assert_eq!(f.info.threads, Some(1));
    // what was not given is still auto's: the cache is sized, overlap is on
    assert_eq!(f.info.cache_auto, Some(true));
    assert_eq!(f.info.overlap, Some(true));
    assert_eq!(logits(&err).join("\n"), resident(&m.tiny, "1"));
}
