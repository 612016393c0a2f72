//! Reading a route trace into typed columns.
//!
//! Columns are located by the header's names (the 9-column 2026-07-15 layout and the 10-column
//! layout with `dropped` both work); numbers are parsed strictly: a malformed line is an error
//! naming the file and line, never a silent skip or a crash. Only blank lines are skipped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::preamble::{get, kv_tokens};
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

    fn keeps(self, phase: u8) -> bool {
        match self {
            Self::Decode => phase == 1,
            Self::Prefill => phase == 0,
            Self::All => true,
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

/// Kept rows as columns, in file order.
#[derive(Debug, Clone, Default)]
pub struct RouteRows {
    /// `turn`.
    pub turn: Vec<i32>,
    /// `phase` (0 prefill, 1 decode).
    pub phase: Vec<u8>,
    /// `step`.
    pub step: Vec<i32>,
    /// `layer`.
    pub layer: Vec<u16>,
    /// `slot` (0 = router's top choice).
    pub slot: Vec<u16>,
    /// `expert`.
    pub expert: Vec<u32>,
    /// `weight`; NaN = unknown.
    pub weight: Vec<f64>,
    /// `residency` 0 miss, 1 hit, 2 prefetch hit.
    pub residency: Vec<u8>,
    /// `expert_bytes` charged to this routing.
    pub bytes: Vec<u64>,
    /// `dropped` (0 when the column is absent).
    pub dropped: Vec<u8>,
}

impl RouteRows {
    /// Number of kept rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.step.len()
    }

    /// True when no row was kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.step.is_empty()
    }
}

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
    /// Kept rows whose `dropped` is non-zero.
    pub n_dropped: usize,
    /// Data rows in the file before filtering.
    pub total_rows: usize,
}

const COLUMNS: [&str; 9] = [
    "turn",
    "phase",
    "step",
    "layer",
    "slot",
    "expert",
    "weight",
    "residency",
    "expert_bytes",
];

#[derive(Debug, Clone, Copy)]
struct Layout {
    idx: [usize; 9],
    dropped: Option<usize>,
    n_fields: usize,
}

impl Layout {
    fn positional() -> Self {
        Self {
            idx: [0, 1, 2, 3, 4, 5, 6, 7, 8],
            dropped: Some(9),
            n_fields: 9,
        }
    }

    fn from_header(path: &Path, line_no: usize, line: &str) -> Result<Self> {
        let names: Vec<&str> = line.split(',').map(str::trim).collect();
        let mut idx = [0usize; 9];
        for (slot, want) in COLUMNS.iter().enumerate() {
            idx[slot] = names.iter().position(|n| n == want).ok_or_else(|| {
                AnalyzeError::malformed(
                    path,
                    line_no,
                    format!("header has no `{want}` column (is this a route trace?)"),
                )
            })?;
        }
        let dropped = names.iter().position(|n| *n == "dropped");
        Ok(Self {
            idx,
            dropped,
            n_fields: names.len(),
        })
    }
}

fn parse_int(field: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(field).ok()?.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    s.parse::<i64>().ok()
}

fn field_err(path: &Path, line: usize, name: &str, raw: &[u8], want: &str) -> AnalyzeError {
    AnalyzeError::malformed(
        path,
        line,
        format!(
            "column `{name}`: {:?} is not {want}",
            String::from_utf8_lossy(raw).trim()
        ),
    )
}

fn int_in<T: TryFrom<i64>>(
    path: &Path,
    line: usize,
    name: &str,
    raw: &[u8],
    want: &str,
) -> Result<T> {
    parse_int(raw)
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| field_err(path, line, name, raw, want))
}

fn parse_weight(path: &Path, line: usize, raw: &[u8]) -> Result<f64> {
    if let Some(v) = fast_decimal(raw) {
        return Ok(v);
    }
    let s = std::str::from_utf8(raw)
        .map_err(|_| field_err(path, line, "weight", raw, "a number"))?
        .trim();
    if s == "nan" {
        return Ok(f64::NAN);
    }
    s.parse::<f64>()
        .map_err(|_| field_err(path, line, "weight", raw, "a number or nan"))
}

