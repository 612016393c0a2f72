//! A model file truncated under a running engine ends in an error message, not a silent kill.
//!
//! llama.cpp maps the model file. When someone truncates or rewrites that file in place while the
//! engine runs, the next touch of a page past the new end raises `SIGBUS`, whose default action
//! kills the process with no word (exit 135) — and in `--session` mode the client is left with a
//! `BMOE_BEGIN` and nothing after it. [`install`] puts a `SIGBUS` handler in place once the model
//! is loaded. A fault inside one of the model's mappings (read from `/proc/self/maps` at install)
//! makes it write, with `write(2)` alone:
//!
//! - in session mode, a complete `BMOE_ERROR {"id":…,"fatal":true,"msg":…}` line to stdout (the id
//!   of the request being served, see [`set_request`]);
//! - `error: a page of the memory-mapped model could not be read (SIGBUS at 0x…): <file> was
//!   truncated or changed while in use` and a `hint:` line to stderr;
//!
//! and end the process with `_exit(1)`. A `SIGBUS` at any other address goes to the action that
//! was in place before (usually the default: the process dies as it would have).
//!
//! A signal handler may not allocate or take locks, so every byte it writes except the fault
//! address and the request id is formatted at install time; those two go through fixed-size
//! stack buffers.

use bmoe_telemetry::protocol::ErrorRecord;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Env var (test only): right after llama.cpp has loaded the model, truncate the model file in
/// place to this many bytes — the deterministic stand-in for a file cut under a running engine
/// (compare `run::TEST_REPLACE_ENV`, which swaps the file and so keeps the old mapping valid).
pub const TEST_TRUNCATE_ENV: &str = "BMOE_TEST_TRUNCATE_AFTER_LOAD";

const HINT: &str = "do not truncate or rewrite a model file while bmoe-cli uses it (write a new file and rename it over the old one instead); with --moe-stream, --dense-weights anon copies the dense weights out of the file mapping";

/// Stands for the request id in the pre-formatted `BMOE_ERROR` line (a value no request has:
/// the handler writes the real id in its place).
const ID_SENTINEL: i64 = i64::MIN;
/// Stands for the fault address in the pre-formatted `BMOE_ERROR` message.
const ADDR_PLACEHOLDER: &str = "{sigbus-address}";

/// Everything the handler needs, built once by [`install`] before the handler can run.
static GUARD: OnceLock<Guard> = OnceLock::new();
/// The id of the session request being served (0 outside one).
static REQUEST_ID: AtomicI64 = AtomicI64::new(0);
/// Set by the first thread that reports; any other faulting thread waits for its `_exit`.
static REPORTING: AtomicBool = AtomicBool::new(false);

/// One mapping of a model file: `[start, end)` and the index of its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    shard: usize,
}

/// The pre-formatted report for a fault in one shard (or in "one of the shards").
#[derive(Debug)]
struct Report {
    /// stderr text before and after the hex address.
    stderr: [Vec<u8>; 2],
    /// The `BMOE_ERROR` line cut around the id and the address: before the id, between the id
    /// and the address, after the address (with the newline). `None` outside session mode.
    session: Option<[Vec<u8>; 3]>,
}

#[derive(Debug)]
struct Guard {
    /// The model's mappings; `None` when `/proc/self/maps` could not be read, in which case every
    /// `SIGBUS` is taken to be the model's (nothing else in the engine maps files).
    mappings: Option<Vec<Mapping>>,
    /// One report per shard, then one naming every shard (for `mappings == None`).
    reports: Vec<Report>,
    /// The action in place before [`install`], for faults outside the model.
    previous: libc::sigaction,
}

impl Guard {
    /// The report for a fault at `addr`, or `None` when the address is not the model's.
    fn report_for(&self, addr: usize) -> Option<&Report> {
        match &self.mappings {
            None => self.reports.last(),
            Some(maps) => maps
                .iter()
                .find(|m| m.start <= addr && addr < m.end)
                .and_then(|m| self.reports.get(m.shard)),
        }
    }
}

