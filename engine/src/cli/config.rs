//! The validated, resolved configuration of one run: what every other part of the engine reads
//! instead of the flags.

use super::predict::PredictConfig;
use super::routing::RoutingConfig;
use super::sampling::Sampling;
use super::spec::Spec;
use super::streaming::StreamConfig;
use crate::graph::timing::Granularity;
use crate::memory::dense::DenseWeights;
use crate::stream::Poison;
use std::path::PathBuf;

/// The validated, resolved configuration of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Model path (first shard).
    pub model: PathBuf,
    /// Prompt.
    pub prompt: String,
    /// Tokens to generate.
    pub n_predict: usize,
    /// Compute threads (the maximum, with `adaptive_threads`).
    pub threads: usize,
    /// Choose each generated token's thread count by measurement (`--adaptive-threads`).
    pub adaptive_threads: bool,
    /// Context size.
    pub n_ctx: u32,
    /// Logical batch (= n_ctx: one-batch prefill).
    pub n_batch: u32,
    /// Physical batch (resolved: never 0).
    pub n_ubatch: u32,
    /// Routing top-k override.
    pub n_expert_used: Option<u32>,
    /// Sampling.
    pub sampling: Sampling,
    /// Self-speculation (`--ngram`, `--mtp`).
    pub spec: Spec,
    /// Per-token protocol lines.
    pub progress: bool,
    /// Streaming, when on.
    pub stream: Option<StreamConfig>,
    /// Routing edits: drop, substitution, replay (all off by default).
    pub routing: RoutingConfig,
    /// `--predict-log` / `--predict-prefetch` (both off by default).
    pub predict: PredictConfig,
    /// Feed seeded pseudo-random tokens (benchmarks).
    pub feed_random: Option<u64>,
    /// Never pick an end-of-generation token (`--ignore-eos`).
    pub ignore_eos: bool,
    /// Print per-step logits hashes.
    pub dump_logits_hash: bool,
    /// Test poisoning.
    pub poison: Option<Poison>,
    /// `--csv` path.
    pub csv: Option<PathBuf>,
    /// `--route-trace` path.
    pub route_trace: Option<PathBuf>,
    /// `--io-trace` path.
    pub io_trace: Option<PathBuf>,
    /// `--compute-trace` / `--compute-trace-layers`: path and granularity.
    pub compute_trace: Option<(PathBuf, Granularity)>,
    /// `--chatml`.
    pub chatml: bool,
    /// Thinking allowed (`--no-think` clears it).
    pub think: bool,
    /// `--dense-weights` (takes effect with `--moe-stream`).
    pub dense_weights: DenseWeights,
    /// `--row-stream`: the row cache's budget in bytes (`None` = off).
    pub row_stream: Option<u64>,
    /// `--session`: serve stdin requests instead of one run.
    pub session: bool,
    /// `--decide`: accept `decide` requests (session only).
    pub decide: bool,
    /// Test only: extra prefill decode boundaries (absolute positions).
    pub prefill_split: Vec<usize>,
    /// Test only: text whose tokens every turn generates first (`--test-force-text`).
    pub force_text: Option<String>,
    /// `--decide-state-max-mib`: the largest decide prefix state kept, in MiB (0 = none).
    pub decide_state_max_mib: u64,
    /// stdout is a terminal: a one-shot run shows the answer's control characters instead of
    /// sending them (not a flag: found at start-up; piped output stays byte for byte).
    pub terminal: bool,
    /// `--prefill-device NAME`: the ggml device large (prompt) batches run on (checked).
    pub prefill_device: Option<String>,
    /// `--prefill-device` routed mode (the default; off with `--no-prefill-routed`): under
    /// `--moe-stream` the device's arena is filled ahead from a prediction of the prompt's
    /// routing.
    pub prefill_routed: bool,
}
