//! Expert streaming: the layout of the experts, the cache policy, the reads, and the
//! [`Streamer`] that ties them together at each routing.

pub mod cache;
pub mod io;
pub mod layout;
mod load;
mod load_async;
pub mod overlap;
mod pages;
pub mod pause;
pub mod prefill;
pub mod recycle;
pub mod rows;
pub mod speculate;
mod start;
pub mod temporal;

use cache::ExpertCache;
use io::{Lanes, ReadError};
use layout::ExpertLayout;
use overlap::{Overlap, OverlapKind};
use recycle::MapBudget;
use std::collections::HashMap;
use std::sync::Arc;

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
    /// `--overlap`: reads run while the layer computes.
    pub overlap: Option<OverlapRequest>,
}

/// What `--overlap` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverlapRequest {
    /// `--overlap-kind staged`: skip userfaultfd and wait at the projection nodes.
    pub force_staged: bool,
}

/// Cumulative streaming counters (per-token figures are deltas of these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Bytes read from flash (aligned windows included).
    pub read_bytes: u64,
    /// Serial: wall time blocked in the read phase of loads. Overlap: Σ lanes' busy time (can
    /// exceed the wall time).
    pub io_ns: u64,
    /// Overlap: the union of the intervals compute was blocked on a streamed expert.
    pub stall_ns: u64,
    /// Overlap: the eval thread's waits for the previous layer's batch.
    pub drain_ns: u64,
    /// Route-ahead under overlap: loads waiting for their own committed speculative reads to
    /// complete (adoption; inside `mgmt_ns`).
    pub adopt_ns: u64,
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
    /// `--prefetch`: slice bytes read speculatively (also in `read_bytes`, as aligned windows).
    pub spec_read_bytes: u64,
    /// `--prefetch`: experts whose speculative read completed.
    pub spec_experts: u64,
    /// `--prefetch`: of those, how many a later routing hit.
    pub spec_useful: u64,
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
    /// A speculative (`--prefetch`) read: the io trace's `spec=1`.
    pub spec: bool,
}

/// The io-trace record of an overlapped job that served `layer`.
fn io_record(
    layer: usize,
    j: &overlap::lanes::AsyncJob,
    t: &io::JobTiming,
    spec: bool,
) -> IoRecord {
    IoRecord {
        layer: layer as u32,
        expert: j.slice.expert as u32,
        proj: j.proj,
        lane: t.lane,
        offset: j.read.offset,
        req_bytes: (j.read.need - (j.read.slice_offset - j.read.offset) as usize) as u64,
        read_bytes: t.bytes,
        latency_ns: t.latency_ns,
        spec,
    }
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
    /// The overlap that runs, with `--overlap`.
    pub overlap: Option<OverlapKind>,
}

/// How reads reach the arena.
enum Reader {
    /// The serial lanes: the eval thread reads as lane 0 and waits.
    Serial(Lanes),
    /// `--overlap`.
    Overlap(Box<Overlap>),
}

/// Streams routed experts into place at each routing decision.
pub struct Streamer {
    layout: ExpertLayout,
    cache: ExpertCache,
    arena: Arc<Arena>,
    reader: Reader,
    direct: Vec<bool>,
    stats: StreamStats,
    seen: Vec<u64>,
    seen_gen: u64,
    poison: Option<Poison>,
    load_all: bool,
    last_layer: Option<usize>,
    /// `--io-trace`: every read since the last [`Streamer::take_io_log`].
    io_log: Option<Vec<IoRecord>>,
    /// Reads the last [`Streamer::load_layer`] issued (its entries in the io log).
    load_reads: usize,
    /// Page recycling's mapping budget; `None` once disabled (env, or a failed move).
    recycle: Option<MapBudget>,
    /// [`PEAK_RESIDENT_ENV`]: the largest resident arena bytes seen after a load.
    peak_resident: Option<u64>,
    /// When a layer's wait is long enough to put the compute threads to sleep.
    pause: pause::PausePolicy,
    /// Per layer, its tensors (file-order indices) in the order the graph consumes them.
    consume_order: Vec<Vec<usize>>,
    /// Staged overlap: the consuming node after which a group must be in, by node name.
    stage_nodes: HashMap<String, (usize, usize)>,
    /// `--prefetch K`: the temporal predictor; `None` when off.
    spec: Option<speculate::Speculation>,
}

impl Drop for Streamer {
    fn drop(&mut self) {
        if let Some(peak) = self.peak_resident {
            eprintln!("bmoe: test: peak expert-resident bytes {peak}");
        }
        self.print_spec_counts();
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
    /// The overlap's threads or staging buffers could not be made.
    #[error("cannot start the overlap's read lanes: {0}")]
    Lanes(std::io::Error),
}
impl Streamer {
    /// The bound layout.
    pub fn layout(&self) -> &ExpertLayout {
        &self.layout
    }

    /// Cumulative counters (under overlap, a stall open now counts up to now).
    pub fn stats(&self) -> StreamStats {
        let c = self.cache.counters();
        let mut s = StreamStats {
            lookups: c.lookups,
            hits: c.hits,
            evictions: c.evictions,
            rereads: c.rereads,
            spec_experts: c.spec_experts,
            spec_useful: c.spec_useful,
            resident_bytes: self.cache.resident_bytes(),
            ..self.stats
        };
        if let Some(o) = self.overlap() {
            let os = o.stats();
            s.read_bytes = os.read_bytes;
            s.io_ns = os.busy_ns;
            s.stall_ns = os.stall_ns;
            s.drain_ns = os.drain_ns;
        }
        s
    }

