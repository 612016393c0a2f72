//! bmoe-analyze: fast ports of the BigMoeOnEdge trace analyses (route views, cache-policy replay,
//! dropping replay, compute/io reports, metrics tables) with the reference output layout, plus
//! bootstrap confidence intervals and machine-readable output.
//!
//! The text renderers reproduce the reference scripts byte for byte (see
//! `/work/shared/specs/analysis.md`); every deliberate difference is listed in `docs/analyze.md`.

pub mod convert;
pub mod decode;
pub mod drop;
pub mod error;
pub mod metrics;
pub mod metrics_files;
pub mod metrics_tables;
mod mt19937;
pub mod plot;
pub mod pyfmt;
pub mod replay;
pub mod route;
pub mod table;

pub use error::{AnalyzeError, Result};
