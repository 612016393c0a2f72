//! # bmoe-telemetry — the contract every bmoe program shares
//!
//! The engine (`bmoe-cli`) writes with this crate; `bmoe-analyze`, `bmoe-top` and `bmoe-bench`
//! read with it. The formats are the seed contract (`docs/telemetry.md` upstream); this crate
//! is its executable form. No native dependencies.
//!
//! | format | module | read | write |
//! |---|---|---|---|
//! | `BMOE_<TAG> {json}` lines and session requests | [`protocol`] | [`protocol::parse_line`], [`protocol::Request::parse`] | `to_line()` on every record |
//! | end-of-run summary lines | [`summary`] | [`summary::parse_summary_line`], [`summary::PerfReport`] | `Display` |
//! | `key=value` preambles, `.metrics` sidecar | [`kv`] | [`kv::parse_kv_line`], [`kv::read_sidecar`] | [`kv::format_kv_line`] |
//!
//! ## Protocol example
//!
//! ```
//! use bmoe_telemetry::protocol::{parse_line, Begin, LineKind, Record};
//! let line = Begin { id: 3 }.to_line();
//! assert_eq!(line, r#"BMOE_BEGIN {"id":3}"#);
//! match parse_line(&line) {
//!     LineKind::Record(Record::Begin(b)) => assert_eq!(b.id, 3),
//!     other => panic!("{other:?}"),
//! }
//! ```
//!
//! ## Summary example
//!
//! ```
//! use bmoe_telemetry::summary::{Generation, parse_summary_line, SummaryLine};
//! let g = Generation { tokens: 256, s_per_token: 0.585, tok_s: 1.709 };
//! assert_eq!(g.to_string(), "generation: 256 tokens, 0.585 s/token (1.709 tok/s)");
//! assert_eq!(parse_summary_line(&g.to_string()), Ok(Some(SummaryLine::Generation(g))));
//! ```

pub mod attribution;
pub mod cell;
pub mod detect;
pub mod error;
pub mod kv;
pub mod metrics;
pub mod protocol;
pub mod summary;
pub mod table;
pub mod trace;

pub use error::{Error, Result};
