//! The figures a run reports and the lines that carry them (seed telemetry contract).
//!
//! `TokenStats` is one generated token's row (the later CSV sink writes the same struct);
//! `RunSummary` is the end-of-run picture. The line formats follow `seed/telemetry.md`.

use crate::graph::predict::{PredictTally, RouteAheadTally};
use bmoe_telemetry::protocol::{Load, Progress, round_to};
use bmoe_telemetry::summary::{
    CacheSetting, Compute, DenseWeights, Generation, Mode, MoeCache, MoeChurn, MoeDrop, MoeOverlap,
    MoePrefetch, MoeRouteAhead, MoeStream, MoeWaits, NgramCoverage, Prefill, SpecAcceptance,
    SpecCost,
};

/// One generated token's measurements.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TokenStats {
    /// 1-based index.
    pub step: usize,
    /// Target token count.
    pub steps: usize,
    /// Wall time of the `llama_decode` that fed this token.
    pub wall_ms: f64,
    /// Serial: time blocked on expert reads. Overlap: Σ lanes' busy time (may exceed wall).
    pub io_ms: f64,
    /// Residual: wall − io − mgmt (serial) or wall − stall − mgmt (overlap), clamped at 0.
    pub compute_ms: f64,
    /// Cache management time.
    pub mgmt_ms: f64,
    /// Overlap stall (0 in serial mode).
    pub stall_ms: f64,
    /// Bytes read from flash.
    pub read_bytes: u64,
    /// Cumulative hit rate, −1 without a cache.
    pub cache_hit_pct: f64,
    /// Major faults during the decode.
    pub majflt: u64,
    /// Process CPU time during the decode.
    pub cpu_ms: f64,
    /// Dense residency sample (−1 = unmeasured).
    pub dense_resident_frac: f64,
}

