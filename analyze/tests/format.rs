//! `--format json|csv` for compute and io: the same figures as the text report, machine-readable.
//! Reads the synthetic traces in shared/realdata; skips when shared/ is absent.

use std::path::{Path, PathBuf};
use std::process::Command;

fn shared() -> Option<PathBuf> {
    let p = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    p.join("realdata/synthetic").is_dir().then_some(p)
}

fn stdout(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
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
