//! `route --format json|csv` for every view: the tables parse back and carry exactly the figures
//! the text report prints (each JSON number, rounded as the text rounds it, equals the text's
//! token), CSV and JSON agree cell by cell, and the combined views hold the single views' tables.
//! Runs on a hand-made trace (prefetch hits, an uneven layer, a NaN weight) and, when
//! shared/realdata is present, on the real qwen trace in both phases.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze")
}

fn stdout(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    serde_json::from_str(&stdout(&a)).expect("valid JSON")
}

/// Two layers, eight experts, k=2: steps 5-8, layer 1 has no step 8 (uneven), a prefetch hit
/// (residency 2) in slot 1, one NaN weight.
const ROUTE: &str = "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=2097152\n# layer=1 expert_bytes=1048576 dense_bytes=1048576\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,1,5,0,0,1,0.7,0,1048576\n0,1,5,0,1,2,0.3,0,1048576\n0,1,5,1,0,3,0.6,0,1048576\n0,1,5,1,1,4,0.4,0,1048576\n\
0,1,6,0,0,1,0.8,1,0\n0,1,6,0,1,5,0.2,2,0\n0,1,6,1,0,3,0.5,1,0\n0,1,6,1,1,4,0.5,1,0\n\
0,1,7,0,0,2,0.6,1,0\n0,1,7,0,1,1,0.4,1,0\n0,1,7,1,0,6,nan,0,1048576\n0,1,7,1,1,3,0.1,1,0\n\
0,1,8,0,0,7,0.9,0,1048576\n0,1,8,0,1,1,0.1,2,0\n";

fn shared() -> Option<PathBuf> {
    let p = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    p.join("realdata/2026-07-15-route-trace/qwen.route.csv")
        .is_file()
        .then_some(p)
}

/// The data lines of the text section whose title starts with `=== {title}`: lines up to the
/// next blank line, after the column header.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with(&format!("=== {title}")));
    lines
        .next()
        .unwrap_or_else(|| panic!("section {title} in:\n{text}"));
    lines.next(); // column header
    lines.take_while(|l| !l.is_empty()).collect()
}

/// Whitespace-separated tokens with a trailing `%` removed.
fn tokens(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .map(|t| t.trim_end_matches('%'))
        .collect()
}

fn f(v: &Value, decimals: usize) -> String {
    format!("{:.*}", decimals, v.as_f64().expect("a number"))
}

fn rows<'a>(j: &'a Value, table: &str) -> &'a Vec<Value> {
    j[table]
        .as_array()
        .unwrap_or_else(|| panic!("table {table} in {j:#}"))
}

fn check_overlap(trace: &str, phase: &str) {
    let args = ["route", trace, "--phase", phase, "--view", "overlap"];
    let text = stdout(&args);
    let j = json(&args);
    let lines = section(&text, "routing overlap");
    let per = rows(&j, "overlap");
    let (body, all) = lines.split_at(lines.len() - 1);
    assert_eq!(per.len(), body.len() * 4, "four lags per layer");
    for (line, chunk) in body.iter().zip(per.chunks(4)) {
        let t = tokens(line);
        for (i, r) in chunk.iter().enumerate() {
            assert_eq!(r["layer"].to_string(), t[0]);
            assert_eq!(r["lag"], [1, 2, 4, 8][i]);
            assert_eq!(f(&r["mean_pct"], 1), t[i + 1], "{line}");
        }
    }
    let t = tokens(all[0]);
    assert_eq!(t[0], "ALL");
    for (i, r) in rows(&j, "overlap_all").iter().enumerate() {
        assert_eq!(f(&r["mean_pct"], 1), t[i + 1]);
    }
}

