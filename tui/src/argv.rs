//! Run facts read off the command line of a spawned engine, so the panel reads the flash term
//! and the thread counts right from the first token instead of waiting for the `mode:` line.

use bmoe_telemetry::cli_flags::{self, FlagValue};

use crate::model::RunConfig;

/// Facts stated by a `bmoe-cli` argv, read with bmoe-telemetry's flag table
/// ([`cli_flags::CLI_FLAGS`]). Unknown flags are ignored; nothing here is validated (the engine
/// does that and says so on stderr).
pub fn facts(argv: &[String]) -> RunConfig {
    let mut c = RunConfig::default();
    let mut it = argv.iter().skip(1).peekable();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (a.as_str(), None),
        };
        let Some(spec) = cli_flags::lookup(flag) else {
            continue;
        };
        match spec.value {
            FlagValue::Argument => {
                if let Some(v) = inline.map(str::to_string).or_else(|| it.next().cloned()) {
                    c.set(spec.key, v);
                }
            }
            FlagValue::Fixed(v) => {
                c.set(spec.key, v);
                // The argument is not recorded, so a trace flag missing its path must not
                // swallow the flag that follows it.
                if spec.takes_value
                    && inline.is_none()
                    && it.peek().is_some_and(|n| !n.starts_with('-'))
                {
                    it.next();
                }
            }
        }
    }
    if c.get("moe_stream").is_none() && argv.len() > 1 && is_engine(argv) {
        // bmoe-cli streams only with --moe-stream: without it the run is the mmap baseline.
        c.set("moe_stream", "0");
    }
    if c.get("moe_stream") == Some("1") && c.get("overlap").is_none() {
        c.set("overlap", "0");
    }
    c
}

/// Whether the command runs bmoe's own engine (`bmoe-cli`, by path or name), whose flags this
/// panel knows.
pub fn is_engine(argv: &[String]) -> bool {
    argv.first()
        .and_then(|p| p.rsplit('/').next())
        .is_some_and(|n| n.starts_with("bmoe-cli"))
}

/// The engine command with `--progress` added when it is `bmoe-cli` run one-shot without it:
/// without the flag the engine prints no per-token lines, and the panel would have only the
/// end-of-run summary to show. `None` when nothing needs adding (it has the flag, it is a
/// session, or it is some other program, whose flags are not ours to change).
pub fn with_progress(argv: &[String]) -> Option<Vec<String>> {
    if !is_engine(argv) || argv.iter().any(|a| a == "--progress" || a == "--session") {
        return None;
    }
    let mut out = argv.to_vec();
    // Right after the program: before any `--` that would make the rest positional.
    out.insert(1, "--progress".to_string());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn reads_threads_lanes_overlap_and_benchmark_spoilers() {
        let c = facts(&v(
            "bmoe-cli -m /m/q.gguf -t 4 --io-threads=8 --moe-stream --overlap --temp 0.7 --compute-trace ct.csv -p hi --progress",
        ));
        assert_eq!(c.threads(), Some(4));
        assert_eq!(c.io_threads(), Some(8));
        assert_eq!(c.overlap(), Some(true));
        assert_eq!(c.streaming(), Some(true));
        assert_eq!(c.get("model"), Some("/m/q.gguf"));
        assert_eq!(c.not_benchmark_reasons(), vec!["traced", "stochastic"]);
    }

    #[test]
    fn progress_is_added_to_a_one_shot_engine_only() {
        assert_eq!(
            with_progress(&v("/opt/bmoe/bmoe-cli -p hi -n 8 --moe-stream")),
            Some(v("/opt/bmoe/bmoe-cli --progress -p hi -n 8 --moe-stream"))
        );
        assert_eq!(with_progress(&v("bmoe-cli -p hi --progress")), None);
        assert_eq!(with_progress(&v("bmoe-cli --session --moe-stream")), None);
        assert_eq!(with_progress(&v("sh engine.sh")), None);
        assert_eq!(with_progress(&[]), None);
    }

    #[test]
    fn serial_streaming_and_baseline() {
        let c = facts(&v("bmoe-cli --moe-stream -t 2"));
        assert_eq!(c.overlap(), Some(false));
        let c = facts(&v("/usr/bin/bmoe-cli -m x.gguf"));
        assert_eq!(c.streaming(), Some(false));
        let c = facts(&v("sh -c whatever"));
        assert_eq!(c.streaming(), None);
        assert_eq!(c.overlap(), None);
    }
}
