//! The streaming reader under every CSV format here: `#` preamble, header row, data rows,
//! `#` comment lines between rows (the `# summary` trailers).
//!
//! Constant memory whatever the file size: one line buffer and one field buffer are reused
//! for every row, so the hot path does not allocate. Handles a UTF-8 BOM, CRLF line ends,
//! blank lines (skipped) and RFC 4180 quoting (`"a,b"`, `""` for a quote — the compute trace
//! quotes node names that contain a comma). A quoted field cannot span lines (the writers
//! replace newlines with spaces).
//!
//! Typed readers ([`crate::metrics`], [`crate::trace`]) sit on [`TableReader`]; it is public
//! for consumers that want a column this crate does not know yet.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::kv::{KvMap, parse_kv_line};

/// Longest line a table reader accepts (telemetry lines are well under a KiB).
pub const MAX_LINE_BYTES: usize = 4 << 20;

/// The lines before the header row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preamble {
    /// The `#` lines, in order, without line ends (the leading `#` kept).
    pub lines: Vec<String>,
    /// 1-based line number of each entry of [`Self::lines`].
    pub line_numbers: Vec<u64>,
    /// Lines before the header row, blank ones included — what to pass as `skip_rows` to a
    /// CSV engine such as polars (which then also needs `comment_prefix = "#"` for the
    /// trailers). Equals the header's 1-based line number minus one.
    pub skip_rows: u64,
}

impl Preamble {
    /// All `key=value` pairs of the preamble merged in order (a later key wins), see
    /// [`crate::kv`] for the tokenising rule.
    pub fn merged(&self) -> KvMap {
        let mut m = KvMap::new();
        for l in &self.lines {
            m.extend(&parse_kv_line(l).pairs);
        }
        m
    }

    /// Each `#` line tokenised (see [`crate::kv`]), with its 1-based line number.
    pub fn kv_lines(&self) -> impl Iterator<Item = (u64, crate::kv::KvLine)> + '_ {
        self.lines.iter().enumerate().map(|(i, line)| {
            let no = self.line_numbers.get(i).copied().unwrap_or(0);
            (no, parse_kv_line(line))
        })
    }

    /// The first preamble line's bare words, e.g. `["bmoe_metrics", "v2"]` or
    /// `["route_trace", "v1"]`; empty when there is no preamble.
    pub fn magic(&self) -> Vec<String> {
        self.lines
            .first()
            .map(|l| parse_kv_line(l).words)
            .unwrap_or_default()
    }

    /// The `vN` version of the magic line (`# bmoe_metrics v2` → `Some(2)`).
    pub fn version(&self) -> Option<u32> {
        self.magic()
            .get(1)
            .and_then(|w| w.strip_prefix('v'))
            .and_then(|n| n.parse().ok())
    }
}

/// One data row: its fields (unquoted) and where it came from.
#[derive(Debug)]
pub struct Fields<'a> {
    buf: &'a [u8],
    spans: &'a [(usize, usize)],
    /// 1-based line number.
    pub line: u64,
    /// Whether the line ended with a newline. A last line without one may be cut short by a
    /// killed writer.
    pub complete: bool,
}

impl<'a> Fields<'a> {
    /// A row whose field `i` is `buf[spans[i].0..spans[i].1]` (for readers that split lines
    /// themselves, e.g. the columnar route reader).
    pub(crate) fn new(
        buf: &'a [u8],
        spans: &'a [(usize, usize)],
        line: u64,
        complete: bool,
    ) -> Self {
        Fields {
            buf,
            spans,
            line,
            complete,
        }
    }

    /// Number of fields on the row.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether the row has no field (never true for a row the reader returns).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Field `i` (unquoted bytes), `None` past the end of the row.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        let &(start, end) = self.spans.get(i)?;
        self.buf.get(start..end)
    }

    /// Field `i` as text (lossy UTF-8), `None` past the end of the row.
    pub fn get_str(&self, i: usize) -> Option<std::borrow::Cow<'a, str>> {
        self.get(i).map(String::from_utf8_lossy)
    }
}

