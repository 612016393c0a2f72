//! The graph hook: captures the expert tensors during a warm-up decode, then loads the routed
//! experts at every `ffn_moe_topk-<il>` node before the expert matmuls consume them.

use super::arena::{ArenaTally, PrefillArena};
use super::edit::EditConfig;
use super::names::{topk_layer, weight_layer};
use super::predict::{PredictTally, Predictor, RouteAheadTally};
use super::read_steps::{ReadStamps, ReadSteps};
use super::routes::RouteRecorder;
use super::span::DecodeSpan;
use super::steer::{Edited, Steering};
use super::timing::NodeTimer;
use crate::ffi::{EvalHook, Node, PoolPause, WeightRef};
use crate::model::registry::Recipe;
use crate::stream::io::ReadError;
use crate::stream::{Routing, Streamer};
use bmoe_telemetry::trace::{ComputeRow, RouteRow};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Env var (diagnostic): `1` installs the routing hook on a plain (resident) run — every
/// `ffn_moe_topk-<il>` node is isolated and its ids are read, exactly as when streaming, but
/// nothing is loaded. Resident with the hook against resident without it is the callback's own
/// overhead.
pub const RESIDENT_HOOK_ENV: &str = "BMOE_DIAG_RESIDENT_HOOK";

/// Env var (diagnostic A/B): `1` leaves ggml's compute threads polling while a layer waits for
/// its reads, as before they were paused.
pub const NO_POOL_PAUSE_ENV: &str = "BMOE_DIAG_NO_POOL_PAUSE";

/// Whether [`RESIDENT_HOOK_ENV`] asks for the observe-only hook.
pub fn resident_hook_requested() -> bool {
    std::env::var(RESIDENT_HOOK_ENV).is_ok_and(|v| v == "1")
}

