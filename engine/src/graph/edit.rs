//! The routing edits as plain policy: which slots `--drop-cold-experts` drops and
//! `--expert-substitute` moves, given a routing and what is resident. No graph, no memory: the
//! hook ([`super::steer`]) reads the nodes, asks here, and writes the answer back.

/// The lossy routing edits of a run (resolved flags).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EditConfig {
    /// `--drop-cold-experts F`: drop a missed slot weighted below `F / n_expert_used` (0 = off).
    pub drop_frac: f32,
    /// Scale the surviving weights back to the routing's total (off with `--drop-no-renorm`).
    pub renorm: bool,
    /// `--drop-in-prefill`: drop in prefill batches too (decode only otherwise).
    pub drop_prefill: bool,
    /// `--expert-substitute λ`: move a missed slot to a resident expert whose router score is at
    /// least `(1 − λ)` of the slot's (0 = off).
    pub substitute_lambda: f32,
}

/// Cumulative counts of what the edits did (the trailer's `experts_*` keys are deltas).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EditCounters {
    /// Routed slots in the phases the edits were armed for.
    pub routed: u64,
    /// Slots dropped (never read, weight zeroed).
    pub dropped: u64,
    /// Missed slots the substitution examined.
    pub reranked: u64,
    /// Slots it moved to a resident expert.
    pub substituted: u64,
}

impl EditCounters {
    /// `self − earlier` (both cumulative).
    pub fn since(&self, earlier: &EditCounters) -> EditCounters {
        EditCounters {
            routed: self.routed - earlier.routed,
            dropped: self.dropped - earlier.dropped,
            reranked: self.reranked - earlier.reranked,
            substituted: self.substituted - earlier.substituted,
        }
    }
}

/// Drops cold slots of a layer's routing in place (engine spec §2.13): per token (`k` slots of
/// `ids` and `weights`), the best-weighted slot always stays; any other slot whose expert
/// `resident` says is not in memory and whose weight is below `frac / k` gets weight 0 **and the
/// best slot's id**, so the expert matmul reads an expert that is loaded anyway instead of an
/// unread one. With `renorm` the survivors are scaled by total / kept. Returns the dropped mask.
pub fn drop_cold(
    ids: &mut [i32],
    weights: &mut [f32],
    k: usize,
    frac: f32,
    renorm: bool,
    resident: &dyn Fn(i32) -> bool,
) -> Vec<bool> {
    let mut dropped = vec![false; ids.len()];
    if k == 0 || ids.len() != weights.len() || frac <= 0.0 {
        return dropped;
    }
    let threshold = frac / k as f32;
    for ((row_ids, row_w), row_d) in ids
        .chunks_mut(k)
        .zip(weights.chunks_mut(k))
        .zip(dropped.chunks_mut(k))
    {
        let best = best_slot(row_w);
        let total: f32 = row_w.iter().sum();
        for s in 0..row_ids.len() {
            if s != best && row_w[s] < threshold && !resident(row_ids[s]) {
                row_d[s] = true;
                row_w[s] = 0.0;
                row_ids[s] = row_ids[best];
            }
        }
        let kept: f32 = row_w.iter().sum();
        if renorm && kept > 0.0 && row_d.iter().any(|&d| d) {
            let scale = total / kept;
            for w in row_w.iter_mut() {
                *w *= scale;
            }
        }
    }
    dropped
}

/// The index of the largest weight (the first on ties; NaN never wins).
fn best_slot(w: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in w.iter().enumerate() {
        if x > w[best] || w[best].is_nan() {
            best = i;
        }
    }
    best
}

/// What [`substitute`] did to one routing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Substituted {
    /// Missed slots examined.
    pub reranked: u64,
    /// Slots moved.
    pub moved: u64,
}

