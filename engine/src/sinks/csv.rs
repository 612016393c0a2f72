//! `--csv PATH`: the `# bmoe_metrics v2` file — the resolved configuration as a preamble, one
//! row per token (flushed as written, so a killed run keeps every completed token) and a
//! `# summary` trailer. Every line goes through `bmoe_telemetry::metrics`; nothing here formats
//! a contract line by hand.

use super::SinkError;
pub use crate::graph::device_share::PrefillDevice;
use crate::memory::picture::{MemorySnapshot, mib};
use crate::sinks::report::{RunSummary, TokenStats, per_second};
use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, SummaryTrailer, TokenRow, trailer_keys};
use std::fs::File;
use std::path::{Path, PathBuf};

const FLAG: &str = "--csv";

/// What a row adds to a token's [`TokenStats`]: the memory picture and the loop gap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowContext {
    /// Which `generate()` of the session (0 for one-shot).
    pub turn: u64,
    /// Memory sampled right after the decode.
    pub memory: MemorySnapshot,
    /// Expert-cache budget in effect, MiB (0 without a cache).
    pub cache_budget_mib: f64,
    /// Wall time from the end of the previous decode to the start of this one, ms.
    pub loop_overhead_ms: f64,
    /// System page size (bytes), for `majflt_mib`.
    pub page_size: u64,
    /// Overlap: the eval thread's waits for the previous layer's reads, ms.
    pub drain_ms: f64,
    /// Route-ahead: `adopt_ms`, `ra_issue_ms`, `ra_wd_ms` (0 without it).
    pub route_ahead_ms: [f64; 3],
    /// Tokens the decode of this row confirmed: 1 plain, the group's size on a verify
    /// decode's first row, 0 on the group's other rows.
    pub mtp_batch: u64,
    /// Drafting time of this row's group (a slice of `loop_overhead_ms`), ms.
    pub mtp_draft_ms: f64,
}

/// One CSV row: every column of the seed, `0` where a feature of a later issue is off
/// (speculation, overlap waits, route-ahead) and where the platform cannot measure.
pub fn token_row(t: &TokenStats, c: &RowContext) -> TokenRow {
    let p = c.memory.process.unwrap_or_default();
    let s = c.memory.system.unwrap_or_default();
    TokenRow {
        step: Some(t.step as u64),
        steps: Some(t.steps as u64),
        wall_ms: Some(t.wall_ms),
        io_ms: Some(t.io_ms),
        compute_ms: Some(t.compute_ms),
        read_bytes: Some(t.read_bytes),
        cache_hit_pct: Some(t.cache_hit_pct),
        stall_ms: Some(t.stall_ms),
        mgmt_ms: Some(t.mgmt_ms),
        majflt: Some(t.majflt),
        cpu_ms: Some(t.cpu_ms),
        dense_resident_frac: Some(t.dense_resident_frac),
        turn: Some(c.turn),
        majflt_mib: Some(mib(t.majflt.saturating_mul(c.page_size))),
        cache_budget_mib: Some(c.cache_budget_mib),
        rss_mib: Some(mib(p.rss)),
        rss_anon_mib: Some(mib(p.rss_anon)),
        rss_file_mib: Some(mib(p.rss_file)),
        swap_mib: Some(mib(p.swap)),
        mem_available_mib: Some(mib(s.available)),
        mem_free_mib: Some(mib(s.free)),
        swap_free_mib: Some(mib(s.swap_free)),
        loop_overhead_ms: Some(c.loop_overhead_ms),
        mtp_batch: Some(c.mtp_batch),
        mtp_draft_ms: Some(c.mtp_draft_ms),
        drain_ms: Some(c.drain_ms),
        adopt_ms: Some(c.route_ahead_ms[0]),
        ra_issue_ms: Some(c.route_ahead_ms[1]),
        ra_wd_ms: Some(c.route_ahead_ms[2]),
    }
}

