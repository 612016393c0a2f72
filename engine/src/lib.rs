//! bmoe engine: runs GGUF models on llama.cpp and, with `--moe-stream`, keeps the routed experts
//! of a Mixture-of-Experts model on flash, reading only the experts each token routes to.
//!
//! How it works (see `docs/engine.md`): after llama.cpp maps the model, a capture decode records
//! every expert tensor; their pages are replaced with anonymous memory at the same addresses
//! ([`vm`]); a graph hook ([`hook`]) reads the ids of each `ffn_moe_topk-<il>` node and the
//! [`stream::Streamer`] reads the missing experts into place before the expert matmuls run.

pub mod autocache;
pub mod chat;
pub mod compute_trace;
pub mod config;
pub mod csv_sink;
pub mod decide;
pub mod default_model;
pub mod dense;
#[allow(unsafe_code)]
pub mod ffi;
pub mod hook;
pub mod io_trace;
pub mod memory;
pub mod reasoning;
pub mod registry;
pub mod report;
pub mod residency;
pub mod route_trace;
pub mod run;
pub mod session;
pub mod stream;
pub mod text;
pub mod threads;
#[allow(unsafe_code)]
pub mod vm;

/// The engine version (`bmoe-cli --version`, CSV `engine=`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
