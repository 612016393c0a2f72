//! Expert predictors on the router's own arithmetic (issue #15): `--predict-log` scores them
//! against the routing the router produced, `--predict-prefetch` reads the stale gate's guess
//! ahead.
//!
//! The *stale gate* multiplies layer `il`'s MoE input (the tensor feeding `ffn_gate_inp`) by a
//! later layer's router and ranks the scores: a guess at that layer's routing made while layer
//! `il` computes. `--predict-log` scores the seed's stale gate, the next layer's router a layer
//! early ([`LOG_LOOKAHEAD`]); `--predict-prefetch` ranks two layers ahead ([`LOOKAHEAD`]), early
//! enough to read the guess while the layer in between computes. The
//! *previous token* bet is the same layer's routing one token before (what `--prefetch` reads).
//! The *control* is a layer's own router on its own input — the stale gate's arithmetic with no
//! staleness — so it must agree with the router (~100 %); anything less says the ranking here is
//! not the arch's (a selection bias, a non-F32 router), and the other two are read against it.
//!
//! Ranking is by raw logit, ties to the lower id: softmax and sigmoid gating are monotonic, so
//! the top ids are the router's whichever it applies.

use super::names::layer_of;
use super::rank_worker::{RankCounts, RankWorker, rank};
use crate::ffi::Node;
use std::sync::Arc;

/// The routing node's scores: `ffn_moe_logits-<il>` = `ffn_gate_inp` × the MoE input.
pub const LOGITS_NODE: &str = "ffn_moe_logits";

/// How many layers ahead `--predict-prefetch`'s stale gate ranks (the prefetch needs a layer of
/// slack to read in).
pub const LOOKAHEAD: usize = 2;

/// How many layers ahead `--predict-log`'s stale gate ranks: the seed scores the next layer's
/// router run a layer early.
pub const LOG_LOOKAHEAD: usize = 1;

/// The most ids a ranking keeps (a wider routing is left unscored).
pub const RANK_DEPTH: usize = 32;

/// Env var (test): `1` prints every committed route-ahead routing on stderr
/// (`bmoe: test: route-ahead layer=<il> router=<ids> committed=<ids>`, comma-separated ids), so
/// a test can recount the agreement.
pub const RA_LOG_ENV: &str = "BMOE_TEST_RA_LOG";

/// The watchdog samples one routing in this many.
const WATCHDOG_EVERY: u64 = 512;
/// Slots the watchdog needs before it may disarm.
const WATCHDOG_MIN_SLOTS: u64 = 2048;
/// Control agreement below which `--predict-prefetch` disarms, percent.
const WATCHDOG_FLOOR_PCT: f64 = 98.0;

/// Slot agreement of one predictor against the router.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Score {
    /// Routings scored.
    pub rows: u64,
    /// Routed slots scored (rows × n_expert_used).
    pub slots: u64,
    /// Slots whose expert the prediction's first n_expert_used ids contained.
    pub hits: u64,
    /// Routings whose every slot was predicted.
    pub exact: u64,
}

impl Score {
    /// Scores `pred` (best first; its first `actual.len()` ids) against the router's `actual`.
    pub fn add(&mut self, pred: &[i32], actual: &[i32]) {
        let top = &pred[..actual.len().min(pred.len())];
        let hits = actual.iter().filter(|a| top.contains(a)).count() as u64;
        self.rows += 1;
        self.slots += actual.len() as u64;
        self.hits += hits;
        self.exact += u64::from(hits == actual.len() as u64);
    }

    /// Percent of slots predicted; `None` with nothing scored.
    pub fn slot_pct(&self) -> Option<f64> {
        (self.slots > 0).then(|| 100.0 * self.hits as f64 / self.slots as f64)
    }

    /// Percent of routings predicted whole; `None` with nothing scored.
    pub fn whole_pct(&self) -> Option<f64> {
        (self.rows > 0).then(|| 100.0 * self.exact as f64 / self.rows as f64)
    }
}

/// One layer's scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerTally {
    /// The stale gate (layer `il - LOG_LOOKAHEAD`'s input, this layer's router).
    pub stale: Score,
    /// The previous token's routing of this layer.
    pub prev: Score,
    /// This layer's router on its own input.
    pub ctrl: Score,
    /// Decode routings seen at this layer.
    pub routings: u64,
}

/// What `--predict-log` measured, session-cumulative.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PredictTally {
    /// Per layer.
    pub layers: Vec<LayerTally>,
    /// Decode routings the stale gate had no ranking for (the first layers, a layer whose
    /// router could not be read, a routing wider than [`RANK_DEPTH`]).
    pub unranked: u64,
}

