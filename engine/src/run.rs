//! One run: open the model (and, with `--moe-stream`, take over its experts), prefill the
//! prompt, generate, and report.

use crate::autocache::{AutoInputs, measure, size_budget};
use crate::chat::{ChatTemplate, split_reasoning};
use crate::compute_trace::ComputeTracer;
use crate::config::{DenseWeights, RunConfig, Sampling};
use crate::csv_sink::{CsvSink, ResolvedRun, RowContext, TrailerContext, token_row, trailer};
use crate::ffi::{Context, ContextOptions, DecodeError, Model, ModelOptions, SamplerParams, Token};
use crate::hook::MoeHook;
use crate::io_trace::IoTracer;
use crate::memory::{MemorySnapshot, cgroup_memory};
use crate::registry::{Recipe, recipe_for};
use crate::report::{
    ModeLine, RunSummary, StreamSummary, TokenStats, load_line, progress_line,
    progress_line_deltas, summary_lines,
};
use crate::residency::{DenseProbe, dense_probe_pages};
use crate::route_trace::{DecodeSpan, RouteTracer, trace_info};
use crate::stream::layout::{FilePlace, ModelIndex, bind};
use crate::stream::{StreamSettings, StreamStats, Streamer};
use crate::text::Utf8Stream;
use crate::vm::{process_sample, system_page_size};
use bmoe_gguf::info::ModelInfo;
use bmoe_gguf::{GgufError, GgufModel};
use bmoe_telemetry::deltas::DeltaEncoder;
use bmoe_telemetry::summary::{ANSWER_BANNER, PERF_BANNER};
use bmoe_telemetry::trace::{DecodeTraceInfo, PHASE_DECODE, PHASE_PREFILL, RouteTraceInfo};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
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

