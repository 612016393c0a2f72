//! `bmoe-analyze convert`: a trace (route, compute, io) or a metrics CSV (v0/v1/v2) as a typed
//! Parquet or Arrow IPC file, so fleets of runs can be queried with DuckDB, Spark or pandas.
//!
//! * **One parser.** Rows are read by the `bmoe-telemetry` readers ([`TraceReader`],
//!   [`MetricsReader`]); the file kind comes from [`detect_format`], as everywhere else.
//! * **Typed columns.** Each column gets the type of its field in the telemetry row struct
//!   (`turn` UInt32, `step` Int64, `weight` Float64, `dropped`/`spec` Boolean, …); text columns
//!   (the compute trace's `op` and `name`) are dictionary-encoded strings. Metrics columns are
//!   all nullable (an empty cell is a null); trace columns are not, except the route trace's
//!   `dropped`.
//! * **Metadata kept.** The preamble, its `key=value` pairs, the route trace's per-layer byte
//!   sizes and the metrics `# summary` trailers become file key-value metadata (table
//!   below): Parquet footer key-values (what `parquet_kv_metadata()` shows in DuckDB)
//!   plus the Arrow schema metadata, which pyarrow and the arrow-rs readers expose.
//! * **Streaming.** Rows become Arrow record batches of [`BATCH_ROWS`] rows; Parquet row groups
//!   hold at most [`ROW_GROUP_ROWS`] rows, so memory stays bounded whatever the file size.
//! * **Atomic.** The output is written to a hidden temporary file in the target directory and
//!   renamed over the target only when complete; a failed conversion removes it.
//!
//! # Metadata
//!
//! Every output carries:
//!
//! | key | value |
//! |---|---|
//! | `bmoe.format` | `route trace v1`, `compute trace v1`, `io trace v1`, `metrics CSV vN` |
//! | `bmoe.source` | the input path as given |
//! | `bmoe.preamble` | the preamble lines, `#` included, joined by `\n` (lossless) |
//! | `bmoe.<key>` | every `key=value` of the preamble (later lines win), e.g. `bmoe.model` |
//! | `bmoe.layers` | route traces: JSON `[{"layer":0,"expert_bytes":…,"dense_bytes":…},…]` |
//! | `bmoe.summary` | metrics: the `# summary` trailer lines joined by `\n` |
//! | `bmoe.summary.<key>` | metrics with one trailer: its pairs (`bmoe.summary.<i>.<key>` with several) |
//! | `bmoe.skipped_columns` | metrics: header columns this bmoe version does not know |
//! | `bmoe.truncated` | when the last line was cut short: `line N: why` (footer only) |

mod columns;
mod sink;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use bmoe_telemetry::detect::{FileKind, detect_format};
use bmoe_telemetry::metrics::{MetricsReader, SummaryTrailer};
use bmoe_telemetry::table::{Preamble, Truncated};
use bmoe_telemetry::trace::{ComputeRow, IoRow, RouteRow, RouteTraceInfo, TraceReader, TraceRow};

use crate::{AnalyzeError, Result};
use columns::{Batcher, ComputeBatcher, IoBatcher, MetricsBatcher, RouteBatcher};
use sink::Sink;

pub use sink::Target;

/// Rows per Arrow record batch.
pub const BATCH_ROWS: usize = 64 * 1024;
/// Most rows in one Parquet row group (bounds the writer's buffered, encoded data).
pub const ROW_GROUP_ROWS: usize = 1024 * 1024;

/// Prefix of every metadata key this command writes.
pub const META_PREFIX: &str = "bmoe.";

/// What a conversion did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The input file.
    pub input: PathBuf,
    /// The file written.
    pub output: PathBuf,
    /// What the input was, e.g. `route trace v1` or `metrics CSV v2`.
    pub format: String,
    /// Data rows converted.
    pub rows: u64,
    /// Columns written.
    pub columns: usize,
    /// Bytes of the input.
    pub input_bytes: u64,
    /// Bytes of the output.
    pub output_bytes: u64,
    /// The input's last line, cut short by a killed writer and left out.
    pub truncated: Option<Truncated>,
    /// Header columns the telemetry reader does not know (left out of the output).
    pub skipped_columns: Vec<String>,
}