/// End-of-run figures the trailer needs beyond [`RunSummary`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrailerContext {
    /// Expert-cache budget in effect, MiB (0 without a cache).
    pub cache_budget_mib: f64,
    /// Σ loop overhead incl. the tail after the last decode, s.
    pub loop_overhead_s: f64,
    /// The memory cgroup's usage at the end of the run (bytes), inside a limited one.
    pub cgroup_usage_bytes: Option<u64>,
    /// Process CPU during the prefill, s.
    pub prefill_cpu_s: f64,
    /// Bytes read during the prefill.
    pub prefill_read_bytes: u64,
    /// Blocked read time during the prefill, s.
    pub prefill_io_s: f64,
    /// Cache management during the prefill, s.
    pub prefill_mgmt_s: f64,
    /// Overlap stall during the prefill, s.
    pub prefill_stall_s: f64,
    /// `--prefill-device`: what the device prefill did (`None` without the flag).
    pub prefill_dev: Option<PrefillDevice>,
    /// The turn was cancelled: the trailer appends `cancelled=1` (absent otherwise).
    pub cancelled: bool,
    /// A SIGINT stopped the turn: `interrupted=1` (written `0` otherwise, on every trailer).
    pub interrupted: bool,
}

/// The `# summary` trailer: every key that applies to a plain or streamed run.
pub fn trailer(s: &RunSummary, c: &TrailerContext) -> SummaryTrailer {
    use trailer_keys as k;
    let n = s.n_gen.max(1) as f64;
    let s_tok = s.decode_s / n;
    let mut t = SummaryTrailer::new();
    t.push(k::TOKENS, s.n_gen.to_string());
    t.push_f64(k::S_PER_TOK, s_tok, 3);
    t.push_f64(k::TOK_S, per_second(s.n_gen as f64, s.decode_s), 3);
    let st = s.stream.unwrap_or_default();
    let (io_tok, mgmt_tok) = (st.io_s / n, s.mgmt_s() / n);
    let stall_tok = st.stall_s.unwrap_or(0.0) / n;
    t.push_f64(k::READ_MIB, mib(st.read_bytes), 1);
    t.push_f64(k::IO_S, st.io_s, 2);
    t.push_f64(
        k::COMPUTE_S_PER_TOK,
        (s_tok - st.flash_wait_s() / n - mgmt_tok).max(0.0),
        3,
    );
    t.push_f64(k::IO_S_PER_TOK, io_tok, 3);
    t.push_f64(
        k::CACHE_HIT_PCT,
        if s.stream.is_some() {
            st.cache_hit_pct
        } else {
            -1.0
        },
        1,
    );
    t.push(k::N_PROMPT, s.n_prompt.to_string());
    t.push_f64(k::LOAD_S, s.load_s, 3);
    t.push_f64(k::PREFILL_S, s.prefill_s, 3);
    t.push_f64(
        k::PREFILL_TPS,
        per_second(s.n_prompt as f64, s.prefill_s),
        2,
    );
    t.push_f64(k::STALL_S_PER_TOK, stall_tok, 3);
    t.push_f64(k::MGMT_S_PER_TOK, mgmt_tok, 3);
    t.push_f64(k::CACHE_RESIDENT_MIB, mib(st.resident_bytes), 1);
    t.push_f64(k::CACHE_BUDGET_MIB, c.cache_budget_mib, 1);
    t.push("cache_resizes", "0");
    if let Some(sp) = st.spec {
        t.push_f64("spec_read_MiB", mib(sp.read_bytes), 1);
        t.push("spec_experts", sp.experts.to_string());
        t.push("spec_useful", sp.useful.to_string());
    }
    t.push_f64(k::MAJFLT_PER_TOK, s.majflt as f64 / n, 2);
    t.push_f64(k::CPU_S_PER_TOK, s.cpu_s / n, 4);
    t.push_f64(k::LOOP_OVERHEAD_S_PER_TOK, c.loop_overhead_s / n, 4);
    if s.stream.is_some() {
        t.push_f64("token_demand_MiB", mib(st.token_demand_bytes), 1);
        t.push_f64("layer_demand_MiB", mib(st.layer_demand_bytes), 1);
        let r = s.routing.unwrap_or_default();
        t.push("experts_routed", r.routed.to_string());
        t.push("experts_dropped", r.dropped.to_string());
        t.push("experts_reranked", r.reranked.to_string());
        t.push("experts_substituted", r.substituted.to_string());
    }
    let sp = s.spec.unwrap_or_default();
    t.push("mtp_drafted", sp.drafted.to_string());
    t.push("mtp_accepted", sp.accepted.to_string());
    t.push("mtp_decodes", sp.decodes.to_string());
    t.push_f64("mtp_draft_s/tok", sp.draft_s / n, 4);
    t.push("drafted_steps", sp.drafted_steps.to_string());
    if let Some(ra) = s.route_ahead {
        t.push("ra_committed", ra.committed.to_string());
        t.push("ra_passthrough", ra.passthrough.to_string());
        t.push_f64("ra_agree_pct", ra.agree_pct(), 1);
        t.push_f64("ra_gemv_ms/tok", ra.gemv_ns as f64 / 1e6 / n, 3);
        t.push_f64("ra_issue_ms/tok", ra.issue_ns as f64 / 1e6 / n, 3);
        t.push_f64("ra_wd_ms/tok", ra.wd_ns as f64 / 1e6 / n, 3);
    }
    let rows = s.rows.unwrap_or_default();
    t.push_f64("row_table_MiB", mib(rows.table_bytes), 1);
    t.push_f64("row_resident_MiB", mib(rows.resident_bytes), 1);
    t.push("row_rows", rows.rows.to_string());
    t.push("row_reads", rows.reads.to_string());
    t.push_f64("row_read_MiB", mib(rows.read_bytes), 3);
    t.push("row_evictions", rows.evictions.to_string());
    t.push("row_io_errors", rows.io_errors.to_string());
    t.push("evictions", st.evictions.to_string());
    t.push("rereads", st.rereads.to_string());
    t.push_f64("prefill_cpu_s", c.prefill_cpu_s, 3);
    t.push_f64("prefill_read_mib", mib(c.prefill_read_bytes), 1);
    t.push_f64("prefill_io_s", c.prefill_io_s, 3);
    t.push_f64("prefill_stall_s", c.prefill_stall_s, 3);
    t.push_f64("prefill_mgmt_s", c.prefill_mgmt_s, 3);
    if let Some(d) = c.prefill_dev {
        t.push("prefill_dev_tokens", d.tokens.to_string());
        t.push("prefill_dev_nodes", d.nodes.to_string());
        t.push_f64("prefill_dev_read_mib", mib(d.read_bytes), 1);
        t.push_f64("prefill_dev_stall_s", d.stall_s, 3);
    }
    if let Some(u) = c.cgroup_usage_bytes {
        t.push_f64("cgroup_usage_MiB", mib(u), 1);
    }
    if st.stall_s.is_some() {
        t.push_f64("drain_s/tok", st.drain_s / n, 3);
        t.push_f64("adopt_s/tok", st.adopt_s / n, 3);
    }
    // an appended key (older parsers ignore it): the figures above cover a partial turn
    if c.cancelled {
        t.push(k::CANCELLED, "1");
    }
    t.set_interrupted(c.interrupted);
    t
}

