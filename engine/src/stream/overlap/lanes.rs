//! The asynchronous read lanes of `--overlap`: every lane is a worker thread (the eval thread
//! only submits a layer's batch and returns), and a finished read is either installed through
//! userfaultfd (which wakes the compute threads waiting on its pages) or was written in place
//! (the staged overlap, where the eval thread waits for each projection's group before its
//! matmul).
//!
//! A failed or short read never leaves zeros to compute on silently: the lane records the
//! error, raises the context's abort flag, and (under userfaultfd) installs 0xFF pages so that
//! every waiting thread wakes and the graph stops at its next node; every later job of the run
//! does the same without reading.
//!
//! Speculative reads (`--prefetch` under `--overlap`) wait in a low-priority queue of units (one
//! cache entry's slices each). A lane takes a unit only when every job of the real batch has
//! been claimed, and before each slice of its unit it checks again, serving a real batch that
//! arrived meanwhile first — so a real read never waits behind speculation beyond the one slice a
//! lane is already reading. Every job start takes a sequence number under one lock, so the io
//! trace can list reads in the order they started.

use super::book::{FaultBook, SliceId};
use crate::stream::io::{JobTiming, ReadError, ShardFile};
use crate::stream::layout::ReadJob;
use crate::vm::Arena;
use crate::vm::uffd::{StagingRing, Userfault};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

/// What a job puts into its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// The file's bytes.
    File,
    /// 0xFF bytes (test poisoning of a routed expert).
    Poison,
}

/// One slice to bring in.
#[derive(Debug, Clone, Copy)]
pub struct AsyncJob {
    /// The window read (page aligned under userfaultfd).
    pub read: ReadJob,
    /// The slice it holds.
    pub slice: SliceId,
    /// The projection group it belongs to (the order its matmul consumes it in).
    pub group: usize,
    /// The tensor's index among its layer's expert tensors, file order (the io trace's `proj`).
    pub proj: u8,
    /// What goes in.
    pub fill: Fill,
    /// Under userfaultfd: the job's slot in the staging ring (byte offset).
    pub slot: usize,
}

/// Pages an evicted slice lends to a job's ring slot before its read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lend {
    /// The evicted pages (inside the arena).
    pub src: usize,
    /// Where in the ring they go.
    pub ring_off: usize,
    /// Bytes (whole pages).
    pub len: usize,
}

#[derive(Default)]
struct Slot {
    lane: AtomicU64,
    latency_ns: AtomicU64,
    bytes: AtomicU64,
    seq: AtomicU64,
}

/// One speculative cache entry's reads: its slices, in the order its matmuls consume them.
#[derive(Debug, Clone)]
pub struct SpecUnit {
    /// The entry's layer.
    pub layer: usize,
    /// The entry's expert.
    pub expert: usize,
    /// Who guessed it (opaque to the lanes; the streamer's predictor tag).
    pub tag: u8,
    /// Its slices' reads.
    pub jobs: Vec<AsyncJob>,
}

/// A speculative unit the lanes finished.
#[derive(Debug, Clone)]
pub struct SpecDone {
    /// What was read.
    pub unit: SpecUnit,
    /// Per job, its timing.
    pub timings: Vec<JobTiming>,
    /// Per job, its start's sequence number (comparable with [`Batch::seqs`]).
    pub seqs: Vec<u64>,
    /// Every read succeeded.
    pub ok: bool,
}

/// One layer's reads.
pub struct Batch {
    jobs: Vec<AsyncJob>,
    /// Per job, the pages lent to its slot.
    lends: Vec<Vec<Lend>>,
    next: AtomicUsize,
    done: AtomicUsize,
    group_left: Vec<AtomicUsize>,
    slots: Vec<Slot>,
}

impl Batch {
    /// Whether it holds no job.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The jobs, in submission order.
    pub fn jobs(&self) -> &[AsyncJob] {
        &self.jobs
    }

