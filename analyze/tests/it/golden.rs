//! Golden conformance: every reference run in `shared/reference-outputs/` whose script this crate
//! ports and whose input is in `shared/realdata/` is re-run through `bmoe-analyze` and must print
//! the same stdout (and the same exit success). The argv of each run is read from the table in
//! `TIMINGS.md`. Cases where we deliberately differ from the reference (analysis.md §12 defects,
//! errors moved to stderr) are listed in `deviation()` with the behaviour we assert instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn shared() -> Option<PathBuf> {
    let p = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    p.join("reference-outputs/TIMINGS.md")
        .is_file()
        .then_some(p)
}

struct Case {
    name: String,
    rc: i32,
    script: String,
    args: Vec<String>,
}

fn cases(shared: &Path) -> Vec<Case> {
    let text =
        std::fs::read_to_string(shared.join("reference-outputs/TIMINGS.md")).expect("TIMINGS.md");
    let mut out = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split(" | ").collect();
        if cols.len() < 6 || !line.starts_with("| `") {
            continue;
        }
        let name = cols[0]
            .trim_start_matches("| ")
            .trim_matches('`')
            .to_string();
        let Ok(rc) = cols[1].trim().parse::<i32>() else {
            continue;
        };
        let argv = cols[cols.len() - 1]
            .trim_end_matches(" |")
            .trim_matches('`');
        let parts: Vec<&str> = argv.split_whitespace().collect();
        if parts.len() < 2 || parts[0] != "python3" || !parts[1].starts_with("scripts/") {
            continue;
        }
        out.push(Case {
            name,
            rc,
            script: parts[1].trim_start_matches("scripts/").to_string(),
            args: parts[2..].iter().map(|s| (*s).to_string()).collect(),
        });
    }
    out
}

