//! Taking over the experts (`--moe-stream`): one capture decode shows every expert tensor the
//! graph reads; they are bound to their file offsets, the cache budget is sized, the streamer
//! starts, and the dense-weight policy is applied.

use crate::cli::{DenseWeights, RunConfig, StreamConfig};
use crate::error::EngineError;
use crate::ffi::Context;
use crate::graph::hook::MoeHook;
use crate::graph::predict::Predictor;
use crate::memory::autocache::{AutoInputs, measure, size_budget};
use crate::memory::picture::{MemorySnapshot, cgroup_memory};
use crate::memory::residency::dense_file_ranges;
use crate::model::facts::ModelFacts;
use crate::model::registry::Recipe;
use crate::sinks::csv::ResolvedRun;
use crate::stream::layout::{ExpertLayout, bind};
use crate::stream::rows::{MIN_TABLE_BYTES, RowTable, RowTableSpec};
use crate::stream::{StreamSettings, Streamer};
use crate::vm::Arena;
use std::io::Write;

const MIB: f64 = 1024.0 * 1024.0;

/// What starting the streamer leaves the engine to own.
#[derive(Default)]
pub(super) struct Streaming {
    /// The budget `--cache-mb auto` chose, MiB.
    pub auto_budget: Option<u64>,
    /// `--dense-weights anon`'s pages.
    pub dense_arena: Option<Arena>,
    /// `--row-stream`'s table, when one qualified.
    pub rows: Option<RowTable>,
}

/// Captures the expert tensors, starts the streamer on the hook, and records what was resolved
/// (budget, lanes, O_DIRECT) in `resolved`.
pub(super) fn start_streaming(
    cfg: &RunConfig,
    sc: StreamConfig,
    recipe: &'static Recipe,
    facts: &ModelFacts,
    ctx: &mut Context<'_, MoeHook>,
    resolved: &mut ResolvedRun,
    note: &mut dyn Write,
) -> Result<Streaming, EngineError> {
    let top_k = resolved.n_expert_used as usize;
    // capture warm-up: one BOS decode shows every expert tensor the graph reads
    let mut warm = [ctx.model().bos()];
    ctx.decode(&mut warm).map_err(EngineError::Capture)?;
    let n_embd = ctx.model().n_embd();
    if let Some(head) = ctx.mtp_mut() {
        // the MTP head block's routed experts (`blk.<n_layer>.ffn_*_exps`) are read by the
        // head's own graph only: one head step shows them to the capture, so they stream too
        let zeros = vec![0.0f32; n_embd];
        head.process(&warm, &[zeros.as_slice()], 0)
            .map_err(EngineError::Capture)?;
        head.seq_rm(0);
    }
    let hook = ctx
        .hook_mut()
        .ok_or(EngineError::Internal("streaming without a hook"))?;
    let captured = hook.take_captured();
    let consumers = hook.take_consumers();
    let abort = hook.abort_flag();
    let weight_addrs = hook.take_weight_addrs();
    let layout = bind(recipe, &captured, &facts.index)?;
    let cycle = layout.cache_cycle_bytes(top_k);
    let (cache_mb, auto_budget) = cache_budget(sc, facts, &layout, top_k, resolved, note);
    let budget = cache_mb * 1024 * 1024;
    if let Some(split) =
        crate::stream::prefill::split_for(budget, layout.n_expert, top_k, layout.max_entry_bytes())
    {
        let _ = writeln!(note, "bmoe: {}", split.note(cache_mb));
        resolved.prefill_chunk = Some(split.chunk as u64);
    }
    let settings = StreamSettings {
        cache_bytes: budget,
        io_threads: sc.io_threads,
        o_direct: sc.o_direct,
        load_all: sc.load_all,
        overlap: sc.overlap,
    };
    let n_expert = layout.n_expert;
    let (mut streamer, setup) = Streamer::start(layout, &facts.index, settings, abort)?;
    streamer.set_consumers(&consumers);
    streamer.set_prefetch(sc.prefetch, top_k);
    streamer.set_prefetch_sync(sc.prefetch_sync);
    if cfg.predict.prefetch || cfg.predict.route_ahead > 0 {
        streamer.set_stale_gate_reads(cfg.predict.route_ahead > 0);
    }
    for w in &setup.warnings {
        let _ = writeln!(note, "bmoe: warning: {w}");
    }
    streamer.set_poison(cfg.poison);
    let dense_arena = apply_dense_policy(cfg, facts, &streamer, &weight_addrs, sc, note)?;
    resolved.dense_weights = cfg.dense_weights;
    let rows = match cfg.row_stream {
        Some(budget) => row_table(
            facts,
            &weight_addrs,
            ctx.model().n_vocab(),
            budget,
            sc,
            note,
        )?,
        None => None,
    };
    let _ = writeln!(
        note,
        "bmoe: expert streaming ON  n_expert={n_expert} o_direct={} io_threads={} cache={} MiB shards={} cache_cycle={:.1} MiB{}",
        u8::from(setup.o_direct),
        setup.lanes,
        cache_mb,
        facts.index.shards.len(),
        cycle as f64 / MIB,
        match setup.overlap {
            Some(k) => format!(" overlap={}", k.as_str()),
            None => String::new(),
        }
    );
    let pool = ctx.pool_pause();
    if let Some(hook) = ctx.hook_mut() {
        hook.stream_with(streamer, pool);
        let p = cfg.predict;
        if p.any() {
            let predictor = Predictor::new(p.log, p.prefetch).with_route_ahead(p.route_ahead);
            hook.predict_with(predictor, p.spec_max);
        }
    }
    ctx.clear_memory();
    resolved.moe_stream = true;
    resolved.cache_mb = cache_mb;
    resolved.cache_cycle_bytes = cycle;
    resolved.o_direct = setup.o_direct;
    resolved.io_threads = setup.lanes as u64;
    resolved.overlap = setup.overlap;
    Ok(Streaming {
        auto_budget,
        dense_arena,
        rows,
    })
}

