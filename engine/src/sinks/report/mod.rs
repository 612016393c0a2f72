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
mod tests;