/// Installs the `SIGBUS` handler for the model whose files are `shards` (call once the model is
/// mapped). `session`: also write a fatal `BMOE_ERROR` line to stdout (file descriptor 1) on a
/// fault. Only the first call in a process installs anything; it does nothing when the model is
/// not mapped at all (no mapping of any shard in `/proc/self/maps`) or `sigaction` fails — the
/// handler is a diagnostic, never a reason to refuse a run.
pub fn install(shards: &[PathBuf], session: bool) {
    if GUARD.get().is_some() {
        return;
    }
    let mappings = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .map(|maps| model_mappings(&maps, shards));
    if mappings.as_ref().is_some_and(Vec::is_empty) {
        return;
    }
    let mut reports: Vec<Report> = shards
        .iter()
        .map(|p| report(&p.display().to_string(), session))
        .collect();
    let all: Vec<String> = shards.iter().map(|p| p.display().to_string()).collect();
    let what = if all.len() == 1 {
        all.join("")
    } else {
        format!("one of {}", all.join(", "))
    };
    reports.push(report(&what, session));

    // SAFETY: an all-zero `sigaction` is a valid value (SIG_DFL, empty mask, no flags).
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only queries the current one into `previous`, a valid pointer.
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) } != 0 {
        return;
    }
    if GUARD
        .set(Guard {
            mappings,
            reports,
            previous,
        })
        .is_err()
    {
        return;
    }
    // SAFETY: as above, all-zero is a valid `sigaction` to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigbus as extern "C" fn(_, _, _) as libc::sighandler_t;
    action.sa_flags = libc::SA_SIGINFO;
    // SAFETY: `sa_mask` is a valid sigset to clear; `sigaction` gets valid pointers, and the
    // handler only reads `GUARD`, which is set above and never changes again.
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

/// Records the session request being served, so a fatal `BMOE_ERROR` written by the handler
/// carries its id (one atomic store; cheap enough to call per request).
pub fn set_request(id: i64) {
    REQUEST_ID.store(id, Ordering::Relaxed);
}

/// Test hook ([`TEST_TRUNCATE_ENV`]): when the variable is set, truncates `model` in place to
/// that many bytes.
///
/// # Errors
/// The variable is not a byte count, or the file cannot be opened or truncated.
pub fn truncate_if_testing(model: &Path) -> Result<(), TestHookError> {
    let Ok(value) = std::env::var(TEST_TRUNCATE_ENV) else {
        return Ok(());
    };
    let len: u64 = value
        .trim()
        .parse()
        .map_err(|source| TestHookError::NotAByteCount {
            var: TEST_TRUNCATE_ENV,
            value: value.clone(),
            source,
        })?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(model)
        .and_then(|f| f.set_len(len))
        .map_err(|source| TestHookError::File {
            var: TEST_TRUNCATE_ENV,
            path: model.to_path_buf(),
            source,
        })
}

