//! Virtual-memory and raw-I/O primitives: the only place besides `ffi` with `unsafe`.
//!
//! An [`Arena`] takes over the pages under llama.cpp's expert tensors: it replaces them with
//! private anonymous memory (`MAP_FIXED|MAP_PRIVATE|MAP_ANONYMOUS`) so the file layout — and
//! every tensor pointer llama.cpp holds — stays valid, then reads expert bytes straight into
//! place and drops them with `MADV_DONTNEED`. Every operation checks that its range lies inside
//! a span the arena remapped, so a bad offset can never scribble over foreign memory.

pub mod sigbus;
pub mod uffd;

use crate::ffi::WeightRef;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `pread` into `[addr, addr+len)` until `len` bytes or the end of the file (short reads and
/// interruptions resumed); the bytes read.
///
/// # Safety
/// `[addr, addr+len)` must be writable memory the caller owns, with no Rust reference into it.
unsafe fn pread_all(file: &File, addr: usize, len: usize, offset: u64) -> io::Result<usize> {
    let mut done = 0usize;
    while done < len {
        let off = i64::try_from(offset + done as u64).map_err(|_| foreign(addr, len))?;
        // SAFETY: as the caller guarantees; the kernel writes into the range directly.
        let r = unsafe {
            libc::pread(
                file.as_raw_fd(),
                (addr + done) as *mut libc::c_void,
                len - done,
                off,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            break;
        }
        done += r as usize;
    }
    Ok(done)
}

/// `mremap(src → dst, MREMAP_FIXED | MREMAP_DONTUNMAP)` of `len` bytes: the destination then
/// holds the source's pages (whatever was mapped there is released) and the source stays mapped
/// but empty.
///
/// # Safety
/// Both ranges must be whole, non-overlapping pages of private-anonymous mappings the caller
/// owns, with no Rust reference into either and no thread reading the source's contents.
unsafe fn remap_dontunmap(src: usize, dst: usize, len: usize) -> io::Result<()> {
    // SAFETY: as the caller guarantees; MREMAP_FIXED replaces exactly the destination pages.
    let p = unsafe {
        libc::mremap(
            src as *mut libc::c_void,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP,
            dst as *mut libc::c_void,
        )
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else if p as usize != dst {
        Err(io::Error::other(format!(
            "mremap placed {len} bytes at {:#x}, not {dst:#x}",
            p as usize
        )))
    } else {
        Ok(())
    }
}

/// The page size the arena rounds to.
pub const PAGE: usize = 4096;

/// The system page size.
pub fn system_page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(PAGE)
}

/// A page-aligned address range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PageSpan {
    /// First byte (page aligned).
    pub start: usize,
    /// One past the last byte (page aligned).
    pub end: usize,
}

impl PageSpan {
    /// The pages covering a weight tensor (rounded outward).
    pub fn covering(w: &WeightRef) -> Self {
        Self {
            start: w.addr & !(PAGE - 1),
            end: (w.addr + w.bytes).div_ceil(PAGE) * PAGE,
        }
    }
}

/// Merges overlapping or touching spans.
pub fn merge_spans(mut spans: Vec<PageSpan>) -> Vec<PageSpan> {
    spans.sort();
    let mut out: Vec<PageSpan> = Vec::with_capacity(spans.len());
    for s in spans {
        match out.last_mut() {
            Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
            _ => out.push(s),
        }
    }
    out
}

/// Expert memory taken over from llama.cpp's file mapping.
///
/// Dropping the arena does not unmap anything: the spans stay part of llama.cpp's mapping, which
/// unmaps them with the model. The arena must therefore not be used after the model is freed.
#[derive(Debug)]
pub struct Arena {
    spans: Vec<PageSpan>,
}

/// Error of an arena operation on a range it does not own.
fn foreign(addr: usize, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("range {addr:#x}+{len} is outside the expert arena"),
    )
}

