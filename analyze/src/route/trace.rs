//! Route traces for the views: `bmoe-telemetry`'s columnar reader plus the preamble the
//! reference scripts print.
//!
//! The format, its errors and its cut-short-last-line rule live in one place,
//! [`bmoe_telemetry::route_columns`] (the same parser as the row reader): columns are found by
//! header name (the 9-column 2026-07-15 layout and the 10-column layout with `dropped` both
//! work), numbers are parsed strictly (a malformed line is an error naming the file and line),
//! and files of 32 MiB or more are parsed by two threads. This module only maps the typed
//! preamble onto the reference's defaults (`?` and `0` for absent keys).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bmoe_telemetry::route_columns::{RouteColumns, RouteSelect, RouteTable};
use bmoe_telemetry::table::Truncated;
use bmoe_telemetry::trace::{PHASE_DECODE, PHASE_PREFILL, RouteTraceInfo};

use crate::{AnalyzeError, Result};

/// Which phase's rows to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// phase 1: one token per step.
    Decode,
    /// phase 0: the batched prompt pass.
    Prefill,
    /// No phase filter.
    All,
}

impl Phase {
    /// The CLI spelling.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Decode => "decode",
            Self::Prefill => "prefill",
            Self::All => "all",
        }
    }

    fn code(self) -> Option<u8> {
        match self {
            Self::Decode => Some(PHASE_DECODE),
            Self::Prefill => Some(PHASE_PREFILL),
            Self::All => None,
        }
    }
}

/// Row filter applied while reading.
#[derive(Debug, Clone, Copy)]
pub struct RouteFilter {
    /// Keep only this turn.
    pub turn: Option<i64>,
    /// Keep only this phase.
    pub phase: Phase,
    /// Also keep `turn`, `phase` and `dropped` per row (replay and drop need them; the views
    /// do not, and leaving them out saves memory on big traces).
    pub all_columns: bool,
}

/// The preamble of a route trace.
#[derive(Debug, Clone, Default)]
pub struct RouteMeta {
    /// `model=` (the GGUF path), `?` when absent.
    pub model: String,
    /// `arch=`, `?` when absent.
    pub arch: String,
    /// `n_layer=` (0 when absent).
    pub n_layer: i64,
    /// `n_expert=` (0 when absent).
    pub n_expert: i64,
    /// `n_expert_used=` (0 when absent).
    pub n_expert_used: i64,
    /// Per-layer `expert_bytes=` from the `# layer=` lines.
    pub expert_bytes: BTreeMap<i64, u64>,
    /// Per-layer `dense_bytes=` from the `# layer=` lines.
    pub dense_bytes: BTreeMap<i64, u64>,
    /// `expert_bytes` of the first `# layer=` line in file order.
    pub first_expert_bytes: Option<u64>,
}

/// Kept rows as columns, in file order (`bytes` is the contract's `expert_bytes`).
pub type RouteRows = RouteColumns;

/// A route trace read with a filter.
#[derive(Debug, Clone)]
pub struct RouteTrace {
    /// The file read.
    pub path: PathBuf,
    /// Its preamble.
    pub meta: RouteMeta,
    /// Kept rows.
    pub rows: RouteRows,
    /// Whether the file has a `dropped` column.
    pub has_dropped: bool,
    /// Kept rows whose `dropped` is 1.
    pub n_dropped: usize,
    /// Data rows in the file before filtering.
    pub total_rows: usize,
    /// The file's last line was cut short (a killed writer) and left out.
    pub truncated: Option<Truncated>,
}

impl RouteMeta {
    /// The reference's view of a typed preamble: `?` for an absent model or arch, 0 for absent
    /// counts; per-layer sizes by layer (a repeated layer keeps its last line).
    #[must_use]
    pub fn from_info(info: &RouteTraceInfo) -> Self {
        let count = |v: Option<u64>| v.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX));
        let mut meta = RouteMeta {
            model: info.model.clone().unwrap_or_else(|| "?".into()),
            arch: info.arch.clone().unwrap_or_else(|| "?".into()),
            n_layer: count(info.n_layer),
            n_expert: count(info.n_expert),
            n_expert_used: count(info.n_expert_used),
            first_expert_bytes: info.layers.first().map(|l| l.expert_bytes),
            ..RouteMeta::default()
        };
        for l in &info.layers {
            let layer = count(Some(l.layer));
            meta.expert_bytes.insert(layer, l.expert_bytes);
            meta.dense_bytes.insert(layer, l.dense_bytes);
        }
        meta
    }
}

impl RouteFilter {
    fn select(self) -> RouteSelect {
        RouteSelect {
            turn: self.turn,
            phase: self.phase.code(),
            all_columns: self.all_columns,
        }
    }
}

impl RouteTrace {
    /// Read only the preamble of `path` (any `#` lines before its first other line; a file
    /// that is not a route trace has an empty one).
    pub fn read_meta(path: &Path) -> Result<RouteMeta> {
        use bmoe_telemetry::trace::TraceInfo as _;
        let (preamble, _) = bmoe_telemetry::table::read_head(path)
            .map_err(|e| AnalyzeError::from_telemetry(path, e))?;
        let info = RouteTraceInfo::from_preamble(&preamble, path)
            .map_err(|e| AnalyzeError::from_telemetry(path, e))?;
        Ok(RouteMeta::from_info(&info))
    }

    /// Read `path`, keeping rows that pass `filter`. Files of 32 MiB or more are parsed by two
    /// threads, one per half.
    pub fn read(path: &Path, filter: RouteFilter) -> Result<Self> {
        let table = RouteTable::read(path, &filter.select())
            .map_err(|e| AnalyzeError::from_telemetry(path, e))?;
        Ok(Self::from_table(table))
    }

