//! Command-line flags, their validation (engine spec §1.5) and the resolved run configuration.

use clap::Parser;
use std::path::PathBuf;

/// `--decide-state-max-mib` when not given: a prefix state of a few thousand tokens of a 30B
/// MoE's KV fits, one that would take a real share of a phone's memory does not.
pub const DEFAULT_DECIDE_STATE_MAX_MIB: u64 = 512;

/// Default prompt (as the original engine).
pub const DEFAULT_PROMPT: &str = "The capital of Japan is";

/// `bmoe-cli` flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bmoe-cli",
    about = "Run a GGUF model on llama.cpp; with --moe-stream, read only the routed experts from flash",
    disable_version_flag = true,
    allow_negative_numbers = true
)]
pub struct Cli {
    /// Model file (for a split model, the -00001-of-NNNNN.gguf shard)
    #[arg(short = 'm', long = "model", value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Prompt text
    #[arg(short = 'p', long = "prompt", default_value = DEFAULT_PROMPT)]
    pub prompt: String,
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
    /// Machine-readable per-token lines (BMOE_LOAD / BMOE_PROGRESS) on stdout
    #[arg(long = "progress")]
    pub progress: bool,
    /// Stream routed experts from flash instead of keeping them mapped
    #[arg(long = "moe-stream")]
    pub moe_stream: bool,
    /// Expert cache budget in MiB (0 = off: only the current layer's experts stay resident), or
    /// `auto`: sized once at load from MemAvailable / the memory cgroup, whichever is tighter
    #[arg(long = "cache-mb", default_value = "0", value_name = "MIB|auto")]
    pub cache_mb: String,
    /// `--cache-mb auto`: MiB to leave free for everything else [default: scaled with the
    /// memory: a quarter of it, 128..=1536 MiB, lowered to fit one cache cycle]
    #[arg(long = "cache-floor-mb", value_name = "MIB")]
    pub cache_floor_mb: Option<i64>,
    /// `--cache-mb auto`: upper bound in MiB (0 = none)
    #[arg(long = "cache-ceil-mb", default_value_t = 0, value_name = "MIB")]
    pub cache_ceil_mb: i64,
    /// Read every expert of every layer on each token (A/B baseline; needs --moe-stream)
    #[arg(long = "load-all")]
    pub load_all: bool,
    /// Dense (non-expert) weights: mmap (leave to the page cache), warm (pre-fault the mapping),
    /// anon (copy into anonymous memory read with O_DIRECT), ahwb (Android only)
    #[arg(long = "dense-weights", default_value = "mmap", value_name = "MODE")]
    pub dense_weights: String,
    /// Per-token metrics CSV (`# bmoe_metrics v2`), flushed per row
    #[arg(long = "csv", value_name = "PATH")]
    pub csv: Option<PathBuf>,
    /// Route trace (`# route_trace v1`): one row per routed expert, flushed per decode
    /// (a diagnostic: it slows the run; needs --moe-stream)
    #[arg(long = "route-trace", value_name = "PATH")]
    pub route_trace: Option<PathBuf>,
    /// Io trace (`# io_trace v1`): one row per expert read, flushed per decode (needs --moe-stream)
    #[arg(long = "io-trace", value_name = "PATH")]
    pub io_trace: Option<PathBuf>,
    /// Compute trace (`# compute_trace v1`): one row per graph node, each node isolated (a
    /// diagnostic: it serialises the graph; works without --moe-stream)
    #[arg(
        long = "compute-trace",
        value_name = "PATH",
        conflicts_with = "compute_trace_layers"
    )]
    pub compute_trace: Option<PathBuf>,
    /// Compute trace at layer granularity: one row per segment (pre, blk.<il>, post)
    #[arg(long = "compute-trace-layers", value_name = "PATH")]
    pub compute_trace_layers: Option<PathBuf>,
    /// Render the prompt with the model's own chat template (tokenizer.chat_template)
    #[arg(long = "chatml")]
    pub chatml: bool,
    /// With --chatml: ask the template not to think (enable_thinking=false)
    #[arg(long = "no-think")]
    pub no_think: bool,
    /// Keep the model loaded and serve JSON requests from stdin, one per line (generate,
    /// decide, cancel, close); -p is ignored. See docs/session.md
    #[arg(long = "session")]
    pub session: bool,
    /// With --session: accept `decide` requests (score choices by first-token log-probability)
    #[arg(long = "decide")]
    pub decide: bool,
    /// Parallel expert reads (1-8)
    #[arg(long = "io-threads", default_value_t = 4, value_name = "N")]
    pub io_threads: i64,
    /// Read experts through the page cache instead of O_DIRECT
    #[arg(long = "no-odirect")]
    pub no_odirect: bool,
    /// Print the version and exit
    #[arg(long = "version")]
    pub version: bool,
    /// List the MoE architectures --moe-stream supports and exit
    #[arg(long = "list-archs")]
    pub list_archs: bool,
    /// Benchmark input: feed seeded pseudo-random tokens instead of the sampled ones
    #[arg(long = "feed-random", value_name = "SEED")]
    pub feed_random: Option<u64>,
    /// Print a hash of every step's logits to stderr (identity gates)
    #[arg(long = "dump-logits-hash", hide = true)]
    pub dump_logits_hash: bool,
    /// Test only: poison expert slices after each load (routed|unrouted)
    #[arg(long = "test-poison", hide = true, value_name = "WHICH")]
    pub test_poison: Option<String>,
    /// Test only: prefill the prompt in several decodes, split at these positions (comma list),
    /// to reproduce the batches a session's KV was built from
    #[arg(
        long = "test-prefill-split",
        hide = true,
        value_name = "POS,...",
        value_delimiter = ','
    )]
    pub test_prefill_split: Vec<usize>,
    /// Test only: every turn generates the tokens of this text first (special tokens parsed), in
    /// place of the picked ones — the decodes still run — to drive the chat parsers with a known
    /// sequence
    #[arg(long = "test-force-text", hide = true, value_name = "TEXT")]
    pub test_force_text: Option<String>,
    /// With --decide: the largest kept prefix state in MiB; a larger one is not kept and the next
    /// decide prefills in full (0 = never keep one) [default: 512]
    #[arg(long = "decide-state-max-mib", value_name = "MIB")]
    pub decide_state_max_mib: Option<u64>,
}

