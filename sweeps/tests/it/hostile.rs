//! A hostile-input suite generated at test time: bad values of every manifest key, huge grids
//! (in the manifest and in `bmoe-bench run`'s comma lists), campaign names that climb out of
//! `results/`, and torn, garbage or unrelated `results.jsonl` lines and bad `metrics.csv`
//! durations under `report`. Every case runs the real binary under a 1 GiB address-space cap
//! and a wall-clock limit; it must end without a panic or an abort, quickly, and with either a
//! clear error (`error:` naming the manifest and line, then a `hint:`) or a stated exclusion.
//! The summary line (`hostile: N cases, F failed`) is printed for the closing note.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::sweep_common::*;

/// The valid manifest every manifest case edits. Line numbers matter: cases name them.
const BASE: [&str; 10] = [
    r#"name = "hostile""#, // 1
    r#"binary = "./fake-cli""#,
    "[[model]]",
    r#"id = "m""#,
    r#"path = "m.gguf""#, // 5
    "[axes.cache]",
    r#"flag = "--cache-mb""#,
    "[[sweep]]",
    r#"name = "s""#,
    "axes = { cache = [0, 8] }", // 10
];

/// What a case must end in.
enum Want {
    /// Exit status 1, `error:` naming `M.toml:LINE` (any of the lines given; empty = any line
    /// of the manifest), the text, then a `hint:` line.
    Refused(&'static [usize], String),
    /// Exit status 0 and the text on stderr (a stated exclusion or note).
    Noted(String),
    /// Exit status 1 with the text and a `hint:` (errors that are not about a manifest line).
    Failed(String),
}

struct Case {
    name: String,
    /// Manifest text (written as `M.toml`), if the case has one.
    manifest: Option<String>,
    /// bmoe-bench arguments.
    args: Vec<String>,
    want: Want,
}

/// The base manifest with line `n` (1-based) replaced by `with` (`None` = removed) and `extra`
/// lines appended.
fn edit(n: usize, with: Option<&str>, extra: &[&str]) -> String {
    let mut lines: Vec<String> = BASE.iter().map(|s| (*s).to_string()).collect();
    match with {
        Some(w) => lines[n - 1] = w.to_string(),
        None => {
            lines.remove(n - 1);
        }
    }
    lines.extend(extra.iter().map(|s| (*s).to_string()));
    lines.join("\n") + "\n"
}

fn appended(extra: &[&str]) -> String {
    let mut lines: Vec<String> = BASE.iter().map(|s| (*s).to_string()).collect();
    lines.extend(extra.iter().map(|s| (*s).to_string()));
    lines.join("\n") + "\n"
}

fn check_case(name: &str, manifest: String, want: Want) -> Case {
    Case {
        name: name.to_string(),
        manifest: Some(manifest),
        args: vec!["sweep".into(), "M.toml".into(), "--check".into()],
        want,
    }
}

fn refused(lines: &'static [usize], text: &str) -> Want {
    Want::Refused(lines, text.to_string())
}

/// Bad values of every run setting, the cooldown, the analysis, the excludes, files.
fn manifest_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for bad in ["0", "-5", "nan", "inf", "-inf", "0.0"] {
        v.push(check_case(
            &format!("timeout_s = {bad}"),
            appended(&[&format!("timeout_s = {bad}")]),
            refused(&[11], "timeout_s"),
        ));
    }
    v.push(check_case(
        "n_predict = 0",
        appended(&["n_predict = 0"]),
        refused(&[11], "n_predict"),
    ));
    v.push(check_case(
        "[defaults] n_predict = 0",
        edit(3, Some("[defaults]\nn_predict = 0\n[[model]]"), &[]),
        refused(&[4], "n_predict"),
    ));
    v.push(check_case(
        "session n_predict = 0",
        appended(&[r#"session = { prompts = ["hi"], n_predict = 0 }"#]),
        refused(&[11], "n_predict"),
    ));
    for (key, bad) in [
        ("fixed_s", "-1"),
        ("fixed_s", "nan"),
        ("fixed_s", "inf"),
        ("poll_s", "-1"),
        ("poll_s", "nan"),
        ("poll_s", "0"),
        ("poll_s", "inf"),
        ("max_wait_s", "-5"),
        ("max_wait_s", "nan"),
        ("max_wait_s", "inf"),
    ] {
        v.push(check_case(
            &format!("cooldown {key} = {bad}"),
            appended(&[&format!(
                r#"cooldown = {{ mode = "condition", {key} = {bad}, until = {{ load1_max = 2 }} }}"#
            )]),
            refused(&[11], key),
        ));
    }
    v.push(check_case(
        "cooldown fixed mode fixed_s = -3",
        appended(&[r#"cooldown = { mode = "fixed", fixed_s = -3 }"#]),
        refused(&[11], "fixed_s"),
    ));
    v.push(check_case(
        "cooldown until load1_max = nan",
        appended(&[r#"cooldown = { mode = "condition", until = { load1_max = nan } }"#]),
        refused(&[11], "load1_max"),
    ));
    v.push(check_case(
        "exclude with an unknown key",
        appended(&["exclude = [{ cahce = 8 }]"]),
        refused(&[11], "cahce"),
    ));
    v.push(check_case(
        "exclude with a value no cell has",
        appended(&["exclude = [{ cache = 99 }]"]),
        refused(&[11], "99"),
    ));
    v.push(check_case(
        "exclude of an undeclared model",
        appended(&[r#"exclude = [{ model = "nope", cache = 8 }]"#]),
        refused(&[11], "nope"),
    ));
    v.push(check_case(
        "missing model file",
        edit(5, Some(r#"path = "nope.gguf""#), &[]),
        refused(&[3, 4, 5], "nope.gguf"),
    ));
    v.push(check_case(
        "missing binary",
        edit(2, Some(r#"binary = "./nope-cli""#), &[]),
        refused(&[2], "nope-cli"),
    ));
    v.push(check_case(
        "repetitions = 1000000000",
        appended(&["repetitions = 1000000000"]),
        refused(&[8, 9, 11], "--max-runs"),
    ));
    v.push(check_case(
        "warmup runs = 4000000000",
        appended(&["warmup = { runs = 4000000000 }"]),
        refused(&[8, 9, 11], "--max-runs"),
    ));
    // 1000^4 = 10^12 cells.
    let values = (0..1000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let grid =
        format!("axes = {{ a = [{values}], b = [{values}], c = [{values}], d = [{values}] }}");
    let mut defs = Vec::new();
    for a in ["a", "b", "c", "d"] {
        defs.push(format!("[axes.{a}]\nflag = \"--{a}\""));
    }
    let huge = edit(6, Some(&format!("{}\n[axes.cache]", defs.join("\n"))), &[])
        .replace("axes = { cache = [0, 8] }", &grid);
    v.push(check_case(
        "10^12-cell grid",
        huge,
        refused(&[], "--max-runs"),
    ));
    v.push(check_case(
        "[analysis] ci = 2",
        appended(&["[analysis]", "ci = 2"]),
        refused(&[11, 12], "ci"),
    ));
    v.push(check_case(
        "[analysis] ci = 0",
        appended(&["[analysis]", "ci = 0"]),
        refused(&[11, 12], "ci"),
    ));
    v.push(check_case(
        "[analysis] resamples = 10^12",
        appended(&["[analysis]", "resamples = 1000000000000"]),
        refused(&[11, 12], "resamples"),
    ));
    v.push(check_case(
        "empty campaign name",
        edit(1, Some(r#"name = """#), &[]),
        refused(&[1], "name"),
    ));
    v.push(check_case(
        "[analysis] baseline naming no cell",
        appended(&["[analysis]", r#"baseline = "nope""#]),
        refused(&[11, 12], "nope"),
    ));
    v.push(check_case(
        "binary axis mapping to a missing binary",
        edit(
            6,
            Some("[axes.build]\nkind = \"binary\"\nmap = { a = \"./gone-cli\" }\n[axes.cache]"),
            &[r#"cells = [{ cell = "x", build = "a" }]"#],
        ),
        refused(&[6], "gone-cli"),
    ));
    // Already refused before this suite: kept so a regression shows.
    for (what, with, lines, text) in [
        (
            "ssh device without host",
            "[[device]]\nid = \"d\"\nkind = \"ssh\"\n[[model]]",
            &[3usize][..],
            "host",
        ),
        (
            "device port 70000",
            "[[device]]\nid = \"d\"\nkind = \"ssh\"\nhost = \"h\"\nport = 70000\n[[model]]",
            &[7][..],
            "port",
        ),
        (
            "device kind telnet",
            "[[device]]\nid = \"d\"\nkind = \"telnet\"\n[[model]]",
            &[5][..],
            "telnet",
        ),
    ] {
        v.push(check_case(
            what,
            edit(3, Some(with), &[]),
            refused(lines, text),
        ));
    }
    for (what, with, text) in [
        ("unknown preset", r#"preset = "nope""#, "nope"),
        ("model flags not a list", r#"flags = "x""#, "flags"),
    ] {
        v.push(check_case(
            what,
            edit(5, Some(with), &[]),
            refused(&[3, 4, 5], text),
        ));
    }
    v.push(check_case(
        "model with path and preset",
        edit(5, Some("path = \"m.gguf\"\npreset = \"tiny\""), &[]),
        refused(&[3, 4, 5], "exactly one"),
    ));
    v.push(check_case(
        "axis that renders nothing",
        edit(7, Some("kind = \"flag\""), &[]),
        refused(&[6, 7], "cache"),
    ));
    for (what, line, text) in [
        ("empty device list", "devices = []", "device"),
        ("undeclared model", r#"models = ["nope"]"#, "nope"),
        (
            "link with an unknown axis",
            r#"link = [["cache", "nope"]]"#,
            "nope",
        ),
        ("tag with an unknown placeholder", r#"tag = "{zzz}""#, "zzz"),
        (
            "explicit order without sequence",
            r#"order = { mode = "explicit" }"#,
            "sequence",
        ),
        (
            "explicit order naming no cell",
            r#"order = { mode = "explicit", sequence = ["nope"] }"#,
            "nope",
        ),
        (
            "order mode sideways",
            r#"order = { mode = "sideways" }"#,
            "sideways",
        ),
        ("cell name not a string", "cells = [{ cell = 3 }]", "cell"),
        (
            "per_model of an unknown model",
            "per_model = { nope = { cache = [1] } }",
            "nope",
        ),
        (
            "empty session prompts",
            "session = { prompts = [] }",
            "prompts",
        ),
        (
            "missing session prompts file",
            r#"session = { prompts = "nope.txt" }"#,
            "nope.txt",
        ),
        ("mem_limit = 0", r#"mem_limit = "0""#, "mem_limit"),
        ("repetitions = -1", "repetitions = -1", "repetitions"),
        ("n_predict too big", "n_predict = 99999999999", "n_predict"),
        ("unknown key", "repetitons = 3", "repetitons"),
    ] {
        v.push(check_case(
            what,
            appended(&[line]),
            refused(&[8, 9, 10, 11], text),
        ));
    }
    v.push(check_case(
        "repetitions = 0",
        appended(&["repetitions = 0"]),
        refused(&[8, 9, 11], "repetitions"),
    ));
    v.push(check_case(
        "mem_limit = lots",
        appended(&[r#"mem_limit = "lots""#]),
        refused(&[11], "mem_limit"),
    ));
    v.push(check_case(
        "timeout_s as a string",
        appended(&[r#"timeout_s = "ten""#]),
        refused(&[11], "timeout_s"),
    ));
    v.push(check_case(
        "prompt_file missing",
        appended(&[r#"prompt_file = "nope.txt""#]),
        refused(&[11], "nope.txt"),
    ));
    v
}

/// Campaign names that would write outside `results/` (run for real: nothing may appear
/// outside the results directory).
fn traversal_cases() -> Vec<Case> {
    let mut v: Vec<Case> = [
        "../../../escaped",
        "/tmp/bmoe-hostile-abs-escape",
        "a/../../escaped2",
    ]
    .iter()
    .map(|name| Case {
        name: format!("campaign name {name:?}"),
        manifest: Some(edit(
            1,
            Some(&format!("name = {name:?}")),
            &["n_predict = 2"],
        )),
        args: vec!["sweep".into(), "M.toml".into()],
        want: Want::Noted("results".into()),
    })
    .collect();
    // Nothing is left of `..` to name a directory.
    v.push(check_case(
        "refused campaign name \"..\"",
        edit(1, Some(r#"name = "..""#), &[]),
        refused(&[1], "name"),
    ));
    v
}

/// `bmoe-bench run` with lists that cross into huge products.
fn run_cases() -> Vec<Case> {
    let many = (1..=3000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let base = |extra: &[&str]| {
        let mut a: Vec<String> = ["run", "-m", "m.gguf", "--binary", "./fake-cli", "-o", "rr"]
            .iter()
            .map(|s| (*s).to_string())
            .collect();
        a.extend(extra.iter().map(|s| (*s).to_string()));
        a
    };
    vec![
        Case {
            name: "run -r 1000000000".into(),
            manifest: None,
            args: base(&["-r", "1000000000"]),
            want: Want::Failed("--max-runs".into()),
        },
        Case {
            name: "run with 3000 × 3000 × 3000 lists".into(),
            manifest: None,
            args: base(&[
                "-n",
                &many,
                "-t",
                &many,
                "--set",
                &format!("cache-mb={many}"),
            ]),
            want: Want::Failed("--max-runs".into()),
        },
        Case {
            name: "run -n 0".into(),
            manifest: None,
            args: base(&["-n", "0"]),
            want: Want::Failed("-n".into()),
        },
    ]
}

/// A report case: `mutate` edits a copy of a finished results directory.
struct ReportCase {
    name: &'static str,
    mutate: fn(&Path),
    args: &'static [&'static str],
    want: Want,
}

fn append_to(p: &Path, text: &str) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(p)
        .expect("open");
    f.write_all(text.as_bytes()).expect("append");
}

fn first_ok_csv(res: &Path) -> PathBuf {
    res.join("s/m_cache0/r1/metrics.csv")
}

/// Replaces the `wall_ms` of the CSV's third data row by `v`.
fn set_wall(res: &Path, v: &str) {
    let p = first_ok_csv(res);
    let text = std::fs::read_to_string(&p).expect("csv");
    let mut data = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(|c: char| c.is_ascii_digit()) {
                data += 1;
                if data == 3 {
                    let mut f: Vec<&str> = l.split(',').collect();
                    f[2] = v;
                    return f.join(",");
                }
            }
            l.to_string()
        })
        .collect();
    std::fs::write(&p, out.join("\n") + "\n").expect("write");
}

fn report_cases() -> Vec<ReportCase> {
    vec![
        ReportCase {
            name: "torn last line",
            mutate: |r| append_to(&r.join("results.jsonl"), "{\"campaign\":\"hostile\",\"swe"),
            args: &[],
            want: Want::Noted("results.jsonl:5".into()),
        },
        ReportCase {
            name: "garbage line",
            mutate: |r| {
                let p = r.join("results.jsonl");
                let t = std::fs::read_to_string(&p).expect("read");
                std::fs::write(&p, format!("\u{1}\u{2}garbage\n{t}")).expect("write");
            },
            args: &[],
            want: Want::Noted("results.jsonl:1".into()),
        },
        ReportCase {
            name: "unrelated JSON line",
            mutate: |r| append_to(&r.join("results.jsonl"), "{\"hello\":\"world\"}\n"),
            args: &[],
            want: Want::Noted("results.jsonl:5".into()),
        },
        ReportCase {
            name: "bad tok_s",
            mutate: |r| {
                let p = r.join("results.jsonl");
                let t = std::fs::read_to_string(&p).expect("read");
                let first = t.lines().next().unwrap_or_default();
                let bad = first.replacen("\"tok_s\":", "\"tok_s\":\"fast\",\"x\":", 1);
                append_to(&p, &format!("{bad}\n"));
            },
            args: &[],
            want: Want::Noted("results.jsonl:5".into()),
        },
        ReportCase {
            name: "negative tok_s",
            mutate: |r| {
                let p = r.join("results.jsonl");
                let t = std::fs::read_to_string(&p).expect("read");
                let first = t.lines().next().unwrap_or_default().to_string();
                let v: serde_json::Value = serde_json::from_str(&first).expect("json");
                let mut v = v;
                v["tok_s"] = serde_json::json!(-3.0);
                v["rep"] = serde_json::json!("r9");
                append_to(&p, &format!("{v}\n"));
            },
            args: &[],
            want: Want::Noted("results.jsonl:5".into()),
        },
        ReportCase {
            name: "only unrelated JSON",
            mutate: |r| {
                std::fs::write(r.join("results.jsonl"), "{\"hello\":1}\n[1,2]\n").expect("w")
            },
            args: &[],
            want: Want::Failed("no valid".into()),
        },
        ReportCase {
            name: "only garbage",
            mutate: |r| std::fs::write(r.join("results.jsonl"), "\u{0}\u{0}\u{7f}").expect("w"),
            args: &[],
            want: Want::Failed("no valid".into()),
        },
        ReportCase {
            name: "NaN wall_ms",
            mutate: |r| set_wall(r, "NaN"),
            args: &[],
            want: Want::Noted("wall_ms".into()),
        },
        ReportCase {
            name: "negative wall_ms",
            mutate: |r| set_wall(r, "-50.0"),
            args: &[],
            want: Want::Noted("wall_ms".into()),
        },
        ReportCase {
            name: "inf wall_ms",
            mutate: |r| set_wall(r, "inf"),
            args: &[],
            want: Want::Noted("wall_ms".into()),
        },
        ReportCase {
            name: "--resamples 10^12",
            mutate: |_| {},
            args: &["--resamples", "1000000000000"],
            want: Want::Failed("--resamples".into()),
        },
    ]
}

/// Runs `bmoe-bench ARGS` in `dir` with at most 1 GiB of address space and 60 s.
fn capped(dir: &Path, args: &[String]) -> (Option<i32>, String, String, Duration) {
    let mut cmd = format!(
        "ulimit -v 1048576 && exec '{}'",
        env!("CARGO_BIN_EXE_bmoe-bench")
    );
    for a in args {
        cmd.push_str(&format!(" '{}'", a.replace('\'', "'\\''")));
    }
    let t0 = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&cmd)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("BMOE_CACHE_DIR", dir.join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (mut out, mut err) = (
        child.stdout.take().expect("o"),
        child.stderr.take().expect("e"),
    );
    let ot = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut s);
        s
    });
    let et = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = String::from_utf8_lossy(&ot.join().unwrap_or_default()).into_owned();
    let e = String::from_utf8_lossy(&et.join().unwrap_or_default()).into_owned();
    (status.code(), o, e, t0.elapsed())
}

/// Why the outcome misses `want`, or `None` when it meets it.
fn judge(want: &Want, code: Option<i32>, stderr: &str, took: Duration) -> Option<String> {
    if stderr.contains("panicked") || code.is_none() || code == Some(101) || code == Some(134) {
        return Some(format!("panic/abort (exit {code:?})"));
    }
    if took > Duration::from_secs(30) {
        return Some(format!("took {took:?}"));
    }
    match want {
        Want::Refused(lines, what) => {
            if code != Some(1) {
                return Some(format!("accepted (exit {code:?})"));
            }
            let err = stderr
                .lines()
                .find(|l| l.contains("error:") && l.contains("M.toml:"));
            let Some(err) = err else {
                return Some("no `error:` line naming M.toml:LINE".into());
            };
            let line = err
                .split("M.toml:")
                .nth(1)
                .and_then(|r| r.split(':').next())
                .and_then(|n| n.parse::<usize>().ok());
            match line {
                None => return Some(format!("no line number: {err}")),
                Some(l) if !lines.is_empty() && !lines.contains(&l) => {
                    return Some(format!("line {l}, expected one of {lines:?}: {err}"));
                }
                _ => {}
            }
            if !stderr.contains(what.as_str()) {
                return Some(format!("error does not mention `{what}`"));
            }
            if !stderr.contains("hint:") {
                return Some("no hint".into());
            }
            None
        }
        Want::Noted(what) => {
            if code != Some(0) {
                return Some(format!("exit {code:?}"));
            }
            (!stderr.contains(what.as_str())).then(|| format!("stderr does not say `{what}`"))
        }
        Want::Failed(what) => {
            if code != Some(1) {
                return Some(format!("exit {code:?}, expected a refusal"));
            }
            if !stderr.contains(what.as_str()) || !stderr.contains("hint:") {
                return Some(format!("error does not mention `{what}` with a hint"));
            }
            None
        }
    }
}

/// Every file under `dir` (recursively).
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn hostile_inputs_end_in_clear_errors_or_stated_exclusions() {
    let t = tempfile::tempdir().expect("tmp");
    // Each case gets a fresh work directory three levels deep, so `../../../x` stays inside
    // the temporary directory, where the test can see whether anything landed.
    let mut failures: Vec<String> = Vec::new();
    let mut n = 0;
    let work = |i: usize| -> PathBuf {
        let w = t.path().join(format!("c{i}")).join("a").join("b");
        std::fs::create_dir_all(&w).expect("mkdir");
        fake_engine(&w, 0.0);
        std::fs::write(w.join("m.gguf"), b"GGUF").expect("model");
        w
    };
    let base = check_case(
        "the base manifest",
        appended(&[]),
        Want::Noted(String::new()),
    );
    let mut cases = vec![base];
    cases.extend(manifest_cases());
    cases.extend(traversal_cases());
    cases.extend(run_cases());
    for c in &cases {
        n += 1;
        let w = work(n);
        if let Some(m) = &c.manifest {
            std::fs::write(w.join("M.toml"), m).expect("manifest");
        }
        let root = t.path().join(format!("c{n}"));
        let before = tree(&root);
        let (code, _out, err, took) = capped(&w, &c.args);
        let mut why = judge(&c.want, code, &err, took);
        if why.is_none() && c.name.starts_with("campaign name") {
            // Nothing new outside <work>/results, nothing in /tmp under the absolute name.
            let after = tree(&root);
            let results = w.join("results");
            let outside: Vec<&PathBuf> = after
                .iter()
                .filter(|p| !before.contains(p) && !p.starts_with(&results))
                .filter(|p| !p.starts_with(w.join("cache")) && !p.ends_with("calls.log"))
                .collect();
            if !outside.is_empty() || Path::new("/tmp/bmoe-hostile-abs-escape").exists() {
                why = Some(format!("wrote outside results/: {outside:?}"));
            } else if !after
                .iter()
                .any(|p| p.starts_with(&results) && p.ends_with("results.jsonl"))
            {
                why = Some("no results.jsonl under results/".into());
            }
        }
        if let Some(why) = why {
            failures.push(format!(
                "{}: {why}\n    stderr: {}",
                c.name,
                err.trim().replace('\n', "\n    ")
            ));
        }
    }
    // Report cases: one real sweep (fake engine), then a mutated copy per case.
    let src = t.path().join("report-src");
    std::fs::create_dir_all(&src).expect("mkdir");
    fake_engine(&src, 0.0);
    std::fs::write(src.join("m.gguf"), b"GGUF").expect("model");
    std::fs::write(
        src.join("M.toml"),
        appended(&["n_predict = 6", "repetitions = 2"]),
    )
    .expect("manifest");
    let o = run(&src, &["sweep", "M.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(records(&src.join("res")).len(), 4);
    for rc in report_cases() {
        n += 1;
        let w = t.path().join(format!("r{n}"));
        let cp = Command::new("cp")
            .arg("-r")
            .arg(src.join("res"))
            .arg(&w)
            .status()
            .expect("cp");
        assert!(cp.success());
        (rc.mutate)(&w);
        let mut args = vec!["report".to_string(), w.to_string_lossy().into_owned()];
        args.extend(rc.args.iter().map(|s| (*s).to_string()));
        let (code, _out, err, took) = capped(t.path(), &args);
        if let Some(why) = judge(&rc.want, code, &err, took) {
            failures.push(format!(
                "report {}: {why}\n    stderr: {}",
                rc.name,
                err.trim().replace('\n', "\n    ")
            ));
        }
    }
    let _ = std::fs::remove_dir_all("/tmp/bmoe-hostile-abs-escape");
    eprintln!("hostile: {n} cases, {} failed", failures.len());
    for f in &failures {
        eprintln!("  FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {n} hostile cases failed",
        failures.len()
    );
}
