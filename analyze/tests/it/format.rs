//! `--format json|csv` for compute and io: the same figures as the text report, machine-readable.
//! Reads the synthetic traces in shared/realdata; skips when shared/ is absent.

use crate::common::stdout;

use std::path::{Path, PathBuf};

fn shared() -> Option<PathBuf> {
    let p = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    p.join("realdata/synthetic").is_dir().then_some(p)
}

/// `# table=` blocks of a CSV: name -> (header, rows).
fn csv_tables(csv: &str) -> Vec<(String, String, Vec<String>)> {
    csv.split("\n\n")
        .map(|block| {
            let mut lines = block.lines();
            let name = lines
                .next()
                .and_then(|l| l.strip_prefix("# table="))
                .expect("block starts with # table=")
                .to_string();
            let header = lines.next().expect("header").to_string();
            (name, header, lines.map(str::to_string).collect())
        })
        .collect()
}

#[test]
fn compute_json_and_csv_carry_the_text_figures() {
    let Some(shared) = shared() else {
        eprintln!("SKIP: shared/realdata/synthetic not found (set BMOE_SHARED)");
        return;
    };
    let trace = shared.join("realdata/synthetic/synthetic.compute.csv");
    let trace = trace.to_str().expect("utf-8 path");
    let text = stdout(&["compute", trace, "--layers"]);
    assert_eq!(
        stdout(&["compute", trace, "--layers", "--format", "text"]),
        text
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["compute", trace, "--layers", "--format", "json"]))
            .expect("valid JSON");
    assert_eq!(json["meta"]["granularity"], "op");
    assert_eq!(json["meta"]["decode_steps"], 12);
    let ops = json["ops"].as_array().expect("ops table");
    let text_ops = text
        .lines()
        .skip_while(|l| !l.starts_with("op "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .count();
    assert!(text_ops > 1);
    assert_eq!(ops.len(), text_ops, "one row per op the text lists");
    // Every op row printed in the text has the same op, ms/token and share.
    for op in ops {
        let line = format!(
            "{:<18}{:>9.2}{:>7.1}%",
            op["op"].as_str().expect("op name"),
            op["ms_per_token"].as_f64().expect("ms"),
            op["share_pct"].as_f64().expect("share")
        );
        assert!(text.contains(&line), "text has {line:?}");
    }
    let layers = json["layers"]
        .as_array()
        .expect("layers table with --layers");
    assert!(layers.iter().any(|l| l["layer"] == -1));
    let csv = stdout(&["compute", trace, "--layers", "--format", "csv"]);
    let tables = csv_tables(&csv);
    assert_eq!(tables[0].0, "ops");
    assert_eq!(tables[0].1, "op,ms_per_token,share_pct,majflt_per_token");
    assert_eq!(tables[0].2.len(), ops.len());
    assert!(tables[0].2[0].starts_with(&format!("{},", ops[0]["op"].as_str().expect("op"))));
    assert_eq!(tables[1].0, "layers");
    assert_eq!(tables[1].2.len(), layers.len());

    let seg = shared.join("realdata/synthetic/synthetic.compute-layers.csv");
    let json: serde_json::Value = serde_json::from_str(&stdout(&[
        "compute",
        seg.to_str().expect("utf-8 path"),
        "--format",
        "json",
    ]))
    .expect("valid JSON");
    assert_eq!(json["meta"]["granularity"], "layer");
    assert_eq!(json["segments"][0]["segment"], "pre");
}

#[test]
fn io_json_and_csv_carry_the_text_figures() {
    let Some(shared) = shared() else {
        eprintln!("SKIP: shared/realdata/synthetic not found (set BMOE_SHARED)");
        return;
    };
    let trace = shared.join("realdata/synthetic/synthetic.io.csv");
    let trace = trace.to_str().expect("utf-8 path");
    let text = stdout(&["io", trace, "--adjacent"]);
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["io", trace, "--adjacent", "--format", "json"]))
            .expect("valid JSON");
    let meta = &json["meta"];
    assert!(text.contains(&format!(
        "decode steps={}  reads={}",
        meta["decode_steps"], meta["reads"]
    )));
    assert!(text.contains(&format!(
        "read={:.1} MiB/token",
        meta["read_mib_per_token"].as_f64().expect("read")
    )));
    assert!(
        meta["adjacent_runs_per_token"]
            .as_f64()
            .expect("adjacency with --adjacent")
            > 0.0
    );
    for p in json["latency"].as_array().expect("latency table") {
        let label = p["percentile"].as_str().expect("label");
        let line = format!("  {label:<4} {:>9.1}\n", p["us"].as_f64().expect("us"));
        assert!(text.contains(&line), "text has {line:?}");
    }
    let lanes = json["lanes"].as_array().expect("lanes table");
    let csv = stdout(&["io", trace, "--adjacent", "--format", "csv"]);
    let tables = csv_tables(&csv);
    let names: Vec<&str> = tables.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(names, ["latency", "sizes", "lanes"]);
    assert_eq!(
        tables[2].1,
        "lane,mib_per_token,busy_ms_per_token,mib_per_s"
    );
    assert_eq!(tables[2].2.len(), lanes.len());
    assert_eq!(tables[1].1, "size_kib,reads,mib,mib_per_s,us_per_read");
    let reads: u64 = tables[1]
        .2
        .iter()
        .map(|r| {
            r.split(',')
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok())
                .expect("reads")
        })
        .sum();
    assert_eq!(
        Some(reads),
        meta["reads"].as_u64(),
        "size buckets cover every read"
    );
}

