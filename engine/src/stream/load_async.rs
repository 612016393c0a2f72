//! The overlapped load of a layer (`--overlap`): after the serial path's lookups, evictions drop
//! their pages, the misses are marked on their way, and their reads go to the asynchronous lanes
//! in the order the graph consumes them; the eval thread returns while the lanes read (the
//! staged overlap first waits for the first projection, as nothing else computes before it).

use super::cache::EntryId;
use super::io::ReadError;
use super::layout::ReadJob;
use super::load::Staged;
use super::overlap::OverlapKind;
use super::overlap::book::SliceId;
use super::overlap::lanes::{AsyncJob, Fill};
use super::recycle::PageRun;
use super::{Poison, Routing, Streamer};
use std::time::Instant;

impl Streamer {
    /// [`Self::load_layer`] under `--overlap`.
    pub(super) fn load_layer_async(
        &mut self,
        layer: usize,
        routed: &[i32],
        st: Staged,
        trace: Option<&mut Vec<Routing>>,
        before_wait: &mut dyn FnMut(),
    ) -> Result<(), ReadError> {
        let Staged {
            t0,
            before,
            misses,
            first_routed,
            spec_hits,
            adopted,
        } = st;
        // the previous layer's batch must be complete before its pages can be evicted
        let t_drain = Instant::now();
        if let Some(o) = self.overlap_mut() {
            o.drain();
        }
        let drained = t_drain.elapsed();
        if let Some(e) = self
            .overlap()
            .filter(|o| o.failed())
            .and_then(|o| o.take_error())
        {
            return Err(e);
        }
        let victims = self.cache.evict_to_budget();
        let donors = if self
            .overlap()
            .is_some_and(|o| o.kind() == OverlapKind::Staged)
        {
            // reads land in place, as serially: the victims' pages become the misses' pages
            self.release(&victims, layer, &misses);
            Vec::new()
        } else {
            self.evicted_pages(&victims)
        };
        if self.poison.is_some() {
            // a poisoned page may sit where a miss goes: drop it so the read replaces it
            self.drop_for_reread(layer, &misses);
        }
        let poisoned = self.routed_poison(layer, first_routed, &misses);
        let (jobs, bytes) = self.async_jobs(layer, &misses, poisoned);
        self.load_reads = jobs.len();
        self.stats.loads += 1;
        self.stats.experts_read += misses.len() as u64;
        if let Some(t) = trace {
            fill_async_trace(t, routed, &before, &misses, &bytes, self.layout.n_expert);
            super::load::mark_spec_hits(t, routed, &spec_hits);
        }
        let n_groups = self.consume_order.get(layer).map_or(1, Vec::len).max(1);
        if let Some(o) = self.overlap_mut() {
            o.submit(layer, jobs, &donors, n_groups);
        }
        // behind the real batch: the lanes take these only once it is all claimed
        self.speculate(layer, routed);
        // staging time is management; the drain wait is not (it is drain_ms)
        self.stats.mgmt_ns += (t0.elapsed().saturating_sub(drained)).as_nanos() as u64;
        if self.poison == Some(Poison::Unrouted) {
            self.apply_poison(layer, Poison::Unrouted, None);
        }
        self.wait_adopted(adopted);
        if let Some(o) = self.overlap_mut()
            && o.kind() == OverlapKind::Staged
        {
            // nothing computes between the routing and the first projection's matmul
            o.wait_for_group(0, before_wait);
        }
        if let Some(peak) = self.peak_resident.as_mut() {
            *peak = (*peak).max(self.arena.resident_bytes());
        }
        Ok(())
    }

    /// Under userfaultfd: the evicted entries' whole inward pages, marked absent in the book.
    /// They are lent to the lanes' staging ring for the misses' reads (or dropped): moving them
    /// straight to a miss would show stale bytes to a compute thread before the read lands.
    fn evicted_pages(&mut self, victims: &[EntryId]) -> Vec<PageRun> {
        let page = crate::vm::PAGE;
        let mut runs = Vec::new();
        for v in victims {
            let Some(Some(l)) = self.layout.layers.get(v.layer) else {
                continue;
            };
            for (p, t) in l.tensors.iter().enumerate() {
                let (a, b) = (
                    t.addr + v.expert * t.stride,
                    t.addr + (v.expert + 1) * t.stride,
                );
                let (p0, p1) = (a.div_ceil(page) * page, b & !(page - 1));
                if p1 > p0 {
                    runs.push(PageRun {
                        addr: p0,
                        len: p1 - p0,
                    });
                }
                if let Some(book) = self.overlap().and_then(|o| o.book()) {
                    let id = self.slice_id(v.layer, p, v.expert);
                    book.lock().unwrap_or_else(|e| e.into_inner()).evicted(id);
                }
            }
        }
        runs
    }