/// A test hook (an environment variable only tests set) that could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum TestHookError {
    /// The variable is not a byte count.
    #[error("{var}={value}: {source}")]
    NotAByteCount {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it does not parse.
        source: std::num::ParseIntError,
    },
    /// The file could not be changed.
    #[error("{var}: {}: {source}", path.display())]
    File {
        /// The variable.
        var: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A rename the hook asked for failed.
    #[error("{var}: {source}")]
    Rename {
        /// The variable.
        var: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The pre-formatted report naming `what`.
fn report(what: &str, session: bool) -> Report {
    let tail = format!("): {what} was truncated or changed while in use");
    let stderr = [
        b"\nerror: a page of the memory-mapped model could not be read (SIGBUS at 0x".to_vec(),
        format!("{tail}\nhint: {HINT}\n").into_bytes(),
    ];
    let session = session.then(|| {
        let line = ErrorRecord {
            id: ID_SENTINEL,
            fatal: true,
            msg: format!(
                "a page of the memory-mapped model could not be read (SIGBUS at 0x{ADDR_PLACEHOLDER}{tail}; hint: {HINT}"
            ),
        }
        .to_line();
        split_error_line(&line)
    });
    Report {
        stderr,
        session: session.flatten(),
    }
}

/// Cuts a `BMOE_ERROR` line made with [`ID_SENTINEL`] and [`ADDR_PLACEHOLDER`] into the text
/// before the id, between the id and the address, and after the address (plus a newline). The
/// id comes before the message in the seed's key order, and the placeholder before the file
/// name in the message, so the first occurrences are ours.
fn split_error_line(line: &str) -> Option<[Vec<u8>; 3]> {
    let id = ID_SENTINEL.to_string();
    let at_id = line.find(&id)?;
    let after_id = at_id + id.len();
    let at_addr = after_id + line[after_id..].find(ADDR_PLACEHOLDER)?;
    Some([
        line.as_bytes()[..at_id].to_vec(),
        line.as_bytes()[after_id..at_addr].to_vec(),
        format!("{}\n", &line[at_addr + ADDR_PLACEHOLDER.len()..]).into_bytes(),
    ])
}

/// The mappings of `shards` listed in `maps` (the text of `/proc/self/maps`). A line belongs to
/// a shard when its device and inode are the shard's, or its path is the shard's canonical path.
fn model_mappings(maps: &str, shards: &[PathBuf]) -> Vec<Mapping> {
    let ids: Vec<_> = shards
        .iter()
        .map(|p| {
            (
                std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino())),
                std::fs::canonicalize(p).ok(),
            )
        })
        .collect();
    maps.lines()
        .filter_map(parse_maps_line)
        .filter_map(|l| {
            let shard = ids.iter().position(|(dev_ino, canon)| {
                *dev_ino == Some((l.dev, l.inode))
                    || canon.as_deref().is_some_and(|c| c.as_os_str() == l.path)
            })?;
            Some(Mapping {
                start: l.start,
                end: l.end,
                shard,
            })
        })
        .collect()
}

/// One line of `/proc/self/maps`.
#[derive(Debug, PartialEq, Eq)]
struct MapsLine<'a> {
    start: usize,
    end: usize,
    /// `st_dev` encoding of the `major:minor` field.
    dev: u64,
    inode: u64,
    path: &'a str,
}

/// Parses `start-end perms offset major:minor inode [path]`; `None` for anything else.
fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let inode = fields.next()?.parse().ok()?;
    let path = fields.next().unwrap_or("").trim_start();
    Some(MapsLine {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        dev: encode_dev(
            u64::from_str_radix(major, 16).ok()?,
            u64::from_str_radix(minor, 16).ok()?,
        ),
        inode,
        path,
    })
}

/// `major:minor` as `stat`'s `st_dev` holds it (the glibc/bionic `makedev` layout).
fn encode_dev(major: u64, minor: u64) -> u64 {
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// Lower-case hex of `v` without leading zeros, written into `buf`.
fn hex(v: usize, buf: &mut [u8; 16]) -> &[u8] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut i = buf.len();
    let mut v = v as u64;
    loop {
        i -= 1;
        buf[i] = DIGITS[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 || i == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Decimal of `v`, written into `buf`.
fn decimal(v: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut u = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 || i == 0 {
            break;
        }
    }
    if v < 0 && i > 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// `write(2)` all of `bytes` to `fd`, retrying on `EINTR` and short writes; gives up on any other
/// error (there is nobody left to tell).
fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid, initialised buffer of `bytes.len()` bytes.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(n) {
            Ok(0) => return,
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(_) => {
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    return;
                }
            }
        }
    }
}