impl PredictTally {
    /// The three predictors over every layer.
    pub fn total(&self) -> LayerTally {
        let mut t = LayerTally::default();
        for l in &self.layers {
            for (a, b) in [
                (&mut t.stale, l.stale),
                (&mut t.prev, l.prev),
                (&mut t.ctrl, l.ctrl),
            ] {
                a.rows += b.rows;
                a.slots += b.slots;
                a.hits += b.hits;
                a.exact += b.exact;
            }
            t.routings += l.routings;
        }
        t
    }

    /// The `moe-predict:` lines and the per-layer table, as the seed prints them.
    pub fn lines(&self) -> Vec<String> {
        let t = self.total();
        let pct = |p: Option<f64>| p.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        let mut out = vec![
            format!(
                "moe-predict: stale-gate {}% of routed slots ({}% whole routings) | prev-token {}% ({}%) | fresh-gate control {}% ({}%)",
                pct(t.stale.slot_pct()),
                pct(t.stale.whole_pct()),
                pct(t.prev.slot_pct()),
                pct(t.prev.whole_pct()),
                pct(t.ctrl.slot_pct()),
                pct(t.ctrl.whole_pct()),
            ),
            format!(
                "moe-predict: scored — stale-gate {} routings/{} slots, prev-token {}/{}, control {}/{}; {} routings the stale-gate could not rank",
                t.stale.rows,
                t.stale.slots,
                t.prev.rows,
                t.prev.slots,
                t.ctrl.rows,
                t.ctrl.slots,
                self.unranked
            ),
            "  layer   stale    prev   ctrl   routings".to_string(),
        ];
        for (il, l) in self.layers.iter().enumerate() {
            out.push(format!(
                "  {il:>5}{:>8}{:>8}{:>7}{:>11}",
                pct(l.stale.slot_pct()),
                pct(l.prev.slot_pct()),
                pct(l.ctrl.slot_pct()),
                l.routings
            ));
        }
        out
    }
}

/// The routers, learned from the graph as their logits nodes are first seen.
#[derive(Debug, Default)]
struct Gates {
    /// Per layer: `(n_embd, n_expert × n_embd values)` (shared with the ranking worker).
    rows: Vec<Option<(usize, Arc<Vec<f32>>)>>,
}

impl Gates {
    fn known(&self, il: usize) -> bool {
        self.rows.get(il).is_some_and(Option::is_some)
    }

    fn learn(&mut self, il: usize, w: (usize, Vec<f32>)) {
        if self.rows.len() <= il {
            self.rows.resize(il + 1, None);
        }
        self.rows[il] = Some((w.0, Arc::new(w.1)));
    }

    /// Layer `il`'s router, when learned.
    fn router(&self, il: usize) -> Option<(usize, Arc<Vec<f32>>)> {
        self.rows.get(il)?.clone()
    }

    /// Layer `il`'s router applied to `x`, its top [`RANK_DEPTH`] ids best first.
    fn rank(&self, il: usize, x: &[f32]) -> Option<Vec<i32>> {
        let (k, w) = self.rows.get(il)?.as_ref()?;
        if *k != x.len() || *k == 0 {
            return None;
        }
        Some(rank(*k, w, x, RANK_DEPTH))
    }
}

/// The sampled fresh-gate check that disarms `--predict-prefetch` when the ranking here stops
/// reproducing the router's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Watchdog {
    /// Decode routings seen (the sampling clock).
    pub routings: u64,
    /// The sampled routings' agreement.
    pub score: Score,
    /// Tripped: the stale gate is off for the rest of the run.
    pub tripped: bool,
}

impl Watchdog {
    /// Whether the next routing is sampled.
    fn samples_next(&self) -> bool {
        !self.tripped && self.routings.is_multiple_of(WATCHDOG_EVERY)
    }

    /// Scores a sampled routing; `Some(message)` naming `what` (the flag it disarms) the
    /// moment it trips.
    pub fn check(&mut self, what: &str, pred: &[i32], actual: &[i32]) -> Option<String> {
        self.score.add(pred, actual);
        let pct = self.score.slot_pct()?;
        if self.tripped || self.score.slots < WATCHDOG_MIN_SLOTS || pct >= WATCHDOG_FLOOR_PCT {
            return None;
        }
        self.tripped = true;
        Some(format!(
            "bmoe: {what} disarmed — control at {pct:.1}% over {} slots (the ranking here no longer reproduces the router's; floor {WATCHDOG_FLOOR_PCT:.0}%); the run continues without it",
            self.score.slots
        ))
    }
}

