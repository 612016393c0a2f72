//! Route traces in bulk: a whole file into one `Vec` per column, on two threads when it is big.
//!
//! This is the same reader as [`crate::trace::RouteTraceReader`], not a second one: the head
//! (magic line, preamble, header, required columns) is read by it, and every row goes through
//! the same [`RouteRow`] parser, so the errors, the row rules (blank lines and repeated headers
//! skipped, `#` lines after the header ignored, quoting) and the end-of-file rule (a last line
//! without a newline is [`RouteTable::truncated`] and left out, not an error) are the
//! row reader's. What differs is only how lines are fetched and where rows go:
//!
//! * lines are split in place inside 4 MiB chunks (no per-line copy);
//! * a file of [`PARALLEL_FROM_BYTES`] or more is cut at a newline near the middle of its rows
//!   and the halves are parsed by two threads (errors still name file line numbers);
//! * rows are filtered by [`RouteSelect`] while reading and stored in narrower types than
//!   [`RouteRow`] (`step` as `i32`, `layer` and `slot` as `u16`; a value outside them is an
//!   error naming the line) — five million routings fit in about 200 MiB.
//!
//! ```
//! use bmoe_telemetry::route_columns::{RouteSelect, RouteTable};
//! use bmoe_telemetry::trace::PHASE_DECODE;
//! let text = "# route_trace v1\n# model=m.gguf n_expert_used=2\n\
//!     turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
//!     0,0,0,0,0,3,0.6,0,4096\n0,1,5,0,0,3,0.7,1,0\n0,1,5,0,1,6,nan,0,4096\n";
//! let select = RouteSelect { phase: Some(PHASE_DECODE), ..RouteSelect::default() };
//! let t = RouteTable::from_reader(text.as_bytes(), "mem", &select)?;
//! assert_eq!((t.total_rows, t.columns.len()), (3, 2));
//! assert_eq!(t.columns.expert, [3, 6]);
//! assert!(t.columns.weight[1].is_nan());
//! # Ok::<(), bmoe_telemetry::Error>(())
//! ```

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::table::{
    Fields, MAX_LINE_BYTES, Truncated, cut_line, ensure_width, is_cut_short, line_too_long,
    split_line,
};
use crate::trace::{ROUTE_COLUMNS, RouteRow, RouteTraceInfo, TraceReader, TraceRow};

/// Files with at least this many bytes are parsed by two threads.
pub const PARALLEL_FROM_BYTES: u64 = 32 << 20;

/// Which rows and columns to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteSelect {
    /// Keep only rows of this turn. A value no `turn` can take (negative) keeps none.
    pub turn: Option<i64>,
    /// Keep only rows of this phase ([`crate::trace::PHASE_PREFILL`] or
    /// [`crate::trace::PHASE_DECODE`]).
    pub phase: Option<u8>,
    /// Also store `turn`, `phase` and `dropped` (left empty otherwise, which saves memory when
    /// the analysis does not need them).
    pub all_columns: bool,
}

impl RouteSelect {
    fn keeps(&self, row: &RouteRow) -> bool {
        self.turn.is_none_or(|t| t == i64::from(row.turn))
            && self.phase.is_none_or(|p| p == row.phase)
    }
}

/// Kept rows as columns, in file order; every column has [`Self::len`] entries except
/// `turn`, `phase` and `dropped`, which are empty unless [`RouteSelect::all_columns`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteColumns {
    /// `turn`.
    pub turn: Vec<u32>,
    /// `phase`.
    pub phase: Vec<u8>,
    /// `step` (absolute context position).
    pub step: Vec<i32>,
    /// `layer`.
    pub layer: Vec<u16>,
    /// `slot` (0 = the router's top choice).
    pub slot: Vec<u16>,
    /// `expert`.
    pub expert: Vec<u32>,
    /// `weight`, the exact `f64` of the text; NaN = unknown.
    pub weight: Vec<f64>,
    /// `residency`: 0 miss, 1 hit, 2 prefetch hit.
    pub residency: Vec<u8>,
    /// `expert_bytes` charged to this routing.
    pub expert_bytes: Vec<u64>,
    /// `dropped` (`false` when the file has no such column or the cell is empty).
    pub dropped: Vec<bool>,
}

impl RouteColumns {
    /// Number of kept rows.
    pub fn len(&self) -> usize {
        self.step.len()
    }

