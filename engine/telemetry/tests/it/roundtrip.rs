//! Round-trip property tests for every record type: what a writer emits, the reader gives
//! back (floats exactly for the protocol and traces, to the column's decimals for the metrics
//! CSV and the summary lines).

use bmoe_telemetry::cell::quantize;
use bmoe_telemetry::kv::KvMap;
use bmoe_telemetry::metrics::{
    MetricsReader, MetricsWriter, RunInfo, SummaryTrailer, TOKEN_COLUMNS, TOKEN_DECIMALS, TokenRow,
};
use bmoe_telemetry::protocol::{
    Begin, Decide, DecideRequest, Done, ErrorRecord, GenerateRequest, LineKind, Load, Progress,
    Ready, Record, Request, ThinkCtl, parse_line,
};
use bmoe_telemetry::summary::{
    CacheSetting, Compute, DenseWeights, Generation, Mode, MoeCache, MoeChurn, MoeDrop, MoeOverlap,
    MoePrefetch, MoeRouteAhead, MoeStream, MoeWaits, NgramCoverage, Prefill, SpecAcceptance,
    SpecCost, SummaryLine, parse_summary_line,
};
use bmoe_telemetry::trace::{
    ComputeRow, DecodeTraceInfo, IoRow, LayerBytes, MAX_DURATION_NS, MAX_ROW_COUNT, MAX_WEIGHT,
    RouteRow, RouteTraceInfo, TraceReader, TraceRow, TraceWriter,
};
use proptest::prelude::*;

fn fin() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |x| x.is_finite())
}

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, control characters and quotes included.
    any::<String>()
}

fn parse_record(line: &str) -> Record {
    match parse_line(line) {
        LineKind::Record(r) => r,
        other => panic!("{line:?} did not parse back: {other:?}"),
    }
}

prop_compose! {
    fn progress()(
        (step, steps, majflt) in (any::<u64>(), any::<u64>(), any::<u64>()),
        f in proptest::collection::vec(fin(), 9),
        reset in any::<bool>(),
        delta_reasoning in text(),
        delta_text in text(),
    ) -> Progress {
        Progress {
            step, steps,
            wall_ms: f[0], io_ms: f[1], compute_ms: f[2], mgmt_ms: f[3], stall_ms: f[4],
            read_mb: f[5], cache_hit_pct: f[6], majflt, cpu_ms: f[7], dense_resident_frac: f[8],
            reset, delta_reasoning, delta_text,
        }
    }
}

prop_compose! {
    fn done()(
        (id, cancelled) in (any::<i64>(), any::<bool>()),
        u in proptest::collection::vec(any::<u64>(), 9),
        f in proptest::collection::vec(fin(), 26),
        reasoning in text(),
        t in text(),
    ) -> Done {
        Done {
            id, cancelled, tokens: u[0], tok_s: f[0], prefill_s: f[1], prefill_tps: f[2],
            load_s: f[3], cache_hit_pct: f[4], n_prompt: u[1], n_past: u[2],
            compute_s_tok: f[5], io_s_tok: f[6], cache_resident_mib: f[7],
            cache_budget_mib: f[8], read_mib: f[9], stall_s_tok: f[10], mgmt_s_tok: f[11],
            majflt_tok: f[12], cpu_s_tok: f[13], prefill_cpu_s: f[14], prefill_read_mib: f[15],
            prefill_io_s: f[16], prefill_stall_s: f[17], prefill_mgmt_s: f[18],
            prefill_dev_tokens: u[3], prefill_dev_nodes: u[4], prefill_dev_read_mib: f[19],
            prefill_dev_stall_s: f[20], token_demand_mib: f[21], mtp_drafted: u[5],
            mtp_accepted: u[6], mtp_decodes: u[7], mtp_draft_s_tok: f[22],
            drafted_steps: u[8], loop_overhead_s_tok: f[23], reasoning, text: t,
        }
    }
}