    /// Read a route trace from any reader; `path` is used in messages only.
    pub fn from_reader(
        path: &Path,
        reader: impl std::io::Read,
        filter: RouteFilter,
    ) -> Result<Self> {
        let table = RouteTable::from_reader(reader, path, &filter.select())
            .map_err(|e| AnalyzeError::from_telemetry(path, e))?;
        Ok(Self::from_table(table))
    }

    /// [`Self::read`], except that a header without `residency` is accepted when the analysis
    /// never looks at it: `needed_by` = `None` reads every row as residency 0 (a miss), which no
    /// caller then uses; `Some(what)` makes the missing column an error naming `what` needs it.
    pub fn read_for(path: &Path, filter: RouteFilter, needed_by: Option<&str>) -> Result<Self> {
        match RouteTable::read(path, &filter.select()) {
            Ok(table) => Ok(Self::from_table(table)),
            Err(bmoe_telemetry::Error::MissingColumn { column, .. }) if column == "residency" => {
                if let Some(what) = needed_by {
                    return Err(AnalyzeError::MissingColumn {
                        path: path.to_path_buf(),
                        column,
                        why: format!("{what} needs each routing's residency"),
                    });
                }
                let file = std::fs::File::open(path).map_err(|e| AnalyzeError::io(path, e))?;
                Self::from_reader(
                    path,
                    AddResidency::new(std::io::BufReader::new(file)),
                    filter,
                )
            }
            Err(e) => Err(AnalyzeError::from_telemetry(path, e)),
        }
    }

    fn from_table(t: RouteTable) -> Self {
        Self {
            meta: RouteMeta::from_info(&t.info),
            path: t.path,
            rows: t.columns,
            has_dropped: t.has_dropped,
            n_dropped: t.n_dropped,
            total_rows: usize::try_from(t.total_rows).unwrap_or(usize::MAX),
            truncated: t.truncated,
        }
    }
}

/// A route trace without a `residency` column, read as if it had one of zeros: the header
/// gains `,residency` and every data line `,0`; `#` lines and line numbers are unchanged.
struct AddResidency<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    header_done: bool,
}

impl<R: std::io::BufRead> AddResidency<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            pos: 0,
            header_done: false,
        }
    }
}

impl<R: std::io::BufRead> std::io::Read for AddResidency<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos >= self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            let mut line = Vec::new();
            if self.inner.read_until(b'\n', &mut line)? == 0 {
                return Ok(0);
            }
            let end = if line.ends_with(b"\r\n") {
                2
            } else {
                usize::from(line.ends_with(b"\n"))
            };
            let (body, eol) = line.split_at(line.len() - end);
            if body.is_empty() || body.starts_with(b"#") {
                self.buf = line;
                continue;
            }
            self.buf.extend_from_slice(body);
            if self.header_done {
                self.buf.extend_from_slice(b",0");
            } else {
                self.header_done = true;
                self.buf.extend_from_slice(b",residency");
            }
            self.buf.extend_from_slice(eol);
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "# route_trace v1\n# model=/m/x.gguf arch=qwen3moe n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=10\n# layer=1 expert_bytes=2097152 dense_bytes=20\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,0,0,0,0,3,0.6,0,1048576\n0,0,0,0,1,4,0.4,0,1048576\n0,1,5,0,0,3,0.7,1,0\n0,1,5,0,1,5,nan,0,1048576\n";

    fn read(text: &str, phase: Phase) -> Result<RouteTrace> {
        RouteTrace::from_reader(
            Path::new("t.csv"),
            text.as_bytes(),
            RouteFilter {
                turn: None,
                phase,
                all_columns: true,
            },
        )
    }

    #[test]
    fn reads_preamble_and_filters_phase() {
        let t = read(SMALL, Phase::Decode).expect("valid trace");
        assert_eq!(t.meta.model, "/m/x.gguf");
        assert_eq!(
            (t.meta.n_layer, t.meta.n_expert, t.meta.n_expert_used),
            (2, 8, 2)
        );
        assert_eq!(t.meta.expert_bytes.get(&1), Some(&2_097_152));
        assert_eq!(t.meta.first_expert_bytes, Some(1_048_576));
        assert_eq!((t.rows.len(), t.total_rows), (2, 4));
        assert_eq!(t.rows.expert, vec![3, 5]);
        assert!(t.rows.weight[1].is_nan());
        assert_eq!(read(SMALL, Phase::All).expect("valid").rows.len(), 4);
    }

    #[test]
    fn absent_keys_take_the_reference_defaults() {
        let t = read(&SMALL.replace("arch=qwen3moe n_layer=2 ", ""), Phase::All).expect("valid");
        assert_eq!((t.meta.arch.as_str(), t.meta.n_layer), ("?", 0));
        let meta = RouteTrace::read_meta(Path::new("/nonexistent/t.csv"));
        assert!(meta.is_err());
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let bad = SMALL.replace("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,x,0.7,1,0");
        let err = read(&bad, Phase::All).expect_err("bad expert");
        assert_eq!(
            err.to_string(),
            "t.csv:8: column `expert`: expected an unsigned integer (at most 4294967295) (found \"x\")"
        );
        let short = format!("{SMALL}0,1,6,0\n");
        let err = read(&short, Phase::All).expect_err("short line");
        assert!(
            err.to_string()
                .starts_with("t.csv:10: column `slot`: missing"),
            "{err}"
        );
        let res = SMALL.replace("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,3,0.7,7,0");
        assert!(
            read(&res, Phase::All)
                .expect_err("residency")
                .to_string()
                .contains("residency")
        );
        // A last line without a newline is a cut file, not an error.
        let cut = read(&format!("{SMALL}0,1,6,0"), Phase::All).expect("cut");
        assert_eq!(cut.truncated.map(|c| c.line), Some(10));
    }
}
