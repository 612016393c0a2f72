//! The panel's own event vocabulary.
//!
//! Every source (a spawned engine, a pipe on stdin, a recorded CSV) is translated into these
//! events by [`crate::decode`]; the state in [`crate::state`] folds them and never sees a wire
//! format. Parsing the contract is `bmoe-telemetry`'s job, not this crate's.

/// One generated token as the panel needs it, whichever source it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenSample {
    /// 1-based index of the token.
    pub step: u64,
    /// Target token count of the generation.
    pub steps: u64,
    /// Decode time of the token (brackets `llama_decode` only), ms.
    pub wall_ms: f64,
    /// Flash read time, ms: blocked wall time in serial mode, summed lane busy time under overlap.
    pub io_ms: f64,
    /// Cache-management time, ms.
    pub mgmt_ms: f64,
    /// Union of stalled intervals under overlap (0 in serial), ms.
    pub stall_ms: f64,
    /// Flash bytes read this token, MiB.
    pub read_mib: f64,
    /// Cumulative cache hit rate in percent; `None` when no cache is used (`-1` on the wire).
    pub cache_hit_pct: Option<f64>,
    /// Major page faults inside the decode (0 = unmeasured).
    pub majflt: u64,
    /// Process CPU time over all threads, ms (0 = unmeasured).
    pub cpu_ms: f64,
    /// Sampled dense-weight residency in `0..=1`; `None` when unmeasured (`-1`).
    pub dense_resident_frac: Option<f64>,
    /// Gap since the previous decode (CSV only), ms.
    pub loop_overhead_ms: Option<f64>,
    /// Tokens this row's decode confirmed (speculation); 1 without it, 0 never.
    pub mtp_batch: u64,
    /// Session turn this token belongs to (0 for a one-shot run).
    pub turn: u64,
    /// The memory picture, when the source records it (CSV only).
    pub memory: Option<Memory>,
}

impl Default for TokenSample {
    fn default() -> Self {
        TokenSample {
            step: 0,
            steps: 0,
            wall_ms: 0.0,
            io_ms: 0.0,
            mgmt_ms: 0.0,
            stall_ms: 0.0,
            read_mib: 0.0,
            cache_hit_pct: None,
            majflt: 0,
            cpu_ms: 0.0,
            dense_resident_frac: None,
            loop_overhead_ms: None,
            mtp_batch: 1,
            turn: 0,
            memory: None,
        }
    }
}

impl TokenSample {
    /// True for the trailing rows of a speculative group: the group's first row carries the whole
    /// decode cost and these carry zeros, so they are tokens but not timings.
    pub fn is_follower(&self) -> bool {
        self.wall_ms <= 0.0 && self.io_ms <= 0.0 && self.cpu_ms <= 0.0
    }

    /// This row's cost per token it confirmed. A speculative verify decode charges its whole
    /// cost to the group's first row (the rest carry zeros), and the contract's per-token cost of
    /// a group is that row's figures divided by `mtp_batch`: every per-token figure the panel
    /// shows for one row must come from here, never from the raw group totals.
    pub fn per_token(&self) -> PerToken {
        let k = self.mtp_batch.max(1) as f64;
        let per = |x: f64| if x.is_finite() { x / k } else { 0.0 };
        PerToken {
            wall_ms: per(self.wall_ms),
            io_ms: per(self.io_ms),
            stall_ms: per(self.stall_ms),
            mgmt_ms: per(self.mgmt_ms),
            cpu_ms: per(self.cpu_ms),
            read_mib: per(self.read_mib),
            majflt: per(self.majflt as f64),
        }
    }
}

/// One row's cost per confirmed token ([`TokenSample::per_token`]): the row's figures divided by
/// its `mtp_batch`; identical to the row without speculation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PerToken {
    /// Decode wall time per token, ms.
    pub wall_ms: f64,
    /// Flash read time per token, ms (lane-busy sum under overlap).
    pub io_ms: f64,
    /// Overlap stall per token, ms.
    pub stall_ms: f64,
    /// Cache management per token, ms.
    pub mgmt_ms: f64,
    /// Process CPU per token, ms.
    pub cpu_ms: f64,
    /// Flash bytes read per token, MiB.
    pub read_mib: f64,
    /// Major faults per token (fractional when a group's count does not divide evenly).
    pub majflt: f64,
}

/// The memory columns of a metrics CSV row, MiB.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Memory {
    /// Total resident (`VmRSS`).
    pub rss_mib: f64,
    /// Resident anonymous memory: where the expert cache lives.
    pub rss_anon_mib: f64,
    /// Resident file-backed memory: the mmap'd model.
    pub rss_file_mib: f64,
    /// Anonymous memory already in zram/swap (`VmSwap`).
    pub swap_mib: f64,
    /// What the device claims is available (`MemAvailable`).
    pub mem_available_mib: f64,
    /// `MemFree`.
    pub mem_free_mib: f64,
    /// `SwapFree`.
    pub swap_free_mib: f64,
    /// What the major faults moved (`majflt` × page size).
    pub majflt_mib: f64,
    /// Expert-cache budget in effect.
    pub cache_budget_mib: f64,
}

