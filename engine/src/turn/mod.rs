//! One turn of the model: load it (and, with `--moe-stream`, take over its experts) once, then
//! prefill and generate any number of turns on the same context.
//!
//! [`load::load_model`] reads the GGUF header and loads the weights; [`Engine::open`] builds
//! the context, the streamer, the sinks and traces; [`Engine::generate`] runs one turn — the
//! prefill of what the KV does not hold yet, then the token loop — and is shared by the one-shot
//! [`run`] and the session loop (`crate::session`).

mod decode;
pub mod interrupt;
pub mod load;
mod mtp;
mod oneshot;
mod open;
mod outputs;
mod pick;
mod prefill;
mod speculate;
mod streaming;
pub mod threads;
mod visible;

pub use oneshot::run;
pub use pick::logits_hash;

use crate::chat::reasoning::SplitMode;
use crate::chat::{ChatTemplate, ThinkCtl};
use crate::cli::RunConfig;
use crate::error::EngineError;
use crate::ffi::{Context, Model, Sampler, Token};
use crate::graph::edit::EditCounters;
use crate::graph::hook::MoeHook;
use crate::graph::predict::{PredictTally, RouteAheadTally};
use crate::graph::steer::Steering;
use crate::memory::residency::DenseProbe;
use crate::model::facts::ModelFacts;
use crate::model::registry::recipe_for;
use crate::sinks::csv::{ResolvedRun, TrailerContext};
use crate::sinks::report::{ModeLine, RunSummary, TokenStats};
use crate::stream::{StreamStats, Streamer};
use outputs::Outputs;
use pick::TokenFeed;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// With a chat template: how the generation is split into reasoning and answer (think markers or
/// channels, and where the prompt left off). `None` for a raw prompt (no split).
pub type ChatSplit = Option<SplitMode>;

/// One turn to generate.
#[derive(Debug, Clone)]
pub struct Turn<'t> {
    /// Session turn (0 for one-shot): the CSV `turn` column and the traces' `turn`.
    pub turn: u32,
    /// The whole context after this turn's prompt: what the KV will hold before generating.
    pub tokens: &'t [Token],
    /// How many leading `tokens` the KV already holds (they are not prefilled again).
    pub n_reused: usize,
    /// Tokens to generate at most.
    pub n_predict: usize,
    /// How to split the generation into reasoning and answer.
    pub split: ChatSplit,
    /// `BMOE_LOAD` / `BMOE_PROGRESS` lines per token; otherwise the raw text.
    pub progress: bool,
}

/// What one turn produced.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    /// Generated token ids (each one decoded into the KV, unless `cancelled`).
    pub tokens: Vec<Token>,
    /// Per-step logits hashes (FNV-1a over the f32 bytes).
    pub logits_hashes: Vec<u64>,
    /// Per-token rows.
    pub rows: Vec<TokenStats>,
    /// The summary (generation figures, prefill wall and size).
    pub summary: RunSummary,
    /// The prompt phase's attribution and the loop overhead (the CSV trailer's extras).
    pub trailer: TrailerContext,
    /// The generated text, raw.
    pub text: String,
    /// Incomplete UTF-8 at the end of the text, written after the last token.
    pub tail: String,
    /// The reasoning part of `text` (empty without a chat split).
    pub reasoning: String,
    /// The answer part of `text` (all of it without a chat split).
    pub answer: String,
    /// Stopped by a cancel request.
    pub cancelled: bool,
}

/// A loaded model with its context, streamer, sinks and traces: ready to run turns.
pub struct Engine<'m> {
    cfg: &'m RunConfig,
    facts: &'m ModelFacts,
    ctx: Context<'m, MoeHook>,
    abort: Arc<AtomicBool>,
    resolved: ResolvedRun,
    auto_budget: Option<u64>,
    probe: DenseProbe,
    load_s: f64,
    streaming: bool,
    outputs: Outputs,
    sampler: Option<Sampler>,
    /// Tokens never picked (sorted): the end-of-generation tokens under `--ignore-eos`.
    banned: Vec<Token>,
    feed: Option<TokenFeed>,
    /// `--test-force-text`: the tokens every turn emits first, in place of the picked ones.
    forced: Vec<Token>,
    /// How many of `forced` this turn has emitted.
    forced_at: usize,
    template: Option<ChatTemplate>,
    think_ctl: ThinkCtl,
    /// `--dense-weights anon`'s pages, owned while the engine runs.
    _dense_arena: Option<crate::vm::Arena>,
    /// `--row-stream`'s table, when one qualified: its rows are fetched before every decode.
    rows: Option<crate::stream::rows::RowTable>,
    /// `--adaptive-threads`: each generated token's compute-thread count (kept across turns).
    governor: Option<threads::ThreadGovernor>,
    /// The SIGINT flag, once [`Self::catch_sigint`] installed it: a turn it stopped says so in
    /// its trailer.
    interrupt: Option<interrupt::Interrupt>,
    /// `--mtp`: the target's hidden state the head pairs with the next token.
    mtp: Option<mtp::MtpState>,
}

