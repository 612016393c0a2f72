//! Choosing tokens: greedy or a seeded sampler chain, and the benchmark inputs
//! (`--ignore-eos`, `--feed-random`).

use super::error::ConfigError;
use clap::Args;

/// Sampling and benchmark-input flags.
#[derive(Debug, Clone, Args)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 = greedy
    #[arg(long = "temp", default_value_t = 0.0, value_name = "T")]
    pub temp: f32,
    /// Top-k (sampling only)
    #[arg(long = "top-k", default_value_t = 40, value_name = "K")]
    pub top_k: i64,
    /// Top-p (sampling only)
    #[arg(long = "top-p", default_value_t = 0.95, value_name = "P")]
    pub top_p: f32,
    /// Sampling seed, 0..=4294967294 (default: a random one, recorded in the --csv preamble)
    // u32::MAX means "draw a seed of your own" to llama.cpp, which no record could name
    #[arg(
        long = "seed",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(0..=i64::from(u32::MAX) - 1)
    )]
    pub seed: Option<u32>,
    /// Never end at an end-of-generation token: every turn runs to -n / n_predict (benchmarks,
    /// tests); end-of-generation tokens are removed from the choice
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,
    /// Benchmark input: feed seeded pseudo-random tokens instead of the sampled ones
    #[arg(long = "feed-random", value_name = "SEED")]
    pub feed_random: Option<u64>,
}

/// Sampling as resolved: greedy, or a seeded chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Argmax (ties → lowest id).
    Greedy,
    /// top-k → top-p → temperature → seeded draw.
    Sample {
        /// Temperature (> 0).
        temp: f32,
        /// Top-k.
        top_k: i32,
        /// Top-p.
        top_p: f32,
        /// Seed.
        seed: u32,
    },
}

impl SamplingArgs {
    /// Greedy below a positive temperature; otherwise the chain, with its seed drawn now when
    /// none was given. The chain's knobs are checked either way: a wrong value is wrong even
    /// when greedy decoding would not use it ([`SamplingArgs::inert`] says so).
    pub(super) fn resolve(&self) -> Result<Sampling, ConfigError> {
        if self.temp.is_nan() {
            return Err(ConfigError::new(
                "--temp",
                "--temp is NaN",
                "use 0 for greedy decoding or a positive temperature",
            ));
        }
        if self.top_k < 0 {
            return Err(ConfigError::new(
                "--top-k",
                format!("--top-k must be >= 0 (got {})", self.top_k),
                "0 disables top-k",
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(ConfigError::new(
                "--top-p",
                format!("--top-p must be in (0, 1] (got {})", self.top_p),
                "a probability mass, e.g. --top-p 0.9; 1.0 disables top-p",
            ));
        }
        if self.temp <= 0.0 {
            return Ok(Sampling::Greedy);
        }
        // never u32::MAX (the flag's range excludes it): the run names its seed
        let seed = self.seed.unwrap_or_else(random_seed);
        Ok(Sampling::Sample {
            temp: self.temp,
            top_k: i32::try_from(self.top_k).unwrap_or(i32::MAX),
            top_p: self.top_p,
            seed,
        })
    }

    /// The sampling flags among `given` (clap ids) that greedy decoding does not use.
    pub(super) fn inert(&self, given: &dyn Fn(&str) -> bool) -> Vec<String> {
        if self.temp > 0.0 {
            return Vec::new();
        }
        [("top_k", "--top-k"), ("top_p", "--top-p"), ("seed", "--seed")]
            .into_iter()
            .filter(|(id, _)| given(id))
            .map(|(_, flag)| {
                format!("{flag} has no effect with greedy decoding (--temp 0) — add --temp T (> 0) to sample")
            })
            .collect()
    }
}

/// A seed for a sampled run given no `--seed`: drawn here, not by llama.cpp, so the run can
/// record it (the `--csv` preamble's `seed=`) and `--seed` can reproduce it. Never `u32::MAX`,
/// which llama.cpp would replace with a draw of its own.
pub fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // `RandomState` is keyed from the OS's random source; the clock and pid add per-call change
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    let x = h.finish();
    ((x ^ (x >> 32)) as u32) % u32::MAX
}