fn check_workset(trace: &str, phase: &str) {
    let args = ["route", trace, "--phase", phase, "--view", "workset"];
    let text = stdout(&args);
    let j = json(&args);
    let header: Vec<String> = text
        .lines()
        .find(|l| l.starts_with("layer      of"))
        .expect("workset header")
        .split_whitespace()
        .skip(2)
        .map(|s| s.trim_start_matches('s').to_string())
        .collect();
    let lines = section(&text, "cumulative unique experts");
    let per = rows(&j, "workset");
    assert_eq!(per.len(), lines.len() * header.len());
    for (line, chunk) in lines.iter().zip(per.chunks(header.len())) {
        let t = tokens(line);
        for (i, r) in chunk.iter().enumerate() {
            assert_eq!(r["layer"].to_string(), t[0]);
            assert_eq!(r["step"].to_string(), header[i]);
            assert_eq!(r["unique_experts"].to_string(), t[i + 2], "{line}");
        }
    }
    let union = &rows(&j, "workset_union")[0];
    let expect = format!(
        "At step {} the union of routed experts is {} MiB",
        union["step"],
        f(&union["union_mib"], 1)
    );
    assert!(text.contains(&expect), "{expect}");
}

fn check_cache(trace: &str, phase: &str) {
    let args = ["route", trace, "--phase", phase, "--view", "cache"];
    let text = stdout(&args);
    let j = json(&args);
    let lines = section(&text, "cache outcome");
    let mut all_rows: Vec<&Value> = rows(&j, "cache").iter().collect();
    all_rows.push(&rows(&j, "cache_all")[0]);
    assert_eq!(all_rows.len(), lines.len());
    for (line, r) in lines.iter().zip(all_rows) {
        let t = tokens(line);
        let layer = r.get("layer").map_or("ALL".to_string(), Value::to_string);
        assert_eq!(layer, t[0]);
        assert_eq!(f(&r["miss_pct"], 1), t[1], "{line}");
        assert_eq!(f(&r["hit_pct"], 1), t[2]);
        assert_eq!(f(&r["prefetch_pct"], 1), t[3]);
        assert_eq!(r["routings"].to_string(), t[4]);
        let sum = ["miss", "hit", "prefetch"]
            .iter()
            .map(|k| r[*k].as_u64().expect("count"))
            .sum::<u64>();
        assert_eq!(r["routings"], sum);
    }
    let slots: Vec<String> = rows(&j, "prefetch_by_slot")
        .iter()
        .map(|r| format!("s{}:{}", r["slot"], r["hits"]))
        .collect();
    if slots.is_empty() {
        assert!(text.contains("no prefetch hits recorded"));
    } else {
        assert!(text.contains(&format!(
            "prefetch hits by router slot (s0 = top choice): {}",
            slots.join(" ")
        )));
    }
}

fn check_entropy(trace: &str, phase: &str) {
    let args = ["route", trace, "--phase", phase, "--view", "entropy"];
    let text = stdout(&args);
    let j = json(&args);
    let max = &rows(&j, "entropy_max")[0];
    assert!(text.contains(&format!(
        "(bits; max = {} at k={})",
        f(&max["max_bits"], 2),
        max["k"]
    )));
    let lines = section(&text, "routing entropy");
    let per = rows(&j, "entropy");
    assert_eq!(per.len(), lines.len());
    for (line, r) in lines.iter().zip(per) {
        let t = tokens(line);
        assert_eq!(r["layer"].to_string(), t[0]);
        assert_eq!(f(&r["entropy_bits"], 2), t[1], "{line}");
        assert_eq!(f(&r["top1_share_pct"], 1), t[2]);
        assert!(r["cells"].as_u64().expect("cells") > 0);
    }
}