impl TokenStats {
    /// Fills `compute_ms` from the measured terms (the seed's residual): the wall-time flash
    /// term is `io_ms` serially and `stall_ms` under overlap, where `io_ms` is lane busy time
    /// that ran beside compute (subtracting both would count the same wait twice).
    pub fn with_residual(mut self, overlap: bool) -> Self {
        let flash = if overlap { self.stall_ms } else { self.io_ms };
        self.compute_ms = (self.wall_ms - flash - self.mgmt_ms).max(0.0);
        self
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// The `BMOE_LOAD` line, present only when experts were read (or waited for) this token.
pub fn load_line(t: &TokenStats) -> Option<String> {
    (t.read_bytes > 0 || t.io_ms > 0.0).then(|| {
        Load {
            mb: round_to(t.read_bytes as f64 / MIB, 2),
            ms: round_to(t.io_ms, 1),
        }
        .to_line()
    })
}

/// The `BMOE_PROGRESS` line with this token's answer delta. Values are rounded to the original
/// CLI's decimals so the wire stays short.
pub fn progress_line(t: &TokenStats, delta_text: &str) -> String {
    progress_record(t, delta_text).to_line()
}

fn progress_record(t: &TokenStats, delta_text: &str) -> Progress {
    Progress {
        step: t.step as u64,
        steps: t.steps as u64,
        wall_ms: round_to(t.wall_ms, 1),
        io_ms: round_to(t.io_ms, 1),
        compute_ms: round_to(t.compute_ms, 1),
        mgmt_ms: round_to(t.mgmt_ms, 1),
        stall_ms: round_to(t.stall_ms, 1),
        read_mb: round_to(t.read_bytes as f64 / MIB, 2),
        cache_hit_pct: round_to(t.cache_hit_pct, 1),
        majflt: t.majflt,
        cpu_ms: round_to(t.cpu_ms, 1),
        dense_resident_frac: round_to(t.dense_resident_frac, 3),
        reset: false,
        delta_reasoning: String::new(),
        delta_text: delta_text.to_string(),
    }
}

/// The `BMOE_PROGRESS` line with chat-split deltas (`reset`, reasoning, answer) from
/// `bmoe_telemetry::deltas::DeltaEncoder`.
pub fn progress_line_deltas(t: &TokenStats, d: &bmoe_telemetry::deltas::Deltas) -> String {
    let mut p = progress_record(t, &d.text);
    p.reset = d.reset;
    p.delta_reasoning = d.reasoning.clone();
    p.to_line()
}

/// What the `mode:` line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeLine {
    /// `--moe-stream` with a cache budget (0 = off).
    Streaming {
        /// Budget in MiB.
        cache_mb: u64,
        /// Sized by `--cache-mb auto`.
        auto: bool,
        /// `--dense-weights`.
        dense: crate::cli::DenseWeights,
        /// The overlap that runs, with `--overlap`.
        overlap: Option<crate::stream::overlap::OverlapKind>,
    },
    /// Plain llama.cpp on a MoE architecture this build could stream.
    PlainStreamable {
        /// Architecture.
        arch: String,
    },
    /// Plain llama.cpp on an architecture without a recipe.
    PlainUnsupported {
        /// Architecture.
        arch: String,
    },
}

/// The `mode:` line (printed on every run).
pub fn mode_line(m: &ModeLine) -> String {
    let mode = match m {
        ModeLine::Streaming {
            cache_mb,
            auto,
            dense,
            overlap,
        } => Mode::Streaming {
            cache: if *auto {
                CacheSetting::Auto
            } else if *cache_mb == 0 {
                CacheSetting::Off
            } else {
                CacheSetting::Mib(*cache_mb)
            },
            dense: match dense {
                crate::cli::DenseWeights::Mmap => DenseWeights::Mmap,
                crate::cli::DenseWeights::Warm => DenseWeights::Warm,
                crate::cli::DenseWeights::Anon => DenseWeights::Anon,
            },
            overlap: overlap.map(|k| k.as_str().to_string()),
            extra: Vec::new(),
        },
        ModeLine::PlainStreamable { arch } => Mode::NotStreaming(format!(
            "plain llama.cpp on mmap — expert streaming off (pass --moe-stream to stream this {arch} model's experts)"
        )),
        ModeLine::PlainUnsupported { arch } => Mode::NotStreaming(format!(
            "plain llama.cpp on mmap — architecture '{arch}' is not one this build streams (see --list-archs)"
        )),
    };
    mode.to_string()
}

/// End-of-run figures.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunSummary {
    /// Tokens generated.
    pub n_gen: usize,
    /// Σ decode wall (s).
    pub decode_s: f64,
    /// Σ process CPU during decodes (s).
    pub cpu_s: f64,
    /// Σ major faults during decodes.
    pub majflt: u64,
    /// Compute threads.
    pub threads: usize,
    /// Prompt tokens prefilled.
    pub n_prompt: usize,
    /// Prefill wall (s).
    pub prefill_s: f64,
    /// Model load incl. capture and streaming set-up (s).
    pub load_s: f64,
    /// Streaming figures (generation deltas), when streaming.
    pub stream: Option<StreamSummary>,
    /// Σ dense-residency probe time during generation (s): part of the cache management time.
    pub probe_s: f64,
    /// What the routing edits did this turn, when streaming.
    pub routing: Option<RoutingSummary>,
    /// Self-speculation's counters, when `--ngram` (or `--mtp`) is on.
    pub spec: Option<SpecSummary>,
    /// `--predict-log`: the predictors' scores (session-cumulative).
    pub predict: Option<PredictTally>,
    /// `--route-ahead`: what it committed (session-cumulative).
    pub route_ahead: Option<RouteAheadTally>,
    /// `--row-stream`'s counters (whole run), when a table qualified.
    pub rows: Option<crate::stream::rows::RowStats>,
}