impl Summary {
    /// The one-line report `convert` prints.
    pub fn line(&self) -> String {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let ratio = if self.input_bytes > 0 {
            format!(
                ", {:.2}x the CSV",
                self.output_bytes as f64 / self.input_bytes as f64
            )
        } else {
            String::new()
        };
        format!(
            "{} ({}, {} rows, {} columns, {:.1} MiB) -> {} ({:.1} MiB{ratio})\n",
            self.input.display(),
            self.format,
            self.rows,
            self.columns,
            mib(self.input_bytes),
            self.output.display(),
            mib(self.output_bytes),
        )
    }
}

/// The output path used when none is given: the input with its extension replaced by the
/// target's (`qwen.route.csv` → `qwen.route.parquet`).
pub fn default_output(input: &Path, target: Target) -> PathBuf {
    input.with_extension(target.extension())
}

/// Converts `input` to `target`, writing `output` (atomically).
///
/// # Errors
/// [`AnalyzeError::Invalid`] when the file is not a trace or metrics CSV, or `output` is the
/// input; [`AnalyzeError::Malformed`] naming file and line for a row the telemetry reader
/// rejects; [`AnalyzeError::Io`] when reading or writing fails. No output file is left behind
/// on error.
pub fn convert(input: &Path, output: &Path, target: Target) -> Result<Summary> {
    if same_file(input, output) {
        return Err(AnalyzeError::Invalid {
            message: format!("convert: the output {} is the input file", output.display()),
            hint: "pass another path with -o".into(),
        });
    }
    let kind = detect_format(input).map_err(|e| AnalyzeError::from_telemetry(input, e))?;
    let input_bytes = std::fs::metadata(input)
        .map_err(|e| AnalyzeError::io(input, e))?
        .len();
    let done = match kind {
        FileKind::RouteTrace => {
            let r = open_trace::<RouteRow>(input)?;
            let batcher = RouteBatcher::new(r.has_column("dropped"));
            let mut meta = trace_metadata(input, "route trace v1", r.preamble());
            route_layers(r.info(), &mut meta);
            run_trace(input, r, batcher, meta, output, target)?
        }
        FileKind::ComputeTrace => {
            let r = open_trace::<ComputeRow>(input)?;
            let meta = trace_metadata(input, "compute trace v1", r.preamble());
            run_trace(input, r, ComputeBatcher::new(), meta, output, target)?
        }
        FileKind::IoTrace => {
            let r = open_trace::<IoRow>(input)?;
            let meta = trace_metadata(input, "io trace v1", r.preamble());
            run_trace(input, r, IoBatcher::new(), meta, output, target)?
        }
        FileKind::Metrics { .. } => run_metrics(input, output, target)?,
        other => {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "{}: not a trace or metrics CSV ({}); nothing to convert",
                    input.display(),
                    kind_name(other)
                ),
                hint: "convert reads route/compute/io traces (`# route_trace v1`, …) and metrics CSVs (`# bmoe_metrics vN` or a `step,…,wall_ms` header)".into(),
            });
        }
    };
    let output_bytes = std::fs::metadata(output)
        .map_err(|e| AnalyzeError::io(output, e))?
        .len();
    Ok(Summary {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        format: done.format,
        rows: done.rows,
        columns: done.columns,
        input_bytes,
        output_bytes,
        truncated: done.truncated,
        skipped_columns: done.skipped_columns,
    })
}

fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Sidecar => "a key=value sidecar",
        FileKind::RunLog => "a run log",
        FileKind::OtherCsv => "a CSV of another kind, e.g. a replay curve",
        _ => "no bmoe magic line or known header",
    }
}