    /// Whether no row was kept.
    pub fn is_empty(&self) -> bool {
        self.step.is_empty()
    }

    fn reserve(&mut self, n: usize, all: bool) {
        if all {
            self.turn.reserve_exact(n);
            self.phase.reserve_exact(n);
            self.dropped.reserve_exact(n);
        }
        self.step.reserve_exact(n);
        self.layer.reserve_exact(n);
        self.slot.reserve_exact(n);
        self.expert.reserve_exact(n);
        self.weight.reserve_exact(n);
        self.residency.reserve_exact(n);
        self.expert_bytes.reserve_exact(n);
    }

    fn append(&mut self, other: &mut RouteColumns) {
        self.turn.append(&mut other.turn);
        self.phase.append(&mut other.phase);
        self.dropped.append(&mut other.dropped);
        self.step.append(&mut other.step);
        self.layer.append(&mut other.layer);
        self.slot.append(&mut other.slot);
        self.expert.append(&mut other.expert);
        self.weight.append(&mut other.weight);
        self.residency.append(&mut other.residency);
        self.expert_bytes.append(&mut other.expert_bytes);
    }

    fn shrink_to_fit(&mut self) {
        self.turn.shrink_to_fit();
        self.phase.shrink_to_fit();
        self.dropped.shrink_to_fit();
        self.step.shrink_to_fit();
        self.layer.shrink_to_fit();
        self.slot.shrink_to_fit();
        self.expert.shrink_to_fit();
        self.weight.shrink_to_fit();
        self.residency.shrink_to_fit();
        self.expert_bytes.shrink_to_fit();
    }
}

/// A route trace read into columns.
#[derive(Debug, Clone)]
pub struct RouteTable {
    /// The file (or label) read.
    pub path: PathBuf,
    /// The typed preamble.
    pub info: RouteTraceInfo,
    /// The kept rows.
    pub columns: RouteColumns,
    /// Whether the header has a `dropped` column.
    pub has_dropped: bool,
    /// Kept rows whose `dropped` is 1.
    pub n_dropped: usize,
    /// Data rows in the file, before [`RouteSelect`].
    pub total_rows: u64,
    /// Set when the last line was cut short (a killed writer); every row before it was read.
    pub truncated: Option<Truncated>,
}

impl RouteTable {
    /// Reads `path`, on two threads when it has [`PARALLEL_FROM_BYTES`] or more.
    ///
    /// # Errors
    /// As [`TraceReader::new`] for the head; [`Error::Field`] / [`Error::Line`] naming the file
    /// line of the first bad row; [`Error::Io`].
    pub fn read(path: impl AsRef<Path>, select: &RouteSelect) -> Result<Self> {
        Self::read_parallel_from(path, select, PARALLEL_FROM_BYTES)
    }

    /// [`Self::read`] with the size from which two threads are used (tests use 1 to split
    /// small files).
    ///
    /// # Errors
    /// As [`Self::read`].
    pub fn read_parallel_from(
        path: impl AsRef<Path>,
        select: &RouteSelect,
        parallel_from: u64,
    ) -> Result<Self> {
        let path = path.as_ref();
        let head = TraceReader::<BufReader<File>, RouteRow>::open(path)?.into_head();
        let body_start = head.table.bytes_consumed();
        let first_line = head.table.line_no();
        let header = head.table.header_raw().to_vec();
        let columns = head.table.header().len();
        let mut src = head.table.into_source();
        let size = src
            .get_ref()
            .metadata()
            .map_err(|e| Error::io(path, e))?
            .len();
        let ctx = Context {
            path,
            map: &head.map,
            header: &header,
            columns,
            select: *select,
        };
        let mut table = Self::empty(path, head.info, &head.map, head.truncated);
        if header.is_empty() {
            // No header (or a cut one): no rows can follow.
            return Ok(table);
        }
        let body = size.saturating_sub(body_start);
        let split = if body >= parallel_from.max(2) {
            newline_after(path, body_start + body / 2, size)?
        } else {
            None
        };
        let part = match split {
            None => Part::new(first_line, body).run(&ctx, &mut src)?,
            Some(split) => {
                let mut second = File::open(path).map_err(|e| Error::io(path, e))?;
                second
                    .seek(SeekFrom::Start(split))
                    .map_err(|e| Error::io(path, e))?;
                let (a, b) = std::thread::scope(|scope| {
                    let later = scope.spawn(|| Part::new(0, size - split).run(&ctx, second));
                    // The first part reserves for all rows, so the second appends in place.
                    let first =
                        Part::new(first_line, body).run(&ctx, (&mut src).take(split - body_start));
                    let later = later.join().unwrap_or_else(|_| {
                        Err(Error::line(path, 0, "the second reader thread panicked"))
                    });
                    (first, later)
                });
                let mut a = a?;
                // The second part counted lines from its own start.
                let mut b = b.map_err(|e| shift_line(e, a.line_no))?;
                b.truncated = b
                    .truncated
                    .map(|(line, e)| (line + a.line_no, shift_line(e, a.line_no)));
                a.columns.append(&mut b.columns);
                a.n_dropped += b.n_dropped;
                a.total_rows += b.total_rows;
                a.truncated = a.truncated.or(b.truncated);
                a
            }
        };
        table.fill(part);
        Ok(table)
    }

