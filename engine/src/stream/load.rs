//! The serial load of a layer: look every routed expert up once, evict to the budget, read the
//! misses on the lanes (the eval thread reading as lane 0) and wait.

use super::cache::{EntryId, Touch};
use super::io::ReadError;
use super::layout::ReadJob;
use super::{IoRecord, Routing, Streamer};
use std::time::Instant;

/// What [`Streamer::stage`] found.
pub(super) struct Staged {
    /// When the load's cache management started.
    pub t0: Instant,
    /// Per expert, resident before the load (traced loads only).
    pub before: Vec<bool>,
    /// The routed experts not resident, in first-routed order.
    pub misses: Vec<usize>,
    /// The first routed expert (test poisoning).
    pub first_routed: Option<usize>,
    /// The experts whose lookup was the first touch of a speculative read (`residency=2`).
    pub spec_hits: Vec<usize>,
    /// How many of those were still being read (overlap: the load waits for them).
    pub adopted: usize,
}

impl Streamer {
    /// Makes the experts routed at layer `layer` resident: `ids` are the routing's expert ids
    /// (token-major, duplicates allowed — a prefill batch routes many tokens and the union is
    /// read once). Misses are read on the lanes; then the cache is trimmed to its budget.
    /// With `trace`, it is refilled with one [`Routing`] per entry of `ids` (residency as found
    /// before loading; bytes on the routing that triggered the read). `before_wait` runs right
    /// before the calling thread starts waiting for reads that are expected to last long enough
    /// to sleep through ([`pause`]).
    pub fn load_layer(
        &mut self,
        layer: usize,
        ids: &[i32],
        mut trace: Option<&mut Vec<Routing>>,
        before_wait: &mut dyn FnMut(),
    ) -> Result<(), ReadError> {
        self.load_reads = 0;
        let Some(st) = self.stage(layer, ids, trace.as_deref_mut()) else {
            return Ok(());
        };
        if self.overlap().is_some() {
            return self.load_layer_async(layer, ids, st, trace, before_wait);
        }
        let Staged {
            t0,
            before,
            misses,
            first_routed,
            spec_hits,
            adopted: _,
        } = st;
        let routed = ids;
        // evict before reading: the victims' pages become the misses' pages (never the current
        // load's entries, so nothing this layer computes on is released)
        let victims = self.cache.evict_to_budget();
        self.release(&victims, layer, &misses);
        let Some(Some(experts)) = self.layout.layers.get(layer) else {
            return Ok(());
        };
        let n_tensors = experts.tensors.len();
        let (jobs, served) = self.plan_reads(layer, &misses);
        self.load_reads = jobs.len();
        let t1 = Instant::now();
        self.stats.mgmt_ns += (t1 - t0).as_nanos() as u64;
        self.stats.loads += 1;
        self.stats.experts_read += misses.len() as u64;
        if let Some(t) = trace {
            self.fill_trace(t, routed, &before, &misses, &jobs, n_tensors);
            mark_spec_hits(t, routed, &spec_hits);
        }
        let planned: u64 = jobs.iter().map(|j| j.len as u64).sum();
        if planned > 0 && self.pause.should_sleep(planned) {
            before_wait();
        }
        let (result, t2) = self.read(layer, jobs, &served, t1);
        if let Ok(bytes) = result {
            self.pause.record(bytes, (t2 - t1).as_nanos() as u64);
        }
        match result {
            Ok(bytes) => self.stats.read_bytes += bytes,
            Err(e) => {
                for &m in &misses {
                    self.cache.invalidate(EntryId { layer, expert: m });
                }
                return Err(e);
            }
        }
        self.stats.mgmt_ns += t2.elapsed().as_nanos() as u64;
        if let Some(p) = self.poison {
            self.apply_poison(layer, p, first_routed);
        }
        self.speculate(layer, routed);
        if let Some(peak) = self.peak_resident.as_mut() {
            *peak = (*peak).max(self.arena.resident_bytes());
        }
        Ok(())
    }

