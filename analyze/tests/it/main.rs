//! bmoe-analyze's integration tests, in one binary: one link of the binary-heavy test code
//! (arrow, parquet, plotters) instead of one per file, and one process whose test threads run
//! every file's tests together.
//!
//! Most tests run the built `bmoe-analyze` (`CARGO_BIN_EXE_bmoe-analyze`); those on real data
//! read `$BMOE_SHARED`, else `../shared` beside the workspace, and skip with a printed reason
//! when it is absent.

mod common;

mod cli;
mod convert;
mod csv_tables;
mod format;
mod golden;
mod hostile;
mod metrics_inputs;
mod not_benchmark;
mod plot;
mod replay_bound;
mod robustness;
mod route_columns;
mod route_format;
mod run_class;