/// A turn's self-speculation ledger (the `ngram:` lines, the trailer's `mtp_*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SpecSummary {
    /// `mtp` or `ngram`.
    pub source: &'static str,
    /// Tokens drafted.
    pub drafted: u64,
    /// Drafts the target's argmax confirmed.
    pub accepted: u64,
    /// Decodes the generation cost (plain and verify).
    pub decodes: u64,
    /// Steps that drafted at all.
    pub drafted_steps: u64,
    /// Time spent drafting, outside the decodes (s).
    pub draft_s: f64,
    /// `--mtp` under `--moe-stream`: bytes the head's own routing streamed (drafts and
    /// catch-ups).
    pub head_read_bytes: u64,
    /// Bytes the verify decodes (1 + drafts tokens wide) streamed.
    pub verify_read_bytes: u64,
}

/// The speculation lines: acceptance, cost, and (`ngram`) coverage.
fn spec_lines(s: &RunSummary, sp: &SpecSummary, out: &mut Vec<String>) {
    if sp.decodes == 0 {
        return;
    }
    let source = sp.source.to_string();
    out.push(
        SpecAcceptance {
            source: source.clone(),
            accepted: sp.accepted,
            drafted: sp.drafted,
            pct: 100.0 * sp.accepted as f64 / sp.drafted.max(1) as f64,
            tokens_per_decode: s.n_gen as f64 / sp.decodes as f64,
            decodes: sp.decodes,
            tokens: s.n_gen as u64,
        }
        .to_string(),
    );
    let n = s.n_gen as f64;
    out.push(
        SpecCost {
            source,
            draft_s_per_token: sp.draft_s / n.max(1.0),
            effective_tok_s: per_second(n, s.decode_s + sp.draft_s),
            reported_tok_s: per_second(n, s.decode_s),
        }
        .to_string(),
    );
    if sp.source == "ngram" {
        out.push(
            NgramCoverage {
                drafted: sp.drafted_steps,
                steps: sp.decodes,
                pct: 100.0 * sp.drafted_steps as f64 / sp.decodes as f64,
            }
            .to_string(),
        );
    }
    let read = s.stream.as_ref().map_or(0, |st| st.read_bytes);
    if sp.source == "mtp" && read > 0 {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        out.push(format!(
            "mtp: of {:.1} MiB streamed, {:.1} MiB ({:.1}%) was the head's own routing, {:.1} MiB the widened verify batch",
            mib(read),
            mib(sp.head_read_bytes),
            100.0 * sp.head_read_bytes as f64 / read as f64,
            mib(sp.verify_read_bytes)
        ));
    }
}

/// The turn's routing-edit ledger (the trailer's `experts_*` keys, the `moe-drop:` line).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RoutingSummary {
    /// Routed slots in the phases the edits were armed for (decode; prefill too under
    /// `--drop-in-prefill`).
    pub routed: u64,
    /// Slots `--drop-cold-experts` dropped.
    pub dropped: u64,
    /// Missed slots `--expert-substitute` examined.
    pub reranked: u64,
    /// Slots it moved to a resident expert.
    pub substituted: u64,
    /// The `--drop-cold-experts` threshold (0 = off: no `moe-drop:` line).
    pub drop_frac: f64,
}

impl RunSummary {
    /// Σ cache management during generation (s): the streamer's plus the dense-residency
    /// probes' (the seed's `mgmt_ms` "plus the throttled dense-residency probe").
    pub fn mgmt_s(&self) -> f64 {
        self.stream.map_or(0.0, |st| st.mgmt_s) + self.probe_s
    }
}

