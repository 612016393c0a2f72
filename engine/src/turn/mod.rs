//! Running a model: load it (and, with `--moe-stream`, take over its experts) once, then
//! prefill and generate any number of turns on the same context.
//!
//! [`load_model`] reads the GGUF header and loads the weights; [`Engine::open`] builds the
//! context, the streamer, the sinks and traces; [`Engine::generate`] runs one turn — prefill of
//! what the KV does not hold yet, then the token loop — and is shared by the one-shot [`run`]
//! and the session loop (`crate::session`).

pub mod threads;

use crate::chat::reasoning::{ReasoningSplitter, SplitMode};
use crate::chat::text::Utf8Stream;
use crate::chat::{ChatTemplate, ThinkCtl};
use crate::cli::{DenseWeights, RunConfig, Sampling};
use crate::ffi::{
    Context, ContextOptions, DecodeError, Model, ModelOptions, Sampler, SamplerParams, Token,
};
use crate::graph::hook::MoeHook;
use crate::memory::autocache::{AutoInputs, measure, size_budget};
use crate::memory::picture::{MemorySnapshot, cgroup_memory};
use crate::memory::residency::{DenseProbe, dense_probe_pages};
use crate::model::registry::{Recipe, recipe_for};
use crate::sinks::compute_trace::ComputeTracer;
use crate::sinks::csv::{CsvSink, ResolvedRun, RowContext, TrailerContext, token_row, trailer};
use crate::sinks::io_trace::IoTracer;
use crate::sinks::report::{
    ModeLine, RunSummary, StreamSummary, TokenStats, load_line, progress_line,
    progress_line_deltas, summary_lines,
};
use crate::sinks::route_trace::{DecodeSpan, RouteTracer, trace_info};
use crate::stream::layout::{FilePlace, ModelIndex, bind};
use crate::stream::{StreamSettings, StreamStats, Streamer};
use crate::vm::{process_sample, system_page_size};
use bmoe_gguf::info::ModelInfo;
use bmoe_gguf::{GgufError, GgufModel};
use bmoe_telemetry::deltas::DeltaEncoder;
use bmoe_telemetry::summary::{ANSWER_BANNER, PERF_BANNER};
use bmoe_telemetry::trace::{DecodeTraceInfo, PHASE_DECODE, PHASE_PREFILL, RouteTraceInfo};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A run failure: what failed, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EngineError {
    /// What failed (names the file, offset, flag… involved).
    pub message: String,
    /// What to do.
    pub hint: String,
}

fn fail(message: impl Into<String>, hint: impl Into<String>) -> EngineError {
    EngineError {
        message: message.into(),
        hint: hint.into(),
    }
}

/// Env var (test only): after llama.cpp has loaded the model, rename this file over the model
/// path, so expert reads hit a different (e.g. truncated) file — a deterministic stand-in for a
/// file changing under a running engine.
pub const TEST_REPLACE_ENV: &str = "BMOE_TEST_REPLACE_AFTER_LOAD";

/// What the GGUF header says before llama.cpp loads anything.
#[derive(Debug, Clone)]
pub struct ModelFacts {
    /// Every tensor's placement, per shard.
    pub index: ModelIndex,
    /// `general.architecture`.
    pub arch: String,
    /// `<arch>.expert_count`, if MoE.
    pub expert_count: Option<i64>,
    /// `<arch>.expert_used_count`, if MoE.
    pub expert_used: Option<i64>,
}

/// The hint after llama.cpp refused something: its warnings and errors always reach stderr (as
/// `llama.cpp: …` lines; `BMOE_LLAMA_LOG=1` adds the info lines), so its reason is already shown.
fn llama_reason_hint() -> &'static str {
    if std::env::var("BMOE_LLAMA_LOG").is_ok_and(|v| v == "1") {
        "llama.cpp's reason is in its log above"
    } else {
        "llama.cpp's reason is on the 'llama.cpp:' lines above; BMOE_LLAMA_LOG=1 shows its whole log"
    }
}

/// Reads the headers of every shard of `path` (through bmoe-gguf) and checks that no tensor runs
/// past its file's end.
pub fn read_facts(path: &Path) -> Result<ModelFacts, EngineError> {
    if path.is_dir() {
        return Err(fail(
            format!(
                "-m/--model is a directory, not a model file: {}",
                path.display()
            ),
            "pass the .gguf file inside it (for a split model, its -00001-of-NNNNN.gguf shard)",
        ));
    }
    if !path.is_file() {
        return Err(fail(
            format!("model file not found: {}", path.display()),
            "check the -m/--model path",
        ));
    }
    let model = GgufModel::open(path).map_err(|e| {
        let hint = match &e {
            GgufError::NotFirstShard { .. } => "pass the -00001-of-NNNNN.gguf shard",
            GgufError::Split { .. } => {
                "keep every shard of a split model in one folder, named as written"
            }
            _ => "is this a GGUF v3 file? a truncated or corrupt file cannot be parsed",
        };
        fail(e.to_string(), hint)
    })?;
    let mut index = ModelIndex::default();
    for shard in model.shards() {
        index.shards.push(shard.path().to_path_buf());
        index.shard_sizes.push(shard.bytes().len() as u64);
    }
    for t in model.tensors() {
        index.tensors.insert(
            t.info.name.clone(),
            FilePlace {
                shard: t.shard,
                offset: t.info.file_offset,
                size: t.info.n_bytes,
            },
        );
    }
    if let Some(msg) = index.truncation() {
        return Err(fail(
            msg,
            "the download or copy was cut short: fetch or regenerate the model file",
        ));
    }
    let arch = model
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| {
            fail(
                format!("{} has no general.architecture", path.display()),
                "not a llama.cpp model file",
            )
        })?;
    let int = |key: String| {
        model
            .get(&key)
            .and_then(|v| v.as_u64())
            .and_then(|v| i64::try_from(v).ok())
    };
    Ok(ModelFacts {
        expert_count: int(format!("{arch}.expert_count")),
        expert_used: int(format!("{arch}.expert_used_count")),
        index,
        arch,
    })
}

