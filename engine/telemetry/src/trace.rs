//! The decode traces: route trace v1 (`--route-trace`), compute trace v1 (`--compute-trace`,
//! both granularities) and io trace v1 (`--io-trace`).
//!
//! All three are a `#` preamble, a header and one row per event, read **by column name**.
//! Columns are append-only within v1: the columns every v1 file has are required (the reader
//! refuses a header without them, naming the column), later additions are `Option` (the route
//! trace's `dropped`). Unknown columns are ignored.
//!
//! # Reading
//!
//! [`TraceReader`] is an `Iterator<Item = Result<Row>>` in constant memory: numeric rows are
//! parsed straight from the line's bytes with no allocation (route and io rows are `Copy`);
//! compute rows allocate their two strings. A last line cut short (no newline, whether or not
//! it parses) is left out and reported by [`TraceReader::truncated`], not as an error. Values
//! the contract rules out are errors naming the line: a `weight` that is not NaN or in
//! `0..=`[`MAX_WEIGHT`], a `wall_ns` / `latency_ns` above [`MAX_DURATION_NS`], a byte or fault
//! count (`expert_bytes`, `req_bytes`, `read_bytes`, `majflt`) above [`MAX_ROW_COUNT`]. For bulk loading with another CSV
//! engine use [`crate::table::read_head`] and the `*_COLUMNS` constants.
//!
//! # Writing
//!
//! [`TraceWriter`] writes the preamble and header at creation (flushed), then **buffers rows**
//! (64 KiB) — a route trace is a row per routed expert, far too many to flush one by one. Call
//! [`TraceWriter::flush`] at the end of each decode: a killed run then loses at most the
//! decode in flight. The buffer is also flushed on drop (errors on drop are lost; call
//! `flush` or [`TraceWriter::into_inner`] to see them).
//!
//! ```
//! use bmoe_telemetry::trace::{RouteRow, RouteTraceInfo, LayerBytes, TraceReader, TraceWriter};
//! let info = RouteTraceInfo {
//!     model: Some("m.gguf".into()), arch: Some("qwen3moe".into()),
//!     n_layer: Some(1), n_expert: Some(8), n_expert_used: Some(2),
//!     layers: vec![LayerBytes { layer: 0, expert_bytes: 4096, dense_bytes: 1024 }],
//!     ..Default::default()
//! };
//! let mut w = TraceWriter::new(Vec::new(), &info)?;
//! w.write_row(&RouteRow { turn: 0, phase: 1, step: 5, layer: 0, slot: 0, expert: 3,
//!     weight: f64::NAN, residency: 0, expert_bytes: 4096, dropped: Some(false) })?;
//! let bytes = w.into_inner()?;
//! let mut r = TraceReader::<_, RouteRow>::new(bytes.as_slice(), "mem")?;
//! assert_eq!(r.info().layers[0].expert_bytes, 4096);
//! let row = r.next().expect("one row")?;
//! assert!(row.weight.is_nan() && row.expert == 3);
//! # Ok::<(), bmoe_telemetry::Error>(())
//! ```

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::cell::{Cell, SHORTEST};
use crate::error::{Error, Result};
use crate::kv::{KvMap, format_set_pairs, parse_kv_line};
use crate::table::{
    Fields, Line, Preamble, RowCursor, TableReader, Truncated, ensure_complete, ensure_width,
    open_buffered, opt_cell, quote_field, req_cell, req_code, short_row,
};

/// `phase` value of a prefill row (one batched decode over many tokens).
pub const PHASE_PREFILL: u8 = 0;
/// `phase` value of a decode row (one token per step).
pub const PHASE_DECODE: u8 = 1;

/// What a `phase` cell may hold (the error text for anything else).
const PHASE_EXPECTED: &str = "expected 0 (prefill) or 1 (decode)";
/// What a `residency` cell may hold.
const RESIDENCY_EXPECTED: &str = "expected 0 (miss), 1 (hit) or 2 (prefetch hit)";

/// Significant digits of the route trace's `weight` column (`%.6g`, as recorded traces have).
pub const WEIGHT_SIGNIFICANT_DIGITS: usize = 6;

/// Largest routing weight the reader accepts. A router's gate is a probability (softmax or
/// sigmoid, at most 1), scaled by at most a small factor (DeepSeek's `routed_scaling_factor`
/// is 2.5); 1000 leaves room for any scaling while keeping every sum of weights finite, so a
/// larger value is a corrupted cell, not a weight.
pub const MAX_WEIGHT: f64 = 1e3;

/// Largest duration a trace's `wall_ns` / `latency_ns` may hold: 10^15 ns (11.6 days for one
/// node or one read), the same bound as the metrics CSV's [`crate::metrics::MAX_DURATION_MS`].
/// Beyond it the cell is corrupted, and sums over a trace could overflow.
pub const MAX_DURATION_NS: u64 = 1_000_000_000_000_000;

