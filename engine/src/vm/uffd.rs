//! userfaultfd: page-granular waiting inside llama.cpp's expert matmuls with no ggml patch.
//!
//! The expert arena is registered in MISSING mode. A compute thread that touches an expert page
//! not yet read blocks inside the kernel; the read lane installs the page (`UFFDIO_MOVE`, or
//! `UFFDIO_COPY` where the kernel has no move), which wakes it. A handler thread reads the fault
//! messages to time the stalls. Every call here is a thin, checked wrapper over the kernel's
//! interface (`linux/userfaultfd.h`, whose constants are spelled out below because the libc
//! crate does not carry the newer ones).

use super::{PAGE, foreign};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const UFFD_API: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
const UFFD_FEATURE_MOVE: u64 = 1 << 16;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_aa01;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_aa02;
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
const UFFDIO_MOVE: libc::c_ulong = 0xc028_aa05;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
/// `USERFAULTFD_IOC_NEW` on `/dev/userfaultfd` (`_IO(0xAA, 0x00)`).
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xaa00;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

/// `struct uffdio_copy` and `struct uffdio_move` share this layout.
#[repr(C)]
struct UffdioFill {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    done: i64,
}

/// `struct uffd_msg` (32 bytes, packed in the kernel; every field here is naturally aligned).
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdMsg {
    event: u8,
    _reserved1: u8,
    _reserved2: u16,
    _reserved3: u32,
    flags: u64,
    address: u64,
    ptid: u32,
    _pad: u32,
}

const _: () = assert!(std::mem::size_of::<UffdMsg>() == 32);

