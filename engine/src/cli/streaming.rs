//! Expert streaming: `--moe-stream`, the cache budget (a size or `auto` with its bounds), the
//! read lanes and O_DIRECT, and the `--load-all` baseline.

use super::error::ConfigError;
use crate::stream::OverlapRequest;
use clap::Args;

/// Streaming flags.
#[derive(Debug, Clone, Args)]
pub struct StreamArgs {
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
    /// Parallel expert reads (1-8)
    #[arg(long = "io-threads", default_value_t = 4, value_name = "N")]
    pub io_threads: i64,
    /// Read experts through the page cache instead of O_DIRECT
    #[arg(long = "no-odirect")]
    pub no_odirect: bool,
    /// Overlap each layer's flash reads with its matmuls: compute threads wait page by page
    /// (userfaultfd), or at each projection where userfaultfd is refused (needs --moe-stream)
    #[arg(long = "overlap")]
    pub overlap: bool,
    /// With --overlap: how compute waits for reads — uffd (page by page, through userfaultfd) or
    /// staged (at each projection's matmul; no userfaultfd needed) [default: uffd]
    #[arg(long = "overlap-kind", value_name = "uffd|staged")]
    pub overlap_kind: Option<String>,
    /// Temporal prefetch: after each layer's load, read ahead the experts the previous token
    /// routed at the next K layers into the cache's cold end (0 = off; needs --moe-stream and a
    /// cache; serially the reads run on the eval thread after the real ones, with --overlap the
    /// lanes take them when no real read waits)
    #[arg(long = "prefetch", default_value_t = 0, value_name = "K")]
    pub prefetch: i64,
    /// Diagnostic: drain the speculative reads on the eval thread (needs --prefetch;
    /// marks the run instrumented)
    #[arg(long = "prefetch-sync")]
    pub prefetch_sync: bool,
}

/// `--cache-mb auto` bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheAuto {
    /// MiB to leave free (`None` = scaled, see `memory::autocache`).
    pub floor_mb: Option<u64>,
    /// Cap in MiB (0 = none).
    pub ceil_mb: u64,
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
    /// `--overlap` (and whether the staged fallback is forced).
    pub overlap: Option<OverlapRequest>,
    /// `--prefetch K` (0 = off).
    pub prefetch: usize,
    /// `--prefetch-sync`.
    pub prefetch_sync: bool,
}

impl StreamArgs {
    /// `None` without `--moe-stream` (or `auto`: `--auto`, which decides it later). Every knob's
    /// value is checked either way: a wrong value is wrong even where it would have no effect
    /// ([`StreamArgs::inert`] says so). `auto_cache`: size the cache as `--cache-mb auto` does.
    pub(super) fn resolve(
        &self,
        auto: bool,
        auto_cache: bool,
    ) -> Result<Option<StreamConfig>, ConfigError> {
        let streaming = self.moe_stream || auto;
        let staged = match self.overlap_kind.as_deref() {
            None | Some("uffd") => false,
            Some("staged") => true,
            Some(other) => {
                return Err(ConfigError::new(
                    "--overlap-kind",
                    format!("--overlap-kind expects uffd|staged, got '{other}'"),
                    "uffd waits page by page through userfaultfd; staged waits at each projection",
                ));
            }
        };
        if self.overlap_kind.is_some() && !self.overlap {
            return Err(ConfigError::new(
                "--overlap-kind",
                "--overlap-kind requires --overlap",
                "add --overlap, or drop --overlap-kind",
            ));
        }
        if self.overlap && !streaming {
            return Err(ConfigError::new(
                "--overlap",
                "--overlap requires --moe-stream",
                "overlap hides the streamed experts' reads behind compute; add --moe-stream",
            ));
        }
        if !(1..=8).contains(&self.io_threads) {
            return Err(ConfigError::new(
                "--io-threads",
                format!("--io-threads must be in 1..=8 (got {})", self.io_threads),
                "4 lanes saturate most flash; 1 reads serially",
            ));
        }
        let (mut cache_mb, mut auto) = self.cache()?;
        if auto_cache {
            (cache_mb, auto) = (
                0,
                Some(CacheAuto {
                    floor_mb: self.cache_floor_mb.map(|f| f as u64),
                    ceil_mb: self.cache_ceil_mb as u64,
                }),
            );
        }
        self.check_prefetch(cache_mb, auto.is_some(), streaming)?;
        if !streaming {
            return Ok(None);
        }
        Ok(Some(StreamConfig {
            cache_mb,
            auto,
            load_all: self.load_all,
            io_threads: self.io_threads as usize,
            o_direct: !self.no_odirect,
            overlap: self.overlap.then_some(OverlapRequest {
                force_staged: staged,
            }),
            prefetch: self.prefetch as usize,
            prefetch_sync: self.prefetch_sync,
        }))
    }