/// What a `weight` cell may hold.
const WEIGHT_EXPECTED: &str =
    "expected a routing weight: `nan` (unknown) or a number from 0 to 1000";
/// What a `wall_ns` / `latency_ns` cell may hold.
const DURATION_NS_EXPECTED: &str =
    "expected a duration in ns: an unsigned integer of at most 1e15 (11.6 days)";

/// `weight`: NaN (the contract's "unknown") or a finite gate in `0..=MAX_WEIGHT`; an infinite,
/// negative or huge value is refused with the line, never averaged in.
fn req_weight(idx: usize, f: &Fields<'_>, path: &Path, column: &str) -> Result<f64> {
    let w: f64 = req_cell(idx, f, path, column)?;
    if w.is_nan() || (0.0..=MAX_WEIGHT).contains(&w) {
        Ok(w)
    } else {
        Err(Error::field(
            path,
            f.line,
            column,
            WEIGHT_EXPECTED,
            f.get(idx).unwrap_or_default(),
        ))
    }
}

/// Largest byte count (`expert_bytes`, `req_bytes`, `read_bytes`) or fault count (`majflt`)
/// one row may hold: 2^40 (1 TiB, or 2^40 faults). No expert, read or node comes near it, and
/// the analyses' sums over millions of rows stay far from `u64` overflow.
pub const MAX_ROW_COUNT: u64 = 1 << 40;

/// What a byte or fault count cell may hold.
const COUNT_EXPECTED: &str = "expected an unsigned integer of at most 2^40 (1099511627776)";

/// An unsigned cell of at most `max`; `expected` says what it may hold.
fn req_at_most(
    idx: usize,
    f: &Fields<'_>,
    path: &Path,
    column: &str,
    max: u64,
    expected: &str,
) -> Result<u64> {
    let v: u64 = req_cell(idx, f, path, column)?;
    if v <= max {
        Ok(v)
    } else {
        Err(Error::field(
            path,
            f.line,
            column,
            expected,
            f.get(idx).unwrap_or_default(),
        ))
    }
}

/// A duration in ns: at most [`MAX_DURATION_NS`].
fn req_duration_ns(idx: usize, f: &Fields<'_>, path: &Path, column: &str) -> Result<u64> {
    req_at_most(idx, f, path, column, MAX_DURATION_NS, DURATION_NS_EXPECTED)
}

/// A byte or fault count: at most [`MAX_ROW_COUNT`].
fn req_count(idx: usize, f: &Fields<'_>, path: &Path, column: &str) -> Result<u64> {
    req_at_most(idx, f, path, column, MAX_ROW_COUNT, COUNT_EXPECTED)
}

/// Route trace columns, in order (`dropped` was appended within v1).
pub const ROUTE_COLUMNS: [&str; 10] = [
    "turn",
    "phase",
    "step",
    "layer",
    "slot",
    "expert",
    "weight",
    "residency",
    "expert_bytes",
    "dropped",
];
/// Compute trace columns, in order.
pub const COMPUTE_COLUMNS: [&str; 9] = [
    "turn", "phase", "step", "seq", "layer", "op", "name", "wall_ns", "majflt",
];
/// Io trace columns, in order.
pub const IO_COLUMNS: [&str; 12] = [
    "turn",
    "phase",
    "step",
    "layer",
    "expert",
    "proj",
    "lane",
    "spec",
    "offset",
    "req_bytes",
    "read_bytes",
    "latency_ns",
];

use crate::cell::ColumnType::{self, Bool, Float, Int, Text, UInt};

/// The value type of each of [`ROUTE_COLUMNS`] (for a polars schema).
pub const ROUTE_COLUMN_TYPES: [ColumnType; 10] =
    [UInt, UInt, Int, UInt, UInt, UInt, Float, UInt, UInt, Bool];
/// The value type of each of [`COMPUTE_COLUMNS`].
pub const COMPUTE_COLUMN_TYPES: [ColumnType; 9] =
    [UInt, UInt, Int, UInt, Int, Text, Text, UInt, UInt];
/// The value type of each of [`IO_COLUMNS`].
pub const IO_COLUMN_TYPES: [ColumnType; 12] = [
    UInt, UInt, Int, UInt, UInt, UInt, UInt, Bool, UInt, UInt, UInt, UInt,
];

/// A trace's static preamble facts.
pub trait TraceInfo: Sized {
    /// Builds it from the raw preamble.
    ///
    /// # Errors
    /// [`Error::Field`] naming line and key for a mistyped known key.
    fn from_preamble(p: &Preamble, path: &Path) -> Result<Self>;
    /// The preamble lines the writer emits after the magic line (no line ends).
    ///
    /// # Errors
    /// [`Error::Unwritable`] for a value that cannot be represented.
    fn to_lines(&self) -> Result<Vec<String>>;
}