    /// Test poisoning: drops every page of the misses' slices that lies inside their tensor
    /// (pages shared with a neighbour expert too: the read brings both back), so no poisoned
    /// byte survives into the install.
    fn drop_for_reread(&mut self, layer: usize, misses: &[usize]) {
        let Some(Some(l)) = self.layout.layers.get(layer) else {
            return;
        };
        let page = crate::vm::PAGE;
        for t in &l.tensors {
            let lo = t.addr.div_ceil(page) * page;
            let hi = (t.addr + t.bytes) & !(page - 1);
            for &e in misses {
                let a = ((t.addr + e * t.stride) & !(page - 1)).max(lo);
                let b = (t.addr + (e + 1) * t.stride).div_ceil(page) * page;
                let b = b.min(hi);
                if b > a {
                    let _ = self.arena.drop_pages(a, b - a);
                }
            }
        }
    }

    /// `--test-poison routed` under overlap: the first routed expert's first tensor is poisoned
    /// — in place now if it is resident, by its read (which writes 0xFF) if it is a miss — and
    /// forgotten, so a later routing reads the true bytes. Returns the poisoned miss, if any.
    fn routed_poison(
        &mut self,
        layer: usize,
        first_routed: Option<usize>,
        misses: &[usize],
    ) -> Option<usize> {
        if self.poison != Some(Poison::Routed) {
            return None;
        }
        let e = first_routed?;
        let t = self
            .layout
            .layers
            .get(layer)?
            .as_ref()?
            .tensors
            .first()?
            .clone();
        self.cache.invalidate(EntryId { layer, expert: e });
        if misses.contains(&e) {
            return Some(e);
        }
        let _ = self.arena.fill(t.addr + e * t.stride, t.stride, 0xFF);
        None
    }

    /// The misses' reads, projection group by group in the graph's consumption order, experts
    /// ascending within a group; and the bytes each miss reads.
    pub(super) fn async_jobs(
        &mut self,
        layer: usize,
        misses: &[usize],
        poisoned: Option<usize>,
    ) -> (Vec<AsyncJob>, Vec<u64>) {
        let mut bytes = vec![0u64; misses.len()];
        let mut jobs = Vec::new();
        let Some(Some(l)) = self.layout.layers.get(layer) else {
            return (jobs, bytes);
        };
        let uffd = matches!(self.overlap().map(|o| o.kind()), Some(OverlapKind::Uffd(_)));
        let order: Vec<usize> = match self.consume_order.get(layer) {
            Some(o) if !o.is_empty() => o.clone(),
            _ => (0..l.tensors.len()).collect(),
        };
        let mut sorted: Vec<(usize, usize)> = misses.iter().copied().enumerate().collect();
        sorted.sort_by_key(|&(_, e)| e);
        for (group, &p) in order.iter().enumerate() {
            let Some(t) = l.tensors.get(p) else { continue };
            for &(m, e) in &sorted {
                // userfaultfd installs whole pages: its windows are page aligned even buffered
                let aligned = uffd || self.direct[t.shard];
                let read = ReadJob::plan(
                    t.shard,
                    t.offset + (e * t.stride) as u64,
                    t.addr + e * t.stride,
                    t.stride,
                    aligned,
                );
                bytes[m] += read.len as u64;
                let fill = if poisoned == Some(e) && p == 0 {
                    Fill::Poison
                } else {
                    Fill::File
                };
                jobs.push(AsyncJob {
                    read,
                    slice: self.slice_id(layer, p, e),
                    group,
                    proj: u8::try_from(p).unwrap_or(u8::MAX),
                    fill,
                    slot: 0,
                });
            }
        }
        if let Some(b) = self.overlap().and_then(|o| o.book()) {
            let mut b = b.lock().unwrap_or_else(|e| e.into_inner());
            for j in &jobs {
                b.schedule(j.slice);
            }
        }
        (jobs, bytes)
    }

    /// The book's id of `layer`'s tensor `proj`, expert `e`.
    fn slice_id(&self, layer: usize, proj: usize, expert: usize) -> SliceId {
        let before: usize = self
            .layout
            .layers
            .iter()
            .take(layer)
            .map(|l| l.as_ref().map_or(0, |l| l.tensors.len()))
            .sum();
        SliceId {
            tensor: before + proj,
            expert,
        }
    }
}

/// The route trace's per-routing record of an overlapped load: residency as found before it,
/// and on the first routing of each miss the bytes its reads cover.
fn fill_async_trace(
    trace: &mut [Routing],
    routed: &[i32],
    before: &[bool],
    misses: &[usize],
    bytes: &[u64],
    n_expert: usize,
) {
    let mut first_seen = vec![false; n_expert];
    for (slot, &raw) in trace.iter_mut().zip(routed) {
        let Some(e) = usize::try_from(raw).ok().filter(|&e| e < n_expert) else {
            continue;
        };
        slot.residency = u8::from(before.get(e).copied().unwrap_or(false));
        if std::mem::replace(&mut first_seen[e], true) {
            continue;
        }
        if let Some(m) = misses.iter().position(|&x| x == e) {
            slot.bytes = bytes[m];
        }
    }
}