/// What [`TableReader::next_line`] found.
#[derive(Debug)]
pub enum Line<'a> {
    /// A data row.
    Row(Fields<'a>),
    /// A `#` line after the header (e.g. `# summary ...`), without line end.
    Comment {
        /// The text, `#` included.
        text: &'a str,
        /// 1-based line number.
        line: u64,
        /// Whether the line ended with a newline (see [`Fields::complete`]).
        complete: bool,
    },
}

/// Streaming reader of one preamble + header + rows file.
pub struct TableReader<R> {
    src: R,
    path: PathBuf,
    line_no: u64,
    raw: Vec<u8>,
    /// Unquoted field bytes, used only for lines that contain a quote.
    fields: Vec<u8>,
    /// Field spans: into `raw` when `spans_in_raw`, else into `fields`.
    spans: Vec<(usize, usize)>,
    spans_in_raw: bool,
    preamble: Preamble,
    header: Vec<String>,
    header_line: u64,
    header_raw: Vec<u8>,
    last_complete: bool,
    header_cut: Option<Truncated>,
    /// Bytes taken from `src` so far: after the header, the byte offset of the first row.
    consumed: u64,
}

impl TableReader<BufReader<File>> {
    /// Opens `path` and reads its preamble and header.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened or read; see [`TableReader::new`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        TableReader::new(open_buffered(path)?, path)
    }
}

/// Opens `path` for one of the streaming readers (64 KiB buffer).
pub(crate) fn open_buffered(path: &Path) -> Result<BufReader<File>> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    Ok(BufReader::with_capacity(1 << 16, f))
}

impl<R: BufRead> TableReader<R> {
    /// Reads the preamble and the header row from `src`; `label` names the source in errors
    /// (a path, or e.g. `<stdin>`).
    ///
    /// A file with a preamble but no header yet (a run killed before its first row) is not an
    /// error: the header is empty and no rows follow.
    ///
    /// # Errors
    /// [`Error::Io`] on a read error; [`Error::Line`] when a preamble or header line is not
    /// UTF-8 or the header has an unterminated quote.
    pub fn new(src: R, label: impl AsRef<Path>) -> Result<Self> {
        let mut t = TableReader {
            src,
            path: label.as_ref().to_path_buf(),
            line_no: 0,
            raw: Vec::with_capacity(256),
            fields: Vec::with_capacity(256),
            spans: Vec::with_capacity(32),
            spans_in_raw: false,
            preamble: Preamble::default(),
            header: Vec::new(),
            header_line: 0,
            header_raw: Vec::new(),
            last_complete: true,
            header_cut: None,
            consumed: 0,
        };
        loop {
            if !t.read_raw()? {
                t.preamble.skip_rows = t.line_no;
                return Ok(t);
            }
            let text = trim_line(&t.raw, t.line_no == 1);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if text.first() == Some(&b'#') {
                let s = std::str::from_utf8(text)
                    .map_err(|_| Error::line(&t.path, t.line_no, "preamble line is not UTF-8"))?;
                t.preamble.lines.push(s.to_string());
                t.preamble.line_numbers.push(t.line_no);
                continue;
            }
            let text = text.to_vec();
            if !t.last_complete {
                // The header itself was cut short (a writer killed while writing it): no
                // rows can follow, and a partial header must not be read as real columns.
                t.header_cut = Some(Truncated {
                    line: t.line_no,
                    reason: "the header row has no line end: the file was cut short".into(),
                });
                t.preamble.skip_rows = t.line_no - 1;
                return Ok(t);
            }
            let in_text = split_line(&text, 0, &mut t.spans, &mut t.fields)
                .map_err(|m| Error::line(&t.path, t.line_no, m))?;
            let src: &[u8] = if in_text { &text } else { &t.fields };
            let mut header = Vec::with_capacity(t.spans.len());
            for &(a, b) in &t.spans {
                let name = std::str::from_utf8(&src[a..b])
                    .map_err(|_| Error::line(&t.path, t.line_no, "header row is not UTF-8"))?;
                header.push(name.trim().to_string());
            }
            t.header = header;
            t.header_line = t.line_no;
            t.header_raw = text;
            t.preamble.skip_rows = t.line_no - 1;
            return Ok(t);
        }
    }