/// Everything a run produced, for callers that inspect it (tests, benchmarks).
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    /// Generated token ids.
    pub tokens: Vec<Token>,
    /// Per-step logits hashes (FNV-1a over the f32 bytes).
    pub logits_hashes: Vec<u64>,
    /// Per-token rows.
    pub rows: Vec<TokenStats>,
    /// The summary.
    pub summary: RunSummary,
    /// Generated text.
    pub text: String,
}

/// FNV-1a over the logits' bytes.
pub fn logits_hash(logits: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in logits {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The highest logit's token among those not in `banned` (sorted); the first on ties. With
/// everything banned (impossible for a real vocabulary) it falls back to token 0.
fn argmax_except(logits: &[f32], banned: &[Token]) -> Token {
    let mut best: Option<usize> = None;
    for (i, &v) in logits.iter().enumerate() {
        if banned.binary_search(&(i as Token)).is_ok() {
            continue;
        }
        if best.is_none_or(|b| v > logits[b]) {
            best = Some(i);
        }
    }
    best.unwrap_or(0) as Token
}

/// Every end-of-generation token of the vocabulary, sorted: what `--ignore-eos` bans.
fn eog_tokens(model: &Model) -> Vec<Token> {
    (0..model.n_vocab())
        .filter_map(|t| Token::try_from(t).ok())
        .filter(|&t| model.is_eog(t))
        .collect()
}

/// SplitMix64: seeded pseudo-random tokens for benchmark feeds.
#[derive(Debug, Clone)]
pub struct TokenFeed(u64);

impl TokenFeed {
    /// A feed seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next token in `0..n_vocab` for which `skip` is false (e.g. end-of-generation ids).
    pub fn next_token(&mut self, n_vocab: usize, skip: impl Fn(Token) -> bool) -> Token {
        loop {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let t = (z % n_vocab.max(1) as u64) as Token;
            if !skip(t) {
                return t;
            }
        }
    }
}

fn decode_error(
    e: DecodeError,
    read_err: Option<crate::stream::io::ReadError>,
    what: &str,
) -> EngineError {
    if let Some(err) = read_err {
        return fail(
            format!("{err}; the {what} was aborted"),
            "the model file changed or the storage failed while streaming: no further output was produced; check the file and the disk (dmesg)",
        );
    }
    match e {
        DecodeError::Aborted => fail(format!("{what} aborted"), "the decode was cancelled"),
        DecodeError::Failed(rc) => fail(
            format!("{what} failed (llama_decode returned {rc})"),
            "try a smaller -c/--ctx-size or --ubatch; set BMOE_LLAMA_LOG=1 for llama.cpp's own log",
        ),
    }
}

/// Creates (truncates) an output file before the model loads, so a path that cannot be written
/// fails in a second instead of after a long load — or, worse, only warns.
fn preflight(path: &Path, flag: &str) -> Result<(), EngineError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map(drop)
        .map_err(|e| {
            fail(
                format!("cannot create {flag} {}: {e}", path.display()),
                format!("check that the folder of {flag} exists and is writable"),
            )
        })
}

/// A model loaded by llama.cpp, with what its header says.
pub struct LoadedModel {
    /// The header facts.
    pub facts: ModelFacts,
    /// The weights.
    pub model: Model,
    /// When loading started (the `load_s` clock).
    t_load: Instant,
}

/// Reads the header, checks the flags that depend on the model, creates every output file the
/// run will write, and loads the weights.
pub fn load_model(cfg: &RunConfig) -> Result<LoadedModel, EngineError> {
    let t_load = Instant::now();
    let facts = read_facts(&cfg.model)?;
    let recipe: Option<&'static Recipe> = recipe_for(&facts.arch);
    if cfg.stream.is_some() && recipe.is_none() {
        return Err(fail(
            format!(
                "no MoE recipe for architecture '{}' — --moe-stream cannot find its experts",
                facts.arch
            ),
            "run without --moe-stream (plain llama.cpp), or see --list-archs for the architectures this build streams",
        ));
    }
    let mut model_opts = ModelOptions::default();
    if let Some(k) = cfg.n_expert_used {
        let Some(n) = facts.expert_count else {
            return Err(fail(
                format!(
                    "--n-expert-used was set but the model is not MoE (no {}.expert_count)",
                    facts.arch
                ),
                "drop --n-expert-used for dense models",
            ));
        };
        if i64::from(k) > n {
            return Err(fail(
                format!("--n-expert-used={k} exceeds the model's expert count ({n})"),
                format!("use a value in 1..={n}"),
            ));
        }
        model_opts.expert_used_override =
            Some((format!("{}.expert_used_count", facts.arch), i64::from(k)));
    }
    if let Some(p) = &cfg.csv {
        preflight(p, "--csv")?;
    }
    if cfg.stream.is_some() {
        if let Some(p) = &cfg.route_trace {
            preflight(p, "--route-trace")?;
        }
        if let Some(p) = &cfg.io_trace {
            preflight(p, "--io-trace")?;
        }
    }
    if let Some((p, g)) = &cfg.compute_trace {
        let flag = match g {
            crate::sinks::compute_trace::Granularity::Node => "--compute-trace",
            crate::sinks::compute_trace::Granularity::Layer => "--compute-trace-layers",
        };
        preflight(p, flag)?;
    }
    let model = Model::load(&cfg.model, &model_opts).map_err(|e| fail(e, llama_reason_hint()))?;
    // a model file cut under the mapping ends in an error, not a silent SIGBUS (docs/engine.md)
    crate::vm::sigbus::install(&facts.index.shards, cfg.session);
    crate::vm::sigbus::truncate_if_testing(&cfg.model).map_err(|e| fail(e, "test hook"))?;
    if let Ok(replacement) = std::env::var(TEST_REPLACE_ENV) {
        std::fs::rename(&replacement, &cfg.model)
            .map_err(|e| fail(format!("{TEST_REPLACE_ENV}: {e}"), "test hook"))?;
    }
    Ok(LoadedModel {
        facts,
        model,
        t_load,
    })
}

/// Runs `cfg` once: per-token output to `out` (stdout), notes and warnings to `note` (stderr).
pub fn run(
    cfg: &RunConfig,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<RunOutcome, EngineError> {
    let loaded = load_model(cfg)?;
    let mut engine = Engine::open(cfg, &loaded, note)?;
    let (prompt_text, split) = match engine.template() {
        Some(t) => {
            let hint = "run without --chatml to pass the prompt as raw text";
            let turn = t
                .render_turn(
                    &[crate::chat::Message::user(&cfg.prompt)],
                    cfg.think,
                    engine.think_ctl(),
                )
                .map_err(|e| fail(e.to_string(), hint))?;
            (turn.text, Some(turn.split))
        }
        None => (cfg.prompt.clone(), None),
    };
    let tokens = engine.tokenize(&prompt_text)?;
    if tokens.is_empty() {
        return Err(fail(
            "empty prompt after tokenization",
            "pass a non-empty -p/--prompt",
        ));
    }
    if tokens.len() + cfg.n_predict > cfg.n_ctx as usize {
        return Err(fail(
            format!(
                "prompt ({} tokens) + -n {} exceeds -c/--ctx-size {}",
                tokens.len(),
                cfg.n_predict,
                cfg.n_ctx
            ),
            "raise -c/--ctx-size or lower -n/--n-predict",
        ));
    }
    if !cfg.progress {
        let _ = write!(out, "{prompt_text}");
        let _ = out.flush();
    }
    let turn = Turn {
        turn: 0,
        tokens: &tokens,
        n_reused: 0,
        n_predict: cfg.n_predict,
        split,
        progress: cfg.progress,
    };
    let g = engine.generate(&turn, out, note, &|| false)?;
    if !cfg.progress {
        let _ = writeln!(out, "{}\n", g.tail);
    }
    if cfg.progress {
        // the seed's "<full generated text>": reasoning and markers included, as generated (the
        // split answer is what BMOE_PROGRESS / BMOE_DONE carry)
        let _ = writeln!(out, "{ANSWER_BANNER}\n{}\n{PERF_BANNER}", g.text);
    }
    for line in summary_lines(&g.summary, &engine.mode_line()) {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    Ok(RunOutcome {
        tokens: g.tokens,
        logits_hashes: g.logits_hashes,
        rows: g.rows,
        summary: g.summary,
        text: g.text,
    })
}

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
    csv: Option<CsvSink>,
    io_trace: Option<IoTracer>,
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
    /// `--adaptive-threads`: each generated token's compute-thread count (kept across turns).
    governor: Option<crate::turn::threads::ThreadGovernor>,
}

impl<'m> Engine<'m> {
    /// Builds the context over `loaded` and, with `--moe-stream`, captures the expert tensors
    /// and starts the streamer; then opens the CSV and traces and, with `--chatml`, the chat
    /// template. Notes and warnings go to `note`.
    pub fn open(
        cfg: &'m RunConfig,
        loaded: &'m LoadedModel,
        note: &mut dyn Write,
    ) -> Result<Self, EngineError> {
        let facts = &loaded.facts;
        let model = &loaded.model;
        let recipe = recipe_for(&facts.arch);
        let abort = Arc::new(AtomicBool::new(false));
        let hook = match (cfg.stream, recipe) {
            (Some(_), Some(r)) => Some(MoeHook::capturing(r, Arc::clone(&abort))),
            _ if cfg.compute_trace.is_some() => Some(MoeHook::tracing_only(Arc::clone(&abort))),
            (None, Some(_)) if crate::graph::hook::resident_hook_requested() => {
                let _ = writeln!(
                    note,
                    "bmoe: diag: {}=1 — routing hook on a resident run (ids read at every ffn_moe_topk node, nothing loaded)",
                    crate::graph::hook::RESIDENT_HOOK_ENV
                );
                Some(MoeHook::observing(Arc::clone(&abort)))
            }
            _ => None,
        };
        let opts = ContextOptions {
            n_ctx: cfg.n_ctx,
            n_batch: cfg.n_batch,
            n_ubatch: cfg.n_ubatch,
            n_threads: cfg.threads as i32,
        };
        let mut ctx = Context::new(model, opts, hook, Arc::clone(&abort))
            .map_err(|e| fail(e, "try a smaller -c/--ctx-size"))?;
        let top_k = cfg
            .n_expert_used
            .map(i64::from)
            .or(facts.expert_used)
            .unwrap_or(0)
            .max(0) as usize;

        let mut resolved = ResolvedRun {
            arch: facts.arch.clone(),
            n_layer: model.n_layer() as u64,
            n_expert: facts.expert_count.unwrap_or(0).max(0) as u64,
            n_expert_used: top_k as u64,
            ..Default::default()
        };
        let mut auto_budget = None;
        // located while the whole file is still mapped (anon moves the dense pages, same addresses)
        let probe = DenseProbe::new(dense_probe_pages(&facts.index, system_page_size()));
        let mut dense_arena = None;
        if cfg.stream.is_none() && cfg.dense_weights != DenseWeights::Mmap {
            let _ = writeln!(
                note,
                "bmoe: note: --dense-weights {} takes effect with --moe-stream; plain llama.cpp keeps the mmap",
                cfg.dense_weights.as_str()
            );
        }
        if let (Some(sc), Some(recipe)) = (cfg.stream, recipe) {
            // capture warm-up: one BOS decode shows every expert tensor the graph reads
            let mut warm = [model.bos()];
            ctx.decode(&mut warm).map_err(|e| {
                fail(
                    format!("capture warm-up decode failed ({e:?})"),
                    llama_reason_hint(),
                )
            })?;
            let hook = ctx
                .hook_mut()
                .ok_or_else(|| fail("internal: streaming without a hook", "report a bug"))?;
            let captured = hook.take_captured();
            let weight_addrs = hook.take_weight_addrs();
            let layout = bind(recipe, &captured, &facts.index).map_err(|e| {
                fail(
                    e.to_string(),
                    "this GGUF does not match the architecture's recipe; run without --moe-stream",
                )
            })?;
            let cycle = layout.cache_cycle_bytes(top_k);
            let cache_mb = match sc.auto {
                Some(a) => {
                    let (mem_available, cgroup_headroom) =
                        measure(MemorySnapshot::sample().system, cgroup_memory().as_ref());
                    // the dense weights must stay resident under every --dense-weights policy
                    let dense_reserve_bytes =
                        crate::memory::residency::dense_file_ranges(&facts.index)
                            .iter()
                            .map(|r| r.2)
                            .sum();
                    let b = size_budget(&AutoInputs {
                        mem_available,
                        cgroup_headroom,
                        floor_mb: a.floor_mb,
                        ceil_mb: a.ceil_mb,
                        total_expert_bytes: layout.total_bytes(),
                        cache_cycle_bytes: cycle,
                        layer_load_bytes: layout.layer_load_bytes(top_k),
                        dense_reserve_bytes,
                    });
                    resolved.cache_floor_mb = Some(b.floor_mb);
                    let _ = writeln!(note, "bmoe: {}", b.note());
                    if let Some(w) = b.cycle_warning(cycle) {
                        let _ = writeln!(note, "bmoe: warning: {w}");
                    }
                    auto_budget = Some(b.budget_mb);
                    b.budget_mb
                }
                None => sc.cache_mb,
            };
            let budget = cache_mb * 1024 * 1024;
            if sc.auto.is_none() && budget > 0 && budget < cycle {
                let _ = writeln!(
                    note,
                    "bmoe: warning: --cache-mb {} is below this model's cache cycle ({:.1} MiB = top-{top_k} experts in every layer): most lookups will miss",
                    sc.cache_mb,
                    cycle as f64 / (1024.0 * 1024.0)
                );
            }
            if let Some(split) = crate::stream::prefill::split_for(
                budget,
                layout.n_expert,
                top_k,
                layout.max_entry_bytes(),
            ) {
                let _ = writeln!(note, "bmoe: {}", split.note(cache_mb));
                resolved.prefill_chunk = Some(split.chunk as u64);
            }
            let settings = StreamSettings {
                cache_bytes: budget,
                io_threads: sc.io_threads,
                o_direct: sc.o_direct,
                load_all: sc.load_all,
            };
            let n_expert = layout.n_expert;
            let (mut streamer, setup) = Streamer::start(layout, &facts.index, settings)
                .map_err(|e| fail(e.to_string(), "check the model file and its permissions"))?;
            for w in &setup.warnings {
                let _ = writeln!(note, "bmoe: warning: {w}");
            }
            streamer.set_poison(cfg.poison);
            match cfg.dense_weights {
                DenseWeights::Mmap => {}
                DenseWeights::Warm => match crate::memory::dense::warm(&facts.index) {
                    Ok(o) => {
                        let _ = writeln!(
                            note,
                            "bmoe: dense warm-up — {:.1} MiB in {:.2} s",
                            o.bytes as f64 / (1024.0 * 1024.0),
                            o.seconds
                        );
                    }
                    Err(e) => {
                        let _ =
                            writeln!(note, "bmoe: warning: {e} — dense weights stay cold (mmap)");
                    }
                },
                DenseWeights::Anon => {
                    let o = crate::memory::dense::anon(
                        &facts.index,
                        streamer.layout(),
                        &weight_addrs,
                        sc.o_direct,
                    )
                        .map_err(|e| {
                            fail(
                                e.to_string(),
                                "check the model file, or keep the dense weights mapped with --dense-weights mmap",
                            )
                        })?;
                    let _ = writeln!(
                        note,
                        "bmoe: dense-weights=anon — {:.1} MiB copied into anonymous memory in {:.2} s (o_direct={})",
                        o.bytes as f64 / (1024.0 * 1024.0),
                        o.seconds,
                        u8::from(o.o_direct)
                    );
                    dense_arena = o.arena;
                }
            }
            resolved.dense_weights = cfg.dense_weights;
            let _ = writeln!(
                note,
                "bmoe: expert streaming ON  n_expert={n_expert} o_direct={} io_threads={} cache={} MiB shards={} cache_cycle={:.1} MiB",
                u8::from(setup.o_direct),
                setup.lanes,
                cache_mb,
                facts.index.shards.len(),
                cycle as f64 / (1024.0 * 1024.0)
            );
            hook.stream_with(streamer);
            if let Some(path) = &cfg.route_trace {
                let info = route_trace_info(cfg, top_k as u64)?;
                match RouteTracer::create(path, &info) {
                    Ok(t) => hook.trace_routes(t),
                    Err(e) => {
                        return Err(fail(
                            e,
                            "check that the --route-trace folder exists and is writable",
                        ));
                    }
                }
            }
            ctx.clear_memory();
            resolved.moe_stream = true;
            resolved.cache_mb = cache_mb;
            resolved.cache_cycle_bytes = cycle;
            resolved.o_direct = setup.o_direct;
            resolved.io_threads = setup.lanes as u64;
        }
        if cfg.stream.is_none() && cfg.route_trace.is_some() {
            let _ = writeln!(
                note,
                "bmoe: warning: --route-trace needs --moe-stream (without streaming there is no routing to observe) — no route trace will be written"
            );
        }
        if cfg.stream.is_none() && cfg.io_trace.is_some() {
            let _ = writeln!(
                note,
                "bmoe: warning: --io-trace needs --moe-stream (plain llama.cpp issues no expert reads) — no io trace will be written"
            );
        }
        let load_s = loaded.t_load.elapsed().as_secs_f64();
        let streaming =
            cfg.stream.is_some() && ctx.hook_mut().is_some_and(|h| h.streamer().is_some());
        let csv = match &cfg.csv {
            Some(path) => Some(
                CsvSink::create(path, &crate::sinks::csv::run_info(cfg, &resolved))
                    .map_err(|e| fail(e, "check that the --csv folder exists and is writable"))?,
            ),
            None => None,
        };
        let trace_info = DecodeTraceInfo {
            model: Some(cfg.model.display().to_string()),
            arch: Some(resolved.arch.clone()),
            n_layer: Some(resolved.n_layer),
            n_threads: Some(cfg.threads as u64),
            io_threads: Some(resolved.io_threads),
            o_direct: Some(resolved.o_direct),
            overlap: Some(false),
            ..Default::default()
        };
        let io_trace = match (&cfg.io_trace, streaming) {
            (Some(path), true) => {
                let t = IoTracer::create(path, &trace_info).map_err(|e| {
                    fail(e, "check that the --io-trace folder exists and is writable")
                })?;
                if let Some(s) = ctx.hook_mut().and_then(MoeHook::streamer_mut) {
                    s.log_io();
                }
                Some(t)
            }
            _ => None,
        };
        if let Some((path, granularity)) = &cfg.compute_trace {
            let t = ComputeTracer::create(path, &trace_info, *granularity)
                .map_err(|e| fail(e, "check that the trace's folder exists and is writable"))?;
            if let Some(h) = ctx.hook_mut() {
                h.trace_compute(t);
            }
        }
        let (template, think_ctl) = if cfg.chatml {
            let hint = "run without --chatml to pass the prompt as raw text";
            let src = model
                .meta_str("tokenizer.chat_template")
                .ok_or_else(|| fail(crate::chat::ChatError::NoTemplate.to_string(), hint))?;
            let bos = String::from_utf8_lossy(&model.token_piece(model.bos())).into_owned();
            let t = ChatTemplate::new(&src, &bos, &bos).map_err(|e| fail(e.to_string(), hint))?;
            let ctl = t.think_ctl();
            (Some(t), ctl)
        } else {
            (None, ThinkCtl::Template)
        };
        let forced = match &cfg.force_text {
            Some(text) => ctx
                .model()
                .tokenize_with(text, false, true)
                .map_err(|e| fail(format!("--test-force-text: {e}"), "a test-only flag"))?,
            None => Vec::new(),
        };
        let banned = if cfg.ignore_eos {
            eog_tokens(ctx.model())
        } else {
            Vec::new()
        };
        let sampler = match cfg.sampling {
            Sampling::Greedy => None,
            Sampling::Sample {
                temp,
                top_k,
                top_p,
                seed,
            } => Some(ctx.sampler(
                SamplerParams {
                    temp,
                    top_k,
                    top_p,
                    seed,
                },
                &banned,
            )),
        };
        Ok(Self {
            cfg,
            facts,
            ctx,
            abort,
            resolved,
            auto_budget,
            probe,
            load_s,
            streaming,
            csv,
            io_trace,
            sampler,
            banned,
            feed: cfg.feed_random.map(TokenFeed::new),
            forced,
            forced_at: 0,
            template,
            think_ctl,
            _dense_arena: dense_arena,
            governor: (cfg.adaptive_threads && cfg.threads > 1)
                .then(|| crate::turn::threads::ThreadGovernor::new(cfg.threads)),
        })
    }

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

    /// Tokenizes `text` as a prompt (special tokens parsed, BOS as the model wants).
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>, EngineError> {
        self.model()
            .tokenize(text)
            .map_err(|e| fail(e, "check the prompt text"))
    }

    /// What the `mode:` summary line says about this engine.
    pub fn mode_line(&self) -> ModeLine {
        if self.streaming {
            ModeLine::Streaming {
                cache_mb: self.resolved.cache_mb,
                auto: self.auto_budget.is_some(),
                dense: self.resolved.dense_weights,
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

    fn stream_stats(&mut self) -> Option<StreamStats> {
        stream_stats(&mut self.ctx)
    }

    /// The next token after the last decode: the sampler's (or argmax) pick, the benchmark
    /// feed's, or (`--test-force-text`) the next forced one. Records the logits' hash.
    fn pick(&mut self, hashes: &mut Vec<u64>) -> Token {
        let model = self.ctx.model();
        let logits = self.ctx.last_logits();
        hashes.push(logits_hash(logits));
        let chosen = match self.sampler.as_mut() {
            Some(s) => self.ctx.sample(s),
            None => argmax_except(logits, &self.banned),
        };
        if !self.forced.is_empty() {
            self.forced_at += 1;
            // past the end the pick is never decoded: the turn ends (`forced_over`)
            return self
                .forced
                .get(self.forced_at - 1)
                .copied()
                .unwrap_or(chosen);
        }
        match self.feed.as_mut() {
            Some(f) => f.next_token(model.n_vocab(), |t| model.is_eog(t)),
            None => chosen,
        }
    }

    /// `--test-force-text`: the forced tokens are all out, so the turn ends as at an
    /// end-of-generation token.
    fn forced_over(&self) -> bool {
        !self.forced.is_empty() && self.forced_at > self.forced.len()
    }

    /// Runs one turn: prefills `turn.tokens[turn.n_reused..]` (the KV must hold exactly the
    /// first `n_reused`), then generates up to `turn.n_predict` tokens, writing per-token output
    /// to `out`, rows to the CSV and a `# summary` trailer at the end. `cancelled` is polled
    /// between tokens and after an aborted decode: when it says so the turn stops early and
    /// returns with [`Generation::cancelled`] set (the KV then holds a partial turn).
    ///
    /// # Errors
    /// A failed decode (with the streamer's read error when that is what stopped it).
    pub fn generate(
        &mut self,
        turn: &Turn<'_>,
        out: &mut dyn Write,
        note: &mut dyn Write,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Generation, EngineError> {
        let cfg = self.cfg;
        let model = self.ctx.model();
        let cache_on = self.cache_on();
        let cache_budget_mib = self.cache_budget_mib();
        let page_size = system_page_size() as u64;
        let n_ctx_tokens = turn.tokens.len();
        let mut g = Generation::default();
        let Some(fresh) = turn.tokens.get(turn.n_reused..).filter(|t| !t.is_empty()) else {
            return Err(fail(
                "internal: a turn must prefill at least one token",
                "report a bug",
            ));
        };
        let n_prompt = fresh.len();
        // one decode for the whole prompt (n_batch = n_ctx), unless a test asks for the batches
        // a session built its KV from
        let mut cuts: Vec<usize> = cfg
            .prefill_split
            .iter()
            .copied()
            .filter(|&p| p > turn.n_reused && p < n_ctx_tokens)
            .collect();
        if let Some(chunk) = self.resolved.prefill_chunk {
            // each layer's expert union must fit the cache budget (stream::prefill)
            cuts.extend(crate::stream::prefill::cut_points(
                turn.n_reused,
                n_ctx_tokens,
                chunk as usize,
            ));
        }
        cuts.sort_unstable();
        cuts.dedup();
        cuts.push(n_ctx_tokens);

        let pre_stats = self.stream_stats();
        let pre_proc = process_sample();
        let t_prefill = Instant::now();
        let mut from = turn.n_reused;
        let mut r = Ok(());
        for to in cuts {
            let mut chunk = turn.tokens[from..to].to_vec();
            begin_trace(&mut self.ctx, turn.turn, true, from as i64, chunk.len());
            r = self.ctx.decode(&mut chunk);
            end_trace(&mut self.ctx, note);
            drain_io(
                &mut self.ctx,
                &mut self.io_trace,
                turn.turn,
                PHASE_PREFILL,
                to as i64 - 1,
                note,
            );
            if r.is_err() {
                break;
            }
            from = to;
        }
        if let Err(e) = r {
            let read_err = self.ctx.hook_mut().and_then(MoeHook::take_error);
            if read_err.is_none() && e == DecodeError::Aborted && cancelled() {
                g.cancelled = true;
                g.summary = RunSummary {
                    threads: cfg.threads,
                    load_s: self.load_s,
                    ..Default::default()
                };
                g.trailer = TrailerContext {
                    cache_budget_mib,
                    cancelled: true,
                    ..Default::default()
                };
                // the turn took a turn number: its trailer says it ended before any token
                if let Some(sink) = self.csv.as_mut()
                    && let Err(e) = sink.write_summary(&trailer(&g.summary, &g.trailer))
                {
                    let _ = writeln!(note, "bmoe: warning: {e}");
                }
                return Ok(g);
            }
            return Err(decode_error(e, read_err, "prefill decode"));
        }
        let prefill_s = t_prefill.elapsed().as_secs_f64();
        let post_proc = process_sample();
        let mut tctx = TrailerContext {
            cache_budget_mib,
            prefill_cpu_s: post_proc.cpu_ns.saturating_sub(pre_proc.cpu_ns) as f64 / 1e9,
            ..Default::default()
        };
        if let (Some(a), Some(b)) = (pre_stats, self.stream_stats()) {
            tctx.prefill_read_bytes = b.read_bytes - a.read_bytes;
            tctx.prefill_io_s = (b.io_ns - a.io_ns) as f64 / 1e9;
            tctx.prefill_mgmt_s = (b.mgmt_ns - a.mgmt_ns) as f64 / 1e9;
        }
        let mut encoder = DeltaEncoder::new();
        let mut text = Utf8Stream::default();
        let mut splitter = turn.split.map(ReasoningSplitter::new);
        self.forced_at = 0;
        let base = self.stream_stats();
        let mut prev = base;
        let mut hashes = Vec::new();
        let mut tok = self.pick(&mut hashes);
        let mut last_end = Instant::now();
        let mut summary = RunSummary {
            threads: cfg.threads,
            n_prompt,
            prefill_s,
            load_s: self.load_s,
            ..Default::default()
        };
        for step in 1..=turn.n_predict {
            if model.is_eog(tok) || self.forced_over() {
                hashes.pop();
                break;
            }
            if cancelled() {
                g.cancelled = true;
                hashes.pop();
                break;
            }
            if cfg.dump_logits_hash
                && let Some(h) = hashes.last()
            {
                let _ = writeln!(note, "logits-hash step={step} token={tok} hash={h:016x}");
            }
            g.tokens.push(tok);
            let pos = (n_ctx_tokens + step - 1) as i64;
            if let Some(gov) = self.governor.as_mut() {
                let n = gov.next_threads();
                // prefill (batched decodes) keeps the full count
                self.ctx.set_threads(n as i32, cfg.threads as i32);
            }
            let p0 = process_sample();
            let t0 = Instant::now();
            let loop_overhead_ms = (t0 - last_end).as_secs_f64() * 1e3;
            let mut batch = [tok];
            begin_trace(&mut self.ctx, turn.turn, false, pos, 1);
            let r = self.ctx.decode(&mut batch);
            // the throttled dense-residency probe is this token's cache management (the seed's
            // mgmt_ms): timed inside the token's bracket, so the wall − io − mgmt residual stays
            // the compute and the next token's loop_overhead_ms does not carry it
            let (dense_resident_frac, probe_ms) = self.probe.sample(step);
            let wall = t0.elapsed();
            last_end = Instant::now();
            let p1 = process_sample();
            // trace writing lands in the next token's loop_overhead_ms, not in this decode
            end_trace(&mut self.ctx, note);
            drain_io(
                &mut self.ctx,
                &mut self.io_trace,
                turn.turn,
                PHASE_DECODE,
                pos,
                note,
            );
            if let Err(e) = r {
                let read_err = self.ctx.hook_mut().and_then(MoeHook::take_error);
                if read_err.is_none() && e == DecodeError::Aborted && cancelled() {
                    // the token was never decoded: it is not part of the turn
                    g.tokens.pop();
                    hashes.pop();
                    g.cancelled = true;
                    break;
                }
                return Err(decode_error(e, read_err, "generation decode"));
            }
            let mut delta = text.push(&model.token_piece(tok));
            let now = self.stream_stats();
            let d = match (now, prev) {
                (Some(n), Some(p)) => StreamStats {
                    read_bytes: n.read_bytes - p.read_bytes,
                    io_ns: n.io_ns - p.io_ns,
                    mgmt_ns: n.mgmt_ns - p.mgmt_ns,
                    ..n
                },
                _ => StreamStats::default(),
            };
            prev = now;
            let hit = match now {
                Some(n) if cache_on && n.lookups > 0 => 100.0 * n.hits as f64 / n.lookups as f64,
                _ => -1.0,
            };
            let row = TokenStats {
                step,
                steps: turn.n_predict,
                wall_ms: wall.as_secs_f64() * 1e3,
                io_ms: d.io_ns as f64 / 1e6,
                mgmt_ms: d.mgmt_ns as f64 / 1e6 + probe_ms,
                stall_ms: 0.0,
                read_bytes: d.read_bytes,
                cache_hit_pct: hit,
                majflt: p1.majflt.saturating_sub(p0.majflt),
                cpu_ms: p1.cpu_ns.saturating_sub(p0.cpu_ns) as f64 / 1e6,
                dense_resident_frac,
                compute_ms: 0.0,
            }
            .with_residual();
            if let Some(gov) = self.governor.as_mut() {
                // flash reads and cache work do not depend on the compute threads: judge the
                // count by the rest of the token
                gov.record(row.compute_ms);
            }
            tctx.loop_overhead_s += loop_overhead_ms / 1e3;
            if let Some(sink) = self.csv.as_mut() {
                let rctx = RowContext {
                    turn: u64::from(turn.turn),
                    memory: MemorySnapshot::sample(),
                    cache_budget_mib,
                    loop_overhead_ms,
                    page_size,
                };
                if let Err(e) = sink.write_row(&token_row(&row, &rctx)) {
                    let _ = writeln!(note, "bmoe: warning: {e} — metrics stop here");
                    self.csv = None;
                }
            }
            summary.n_gen += 1;
            summary.decode_s += wall.as_secs_f64();
            summary.cpu_s += row.cpu_ms / 1e3;
            summary.probe_s += probe_ms / 1e3;
            summary.majflt += row.majflt;
            // the next token is picked before this one's line goes out, so the last line of the
            // turn is known as such and releases everything held back (an incomplete character,
            // a possible marker): the deltas then add up to the final texts exactly
            let next = self.pick(&mut hashes);
            if step == turn.n_predict || model.is_eog(next) || self.forced_over() {
                delta.push_str(&text.finish());
                if let Some(s) = splitter.as_mut() {
                    s.push(&delta);
                    s.finish();
                }
            } else if let Some(s) = splitter.as_mut() {
                s.push(&delta);
            }
            if turn.progress {
                if let Some(l) = load_line(&row) {
                    let _ = writeln!(out, "{l}");
                }
                let line = match splitter.as_ref() {
                    Some(s) => {
                        let (reasoning, answer) = s.split();
                        progress_line_deltas(&row, &encoder.encode(&reasoning, &answer))
                    }
                    None => progress_line(&row, &delta),
                };
                let _ = writeln!(out, "{line}");
            } else {
                let _ = write!(out, "{delta}");
            }
            let _ = out.flush();
            g.rows.push(row);
            tok = next;
        }
        tctx.loop_overhead_s += last_end.elapsed().as_secs_f64();
        if let Some(gov) = self.governor.as_ref() {
            let _ = writeln!(note, "bmoe: {}", gov.summary());
        }
        g.tail = text.finish();
        if self.streaming
            && let (Some(n), Some(b)) = (self.stream_stats(), base)
        {
            summary.stream = Some(StreamSummary {
                read_bytes: n.read_bytes - b.read_bytes,
                io_s: (n.io_ns - b.io_ns) as f64 / 1e9,
                mgmt_s: (n.mgmt_ns - b.mgmt_ns) as f64 / 1e9,
                cache_hit_pct: if cache_on && n.lookups > 0 {
                    100.0 * n.hits as f64 / n.lookups as f64
                } else {
                    -1.0
                },
                resident_bytes: n.resident_bytes,
                evictions: n.evictions,
                rereads: n.rereads,
                auto_budget_mib: self.auto_budget,
                token_demand_bytes: n.token_demand_bytes,
                layer_demand_bytes: n.layer_demand_bytes,
            });
        }
        tctx.cgroup_usage_bytes = cgroup_memory()
            .filter(|c| c.limit.is_some())
            .map(|c| c.usage);
        tctx.cancelled = g.cancelled;
        if let Some(sink) = self.csv.as_mut()
            && let Err(e) = sink.write_summary(&trailer(&summary, &tctx))
        {
            let _ = writeln!(note, "bmoe: warning: {e}");
        }
        let _ = out.flush();
        g.text = text.text().to_string();
        (g.reasoning, g.answer) = match splitter.as_mut() {
            Some(s) => {
                // a cancelled turn ends with what its lines carried; a finished one has
                // released everything already (finish is idempotent)
                if !g.cancelled {
                    s.push(&g.tail);
                    s.finish();
                }
                s.split()
            }
            None => (String::new(), g.text.clone()),
        };
        g.logits_hashes = hashes;
        g.summary = summary;
        g.trailer = tctx;
        Ok(g)
    }
}

/// The route trace preamble from the model file.
fn route_trace_info(cfg: &RunConfig, n_expert_used: u64) -> Result<RouteTraceInfo, EngineError> {
    let hint = "run without --route-trace, or check the model file";
    let model = GgufModel::open(&cfg.model).map_err(|e| fail(e.to_string(), hint))?;
    let info = ModelInfo::from_model(&model).map_err(|e| fail(e.to_string(), hint))?;
    Ok(trace_info(
        &cfg.model.display().to_string(),
        &info,
        n_expert_used,
    ))
}

/// Tells the route tracer (if any) which decode the next routings belong to.
fn begin_trace(ctx: &mut Context<'_, MoeHook>, turn: u32, prefill: bool, pos0: i64, n: usize) {
    let span = DecodeSpan {
        turn,
        prefill,
        pos0,
        n_tokens: n,
    };
    let Some(hook) = ctx.hook_mut() else { return };
    if let Some(t) = hook.route_trace_mut() {
        t.begin_decode(span);
    }
    if let Some(t) = hook.compute_trace_mut() {
        t.begin_decode(span);
    }
}

/// Writes the decode's last cell and flushes; a write error stops the trace with a warning.
fn end_trace(ctx: &mut Context<'_, MoeHook>, note: &mut dyn Write) {
    let Some(hook) = ctx.hook_mut() else { return };
    if let Some(t) = hook.route_trace_mut()
        && let Err(e) = t.end_decode()
    {
        let _ = writeln!(note, "bmoe: warning: {e} — the route trace stops here");
        hook.stop_route_trace();
    }
    if let Some(t) = hook.compute_trace_mut()
        && let Err(e) = t.end_decode()
    {
        let _ = writeln!(note, "bmoe: warning: {e} — the compute trace stops here");
        hook.stop_compute_trace();
    }
}

/// Writes the reads of the decode just done to the io trace; a write error stops the trace.
fn drain_io(
    ctx: &mut Context<'_, MoeHook>,
    io: &mut Option<IoTracer>,
    turn: u32,
    phase: u8,
    step: i64,
    note: &mut dyn Write,
) {
    let Some(t) = io.as_mut() else { return };
    let Some(s) = ctx.hook_mut().and_then(MoeHook::streamer_mut) else {
        return;
    };
    let reads = s.take_io_log();
    if let Err(e) = t.write_decode(turn, phase, step, &reads) {
        let _ = writeln!(note, "bmoe: warning: {e} — the io trace stops here");
        *io = None;
    }
}

fn stream_stats(ctx: &mut Context<'_, MoeHook>) -> Option<StreamStats> {
    ctx.hook_mut()
        .and_then(|h| h.streamer())
        .map(Streamer::stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feed_is_seeded_and_skips() {
        let mut a = TokenFeed::new(7);
        let mut b = TokenFeed::new(7);
        let xs: Vec<Token> = (0..50).map(|_| a.next_token(10, |t| t == 3)).collect();
        let ys: Vec<Token> = (0..50).map(|_| b.next_token(10, |t| t == 3)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|&t| (0..10).contains(&t) && t != 3));
        assert!(xs.iter().collect::<std::collections::HashSet<_>>().len() > 5);
    }

    #[test]
    fn hash_and_argmax() {
        assert_ne!(logits_hash(&[1.0, 2.0]), logits_hash(&[2.0, 1.0]));
        assert_eq!(argmax_except(&[0.5, 3.0, 3.0, -1.0], &[]), 1);
    }

    #[test]
    fn argmax_skips_banned_tokens() {
        let logits = [0.5, 3.0, 3.0, -1.0, 9.0];
        assert_eq!(argmax_except(&logits, &[4]), 1);
        assert_eq!(argmax_except(&logits, &[1, 4]), 2);
        assert_eq!(argmax_except(&logits, &[1, 2, 4]), 0);
        assert_eq!(argmax_except(&[-2.0, -1.0], &[1]), 0);
    }

    #[test]
    fn missing_model_is_a_clear_error() {
        let e = read_facts(Path::new("/nonexistent/x.gguf")).unwrap_err();
        assert!(e.message.contains("/nonexistent/x.gguf") && !e.hint.is_empty());
    }
}
