//! What happens to expert pages besides reads: evicted entries' pages recycled into the misses'
//! slices (or dropped), and test poisoning.

use super::cache::EntryId;
use super::recycle::{self, PageRun};
use super::{Poison, Streamer};

impl Streamer {
    /// Releases the pages of evicted entries: moved to the missed slices of `layer` (page
    /// recycling) as far as the mapping budget allows, dropped otherwise.
    pub(super) fn release(&mut self, victims: &[EntryId], layer: usize, misses: &[usize]) {
        if victims.is_empty() {
            return;
        }
        let slices = |il: usize, experts: &mut dyn Iterator<Item = usize>| -> Vec<PageRun> {
            let Some(Some(l)) = self.layout.layers.get(il) else {
                return Vec::new();
            };
            let experts: Vec<usize> = experts.collect();
            let mut out = Vec::new();
            for t in &l.tensors {
                for &e in &experts {
                    let (a, b) = (t.addr + e * t.stride, t.addr + (e + 1) * t.stride);
                    let (p0, p1) = (
                        a.div_ceil(crate::vm::PAGE) * crate::vm::PAGE,
                        b & !(crate::vm::PAGE - 1),
                    );
                    if p1 > p0 {
                        out.push(PageRun {
                            addr: p0,
                            len: p1 - p0,
                        });
                    }
                }
            }
            out
        };
        let mut donors = Vec::new();
        for v in victims {
            donors.extend(slices(v.layer, &mut std::iter::once(v.expert)));
        }
        let mut leftover = donors.clone();
        if let Some(budget) = self.recycle.as_mut() {
            let dests = slices(layer, &mut misses.iter().copied());
            let plan = recycle::plan(&donors, &dests, budget);
            leftover = plan.leftover;
            for (i, m) in plan.moves.iter().enumerate() {
                if self.arena.move_pages(m.src, m.dst, m.len).is_err() {
                    // an old kernel or a full mapping table: drop from now on
                    self.recycle = None;
                    leftover.extend(plan.moves[i..].iter().map(|m| PageRun {
                        addr: m.src,
                        len: m.len,
                    }));
                    break;
                }
                self.stats.recycled_bytes += m.len as u64;
            }
        }
        for r in leftover {
            // a failed madvise only leaves memory resident; correctness is unaffected
            let _ = self.arena.drop_pages(r.addr, r.len);
        }
    }

    pub(super) fn apply_poison(&mut self, layer: usize, p: Poison, first_routed: Option<usize>) {
        let Some(Some(experts)) = self.layout.layers.get(layer) else {
            return;
        };
        match p {
            Poison::Unrouted => {
                for e in 0..self.layout.n_expert {
                    if !self.cache.is_resident(EntryId { layer, expert: e }) {
                        for t in &experts.tensors {
                            let _ = self.arena.fill(t.addr + e * t.stride, t.stride, 0xFF);
                        }
                    }
                }
            }
            Poison::Routed => {
                if let (Some(e), Some(t)) = (first_routed, experts.tensors.first()) {
                    let _ = self.arena.fill(t.addr + e * t.stride, t.stride, 0xFF);
                    // forget it so a later routing reads the true bytes again
                    self.cache.invalidate(EntryId { layer, expert: e });
                }
            }
        }
    }
}
