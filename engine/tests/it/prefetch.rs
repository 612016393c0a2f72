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

/// The overlap kinds `--prefetch` runs under: userfaultfd where the kernel allows it (else the
/// run says staged), and the staged overlap forced.
pub(crate) const KINDS: [&[&str]; 2] = [&["--overlap"], &["--overlap", "--overlap-kind", "staged"]];

/// Runs `cfg`, asserts it equals the resident run with the same batches (computed once per
/// batching, kept in `residents`), and returns its stdout.
pub(crate) fn identical(
    m: &std::path::Path,
    cfg: &[&str],
    residents: &mut std::collections::HashMap<Vec<String>, Vec<(String, String)>>,
) -> String {
    identical_env(m, cfg, &[], residents).0
}

/// [`identical`] with the environment variables `env` set on the streamed run; returns its
/// stdout and stderr.
pub(crate) fn identical_env(
    m: &std::path::Path,
    cfg: &[&str],
    env: &[(&str, &str)],
    residents: &mut std::collections::HashMap<Vec<String>, Vec<(String, String)>>,
) -> (String, String) {
    let (streamed, stdout, stderr) = crate::gates::trace_full_env(m, cfg, env);
    let args = crate::gates::resident_args(cfg, &stderr);
    let resident = residents.entry(args.clone()).or_insert_with(|| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::gates::trace(m, &a).0
    });
    assert_eq!(
        &streamed, resident,
        "{cfg:?} differs from resident {args:?}"
    );
    assert!(stdout.contains("mode: expert streaming"), "{stdout}");
    (stdout, stderr)
}

#[test]
fn overlap_prefetch_1_and_2_match_resident_across_caches_lanes_and_kinds() {
    let m = deep();
    let mut residents = std::collections::HashMap::new();
    // the full matrix on the default overlap (userfaultfd where the kernel allows it), the
    // hardest corner on the staged one
    let mut matrix: Vec<(&[&str], &str, &str, &str)> = Vec::new();
    for k in ["1", "2"] {
        for cache in CACHES {
            for lanes in ["1", "4"] {
                matrix.push((KINDS[0], k, cache, lanes));
            }
        }
    }
    matrix.push((KINDS[1], "2", "1", "1"));
    matrix.push((KINDS[1], "1", "3", "4"));
    let mut read_ahead = 0;
    for (kind, k, cache, lanes) in matrix {
        let mut cfg: Vec<&str> = vec![
            "--moe-stream",
            "--cache-mb",
            cache,
            "--io-threads",
            lanes,
            "--prefetch",
            k,
        ];
        cfg.extend_from_slice(kind);
        let (stdout, stderr) = identical_env(m, &cfg, &SPEC_COUNTS, &mut residents);
        read_ahead += checked_read_ahead(&cfg, &stdout, &stderr);
    }
    // a lane takes speculation only while no real read waits, so on a busy machine one
    // configuration may complete none; the matrix as a whole must
    assert!(read_ahead > 0, "no configuration read anything ahead");
    // the diagnostic form drains the speculative queue on the eval thread (numbered as the lane
    // after the last one in the io trace), and is just as lossless
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let io = dir.path().join("io.csv");
    let io_s = io.to_str().expect("utf-8 path");
    let sync = [
        "--moe-stream",
        "--cache-mb",
        "1",
        "--overlap",
        "--io-threads",
        "2",
        "--prefetch",
        "2",
        "--prefetch-sync",
        "--io-trace",
        io_s,
    ];
    identical(m, &sync, &mut residents);
    let rows: Vec<bmoe_telemetry::trace::IoRow> = bmoe_telemetry::trace::IoTraceReader::open(&io)
        .expect("io trace parses")
        .map(|r| r.expect("row"))
        .collect();
    assert!(
        rows.iter().any(|r| r.spec && r.lane == 2),
        "no speculative read on the eval thread"
    );
    assert!(
        rows.iter().all(|r| r.lane <= 2),
        "a lane beyond the eval thread's"
    );
}

/// The knob that prints the speculation's counts ([`spec_counts`]).
pub(crate) const SPEC_COUNTS: [(&str, &str); 1] = [("BMOE_TEST_SPEC_COUNTS", "1")];