/// Whether two paths name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// What a finished conversion reports back to [`convert`].
struct Done {
    format: String,
    rows: u64,
    columns: usize,
    truncated: Option<Truncated>,
    skipped_columns: Vec<String>,
}

fn open_trace<T: TraceRow>(
    input: &Path,
) -> Result<TraceReader<std::io::BufReader<std::fs::File>, T>> {
    TraceReader::<_, T>::open(input).map_err(|e| AnalyzeError::from_telemetry(input, e))
}

/// Streams a trace's rows through `batcher` into the sink.
fn run_trace<T: TraceRow, B: Batcher<Row = T>>(
    input: &Path,
    mut reader: TraceReader<std::io::BufReader<std::fs::File>, T>,
    mut batcher: B,
    meta: Vec<(String, String)>,
    output: &Path,
    target: Target,
) -> Result<Done> {
    let schema = schema_with(batcher.fields(), &meta);
    let mut sink = Sink::create(output, target, schema.clone(), &meta)?;
    let rows = stream_rows(input, reader.by_ref(), &mut batcher, &schema, &mut sink)?;
    let truncated = reader.truncated().cloned();
    finish_sink(sink, truncated.as_ref())?;
    Ok(Done {
        format: T::FORMAT.to_string(),
        rows,
        columns: schema.fields().len(),
        truncated,
        skipped_columns: Vec::new(),
    })
}

/// Metrics: a first pass collects the `# summary` trailers (they follow the rows, but the
/// Arrow IPC schema — and so its metadata — is written first); the second converts.
fn run_metrics(input: &Path, output: &Path, target: Target) -> Result<Done> {
    let tel = |e| AnalyzeError::from_telemetry(input, e);
    let mut first = MetricsReader::open(input).map_err(tel)?;
    for row in first.by_ref() {
        row.map_err(tel)?;
    }
    let summaries = first.summaries().to_vec();
    drop(first);

    let mut reader = MetricsReader::open(input).map_err(tel)?;
    let version = reader.preamble().version();
    let format = match version {
        Some(v) => format!("metrics CSV v{v}"),
        None => "metrics CSV v0".to_string(),
    };
    let mut batcher = MetricsBatcher::new(reader.header());
    let skipped_columns = batcher.skipped().to_vec();
    let mut meta = trace_metadata(input, &format, reader.preamble());
    summary_metadata(&summaries, &mut meta);
    if !skipped_columns.is_empty() {
        meta.push((
            format!("{META_PREFIX}skipped_columns"),
            skipped_columns.join(","),
        ));
    }
    let schema = schema_with(batcher.fields(), &meta);
    let mut sink = Sink::create(output, target, schema.clone(), &meta)?;
    let rows = stream_rows(input, reader.by_ref(), &mut batcher, &schema, &mut sink)?;
    let truncated = reader.truncated().cloned();
    finish_sink(sink, truncated.as_ref())?;
    Ok(Done {
        format,
        rows,
        columns: schema.fields().len(),
        truncated,
        skipped_columns,
    })
}

/// Pushes every row through `batcher` into `sink`, one record batch per [`BATCH_ROWS`] rows and
/// a last partial one; returns how many rows went in.
fn stream_rows<B: Batcher>(
    input: &Path,
    rows: impl Iterator<Item = std::result::Result<B::Row, bmoe_telemetry::Error>>,
    batcher: &mut B,
    schema: &SchemaRef,
    sink: &mut Sink,
) -> Result<u64> {
    let mut count = 0u64;
    for row in rows {
        let row = row.map_err(|e| AnalyzeError::from_telemetry(input, e))?;
        batcher.push(&row).map_err(|e| too_many(input, &e))?;
        count += 1;
        if batcher.len() >= BATCH_ROWS {
            sink.write(&batch(schema, batcher)?)?;
        }
    }
    if batcher.len() > 0 {
        sink.write(&batch(schema, batcher)?)?;
    }
    Ok(count)
}