/// The table the dense policies leave to `--row-stream` (none without it).
pub(super) fn row_skip(cfg: &RunConfig, facts: &ModelFacts) -> Option<(usize, u64, u64)> {
    cfg.row_stream
        .and_then(|_| crate::stream::rows::planned_table(&facts.index))
}

/// The token embedding as a row-gathered table, or why it does not qualify (said on `note`).
fn row_table_spec(
    facts: &ModelFacts,
    weight_addrs: &[(String, usize)],
    n_vocab: usize,
) -> Result<RowTableSpec, &'static str> {
    const NAME: &str = crate::stream::rows::TABLE_NAME;
    let place = facts
        .index
        .tensors
        .get(NAME)
        .ok_or("the model has no token_embd.weight")?;
    let addr = weight_addrs
        .iter()
        .find(|(n, _)| n == NAME)
        .map(|w| w.1)
        .ok_or("the graph never read it")?;
    // a tied head (no output.weight: llama.cpp reuses token_embd as the output matmul's
    // weight) reads every row on every token, so streaming it would read the whole table
    let tied = !facts.index.tensors.contains_key("output.weight")
        || weight_addrs.iter().any(|(n, a)| *a == addr && n != NAME);
    if tied {
        return Err("it is also the output head (tied embeddings): a matmul reads every row");
    }
    if (place.size as usize) < MIN_TABLE_BYTES {
        return Err("it is smaller than 1 MiB");
    }
    if n_vocab == 0 || !(place.size as usize).is_multiple_of(n_vocab) {
        return Err("its size is not a whole number of vocabulary rows");
    }
    let path = facts
        .index
        .shards
        .get(place.shard)
        .ok_or("its shard is unknown")?;
    Ok(RowTableSpec {
        name: NAME.to_string(),
        path: path.clone(),
        addr,
        file_offset: place.offset,
        bytes: place.size as usize,
        n_rows: n_vocab,
    })
}

