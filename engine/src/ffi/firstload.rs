//! The streamed first load reads the dense bytes, not the file (issue #18, item 2).
//!
//! llama.cpp 0.1.161 maps the model with `MAP_POPULATE` and advises `POSIX_MADV_WILLNEED` over
//! the whole file, so a cold load reads every expert byte too, although streaming replaces the
//! expert pages with anonymous memory right after. There is no public switch for it. The
//! engine binary is linked with `-Wl,--wrap=mmap -Wl,--wrap=posix_madvise` (engine `build.rs`,
//! bin `bmoe-cli` only), which routes llama.cpp's calls through [`__wrap_mmap`] and
//! [`__wrap_posix_madvise`]. While a streamed load is [`arm`]ed, the wrappers drop
//! `MAP_POPULATE` from the mapping of a model shard (matched by device and inode) and skip the
//! `WILLNEED` advice inside it, and mark it `MADV_RANDOM` (no read-around on a fault); the engine then advises only the dense ranges
//! ([`advise_dense`]). Unarmed (plain mode, or any other mapping), both behave exactly as libc.
//! Binaries linked without the wrap (unit tests) never call them: the load reads the file as before, and [`Armed::mappings`] is empty.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a streamed load is in progress (the wrappers' fast path checks only this).
static ARMED: AtomicBool = AtomicBool::new(false);

/// What the wrappers match and record while armed.
struct State {
    /// (device, inode, shard index) of every model shard.
    files: Vec<(u64, u64, usize)>,
    /// (shard index, mapping base, length) of each mapping whose populate was dropped.
    maps: Vec<(usize, usize, usize)>,
    /// `WILLNEED` advices skipped.
    skipped: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    files: Vec::new(),
    maps: Vec::new(),
    skipped: 0,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    // a panic while holding the lock leaves plain data behind: keep using it
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A streamed load in progress; disarms on drop.
#[derive(Debug)]
pub struct Armed {
    _private: (),
}

/// Arms the wrappers for the shards of the model about to be loaded. Shards that cannot be
/// stat'ed are simply not matched (their load reads the file, as without the wrap).
pub fn arm(shards: &[PathBuf]) -> Armed {
    let mut st = state();
    st.files = shards
        .iter()
        .enumerate()
        .filter_map(|(i, p)| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino(), i)))
        .collect();
    st.maps.clear();
    st.skipped = 0;
    ARMED.store(true, Ordering::SeqCst);
    Armed { _private: () }
}

impl Armed {
    /// `WILLNEED` advices skipped inside the model's mappings.
    pub fn skipped_advice(&self) -> usize {
        state().skipped
    }

    /// Where each shard got mapped: (shard index, base address, length).
    pub fn mappings(&self) -> Vec<(usize, usize, usize)> {
        state().maps.clone()
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        ARMED.store(false, Ordering::SeqCst);
    }
}

/// Reads the given file ranges of a mapped shard in and maps them (`base`: where file offset 0
/// is mapped; `len`: the mapping's length), as `MAP_POPULATE` did for the whole file:
/// `MADV_WILLNEED` readahead kept [`DENSE_AHEAD`] windows ahead, then `MADV_POPULATE_READ`
/// (Linux 5.14+; skipped where refused) window by window. Ranges are page-aligned outward and
/// clamped to the mapping. Returns the bytes covered.
///
/// Why windows: the kernel reads at most one readahead window (the larger of the device's
/// `read_ahead_kb` and its optimal I/O size) per `WILLNEED` call and ignores the rest of the
/// range. The rest was then faulted in a page at a time (the mapping is `MADV_RANDOM`): a
/// 2.3 GiB dense set took 33 s to load against 2.3 s for the plain whole-file populate.
pub fn advise_dense(base: usize, len: usize, ranges: &[(u64, u64)]) -> u64 {
    // the engine's page size (vm::PAGE); ffi cannot import vm, which imports ffi
    let page = 4096usize;
    let mut windows: Vec<(usize, usize)> = Vec::new();
    for &(start, end) in ranges {
        let s = (start as usize) / page * page;
        let e = (end as usize).div_ceil(page).saturating_mul(page).min(len);
        let mut w = s;
        while w < e {
            let we = (w + DENSE_WINDOW).min(e);
            windows.push((w, we));
            w = we;
        }
    }
    let ahead = |&(s, e): &(usize, usize)| {
        // SAFETY: [base+s, base+e) lies inside a live read-only file mapping llama.cpp owns
        // for the model's lifetime; the advice only starts reads of its pages.
        unsafe { libc::madvise((base + s) as *mut libc::c_void, e - s, libc::MADV_WILLNEED) }
    };
    let populate = |&(s, e): &(usize, usize), ahead_rc: libc::c_int| -> u64 {
        // SAFETY: as above; POPULATE_READ maps the window's pages (read in by the WILLNEED
        // issued for it earlier), changing no contents.
        let rc = unsafe {
            libc::madvise(
                (base + s) as *mut libc::c_void,
                e - s,
                libc::MADV_POPULATE_READ,
            )
        };
        if rc == 0 || ahead_rc == 0 {
            (e - s) as u64
        } else {
            0
        }
    };
    let mut issued: std::collections::VecDeque<((usize, usize), libc::c_int)> =
        std::collections::VecDeque::with_capacity(DENSE_AHEAD + 1);
    let mut advised = 0u64;
    for w in &windows {
        issued.push_back((*w, ahead(w)));
        if issued.len() > DENSE_AHEAD
            && let Some((done, rc)) = issued.pop_front()
        {
            advised += populate(&done, rc);
        }
    }
    for (done, rc) in issued {
        advised += populate(&done, rc);
    }
    advised
}