    /// Reads a route trace from any reader (one thread); `label` names it in errors.
    ///
    /// # Errors
    /// As [`Self::read`].
    pub fn from_reader(
        src: impl Read,
        label: impl AsRef<Path>,
        select: &RouteSelect,
    ) -> Result<Self> {
        let label = label.as_ref();
        let head = TraceReader::<_, RouteRow>::new(BufReader::with_capacity(1 << 16, src), label)?
            .into_head();
        let first_line = head.table.line_no();
        let header = head.table.header_raw().to_vec();
        let ctx = Context {
            path: label,
            map: &head.map,
            header: &header,
            columns: head.table.header().len(),
            select: *select,
        };
        let mut table = Self::empty(label, head.info.clone(), &head.map, head.truncated.clone());
        if header.is_empty() {
            return Ok(table);
        }
        let part = Part::new(first_line, 0).run(&ctx, head.table.into_source())?;
        table.fill(part);
        Ok(table)
    }

    fn empty(
        path: &Path,
        info: RouteTraceInfo,
        map: &[Option<usize>],
        truncated: Option<Truncated>,
    ) -> Self {
        RouteTable {
            path: path.to_path_buf(),
            info,
            columns: RouteColumns::default(),
            // `dropped` is the last of ROUTE_COLUMNS.
            has_dropped: map
                .get(ROUTE_COLUMNS.len() - 1)
                .copied()
                .flatten()
                .is_some(),
            n_dropped: 0,
            total_rows: 0,
            truncated,
        }
    }

    fn fill(&mut self, mut part: Part) {
        part.columns.shrink_to_fit();
        self.columns = part.columns;
        self.n_dropped = part.n_dropped;
        self.total_rows = part.total_rows;
        if let Some((line, e)) = part.truncated {
            self.truncated = Some(Truncated {
                line,
                reason: e.to_string(),
            });
        }
    }
}

/// What every part of one read shares.
struct Context<'a> {
    path: &'a Path,
    map: &'a [Option<usize>],
    header: &'a [u8],
    /// Columns of the header row (a row may not have more fields).
    columns: usize,
    select: RouteSelect,
}

/// One contiguous run of lines and the rows kept from it.
struct Part {
    columns: RouteColumns,
    n_dropped: usize,
    total_rows: u64,
    /// Number of the last line read (file line numbers for the first part, numbers relative to
    /// the part's start for a later one).
    line_no: u64,
    /// Bytes the part is expected to hold (0 = unknown): sizes the columns once.
    size_hint: u64,
    reserved: bool,
    /// A cut-short last line: its number and the error it would otherwise have been (kept as
    /// an error so a later part's line number can still be corrected).
    truncated: Option<(u64, Error)>,
    spans: Vec<(usize, usize)>,
    unquoted: Vec<u8>,
}

impl Part {
    fn new(line_no: u64, size_hint: u64) -> Self {
        Part {
            columns: RouteColumns::default(),
            n_dropped: 0,
            total_rows: 0,
            line_no,
            size_hint,
            reserved: false,
            truncated: None,
            spans: Vec::with_capacity(16),
            unquoted: Vec::new(),
        }
    }