/// The generation's streaming figures.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StreamSummary {
    /// Bytes read during generation.
    pub read_bytes: u64,
    /// Σ io (s).
    pub io_s: f64,
    /// Σ mgmt (s).
    pub mgmt_s: f64,
    /// Cumulative hit rate, −1 without a cache.
    pub cache_hit_pct: f64,
    /// Resident cache bytes at the end.
    pub resident_bytes: u64,
    /// Evictions (cumulative).
    pub evictions: u64,
    /// Re-reads (cumulative).
    pub rereads: u64,
    /// The budget `--cache-mb auto` sized (MiB), printed on the `moe-cache:` line.
    pub auto_budget_mib: Option<u64>,
    /// Distinct routed bytes of the last decode's pass over the layers.
    pub token_demand_bytes: u64,
    /// The widest layer's share of it.
    pub layer_demand_bytes: u64,
    /// Under `--overlap`: Σ stall (the union of blocked intervals), s.
    pub stall_s: Option<f64>,
    /// Under `--overlap`: Σ eval-thread waits for the previous batch, s.
    pub drain_s: f64,
    /// Route-ahead under overlap: loads waiting for their committed speculative reads, s.
    pub adopt_s: f64,
    /// Cache lookups, cumulative (prompts included, as `cache_hit_pct`).
    pub lookups: u64,
    /// Cache hits, cumulative.
    pub hits: u64,
    /// Experts read (misses), cumulative.
    pub experts_read: u64,
    /// Every expert of every streamed layer, bytes (what a resident run keeps in memory).
    pub expert_bytes: u64,
    /// `--prefetch`: this generation's speculative reads; `None` when it is off.
    pub spec: Option<PrefetchSummary>,
}

/// A generation's speculative reads (`moe-prefetch:`, trailer `spec_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrefetchSummary {
    /// Slice bytes read speculatively.
    pub read_bytes: u64,
    /// Experts whose speculative read completed.
    pub experts: u64,
    /// Of those, the ones a later routing hit.
    pub useful: u64,
    /// The predictor, when not the temporal one (`stale-gate`, `route-ahead`).
    pub tag: Option<&'static str>,
}

impl StreamSummary {
    /// Per token: the wall-time flash term (io serially, stall under overlap).
    pub fn flash_wait_s(&self) -> f64 {
        self.stall_s.unwrap_or(self.io_s)
    }
}

/// `amount / seconds`, or 0 when no time was measured (a run that generated nothing, a read
/// that never blocked): the rates the summary lines and the CSV trailer print.
pub(crate) fn per_second(amount: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { amount / seconds } else { 0.0 }
}

/// The end-of-run lines after the banners: `generation:`, `compute:`, `mode:`, `prefill:`,
/// `moe-stream:`, `moe-cache:`.
pub fn summary_lines(s: &RunSummary, mode: &ModeLine) -> Vec<String> {
    let n = s.n_gen.max(1) as f64;
    let s_tok = s.decode_s / n;
    let mut out = vec![
        Generation {
            tokens: s.n_gen as u64,
            s_per_token: s_tok,
            tok_s: per_second(s.n_gen as f64, s.decode_s),
        }
        .to_string(),
    ];
    let cpu_tok = s.cpu_s / n;
    let flt_tok = s.majflt as f64 / n;
    if cpu_tok > 0.0 || flt_tok > 0.0 {
        let occupancy_pct = if s_tok > 0.0 {
            100.0 * cpu_tok / (s_tok * s.threads.max(1) as f64)
        } else {
            0.0
        };
        out.push(
            Compute {
                occupancy_pct,
                cpu_s_per_token: cpu_tok,
                threads: s.threads as u64,
                major_faults_per_token: flt_tok,
            }
            .to_string(),
        );
    }
    if let Some(sp) = s.spec.as_ref() {
        spec_lines(s, sp, &mut out);
    }
    out.push(mode_line(mode));
    if s.n_prompt > 0 {
        out.push(
            Prefill {
                tokens: s.n_prompt as u64,
                seconds: s.prefill_s,
                tok_s: per_second(s.n_prompt as f64, s.prefill_s),
                load_s: s.load_s,
                ttft_s: s.load_s + s.prefill_s,
            }
            .to_string(),
        );
    }
    if let Some(st) = &s.stream {
        stream_lines(s, st, n, s_tok, &mut out);
    }
    if let Some(r) = &s.rows {
        out.extend(row_lines(r));
    }
    out
}