/// Reads the headers of every shard of `path` (through bmoe-gguf) and checks that no tensor runs
/// past its file's end.
pub fn read_facts(path: &Path) -> Result<ModelFacts, EngineError> {
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

fn argmax(logits: &[f32]) -> Token {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as Token
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

fn decode_error(e: DecodeError, hook: Option<&mut MoeHook>, what: &str) -> EngineError {
    if let Some(err) = hook.and_then(MoeHook::take_error) {
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

/// Runs `cfg`: per-token output to `out` (stdout), notes and warnings to `note` (stderr).
pub fn run(
    cfg: &RunConfig,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<RunOutcome, EngineError> {
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
    let model = Model::load(&cfg.model, &model_opts)
        .map_err(|e| fail(e, "set BMOE_LLAMA_LOG=1 to see llama.cpp's reason"))?;
    if let Ok(replacement) = std::env::var(TEST_REPLACE_ENV) {
        std::fs::rename(&replacement, &cfg.model)
            .map_err(|e| fail(format!("{TEST_REPLACE_ENV}: {e}"), "test hook"))?;
    }
    let abort = Arc::new(AtomicBool::new(false));
    let hook = match (cfg.stream, recipe) {
        (Some(_), Some(r)) => Some(MoeHook::capturing(r, Arc::clone(&abort))),
        _ if cfg.compute_trace.is_some() => Some(MoeHook::tracing_only(Arc::clone(&abort))),
        _ => None,
    };
    let opts = ContextOptions {
        n_ctx: cfg.n_ctx,
        n_batch: cfg.n_batch,
        n_ubatch: cfg.n_ubatch,
        n_threads: cfg.threads as i32,
    };
    let mut ctx = Context::new(&model, opts, hook, Arc::clone(&abort))
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
                "set BMOE_LLAMA_LOG=1 to see llama.cpp's reason",
            )
        })?;
        let hook = ctx
            .hook_mut()
            .ok_or_else(|| fail("internal: streaming without a hook", "report a bug"))?;
        let captured = hook.take_captured();
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
                let dense_reserve_bytes = if cfg.dense_weights == DenseWeights::Anon {
                    crate::residency::dense_file_ranges(&facts.index)
                        .iter()
                        .map(|r| r.2)
                        .sum()
                } else {
                    0
                };
                let b = size_budget(&AutoInputs {
                    mem_available,
                    cgroup_headroom,
                    floor_mb: a.floor_mb,
                    ceil_mb: a.ceil_mb,
                    total_expert_bytes: layout.total_bytes(),
                    cache_cycle_bytes: cycle,
                    dense_reserve_bytes,
                });
                let _ = writeln!(note, "bmoe: {}", b.note(a.floor_mb));
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
            DenseWeights::Warm => match crate::dense::warm(&facts.index) {
                Ok(o) => {
                    let _ = writeln!(
                        note,
                        "bmoe: dense warm-up — {:.1} MiB in {:.2} s",
                        o.bytes as f64 / (1024.0 * 1024.0),
                        o.seconds
                    );
                }
                Err(e) => {
                    let _ = writeln!(note, "bmoe: warning: {e} — dense weights stay cold (mmap)");
                }
            },
            DenseWeights::Anon => {
                let o = crate::dense::anon(&facts.index, streamer.layout(), sc.o_direct)
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
    let load_s = t_load.elapsed().as_secs_f64();
    let setup = Setup {
        facts: &facts,
        resolved,
        auto_budget,
        probe,
        load_s,
        _dense_arena: dense_arena,
    };
    generate(cfg, &mut ctx, setup, out, note)
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
    phase: u8,
    step: i64,
    note: &mut dyn Write,
) {
    let Some(t) = io.as_mut() else { return };
    let Some(s) = ctx.hook_mut().and_then(MoeHook::streamer_mut) else {
        return;
    };
    let reads = s.take_io_log();
    if let Err(e) = t.write_decode(0, phase, step, &reads) {
        let _ = writeln!(note, "bmoe: warning: {e} — the io trace stops here");
        *io = None;
    }
}

/// What `run` settled on at load, handed to the generation.
struct Setup<'f> {
    facts: &'f ModelFacts,
    resolved: ResolvedRun,
    auto_budget: Option<u64>,
    probe: DenseProbe,
    load_s: f64,
    /// `--dense-weights anon`'s pages, owned for the run.
    _dense_arena: Option<crate::vm::Arena>,
}

fn stream_stats(ctx: &mut Context<'_, MoeHook>) -> Option<StreamStats> {
    ctx.hook_mut()
        .and_then(|h| h.streamer())
        .map(Streamer::stats)
}

/// With `--chatml`: the template's think markers and whether the generation starts inside a
/// think span.
type ChatSplit = Option<(Option<crate::chat::ThinkTags>, bool)>;

/// `--chatml`: the rendered prompt and how to split the generation.
fn render_chat(
    cfg: &RunConfig,
    model: &crate::ffi::Model,
) -> Result<(String, ChatSplit), EngineError> {
    if !cfg.chatml {
        return Ok((cfg.prompt.clone(), None));
    }
    let hint = "run without --chatml to pass the prompt as raw text";
    let src = model
        .meta_str("tokenizer.chat_template")
        .ok_or_else(|| fail(crate::chat::ChatError::NoTemplate.to_string(), hint))?;
    let bos = String::from_utf8_lossy(&model.token_piece(model.bos())).into_owned();
    let t = ChatTemplate::new(&src, &bos, &bos).map_err(|e| fail(e.to_string(), hint))?;
    let rendered = t
        .render(&cfg.prompt, cfg.think)
        .map_err(|e| fail(e.to_string(), hint))?;
    let starts = t.opens_in_reasoning(&rendered);
    Ok((rendered, Some((t.think_tags(), starts))))
}

fn generate(
    cfg: &RunConfig,
    ctx: &mut Context<'_, MoeHook>,
    mut setup: Setup<'_>,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<RunOutcome, EngineError> {
    let facts = setup.facts;
    let load_s = setup.load_s;
    let model = ctx.model();
    let (prompt_text, chat) = render_chat(cfg, model)?;
    let mut prompt = model
        .tokenize(&prompt_text)
        .map_err(|e| fail(e, "check the prompt text"))?;
    if prompt.is_empty() {
        return Err(fail(
            "empty prompt after tokenization",
            "pass a non-empty -p/--prompt",
        ));
    }
    if prompt.len() + cfg.n_predict > cfg.n_ctx as usize {
        return Err(fail(
            format!(
                "prompt ({} tokens) + -n {} exceeds -c/--ctx-size {}",
                prompt.len(),
                cfg.n_predict,
                cfg.n_ctx
            ),
            "raise -c/--ctx-size or lower -n/--n-predict",
        ));
    }
    let streaming = cfg.stream.is_some() && ctx.hook_mut().is_some_and(|h| h.streamer().is_some());
    let cache_on = streaming && setup.resolved.cache_mb > 0;
    let cache_budget_mib = if cache_on {
        setup.resolved.cache_mb as f64
    } else {
        0.0
    };
    let mut csv = match &cfg.csv {
        Some(path) => match CsvSink::create(path, &crate::csv_sink::run_info(cfg, &setup.resolved))
        {
            Ok(s) => Some(s),
            Err(e) => {
                let _ = writeln!(note, "bmoe: warning: {e} — no metrics will be written");
                None
            }
        },
        None => None,
    };
    let mut io_trace = match (&cfg.io_trace, streaming) {
        (Some(path), true) => {
            let info = DecodeTraceInfo {
                model: Some(cfg.model.display().to_string()),
                arch: Some(setup.resolved.arch.clone()),
                n_layer: Some(setup.resolved.n_layer),
                n_threads: Some(cfg.threads as u64),
                io_threads: Some(setup.resolved.io_threads),
                o_direct: Some(setup.resolved.o_direct),
                overlap: Some(false),
                ..Default::default()
            };
            let t = IoTracer::create(path, &info)
                .map_err(|e| fail(e, "check that the --io-trace folder exists and is writable"))?;
            if let Some(s) = ctx.hook_mut().and_then(MoeHook::streamer_mut) {
                s.log_io();
            }
            Some(t)
        }
        _ => None,
    };
    if let Some((path, granularity)) = &cfg.compute_trace {
        let info = DecodeTraceInfo {
            model: Some(cfg.model.display().to_string()),
            arch: Some(setup.resolved.arch.clone()),
            n_layer: Some(setup.resolved.n_layer),
            n_threads: Some(cfg.threads as u64),
            io_threads: Some(setup.resolved.io_threads),
            o_direct: Some(setup.resolved.o_direct),
            overlap: Some(false),
            ..Default::default()
        };
        let t = ComputeTracer::create(path, &info, *granularity)
            .map_err(|e| fail(e, "check that the trace's folder exists and is writable"))?;
        if let Some(h) = ctx.hook_mut() {
            h.trace_compute(t);
        }
    }
    let page_size = system_page_size() as u64;
    if !cfg.progress {
        let _ = write!(out, "{prompt_text}");
        let _ = out.flush();
    }

    let pre_stats = stream_stats(ctx);
    let pre_proc = process_sample();
    let t_prefill = Instant::now();
    let n_prompt = prompt.len();
    begin_trace(ctx, 0, true, 0, n_prompt);
    if let Err(e) = ctx.decode(&mut prompt) {
        return Err(decode_error(e, ctx.hook_mut(), "prefill decode"));
    }
    end_trace(ctx, note);
    drain_io(ctx, &mut io_trace, PHASE_PREFILL, n_prompt as i64 - 1, note);
    let prefill_s = t_prefill.elapsed().as_secs_f64();
    let post_proc = process_sample();
    let mut tctx = TrailerContext {
        cache_budget_mib,
        prefill_cpu_s: post_proc.cpu_ns.saturating_sub(pre_proc.cpu_ns) as f64 / 1e9,
        ..Default::default()
    };
    if let (Some(a), Some(b)) = (pre_stats, stream_stats(ctx)) {
        tctx.prefill_read_bytes = b.read_bytes - a.read_bytes;
        tctx.prefill_io_s = (b.io_ns - a.io_ns) as f64 / 1e9;
        tctx.prefill_mgmt_s = (b.mgmt_ns - a.mgmt_ns) as f64 / 1e9;
    }
    let mut encoder = DeltaEncoder::new();

    let mut sampler = match cfg.sampling {
        Sampling::Greedy => None,
        Sampling::Sample {
            temp,
            top_k,
            top_p,
            seed,
        } => Some(ctx.sampler(SamplerParams {
            temp,
            top_k,
            top_p,
            seed,
        })),
    };
    let mut feed = cfg.feed_random.map(TokenFeed::new);
    let n_vocab = model.n_vocab();
    let mut pick = |ctx: &mut Context<'_, MoeHook>, hashes: &mut Vec<u64>| -> Token {
        let logits = ctx.last_logits();
        hashes.push(logits_hash(logits));
        let chosen = match sampler.as_mut() {
            Some(s) => ctx.sample(s),
            None => argmax(logits),
        };
        match feed.as_mut() {
            Some(f) => f.next_token(n_vocab, |t| model.is_eog(t)),
            None => chosen,
        }
    };

    let mut outcome = RunOutcome::default();
    let mut text = Utf8Stream::default();
    let base = stream_stats(ctx);
    let mut prev = base;
    let mut tok = pick(ctx, &mut outcome.logits_hashes);
    let mut last_end = Instant::now();
    let mut summary = RunSummary {
        threads: cfg.threads,
        n_prompt,
        prefill_s,
        load_s,
        ..Default::default()
    };
    for step in 1..=cfg.n_predict {
        if model.is_eog(tok) {
            outcome.logits_hashes.pop();
            break;
        }
        if cfg.dump_logits_hash
            && let Some(h) = outcome.logits_hashes.last()
        {
            let _ = writeln!(note, "logits-hash step={step} token={tok} hash={h:016x}");
        }
        outcome.tokens.push(tok);
        let delta = text.push(&model.token_piece(tok));
        let p0 = process_sample();
        let t0 = Instant::now();
        let loop_overhead_ms = (t0 - last_end).as_secs_f64() * 1e3;
        let mut batch = [tok];
        begin_trace(ctx, 0, false, (n_prompt + step - 1) as i64, 1);
        let r = ctx.decode(&mut batch);
        let wall = t0.elapsed();
        last_end = Instant::now();
        let p1 = process_sample();
        // trace writing lands in the next token's loop_overhead_ms, not in this decode
        end_trace(ctx, note);
        drain_io(
            ctx,
            &mut io_trace,
            PHASE_DECODE,
            (n_prompt + step - 1) as i64,
            note,
        );
        if let Err(e) = r {
            return Err(decode_error(e, ctx.hook_mut(), "generation decode"));
        }
        let now = stream_stats(ctx);
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
            steps: cfg.n_predict,
            wall_ms: wall.as_secs_f64() * 1e3,
            io_ms: d.io_ns as f64 / 1e6,
            mgmt_ms: d.mgmt_ns as f64 / 1e6,
            stall_ms: 0.0,
            read_bytes: d.read_bytes,
            cache_hit_pct: hit,
            majflt: p1.majflt.saturating_sub(p0.majflt),
            cpu_ms: p1.cpu_ns.saturating_sub(p0.cpu_ns) as f64 / 1e6,
            // probed outside the decode bracket: its cost lands in loop_overhead_ms
            dense_resident_frac: setup.probe.sample(step).0,
            compute_ms: 0.0,
        }
        .with_residual();
        tctx.loop_overhead_s += loop_overhead_ms / 1e3;
        if let Some(sink) = csv.as_mut() {
            let rctx = RowContext {
                turn: 0,
                memory: MemorySnapshot::sample(),
                cache_budget_mib,
                loop_overhead_ms,
                page_size,
            };
            if let Err(e) = sink.write_row(&token_row(&row, &rctx)) {
                let _ = writeln!(note, "bmoe: warning: {e} — metrics stop here");
                csv = None;
            }
        }
        summary.n_gen += 1;
        summary.decode_s += wall.as_secs_f64();
        summary.cpu_s += row.cpu_ms / 1e3;
        summary.majflt += row.majflt;
        if cfg.progress {
            if let Some(l) = load_line(&row) {
                let _ = writeln!(out, "{l}");
            }
            let line = match chat {
                Some((tags, starts)) => {
                    let (reasoning, answer) = split_reasoning(text.text(), tags, starts);
                    progress_line_deltas(&row, &encoder.encode(&reasoning, &answer))
                }
                None => progress_line(&row, &delta),
            };
            let _ = writeln!(out, "{line}");
        } else {
            let _ = write!(out, "{delta}");
        }
        let _ = out.flush();
        outcome.rows.push(row);
        tok = pick(ctx, &mut outcome.logits_hashes);
    }
    tctx.loop_overhead_s += last_end.elapsed().as_secs_f64();
    let tail = text.finish();
    if !cfg.progress {
        let _ = writeln!(out, "{tail}\n");
    }
    if streaming && let (Some(n), Some(b)) = (stream_stats(ctx), base) {
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
            auto_budget_mib: setup.auto_budget,
            token_demand_bytes: n.token_demand_bytes,
            layer_demand_bytes: n.layer_demand_bytes,
        });
    }
    let mode = if streaming {
        ModeLine::Streaming {
            cache_mb: setup.resolved.cache_mb,
            auto: setup.auto_budget.is_some(),
            dense: setup.resolved.dense_weights,
        }
    } else if recipe_for(&facts.arch).is_some() {
        ModeLine::PlainStreamable {
            arch: facts.arch.clone(),
        }
    } else {
        ModeLine::PlainUnsupported {
            arch: facts.arch.clone(),
        }
    };
    if cfg.progress {
        let _ = writeln!(out, "{ANSWER_BANNER}\n{}\n{PERF_BANNER}", text.text());
    }
    for line in summary_lines(&summary, &mode) {
        let _ = writeln!(out, "{line}");
    }
    tctx.cgroup_usage_bytes = cgroup_memory()
        .filter(|c| c.limit.is_some())
        .map(|c| c.usage);
    if let Some(sink) = csv.as_mut()
        && let Err(e) = sink.write_summary(&trailer(&summary, &tctx))
    {
        let _ = writeln!(note, "bmoe: warning: {e}");
    }
    let _ = out.flush();
    outcome.text = text.text().to_string();
    outcome.summary = summary;
    Ok(outcome)
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
        assert_eq!(argmax(&[0.5, 3.0, 3.0, -1.0]), 1);
    }

    #[test]
    fn missing_model_is_a_clear_error() {
        let e = read_facts(Path::new("/nonexistent/x.gguf")).unwrap_err();
        assert!(e.message.contains("/nonexistent/x.gguf") && !e.hint.is_empty());
    }
}
