//! The summary lines against the seed's formats, one run shape at a time.

use super::*;
use crate::cli::DenseWeights::{self, Anon, Mmap};

fn streaming(cache_mb: u64, auto: bool, dense: DenseWeights) -> ModeLine {
    ModeLine::Streaming {
        cache_mb,
        auto,
        dense,
        overlap: None,
    }
}

#[test]
fn progress_line_matches_the_contract() {
    let t = TokenStats {
        step: 3,
        steps: 32,
        wall_ms: 10.04,
        io_ms: 4.0,
        mgmt_ms: 1.0,
        read_bytes: 3 * 1024 * 1024 / 2,
        cache_hit_pct: 50.0,
        majflt: 2,
        cpu_ms: 19.96,
        dense_resident_frac: -1.0,
        ..Default::default()
    }
    .with_residual(false);
    assert_eq!(
        progress_line(&t, "hi\n"),
        "BMOE_PROGRESS {\"step\":3,\"steps\":32,\"wall_ms\":10.0,\"io_ms\":4.0,\"compute_ms\":5.0,\"mgmt_ms\":1.0,\"stall_ms\":0.0,\"read_mb\":1.5,\"cache_hit_pct\":50.0,\"majflt\":2,\"cpu_ms\":20.0,\"dense_resident_frac\":-1.0,\"delta_reasoning\":\"\",\"delta_text\":\"hi\\n\"}"
    );
    assert_eq!(load_line(&t).unwrap(), "BMOE_LOAD {\"mb\":1.5,\"ms\":4.0}");
    assert_eq!(load_line(&TokenStats::default()), None);
}

#[test]
fn the_overlap_residual_subtracts_the_stall_not_the_lane_time() {
    let t = TokenStats {
        wall_ms: 10.0,
        io_ms: 25.0, // four lanes busy beside compute
        stall_ms: 3.0,
        mgmt_ms: 1.0,
        ..Default::default()
    };
    assert_eq!(t.with_residual(true).compute_ms, 6.0);
    assert_eq!(
        t.with_residual(false).compute_ms,
        0.0,
        "serial: io is wall time"
    );
}