/// Two layers, eight experts, three decode steps (written at test time).
const ROUTE: &str = "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=0\n# layer=1 expert_bytes=1048576 dense_bytes=0\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,1,5,0,0,1,0.7,0,1048576\n0,1,5,0,1,2,0.3,0,1048576\n0,1,5,1,0,3,0.6,0,1048576\n0,1,5,1,1,4,0.4,0,1048576\n\
0,1,6,0,0,1,0.8,1,0\n0,1,6,0,1,5,0.2,0,1048576\n0,1,6,1,0,3,0.5,1,0\n0,1,6,1,1,4,0.5,1,0\n\
0,1,7,0,0,2,0.6,1,0\n0,1,7,0,1,1,0.4,1,0\n0,1,7,1,0,6,0.9,0,1048576\n0,1,7,1,1,3,0.1,1,0\n";

#[test]
fn route_hot_and_reuse_json_and_csv() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("t.csv");
    std::fs::write(&p, ROUTE).expect("write trace");
    let p = p.to_str().expect("utf-8 path");

    let json: serde_json::Value = serde_json::from_str(&stdout(&[
        "route", p, "--view", "hot", "--top", "2", "--format", "json",
    ]))
    .expect("valid JSON");
    assert_eq!(json["meta"]["rows"], 12);
    assert_eq!(json["meta"]["phase"], "decode");
    // layer 0: expert 1 x3, expert 2 x2, expert 5 x1 -> top 2 cover 5 of 6.
    assert_eq!(json["hot_layers"][0]["unique"], 3);
    let cov = json["hot_layers"][0]["coverage_pct"]
        .as_f64()
        .expect("coverage");
    assert!((cov - 500.0 / 6.0).abs() < 1e-9, "{cov}");
    let text = stdout(&["route", p, "--view", "hot", "--top", "2"]);
    assert!(text.contains("    0       3    83.3%  1:3 2:2\n"), "{text}");
    let hot = json["hot_experts"].as_array().expect("hot_experts");
    assert_eq!(hot.len(), 4, "top 2 of each of 2 layers");
    assert_eq!(
        (hot[0]["expert"].clone(), hot[0]["activations"].clone()),
        (1.into(), 3.into())
    );
    let csv = stdout(&["route", p, "--view", "hot", "--top", "2", "--format", "csv"]);
    let tables = csv_tables(&csv);
    assert_eq!(tables[1].1, "layer,rank,expert,activations,share_pct");
    assert_eq!(tables[1].2[0], "0,1,1,3,50.0");

    let json: serde_json::Value = serde_json::from_str(&stdout(&[
        "route", p, "--view", "reuse", "--format", "json",
    ]))
    .expect("valid JSON");
    let text = stdout(&["route", p, "--view", "reuse"]);
    for r in json["reuse"].as_array().expect("reuse table") {
        let v = |k: &str| r[k].as_i64().expect("integer");
        let line = format!(
            "{:5} {:8} {:8} {:8} {:8} {:9}\n",
            v("layer"),
            v("n_reuse"),
            v("p50"),
            v("p90"),
            v("max"),
            v("never_2nd")
        );
        assert!(text.contains(&line), "text has {line:?}:\n{text}");
    }
    let csv = stdout(&["route", p, "--view", "reuse", "--format", "csv"]);
    assert!(
        csv.starts_with("# table=reuse\nlayer,n_reuse,p50,p90,max,never_2nd\n"),
        "{csv}"
    );

    // Every other view has tables too (checked figure by figure in route_format.rs).
    let cache: serde_json::Value = serde_json::from_str(&stdout(&[
        "route", p, "--view", "cache", "--format", "json",
    ]))
    .expect("valid JSON");
    assert!(cache["cache"].is_array() && cache["cache_all"].is_array());
}

