//! [`Engine::open`]: the context over a loaded model, the hook, streaming (when asked), the
//! sinks, the chat template and the token pickers.

use super::Engine;
use super::load::LoadedModel;
use super::mtp::MtpState;
use super::outputs::Outputs;
use super::pick::{TokenFeed, eog_tokens};
use super::streaming::{Streaming, start_streaming};
use super::threads::ThreadGovernor;
use crate::chat::{ChatError, ChatTemplate, ThinkCtl};
use crate::cli::{DenseWeights, RunConfig, Sampling, Spec};
use crate::error::EngineError;
use crate::ffi::{Context, ContextOptions, Model, Sampler, SamplerParams, Token};
use crate::graph::arena::PrefillArena;
use crate::graph::hook::{MoeHook, RESIDENT_HOOK_ENV, resident_hook_requested};
use crate::graph::replay::{ReplayEnd, ReplayShape, RouteReplay};
use crate::graph::steer::Steering;
use crate::memory::residency::{DenseProbe, dense_probe_pages};
use crate::model::facts::ModelFacts;
use crate::model::registry::recipe_for;
use crate::sinks::csv::ResolvedRun;
use crate::vm::system_page_size;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

impl<'m> Engine<'m> {
    /// Builds the context over `loaded` and, with `--moe-stream`, captures the expert tensors
    /// and starts the streamer; then opens the CSV and traces and, with `--chatml`, the chat
    /// template. Notes and warnings go to `note`.
    ///
    /// # Errors
    /// llama.cpp's refusal, a streaming set-up failure, an output file, or the chat template.
    pub fn open(
        cfg: &'m RunConfig,
        loaded: &'m LoadedModel,
        note: &mut dyn Write,
    ) -> Result<Self, EngineError> {
        let facts = &loaded.facts;
        let model = &loaded.model;
        let abort = Arc::new(AtomicBool::new(false));
        let hook = build_hook(cfg, facts, &abort, note);
        let opts = ContextOptions {
            n_ctx: cfg.n_ctx,
            n_batch: cfg.n_batch,
            n_ubatch: cfg.n_ubatch,
            n_threads: cfg.threads as i32,
            // a hybrid (recurrent) model drops a verify decode's rejected drafts by rolling its
            // state back, which needs that many snapshots
            n_rs_seq: match cfg.spec.draft_max() {
                0 => 0,
                n => n + 1,
            },
            device_offload: cfg.prefill_device.is_some(),
        };
        let mut ctx =
            Context::new(model, opts, hook, Arc::clone(&abort)).map_err(EngineError::Context)?;
        // before streaming starts: the capture must see the head block's experts too
        let mtp = attach_mtp(cfg, facts, &mut ctx)?;
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
        // located while the whole file is still mapped (anon moves the dense pages, same addresses)
        let probe = DenseProbe::new(dense_probe_pages(&facts.index, system_page_size()));
        if cfg.stream.is_none() && cfg.dense_weights != DenseWeights::Mmap {
            let _ = writeln!(
                note,
                "bmoe: note: --dense-weights {} takes effect with --moe-stream; plain llama.cpp keeps the mmap",
                cfg.dense_weights.as_str()
            );
        }
        let streamed = match (cfg.stream, recipe_for(&facts.arch)) {
            (Some(sc), Some(recipe)) => {
                start_streaming(cfg, sc, recipe, facts, &mut ctx, &mut resolved, note)?
            }
            _ => Streaming::default(),
        };
        warn_traces_need_streaming(cfg, note);
        install_steering(cfg, &resolved, &mut ctx, note)?;
        let load_s = loaded.t_load.elapsed().as_secs_f64();
        let streaming =
            cfg.stream.is_some() && ctx.hook_mut().is_some_and(|h| h.streamer().is_some());
        let outputs = Outputs::open(cfg, &resolved, streaming, &mut ctx)?;
        let (template, think_ctl) = chat_template(cfg, model)?;
        let forced = match &cfg.force_text {
            Some(text) => ctx
                .model()
                .tokenize_with(text, false, true)
                .map_err(EngineError::ForceText)?,
            None => Vec::new(),
        };
        let banned = if cfg.ignore_eos {
            eog_tokens(ctx.model())
        } else {
            Vec::new()
        };
        let sampler = sampler(cfg, &ctx, &banned);
        Ok(Self {
            cfg,
            facts,
            ctx,
            abort,
            resolved,
            auto_budget: streamed.auto_budget,
            probe,
            load_s,
            streaming,
            outputs,
            sampler,
            banned,
            feed: cfg.feed_random.map(TokenFeed::new),
            forced,
            forced_at: 0,
            template,
            think_ctl,
            _dense_arena: streamed.dense_arena,
            rows: streamed.rows,
            governor: (cfg.adaptive_threads && cfg.threads > 1)
                .then(|| ThreadGovernor::new(cfg.threads)),
            interrupt: None,
            mtp,
        })
    }
}