impl Arena {
    /// Replaces the pages under `weights` with zero-filled anonymous memory. Returns the arena
    /// and its merged spans; the caller refills bytes of the spans that belong to other tensors.
    pub fn take_over(weights: &[WeightRef]) -> io::Result<Self> {
        let spans = merge_spans(weights.iter().map(PageSpan::covering).collect());
        for s in &spans {
            let want = s.start as *mut libc::c_void;
            // SAFETY: each span covers pages of a live weight tensor inside llama.cpp's read-only
            // file mapping (WeightRef is only built from graph tensors). MAP_FIXED replaces
            // exactly those pages; nothing computes while this runs (between decodes).
            let p = unsafe {
                libc::mmap(
                    want,
                    s.end - s.start,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p != want {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Self { spans })
    }

    /// The merged page spans.
    pub fn spans(&self) -> &[PageSpan] {
        &self.spans
    }

    fn check(&self, addr: usize, len: usize) -> io::Result<()> {
        let end = addr.checked_add(len).ok_or_else(|| foreign(addr, len))?;
        if self.spans.iter().any(|s| addr >= s.start && end <= s.end) {
            Ok(())
        } else {
            Err(foreign(addr, len))
        }
    }

    /// Reads up to `len` bytes of `file` at `offset` into `addr`, looping over short reads until
    /// `len` bytes or end of file. Returns the bytes read. With an O_DIRECT file, `addr`,
    /// `offset` and `len` must be block aligned.
    pub fn read_into(
        &self,
        file: &File,
        addr: usize,
        len: usize,
        offset: u64,
    ) -> io::Result<usize> {
        self.check(addr, len)?;
        // SAFETY: [addr, addr+len) lies inside a span we mapped read-write (checked above); no
        // Rust reference to that memory exists, and no graph reads the slice while it is read.
        unsafe { pread_all(file, addr, len, offset) }
    }

    /// Releases the whole pages inside `[addr, addr+len)` (rounded inward, so a page shared
    /// with a neighbouring slice is kept). They read back as zeros.
    pub fn drop_pages(&self, addr: usize, len: usize) -> io::Result<()> {
        self.check(addr, len)?;
        let p0 = addr.div_ceil(PAGE) * PAGE;
        let p1 = (addr + len) & !(PAGE - 1);
        if p1 <= p0 {
            return Ok(());
        }
        // SAFETY: whole pages inside our anonymous span; MADV_DONTNEED on private anonymous
        // memory only discards contents (zero-fill on next touch).
        let r = unsafe { libc::madvise(p0 as *mut libc::c_void, p1 - p0, libc::MADV_DONTNEED) };
        if r != 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Moves the physical pages under `[src, src+len)` to `[dst, dst+len)` (`mremap` with
    /// `MREMAP_FIXED|MREMAP_DONTUNMAP`): the destination then holds the source's (already
    /// faulted) pages — whatever was mapped there is released — and the source stays mapped
    /// but empty, reading back as zeros like [`Arena::drop_pages`] leaves it. No page is
    /// freed, allocated or zero-filled, which is what makes recycling cheaper than a drop
    /// followed by a fresh fault. Both ranges must be whole pages inside the arena and must not
    /// overlap.
    ///
    /// Each move into a range that is not already its own mapping splits the arena's mapping,
    /// so callers must bound how many such moves they make (`vm.max_map_count`). Fails with
    /// `EINVAL` on kernels older than 5.7 (no `MREMAP_DONTUNMAP`).
    pub fn move_pages(&self, src: usize, dst: usize, len: usize) -> io::Result<()> {
        self.check(src, len)?;
        self.check(dst, len)?;
        let aligned = |x: usize| x.is_multiple_of(PAGE);
        if len == 0 || !aligned(src) || !aligned(dst) || !aligned(len) {
            return Err(foreign(dst, len));
        }
        if src < dst + len && dst < src + len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("page move {src:#x} → {dst:#x} ({len} bytes) overlaps itself"),
            ));
        }
        // SAFETY: both ranges are whole pages of spans this arena mapped private-anonymous and
        // read-write (checked above) and do not overlap; no Rust reference points into either
        // range and no graph computes during a load.
        unsafe { remap_dontunmap(src, dst, len) }
    }

    /// Bytes of the arena's pages resident in RAM now (`mincore` over every span): what the
    /// expert memory really occupies, as opposed to what the cache accounts for.
    pub fn resident_bytes(&self) -> u64 {
        let page = system_page_size();
        let mut total = 0u64;
        for s in &self.spans {
            let n = (s.end - s.start).div_ceil(page);
            let mut v = vec![0u8; n];
            // SAFETY: [start, end) is a span this arena mapped (page aligned); mincore only reads
            // the page tables and writes one byte per page into `v`, which has room for all.
            let r = unsafe {
                libc::mincore(
                    s.start as *mut libc::c_void,
                    s.end - s.start,
                    v.as_mut_ptr(),
                )
            };
            if r == 0 {
                total += v.iter().filter(|&&b| b & 1 == 1).count() as u64 * page as u64;
            }
        }
        total
    }

    /// Keeps the kernel from backing the arena with transparent huge pages. Needed before
    /// userfaultfd takes the arena over: a huge page faulted in by a refill would make hundreds
    /// of expert pages present (as zeros) that userfaultfd then never reports.
    pub fn no_huge_pages(&self) -> io::Result<()> {
        for s in &self.spans {
            // SAFETY: a span this arena mapped; MADV_NOHUGEPAGE only changes a VMA flag.
            let r = unsafe {
                libc::madvise(
                    s.start as *mut libc::c_void,
                    s.end - s.start,
                    libc::MADV_NOHUGEPAGE,
                )
            };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Overwrites `[addr, addr+len)` with `byte` (test poisoning).
    pub fn fill(&self, addr: usize, len: usize, byte: u8) -> io::Result<()> {
        self.check(addr, len)?;
        // SAFETY: inside our read-write span (checked); no Rust reference aliases it.
        unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) };
        Ok(())
    }

    /// A copy of `[addr, addr+len)` (verification).
    pub fn copy_out(&self, addr: usize, len: usize) -> io::Result<Vec<u8>> {
        self.check(addr, len)?;
        let mut v = vec![0u8; len];
        // SAFETY: inside our readable span (checked); v is a distinct allocation.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
        Ok(v)
    }
}

/// How many more memory mappings this process may create before `vm.max_map_count`, less
/// `margin` kept for everything else (allocators, thread stacks, llama.cpp). `None` when
/// `/proc` cannot be read (then callers must not create mappings on their own account).
pub fn mapping_headroom(margin: usize) -> Option<usize> {
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let used = std::fs::read("/proc/self/maps")
        .ok()?
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    Some(max.saturating_sub(used).saturating_sub(margin))
}

/// A page-aligned heap buffer (for O_DIRECT probes).
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to [`PAGE`].
    pub fn zeroed(len: usize) -> Option<Self> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), PAGE).ok()?;
        // SAFETY: layout has non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        std::ptr::NonNull::new(p).map(|ptr| Self { ptr, len })
    }

    /// The bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of len bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Ok(layout) = std::alloc::Layout::from_size_align(self.len.max(1), PAGE) {
            // SAFETY: allocated in `zeroed` with this same layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