/// `--row-stream`: takes the token embedding over when it qualifies; says what happened.
fn row_table(
    facts: &ModelFacts,
    weight_addrs: &[(String, usize)],
    n_vocab: usize,
    budget: u64,
    sc: StreamConfig,
    note: &mut dyn Write,
) -> Result<Option<RowTable>, EngineError> {
    let spec = match row_table_spec(facts, weight_addrs, n_vocab) {
        Ok(s) => s,
        Err(why) => {
            let _ = writeln!(
                note,
                "bmoe: --row-stream: token_embd.weight stays resident — {why}"
            );
            return Ok(None);
        }
    };
    let mib = spec.bytes as f64 / MIB;
    let (t, _) = RowTable::take_over(spec, budget, sc.o_direct).map_err(EngineError::RowSetup)?;
    let _ = writeln!(
        note,
        "bmoe: --row-stream: {} ({mib:.1} MiB) bound to reserved address space, row cache {:.1} MiB, o_direct={}",
        t.name(),
        budget as f64 / MIB,
        u8::from(t.is_direct())
    );
    Ok(Some(t))
}

/// The cache budget in MiB (`--cache-mb`, or sized now under `auto`), and the auto choice;
/// warns when the budget is below one token's worst case.
fn cache_budget(
    sc: StreamConfig,
    facts: &ModelFacts,
    layout: &ExpertLayout,
    top_k: usize,
    resolved: &mut ResolvedRun,
    note: &mut dyn Write,
) -> (u64, Option<u64>) {
    let cycle = layout.cache_cycle_bytes(top_k);
    let Some(a) = sc.auto else {
        let budget = sc.cache_mb * 1024 * 1024;
        if budget > 0 && budget < cycle {
            let _ = writeln!(
                note,
                "bmoe: warning: --cache-mb {} is below this model's cache cycle ({:.1} MiB = top-{top_k} experts in every layer): most lookups will miss",
                sc.cache_mb,
                cycle as f64 / MIB
            );
        }
        return (sc.cache_mb, None);
    };
    let (mem_available, cgroup_headroom) =
        measure(MemorySnapshot::sample().system, cgroup_memory().as_ref());
    // the dense weights must stay resident under every --dense-weights policy
    let dense_reserve_bytes = dense_file_ranges(&facts.index).iter().map(|r| r.2).sum();
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
    (b.budget_mb, Some(b.budget_mb))
}

/// `--dense-weights warm|anon`: pre-reads the dense mapping, or moves the dense weights into
/// anonymous memory (whose pages the engine then owns).
fn apply_dense_policy(
    cfg: &RunConfig,
    facts: &ModelFacts,
    streamer: &Streamer,
    weight_addrs: &[(String, usize)],
    sc: StreamConfig,
    note: &mut dyn Write,
) -> Result<Option<Arena>, EngineError> {
    match cfg.dense_weights {
        DenseWeights::Mmap => Ok(None),
        DenseWeights::Warm => {
            match crate::memory::dense::warm(&facts.index, row_skip(cfg, facts)) {
                Ok(o) => {
                    let _ = writeln!(
                        note,
                        "bmoe: dense warm-up — {:.1} MiB in {:.2} s",
                        o.bytes as f64 / MIB,
                        o.seconds
                    );
                }
                Err(e) => {
                    let _ = writeln!(note, "bmoe: warning: {e} — dense weights stay cold (mmap)");
                }
            }
            Ok(None)
        }
        DenseWeights::Anon => {
            let o = crate::memory::dense::anon(
                &facts.index,
                streamer.layout(),
                weight_addrs,
                sc.o_direct,
                row_skip(cfg, facts),
            )?;
            let _ = writeln!(
                note,
                "bmoe: dense-weights=anon — {:.1} MiB copied into anonymous memory in {:.2} s (o_direct={})",
                o.bytes as f64 / MIB,
                o.seconds,
                u8::from(o.o_direct)
            );
            Ok(o.arena)
        }
    }
}