fn check_bytes(trace: &str, phase: &str) {
    let args = ["route", trace, "--phase", phase, "--view", "bytes"];
    let text = stdout(&args);
    let j = json(&args);
    let total = &rows(&j, "bytes_total")[0];
    assert!(text.contains(&format!(
        "total {} MiB over {} steps ({} MiB/step average)",
        f(&total["read_mib"], 1),
        total["steps"],
        f(&total["mib_per_step"], 2)
    )));
    assert!(text.contains(&format!("dense total {} MiB", f(&total["dense_mib"], 1))));
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("layer     read MiB"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let per = rows(&j, "bytes");
    assert_eq!(per.len(), lines.len());
    let mut sum = 0;
    for (line, r) in lines.iter().zip(per) {
        let t = tokens(line);
        assert_eq!(r["layer"].to_string(), t[0]);
        assert_eq!(f(&r["read_mib"], 1), t[1], "{line}");
        assert_eq!(f(&r["expert_mib"], 2), t[2]);
        assert_eq!(f(&r["dense_mib"], 1), t[3]);
        sum += r["read_bytes"].as_u64().expect("bytes");
    }
    assert_eq!(total["read_bytes"], sum, "layers add up to the total");
}

fn check_sanity(trace: &str, phase: &str) {
    let args = ["route", trace, "--phase", phase, "--view", "sanity"];
    let text = stdout(&args);
    let j = json(&args);
    let s = &rows(&j, "sanity")[0];
    assert!(text.contains(&format!("rows              {}\n", s["rows"])));
    assert!(text.contains(&format!(
        "cells (step,layer) {} over {} steps x {} MoE layers",
        s["cells"], s["steps"], s["moe_layers"]
    )));
    assert!(text.contains(&format!(
        "cells not k={:<4}  {}",
        s["k"].to_string(),
        s["cells_not_k"]
    )));
    match s["fewest_steps_layer"].as_u64() {
        Some(l) => assert!(text.contains(&format!(
            "uneven: layer {l} has {}, the rest up to {}",
            s["steps_per_layer_min"], s["steps_per_layer_max"]
        ))),
        None => {
            assert!(!text.contains("uneven"));
            assert_eq!(s["steps_per_layer_min"], s["steps_per_layer_max"]);
        }
    }
    if s["weight_sum_min"].is_null() {
        assert!(text.contains("weight sum/cell   n/a"));
    } else {
        assert!(text.contains(&format!(
            "weight sum/cell   min {}  max {}",
            f(&s["weight_sum_min"], 3),
            f(&s["weight_sum_max"], 3)
        )));
        assert_eq!(
            text.contains("(normalized: ~1.0 expected)"),
            s["weights_normalized"] == true
        );
    }
}

/// The experts and weights grids, rebuilt from the JSON rows, equal the text grid.
fn check_matrix(trace: &str, phase: &str, extra: &[&str]) {
    for cells in ["experts", "weights"] {
        let mut args = vec!["route", trace, "--phase", phase, "--view", "matrix"];
        args.extend_from_slice(extra);
        args.extend(["--width", "200", "--cells", cells]);
        let text = stdout(&args);
        let j = json(&args);
        let header = text
            .lines()
            .find(|l| l.trim_start().starts_with("step |"))
            .expect("matrix header");
        let layers: Vec<&str> = header.split('|').skip(1).map(str::trim).collect();
        let grid: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("step |"))
            .skip(1)
            .collect();
        let table = rows(&j, "matrix");
        for line in &grid {
            let mut fields = line.split(" | ");
            let step: i64 = fields.next().expect("step").trim().parse().expect("step");
            for (layer, field) in layers.iter().zip(fields) {
                let layer: i64 = layer.trim_start_matches('L').parse().expect("layer");
                let cell: Vec<String> = table
                    .iter()
                    .filter(|r| r["step"] == step && r["layer"] == layer)
                    .map(|r| {
                        let e = &r["expert"];
                        if cells == "experts" {
                            let star = if r["also_prev"] == true { "*" } else { "" };
                            format!("{star}{e}")
                        } else if r["weight"].is_null() {
                            format!("{e}:--")
                        } else {
                            format!("{e}:{:.0}%", 100.0 * r["weight"].as_f64().expect("w"))
                        }
                    })
                    .collect();
                assert_eq!(cell.join(" "), field.trim_end(), "step {step} L{layer}");
            }
        }
        let steps: std::collections::BTreeSet<i64> = table
            .iter()
            .map(|r| r["step"].as_i64().expect("step"))
            .collect();
        assert_eq!(
            steps.len(),
            grid.len(),
            "one text row per step with routings"
        );
    }
}