#[test]
fn overlap_adds_the_stall_to_the_stream_line_and_its_own_lines() {
    let s = RunSummary {
        n_gen: 2,
        decode_s: 2.0,
        threads: 2,
        stream: Some(StreamSummary {
            read_bytes: 2 << 20,
            io_s: 5.0,
            mgmt_s: 0.2,
            cache_hit_pct: -1.0,
            stall_s: Some(0.8),
            drain_s: 0.02,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mode = ModeLine::Streaming {
        cache_mb: 0,
        auto: false,
        dense: Mmap,
        overlap: Some(crate::stream::overlap::OverlapKind::Staged),
    };
    let lines = summary_lines(&s, &mode);
    let stream = lines.iter().find(|l| l.starts_with("moe-stream:")).unwrap();
    assert!(stream.ends_with(" stall_s/tok=0.400"), "{stream}");
    assert!(
        stream.contains("(compute 0.500 + cache mgmt 0.100"),
        "{stream}"
    );
    assert!(
        lines.contains(
            &"mode: expert streaming, cache off, dense mmap, overlap (staged)".to_string()
        )
    );
    assert!(lines.contains(
        &"moe-overlap: stall 0.400 s/token (flash reads overlapped with FFN compute)".to_string()
    ));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("moe-waits: drain 0.010 s/token")),
        "{lines:?}"
    );
}

#[test]
fn residual_clamps_at_zero() {
    let t = TokenStats {
        wall_ms: 1.0,
        io_ms: 2.0,
        ..Default::default()
    }
    .with_residual(false);
    assert_eq!(t.compute_ms, 0.0);
}

#[test]
fn row_lines_follow_the_seed() {
    let mut r = crate::stream::rows::RowStats {
        table_bytes: 1188 << 20,
        resident_bytes: 3 << 19,
        rows: 40,
        reads: 31,
        read_bytes: 31 * 4096,
        evictions: 2,
        io_errors: 0,
    };
    assert_eq!(
        row_lines(&r),
        [
            "moe-rows: 1188.0 MiB of row-gathered table(s) off the resident set, 1.5 MiB resident, 40 rows gathered, 31 reads (0.1 MiB)"
        ]
    );
    r.io_errors = 2;
    assert_eq!(
        row_lines(&r)[1],
        "2 FAILED reads - this run's output is not trustworthy"
    );
}

#[test]
fn summary_lines_follow_the_templates() {
    let s = RunSummary {
        n_gen: 4,
        decode_s: 2.0,
        cpu_s: 4.0,
        majflt: 0,
        threads: 2,
        n_prompt: 5,
        prefill_s: 0.5,
        load_s: 1.0,
        rows: None,
        stream: Some(StreamSummary {
            read_bytes: 8 * 1024 * 1024,
            io_s: 1.0,
            mgmt_s: 0.2,
            cache_hit_pct: 25.0,
            resident_bytes: 2 * 1024 * 1024,
            evictions: 3,
            rereads: 2,
            auto_budget_mib: None,
            token_demand_bytes: 0,
            layer_demand_bytes: 0,
            stall_s: None,
            drain_s: 0.0,
            ..Default::default()
        }),
        // the dense probes count as cache management (0.2 + 0.2 s over 4 tokens)
        probe_s: 0.2,
        routing: Some(RoutingSummary {
            routed: 480,
            dropped: 12,
            drop_frac: 0.75,
            ..Default::default()
        }),
        spec: None,
        predict: None,
        route_ahead: None,
    };
    let lines = summary_lines(&s, &streaming(2, false, Mmap));
    assert_eq!(
        lines[0],
        "generation: 4 tokens, 0.500 s/token (2.000 tok/s)"
    );
    assert_eq!(
        lines[1],
        "compute: 100.0% CPU occupancy (1.0000 cpu-s/token over 2 threads), 0.00 major faults/token"
    );
    assert_eq!(lines[2], "mode: expert streaming, cache 2 MiB, dense mmap");
    assert_eq!(
        lines[3],
        "prefill: 5 tokens, 0.500 s (10.0 tok/s) | model load 1.000 s | TTFT 1.500 s"
    );
    assert_eq!(
        lines[4],
        "moe-stream: read 8.0 MiB (2.00 MiB/token), decode 0.500 s/token (compute 0.150 + cache mgmt 0.100 + flash I/O 0.250 s/token, 8 MiB/s)"
    );
    assert_eq!(lines[5], "moe-cache: 25.0% hit, resident 2.0 MiB");
    assert!(lines[6].starts_with("moe-cache: 3 evictions, 2 re-reads (0.5/token)"));
    assert_eq!(
        lines[7],
        "moe-drop: 12/480 routed experts dropped (2.5%), threshold 0.75 x uniform"
    );
    let plain = summary_lines(
        &RunSummary {
            n_gen: 1,
            decode_s: 1.0,
            ..Default::default()
        },
        &ModeLine::PlainUnsupported {
            arch: "llama".into(),
        },
    );
    assert_eq!(plain.len(), 2);
    assert!(plain[1].contains("'llama' is not one this build streams"));
    assert_eq!(
        mode_line(&streaming(0, false, Mmap)),
        "mode: expert streaming, cache off, dense mmap"
    );
    assert_eq!(
        mode_line(&streaming(700, true, Anon)),
        "mode: expert streaming, cache auto, dense anon"
    );
}

#[test]
fn ngram_lines_follow_the_seed_templates() {
    let s = RunSummary {
        n_gen: 40,
        decode_s: 4.0,
        threads: 2,
        spec: Some(SpecSummary {
            source: "ngram",
            drafted: 30,
            accepted: 15,
            decodes: 25,
            drafted_steps: 10,
            draft_s: 0.04,
            ..Default::default()
        }),
        ..Default::default()
    };
    let lines = summary_lines(&s, &streaming(2, false, Mmap));
    assert_eq!(
        lines[1],
        "ngram: 15/30 drafts accepted (50.0%), 1.60 tokens per verify decode (25 decodes for 40 tokens)"
    );
    assert_eq!(
        lines[2],
        "ngram: drafting costs 0.0010 s/token on top of decode → 9.90 tok/s effective (vs 10.00 reported)"
    );
    assert_eq!(
        lines[3],
        "ngram: drafted on 10 of 25 steps (40.0%); the rest decoded plainly"
    );
    // no decode (a turn cancelled in prefill): no speculation lines
    let none = RunSummary {
        spec: Some(SpecSummary::default()),
        ..Default::default()
    };
    assert!(
        !summary_lines(&none, &streaming(2, false, Mmap))
            .iter()
            .any(|l| l.contains("drafts accepted"))
    );
}

#[test]
fn a_streamed_mtp_run_says_what_the_head_and_the_verify_batches_read() {
    let mib = 1024 * 1024;
    let mut s = RunSummary {
        n_gen: 10,
        decode_s: 1.0,
        threads: 2,
        spec: Some(SpecSummary {
            source: "mtp",
            drafted: 9,
            accepted: 3,
            decodes: 7,
            drafted_steps: 6,
            draft_s: 0.1,
            head_read_bytes: 2 * mib,
            verify_read_bytes: 5 * mib,
        }),
        stream: Some(StreamSummary {
            read_bytes: 8 * mib,
            ..Default::default()
        }),
        ..Default::default()
    };
    let lines = summary_lines(&s, &streaming(2, false, Mmap));
    assert!(lines.contains(
        &"mtp: of 8.0 MiB streamed, 2.0 MiB (25.0%) was the head's own routing, 5.0 MiB the widened verify batch".to_string()
    ), "{lines:?}");
    // no coverage line for the head, and no streamed line without reads
    assert!(!lines.iter().any(|l| l.contains("decoded plainly")));
    s.stream = None;
    let lines = summary_lines(&s, &streaming(2, false, Mmap));
    assert!(!lines.iter().any(|l| l.starts_with("mtp: of ")));
}