#[test]
fn drop_json_and_csv_carry_the_text_figures() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("t.csv");
    std::fs::write(&p, ROUTE).expect("write trace");
    let p = p.to_str().expect("utf-8 path");
    let text = stdout(&["drop", p]);
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["drop", p, "--format", "json"])).expect("valid JSON");
    let thr = json["threshold"].as_array().expect("threshold table");
    // 4 fractions x 2 phases (prefill has no rows here, so decode only).
    assert_eq!(thr.len(), 4);
    for r in thr {
        assert_eq!(r["file"], "t.csv");
        assert_eq!(r["phase"], "decode");
        let line = format!(
            "  {:6.2}  {:7.2}%  {:8.1}%  {:9.2}%",
            r["frac"].as_f64().expect("frac"),
            r["thr_pct"].as_f64().expect("thr"),
            r["io_saved_pct"].as_f64().expect("io"),
            r["mass_lost_pct"].as_f64().expect("mass")
        );
        assert!(text.contains(&line), "text has {line:?}:\n{text}");
    }
    let static_k = json["static_k"].as_array().expect("static_k table");
    assert_eq!(static_k.len(), 1, "k=2 -> keep_k 1 only");
    assert_eq!(static_k[0]["keep_k"], 1);
    let csv = stdout(&["drop", p, "--format", "csv"]);
    let tables = csv_tables(&csv);
    assert_eq!(
        tables[0].1,
        "file,phase,frac,thr_pct,io_saved_pct,mass_lost_pct"
    );
    assert_eq!(tables[0].2.len(), 4);
    assert_eq!(tables[1].0, "static_k");
    assert!(tables[1].2[0].starts_with("t.csv,decode,1,"), "{csv}");
}

#[test]
fn metrics_csv_carries_the_json_figures() {
    let d = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, walls: &[f64]| {
        let mut t = String::from("step,steps,wall_ms,io_ms\n");
        for (i, w) in walls.iter().enumerate() {
            t.push_str(&format!("{},{},{w:.3},1.000\n", i + 1, walls.len()));
        }
        let p = d.path().join(name);
        std::fs::write(&p, t).expect("write");
        p.display().to_string()
    };
    let a = write("a.csv", &[100.0, 110.0, 90.0, 100.0]);
    let b = write("b.csv", &[200.0, 210.0, 190.0, 200.0]);
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["metrics", &a, &b, "--format", "json"])).expect("JSON");
    let csv = csv_tables(&stdout(&["metrics", &a, &b, "--format", "csv"]));
    assert_eq!(csv.len(), 1);
    let (name, header, rows) = &csv[0];
    assert_eq!(name, "runs");
    assert_eq!(
        header,
        "path,tokens,mean_ms_per_token,ci95_low_ms,ci95_high_ms,tok_per_s,median_tok_per_s,p95_tok_per_s,instrumented,stochastic"
    );
    assert_eq!(rows.len(), 2);
    for (row, run) in rows.iter().zip(json.as_array().expect("runs")) {
        let cells: Vec<&str> = row.split(',').collect();
        for (col, cell) in header.split(',').zip(&cells) {
            let want = match &run[col] {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            assert_eq!(*cell, want, "{col}");
        }
    }
    assert_eq!(
        rows[0].split(',').nth(2),
        Some("100.0"),
        "mean of 100 110 90 100"
    );

    let cmp = csv_tables(&stdout(&[
        "metrics",
        "--compare",
        &a,
        &b,
        "--format",
        "csv",
    ]));
    let (name, header, rows) = &cmp[0];
    assert_eq!(name, "compare");
    assert_eq!(
        header,
        "a,b,a_mean_ms_per_token,b_mean_ms_per_token,ratio_a_over_b,ci95_low,ci95_high"
    );
    let cells: Vec<&str> = rows[0].split(',').collect();
    assert_eq!((cells[0], cells[1]), (a.as_str(), b.as_str()));
    assert_eq!((cells[2], cells[3], cells[4]), ("100.0", "200.0", "0.5"));
    let cj: serde_json::Value = serde_json::from_str(&stdout(&[
        "metrics",
        "--compare",
        &a,
        &b,
        "--format",
        "json",
    ]))
    .expect("JSON");
    assert_eq!(cells[5], cj["ci95_low"].to_string());
    assert_eq!(cells[6], cj["ci95_high"].to_string());
    // The text report states the same ratio.
    assert!(stdout(&["metrics", "--compare", &a, &b]).contains("mean token time A/B = 0.500"));
}