enum Phase {
    /// Record every expert tensor a node reads.
    Capture(Vec<(usize, &'static str, WeightRef)>),
    /// Load routed experts.
    Stream(Box<Streamer>),
    /// Read the routed ids at every routing node and load nothing ([`RESIDENT_HOOK_ENV`]).
    Observe {
        /// Ids read so far (kept so the read cannot be optimised away).
        ids_read: u64,
    },
    /// Do nothing (between phases).
    Idle,
}

/// What the recorders collected during one decode, for the sinks.
#[derive(Debug, Default)]
pub struct DecodeRecords {
    /// `--route-trace` rows.
    pub routes: Vec<RouteRow>,
    /// `--compute-trace[-layers]` rows.
    pub nodes: Vec<ComputeRow>,
    /// `--io-trace`: where the decode's reads belong on the context axis.
    pub reads: Option<ReadStamps>,
}

/// The engine's eval hook.
pub struct MoeHook {
    recipe: Option<&'static Recipe>,
    phase: Phase,
    abort: Arc<AtomicBool>,
    error: Option<ReadError>,
    topk_calls: u64,
    routes: Option<RouteRecorder>,
    reads: Option<ReadSteps>,
    routing: Vec<Routing>,
    /// The routing edits (`--drop-cold-experts`, `--expert-substitute`, `--route-replay`).
    steer: Option<Steering>,
    timer: Option<NodeTimer>,
    /// `--predict-log` / `--predict-prefetch`: the router-arithmetic predictors.
    predict: Option<Predictor>,
    /// `--predict-spec-max`: the stale gate's misses read ahead per layer.
    predict_spec_max: usize,
    /// Puts the compute threads to sleep while a layer's reads are waited for.
    pool: Option<PoolPause>,
    /// `--prefill-device` routed mode: the prediction-filled prefill arena.
    arena: Option<PrefillArena>,
    /// Capture: every expert tensor's consuming node, in graph order.
    consumers: Vec<(usize, String, String)>,
    /// Capture: name and address of every other weight the graph reads (to find where each
    /// shard of a split model is mapped, for `--dense-weights anon`).
    weight_addrs: Vec<(String, usize)>,
}

impl MoeHook {
    /// A hook in capture mode for `recipe`; `abort` is the context's abort flag, raised on a
    /// failed read so the decode stops instead of computing on missing bytes.
    pub fn capturing(recipe: &'static Recipe, abort: Arc<AtomicBool>) -> Self {
        Self::starting_in(Phase::Capture(Vec::new()), Some(recipe), abort)
    }

    /// A hook that only traces (no streaming): for `--compute-trace` on a plain run.
    pub fn tracing_only(abort: Arc<AtomicBool>) -> Self {
        Self::starting_in(Phase::Idle, None, abort)
    }

    /// A hook for a resident run that isolates every routing node and reads its ids, as the
    /// streaming hook does, but loads nothing: the measuring stick for the callback's overhead.
    pub fn observing(abort: Arc<AtomicBool>) -> Self {
        Self::starting_in(Phase::Observe { ids_read: 0 }, None, abort)
    }

    /// A hook in `phase` with nothing traced, counted or failed yet.
    fn starting_in(phase: Phase, recipe: Option<&'static Recipe>, abort: Arc<AtomicBool>) -> Self {
        Self {
            recipe,
            phase,
            abort,
            error: None,
            topk_calls: 0,
            routes: None,
            reads: None,
            routing: Vec::new(),
            steer: None,
            timer: None,
            predict: None,
            predict_spec_max: 0,
            pool: None,
            arena: None,
            consumers: Vec::new(),
            weight_addrs: Vec::new(),
        }
    }

    /// Routed ids read by an [`MoeHook::observing`] hook (0 otherwise).
    pub fn ids_observed(&self) -> u64 {
        match self.phase {
            Phase::Observe { ids_read } => ids_read,
            _ => 0,
        }
    }

    /// Times graph nodes with `t` from now on (`--compute-trace[-layers]`).
    pub fn time_nodes(&mut self, t: NodeTimer) {
        self.timer = Some(t);
    }

    /// Stops timing nodes (after the compute-trace sink failed).
    pub fn stop_timing(&mut self) {
        self.timer = None;
    }

    /// Records every routing with `r` from now on (`--route-trace`; asks the graph for the
    /// weight nodes too).
    pub fn record_routes(&mut self, r: RouteRecorder) {
        self.routes = Some(r);
    }

    /// Records where every load's reads belong with `r` from now on (`--io-trace`).
    pub fn record_read_steps(&mut self, r: ReadSteps) {
        self.reads = Some(r);
    }

    /// Edits every routing with `s` from now on.
    pub fn steer_with(&mut self, s: Steering) {
        self.steer = Some(s);
    }

    /// The routing edits, when the run has any.
    pub fn steering(&self) -> Option<&Steering> {
        self.steer.as_ref()
    }

    /// Runs the predictors `p` from now on; `spec_max` caps the stale gate's read-ahead.
    pub fn predict_with(&mut self, p: Predictor, spec_max: usize) {
        if p.route_ahead().is_some() && self.steer.is_none() {
            // route-ahead writes the ids through the routing-edit seam
            self.steer = Some(Steering::new(EditConfig::default(), None));
        }
        self.predict = Some(p);
        self.predict_spec_max = spec_max;
    }

    /// Fills the prefill arena ahead from a prediction (`--prefill-device` routed mode); set
    /// before the capture decode, which teaches it the routers.
    pub fn fill_arena(&mut self, a: PrefillArena) {
        self.arena = Some(a);
    }

    /// What the prefill arena did so far (session-cumulative), in routed mode.
    pub fn arena_tally(&self) -> Option<ArenaTally> {
        self.arena.as_ref().map(PrefillArena::tally)
    }

    /// What `--predict-log` measured so far (session-cumulative), when the predictors run.
    pub fn predict_tally(&self) -> Option<&PredictTally> {
        self.predict.as_ref().map(Predictor::tally)
    }

    /// What `--route-ahead` did so far (session-cumulative), when on.
    pub fn route_ahead_tally(&self) -> Option<RouteAheadTally> {
        self.predict.as_ref().and_then(Predictor::route_ahead)
    }

    /// Stops recording routings (after the route-trace sink failed).
    pub fn stop_routes(&mut self) {
        self.routes = None;
    }

    /// Tells the prefill arena whether the decodes that follow are prompt decodes that the
    /// recorders are not told about (a `decide`'s prefill, see [`Self::begin_decode`] for the
    /// others): its prediction and counts run on prompt decodes only.
    pub fn arena_prefill(&mut self, prefill: bool) {
        if let Some(a) = self.arena.as_mut() {
            a.begin_decode(prefill);
        }
    }

    /// Tells the recorders which decode the next routings and nodes belong to; `start` is when
    /// the decode's bracket (the token's wall) opened.
    pub fn begin_decode(&mut self, span: DecodeSpan, start: Instant) {
        if let Some(p) = self.predict.as_mut() {
            p.begin_decode(span.prefill);
        }
        if let Some(a) = self.arena.as_mut() {
            a.begin_decode(span.prefill);
        }
        if let Some(s) = self.steer.as_mut() {
            s.begin_decode(span.prefill);
        }
        if let Some(r) = self.routes.as_mut() {
            r.begin_decode(span);
        }
        if let Some(r) = self.reads.as_mut() {
            r.begin_decode(span);
        }
        if let Some(t) = self.timer.as_mut() {
            t.begin_decode(span, start);
        }
    }

    /// Ends the decode whose bracket closed at `end`: what the recorders collected during it.
    pub fn end_decode(&mut self, end: Instant) -> DecodeRecords {
        DecodeRecords {
            routes: self
                .routes
                .as_mut()
                .map(RouteRecorder::end_decode)
                .unwrap_or_default(),
            nodes: self
                .timer
                .as_mut()
                .map(|t| t.end_decode(end))
                .unwrap_or_default(),
            reads: self.reads.as_mut().map(ReadSteps::end_decode),
        }
    }

    /// Ends capture, returning what was seen.
    pub fn take_captured(&mut self) -> Vec<(usize, &'static str, WeightRef)> {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Capture(v) => v,
            other => {
                self.phase = other;
                Vec::new()
            }
        }
    }

    /// The expert tensors' consumers seen during capture, in graph order: (layer, node name,
    /// tensor name).
    pub fn take_consumers(&mut self) -> Vec<(usize, String, String)> {
        std::mem::take(&mut self.consumers)
    }

    /// The abort flag the hook raises on a failed read (shared with the context).
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.abort)
    }

    /// The non-expert weights seen during capture: (GGUF name, address of its data).
    pub fn take_weight_addrs(&mut self) -> Vec<(String, usize)> {
        std::mem::take(&mut self.weight_addrs)
    }

    /// Starts streaming with `streamer`; `pool` (unless [`NO_POOL_PAUSE_ENV`] says otherwise)
    /// puts the compute threads to sleep whenever a layer waits for reads.
    pub fn stream_with(&mut self, streamer: Streamer, pool: PoolPause) {
        self.phase = Phase::Stream(Box::new(streamer));
        self.pool = (!std::env::var(NO_POOL_PAUSE_ENV).is_ok_and(|v| v == "1")).then_some(pool);
    }

    /// The streamer, once streaming.
    pub fn streamer(&self) -> Option<&Streamer> {
        match &self.phase {
            Phase::Stream(s) => Some(s),
            _ => None,
        }
    }

    /// The streamer, mutably.
    pub fn streamer_mut(&mut self) -> Option<&mut Streamer> {
        match &mut self.phase {
            Phase::Stream(s) => Some(s),
            _ => None,
        }
    }

    /// The read failure that aborted a decode, if any (an overlapped read's too).
    pub fn take_error(&mut self) -> Option<ReadError> {
        let own = self.error.take();
        own.or_else(|| self.streamer_mut().and_then(Streamer::take_async_error))
    }

    /// Routing callbacks served so far.
    pub fn topk_calls(&self) -> u64 {
        self.topk_calls
    }
}