    /// The start of every load, serial or overlapped: demand accounting, and every routed
    /// expert looked up once; `None` for a layer without streamed experts. `trace` is sized to
    /// `ids` (one [`Routing`] each).
    pub(super) fn stage(
        &mut self,
        layer: usize,
        ids: &[i32],
        trace: Option<&mut Vec<Routing>>,
    ) -> Option<Staged> {
        let traced = trace.is_some();
        if let Some(t) = trace {
            t.clear();
            t.resize(ids.len(), Routing::default());
        }
        if let Some(Some(l)) = self.layout.layers.get(layer) {
            let entry = l.entry_bytes();
            self.count_demand(layer, entry, ids);
        }
        if !matches!(self.layout.layers.get(layer), Some(Some(_))) {
            return None;
        }
        let t0 = Instant::now();
        let every: Vec<i32>;
        let ids = if self.load_all {
            every = (0..self.layout.n_expert)
                .filter_map(|e| i32::try_from(e).ok())
                .collect();
            &every[..]
        } else {
            ids
        };
        // residency as found before this load, per expert (first routing decides)
        let before: Vec<bool> = if traced {
            (0..self.layout.n_expert)
                .map(|e| self.cache.is_resident(EntryId { layer, expert: e }))
                .collect()
        } else {
            Vec::new()
        };
        // overlap: queued speculation is cancelled, finished speculation joins the cache first
        self.settle_speculative(layer);
        self.cache.begin_load();
        self.seen_gen += 1;
        let (misses, first_routed, spec_hits, adopted) = self.touch_routed(layer, ids);
        Some(Staged {
            t0,
            before,
            misses,
            first_routed,
            spec_hits,
            adopted,
        })
    }

    /// Looks up every routed expert of `layer` once (duplicates refresh the LRU only): the misses
    /// in first-routed order, the first routed expert (for test poisoning), the experts whose
    /// lookup was a speculative entry's first touch, and how many of those were still in flight.
    fn touch_routed(
        &mut self,
        layer: usize,
        ids: &[i32],
    ) -> (Vec<usize>, Option<usize>, Vec<usize>, usize) {
        let mut adopted = 0;
        let mut misses: Vec<usize> = Vec::new();
        let mut spec_hits: Vec<usize> = Vec::new();
        let mut first_routed = None;
        for &raw in ids {
            let Ok(e) = usize::try_from(raw) else {
                continue;
            };
            if e >= self.layout.n_expert {
                continue;
            }
            let id = EntryId { layer, expert: e };
            if self.seen[e] == self.seen_gen {
                self.cache.refresh(id);
                continue;
            }
            self.seen[e] = self.seen_gen;
            first_routed.get_or_insert(e);
            match self.cache.touch(id) {
                Some(Touch::Miss { .. }) => misses.push(e),
                Some(Touch::SpecHit) => spec_hits.push(e),
                Some(Touch::InFlight) => {
                    spec_hits.push(e);
                    adopted += 1;
                }
                _ => {}
            }
        }
        (misses, first_routed, spec_hits, adopted)
    }

    /// The reads of `misses` in `layer`, tensor-major, and for the io log each job's
    /// (projection, expert, requested bytes).
    pub(super) fn plan_reads(
        &self,
        layer: usize,
        misses: &[usize],
    ) -> (Vec<ReadJob>, Vec<(u8, usize, usize)>) {
        let mut jobs = Vec::new();
        let mut served = Vec::new();
        let Some(Some(experts)) = self.layout.layers.get(layer) else {
            return (jobs, served);
        };
        for (proj, t) in experts.tensors.iter().enumerate() {
            for &e in misses {
                if self.io_log.is_some() {
                    served.push((u8::try_from(proj).unwrap_or(u8::MAX), e, t.stride));
                }
                let off = t.offset + (e * t.stride) as u64;
                jobs.push(ReadJob::plan(
                    t.shard,
                    off,
                    t.addr + e * t.stride,
                    t.stride,
                    self.direct[t.shard],
                ));
            }
        }
        (jobs, served)
    }

