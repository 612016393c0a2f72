//! bmoe engine: runs GGUF models on llama.cpp and, with `--moe-stream`, keeps the routed experts
//! of a Mixture-of-Experts model on flash, reading only the experts each token routes to.
//!
//! How it works (see `docs/engine.md`): after llama.cpp maps the model, a capture decode records
//! every expert tensor; their pages are replaced with anonymous memory at the same addresses
//! ([`vm`]); a graph hook ([`hook`]) reads the ids of each `ffn_moe_topk-<il>` node and the
//! [`stream::Streamer`] reads the missing experts into place before the expert matmuls run.

pub mod chat;
pub mod cli;
pub mod decide;
#[allow(unsafe_code)]
pub mod ffi;
pub mod graph;
pub mod memory;
pub mod model;
pub mod session;
pub mod sinks;
pub mod stream;
pub mod turn;
#[allow(unsafe_code)]
pub mod vm;

/// The engine version (`bmoe-cli --version`, CSV `engine=`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