/// `--mtp`: the head's draft context on the target's hook, and the target keeping every
/// position's hidden state for it.
fn attach_mtp(
    cfg: &RunConfig,
    facts: &ModelFacts,
    ctx: &mut Context<'_, MoeHook>,
) -> Result<Option<MtpState>, EngineError> {
    let Spec::Mtp { p_min, .. } = cfg.spec else {
        return Ok(None);
    };
    ctx.attach_mtp(cfg.n_ctx, cfg.threads as i32).map_err(|_| {
        EngineError::MtpDraftingUnavailable {
            arch: facts.arch.clone(),
            layers: facts.mtp_layers,
        }
    })?;
    ctx.keep_nextn_states();
    Ok(Some(MtpState::new(ctx.model().n_embd(), p_min)))
}

/// The eval hook the run needs: capturing (then streaming) with `--moe-stream`, timing nodes
/// only for a plain `--compute-trace`, observing for the resident-hook diagnostic, or none.
fn build_hook(
    cfg: &RunConfig,
    facts: &ModelFacts,
    abort: &Arc<AtomicBool>,
    note: &mut dyn Write,
) -> Option<MoeHook> {
    match (cfg.stream, recipe_for(&facts.arch)) {
        (Some(_), Some(r)) => {
            let mut hook = MoeHook::capturing(r, Arc::clone(abort));
            if cfg.prefill_device.is_some() && cfg.prefill_routed {
                // before the capture decode, which teaches it the routers
                hook.fill_arena(PrefillArena::new());
            }
            Some(hook)
        }
        _ if cfg.compute_trace.is_some() => Some(MoeHook::tracing_only(Arc::clone(abort))),
        (None, Some(_)) if resident_hook_requested() => {
            let _ = writeln!(
                note,
                "bmoe: diag: {RESIDENT_HOOK_ENV}=1 — routing hook on a resident run (ids read at every ffn_moe_topk node, nothing loaded)"
            );
            Some(MoeHook::observing(Arc::clone(abort)))
        }
        _ => None,
    }
}

/// The routing edits, on a streaming hook: the replay's trace read and checked against the
/// model's shape, and what the run will do said on stderr.
fn install_steering(
    cfg: &RunConfig,
    resolved: &ResolvedRun,
    ctx: &mut Context<'_, MoeHook>,
    note: &mut dyn Write,
) -> Result<(), EngineError> {
    let r = &cfg.routing;
    let Some(hook) = ctx.hook_mut().filter(|h| h.streamer().is_some()) else {
        return Ok(());
    };
    if !r.any() {
        return Ok(());
    }
    let replay = match &r.replay {
        Some((path, end)) => {
            let shape = ReplayShape {
                n_layer: resolved.n_layer,
                n_expert: resolved.n_expert,
                n_expert_used: resolved.n_expert_used,
            };
            let replay = RouteReplay::open(path, shape, *end)?;
            let _ = writeln!(
                note,
                "bmoe: route-replay: {} decode steps from {} — every decode step routes as the trace did (a replayed run, not comparable with a routed one); at its end the run {}",
                replay.len(),
                path.display(),
                match end {
                    ReplayEnd::Stop => "stops (--route-replay-end cycle starts it over)",
                    ReplayEnd::Cycle => "starts the trace over (--route-replay-end cycle)",
                }
            );
            Some(replay)
        }
        None => None,
    };
    let (f, k) = (r.edits.drop_frac, resolved.n_expert_used);
    if f > 0.0 && k > 0 && k <= 4 {
        let _ = writeln!(
            note,
            "bmoe: WARNING drop-cold-experts={f:.2} with top-k {k} — the threshold is {:.1}% of the routing here, against 12.5% at the top-k 8 this was measured on. Read the moe-drop: line for what it discarded.",
            100.0 * f64::from(f) / k as f64
        );
    }
    hook.steer_with(Steering::new(r.edits, replay));
    Ok(())
}

/// Says once that a trace flag given without `--moe-stream` writes nothing.
fn warn_traces_need_streaming(cfg: &RunConfig, note: &mut dyn Write) {
    if cfg.stream.is_some() {
        return;
    }
    if cfg.route_trace.is_some() {
        let _ = writeln!(
            note,
            "bmoe: warning: --route-trace needs --moe-stream (without streaming there is no routing to observe) — no route trace will be written"
        );
    }
    if cfg.io_trace.is_some() {
        let _ = writeln!(
            note,
            "bmoe: warning: --io-trace needs --moe-stream (plain llama.cpp issues no expert reads) — no io trace will be written"
        );
    }
}

/// With `--chatml`: the model's own template and how it honours `think=false`.
fn chat_template(
    cfg: &RunConfig,
    model: &Model,
) -> Result<(Option<ChatTemplate>, ThinkCtl), EngineError> {
    if !cfg.chatml {
        return Ok((None, ThinkCtl::Template));
    }
    let src = model
        .meta_str("tokenizer.chat_template")
        .ok_or(ChatError::NoTemplate)?;
    let bos = String::from_utf8_lossy(&model.token_piece(model.bos())).into_owned();
    let t = ChatTemplate::new(&src, &bos, &bos)?;
    let ctl = t.think_ctl();
    Ok((Some(t), ctl))
}

/// The sampler chain of a sampled run (`None` when greedy).
fn sampler(cfg: &RunConfig, ctx: &Context<'_, MoeHook>, banned: &[Token]) -> Option<Sampler> {
    match cfg.sampling {
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
            banned,
        )),
    }
}
