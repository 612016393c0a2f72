//! `--prefetch K` gates: speculative reads must change nothing that is computed (token ids and
//! every step's logits hash equal the resident run's), while the `moe-prefetch:` line shows they
//! really happened (`0 < useful ≤ prefetched`); the prerequisites are config errors naming the
//! flag; the traces mark speculative reads and first touches.

use crate::gates::{assert_identical, trace_full};
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::summary::PerfReport;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Caches that evict hard (1 MiB: 5 of 48 entries) and less (3 MiB) on [`deep`].
const CACHES: [&str; 2] = ["1", "3"];

/// The tiny preset with 6 layers: the 2-layer one leaves `--prefetch` one layer to guess, whose
/// previous routing is nearly always still cached.
fn deep() -> &'static PathBuf {
    static M: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &M.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let mut o = SynthOptions::preset(Preset::Tiny);
        o.n_layer = 6;
        let path = write_model(&o, &dir.path().join("deep.gguf"))
            .expect("synthesise")
            .paths[0]
            .clone();
        (dir, path)
    })
    .1
}

#[test]
fn prefetch_1_and_2_match_resident_and_really_read_ahead() {
    let m = deep();
    for k in ["1", "2"] {
        for cache in CACHES {
            for lanes in ["1", "4"] {
                let cfg: [&str; 7] = [
                    "--moe-stream",
                    "--cache-mb",
                    cache,
                    "--io-threads",
                    lanes,
                    "--prefetch",
                    k,
                ];
                assert_identical(m, &[&cfg]);
                let (_, stdout, _) = trace_full(m, &cfg);
                let p = PerfReport::parse(&stdout)
                    .moe_prefetch
                    .unwrap_or_else(|| panic!("{cfg:?}: no moe-prefetch line:\n{stdout}"));
                assert!(p.prefetched > 0, "{cfg:?}: nothing read ahead:\n{stdout}");
                assert!(
                    p.useful <= p.prefetched,
                    "{cfg:?}: more useful than prefetched:\n{stdout}"
                );
                assert!(p.useful > 0, "{cfg:?}: no guess ever hit:\n{stdout}");
                assert!(p.mib > 0.0, "{cfg:?}: no speculative MiB:\n{stdout}");
            }
        }
    }
    // the diagnostic form is the same reads, marked instrumented, and just as lossless
    assert_identical(
        m,
        &[&[
            "--moe-stream",
            "--cache-mb",
            "1",
            "--prefetch",
            "1",
            "--prefetch-sync",
        ]],
    );
}

#[test]
fn prefetch_off_prints_no_prefetch_line() {
    let (_, stdout, _) = trace_full(deep(), &["--moe-stream", "--cache-mb", "1"]);
    assert!(
        !stdout.contains("moe-prefetch:"),
        "no --prefetch, no moe-prefetch line:\n{stdout}"
    );
}

#[test]
fn prefetch_without_a_cache_is_a_config_error_with_a_hint() {
    let out = crate::gates::run(deep(), &["--moe-stream", "--prefetch", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must refuse:\n{stderr}");
    assert!(stderr.contains("--prefetch"), "names the flag:\n{stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("hint:")),
        "a hint line:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "no panic:\n{stderr}");
}
