//! Golden lines: the seed contract's own examples and templates (a public contract, quoted
//! here on purpose), and byte-identical rewrites of real files.

use crate::common;

use bmoe_telemetry::metrics::{MetricsReader, MetricsWriter, RunInfo, TOKEN_COLUMNS, TokenRow};
use bmoe_telemetry::protocol::{
    Begin, Decide, Done, ErrorRecord, GenerateRequest, LineKind, Load, Progress, Ready, Record,
    Request, parse_line,
};
use bmoe_telemetry::summary::{
    CacheSetting, Compute, DenseWeights, Generation, Mode, MoeCache, MoeDrop, MoePrefetch,
    MoeStream, NgramCoverage, PerfReport, SpecAcceptance, SpecCost,
};
use bmoe_telemetry::trace::{
    COMPUTE_COLUMNS, ComputeRow, IO_COLUMNS, IoRow, ROUTE_COLUMNS, RouteRow, TraceReader, TraceRow,
    TraceWriter,
};

/// The JSON keys of a protocol line, in emitted order.
fn keys(line: &str) -> Vec<String> {
    let json = line.split_once(' ').map(|x| x.1).unwrap_or("");
    // Keys are the strings directly followed by `:` at nesting depth 1.
    let mut out = Vec::new();
    let v: serde_json::Value = serde_json::from_str(json).expect("json");
    let obj = v.as_object().expect("object");
    // serde_json's Map is sorted unless preserve_order; recover order from the text.
    let mut positions: Vec<(usize, String)> = obj
        .keys()
        .map(|k| {
            (
                json.find(&format!("\"{k}\":")).expect("key in text"),
                k.clone(),
            )
        })
        .collect();
    positions.sort();
    out.extend(positions.into_iter().map(|(_, k)| k));
    out
}

fn seed_keys(s: &str) -> Vec<String> {
    s.split(',').map(|k| k.trim().to_string()).collect()
}

#[test]
fn protocol_key_order_is_the_seeds() {
    let p = Progress {
        reset: true,
        ..Progress::default()
    };
    assert_eq!(
        keys(&p.to_line()),
        seed_keys(
            "step,steps,wall_ms,io_ms,compute_ms,mgmt_ms,stall_ms,read_mb,cache_hit_pct,majflt,cpu_ms,dense_resident_frac,reset,delta_reasoning,delta_text"
        )
    );
    assert_eq!(keys(&Load::default().to_line()), seed_keys("mb,ms"));
    assert_eq!(
        keys(&Ready::default().to_line()),
        seed_keys("load_s,arch,n_ctx,think_ctl,n_expert_used")
    );
    assert_eq!(keys(&Begin::default().to_line()), seed_keys("id"));
    assert_eq!(
        keys(&Done::default().to_line()),
        seed_keys(
            "id,cancelled,tokens,tok_s,prefill_s,prefill_tps,load_s,cache_hit_pct,n_prompt,n_past,compute_s_tok,io_s_tok,cache_resident_mib,cache_budget_mib,read_mib,stall_s_tok,mgmt_s_tok,majflt_tok,cpu_s_tok,prefill_cpu_s,prefill_read_mib,prefill_io_s,prefill_stall_s,prefill_mgmt_s,prefill_dev_tokens,prefill_dev_nodes,prefill_dev_read_mib,prefill_dev_stall_s,token_demand_mib,mtp_drafted,mtp_accepted,mtp_decodes,mtp_draft_s_tok,drafted_steps,loop_overhead_s_tok,reasoning,text"
        )
    );
    assert_eq!(
        keys(&Decide::default().to_line()),
        seed_keys(
            "id,cancelled,best,choice_logp,n_tokens,n_reused,n_prefilled,restore_s,store_s,prefill_s,prefill_cpu_s,prefill_read_mib,prefill_io_s,prefill_stall_s,prefill_mgmt_s,prefill_dev_tokens,prefill_dev_read_mib,prefill_dev_stall_s,prefill_dev_routed,prefill_dev_demand,prefix_state_mib"
        )
    );
    assert_eq!(
        keys(&ErrorRecord::default().to_line()),
        seed_keys("id,fatal,msg")
    );
}

