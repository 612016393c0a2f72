//! The `bmoe-cli` flags that state run facts, and the run-configuration key each one sets.
//!
//! A tool that spawns `bmoe-cli` (`bmoe-top -- bmoe-cli …`) reads the run's facts off its argv,
//! so that the first token is already read with the right thread counts and flash term, long
//! before the engine's `mode:` line or CSV preamble says them. The facts are keyed as the
//! metrics CSV preamble keys them. This table is the one place where a flag's spelling meets its
//! key: `bmoe-top` parses an argv with it, and the engine's tests check every entry that is not
//! [`CliFlag::planned`] against `bmoe-cli`'s own flag definitions, so a renamed flag cannot
//! silently stop being read.
//!
//! Flags that state no fact the panel reads (`-p`, `-n`, `--csv`, …) are not listed: an argv
//! reader skips them.
//!
//! ```
//! use bmoe_telemetry::cli_flags::{lookup, FlagValue};
//! let t = lookup("-t").expect("listed");
//! assert_eq!((t.long, t.key, t.takes_value), ("threads", "threads", true));
//! assert_eq!(lookup("--threads"), Some(t));
//! let mtp = lookup("--mtp").expect("listed");
//! assert_eq!((mtp.key, mtp.value, mtp.planned), ("spec", FlagValue::Fixed("mtp"), false));
//! assert_eq!(lookup("--prompt"), None);
//! ```

/// What a flag puts under its [`CliFlag::key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagValue {
    /// The flag's argument, as given: `-t 4` and `--threads=4` set `threads=4`.
    Argument,
    /// This value, whatever argument the flag takes: `--overlap` sets `overlap=1`, `--mtp` sets
    /// `spec=mtp`, `--route-trace r.csv` sets `traced=1` (the path is no fact about the run).
    Fixed(&'static str),
}

/// One `bmoe-cli` flag that states a run fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CliFlag {
    /// The long spelling without its leading `--` (`threads` for `--threads`).
    pub long: &'static str,
    /// The one-letter spelling without its `-` (`t` for `-t`), if the flag has one.
    pub short: Option<char>,
    /// Whether the flag takes an argument (`-t 4`, `--route-trace PATH`); a switch does not.
    pub takes_value: bool,
    /// The key it sets: the metrics CSV preamble's key for the same fact, except `traced`,
    /// which the trace flags set for the panel's own "not a benchmark" check (the preamble names
    /// each trace: `route_trace=1`, `io_trace=1`, …).
    pub key: &'static str,
    /// What goes under [`Self::key`].
    pub value: FlagValue,
    /// Announced by the telemetry contract, not yet a bmoe-cli flag: readers accept it so that
    /// runs of the engine that adds it are read right, and the engine-side check of this table
    /// against bmoe-cli's flags skips it.
    pub planned: bool,
}

impl CliFlag {
    /// A flag whose argument is the fact (`-t N` → `threads=N`).
    const fn argument(long: &'static str, short: Option<char>, key: &'static str) -> CliFlag {
        CliFlag {
            long,
            short,
            takes_value: true,
            key,
            value: FlagValue::Argument,
            planned: false,
        }
    }

    /// A switch that sets `key` to `value` (`--moe-stream` → `moe_stream=1`).
    const fn switch(long: &'static str, key: &'static str, value: &'static str) -> CliFlag {
        CliFlag {
            long,
            short: None,
            takes_value: false,
            key,
            value: FlagValue::Fixed(value),
            planned: false,
        }
    }

    /// A trace flag: it takes the trace's path, and the fact is only that the run was traced.
    const fn trace(long: &'static str) -> CliFlag {
        CliFlag {
            long,
            short: None,
            takes_value: true,
            key: "traced",
            value: FlagValue::Fixed("1"),
            planned: false,
        }
    }

    /// The same entry marked [`Self::planned`].
    // every announced flag exists in bmoe-cli today; kept for the next one the contract names
    // before the engine has it
    #[allow(dead_code)]
    const fn announced(self) -> CliFlag {
        CliFlag {
            planned: true,
            ..self
        }
    }
}

