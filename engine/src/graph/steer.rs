//! The one routing-edit seam: where the hook rewrites a layer's routing before the expert
//! matmuls read it (`--route-replay`, `--expert-substitute`, `--drop-cold-experts`,
//! `--route-ahead`).
//!
//! Two nodes of a layer can be edited. At `ffn_moe_topk-<il>` the ids are rewritten before the
//! weight chain's `get_rows` reads them, so the graph itself prices the new routing (replay,
//! substitution). Dropping needs the weights, so the layer's load is deferred to its
//! **terminal weight node** — the last of `ffn_moe_weights[_softmax|_norm|_scaled]-<il>`,
//! which llama.cpp computes before the expert matmuls (`ggml_build_forward_expand(weights)`),
//! learned from the first graph — where weights are zeroed and renormalised and the dropped
//! slots' ids repointed (through the topk view's strides) to the token's best expert, which the
//! load reads anyway. Until a layer's terminal node is known it loads undropped at topk; if the
//! learned node does not come, the layer loads at the next routing and is learned again.

use super::edit::{EditConfig, EditCounters, drop_cold, substitute};
use super::names::TOPK_NODE;
use super::replay::RouteReplay;
use crate::ffi::Node;
use crate::stream::Streamer;

/// How many source levels a weight-chain node may sit above its routing node.
const CHAIN_DEPTH: usize = 8;

/// A layer load deferred to its terminal weight node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The layer.
    pub layer: usize,
    /// Its routed ids, token-major (after replay or substitution).
    pub ids: Vec<i32>,
    /// Slots per token.
    k: usize,
}

/// What the edits at a terminal weight node decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Edited {
    /// The layer.
    pub layer: usize,
    /// The ids as routed: the route trace's `expert`.
    pub routed: Vec<i32>,
    /// The ids the matmuls read: dropped slots repointed.
    pub loaded: Vec<i32>,
    /// The applied weights before dropping (the route trace's `weight`).
    pub weights: Option<Vec<f32>>,
    /// Per slot, whether it was dropped.
    pub dropped: Vec<bool>,
}

/// The routing edits of a streaming run, and what they learned and counted.
#[derive(Debug)]
pub struct Steering {
    cfg: EditConfig,
    replay: Option<RouteReplay>,
    prefill: bool,
    terminal: Vec<Option<String>>,
    learning: Option<(usize, String)>,
    pending: Option<Pending>,
    counters: EditCounters,
    lost: u64,
    /// `--route-ahead`: the selection the next routing node commits instead of the router's.
    committed: Option<Vec<i32>>,
}

impl Steering {
    /// Edits by `cfg`, routings from `replay` when given.
    pub fn new(cfg: EditConfig, replay: Option<RouteReplay>) -> Self {
        Self {
            cfg,
            replay,
            prefill: true,
            terminal: Vec::new(),
            learning: None,
            pending: None,
            counters: EditCounters::default(),
            lost: 0,
            committed: None,
        }
    }

    /// `--route-ahead`: the next [`Self::route`] writes `ids` (token-major, as the node holds
    /// them) instead of the router's selection.
    pub fn commit(&mut self, ids: Vec<i32>) {
        self.committed = Some(ids);
    }

    /// Cumulative counts.
    pub fn counters(&self) -> EditCounters {
        self.counters
    }

    /// Whether a replay that stops at its end has served its last step.
    pub fn replay_exhausted(&self) -> bool {
        self.replay.as_ref().is_some_and(RouteReplay::exhausted)
    }

    /// Starts a decode (`prefill`: a batch) — a generation decode takes the replay's next step.
    pub fn begin_decode(&mut self, prefill: bool) {
        self.prefill = prefill;
        if let Some(r) = self.replay.as_mut() {
            r.begin_decode(prefill);
        }
    }

    fn needs_weights(&self) -> bool {
        self.cfg.drop_frac > 0.0 || self.replay.is_some()
    }

    fn drop_armed(&self) -> bool {
        self.cfg.drop_frac > 0.0 && (!self.prefill || self.cfg.drop_prefill)
    }

    fn terminal(&self, layer: usize) -> Option<&str> {
        self.terminal.get(layer).and_then(|t| t.as_deref())
    }

    /// Whether the hook must observe weight-chain node `name` of `layer`: all of them until the
    /// layer's terminal node is learned, then that one.
    pub fn wants_weights(&self, layer: usize, name: &str) -> bool {
        self.needs_weights() && self.terminal(layer).is_none_or(|t| t == name)
    }

    /// A routing node was reached: the previous layer's chain is complete (learned), and a load
    /// still deferred — its terminal node never came — is handed back to run now, its terminal
    /// forgotten.
    pub fn at_routing(&mut self) -> Option<Pending> {
        self.close_learning();
        let stale = self.pending.take()?;
        self.forget(stale.layer);
        Some(stale)
    }

    /// The graph is done: learning closes, a deferred load that never fired is forgotten with its
    /// terminal node (the layer is learned again), and the next decode counts as a prompt batch
    /// unless [`Self::begin_decode`] says otherwise.
    pub fn after_decode(&mut self) {
        // a decode nobody announced (a decide's prefill) is edited as a prompt batch
        self.begin_decode(true);
        self.close_learning();
        if let Some(p) = self.pending.take() {
            self.forget(p.layer);
        }
    }