/// Why userfaultfd cannot be used here (the engine then falls back to the staged overlap).
#[derive(Debug, thiserror::Error)]
pub enum UffdRefusal {
    /// Neither the syscall nor `/dev/userfaultfd` gave a descriptor (no privilege, seccomp, an
    /// old kernel).
    #[error("userfaultfd is not available ({0})")]
    Unavailable(#[source] io::Error),
    /// The API handshake failed.
    #[error("userfaultfd API handshake refused ({0})")]
    Handshake(#[source] io::Error),
    /// Registering the expert arena failed.
    #[error("userfaultfd cannot register the expert memory ({0})")]
    Register(#[source] io::Error),
}

/// How pages are put into place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// `UFFDIO_MOVE`: the staging pages themselves move (no copy).
    Move,
    /// `UFFDIO_COPY`: the kernel copies into a fresh page.
    Copy,
}

/// A page fault the kernel reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The faulting address (page aligned by the kernel unless EXACT_ADDRESS).
    pub address: usize,
    /// The faulting thread.
    pub thread: u32,
}

/// An open userfaultfd with its API negotiated.
#[derive(Debug)]
pub struct Userfault {
    fd: OwnedFd,
    install: Install,
}

impl Userfault {
    /// Opens a userfaultfd for user-mode faults (unprivileged where the system allows), then
    /// negotiates the API; `UFFDIO_MOVE` is used when the kernel has it.
    ///
    /// # Errors
    /// [`UffdRefusal`] saying which step was refused.
    pub fn open() -> Result<Self, UffdRefusal> {
        let fd = open_fd().map_err(UffdRefusal::Unavailable)?;
        let wanted = UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_MOVE;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: wanted,
            ioctls: 0,
        };
        // SAFETY: fd is a fresh userfaultfd; api is a valid, writable uffdio_api.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) };
        let (fd, install) = if rc == 0 {
            (fd, Install::Move)
        } else {
            // an older kernel refuses unknown features: a new descriptor with the base set
            drop(fd);
            let fd = open_fd().map_err(UffdRefusal::Unavailable)?;
            let mut api = UffdioApi {
                api: UFFD_API,
                features: UFFD_FEATURE_THREAD_ID,
                ioctls: 0,
            };
            // SAFETY: as above.
            let rc = unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) };
            if rc != 0 {
                return Err(UffdRefusal::Handshake(io::Error::last_os_error()));
            }
            (fd, Install::Copy)
        };
        let install = match std::env::var(INSTALL_ENV).as_deref() {
            Ok("copy") => Install::Copy,
            _ => install,
        };
        Ok(Self { fd, install })
    }

    /// How pages are installed.
    pub fn install_kind(&self) -> Install {
        self.install
    }

    /// Registers `[start, start+len)` (page aligned, anonymous private memory) in MISSING mode.
    ///
    /// # Errors
    /// [`UffdRefusal::Register`].
    pub fn register(&self, start: usize, len: usize) -> Result<(), UffdRefusal> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        // SAFETY: reg is a valid uffdio_register; the kernel checks that the range is mapped
        // and of a registrable kind.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_REGISTER, &mut reg) };
        if rc == 0 {
            Ok(())
        } else {
            Err(UffdRefusal::Register(io::Error::last_os_error()))
        }
    }

    /// Unregisters a range (before the arena's memory goes back to llama.cpp's mapping).
    pub fn unregister(&self, start: usize, len: usize) {
        let mut r = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: r is a valid uffdio_range; unregistering an unregistered range is harmless.
        unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_UNREGISTER, &mut r) };
    }

    /// Installs `len` bytes (page multiple) from `src` at `dst`, skipping destination pages
    /// that are already present (they hold the same file bytes: see `stream::overlap`). Wakes
    /// the threads waiting on the installed pages. Returns the bytes installed.
    ///
    /// # Errors
    /// The kernel's refusal (other than a present page).
    ///
    /// # Safety
    /// `src..src+len` must be this process's private anonymous memory the caller owns and no
    /// longer reads (with [`Install::Move`] its pages leave it); `dst..dst+len` must lie in a
    /// range registered with this descriptor.
    pub unsafe fn install(&self, dst: usize, src: usize, len: usize) -> io::Result<usize> {
        let req = match self.install {
            Install::Move => UFFDIO_MOVE,
            Install::Copy => UFFDIO_COPY,
        };
        // SAFETY: the caller guarantees both ranges (see the function's safety section).
        match unsafe { self.fill(req, dst, src, len) } {
            Ok(n) => Ok(n),
            // a page the move cannot take (e.g. shared): copy the rest instead
            Err((done, _)) if req == UFFDIO_MOVE => {
                // SAFETY: the same ranges, from where the move stopped.
                unsafe { self.fill(UFFDIO_COPY, dst + done, src + done, len - done) }
                    .map(|n| done + n)
                    .map_err(|(_, e)| e)
            }
            Err((_, e)) => Err(e),
        }
    }

    /// Runs a `UFFDIO_MOVE` / `UFFDIO_COPY` over the whole range: a page already present is
    /// skipped, an interrupted call resumed. Returns the bytes installed, or where it stopped
    /// (bytes the range was done to) and why.
    ///
    /// # Safety
    /// As [`Self::install`].
    unsafe fn fill(
        &self,
        req: libc::c_ulong,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Result<usize, (usize, io::Error)> {
        let mut installed = 0usize;
        let mut at = 0usize;
        while at < len {
            let mut f = UffdioFill {
                dst: (dst + at) as u64,
                src: (src + at) as u64,
                len: (len - at) as u64,
                mode: 0,
                done: 0,
            };
            // SAFETY: as the caller guarantees.
            let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), req, &mut f) };
            if rc == 0 {
                return Ok(installed + len - at);
            }
            let done = usize::try_from(f.done.max(0)).unwrap_or(0);
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                // part done, then a present page: skip that page and go on
                Some(libc::EEXIST) => {
                    installed += done;
                    at += done + PAGE;
                }
                // interrupted or contended: retry the rest
                Some(libc::EAGAIN) | Some(libc::EINTR) => {
                    installed += done;
                    at += done;
                }
                _ => return Err((at + done, err)),
            }
        }
        Ok(installed)
    }

    /// Wakes every thread waiting on `[start, start+len)` (they re-fault if the page is still
    /// missing).
    pub fn wake(&self, start: usize, len: usize) {
        let mut r = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: r is a valid uffdio_range.
        unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_WAKE, &mut r) };
    }

    /// Waits up to `timeout_ms` for fault messages and returns those available (empty on
    /// timeout).
    ///
    /// # Errors
    /// A failed `poll` or `read` other than "nothing yet".
    pub fn read_faults(&self, timeout_ms: i32, out: &mut Vec<Fault>) -> io::Result<()> {
        out.clear();
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: pfd is one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::EINTR) {
                Ok(())
            } else {
                Err(e)
            };
        }
        if n == 0 {
            return Ok(());
        }
        let mut msgs = [UffdMsg {
            event: 0,
            _reserved1: 0,
            _reserved2: 0,
            _reserved3: 0,
            flags: 0,
            address: 0,
            ptid: 0,
            _pad: 0,
        }; 64];
        // SAFETY: msgs is a writable buffer of size_of_val(&msgs) bytes; the descriptor is
        // non-blocking, so an empty queue returns EAGAIN.
        let got = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr().cast(),
                std::mem::size_of_val(&msgs),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(()),
                _ => Err(e),
            };
        }
        let n = usize::try_from(got).unwrap_or(0) / std::mem::size_of::<UffdMsg>();
        out.extend(
            msgs[..n]
                .iter()
                .filter(|m| m.event == UFFD_EVENT_PAGEFAULT)
                .map(|m| Fault {
                    address: m.address as usize & !(PAGE - 1),
                    thread: m.ptid,
                }),
        );
        Ok(())
    }
}

/// Env var (diagnostic A/B): `copy` installs pages with `UFFDIO_COPY` even where the kernel can
/// move them.
pub const INSTALL_ENV: &str = "BMOE_DIAG_UFFD_INSTALL";

