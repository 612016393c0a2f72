//! Temporal speculation (`--prefetch K`): after a layer's load, the previous token's routing of
//! the next `K` layers is read ahead into the cache's cold end, so a right guess is a hit and a
//! wrong one is the first thing evicted. The reads run on the eval thread right after the real
//! ones (the `--prefetch-sync` form; the serial path has no idle lane to hand them to), so a real
//! read never waits behind a speculative one.

use super::Streamer;
use super::cache::EntryId;
use crate::stream::temporal::TemporalPredictor;
use std::time::Instant;

/// `--prefetch K` state on the streamer.
pub(super) struct Speculation {
    /// The previous token's routing per layer.
    pub predictor: TemporalPredictor,
    /// Experts each token routes to (the router's `n_expert_used`).
    pub n_used: usize,
}

impl Streamer {
    /// Turns on `--prefetch depth` (0 = off): `n_used` is the experts one token routes to.
    pub fn set_prefetch(&mut self, depth: usize, n_used: usize) {
        self.spec = (depth > 0 && n_used > 0).then(|| Speculation {
            predictor: TemporalPredictor::new(
                self.layout.layers.len(),
                self.layout.n_expert,
                depth,
            ),
            n_used,
        });
    }

    /// After layer `layer`'s load of `ids`: reads ahead what the previous token routed at the
    /// next K layers (not resident), then records this load's routing for the next token. A
    /// failed speculative read is forgotten, never an error: the real load reads it again.
    pub(super) fn speculate(&mut self, layer: usize, ids: &[i32]) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let cache = &self.cache;
        let wanted = spec
            .predictor
            .candidates(layer, |id| cache.is_resident(id) || cache.is_in_flight(id));
        let n_used = spec.n_used;
        spec.predictor.record(layer, ids, n_used);
        self.read_ahead(wanted);
    }

    /// `--predict-prefetch`: after the previous layer's load, the stale gate's guess at
    /// `layer`'s routing (`ranked`, best first): the resident guesses are kept warm (moved to
    /// the LRU's front, not counted as hits), and the misses, at most `spec_max` of them, are
    /// read ahead as speculative entries. A failed read is forgotten, as with `--prefetch`.
    /// With `front` (route-ahead's adopt mode: the guess *is* the routing) the entries read
    /// join the LRU's front instead, so the loads in between do not evict them.
    pub fn predict_ahead(&mut self, layer: usize, ranked: &[i32], spec_max: usize, front: bool) {
        // without a cache a guess has nowhere to wait for its routing
        if self.cache.budget() == 0 || !matches!(self.layout.layers.get(layer), Some(Some(_))) {
            return;
        }
        let n_expert = self.layout.n_expert;
        let mut wanted = Vec::new();
        for &e in ranked {
            let Ok(expert) = usize::try_from(e) else {
                continue;
            };
            if expert >= n_expert {
                continue;
            }
            let id = EntryId { layer, expert };
            if self.cache.is_resident(id) {
                self.cache.refresh(id);
            } else if wanted.len() < spec_max && !self.cache.is_in_flight(id) {
                wanted.push(id);
            }
        }
        self.read_ahead(wanted.clone());
        if front {
            wanted.into_iter().for_each(|id| self.cache.refresh(id));
        }
    }

    /// Reads `wanted` (grouped by layer, in order) as speculative cache entries.
    fn read_ahead(&mut self, wanted: Vec<EntryId>) {
        // per layer, the entries this round reads (candidates come nearest layer first)
        let mut by_layer: Vec<(usize, Vec<usize>)> = Vec::new();
        for id in wanted {
            if !self.cache.insert_speculative(id) {
                continue;
            }
            match by_layer.last_mut() {
                Some((l, v)) if *l == id.layer => v.push(id.expert),
                _ => by_layer.push((id.layer, vec![id.expert])),
            }
        }
        for (il, experts) in by_layer {
            let (jobs, served) = self.plan_reads(il, &experts);
            // the io log's entries of this load include its speculative reads (trace stamping)
            self.load_reads += jobs.len();
            let log_from = self.io_log.as_ref().map_or(0, Vec::len);
            let (result, _) = self.read(il, jobs, &served, Instant::now());
            if let Some(log) = self.io_log.as_mut() {
                log.iter_mut().skip(log_from).for_each(|r| r.spec = true);
            }
            match result {
                Ok(bytes) => {
                    // flash traffic counts the aligned windows; spec_read counts slice bytes
                    self.stats.read_bytes += bytes;
                    self.stats.spec_read_bytes += self.slice_bytes(il) * experts.len() as u64;
                    for &e in &experts {
                        self.cache.complete_speculative(EntryId {
                            layer: il,
                            expert: e,
                        });
                    }
                }
                Err(_) => {
                    for &e in &experts {
                        self.cache.cancel_speculative(EntryId {
                            layer: il,
                            expert: e,
                        });
                    }
                }
            }
        }
    }
}

impl Streamer {
    /// One expert's slice bytes over every tensor of `layer` (unaligned).
    fn slice_bytes(&self, layer: usize) -> u64 {
        match self.layout.layers.get(layer) {
            Some(Some(l)) => l.tensors.iter().map(|t| t.stride as u64).sum(),
            _ => 0,
        }
    }
}
