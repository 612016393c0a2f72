//! Expert streaming: the layout of the experts, the cache policy, the reads, and the
//! [`Streamer`] that ties them together at each routing.

pub mod cache;
pub mod io;
pub mod layout;
pub mod prefill;
pub mod recycle;

use crate::model::index::ModelIndex;
use cache::{EntryId, ExpertCache, Touch};
use io::{DirectOutcome, Lanes, ReadError, ShardFile};
use layout::{ExpertLayout, ReadJob};
use recycle::{MapBudget, PageRun};
use std::sync::Arc;
use std::time::Instant;

use crate::vm::Arena;

/// Streaming settings (resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// Cache budget in bytes (0 = off: only the current layer's experts stay resident).
    pub cache_bytes: u64,
    /// I/O lanes (1..=8).
    pub io_threads: usize,
    /// Ask for O_DIRECT.
    pub o_direct: bool,
    /// `--load-all`: every layer load reads every expert (the A/B baseline), whatever was routed.
    pub load_all: bool,
}

/// Cumulative streaming counters (per-token figures are deltas of these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Bytes read from flash (aligned windows included).
    pub read_bytes: u64,
    /// Wall time blocked in the read phase of loads.
    pub io_ns: u64,
    /// Cache management time (lookups, LRU, eviction).
    pub mgmt_ns: u64,
    /// Layer loads (routing callbacks).
    pub loads: u64,
    /// Experts read (misses).
    pub experts_read: u64,
    /// Cache lookups.
    pub lookups: u64,
    /// Cache hits.
    pub hits: u64,
    /// Entries evicted.
    pub evictions: u64,
    /// Misses on entries evicted before.
    pub rereads: u64,
    /// Bytes resident in the cache now.
    pub resident_bytes: u64,
    /// Distinct routed expert bytes of the latest pass over the layers (one decode): what one
    /// token routes, measured (a prefill pass routes the union of its tokens).
    pub token_demand_bytes: u64,
    /// The widest layer's distinct routed bytes in that pass.
    pub layer_demand_bytes: u64,
    /// Bytes of evicted experts' pages moved to missed experts instead of being released and
    /// faulted in again ([`recycle`]).
    pub recycled_bytes: u64,
}

/// Env var (diagnostic A/B): `1` releases evicted pages with `MADV_DONTNEED` and lets the reads
/// fault fresh ones, as before page recycling existed.
pub const NO_RECYCLE_ENV: &str = "BMOE_DIAG_NO_RECYCLE";

/// Env var (test): `1` measures the expert arena's resident bytes (`mincore`) after every
/// load and reports the peak on stderr when the streamer is dropped.
pub const PEAK_RESIDENT_ENV: &str = "BMOE_TEST_PEAK_RESIDENT";

/// Mappings left free for everything else when sizing the recycling budget.
const MAP_MARGIN: usize = 8192;

/// What one routed id of a load found and cost (the route trace's `residency` and
/// `expert_bytes`), in the order of the load's ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Routing {
    /// 0 = miss (the expert was not resident before this load), 1 = hit.
    pub residency: u8,
    /// Bytes read for this routing: the aligned windows of the expert's slices on the first
    /// routing of a missed expert in this load, 0 on every other routing.
    pub bytes: u64,
}

/// One read the streamer issued (a `--io-trace` row without its decode stamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRecord {
    /// MoE layer served.
    pub layer: u32,
    /// Expert served.
    pub expert: u32,
    /// Projection: the tensor's index among the layer's expert tensors, file order.
    pub proj: u8,
    /// Lane that read it (0 = the decoding thread).
    pub lane: u32,
    /// File offset of the window read (aligned under O_DIRECT).
    pub offset: u64,
    /// The slice's bytes (what the caller wanted).
    pub req_bytes: u64,
    /// Bytes actually read (the aligned window).
    pub read_bytes: u64,
    /// Wall time of the read.
    pub latency_ns: u64,
}

/// Test-only poisoning: writes NaN bytes (0xFF) over expert slices after each load, to prove
/// the gates can fail (a routed slice) and that unrouted slices are never read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    /// Poison every slice that is not resident after the load.
    Unrouted,
    /// Poison the first routed expert's first tensor slice.
    Routed,
}

/// What happened when the streamer was set up.
#[derive(Debug, Clone)]
pub struct StreamSetup {
    /// Whether every shard reads with O_DIRECT.
    pub o_direct: bool,
    /// Warnings to print (fallbacks).
    pub warnings: Vec<String>,
    /// Bytes refilled from the file around the taken-over pages.
    pub refilled_bytes: u64,
    /// Lanes running.
    pub lanes: usize,
}