prop_compose! {
    fn decide()(
        (id, cancelled, best) in (any::<i64>(), any::<bool>(), any::<i64>()),
        choice_logp in proptest::collection::vec(
            prop_oneof![fin(), Just(f64::NEG_INFINITY)], 0..6),
        u in proptest::collection::vec(any::<u64>(), 6),
        f in proptest::collection::vec(fin(), 12),
    ) -> Decide {
        Decide {
            id, cancelled, best, choice_logp, n_tokens: u[0], n_reused: u[1], n_prefilled: u[2],
            restore_s: f[0], store_s: f[1], prefill_s: f[2], prefill_cpu_s: f[3],
            prefill_read_mib: f[4], prefill_io_s: f[5], prefill_stall_s: f[6],
            prefill_mgmt_s: f[7], prefill_dev_tokens: u[3], prefill_dev_read_mib: f[8],
            prefill_dev_stall_s: f[9], prefill_dev_routed: u[4], prefill_dev_demand: u[5],
            prefix_state_mib: f[10],
        }
    }
}

fn think_ctl() -> impl Strategy<Value = ThinkCtl> {
    prop_oneof![
        Just(ThinkCtl::Template),
        Just(ThinkCtl::Prefill),
        Just(ThinkCtl::None),
        "[a-z_]{1,12}".prop_map(|s| ThinkCtl::from_wire(&s)),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            any::<i64>(),
            text(),
            any::<Option<u64>>(),
            any::<Option<bool>>(),
            any::<Option<bool>>()
        )
            .prop_map(|(id, prompt, n_predict, think, clear_kv)| {
                Request::Generate(GenerateRequest {
                    id,
                    prompt,
                    n_predict,
                    think,
                    clear_kv,
                })
            }),
        (
            any::<i64>(),
            text(),
            text(),
            proptest::collection::vec(text(), 0..4),
            any::<Option<bool>>()
        )
            .prop_map(|(id, prefix, suffix, choices, reuse_prefix)| {
                Request::Decide(DecideRequest {
                    id,
                    prefix,
                    suffix,
                    choices,
                    reuse_prefix,
                })
            }),
        Just(Request::Cancel),
        Just(Request::Close),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn protocol_records_round_trip(
        p in progress(), d in done(), dc in decide(), tc in think_ctl(),
        (load_s, mb, ms) in (fin(), fin(), fin()),
        (arch, msg) in (text(), text()),
        (n_ctx, k, id, fatal) in (any::<u64>(), any::<u64>(), any::<i64>(), any::<bool>()),
    ) {
        let records = vec![
            Record::Load(Load { mb, ms }),
            Record::Progress(p),
            Record::Ready(Ready { load_s, arch, n_ctx, think_ctl: tc, n_expert_used: k }),
            Record::Begin(Begin { id }),
            Record::Done(Box::new(d)),
            Record::Decide(Box::new(dc)),
            Record::Error(ErrorRecord { id, fatal, msg }),
        ];
        for r in records {
            let line = r.to_line();
            prop_assert!(!line.contains('\n'), "one line: {line:?}");
            let prefix = format!("BMOE_{} {{", r.tag());
            prop_assert!(line.starts_with(&prefix), "{}", line);
            prop_assert_eq!(parse_record(&line), r.clone());
            // Deterministic: emitting again gives the same bytes.
            prop_assert_eq!(parse_record(&line).to_line(), line);
        }
    }

    #[test]
    fn non_finite_floats_become_null_and_read_as_nan(x in prop_oneof![
        Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)]) {
        let line = Progress { wall_ms: x, ..Progress::default() }.to_line();
        prop_assert!(line.contains("\"wall_ms\":null"), "{}", line);
        let Record::Progress(p) = parse_record(&line) else { panic!("kind") };
        prop_assert!(p.wall_ms.is_nan());
    }

    #[test]
    fn requests_round_trip(r in request()) {
        let line = r.to_line();
        prop_assert_eq!(Request::parse(&line).map_err(|e| e.to_string()), Ok(r));
    }

    #[test]
    fn parse_line_never_panics(s in text(), tail in text()) {
        let _ = parse_line(&s);
        let _ = parse_line(&format!("BMOE_PROGRESS {tail}"));
        let _ = parse_line(&format!("BMOE_DONE {{{tail}"));
        let _ = Request::parse(&s);
        let _ = parse_summary_line(&s);
    }
}