/// A flag error: what is wrong, which flag, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// What is wrong (names the flag).
    pub message: String,
    /// What to do.
    pub hint: String,
}

fn err(message: impl Into<String>, hint: impl Into<String>) -> ConfigError {
    ConfigError {
        message: message.into(),
        hint: hint.into(),
    }
}

/// `--cache-mb auto` bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheAuto {
    /// MiB to leave free (`None` = scaled, see [`crate::memory::autocache`]).
    pub floor_mb: Option<u64>,
    /// Cap in MiB (0 = none).
    pub ceil_mb: u64,
}

/// `--dense-weights`: where the non-expert weights live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DenseWeights {
    /// The model's mmap, left to the page cache.
    #[default]
    Mmap,
    /// The mmap, pre-faulted by one sequential read at load.
    Warm,
    /// Anonymous memory filled with O_DIRECT reads (page-cache pressure cannot drop it).
    Anon,
}

impl DenseWeights {
    /// The flag / CSV spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DenseWeights::Mmap => "mmap",
            DenseWeights::Warm => "warm",
            DenseWeights::Anon => "anon",
        }
    }
}

/// Streaming settings as resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// Cache budget in MiB (0 = off); under `auto` the value sized at load replaces it.
    pub cache_mb: u64,
    /// `--cache-mb auto`, when given.
    pub auto: Option<CacheAuto>,
    /// `--load-all`: read every expert on every layer load.
    pub load_all: bool,
    /// I/O lanes.
    pub io_threads: usize,
    /// O_DIRECT requested.
    pub o_direct: bool,
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

/// Test-only poisoning.
pub use crate::stream::Poison;