/// Streams routed experts into place at each routing decision.
pub struct Streamer {
    layout: ExpertLayout,
    cache: ExpertCache,
    arena: Arc<Arena>,
    lanes: Lanes,
    direct: Vec<bool>,
    stats: StreamStats,
    seen: Vec<u64>,
    seen_gen: u64,
    poison: Option<Poison>,
    load_all: bool,
    last_layer: Option<usize>,
    /// `--io-trace`: every read since the last [`Streamer::take_io_log`].
    io_log: Option<Vec<IoRecord>>,
    /// Page recycling's mapping budget; `None` once disabled (env, or a failed move).
    recycle: Option<MapBudget>,
    /// [`PEAK_RESIDENT_ENV`]: the largest resident arena bytes seen after a load.
    peak_resident: Option<u64>,
}

impl Drop for Streamer {
    fn drop(&mut self) {
        if let Some(peak) = self.peak_resident {
            eprintln!("bmoe: test: peak expert-resident bytes {peak}");
        }
    }
}

/// Why setting up streaming failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// Opening a shard failed.
    #[error("cannot open {path} for expert reads: {source}")]
    Open {
        /// The shard.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Replacing the expert pages failed.
    #[error("cannot move the expert tensors to anonymous memory: {0}")]
    Remap(std::io::Error),
    /// Refilling neighbour bytes failed.
    #[error("cannot refill bytes around the expert tensors: {0}")]
    Refill(ReadError),
}

impl Streamer {
    /// Takes over the expert memory of `layout` (all experts start non-resident), opens the
    /// shards and starts the lanes.
    pub fn start(
        layout: ExpertLayout,
        index: &ModelIndex,
        settings: StreamSettings,
    ) -> Result<(Self, StreamSetup), SetupError> {
        let mut files = Vec::with_capacity(index.shards.len());
        let mut warnings = Vec::new();
        for path in &index.shards {
            let (f, outcome) =
                ShardFile::open(path, settings.o_direct).map_err(|source| SetupError::Open {
                    path: path.display().to_string(),
                    source,
                })?;
            if let DirectOutcome::Fallback(why) = outcome {
                warnings.push(format!(
                    "{why} on {} — using buffered I/O for expert reads",
                    path.display()
                ));
            }
            files.push(f);
        }
        let direct: Vec<bool> = files.iter().map(ShardFile::is_direct).collect();
        let weights: Vec<crate::ffi::WeightRef> = layout
            .tensors()
            .map(|t| crate::ffi::WeightRef {
                name: t.name.clone(),
                addr: t.addr,
                bytes: t.bytes,
                n_expert: layout.n_expert,
                expert_stride: t.stride,
            })
            .collect();
        let arena = Arena::take_over(&weights).map_err(SetupError::Remap)?;
        let mut refilled = 0u64;
        for (shard, offset, len) in layout.refill_ranges(&index.shard_sizes) {
            let Some(base) = layout.shard_bases[shard] else {
                continue;
            };
            let job = ReadJob::plan(shard, offset, base + offset as usize, len as usize, false);
            let n = arena
                .read_into(files[shard].buffered(), job.addr, job.len, job.offset)
                .map_err(|e| {
                    SetupError::Refill(ReadError {
                        path: files[shard].path().to_path_buf(),
                        offset,
                        len: len as usize,
                        got: 0,
                        errno: Some(e.raw_os_error().unwrap_or(libc::EIO)),
                    })
                })?;
            if n < job.len {
                return Err(SetupError::Refill(ReadError {
                    path: files[shard].path().to_path_buf(),
                    offset,
                    len: job.len,
                    got: n,
                    errno: None,
                }));
            }
            refilled += n as u64;
        }
        let arena = Arc::new(arena);
        let lanes = Lanes::new(settings.io_threads, files, Arc::clone(&arena));
        let cache = ExpertCache::new(layout.n_expert, layout.entry_bytes(), settings.cache_bytes);
        let setup = StreamSetup {
            o_direct: !direct.is_empty() && direct.iter().all(|&d| d),
            warnings,
            refilled_bytes: refilled,
            lanes: lanes.lanes(),
        };
        let seen = vec![0; layout.n_expert];
        let recycle = if std::env::var(NO_RECYCLE_ENV).is_ok_and(|v| v == "1") {
            None
        } else {
            crate::vm::mapping_headroom(MAP_MARGIN).map(MapBudget::new)
        };
        Ok((
            Self {
                layout,
                cache,
                arena,
                lanes,
                direct,
                stats: StreamStats::default(),
                seen,
                seen_gen: 0,
                poison: None,
                load_all: settings.load_all,
                last_layer: None,
                io_log: None,
                recycle,
                peak_resident: std::env::var(PEAK_RESIDENT_ENV)
                    .is_ok_and(|v| v == "1")
                    .then_some(0),
            },
            setup,
        ))
    }

    /// The bound layout.
    pub fn layout(&self) -> &ExpertLayout {
        &self.layout
    }