// ---------------------------------------------------------------------------------------------
// metrics CSV

fn opt_f(range: std::ops::Range<f64>) -> impl Strategy<Value = Option<f64>> {
    proptest::option::of(range)
}

prop_compose! {
    fn token_row()(
        ints in proptest::collection::vec(proptest::option::of(any::<u64>()), 6),
        f in proptest::collection::vec(opt_f(-1e9..1e9), 23),
    ) -> TokenRow {
        // Durations (`*_ms`) are never negative: the reader refuses that (MAX_DURATION_MS).
        let d = |x: Option<f64>| x.map(f64::abs);
        TokenRow {
            step: ints[0], steps: ints[1], wall_ms: d(f[0]), io_ms: d(f[1]), compute_ms: d(f[2]),
            read_bytes: ints[2], cache_hit_pct: f[3], stall_ms: d(f[4]), mgmt_ms: d(f[5]),
            majflt: ints[3], cpu_ms: d(f[6]), dense_resident_frac: f[7], turn: ints[4],
            majflt_mib: f[8], cache_budget_mib: f[9], rss_mib: f[10], rss_anon_mib: f[11],
            rss_file_mib: f[12], swap_mib: f[13], mem_available_mib: f[14], mem_free_mib: f[15],
            swap_free_mib: f[16], loop_overhead_ms: d(f[17]), mtp_batch: ints[5],
            mtp_draft_ms: d(f[18]), drain_ms: d(f[19]), adopt_ms: d(f[20]), ra_issue_ms: d(f[21]),
            ra_wd_ms: d(f[22]),
        }
    }
}

fn word() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_./+-]{1,12}"
}

fn spaced() -> impl Strategy<Value = String> {
    // Values with spaces: words joined by single spaces, none after the first containing `=`.
    proptest::collection::vec(word(), 1..4).prop_map(|w| w.join(" "))
}

prop_compose! {
    fn run_info()(
        (engine, model, arch, dense_weights, spec) in (
            proptest::option::of(spaced()), proptest::option::of(spaced()),
            proptest::option::of(word()), proptest::option::of(word()),
            proptest::option::of(word())),
        u in proptest::collection::vec(proptest::option::of(any::<u64>()), 20),
        b in proptest::collection::vec(proptest::option::of(any::<bool>()), 14),
        f in proptest::collection::vec(proptest::option::of(fin()), 5),
        extra in proptest::collection::vec(("x_[a-z_]{1,8}", spaced()), 0..4),
    ) -> RunInfo {
        RunInfo {
            version: Some(2), engine, model, arch,
            n_layer: u[0], n_expert: u[1], n_expert_used: u[2], threads: u[3], n_ctx: u[4],
            n_ubatch: u[5], chatml: b[0], moe_stream: b[1], cache_mb: u[6], cache_auto: b[2],
            cache_floor_mb: u[7], cache_ceil_mb: u[8], cache_cycle_mb: u[9],
            force_cache: b[3], load_all: b[4], io_threads: u[10], o_direct: b[5],
            overlap: b[6], io_two_wave: b[7], prefetch: u[11], route_ahead: u[12],
            predict_prefetch: b[8], predict_log: b[9], predict_spec_max: u[13],
            prefetch_sync: b[10], dense_weights, drop_cold_frac: f[0], drop_renorm: b[11],
            drop_prefill: b[12], substitute_lambda: f[1], temp: f[2], top_k: u[14],
            top_p: f[3], seed: u[15], compute_trace_layers: u[16], spec,
            spec_draft_max: u[17], mtp_p_min: f[4], ngram_min_match: u[18],
            extra: extra.into_iter().collect::<KvMap>(),
        }
    }
}