/// What the run settled on at load — the values no flag states directly.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvedRun {
    /// `general.architecture`.
    pub arch: String,
    /// Block count.
    pub n_layer: u64,
    /// `<arch>.expert_count` (0 = not MoE).
    pub n_expert: u64,
    /// Effective top-k after any `--n-expert-used` override (0 = not MoE).
    pub n_expert_used: u64,
    /// Whether experts are streamed.
    pub moe_stream: bool,
    /// The cache budget in effect, MiB (what `auto` chose, under `auto`).
    pub cache_mb: u64,
    /// The floor `auto` left free, MiB (`None` without `auto`).
    pub cache_floor_mb: Option<u64>,
    /// Tokens per prefill decode when the prompt is split to fit the cache
    /// ([`crate::stream::prefill`]); the preamble's `n_ubatch` is then at most this.
    pub prefill_chunk: Option<u64>,
    /// One token's worst-case routed bytes.
    pub cache_cycle_bytes: u64,
    /// Whether every shard reads with O_DIRECT (achieved, not requested).
    pub o_direct: bool,
    /// I/O lanes running.
    pub io_threads: u64,
    /// The dense-weights policy in effect (`mmap` without streaming).
    pub dense_weights: crate::cli::DenseWeights,
    /// The overlap that runs, with `--overlap`.
    pub overlap: Option<crate::stream::overlap::OverlapKind>,
}