fn parse_meta_line(path: &Path, line_no: usize, line: &str, meta: &mut RouteMeta) -> Result<()> {
    let tokens = kv_tokens(line);
    let int_or_zero = |key: &str| -> Result<i64> {
        match get(&tokens, key) {
            None => Ok(0),
            Some(v) => v.trim().parse::<i64>().map_err(|_| {
                AnalyzeError::malformed(
                    path,
                    line_no,
                    format!("preamble `{key}={v}` is not an integer"),
                )
            }),
        }
    };
    if let Some(model) = get(&tokens, "model") {
        meta.model = model.to_string();
        meta.arch = get(&tokens, "arch").unwrap_or("?").to_string();
        meta.n_layer = int_or_zero("n_layer")?;
        meta.n_expert = int_or_zero("n_expert")?;
        meta.n_expert_used = int_or_zero("n_expert_used")?;
    } else if let (Some(_), Some(_)) = (get(&tokens, "layer"), get(&tokens, "expert_bytes")) {
        let layer = int_or_zero("layer")?;
        let eb = int_or_zero("expert_bytes")?;
        let db = int_or_zero("dense_bytes")?;
        let (Ok(eb), Ok(db)) = (u64::try_from(eb), u64::try_from(db)) else {
            return Err(AnalyzeError::malformed(
                path,
                line_no,
                "negative byte count in the preamble",
            ));
        };
        meta.first_expert_bytes.get_or_insert(eb);
        meta.expert_bytes.insert(layer, eb);
        meta.dense_bytes.insert(layer, db);
    }
    Ok(())
}

impl RouteTrace {
    /// Read only the leading `#` preamble of `path` (stops at the first other line).
    pub fn read_meta(path: &Path) -> Result<RouteMeta> {
        let file = std::fs::File::open(path).map_err(|e| AnalyzeError::io(path, e))?;
        let mut meta = RouteMeta {
            model: "?".into(),
            arch: "?".into(),
            ..RouteMeta::default()
        };
        for (i, line) in BufReader::new(file).split(b'\n').enumerate() {
            let line = line.map_err(|e| AnalyzeError::io(path, e))?;
            if line.first() != Some(&b'#') {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                break;
            }
            parse_meta_line(path, i + 1, &String::from_utf8_lossy(&line), &mut meta)?;
        }
        Ok(meta)
    }

    /// Read `path`, keeping rows that pass `filter`. Files of 32 MiB or more are parsed by two
    /// threads, one per half.
    pub fn read(path: &Path, filter: RouteFilter) -> Result<Self> {
        Self::read_split(path, filter, 32 << 20)
    }

