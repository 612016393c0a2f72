//! Behaviour where bmoe-analyze deliberately differs from the reference scripts (docs/analyze.md
//! "Differences"), on small files written at test time.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const ROUTE: &str = "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=0\n# layer=1 expert_bytes=1048576 dense_bytes=0\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,1,5,0,0,1,0.7,0,1048576\n0,1,5,0,1,2,0.3,0,1048576\n0,1,5,1,0,3,0.6,0,1048576\n0,1,5,1,1,4,0.4,0,1048576\n\
0,1,6,0,0,1,0.8,1,0\n0,1,6,0,1,5,0.2,0,1048576\n0,1,6,1,0,3,0.5,1,0\n0,1,6,1,1,4,0.5,1,0\n";

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write temp file");
    p.display().to_string()
}

#[test]
fn malformed_row_names_file_and_line_with_hint() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(
        d.path(),
        "bad.csv",
        &ROUTE.replace("0,1,6,0,1,5,0.2,0,1048576", "0,1,6,0,1,five,0.2,0,1048576"),
    );
    let out = run(&["route", &p]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no partial output");
    let err = text(&out.stderr);
    assert!(err.contains(&format!("{p}:11: column `expert`")), "{err}");
    assert!(err.contains("\nhint: "), "{err}");
}

#[test]
fn empty_and_filtered_out_inputs_fail_on_stderr() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(d.path(), "t.csv", ROUTE);
    let out = run(&["route", &p, "--phase", "prefill"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("no rows for phase=prefill turn=None"));
    // An empty matrix selection is the reference's line with exit 0 (the note says why).
    let out = run(&["route", &p, "--view", "matrix", "--layers", "7"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).ends_with("\nno rows for that layer/step selection\n"));
    let out = run(&["route", &p, "--view", "hot", "--top", "1"]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("    0       3    50.0%  1:2\n"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn drop_replay_leaves_nan_weights_out() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(
        d.path(),
        "n.csv",
        &ROUTE.replace("0,1,6,1,1,4,0.5,1,0", "0,1,6,1,1,4,nan,1,0"),
    );
    let out = run(&["drop", &p]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("[DECODE] 4 routing cells, 7 routed experts"),
        "{s}"
    );
    assert!(!s.contains("nan%"), "{s}");
}

#[test]
fn io_report_survives_zero_latency_and_notes_prefill_fallback() {
    let d = tempfile::tempdir().expect("tempdir");
    let body = "# io_trace v1\n# model=/m/t.gguf arch=toy n_layer=1 n_threads=1 io_threads=1 o_direct=1 overlap=0\n\
turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns\n\
0,0,0,0,1,0,0,0,0,4096,4096,0\n0,0,0,0,2,0,0,0,4096,4096,4096,0\n";
    let p = write(d.path(), "io.csv", body);
    let out = run(&["io", &p, "--adjacent"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("lane-busy bandwidth=n/a MiB/s"), "{s}");
    assert!(
        s.contains("2 reads/token span 1 contiguous runs/token"),
        "{s}"
    );
    assert!(
        text(&out.stderr).contains("no decode rows"),
        "fallback is announced"
    );
}

#[test]
fn replay_rejects_unknown_policy_before_any_output() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(d.path(), "t.csv", ROUTE);
    let out = run(&["replay", &p, "--policies", "lru,lur"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("unknown policy lur"));
    let out = run(&[
        "replay",
        &p,
        "--budgets",
        "1",
        "--policies",
        "belady,lru",
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["curve"].as_array().map(Vec::len), Some(2));
}

#[test]
fn metrics_sidecar_replaces_only_the_extension() {
    let p = bmoe_analyze::metrics::sidecar_path(Path::new("/runs/a.csv.d/qwen_mmap.csv"));
    assert_eq!(p, Path::new("/runs/a.csv.d/qwen_mmap.metrics"));
}

/// The `hint:` line of a failed run (panics when the run did not fail with one).
fn hint_of(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    err.lines()
        .find_map(|l| l.strip_prefix("hint: "))
        .unwrap_or_else(|| panic!("no hint line in {err:?}"))
        .to_string()
}

#[test]
fn empty_inputs_hint_at_flags_of_their_own_subcommand() {
    let d = tempfile::tempdir().expect("tempdir");
    // compute/io have no --phase or --turn: an empty trace says how to record one instead.
    let compute = write(
        d.path(),
        "c.csv",
        "# compute_trace v1\n# model=/m/t.gguf arch=toy n_layer=1 n_threads=1\nturn,phase,step,seq,layer,op,name,wall_ns,majflt\n",
    );
    let io = write(
        d.path(),
        "io.csv",
        "# io_trace v1\n# model=/m/t.gguf arch=toy n_layer=1 n_threads=1 io_threads=1 o_direct=1 overlap=0\n\
turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns\n",
    );
    for (sub, p) in [("compute", &compute), ("io", &io)] {
        let out = run(&[sub, p]);
        assert!(
            text(&out.stderr).contains(&format!("error: {p}: no rows")),
            "{sub}"
        );
        let hint = hint_of(&out);
        assert!(
            !hint.contains("--phase") && !hint.contains("--turn"),
            "{sub}: {hint}"
        );
        assert!(hint.contains("`bmoe-cli --compute-trace FILE`"), "{hint}");
    }
    // route: the hint names the filter that emptied the selection, as a route flag.
    let p = write(d.path(), "t.csv", ROUTE);
    let hint = hint_of(&run(&["route", &p, "--phase", "prefill"]));
    assert_eq!(hint, "add `--phase all` to keep prefill and decode rows");
    let hint = hint_of(&run(&["route", &p, "--phase", "all", "--turn", "3"]));
    assert_eq!(
        hint,
        "leave out --turn to keep every turn (turns are numbered from 0)"
    );
    // The hinted command works.
    assert!(run(&["route", &p, "--phase", "all"]).status.success());
}

/// The budget column of the text table's rows (the lines after the `(MiB)` header).
fn budget_rows(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with("(MiB)"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn replay_labels_budgets_that_rounding_would_merge_as_given() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(d.path(), "t.csv", ROUTE);
    let curve = d.path().join("curve.csv").display().to_string();
    let out = run(&[
        "replay",
        &p,
        "--budgets",
        "0.5,0.9,1",
        "--policies",
        "lru",
        "--csv",
        &curve,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(budget_rows(&text(&out.stdout)), ["0.5", "0.9", "1"]);
    let file = std::fs::read_to_string(&curve).expect("curve file");
    let first: Vec<&str> = file
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next())
        .collect();
    assert_eq!(first, ["0.5", "0.9", "1"]);
    // Labels the reference's %.0f keeps apart stay as the reference prints them (golden
    // `budgets-0,100.5` pins `100`).
    let out = run(&[
        "replay",
        &p,
        "--budgets",
        "0,100.5,250",
        "--policies",
        "lru",
    ]);
    assert_eq!(budget_rows(&text(&out.stdout)), ["0", "100", "250"]);
}

#[test]
fn replay_csv_is_the_json_curve_unrounded_with_its_table_line() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(d.path(), "t.csv", ROUTE);
    let args = [
        "replay",
        &p,
        "--budgets",
        "0.5,1,3",
        "--policies",
        "lru,layer",
        "--validate",
        "2",
    ];
    let with = |format: &'static str| {
        let mut v = args.to_vec();
        v.extend(["--format", format]);
        v
    };
    let csv = text(&run(&with("csv")).stdout);
    let json: serde_json::Value = serde_json::from_slice(&run(&with("json")).stdout).expect("json");
    let sections: Vec<&str> = csv.split("\n\n").collect();
    assert_eq!(sections.len(), 2, "{csv}");
    let mut lines = sections[0].lines();
    assert_eq!(lines.next(), Some("# table=curve"));
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert_eq!(
        header,
        [
            "budget_mib",
            "policy",
            "hit_pct_cum",
            "hit_pct_decode",
            "read_mib",
            "peak_resident_mib",
            "lookups"
        ]
    );
    let rows: Vec<&str> = lines.collect();
    let curve = json["curve"].as_array().expect("curve");
    assert_eq!(rows.len(), curve.len());
    for (row, want) in rows.iter().zip(curve) {
        for (cell, col) in row.split(',').zip(&header) {
            let v = &want[*col];
            match v.as_str() {
                Some(s) => assert_eq!(cell, s),
                // Unrounded: the CSV cell parses back to the JSON number exactly.
                None => assert_eq!(cell.parse::<f64>().ok(), v.as_f64(), "{col} in {row}"),
            }
        }
    }
    assert_eq!(rows[0].split(',').next(), Some("0.5"));
    let validation: Vec<&str> = sections[1].lines().collect();
    assert_eq!(validation[0], "# table=validation");
    assert_eq!(
        validation[1],
        "budget_mib,policy,hit_pct_cum,hit_pct_decode"
    );
    let v = &json["validation"];
    let cells: Vec<&str> = validation[2].split(',').collect();
    assert_eq!(cells[1], "lru");
    assert_eq!(cells[3].parse::<f64>().ok(), v["hit_pct_decode"].as_f64());
}

#[test]
fn an_empty_matrix_selection_prints_the_reference_line_and_a_note() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(d.path(), "t.csv", ROUTE);
    let header = text(&run(&["route", &p, "--view", "matrix", "--steps", "5"]).stdout);
    let header = header
        .split("\n=== step x layer matrix")
        .next()
        .expect("header");
    let note = format!(
        "note: {p}: the matrix selection (--layers, --steps) holds no cell; the decode rows have steps 5-6 and layers 0-1\n"
    );
    for args in [
        ["--steps", "5000-6000"],
        ["--layers", "40-47"],
        ["--steps=-3", "--layers=0-1"],
    ] {
        let mut argv = vec!["route", p.as_str(), "--view", "matrix"];
        argv.extend(args);
        let out = run(&argv);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        // The reference: its header, then the one line (no matrix title).
        assert_eq!(
            stdout.strip_suffix("no rows for that layer/step selection\n"),
            Some(header),
            "{args:?}"
        );
        assert_eq!(text(&out.stderr), note, "{args:?}");
    }
    // A plot of nothing is an error whose hint names route's own selection flags, and the
    // hinted flags work.
    let svg = d.path().join("m.svg").display().to_string();
    for args in [["--steps", "5000"], ["--max-steps", "0"]] {
        let mut argv = vec!["route", p.as_str(), "--view", "matrix", "--plot", &svg];
        argv.extend(args);
        assert_eq!(
            hint_of(&run(&argv)),
            "choose --steps and --layers within the rows' steps 5-6 and layers 0-1 (without --steps, a --max-steps above 0)",
            "{args:?}"
        );
    }
    let out = run(&[
        "route", &p, "--view", "matrix", "--steps", "5-6", "--layers", "0-1", "--plot", &svg,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn replay_and_drop_refuse_a_trace_without_rows() {
    let d = tempfile::tempdir().expect("tempdir");
    let head_only = ROUTE.lines().take(5).collect::<Vec<_>>().join("\n") + "\n";
    let empty = write(d.path(), "empty.csv", "");
    let head = write(d.path(), "head.csv", &head_only);
    for p in [&empty, &head] {
        for cmd in ["replay", "drop", "route"] {
            let out = run(&[cmd, p]);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{cmd} {p}: {err}");
            assert!(
                out.stdout.is_empty(),
                "{cmd} {p}: no table of 0 % hit rates"
            );
            assert!(err.contains(&format!("error: {p}")), "{cmd} {p}: {err}");
            assert!(err.contains("hint: "), "{cmd}: {err}");
        }
    }
    // A --turn that selects nothing keeps the reference's all-zero table, and says why.
    let full = write(d.path(), "full.csv", ROUTE);
    let out = run(&["replay", &full, "--turn", "1", "--budgets", "1"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("batches 0 (0 prefill + 0 decode)"));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "note: {full}: no rows for turn 1 (8 rows in other turns)"
        )),
        "{err}"
    );
}

#[test]
fn a_torn_last_row_that_still_parses_is_left_out_in_every_reader() {
    let d = tempfile::tempdir().expect("tempdir");
    // A miss's `1048576` cut to `10`: the row parses, but it is not what the engine wrote.
    let torn = ROUTE.replace("0,1,6,1,1,4,0.5,1,0\n", "0,1,6,1,1,4,0.5,0,10");
    let p = write(d.path(), "torn.csv", &torn);
    let out = run(&["route", &p, "--view", "sanity", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\"rows\": 7"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains(&format!("note: {p}: line 13 has no line end")),
        "{}",
        text(&out.stderr)
    );
    let metrics = write(d.path(), "m.csv", "step,steps,wall_ms\n1,2,100.0\n2,2,30");
    let out = run(&["metrics", &metrics, "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\"tokens\": 1"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains(&format!("note: {metrics}: line 3 has no line end")));
    let io = write(
        d.path(),
        "io.csv",
        "# io_trace v1\nturn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns\n\
         0,1,5,0,3,0,0,0,0,4096,4096,3059712\n0,1,5,0,4,0,0,0,0,4096,4096,305",
    );
    let out = run(&["io", &io, "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\"reads\": 1"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains(&format!("note: {io}: line 4 has no line end")));
}

#[test]
fn bad_times_and_weights_are_refused_with_file_line_and_column() {
    let d = tempfile::tempdir().expect("tempdir");
    let svg = d.path().join("x.svg").display().to_string();
    for (name, body, args, want) in [
        (
            "w.csv",
            ROUTE.replace("0,1,6,0,1,5,0.2,0,1048576", "0,1,6,0,1,5,-0.2,0,1048576"),
            vec!["drop"],
            ":11: column `weight`: expected a routing weight",
        ),
        (
            "m.csv",
            "step,steps,wall_ms\n1,2,100.0\n2,2,nan\n".to_string(),
            vec!["metrics"],
            ":3: column `wall_ms`: expected a duration in ms",
        ),
        (
            "m2.csv",
            "step,steps,wall_ms,mgmt_ms\n1,2,100.0,1e308\n2,2,90.0,0\n".to_string(),
            vec!["metrics", "--plot", svg.as_str()],
            ":2: column `mgmt_ms`: expected a duration in ms",
        ),
    ] {
        let p = write(d.path(), name, &body);
        let mut a: Vec<&str> = args.clone();
        a.insert(1, &p);
        let out = run(&a);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{a:?}: {err}");
        assert!(err.contains(&format!("error: {p}{want}")), "{a:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}