    fn close_learning(&mut self) {
        if let Some((layer, name)) = self.learning.take() {
            if self.terminal.len() <= layer {
                self.terminal.resize(layer + 1, None);
            }
            self.terminal[layer] = Some(name);
        }
    }

    fn forget(&mut self, layer: usize) {
        if let Some(t) = self.terminal.get_mut(layer) {
            *t = None;
        }
        self.lost += 1;
        if self.lost == 1 {
            eprintln!(
                "bmoe: warning: layer {layer}'s terminal weight node did not come; it loaded at the next routing (routing edits skip it until relearned)"
            );
        }
    }

    /// At `ffn_moe_topk-<layer>`: rewrites `ids` (token-major, as `node` holds them) by the
    /// replay or the substitution and writes them into the node; `true` when the layer's load is
    /// deferred to its terminal weight node (the hook must not load now).
    pub fn route(
        &mut self,
        layer: usize,
        node: &Node<'_>,
        ids: &mut Vec<i32>,
        streamer: &Streamer,
    ) -> bool {
        let k = usize::try_from(node.ne()[0]).unwrap_or(0);
        if !self.prefill || (self.cfg.drop_prefill && self.cfg.drop_frac > 0.0) {
            self.counters.routed += ids.len() as u64;
        }
        let before = ids.clone();
        let mut changed = false;
        if let Some(c) = self.committed.take().filter(|c| c.len() == ids.len()) {
            // route-ahead: the graph computes the router's weights for the committed experts
            ids.copy_from_slice(&c);
            changed = *ids != before;
        } else if !self.prefill {
            if let Some(cell) = self.replay.as_ref().and_then(|r| r.cell(layer))
                && cell.ids.len() == ids.len()
            {
                ids.copy_from_slice(&cell.ids);
                changed = *ids != before;
            } else if self.cfg.substitute_lambda > 0.0
                && let (Some((_, ranking)), Some(scores)) = (node.ranking(), node.ranking_scores())
            {
                let r = substitute(
                    ids,
                    k,
                    &ranking,
                    &scores,
                    self.cfg.substitute_lambda,
                    &|e| streamer.is_resident(layer, e),
                );
                self.counters.reranked += r.reranked;
                self.counters.substituted += r.moved;
                changed = r.moved > 0;
            }
        }
        if changed && !node.write_expert_ids(ids) {
            // the graph keeps its own routing: load what it will read
            ids.copy_from_slice(&before);
        }
        let replay_weights = !self.prefill
            && self
                .replay
                .as_ref()
                .and_then(|r| r.cell(layer))
                .is_some_and(|c| c.weights.is_some());
        let defer = self.terminal(layer).is_some() && (self.drop_armed() || replay_weights);
        if defer {
            self.pending = Some(Pending {
                layer,
                ids: ids.clone(),
                k,
            });
        }
        defer
    }

    /// At a weight-chain node `name` of `layer`: learns the chain, and at the terminal node of a
    /// deferred layer applies the replayed weights and the drop; the hook then loads
    /// [`Edited::loaded`].
    pub fn at_weights(
        &mut self,
        layer: usize,
        node: &Node<'_>,
        streamer: &Streamer,
    ) -> Option<Edited> {
        let name = node.name();
        if self.needs_weights() && self.terminal(layer).is_none() {
            self.learning = Some((layer, name.to_string()));
        }
        if self.pending.as_ref().is_none_or(|p| p.layer != layer)
            || self.terminal(layer) != Some(name)
        {
            return None;
        }
        let p = self.pending.take()?;
        let mut weights = node.f32_values().filter(|w| w.len() == p.ids.len());
        if let (Some(w), Some(cell)) = (
            weights.as_mut(),
            self.replay.as_ref().and_then(|r| r.cell(layer)),
        ) && let Some(cw) = cell.weights.as_ref().filter(|cw| cw.len() == w.len())
            && node.write_f32_values(cw)
        {
            w.copy_from_slice(cw);
        }
        let mut edited = Edited {
            layer,
            routed: p.ids.clone(),
            loaded: p.ids,
            dropped: vec![false; weights.as_ref().map_or(0, Vec::len)],
            weights,
        };
        if self.drop_armed() {
            self.drop(node, &mut edited, p.k, streamer);
        }
        Some(edited)
    }

    /// Drops the cold slots of `e` and writes the result into the graph: weights at `node`, ids
    /// at the layer's routing node. Nothing changes unless both writes land.
    fn drop(&mut self, node: &Node<'_>, e: &mut Edited, k: usize, streamer: &Streamer) {
        let Some(w0) = e.weights.as_ref() else { return };
        let Some(topk) = node.find_source(&format!("{TOPK_NODE}-{}", e.layer), CHAIN_DEPTH) else {
            return;
        };
        let (mut ids, mut w) = (e.loaded.clone(), w0.clone());
        let layer = e.layer;
        let dropped = drop_cold(
            &mut ids,
            &mut w,
            k,
            self.cfg.drop_frac,
            self.cfg.renorm,
            &|x| streamer.is_resident(layer, x),
        );
        let n = dropped.iter().filter(|&&d| d).count() as u64;
        if n == 0 || !node.write_f32_values(&w) {
            return;
        }
        if !topk.write_expert_ids(&ids) {
            node.write_f32_values(w0);
            return;
        }
        self.counters.dropped += n;
        e.loaded = ids;
        e.dropped = dropped;
    }
}
