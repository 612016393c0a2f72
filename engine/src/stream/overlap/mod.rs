//! `--overlap`: a layer's expert reads run while its matmuls compute.
//!
//! At `ffn_moe_topk-<il>` the streamer hands the layer's misses to the asynchronous lanes and
//! returns. Two ways to wait for them:
//! - **userfaultfd** ([`OverlapKind::Uffd`]): the expert memory is registered in MISSING mode, so
//!   a compute thread that touches a page not yet read blocks in the kernel until its lane
//!   installs it — page-granular waiting inside llama.cpp's `MUL_MAT_ID`, with no ggml patch. A
//!   handler thread times the faults: `stall` is the union of the intervals during which at least
//!   one compute thread was blocked.
//! - **staged** ([`OverlapKind::Staged`]), where userfaultfd is refused: reads land in place as in
//!   the serial path, ordered by the projection the graph consumes first, and the eval thread
//!   waits for each projection's reads at the node before its matmul (the routing node for the
//!   first, the previous projection's matmul for the others); `stall` is that waiting.
//!
//! Either way the next layer's load first waits for the previous batch to be complete
//! (`drain`), so no job slot or page is reused while a read is in flight.

pub mod book;
mod handler;
pub mod lanes;
pub mod stall;

use book::FaultBook;
use handler::{Handler, SliceWindows};
use lanes::{AsyncJob, AsyncLanes, Batch, Installer, Lend, Shared};
pub use lanes::{SpecDone, SpecUnit};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::io::{JobTiming, ReadError, ShardFile};
use super::layout::ExpertLayout;
use super::recycle::{self, MapBudget, PageRun};
use crate::vm::uffd::{Install, StagingRing, Userfault};
use crate::vm::{Arena, PAGE};

/// Which overlap runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapKind {
    /// userfaultfd, installing pages by move or copy.
    Uffd(Install),
    /// Waits at the projection nodes.
    Staged,
}

impl OverlapKind {
    /// The spelling in `mode:` and the CSV preamble (`overlap_kind=`).
    pub fn as_str(self) -> &'static str {
        match self {
            OverlapKind::Uffd(_) => "uffd",
            OverlapKind::Staged => "staged",
        }
    }
}

/// The overlap machinery of a streamer.
pub struct Overlap {
    kind: OverlapKind,
    lanes: AsyncLanes,
    book: Option<Arc<Mutex<FaultBook>>>,
    uffd: Option<Arc<Userfault>>,
    _handler: Option<Handler>,
    current: Option<Arc<Batch>>,
    /// Groups of the current batch already waited for (staged).
    waited: usize,
    /// Staged: eval-thread waits for a group, ns.
    staged_stall_ns: u64,
    /// Eval-thread waits for the previous batch, ns.
    drain_ns: u64,
    timed: bool,
    /// Batches done since the io log was last taken, with the layer each served.
    finished: Vec<(usize, Arc<Batch>)>,
    current_layer: usize,
    /// Userfaultfd: the mapping budget for lending evicted pages to the ring (`None` once spent
    /// or refused: evicted pages are then dropped).
    lend_budget: Option<MapBudget>,
    ring_len: usize,
}

/// Counters of the overlap (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverlapStats {
    /// Bytes read.
    pub read_bytes: u64,
    /// Σ lanes' busy time, ns.
    pub busy_ns: u64,
    /// Union of stall intervals (staged: eval-thread waits), ns.
    pub stall_ns: u64,
    /// Eval-thread waits for the previous batch, ns.
    pub drain_ns: u64,
}

impl Overlap {
    /// Starts `n_lanes` lanes over `files` into `arena`: through `uffd` when given (the arena
    /// already registered with it), staged otherwise. A failed read raises `abort`; `budget`
    /// bounds the mappings lending evicted pages may create.
    ///
    /// # Errors
    /// A thread or a staging buffer could not be made.
    pub fn start(
        layout: &ExpertLayout,
        arena: Arc<Arena>,
        files: Vec<ShardFile>,
        n_lanes: usize,
        uffd: Option<Userfault>,
        abort: Arc<AtomicBool>,
        budget: Option<MapBudget>,
    ) -> std::io::Result<Self> {
        let windows = SliceWindows::new(layout.tensors().cloned().collect());
        // one slot per job of the largest batch: every expert of the widest layer
        let ring_len = layout
            .layers
            .iter()
            .flatten()
            .map(|l| l.tensors.iter().map(|t| t.stride + 2 * PAGE).sum::<usize>())
            .max()
            .unwrap_or(PAGE)
            * layout.n_expert;
        let (kind, installer, book, uffd) = match uffd {
            Some(u) => {
                let kind = OverlapKind::Uffd(u.install_kind());
                let u = Arc::new(u);
                let book = Arc::new(Mutex::new(FaultBook::new(layout)));
                let spec_slot = windows.max_window().div_ceil(PAGE) * PAGE;
                let installer = Installer::Uffd {
                    uffd: Arc::clone(&u),
                    book: Arc::clone(&book),
                    ring: Arc::new(StagingRing::new(ring_len)?),
                    // a slot per lane, and one for the eval thread (`--prefetch-sync`)
                    spec_ring: Arc::new(StagingRing::new(spec_slot * (n_lanes.clamp(1, 8) + 1))?),
                    spec_slot,
                };
                (kind, installer, Some(book), Some(u))
            }
            None => (OverlapKind::Staged, Installer::InPlace, None, None),
        };
        let shared = Arc::new(Shared::new(files, arena, installer, abort));
        let lanes = AsyncLanes::start(n_lanes, Arc::clone(&shared))?;
        let handler = match (&uffd, &book) {
            (Some(u), Some(b)) => Some(Handler::start(
                Arc::clone(u),
                Arc::clone(b),
                shared,
                windows,
            )?),
            _ => None,
        };
        Ok(Self {
            kind,
            lanes,
            book,
            uffd,
            _handler: handler,
            current: None,
            waited: 0,
            staged_stall_ns: 0,
            drain_ns: 0,
            timed: false,
            finished: Vec::new(),
            current_layer: 0,
            lend_budget: budget.filter(|_| matches!(kind, OverlapKind::Uffd(_))),
            ring_len,
        })
    }

