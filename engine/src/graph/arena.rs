//! The prediction-filled expert arena of `--prefill-device` (issue #22), *routed mode* (the
//! default; `--no-prefill-routed` turns it off).
//!
//! A prompt batch routes many tokens, and the device graph waits at every routing node while the
//! serial loads read the layer's routed union. Routed mode guesses the next layer's union while
//! the current one is loaded: at layer `il`'s routing node, right after its load, every token's
//! MoE input (the tensor feeding `ffn_gate_inp`, read from the device when it lives there) is
//! multiplied by layer `il + 1`'s router, each token's `n_expert_used` best experts are taken
//! (ranking by raw logit, as the stale gate of `--predict-prefetch` does) and their union is
//! handed to [`Streamer::fill_ahead`], which keeps the resident ones and reads the others into
//! the cache's cold end, within the budget. The routers are learned during the capture decode
//! (or at a layer's first routing node when the capture could not read them).
//!
//! The counts ([`ArenaTally`]): at every routing node of a prefill decode, `routed` is the
//! layer's routed union (distinct experts) and `demand` those of them not resident when the
//! routing came — not kept or read by the prediction, nor cached from before — which the load
//! then reads at the routing node. Layer 0 of a decode has no prediction, so its union counts as
//! demand unless it was cached. The device's share is the delta over the decodes it computed
//! (`turn::prefill`).

use super::names::layer_of;
use super::predict::LOGITS_NODE;
use super::rank_worker::rank;
use crate::ffi::Node;
use crate::stream::Streamer;
use std::time::Instant;

/// Env var (test): `1` prints the arena's counts after every prefill on stderr
/// (`bmoe: test: prefill arena routed=.. demand=.. kept=.. read_ahead=.. left=.. rank_ms=..
/// read_ms=..`), the device's share.
pub const ARENA_COUNTS_ENV: &str = "BMOE_TEST_ARENA_COUNTS";

/// How far below a routing node its layer's logits node is (topk → argsort → probabilities →
/// [biased probabilities →] logits).
const LOGITS_DEPTH: usize = 5;

/// What the arena did, cumulative over the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaTally {
    /// (layer, expert) pairs routed: each prefill routing node's distinct experts.
    pub routed: u64,
    /// Of those, the ones not resident when their routing came (read at the routing node).
    pub demand: u64,
    /// Predicted entries that were resident already (kept for their routing).
    pub kept: u64,
    /// Predicted entries read ahead.
    pub read_ahead: u64,
    /// Predicted entries left unread (no room within the cache budget).
    pub left: u64,
    /// Eval-thread time ranking the batch against the next router, ns.
    pub rank_ns: u64,
    /// Eval-thread time reading the predicted entries (serial loads read them inline), ns.
    pub read_ns: u64,
}

impl ArenaTally {
    /// What happened since `before` (an earlier reading of the same tally).
    pub fn since(&self, before: &ArenaTally) -> ArenaTally {
        ArenaTally {
            routed: self.routed.saturating_sub(before.routed),
            demand: self.demand.saturating_sub(before.demand),
            kept: self.kept.saturating_sub(before.kept),
            read_ahead: self.read_ahead.saturating_sub(before.read_ahead),
            left: self.left.saturating_sub(before.left),
            rank_ns: self.rank_ns.saturating_sub(before.rank_ns),
            read_ns: self.read_ns.saturating_sub(before.read_ns),
        }
    }

    /// Adds `other` to this tally.
    pub fn add(&mut self, other: &ArenaTally) {
        self.routed += other.routed;
        self.demand += other.demand;
        self.kept += other.kept;
        self.read_ahead += other.read_ahead;
        self.left += other.left;
        self.rank_ns += other.rank_ns;
        self.read_ns += other.read_ns;
    }

    /// The [`ARENA_COUNTS_ENV`] line.
    pub fn line(&self) -> String {
        format!(
            "bmoe: test: prefill arena routed={} demand={} kept={} read_ahead={} left={} rank_ms={:.3} read_ms={:.3}",
            self.routed,
            self.demand,
            self.kept,
            self.read_ahead,
            self.left,
            self.rank_ns as f64 / 1e6,
            self.read_ns as f64 / 1e6
        )
    }
}

/// The distinct experts of a routing's `ids` (below `n_expert`), ascending.
pub fn union_of(ids: &[i32], n_expert: usize) -> Vec<usize> {
    let mut seen = vec![false; n_expert];
    for &id in ids {
        if let Ok(e) = usize::try_from(id)
            && e < n_expert
        {
            seen[e] = true;
        }
    }
    (0..n_expert).filter(|&e| seen[e]).collect()
}

/// The union over a batch of each token's `k` best experts under `router` (`n_embd` values per
/// expert, expert-major): `xs` holds the tokens' MoE inputs, `n_embd` values each. Ascending.
pub fn batch_union(n_embd: usize, router: &[f32], xs: &[f32], k: usize) -> Vec<usize> {
    if n_embd == 0 || k == 0 {
        return Vec::new();
    }
    let n_expert = router.len() / n_embd;
    let mut ids = Vec::new();
    for x in xs.chunks_exact(n_embd) {
        ids.extend(rank(n_embd, router, x, k));
    }
    union_of(&ids, n_expert)
}

/// `(routed, demand)` of a routing's `union`: its size, and how many of its experts `resident`
/// does not cover.
pub fn count(union: &[usize], resident: impl Fn(usize) -> bool) -> (u64, u64) {
    let demand = union.iter().filter(|&&e| !resident(e)).count();
    (union.len() as u64, demand as u64)
}