impl Drop for MoeHook {
    fn drop(&mut self) {
        // the diagnostic's proof that the hook ran (it has no other output of its own)
        if let Phase::Observe { ids_read } = self.phase {
            eprintln!(
                "bmoe: diag: resident hook observed {} routing nodes, {ids_read} routed ids",
                self.topk_calls
            );
        }
    }
}

impl EvalHook for MoeHook {
    fn wants(&mut self, node: &Node<'_>) -> bool {
        let capturing = matches!(self.phase, Phase::Capture(_));
        let stream = self.stream_wants(node);
        match self.timer.as_mut() {
            Some(t) if !capturing => t.wants(node.name(), stream) || stream,
            _ => stream,
        }
    }

    fn observe(&mut self, node: &Node<'_>) {
        self.stream_observe(node);
        if let Some(t) = self.timer.as_mut() {
            t.observe(node.name(), node.op_name());
        }
    }

    fn after_decode(&mut self) {
        if let Some(s) = self.steer.as_mut() {
            s.after_decode();
        }
        // overlapped reads end with the decode: every batch complete, the io log collected
        if let Some(s) = self.streamer_mut() {
            s.finish_decode();
        }
    }
}

impl MoeHook {
    fn stream_wants(&mut self, node: &Node<'_>) -> bool {
        match &mut self.phase {
            Phase::Capture(seen) => {
                if let Some(a) = self.arena.as_mut() {
                    a.learn(node);
                }
                for src in node.sources() {
                    if let Some((il, suffix)) = self.recipe.and_then(|r| r.match_tensor(src.name()))
                        && let Some(w) = src.weight_ref()
                        && w.n_expert > 0
                    {
                        let consumer = (il, node.name().to_string(), src.name().to_string());
                        if !self.consumers.contains(&consumer) {
                            self.consumers.push(consumer);
                        }
                        seen.push((il, suffix, w));
                    } else if let Some(w) = src.weight_ref() {
                        self.weight_addrs.push((w.name, w.addr));
                    }
                }
                false
            }
            Phase::Stream(streamer) => {
                let name = node.name();
                (name.starts_with("ffn_moe_")
                    && (topk_layer(name).is_some()
                        || weight_layer(name).is_some_and(|il| {
                            self.routes.is_some()
                                || self
                                    .steer
                                    .as_ref()
                                    .is_some_and(|s| s.wants_weights(il, name))
                        })
                        || self
                            .predict
                            .as_ref()
                            .is_some_and(|p| p.wants(name).is_some())))
                    || streamer.stage_after(name).is_some()
            }
            Phase::Observe { .. } => topk_layer(node.name()).is_some(),
            Phase::Idle => false,
        }
    }