#[test]
fn seed_shaped_lines_parse() {
    // The seed's templates with values filled in as the archived CLI printed them.
    let l = r#"BMOE_PROGRESS {"step":3,"steps":256,"wall_ms":563.1,"io_ms":462.9,"compute_ms":100.2,"mgmt_ms":0.0,"stall_ms":0.0,"read_mb":1050.75,"cache_hit_pct":-1.0,"majflt":0,"cpu_ms":0.0,"dense_resident_frac":-1.000,"reset":1,"delta_reasoning":"","delta_text":"Hello\nworld \"q\""}"#;
    let LineKind::Record(Record::Progress(p)) = parse_line(l) else {
        panic!("progress")
    };
    assert_eq!(
        (p.step, p.steps, p.read_mb, p.reset),
        (3, 256, 1050.75, true)
    );
    assert_eq!(p.delta_text, "Hello\nworld \"q\"");
    let l = r#"BMOE_READY {"load_s":14.941,"arch":"qwen3moe","n_ctx":2048,"think_ctl":"template","n_expert_used":8}"#;
    assert!(matches!(parse_line(l), LineKind::Record(Record::Ready(r)) if r.n_expert_used == 8));
    assert_eq!(
        parse_line(l),
        parse_line(&match parse_line(l) {
            LineKind::Record(r) => r.to_line(),
            other => panic!("{other:?}"),
        })
    );
    let l = r#"BMOE_ERROR {"id":0,"fatal":true,"msg":"cannot open model"}"#;
    assert!(
        matches!(parse_line(l), LineKind::Record(Record::Error(e)) if e.fatal && e.msg == "cannot open model")
    );
    let l = r#"BMOE_DECIDE {"id":4,"cancelled":false,"best":1,"choice_logp":[null,-0.25,-3.5],"n_tokens":40}"#;
    let LineKind::Record(Record::Decide(d)) = parse_line(l) else {
        panic!("decide")
    };
    assert_eq!(d.choice_logp, vec![f64::NEG_INFINITY, -0.25, -3.5]);
    assert_eq!(d.n_tokens, 40);
}

#[test]
fn seed_request_lines() {
    let g = Request::Generate(GenerateRequest {
        id: 1,
        prompt: "Hi\nthere".into(),
        n_predict: Some(64),
        think: Some(false),
        clear_kv: Some(true),
    });
    assert_eq!(
        g.to_line(),
        r#"{"cmd":"generate","id":1,"prompt":"Hi\nthere","n_predict":64,"think":false,"clear_kv":true}"#
    );
    let d = Request::parse(
        r#"{"cmd":"decide","id":2,"prefix":"Q: ","suffix":"","choices":["yes","no"],
 "reuse_prefix":false}"#
            .replace('\n', "")
            .as_str(),
    )
    .expect("decide");
    let Request::Decide(d) = d else {
        panic!("kind")
    };
    assert_eq!(d.choices, vec!["yes", "no"]);
    assert!(!d.reuse_prefix());
    assert_eq!(
        Request::parse(r#"{"cmd":"close"}"#).ok(),
        Some(Request::Close)
    );
}