/// The validated, resolved configuration of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Model path (first shard).
    pub model: PathBuf,
    /// Prompt.
    pub prompt: String,
    /// Tokens to generate.
    pub n_predict: usize,
    /// Compute threads (the maximum, with `adaptive_threads`).
    pub threads: usize,
    /// Choose each generated token's thread count by measurement (`--adaptive-threads`).
    pub adaptive_threads: bool,
    /// Context size.
    pub n_ctx: u32,
    /// Logical batch (= n_ctx: one-batch prefill).
    pub n_batch: u32,
    /// Physical batch (resolved: never 0).
    pub n_ubatch: u32,
    /// Routing top-k override.
    pub n_expert_used: Option<u32>,
    /// Sampling.
    pub sampling: Sampling,
    /// Per-token protocol lines.
    pub progress: bool,
    /// Streaming, when on.
    pub stream: Option<StreamConfig>,
    /// Feed seeded pseudo-random tokens (benchmarks).
    pub feed_random: Option<u64>,
    /// Never pick an end-of-generation token (`--ignore-eos`).
    pub ignore_eos: bool,
    /// Print per-step logits hashes.
    pub dump_logits_hash: bool,
    /// Test poisoning.
    pub poison: Option<Poison>,
    /// `--csv` path.
    pub csv: Option<PathBuf>,
    /// `--route-trace` path.
    pub route_trace: Option<PathBuf>,
    /// `--io-trace` path.
    pub io_trace: Option<PathBuf>,
    /// `--compute-trace` / `--compute-trace-layers`: path and granularity.
    pub compute_trace: Option<(PathBuf, crate::sinks::compute_trace::Granularity)>,
    /// `--chatml`.
    pub chatml: bool,
    /// Thinking allowed (`--no-think` clears it).
    pub think: bool,
    /// `--dense-weights` (takes effect with `--moe-stream`).
    pub dense_weights: DenseWeights,
    /// `--session`: serve stdin requests instead of one run.
    pub session: bool,
    /// `--decide`: accept `decide` requests (session only).
    pub decide: bool,
    /// Test only: extra prefill decode boundaries (absolute positions).
    pub prefill_split: Vec<usize>,
    /// Test only: text whose tokens every turn generates first (`--test-force-text`).
    pub force_text: Option<String>,
    /// `--decide-state-max-mib`: the largest decide prefix state kept, in MiB (0 = none).
    pub decide_state_max_mib: u64,
}