/// CSV blocks: (name, header, rows of cells).
fn csv_tables(csv: &str) -> Vec<(String, Vec<String>, Vec<Vec<String>>)> {
    csv.split("\n\n")
        .map(|block| {
            let mut lines = block.lines();
            let name = lines
                .next()
                .and_then(|l| l.strip_prefix("# table="))
                .expect("block starts with # table=")
                .to_string();
            let header = lines
                .next()
                .expect("header")
                .split(',')
                .map(String::from)
                .collect();
            let rows = lines
                .map(|l| l.split(',').map(String::from).collect())
                .collect();
            (name, header, rows)
        })
        .collect()
}

/// `--view default|all` hold each single view's tables, in view order, and CSV = JSON.
fn check_combined(trace: &str, phase: &str) {
    const ALL: [&str; 9] = [
        "matrix", "hot", "reuse", "overlap", "workset", "cache", "entropy", "bytes", "sanity",
    ];
    let singles: Vec<Value> = ALL
        .iter()
        .map(|v| json(&["route", trace, "--phase", phase, "--view", v]))
        .collect();
    for (view, order) in [
        ("default", &[8, 1, 2, 3, 4, 5, 6, 7][..]),
        ("all", &[0, 1, 2, 3, 4, 5, 6, 7, 8][..]),
    ] {
        let args = ["route", trace, "--phase", phase, "--view", view];
        let j = json(&args);
        let mut names = Vec::new();
        for &i in order {
            let one = &singles[i];
            assert_eq!(one["meta"], j["meta"]);
            for (name, table) in one.as_object().expect("object") {
                if name != "meta" {
                    assert_eq!(
                        &j[name], table,
                        "{view}: table {name} equals --view {}'s",
                        ALL[i]
                    );
                    names.push(name.clone());
                }
            }
        }
        assert_eq!(
            j.as_object().expect("object").len(),
            names.len() + 1,
            "no other tables"
        );
        let mut csv_args = args.to_vec();
        csv_args.extend(["--format", "csv"]);
        let csv = csv_tables(&stdout(&csv_args));
        assert_eq!(csv.len(), names.len());
        for (name, header, body) in &csv {
            assert!(names.contains(name), "{name}");
            let jt = rows(&j, name);
            assert_eq!(body.len(), jt.len(), "{name} rows");
            for (cells, obj) in body.iter().zip(jt) {
                for (col, cell) in header.iter().zip(cells) {
                    let v = &obj[col.as_str()];
                    let expect = match v {
                        Value::Null => String::new(),
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    assert_eq!(cell, &expect, "{name}.{col}");
                }
            }
        }
    }
}

/// Every view against its text; `combined` adds the default/all and CSV checks.
fn check_everything(trace: &str, phase: &str, combined: bool) {
    check_overlap(trace, phase);
    check_workset(trace, phase);
    check_cache(trace, phase);
    check_entropy(trace, phase);
    check_bytes(trace, phase);
    check_sanity(trace, phase);
    check_matrix(trace, phase, &[]);
    if combined {
        check_combined(trace, phase);
    }
}

#[test]
fn every_route_view_has_json_and_csv_matching_the_text_on_a_toy_trace() {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("t.csv");
    std::fs::write(&trace, ROUTE).expect("write trace");
    let trace = trace.to_str().expect("utf-8 path");
    check_everything(trace, "decode", true);
    // Hand-worked figures of the toy trace.
    let j = json(&["route", trace, "--view", "default"]);
    let s = &j["sanity"][0];
    assert_eq!(
        (s["rows"].as_u64(), s["cells"].as_u64()),
        (Some(14), Some(7))
    );
    assert_eq!(s["fewest_steps_layer"], 1, "layer 1 lacks step 8");
    assert_eq!(j["prefetch_by_slot"][0]["slot"], 1);
    assert_eq!(j["prefetch_by_slot"][0]["hits"], 2);
    assert_eq!(j["cache_all"][0]["hit"], 6);
    assert_eq!(j["bytes_total"][0]["read_bytes"], 6 * 1_048_576);
    assert_eq!(j["bytes_total"][0]["dense_mib"], 3.0);
    // Layer 0 positions {1,2} {1,5} {1,2} {1,7}: lag 1 shares 1 of 2 each time.
    assert_eq!(j["overlap"][0]["mean_pct"], 50.0);
    assert_eq!(j["overlap"][0]["pairs"], 3);
    // A NaN weight is left out of its cell's entropy, not the whole cell (the text's rule).
    assert_eq!(j["entropy"][1]["cells"], 3);
    // ... but a cell with a NaN weight has no weight sum: 6 of 7 cells are summed, all to 1.
    assert_eq!(s["weight_sum_max"], 1.0);
    let m = json(&[
        "route", trace, "--view", "matrix", "--steps", "6-7", "--layers", "1",
    ]);
    let got: Vec<(i64, i64, bool)> = rows(&m, "matrix")
        .iter()
        .map(|r| {
            (
                r["step"].as_i64().expect("step"),
                r["expert"].as_i64().expect("expert"),
                r["also_prev"] == true,
            )
        })
        .collect();
    // Step 6 is the first selected step: nothing before it counts as previous.
    assert_eq!(
        got,
        [(6, 3, false), (6, 4, false), (7, 6, false), (7, 3, true)]
    );
    assert!(m["matrix"][2]["weight"].is_null(), "nan weight -> null");
}

#[test]
fn matrix_json_follows_the_selection_and_an_empty_one_is_an_empty_table() {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("t.csv");
    std::fs::write(&trace, ROUTE).expect("write trace");
    let trace = trace.to_str().expect("utf-8 path");
    check_matrix(trace, "decode", &["--steps", "6,8", "--layers", "0"]);
    check_matrix(trace, "decode", &["--max-steps", "2"]);
    for format in ["json", "csv"] {
        let out = run(&[
            "route", trace, "--view", "matrix", "--steps", "100-200", "--format", format,
        ]);
        // As the text prints the reference's line with exit 0: an empty table, and the
        // note on stderr.
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(
            err.contains("holds no cell; the decode rows have steps 5-8 and layers 0-1"),
            "{err}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if format == "csv" {
            assert_eq!(
                stdout,
                "# table=matrix\nstep,layer,slot,expert,weight,residency,expert_bytes,also_prev\n"
            );
        } else {
            let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
            assert_eq!(rows(&v, "matrix").len(), 0);
        }
    }
    // Inside --view all an empty matrix selection is an empty table, as the text keeps a line.
    let j = json(&["route", trace, "--view", "all", "--steps", "100-200"]);
    assert_eq!(rows(&j, "matrix").len(), 0);
    assert_eq!(rows(&j, "sanity").len(), 1);
}

#[test]
fn every_route_view_matches_the_text_on_the_real_qwen_trace() {
    let Some(shared) = shared() else {
        eprintln!("SKIP: shared/realdata/2026-07-15-route-trace not found (set BMOE_SHARED)");
        return;
    };
    let trace = shared.join("realdata/2026-07-15-route-trace/qwen.route.csv");
    let trace = trace.to_str().expect("utf-8 path");
    check_everything(trace, "decode", true);
    // Prefill: uneven layers (the last layer sees one token per prompt).
    check_everything(trace, "prefill", false);
    check_matrix(trace, "decode", &["--steps", "40-60", "--layers", "0-5,47"]);
}