/// One `WILLNEED` call's range: at most the smallest readahead window the kernel honours
/// whole on common devices (`read_ahead_kb` 128 with a 256 KiB optimal I/O size, or more).
const DENSE_WINDOW: usize = 256 << 10;

/// Windows of readahead kept in flight ahead of the one being mapped (16 MiB).
const DENSE_AHEAD: usize = 64;

/// Replaces the whole pages inside the given file ranges of a mapped shard (`base`: where file
/// offset 0 is mapped; `len`: the mapping's length) with the zero page, so nothing reads them
/// from the file: the expert tensors, before the capture decode that finds them (its routed
/// experts would otherwise be read, one token cycle — 972 MiB on the 17 GB model). Ranges are
/// page-aligned inward (a page shared with a dense tensor stays file-backed) and clamped to the
/// mapping. The streamer takes these pages over right after. Returns the bytes replaced.
pub fn blank_experts(base: usize, len: usize, ranges: &[(u64, u64)]) -> u64 {
    let page = 4096usize;
    let mut blanked = 0u64;
    for &(start, end) in ranges {
        let s = (start as usize).div_ceil(page).saturating_mul(page);
        let e = ((end as usize) / page * page).min(len);
        if s >= e {
            continue;
        }
        let want = (base + s) as *mut libc::c_void;
        // SAFETY: [base+s, base+e) lies inside a live read-only file mapping llama.cpp owns, and
        // holds expert bytes only; MAP_FIXED swaps those pages for read-only zero pages between
        // the load and the capture decode (nothing computes meanwhile). The capture's outputs
        // are discarded (its KV is cleared) and the streamer refills every expert it routes.
        let p = unsafe {
            sys_mmap(
                want,
                e - s,
                libc::PROT_READ,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == want {
            blanked += (e - s) as u64;
        }
    }
    blanked
}

/// The shard `fd` refers to, if it is one the armed load matches.
fn shard_of(fd: libc::c_int) -> Option<usize> {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut sb: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the local struct only; a bad fd just returns -1.
    if unsafe { libc::fstat(fd, &mut sb) } != 0 {
        return None;
    }
    state()
        .files
        .iter()
        .find(|&&(dev, ino, _)| dev == sb.st_dev && ino == sb.st_ino)
        .map(|&(_, _, i)| i)
}

/// The real `mmap`, by system call (the wrapped binary has no other name for it, and an
/// unwrapped one must not reference `__real_mmap`).
///
/// # Safety
/// As `mmap(2)`.
unsafe fn sys_mmap(
    addr: *mut libc::c_void,
    len: libc::size_t,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    off: libc::off_t,
) -> *mut libc::c_void {
    // SAFETY: forwarded verbatim; the caller upholds mmap's contract. The raw syscall returns
    // -1 and sets errno on failure, which is MAP_FAILED as the libc wrapper returns it.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut libc::c_void }
}

/// `mmap` as llama.cpp sees it in the wrapped engine binary: libc's, except that an armed
/// streamed load maps a model shard without `MAP_POPULATE`.
///
/// # Safety
/// As `mmap(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_mmap(
    addr: *mut libc::c_void,
    len: libc::size_t,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    off: libc::off_t,
) -> *mut libc::c_void {
    let hit = if ARMED.load(Ordering::SeqCst) && flags & libc::MAP_POPULATE != 0 && fd >= 0 {
        shard_of(fd)
    } else {
        None
    };
    let Some(shard) = hit else {
        // SAFETY: the caller's own call, unchanged.
        return unsafe { sys_mmap(addr, len, prot, flags, fd, off) };
    };
    // SAFETY: the caller's call without MAP_POPULATE, which only changes when pages are read.
    let p = unsafe { sys_mmap(addr, len, prot, flags & !libc::MAP_POPULATE, fd, off) };
    if p != libc::MAP_FAILED && off == 0 {
        // a fault on a dense page must not read around it (read_ahead_kb, 8 MiB here, would
        // pull in the neighbouring experts): the dense ranges are read ahead explicitly
        // SAFETY: advice on the mapping just created; RANDOM changes readahead, not contents.
        unsafe { libc::madvise(p, len, libc::MADV_RANDOM) };
        state().maps.push((shard, p as usize, len));
    }
    p
}

/// `posix_madvise` as llama.cpp sees it in the wrapped engine binary: glibc's semantics
/// (returns the error number; `POSIX_MADV_DONTNEED` is a no-op), except that an armed streamed
/// load skips `POSIX_MADV_WILLNEED` inside a model shard's mapping.
///
/// # Safety
/// As `posix_madvise(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_posix_madvise(
    addr: *mut libc::c_void,
    len: libc::size_t,
    advice: libc::c_int,
) -> libc::c_int {
    if ARMED.load(Ordering::SeqCst) && advice == libc::POSIX_MADV_WILLNEED {
        let a = addr as usize;
        let mut st = state();
        if st.maps.iter().any(|&(_, b, l)| a >= b && a < b + l) {
            st.skipped += 1;
            return 0;
        }
    }
    if advice == libc::POSIX_MADV_DONTNEED {
        // glibc ignores it (MADV_DONTNEED would discard data, which POSIX does not allow)
        return 0;
    }
    // SAFETY: the caller's advice on its own range; POSIX_MADV_* equal MADV_* on Linux.
    let rc = unsafe { libc::madvise(addr, len, advice) };
    if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    }
}
