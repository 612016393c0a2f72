//! The temporal predictor behind `--prefetch K` (issue #15): consecutive tokens route alike, so
//! after layer `il`'s load the experts worth reading ahead are the ones the *previous* token
//! routed at layers `il+1..=il+K`.
//!
//! Pure bookkeeping: it remembers, per layer, the last token's routing of the most recent load
//! (a prefill batch leaves its last prompt token, which is what the first decode step should
//! guess from), and answers which of those entries are not resident. Reading them is the
//! streamer's business.

use crate::stream::cache::EntryId;

/// The previous token's routing per layer, and the look-ahead depth.
#[derive(Debug, Clone)]
pub struct TemporalPredictor {
    depth: usize,
    n_expert: usize,
    /// Per layer, the distinct experts the last routed token chose (empty until seen).
    last: Vec<Vec<usize>>,
}

impl TemporalPredictor {
    /// A predictor for `n_layer` layers of `n_expert` experts, looking `depth` (the `K` of
    /// `--prefetch K`) layers ahead.
    pub fn new(n_layer: usize, n_expert: usize, depth: usize) -> Self {
        Self {
            depth,
            n_expert,
            last: vec![Vec::new(); n_layer],
        }
    }

    /// Records layer `layer`'s routing of one load: `ids` token-major, `n_used` per token. Only
    /// the last token's slots are kept — the most recent routing is the best guess for the next
    /// token. Out-of-range ids (the graph's padding) are skipped; a load without a whole token
    /// keeps the previous record.
    pub fn record(&mut self, layer: usize, ids: &[i32], n_used: usize) {
        let Some(slot) = self.last.get_mut(layer) else {
            return;
        };
        if n_used == 0 || ids.len() < n_used {
            return;
        }
        let tail = &ids[ids.len() - ids.len() % n_used - n_used..ids.len() - ids.len() % n_used];
        slot.clear();
        for &raw in tail {
            if let Ok(e) = usize::try_from(raw)
                && e < self.n_expert
                && !slot.contains(&e)
            {
                slot.push(e);
            }
        }
    }

    /// The entries to read ahead after layer `layer`'s load: the recorded routing of layers
    /// `layer+1..=layer+K`, nearest layer first (it is needed soonest), skipping what
    /// `resident` says is already in memory or on its way.
    pub fn candidates(&self, layer: usize, resident: impl Fn(EntryId) -> bool) -> Vec<EntryId> {
        let mut out = Vec::new();
        let end = layer
            .saturating_add(self.depth)
            .min(self.last.len().saturating_sub(1));
        for il in layer + 1..=end {
            for &expert in &self.last[il] {
                let id = EntryId { layer: il, expert };
                if !resident(id) {
                    out.push(id);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(layer: usize, expert: usize) -> EntryId {
        EntryId { layer, expert }
    }

    #[test]
    fn looks_k_layers_ahead_at_the_previous_tokens_routing() {
        let mut p = TemporalPredictor::new(4, 8, 2);
        for il in 0..4 {
            p.record(il, &[il as i32, 7], 2);
        }
        assert_eq!(
            p.candidates(0, |_| false),
            vec![id(1, 1), id(1, 7), id(2, 2), id(2, 7)]
        );
        assert_eq!(
            p.candidates(2, |_| false),
            vec![id(3, 3), id(3, 7)],
            "clipped at the last layer"
        );
        assert!(p.candidates(3, |_| false).is_empty());
        assert_eq!(p.candidates(1, |e| e.expert == 7), vec![id(2, 2), id(3, 3)]);
    }

    #[test]
    fn a_prefill_batch_leaves_its_last_token() {
        let mut p = TemporalPredictor::new(2, 8, 1);
        // three tokens of two slots; the last token routed 5 and 5 (a duplicate) — and -1 is
        // padding beyond the model's experts, as is 9
        p.record(1, &[0, 1, 2, 3, 5, 5], 2);
        assert_eq!(p.candidates(0, |_| false), vec![id(1, 5)]);
        p.record(1, &[9, -1], 2);
        assert!(p.candidates(0, |_| false).is_empty());
        p.record(1, &[3, 6], 2);
        p.record(1, &[4], 2);
        assert_eq!(
            p.candidates(0, |_| false),
            vec![id(1, 3), id(1, 6)],
            "not a whole token: kept"
        );
        p.record(7, &[1, 2], 2);
    }

    #[test]
    fn nothing_before_the_first_routing_nor_with_depth_zero() {
        let p = TemporalPredictor::new(3, 4, 2);
        assert!(p.candidates(0, |_| false).is_empty());
        let mut q = TemporalPredictor::new(3, 4, 0);
        q.record(1, &[1, 2], 2);
        assert!(q.candidates(0, |_| false).is_empty());
    }
}