    /// Each job's timing, in job order (after the batch is done).
    pub fn timings(&self) -> Vec<JobTiming> {
        self.slots
            .iter()
            .map(|s| JobTiming {
                lane: s.lane.load(Ordering::Relaxed) as u32,
                latency_ns: s.latency_ns.load(Ordering::Relaxed),
                bytes: s.bytes.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Each job's start sequence number, in job order (after the batch is done; timed batches).
    pub fn seqs(&self) -> Vec<u64> {
        self.slots
            .iter()
            .map(|s| s.seq.load(Ordering::Relaxed))
            .collect()
    }

    /// Whether every job is done.
    fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.jobs.len()
    }

    /// Whether every job has been taken by a lane.
    fn claimed(&self) -> bool {
        self.next.load(Ordering::Acquire) >= self.jobs.len()
    }
}

/// How finished reads reach the arena.
pub enum Installer {
    /// Through userfaultfd, with the book that times the waits.
    Uffd {
        /// The descriptor the arena is registered with.
        uffd: Arc<Userfault>,
        /// The slices' states.
        book: Arc<Mutex<FaultBook>>,
        /// The jobs' staging slots.
        ring: Arc<StagingRing>,
        /// Speculative reads' staging: one slot of `spec_slot` bytes per lane, apart from the
        /// real batch's slots, which a speculative read may run alongside.
        spec_ring: Arc<StagingRing>,
        /// Bytes of one lane's speculative slot (the largest window).
        spec_slot: usize,
    },
    /// Written in place (the staged overlap).
    InPlace,
}

#[derive(Default)]
struct PoolState {
    batch: Option<Arc<Batch>>,
    generation: u64,
    shutdown: bool,
    /// Speculative units not yet taken by a lane.
    spec: VecDeque<SpecUnit>,
    /// Speculative units a lane is reading.
    spec_in_flight: usize,
    /// Bumped by every event that ends a hold ([`Shared::set_spec_hold`]).
    releases: u64,
    /// Threads in [`AsyncLanes::wait_spec`]: no lane holds a unit while one waits.
    spec_waiters: usize,
}

/// What the lanes share.
pub struct Shared {
    state: Mutex<PoolState>,
    work: Condvar,
    progress: Mutex<()>,
    progressed: Condvar,
    /// The opened shards.
    pub files: Vec<ShardFile>,
    /// The expert memory.
    pub arena: Arc<Arena>,
    /// How finished reads are installed.
    pub installer: Installer,
    abort: Arc<AtomicBool>,
    error: Mutex<Option<ReadError>>,
    failed: AtomicBool,
    read_bytes: AtomicU64,
    busy_ns: AtomicU64,
    /// The next job start's sequence number; taken together with a batch job's claim.
    order: Mutex<u64>,
    spec_done: Mutex<Vec<SpecDone>>,
    /// Test knob: a lane holds the speculative unit it took until the eval thread's next load
    /// or wait (see [`Shared::set_spec_hold`]).
    spec_hold: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Lanes' state over `files` and `arena`; a failure raises `abort`.
    pub fn new(
        files: Vec<ShardFile>,
        arena: Arc<Arena>,
        installer: Installer,
        abort: Arc<AtomicBool>,
    ) -> Self {
        Self {
            state: Mutex::new(PoolState::default()),
            work: Condvar::new(),
            progress: Mutex::new(()),
            progressed: Condvar::new(),
            files,
            arena,
            installer,
            abort,
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
            read_bytes: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            order: Mutex::new(0),
            spec_done: Mutex::new(Vec::new()),
            spec_hold: AtomicBool::new(false),
        }
    }

    /// Records the run's first read failure and stops the graph.
    pub fn fail(&self, e: ReadError) {
        lock(&self.error).get_or_insert(e);
        self.failed.store(true, Ordering::SeqCst);
        self.abort.store(true, Ordering::SeqCst);
    }

    /// Whether a read has failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// The first read failure, once.
    pub fn take_error(&self) -> Option<ReadError> {
        lock(&self.error).take()
    }

    /// Bytes read so far (aligned windows included).
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::Relaxed)
    }