#[test]
fn seed_summary_templates() {
    // `generation: <n> tokens, <s> s/token (<t> tok/s)` etc., filled in.
    let g = Generation {
        tokens: 256,
        s_per_token: 0.585,
        tok_s: 1.709,
    };
    assert_eq!(
        g.to_string(),
        "generation: 256 tokens, 0.585 s/token (1.709 tok/s)"
    );
    let c = Compute {
        occupancy_pct: 82.5,
        cpu_s_per_token: 0.5831,
        threads: 4,
        major_faults_per_token: 18.26,
    };
    assert_eq!(
        c.to_string(),
        "compute: 82.5% CPU occupancy (0.5831 cpu-s/token over 4 threads), 18.26 major faults/token"
    );
    for (m, want) in [
        (
            Mode::Streaming {
                cache: CacheSetting::Auto,
                dense: DenseWeights::Anon,
                overlap: Some(String::new()),
                extra: vec![],
            },
            "mode: expert streaming, cache auto, dense anon, overlap",
        ),
        (
            Mode::Streaming {
                cache: CacheSetting::Mib(4000),
                dense: DenseWeights::Mmap,
                overlap: None,
                extra: vec![],
            },
            "mode: expert streaming, cache 4000 MiB, dense mmap",
        ),
        (
            Mode::Streaming {
                cache: CacheSetting::Off,
                dense: DenseWeights::Ahwb,
                overlap: None,
                extra: vec![],
            },
            "mode: expert streaming, cache off, dense ahwb",
        ),
    ] {
        assert_eq!(m.to_string(), want);
    }
    let s = MoeStream {
        read_mib: 98947.3,
        mib_per_token: 386.51,
        decode_s_per_token: 0.334,
        compute_s: 0.230,
        mgmt_s: Some(0.099),
        io_s: 0.464,
        mib_per_s: 834.0,
        stall_s_per_token: None,
    };
    assert_eq!(
        s.to_string(),
        "moe-stream: read 98947.3 MiB (386.51 MiB/token), decode 0.334 s/token (compute 0.230 + cache mgmt 0.099 + flash I/O 0.464 s/token, 834 MiB/s)"
    );
    let mc = MoeCache {
        hit_pct: 88.1,
        resident_mib: 3999.0,
        budget_mib: None,
        budget_note: None,
    };
    assert_eq!(mc.to_string(), "moe-cache: 88.1% hit, resident 3999.0 MiB");
    let p = MoePrefetch {
        mib: 267.3,
        useful: 56,
        prefetched: 66,
        pct: 85.0,
        tag: Some("route-ahead".into()),
    };
    assert_eq!(
        p.to_string(),
        "moe-prefetch: 267.3 MiB speculative, 56/66 experts useful (85%) [route-ahead]"
    );
    let d = MoeDrop {
        dropped: 5146,
        routed: 81920,
        pct: 6.3,
        threshold: 0.75,
    };
    assert_eq!(
        d.to_string(),
        "moe-drop: 5146/81920 routed experts dropped (6.3%), threshold 0.75 x uniform"
    );
    // The seed's speculation lines: `mtp:` padded to align with `ngram:`.
    let a = SpecAcceptance {
        source: "mtp".into(),
        accepted: 22,
        drafted: 30,
        pct: 73.3,
        tokens_per_decode: 1.6,
        decodes: 25,
        tokens: 40,
    };
    assert_eq!(
        a.to_string(),
        "mtp:   22/30 drafts accepted (73.3%), 1.60 tokens per verify decode (25 decodes for 40 tokens)"
    );
    let a = SpecAcceptance {
        source: "ngram".into(),
        ..a
    };
    assert!(a.to_string().starts_with("ngram: 22/30 drafts accepted"));
    let cov = NgramCoverage {
        drafted: 25,
        steps: 40,
        pct: 62.5,
    };
    assert_eq!(
        cov.to_string(),
        "ngram: drafted on 25 of 40 steps (62.5%); the rest decoded plainly"
    );
    let cost = SpecCost {
        source: "mtp".into(),
        draft_s_per_token: 0.002,
        effective_tok_s: 7.16,
        reported_tok_s: 7.27,
    };
    assert_eq!(
        cost.to_string(),
        "mtp: drafting costs 0.0020 s/token on top of decode → 7.16 tok/s effective (vs 7.27 reported)"
    );
    let out = format!(
        "=== answer ===\nThe answer.\n=== perf ===\n{g}\n{c}\n{}\n{s}\n{mc}\n{a}\n{cov}\n",
        "mode: expert streaming, cache auto, dense anon, overlap"
    );
    let r = PerfReport::parse(&out);
    assert_eq!(r.answer.as_deref(), Some("The answer."));
    assert_eq!(r.generation, Some(g));
    assert_eq!(r.compute, Some(c));
    assert_eq!(r.moe_stream, Some(s));
    assert_eq!(r.spec_acceptance, Some(a));
    assert_eq!(r.ngram_coverage, Some(cov));
    assert!(r.errors.is_empty());
}

#[test]
fn seed_csv_headers_and_preamble_keys() {
    assert_eq!(
        TokenRow::header(),
        "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms,majflt,cpu_ms,\
dense_resident_frac,turn,majflt_mib,cache_budget_mib,rss_mib,rss_anon_mib,rss_file_mib,swap_mib,\
mem_available_mib,mem_free_mib,swap_free_mib,loop_overhead_ms,mtp_batch,mtp_draft_ms,drain_ms,\
adopt_ms,ra_issue_ms,ra_wd_ms"
    );
    assert_eq!(TOKEN_COLUMNS.len(), 29);
    assert_eq!(
        ROUTE_COLUMNS.join(","),
        "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes,dropped"
    );
    assert_eq!(
        COMPUTE_COLUMNS.join(","),
        "turn,phase,step,seq,layer,op,name,wall_ns,majflt"
    );
    assert_eq!(
        IO_COLUMNS.join(","),
        "turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns"
    );
    let seed: Vec<Vec<&str>> = vec![
        vec!["engine"],
        "model arch n_layer n_expert n_expert_used threads n_ctx n_ubatch chatml"
            .split(' ')
            .collect(),
        "moe_stream cache_mb cache_auto cache_floor_mb cache_ceil_mb cache_cycle_mb force_cache load_all io_threads o_direct overlap io_two_wave prefetch route_ahead predict_prefetch predict_log predict_spec_max prefetch_sync dense_weights drop_cold_frac drop_renorm drop_prefill substitute_lambda"
            .split(' ')
            .collect(),
        "temp top_k top_p seed compute_trace_layers spec spec_draft_max mtp_p_min ngram_min_match"
            .split(' ')
            .collect(),
    ];
    let ours: Vec<Vec<&str>> = RunInfo::KEY_LINES.iter().map(|l| l.to_vec()).collect();
    assert_eq!(ours, seed);
}