/// `--row-stream`'s lines: the `moe-rows:` trade, and the `FAILED reads` line after a failed
/// fetch (the table then holds rows that were never written).
pub fn row_lines(r: &crate::stream::rows::RowStats) -> Vec<String> {
    let mut out = vec![format!(
        "moe-rows: {:.1} MiB of row-gathered table(s) off the resident set, {:.1} MiB resident, {} rows gathered, {} reads ({:.1} MiB)",
        r.table_bytes as f64 / MIB,
        r.resident_bytes as f64 / MIB,
        r.rows,
        r.reads,
        r.read_bytes as f64 / MIB
    )];
    if r.io_errors > 0 {
        out.push(format!(
            "{} FAILED reads - this run's output is not trustworthy",
            r.io_errors
        ));
    }
    out
}

/// The streaming lines: `moe-stream:`, the cache and churn, prefetch, drop, overlap and waits.
fn stream_lines(s: &RunSummary, st: &StreamSummary, n: f64, s_tok: f64, out: &mut Vec<String>) {
    let read_mib = st.read_bytes as f64 / MIB;
    let io_s = st.io_s / n;
    let mgmt_s = s.mgmt_s() / n;
    let stall = st.stall_s.map(|x| x / n);
    out.push(
        MoeStream {
            read_mib,
            mib_per_token: read_mib / n,
            decode_s_per_token: s_tok,
            compute_s: (s_tok - st.flash_wait_s() / n - mgmt_s).max(0.0),
            mgmt_s: Some(mgmt_s),
            io_s,
            mib_per_s: per_second(read_mib, st.io_s),
            stall_s_per_token: stall,
        }
        .to_string(),
    );
    if st.cache_hit_pct >= 0.0 {
        out.push(
            MoeCache {
                hit_pct: st.cache_hit_pct,
                resident_mib: st.resident_bytes as f64 / MIB,
                budget_mib: st.auto_budget_mib.map(|b| b as f64),
                budget_note: st.auto_budget_mib.map(|_| "auto".to_string()),
            }
            .to_string(),
        );
        if st.evictions > 0 || st.rereads > 0 {
            out.push(
                MoeChurn {
                    evictions: st.evictions,
                    rereads: st.rereads,
                    rereads_per_token: st.rereads as f64 / n,
                }
                .to_string(),
            );
        }
    }
    if let Some(sp) = st.spec {
        out.push(
            MoePrefetch {
                mib: sp.read_bytes as f64 / MIB,
                useful: sp.useful,
                prefetched: sp.experts,
                pct: if sp.experts > 0 {
                    100.0 * sp.useful as f64 / sp.experts as f64
                } else {
                    0.0
                },
                tag: sp.tag.map(str::to_string),
            }
            .to_string(),
        );
    }
    if let Some(r) = s.routing.filter(|r| r.drop_frac > 0.0) {
        out.push(
            MoeDrop {
                dropped: r.dropped,
                routed: r.routed,
                pct: if r.routed > 0 {
                    100.0 * r.dropped as f64 / r.routed as f64
                } else {
                    0.0
                },
                threshold: r.drop_frac,
            }
            .to_string(),
        );
    }
    if let Some(stall_s_per_token) = stall {
        out.push(MoeOverlap { stall_s_per_token }.to_string());
        if st.drain_s / n >= 0.0005 || st.adopt_s / n >= 0.0005 {
            out.push(
                MoeWaits {
                    drain_s_per_token: st.drain_s / n,
                    adopt_s_per_token: st.adopt_s / n,
                }
                .to_string(),
            );
        }
    }
    if let Some(ra) = s.route_ahead {
        out.push(
            MoeRouteAhead {
                layers: ra.layers as u64,
                committed: ra.committed,
                passed: ra.passthrough,
                agree_pct: ra.agree_pct(),
            }
            .to_string(),
        );
    }
    if let Some(p) = &s.predict {
        out.extend(p.lines());
    }
}

#[cfg(test)]
mod tests {
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
        assert!(lines.contains(
            &"mode: expert streaming, cache off, dense mmap, overlap (staged)".to_string()
        ));
        assert!(
            lines.contains(
                &"moe-overlap: stall 0.400 s/token (flash reads overlapped with FFN compute)"
                    .to_string()
            )
        );
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
}
