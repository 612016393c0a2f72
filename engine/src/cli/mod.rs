//! The command line: `bmoe-cli`'s flags, grouped by concern, and their validation and
//! resolution into a [`RunConfig`] (engine spec §1.5: the first failure wins, in its order).
//!
//! A new flag goes into the group of its concern (one file each here) and, if the rest of the
//! engine needs its value, into [`RunConfig`].

mod config;
mod error;
mod memory;
mod model;
mod outputs;
mod sampling;
mod session;
mod streaming;
mod testing;
#[cfg(test)]
mod tests;

pub use crate::memory::dense::DenseWeights;
pub use config::RunConfig;
pub use error::ConfigError;
pub use sampling::Sampling;
pub use streaming::StreamConfig;

use clap::Parser;

/// `bmoe-cli` flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bmoe-cli",
    about = "Run a GGUF model on llama.cpp; with --moe-stream, read only the routed experts from flash",
    disable_version_flag = true,
    allow_negative_numbers = true
)]
pub struct Cli {
    #[command(flatten)]
    pub(crate) model: model::ModelArgs,
    #[command(flatten)]
    sampling: sampling::SamplingArgs,
    #[command(flatten, next_help_heading = "Expert streaming")]
    stream: streaming::StreamArgs,
    #[command(flatten, next_help_heading = "Memory")]
    memory: memory::MemoryArgs,
    #[command(flatten, next_help_heading = "Outputs")]
    outputs: outputs::OutputArgs,
    #[command(flatten, next_help_heading = "Chat and session")]
    session: session::SessionArgs,
    #[command(flatten)]
    testing: testing::TestArgs,
    /// Print the version and exit
    #[arg(long = "version")]
    version: bool,
    /// List the MoE architectures --moe-stream supports and exit
    #[arg(long = "list-archs")]
    list_archs: bool,
}

impl Cli {
    /// `--version`.
    pub fn wants_version(&self) -> bool {
        self.version
    }

    /// `--list-archs`: the architectures `--moe-stream` supports, as printed.
    pub fn archs_listing(&self) -> Option<String> {
        self.list_archs
            .then(crate::model::registry::list_archs_text)
    }

    /// Validates the flags (first failure wins, in the order of engine spec §1.5) and resolves
    /// them into a [`RunConfig`].
    ///
    /// # Errors
    /// The first flag whose value cannot be used.
    pub fn resolve(&self) -> Result<RunConfig, ConfigError> {
        let shape = self.model.resolve()?;
        let sampling = self.sampling.resolve()?;
        let stream = self.stream.resolve()?;
        let poison = self.testing.poison()?;
        let dense_weights = self.memory.resolve()?;
        self.check_prerequisites(stream.is_some(), poison.is_some())?;
        let s = &self.session;
        Ok(RunConfig {
            model: shape.model,
            prompt: self.model.prompt.clone(),
            n_predict: shape.n_predict,
            threads: shape.threads,
            adaptive_threads: self.model.adaptive_threads,
            n_ctx: shape.n_ctx,
            n_batch: shape.n_ctx,
            n_ubatch: shape.n_ubatch,
            n_expert_used: shape.n_expert_used,
            sampling,
            progress: self.outputs.progress,
            stream,
            feed_random: self.sampling.feed_random,
            ignore_eos: self.sampling.ignore_eos,
            dump_logits_hash: self.outputs.dump_logits_hash,
            poison,
            csv: self.outputs.csv.clone(),
            route_trace: self.outputs.route_trace.clone(),
            io_trace: self.outputs.io_trace.clone(),
            compute_trace: self.outputs.compute_trace(),
            chatml: s.chatml,
            think: !s.no_think,
            dense_weights,
            session: s.session,
            decide: s.decide,
            prefill_split: self.testing.test_prefill_split.clone(),
            force_text: self.testing.test_force_text.clone(),
            decide_state_max_mib: s
                .decide_state_max_mib
                .unwrap_or(session::DEFAULT_DECIDE_STATE_MAX_MIB),
        })
    }

    /// The flags that only make sense with another one.
    fn check_prerequisites(&self, streaming: bool, poisoned: bool) -> Result<(), ConfigError> {
        let s = &self.session;
        let missing = [
            (
                self.stream.load_all && !self.stream.moe_stream,
                "--load-all",
                "--load-all requires --moe-stream",
                "--load-all reads every expert through the streamer; add --moe-stream",
            ),
            (
                s.no_think && !s.chatml,
                "--no-think",
                "--no-think requires --chatml",
                "thinking is a chat-template switch; add --chatml",
            ),
            (
                s.decide && !s.session,
                "--decide",
                "--decide requires --session",
                "decide requests arrive on stdin in session mode; add --session",
            ),
            (
                s.decide_state_max_mib.is_some() && !s.decide,
                "--decide-state-max-mib",
                "--decide-state-max-mib requires --decide",
                "it caps the prefix state decide requests keep; add --session --decide",
            ),
            (
                poisoned && !streaming,
                "--test-poison",
                "--test-poison requires --moe-stream",
                "poisoning acts on streamed expert memory",
            ),
        ];
        match missing.into_iter().find(|m| m.0) {
            Some((_, flag, message, hint)) => Err(ConfigError::new(flag, message, hint)),
            None => Ok(()),
        }
    }
}