fn trailer() -> impl Strategy<Value = SummaryTrailer> {
    proptest::collection::vec(("[A-Za-z_/]{1,14}", "[0-9a-z.-]{0,10}"), 0..12).prop_map(|p| {
        let mut t = SummaryTrailer::new();
        for (k, v) in p {
            t.push(&k, v);
        }
        t
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn metrics_file_round_trips(
        info in run_info(),
        rows in proptest::collection::vec(token_row(), 0..8),
        trailers in proptest::collection::vec(trailer(), 1..3),
    ) {
        let mut w = MetricsWriter::new(Vec::new(), &info).expect("writer");
        for r in &rows {
            w.write_row(r).expect("row");
        }
        for t in &trailers {
            w.write_summary(t).expect("trailer");
        }
        let bytes = w.into_inner().expect("bytes");
        let mut r = MetricsReader::new(bytes.as_slice(), "mem").expect("reader");
        prop_assert_eq!(r.run_info(), &info);
        let back: Vec<TokenRow> = r.by_ref().collect::<Result<_, _>>().expect("rows");
        prop_assert_eq!(back.len(), rows.len());
        for (orig, got) in rows.iter().zip(&back) {
            let (o, g) = (orig.to_f64_array(), got.to_f64_array());
            for i in 0..29 {
                // Integers exactly; floats as the column's fixed decimals print them.
                let want = o[i].map(|v| if TOKEN_DECIMALS[i] == 0 { v } else { quantize(v, TOKEN_DECIMALS[i]) });
                prop_assert_eq!(g[i], want, "column {}", TOKEN_COLUMNS[i]);
            }
            prop_assert_eq!(orig.step, got.step);
            prop_assert_eq!(orig.read_bytes, got.read_bytes);
        }
        let got_t: Vec<_> = r.summaries().iter().map(|t| t.pairs.clone()).collect();
        let want_t: Vec<_> = trailers.iter().map(|t| t.pairs.clone()).collect();
        prop_assert_eq!(got_t, want_t);
        prop_assert!(r.truncated().is_none());
    }
}

// ---------------------------------------------------------------------------------------------
// traces

fn round_trip_trace<T: TraceRow + Clone + std::fmt::Debug>(
    info: &T::Info,
    rows: &[T],
) -> (T::Info, Vec<T>)
where
    T::Info: Clone,
{
    let mut w = TraceWriter::<_, T>::new(Vec::new(), info).expect("writer");
    for r in rows {
        w.write_row(r).expect("row");
    }
    let bytes = w.into_inner().expect("bytes");
    let mut r = TraceReader::<_, T>::new(bytes.as_slice(), "mem").expect("reader");
    let back = r.by_ref().collect::<Result<Vec<T>, _>>().expect("rows");
    assert!(r.truncated().is_none());
    (r.info().clone(), back)
}

prop_compose! {
    fn route_info()(
        model in proptest::option::of(spaced()), arch in proptest::option::of(word()),
        n in proptest::collection::vec(proptest::option::of(any::<u64>()), 3),
        layers in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>()), 0..6),
        extra in proptest::collection::vec(("x_[a-z]{1,6}", word()), 0..3),
    ) -> RouteTraceInfo {
        RouteTraceInfo {
            model, arch, n_layer: n[0], n_expert: n[1], n_expert_used: n[2],
            layers: layers.into_iter().map(|(layer, expert_bytes, dense_bytes)|
                LayerBytes { layer, expert_bytes, dense_bytes }).collect(),
            extra: extra.into_iter().collect(),
        }
    }
}

