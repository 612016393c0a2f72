//! The integration tests of `bmoe-telemetry`, in one test binary: the crate and its
//! dependencies are linked once, not once per test file. Each module below was its own
//! `tests/*.rs` binary; `common` holds the helpers they share.

mod common;
mod fuzz;
mod golden;
mod killed_writer;
mod realdata;
mod roundtrip;