/// Routed mode's state on the hook.
#[derive(Debug, Default)]
pub struct PrefillArena {
    /// Per layer, its router: `(n_embd, n_expert × n_embd values)`.
    routers: Vec<Option<(usize, Vec<f32>)>>,
    /// The decode running is a prefill decode (the arena works in those only).
    prefill: bool,
    tally: ArenaTally,
}

impl PrefillArena {
    /// An arena that knows no router yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns the router of a `ffn_moe_logits-<il>` node (its first source, an F32
    /// `ffn_gate_inp` weight), once per layer; other nodes and other router types are ignored
    /// (that layer is then not predicted).
    pub fn learn(&mut self, node: &Node<'_>) {
        let Some(il) = layer_of(node.name(), LOGITS_NODE) else {
            return;
        };
        if self.routers.get(il).is_some_and(Option::is_some) {
            return;
        }
        if let Some(m) = node.sources().next().and_then(|w| w.f32_matrix()) {
            if self.routers.len() <= il {
                self.routers.resize(il + 1, None);
            }
            self.routers[il] = Some(m);
        }
    }

    /// A decode begins; the arena works in prefill decodes only.
    pub fn begin_decode(&mut self, prefill: bool) {
        self.prefill = prefill;
    }

    /// What the arena did so far.
    pub fn tally(&self) -> ArenaTally {
        self.tally
    }

    /// Layer `il`'s routing node, before its load: counts the routed union of `ids` and the
    /// part of it `resident` does not cover (demand).
    pub fn at_routing(&mut self, ids: &[i32], n_expert: usize, resident: impl Fn(usize) -> bool) {
        if !self.prefill {
            return;
        }
        let (routed, demand) = count(&union_of(ids, n_expert), resident);
        self.tally.routed += routed;
        self.tally.demand += demand;
    }

    /// After layer `il`'s load at its routing node `topk` (`k` experts per token): predicts
    /// layer `il + 1`'s routed union from this layer's MoE input and fills the arena with it.
    pub fn fill_next(&mut self, il: usize, topk: &Node<'_>, k: usize, streamer: &mut Streamer) {
        if !self.prefill {
            return;
        }
        let Some(logits) = topk.find_source(&format!("{LOGITS_NODE}-{il}"), LOGITS_DEPTH) else {
            return;
        };
        self.learn(&logits);
        let Some((n_embd, router)) = self.routers.get(il + 1).and_then(Option::as_ref) else {
            return;
        };
        let t0 = Instant::now();
        let Some((n, xs)) = logits.sources().nth(1).and_then(|x| x.f32_columns()) else {
            return;
        };
        if n != *n_embd {
            return;
        }
        let union = batch_union(n, router, &xs, k);
        self.tally.rank_ns += t0.elapsed().as_nanos() as u64;
        let f = streamer.fill_ahead(il + 1, &union);
        self.tally.kept += f.kept as u64;
        self.tally.read_ahead += f.read as u64;
        self.tally.left += f.left as u64;
        self.tally.read_ns += f.read_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_is_distinct_in_range_and_ascending() {
        assert_eq!(union_of(&[3, 1, 3, 0, 7, -1, 9], 8), vec![0, 1, 3, 7]);
        assert!(union_of(&[], 8).is_empty());
    }

    #[test]
    fn every_token_of_the_batch_adds_its_own_top_k() {
        // 4 experts × 2 dims: expert e scores x·router[e]
        let router = [1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.5, 0.5];
        // token 0 = (1, 0): experts 0 (1.0), 3 (0.5); token 1 = (0, 1): experts 1 (1.0), 3
        let xs = [1.0, 0.0, 0.0, 1.0];
        assert_eq!(batch_union(2, &router, &xs, 2), vec![0, 1, 3]);
        // top-1 per token
        assert_eq!(batch_union(2, &router, &xs, 1), vec![0, 1]);
        // token 2 = (-1, 0) adds expert 2
        let xs3 = [1.0, 0.0, 0.0, 1.0, -1.0, 0.0];
        assert_eq!(batch_union(2, &router, &xs3, 1), vec![0, 1, 2]);
        assert!(batch_union(0, &router, &xs, 2).is_empty());
        assert!(batch_union(2, &router, &xs, 0).is_empty());
    }

    #[test]
    fn demand_is_the_part_of_the_union_nothing_covered() {
        assert_eq!(count(&[0, 2, 5], |e| e == 2), (3, 2));
        assert_eq!(count(&[0, 2, 5], |_| true), (3, 0));
        assert_eq!(count(&[], |_| false), (0, 0));
    }

    #[test]
    fn counts_accumulate_in_prefill_decodes_only_and_deltas_subtract() {
        let mut a = PrefillArena::new();
        a.begin_decode(false);
        a.at_routing(&[1, 2], 4, |_| false);
        assert_eq!(a.tally(), ArenaTally::default());
        a.begin_decode(true);
        a.at_routing(&[1, 2, 2, 3], 4, |e| e == 3);
        let before = a.tally();
        assert_eq!((before.routed, before.demand), (3, 2));
        a.at_routing(&[0, 0], 4, |_| true);
        let d = a.tally().since(&before);
        assert_eq!((d.routed, d.demand), (1, 0));
        let mut sum = before;
        sum.add(&d);
        assert_eq!(sum, a.tally());
        assert!(
            sum.line()
                .starts_with("bmoe: test: prefill arena routed=4 demand=2 ")
        );
    }
}
