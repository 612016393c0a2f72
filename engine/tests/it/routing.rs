//! The routing edits on the real binary: `--drop-cold-experts` (never reads what it drops, and
//! counts what the route trace records), `--expert-substitute` (raises the hit rate for a real
//! reason), `--route-replay` (the run routes exactly as the recorded one did), their off switches
//! (byte-identical to a plain run) and their errors.

use crate::gates::{cli, models, resident_args, trace, trace_full};
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::{MetricsReader, SummaryTrailer};
use bmoe_telemetry::trace::{IoRow, IoTraceReader, PHASE_DECODE, RouteRow, RouteTraceReader};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

struct Wide {
    dir: tempfile::TempDir,
    path: PathBuf,
}

/// A tiny model with more experts to choose from (4 layers, 16 experts, top-4): enough misses
/// at a small cache for the edits to have something to do.
fn wide() -> &'static Wide {
    static M: OnceLock<Wide> = OnceLock::new();
    M.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let mut o = SynthOptions::preset(Preset::Tiny);
        o.n_layer = 4;
        o.n_expert = 16;
        o.n_expert_used = 4;
        o.router_skew = 0.65;
        let s = write_model(&o, &dir.path().join("wide.gguf")).expect("synthesise model");
        Wide {
            path: s.paths[0].clone(),
            dir,
        }
    })
}

fn file(name: &str) -> PathBuf {
    wide().dir.path().join(name)
}

/// A streamed run of `model` with a 1 MiB cache, fed seeded tokens (the same input whatever the
/// edits do to the output), plus `extra`.
fn run(model: &Path, prompt: &str, n: usize, extra: &[&str]) -> Output {
    run_cached(model, "1", prompt, n, extra)
}

/// [`run`] with a cache of `cache_mb`.
fn run_cached(model: &Path, cache_mb: &str, prompt: &str, n: usize, extra: &[&str]) -> Output {
    cli()
        .arg("-m")
        .arg(model)
        .args(["-p", prompt, "-n", &n.to_string(), "-t", "2", "-c", "256"])
        .args(["--ignore-eos", "--feed-random", "5"])
        .args(["--moe-stream", "--cache-mb", cache_mb])
        .args(extra)
        .output()
        .expect("run bmoe-cli")
}

fn ok(o: &Output) -> (String, String) {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "bmoe-cli failed:\n{err}");
    (String::from_utf8_lossy(&o.stdout).into_owned(), err)
}

fn routes(path: &Path) -> Vec<RouteRow> {
    RouteTraceReader::open(path)
        .expect("route trace")
        .map(|r| r.expect("route row"))
        .collect()
}

fn decode_routes(path: &Path) -> Vec<RouteRow> {
    routes(path)
        .into_iter()
        .filter(|r| r.phase == PHASE_DECODE)
        .collect()
}

