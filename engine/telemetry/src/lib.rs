//! # bmoe-telemetry — the contract every bmoe program shares
//!
//! The engine (`bmoe-cli`) writes with this crate; `bmoe-analyze`, `bmoe-top` and `bmoe-bench`
//! read with it. The formats are the seed contract (`docs/telemetry.md`); this crate is its
//! single executable form. No native dependencies (serde, serde_json, thiserror).
//!
//! | format | module | read | write |
//! |---|---|---|---|
//! | `BMOE_<TAG> {json}` lines | [`protocol`] | [`protocol::parse_line`] | `to_line()` on every record |
//! | session requests (stdin) | [`protocol`] | [`protocol::Request::parse`] | [`protocol::Request::to_line`] |
//! | end-of-run summary lines | [`summary`] | [`summary::parse_summary_line`], [`summary::PerfReport::parse`] | `Display` |
//! | metrics CSV v0/v1/v2 | [`metrics`] | [`metrics::MetricsReader`], [`metrics::MetricsFile`] | [`metrics::MetricsWriter`] |
//! | route / compute / io trace v1 | [`trace`] | [`trace::TraceReader`] | [`trace::TraceWriter`] |
//! | route trace v1, whole file into columns | [`route_columns`] | [`route_columns::RouteTable`] | |
//! | `.metrics` sidecar, `key=value` lines | [`kv`] | [`kv::read_sidecar`], [`kv::parse_kv_line`] | [`kv::format_kv_line`] |
//! | `delta_text` / `reset` semantics | [`deltas`] | [`deltas::TextAccumulator`] | [`deltas::DeltaEncoder`] |
//! | which of the above a file is | [`detect`] | [`detect::detect_format`] | |
//! | where a token's time went | [`attribution`] | pure functions | |
//! | `bmoe-cli` flags that state run facts | [`cli_flags`] | [`cli_flags::lookup`] | |
//!
//! Lower layers, public for tools that need them: [`table`] (the streaming CSV reader every
//! format sits on; use it for columns this crate does not know yet) and [`cell`] (byte-level
//! number parsing, deterministic float formatting, column types).
//!
//! ## Decisions worth knowing
//!
//! * **Tolerant reading.** Unknown JSON keys, preamble keys, trailer keys and CSV columns are
//!   ignored or kept (never an error); missing optional ones take documented defaults
//!   (`Option` for every metrics column). Anything else wrong is an [`Error`] naming the file,
//!   the 1-based line and the column or key. Nothing here panics on input.
//! * **Protocol floats** are the shortest decimal that reads back to the same `f64` (ryu);
//!   non-finite values are `null` (read back as NaN; in `choice_logp`, `null` is −∞).
//! * **CSV floats** use the archived engine's fixed decimals per column
//!   ([`metrics::TOKEN_DECIMALS`]), so a rewritten real file is byte-identical; route weights
//!   are read as exact `f64` and written as `%.6g`, `nan` when unknown.
//! * **Values with spaces** in `#` preambles: a word without `=` continues the previous value
//!   (see [`kv`] for the exact rule and what the writer refuses).
//! * **Flushing.** [`metrics::MetricsWriter`] flushes every row (a killed run keeps every
//!   completed token); [`trace::TraceWriter`] buffers and is flushed once per decode and on
//!   drop.
//! * **Streaming.** Readers hold one line at a time whatever the file size, accept CRLF and a
//!   BOM, and report a last line cut short (no newline, unreadable) through `truncated()`
//!   instead of failing. For bulk loading with polars, [`table::read_head`] gives the preamble
//!   (`skip_rows`) and header; use `comment_prefix = "#"` for the trailers, and the
//!   `*_COLUMNS` / `*_COLUMN_TYPES` constants for a schema.
//!
//! ## Protocol
//!
//! ```
//! use bmoe_telemetry::protocol::{parse_line, LineKind, Progress, Record, Request};
//! let p = Progress { step: 1, steps: 8, wall_ms: 12.5, compute_ms: 10.0,
//!                    delta_text: "Hi".into(), ..Progress::default() };
//! let line = p.to_line();
//! assert!(line.starts_with(r#"BMOE_PROGRESS {"step":1,"steps":8,"wall_ms":12.5,"#));
//! match parse_line(&line) {
//!     LineKind::Record(Record::Progress(back)) => assert_eq!(back, p),
//!     other => panic!("{other:?}"),
//! }
//! assert!(matches!(parse_line("=== perf ==="), LineKind::Text(_)));
//! // Session requests, with their defaults.
//! let Ok(Request::Generate(g)) = Request::parse(r#"{"cmd":"generate","id":1,"prompt":"hi"}"#)
//!     else { panic!() };
//! assert!(g.think() && g.clear_kv() && g.n_predict_or(64) == 64);
//! ```
//!
//! ## Summary lines
//!
//! ```
//! use bmoe_telemetry::summary::{Generation, PerfReport};
//! let g = Generation { tokens: 256, s_per_token: 0.585, tok_s: 1.709 };
//! assert_eq!(g.to_string(), "generation: 256 tokens, 0.585 s/token (1.709 tok/s)");
//! let r = PerfReport::parse("=== answer ===\nHello\n=== perf ===\ngeneration: 256 tokens, 0.585 s/token (1.709 tok/s)\n");
//! assert_eq!(r.answer.as_deref(), Some("Hello"));
//! assert_eq!(r.generation, Some(g));
//! ```
//!
//! ## Metrics CSV
//!
//! ```
//! use bmoe_telemetry::metrics::{MetricsReader, MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
//! let info = RunInfo { engine: Some("0.1.0".into()), threads: Some(4), overlap: Some(true),
//!                      ..RunInfo::default() };
//! let mut w = MetricsWriter::new(Vec::new(), &info)?;        // preamble + header
//! w.write_row(&TokenRow { step: Some(1), wall_ms: Some(240.089), ..TokenRow::default() })?;
//! let mut trailer = SummaryTrailer::new();
//! trailer.push_f64("s/tok", 0.24, 3);
//! w.write_summary(&trailer)?;
//! let csv = w.into_inner()?;
//! let mut r = MetricsReader::new(csv.as_slice(), "run.csv")?;
//! assert_eq!(r.run_info().threads, Some(4));
//! for row in r.by_ref() {
//!     assert_eq!(row?.get_f64("wall_ms"), Some(240.089));   // by column name
//! }
//! assert_eq!(r.summaries()[0].get_f64("s/tok"), Some(0.24));
//! assert!(r.truncated().is_none());
//! # Ok::<(), bmoe_telemetry::Error>(())
//! ```
//!
//! ## Traces
//!
//! ```
//! use bmoe_telemetry::trace::{IoRow, DecodeTraceInfo, TraceReader, TraceWriter};
//! let mut w = TraceWriter::<_, IoRow>::new(Vec::new(), &DecodeTraceInfo::default())?;
//! w.write_row(&IoRow { turn: 0, phase: 1, step: 29, layer: 0, expert: 87, proj: 1, lane: 0,
//!     spec: false, offset: 1526304, req_bytes: 65536, read_bytes: 69632, latency_ns: 416800 })?;
//! w.flush()?;                                                  // once per decode
//! let text = String::from_utf8_lossy(&w.into_inner()?).into_owned();
//! assert!(text.ends_with("0,1,29,0,87,1,0,0,1526304,65536,69632,416800\n"));
//! let rows: Vec<IoRow> = TraceReader::<_, IoRow>::new(text.as_bytes(), "io.csv")?
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(rows[0].read_bytes - rows[0].req_bytes, 4096);  // alignment waste
//! # Ok::<(), bmoe_telemetry::Error>(())
//! ```
//!
//! ## Sidecar and format detection
//!
//! ```
//! use bmoe_telemetry::{detect::{detect_text, FileKind}, kv::parse_sidecar};
//! let text = "peak_rss_kb=6425636\ncpu_temp_max_mC=66800\n";
//! assert_eq!(detect_text(text), FileKind::Sidecar);
//! assert_eq!(parse_sidecar(text).get("peak_rss_kb"), Some("6425636"));
//! ```
//!
//! ## Attribution
//!
//! ```
//! use bmoe_telemetry::attribution::{bars, compute_residual_ms, Threads, TokenTimes};
//! // An overlap token: lanes read 600 ms in parallel, compute lost 50 ms to them.
//! let t = TokenTimes { wall_ms: 200.0, io_ms: 600.0, stall_ms: 50.0, mgmt_ms: 10.0, cpu_ms: 1200.0 };
//! assert_eq!(compute_residual_ms(&t, true), 140.0);          // what the engine emits
//! let b = bars(&t, Threads { compute: 4, io: 4 }, true);     // what the panel draws
//! assert_eq!((b.compute_ms, b.flash_wait_ms, b.unattributed_ms), (Some(300.0), 50.0, Some(0.0)));
//! ```

pub mod attribution;
pub mod cell;
pub mod class;
pub mod cli_flags;
pub mod deltas;
pub mod detect;
pub mod error;
pub mod kv;
pub mod metrics;
pub mod protocol;
pub mod route_columns;
pub mod summary;
pub mod table;
pub mod trace;

pub use error::{Error, Result};