/// `x` as the f64 nearest its shortest decimal form, so the preamble prints `0.8` as typed, not
/// the f32's binary expansion `0.800000011920929`.
fn as_typed(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

/// The preamble: every seed key, holding the resolved configuration (features of later issues
/// written as off).
pub fn run_info(cfg: &crate::cli::RunConfig, r: &ResolvedRun) -> RunInfo {
    use crate::cli::Sampling;
    let sc = cfg.stream;
    let auto = sc.and_then(|s| s.auto);
    let (temp, top_k, top_p, seed) = match cfg.sampling {
        Sampling::Greedy => (0.0, 0, 1.0, 0),
        Sampling::Sample {
            temp,
            top_k,
            top_p,
            seed,
        } => (
            as_typed(temp),
            u64::try_from(top_k).unwrap_or(0),
            as_typed(top_p),
            u64::from(seed),
        ),
    };
    RunInfo {
        version: Some(2),
        engine: Some(crate::VERSION.to_string()),
        model: Some(cfg.model.file_name().map_or_else(
            || cfg.model.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )),
        arch: Some(r.arch.clone()),
        n_layer: Some(r.n_layer),
        n_expert: Some(r.n_expert),
        n_expert_used: Some(r.n_expert_used),
        threads: Some(cfg.threads as u64),
        n_ctx: Some(u64::from(cfg.n_ctx)),
        n_ubatch: Some(
            r.prefill_chunk
                .map_or(u64::from(cfg.n_ubatch), |c| c.min(u64::from(cfg.n_ubatch))),
        ),
        chatml: Some(cfg.chatml),
        moe_stream: Some(r.moe_stream),
        cache_mb: Some(r.cache_mb),
        cache_auto: Some(auto.is_some()),
        cache_floor_mb: Some(
            r.cache_floor_mb
                .unwrap_or(crate::memory::autocache::DEFAULT_FLOOR_MB),
        ),
        cache_ceil_mb: Some(auto.map_or(0, |a| a.ceil_mb)),
        cache_cycle_mb: Some(r.cache_cycle_bytes.div_ceil(1024 * 1024)),
        force_cache: Some(false),
        load_all: Some(sc.is_some_and(|s| s.load_all)),
        io_threads: Some(r.io_threads),
        o_direct: Some(r.o_direct),
        overlap: Some(r.overlap.is_some()),
        io_two_wave: Some(false),
        prefetch: Some(sc.map_or(0, |s| s.prefetch as u64)),
        route_ahead: Some(cfg.predict.route_ahead as u64),
        predict_prefetch: Some(cfg.predict.prefetch),
        predict_log: Some(cfg.predict.log),
        // the cap in effect: none without the prefetcher
        predict_spec_max: Some(if cfg.predict.prefetch {
            cfg.predict.spec_max as u64
        } else {
            0
        }),
        prefetch_sync: Some(sc.is_some_and(|s| s.prefetch_sync)),
        dense_weights: Some(r.dense_weights.as_str().to_string()),
        drop_cold_frac: Some(as_typed(cfg.routing.edits.drop_frac)),
        drop_renorm: Some(cfg.routing.edits.renorm),
        drop_prefill: Some(cfg.routing.edits.drop_prefill),
        substitute_lambda: Some(as_typed(cfg.routing.edits.substitute_lambda)),
        temp: Some(temp),
        top_k: Some(top_k),
        top_p: Some(top_p),
        seed: Some(seed),
        compute_trace_layers: Some(u64::from(matches!(
            cfg.compute_trace,
            Some((_, crate::graph::timing::Granularity::Layer))
        ))),
        spec: Some(cfg.spec.name().to_string()),
        spec_draft_max: Some(u64::from(cfg.spec.draft_max())),
        mtp_p_min: Some(as_typed(cfg.spec.p_min())),
        ngram_min_match: Some(u64::from(cfg.spec.min_match())),
        extra: {
            let mut m = cgroup_keys(crate::memory::picture::cgroup_memory().as_ref());
            // a traced run is a diagnostic, not a benchmark: say so where the numbers are
            if r.moe_stream && cfg.route_trace.is_some() {
                m.insert("route_trace", "1");
            }
            if r.moe_stream && cfg.io_trace.is_some() {
                m.insert("io_trace", "1");
            }
            if matches!(
                cfg.compute_trace,
                Some((_, crate::graph::timing::Granularity::Node))
            ) {
                m.insert("compute_trace", "1");
            }
            // large (prompt) batches ran on this ggml device: prefill figures are not the CPU's
            if let Some(dev) = &cfg.prefill_device {
                m.insert("prefill_device", dev.as_str());
            }
            // `threads` is then the maximum: tokens ran with it or fewer (stderr says how many)
            if cfg.adaptive_threads {
                m.insert("threads_adaptive", "1");
            }
            // a replayed run routes as another run did: not comparable with a routed one
            if let (true, Some((path, _))) = (r.moe_stream, &cfg.routing.replay) {
                m.insert("route_replay", path.display().to_string());
            }
            // which overlap mechanism ran: userfaultfd page waits, or the staged fallback
            if let Some(k) = r.overlap {
                m.insert("overlap_kind", k.as_str());
            }
            m
        },
    }
}

/// Appended preamble keys (older readers ignore them): the memory cgroup the run was confined
/// to, `cgroup=none` outside one — the limit that bounds every memory column of the rows.
pub fn cgroup_keys(cg: Option<&crate::memory::picture::CgroupMemory>) -> bmoe_telemetry::kv::KvMap {
    let mut m = bmoe_telemetry::kv::KvMap::new();
    match cg {
        Some(c) => {
            let v = match c.version {
                crate::memory::picture::CgroupVersion::V1 => "v1",
                crate::memory::picture::CgroupVersion::V2 => "v2",
            };
            m.insert("cgroup", v);
            m.insert(
                "cgroup_limit_mb",
                c.limit.map_or(0, |l| l / (1024 * 1024)).to_string(),
            );
        }
        None => m.insert("cgroup", "none"),
    }
    m
}

/// An open metrics CSV.
pub struct CsvSink {
    writer: MetricsWriter<File>,
    /// Where the last complete write ended (a failed one is cut off).
    tail: Option<super::Tail>,
    path: PathBuf,
}

impl std::fmt::Debug for CsvSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvSink").field("path", &self.path).finish()
    }
}

