//! Which bmoe format a file is, from its first lines (not its name: in archived sessions a
//! `*.metrics` file may be a v0 metrics CSV rather than a sidecar).

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::kv::parse_kv_line;

/// What [`detect_format`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Metrics CSV; `version` from the magic line, `None` for a v0 file (no preamble).
    Metrics {
        /// `N` of `# bmoe_metrics vN`.
        version: Option<u32>,
    },
    /// `# route_trace v1` (or a bare route-trace header).
    RouteTrace,
    /// `# compute_trace v1`.
    ComputeTrace,
    /// `# io_trace v1`.
    IoTrace,
    /// `key=value` per line (the `.metrics` sidecar).
    Sidecar,
    /// Console output containing end-of-run summary lines (a `.log`).
    RunLog,
    /// Some other CSV (header + comma-separated rows), e.g. a replay curve.
    OtherCsv,
    /// None of the above.
    Unknown,
}

/// Lines checked for the sidecar / other-CSV shapes.
const SNIFF_LINES: usize = 64;
/// Bytes [`detect_format`] reads (run logs put the summary after the model-load chatter).
const SNIFF_BYTES: u64 = 256 * 1024;

/// Classifies the text of a file from its first lines.
pub fn detect_text(head: &str) -> FileKind {
    let head = head.strip_prefix('\u{feff}').unwrap_or(head);
    let lines: Vec<&str> = head
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let Some(first) = lines.first() else {
        return FileKind::Unknown;
    };
    if first.starts_with('#') {
        let words = parse_kv_line(first).words;
        let version = words
            .get(1)
            .and_then(|w| w.strip_prefix('v'))
            .and_then(|n| n.parse().ok());
        match words.first().map(String::as_str) {
            Some("bmoe_metrics") => return FileKind::Metrics { version },
            Some("route_trace") => return FileKind::RouteTrace,
            Some("compute_trace") => return FileKind::ComputeTrace,
            Some("io_trace") => return FileKind::IoTrace,
            _ => {}
        }
    }
    let header = lines.iter().find(|l| !l.starts_with('#'));
    if let Some(h) = header {
        let cols: Vec<&str> = h.split(',').map(str::trim).collect();
        if cols.len() > 1 {
            if cols.starts_with(&["turn", "phase", "step", "layer", "slot", "expert"]) {
                return FileKind::RouteTrace;
            }
            if cols.contains(&"wall_ms") {
                return FileKind::Metrics { version: None };
            }
        }
    }
    let is_summary =
        |l: &&str| matches!(crate::summary::parse_summary_line(l), Ok(Some(_)) | Err(_));
    if lines.iter().any(is_summary) {
        return FileKind::RunLog;
    }
    let kv_like = |l: &&str| {
        l.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty()
                && k.trim()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        })
    };
    let lines = &lines[..lines.len().min(SNIFF_LINES)];
    if lines.iter().all(kv_like) {
        return FileKind::Sidecar;
    }
    if let Some(h) = header {
        let n = h.split(',').count();
        if n > 1
            && lines
                .iter()
                .filter(|l| !l.starts_with('#'))
                .all(|l| l.split(',').count() == n)
        {
            return FileKind::OtherCsv;
        }
    }
    FileKind::Unknown
}

/// Classifies a file by its head (at most 256 KiB are read; format magic and headers are
/// looked for on the first lines, summary lines anywhere in the head). Invalid UTF-8 is
/// replaced, not an error.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read.
pub fn detect_format(path: impl AsRef<Path>) -> Result<FileKind> {
    let path = path.as_ref();
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut head = Vec::new();
    f.take(SNIFF_BYTES)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(path, e))?;
    Ok(detect_text(&String::from_utf8_lossy(&head)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(
            detect_text("# bmoe_metrics v2\n# engine=x\nstep\n"),
            FileKind::Metrics { version: Some(2) }
        );
        assert_eq!(
            detect_text("step,steps,wall_ms\n1,2,3\n"),
            FileKind::Metrics { version: None }
        );
        assert_eq!(detect_text("# io_trace v1\n"), FileKind::IoTrace);
        assert_eq!(detect_text("peak_rss_kb=1\nx=2\n"), FileKind::Sidecar);
        assert_eq!(
            detect_text("\u{feff}generation: 1 tokens, 1.000 s/token (1.000 tok/s)\npeak=1\n"),
            FileKind::RunLog
        );
        assert_eq!(detect_text("a,b\n1,2\n"), FileKind::OtherCsv);
        assert_eq!(detect_text("hello\n"), FileKind::Unknown);
    }
}