    /// Which overlap runs.
    pub fn kind(&self) -> OverlapKind {
        self.kind
    }

    /// Lanes running.
    pub fn lanes(&self) -> usize {
        self.lanes.lanes()
    }

    /// Times every job for the io trace from now on.
    pub fn time_jobs(&mut self) {
        self.timed = true;
    }

    /// The slice book (userfaultfd only).
    pub fn book(&self) -> Option<&Arc<Mutex<FaultBook>>> {
        self.book.as_ref()
    }

    /// Waits until the current batch is complete (counted as drain).
    pub fn drain(&mut self) {
        let Some(b) = self.current.take() else { return };
        let t0 = Instant::now();
        self.lanes.wait_all(&b);
        self.drain_ns += t0.elapsed().as_nanos() as u64;
        if self.timed {
            self.finished.push((self.current_layer, b));
        }
    }

    /// Hands a layer's jobs (groups `0..n_groups`, in consumption order) to the lanes; the
    /// previous batch is drained first. Under userfaultfd each job gets a slot in the staging
    /// ring, and the pages of the evicted slices (`donors`) are lent to the slots as far as they
    /// and the mapping budget go (the rest are dropped), so reads land in pages that already
    /// exist instead of freshly allocated, zeroed ones.
    pub fn submit(
        &mut self,
        layer: usize,
        mut jobs: Vec<AsyncJob>,
        donors: &[PageRun],
        n_groups: usize,
    ) {
        self.drain();
        let mut lends = vec![Vec::new(); jobs.len()];
        if matches!(self.kind, OverlapKind::Uffd(_)) {
            self.plan_lends(&mut jobs, donors, &mut lends);
        }
        if jobs.is_empty() {
            return;
        }
        self.current_layer = layer;
        self.waited = 0;
        self.current = Some(self.lanes.submit(jobs, lends, n_groups, self.timed));
    }

    /// Gives every job a ring slot and plans which donor pages fill which slot; donor pages no
    /// slot takes are dropped now.
    fn plan_lends(&mut self, jobs: &mut [AsyncJob], donors: &[PageRun], lends: &mut [Vec<Lend>]) {
        let mut off = 0usize;
        let mut slots = Vec::with_capacity(jobs.len());
        for j in jobs.iter_mut() {
            let len = j.read.len.div_ceil(PAGE) * PAGE;
            if off + len > self.ring_len {
                // more jobs than the ring was sized for cannot happen (one per expert slice);
                // wrap rather than overrun, after the slots before are drained
                off = 0;
            }
            j.slot = off;
            slots.push(PageRun { addr: off, len });
            off += len;
        }
        let arena = &self.lanes.shared().arena;
        let leftover = match self.lend_budget.as_mut() {
            Some(budget) => {
                let plan = recycle::plan(donors, &slots, budget);
                for m in &plan.moves {
                    // a move's destination is a slot offset: find its job
                    if let Some(i) = slots
                        .iter()
                        .position(|s| m.dst >= s.addr && m.dst < s.addr + s.len)
                    {
                        lends[i].push(Lend {
                            src: m.src,
                            ring_off: m.dst,
                            len: m.len,
                        });
                    }
                }
                plan.leftover
            }
            None => donors.to_vec(),
        };
        for r in leftover {
            // a failed madvise only leaves memory resident; correctness is unaffected
            let _ = arena.drop_pages(r.addr, r.len);
        }
    }