/// How a token's text deltas change the streamed answer: the `delta_*` / `reset` fields of a
/// `BMOE_PROGRESS` line, applied by `bmoe_telemetry`'s [`TextAccumulator`], the one
/// implementation of the contract's rule.
///
/// [`TextAccumulator`]: bmoe_telemetry::deltas::TextAccumulator
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TextDelta {
    /// New thinking-span text (or its full snapshot when `reset`).
    pub reasoning: String,
    /// New answer text (or its full snapshot when `reset`).
    pub text: String,
    /// `"reset":1`: the strings replace the accumulated text instead of extending it.
    pub reset: bool,
}

impl TextDelta {
    /// The delta as the text fields of a progress record (what the accumulator reads).
    pub fn to_progress(&self) -> bmoe_telemetry::protocol::Progress {
        bmoe_telemetry::protocol::Progress {
            reset: self.reset,
            delta_reasoning: self.reasoning.clone(),
            delta_text: self.text.clone(),
            ..bmoe_telemetry::protocol::Progress::default()
        }
    }
}

/// Run facts that decide how figures are read: the CSV preamble, the spawned command line, or
/// the flags given to `bmoe-top`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunConfig {
    /// `key=value` facts in the order first seen (a repeated key keeps its last value).
    pub entries: Vec<(String, String)>,
}

impl RunConfig {
    /// The value of `key`, if the run stated it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` (replacing an earlier value in place).
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        let value = crate::clean::clean(&value.into(), false);
        let key = crate::clean::clean(key, false);
        let key = key.as_str();
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key.to_string(), value)),
        }
    }

    /// Fills every key `other` states (later facts win).
    pub fn merge(&mut self, other: &RunConfig) {
        for (k, v) in &other.entries {
            self.set(k, v.clone());
        }
    }

    fn num(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(|v| v.trim().parse::<f64>().ok())
    }

    fn flag(&self, key: &str) -> Option<bool> {
        match self.get(key)?.trim() {
            "1" | "true" | "on" => Some(true),
            "0" | "false" | "off" => Some(false),
            _ => None,
        }
    }

    /// Compute threads (`threads=`).
    pub fn threads(&self) -> Option<u32> {
        self.num("threads").filter(|t| *t >= 1.0).map(|t| t as u32)
    }

    /// I/O lanes (`io_threads=`).
    pub fn io_threads(&self) -> Option<u32> {
        self.num("io_threads")
            .filter(|t| *t >= 0.0)
            .map(|t| t as u32)
    }

    /// Whether reads overlap compute (`overlap=`).
    pub fn overlap(&self) -> Option<bool> {
        self.flag("overlap")
    }

    /// Whether experts are streamed at all (`moe_stream=`).
    pub fn streaming(&self) -> Option<bool> {
        self.flag("moe_stream")
    }

    /// Cold-expert drop threshold (`drop_cold_frac=`), when the run set one above 0.
    pub fn drop_cold_frac(&self) -> Option<f64> {
        self.num("drop_cold_frac").filter(|f| *f > 0.0)
    }

    /// Substitution λ (`substitute_lambda=`), when the run set one above 0.
    pub fn substitute_lambda(&self) -> Option<f64> {
        self.num("substitute_lambda").filter(|l| *l > 0.0)
    }

    /// Why this run is not a benchmark (traced, probed, stochastic, speculated); empty when it is
    /// one as far as its facts say.
    pub fn not_benchmark_reasons(&self) -> Vec<&'static str> {
        use bmoe_telemetry::metrics::{Instrumentation, instrumented_keys};
        let mut why = Vec::new();
        // The preamble keys go through the one check bmoe-analyze and bmoe-bench use; `traced`
        // is this panel's own fact from a spawned argv (`--route-trace` etc.).
        let by = instrumented_keys(|k| self.get(k));
        if by.iter().any(|(_, k)| *k == Instrumentation::Traced)
            || self.flag("traced") == Some(true)
        {
            why.push("traced");
        }
        if by.iter().any(|(_, k)| *k == Instrumentation::Probed) {
            why.push("probed");
        }
        if self.num("temp").is_some_and(|t| t > 0.0) {
            why.push("stochastic");
        }
        let spec = self.get("spec").map(str::trim);
        if spec.is_some_and(|s| !s.is_empty() && s != "off") || self.flag("mtp") == Some(true) {
            why.push("speculated");
        }
        why
    }
}

