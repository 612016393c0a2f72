//! bmoe engine: runs GGUF models on llama.cpp and, with `--moe-stream`, keeps the routed experts
//! of a Mixture-of-Experts model on flash, reading only the experts each token routes to.
//!
//! How it works (see `docs/engine.md` and `docs/architecture.md`): after llama.cpp maps the
//! model, a capture decode records every expert tensor; their pages are replaced with anonymous
//! memory at the same addresses (`vm`); a graph hook (`graph`) reads the ids of each
//! `ffn_moe_topk-<il>` node and the streamer (`stream`) reads the missing experts into place
//! before the expert matmuls run. A run is driven by `turn` (one-shot) or `session` (stdin
//! requests); what it measures leaves through `sinks`.
//!
//! The crate's public surface is what the `bmoe-cli` binary needs: the flags ([`Cli`]), the
//! resolved configuration ([`RunConfig`]), the two entry points ([`run`], [`serve`]) over an
//! [`Engine`], and the error with its exit status. Everything else is private to the crate.

mod auto;
mod chat;
mod cli;
mod decide;
mod error;
#[allow(unsafe_code)]
mod ffi;
mod graph;
mod memory;
mod model;
mod session;
mod sinks;
mod stream;
mod turn;
#[allow(unsafe_code)]
mod vm;

pub use cli::{Cli, RunConfig};
pub use error::{EngineError, ExitStatus};
pub use session::serve;
pub use turn::{Engine, run};

/// Internals for this crate's own benchmarks and integration tests (which drive llama.cpp and
/// the VM layer directly); not an API.
#[doc(hidden)]
pub mod internals {
    pub use crate::chat::{ChatTemplate, Message, ThinkCtl};
    pub use crate::decide::{DecideError, DecideSetup, PrefixState, decide};
    pub use crate::ffi::{Context, ContextOptions, Model, ModelOptions, MtpHead, Token, WeightRef};
    pub use crate::graph::hook::MoeHook;
    pub use crate::turn::logits_hash;
    pub use crate::vm::{AlignedBuf, Arena, PAGE};
}

/// The engine version (`bmoe-cli --version`, CSV `engine=`).
const VERSION: &str = env!("CARGO_PKG_VERSION");