impl Cli {
    /// Validates the flags (first failure wins, in the order of engine spec §1.5) and resolves
    /// them into a [`RunConfig`].
    pub fn resolve(&self) -> Result<RunConfig, ConfigError> {
        let model = self.model.clone().ok_or_else(|| {
            err(
                "no model given (-m/--model)",
                "pass a GGUF file: bmoe-cli -m model.gguf -p \"hello\"",
            )
        })?;
        if model.as_os_str().is_empty() {
            return Err(err("-m/--model is empty", "pass the path of a GGUF file"));
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
            return Err(err(
                format!("--ubatch must be >= 0 (got {})", self.ubatch),
                "0 means 'the whole batch'",
            ));
        }
        if self.ubatch > self.ctx_size {
            return Err(err(
                format!(
                    "--ubatch={} exceeds -c/--ctx-size={}",
                    self.ubatch, self.ctx_size
                ),
                "a physical batch cannot be larger than the context; lower --ubatch or raise -c",
            ));
        }
        if self.n_expert_used < 0 {
            return Err(err(
                format!("--n-expert-used must be >= 0 (got {})", self.n_expert_used),
                "0 keeps the model's own top-k",
            ));
        }
        let sampling = if self.temp > 0.0 {
            if self.top_k < 0 {
                return Err(err(
                    format!("--top-k must be >= 0 (got {})", self.top_k),
                    "0 disables top-k",
                ));
            }
            if !(self.top_p > 0.0 && self.top_p <= 1.0) {
                return Err(err(
                    format!("--top-p must be in (0, 1] (got {})", self.top_p),
                    "1.0 disables top-p",
                ));
            }
            // never u32::MAX (the flag's range excludes it): the run names its seed
            let seed = self.seed.unwrap_or_else(random_seed);
            Sampling::Sample {
                temp: self.temp,
                top_k: i32::try_from(self.top_k).unwrap_or(i32::MAX),
                top_p: self.top_p,
                seed,
            }
        } else if self.temp.is_nan() {
            return Err(err(
                "--temp is NaN",
                "use 0 for greedy decoding or a positive temperature",
            ));
        } else {
            Sampling::Greedy
        };
        let stream = if self.moe_stream {
            if !(1..=8).contains(&self.io_threads) {
                return Err(err(
                    format!("--io-threads must be in 1..=8 (got {})", self.io_threads),
                    "4 lanes saturate most flash; 1 reads serially",
                ));
            }
            let (cache_mb, auto) = match self.cache_mb.trim() {
                "auto" => {
                    for (flag, v) in [
                        ("--cache-floor-mb", self.cache_floor_mb.unwrap_or(0)),
                        ("--cache-ceil-mb", self.cache_ceil_mb),
                    ] {
                        if v < 0 {
                            return Err(err(
                                format!("{flag} must be >= 0 (got {v})"),
                                "a size in MiB; --cache-ceil-mb 0 means no cap",
                            ));
                        }
                    }
                    (
                        0,
                        Some(CacheAuto {
                            floor_mb: self.cache_floor_mb.map(|f| f as u64),
                            ceil_mb: self.cache_ceil_mb as u64,
                        }),
                    )
                }
                text => match text.parse::<i64>() {
                    Ok(mb) if mb >= 0 => (mb as u64, None),
                    Ok(mb) => {
                        return Err(err(
                            format!("--cache-mb must be >= 0 (got {mb})"),
                            "0 turns the cache off",
                        ));
                    }
                    Err(_) => {
                        return Err(err(
                            format!("--cache-mb expects a number of MiB or 'auto', got '{text}'"),
                            "e.g. --cache-mb 2048, or --cache-mb auto to size it from free memory",
                        ));
                    }
                },
            };
            Some(StreamConfig {
                cache_mb,
                auto,
                load_all: self.load_all,
                io_threads: self.io_threads as usize,
                o_direct: !self.no_odirect,
            })
        } else {
            None
        };
        let poison = match self.test_poison.as_deref() {
            None => None,
            Some("routed") => Some(Poison::Routed),
            Some("unrouted") => Some(Poison::Unrouted),
            Some(other) => {
                return Err(err(
                    format!("--test-poison expects routed|unrouted, got '{other}'"),
                    "a test-only flag",
                ));
            }
        };
        let dense_weights = match self.dense_weights.as_str() {
            "mmap" => DenseWeights::Mmap,
            "warm" => DenseWeights::Warm,
            "anon" => DenseWeights::Anon,
            "ahwb" => {
                return Err(err(
                    "--dense-weights ahwb needs reclaim-exempt memory, which this platform does not provide (Android only)",
                    "use --dense-weights anon for the same effect on Linux",
                ));
            }
            other => {
                return Err(err(
                    format!("--dense-weights expects mmap|warm|anon|ahwb, got '{other}'"),
                    "mmap leaves dense weights to the page cache; anon pins them in anonymous memory",
                ));
            }
        };
        if self.load_all && !self.moe_stream {
            return Err(err(
                "--load-all requires --moe-stream",
                "--load-all reads every expert through the streamer; add --moe-stream",
            ));
        }
        if self.no_think && !self.chatml {
            return Err(err(
                "--no-think requires --chatml",
                "thinking is a chat-template switch; add --chatml",
            ));
        }
        if self.decide && !self.session {
            return Err(err(
                "--decide requires --session",
                "decide requests arrive on stdin in session mode; add --session",
            ));
        }
        if self.decide_state_max_mib.is_some() && !self.decide {
            return Err(err(
                "--decide-state-max-mib requires --decide",
                "it caps the prefix state decide requests keep; add --session --decide",
            ));
        }
        if poison.is_some() && stream.is_none() {
            return Err(err(
                "--test-poison requires --moe-stream",
                "poisoning acts on streamed expert memory",
            ));
        }
        let n_ctx = self.ctx_size as u32;
        Ok(RunConfig {
            model,
            prompt: self.prompt.clone(),
            n_predict: self.n_predict as usize,
            threads: self.threads as usize,
            adaptive_threads: self.adaptive_threads,
            n_ctx,
            n_batch: n_ctx,
            n_ubatch: if self.ubatch > 0 {
                self.ubatch as u32
            } else {
                n_ctx
            },
            n_expert_used: (self.n_expert_used > 0).then_some(self.n_expert_used as u32),
            sampling,
            progress: self.progress,
            stream,
            feed_random: self.feed_random,
            ignore_eos: self.ignore_eos,
            dump_logits_hash: self.dump_logits_hash,
            poison,
            csv: self.csv.clone(),
            route_trace: self.route_trace.clone(),
            io_trace: self.io_trace.clone(),
            compute_trace: match (&self.compute_trace, &self.compute_trace_layers) {
                (Some(p), _) => Some((p.clone(), crate::sinks::compute_trace::Granularity::Node)),
                (None, Some(p)) => {
                    Some((p.clone(), crate::sinks::compute_trace::Granularity::Layer))
                }
                (None, None) => None,
            },
            chatml: self.chatml,
            think: !self.no_think,
            dense_weights,
            session: self.session,
            decide: self.decide,
            prefill_split: self.test_prefill_split.clone(),
            force_text: self.test_force_text.clone(),
            decide_state_max_mib: self
                .decide_state_max_mib
                .unwrap_or(DEFAULT_DECIDE_STATE_MAX_MIB),
        })
    }
}

