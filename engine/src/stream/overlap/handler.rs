//! The userfaultfd handler thread: reads the kernel's fault messages, opens a stall interval for
//! each fault on a slice that is on its way (the lane's install closes it), and reads the slice
//! itself when no read was scheduled for it — so no compute thread can ever wait for a page
//! nobody will bring (that would hang the graph), and no page is ever zero-filled.

use super::book::{FaultBook, FaultKind, SliceId};
use super::lanes::Shared;
use crate::stream::layout::{ExpertTensor, ReadJob};
use crate::vm::uffd::{Fault, StagingRing, Userfault};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// How long one wait for fault messages lasts before the thread checks whether to stop.
const POLL_MS: i32 = 20;

/// The running handler.
pub struct Handler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Where every slice lives, for the reads the handler does itself.
pub struct SliceWindows {
    tensors: Vec<ExpertTensor>,
}

impl SliceWindows {
    /// The layout's tensors, in [`SliceId::tensor`] order.
    pub fn new(tensors: Vec<ExpertTensor>) -> Self {
        Self { tensors }
    }

    /// The page-aligned window that holds `s`.
    pub fn window(&self, s: SliceId) -> Option<ReadJob> {
        let t = self.tensors.get(s.tensor)?;
        Some(ReadJob::plan(
            t.shard,
            t.offset + (s.expert * t.stride) as u64,
            t.addr + s.expert * t.stride,
            t.stride,
            true,
        ))
    }

    /// The largest window.
    pub fn max_window(&self) -> usize {
        self.tensors
            .iter()
            .map(|t| t.stride + 2 * crate::vm::PAGE)
            .max()
            .unwrap_or(crate::vm::PAGE)
    }
}

impl Handler {
    /// Starts the thread.
    pub fn start(
        uffd: Arc<Userfault>,
        book: Arc<Mutex<FaultBook>>,
        shared: Arc<Shared>,
        windows: SliceWindows,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let staging = StagingRing::new(windows.max_window())?;
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("bmoe-faults".into())
            .spawn(move || run(&uffd, &book, &shared, &windows, &staging, &s))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

fn run(
    uffd: &Userfault,
    book: &Mutex<FaultBook>,
    shared: &Shared,
    windows: &SliceWindows,
    staging: &StagingRing,
    stop: &AtomicBool,
) {
    let mut faults: Vec<Fault> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if uffd.read_faults(POLL_MS, &mut faults).is_err() {
            // the descriptor is unusable: waiting threads would hang, so stop the graph
            shared.fail(crate::stream::io::ReadError {
                path: "<userfaultfd>".into(),
                offset: 0,
                len: 0,
                got: 0,
                errno: Some(libc::EIO),
            });
            return;
        }
        for f in &faults {
            let kind = {
                let mut b = book.lock().unwrap_or_else(|p| p.into_inner());
                b.fault(f.address, Instant::now())
            };
            match kind {
                FaultKind::Unscheduled(s) => serve(uffd, book, shared, windows, staging, s),
                // a fault outside every slice cannot be expert memory: wake it to re-fault
                // rather than leave it waiting (it cannot happen with a registered arena)
                FaultKind::Foreign => uffd.wake(f.address, crate::vm::PAGE),
                FaultKind::Waits(_) | FaultKind::Settled => {}
            }
        }
    }
}

/// Reads and installs a slice no lane was asked for.
fn serve(
    uffd: &Userfault,
    book: &Mutex<FaultBook>,
    shared: &Shared,
    windows: &SliceWindows,
    staging: &StagingRing,
    s: SliceId,
) {
    let Some(job) = windows.window(s) else { return };
    let len = job.len.div_ceil(crate::vm::PAGE) * crate::vm::PAGE;
    let read = shared
        .files
        .get(job.shard)
        .map(|f| f.read_to_ring(staging, 0, &job));
    let _ = match read {
        Some(Ok(n)) => staging.fill(n.min(len), len - n.min(len), 0),
        Some(Err(e)) => {
            shared.fail(e);
            staging.fill(0, len, 0xFF)
        }
        None => staging.fill(0, len, 0xFF),
    };
    let _ = shared.arena.install_ring(uffd, job.addr, staging, 0, len);
    book.lock()
        .unwrap_or_else(|p| p.into_inner())
        .installed(s, Instant::now());
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
