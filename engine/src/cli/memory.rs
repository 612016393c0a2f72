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
    /// Keep large row-gathered tables (the token embedding, when the output head is its own
    /// tensor) off the resident set: fetch the rows each batch's tokens gather from the file
    /// before the decode (needs --moe-stream)
    #[arg(long = "row-stream")]
    pub row_stream: bool,
    /// With --row-stream: the row cache's budget in MiB (0 = off: only the current batch's
    /// rows stay resident)
    #[arg(long = "row-cache-mb", default_value_t = 64.0, value_name = "MIB")]
    pub row_cache_mb: f64,
}

impl MemoryArgs {
    /// `--row-stream`'s row-cache budget in bytes; `None` when off.
    pub(super) fn row_stream(&self, streaming: bool) -> Result<Option<u64>, ConfigError> {
        if !self.row_cache_mb.is_finite() || self.row_cache_mb < 0.0 {
            return Err(ConfigError::new(
                "--row-cache-mb",
                format!(
                    "--row-cache-mb must be a size in MiB >= 0 (got {})",
                    self.row_cache_mb
                ),
                "0 keeps only the current batch's rows; 64 holds about 16k rows of 4 KiB",
            ));
        }
        if !self.row_stream {
            return Ok(None);
        }
        if !streaming {
            return Err(ConfigError::new(
                "--row-stream",
                "--row-stream requires --moe-stream",
                "the row tables are taken over with the streamed experts; add --moe-stream",
            ));
        }
        Ok(Some((self.row_cache_mb * 1024.0 * 1024.0) as u64))
    }

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
