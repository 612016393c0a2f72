//! The model and the shape of the run: `-m`, `-p`, `-n`, threads, context and batch sizes, the
//! routing top-k override.

use super::error::{ConfigError, positive};
use clap::Args;
use std::path::PathBuf;

/// Default prompt (as the original engine).
pub const DEFAULT_PROMPT: &str = "The capital of Japan is";

/// Model and run-shape flags.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model file (for a split model, the -00001-of-NNNNN.gguf shard)
    #[arg(short = 'm', long = "model", value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Prompt text
    #[arg(short = 'p', long = "prompt", default_value = DEFAULT_PROMPT)]
    pub prompt: String,
    /// Read the prompt from this file instead (UTF-8; one trailing newline is dropped)
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        conflicts_with = "prompt"
    )]
    pub file: Option<PathBuf>,
    /// Tokens to generate
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 128,
        value_name = "N"
    )]
    pub n_predict: i64,
    /// Compute threads (default: 4, capped at the number of CPUs)
    #[arg(
        short = 't',
        long = "threads",
        default_value_t = default_threads(),
        hide_default_value = true,
        value_name = "N"
    )]
    pub threads: i64,
    /// Treat -t as the maximum: each generated token runs with the thread count (-t, its
    /// halvings, 1) measured fastest lately; helps when other work shares the cores
    #[arg(long = "adaptive-threads")]
    pub adaptive_threads: bool,
    /// Context size in tokens (the prompt is prefilled as one batch of up to this size)
    #[arg(
        short = 'c',
        long = "ctx-size",
        default_value_t = 2048,
        value_name = "N"
    )]
    pub ctx_size: i64,
    /// Physical batch size; 0 = the whole batch
    #[arg(long = "ubatch", default_value_t = 0, value_name = "N")]
    pub ubatch: i64,
    /// Override the routing top-k (<arch>.expert_used_count); 0 = the model's own
    #[arg(long = "n-expert-used", default_value_t = 0, value_name = "K")]
    pub n_expert_used: i64,
}

impl ModelArgs {
    /// The prompt: `-f`'s file, read now, or `-p`.
    pub(super) fn prompt(&self) -> Result<String, ConfigError> {
        let Some(path) = &self.file else {
            return Ok(self.prompt.clone());
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::InvalidData {
                "it is not UTF-8 text".to_string()
            } else {
                e.to_string()
            };
            ConfigError::new(
                "-f/--file",
                format!(
                    "-f/--file: cannot read the prompt file {}: {why}",
                    path.display()
                ),
                "check the path, or give the prompt inline with -p \"text\"",
            )
        })?;
        // an editor ends the file with a newline the prompt did not mean to have (as llama.cpp)
        let text = text.strip_suffix('\n').unwrap_or(&text);
        Ok(text.strip_suffix('\r').unwrap_or(text).to_string())
    }
}

/// The run's shape as resolved.
pub(super) struct RunShape {
    pub model: PathBuf,
    pub n_predict: usize,
    pub threads: usize,
    pub n_ctx: u32,
    pub n_ubatch: u32,
    pub n_expert_used: Option<u32>,
}

impl ModelArgs {
    /// Validates the model and shape flags, in the order of engine spec §1.5.
    pub(super) fn resolve(&self) -> Result<RunShape, ConfigError> {
        let model = self.model.clone().ok_or_else(|| {
            ConfigError::new(
                "-m/--model",
                "no model given (-m/--model)",
                "pass a GGUF file: bmoe-cli -m model.gguf -p \"hello\"",
            )
        })?;
        if model.as_os_str().is_empty() {
            return Err(ConfigError::new(
                "-m/--model",
                "-m/--model is empty",
                "pass the path of a GGUF file",
            ));
        }
        positive(
            "-n/--n-predict",
            self.n_predict,
            "the number of tokens to generate, e.g. -n 32",
        )?;
        positive(
            "-t/--threads",
            self.threads,
            "use at least one compute thread, e.g. -t 4",
        )?;
        positive(
            "-c/--ctx-size",
            self.ctx_size,
            "the context size in tokens, e.g. -c 2048",
        )?;
        if self.ubatch < 0 {
            return Err(ConfigError::new(
                "--ubatch",
                format!("--ubatch must be >= 0 (got {})", self.ubatch),
                "0 means 'the whole batch'",
            ));
        }
        if self.ubatch > self.ctx_size {
            return Err(ConfigError::new(
                "--ubatch",
                format!(
                    "--ubatch={} exceeds -c/--ctx-size={}",
                    self.ubatch, self.ctx_size
                ),
                "a physical batch cannot be larger than the context; lower --ubatch or raise -c",
            ));
        }
        if self.n_expert_used < 0 {
            return Err(ConfigError::new(
                "--n-expert-used",
                format!("--n-expert-used must be >= 0 (got {})", self.n_expert_used),
                "0 keeps the model's own top-k",
            ));
        }
        let n_ctx = self.ctx_size as u32;
        Ok(RunShape {
            model,
            n_predict: self.n_predict as usize,
            threads: self.threads as usize,
            n_ctx,
            n_ubatch: if self.ubatch > 0 {
                self.ubatch as u32
            } else {
                n_ctx
            },
            n_expert_used: (self.n_expert_used > 0).then_some(self.n_expert_used as u32),
        })
    }
}

/// The original's default of 4 compute threads, capped at the CPUs this process may use: more
/// threads than cores makes every ggml barrier wait for a descheduled thread.
pub fn default_threads() -> i64 {
    let cpus = std::thread::available_parallelism().map_or(4, usize::from);
    cpus.clamp(1, 4) as i64
}