/// The predictors' state on the hook.
#[derive(Debug)]
pub struct Predictor {
    gates: Gates,
    /// `--predict-log`: score the three predictors.
    log: bool,
    /// `--predict-prefetch`: rank the stale gate for the read-ahead.
    prefetch: bool,
    decoding: bool,
    /// Per layer, the stale gate's ranking made `LOG_LOOKAHEAD` layers before (scoring).
    stale: Vec<Option<Vec<i32>>>,
    /// Per layer, the control ranking of this routing.
    ctrl: Vec<Option<Vec<i32>>>,
    /// Per layer, the previous token's routing.
    prev: Vec<Option<Vec<i32>>>,
    /// Per layer, the stale gate's ranking waiting to be read ahead (made inline when the
    /// worker could not be started).
    ahead: Vec<Option<Vec<i32>>>,
    /// `--predict-prefetch`: the thread that ranks the stale gate off the eval thread.
    worker: Option<RankWorker>,
    /// Decodes begun (a worker's ranking of an earlier decode is stale).
    epoch: u64,
    tally: PredictTally,
    watchdog: Watchdog,
    /// `--route-ahead N` (0 = off).
    route_ahead: usize,
    /// Per layer, the ranking route-ahead commits (made `route_ahead` layers before).
    commit: Vec<Option<Vec<i32>>>,
    ra: RouteAheadTally,
    /// [`RA_LOG_ENV`].
    ra_log: bool,
}

/// What `--route-ahead N` did, session-cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteAheadTally {
    /// `N`.
    pub layers: usize,
    /// Routings whose selection was replaced by the prediction.
    pub committed: u64,
    /// Eligible routings with no prediction to commit (kept the router's choice).
    pub passthrough: u64,
    /// The committed selections' agreement with the router's.
    pub agree: Score,
    /// Rankings made, and their eval-thread time (ns).
    pub gemvs: u64,
    /// Σ ranking time, ns.
    pub gemv_ns: u64,
    /// Σ watchdog control time, ns.
    pub wd_ns: u64,
    /// Σ time issuing the early reads, ns.
    pub issue_ns: u64,
}

impl RouteAheadTally {
    /// Percent of committed slots whose expert the router chose too (100 with none).
    pub fn agree_pct(&self) -> f64 {
        self.agree.slot_pct().unwrap_or(100.0)
    }
}

/// `v[i]`, growing `v` as needed.
fn at<T: Default + Clone>(v: &mut Vec<T>, i: usize) -> &mut T {
    if v.len() <= i {
        v.resize(i + 1, T::default());
    }
    &mut v[i]
}

impl Predictor {
    /// Predictors for `--predict-log` (`log`) and/or `--predict-prefetch` (`prefetch`).
    pub fn new(log: bool, prefetch: bool) -> Self {
        Self {
            gates: Gates::default(),
            log,
            prefetch,
            decoding: false,
            stale: Vec::new(),
            ctrl: Vec::new(),
            prev: Vec::new(),
            ahead: Vec::new(),
            worker: if prefetch {
                RankWorker::start(RANK_DEPTH)
            } else {
                None
            },
            epoch: 0,
            tally: PredictTally::default(),
            watchdog: Watchdog::default(),
            route_ahead: 0,
            commit: Vec::new(),
            ra: RouteAheadTally::default(),
            ra_log: std::env::var(RA_LOG_ENV).is_ok_and(|v| v == "1"),
        }
    }

    /// Turns on `--route-ahead n` (commit layer il+n's routing from layer il's input).
    pub fn with_route_ahead(mut self, n: usize) -> Self {
        self.route_ahead = n;
        self.ra.layers = n;
        self
    }

    /// Whether the watchdog guards a lossless prefetch or route-ahead.
    fn watched(&self) -> bool {
        self.prefetch || self.route_ahead > 0
    }