/// Checks an overlapped speculative run's `moe-prefetch:` line against its counts: reads were
/// issued, and no more completed than were issued nor more were useful than completed (how many
/// complete depends on how busy the lanes were). Returns the entries read ahead.
pub(crate) fn checked_read_ahead(cfg: &[&str], stdout: &str, stderr: &str) -> u64 {
    let p = PerfReport::parse(stdout)
        .moe_prefetch
        .unwrap_or_else(|| panic!("{cfg:?}: no moe-prefetch line:\n{stdout}"));
    let (queued, _, _, completed) = spec_counts(stderr);
    assert!(queued > 0, "{cfg:?}: nothing issued ahead:\n{stderr}");
    assert!(completed <= queued, "{cfg:?}: completed > queued");
    assert!(p.useful <= p.prefetched, "{cfg:?}: useful > prefetched");
    assert_eq!(
        p.prefetched > 0,
        p.mib > 0.0,
        "{cfg:?}: entries and MiB disagree:\n{stdout}"
    );
    p.prefetched
}

/// The speculation's counts a run printed under `BMOE_TEST_SPEC_COUNTS=1`:
/// (queued, cancelled, adopted, completed).
pub(crate) fn spec_counts(stderr: &str) -> (u64, u64, u64, u64) {
    let [q, c, a, d] = test_counts(
        stderr,
        "bmoe: test: speculation ",
        ["queued", "cancelled", "adopted", "completed"],
    );
    (q, c, a, d)
}

/// The `key=value` counts of the first stderr line starting with `prefix`, in `keys` order.
pub(crate) fn test_counts<const N: usize>(stderr: &str, prefix: &str, keys: [&str; N]) -> [u64; N] {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line:\n{stderr}"));
    keys.map(|key| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    })
}

/// Runs like [`crate::gates::run`] with the speculation test knobs set: with `hold`, a lane holds
/// each speculative unit it takes until the next load starts (so the units queued behind it are
/// still queued when that load comes, whatever the machine's speed), and the counts are printed.
/// Returns (steps, stdout, stderr).
fn run_held(m: &std::path::Path, cfg: &[&str], hold: bool) -> (Vec<String>, String, String) {
    let out = crate::gates::cli()
        .env("BMOE_TEST_SPEC_COUNTS", "1")
        .env("BMOE_TEST_SPEC_HOLD", if hold { "1" } else { "0" })
        .arg("-m")
        .arg(m)
        .args([
            "-p",
            crate::gates::PROMPT,
            "-n",
            "12",
            "-t",
            "2",
            "-c",
            "256",
            "--dump-logits-hash",
        ])
        .args(cfg)
        .output()
        .expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{cfg:?} failed:\n{stderr}");
    let steps = stderr
        .lines()
        .filter(|l| l.starts_with("logits-hash "))
        .map(str::to_string)
        .collect();
    (steps, stdout, stderr)
}