fn trailer(csv: &Path) -> SummaryTrailer {
    let mut r = MetricsReader::open(csv).expect("metrics csv");
    for row in r.by_ref() {
        row.expect("row");
    }
    r.summaries().last().cloned().expect("a # summary trailer")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn dropping_reads_no_dropped_expert_and_the_trailer_counts_the_trace() {
    let (route, io, csv) = (
        file("drop.route.csv"),
        file("drop.io.csv"),
        file("drop.csv"),
    );
    let o = run(
        &wide().path,
        "Hello world, this is a drop test.",
        24,
        &[
            "--drop-cold-experts",
            "1",
            "--route-trace",
            p(&route),
            "--io-trace",
            p(&io),
            "--csv",
            p(&csv),
        ],
    );
    let (stdout, _) = ok(&o);
    let rows = decode_routes(&route);
    let dropped: Vec<&RouteRow> = rows.iter().filter(|r| r.dropped == Some(true)).collect();
    assert!(!dropped.is_empty(), "a 1 MiB cache at F=1 drops something");
    for r in &dropped {
        assert_eq!((r.expert_bytes, r.residency), (0, 0), "{r:?}");
        assert!(
            r.slot > 0 || r.weight < 0.25,
            "the best slot is never dropped: {r:?}"
        );
    }
    assert!(
        routes(&route)
            .iter()
            .all(|r| r.phase == PHASE_DECODE || r.dropped == Some(false)),
        "no drop in prefill without --drop-in-prefill"
    );
    let t = trailer(&csv);
    assert_eq!(t.get_u64("experts_dropped"), Some(dropped.len() as u64));
    assert_eq!(t.get_u64("experts_routed"), Some(rows.len() as u64));
    let line = format!(
        "moe-drop: {}/{} routed experts dropped",
        dropped.len(),
        rows.len()
    );
    assert!(stdout.contains(&line), "{line} in:\n{stdout}");
    let info = MetricsReader::open(&csv).expect("csv").run_info().clone();
    assert_eq!(info.drop_cold_frac, Some(1.0));
    assert_eq!(
        (info.drop_renorm, info.drop_prefill),
        (Some(true), Some(false))
    );
    // the io trace: no read ever served a dropped (step, layer, expert)
    let reads: HashSet<(i64, u32, u32)> = IoTraceReader::open(&io)
        .expect("io trace")
        .map(|r| r.expect("io row"))
        .filter(|r: &IoRow| r.phase == PHASE_DECODE)
        .map(|r| (r.step, r.layer, r.expert))
        .collect();
    assert!(!reads.is_empty());
    for r in &dropped {
        assert!(
            !reads.contains(&(r.step, r.layer, r.expert)),
            "read a dropped expert: {r:?}"
        );
    }
    let read_bytes: u64 = rows.iter().map(|r| r.expert_bytes).sum();
    assert!(read_bytes > 0);
}

#[test]
fn a_dropped_expert_is_never_touched_even_when_its_memory_is_poison() {
    // NaN over every slice not resident after a load: a matmul that touched a dropped slot's
    // own (unread) expert would turn the logits to NaN and change every hash after it
    let m = &wide().path;
    let args = [
        "--moe-stream",
        "--cache-mb",
        "1",
        "--drop-cold-experts",
        "1",
    ];
    let (clean, stdout, _) = trace_full(m, &args);
    assert!(
        !stdout.contains("moe-drop: 0/"),
        "the run must drop something:\n{stdout}"
    );
    let mut poisoned = args.to_vec();
    poisoned.extend(["--test-poison", "unrouted"]);
    assert_eq!(trace(m, &poisoned).0, clean);
}

#[test]
fn edits_at_zero_are_byte_identical_to_a_plain_run() {
    let m = &models().q8;
    let plain = ["--moe-stream", "--cache-mb", "1"];
    let (streamed, _, stderr) = trace_full(m, &plain);
    let zero = [
        "--moe-stream",
        "--cache-mb",
        "1",
        "--drop-cold-experts",
        "0",
        "--expert-substitute",
        "0",
    ];
    assert_eq!(trace(m, &zero).0, streamed);
    let args = resident_args(&plain, &stderr);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(
        trace(m, &a).0,
        streamed,
        "and the streamed run is the resident one"
    );
}

#[test]
fn substitution_steers_misses_to_resident_experts() {
    let hit = |lambda: &str| {
        let csv = file(&format!("sub{lambda}.csv"));
        // a third of the experts fit: each layer keeps a few resident between tokens
        ok(&run_cached(
            &wide().path,
            "4",
            "Hello world, this is a substitution test.",
            24,
            &["--expert-substitute", lambda, "--csv", p(&csv)],
        ));
        trailer(&csv)
    };
    let (off, on) = (hit("0"), hit("0.6"));
    assert_eq!(off.get_u64("experts_substituted"), Some(0));
    let moved = on
        .get_u64("experts_substituted")
        .expect("experts_substituted");
    let examined = on.get_u64("experts_reranked").expect("experts_reranked");
    assert!(moved > 0 && examined >= moved, "{moved}/{examined}");
    let (h0, h1) = (
        off.get_f64("cache_hit_pct").expect("hit"),
        on.get_f64("cache_hit_pct").expect("hit"),
    );
    assert!(h1 > h0, "the hit rate rises: {h0} → {h1}");
}

#[test]
fn replay_routes_as_the_recorded_trace_did_then_stops_or_cycles() {
    let m = &wide().path;
    let (recorded, replayed) = (file("rec.route.csv"), file("rep.route.csv"));
    ok(&run(
        m,
        "A first prompt.",
        10,
        &["--route-trace", p(&recorded)],
    ));
    let csv = file("rep.csv");
    let o = run(
        m,
        "Something else entirely, longer than the first.",
        30,
        &[
            "--route-replay",
            p(&recorded),
            "--route-trace",
            p(&replayed),
            "--csv",
            p(&csv),
        ],
    );
    let (_, stderr) = ok(&o);
    assert!(stderr.contains("at its end the run stops"), "{stderr}");
    assert!(
        stderr.contains("generation stops after 10 tokens"),
        "{stderr}"
    );
    let (a, b) = (decode_routes(&recorded), decode_routes(&replayed));
    assert_eq!(a.len(), b.len(), "one replayed step per recorded one");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.layer, x.slot, x.expert), (y.layer, y.slot, y.expert));
        assert!(
            (x.weight - y.weight).abs() <= 1e-5 * x.weight.abs().max(1e-3),
            "{x:?} {y:?}"
        );
    }
    assert_eq!(trailer(&csv).get_u64("tokens"), Some(10));
    let info = MetricsReader::open(&csv).expect("csv").run_info().clone();
    assert_eq!(info.extra.get("route_replay"), Some(p(&recorded)));
    let t = RouteTraceReader::open(&replayed)
        .expect("trace")
        .info()
        .clone();
    assert_eq!(t.extra.get("route_replay"), Some(p(&recorded)));

    let cycled = file("cyc.route.csv");
    let o = run(
        m,
        "Again.",
        14,
        &[
            "--route-replay",
            p(&recorded),
            "--route-replay-end",
            "cycle",
            "--route-trace",
            p(&cycled),
        ],
    );
    let (_, stderr) = ok(&o);
    assert!(stderr.contains("starts the trace over"), "{stderr}");
    let c = decode_routes(&cycled);
    let per_step = a.len() / 10;
    assert_eq!(c.len(), 14 * per_step);
    let ids = |rows: &[RouteRow]| rows.iter().map(|r| r.expert).collect::<Vec<_>>();
    assert_eq!(
        ids(&c[10 * per_step..]),
        ids(&a[..4 * per_step]),
        "step 11 is step 1"
    );
}