impl CsvSink {
    /// Stops the file after a failed write: the writer is dropped (its buffer flushed once
    /// more) and the file cut back to the end of its last complete write.
    pub fn abandon(self) {
        let Self { writer, tail, .. } = self;
        drop(writer);
        super::Tail::cut(tail);
    }

    /// Creates `path` and writes the preamble and header.
    ///
    /// # Errors
    /// [`SinkError::Create`] naming the file.
    pub fn create(path: &Path, info: &RunInfo) -> Result<Self, SinkError> {
        let writer = MetricsWriter::create(path, info).map_err(SinkError::creating(FLAG, path))?;
        Ok(Self {
            tail: super::Tail::of(path),
            writer,
            path: path.to_path_buf(),
        })
    }

    /// Appends one row (flushed).
    ///
    /// # Errors
    /// [`SinkError::Write`] naming the file.
    pub fn write_row(&mut self, row: &TokenRow) -> Result<(), SinkError> {
        self.writer
            .write_row(row)
            .map_err(|source| self.write_error(source))?;
        super::Tail::commit(&mut self.tail);
        Ok(())
    }

    /// Appends the `# summary` trailer (flushed).
    ///
    /// # Errors
    /// [`SinkError::Write`] naming the file.
    pub fn write_summary(&mut self, t: &SummaryTrailer) -> Result<(), SinkError> {
        self.writer
            .write_summary(t)
            .map_err(|source| self.write_error(source))?;
        super::Tail::commit(&mut self.tail);
        Ok(())
    }