/// One row of a trace format.
pub trait TraceRow: Sized {
    /// The preamble type.
    type Info: TraceInfo;
    /// Human name, e.g. `route trace v1`.
    const FORMAT: &'static str;
    /// The magic line, e.g. `# route_trace v1`.
    const MAGIC: &'static str;
    /// All columns, in writing order.
    const COLUMNS: &'static [&'static str];
    /// How many leading columns every v1 file has (the rest are optional).
    const REQUIRED: usize;
    /// Parses a row given the header index of each of [`Self::COLUMNS`].
    ///
    /// # Errors
    /// [`Error::Field`] naming the line and column.
    fn parse(map: &[Option<usize>], f: &Fields<'_>, path: &Path) -> Result<Self>;
    /// Appends the row as CSV (no line end).
    fn write_csv(&self, out: &mut String);
}

fn set_typed<T: Cell>(
    slot: &mut Option<T>,
    v: &str,
    path: &Path,
    line: u64,
    key: &str,
) -> Result<()> {
    *slot = Some(
        T::parse(v.as_bytes())
            .ok_or_else(|| Error::field(path, line, key, T::EXPECTED, v.as_bytes()))?,
    );
    Ok(())
}

/// A preamble number as the writer spells it.
fn num<T: Cell>(v: T) -> String {
    let mut s = String::new();
    v.write(&mut s, SHORTEST);
    s
}

// ---------------------------------------------------------------------------------------------
// route trace

/// One `# layer=<il> expert_bytes=<n> dense_bytes=<n>` preamble line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerBytes {
    /// MoE layer index.
    pub layer: u64,
    /// Bytes of one expert of this layer (what a miss reads).
    pub expert_bytes: u64,
    /// Dense (non-expert) bytes of the layer: what a cold layer costs to page in.
    pub dense_bytes: u64,
}

/// The route trace preamble: `# model= arch= n_layer= n_expert= n_expert_used=` and the
/// per-layer lines. Keys are optional; unknown keys are kept in [`Self::extra`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTraceInfo {
    /// Model path (may contain spaces, see [`crate::kv`]).
    pub model: Option<String>,
    /// Architecture.
    pub arch: Option<String>,
    /// Layers of the model.
    pub n_layer: Option<u64>,
    /// Experts per MoE layer.
    pub n_expert: Option<u64>,
    /// Effective top-k: rows per cell.
    pub n_expert_used: Option<u64>,
    /// Per-layer byte sizes, in file order.
    pub layers: Vec<LayerBytes>,
    /// Unknown keys, in order.
    pub extra: KvMap,
}

impl TraceInfo for RouteTraceInfo {
    fn from_preamble(p: &Preamble, path: &Path) -> Result<Self> {
        let mut info = RouteTraceInfo::default();
        for (no, kv) in p.kv_lines() {
            if kv.words.is_empty() && kv.pairs.iter().next().is_some_and(|(k, _)| k == "layer") {
                info.layers
                    .push(LayerBytes::from_pairs(&kv.pairs, path, no)?);
                continue;
            }
            for (k, v) in kv.pairs.iter() {
                match k {
                    "model" => info.model = Some(v.to_string()),
                    "arch" => info.arch = Some(v.to_string()),
                    "n_layer" => set_typed(&mut info.n_layer, v, path, no, k)?,
                    "n_expert" => set_typed(&mut info.n_expert, v, path, no, k)?,
                    "n_expert_used" => set_typed(&mut info.n_expert_used, v, path, no, k)?,
                    _ => info.extra.insert(k, v),
                }
            }
        }
        Ok(info)
    }

    fn to_lines(&self) -> Result<Vec<String>> {
        let model_line = format_set_pairs(
            [
                ("model", self.model.clone()),
                ("arch", self.arch.clone()),
                ("n_layer", self.n_layer.map(num)),
                ("n_expert", self.n_expert.map(num)),
                ("n_expert_used", self.n_expert_used.map(num)),
            ],
            &self.extra,
        )?;
        let layer_lines = self.layers.iter().map(|l| {
            format!(
                "# layer={} expert_bytes={} dense_bytes={}",
                l.layer, l.expert_bytes, l.dense_bytes
            )
        });
        Ok(model_line.into_iter().chain(layer_lines).collect())
    }
}

impl LayerBytes {
    /// Reads a `# layer= expert_bytes= dense_bytes=` line's pairs; all three are required.
    fn from_pairs(pairs: &KvMap, path: &Path, line: u64) -> Result<Self> {
        let get = |key: &str| -> Result<u64> {
            let v = pairs.get(key).ok_or_else(|| {
                Error::field(path, line, key, "missing from the per-layer line", b"")
            })?;
            <u64 as Cell>::parse(v.as_bytes())
                .ok_or_else(|| Error::field(path, line, key, u64::EXPECTED, v.as_bytes()))
        };
        Ok(LayerBytes {
            layer: get("layer")?,
            expert_bytes: get("expert_bytes")?,
            dense_bytes: get("dense_bytes")?,
        })
    }
}