    fn stream_observe(&mut self, node: &Node<'_>) {
        if let Phase::Observe { ids_read } = &mut self.phase {
            if topk_layer(node.name()).is_some() {
                self.topk_calls += 1;
                *ids_read += node.expert_ids().map_or(0, |ids| ids.len() as u64);
            }
            return;
        }
        let Phase::Stream(streamer) = &mut self.phase else {
            return;
        };
        if self.error.is_some() {
            return;
        }
        let pool = self.pool;
        let mut before_wait = || {
            if let Some(p) = pool {
                p.pause();
            }
        };
        if let Some((il, group)) = streamer.stage_after(node.name()) {
            // staged overlap: the next projection's matmul follows this node
            streamer.wait_group(il, group, &mut before_wait);
            return;
        }
        if let Some(p) = self.predict.as_mut()
            && let Some(il) = p.wants(node.name())
        {
            p.at_logits(il, node);
            return;
        }
        let Some(il) = topk_layer(node.name()) else {
            if let Some(il) = weight_layer(node.name()) {
                self.at_weights(il, node);
            }
            return;
        };
        self.topk_calls += 1;
        let Some(mut ids) = node.expert_ids() else {
            return;
        };
        let nu = usize::try_from(node.ne()[0]).unwrap_or(0);
        if let Some(msg) = self
            .predict
            .as_mut()
            .and_then(|p| p.at_routing(il, &ids, nu))
        {
            eprintln!("{msg}");
        }
        if let Some(c) = self
            .predict
            .as_mut()
            .and_then(|p| p.commit_for(il, &ids, nu))
            && let Some(steer) = self.steer.as_mut()
        {
            steer.commit(c);
        }
        if let Some(stale) = self.steer.as_mut().and_then(Steering::at_routing) {
            self.load(stale.layer, &stale.ids, None);
        }
        if let (Some(steer), Phase::Stream(streamer)) = (self.steer.as_mut(), &self.phase)
            && steer.route(il, node, &mut ids, streamer)
        {
            return;
        }
        if let (Some(a), Phase::Stream(streamer)) = (self.arena.as_mut(), &self.phase) {
            let n_expert = streamer.layout().n_expert;
            a.at_routing(&ids, n_expert, |e| {
                i32::try_from(e).is_ok_and(|e| streamer.is_resident(il, e))
            });
        }
        self.load(il, &ids, None);
        self.read_ahead(il + 1, nu);
        if let (Some(a), Phase::Stream(streamer), None) =
            (self.arena.as_mut(), &mut self.phase, &self.error)
        {
            a.fill_next(il, node, nu, streamer);
        }
    }