    /// [`Self::read`] with an explicit size from which the file is parsed in two halves.
    pub fn read_split(path: &Path, filter: RouteFilter, split_at: u64) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| AnalyzeError::io(path, e))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        if size >= split_at.max(2)
            && let Some((split, layout)) = split_point(path, size)?
        {
            return Self::parse_halves(path, filter, size, split, layout);
        }
        let p = Parser::new(path, filter, size);
        Self::finish(path, run_parser(path, file, p)?)
    }

    /// Read a route trace from any reader; `path` is used in messages only.
    pub fn from_reader(path: &Path, reader: impl Read, filter: RouteFilter) -> Result<Self> {
        Self::finish(
            path,
            run_parser(path, reader, Parser::new(path, filter, 0))?,
        )
    }

    fn parse_halves(
        path: &Path,
        filter: RouteFilter,
        size: u64,
        split: u64,
        layout: Option<Layout>,
    ) -> Result<Self> {
        let open = || std::fs::File::open(path).map_err(|e| AnalyzeError::io(path, e));
        let first = open()?;
        let mut second = open()?;
        std::io::Seek::seek(&mut second, std::io::SeekFrom::Start(split))
            .map_err(|e| AnalyzeError::io(path, e))?;
        let (a, b) = std::thread::scope(|scope| {
            let hb = scope.spawn(|| {
                let mut p = Parser::new(path, filter, size - split);
                p.layout = layout;
                p.deferred_meta = Some(Vec::new());
                run_parser(path, second, p)
            });
            let a = run_parser(path, first.take(split), Parser::new(path, filter, size));
            let b = hb.join().unwrap_or_else(|_| {
                Err(AnalyzeError::Invalid {
                    message: "reader thread failed".into(),
                    hint: "re-run; report a bug".into(),
                })
            });
            (a, b)
        });
        let mut a = a?;
        // Line numbers of the second half start after the first half's lines.
        let offset = a.line_no;
        let mut b = b.map_err(|e| match e {
            AnalyzeError::Malformed { path, line, what } => AnalyzeError::Malformed {
                path,
                line: line + offset,
                what,
            },
            other => other,
        })?;
        for (line, text) in b.deferred_meta.take().unwrap_or_default() {
            parse_meta_line(path, line + offset, &text, &mut a.meta)?;
        }
        a.rows.append(&mut b.rows);
        a.n_dropped += b.n_dropped;
        a.total_rows += b.total_rows;
        Self::finish(path, a)
    }

    fn finish(path: &Path, p: Parser<'_>) -> Result<Self> {
        let Parser {
            meta,
            mut rows,
            layout,
            n_dropped,
            total_rows,
            ..
        } = p;
        rows.shrink_to_fit();
        let has_dropped = layout
            .as_ref()
            .is_some_and(|l| l.dropped.is_some_and(|d| d < l.n_fields));
        Ok(Self {
            path: path.to_path_buf(),
            meta,
            rows,
            has_dropped,
            n_dropped,
            total_rows,
        })
    }
}

/// Where to cut a big file in two (just after a newline near the middle), and the header layout
/// the second half must use. `None` when no cut is possible.
fn split_point(path: &Path, size: u64) -> Result<Option<(u64, Option<Layout>)>> {
    let file = std::fs::File::open(path).map_err(|e| AnalyzeError::io(path, e))?;
    let mut layout = None;
    for (i, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = line.map_err(|e| AnalyzeError::io(path, e))?;
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        if line.first() == Some(&b'#') || line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if line.starts_with(b"turn,") {
            layout = Some(Layout::from_header(
                path,
                i + 1,
                &String::from_utf8_lossy(line),
            )?);
        }
        break;
    }
    let mut file = std::fs::File::open(path).map_err(|e| AnalyzeError::io(path, e))?;
    let mid = size / 2;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(mid))
        .map_err(|e| AnalyzeError::io(path, e))?;
    let mut window = vec![0u8; 1 << 20];
    let n = file
        .read(&mut window)
        .map_err(|e| AnalyzeError::io(path, e))?;
    Ok(window[..n]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| (mid + i as u64 + 1, layout)))
}

/// Feed every line of `reader` to `p`, in big chunks split in place (no per-line copy).
fn run_parser<'a>(path: &Path, mut reader: impl Read, mut p: Parser<'a>) -> Result<Parser<'a>> {
    let mut buf = vec![0u8; 4 << 20];
    let mut filled = 0usize;
    loop {
        let n = loop {
            match reader.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(AnalyzeError::io(path, e)),
            }
        };
        filled += n;
        let mut pos = 0usize;
        while let Some(nl) = buf[pos..filled].iter().position(|&b| b == b'\n') {
            p.line(&buf[pos..pos + nl])?;
            pos += nl + 1;
        }
        if n == 0 {
            if pos < filled {
                p.line(&buf[pos..filled])?;
            }
            break;
        }
        if !p.reserved && p.line_no > 100 && pos > 0 {
            p.reserve(pos);
        }
        buf.copy_within(pos..filled, 0);
        filled -= pos;
        if filled == buf.len() {
            // A line longer than the buffer: grow it.
            buf.resize(buf.len() * 2, 0);
        }
    }
    Ok(p)
}