    /// The preamble.
    pub fn preamble(&self) -> &Preamble {
        &self.preamble
    }

    /// The header's column names (empty when the file ended before a header).
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// Set when the file ended inside its header row (no rows follow).
    pub fn header_truncated(&self) -> Option<&Truncated> {
        self.header_cut.as_ref()
    }

    /// 1-based line number of the header row (0 when there is none).
    pub fn header_line(&self) -> u64 {
        self.header_line
    }

    /// Index of column `name` in the header.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// The label errors use for this source.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header row as it stands in the file (line end stripped); repetitions are skipped.
    pub(crate) fn header_raw(&self) -> &[u8] {
        &self.header_raw
    }

    /// Bytes read from the source so far; right after [`TableReader::new`] this is where the
    /// first row starts.
    pub(crate) fn bytes_consumed(&self) -> u64 {
        self.consumed
    }

    /// The source, positioned at the first byte not read yet (buffered bytes included).
    pub(crate) fn into_source(self) -> R {
        self.src
    }

    /// Whether the last line read ended with a newline. `false` means it was the file's last
    /// line and may have been cut short by a killed writer.
    pub fn last_line_complete(&self) -> bool {
        self.last_complete
    }

    /// 1-based number of the last line read.
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// Reads the next data row or comment line; `Ok(None)` at the end. Blank lines and
    /// repetitions of the header row are skipped.
    ///
    /// # Errors
    /// [`Error::Io`] on a read error; [`Error::Line`] for an unterminated quote or a comment
    /// that is not UTF-8.
    pub fn next_line(&mut self) -> Result<Option<Line<'_>>> {
        loop {
            if !self.read_raw()? {
                return Ok(None);
            }
            let complete = self.last_complete;
            let first = self.line_no == 1;
            let (start, end) = {
                let t = trim_line(&self.raw, first);
                let start = t.as_ptr() as usize - self.raw.as_ptr() as usize;
                (start, start + t.len())
            };
            let text = &self.raw[start..end];
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if text.first() == Some(&b'#') {
                let line = self.line_no;
                let s = std::str::from_utf8(&self.raw[start..end])
                    .map_err(|_| Error::line(&self.path, line, "comment line is not UTF-8"))?;
                return Ok(Some(Line::Comment {
                    text: s,
                    line,
                    complete,
                }));
            }
            if !self.header_raw.is_empty() && text == self.header_raw.as_slice() {
                continue;
            }
            self.spans_in_raw = split_line(
                &self.raw[start..end],
                start,
                &mut self.spans,
                &mut self.fields,
            )
            .map_err(|m| Error::line(&self.path, self.line_no, m))?;
            return Ok(Some(Line::Row(Fields {
                buf: if self.spans_in_raw {
                    &self.raw
                } else {
                    &self.fields
                },
                spans: &self.spans,
                line: self.line_no,
                complete,
            })));
        }
    }

    /// Reads one raw line into `self.raw`; false at EOF.
    fn read_raw(&mut self) -> Result<bool> {
        self.raw.clear();
        // Bounded, so a file without line ends (a binary, a wrong path) cannot make the
        // reader buffer all of it.
        let n = (&mut self.src)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut self.raw)
            .map_err(|e| Error::io(&self.path, e))?;
        if n == 0 {
            return Ok(false);
        }
        self.consumed += n as u64;
        self.line_no += 1;
        self.last_complete = self.raw.last() == Some(&b'\n');
        if self.raw.len() > MAX_LINE_BYTES {
            // Not a line cut short at the end of the file: a hard error, never a
            // truncation flag.
            self.last_complete = true;
            return Err(line_too_long(&self.path, self.line_no));
        }
        Ok(true)
    }
}