    /// The overlap machinery, with `--overlap`.
    pub fn overlap(&self) -> Option<&Overlap> {
        match &self.reader {
            Reader::Overlap(o) => Some(o),
            Reader::Serial(_) => None,
        }
    }

    fn overlap_mut(&mut self) -> Option<&mut Overlap> {
        match &mut self.reader {
            Reader::Overlap(o) => Some(o),
            Reader::Serial(_) => None,
        }
    }

    /// Learns, from the capture decode, the order in which each layer's matmuls consume its
    /// expert tensors: `consumers` are (layer, consuming node's name, tensor name) in graph
    /// order. Reads are issued in that order, and the staged overlap waits before each.
    pub fn set_consumers(&mut self, consumers: &[(usize, String, String)]) {
        let mut order: Vec<Vec<usize>> = vec![Vec::new(); self.layout.layers.len()];
        let mut nodes: Vec<Vec<String>> = vec![Vec::new(); self.layout.layers.len()];
        for (il, node, tensor) in consumers {
            let Some(Some(l)) = self.layout.layers.get(*il) else {
                continue;
            };
            let Some(p) = l.tensors.iter().position(|t| &t.name == tensor) else {
                continue;
            };
            if !order[*il].contains(&p) {
                order[*il].push(p);
                nodes[*il].push(node.clone());
            }
        }
        for (il, l) in self.layout.layers.iter().enumerate() {
            let Some(l) = l else { continue };
            // tensors no node was seen consuming go last, in file order
            for p in 0..l.tensors.len() {
                if !order[il].contains(&p) {
                    order[il].push(p);
                }
            }
        }
        self.stage_nodes.clear();
        for (il, names) in nodes.iter().enumerate() {
            // after consumer k's matmul, group k+1 must be in; nothing waits after the last
            for (k, name) in names.iter().enumerate() {
                if k + 1 < order[il].len() {
                    self.stage_nodes.insert(name.clone(), (il, k + 1));
                }
            }
        }
        self.consume_order = order;
    }

    /// Staged overlap: the (layer, group) whose reads must be in once node `name` is computed.
    pub fn stage_after(&self, name: &str) -> Option<(usize, usize)> {
        match self.overlap().map(Overlap::kind) {
            Some(OverlapKind::Staged) => self.stage_nodes.get(name).copied(),
            _ => None,
        }
    }

    /// Staged overlap: waits until `layer`'s reads of `group` are in (`before_wait` first, when
    /// there is anything to wait for).
    pub fn wait_group(&mut self, layer: usize, group: usize, before_wait: &mut dyn FnMut()) {
        if let Some(o) = self.overlap_mut() {
            o.wait_for_group_of(layer, group, before_wait);
        }
    }

    /// After a decode: every real read done, finished speculative reads integrated, the io log
    /// collected — in the order the reads started, speculative ones (`spec=1`) among the real.
    pub fn finish_decode(&mut self) {
        let logging = self.io_log.is_some();
        let Some(o) = self.overlap_mut() else { return };
        o.drain();
        self.collect_speculative();
        if !logging {
            return;
        }
        let finished = self
            .overlap_mut()
            .map(|o| o.take_finished())
            .unwrap_or_default();
        let mut rows: Vec<(u64, IoRecord)> = Vec::new();
        for b in finished {
            for ((j, t), &seq) in b.jobs.iter().zip(&b.timings).zip(&b.seqs) {
                rows.push((seq, io_record(b.layer, j, t, false)));
            }
        }
        rows.extend(self.take_spec_rows());
        rows.sort_by_key(|r| r.0);
        let log = self.io_log.get_or_insert_with(Vec::new);
        log.extend(rows.into_iter().map(|r| r.1));
    }

    /// The first read failure of an overlapped load, once (the serial path returns its own).
    pub fn take_async_error(&mut self) -> Option<ReadError> {
        self.overlap().and_then(Overlap::take_error)
    }

    /// Starts recording every read (for `--io-trace`).
    pub fn log_io(&mut self) {
        self.io_log.get_or_insert_with(Vec::new);
        if let Some(o) = self.overlap_mut() {
            o.time_jobs();
        }
    }

    /// How many reads the last [`Streamer::load_layer`] issued: its entries in the io log, which
    /// lists every load's reads in load order (`--io-trace` matches them to their tokens).
    pub fn last_load_reads(&self) -> usize {
        self.load_reads
    }

    /// The reads recorded since the last call (empty when not recording).
    pub fn take_io_log(&mut self) -> Vec<IoRecord> {
        self.io_log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Whether expert `expert` of `layer` is in memory now (before any load of it): what the
    /// routing edits ask before dropping or substituting a slot.
    pub fn is_resident(&self, layer: usize, expert: i32) -> bool {
        usize::try_from(expert)
            .is_ok_and(|e| self.cache.is_resident(cache::EntryId { layer, expert: e }))
    }

    /// Arms test poisoning.
    pub fn set_poison(&mut self, p: Option<Poison>) {
        self.poison = p;
    }
}
