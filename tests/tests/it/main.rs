//! The end-to-end tests, in one test binary: `bmoe-gguf` and `bmoe-telemetry` are linked
//! once, not once per test file. Each module below was its own `tests/*.rs` binary.

mod pipeline;
mod routing_agreement;
mod traces_analyze;