/// The error for a line longer than [`MAX_LINE_BYTES`]: never a truncation, always fatal.
pub(crate) fn line_too_long(path: &Path, line: u64) -> Error {
    Error::line(
        path,
        line,
        format!(
            "line longer than {} MiB: this is not a bmoe telemetry file (or it is corrupted)",
            MAX_LINE_BYTES >> 20
        ),
    )
}

/// Splits `line` (which starts at offset `base` of its buffer) into field spans.
///
/// Returns `true` when the spans index the line's own buffer (no quote on the line: the hot
/// path, no copy), `false` when they index `fields`, which then holds the unquoted bytes.
pub(crate) fn split_line(
    line: &[u8],
    base: usize,
    spans: &mut Vec<(usize, usize)>,
    fields: &mut Vec<u8>,
) -> std::result::Result<bool, &'static str> {
    spans.clear();
    // The hot path: no quote on the line, fields are spans of it (one pass, no copy).
    let mut start = 0;
    let mut quoted = false;
    for (i, &b) in line.iter().enumerate() {
        if b == b',' {
            spans.push((base + start, base + i));
            start = i + 1;
        } else if b == b'"' {
            quoted = true;
            break;
        }
    }
    if !quoted {
        spans.push((base + start, base + line.len()));
        return Ok(true);
    }
    spans.clear();
    fields.clear();
    let mut i = 0;
    let n = line.len();
    loop {
        let field_start = fields.len();
        if i < n && line[i] == b'"' {
            i += 1;
            loop {
                match line.get(i) {
                    None => {
                        return Err("unterminated quoted field (a quote opened and never closed)");
                    }
                    Some(b'"') if line.get(i + 1) == Some(&b'"') => {
                        fields.push(b'"');
                        i += 2;
                    }
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(&b) => {
                        fields.push(b);
                        i += 1;
                    }
                }
            }
        }
        // Unquoted text, or whatever sits between a closing quote and the next comma (kept
        // verbatim).
        while i < n && line[i] != b',' {
            fields.push(line[i]);
            i += 1;
        }
        spans.push((field_start, fields.len()));
        if i >= n {
            return Ok(false);
        }
        i += 1; // the comma
        if i == n {
            spans.push((fields.len(), fields.len()));
            return Ok(false);
        }
    }
}

/// A row left out because it is the file's last line and has no newline — the signature of a
/// writer killed mid-row, whether or not the cut text still parses. Reported, not fatal: every
/// row before it is good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// 1-based line number of the cut line.
    pub line: u64,
    /// Why it could not be read (the error it would otherwise have been).
    pub reason: String,
}

/// Where a typed row iterator stands: rows returned, whether it has ended, and the truncation
/// it found. Every reader of this crate steps through it, so the end-of-file rule — a last line
/// that has no newline is a cut-short file, reported by `truncated()` and left out, not a
/// failure (see [`ensure_complete`]) — is stated once.
#[derive(Debug)]
pub(crate) struct RowCursor {
    /// The cut-short last line, when there was one.
    pub(crate) truncated: Option<Truncated>,
    /// Rows returned so far.
    pub(crate) rows: u64,
    done: bool,
}

impl RowCursor {
    /// A cursor at the first row; `truncated` carries a cut found while reading the preamble.
    pub(crate) fn new(truncated: Option<Truncated>) -> Self {
        RowCursor {
            truncated,
            rows: 0,
            done: false,
        }
    }

    /// Whether the iterator has ended (end of data or an error already returned).
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// Turns one read attempt into what `Iterator::next` returns, applying the end-of-file rule.
    pub(crate) fn settle<R: BufRead, T>(
        &mut self,
        step: Result<Option<T>>,
        table: &TableReader<R>,
    ) -> Option<Result<T>> {
        match step {
            Ok(Some(row)) => {
                self.rows += 1;
                Some(Ok(row))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                if is_cut_short(&e, table.last_line_complete()) {
                    self.truncated = Some(Truncated {
                        line: table.line_no(),
                        reason: e.to_string(),
                    });
                    None
                } else {
                    Some(Err(e))
                }
            }
        }
    }
}