/// One routed expert. `(turn, phase, step, layer, slot)` is unique.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouteRow {
    /// Session turn (0 for one-shot).
    pub turn: u32,
    /// [`PHASE_PREFILL`] or [`PHASE_DECODE`].
    pub phase: u8,
    /// Absolute context position of the token routed.
    pub step: i64,
    /// MoE layer.
    pub layer: u32,
    /// Router rank (0 = top choice).
    pub slot: u32,
    /// The routed expert id.
    pub expert: u32,
    /// Final applied routing weight; NaN = unknown (the graph exposed none), never 0. Read as
    /// the exact `f64` of the text (analyses sum and round it); written as C's `%.6g` (the
    /// format of every recorded trace), `nan` for NaN. An engine holding an `f32` weight
    /// widens it (`w as f64`), which is what C's printf does too.
    pub weight: f64,
    /// 0 miss, 1 hit, 2 hit on a speculative prefetch's first touch.
    pub residency: u8,
    /// Flash bytes this routing read (0 unless it was the read).
    pub expert_bytes: u64,
    /// Whether cache-aware dropping discarded it; `None` when the file predates the column.
    pub dropped: Option<bool>,
}

impl TraceRow for RouteRow {
    type Info = RouteTraceInfo;
    const FORMAT: &'static str = "route trace v1";
    const MAGIC: &'static str = "# route_trace v1";
    const COLUMNS: &'static [&'static str] = &ROUTE_COLUMNS;
    const REQUIRED: usize = 9;

    fn parse(m: &[Option<usize>], f: &Fields<'_>, path: &Path) -> Result<Self> {
        let c = ROUTE_COLUMNS;
        // Required columns are present (checked at open), so the unwrap_or is never taken.
        let ix = |i: usize| m[i].unwrap_or(usize::MAX);
        Ok(RouteRow {
            turn: req_cell(ix(0), f, path, c[0])?,
            phase: req_code(ix(1), f, path, c[1], PHASE_DECODE, PHASE_EXPECTED)?,
            step: req_cell(ix(2), f, path, c[2])?,
            layer: req_cell(ix(3), f, path, c[3])?,
            slot: req_cell(ix(4), f, path, c[4])?,
            expert: req_cell(ix(5), f, path, c[5])?,
            weight: req_weight(ix(6), f, path, c[6])?,
            residency: req_code(ix(7), f, path, c[7], 2, RESIDENCY_EXPECTED)?,
            expert_bytes: req_count(ix(8), f, path, c[8])?,
            dropped: opt_cell(m[9], f, path, c[9])?,
        })
    }

    fn write_csv(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "{},{},{},{},{},{},",
            self.turn, self.phase, self.step, self.layer, self.slot, self.expert
        );
        crate::cell::write_g(self.weight, WEIGHT_SIGNIFICANT_DIGITS, out);
        let _ = write!(out, ",{},{},", self.residency, self.expert_bytes);
        if let Some(d) = self.dropped {
            d.write(out, 0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// compute / io traces

/// The static line shared by the compute and io traces:
/// `# model=… arch=… n_layer=… n_threads=… io_threads=… o_direct=<0|1> overlap=<0|1>`.
/// Every key optional (the seed's io example omits the line); unknown keys kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodeTraceInfo {
    /// Model path.
    pub model: Option<String>,
    /// Architecture.
    pub arch: Option<String>,
    /// Layers.
    pub n_layer: Option<u64>,
    /// Compute threads.
    pub n_threads: Option<u64>,
    /// I/O lanes.
    pub io_threads: Option<u64>,
    /// O_DIRECT achieved.
    pub o_direct: Option<bool>,
    /// Overlap mode.
    pub overlap: Option<bool>,
    /// Unknown keys, in order.
    pub extra: KvMap,
}

impl TraceInfo for DecodeTraceInfo {
    fn from_preamble(p: &Preamble, path: &Path) -> Result<Self> {
        let mut info = DecodeTraceInfo::default();
        for (no, kv) in p.kv_lines() {
            for (k, v) in kv.pairs.iter() {
                match k {
                    "model" => info.model = Some(v.to_string()),
                    "arch" => info.arch = Some(v.to_string()),
                    "n_layer" => set_typed(&mut info.n_layer, v, path, no, k)?,
                    "n_threads" => set_typed(&mut info.n_threads, v, path, no, k)?,
                    "io_threads" => set_typed(&mut info.io_threads, v, path, no, k)?,
                    "o_direct" => set_typed(&mut info.o_direct, v, path, no, k)?,
                    "overlap" => set_typed(&mut info.overlap, v, path, no, k)?,
                    _ => info.extra.insert(k, v),
                }
            }
        }
        Ok(info)
    }

    fn to_lines(&self) -> Result<Vec<String>> {
        let line = format_set_pairs(
            [
                ("model", self.model.clone()),
                ("arch", self.arch.clone()),
                ("n_layer", self.n_layer.map(num)),
                ("n_threads", self.n_threads.map(num)),
                ("io_threads", self.io_threads.map(num)),
                ("o_direct", self.o_direct.map(num)),
                ("overlap", self.overlap.map(num)),
            ],
            &self.extra,
        )?;
        Ok(line.into_iter().collect())
    }
}

/// One graph node (per-node trace) or one layer segment (`--compute-trace-layers`, `op` =
/// `LAYER`, `name` = `pre` / `blk.<il>` / `post`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeRow {
    /// Session turn.
    pub turn: u32,
    /// [`PHASE_PREFILL`] or [`PHASE_DECODE`].
    pub phase: u8,
    /// Context position.
    pub step: i64,
    /// Execution order of the node within the decode.
    pub seq: u32,
    /// Layer from the node name's `-<il>` suffix; −1 = no layer.
    pub layer: i32,
    /// ggml op name (raw), e.g. `MUL_MAT_ID`.
    pub op: String,
    /// Node name (raw). Quoted on write when it contains `,` or `"`; a line break becomes a
    /// space.
    pub name: String,
    /// Measured wall time of the node, ns.
    pub wall_ns: u64,
    /// Major faults sampled across the node.
    pub majflt: u64,
}

