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

#[test]
fn traces_mark_speculative_reads_and_first_touches_and_add_up_to_the_trailer() {
    use bmoe_telemetry::metrics::MetricsFile;
    use bmoe_telemetry::trace::{IoRow, IoTraceReader, PHASE_DECODE, RouteRow, RouteTraceReader};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let (route, io, csv) = (
        dir.path().join("route.csv"),
        dir.path().join("io.csv"),
        dir.path().join("metrics.csv"),
    );
    let s = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_string();
    let (route_s, io_s, csv_s) = (s(&route), s(&io), s(&csv));
    let (_, stdout, _) = trace_full(
        deep(),
        &[
            "--moe-stream",
            "--cache-mb",
            "1",
            "--prefetch",
            "2",
            "--csv",
            &csv_s,
            "--route-trace",
            &route_s,
            "--io-trace",
            &io_s,
        ],
    );
    let line = PerfReport::parse(&stdout)
        .moe_prefetch
        .expect("moe-prefetch line");
    let routes: Vec<RouteRow> = RouteTraceReader::open(&route)
        .expect("route trace parses")
        .map(|r| r.expect("row"))
        .collect();
    let ios: Vec<IoRow> = IoTraceReader::open(&io)
        .expect("io trace parses")
        .map(|r| r.expect("row"))
        .collect();
    let metrics = MetricsFile::read(&csv).expect("metrics CSV parses");
    let trailer = metrics.summaries.last().expect("a summary trailer");
    let spec_mib = trailer.get_f64("spec_read_MiB").expect("spec_read_MiB");
    let spec_experts = trailer.get_u64("spec_experts").expect("spec_experts");
    let spec_useful = trailer.get_u64("spec_useful").expect("spec_useful");
    assert_eq!((spec_experts, spec_useful), (line.prefetched, line.useful));
    assert!(spec_useful <= spec_experts && spec_experts > 0);

    // Σ decode-phase spec=1 requested (slice) bytes = the trailer's spec_read_MiB (1 decimal)
    let spec_bytes: u64 = ios
        .iter()
        .filter(|r| r.spec && r.phase == PHASE_DECODE)
        .map(|r| r.req_bytes)
        .sum();
    let io_mib = spec_bytes as f64 / (1024.0 * 1024.0);
    assert!(
        (io_mib - spec_mib).abs() <= 0.05 + 1e-9,
        "io trace spec=1 {io_mib:.3} MiB vs trailer {spec_mib} MiB"
    );
    assert!(
        ios.iter().any(|r| !r.spec),
        "real reads are not marked spec"
    );
    // a real miss's bytes stay on the route trace; speculative ones are not a routing's
    let real: u64 = ios.iter().filter(|r| !r.spec).map(|r| r.read_bytes).sum();
    let routed: u64 = routes.iter().map(|r| r.expert_bytes).sum();
    assert_eq!(real, routed);

    // residency=2: a speculative entry's first touch, once per entry, reading nothing
    let twos: Vec<&RouteRow> = routes.iter().filter(|r| r.residency == 2).collect();
    assert!(!twos.is_empty(), "no residency=2 rows");
    assert!(twos.iter().all(|r| r.expert_bytes == 0));
    let decode_twos = twos.iter().filter(|r| r.phase == PHASE_DECODE).count() as u64;
    assert_eq!(
        decode_twos, spec_useful,
        "decode first touches = spec_useful"
    );

    let text = std::fs::read_to_string(&csv).expect("read csv");
    assert!(
        text.contains(" prefetch=2 ") || text.contains(" prefetch=2\n"),
        "{text}"
    );
    assert!(text.contains("prefetch_sync=0"), "{text}");
}