/// The end-of-file rule, stated once for every reader of this crate: an error on a line that
/// has no newline (necessarily the file's last) means the file was cut short by a killed
/// writer — reported as [`Truncated`], not a failure — unless the OS failed the read.
pub(crate) fn is_cut_short(e: &Error, line_complete: bool) -> bool {
    !line_complete && !matches!(e, Error::Io { .. })
}

/// The torn-row rule: a row on a line without a newline — necessarily the file's last — is
/// where a killed writer stopped, possibly inside a field (`3059712` cut to `305` still
/// parses), so it is never a row, whether it parses or not. The error this returns is turned
/// into [`Truncated`] by [`RowCursor::settle`] (and by the columnar route reader), so every
/// typed reader drops such a line and reports it instead of failing.
pub(crate) fn ensure_complete(f: &Fields<'_>, path: &Path) -> Result<()> {
    if f.complete {
        Ok(())
    } else {
        Err(cut_line(path, f.line))
    }
}

/// A row with more fields than the header has columns: a garbage or merged line (the writers
/// always write one field per header column), refused rather than read by its first fields.
pub(crate) fn ensure_width(f: &Fields<'_>, columns: usize, path: &Path) -> Result<()> {
    if f.len() <= columns {
        Ok(())
    } else {
        Err(Error::line(
            path,
            f.line,
            format!(
                "{} fields, but the header has {columns} columns (a garbage or merged line?)",
                f.len()
            ),
        ))
    }
}

/// The reason a line without a newline is left out (see [`ensure_complete`]).
pub(crate) fn cut_line(path: &Path, line: u64) -> Error {
    Error::line(
        path,
        line,
        "no line end: the file ends inside this line (a writer killed mid-row?)",
    )
}

/// Reads an optional column: `Ok(None)` when the header lacks it or the cell is empty.
pub(crate) fn opt_cell<T: crate::cell::Cell>(
    idx: Option<usize>,
    f: &Fields<'_>,
    path: &Path,
    column: &str,
) -> Result<Option<T>> {
    let Some(i) = idx else { return Ok(None) };
    let Some(b) = f.get(i) else {
        return Err(short_row(f, path, column));
    };
    if b.trim_ascii().is_empty() {
        return Ok(None);
    }
    T::parse(b)
        .map(Some)
        .ok_or_else(|| Error::field(path, f.line, column, T::EXPECTED, b))
}

/// Reads a required column (present in the header, checked when the reader opened).
pub(crate) fn req_cell<T: crate::cell::Cell>(
    idx: usize,
    f: &Fields<'_>,
    path: &Path,
    column: &str,
) -> Result<T> {
    let Some(b) = f.get(idx) else {
        return Err(short_row(f, path, column));
    };
    T::parse(b).ok_or_else(|| Error::field(path, f.line, column, T::EXPECTED, b))
}

/// Reads a required column holding a small code (`phase`, `residency`) and refuses values the
/// contract does not define; `expected` names the valid ones.
pub(crate) fn req_code(
    idx: usize,
    f: &Fields<'_>,
    path: &Path,
    column: &str,
    max: u8,
    expected: &str,
) -> Result<u8> {
    let Some(b) = f.get(idx) else {
        return Err(short_row(f, path, column));
    };
    <u8 as crate::cell::Cell>::parse(b)
        .filter(|&v| v <= max)
        .ok_or_else(|| Error::field(path, f.line, column, expected, b))
}

/// The error for a row that ends before `column`.
pub(crate) fn short_row(f: &Fields<'_>, path: &Path, column: &str) -> Error {
    Error::field(
        path,
        f.line,
        column,
        format!("missing: the row has only {} fields", f.len()),
        b"",
    )
}

/// Strips the line end (`\n`, `\r\n`) and, on the first line, a UTF-8 BOM.
fn trim_line(raw: &[u8], first: bool) -> &[u8] {
    let mut t = raw;
    if first {
        t = t.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(t);
    }
    while let Some((&last, rest)) = t.split_last() {
        if last == b'\n' || last == b'\r' {
            t = rest;
        } else {
            break;
        }
    }
    t
}