    /// Runs `jobs` on the lanes (started at `t1`), logs them for the io trace and counts the
    /// blocked time; returns the outcome and when the read phase ended.
    pub(super) fn read(
        &mut self,
        layer: usize,
        jobs: Vec<ReadJob>,
        served: &[(u8, usize, usize)],
        t1: Instant,
    ) -> (Result<u64, ReadError>, Instant) {
        let had_reads = !jobs.is_empty();
        let offsets: Vec<(u64, usize)> = if self.io_log.is_some() {
            jobs.iter().map(|j| (j.offset, j.len)).collect()
        } else {
            Vec::new()
        };
        let mut timings = Vec::new();
        let result = match &self.reader {
            super::Reader::Serial(lanes) => {
                lanes.run_timed(jobs, self.io_log.is_some().then_some(&mut timings))
            }
            // unreachable: overlapped loads take load_layer_async
            super::Reader::Overlap(_) => Ok(0),
        };
        if let Some(log) = self.io_log.as_mut() {
            for ((&(proj, e, req), &(offset, _)), t) in served.iter().zip(&offsets).zip(&timings) {
                log.push(IoRecord {
                    layer: layer as u32,
                    expert: e as u32,
                    proj,
                    lane: t.lane,
                    offset,
                    req_bytes: req as u64,
                    read_bytes: t.bytes,
                    latency_ns: t.latency_ns,
                    spec: false,
                });
            }
        }
        let t2 = Instant::now();
        if had_reads {
            self.stats.io_ns += (t2 - t1).as_nanos() as u64;
        }
        (result, t2)
    }

    /// Fills the per-routing trace of a load: `jobs` are planned tensor-major over `misses`
    /// (`n_tensors` × `misses.len()`), so expert `misses[m]`'s windows are every
    /// `misses.len()`-th job starting at `m`.
    fn fill_trace(
        &self,
        trace: &mut [Routing],
        routed: &[i32],
        before: &[bool],
        misses: &[usize],
        jobs: &[ReadJob],
        n_tensors: usize,
    ) {
        let mut first_seen = vec![false; self.layout.n_expert];
        for (slot, &raw) in trace.iter_mut().zip(routed) {
            let Some(e) = usize::try_from(raw)
                .ok()
                .filter(|&e| e < self.layout.n_expert)
            else {
                continue;
            };
            slot.residency = u8::from(before[e]);
            if std::mem::replace(&mut first_seen[e], true) {
                continue;
            }
            if let Some(m) = misses.iter().position(|&x| x == e) {
                slot.bytes = (0..n_tensors)
                    .filter_map(|t| jobs.get(t * misses.len() + m))
                    .map(|j| j.len as u64)
                    .sum();
            }
        }
    }

    /// Demand accounting: distinct routed experts × entry bytes, summed over one pass of the
    /// layers; a pass ends when a load's layer index is not above the previous one.
    fn count_demand(&mut self, layer: usize, entry_bytes: u64, ids: &[i32]) {
        let mut distinct: Vec<i32> = ids
            .iter()
            .copied()
            .filter(|&e| usize::try_from(e).is_ok_and(|e| e < self.layout.n_expert))
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        let bytes = distinct.len() as u64 * entry_bytes;
        if self.last_layer.is_none_or(|l| layer <= l) {
            self.stats.token_demand_bytes = 0;
            self.stats.layer_demand_bytes = 0;
        }
        self.last_layer = Some(layer);
        self.stats.token_demand_bytes += bytes;
        self.stats.layer_demand_bytes = self.stats.layer_demand_bytes.max(bytes);
    }
}

/// `residency=2`: the first routing of each expert whose lookup was a speculative entry's first
/// touch (later routings of it in the same load are plain hits).
pub(super) fn mark_spec_hits(trace: &mut [Routing], routed: &[i32], spec_hits: &[usize]) {
    if spec_hits.is_empty() {
        return;
    }
    let mut marked = vec![false; spec_hits.len()];
    for (slot, &raw) in trace.iter_mut().zip(routed) {
        let Ok(e) = usize::try_from(raw) else {
            continue;
        };
        if let Some(k) = spec_hits.iter().position(|&x| x == e)
            && !std::mem::replace(&mut marked[k], true)
        {
            slot.residency = 2;
        }
    }
}