    fn write_error(&self, source: bmoe_telemetry::Error) -> SinkError {
        SinkError::writing(FLAG, &self.path)(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::picture::{ProcessMemory, SystemMemory};
    use crate::sinks::report::{RoutingSummary, StreamSummary};
    use bmoe_telemetry::metrics::{MetricsFile, TOKEN_COLUMNS};

    fn sample_row() -> TokenStats {
        TokenStats {
            step: 1,
            steps: 2,
            wall_ms: 10.0,
            io_ms: 4.0,
            mgmt_ms: 1.0,
            read_bytes: 1 << 20,
            cache_hit_pct: 50.0,
            majflt: 3,
            cpu_ms: 30.0,
            dense_resident_frac: -1.0,
            ..Default::default()
        }
        .with_residual(false)
    }

    #[test]
    fn a_written_file_reads_back_with_every_column_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.csv");
        let info = RunInfo {
            engine: Some("0.1.0".into()),
            model: Some("tiny.gguf".into()),
            cache_mb: Some(2),
            dense_weights: Some("mmap".into()),
            ..Default::default()
        };
        let mut sink = CsvSink::create(&path, &info).unwrap();
        let ctx = RowContext {
            memory: MemorySnapshot {
                process: Some(ProcessMemory {
                    rss: 10 << 20,
                    rss_anon: 4 << 20,
                    rss_file: 6 << 20,
                    swap: 0,
                }),
                system: Some(SystemMemory {
                    available: 100 << 20,
                    free: 50 << 20,
                    swap_free: 0,
                }),
            },
            cache_budget_mib: 2.0,
            loop_overhead_ms: 0.25,
            page_size: 4096,
            turn: 0,
            drain_ms: 0.0,
            route_ahead_ms: [0.0; 3],
            mtp_batch: 1,
            mtp_draft_ms: 0.0,
        };
        sink.write_row(&token_row(&sample_row(), &ctx)).unwrap();
        // flushed per row: readable before the trailer exists
        let partial = MetricsFile::read(&path).unwrap();
        assert_eq!(partial.rows.len(), 1);
        let summary = RunSummary {
            n_gen: 1,
            decode_s: 0.01,
            cpu_s: 0.03,
            majflt: 3,
            threads: 2,
            n_prompt: 4,
            prefill_s: 0.1,
            load_s: 0.5,
            rows: None,
            stream: Some(StreamSummary {
                read_bytes: 1 << 20,
                io_s: 0.004,
                mgmt_s: 0.001,
                cache_hit_pct: 50.0,
                resident_bytes: 1 << 20,
                evictions: 0,
                rereads: 0,
                auto_budget_mib: None,
                token_demand_bytes: 3 << 20,
                layer_demand_bytes: 1 << 20,
                stall_s: None,
                drain_s: 0.0,
                ..Default::default()
            }),
            // a dense probe's time is cache management: in mgmt_s/tok, out of compute_s/tok
            probe_s: 0.002,
            routing: Some(RoutingSummary {
                routed: 40,
                dropped: 7,
                reranked: 5,
                substituted: 2,
                drop_frac: 0.5,
            }),
            spec: None,
            predict: None,
            route_ahead: None,
        };
        sink.write_summary(&trailer(&summary, &TrailerContext::default()))
            .unwrap();
        let f = MetricsFile::read(&path).unwrap();
        assert_eq!(f.header, TOKEN_COLUMNS.map(String::from).to_vec());
        let r = &f.rows[0];
        for col in TOKEN_COLUMNS {
            assert!(r.get_f64(col).is_some(), "column {col} empty");
        }
        assert_eq!(r.compute_ms, Some(5.0));
        assert_eq!(r.majflt_mib, Some(0.01));
        assert_eq!(r.rss_anon_mib, Some(4.0));
        assert_eq!(f.info.cache_mb, Some(2));
        let t = &f.summaries[0];
        assert_eq!(t.get_f64("read_MiB"), Some(1.0));
        assert_eq!(t.get_f64("compute_s/tok"), Some(0.003));
        assert_eq!(t.get_f64("mgmt_s/tok"), Some(0.003));
        assert_eq!(t.get_f64("majflt/tok"), Some(3.0));
        assert_eq!(t.get_u64("n_prompt"), Some(4));
        // a run that was not interrupted says so
        assert_eq!(t.interrupted(), Some(false));
        assert!(!t.cancelled());
        let stopped = TrailerContext {
            cancelled: true,
            interrupted: true,
            ..Default::default()
        };
        let line = trailer(&summary, &stopped).to_line().unwrap();
        assert!(line.ends_with(" cancelled=1 interrupted=1"), "{line}");
        assert_eq!(t.get_f64("token_demand_MiB"), Some(3.0));
        assert_eq!(t.get_f64("layer_demand_MiB"), Some(1.0));
        let ledger = ["routed", "dropped", "reranked", "substituted"]
            .map(|k| t.get_u64(&format!("experts_{k}")));
        assert_eq!(ledger, [Some(40), Some(7), Some(5), Some(2)]);
    }

    #[test]
    fn cgroup_keys_name_the_limit() {
        use crate::memory::picture::{CgroupMemory, CgroupVersion};
        let cg = CgroupMemory {
            version: CgroupVersion::V1,
            dir: "/sys/fs/cgroup/memory/x".into(),
            limit: Some(8 << 30),
            usage: 1 << 30,
            reclaimable: 0,
        };
        let m = cgroup_keys(Some(&cg));
        assert_eq!(m.get("cgroup"), Some("v1"));
        assert_eq!(m.get("cgroup_limit_mb"), Some("8192"));
        assert_eq!(cgroup_keys(None).get("cgroup"), Some("none"));
    }

    #[test]
    fn an_unwritable_path_names_the_file() {
        let e =
            CsvSink::create(Path::new("/nonexistent-dir/x.csv"), &RunInfo::default()).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/x.csv"), "{e}");
        assert!(e.hint().contains("--csv"), "{}", e.hint());
    }
}