/// Closes the sink; a last line the reader left out (cut short by a killed writer) is recorded
/// in the file's metadata, so the output never passes for the whole input.
fn finish_sink(sink: Sink, truncated: Option<&Truncated>) -> Result<()> {
    let tail: Vec<(String, String)> = truncated
        .map(|t| {
            (
                format!("{META_PREFIX}truncated"),
                format!("line {}: {}", t.line, t.reason),
            )
        })
        .into_iter()
        .collect();
    sink.finish(&tail)
}

fn too_many(input: &Path, e: &arrow_schema::ArrowError) -> AnalyzeError {
    AnalyzeError::Invalid {
        message: format!("{}: cannot convert: {e}", input.display()),
        hint: "a text column has more distinct values than an Arrow dictionary holds (2^31); split the file".into(),
    }
}

fn schema_with(fields: Vec<arrow_schema::Field>, meta: &[(String, String)]) -> SchemaRef {
    let map: HashMap<String, String> = meta.iter().cloned().collect();
    std::sync::Arc::new(Schema::new_with_metadata(fields, map))
}

fn batch<B: Batcher>(schema: &SchemaRef, b: &mut B) -> Result<RecordBatch> {
    RecordBatch::try_new(schema.clone(), b.finish()).map_err(|e| AnalyzeError::Invalid {
        message: format!("convert: cannot assemble a record batch: {e}"),
        hint: "this is a bug in bmoe-analyze convert; please report it with the input file".into(),
    })
}

fn trace_metadata(input: &Path, format: &str, preamble: &Preamble) -> Vec<(String, String)> {
    let mut meta = vec![
        (format!("{META_PREFIX}format"), format.to_string()),
        (format!("{META_PREFIX}source"), input.display().to_string()),
        (format!("{META_PREFIX}preamble"), preamble.lines.join("\n")),
    ];
    let mut pairs: Vec<(String, String)> = Vec::new();
    for line in &preamble.lines {
        let kv = bmoe_telemetry::kv::parse_kv_line(line);
        if is_layer_line(&kv) {
            continue;
        }
        for (k, v) in kv.pairs.iter() {
            let key = format!("{META_PREFIX}{k}");
            if let Some(slot) = pairs.iter_mut().find(|(have, _)| *have == key) {
                slot.1 = v.to_string();
            } else {
                pairs.push((key, v.to_string()));
            }
        }
    }
    // A preamble key named like one of ours must not replace it.
    pairs.retain(|(k, _)| !meta.iter().any(|(m, _)| m == k));
    meta.extend(pairs);
    meta
}

/// The route trace's `# layer=<il> expert_bytes=<n> dense_bytes=<n>` lines.
fn is_layer_line(kv: &bmoe_telemetry::kv::KvLine) -> bool {
    kv.words.is_empty() && kv.pairs.iter().next().is_some_and(|(k, _)| k == "layer")
}

fn route_layers(info: &RouteTraceInfo, meta: &mut Vec<(String, String)>) {
    if info.layers.is_empty() {
        return;
    }
    let layers: Vec<serde_json::Value> = info
        .layers
        .iter()
        .map(|l| {
            serde_json::json!({
                "layer": l.layer, "expert_bytes": l.expert_bytes, "dense_bytes": l.dense_bytes
            })
        })
        .collect();
    meta.push((
        format!("{META_PREFIX}layers"),
        serde_json::Value::Array(layers).to_string(),
    ));
}

fn summary_metadata(summaries: &[SummaryTrailer], meta: &mut Vec<(String, String)>) {
    if summaries.is_empty() {
        return;
    }
    let lines: Vec<String> = summaries.iter().filter_map(|s| s.to_line().ok()).collect();
    meta.push((format!("{META_PREFIX}summary"), lines.join("\n")));
    for (i, s) in summaries.iter().enumerate() {
        let prefix = if summaries.len() == 1 {
            format!("{META_PREFIX}summary.")
        } else {
            format!("{META_PREFIX}summary.{i}.")
        };
        for (k, v) in s.pairs.iter() {
            meta.push((format!("{prefix}{k}"), v.to_string()));
        }
    }
}