    /// Cumulative counters.
    pub fn stats(&self) -> StreamStats {
        let c = self.cache.counters();
        StreamStats {
            lookups: c.lookups,
            hits: c.hits,
            evictions: c.evictions,
            rereads: c.rereads,
            resident_bytes: self.cache.resident_bytes(),
            ..self.stats
        }
    }

    /// Starts recording every read (for `--io-trace`).
    pub fn log_io(&mut self) {
        self.io_log.get_or_insert_with(Vec::new);
    }

    /// The reads recorded since the last call (empty when not recording).
    pub fn take_io_log(&mut self) -> Vec<IoRecord> {
        self.io_log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Arms test poisoning.
    pub fn set_poison(&mut self, p: Option<Poison>) {
        self.poison = p;
    }

    /// Makes the experts routed at layer `layer` resident: `ids` are the routing's expert ids
    /// (token-major, duplicates allowed — a prefill batch routes many tokens and the union is
    /// read once). Misses are read on the lanes; then the cache is trimmed to its budget.
    /// With `trace`, it is refilled with one [`Routing`] per entry of `ids` (residency as found
    /// before loading; bytes on the routing that triggered the read).
    pub fn load_layer(
        &mut self,
        layer: usize,
        ids: &[i32],
        mut trace: Option<&mut Vec<Routing>>,
    ) -> Result<(), ReadError> {
        if let Some(t) = trace.as_deref_mut() {
            t.clear();
            t.resize(ids.len(), Routing::default());
        }
        if let Some(Some(l)) = self.layout.layers.get(layer) {
            let entry = l.entry_bytes();
            self.count_demand(layer, entry, ids);
        }
        if !matches!(self.layout.layers.get(layer), Some(Some(_))) {
            return Ok(());
        }
        let t0 = Instant::now();
        let every: Vec<i32>;
        let routed = ids;
        let ids = if self.load_all {
            every = (0..self.layout.n_expert)
                .filter_map(|e| i32::try_from(e).ok())
                .collect();
            &every[..]
        } else {
            ids
        };
        // residency as found before this load, per expert (first routing decides)
        let before: Vec<bool> = match trace {
            Some(_) => (0..self.layout.n_expert)
                .map(|e| self.cache.is_resident(EntryId { layer, expert: e }))
                .collect(),
            None => Vec::new(),
        };
        self.cache.begin_load();
        self.seen_gen += 1;
        let (misses, first_routed) = self.touch_routed(layer, ids);
        // evict before reading: the victims' pages become the misses' pages (never the current
        // load's entries, so nothing this layer computes on is released)
        let victims = self.cache.evict_to_budget();
        self.release(&victims, layer, &misses);
        let Some(Some(experts)) = self.layout.layers.get(layer) else {
            return Ok(());
        };
        let n_tensors = experts.tensors.len();
        let (jobs, served) = self.plan_reads(layer, &misses);
        let t1 = Instant::now();
        self.stats.mgmt_ns += (t1 - t0).as_nanos() as u64;
        self.stats.loads += 1;
        self.stats.experts_read += misses.len() as u64;
        if let Some(t) = trace {
            self.fill_trace(t, routed, &before, &misses, &jobs, n_tensors);
        }
        let (result, t2) = self.read(layer, jobs, &served, t1);
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
        if let Some(peak) = self.peak_resident.as_mut() {
            *peak = (*peak).max(self.arena.resident_bytes());
        }
        Ok(())
    }

    /// Looks up every routed expert of `layer` once (duplicates refresh the LRU only): the misses
    /// in first-routed order, and the first routed expert (for test poisoning).
    fn touch_routed(&mut self, layer: usize, ids: &[i32]) -> (Vec<usize>, Option<usize>) {
        let mut misses: Vec<usize> = Vec::new();
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
            if let Some(Touch::Miss { .. }) = self.cache.touch(id) {
                misses.push(e);
            }
        }
        (misses, first_routed)
    }

    /// The reads of `misses` in `layer`, tensor-major, and for the io log each job's
    /// (projection, expert, requested bytes).
    fn plan_reads(
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
    fn read(
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
        let result = self
            .lanes
            .run_timed(jobs, self.io_log.is_some().then_some(&mut timings));
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
                });
            }
        }
        let t2 = Instant::now();
        if had_reads {
            self.stats.io_ns += (t2 - t1).as_nanos() as u64;
        }
        (result, t2)
    }

    /// Releases the pages of evicted entries: moved to the missed slices of `layer` (page
    /// recycling) as far as the mapping budget allows, dropped otherwise.
    fn release(&mut self, victims: &[EntryId], layer: usize, misses: &[usize]) {
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

    fn apply_poison(&mut self, layer: usize, p: Poison, first_routed: Option<usize>) {
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
