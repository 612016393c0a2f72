//! Where the dense (non-expert) weights live: `--dense-weights`.

use super::error::ConfigError;
use crate::memory::dense::DenseWeights;
use clap::Args;

/// Memory-policy flags.
#[derive(Debug, Clone, Args)]
pub struct MemoryArgs {
    /// Dense (non-expert) weights: mmap (leave to the page cache), warm (pre-fault the mapping),
    /// anon (copy into anonymous memory read with O_DIRECT), ahwb (Android only)
    #[arg(long = "dense-weights", default_value = "mmap", value_name = "MODE")]
    pub dense_weights: String,
}

impl MemoryArgs {
    /// The dense-weight policy.
    pub(super) fn resolve(&self) -> Result<DenseWeights, ConfigError> {
        match self.dense_weights.as_str() {
            "mmap" => Ok(DenseWeights::Mmap),
            "warm" => Ok(DenseWeights::Warm),
            "anon" => Ok(DenseWeights::Anon),
            "ahwb" => Err(ConfigError::new(
                "--dense-weights",
                "--dense-weights ahwb needs reclaim-exempt memory, which this platform does not provide (Android only)",
                "use --dense-weights anon for the same effect on Linux",
            )),
            other => Err(ConfigError::new(
                "--dense-weights",
                format!("--dense-weights expects mmap|warm|anon|ahwb, got '{other}'"),
                "mmap leaves dense weights to the page cache; anon pins them in anonymous memory",
            )),
        }
    }
}