/// Cache-aware substitution, in place on a layer's routed `ids` (`k` per token), before the
/// weight chain runs. The rule, per token: slot 0 (the router's first choice) always stays;
/// every other slot whose expert misses is examined, and it moves to the best-ranked expert
/// outside the token's selection that is resident, when that expert's score is at least
/// `(1 − lambda)` of the slot's own. `ranking` is each token's full argsort (`n_expert` ids,
/// best first) and `scores` the values it sorted, indexed by expert. The graph then takes the
/// moved slot's weight from the router's own probability of its new expert, renormalised as the
/// architecture renormalises its top-k.
pub fn substitute(
    ids: &mut [i32],
    k: usize,
    ranking: &[i32],
    scores: &[f32],
    lambda: f32,
    resident: &dyn Fn(i32) -> bool,
) -> Substituted {
    let mut out = Substituted::default();
    let n_tok = ids.len().checked_div(k).unwrap_or(0);
    if n_tok == 0
        || lambda <= 0.0
        || !ranking.len().is_multiple_of(n_tok)
        || ranking.len() != scores.len()
    {
        return out;
    }
    let n_expert = ranking.len() / n_tok;
    for t in 0..n_tok {
        let row = &mut ids[t * k..(t + 1) * k];
        let rank = &ranking[t * n_expert..(t + 1) * n_expert];
        let score = &scores[t * n_expert..(t + 1) * n_expert];
        let score_of = |e: i32| usize::try_from(e).ok().and_then(|e| score.get(e)).copied();
        for s in 1..k {
            if resident(row[s]) {
                continue;
            }
            out.reranked += 1;
            let Some(own) = score_of(row[s]) else {
                continue;
            };
            let floor = (1.0 - lambda) * own;
            let candidate = rank
                .iter()
                .skip(k)
                .copied()
                .filter(|c| !row.contains(c) && resident(*c))
                .find_map(|c| score_of(c).map(|sc| (c, sc)));
            if let Some((c, sc)) = candidate
                && sc >= floor
            {
                row[s] = c;
                out.moved += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_keeps_the_best_and_residents_and_repoints_to_the_best() {
        // k=4, F=1 → threshold 0.25; slot 2 (w 0.2) misses, slot 3 (w 0.1) is resident
        let mut ids = vec![5, 7, 9, 11];
        let mut w = vec![0.4, 0.3, 0.2, 0.1];
        let resident = |e: i32| e == 11;
        let d = drop_cold(&mut ids, &mut w, 4, 1.0, true, &resident);
        assert_eq!(d, [false, false, true, false]);
        assert_eq!(ids, [5, 7, 5, 11], "the dropped slot reads the best expert");
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6, "renormalised");
        assert_eq!(w[2], 0.0);
        assert!((w[0] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn drop_without_renorm_leaves_the_survivors() {
        let mut ids = vec![1, 2, 3, 4];
        let mut w = vec![0.1, 0.6, 0.2, 0.1];
        // two tokens of k=2: threshold 0.5; the best of token 0 is its slot 1
        let d = drop_cold(&mut ids, &mut w, 2, 1.0, false, &|_| false);
        assert_eq!(d, [true, false, false, true]);
        assert_eq!(ids, [2, 2, 3, 3]);
        assert_eq!(w, [0.0, 0.6, 0.2, 0.0]);
    }

    #[test]
    fn drop_at_zero_changes_nothing() {
        let mut ids = vec![1, 2];
        let mut w = vec![0.9, 0.1];
        assert_eq!(
            drop_cold(&mut ids, &mut w, 2, 0.0, true, &|_| false),
            [false, false]
        );
        assert_eq!((ids, w), (vec![1, 2], vec![0.9, 0.1]));
    }

    #[test]
    fn substitution_moves_a_miss_to_a_close_resident() {
        // 6 experts, k=2; ranking 3,1,4,0,5,2 with scores by expert
        let ranking = vec![3, 1, 4, 0, 5, 2];
        let scores = vec![0.10, 0.25, 0.01, 0.30, 0.20, 0.14];
        let resident = |e: i32| e == 0 || e == 5;
        let mut ids = vec![3, 1];
        // λ=0.5: floor 0.125; first resident outside the selection is 0 (0.10 < 0.125) → no
        let r = substitute(&mut ids, 2, &ranking, &scores, 0.5, &resident);
        assert_eq!((r.reranked, r.moved, ids.clone()), (1, 0, vec![3, 1]));
        // λ=0.7: floor 0.075 → moves to 0 (the best-ranked resident, not 5)
        let r = substitute(&mut ids, 2, &ranking, &scores, 0.7, &resident);
        assert_eq!((r.reranked, r.moved, ids.clone()), (1, 1, vec![3, 0]));
    }

    #[test]
    fn substitution_never_moves_slot_zero_or_a_hit() {
        let ranking = vec![0, 1, 2, 3];
        let scores = vec![0.4, 0.3, 0.2, 0.1];
        let mut ids = vec![0, 1];
        let r = substitute(&mut ids, 2, &ranking, &scores, 1.0, &|e| e != 0);
        assert_eq!(
            (r.reranked, r.moved),
            (0, 0),
            "slot 0 misses but stays; slot 1 hits"
        );
        assert_eq!(ids, [0, 1]);
    }
}
