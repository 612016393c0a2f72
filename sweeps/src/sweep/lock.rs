//! The results directory's lock: a sweep holds an exclusive `flock` on
//! `<results>/.bmoe-bench.lock` while it runs, and every engine it starts inherits the locked
//! file (one descriptor without close-on-exec, duplicated just for the spawn). The lock is on the
//! open file, not on the sweep's process, so it stays held while any of them lives: after a
//! `kill -9` of the sweep, the engine it left running (an orphan, in a process group of its
//! own) still holds it, and `--resume` — or a second sweep into the same directory — is refused
//! naming that process and how to stop it, instead of running the same cell beside it.
//!
//! The duplicate exists only while the engine is spawned, under [`spawn_guard`], which every
//! other process spawn of the sweep (device commands, probes, copies) also takes: no helper
//! (an `adb` server that daemonises, say) can inherit the lock and hold it forever.

use std::fs::{self, File, OpenOptions};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::Hinted;

/// The lock file's name in a results directory.
pub const LOCK_NAME: &str = ".bmoe-bench.lock";

static SPAWN: Mutex<()> = Mutex::new(());

/// Held while a process is spawned: see the module docs.
pub fn spawn_guard() -> MutexGuard<'static, ()> {
    SPAWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Spawns `cmd` (stdout and stderr captured) under [`spawn_guard`] and waits for it outside it.
///
/// # Errors
/// The command cannot be started or waited for.
pub fn output(cmd: &mut Command) -> std::io::Result<Output> {
    let child: Child = {
        let _g = spawn_guard();
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?
    };
    child.wait_with_output()
}

/// An acquired lock on a results directory (released when dropped).
#[derive(Debug)]
pub struct DirLock {
    lock: Flock<File>,
}

impl DirLock {
    /// Locks `root` (a directory that exists).
    ///
    /// # Errors
    /// The directory is locked: by a sweep still running there, or by a process a killed sweep
    /// left behind (each named, with its process group and command line, in a [`Hinted`]
    /// error); or the lock file cannot be opened.
    pub fn acquire(root: &Path) -> Result<DirLock> {
        let path = root.join(LOCK_NAME);
        // A holder may exit between a refused lock and the look for it in /proc: with nobody
        // to name, try again a few times before saying the holder cannot be seen.
        for attempt in 0.. {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .with_context(|| format!("cannot open the lock file {}", path.display()))?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(DirLock { lock }),
                Err((file, Errno::EWOULDBLOCK)) => {
                    drop(file);
                    let hs = holders(&path);
                    if !hs.is_empty() || attempt >= 5 {
                        return Err(busy(root, &path, &hs).into());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                Err((_, e)) => {
                    return Err(anyhow::anyhow!("cannot lock {}: {e}", path.display()));
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// A duplicate of the locked file without close-on-exec, for an engine to inherit; close it
    /// (drop) right after the spawn, still under [`spawn_guard`].
    ///
    /// # Errors
    /// `dup` failed.
    pub fn inheritable(&self) -> Result<OwnedFd> {
        let file: &File = &self.lock;
        nix::unistd::dup(file).context("cannot duplicate the results lock for the engine")
    }
}

/// A process that holds the lock: pid, process group, command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Process id.
    pub pid: u32,
    /// Its process group.
    pub pgid: Option<u32>,
    /// Its command line (clipped).
    pub cmdline: String,
}

/// The processes with `path` open, found through `/proc/*/fd` (the lock is held while any
/// of them lives).
pub fn holders(path: &Path) -> Vec<Holder> {
    let Ok(meta) = fs::metadata(path) else {
        return Vec::new();
    };
    let (dev, ino) = (meta.dev(), meta.ino());
    let me = std::process::id();
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let holds = fs::read_dir(e.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino));
        if !holds {
            continue;
        }
        let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let pgid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(2))
            .and_then(|v| v.parse::<u32>().ok());
        let raw = fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        let cmd = cmd.trim();
        let cmdline = if cmd.chars().count() > 240 {
            format!("{}…", cmd.chars().take(240).collect::<String>())
        } else {
            cmd.to_string()
        };
        out.push(Holder { pid, pgid, cmdline });
    }
    out
}

/// The error for a locked directory, naming who holds it.
fn busy(root: &Path, path: &Path, hs: &[Holder]) -> Hinted {
    let mut msg = format!(
        "{} is in use: {} process(es) hold its lock {}",
        root.display(),
        hs.len(),
        path.display()
    );
    for h in hs {
        msg.push_str(&format!(
            "\n  pid {}{}: {}",
            h.pid,
            h.pgid
                .map_or(String::new(), |g| format!(" (process group {g})")),
            h.cmdline
        ));
    }
    if hs.is_empty() {
        msg.push_str(" (held by a process this user cannot see)");
    }
    let groups: std::collections::BTreeSet<String> = hs
        .iter()
        .map(|h| format!("kill -- -{}", h.pgid.unwrap_or(h.pid)))
        .collect();
    let stop = if groups.is_empty() {
        "stop it".to_string()
    } else {
        format!(
            "stop it with `{}`",
            groups.into_iter().collect::<Vec<_>>().join("; ")
        )
    };
    Hinted::new(
        msg,
        format!(
            "a sweep still runs there, or an engine run a killed sweep left behind: wait for it to end, or {stop}; then rerun (with --resume) — running beside it would run the same cell twice"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_child_that_inherited_the_first() {
        let t = tempfile::tempdir().expect("tmp");
        let lock = DirLock::acquire(t.path()).expect("first");
        let mut child = {
            let _g = spawn_guard();
            let fd = lock.inheritable().expect("dup");
            let c = Command::new("sleep").arg("30").spawn().expect("sleep");
            drop(fd);
            c
        };
        // A second open of the file is a second open file description: flock refuses it.
        let e = DirLock::acquire(t.path()).expect_err("busy");
        let h = super::super::hint_for(&e).unwrap_or_default();
        let _ = child.kill();
        let _ = child.wait();
        let msg = e.to_string();
        assert!(
            msg.contains("is in use: 1 process(es) hold its lock"),
            "{msg}"
        );
        assert!(msg.contains(&format!("pid {}", child.id())), "{msg}");
        assert!(msg.contains("sleep 30"), "{msg}");
        assert!(h.contains("kill -- -"), "{h}");
        drop(lock);
        assert!(
            DirLock::acquire(t.path()).is_ok(),
            "free once both are gone"
        );
    }
}
