//! Run facts read off the command line of a spawned engine, so the panel reads the flash term
//! and the thread counts right from the first token instead of waiting for the `mode:` line.

use crate::model::RunConfig;

/// Facts stated by a `bmoe-cli` argv. Unknown flags are ignored; nothing here is validated
/// (the engine does that and says so on stderr).
pub fn facts(argv: &[String]) -> RunConfig {
    let mut c = RunConfig::default();
    let mut it = argv.iter().skip(1).peekable();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |c: &mut RunConfig, key: &str| {
            let v = inline.clone().or_else(|| it.next().cloned());
            if let Some(v) = v {
                c.set(key, v);
            }
        };
        match flag {
            "-m" | "--model" => value(&mut c, "model"),
            "-t" | "--threads" => value(&mut c, "threads"),
            "--io-threads" => value(&mut c, "io_threads"),
            "--cache-mb" => value(&mut c, "cache_mb"),
            "--dense-weights" => value(&mut c, "dense_weights"),
            "--drop-cold-experts" => value(&mut c, "drop_cold_frac"),
            "--prefetch" => value(&mut c, "prefetch"),
            "--temp" => value(&mut c, "temp"),
            "--n-expert-used" => value(&mut c, "n_expert_used"),
            "--overlap" => c.set("overlap", "1"),
            "--moe-stream" => c.set("moe_stream", "1"),
            "--mtp" => c.set("spec", "mtp"),
            "--ngram" => c.set("spec", "ngram"),
            "--predict-log" => c.set("predict_log", "1"),
            "--prefetch-sync" => c.set("prefetch_sync", "1"),
            "--compute-trace" | "--compute-trace-layers" | "--io-trace" | "--route-trace" => {
                c.set("traced", "1");
                if inline.is_none() && it.peek().is_some_and(|n| !n.starts_with('-')) {
                    it.next();
                }
            }
            _ => {}
        }
    }
    if c.get("moe_stream").is_none() && argv.len() > 1 {
        // bmoe-cli streams only with --moe-stream: without it the run is the mmap baseline.
        let looks_like_engine = argv[0]
            .rsplit('/')
            .next()
            .is_some_and(|n| n.starts_with("bmoe-cli"));
        if looks_like_engine {
            c.set("moe_stream", "0");
        }
    }
    if c.get("moe_stream") == Some("1") && c.get("overlap").is_none() {
        c.set("overlap", "0");
    }
    c
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