/// Every `bmoe-cli` flag whose run fact a spawning tool reads, with the key it sets.
pub const CLI_FLAGS: &[CliFlag] = &[
    CliFlag::argument("model", Some('m'), "model"),
    CliFlag::argument("threads", Some('t'), "threads"),
    CliFlag::argument("io-threads", None, "io_threads"),
    CliFlag::argument("cache-mb", None, "cache_mb"),
    CliFlag::argument("dense-weights", None, "dense_weights"),
    CliFlag::argument("drop-cold-experts", None, "drop_cold_frac"),
    CliFlag::switch("drop-no-renorm", "drop_renorm", "0"),
    CliFlag::switch("drop-in-prefill", "drop_prefill", "1"),
    CliFlag::argument("expert-substitute", None, "substitute_lambda"),
    CliFlag::argument("route-replay", None, "route_replay"),
    CliFlag::argument("prefetch", None, "prefetch"),
    CliFlag::argument("temp", None, "temp"),
    CliFlag::argument("n-expert-used", None, "n_expert_used"),
    CliFlag::switch("overlap", "overlap", "1"),
    CliFlag::argument("overlap-kind", None, "overlap_kind"),
    CliFlag::switch("moe-stream", "moe_stream", "1"),
    CliFlag::switch("mtp", "spec", "mtp"),
    CliFlag::switch("ngram", "spec", "ngram"),
    CliFlag::switch("predict-log", "predict_log", "1"),
    CliFlag::switch("predict-prefetch", "predict_prefetch", "1"),
    CliFlag::argument("predict-spec-max", None, "predict_spec_max"),
    CliFlag::argument("route-ahead", None, "route_ahead"),
    CliFlag::switch("prefetch-sync", "prefetch_sync", "1"),
    CliFlag::trace("compute-trace"),
    CliFlag::trace("compute-trace-layers"),
    CliFlag::trace("io-trace"),
    CliFlag::trace("route-trace"),
];

/// The entry an argv word names, spelled exactly `--long` or `-s` (no `=value`: split it off
/// first); `None` for any other word, including flags that state no run fact.
pub fn lookup(arg: &str) -> Option<&'static CliFlag> {
    if let Some(long) = arg.strip_prefix("--") {
        return CLI_FLAGS.iter().find(|f| f.long == long);
    }
    let mut letters = arg.strip_prefix('-')?.chars();
    match (letters.next(), letters.next()) {
        (Some(s), None) => CLI_FLAGS.iter().find(|f| f.short == Some(s)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn no_flag_is_listed_twice() {
        let mut longs = HashSet::new();
        let mut shorts = HashSet::new();
        for f in CLI_FLAGS {
            assert!(longs.insert(f.long), "--{} is listed twice", f.long);
            if let Some(s) = f.short {
                assert!(shorts.insert(s), "-{s} is listed twice");
            }
        }
    }

    #[test]
    fn spellings_are_bare_and_an_argument_value_needs_an_argument() {
        for f in CLI_FLAGS {
            assert!(
                !f.long.is_empty() && !f.long.starts_with('-') && !f.long.contains('='),
                "{f:?}"
            );
            assert!(f.short.is_none_or(|s| s.is_ascii_alphanumeric()), "{f:?}");
            assert!(!f.key.is_empty(), "{f:?}");
            if f.value == FlagValue::Argument {
                assert!(f.takes_value, "{f:?}");
            }
        }
    }

    #[test]
    fn lookup_takes_exact_spellings_only() {
        assert_eq!(lookup("-m").map(|f| f.key), Some("model"));
        assert_eq!(lookup("--model").map(|f| f.key), Some("model"));
        assert_eq!(lookup("--route-trace").map(|f| f.key), Some("traced"));
        for other in [
            "--",
            "-",
            "",
            "m",
            "-mx",
            "--m",
            "--model=x",
            "-model",
            "---model",
        ] {
            assert_eq!(lookup(other), None, "{other}");
        }
    }
}