impl ComputeRow {
    /// Whether this is a layer-granularity row.
    pub fn is_layer_segment(&self) -> bool {
        self.op == "LAYER"
    }
}

fn req_string(idx: usize, f: &Fields<'_>, path: &Path, column: &str) -> Result<String> {
    let b = f.get(idx).ok_or_else(|| short_row(f, path, column))?;
    std::str::from_utf8(b)
        .map(str::to_string)
        .map_err(|_| Error::field(path, f.line, column, "not valid UTF-8", b))
}

impl TraceRow for ComputeRow {
    type Info = DecodeTraceInfo;
    const FORMAT: &'static str = "compute trace v1";
    const MAGIC: &'static str = "# compute_trace v1";
    const COLUMNS: &'static [&'static str] = &COMPUTE_COLUMNS;
    const REQUIRED: usize = 9;

    fn parse(m: &[Option<usize>], f: &Fields<'_>, path: &Path) -> Result<Self> {
        let c = COMPUTE_COLUMNS;
        let ix = |i: usize| m[i].unwrap_or(usize::MAX);
        Ok(ComputeRow {
            turn: req_cell(ix(0), f, path, c[0])?,
            phase: req_cell(ix(1), f, path, c[1])?,
            step: req_cell(ix(2), f, path, c[2])?,
            seq: req_cell(ix(3), f, path, c[3])?,
            layer: req_cell(ix(4), f, path, c[4])?,
            op: req_string(ix(5), f, path, c[5])?,
            name: req_string(ix(6), f, path, c[6])?,
            wall_ns: req_duration_ns(ix(7), f, path, c[7])?,
            majflt: req_count(ix(8), f, path, c[8])?,
        })
    }

    fn write_csv(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "{},{},{},{},{},",
            self.turn, self.phase, self.step, self.seq, self.layer
        );
        quote_field(&self.op, out);
        out.push(',');
        quote_field(&self.name, out);
        let _ = write!(out, ",{},{}", self.wall_ns, self.majflt);
    }
}

/// One `pread` the streamer issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRow {
    /// Session turn.
    pub turn: u32,
    /// [`PHASE_PREFILL`] or [`PHASE_DECODE`].
    pub phase: u8,
    /// Context position of the decode the read was drained after.
    pub step: i64,
    /// MoE layer served.
    pub layer: u32,
    /// Expert served.
    pub expert: u32,
    /// Projection index.
    pub proj: u8,
    /// I/O lane (thread).
    pub lane: u32,
    /// Speculative prefetch read.
    pub spec: bool,
    /// Aligned file offset.
    pub offset: u64,
    /// Bytes the caller wanted.
    pub req_bytes: u64,
    /// Aligned window actually read (judge bandwidth against this).
    pub read_bytes: u64,
    /// Read latency, ns.
    pub latency_ns: u64,
}

