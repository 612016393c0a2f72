//! Expert reads: per-shard files (O_DIRECT verified once, buffered fallback) and the I/O lanes
//! that drain a batch of reads in parallel, the decoding thread acting as lane 0.

use super::layout::{DIRECT_ALIGN, ReadJob};
use crate::vm::{AlignedBuf, Arena};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// A failed or short expert read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// File offset of the expert slice.
    pub offset: u64,
    /// Bytes requested.
    pub len: usize,
    /// Bytes that arrived.
    pub got: usize,
    /// OS error number, if the read failed outright.
    pub errno: Option<i32>,
}

impl ReadError {
    fn describe(&self) -> String {
        match self.errno {
            Some(e) => format!(
                "expert read failed: {} at offset {} ({} bytes): {} (errno {e})",
                self.path.display(),
                self.offset,
                self.len,
                std::io::Error::from_raw_os_error(e)
            ),
            None => format!(
                "short expert read: {} at offset {}: got {} of {} bytes (errno 0: end of file — was the model file truncated or replaced?)",
                self.path.display(),
                self.offset,
                self.got,
                self.len
            ),
        }
    }
}

/// One shard opened for expert reads.
#[derive(Debug)]
pub struct ShardFile {
    path: PathBuf,
    buffered: File,
    direct: Option<File>,
}

/// How a shard ended up being read.
#[derive(Debug)]
pub enum DirectOutcome {
    /// O_DIRECT was not asked for.
    NotRequested,
    /// O_DIRECT verified against a buffered read.
    Direct,
    /// O_DIRECT refused or returned wrong data: buffered, with the reason.
    Fallback(DirectRefusal),
}

impl ShardFile {
    /// Opens `path`; with `want_direct`, also an O_DIRECT descriptor, verified once by reading one
    /// aligned block through both paths and comparing.
    pub fn open(path: &Path, want_direct: bool) -> std::io::Result<(Self, DirectOutcome)> {
        let buffered = File::open(path)?;
        if !want_direct {
            return Ok((
                Self {
                    path: path.to_path_buf(),
                    buffered,
                    direct: None,
                },
                DirectOutcome::NotRequested,
            ));
        }
        let outcome = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Err(e) => Err(DirectRefusal::Open(e)),
            Ok(direct) => verify_direct(&buffered, &direct).map(|()| direct),
        };
        Ok(match outcome {
            Ok(direct) => (
                Self {
                    path: path.to_path_buf(),
                    buffered,
                    direct: Some(direct),
                },
                DirectOutcome::Direct,
            ),
            Err(why) => (
                Self {
                    path: path.to_path_buf(),
                    buffered,
                    direct: None,
                },
                DirectOutcome::Fallback(why),
            ),
        })
    }

    /// Whether reads use O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The buffered descriptor (refills).
    pub fn buffered(&self) -> &File {
        &self.buffered
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads `job`'s window into the arena, in place.
    pub(crate) fn execute(&self, arena: &Arena, job: &ReadJob) -> Result<usize, ReadError> {
        let file = self.direct.as_ref().unwrap_or(&self.buffered);
        let err = |got: usize, errno: Option<i32>| ReadError {
            path: self.path.clone(),
            offset: job.slice_offset,
            len: job.need - (job.slice_offset - job.offset) as usize,
            got,
            errno,
        };
        match arena.read_into(file, job.addr, job.len, job.offset) {
            Ok(n) if n >= job.need => Ok(n),
            Ok(n) => Err(err(
                n.saturating_sub((job.slice_offset - job.offset) as usize),
                None,
            )),
            Err(e) => Err(err(0, Some(e.raw_os_error().unwrap_or(libc::EIO)))),
        }
    }
}