fn rewrite_trace<T: TraceRow>(text: &str) -> String
where
    T::Info: Clone,
{
    let mut r = TraceReader::<_, T>::new(text.as_bytes(), "golden").expect("reader");
    let rows: Vec<T> = r.by_ref().collect::<Result<_, _>>().expect("rows");
    let mut w = TraceWriter::<_, T>::new(Vec::new(), &r.info().clone()).expect("writer");
    for row in &rows {
        w.write_row(row).expect("row");
    }
    String::from_utf8(w.into_inner().expect("bytes")).expect("utf8")
}

#[test]
fn seed_trace_examples_rewrite_identically() {
    let compute = "# compute_trace v1\n# model=... arch=qwen3moe n_layer=48 n_threads=4 io_threads=4 o_direct=1 overlap=0\nturn,phase,step,seq,layer,op,name,wall_ns,majflt\n0,1,29,0,-1,GET_ROWS,embd,428500,0\n0,1,29,1,0,RMS_NORM,norm-0,19500,0\n";
    assert_eq!(rewrite_trace::<ComputeRow>(compute), compute);
    let io = "# io_trace v1\nturn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns\n0,1,29,0,87,1,0,0,1526304,65536,69632,416800\n";
    assert_eq!(rewrite_trace::<IoRow>(io), io);
}

#[test]
fn real_files_rewrite_byte_identically() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    let real = shared.join("realdata");
    // The synthetic v2 metrics file is written exactly as the archived engine's sink would.
    let p = real.join("synthetic/synthetic.metrics-v2.csv");
    let original = std::fs::read_to_string(&p).expect("read");
    let mut r = MetricsReader::open(&p).expect("open");
    let rows: Vec<TokenRow> = r.by_ref().collect::<Result<_, _>>().expect("rows");
    let mut w = MetricsWriter::new(Vec::new(), r.run_info()).expect("writer");
    for row in &rows {
        w.write_row(row).expect("row");
    }
    for t in r.summaries() {
        w.write_summary(t).expect("trailer");
    }
    let rewritten = String::from_utf8(w.into_inner().expect("bytes")).expect("utf8");
    assert_eq!(rewritten, original);

    for (file, kind) in [
        ("synthetic/synthetic.compute.csv", "compute"),
        ("synthetic/synthetic.compute-layers.csv", "compute"),
        ("synthetic/synthetic.io.csv", "io"),
        ("synthetic/qwen.dropped.route.csv", "route"),
    ] {
        let original = std::fs::read_to_string(real.join(file)).expect("read");
        let rewritten = match kind {
            "compute" => rewrite_trace::<ComputeRow>(&original),
            "io" => rewrite_trace::<IoRow>(&original),
            _ => rewrite_trace::<RouteRow>(&original),
        };
        assert!(rewritten == original, "{file} does not rewrite identically");
    }
}

#[test]
fn nine_column_route_traces_rewrite_identically_but_for_the_new_column() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    for file in [
        "2026-07-15-route-trace/gemma.route.csv",
        "synthetic/qwen.nanweights.route.csv",
    ] {
        let original = std::fs::read_to_string(shared.join("realdata").join(file)).expect("read");
        let rewritten = rewrite_trace::<RouteRow>(&original);
        // The writer always writes today's v1 header (with `dropped`); a row whose `dropped`
        // is unknown gets an empty cell. Strip that column and the rest must be identical,
        // the `%.6g` routing weights (and `nan`) included.
        let stripped: String = rewritten
            .lines()
            .map(|l| {
                if l.starts_with('#') {
                    l.to_string()
                } else if let Some(h) = l.strip_suffix(",dropped") {
                    h.to_string()
                } else {
                    l.strip_suffix(',').expect("empty dropped cell").to_string()
                }
            })
            .map(|l| l + "\n")
            .collect();
        assert!(stripped == original, "{file} does not rewrite identically");
    }
}