    /// Feeds every line of `src` to [`Self::line`], splitting big chunks in place.
    fn run(mut self, ctx: &Context<'_>, mut src: impl Read) -> Result<Self> {
        // One byte over the longest accepted line: a full buffer without a newline is an
        // over-long line, whatever the chunking.
        let mut buf = vec![0u8; MAX_LINE_BYTES + 1];
        let mut filled = 0usize;
        let lines_before = self.line_no;
        loop {
            let n = loop {
                match src.read(&mut buf[filled..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io(ctx.path, e)),
                }
            };
            filled += n;
            let mut pos = 0usize;
            while let Some(nl) = buf[pos..filled].iter().position(|&b| b == b'\n') {
                self.line(ctx, &buf[pos..pos + nl], true)?;
                pos += nl + 1;
            }
            if n == 0 {
                if pos < filled {
                    self.line(ctx, &buf[pos..filled], false)?;
                }
                return Ok(self);
            }
            if !self.reserved && pos > 0 {
                self.reserve(ctx, pos as u64, self.line_no - lines_before);
            }
            buf.copy_within(pos..filled, 0);
            filled -= pos;
            if filled == buf.len() {
                return Err(line_too_long(ctx.path, self.line_no + 1));
            }
        }
    }

    /// Sizes the columns from the bytes per line of the first chunk, so they never double
    /// past the need.
    fn reserve(&mut self, ctx: &Context<'_>, bytes_seen: u64, lines_seen: u64) {
        self.reserved = true;
        if self.size_hint == 0 || lines_seen == 0 {
            return;
        }
        let per_line = (bytes_seen as f64 / lines_seen as f64).max(1.0);
        let estimate = (self.size_hint as f64 / per_line * 1.02) as usize + 1024;
        let missing = estimate.saturating_sub(self.columns.len());
        self.columns.reserve(missing, ctx.select.all_columns);
    }

    /// One line, with the row reader's end-of-file rule.
    fn line(&mut self, ctx: &Context<'_>, raw: &[u8], complete: bool) -> Result<()> {
        self.line_no += 1;
        match self.row(ctx, raw, complete) {
            Err(e) if is_cut_short(&e, complete) => {
                // Kept as an error until its line number is final (see `Part::truncated`).
                self.truncated = Some((self.line_no, e));
                Ok(())
            }
            other => other,
        }
    }

    fn row(&mut self, ctx: &Context<'_>, raw: &[u8], complete: bool) -> Result<()> {
        let mut text = raw;
        while let [rest @ .., b'\r' | b'\n'] = text {
            text = rest;
        }
        if text.iter().all(u8::is_ascii_whitespace) || text == ctx.header {
            return Ok(());
        }
        let line = self.line_no;
        if text.first() == Some(&b'#') {
            // Traces carry no trailer: a stray comment is skipped, as the row reader does.
            return std::str::from_utf8(text)
                .map(|_| ())
                .map_err(|_| Error::line(ctx.path, line, "comment line is not UTF-8"));
        }
        if !complete {
            // The row reader's torn-row rule (`table::ensure_complete`).
            return Err(cut_line(ctx.path, line));
        }
        let in_text = split_line(text, 0, &mut self.spans, &mut self.unquoted)
            .map_err(|m| Error::line(ctx.path, line, m))?;
        let fields = Fields::new(
            if in_text { text } else { &self.unquoted },
            &self.spans,
            line,
            complete,
        );
        ensure_width(&fields, ctx.columns, ctx.path)?;
        let row = RouteRow::parse(ctx.map, &fields, ctx.path)?;
        self.total_rows += 1;
        if !ctx.select.keeps(&row) {
            return Ok(());
        }
        let narrow = |column: usize, what: &str| {
            let raw = ctx.map[column]
                .and_then(|i| fields.get(i))
                .unwrap_or_default();
            Error::field(ctx.path, line, ROUTE_COLUMNS[column], what, raw)
        };
        let step = i32::try_from(row.step)
            .map_err(|_| narrow(2, "outside the 32-bit range the column reader stores"))?;
        let layer = u16::try_from(row.layer)
            .map_err(|_| narrow(3, "expected a layer index of at most 65535"))?;
        let slot = u16::try_from(row.slot)
            .map_err(|_| narrow(4, "expected a slot index of at most 65535"))?;
        let dropped = row.dropped.unwrap_or(false);
        self.n_dropped += usize::from(dropped);
        let c = &mut self.columns;
        if ctx.select.all_columns {
            c.turn.push(row.turn);
            c.phase.push(row.phase);
            c.dropped.push(dropped);
        }
        c.step.push(step);
        c.layer.push(layer);
        c.slot.push(slot);
        c.expert.push(row.expert);
        c.weight.push(row.weight);
        c.residency.push(row.residency);
        c.expert_bytes.push(row.expert_bytes);
        Ok(())
    }
}

