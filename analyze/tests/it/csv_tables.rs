//! `--format csv --table NAME` and `--out-dir DIR`: every table of every command as a plain CSV
//! (one header, no `#` line), equal to its section of the `# table=` stream.

use std::path::Path;

use crate::common::{run, shared_path, stdout, text};

const ROUTE: &str = "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=0\n# layer=1 expert_bytes=1048576 dense_bytes=0\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,0,0,0,0,1,0.5,0,1048576\n0,0,0,0,1,2,0.5,0,1048576\n0,0,0,1,0,3,0.5,0,1048576\n0,0,0,1,1,4,0.5,0,1048576\n\
0,1,5,0,0,1,0.7,0,1048576\n0,1,5,0,1,2,0.3,0,1048576\n0,1,5,1,0,3,0.6,0,1048576\n0,1,5,1,1,4,0.4,0,1048576\n\
0,1,6,0,0,1,0.8,1,0\n0,1,6,0,1,5,0.2,0,1048576\n0,1,6,1,0,3,0.5,1,0\n0,1,6,1,1,4,0.5,1,0\n";

/// The `# table=` stream split into (name, plain CSV body) sections.
fn sections(stream: &str) -> Vec<(String, String)> {
    stream
        .split("\n\n")
        .map(|s| {
            let (first, body) = s.split_once('\n').expect("a section has lines");
            let name = first.strip_prefix("# table=").expect("a # table= line");
            let mut body = body.to_string();
            if !body.ends_with('\n') {
                body.push('\n');
            }
            (name.to_string(), body)
        })
        .collect()
}

/// The fields of a CSV line, quotes honoured.
fn fields(line: &str) -> usize {
    let (mut n, mut quoted) = (1, false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => n += 1,
            _ => {}
        }
    }
    n
}

/// What pandas' `read_csv` needs without options: a header, no `#` line, every row as wide.
fn assert_plain(csv: &str, what: &str) {
    let mut lines = csv.lines();
    let header = lines.next().unwrap_or_else(|| panic!("{what}: empty"));
    assert!(
        !csv.lines().any(|l| l.starts_with('#') || l.is_empty()),
        "{what}: {csv}"
    );
    let width = fields(header);
    for l in lines {
        assert_eq!(fields(l), width, "{what}: {l:?} vs header {header:?}");
    }
}

/// For one command line: each table's `--table` output and `--out-dir` file is its section.
fn check(args: &[&str], at_least: usize) {
    let mut base = args.to_vec();
    base.extend(["--format", "csv"]);
    let stream = stdout(&base);
    let secs = sections(&stream);
    assert!(secs.len() >= at_least, "{args:?}: {stream}");
    for (name, body) in &secs {
        let mut one = base.clone();
        one.extend(["--table", name]);
        let got = stdout(&one);
        assert_eq!(&got, body, "{args:?} --table {name}");
        assert_plain(&got, name);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("tables");
    let shown = out_dir.display().to_string();
    let mut all = base.clone();
    all.extend(["--out-dir", &shown]);
    let out = run(&all);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "files only: {}", text(&out.stdout));
    let said: Vec<String> = text(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("csv -> ").map(str::to_string))
        .collect();
    let want: Vec<String> = secs
        .iter()
        .map(|(n, _)| format!("{shown}/{n}.csv"))
        .collect();
    assert_eq!(said, want, "{args:?}");
    for (name, body) in &secs {
        let file =
            std::fs::read_to_string(out_dir.join(format!("{name}.csv"))).expect("table file");
        assert_eq!(&file, body, "{args:?} {name}.csv");
    }
    let files = std::fs::read_dir(&out_dir).expect("out dir").count();
    assert_eq!(files, secs.len(), "one file per table");
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write temp file");
    p.display().to_string()
}

#[test]
fn every_table_of_every_command_loads_as_a_plain_csv() {
    let d = tempfile::tempdir().expect("tempdir");
    let t = write(d.path(), "t.csv", ROUTE);
    check(&["route", &t, "--view", "all", "--phase", "all"], 10);
    check(&["route", &t, "--view", "hot"], 2);
    check(&["replay", &t, "--budgets", "1,2", "--validate", "1"], 2);
    check(&["drop", &t], 3);
    let Some(syn) = shared_path("realdata/synthetic") else {
        return;
    };
    let syn = |f: &str| syn.join(f).display().to_string();
    check(&["compute", &syn("synthetic.compute.csv"), "--layers"], 2);
    check(&["io", &syn("synthetic.io.csv")], 3);
    check(&["metrics", &syn("synthetic.metrics-v2.csv")], 1);
    if let Some(mixed) = shared_path("realdata/bench-analyze-mixed") {
        check(&["metrics", &mixed.display().to_string(), "--ci"], 4);
    }
}

#[test]
fn an_unknown_table_or_another_format_is_refused_with_a_hint() {
    let d = tempfile::tempdir().expect("tempdir");
    let t = write(d.path(), "t.csv", ROUTE);
    let out = run(&[
        "route", &t, "--view", "hot", "--format", "csv", "--table", "hot",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "error: --table hot: this report has no such table; its tables: hot_layers, hot_experts\n\
hint: pass one of the tables listed, e.g. `--table hot_layers`\n"
    );
    for extra in [&["--table", "hot_layers"][..], &["--out-dir", "x"][..]] {
        for format in [None, Some("json")] {
            let mut args = vec!["route", t.as_str(), "--view", "hot"];
            args.extend(extra);
            if let Some(f) = format {
                args.extend(["--format", f]);
            }
            let out = run(&args);
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            assert!(out.stdout.is_empty());
            let err = text(&out.stderr);
            assert!(
                err.contains("selects CSV tables, but the output format is"),
                "{err}"
            );
            assert!(err.ends_with("\nhint: add `--format csv`\n"), "{err}");
        }
    }
    assert!(!Path::new("x").exists(), "nothing written");
    // The hinted command works.
    let out = run(&[
        "route",
        &t,
        "--view",
        "hot",
        "--format",
        "csv",
        "--table",
        "hot_layers",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
