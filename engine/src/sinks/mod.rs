//! The output side: the metrics CSV, the route, compute and io traces, and the end-of-run report.
//! Sinks receive finished rows (from the turn loop and from the graph's recorders) and write them
//! through `bmoe_telemetry`'s writers; nothing here reaches back into the graph.

pub mod compute_trace;
pub mod csv;
pub mod digest;
pub mod io_trace;
pub mod report;
pub mod route_trace;

use std::path::{Path, PathBuf};

/// An output file that could not be created or written.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The file could not be created before the model loaded.
    #[error("cannot create {flag} {}: {source}", path.display())]
    Preflight {
        /// The flag that names the file (`--csv`, `--route-trace`, …).
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The preamble could not be written.
    #[error("cannot write {flag} {}: {source}", path.display())]
    Create {
        /// The flag that names the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The writer's error.
        source: Box<bmoe_telemetry::Error>,
    },
    /// A row or the trailer could not be written (the sink stops there).
    #[error("writing {flag} {}: {source}", path.display())]
    Write {
        /// The flag that names the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The writer's error.
        source: Box<bmoe_telemetry::Error>,
    },
}

impl SinkError {
    /// The error of a writer that could not be created at `path` (for `map_err`).
    pub fn creating(
        flag: &'static str,
        path: &Path,
    ) -> impl Fn(bmoe_telemetry::Error) -> Self + Copy {
        move |source| SinkError::Create {
            flag,
            path: path.to_path_buf(),
            source: Box::new(source),
        }
    }

    /// The error of a write to `path` that failed (for `map_err`).
    pub fn writing(
        flag: &'static str,
        path: &Path,
    ) -> impl Fn(bmoe_telemetry::Error) -> Self + Copy {
        move |source| SinkError::Write {
            flag,
            path: path.to_path_buf(),
            source: Box::new(source),
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            SinkError::Preflight { flag, .. } => {
                format!("check that the folder of {flag} exists and is writable")
            }
            SinkError::Create { flag, .. } => {
                format!("check that the {flag} folder exists and is writable")
            }
            SinkError::Write { flag, .. } => format!(
                "free space on the disk that holds {flag} (or point it at another one) and run again: the file ends at its last complete row, so this run's record is incomplete"
            ),
        }
    }

    /// The flag that names the file.
    pub fn flag(&self) -> &'static str {
        match self {
            SinkError::Preflight { flag, .. }
            | SinkError::Create { flag, .. }
            | SinkError::Write { flag, .. } => flag,
        }
    }
}

/// Where an output file's last complete write ended. A write that fails half-way (a full disk)
/// leaves the bytes it got out — a torn row a reader would take for data — and
/// [`Self::cut`] removes them, which needs no free space.
#[derive(Debug)]
pub struct Tail {
    file: std::fs::File,
    len: u64,
}

impl Tail {
    /// Follows `path` (just created by its writer, which holds its own descriptor); `None`
    /// when it is not a regular file (a pipe, a terminal, `/dev/null`: nothing to cut) or
    /// cannot be reopened for writing (a torn row then stays, as before).
    pub fn of(path: &Path) -> Option<Tail> {
        if !std::fs::metadata(path).ok()?.is_file() {
            return None;
        }
        let file = std::fs::OpenOptions::new().write(true).open(path).ok()?;
        let len = file.metadata().ok()?.len();
        Some(Tail { file, len })
    }

    /// The writer flushed a complete write: the file ends there now.
    pub fn commit(tail: &mut Option<Tail>) {
        if let Some(t) = tail.as_mut()
            && let Ok(m) = t.file.metadata()
        {
            t.len = m.len();
        }
    }

    /// Cuts the file back to the last [`Self::commit`]. Call it after the writer is dropped:
    /// its buffer is flushed once more on drop.
    pub fn cut(tail: Option<Tail>) {
        if let Some(t) = tail {
            // best effort: the write error that led here is what gets reported
            let _ = t.file.set_len(t.len);
        }
    }
}

/// Creates (truncates) an output file before the model loads, so a path that cannot be written
/// fails in a second instead of after a long load — or, worse, only warns.
///
/// # Errors
/// [`SinkError::Preflight`] naming the flag and the file.
pub fn preflight(path: &Path, flag: &'static str) -> Result<(), SinkError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map(drop)
        .map_err(|source| SinkError::Preflight {
            flag,
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_tail_cuts_what_followed_the_last_complete_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let mut w = std::fs::File::create(&path).unwrap();
        w.write_all(b"# head\n").unwrap();
        let mut tail = Tail::of(&path);
        assert!(tail.is_some());
        w.write_all(b"1,2\n").unwrap();
        Tail::commit(&mut tail);
        // a row the disk only half took
        w.write_all(b"3,").unwrap();
        drop(w);
        Tail::cut(tail);
        assert_eq!(std::fs::read(&path).unwrap(), b"# head\n1,2\n");
        // nothing to cut on what is not a regular file
        assert!(Tail::of(Path::new("/dev/null")).is_none());
    }
}
