//! `--auto`: let the engine pick the lossless settings from measured facts (see `crate::auto`);
//! here, the flag and which of the settings it picks the command line gave itself.

use clap::Args;

/// The `--auto` flag.
#[derive(Debug, Clone, Args)]
pub struct AutoArgs {
    /// Pick the lossless settings from measured facts (streaming when the model is larger than
    /// the usable memory, the cache, dense policy, overlap, read lanes, threads); each choice and
    /// why is printed on stderr. Flags given explicitly win
    #[arg(long = "auto")]
    pub auto: bool,
}

/// The flags (clap ids) that need streaming: under `--auto`, giving one turns streaming on.
const NEED_STREAMING: [(&str, &str); 13] = [
    ("moe_stream", "--moe-stream"),
    ("load_all", "--load-all"),
    ("overlap", "--overlap"),
    ("overlap_kind", "--overlap-kind"),
    ("prefetch", "--prefetch"),
    ("row_stream", "--row-stream"),
    ("predict_log", "--predict-log"),
    ("predict_prefetch", "--predict-prefetch"),
    ("route_ahead", "--route-ahead"),
    ("drop_cold_experts", "--drop-cold-experts"),
    ("expert_substitute", "--expert-substitute"),
    ("route_replay", "--route-replay"),
    ("test_poison", "--test-poison"),
];

/// Which of `--auto`'s settings the command line gave (each wins over `--auto`'s pick): the
/// flag as typed, `None` when left to `--auto`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Given {
    /// A flag that needs streaming.
    pub stream: Option<&'static str>,
    /// `--cache-mb`.
    pub cache: Option<&'static str>,
    /// `--dense-weights`.
    pub dense: Option<&'static str>,
    /// `--overlap`.
    pub overlap: Option<&'static str>,
    /// `--io-threads`.
    pub lanes: Option<&'static str>,
    /// `-t` or `--adaptive-threads`.
    pub threads: Option<&'static str>,
}

impl super::Cli {
    /// Whether `--auto` was given.
    pub(crate) fn auto(&self) -> bool {
        self.auto.auto
    }

    /// Which of `--auto`'s settings the command line gave.
    pub(crate) fn auto_given(&self) -> Given {
        let one = |pairs: &[(&str, &'static str)]| {
            pairs
                .iter()
                .find(|(id, _)| self.given(id))
                .map(|(_, flag)| *flag)
        };
        Given {
            stream: one(&NEED_STREAMING),
            cache: one(&[("cache_mb", "--cache-mb")]),
            dense: one(&[("dense_weights", "--dense-weights")]),
            overlap: one(&[("overlap", "--overlap")]),
            lanes: one(&[("io_threads", "--io-threads")]),
            threads: one(&[
                ("threads", "-t/--threads"),
                ("adaptive_threads", "--adaptive-threads"),
            ]),
        }
    }
}