    /// Staged: waits until the current batch's groups up to `group` are in (a no-op under
    /// userfaultfd, whose waits happen in the compute threads). Returns whether it waited.
    pub fn wait_for_group(&mut self, group: usize, before_wait: &mut dyn FnMut()) -> bool {
        if self.kind != OverlapKind::Staged {
            return false;
        }
        let Some(b) = self.current.as_ref() else {
            return false;
        };
        let t0 = Instant::now();
        let mut slept = false;
        while self.waited <= group {
            if !slept {
                before_wait();
                slept = true;
            }
            self.lanes.wait_group(b, self.waited);
            self.waited += 1;
        }
        self.staged_stall_ns += t0.elapsed().as_nanos() as u64;
        slept
    }

    /// Staged: [`Self::wait_for_group`] when the current batch serves `layer`.
    pub fn wait_for_group_of(&mut self, layer: usize, group: usize, before_wait: &mut dyn FnMut()) {
        if self.current.is_some() && self.current_layer == layer {
            self.wait_for_group(group, before_wait);
        }
    }

    /// Cumulative counters; a stall open now counts up to now.
    pub fn stats(&self) -> OverlapStats {
        let shared = self.lanes.shared();
        let stall_ns = match &self.book {
            Some(b) => b
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .stall_ns(Instant::now()),
            None => self.staged_stall_ns,
        };
        OverlapStats {
            read_bytes: shared.read_bytes(),
            busy_ns: shared.busy_ns(),
            stall_ns,
            drain_ns: self.drain_ns,
        }
    }

    /// The first read failure of the run, once.
    pub fn take_error(&self) -> Option<ReadError> {
        self.lanes.shared().take_error()
    }

    /// Whether a read has failed (later loads issue nothing).
    pub fn failed(&self) -> bool {
        self.lanes.shared().failed()
    }

    /// The jobs, timings and start sequence numbers of the batches finished since the last
    /// call (io trace).
    pub fn take_finished(&mut self) -> Vec<FinishedBatch> {
        std::mem::take(&mut self.finished)
            .into_iter()
            .map(|(layer, b)| FinishedBatch {
                layer,
                jobs: b.jobs().to_vec(),
                timings: b.timings(),
                seqs: b.seqs(),
            })
            .collect()
    }

    /// Queues speculative reads behind every real batch (a lane takes them when idle).
    pub fn queue_spec(&self, units: Vec<SpecUnit>) {
        self.lanes.queue_spec(units);
    }

    /// Cancels the speculative units no lane has started, returning them.
    pub fn cancel_spec(&self) -> Vec<SpecUnit> {
        self.lanes.cancel_spec()
    }

    /// The speculative units finished since the last call.
    pub fn take_spec_done(&self) -> Vec<SpecDone> {
        self.lanes.take_spec_done()
    }

    /// Route-ahead's adopt mode: completes `layer`'s queued speculative units (moved to the
    /// queue's front; the calling thread reads alongside the lanes) and waits for every unit in
    /// flight. Returns how many of `layer`'s units it completed. Nothing is cancelled.
    pub fn adopt_spec(&self, layer: usize) -> usize {
        self.lanes.adopt_spec(layer)
    }

    /// Waits for the speculative units being read (`queued`: and the queued ones). Under the
    /// staged overlap the eval thread's wait counts as stall, as its group waits do.
    pub fn wait_spec(&mut self, queued: bool) {
        let t0 = Instant::now();
        self.lanes.wait_spec(queued);
        if self.kind == OverlapKind::Staged {
            self.staged_stall_ns += t0.elapsed().as_nanos() as u64;
        }
    }

    /// `--prefetch-sync`: reads the queued speculative units on the eval thread and waits for
    /// the ones a lane took.
    pub fn run_spec_here(&mut self) {
        let t0 = Instant::now();
        self.lanes.run_spec_here();
        if self.kind == OverlapKind::Staged {
            self.staged_stall_ns += t0.elapsed().as_nanos() as u64;
        }
    }

    /// Test knob: a lane's speculative unit waits for the next load or wait (see
    /// [`lanes::Shared::set_spec_hold`]).
    pub fn set_spec_hold(&self, hold: bool) {
        self.lanes.shared().set_spec_hold(hold);
    }

    /// Faults on slices no read was scheduled for (userfaultfd; 0 when all is well).
    pub fn unscheduled_faults(&self) -> u64 {
        self.book.as_ref().map_or(0, |b| {
            b.lock().unwrap_or_else(|p| p.into_inner()).unscheduled()
        })
    }
}

/// A finished real batch, for the io trace.
pub struct FinishedBatch {
    /// The layer it served.
    pub layer: usize,
    /// Its jobs.
    pub jobs: Vec<AsyncJob>,
    /// Per job, its timing.
    pub timings: Vec<JobTiming>,
    /// Per job, its start's sequence number.
    pub seqs: Vec<u64>,
}

impl Drop for Overlap {
    fn drop(&mut self) {
        self.drain();
        // no install may reach the arena once it leaves userfaultfd
        self.lanes.cancel_spec();
        self.lanes.wait_spec(false);
        if let Some(u) = &self.uffd {
            self.lanes.shared().arena.unregister(u);
        }
    }
}