impl TraceRow for IoRow {
    type Info = DecodeTraceInfo;
    const FORMAT: &'static str = "io trace v1";
    const MAGIC: &'static str = "# io_trace v1";
    const COLUMNS: &'static [&'static str] = &IO_COLUMNS;
    const REQUIRED: usize = 12;

    fn parse(m: &[Option<usize>], f: &Fields<'_>, path: &Path) -> Result<Self> {
        let c = IO_COLUMNS;
        let ix = |i: usize| m[i].unwrap_or(usize::MAX);
        Ok(IoRow {
            turn: req_cell(ix(0), f, path, c[0])?,
            phase: req_cell(ix(1), f, path, c[1])?,
            step: req_cell(ix(2), f, path, c[2])?,
            layer: req_cell(ix(3), f, path, c[3])?,
            expert: req_cell(ix(4), f, path, c[4])?,
            proj: req_cell(ix(5), f, path, c[5])?,
            lane: req_cell(ix(6), f, path, c[6])?,
            spec: req_cell(ix(7), f, path, c[7])?,
            offset: req_cell(ix(8), f, path, c[8])?,
            req_bytes: req_count(ix(9), f, path, c[9])?,
            read_bytes: req_count(ix(10), f, path, c[10])?,
            latency_ns: req_duration_ns(ix(11), f, path, c[11])?,
        })
    }

    fn write_csv(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            self.turn,
            self.phase,
            self.step,
            self.layer,
            self.expert,
            self.proj,
            self.lane,
            u8::from(self.spec),
            self.offset,
            self.req_bytes,
            self.read_bytes,
            self.latency_ns
        );
    }
}

// ---------------------------------------------------------------------------------------------
// reader

/// Streaming reader of one trace file; `T` is [`RouteRow`], [`ComputeRow`] or [`IoRow`].
pub struct TraceReader<R, T: TraceRow> {
    table: TableReader<R>,
    // A copy of the table's label, so errors can name the file while a row borrows the table.
    path: PathBuf,
    info: T::Info,
    map: Vec<Option<usize>>,
    cursor: RowCursor,
    _row: PhantomData<T>,
}

/// What [`TraceReader::into_head`] returns.
pub(crate) struct TraceHead<R, T: TraceRow> {
    pub(crate) table: TableReader<R>,
    pub(crate) info: T::Info,
    pub(crate) map: Vec<Option<usize>>,
    pub(crate) truncated: Option<Truncated>,
}

/// A route trace reader over a file.
pub type RouteTraceReader = TraceReader<BufReader<File>, RouteRow>;
/// A compute trace reader over a file.
pub type ComputeTraceReader = TraceReader<BufReader<File>, ComputeRow>;
/// An io trace reader over a file.
pub type IoTraceReader = TraceReader<BufReader<File>, IoRow>;

impl<T: TraceRow> TraceReader<BufReader<File>, T> {
    /// Opens a trace file.
    ///
    /// # Errors
    /// As [`TraceReader::new`], plus [`Error::Io`] when it cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        TraceReader::new(open_buffered(path)?, path)
    }
}

impl<R: BufRead, T: TraceRow> TraceReader<R, T> {
    /// Reads preamble and header from `src`; `label` names it in errors.
    ///
    /// # Errors
    /// [`Error::Line`] when the magic line names another format;
    /// [`Error::MissingColumn`] when the header lacks a required column (a file with no
    /// header at all — a run killed before writing one — is accepted and yields no rows);
    /// [`Error::Field`] for a mistyped preamble key.
    pub fn new(src: R, label: impl AsRef<Path>) -> Result<Self> {
        let table = TableReader::new(src, label)?;
        let magic = table.preamble().magic();
        let want = parse_kv_line(T::MAGIC).words;
        if let Some(kind) = magic.first()
            && want.first() != Some(kind)
        {
            return Err(Error::line(
                table.path(),
                1,
                format!(
                    "this is a `{kind}` file, expected a {} (`{}`)",
                    T::FORMAT,
                    T::MAGIC
                ),
            ));
        }
        let map: Vec<Option<usize>> = T::COLUMNS.iter().map(|c| table.column(c)).collect();
        if !table.header().is_empty()
            && let Some(i) = map[..T::REQUIRED].iter().position(Option::is_none)
        {
            return Err(Error::MissingColumn {
                path: table.path().to_path_buf(),
                line: table.header_line(),
                column: T::COLUMNS[i].to_string(),
                format: T::FORMAT,
            });
        }
        let info = T::Info::from_preamble(table.preamble(), table.path())?;
        let cut = table.header_truncated().cloned();
        Ok(TraceReader {
            path: table.path().to_path_buf(),
            table,
            info,
            map,
            cursor: RowCursor::new(cut),
            _row: PhantomData,
        })
    }

    /// Takes the reader apart after its header: the table (positioned at the first row), the
    /// typed preamble, the header index of each of `T::COLUMNS`, and a cut found in the header.
    /// The columnar reader continues from here, so both read the head one way.
    pub(crate) fn into_head(self) -> TraceHead<R, T> {
        TraceHead {
            truncated: self.cursor.truncated,
            table: self.table,
            info: self.info,
            map: self.map,
        }
    }

    /// The typed preamble.
    pub fn info(&self) -> &T::Info {
        &self.info
    }

    /// The raw preamble (lines, `skip_rows`).
    pub fn preamble(&self) -> &Preamble {
        self.table.preamble()
    }

    /// The header's column names.
    pub fn header(&self) -> &[String] {
        self.table.header()
    }