    /// `--predict-prefetch`, right after a layer's load (real reads first): the stale gate's
    /// guess at `layer` (ranked while layer `layer - 2` computed) is kept warm or read ahead.
    fn read_ahead(&mut self, layer: usize, nu: usize) {
        let (Some(p), Phase::Stream(streamer)) = (self.predict.as_mut(), &mut self.phase) else {
            return;
        };
        if self.error.is_some() {
            return;
        }
        if let Some(r) = p.take_ahead(layer) {
            streamer.predict_ahead(layer, &r[..nu.min(r.len())], self.predict_spec_max, false);
        }
        // route-ahead: the committed selection of layer (layer - 1) + N, read early (no cap)
        if let Some((target, ids)) = layer.checked_sub(1).and_then(|il| p.issue_for(il, nu)) {
            let t = std::time::Instant::now();
            let read = streamer.predict_ahead(target, &ids, ids.len(), true);
            // a serial read inline is flash I/O (io_ms), not issuing (part of compute_ms)
            p.charge_issue(t.elapsed().saturating_sub(read).as_nanos() as u64);
        }
    }

    /// A weight-chain node of layer `il` was computed: the route trace takes its weights, and
    /// at a deferred layer's terminal node the edits run and the layer loads.
    fn at_weights(&mut self, il: usize, node: &Node<'_>) {
        let edited = match (self.steer.as_mut(), &self.phase) {
            (Some(steer), Phase::Stream(streamer)) => steer.at_weights(il, node, streamer),
            _ => None,
        };
        match edited {
            Some(e) => self.load(il, &e.loaded.clone(), Some(&e)),
            None => {
                if let (Some(t), Some(w)) = (self.routes.as_mut(), node.f32_values()) {
                    t.weights(il, w);
                }
            }
        }
    }

    /// Loads layer `il`'s routed `ids` and records the routing (as `edited` describes it, when
    /// the routing edits changed it). A failed read raises the abort flag.
    fn load(&mut self, il: usize, ids: &[i32], edited: Option<&Edited>) {
        let Phase::Stream(streamer) = &mut self.phase else {
            return;
        };
        let pool = self.pool;
        let mut before_wait = || {
            if let Some(p) = pool {
                p.pause();
            }
        };
        let trace = self.routes.is_some().then_some(&mut self.routing);
        if let Err(e) = streamer.load_layer(il, ids, trace, &mut before_wait) {
            self.error = Some(e);
            self.abort.store(true, Ordering::SeqCst);
            return;
        }
        if let Some(t) = self.routes.as_mut() {
            match edited {
                Some(e) => {
                    charge_dropped(&mut self.routing, e);
                    t.route_dropped(il, &e.routed, &self.routing, &e.dropped);
                    if let Some(w) = &e.weights {
                        t.weights(il, w.clone());
                    }
                }
                None => t.route(il, ids, &self.routing),
            }
        }
        if let Some(r) = self.reads.as_mut() {
            r.load(il, ids, streamer.last_load_reads());
        }
    }
}

/// A dropped slot was never read: it keeps the miss it faced but no bytes, which go to the
/// surviving slot of its token that reads the same expert (the one it was repointed to).
fn charge_dropped(routing: &mut [Routing], e: &Edited) {
    let n = routing.len().min(e.dropped.len()).min(e.loaded.len());
    for s in 0..n {
        if !e.dropped[s] {
            continue;
        }
        let bytes = std::mem::take(&mut routing[s].bytes);
        routing[s].residency = 0;
        if bytes == 0 {
            continue;
        }
        if let Some(t) = (0..n).find(|&t| !e.dropped[t] && e.loaded[t] == e.loaded[s]) {
            routing[t].bytes += bytes;
        }
    }
}