/// Reads only the preamble and header of a file — cheap, for handing the bulk to another CSV
/// engine (`skip_rows = preamble.skip_rows`, `comment_prefix = "#"`).
///
/// # Errors
/// As [`TableReader::open`].
pub fn read_head(path: impl AsRef<Path>) -> Result<(Preamble, Vec<String>)> {
    let t = TableReader::open(path)?;
    Ok((t.preamble.clone(), t.header.clone()))
}

/// Quotes a field for writing when it contains `,`, `"` or a line break (RFC 4180; line breaks
/// become spaces so a row stays one line).
pub fn quote_field(s: &str, out: &mut String) {
    if !s.contains([',', '"', '\n', '\r']) {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\"\""),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Counts the data lines of a reader the simple way (non-blank lines not starting with `#`,
/// minus the header): an independent check for tests and tools.
///
/// # Errors
/// [`Error::Io`] on a read error.
pub fn count_data_lines<R: Read>(src: R, label: &Path) -> Result<u64> {
    let mut r = BufReader::new(src);
    let mut buf = Vec::new();
    let mut n = 0u64;
    let mut first = true;
    loop {
        buf.clear();
        if r.read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(label, e))?
            == 0
        {
            break;
        }
        let t = trim_line(&buf, first);
        first = false;
        if t.iter().all(u8::is_ascii_whitespace) || t.first() == Some(&b'#') {
            continue;
        }
        n += 1;
    }
    Ok(n.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &str) -> Vec<Vec<String>> {
        let mut t = TableReader::new(text.as_bytes(), "mem").expect("open");
        let mut out = Vec::new();
        while let Some(l) = t.next_line().expect("line") {
            if let Line::Row(f) = l {
                out.push(
                    (0..f.len())
                        .map(|i| f.get_str(i).unwrap_or_default().into_owned())
                        .collect(),
                );
            }
        }
        out
    }

    #[test]
    fn quoting_crlf_bom_blank() {
        let r = rows("\u{feff}# x v1\r\na,b,c\r\n\r\n1,\"x,\"\"y\"\"\",3\r\n4,,\n");
        assert_eq!(r, vec![vec!["1", "x,\"y\"", "3"], vec!["4", "", ""]]);
    }

    #[test]
    fn preamble_skip_rows() {
        let t = TableReader::new("# a v2\n# k=v\n\nh1,h2\n1,2\n".as_bytes(), "mem").expect("open");
        assert_eq!(t.preamble().skip_rows, 3);
        assert_eq!(t.header_line(), 4);
        assert_eq!(t.preamble().version(), Some(2));
        assert_eq!(t.preamble().merged().get("k"), Some("v"));
    }

    #[test]
    fn unterminated_quote_is_an_error() {
        let mut t = TableReader::new("a,b\n1,\"x\n".as_bytes(), "mem").expect("open");
        let e = t.next_line().expect_err("must fail");
        assert!(e.to_string().contains("mem:2"), "{e}");
    }

    #[test]
    fn endless_line_is_an_error_not_a_huge_buffer() {
        let big = vec![b'x'; MAX_LINE_BYTES + 10];
        let e = TableReader::new(big.as_slice(), "bin")
            .err()
            .expect("must fail")
            .to_string();
        assert!(
            e.contains("bin:1") && e.contains("not a bmoe telemetry file"),
            "{e}"
        );
        let mut text = b"a,b\n".to_vec();
        text.extend_from_slice(&big);
        let mut t = TableReader::new(text.as_slice(), "bin").expect("header");
        assert!(t.next_line().is_err());
        // Typed readers report it as an error, not as a cut last line.
        let file = [b"step,wall_ms\n".as_slice(), &big, b"\n1,2\n"].concat();
        let mut r = crate::metrics::MetricsReader::new(file.as_slice(), "m").expect("header");
        assert!(r.next().is_some_and(|x| x.is_err()));
        assert!(r.truncated().is_none());
    }

    #[test]
    fn quote_round_trip() {
        let mut s = String::new();
        quote_field("a,\"b\"\nc", &mut s);
        assert_eq!(s, "\"a,\"\"b\"\" c\"");
    }
}