struct Parser<'a> {
    path: &'a Path,
    filter: RouteFilter,
    meta: RouteMeta,
    rows: RouteRows,
    layout: Option<Layout>,
    n_dropped: usize,
    total_rows: usize,
    line_no: usize,
    reserved: bool,
    size_hint: u64,
    /// Second half of a split parse: `#` lines are kept (line, text) and applied after the
    /// first half's, so later keys still win.
    deferred_meta: Option<Vec<(usize, String)>>,
}

impl<'a> Parser<'a> {
    fn new(path: &'a Path, filter: RouteFilter, size_hint: u64) -> Self {
        Self {
            path,
            filter,
            meta: RouteMeta {
                model: "?".into(),
                arch: "?".into(),
                ..RouteMeta::default()
            },
            rows: RouteRows::default(),
            layout: None,
            n_dropped: 0,
            total_rows: 0,
            line_no: 0,
            reserved: false,
            size_hint,
            deferred_meta: None,
        }
    }
}

/// Digits-only fast path; anything else goes through the lenient parser.
fn fast_int(field: &[u8]) -> Option<i64> {
    if field.is_empty() || field.len() > 18 {
        return parse_int(field);
    }
    let mut acc = 0i64;
    for &b in field {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return parse_int(field);
        }
        acc = acc * 10 + i64::from(d);
    }
    Some(acc)
}

/// Exact fast path for plain decimals (`0.123456`): with at most 15 significant digits and 22
/// decimals, `mantissa / 10^k` is one correctly rounded IEEE division of two exact values, so
/// the result equals the correctly rounded parse. Anything else (`1.2e-05`, `nan`) returns None.
fn fast_decimal(field: &[u8]) -> Option<f64> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let (neg, digits) = match field.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, field),
    };
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut mant = 0u64;
    let mut frac_digits: Option<usize> = None;
    let mut n_digits = 0usize;
    for &b in digits {
        if b == b'.' {
            if frac_digits.is_some() {
                return None;
            }
            frac_digits = Some(0);
            continue;
        }
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        mant = mant * 10 + u64::from(d);
        n_digits += 1;
        if let Some(k) = frac_digits.as_mut() {
            *k += 1;
        }
    }
    let k = frac_digits.unwrap_or(0);
    if n_digits == 0 || n_digits > 15 || k >= POW10.len() {
        return None;
    }
    let v = mant as f64 / POW10[k];
    Some(if neg { -v } else { v })
}

impl RouteRows {
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
        self.bytes.reserve_exact(n);
    }

    fn append(&mut self, other: &mut RouteRows) {
        self.turn.append(&mut other.turn);
        self.phase.append(&mut other.phase);
        self.dropped.append(&mut other.dropped);
        self.step.append(&mut other.step);
        self.layer.append(&mut other.layer);
        self.slot.append(&mut other.slot);
        self.expert.append(&mut other.expert);
        self.weight.append(&mut other.weight);
        self.residency.append(&mut other.residency);
        self.bytes.append(&mut other.bytes);
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
        self.bytes.shrink_to_fit();
    }
}