prop_compose! {
    fn route_row()(
        (turn, phase, step, layer, slot, expert) in
            (any::<u32>(), 0u8..2, any::<i64>(), any::<u32>(), any::<u32>(), any::<u32>()),
        // The weights the reader accepts: NaN (unknown) or a gate in 0..=MAX_WEIGHT.
        weight in prop_oneof![0.0..=MAX_WEIGHT, (0f32..=1000f32).prop_map(f64::from), Just(f64::NAN), Just(0.0), Just(MAX_WEIGHT), Just(1.23457e-300)],
        (residency, expert_bytes, dropped) in (0u8..3, 0..=MAX_ROW_COUNT, any::<Option<bool>>()),
    ) -> RouteRow {
        RouteRow { turn, phase, step, layer, slot, expert, weight, residency, expert_bytes, dropped }
    }
}

prop_compose! {
    fn decode_info()(
        model in proptest::option::of(spaced()), arch in proptest::option::of(word()),
        n in proptest::collection::vec(proptest::option::of(any::<u64>()), 3),
        b in proptest::collection::vec(proptest::option::of(any::<bool>()), 2),
    ) -> DecodeTraceInfo {
        DecodeTraceInfo {
            model, arch, n_layer: n[0], n_threads: n[1], io_threads: n[2],
            o_direct: b[0], overlap: b[1], extra: KvMap::new(),
        }
    }
}

prop_compose! {
    fn compute_row()(
        (turn, phase, step, seq, layer) in (any::<u32>(), 0u8..2, any::<i64>(), any::<u32>(), any::<i32>()),
        op in "[A-Z_]{1,12}",
        // Raw node names: anything but a line break (the writer turns those into spaces).
        name in "[^\r\n]{0,24}",
        (wall_ns, majflt) in (0..=MAX_DURATION_NS, 0..=MAX_ROW_COUNT),
    ) -> ComputeRow {
        ComputeRow { turn, phase, step, seq, layer, op, name, wall_ns, majflt }
    }
}