    /// Σ lanes' busy time (read and install), ns.
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns.load(Ordering::Relaxed)
    }

    /// Test knob: with `hold`, a lane that takes a speculative unit starts reading it only
    /// after the eval thread's next load starts or it waits for speculation. Whatever else is
    /// queued behind it then meets that load still queued, whatever the machine's load: the
    /// cancel and adopt paths run on every load, not only when compute outruns the lanes.
    /// Nothing waits on a held unit before its release: a unit is for a later layer than the
    /// load that queued it, and every wait for speculation releases first.
    pub fn set_spec_hold(&self, hold: bool) {
        self.spec_hold.store(hold, Ordering::Relaxed);
    }

    /// Ends every hold (the eval thread reached a load or a wait). Call with the state locked.
    /// Without the knob only the counter moves: no lane is woken on every load for nothing.
    fn release_held(&self, st: &mut PoolState) {
        st.releases += 1;
        if self.spec_hold.load(Ordering::Relaxed) {
            self.work.notify_all();
        }
    }

    /// The staging slot a job uses: its own ring slot, or (speculative) its lane's slot.
    fn slot_of<'a>(
        ring: &'a StagingRing,
        spec_ring: &'a StagingRing,
        spec_slot: usize,
        job: &AsyncJob,
        spec_lane: Option<usize>,
    ) -> (&'a StagingRing, usize) {
        match spec_lane {
            Some(l) => (spec_ring, l * spec_slot),
            None => (ring, job.slot),
        }
    }

    /// Reads (or poisons) one job's window and installs it; returns the bytes read.
    /// `spec_lane`: a speculative read on that lane (staged in the lane's own slot).
    fn execute(&self, job: &AsyncJob, spec_lane: Option<usize>) -> Result<u64, ReadError> {
        let file = self.files.get(job.read.shard).ok_or_else(|| ReadError {
            path: "<no such shard>".into(),
            offset: job.read.offset,
            len: job.read.len,
            got: 0,
            errno: None,
        })?;
        let poison = job.fill == Fill::Poison || self.failed();
        match &self.installer {
            Installer::Uffd {
                uffd,
                book,
                ring,
                spec_ring,
                spec_slot,
            } => {
                let (ring, slot) = Self::slot_of(ring, spec_ring, *spec_slot, job, spec_lane);
                let len = job.read.len.div_ceil(crate::vm::PAGE) * crate::vm::PAGE;
                let io_err = |errno: i32| ReadError {
                    path: file.path().to_path_buf(),
                    offset: job.read.slice_offset,
                    len: job.read.len,
                    got: 0,
                    errno: Some(errno),
                };
                let n = if poison {
                    ring.fill(slot, len, 0xFF)
                        .map_err(|e| io_err(e.raw_os_error().unwrap_or(libc::EIO)))?;
                    0
                } else {
                    let n = file.read_to_ring(ring, slot, &job.read)?;
                    // past the file's end: bytes no tensor owns, but never stale ones
                    ring.fill(slot + n.min(len), len - n.min(len), 0)
                        .map_err(|e| io_err(e.raw_os_error().unwrap_or(libc::EIO)))?;
                    n
                };
                self.arena
                    .install_ring(uffd, job.read.addr, ring, slot, len)
                    .map_err(|e| io_err(e.raw_os_error().unwrap_or(libc::EIO)))?;
                lock(book).installed(job.slice, Instant::now());
                Ok(n as u64)
            }
            Installer::InPlace => {
                if poison {
                    let _ = self.arena.fill(job.read.addr, job.read.len, 0xFF);
                    Ok(0)
                } else {
                    file.execute(&self.arena, &job.read).map(|n| n as u64)
                }
            }
        }
    }

    /// After a failure: the job's pages hold 0xFF so its waiters wake (the graph is aborting).
    fn release_waiters(&self, job: &AsyncJob, spec_lane: Option<usize>) {
        if let Installer::Uffd {
            uffd,
            book,
            ring,
            spec_ring,
            spec_slot,
        } = &self.installer
        {
            let (ring, slot) = Self::slot_of(ring, spec_ring, *spec_slot, job, spec_lane);
            let len = job.read.len.div_ceil(crate::vm::PAGE) * crate::vm::PAGE;
            let _ = ring.fill(slot, len, 0xFF);
            let _ = self
                .arena
                .install_ring(uffd, job.read.addr, ring, slot, len);
            lock(book).installed(job.slice, Instant::now());
        }
    }

    /// Takes the evicted pages lent to a job's slot (a failed move drops them instead).
    fn take_lends(&self, lends: &[Lend]) {
        let Installer::Uffd { ring, .. } = &self.installer else {
            return;
        };
        for l in lends {
            if self.arena.lend(l.src, ring, l.ring_off, l.len).is_err() {
                let _ = self.arena.drop_pages(l.src, l.len);
            }
        }
    }

    fn drain(&self, batch: &Batch, lane: usize) {
        loop {
            // the claim and its sequence number together: a speculative start that finds the
            // batch claimed is numbered after every job of it
            let (i, seq) = {
                let mut o = lock(&self.order);
                let i = batch.next.fetch_add(1, Ordering::AcqRel);
                if i >= batch.jobs.len() {
                    return;
                }
                *o += 1;
                (i, *o - 1)
            };
            let Some(job) = batch.jobs.get(i) else { return };
            let t0 = Instant::now();
            if let Some(l) = batch.lends.get(i) {
                self.take_lends(l);
            }
            let (got, ns) = self.run_job(job, None, t0);
            if let Some(s) = batch.slots.get(i) {
                s.lane.store(lane as u64, Ordering::Relaxed);
                s.latency_ns.store(ns, Ordering::Relaxed);
                s.bytes.store(got, Ordering::Relaxed);
                s.seq.store(seq, Ordering::Relaxed);
            }
            if let Some(g) = batch.group_left.get(job.group) {
                g.fetch_sub(1, Ordering::AcqRel);
            }
            batch.done.fetch_add(1, Ordering::AcqRel);
            // take the lock so a waiter cannot miss the wake-up between its check and its wait
            let _p = lock(&self.progress);
            self.progressed.notify_all();
        }
    }

    /// Runs one job (a failure stops the run and wakes its waiters); the bytes read and the
    /// busy time.
    /// `t0`: when the lane started on it (lending pages counts as busy too).
    fn run_job(&self, job: &AsyncJob, spec_lane: Option<usize>, t0: Instant) -> (u64, u64) {
        let got = match self.execute(job, spec_lane) {
            Ok(n) => n,
            Err(e) => {
                self.fail(e);
                self.release_waiters(job, spec_lane);
                0
            }
        };
        let ns = t0.elapsed().as_nanos() as u64;
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        self.read_bytes.fetch_add(got, Ordering::Relaxed);
        (got, ns)
    }

    /// The sequence number for a speculative read about to start, or the real batch that is
    /// not finished (serve its jobs nobody took, else wait for it). A speculative install must
    /// not run beside the batch's jobs: a job first lends the pages of slices evicted for it out
    /// of the arena, and a guess at such a slice would find those pages still in place, install
    /// nothing, call the slice present — and the lend would then take its pages away, leaving a
    /// fault on it unanswered.
    fn claim_spec(&self) -> Result<u64, Arc<Batch>> {
        let st = lock(&self.state);
        let mut o = lock(&self.order);
        if let Some(b) = st.batch.as_ref().filter(|b| !b.finished()) {
            return Err(Arc::clone(b));
        }
        *o += 1;
        Ok(*o - 1)
    }

    /// Waits until every job of `batch` is done.
    fn wait_finished(&self, batch: &Batch) {
        let mut p = lock(&self.progress);
        while !batch.finished() {
            p = self.progressed.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Reads one speculative unit on `lane`, yielding to real batches between its slices.
    fn run_spec(&self, unit: SpecUnit, lane: usize) {
        let mut timings = Vec::with_capacity(unit.jobs.len());
        let mut seqs = Vec::with_capacity(unit.jobs.len());
        for job in &unit.jobs {
            let seq = loop {
                match self.claim_spec() {
                    Ok(s) => break s,
                    Err(b) if !b.claimed() => self.drain(&b, lane),
                    Err(b) => self.wait_finished(&b),
                }
            };
            let (bytes, latency_ns) = self.run_job(job, Some(lane), Instant::now());
            timings.push(JobTiming {
                lane: lane as u32,
                latency_ns,
                bytes,
            });
            seqs.push(seq);
        }
        let ok = !self.failed();
        lock(&self.spec_done).push(SpecDone {
            unit,
            timings,
            seqs,
            ok,
        });
        lock(&self.state).spec_in_flight -= 1;
        let _p = lock(&self.progress);
        self.progressed.notify_all();
    }
}

/// The worker threads.
pub struct AsyncLanes {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl AsyncLanes {
    /// Starts `n` lanes (1..=8).
    pub fn start(n: usize, shared: Arc<Shared>) -> std::io::Result<Self> {
        let mut workers = Vec::new();
        for lane in 0..n.clamp(1, 8) {
            let s = Arc::clone(&shared);
            let h = std::thread::Builder::new()
                .name(format!("bmoe-io-{lane}"))
                .spawn(move || worker(&s, lane))?;
            workers.push(h);
        }
        Ok(Self { shared, workers })
    }

    /// Lanes running.
    pub fn lanes(&self) -> usize {
        self.workers.len()
    }

    /// The lanes' shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Hands `jobs` (groups `0..n_groups`; `lends[j]` the pages lent to job `j`'s slot) to the
    /// lanes and returns at once.
    pub fn submit(
        &self,
        jobs: Vec<AsyncJob>,
        lends: Vec<Vec<Lend>>,
        n_groups: usize,
        timed: bool,
    ) -> Arc<Batch> {
        let mut left = vec![0usize; n_groups];
        for j in &jobs {
            if let Some(l) = left.get_mut(j.group) {
                *l += 1;
            }
        }
        let slots = if timed {
            (0..jobs.len()).map(|_| Slot::default()).collect()
        } else {
            Vec::new()
        };
        let batch = Arc::new(Batch {
            jobs,
            lends,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            group_left: left.into_iter().map(AtomicUsize::new).collect(),
            slots,
        });
        if !batch.is_empty() {
            let mut st = lock(&self.shared.state);
            st.batch = Some(Arc::clone(&batch));
            st.generation += 1;
            // a new batch wakes every lane anyway, and ends a hold like a load does
            st.releases += 1;
            self.shared.work.notify_all();
        }
        batch
    }

    /// Waits until every job of `group` in `batch` is done.
    pub fn wait_group(&self, batch: &Batch, group: usize) {
        let Some(left) = batch.group_left.get(group) else {
            return;
        };
        let mut p = lock(&self.shared.progress);
        while left.load(Ordering::Acquire) > 0 {
            p = self
                .shared
                .progressed
                .wait(p)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Queues speculative units behind every real batch.
    pub fn queue_spec(&self, units: Vec<SpecUnit>) {
        if units.is_empty() {
            return;
        }
        let mut st = lock(&self.shared.state);
        st.spec.extend(units);
        self.shared.work.notify_all();
    }

    /// Takes back the speculative units no lane has started (a real load cancels them).
    pub fn cancel_spec(&self) -> Vec<SpecUnit> {
        let mut st = lock(&self.shared.state);
        self.shared.release_held(&mut st);
        st.spec.drain(..).collect()
    }

    /// The speculative units finished since the last call.
    pub fn take_spec_done(&self) -> Vec<SpecDone> {
        std::mem::take(&mut *lock(&self.shared.spec_done))
    }

    /// Reads the queued speculative units on the calling thread (`--prefetch-sync`), numbered as
    /// the lane after the last worker (its own staging slot), alongside any worker that takes
    /// some; then waits for those.
    pub fn run_spec_here(&self) {
        let me = self.workers.len();
        loop {
            let unit = {
                let mut st = lock(&self.shared.state);
                let u = st.spec.pop_front();
                if u.is_some() {
                    st.spec_in_flight += 1;
                }
                u
            };
            let Some(u) = unit else { break };
            self.shared.run_spec(u, me);
        }
        self.wait_spec(true);
    }

    /// Route-ahead's adopt mode: moves `layer`'s queued units to the queue's front (the rest
    /// keep their order), reads them on the calling thread as the lane after the last while
    /// idle lanes take them from the front too, then waits until no unit is in flight. Returns
    /// how many of `layer`'s units the queue held.
    pub fn adopt_spec(&self, layer: usize) -> usize {
        let n = {
            let mut st = lock(&self.shared.state);
            self.shared.release_held(&mut st);
            let (mut mine, rest): (VecDeque<SpecUnit>, VecDeque<SpecUnit>) =
                st.spec.drain(..).partition(|u| u.layer == layer);
            let n = mine.len();
            mine.extend(rest);
            st.spec = mine;
            n
        };
        let me = self.workers.len();
        loop {
            let unit = {
                let mut st = lock(&self.shared.state);
                if st.spec.front().is_some_and(|u| u.layer == layer) {
                    st.spec_in_flight += 1;
                    st.spec.pop_front()
                } else {
                    None
                }
            };
            let Some(u) = unit else { break };
            self.shared.run_spec(u, me);
        }
        self.wait_spec(false);
        n
    }

    /// Waits until no speculative unit is being read (and, with `queued`, none waits either).
    pub fn wait_spec(&self, queued: bool) {
        {
            let mut st = lock(&self.shared.state);
            st.spec_waiters += 1;
            self.shared.release_held(&mut st);
        }
        let busy = || {
            let st = lock(&self.shared.state);
            st.spec_in_flight > 0 || (queued && !st.spec.is_empty())
        };
        let mut p = lock(&self.shared.progress);
        while busy() {
            p = self
                .shared
                .progressed
                .wait(p)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(p);
        lock(&self.shared.state).spec_waiters -= 1;
    }

    /// Waits until every job of `batch` is done.
    pub fn wait_all(&self, batch: &Batch) {
        self.shared.wait_finished(batch);
    }
}

/// What a lane does next.
enum Work {
    Real(Option<Arc<Batch>>),
    Spec(SpecUnit),
}

fn worker(shared: &Shared, lane: usize) {
    let mut seen = 0u64;
    loop {
        let work = {
            let mut st = lock(&shared.state);
            loop {
                if st.shutdown {
                    return;
                }
                if st.generation != seen {
                    seen = st.generation;
                    break Work::Real(st.batch.clone());
                }
                // this lane has served the current batch; speculation only once all of it is
                // taken (run_spec checks again before every slice)
                if st.batch.as_ref().is_none_or(|b| b.claimed())
                    && let Some(u) = st.spec.pop_front()
                {
                    st.spec_in_flight += 1;
                    if shared.spec_hold.load(Ordering::Relaxed) {
                        let taken_at = st.releases;
                        while st.releases == taken_at && st.spec_waiters == 0 && !st.shutdown {
                            st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
                        }
                    }
                    break Work::Spec(u);
                }
                st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        match work {
            Work::Real(Some(b)) => shared.drain(&b, lane),
            Work::Real(None) => {}
            Work::Spec(u) => shared.run_spec(u, lane),
        }
    }
}

impl Drop for AsyncLanes {
    fn drop(&mut self) {
        {
            let mut st = lock(&self.shared.state);
            st.shutdown = true;
            self.shared.work.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