impl Parser<'_> {
    /// Size the columns from the bytes per line seen so far, so they never double past the need.
    fn reserve(&mut self, bytes_seen: usize) {
        self.reserved = true;
        if self.size_hint == 0 || self.line_no == 0 {
            return;
        }
        let per_line = (bytes_seen as f64 / self.line_no as f64).max(1.0);
        let est = (self.size_hint as f64 / per_line * 1.02) as usize + 1024;
        self.rows
            .reserve(est.saturating_sub(self.rows.len()), self.filter.all_columns);
    }

    fn line(&mut self, raw: &[u8]) -> Result<()> {
        self.line_no += 1;
        let (path, line_no) = (self.path, self.line_no);
        let mut line = raw;
        while let [rest @ .., b'\r'] = line {
            line = rest;
        }
        if line.first() == Some(&b'#') {
            let text = String::from_utf8_lossy(line);
            if let Some(deferred) = self.deferred_meta.as_mut() {
                deferred.push((line_no, text.into_owned()));
                return Ok(());
            }
            return parse_meta_line(path, line_no, &text, &mut self.meta);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        if line.starts_with(b"turn,") {
            let text = String::from_utf8_lossy(line);
            self.layout = Some(Layout::from_header(path, line_no, &text)?);
            return Ok(());
        }
        let lay = self.layout.get_or_insert_with(Layout::positional);
        let mut fields: [&[u8]; 16] = [&[]; 16];
        let mut n_fields = 0usize;
        for part in line.split(|&b| b == b',') {
            if n_fields < fields.len() {
                fields[n_fields] = part;
            }
            n_fields += 1;
        }
        let fields = &fields[..n_fields.min(16)];
        let need = lay.idx.iter().max().map_or(9, |&m| m + 1).max(9);
        if n_fields < need {
            return Err(AnalyzeError::malformed(
                path,
                line_no,
                format!(
                    "{n_fields} fields, a route trace row has {need} or more (truncated line?)"
                ),
            ));
        }
        self.total_rows += 1;
        let i = lay.idx;
        let int = |k: usize, name: &str, want: &str| -> Result<i64> {
            fast_int(fields[i[k]]).ok_or_else(|| field_err(path, line_no, name, fields[i[k]], want))
        };
        let turn = int(0, "turn", "an integer")?;
        let phase = int(1, "phase", "0 (prefill) or 1 (decode)")?;
        if !(0..=1).contains(&phase) {
            return Err(field_err(
                path,
                line_no,
                "phase",
                fields[i[1]],
                "0 (prefill) or 1 (decode)",
            ));
        }
        let phase = phase as u8;
        if self.filter.turn.is_some_and(|t| t != turn) || !self.filter.phase.keeps(phase) {
            return Ok(());
        }
        let range =
            |k: usize, name: &str, want: &str| field_err(path, line_no, name, fields[i[k]], want);
        let turn = i32::try_from(turn).map_err(|_| range(0, "turn", "a turn number (32-bit)"))?;
        let step = i32::try_from(int(2, "step", "an integer")?)
            .map_err(|_| range(2, "step", "a step number (32-bit)"))?;
        let layer = u16::try_from(int(3, "layer", "a layer index")?)
            .map_err(|_| range(3, "layer", "a layer index (0..65535)"))?;
        let slot = u16::try_from(int(4, "slot", "a slot index")?)
            .map_err(|_| range(4, "slot", "a slot index (0..65535)"))?;
        let expert = u32::try_from(int(5, "expert", "an expert id")?)
            .map_err(|_| range(5, "expert", "an expert id"))?;
        let weight = parse_weight(path, line_no, fields[i[6]])?;
        let residency = int(7, "residency", "0, 1 or 2")?;
        if !(0..=2).contains(&residency) {
            return Err(range(
                7,
                "residency",
                "0 (miss), 1 (hit) or 2 (prefetch hit)",
            ));
        }
        let bytes = u64::try_from(int(8, "expert_bytes", "a byte count")?)
            .map_err(|_| range(8, "expert_bytes", "a byte count"))?;
        let dropped: u8 = match lay.dropped.and_then(|d| fields.get(d)) {
            None => 0,
            Some(raw) if raw.iter().all(u8::is_ascii_whitespace) => 0,
            Some(raw) => int_in(path, line_no, "dropped", raw, "0 or 1")?,
        };
        if dropped != 0 {
            self.n_dropped += 1;
        }
        let rows = &mut self.rows;
        if self.filter.all_columns {
            rows.turn.push(turn);
            rows.phase.push(phase);
            rows.dropped.push(dropped);
        }
        rows.step.push(step);
        rows.layer.push(layer);
        rows.slot.push(slot);
        rows.expert.push(expert);
        rows.weight.push(weight);
        rows.residency.push(residency as u8);
        rows.bytes.push(bytes);
        Ok(())
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
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows.expert, vec![3, 5]);
        assert!(t.rows.weight[1].is_nan());
        assert_eq!(read(SMALL, Phase::All).expect("valid").rows.len(), 4);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let bad = SMALL.replace("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,x,0.7,1,0");
        let err = read(&bad, Phase::All).expect_err("bad expert");
        assert_eq!(
            err.to_string(),
            "t.csv:8: column `expert`: \"x\" is not an expert id"
        );
        let short = format!("{SMALL}0,1,6,0\n");
        let err = read(&short, Phase::All).expect_err("short line");
        assert!(err.to_string().starts_with("t.csv:10: 4 fields"), "{err}");
        let res = SMALL.replace("0,1,5,0,0,3,0.7,1,0", "0,1,5,0,0,3,0.7,7,0");
        assert!(
            read(&res, Phase::All)
                .expect_err("residency")
                .to_string()
                .contains("residency")
        );
    }

    #[test]
    fn fast_decimal_equals_the_standard_parse() {
        for text in [
            "0.123456", "1", "0.5", "0.999999", "0.000123", "12.75", "-0.25", "0.1", "0.3", "0.7",
        ] {
            let want: f64 = text.parse().expect("valid");
            assert_eq!(fast_decimal(text.as_bytes()), Some(want), "{text}");
        }
        for text in ["1e-05", "nan", "", ".", "1.2.3", "0.12345678901234567"] {
            assert_eq!(fast_decimal(text.as_bytes()), None, "{text}");
        }
    }

    #[test]
    fn split_parse_equals_single_thread_parse() {
        let dir = std::env::temp_dir().join(format!("bmoe-analyze-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("t.csv");
        let mut text = SMALL.to_string();
        for s in 6..400 {
            text.push_str(&format!(
                "0,1,{s},0,0,{},0.6,1,0\n0,1,{s},0,1,{},0.4,0,1048576\n",
                s % 8,
                (s + 3) % 8
            ));
            if s == 300 {
                text.push_str("# layer=1 expert_bytes=7 dense_bytes=8\n");
            }
        }
        std::fs::write(&path, &text).expect("write");
        let filter = RouteFilter {
            turn: None,
            phase: Phase::All,
            all_columns: true,
        };
        let one = RouteTrace::read_split(&path, filter, u64::MAX).expect("single");
        let two = RouteTrace::read_split(&path, filter, 1).expect("split");
        assert_eq!(one.rows.expert, two.rows.expert);
        assert_eq!(one.rows.step, two.rows.step);
        assert_eq!(one.rows.bytes, two.rows.bytes);
        assert_eq!(one.meta.expert_bytes, two.meta.expert_bytes);
        assert_eq!(
            two.meta.expert_bytes.get(&1),
            Some(&7),
            "a late preamble line still wins"
        );
        assert_eq!(one.total_rows, two.total_rows);
        let bad = text.replace("0,1,350,0,0,6,0.6,1,0", "0,1,350,0,0,x,0.6,1,0");
        std::fs::write(&path, &bad).expect("write");
        let e1 = RouteTrace::read_split(&path, filter, u64::MAX)
            .expect_err("bad")
            .to_string();
        let e2 = RouteTrace::read_split(&path, filter, 1)
            .expect_err("bad")
            .to_string();
        assert_eq!(e1, e2, "the second half reports file line numbers");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn crlf_and_dropped_column() {
        let text = SMALL
            .replace("expert_bytes\n", "expert_bytes,dropped\n")
            .replace('\n', "\r\n");
        let text = text.replace("0,1,5,0,1,5,nan,0,1048576", "0,1,5,0,1,5,nan,0,0,1");
        let t = read(&text, Phase::Decode).expect("crlf ok");
        assert!(t.has_dropped);
        assert_eq!(t.n_dropped, 1);
    }
}