/// End-of-generation summary: `BMOE_DONE`, the CSV `# summary` trailer, or the one-shot
/// end-of-run text lines. Every figure is optional because each source carries a different subset.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunSummary {
    /// Where the summary came from (`BMOE_DONE`, `# summary`, `end-of-run lines`).
    pub origin: String,
    /// Tokens generated.
    pub tokens: Option<u64>,
    /// Decode rate (decode time only).
    pub tok_s: Option<f64>,
    /// Mean decode seconds per token.
    pub s_tok: Option<f64>,
    /// Mean flash read seconds per token (lane-busy sum under overlap).
    pub io_s_tok: Option<f64>,
    /// Mean overlap stall seconds per token.
    pub stall_s_tok: Option<f64>,
    /// Mean cache-management seconds per token.
    pub mgmt_s_tok: Option<f64>,
    /// Mean process CPU seconds per token (all threads).
    pub cpu_s_tok: Option<f64>,
    /// Mean compute residual seconds per token (shown only as the engine's own figure).
    pub compute_s_tok: Option<f64>,
    /// Mean major faults per token.
    pub majflt_tok: Option<f64>,
    /// Total flash read, MiB.
    pub read_mib: Option<f64>,
    /// Flash read per generated token, MiB, as the engine computed it (the `moe-stream:` line's
    /// `MiB/token`, the CSV trailer's `read_MiB ÷ tokens`): preferred to any division here, whose
    /// token count may not be the engine's.
    pub read_mib_tok: Option<f64>,
    /// Read bandwidth, MiB/s, as the engine computed it (`moe-stream:`'s `MiB/s`, the trailer's
    /// `read_MiB ÷ io_s`): exact where the per-token read time is rounded to 0.
    pub mib_s: Option<f64>,
    /// Final cumulative hit rate, percent.
    pub cache_hit_pct: Option<f64>,
    /// Expert cache resident, MiB.
    pub cache_resident_mib: Option<f64>,
    /// Expert cache budget, MiB.
    pub cache_budget_mib: Option<f64>,
    /// Prefill time, s.
    pub prefill_s: Option<f64>,
    /// Prefill rate, tok/s.
    pub prefill_tps: Option<f64>,
    /// Model load time, s.
    pub load_s: Option<f64>,
    /// Prompt tokens prefilled.
    pub n_prompt: Option<u64>,
    /// Mean gap between decodes, s/token.
    pub loop_overhead_s_tok: Option<f64>,
    /// Routed experts seen by `--drop-cold-experts`.
    pub experts_routed: Option<u64>,
    /// Routed experts it discarded.
    pub experts_dropped: Option<u64>,
    /// Missed slots `--expert-substitute` examined (trailer `experts_reranked`).
    pub experts_reranked: Option<u64>,
    /// Slots it moved to a resident expert (trailer `experts_substituted`).
    pub experts_substituted: Option<u64>,
    /// Drafted tokens (speculation).
    pub mtp_drafted: Option<u64>,
    /// Accepted drafted tokens.
    pub mtp_accepted: Option<u64>,
    /// Verify decodes.
    pub mtp_decodes: Option<u64>,
    /// Drafting cost, s/token.
    pub mtp_draft_s_tok: Option<f64>,
    /// Generation was cancelled.
    pub cancelled: bool,
    /// Compute threads stated by the summary (the `compute:` line's "over <n> threads").
    pub threads: Option<u32>,
    /// The end-of-run text lines as printed, for display.
    pub lines: Vec<String>,
}

/// Something a source reported, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Run facts (preamble, argv, `mode:` line).
    Config(RunConfig),
    /// A generation started (`BMOE_BEGIN`, a new CSV turn): the answer and live figures restart.
    Begin,
    /// `BMOE_LOAD`: experts were read this token.
    Load {
        /// MiB read.
        mb: f64,
        /// Read time, ms.
        ms: f64,
    },
    /// One token, with its text deltas when the source streams text.
    Token(Box<TokenSample>, Option<TextDelta>),
    /// The final texts of a generation: `BMOE_DONE`'s (both), or the one-shot `=== answer ===`
    /// block (the answer only).
    FinalText {
        /// The answer.
        text: String,
        /// The thinking span; `None` when the source does not separate it (the streamed one
        /// is kept).
        reasoning: Option<String>,
    },
    /// Session mode: a control line of the engine or a request of the panel.
    Session(crate::session::SessionEvent),
    /// End-of-generation summary.
    Summary(Box<RunSummary>),
    /// A line the contract does not allow, ignored and counted.
    Malformed {
        /// 1-based line number in the source.
        line: u64,
        /// What was wrong.
        reason: String,
    },
    /// Engine stderr or an engine error message, for the log pane.
    Log(String),
    /// The source ended (EOF, exit status).
    Ended(String),
}