impl<'m> Engine<'m> {
    /// The llama.cpp context (for callers that run their own decodes, e.g. `decide`).
    pub fn ctx_mut(&mut self) -> &mut Context<'m, MoeHook> {
        &mut self.ctx
    }

    /// The model.
    pub fn model(&self) -> &'m Model {
        self.ctx.model()
    }

    /// The context and the chat template together (a decide needs both at once).
    pub fn ctx_and_template(&mut self) -> (&mut Context<'m, MoeHook>, Option<&ChatTemplate>) {
        (&mut self.ctx, self.template.as_ref())
    }

    /// The chat template, with `--chatml`.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// How a `think=false` turn is honoured (`template` without `--chatml`).
    pub fn think_ctl(&self) -> ThinkCtl {
        self.think_ctl
    }

    /// `general.architecture`.
    pub fn arch(&self) -> &str {
        &self.facts.arch
    }

    /// The effective routing top-k (0 on a dense model).
    pub fn n_expert_used(&self) -> u64 {
        self.resolved.n_expert_used
    }

    /// Seconds from the start of loading to the engine being ready.
    pub fn load_s(&self) -> f64 {
        self.load_s
    }

    /// Whether expert streaming is on.
    pub fn streaming(&self) -> bool {
        self.streaming
    }

    /// The expert-cache budget in effect, MiB (0 without streaming or with the cache off).
    pub fn cache_budget_mib(&self) -> f64 {
        if self.cache_on() {
            self.resolved.cache_mb as f64
        } else {
            0.0
        }
    }

    /// `--row-stream`: fetches the rows `tokens` gather before they are decoded. A failed fetch
    /// leaves rows that were never written, so it prints the `moe-rows:` and `FAILED reads`
    /// lines and ends the run.
    fn fetch_rows(
        &mut self,
        tokens: &[Token],
        note: &mut dyn std::io::Write,
    ) -> Result<(), EngineError> {
        let Some(t) = self.rows.as_mut() else {
            return Ok(());
        };
        let Err(e) = t.fetch(tokens) else {
            return Ok(());
        };
        let st = t.stats();
        for line in crate::sinks::report::row_lines(&st) {
            let _ = writeln!(note, "{line}");
        }
        Err(EngineError::RowFetch(e))
    }

    /// `--row-stream`'s counters (zeros when off or when nothing qualified).
    fn row_stats(&self) -> Option<crate::stream::rows::RowStats> {
        self.rows.as_ref().map(crate::stream::rows::RowTable::stats)
    }

    /// `--prefetch K` or `--predict-prefetch` is on (the `moe-prefetch:` line and the
    /// trailer's `spec_*` keys).
    fn prefetch_on(&self) -> bool {
        self.streaming
            && (self.cfg.stream.is_some_and(|s| s.prefetch > 0)
                || self.cfg.predict.prefetch
                || self.cfg.predict.route_ahead > 0)
    }

    /// The `moe-prefetch:` tag of the predictor in use (`None` for the temporal one).
    fn prefetch_tag(&self) -> Option<&'static str> {
        if self.cfg.predict.route_ahead > 0 {
            Some("route-ahead")
        } else {
            self.cfg.predict.prefetch.then_some("stale-gate")
        }
    }

    /// What `--route-ahead` did so far, when it is on.
    fn route_ahead_tally(&mut self) -> Option<RouteAheadTally> {
        self.ctx.hook_mut().and_then(|h| h.route_ahead_tally())
    }

    /// What `--predict-log` measured so far, when it is on.
    fn predict_tally(&mut self) -> Option<PredictTally> {
        if !self.cfg.predict.log {
            return None;
        }
        self.ctx.hook_mut().and_then(|h| h.predict_tally()).cloned()
    }

    fn cache_on(&self) -> bool {
        self.streaming && self.resolved.cache_mb > 0
    }

    /// The most tokens one prefill decode may take (the prefill split, when the expert cache
    /// cannot hold a whole layer's experts); `None` when prefills are not split.
    pub fn prefill_chunk(&self) -> Option<usize> {
        self.resolved
            .prefill_chunk
            .map(|c| usize::try_from(c).unwrap_or(usize::MAX))
    }

    /// The abort flag the context polls between graph nodes: raising it stops the decode in
    /// flight (a cancel). Lower it with [`Self::clear_abort`] before the next turn.
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.abort)
    }

    /// Starts sampling afresh (a new chat): the sampler is reseeded, so a new chat with a seed
    /// samples exactly as a one-shot run with that seed. No-op when greedy.
    pub fn reset_sampler(&mut self) {
        if let Some(s) = self.sampler.as_mut() {
            s.reset();
        }
    }

    /// Lowers the abort flag (a cancel that arrived after its turn ended must not stop the next).
    pub fn clear_abort(&self) {
        self.abort.store(false, Ordering::SeqCst);
    }

    /// From now on a SIGINT raises the returned flag instead of killing the process (a second
    /// one while it is raised exits 130: [`interrupt`]). With `abort_decode` it also raises
    /// the context's abort flag, so the decode in flight stops as at a session `cancel`;
    /// without it the token in flight is finished.
    ///
    /// # Errors
    /// [`EngineError::Signal`] when the handler cannot be installed.
    pub fn catch_sigint(
        &mut self,
        abort_decode: bool,
    ) -> Result<interrupt::Interrupt, EngineError> {
        let also = if abort_decode {
            vec![Arc::clone(&self.abort)]
        } else {
            Vec::new()
        };
        let i = interrupt::Interrupt::install(&also).map_err(EngineError::Signal)?;
        self.interrupt = Some(i.clone());
        Ok(i)
    }

    /// The write errors that stopped an output file so far (a full disk): such a run's record
    /// is incomplete.
    pub fn sink_failures(&self) -> &[crate::sinks::SinkError] {
        self.outputs.failures()
    }

    /// The first write error that stopped an output file, taken: the error the run ends with.
    pub fn take_sink_failure(&mut self) -> Option<crate::sinks::SinkError> {
        self.outputs.take_failure()
    }

    /// Whether a SIGINT is pending (raised and not yet re-armed).
    fn interrupted(&self) -> bool {
        self.interrupt
            .as_ref()
            .is_some_and(interrupt::Interrupt::raised)
    }

    /// Tokenizes `text` as a prompt (special tokens parsed, BOS as the model wants).
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>, EngineError> {
        self.model().tokenize(text).map_err(EngineError::Tokenize)
    }

    /// What the `mode:` summary line says about this engine.
    pub fn mode_line(&self) -> ModeLine {
        if self.streaming {
            ModeLine::Streaming {
                cache_mb: self.resolved.cache_mb,
                auto: self.auto_budget.is_some(),
                dense: self.resolved.dense_weights,
                overlap: self.resolved.overlap,
            }
        } else if recipe_for(&self.facts.arch).is_some() {
            ModeLine::PlainStreamable {
                arch: self.facts.arch.clone(),
            }
        } else {
            ModeLine::PlainUnsupported {
                arch: self.facts.arch.clone(),
            }
        }
    }

    /// The overlap that runs, with `--overlap`.
    pub fn overlap(&self) -> Option<crate::stream::overlap::OverlapKind> {
        self.resolved.overlap
    }

    /// Every streamed expert's bytes (0 without streaming).
    fn expert_bytes(&mut self) -> u64 {
        self.ctx
            .hook_mut()
            .and_then(|h| h.streamer())
            .map_or(0, |s| s.layout().total_bytes())
    }

    /// The routing edits' cumulative counts (`None` without edits).
    fn edit_counters(&mut self) -> Option<EditCounters> {
        self.ctx
            .hook_mut()
            .and_then(|h| h.steering())
            .map(Steering::counters)
    }

    /// Whether `--route-replay` (stopping at the trace's end) has served its last step.
    fn replay_exhausted(&mut self) -> bool {
        self.ctx
            .hook_mut()
            .and_then(|h| h.steering())
            .is_some_and(Steering::replay_exhausted)
    }

    fn stream_stats(&mut self) -> Option<StreamStats> {
        self.ctx
            .hook_mut()
            .and_then(|h| h.streamer())
            .map(Streamer::stats)
    }
}