/// A userfaultfd descriptor: the syscall for user-mode faults only (allowed unprivileged when
/// the system permits), the syscall with full rights, then `/dev/userfaultfd`.
fn open_fd() -> io::Result<OwnedFd> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let mut last = io::Error::from_raw_os_error(libc::ENOSYS);
    for extra in [UFFD_USER_MODE_ONLY, 0] {
        // SAFETY: the userfaultfd syscall takes one int of flags and returns a descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | extra) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this descriptor to us; we own it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        last = io::Error::last_os_error();
    }
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd");
    if let Ok(dev) = dev {
        // SAFETY: USERFAULTFD_IOC_NEW takes the new descriptor's flags and returns it.
        let fd = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW, flags) };
        if fd >= 0 {
            // SAFETY: a fresh descriptor owned by us.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        last = io::Error::last_os_error();
    }
    Err(last)
}

/// The arena's side of userfaultfd: registering its spans and installing into them.
impl super::Arena {
    /// Registers every span with `uffd` in MISSING mode: from now on a touch of a page not
    /// present blocks until it is installed.
    ///
    /// # Errors
    /// The kernel's refusal.
    pub fn register(&self, uffd: &Userfault) -> Result<(), UffdRefusal> {
        for s in &self.spans {
            uffd.register(s.start, s.end - s.start)?;
        }
        Ok(())
    }

    /// Undoes [`Self::register`].
    pub fn unregister(&self, uffd: &Userfault) {
        for s in &self.spans {
            uffd.unregister(s.start, s.end - s.start);
        }
    }

    /// Lends `len` bytes of whole pages at `src` (an evicted slice, inside the arena) to
    /// `ring` at `off` (`mremap` with `MREMAP_DONTUNMAP`): the pages leave the arena — which
    /// stays mapped and registered, so a touch of `src` faults to userfaultfd again — and wait
    /// in the ring for a read, after which [`Self::install_ring`] moves them to their new place.
    /// No page is freed, allocated or zeroed on the way.
    pub fn lend(&self, src: usize, ring: &StagingRing, off: usize, len: usize) -> io::Result<()> {
        self.check(src, len)?;
        let dst = ring.addr(off, len)?;
        if !src.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || len == 0 {
            return Err(foreign(src, len));
        }
        // SAFETY: src..src+len is whole pages of a span this arena mapped private-anonymous
        // (checked), whose contents no thread reads (an evicted slice); dst..dst+len is whole
        // pages inside the ring's own mapping (checked), so the two cannot overlap.
        unsafe { super::remap_dontunmap(src, dst, len) }
    }

    /// [`Self::install`] from `ring` at `off` instead of a staging buffer.
    pub fn install_ring(
        &self,
        uffd: &Userfault,
        dst: usize,
        ring: &StagingRing,
        off: usize,
        len: usize,
    ) -> io::Result<usize> {
        self.check(dst, len)?;
        let src = ring.addr(off, len)?;
        if !dst.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) {
            return Err(foreign(dst, len));
        }
        // SAFETY: dst is inside the registered arena (checked); src is inside the ring, private
        // anonymous memory whose slot only the calling lane uses for this job.
        unsafe { uffd.install(dst, src, len) }
    }
}

/// The lanes' staging area under userfaultfd: one slot per job of a batch. A slot holds an
/// evicted slice's pages lent to it (or, where none was, pages faulted in by the read), the
/// read lands there, and the install moves the pages to the expert they now belong to.
#[derive(Debug)]
pub struct StagingRing {
    base: usize,
    len: usize,
}

impl StagingRing {
    /// Reserves `len` bytes (rounded up to pages) of address space, backed by memory only where
    /// pages are lent or read.
    pub fn new(len: usize) -> io::Result<Self> {
        let len = len.max(PAGE).div_ceil(PAGE) * PAGE;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the mapping just made; the advice only changes its VMA flags.
        unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        Ok(Self {
            base: p as usize,
            len,
        })
    }

    /// Its size in bytes.
    pub fn capacity(&self) -> usize {
        self.len
    }

    fn addr(&self, off: usize, len: usize) -> io::Result<usize> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.base + off),
            _ => Err(foreign(self.base + off, len)),
        }
    }

    /// Reads `len` bytes of `file` at `offset` into the slot at `off`, looping over short
    /// reads; returns the bytes read (fewer at the end of the file).
    pub fn read_into(
        &self,
        file: &std::fs::File,
        off: usize,
        len: usize,
        offset: u64,
    ) -> io::Result<usize> {
        let addr = self.addr(off, len)?;
        // SAFETY: [addr, addr+len) is inside the ring (checked); the slot belongs to the calling
        // lane's job alone, and no Rust reference points into it.
        unsafe { super::pread_all(file, addr, len, offset) }
    }

    /// Fills `len` bytes of the slot at `off` with `byte` (zeroing past the end of the file,
    /// 0xFF on a failed read or a poisoned job).
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> io::Result<()> {
        let addr = self.addr(off, len)?;
        // SAFETY: inside the ring (checked); the slot is the calling lane's alone.
        unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) };
        Ok(())
    }
}

// SAFETY: the ring is plain address space; lanes use disjoint slots of it (one per job).
unsafe impl Send for StagingRing {}
// SAFETY: as above: concurrent access is to disjoint slots only.
unsafe impl Sync for StagingRing {}

impl Drop for StagingRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new` (lent and moved pages included), unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
