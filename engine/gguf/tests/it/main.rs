//! The integration tests of `bmoe-gguf`, in one test binary: the crate and its dependencies
//! are linked once, not once per test file. Each module below was its own `tests/*.rs` binary.

mod hostile;
mod roundtrip;
mod validate;