    /// Whether the header has column `name` (e.g. `dropped`).
    pub fn has_column(&self, name: &str) -> bool {
        self.table.column(name).is_some()
    }

    /// Set when the last line was cut short; every row before it was returned.
    pub fn truncated(&self) -> Option<&Truncated> {
        self.cursor.truncated.as_ref()
    }

    /// Rows returned so far.
    pub fn rows_read(&self) -> u64 {
        self.cursor.rows
    }

    fn next_row(&mut self) -> Result<Option<T>> {
        let width = self.table.header().len();
        loop {
            match self.table.next_line()? {
                None => return Ok(None),
                // Traces carry no trailer; a stray comment is skipped.
                Some(Line::Comment { .. }) => continue,
                Some(Line::Row(f)) => {
                    ensure_complete(&f, &self.path)?;
                    ensure_width(&f, width, &self.path)?;
                    return T::parse(&self.map, &f, &self.path).map(Some);
                }
            }
        }
    }
}

impl<R: BufRead, T: TraceRow> Iterator for TraceReader<R, T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.cursor.done() {
            return None;
        }
        let step = self.next_row();
        self.cursor.settle(step, &self.table)
    }
}

// ---------------------------------------------------------------------------------------------
// writer

/// Writes one trace file: preamble + header at creation (flushed), rows buffered until
/// [`Self::flush`] / drop (see the [module docs](self)).
pub struct TraceWriter<W: Write, T: TraceRow> {
    out: BufWriter<W>,
    path: PathBuf,
    line: String,
    _row: PhantomData<T>,
}

impl<T: TraceRow> TraceWriter<File, T> {
    /// Creates (truncates) `path` and writes the preamble and header.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be created or written; [`Error::Unwritable`] for a
    /// preamble value that cannot be represented.
    pub fn create(path: impl AsRef<Path>, info: &T::Info) -> Result<Self> {
        let path = path.as_ref();
        let f = File::create(path).map_err(|e| Error::io(path, e))?;
        let mut w = TraceWriter::new(f, info)?;
        w.path = path.to_path_buf();
        Ok(w)
    }
}

impl<W: Write, T: TraceRow> TraceWriter<W, T> {
    /// Writes the magic line, the preamble and the header to `out`, and flushes.
    ///
    /// # Errors
    /// [`Error::Io`] on a write error; [`Error::Unwritable`] for a bad preamble value.
    pub fn new(out: W, info: &T::Info) -> Result<Self> {
        let mut w = TraceWriter {
            out: BufWriter::with_capacity(1 << 16, out),
            path: PathBuf::from(format!("<{}>", T::FORMAT)),
            line: String::with_capacity(128),
            _row: PhantomData,
        };
        let mut head = String::from(T::MAGIC);
        head.push('\n');
        for l in info.to_lines()? {
            head.push_str(&l);
            head.push('\n');
        }
        head.push_str(&T::COLUMNS.join(","));
        head.push('\n');
        w.out
            .write_all(head.as_bytes())
            .and_then(|()| w.out.flush())
            .map_err(|e| Error::io(&w.path, e))?;
        Ok(w)
    }

    /// Appends one row to the buffer.
    ///
    /// # Errors
    /// [`Error::Io`] when the buffer spills and the write fails.
    pub fn write_row(&mut self, row: &T) -> Result<()> {
        self.line.clear();
        row.write_csv(&mut self.line);
        self.line.push('\n');
        self.out
            .write_all(self.line.as_bytes())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Pushes buffered rows to the underlying writer (call once per decode).
    ///
    /// # Errors
    /// [`Error::Io`] on a write error.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| Error::io(&self.path, e))
    }