    /// The flag the watchdog disarms.
    fn watched_flag(&self) -> &'static str {
        if self.route_ahead > 0 {
            "route-ahead"
        } else {
            "predict-prefetch"
        }
    }

    /// A decode begins: predictions are made and scored in decodes only (a prefill only
    /// teaches the routers and the last prompt token's routing).
    pub fn begin_decode(&mut self, prefill: bool) {
        self.decoding = !prefill;
        self.epoch += 1;
        self.stale.iter_mut().for_each(|s| *s = None);
        self.ctrl.iter_mut().for_each(|s| *s = None);
        self.ahead.iter_mut().for_each(|s| *s = None);
        self.commit.iter_mut().for_each(|s| *s = None);
    }

    /// The layer of a logits node this hook must observe: every one during a decode, and in a
    /// prefill those whose router is not learned yet.
    pub fn wants(&self, name: &str) -> Option<usize> {
        let il = layer_of(name, LOGITS_NODE)?;
        (self.decoding || !self.gates.known(il)).then_some(il)
    }

    /// Layer `il`'s logits node was computed: learn its router, then rank the stale gate for
    /// layer `il + LOOKAHEAD` (prefetch) / `il + LOG_LOOKAHEAD` (log) and (when scored or
    /// sampled) the control for `il`.
    pub fn at_logits(&mut self, il: usize, node: &Node<'_>) {
        let mut src = node.sources();
        let (Some(w), Some(input)) = (src.next(), src.next()) else {
            return;
        };
        if !self.gates.known(il)
            && let Some(m) = w.f32_matrix()
        {
            self.gates.learn(il, m);
        }
        if !self.decoding {
            return;
        }
        let Some(x) = input.f32_last_column() else {
            return;
        };
        if self.prefetch && !self.watchdog.tripped {
            let target = il + LOOKAHEAD;
            match (self.worker.as_mut(), self.gates.router(target)) {
                (Some(w), Some((k, router))) => w.submit(self.epoch, target, k, router, x.clone()),
                (Some(_), None) => {}
                (None, _) => *at(&mut self.ahead, target) = self.gates.rank(target, &x),
            }
        }
        if self.log {
            *at(&mut self.stale, il + LOG_LOOKAHEAD) = self.gates.rank(il + LOG_LOOKAHEAD, &x);
        }
        if self.route_ahead > 0 && !self.watchdog.tripped {
            let t = std::time::Instant::now();
            let r = self.gates.rank(il + self.route_ahead, &x);
            self.ra.gemv_ns += t.elapsed().as_nanos() as u64;
            self.ra.gemvs += u64::from(r.is_some());
            *at(&mut self.commit, il + self.route_ahead) = r;
        }
        let sampled = self.watched() && self.watchdog.samples_next();
        if self.log || sampled {
            let t = std::time::Instant::now();
            *at(&mut self.ctrl, il) = self.gates.rank(il, &x);
            if self.route_ahead > 0 {
                self.ra.wd_ns += t.elapsed().as_nanos() as u64;
            }
        }
    }

    /// `--route-ahead`: at layer `il`'s routing of `ids` (`nu` per token), the selection to
    /// commit instead — the ranking made `N` layers before, its top `nu` — or `None` (passed
    /// through: no prediction, a prompt batch, a layer below `N`, the watchdog tripped).
    pub fn commit_for(&mut self, il: usize, ids: &[i32], nu: usize) -> Option<Vec<i32>> {
        let n = self.route_ahead;
        if n == 0 || !self.decoding || il < n || nu == 0 || ids.len() != nu {
            return None;
        }
        let c = at(&mut self.commit, il).take();
        match c {
            Some(c) if c.len() >= nu && !self.watchdog.tripped => {
                let c = c[..nu].to_vec();
                if self.ra_log {
                    let list =
                        |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
                    eprintln!(
                        "bmoe: test: route-ahead layer={il} router={} committed={}",
                        list(ids),
                        list(&c)
                    );
                }
                self.ra.agree.add(&c, ids);
                self.ra.committed += 1;
                Some(c)
            }
            _ => {
                self.ra.passthrough += 1;
                None
            }
        }
    }

    /// `--route-ahead`: after layer `il`'s load, the committed selection of layer `il + N`
    /// (ranked at layer `il`'s logits), whose reads may be issued now; `None` without one.
    pub fn issue_for(&self, il: usize, nu: usize) -> Option<(usize, Vec<i32>)> {
        let target = il + self.route_ahead;
        if self.route_ahead == 0 || !self.decoding || self.watchdog.tripped {
            return None;
        }
        let c = self.commit.get(target)?.as_ref()?;
        Some((target, c[..nu.min(c.len())].to_vec()))
    }

    /// `--route-ahead`: eval-thread time spent issuing the committed selection's early reads.
    pub fn charge_issue(&mut self, ns: u64) {
        self.ra.issue_ns += ns;
    }

    /// What `--route-ahead` did so far, when on.
    pub fn route_ahead(&self) -> Option<RouteAheadTally> {
        (self.route_ahead > 0).then_some(self.ra)
    }

    /// Layer `il` routed `ids` (token-major, `nu` per token): score the last token's routing
    /// and remember it as the next token's previous-token bet. `Some(message)` when the
    /// watchdog disarmed the prefetch.
    pub fn at_routing(&mut self, il: usize, ids: &[i32], nu: usize) -> Option<String> {
        if nu == 0 || ids.len() < nu {
            return None;
        }
        let actual = &ids[ids.len() - nu..];
        let prev = at(&mut self.prev, il).replace(actual.to_vec());
        if !self.decoding {
            return None;
        }
        let ctrl = at(&mut self.ctrl, il).take();
        // the control was ranked at this layer's logits node on the same sampling clock
        let sampled = self.watched() && self.watchdog.samples_next();
        let what = self.watched_flag();
        let tripped = match (&ctrl, sampled) {
            (Some(c), true) => self.watchdog.check(what, c, actual),
            _ => None,
        };
        self.watchdog.routings += 1;
        if !self.log {
            return tripped;
        }
        let stale = at(&mut self.stale, il).take();
        let l = at(&mut self.tally.layers, il);
        l.routings += 1;
        match stale {
            Some(s) if nu <= RANK_DEPTH => l.stale.add(&s, actual),
            _ => self.tally.unranked += 1,
        }
        if let Some(p) = prev {
            l.prev.add(&p, actual);
        }
        if let Some(c) = ctrl {
            l.ctrl.add(&c, actual);
        }
        tripped
    }

    /// The stale gate's ranking for `layer`, once (the read-ahead collects it after the
    /// previous layer's load).
    pub fn take_ahead(&mut self, layer: usize) -> Option<Vec<i32>> {
        if self.watchdog.tripped {
            return None;
        }
        if let Some(w) = self.worker.as_mut() {
            return w.collect(self.epoch, layer);
        }
        self.ahead.get_mut(layer).and_then(Option::take)
    }

    /// `--predict-prefetch`: what the ranking worker did (`None` without it).
    pub fn rank_counts(&self) -> Option<RankCounts> {
        self.worker.as_ref().map(RankWorker::counts)
    }

    /// What `--predict-log` measured so far.
    pub fn tally(&self) -> &PredictTally {
        &self.tally
    }

    /// The watchdog's state.
    pub fn watchdog(&self) -> Watchdog {
        self.watchdog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_counts_slots_and_whole_routings() {
        let mut s = Score::default();
        s.add(&[3, 1, 9, 4], &[1, 3]);
        s.add(&[3, 1, 9, 4], &[1, 9]);
        assert_eq!((s.rows, s.slots, s.hits, s.exact), (2, 4, 3, 1));
        assert_eq!(s.slot_pct(), Some(75.0));
        assert_eq!(Score::default().slot_pct(), None);
    }

    #[test]
    fn empty_predictors_print_dashes_never_zero() {
        let mut t = PredictTally {
            layers: vec![LayerTally::default(); 2],
            unranked: 1,
        };
        t.layers[1].prev.add(&[1, 2], &[1, 5]);
        t.layers[1].routings = 1;
        let lines = t.lines();
        assert_eq!(lines[2], "  layer   stale    prev   ctrl   routings");
        assert_eq!(lines[3], "      0       -       -      -          0");
        assert_eq!(lines[4], "      1       -    50.0      -          1");
        assert!(lines[0].starts_with("moe-predict: stale-gate -% of routed slots (-% whole"));
        assert!(lines[1].ends_with("control 0/0; 1 routings the stale-gate could not rank"));
    }

    #[test]
    fn the_watchdog_trips_only_after_enough_slots_below_the_floor() {
        let mut w = Watchdog::default();
        let slots_needed = WATCHDOG_MIN_SLOTS / 8;
        for i in 0..slots_needed - 1 {
            assert!(
                w.check(
                    "predict-prefetch",
                    &[0, 1, 2, 3, 4, 5, 6, 9],
                    &[0, 1, 2, 3, 4, 5, 6, 7]
                )
                .is_none(),
                "{i}"
            );
        }
        let msg = w.check(
            "predict-prefetch",
            &[0, 1, 2, 3, 4, 5, 6, 9],
            &[0, 1, 2, 3, 4, 5, 6, 7],
        );
        assert!(msg.is_some_and(|m| {
            m.starts_with("bmoe: predict-prefetch disarmed — control at 87.5% over 2048 slots")
        }));
        assert!(w.tripped && !w.samples_next());
        let mut ok = Watchdog::default();
        for _ in 0..slots_needed * 2 {
            assert!(
                ok.check(
                    "route-ahead",
                    &[1, 2, 3, 4, 5, 6, 7, 8],
                    &[8, 7, 6, 5, 4, 3, 2, 1]
                )
                .is_none()
            );
        }
    }
}