#[test]
fn replay_on_another_shape_names_what_differs() {
    let recorded = file("shape.route.csv");
    ok(&run(
        &wide().path,
        "Shape.",
        3,
        &["--route-trace", p(&recorded)],
    ));
    let other = run(&models().q8, "x", 3, &["--route-replay", p(&recorded)]);
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the trace's n_layer=4 differs from the model's n_layer=2"),
        "{err}"
    );
    assert!(
        err.contains("hint: replay on a model of the trace's shape"),
        "{err}"
    );
    let k = run(
        &wide().path,
        "x",
        3,
        &["--route-replay", p(&recorded), "--n-expert-used", "2"],
    );
    let err = String::from_utf8_lossy(&k.stderr);
    assert!(err.contains("n_expert_used=4 differs"), "{err}");
    assert!(err.contains("hint: pass --n-expert-used 4"), "{err}");
}

#[test]
fn routing_flag_errors_name_the_flag() {
    let m = models().q8.to_str().expect("utf-8");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--drop-cold-experts", "0.5"],
            "--drop-cold-experts requires --moe-stream",
        ),
        (
            &["--moe-stream", "--drop-cold-experts", "0.5"],
            "--drop-cold-experts needs an expert cache",
        ),
        (
            &[
                "--moe-stream",
                "--cache-mb",
                "1",
                "--drop-cold-experts",
                "1.5",
            ],
            "--drop-cold-experts must be in [0, 1] (got 1.5)",
        ),
        (
            &[
                "--moe-stream",
                "--cache-mb",
                "1",
                "--drop-cold-experts",
                "NaN",
            ],
            "--drop-cold-experts must be in [0, 1] (got NaN)",
        ),
        (
            &["--moe-stream", "--expert-substitute", "0.3"],
            "--expert-substitute needs an expert cache",
        ),
        (
            &[
                "--moe-stream",
                "--cache-mb",
                "1",
                "--expert-substitute",
                "0.3",
                "--route-replay",
                "t.csv",
            ],
            "--expert-substitute and --route-replay both choose the experts",
        ),
        (
            &["--route-replay", "t.csv"],
            "--route-replay requires --moe-stream",
        ),
        (
            &["--route-replay-end", "cycle"],
            "--route-replay-end requires --route-replay",
        ),
        (
            &[
                "--moe-stream",
                "--route-replay",
                "t.csv",
                "--route-replay-end",
                "loop",
            ],
            "--route-replay-end expects stop|cycle, got 'loop'",
        ),
    ];
    for (args, says) in cases {
        let o = cli()
            .args(["-m", m, "-n", "2"])
            .args(*args)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.lines().any(|l| l.starts_with("hint: ")), "{err}");
        assert!(o.stdout.is_empty(), "nothing ran");
    }
}