/// The data lines of `text` under each `===== MODEL — <table> =====` header, as
/// ((model, table), line).
fn bench_sections(text: &str) -> Vec<((String, String), String)> {
    let mut at = (String::new(), String::new());
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("===== ") {
            let h = h.trim_end_matches(" =====");
            let (model, table) = h.split_once(" \u{2014} ").expect("model — table");
            at = (model.to_lowercase(), table.to_string());
        } else if !line.is_empty() && !line.starts_with("config ") {
            out.push((at.clone(), line.to_string()));
        }
    }
    out
}

/// `metrics DIR --format json|csv` on a bench-analyze session directory: the text's throughput
/// and device-pressure tables and the markdown's cache-sizing rows, unrounded; CSV = JSON.
#[test]
fn metrics_dir_json_and_csv_carry_the_bench_tables() {
    let Some(shared) = shared() else {
        eprintln!("SKIP: shared/realdata/synthetic not found (set BMOE_SHARED)");
        return;
    };
    let dir = shared.join("realdata/bench-analyze-mixed");
    let dir_s = dir.to_str().expect("utf-8 path");
    let d = tempfile::tempdir().expect("tempdir");
    let md_path = d.path().join("summary.md");
    let md_s = md_path.to_str().expect("utf-8 path");
    let text = stdout(&["metrics", dir_s, "--markdown", md_s]);
    let md = std::fs::read_to_string(&md_path).expect("markdown written");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["metrics", dir_s, "--format", "json"])).expect("JSON");
    assert_eq!(json["meta"]["dir"], dir_s);
    let lines = bench_sections(&text);
    let line_of = |model: &str, table: &str, label: &str| -> Vec<String> {
        let hits: Vec<&String> = lines
            .iter()
            .filter(|((m, t), l)| m == model && t == table && l.starts_with(&format!("{label} ")))
            .map(|(_, l)| l)
            .collect();
        assert_eq!(hits.len(), 1, "{model} {table} {label}: {hits:?}");
        hits[0][label.len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let n =
        |v: &serde_json::Value, prec: usize| format!("{:.*}", prec, v.as_f64().expect("number"));
    let dash = |v: &serde_json::Value, fmt: &dyn Fn(f64) -> String| {
        v.as_f64().map_or_else(|| "\u{2014}".to_string(), fmt)
    };
    let throughput = json["throughput"].as_array().expect("throughput");
    assert_eq!(
        throughput.len(),
        11,
        "every <model>_<config>.csv of the directory"
    );
    let mut null_hit = 0;
    for r in throughput {
        let (model, label) = (
            r["model"].as_str().expect("model"),
            r["label"].as_str().expect("label"),
        );
        null_hit += usize::from(r["cache_hit_pct"].is_null());
        let want = vec![
            n(&r["decode_tps_mean"], 2),
            n(&r["decode_tps_min"], 2),
            n(&r["decode_tps_max"], 2),
            n(&r["decode_tps_median"], 2),
            n(&r["decode_tps_p95"], 2),
            n(&r["prefill_tps"], 2),
            n(&r["ttft_s"], 1),
            dash(&r["cache_hit_pct"], &|v| format!("{v:.0}%")),
            format!("{}M", n(&r["read_mib_per_token"], 0)),
            dash(&r["stall_ms_per_token"], &|v| format!("{v:.1}")),
        ];
        assert_eq!(line_of(model, "throughput", label), want, "{model} {label}");
        assert!(r["path"].as_str().expect("path").ends_with(&format!(
            "{model}_{}.csv",
            r["config"].as_str().expect("config")
        )));
    }
    assert_eq!(
        null_hit, 1,
        "the v0 file without a cache hit rate prints a dash"
    );
    for r in json["pressure"].as_array().expect("pressure") {
        let (model, label) = (
            r["model"].as_str().expect("model"),
            r["label"].as_str().expect("label"),
        );
        let want = vec![
            format!("{}GB", n(&r["peak_rss_gb"], 2)),
            format!("{}GB", n(&r["ram_floor_gb"], 2)),
            format!("{}C", n(&r["cpu_start_c"], 1)),
            format!("{}C", n(&r["cpu_max_c"], 1)),
            format!("{}C", n(&r["batt_max_c"], 1)),
        ];
        assert_eq!(
            line_of(model, "device pressure", label),
            want,
            "{model} {label}"
        );
    }
    let sizing = json["sizing"].as_array().expect("sizing");
    assert!(!sizing.is_empty());
    for r in sizing {
        let label = r["label"].as_str().expect("label");
        let row = format!(
            "| {label} | {} | {} MiB | {} | {} |",
            dash(&r["cache_budget_mib"], &|v| format!("{v:.0} MiB")),
            n(&r["cache_resident_mib"], 0),
            dash(&r["prefetch_useful_pct"], &|v| format!("{v:.0}%")),
            dash(&r["prefetch_read_mib_per_token"], &|v| format!(
                "{v:.0} MiB"
            )),
        );
        assert!(md.contains(&row), "markdown has {row:?}");
    }
    assert!(
        json.get("runs").is_none(),
        "the per-run table needs --ci, as in text"
    );
    let with_ci: serde_json::Value =
        serde_json::from_str(&stdout(&["metrics", dir_s, "--ci", "--format", "json"]))
            .expect("JSON");
    assert_eq!(with_ci["runs"].as_array().map(Vec::len), Some(11));

    let csv = csv_tables(&stdout(&["metrics", dir_s, "--format", "csv"]));
    let names: Vec<&str> = csv.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(names, ["throughput", "pressure", "sizing"]);
    for (name, header, rows) in &csv {
        let arr = json[name.as_str()].as_array().expect("table");
        assert_eq!(rows.len(), arr.len(), "{name}");
        let cols: Vec<&str> = header.split(',').collect();
        for (row, obj) in rows.iter().zip(arr) {
            // Labels with commas are quoted; compare the numeric tail, which has none.
            let tail: Vec<&str> = row.rsplit(',').take(cols.len() - 3).collect();
            for (cell, col) in tail.iter().zip(cols.iter().rev()) {
                let v = &obj[*col];
                let want = if v.is_null() {
                    String::new()
                } else {
                    v.to_string().trim_matches('"').to_string()
                };
                assert_eq!(*cell, want, "{name}.{col}");
            }
        }
    }
}

/// A `bmoe-cli --session --csv` file (a `turn` column, one `# summary` per turn) is one run in
/// every format: text, JSON and CSV all count the tokens of every turn together.
#[test]
fn a_session_csv_is_one_run_in_text_json_and_csv() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("session.csv");
    std::fs::write(
        &p,
        "# bmoe_metrics v2\n# model=/m/toy.gguf arch=toy threads=4\n\
step,steps,wall_ms,io_ms,turn\n1,3,10.000,1.000,0\n2,3,12.000,1.000,0\n3,3,11.000,1.000,0\n\
# summary tokens=3 s/tok=0.011\n1,2,20.000,1.000,1\n2,2,22.000,1.000,1\n# summary tokens=2 s/tok=0.021\n",
    )
    .expect("write");
    let p = p.to_str().expect("utf-8 path");
    let text = stdout(&["metrics", p]);
    let row: Vec<&str> = text
        .lines()
        .nth(1)
        .expect("one run")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..2], ["5", "15.00"], "{text}");
    assert_eq!(text.lines().count(), 3, "header, one run, footnote: {text}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["metrics", p, "--format", "json"])).expect("JSON");
    assert_eq!(json.as_array().map(Vec::len), Some(1));
    assert_eq!(json[0]["tokens"], 5);
    assert_eq!(json[0]["mean_ms_per_token"], 15.0);
    let csv = csv_tables(&stdout(&["metrics", p, "--format", "csv"]));
    assert_eq!(csv[0].2.len(), 1);
    assert!(csv[0].2[0].contains(",5,15.0,"), "{:?}", csv[0].2);
}