prop_compose! {
    fn io_row()(
        (turn, phase, step, layer, expert, proj) in
            (any::<u32>(), 0u8..2, any::<i64>(), any::<u32>(), any::<u32>(), any::<u8>()),
        (lane, spec, offset, req_bytes, read_bytes, latency_ns) in
            (any::<u32>(), any::<bool>(), any::<u64>(), 0..=MAX_ROW_COUNT, 0..=MAX_ROW_COUNT, 0..=MAX_DURATION_NS),
    ) -> IoRow {
        IoRow { turn, phase, step, layer, expert, proj, lane, spec, offset, req_bytes, read_bytes, latency_ns }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn route_trace_round_trips(info in route_info(), rows in proptest::collection::vec(route_row(), 0..16)) {
        let (i2, back) = round_trip_trace(&info, &rows);
        prop_assert_eq!(i2, info);
        prop_assert_eq!(back.len(), rows.len());
        for (a, b) in rows.iter().zip(&back) {
            // NaN is "unknown": compare it as a state. Other weights are written as `%.6g`, so
            // they read back as that text's exact value, and writing them again is stable.
            prop_assert_eq!(a.weight.is_nan(), b.weight.is_nan());
            if !a.weight.is_nan() {
                let mut text = String::new();
                bmoe_telemetry::cell::write_g(a.weight, 6, &mut text);
                prop_assert_eq!(b.weight.to_bits(), text.parse::<f64>().unwrap().to_bits(), "{}", text);
                let mut again = String::new();
                bmoe_telemetry::cell::write_g(b.weight, 6, &mut again);
                prop_assert_eq!(&again, &text);
            }
            let (mut a2, mut b2) = (*a, *b);
            a2.weight = 0.0;
            b2.weight = 0.0;
            prop_assert_eq!(a2, b2);
        }
    }

    #[test]
    fn compute_trace_round_trips(info in decode_info(), rows in proptest::collection::vec(compute_row(), 0..16)) {
        let (i2, back) = round_trip_trace(&info, &rows);
        prop_assert_eq!(i2, info);
        prop_assert_eq!(back, rows);
    }

    #[test]
    fn io_trace_round_trips(info in decode_info(), rows in proptest::collection::vec(io_row(), 0..16)) {
        let (i2, back) = round_trip_trace(&info, &rows);
        prop_assert_eq!(i2, info);
        prop_assert_eq!(back, rows);
    }
}

// ---------------------------------------------------------------------------------------------
// summary lines

fn q(d: usize) -> impl Strategy<Value = f64> {
    (0.0f64..1e7).prop_map(move |x| quantize(x, d))
}

fn summary_line() -> impl Strategy<Value = SummaryLine> {
    let cache = prop_oneof![
        Just(CacheSetting::Auto),
        Just(CacheSetting::Off),
        any::<u64>().prop_map(CacheSetting::Mib)
    ];
    let dense = prop_oneof![
        Just(DenseWeights::Mmap),
        Just(DenseWeights::Warm),
        Just(DenseWeights::Anon),
        Just(DenseWeights::Ahwb)
    ];
    prop_oneof![
        (any::<u64>(), q(3), q(3)).prop_map(|(tokens, s_per_token, tok_s)| {
            SummaryLine::Generation(Generation {
                tokens,
                s_per_token,
                tok_s,
            })
        }),
        (q(1), q(4), any::<u64>(), q(2)).prop_map(|(a, b, threads, c)| {
            SummaryLine::Compute(Compute {
                occupancy_pct: a,
                cpu_s_per_token: b,
                threads,
                major_faults_per_token: c,
            })
        }),
        (
            cache,
            dense,
            proptest::option::of(prop_oneof![Just(String::new()), "[a-z]{1,10}"]),
            proptest::collection::vec("[a-z][a-z0-9 ]{0,10}[a-z0-9]", 0..3)
        )
            .prop_filter("extra parts must not look like overlap", |(_, _, _, e)| {
                e.iter().all(|p| !p.starts_with("overlap"))
            })
            .prop_map(|(cache, dense, overlap, extra)| {
                SummaryLine::Mode(Mode::Streaming {
                    cache,
                    dense,
                    overlap,
                    extra,
                })
            }),
        (
            (q(1), q(2), q(3), q(3)),
            proptest::option::of(q(3)),
            (q(3), q(0)),
            proptest::option::of(q(3))
        )
            .prop_map(|((r, m, d, c), mgmt_s, (io_s, bw), stall)| {
                SummaryLine::MoeStream(MoeStream {
                    read_mib: r,
                    mib_per_token: m,
                    decode_s_per_token: d,
                    compute_s: c,
                    mgmt_s,
                    io_s,
                    mib_per_s: bw,
                    stall_s_per_token: stall,
                })
            }),
        (
            q(1),
            q(1),
            proptest::option::of((q(0), proptest::option::of("[a-z0-9, ×]{1,16}")))
        )
            .prop_map(|(hit_pct, resident_mib, b)| {
                SummaryLine::MoeCache(MoeCache {
                    hit_pct,
                    resident_mib,
                    budget_mib: b.as_ref().map(|x| x.0),
                    budget_note: b.and_then(|x| x.1),
                })
            }),
        q(3).prop_map(|s| SummaryLine::MoeOverlap(MoeOverlap {
            stall_s_per_token: s
        })),
        (
            q(1),
            any::<u64>(),
            any::<u64>(),
            q(0),
            proptest::option::of("[a-z-]{1,12}")
        )
            .prop_map(|(mib, useful, prefetched, pct, tag)| {
                SummaryLine::MoePrefetch(MoePrefetch {
                    mib,
                    useful,
                    prefetched,
                    pct,
                    tag,
                })
            }),
        (any::<u64>(), any::<u64>(), q(1), q(2)).prop_map(|(dropped, routed, pct, threshold)| {
            SummaryLine::MoeDrop(MoeDrop {
                dropped,
                routed,
                pct,
                threshold,
            })
        }),
        (any::<u64>(), q(3), q(1), q(3), q(3)).prop_map(
            |(tokens, seconds, tok_s, load_s, ttft_s)| {
                SummaryLine::Prefill(Prefill {
                    tokens,
                    seconds,
                    tok_s,
                    load_s,
                    ttft_s,
                })
            }
        ),
    ]
}

fn summary_line_more() -> impl Strategy<Value = SummaryLine> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), q(1)).prop_map(|(evictions, rereads, r)| {
            SummaryLine::MoeChurn(MoeChurn {
                evictions,
                rereads,
                rereads_per_token: r,
            })
        }),
        (q(3), q(3)).prop_map(|(d, a)| SummaryLine::MoeWaits(MoeWaits {
            drain_s_per_token: d,
            adopt_s_per_token: a
        })),
        (any::<u64>(), any::<u64>(), any::<u64>(), q(1)).prop_map(
            |(layers, committed, passed, agree_pct)| {
                SummaryLine::MoeRouteAhead(MoeRouteAhead {
                    layers,
                    committed,
                    passed,
                    agree_pct,
                })
            }
        ),
        (
            prop_oneof![Just("mtp"), Just("ngram")],
            (
                any::<u64>(),
                any::<u64>(),
                q(1),
                q(2),
                any::<u64>(),
                any::<u64>()
            )
        )
            .prop_map(|(src, (accepted, drafted, pct, t, decodes, tokens))| {
                SummaryLine::SpecAcceptance(SpecAcceptance {
                    source: src.to_string(),
                    accepted,
                    drafted,
                    pct,
                    tokens_per_decode: t,
                    decodes,
                    tokens,
                })
            }),
        (prop_oneof![Just("mtp"), Just("ngram")], q(4), q(2), q(2)).prop_map(|(src, d, e, r)| {
            SummaryLine::SpecCost(SpecCost {
                source: src.to_string(),
                draft_s_per_token: d,
                effective_tok_s: e,
                reported_tok_s: r,
            })
        }),
        (any::<u64>(), any::<u64>(), q(1)).prop_map(|(drafted, steps, pct)| {
            SummaryLine::NgramCoverage(NgramCoverage {
                drafted,
                steps,
                pct,
            })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn summary_lines_round_trip(l in prop_oneof![summary_line(), summary_line_more()]) {
        let text = l.to_string();
        prop_assert_eq!(parse_summary_line(&text), Ok(Some(l)), "{}", text);
    }
}

// ---------------------------------------------------------------------------------------------
// text deltas

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever sequence of (reasoning, answer) states the engine goes through — appends,
    /// reclassifications, rewrites — the reader ends every line holding exactly that state,
    /// through the wire format.
    #[test]
    fn deltas_reproduce_every_state(states in proptest::collection::vec(
        prop_oneof![
            // Mostly growth, sometimes an arbitrary rewrite.
            3 => ("[a-zé<>/ ]{0,4}", "[a-zé<>/ ]{0,4}").prop_map(|(r, t)| (r, t, true)),
            1 => ("[a-zé]{0,6}", "[a-zé]{0,6}").prop_map(|(r, t)| (r, t, false)),
        ], 1..20)) {
        use bmoe_telemetry::deltas::{DeltaEncoder, TextAccumulator};
        let (mut enc, mut acc) = (DeltaEncoder::new(), TextAccumulator::new());
        let (mut reasoning, mut text) = (String::new(), String::new());
        for (r, t, grow) in states {
            if grow {
                reasoning.push_str(&r);
                text.push_str(&t);
            } else {
                reasoning = r;
                text = t;
            }
            let mut p = Progress::default();
            enc.fill(&mut p, &reasoning, &text);
            let Record::Progress(wire) = parse_record(&p.to_line()) else { panic!("kind") };
            acc.apply(&wire);
            prop_assert_eq!(acc.reasoning(), reasoning.as_str());
            prop_assert_eq!(acc.text(), text.as_str());
        }
    }
}