/// The `SIGBUS` handler. Async-signal-safe: it reads the pre-built [`GUARD`] and two atomics,
/// formats into stack buffers, and calls only `write`, `sigaction`, `pause` and `_exit`.
extern "C" fn on_sigbus(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // a null pointer (never expected) reads as address 0
    let addr = if info.is_null() {
        0
    } else {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo, whose `si_addr` is the
        // fault address for SIGBUS.
        unsafe { (*info).si_addr() as usize }
    };
    let Some(guard) = GUARD.get() else {
        return;
    };
    let Some(report) = guard.report_for(addr) else {
        // not the model's page: hand the fault back to the previous action, which sees it when
        // the faulting instruction runs again on return
        // SAFETY: `previous` is the action `sigaction` itself reported at install.
        unsafe { libc::sigaction(libc::SIGBUS, &guard.previous, std::ptr::null_mut()) };
        return;
    };
    if REPORTING.swap(true, Ordering::SeqCst) {
        // another thread faulted first and is reporting; its `_exit` ends this thread too
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }
    let mut hex_buf = [0u8; 16];
    let addr_hex = hex(addr, &mut hex_buf);
    if let Some([before_id, before_addr, rest]) = &report.session {
        let mut id_buf = [0u8; 20];
        write_all(libc::STDOUT_FILENO, before_id);
        write_all(
            libc::STDOUT_FILENO,
            decimal(REQUEST_ID.load(Ordering::Relaxed), &mut id_buf),
        );
        write_all(libc::STDOUT_FILENO, before_addr);
        write_all(libc::STDOUT_FILENO, addr_hex);
        write_all(libc::STDOUT_FILENO, rest);
    }
    let [before_addr, rest] = &report.stderr;
    write_all(libc::STDERR_FILENO, before_addr);
    write_all(libc::STDERR_FILENO, addr_hex);
    write_all(libc::STDERR_FILENO, rest);
    // SAFETY: _exit is async-signal-safe and ends the process without running destructors,
    // which could touch the broken mapping again.
    unsafe { libc::_exit(1) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmoe_telemetry::protocol::{LineKind, Record, parse_line};

    #[test]
    fn hex_and_decimal_match_std_formatting() {
        for v in [0usize, 1, 0xf, 0x10, 0x7fff_dead_b000, usize::MAX] {
            let mut b = [0u8; 16];
            assert_eq!(hex(v, &mut b), format!("{v:x}").as_bytes());
        }
        for v in [0i64, 7, -1, 10, 1_000_000, i64::MAX, i64::MIN] {
            let mut b = [0u8; 20];
            assert_eq!(decimal(v, &mut b), v.to_string().as_bytes());
        }
    }

    #[test]
    fn session_report_reassembles_into_a_fatal_error_record() {
        let r = report("/models/we \"ird\".gguf", true);
        let [a, b, c] = r.session.expect("session pieces");
        let mut line = a;
        line.extend_from_slice(b"42");
        line.extend_from_slice(&b);
        line.extend_from_slice(b"7f00dead1000");
        line.extend_from_slice(&c);
        let line = String::from_utf8(line).expect("utf-8");
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line}"
        );
        match parse_line(&line) {
            LineKind::Record(Record::Error(e)) => {
                assert_eq!(e.id, 42);
                assert!(e.fatal);
                assert!(e.msg.contains("SIGBUS at 0x7f00dead1000)"), "{}", e.msg);
                assert!(
                    e.msg.contains("/models/we \"ird\".gguf was truncated"),
                    "{}",
                    e.msg
                );
                assert!(e.msg.contains("; hint: "), "{}", e.msg);
            }
            other => panic!("not a BMOE_ERROR: {other:?}"),
        }
        assert!(report("m.gguf", false).session.is_none());
    }

    #[test]
    fn maps_lines_parse_with_and_without_paths() {
        let l = parse_maps_line(
            "7f1c2a000000-7f1c2a431000 r--p 00000000 fe:00 10117178                   /w/m x.gguf",
        )
        .expect("parses");
        assert_eq!((l.start, l.end), (0x7f1c_2a00_0000, 0x7f1c_2a43_1000));
        assert_eq!(
            (l.dev, l.inode, l.path),
            (0xfe00, 10_117_178, "/w/m x.gguf")
        );
        let anon = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0").expect("parses");
        assert_eq!((anon.inode, anon.path), (0, ""));
        assert!(parse_maps_line("garbage").is_none());
        // a large major/minor lands where st_dev keeps it
        assert_eq!(encode_dev(0x103, 0x1_0002), 0x1001_0302);
    }

    #[test]
    fn a_mapped_file_is_found_in_this_process_maps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mapped.bin");
        std::fs::write(&path, vec![1u8; 8192]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        // SAFETY: a fresh read-only shared mapping of an open 8 KiB file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let other = dir.path().join("other.bin");
        std::fs::write(&other, b"x").expect("write");
        let found = model_mappings(&maps, &[other, path]);
        // SAFETY: unmapping exactly the mapping made above.
        unsafe { libc::munmap(p, 8192) };
        assert_eq!(
            found,
            vec![Mapping {
                start: p as usize,
                end: p as usize + 8192,
                shard: 1
            }]
        );
    }
}