enum Expect {
    /// Byte-identical stdout, same exit success.
    Same,
    /// Non-zero exit, nothing on stdout, stderr containing the text.
    ErrorOnStderr(&'static str),
    /// Exit 0; stdout differs from the reference on purpose; stdout must not contain the text.
    DiffersWithout(&'static str),
}

fn deviation(name: &str) -> Expect {
    match name {
        "route-analyze__qwen.route.csv__ERR_turn-1" => {
            Expect::ErrorOnStderr("no rows for phase=decode turn=1")
        }
        "route-analyze__qwen.route.csv__ERR_view-bogus" => Expect::ErrorOnStderr("bogus"),
        // The reference prints empty tables; an empty directory has no run to report.
        "bench-analyze__EMPTYDIR__default" => {
            Expect::ErrorOnStderr("no *.csv file in this directory or its subdirectories")
        }
        "route-replay__qwen.route.csv__ERR_policies-lur" => {
            Expect::ErrorOnStderr("unknown policy lur")
        }
        "route-drop-replay__qwen.metrics__ERR_not-a-route-trace" => {
            Expect::ErrorOnStderr("no n_expert_used")
        }
        "route-drop-replay__NOARGS__usage" => Expect::ErrorOnStderr("Usage"),
        "route-drop-replay__qwen.nanweights.route.csv__default" => Expect::DiffersWithout("nan%"),
        _ => Expect::Same,
    }
}

fn run(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze")
}

/// Our argv, plus where `--csv` and `--markdown` outputs go.
type Translated = (Vec<String>, Option<PathBuf>, Option<PathBuf>);

/// Translate a reference argv into ours; `None` (with a reason) when the case is out of scope.
fn translate(shared: &Path, c: &Case, tmp: &Path) -> Result<Translated, String> {
    let realdata = |a: &str| a.replacen("realdata/", &format!("{}/realdata/", shared.display()), 1);
    let mut args: Vec<String> = Vec::new();
    let mut csv_out = None;
    let mut md_out = None;
    match c.script.as_str() {
        "route-analyze.py" => args.push("route".into()),
        "route-replay.py" => args.push("replay".into()),
        "route-drop-replay.py" => args.push("drop".into()),
        "decode-analyze.py" => {}
        "bench-analyze.py" => {
            args.push("metrics".into());
            let dir = match c.args.first().map(String::as_str) {
                Some("mixed") => shared.join("realdata/bench-analyze-mixed"),
                Some("emptydir") => {
                    let d = tmp.join("emptydir");
                    std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
                    d
                }
                Some(d) => shared.join("realdata").join(d),
                None => return Err("bench-analyze without a directory".into()),
            };
            if !dir.is_dir() {
                return Err(format!("input {} not in shared/realdata", dir.display()));
            }
            let md = tmp.join(format!("{}.md", c.name));
            args.extend([
                dir.display().to_string(),
                "--markdown".into(),
                md.display().to_string(),
            ]);
            return Ok((args, None, Some(md)));
        }
        other => return Err(format!("{other} is not ported by bmoe-analyze")),
    }
    let mut it = c.args.iter();
    while let Some(a) = it.next() {
        if a == "--csv" {
            let out = tmp.join(format!("{}.curve.csv", c.name));
            it.next();
            args.extend(["--csv".into(), out.display().to_string()]);
            csv_out = Some(out);
            continue;
        }
        let a2 = realdata(a);
        if a.starts_with("realdata/") && !Path::new(&a2).exists() && !c.name.contains("NOFILE") {
            return Err(format!("input {a} not in shared/realdata"));
        }
        if a.ends_with(".csv")
            && !a.starts_with("realdata/")
            && !a.starts_with("reference-outputs/")
        {
            return Err(format!("input {a} is not in shared/realdata"));
        }
        args.push(a2);
    }
    md_out.take();
    Ok((args, csv_out, md_out))
}

/// Lines that hold a machine-specific path: compare them up to the path.
fn normalise(text: &str) -> String {
    text.lines()
        .map(|l| {
            for prefix in ["wrote ", "markdown -> "] {
                if l.starts_with(prefix) {
                    return prefix.to_string();
                }
            }
            l.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn golden_reference_outputs() {
    let Some(shared) = shared() else {
        eprintln!("SKIP golden: shared/reference-outputs not found (set BMOE_SHARED)");
        return;
    };
    let refs = shared.join("reference-outputs");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut passed, mut failed, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for c in cases(&shared) {
        let expected_path = refs.join(format!("{}.txt", c.name));
        let Ok(expected) = std::fs::read_to_string(&expected_path) else {
            skipped.push(format!("{} (no reference output)", c.name));
            continue;
        };
        let (args, csv_out, md_out) = match translate(&shared, &c, tmp.path()) {
            Ok(t) => t,
            Err(why) => {
                skipped.push(format!("{}: {why}", c.name));
                continue;
            }
        };
        let out = run(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let mut problems = Vec::new();
        match deviation(&c.name) {
            Expect::Same => {
                if normalise(&stdout) != normalise(&expected) {
                    problems.push(format!(
                        "stdout differs\n--- expected\n{expected}\n--- got\n{stdout}"
                    ));
                }
                if out.status.success() != (c.rc == 0) {
                    problems.push(format!(
                        "exit {:?}, reference {}; stderr: {stderr}",
                        out.status.code(),
                        c.rc
                    ));
                }
                if !out.status.success() && !stderr.contains("error") && !stderr.contains("Usage") {
                    problems.push(format!("failure without an error message: {stderr}"));
                }
            }
            Expect::ErrorOnStderr(text) => {
                if out.status.success() || !stdout.is_empty() || !stderr.contains(text) {
                    problems.push(format!("want exit!=0, empty stdout, stderr with {text:?}; got {:?} {stdout:?} {stderr:?}", out.status.code()));
                }
            }
            Expect::DiffersWithout(text) => {
                if !out.status.success() || stdout.contains(text) || stdout == expected {
                    problems.push(format!(
                        "want exit 0 and stdout without {text:?}; got {:?} {stdout}",
                        out.status.code()
                    ));
                }
            }
        }
        if let Some(csv) = csv_out {
            let want = std::fs::read_to_string(
                refs.join(format!("{}.curve.csv", c.name.trim_end_matches("_csv"))),
            );
            let got = std::fs::read_to_string(&csv);
            if want.is_err() || got.as_ref().ok() != want.as_ref().ok() {
                problems.push("curve CSV differs".into());
            }
        }
        if let Some(md) = md_out {
            let want_name = c.name.replace("__default", "__summary.md");
            if let Ok(want) = std::fs::read_to_string(refs.join(&want_name))
                && std::fs::read_to_string(&md).ok().as_deref() != Some(want.as_str())
            {
                problems.push(format!("markdown differs from {want_name}"));
            }
        }
        if problems.is_empty() {
            passed.push(c.name);
        } else {
            failed.push(format!("{}: {}", c.name, problems.join("\n")));
        }
    }
    eprintln!(
        "golden: {} passed, {} failed, {} skipped",
        passed.len(),
        failed.len(),
        skipped.len()
    );
    for s in &passed {
        eprintln!("  passed {s}");
    }
    for s in &skipped {
        eprintln!("  skipped {s}");
    }
    assert!(
        passed.len() >= 60,
        "expected most reference cases to run, got {}",
        passed.len()
    );
    assert!(
        failed.is_empty(),
        "{} golden case(s) failed:\n{}",
        failed.len(),
        failed.join("\n\n")
    );
}