    /// Flushes and returns the underlying writer.
    ///
    /// # Errors
    /// [`Error::Io`] when the final flush fails.
    pub fn into_inner(self) -> Result<W> {
        let path = self.path;
        self.out
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nine_column_route_trace_reads_dropped_as_none() {
        let text = "# route_trace v1\n# model=/a b/m.gguf arch=qwen3moe n_layer=2 n_expert=4 n_expert_used=1\n# layer=0 expert_bytes=10 dense_bytes=20\n# layer=1 expert_bytes=11 dense_bytes=21\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n0,0,0,0,0,3,1.23457e-05,0,10\n0,1,5,1,0,2,nan,1,0\n";
        let mut r = TraceReader::<_, RouteRow>::new(text.as_bytes(), "r").expect("open");
        assert_eq!(r.info().model.as_deref(), Some("/a b/m.gguf"));
        assert_eq!(r.info().layers.len(), 2);
        assert_eq!(r.info().layers[1].dense_bytes, 21);
        assert!(!r.has_column("dropped"));
        let rows: Vec<_> = r.by_ref().collect::<Result<_>>().expect("rows");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].weight, 1.23457e-05);
        assert!(rows[1].weight.is_nan());
        assert_eq!(rows[1].dropped, None);
    }

    #[test]
    fn weights_and_durations_outside_the_contract_name_the_line() {
        let route = |w: &str| {
            let text = format!(
                "# route_trace v1\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n0,1,5,0,0,3,{w},1,0\n"
            );
            TraceReader::<_, RouteRow>::new(text.as_bytes(), "r.csv")
                .expect("head")
                .next()
                .expect("a row")
        };
        for bad in ["inf", "-inf", "-1", "-0.25", "1e308", "1000.5"] {
            let e = route(bad).expect_err(bad).to_string();
            assert!(
                e.starts_with("r.csv:3: column `weight`: expected a routing weight"),
                "{bad}: {e}"
            );
        }
        for good in ["nan", "0", "-0", "1e-05", "0.7", "2.5", "1000"] {
            assert!(route(good).is_ok(), "{good}");
        }
        let io = |lat: &str| {
            let text = format!(
                "# io_trace v1\n{}\n0,1,5,0,3,0,0,0,0,4096,4096,{lat}\n",
                IO_COLUMNS.join(",")
            );
            TraceReader::<_, IoRow>::new(text.as_bytes(), "io.csv")
                .expect("head")
                .next()
                .expect("a row")
        };
        let e = io("18446744073709551615").expect_err("huge").to_string();
        assert!(
            e.starts_with("io.csv:3: column `latency_ns`: expected a duration in ns"),
            "{e}"
        );
        assert!(io("1000000000000000").is_ok());
        let compute = |ns: &str| {
            let text = format!(
                "# compute_trace v1\n{}\n0,1,5,0,0,ADD,x,{ns},0\n",
                COMPUTE_COLUMNS.join(",")
            );
            TraceReader::<_, ComputeRow>::new(text.as_bytes(), "c.csv")
                .expect("head")
                .next()
                .expect("a row")
        };
        assert!(compute("1000000000000001").is_err() && compute("9949").is_ok());
        // Byte counts: 2^40 at most, so sums over a trace cannot overflow.
        let bytes = |b: &str| {
            let text = format!(
                "# route_trace v1\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n0,1,5,0,0,3,0.5,0,{b}\n"
            );
            TraceReader::<_, RouteRow>::new(text.as_bytes(), "r.csv")
                .expect("head")
                .next()
                .expect("a row")
        };
        let e = bytes("18446744073709551615").expect_err("huge").to_string();
        assert!(
            e.starts_with(
                "r.csv:3: column `expert_bytes`: expected an unsigned integer of at most 2^40"
            ),
            "{e}"
        );
        assert!(bytes("1099511627776").is_ok() && bytes("3059712").is_ok());
    }

    #[test]
    fn a_torn_last_row_is_left_out_even_when_it_parses() {
        // `3059712` cut to `305`: it parses, but it is not what was read.
        let text = format!(
            "# io_trace v1\n{}\n0,1,5,0,3,0,0,0,0,4096,4096,3059712\n0,1,5,0,4,0,0,0,0,4096,4096,305",
            IO_COLUMNS.join(",")
        );
        let mut r = TraceReader::<_, IoRow>::new(text.as_bytes(), "io.csv").expect("head");
        let rows: Vec<IoRow> = r.by_ref().collect::<Result<_>>().expect("rows");
        assert_eq!(rows.len(), 1);
        assert_eq!(r.truncated().map(|t| t.line), Some(4));
    }

    #[test]
    fn wrong_magic_and_missing_column() {
        let e = TraceReader::<_, IoRow>::new("# route_trace v1\nturn\n".as_bytes(), "x")
            .err()
            .expect("must fail");
        assert!(e.to_string().contains("route_trace"), "{e}");
        let e = TraceReader::<_, IoRow>::new("# io_trace v1\nturn,phase\n".as_bytes(), "x")
            .err()
            .expect("must fail");
        assert!(e.to_string().contains("`step`"), "{e}");
    }

    #[test]
    fn compute_names_are_quoted() {
        let row = ComputeRow {
            turn: 0,
            phase: 1,
            step: 2,
            seq: 3,
            layer: -1,
            op: "CPY".into(),
            name: "odd,\"quoted\" name".into(),
            wall_ns: 9949,
            majflt: 0,
        };
        let mut w = TraceWriter::<_, ComputeRow>::new(Vec::new(), &DecodeTraceInfo::default())
            .expect("writer");
        w.write_row(&row).expect("row");
        let bytes = w.into_inner().expect("bytes");
        let text = String::from_utf8(bytes).expect("utf8");
        assert!(
            text.ends_with("0,1,2,3,-1,CPY,\"odd,\"\"quoted\"\" name\",9949,0\n"),
            "{text}"
        );
        let back: Vec<ComputeRow> = TraceReader::<_, ComputeRow>::new(text.as_bytes(), "c")
            .expect("open")
            .collect::<Result<_>>()
            .expect("rows");
        assert_eq!(back, vec![row]);
    }
}