/// Why a shard is read through the page cache instead of with O_DIRECT.
#[derive(Debug, thiserror::Error)]
pub enum DirectRefusal {
    /// The kernel or the file system refused the flag.
    #[error("O_DIRECT open refused ({0})")]
    Open(#[source] std::io::Error),
    /// The file is too small to check.
    #[error("file smaller than one O_DIRECT block")]
    TooSmall,
    /// No aligned buffer for the check.
    #[error("cannot allocate an aligned buffer")]
    NoBuffer,
    /// The O_DIRECT read of the check failed.
    #[error("O_DIRECT read failed ({0})")]
    Read(#[source] std::io::Error),
    /// The buffered side of the check failed (or the file's size could not be read).
    #[error("{0}")]
    Buffered(#[source] std::io::Error),
    /// The two reads disagree.
    #[error("O_DIRECT returns wrong data on this storage")]
    WrongData,
}

impl ShardFile {
    /// Reads `job`'s window into the ring slot at `slot` (page aligned, so O_DIRECT accepts
    /// it); at least the slice must arrive.
    pub(crate) fn read_to_ring(
        &self,
        ring: &crate::vm::uffd::StagingRing,
        slot: usize,
        job: &ReadJob,
    ) -> Result<usize, ReadError> {
        let file = self.direct.as_ref().unwrap_or(&self.buffered);
        let lead = (job.slice_offset - job.offset) as usize;
        let err = |got: usize, errno: Option<i32>| ReadError {
            path: self.path.clone(),
            offset: job.slice_offset,
            len: job.need - lead,
            got,
            errno,
        };
        match ring.read_into(file, slot, job.len, job.offset) {
            Ok(n) if n >= job.need => Ok(n),
            Ok(n) => Err(err(n.saturating_sub(lead), None)),
            Err(e) => Err(err(0, Some(e.raw_os_error().unwrap_or(libc::EIO)))),
        }
    }
}

fn verify_direct(buffered: &File, direct: &File) -> Result<(), DirectRefusal> {
    let size = buffered.metadata().map_err(DirectRefusal::Buffered)?.len();
    if size < DIRECT_ALIGN {
        return Err(DirectRefusal::TooSmall);
    }
    let at = (size / 2) / DIRECT_ALIGN * DIRECT_ALIGN;
    let mut a = AlignedBuf::zeroed(DIRECT_ALIGN as usize).ok_or(DirectRefusal::NoBuffer)?;
    let mut b = vec![0u8; DIRECT_ALIGN as usize];
    let na = direct
        .read_at(a.as_mut_slice(), at)
        .map_err(DirectRefusal::Read)?;
    let nb = buffered
        .read_at(&mut b, at)
        .map_err(DirectRefusal::Buffered)?;
    if na != nb || a.as_mut_slice()[..na] != b[..nb] {
        return Err(DirectRefusal::WrongData);
    }
    Ok(())
}

/// How one job of a timed batch went (`--io-trace`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobTiming {
    /// The lane that read it (0 = the calling thread).
    pub lane: u32,
    /// Wall time of the read.
    pub latency_ns: u64,
    /// Bytes read (0 on an error).
    pub bytes: u64,
}

/// A job's timing slot: written once by the lane that claimed the job, so no lock is needed.
#[derive(Default)]
struct TimingSlot {
    lane: AtomicU64,
    latency_ns: AtomicU64,
    bytes: AtomicU64,
}

struct Batch {
    jobs: Vec<ReadJob>,
    next: AtomicUsize,
    done: AtomicUsize,
    bytes: AtomicU64,
    error: Mutex<Option<ReadError>>,
    /// One slot per job when timed, empty otherwise.
    timings: Vec<TimingSlot>,
}

impl Batch {
    fn drain(&self, files: &[ShardFile], arena: &Arena, lane: usize) {
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            let Some(job) = self.jobs.get(i) else { return };
            let t0 = (!self.timings.is_empty()).then(std::time::Instant::now);
            let result = match files.get(job.shard) {
                Some(f) => f.execute(arena, job),
                None => Err(ReadError {
                    path: PathBuf::from("<no such shard>"),
                    offset: job.offset,
                    len: job.len,
                    got: 0,
                    errno: None,
                }),
            };
            if let (Some(t0), Some(slot)) = (t0, self.timings.get(i)) {
                slot.lane.store(lane as u64, Ordering::Relaxed);
                slot.latency_ns
                    .store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                let got = result.as_ref().map_or(0, |&n| n as u64);
                slot.bytes.store(got, Ordering::Relaxed);
            }
            match result {
                Ok(n) => {
                    self.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(e);
                }
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[derive(Default)]
struct PoolState {
    batch: Option<Arc<Batch>>,
    generation: u64,
    shutdown: bool,
}

struct Shared {
    state: Mutex<PoolState>,
    work: Condvar,
    finished: Condvar,
    files: Vec<ShardFile>,
    arena: Arc<Arena>,
}

/// The I/O lanes: `n - 1` worker threads plus the calling thread.
pub struct Lanes {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n: usize,
}

impl Lanes {
    /// Starts `n` lanes (clamped to 1..=8) reading `files` into `arena`.
    pub fn new(n: usize, files: Vec<ShardFile>, arena: Arc<Arena>) -> Self {
        let n = n.clamp(1, 8);
        let shared = Arc::new(Shared {
            state: Mutex::new(PoolState::default()),
            work: Condvar::new(),
            finished: Condvar::new(),
            files,
            arena,
        });
        let workers = (1..n)
            .map(|lane| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("bmoe-io-{lane}"))
                    .spawn(move || worker(&shared, lane))
                    .ok()
            })
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        let n = workers.len() + 1;
        Self { shared, workers, n }
    }

    /// Number of lanes actually running (including the caller).
    pub fn lanes(&self) -> usize {
        self.n
    }

    /// Reads every job, in parallel when there are lanes and jobs to share; returns the bytes
    /// read (aligned windows included) or the first error. With `timings`, it is refilled with
    /// one [`JobTiming`] per job, in job order (each lane writes the slots of the jobs it
    /// claimed; no lock on the read path).
    pub fn run_timed(
        &self,
        jobs: Vec<ReadJob>,
        timings: Option<&mut Vec<JobTiming>>,
    ) -> Result<u64, ReadError> {
        if jobs.is_empty() {
            if let Some(t) = timings {
                t.clear();
            }
            return Ok(0);
        }
        let njobs = jobs.len();
        let slots = match timings {
            Some(_) => (0..njobs).map(|_| TimingSlot::default()).collect(),
            None => Vec::new(),
        };
        let batch = Arc::new(Batch {
            jobs,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            error: Mutex::new(None),
            timings: slots,
        });
        let parallel = self.n > 1 && njobs > 1;
        if parallel {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.batch = Some(Arc::clone(&batch));
            st.generation += 1;
            self.shared.work.notify_all();
        }
        batch.drain(&self.shared.files, &self.shared.arena, 0);
        if parallel {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            while batch.done.load(Ordering::Acquire) < njobs {
                st = self
                    .shared
                    .finished
                    .wait(st)
                    .unwrap_or_else(|p| p.into_inner());
            }
            st.batch = None;
        }
        if let Some(t) = timings {
            t.clear();
            t.extend(batch.timings.iter().map(|s| JobTiming {
                lane: s.lane.load(Ordering::Relaxed) as u32,
                latency_ns: s.latency_ns.load(Ordering::Relaxed),
                bytes: s.bytes.load(Ordering::Relaxed),
            }));
        }
        let err = batch.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        match err {
            Some(e) => Err(e),
            None => Ok(batch.bytes.load(Ordering::Relaxed)),
        }
    }
}

fn worker(shared: &Shared, lane: usize) {
    let mut seen = 0u64;
    loop {
        let batch = {
            let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            while !st.shutdown && st.generation == seen {
                st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.shutdown {
                return;
            }
            seen = st.generation;
            st.batch.clone()
        };
        if let Some(b) = batch {
            b.drain(&shared.files, &shared.arena, lane);
            // take the lock so the caller cannot miss the wake-up between its check and wait
            let _st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            shared.finished.notify_all();
        }
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.shutdown = true;
            self.shared.work.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl ShardFile {
    /// Reads `len` bytes at `offset` into `arena` at `addr` (whole pages, so O_DIRECT accepts
    /// them); anything short of `len` is an error naming the file and offset — a row-gathered
    /// table must never be left with bytes that were not read.
    pub(crate) fn read_pages(
        &self,
        arena: &Arena,
        addr: usize,
        len: usize,
        offset: u64,
    ) -> Result<usize, ReadError> {
        let file = self.direct.as_ref().unwrap_or(&self.buffered);
        let err = |got: usize, errno: Option<i32>| ReadError {
            path: self.path.clone(),
            offset,
            len,
            got,
            errno,
        };
        match arena.read_into(file, addr, len, offset) {
            Ok(n) if n >= len => Ok(n),
            Ok(n) => Err(err(n, None)),
            Err(e) => Err(err(0, Some(e.raw_os_error().unwrap_or(libc::EIO)))),
        }
    }
}