/// The offset just after the first newline at or after `from` (below `end`), `None` when there
/// is none within 1 MiB.
fn newline_after(path: &Path, from: u64, end: u64) -> Result<Option<u64>> {
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    f.seek(SeekFrom::Start(from))
        .map_err(|e| Error::io(path, e))?;
    let mut window = vec![0u8; 1 << 20];
    let n = f.read(&mut window).map_err(|e| Error::io(path, e))?;
    Ok(window[..n]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| from + i as u64 + 1)
        .filter(|&at| at < end))
}

/// Adds `by` to the line number an error names (a later part counted from its own start).
fn shift_line(e: Error, by: u64) -> Error {
    match e {
        Error::Field {
            path,
            line,
            column,
            message,
            found,
        } => Error::Field {
            path,
            line: line + by,
            column,
            message,
            found,
        },
        Error::Line {
            path,
            line,
            message,
        } => Error::Line {
            path,
            line: line + by,
            message,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{PHASE_DECODE, PHASE_PREFILL};

    const SMALL: &str = "# route_trace v1\n\
# model=/m/x y.gguf arch=qwen3moe n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=10\n# layer=1 expert_bytes=2097152 dense_bytes=20\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,0,0,0,0,3,0.6,0,1048576\n0,0,0,0,1,4,0.4,0,1048576\n0,1,5,0,0,3,0.7,1,0\n0,1,5,0,1,5,nan,0,1048576\n";

    const ALL: RouteSelect = RouteSelect {
        turn: None,
        phase: None,
        all_columns: true,
    };

    fn columns(text: &str, select: &RouteSelect) -> Result<RouteTable> {
        RouteTable::from_reader(text.as_bytes(), "t.csv", select)
    }

    /// What the row reader makes of `text`: its rows, or its first error, and its truncation.
    fn rows(text: &str) -> (Result<Vec<RouteRow>>, Option<Truncated>) {
        let mut r = match TraceReader::<_, RouteRow>::new(text.as_bytes(), "t.csv") {
            Ok(r) => r,
            Err(e) => return (Err(e), None),
        };
        let rows = r.by_ref().collect::<Result<Vec<_>>>();
        (rows, r.truncated().cloned())
    }

    fn as_rows(t: &RouteTable) -> Vec<RouteRow> {
        let c = &t.columns;
        (0..c.len())
            .map(|i| RouteRow {
                turn: c.turn[i],
                phase: c.phase[i],
                step: i64::from(c.step[i]),
                layer: u32::from(c.layer[i]),
                slot: u32::from(c.slot[i]),
                expert: c.expert[i],
                weight: c.weight[i],
                residency: c.residency[i],
                expert_bytes: c.expert_bytes[i],
                dropped: t.has_dropped.then_some(c.dropped[i]),
            })
            .collect()
    }

    /// The columnar reader and the row reader agree: same rows, same error text, same cut.
    fn assert_same_as_row_reader(text: &str) {
        let (want, want_cut) = rows(text);
        let got = columns(text, &ALL);
        match (want, got) {
            (Ok(want), Ok(got)) => {
                let got_rows = as_rows(&got);
                assert_eq!(want.len(), got_rows.len(), "{text}");
                for (a, b) in want.iter().zip(&got_rows) {
                    // NaN weights compare by bits.
                    assert_eq!(
                        (
                            a.turn,
                            a.phase,
                            a.step,
                            a.layer,
                            a.slot,
                            a.expert,
                            a.weight.to_bits()
                        ),
                        (
                            b.turn,
                            b.phase,
                            b.step,
                            b.layer,
                            b.slot,
                            b.expert,
                            b.weight.to_bits()
                        )
                    );
                    // An empty `dropped` cell is `None` in a row, `false` in the column.
                    let (da, db) = (a.dropped.unwrap_or(false), b.dropped.unwrap_or(false));
                    assert_eq!(
                        (a.residency, a.expert_bytes, da),
                        (b.residency, b.expert_bytes, db)
                    );
                }
                assert_eq!(want_cut, got.truncated, "{text}");
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!(
                "row reader {a:?}, column reader {:?}",
                b.map(|t| t.columns.len())
            ),
        }
    }

    #[test]
    fn reads_preamble_rows_and_filters() {
        let t = columns(SMALL, &ALL).expect("valid");
        assert_eq!(t.info.model.as_deref(), Some("/m/x y.gguf"));
        assert_eq!(t.info.layers[1].expert_bytes, 2_097_152);
        assert!(!t.has_dropped);
        assert_eq!((t.total_rows, t.columns.len()), (4, 4));
        let decode = RouteSelect {
            phase: Some(PHASE_DECODE),
            ..RouteSelect::default()
        };
        let t = columns(SMALL, &decode).expect("valid");
        assert_eq!((t.total_rows, t.columns.len()), (4, 2));
        assert_eq!(t.columns.expert, [3, 5]);
        assert!(t.columns.turn.is_empty() && t.columns.dropped.is_empty());
        let prefill_turn_1 = RouteSelect {
            turn: Some(1),
            phase: Some(PHASE_PREFILL),
            all_columns: false,
        };
        assert!(
            columns(SMALL, &prefill_turn_1)
                .expect("valid")
                .columns
                .is_empty()
        );
        let negative = RouteSelect {
            turn: Some(-1),
            ..RouteSelect::default()
        };
        assert!(columns(SMALL, &negative).expect("valid").columns.is_empty());
    }

    #[test]
    fn agrees_with_the_row_reader_on_odd_but_valid_files() {
        assert_same_as_row_reader(SMALL);
        let ten = SMALL
            .replace("expert_bytes\n", "expert_bytes,dropped\n")
            .replace("1048576\n", "1048576,0\n")
            .replace("0,1,5,0,1,5,nan,0,1048576,0", "0,1,5,0,1,5,nan,0,0,1")
            .replace("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,3,0.7,1,0,");
        let t = columns(&ten, &ALL).expect("valid");
        assert!(t.has_dropped);
        assert_eq!(t.n_dropped, 1);
        assert_same_as_row_reader(&ten);
        // CRLF, blank lines, a repeated header, a stray comment, a quoted cell, reordered
        // columns.
        let odd = SMALL.replace('\n', "\r\n").replace(
            "0,1,5,0,0,3,0.7,1,0\r\n",
            "\r\n# note\r\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\r\n0,1,5,0,0,\"3\",0.7,1,0\r\n",
        );
        assert_eq!(columns(&odd, &ALL).expect("valid").columns.len(), 4);
        assert_same_as_row_reader(&odd);
        let reordered = "# route_trace v1\nexpert,turn,phase,step,layer,slot,weight,residency,expert_bytes,extra\n7,0,1,3,2,0,1e-05,2,0,zz\n";
        assert_eq!(columns(reordered, &ALL).expect("valid").columns.expert, [7]);
        assert_same_as_row_reader(reordered);
        // No header yet (a run killed after its preamble): no rows, no error.
        let head_only = "# route_trace v1\n# model=m\n";
        assert_eq!(columns(head_only, &ALL).expect("valid").total_rows, 0);
        assert_same_as_row_reader(head_only);
    }

    #[test]
    fn agrees_with_the_row_reader_on_errors_and_cut_files() {
        for (from, to) in [
            ("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,x,0.7,1,0"),
            ("0,1,5,0,0,3,0.7,1,0", "0,2,5,0,0,3,0.7,1,0"),
            ("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,3,0.7,7,0"),
            ("0,1,5,0,0,3,0.7,1,0", "0,1,5,0"),
            ("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,3,0.7,1,\"0"),
            // A field past the header's nine columns: a garbage or merged line.
            ("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,3,0.7,1,0,oops"),
            ("turn,phase", "turn,phaze"),
            ("# route_trace v1", "# io_trace v1"),
        ] {
            let bad = SMALL.replace(from, to);
            assert!(columns(&bad, &ALL).is_err(), "{to}");
            assert_same_as_row_reader(&bad);
        }
        let e = columns(
            &SMALL.replace("0,1,5,0,0,3,0.7,1,0", "0,2,5,0,0,3,0.7,1,0"),
            &ALL,
        )
        .expect_err("phase 2");
        assert_eq!(
            e.to_string(),
            "t.csv:8: column `phase`: expected 0 (prefill) or 1 (decode) (found \"2\")"
        );
        // A last line cut short is reported, not an error; every row before it is kept.
        let cut = format!("{SMALL}0,1,6,0,0,3,0.");
        let t = columns(&cut, &ALL).expect("cut is not an error");
        assert_eq!(t.truncated.as_ref().map(|c| c.line), Some(10));
        assert_eq!(t.columns.len(), 4);
        assert_same_as_row_reader(&cut);
        // ...but a bad complete last line is an error.
        assert!(columns(&format!("{SMALL}0,1,6,0,0,3,0.\n"), &ALL).is_err());
        // A cut that still parses (`4096` cut to `40`) is a torn row too: left out, noted.
        let torn = format!("{SMALL}0,1,6,0,0,3,0.5,0,40");
        let t = columns(&torn, &ALL).expect("torn is not an error");
        assert_eq!(t.truncated.as_ref().map(|c| c.line), Some(10));
        assert_eq!(t.columns.len(), 4);
        assert_same_as_row_reader(&torn);
        // Weights the contract rules out are errors naming the line, in both readers.
        for w in ["inf", "-inf", "-0.5", "1e308", "1001"] {
            let bad = SMALL.replace("0,1,5,0,0,3,0.7,1,0", &format!("0,1,5,0,0,3,{w},1,0"));
            let e = columns(&bad, &ALL).expect_err(w);
            assert!(
                e.to_string()
                    .starts_with("t.csv:8: column `weight`: expected a routing weight"),
                "{w}: {e}"
            );
            assert_same_as_row_reader(&bad);
        }
    }

    #[test]
    fn values_the_columns_cannot_hold_name_the_line() {
        let big = SMALL.replace("0,1,5,0,0,3,0.7,1,0", "0,1,5,70000,0,3,0.7,1,0");
        let e = columns(&big, &ALL).expect_err("layer 70000");
        assert!(e.to_string().starts_with("t.csv:8: column `layer`"), "{e}");
        // The row reader's wider row takes it: a storage limit, not a format error.
        assert!(rows(&big).0.is_ok());
    }

    #[test]
    fn two_threads_read_what_one_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.csv");
        let mut text = SMALL.to_string();
        for s in 6..400 {
            text.push_str(&format!(
                "0,1,{s},0,0,{},0.6,1,0\n0,1,{s},0,1,{},0.4,0,1048576\n",
                s % 8,
                (s + 3) % 8
            ));
        }
        std::fs::write(&path, &text).expect("write");
        let one = RouteTable::read_parallel_from(&path, &ALL, u64::MAX).expect("one thread");
        let two = RouteTable::read_parallel_from(&path, &ALL, 1).expect("two threads");
        assert_eq!(
            (one.columns.len(), one.total_rows),
            (two.columns.len(), two.total_rows)
        );
        // NaN weights compare by bits.
        let bits = |t: &RouteTable| {
            t.columns
                .weight
                .iter()
                .map(|w| w.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&one), bits(&two));
        let (mut a, mut b) = (one.columns.clone(), two.columns.clone());
        (a.weight, b.weight) = (Vec::new(), Vec::new());
        assert_eq!(a, b);
        assert_eq!(
            (one.total_rows, one.info.clone()),
            (two.total_rows, two.info.clone())
        );
        assert_eq!(one.columns.len(), 4 + 2 * 394);
        // Errors and cuts in the second half name file lines.
        let lines: Vec<&str> = text.lines().collect();
        let late = lines.len() - 20;
        let mut bad: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        bad[late] = "0,1,9,0,0,x,0.6,1,0".into();
        std::fs::write(&path, bad.join("\n") + "\n").expect("write");
        let e1 = RouteTable::read_parallel_from(&path, &ALL, u64::MAX).expect_err("bad");
        let e2 = RouteTable::read_parallel_from(&path, &ALL, 1).expect_err("bad");
        assert_eq!(e1.to_string(), e2.to_string());
        assert!(e2.to_string().contains(&format!(":{}:", late + 1)), "{e2}");
        std::fs::write(&path, format!("{text}0,1,9")).expect("write");
        let t = RouteTable::read_parallel_from(&path, &ALL, 1).expect("cut");
        assert_eq!(t.truncated.map(|c| c.line), Some(lines.len() as u64 + 1));
    }
}