/// Process-wide counters sampled around each decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessSample {
    /// Major page faults so far.
    pub majflt: u64,
    /// CPU time of all threads so far, in nanoseconds.
    pub cpu_ns: u64,
}

/// Of the page-aligned addresses `pages`, how many are resident in RAM (`mincore`), as
/// `(resident, probed)`; pages that are not mapped are skipped. `None` when none could be probed.
pub fn resident_pages(pages: &[usize]) -> Option<(usize, usize)> {
    let page = system_page_size();
    let (mut resident, mut probed) = (0usize, 0usize);
    for &addr in pages {
        let mut v: u8 = 0;
        // SAFETY: mincore reads only the kernel's page tables for [addr, addr+page) and writes
        // one byte per page (exactly one here) into `v`; an unmapped or unaligned address makes
        // it fail with ENOMEM/EINVAL without touching any memory.
        let r = unsafe { libc::mincore(addr as *mut libc::c_void, page, &mut v) };
        if r == 0 {
            probed += 1;
            resident += usize::from(v & 1);
        }
    }
    (probed > 0).then_some((resident, probed))
}

/// Samples major faults (getrusage) and process CPU time (CLOCK_PROCESS_CPUTIME_ID).
pub fn process_sample() -> ProcessSample {
    // SAFETY: both calls write only into the zero-initialised structs passed by pointer.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        let majflt = if libc::getrusage(libc::RUSAGE_SELF, &mut ru) == 0 {
            ru.ru_majflt as u64
        } else {
            0
        };
        let mut ts: libc::timespec = std::mem::zeroed();
        let cpu_ns = if libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) == 0 {
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        } else {
            0
        };
        ProcessSample { majflt, cpu_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_round_outward_and_merge() {
        let w = |addr, bytes| WeightRef {
            name: String::new(),
            addr,
            bytes,
            n_expert: 1,
            expert_stride: bytes,
        };
        assert_eq!(
            PageSpan::covering(&w(4096 + 10, 100)),
            PageSpan {
                start: 4096,
                end: 8192
            }
        );
        let merged = merge_spans(vec![
            PageSpan::covering(&w(3 * PAGE + 5, 10)),
            PageSpan::covering(&w(PAGE, PAGE)),
            PageSpan::covering(&w(2 * PAGE, 100)),
        ]);
        assert_eq!(
            merged,
            vec![PageSpan {
                start: PAGE,
                end: 4 * PAGE
            }]
        );
    }

    #[test]
    fn arena_refuses_foreign_ranges_and_drops_inward() {
        // a private anonymous page range we own stands in for a tensor
        let mut backing = AlignedBuf::zeroed(4 * PAGE).unwrap();
        let base = backing.as_mut_slice().as_mut_ptr() as usize;
        let w = WeightRef {
            name: "t".into(),
            addr: base,
            bytes: 4 * PAGE,
            n_expert: 4,
            expert_stride: PAGE,
        };
        let arena = Arena::take_over(&[w]).unwrap();
        assert!(arena.fill(base + 4 * PAGE, 1, 0).is_err());
        arena.fill(base, 4 * PAGE, 7).unwrap();
        arena.drop_pages(base + 10, 2 * PAGE).unwrap(); // only page 1 is wholly inside
        let bytes = arena.copy_out(base, 4 * PAGE).unwrap();
        assert!(bytes[..PAGE].iter().all(|&b| b == 7));
        assert!(bytes[PAGE..2 * PAGE].iter().all(|&b| b == 0));
        assert!(bytes[2 * PAGE..].iter().all(|&b| b == 7));
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &[1u8, 2, 3]).unwrap();
        assert_eq!(
            arena.read_into(&f, base, 100, 0).unwrap(),
            3,
            "stops at end of file"
        );
        assert_eq!(&arena.copy_out(base, 4).unwrap(), &[1, 2, 3, 7]);
    }

    #[test]
    fn move_pages_carries_contents_and_empties_the_source() {
        let mut backing = AlignedBuf::zeroed(8 * PAGE).unwrap();
        let base = backing.as_mut_slice().as_mut_ptr() as usize;
        let w = WeightRef {
            name: "t".into(),
            addr: base,
            bytes: 8 * PAGE,
            n_expert: 8,
            expert_stride: PAGE,
        };
        let arena = Arena::take_over(&[w]).unwrap();
        arena.fill(base, 2 * PAGE, 7).unwrap();
        arena.fill(base + 4 * PAGE, 2 * PAGE, 9).unwrap();
        // move pages 0-1 over pages 4-5 (which held 9s: released)
        arena.move_pages(base, base + 4 * PAGE, 2 * PAGE).unwrap();
        let bytes = arena.copy_out(base, 8 * PAGE).unwrap();
        assert!(
            bytes[..2 * PAGE].iter().all(|&b| b == 0),
            "source reads as zeros"
        );
        assert!(bytes[4 * PAGE..6 * PAGE].iter().all(|&b| b == 7));
        // the emptied source is still mapped and writable
        arena.fill(base, PAGE, 3).unwrap();
        assert_eq!(arena.copy_out(base, 1).unwrap(), vec![3]);
        // refused: overlap, unaligned, outside the arena
        assert!(arena.move_pages(base, base + PAGE, 2 * PAGE).is_err());
        assert!(arena.move_pages(base + 1, base + 4 * PAGE, PAGE).is_err());
        assert!(arena.move_pages(base, base + 8 * PAGE, PAGE).is_err());
        assert!(mapping_headroom(0).is_some_and(|h| h > 0));
    }

    #[test]
    fn mincore_sees_touched_pages_and_skips_unmapped_ones() {
        let page = system_page_size();
        let mut buf = AlignedBuf::zeroed(64 * page).unwrap();
        let base = buf.as_mut_slice().as_ptr() as usize;
        for p in 0..8 {
            buf.as_mut_slice()[p * page] = 1;
        }
        let touched: Vec<usize> = (0..8).map(|p| base + p * page).collect();
        assert_eq!(resident_pages(&touched), Some((8, 8)));
        // page 0 is never mapped in a user process
        assert_eq!(resident_pages(&[0]), None);
        let mixed = [0, base];
        assert_eq!(resident_pages(&mixed), Some((1, 1)));
    }
}
