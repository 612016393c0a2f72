//! `bmoe-bench sweep` against the real `bmoe-cli` (`$BMOE_CLI`): `--check` refuses a flag the
//! engine does not take, naming the cell and the manifest entry; a run the engine refuses
//! records its `error:` line and hint, not only the last stderr line; `argv.json` and
//! `run.json` name the run's final directory.

use std::path::Path;

use crate::sweep_common::*;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

/// A one-sweep manifest on the tiny preset: `--cache-mb` spelt `cache_flag`, `flags` extra.
fn manifest(cli: &Path, cache_flag: &str, flags: &str) -> String {
    format!(
        r#"name = "flags"
binary = "{}"
[defaults]
n_predict = 4
[[model]]
id = "tiny"
preset = "tiny"
[axes.cache]
flag = "{cache_flag}"
[[sweep]]
name = "s"
flags = ["-t", "2", "--ignore-eos"{flags}]
axes = {{ cache = [0, 8] }}
"#,
        cli.display()
    )
}

#[test]
fn check_refuses_flags_the_engine_does_not_take() {
    let Some(cli) = real_cli_or_skip("check_refuses_flags_the_engine_does_not_take", "--csv")
    else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");

    // The manifest's real flags check clean (so the engine's help was read, not ignored).
    write(t.path(), "good.toml", &manifest(&cli, "--cache-mb", ""));
    let o = run(t.path(), &["sweep", "good.toml", "--check"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("not checked"),
        "{}",
        text(&o)
    );

    // A misspelt axis flag and a misspelt fixed flag: both named, with where they come from.
    write(
        t.path(),
        "bad.toml",
        &manifest(&cli, "--cache-mbb", ", \"--moe-streem\""),
    );
    for mode in ["--check", "--dry-run"] {
        let o = run(t.path(), &["sweep", "bad.toml", mode]);
        assert_eq!(o.status.code(), Some(1), "{mode}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("bad.toml: 2 argument(s) the engine does not take:"),
            "{mode}: {err}"
        );
        assert!(
            err.contains(&format!(
                "sweep `s`, cell `tiny_cache0` (and 1 more cell(s)): `--cache-mbb` from axis `cache` ([axes.cache], line 8) is not a flag of {}; did you mean `--cache-mb`?",
                cli.display()
            )),
            "{mode}: {err}"
        );
        assert!(
            err.contains("`--moe-streem` from `flags` of sweep `s` is not a flag of")
                && err.contains("did you mean `--moe-stream`?"),
            "{mode}: {err}"
        );
        assert!(
            err.contains("hint: fix the flag in the manifest"),
            "{mode}: {err}"
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).is_empty(),
            "{mode}: nothing is printed as ok: {}",
            text(&o)
        );
    }
    assert!(!t.path().join("results").exists(), "nothing ran");
}

#[test]
fn an_engine_whose_help_is_unreadable_is_reported_not_checked() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 0.0);
    write(
        t.path(),
        "m.toml",
        "name = \"m\"\nbinary = \"./fake-cli\"\n[[model]]\nid = \"tiny\"\npreset = \"tiny\"\n[[sweep]]\nname = \"s\"\nflags = [\"--anything\"]\n",
    );
    let o = run(t.path(), &["sweep", "m.toml", "--check"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: m.toml: flags not checked against engine `")
            && err.contains("lists no -m/--model flag"),
        "{err}"
    );
}

#[test]
fn a_refused_run_records_the_engines_error_line_and_hint() {
    let Some(cli) = real_cli_or_skip(
        "a_refused_run_records_the_engines_error_line_and_hint",
        "--csv",
    ) else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    write(t.path(), "bad.toml", &manifest(&cli, "--cache-mbb", ""));
    let o = run(t.path(), &["sweep", "bad.toml", "-o", "res"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let want = "exit status 2; error: unexpected argument '--cache-mbb' found; tip: a similar argument exists: '--cache-mb'; hint: bmoe-cli --help lists every flag";
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(want), "progress line: {err}");
    let recs = records(&t.path().join("res"));
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(r["error"], want, "{r}");
    }
    let o = run(t.path(), &["report", "res"]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn argv_json_and_run_json_name_the_final_run_directory() {
    let Some(cli) = real_cli_or_skip(
        "argv_json_and_run_json_name_the_final_run_directory",
        "--csv",
    ) else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    write(t.path(), "good.toml", &manifest(&cli, "--cache-mb", ""));
    let o = run(t.path(), &["sweep", "good.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    for cell in ["tiny_cache0", "tiny_cache8"] {
        let dir = t.path().join("res/s").join(cell).join("r1");
        let read = |f: &str| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(dir.join(f)).expect(f)).expect(f)
        };
        let (argv, run) = (read("argv.json"), read("run.json"));
        assert_eq!(argv["argv"], run["argv"], "{cell}");
        let words: Vec<&str> = argv["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        let csv = words
            .iter()
            .position(|w| *w == "--csv")
            .and_then(|i| words.get(i + 1))
            .expect("--csv in argv");
        let final_csv = dir.join("metrics.csv").canonicalize().expect("metrics.csv");
        assert_eq!(
            Path::new(csv).canonicalize().ok(),
            Some(final_csv),
            "{cell}: --csv names the final file"
        );
        let whole = serde_json::to_string(&argv).expect("json");
        assert!(
            !whole.contains(".r1.tmp"),
            "{cell}: temporary path left: {whole}"
        );
        assert!(
            whole.contains(&dir.canonicalize().expect("dir").display().to_string()),
            "{cell}: device_command runs in the final directory too: {whole}"
        );
    }
}