/// The original's default of 4 compute threads, capped at the CPUs this process may use: more
/// threads than cores makes every ggml barrier wait for a descheduled thread.
pub fn default_threads() -> i64 {
    let cpus = std::thread::available_parallelism().map_or(4, usize::from);
    cpus.clamp(1, 4) as i64
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

fn positive(flag: &str, v: i64, hint: &str) -> Result<(), ConfigError> {
    if v > 0 {
        Ok(())
    } else {
        Err(err(format!("{flag} must be > 0 (got {v})"), hint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<RunConfig, ConfigError> {
        let mut v = vec!["bmoe-cli"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).expect("clap parse").resolve()
    }

    #[test]
    fn defaults_resolve() {
        let c = parse(&["-m", "x.gguf"]).unwrap();
        assert_eq!(c.n_predict, 128);
        assert_eq!(c.threads as i64, default_threads());
        assert!((1..=4).contains(&c.threads));
        assert_eq!((c.n_ctx, c.n_batch, c.n_ubatch), (2048, 2048, 2048));
        assert_eq!(c.sampling, Sampling::Greedy);
        assert_eq!(c.stream, None);
        assert_eq!(c.prompt, DEFAULT_PROMPT);
        let s = parse(&[
            "-m",
            "x.gguf",
            "--moe-stream",
            "--cache-mb",
            "2",
            "--io-threads",
            "1",
            "--no-odirect",
            "--ubatch",
            "64",
        ])
        .unwrap();
        assert_eq!(
            s.stream,
            Some(StreamConfig {
                cache_mb: 2,
                auto: None,
                load_all: false,
                io_threads: 1,
                o_direct: false
            })
        );
        assert_eq!(s.n_ubatch, 64);
    }

    #[test]
    fn errors_name_the_flag_in_spec_order() {
        let e = |a: &[&str]| parse(a).unwrap_err().message;
        assert!(e(&[]).contains("-m/--model"));
        assert!(e(&["-m", "x", "-n", "0", "-t", "0"]).contains("-n/--n-predict"));
        assert!(e(&["-m", "x", "-t", "-1"]).contains("-t/--threads"));
        assert!(e(&["-m", "x", "-c", "0"]).contains("-c/--ctx-size"));
        assert!(e(&["-m", "x", "--ubatch", "-1"]).contains("--ubatch"));
        assert_eq!(
            e(&["-m", "x", "-c", "64", "--ubatch", "65"]),
            "--ubatch=65 exceeds -c/--ctx-size=64"
        );
        assert!(e(&["-m", "x", "--n-expert-used", "-2"]).contains("--n-expert-used"));
        assert!(e(&["-m", "x", "--temp", "0.5", "--top-k", "-1"]).contains("--top-k"));
        assert!(e(&["-m", "x", "--temp", "0.5", "--top-p", "0"]).contains("--top-p"));
        assert!(e(&["-m", "x", "--temp", "0.5", "--top-p", "1.5"]).contains("--top-p"));
        assert!(e(&["-m", "x", "--moe-stream", "--io-threads", "9"]).contains("--io-threads"));
        assert!(e(&["-m", "x", "--moe-stream", "--io-threads", "0"]).contains("--io-threads"));
        assert!(e(&["-m", "x", "--moe-stream", "--cache-mb", "-1"]).contains("--cache-mb"));
        assert!(e(&["-m", "x", "--test-poison", "routed"]).contains("--moe-stream"));
        assert!(e(&["-m", "x", "--moe-stream", "--cache-mb", "lots"]).contains("'auto'"));
        assert!(
            e(&[
                "-m",
                "x",
                "--moe-stream",
                "--cache-mb",
                "auto",
                "--cache-floor-mb",
                "-1"
            ])
            .contains("--cache-floor-mb")
        );
        assert!(e(&["-m", "x", "--dense-weights", "ahwb"]).contains("Android only"));
        assert!(e(&["-m", "x", "--dense-weights", "zram"]).contains("mmap|warm|anon|ahwb"));
        assert!(e(&["-m", "x", "--load-all"]).contains("--moe-stream"));
        assert!(e(&["-m", "x", "--no-think"]).contains("--chatml"));
        assert!(e(&["-m", "x", "--decide"]).contains("--session"));
        assert!(e(&["-m", "x", "--decide-state-max-mib", "4"]).contains("--decide"));
        assert!(e(&["-m", "x", "--session", "--decide-state-max-mib", "4"]).contains("--decide"));
    }

    #[test]
    fn sampling_seed_is_resolved_never_left_to_llama_cpp() {
        let seed = |extra: &[&str]| {
            let mut a = vec!["-m", "x", "--temp", "0.8"];
            a.extend_from_slice(extra);
            match parse(&a).unwrap().sampling {
                Sampling::Sample { seed, .. } => seed,
                Sampling::Greedy => panic!("--temp 0.8 samples"),
            }
        };
        assert_eq!(seed(&["--seed", "42"]), 42);
        assert_eq!(seed(&["--seed", "0"]), 0);
        // no --seed: a concrete seed is drawn (never llama.cpp's "random" sentinel), and two
        // draws differ (a fixed fallback would make every "random" run the same)
        let draws: Vec<u32> = (0..4).map(|_| seed(&[])).collect();
        assert!(draws.iter().all(|&s| s != u32::MAX), "{draws:?}");
        assert!(draws.windows(2).any(|w| w[0] != w[1]), "{draws:?}");
        // llama.cpp's "random" value is refused at the flag
        let e = Cli::try_parse_from(["bmoe-cli", "-m", "x", "--seed", "4294967295"]).unwrap_err();
        assert!(e.to_string().contains("0..=4294967294"), "{e}");
    }

    #[test]
    fn help_states_one_default_per_flag() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for flag in ["--seed <N>", "--threads <N>"] {
            let at = help.find(flag).expect("flag in --help");
            let end = help[at..].find("\n\n").map_or(help.len(), |e| at + e);
            let text = &help[at..end];
            assert_eq!(text.matches("default").count(), 1, "{text}");
        }
    }

    #[test]
    fn decide_state_cap_resolves() {
        let d = |extra: &[&str]| {
            let mut a = vec!["-m", "x", "--session", "--decide"];
            a.extend_from_slice(extra);
            parse(&a).unwrap().decide_state_max_mib
        };
        assert_eq!(d(&[]), DEFAULT_DECIDE_STATE_MAX_MIB);
        assert_eq!(d(&["--decide-state-max-mib", "0"]), 0);
        assert_eq!(d(&["--decide-state-max-mib", "64"]), 64);
    }

    #[test]
    fn memory_policy_flags_resolve() {
        let c = parse(&[
            "-m",
            "x",
            "--moe-stream",
            "--cache-mb",
            "auto",
            "--cache-floor-mb",
            "64",
            "--cache-ceil-mb",
            "512",
            "--dense-weights",
            "anon",
            "--load-all",
            "--csv",
            "m.csv",
            "--chatml",
            "--no-think",
        ])
        .unwrap();
        let s = c.stream.unwrap();
        assert_eq!(
            s.auto,
            Some(CacheAuto {
                floor_mb: Some(64),
                ceil_mb: 512
            })
        );
        assert!(s.load_all);
        assert_eq!(c.dense_weights, DenseWeights::Anon);
        assert_eq!(c.csv, Some(PathBuf::from("m.csv")));
        assert!(c.chatml && !c.think);
    }

    #[test]
    fn inert_flags_are_not_rejected_without_streaming() {
        // as in the original: streaming knobs are simply inert without --moe-stream
        assert!(parse(&["-m", "x", "--io-threads", "99", "--cache-mb", "-5"]).is_ok());
        // sampling knobs are only checked when sampling
        assert!(parse(&["-m", "x", "--top-p", "7"]).is_ok());
    }

    #[test]
    fn every_error_has_a_hint() {
        for args in [
            &["-m", "x", "-n", "0"][..],
            &["-m", "x", "--moe-stream", "--io-threads", "9"],
        ] {
            assert!(!parse(args).unwrap_err().hint.is_empty());
        }
    }
}