    /// `--prefetch K` / `--prefetch-sync` prerequisites: streaming and a cache for the guesses to
    /// land in (serial or `--overlap`).
    fn check_prefetch(
        &self,
        cache_mb: u64,
        auto: bool,
        streaming: bool,
    ) -> Result<(), ConfigError> {
        if !(0..=64).contains(&self.prefetch) {
            return Err(ConfigError::new(
                "--prefetch",
                format!("--prefetch must be in 0..=64 (got {})", self.prefetch),
                "K is how many layers ahead to read; 1 or 2 is typical, 0 turns it off",
            ));
        }
        if self.prefetch_sync && self.prefetch == 0 {
            return Err(ConfigError::new(
                "--prefetch-sync",
                "--prefetch-sync requires --prefetch K (K >= 1)",
                "add --prefetch 1, or drop --prefetch-sync",
            ));
        }
        if self.prefetch == 0 {
            return Ok(());
        }
        if !streaming {
            return Err(ConfigError::new(
                "--prefetch",
                "--prefetch requires --moe-stream",
                "speculative reads fill the streamed experts' cache; add --moe-stream",
            ));
        }
        if cache_mb == 0 && !auto {
            return Err(ConfigError::new(
                "--prefetch",
                "--prefetch requires an expert cache (--cache-mb > 0 or auto)",
                "a read-ahead expert waits in the cache for its routing; add --cache-mb 256",
            ));
        }
        Ok(())
    }

    /// The streaming flags among `given` (clap ids) that have no effect: every one of them
    /// when not `streaming`, the `auto` bounds unless the cache is `auto` (typed, or
    /// `auto_cache`: `--auto`'s).
    pub(super) fn inert(
        &self,
        given: &dyn Fn(&str) -> bool,
        streaming: bool,
        auto_cache: bool,
    ) -> Vec<String> {
        let knobs = [
            ("cache_mb", "--cache-mb"),
            ("cache_floor_mb", "--cache-floor-mb"),
            ("cache_ceil_mb", "--cache-ceil-mb"),
            ("io_threads", "--io-threads"),
            ("no_odirect", "--no-odirect"),
        ];
        let given_knobs = knobs.into_iter().filter(|(id, _)| given(id));
        if !streaming {
            return given_knobs
                .map(|(_, flag)| {
                    format!("{flag} has no effect without --moe-stream (plain llama.cpp reads no experts) — add --moe-stream to stream them")
                })
                .collect();
        }
        if auto_cache || self.cache_mb.trim() == "auto" {
            return Vec::new();
        }
        given_knobs
            .filter(|(id, _)| id.starts_with("cache_") && *id != "cache_mb")
            .map(|(_, flag)| {
                format!("{flag} has no effect without --cache-mb auto (it bounds the size auto picks) — use --cache-mb auto, or drop it")
            })
            .collect()
    }

    /// `--cache-mb`: a size in MiB, or `auto` with its bounds (checked whether or not `auto`
    /// uses them).
    fn cache(&self) -> Result<(u64, Option<CacheAuto>), ConfigError> {
        let size = match self.cache_mb.trim() {
            "auto" => None,
            text => match text.parse::<i64>() {
                Ok(mb) if mb >= 0 => Some(mb as u64),
                Ok(mb) => {
                    return Err(ConfigError::new(
                        "--cache-mb",
                        format!("--cache-mb must be >= 0 (got {mb})"),
                        "0 turns the cache off",
                    ));
                }
                Err(_) => {
                    return Err(ConfigError::new(
                        "--cache-mb",
                        format!("--cache-mb expects a number of MiB or 'auto', got '{text}'"),
                        "e.g. --cache-mb 2048, or --cache-mb auto to size it from free memory",
                    ));
                }
            },
        };
        for (flag, v) in [
            ("--cache-floor-mb", self.cache_floor_mb.unwrap_or(0)),
            ("--cache-ceil-mb", self.cache_ceil_mb),
        ] {
            if v < 0 {
                return Err(ConfigError::new(
                    flag,
                    format!("{flag} must be >= 0 (got {v})"),
                    "a size in MiB; --cache-ceil-mb 0 means no cap",
                ));
            }
        }
        Ok(match size {
            Some(mb) => (mb, None),
            None => (
                0,
                Some(CacheAuto {
                    floor_mb: self.cache_floor_mb.map(|f| f as u64),
                    ceil_mb: self.cache_ceil_mb as u64,
                }),
            ),
        })
    }
}