#[test]
fn overlap_speculation_is_cancelled_and_adopted_never_read_twice_never_ahead_of_real_reads() {
    use bmoe_telemetry::metrics::MetricsFile;
    use bmoe_telemetry::trace::{IoRow, IoTraceReader, PHASE_DECODE, RouteRow, RouteTraceReader};
    let m = deep();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    for (n, kind) in KINDS.iter().enumerate() {
        let route = dir.path().join(format!("route{n}.csv"));
        let io = dir.path().join(format!("io{n}.csv"));
        let csv = dir.path().join(format!("m{n}.csv"));
        let s = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_string();
        let (route_s, io_s, csv_s) = (s(&route), s(&io), s(&csv));
        let mut cfg: Vec<&str> = vec![
            "--moe-stream",
            "--cache-mb",
            "1",
            "--io-threads",
            "1",
            "--prefetch",
            "2",
            "--csv",
            &csv_s,
            "--route-trace",
            &route_s,
            "--io-trace",
            &io_s,
        ];
        cfg.extend_from_slice(kind);
        let (held, stdout, stderr) = run_held(m, &cfg, true);
        // the same run unheld (and untraced) computes the same; the identity gate covers it
        let mut plain: Vec<&str> = cfg[..7].to_vec();
        plain.extend_from_slice(kind);
        let (free, _, _) = run_held(m, &plain, false);
        assert_eq!(held, free, "{cfg:?}: held speculation changed the output");
        let (queued, cancelled, adopted, completed) = spec_counts(&stderr);
        assert!(cancelled > 0, "{cfg:?}: nothing cancelled:\n{stderr}");
        assert!(
            adopted > 0,
            "{cfg:?}: no routing met a read in flight:\n{stderr}"
        );
        assert!(completed > 0, "{cfg:?}: nothing completed:\n{stderr}");
        // what is neither cancelled nor completed was still being read at the end (≤ 1 lane)
        assert!(
            cancelled + completed <= queued && queued - cancelled - completed <= 1,
            "{cfg:?}: queued {queued} cancelled {cancelled} completed {completed}"
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
        let spec_useful = trailer.get_u64("spec_useful").expect("spec_useful");
        assert_eq!(
            trailer.get_u64("spec_experts").expect("spec_experts"),
            line.prefetched
        );
        assert!(spec_useful <= line.prefetched && spec_useful == line.useful);
        let spec_bytes: u64 = ios
            .iter()
            .filter(|r| r.spec && r.phase == PHASE_DECODE)
            .map(|r| r.req_bytes)
            .sum();
        let io_mib = spec_bytes as f64 / (1024.0 * 1024.0);
        assert!(
            (io_mib - spec_mib).abs() <= 0.05 + 1e-9,
            "{cfg:?}: io trace spec=1 {io_mib:.3} MiB vs trailer {spec_mib} MiB"
        );
        let twos = routes
            .iter()
            .filter(|r| r.residency == 2 && r.phase == PHASE_DECODE)
            .count() as u64;
        assert_eq!(
            twos, spec_useful,
            "{cfg:?}: residency=2 rows vs spec_useful"
        );
        // a first touch of a speculative entry (landed or still in flight) reads nothing: no
        // real read of that entry in that step
        for r in routes.iter().filter(|r| r.residency == 2) {
            assert_eq!(r.expert_bytes, 0, "{cfg:?}: {r:?}");
            assert!(
                !ios.iter().any(|x| !x.spec
                    && (x.turn, x.phase, x.step, x.layer, x.expert)
                        == (r.turn, r.phase, r.step, r.layer, r.expert)),
                "{cfg:?}: read twice: {r:?}"
            );
        }
        assert_real_batches_are_never_interleaved(&ios, &cfg);
    }
}

/// The io trace lists reads in the order they started: between the first and the last read of
/// a real batch (one layer's misses in one decode step) no speculative read may start — a lane that
/// was reading speculatively finishes only the slice in flight, then serves the batch.
fn assert_real_batches_are_never_interleaved(ios: &[bmoe_telemetry::trace::IoRow], cfg: &[&str]) {
    use std::collections::HashMap;
    let mut span: HashMap<(u32, u8, i64, u32), (usize, usize)> = HashMap::new();
    // decode steps only: a prefill batch's rows carry each token's own step
    let decode = |r: &&bmoe_telemetry::trace::IoRow| r.phase == bmoe_telemetry::trace::PHASE_DECODE;
    for (i, r) in ios.iter().enumerate().filter(|(_, r)| !r.spec && decode(r)) {
        let e = span
            .entry((r.turn, r.phase, r.step, r.layer))
            .or_insert((i, i));
        e.1 = i;
    }
    let mut checked = 0;
    for ((_, _, step, layer), (a, b)) in &span {
        if let Some(k) = (*a..=*b).find(|&k| ios[k].spec) {
            panic!(
                "{cfg:?}: speculative read at row {k} started inside the real batch of layer \
                 {layer} step {step} (rows {a}..={b})"
            );
        }
        checked += usize::from(b > a);
    }
    assert!(checked > 0, "{cfg:?}: no multi-read real batch to check");
    assert!(ios.iter().any(|r| r.spec), "{cfg:?}: no speculative reads");
}
