//! `--predict-log` and `--predict-prefetch` (issue #15): the probe changes nothing computed and
//! its control reproduces the router; its table agrees with the route trace's own recount; the
//! stale-gate prefetch is lossless and really reads ahead; the prerequisites are config errors
//! naming the flag; the CSV preamble records what ran.

use crate::gates::{assert_identical, run, trace_full, trace_full_env};
use crate::prefetch::{
    KINDS, SPEC_COUNTS, checked_read_ahead, identical_env, spec_counts, test_counts,
};

/// The stale gate's rankings collected even when the worker is slower than a tiny layer.
const RANK_WAIT: [(&str, &str); 1] = [("BMOE_TEST_RANK_WAIT", "1")];
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::summary::PerfReport;
use bmoe_telemetry::trace::{PHASE_DECODE, RouteRow, RouteTraceReader};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

const LAYERS: usize = 6;

/// The tiny preset with [`LAYERS`] layers (the stale gate needs layers ≥ 2 to rank).
fn deep() -> &'static PathBuf {
    static M: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &M.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let mut o = SynthOptions::preset(Preset::Tiny);
        o.n_layer = LAYERS as u32;
        let path = write_model(&o, &dir.path().join("deep.gguf"))
            .expect("synthesise")
            .paths[0]
            .clone();
        (dir, path)
    })
    .1
}

/// The `moe-predict:` table rows: layer → (stale, prev, ctrl, routings) as printed.
fn table(stdout: &str) -> BTreeMap<usize, [String; 4]> {
    let mut rows = BTreeMap::new();
    let mut lines = stdout
        .lines()
        .skip_while(|l| *l != "  layer   stale    prev   ctrl   routings");
    assert!(lines.next().is_some(), "no per-layer table:\n{stdout}");
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        let Some(il) = f.first().and_then(|x| x.parse::<usize>().ok()) else {
            break;
        };
        assert_eq!(f.len(), 5, "row shape: {l:?}");
        rows.insert(il, [f[1], f[2], f[3], f[4]].map(str::to_string));
    }
    rows
}

#[test]
fn predict_log_changes_nothing_computed() {
    assert_identical(deep(), &[&["--moe-stream", "--predict-log"]]);
    assert_identical(
        deep(),
        &[&["--moe-stream", "--cache-mb", "1", "--predict-log"]],
    );
}

#[test]
fn predict_log_table_matches_the_route_trace_and_the_control_reads_100() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let route = dir.path().join("route.csv");
    let route_s = route.to_str().expect("utf-8 path").to_string();
    let (_, stdout, _) = trace_full(
        deep(),
        &["--moe-stream", "--predict-log", "--route-trace", &route_s],
    );
    let rows: Vec<RouteRow> = RouteTraceReader::open(&route)
        .expect("route trace parses")
        .map(|r| r.expect("row"))
        .collect();
    // (step, layer) → the routed experts, any phase (the first decode's previous token is the
    // prompt's last)
    let mut routed: BTreeMap<(i64, u32), Vec<u32>> = BTreeMap::new();
    for r in &rows {
        routed.entry((r.step, r.layer)).or_default().push(r.expert);
    }
    let decode_steps: Vec<i64> = {
        let mut s: Vec<i64> = rows
            .iter()
            .filter(|r| r.phase == PHASE_DECODE)
            .map(|r| r.step)
            .collect();
        s.dedup();
        s
    };
    assert!(decode_steps.len() > 2, "decode routings in the trace");
    let t = table(&stdout);
    assert_eq!(t.len(), LAYERS, "one row per layer:\n{stdout}");
    let (mut stale_rows, mut unranked, mut prev_rows, mut prev_slots) = (0u64, 0u64, 0u64, 0u64);
    for (il, row) in &t {
        let layer = *il as u32;
        let (mut hits, mut slots, mut n) = (0usize, 0usize, 0u64);
        for &s in &decode_steps {
            let actual = &routed[&(s, layer)];
            n += 1;
            if let Some(prev) = routed.get(&(s - 1, layer)) {
                hits += actual.iter().filter(|e| prev.contains(e)).count();
                slots += actual.len();
                prev_rows += 1;
            }
        }
        prev_slots += slots as u64;
        assert_eq!(row[3], n.to_string(), "layer {il} routings:\n{stdout}");
        assert_eq!(
            row[1],
            format!("{:.1}", 100.0 * hits as f64 / slots as f64),
            "layer {il} prev-token vs the trace:\n{stdout}"
        );
        let ctrl: f64 = row[2].parse().expect("control scored at every layer");
        assert!(ctrl >= 99.0, "layer {il}: control {ctrl} < 99%:\n{stdout}");
        // the seed's stale gate is the next layer's router run a layer early: layer 0 has no
        // layer before it to rank from
        if *il < 1 {
            assert_eq!(
                row[0], "-",
                "layer {il}: no layer il-1 to rank from:\n{stdout}"
            );
            unranked += n;
        } else {
            let stale: f64 = row[0].parse().expect("stale scored");
            assert!((0.0..=100.0).contains(&stale));
            stale_rows += n;
        }
    }
    let nu = rows.iter().map(|r| r.slot).max().expect("rows") as u64 + 1;
    let scored = stdout
        .lines()
        .find(|l| l.starts_with("moe-predict: scored — "))
        .expect("scored line");
    assert_eq!(
        scored,
        format!(
            "moe-predict: scored — stale-gate {stale_rows} routings/{} slots, prev-token {prev_rows}/{prev_slots}, control {}/{}; {unranked} routings the stale-gate could not rank",
            stale_rows * nu,
            stale_rows + unranked,
            (stale_rows + unranked) * nu
        )
    );
    let head = stdout
        .lines()
        .find(|l| l.starts_with("moe-predict: stale-gate "))
        .expect("aggregate line");
    let shape = regex_like(head);
    assert_eq!(
        shape,
        "moe-predict: stale-gate #% of routed slots (#% whole routings) | prev-token #% (#%) | fresh-gate control #% (#%)",
        "{head}"
    );
    assert!(
        head.contains("fresh-gate control 100.0% (100.0%)"),
        "{head}"
    );
}

/// `line` with every decimal number replaced by `#`.
fn regex_like(line: &str) -> String {
    let mut out = String::new();
    let mut in_num = false;
    for c in line.chars() {
        if c.is_ascii_digit() || (in_num && c == '.') {
            if !in_num {
                out.push('#');
            }
            in_num = true;
        } else {
            in_num = false;
            out.push(c);
        }
    }
    out
}

#[test]
fn predict_prefetch_matches_resident_and_really_reads_ahead() {
    let m = deep();
    // (cache MiB, lanes, spec max): hard eviction and less, one lane and four, both caps
    for (cache, lanes, max) in [("1", "1", "2"), ("1", "4", "1"), ("3", "4", "2")] {
        let cfg: [&str; 8] = [
            "--moe-stream",
            "--cache-mb",
            cache,
            "--io-threads",
            lanes,
            "--predict-prefetch",
            "--predict-spec-max",
            max,
        ];
        assert_identical(m, &[&cfg]);
        let (_, stdout, _) = trace_full_env(m, &cfg, &RANK_WAIT);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("moe-prefetch: "))
            .unwrap_or_else(|| panic!("{cfg:?}: no moe-prefetch line:\n{stdout}"));
        assert!(line.ends_with(" [stale-gate]"), "{line}");
        let p = PerfReport::parse(&stdout).moe_prefetch.expect("parses");
        assert!(p.prefetched > 0, "{cfg:?}: nothing read ahead:\n{stdout}");
        assert!(p.useful <= p.prefetched, "{cfg:?}:\n{stdout}");
        assert!(p.useful > 0, "{cfg:?}: no guess ever hit:\n{stdout}");
    }
    // with the log on too: still lossless
    assert_identical(
        m,
        &[&[
            "--moe-stream",
            "--cache-mb",
            "1",
            "--predict-prefetch",
            "--predict-log",
        ]],
    );
}

#[test]
fn predict_spec_max_0_reads_nothing_ahead() {
    let (_, stdout, _) = trace_full(
        deep(),
        &[
            "--moe-stream",
            "--cache-mb",
            "1",
            "--predict-prefetch",
            "--predict-spec-max",
            "0",
        ],
    );
    let p = PerfReport::parse(&stdout)
        .moe_prefetch
        .expect("a moe-prefetch line");
    assert_eq!((p.prefetched, p.useful), (0, 0), "{stdout}");
}

#[test]
fn predictor_prerequisites_are_config_errors_naming_the_flag() {
    let cases: [(&[&str], &str); 5] = [
        (&["--predict-log"], "--predict-log requires --moe-stream"),
        (
            &["--predict-prefetch"],
            "--predict-prefetch requires --moe-stream",
        ),
        (
            &["--moe-stream", "--predict-prefetch"],
            "--predict-prefetch requires an expert cache",
        ),
        (
            &[
                "--moe-stream",
                "--cache-mb",
                "4",
                "--predict-prefetch",
                "--prefetch",
                "1",
            ],
            "--predict-prefetch and --prefetch cannot be combined",
        ),
        (
            &[
                "--moe-stream",
                "--cache-mb",
                "4",
                "--predict-prefetch",
                "--predict-spec-max",
                "9",
            ],
            "--predict-spec-max must be in 0..=8",
        ),
    ];
    for (args, msg) in cases {
        let out = run(deep(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must refuse:\n{stderr}");
        assert!(stderr.contains(msg), "{args:?}: {msg}:\n{stderr}");
        assert!(
            stderr.lines().any(|l| l.starts_with("hint:")),
            "{args:?}: a hint line:\n{stderr}"
        );
    }
}

#[test]
fn the_csv_preamble_records_the_predictors() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let csv = dir.path().join("m.csv");
    let csv_s = csv.to_str().expect("utf-8 path").to_string();
    let keys = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter(|l| l.starts_with('#'))
            .flat_map(|l| l.split_whitespace())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    trace_full(
        deep(),
        &[
            "--moe-stream",
            "--cache-mb",
            "2",
            "--predict-prefetch",
            "--predict-spec-max",
            "3",
            "--predict-log",
            "--csv",
            &csv_s,
        ],
    );
    let on = keys(&std::fs::read_to_string(&csv).expect("csv"));
    assert_eq!(on["predict_prefetch"], "1");
    assert_eq!(on["predict_log"], "1");
    assert_eq!(on["predict_spec_max"], "3");
    trace_full(deep(), &["--moe-stream", "--csv", &csv_s]);
    let off = keys(&std::fs::read_to_string(&csv).expect("csv"));
    assert_eq!(
        (
            &*off["predict_prefetch"],
            &*off["predict_log"],
            &*off["predict_spec_max"]
        ),
        ("0", "0", "0")
    );
}

/// The `moe-route-ahead:` line's (N, committed, passed, agreement %).
fn route_ahead_line(stdout: &str) -> (u64, u64, u64, f64) {
    let l = stdout
        .lines()
        .find(|l| l.starts_with("moe-route-ahead: "))
        .unwrap_or_else(|| panic!("no moe-route-ahead line:\n{stdout}"));
    let nums: Vec<f64> = l
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| !w.is_empty() && *w != ".")
        .map(|w| w.parse().expect("number"))
        .collect();
    assert_eq!(nums.len(), 4, "{l}");
    assert_eq!(
        regex_like(l),
        "moe-route-ahead: # layers early — # routings committed, # passed through; committed selection agreed with the router on #% of slots"
    );
    (nums[0] as u64, nums[1] as u64, nums[2] as u64, nums[3])
}

#[test]
fn route_ahead_past_every_layer_commits_nothing_and_matches_resident() {
    let cfg: &[&str] = &["--moe-stream", "--route-ahead", "8"];
    assert_identical(deep(), &[cfg]);
    let (_, stdout, _) = trace_full(deep(), cfg);
    assert_eq!(route_ahead_line(&stdout), (8, 0, 0, 100.0), "{stdout}");
}

#[test]
fn route_ahead_commits_every_eligible_routing_and_reports_it_everywhere() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let (route, csv) = (dir.path().join("route.csv"), dir.path().join("m.csv"));
    let s = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_string();
    let (route_s, csv_s) = (s(&route), s(&csv));
    let cfg: &[&str] = &[
        "--moe-stream",
        "--cache-mb",
        "2",
        "--route-ahead",
        "1",
        "--route-trace",
        &route_s,
        "--csv",
        &csv_s,
    ];
    let (steps, stdout, _) = trace_full(deep(), cfg);
    let (n, committed, passed, agree) = route_ahead_line(&stdout);
    let rows: Vec<RouteRow> = RouteTraceReader::open(&route)
        .expect("route trace parses")
        .map(|r| r.expect("row"))
        .collect();
    let mut eligible: Vec<(i64, u32)> = rows
        .iter()
        .filter(|r| r.phase == PHASE_DECODE && r.layer >= 1)
        .map(|r| (r.step, r.layer))
        .collect();
    eligible.dedup();
    assert_eq!(n, 1);
    assert_eq!(
        committed + passed,
        eligible.len() as u64,
        "every decode routing at layers >= N is committed or passed through:\n{stdout}"
    );
    assert!(committed > 0, "{stdout}");
    assert!((0.0..=100.0).contains(&agree));
    let text = std::fs::read_to_string(&csv).expect("csv");
    let trailer = text
        .lines()
        .find(|l| l.starts_with("# summary"))
        .expect("trailer");
    for (k, v) in [
        ("ra_committed", committed.to_string()),
        ("ra_passthrough", passed.to_string()),
        ("ra_agree_pct", format!("{agree:.1}")),
    ] {
        assert!(trailer.contains(&format!(" {k}={v}")), "{k}={v}: {trailer}");
    }
    assert!(trailer.contains(" ra_gemv_ms/tok="), "{trailer}");
    assert!(text.contains(" route_ahead=1"), "preamble: {text}");
    let p = PerfReport::parse(&stdout)
        .moe_prefetch
        .expect("moe-prefetch line");
    assert!(p.useful <= p.prefetched, "{stdout}");
    assert!(
        stdout.contains("experts useful") && stdout.contains(" [route-ahead]"),
        "{stdout}"
    );
    // lossy only where it disagreed: full agreement computes what the resident run does
    if agree == 100.0 {
        assert_identical(deep(), &[cfg]);
    }
    assert!(!steps.is_empty());
}

#[test]
fn route_ahead_refuses_what_it_would_corrupt() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--route-ahead", "1"],
            "--route-ahead requires --moe-stream",
        ),
        (
            &["--moe-stream", "--route-ahead", "9"],
            "--route-ahead must be in 0..=8",
        ),
        (
            &["--moe-stream", "--route-ahead", "1", "--predict-log"],
            "--route-ahead and --predict-log cannot be combined",
        ),
        (
            &[
                "--moe-stream",
                "--cache-mb",
                "4",
                "--route-ahead",
                "1",
                "--prefetch",
                "1",
            ],
            "--route-ahead and --prefetch cannot be combined",
        ),
    ];
    for (args, msg) in cases {
        let out = run(deep(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must refuse:\n{stderr}");
        assert!(stderr.contains(msg), "{args:?}: {msg}:\n{stderr}");
        assert!(stderr.lines().any(|l| l.starts_with("hint:")), "{stderr}");
    }
}

#[test]
fn overlap_predict_prefetch_matches_resident_across_caches_lanes_and_kinds() {
    let m = deep();
    let mut residents = std::collections::HashMap::new();
    // the cache sizes of the --prefetch gates, on the default overlap (userfaultfd where the
    // kernel allows it) and the hardest corner on the staged one
    let mut matrix: Vec<(&[&str], &str, &str)> = Vec::new();
    for cache in ["1", "3"] {
        for lanes in ["1", "4"] {
            matrix.push((KINDS[0], cache, lanes));
        }
    }
    matrix.push((KINDS[1], "1", "1"));
    matrix.push((KINDS[1], "3", "4"));
    let mut read_ahead = 0;
    let env = [RANK_WAIT[0], SPEC_COUNTS[0]];
    for (kind, cache, lanes) in matrix {
        let mut cfg = vec!["--moe-stream", "--predict-prefetch", "--cache-mb", cache];
        cfg.extend_from_slice(&["--io-threads", lanes]);
        cfg.extend_from_slice(kind);
        let (stdout, stderr) = identical_env(m, &cfg, &env, &mut residents);
        assert!(
            stdout.contains(" [stale-gate]"),
            "{cfg:?}: not tagged:\n{stdout}"
        );
        read_ahead += checked_read_ahead(&cfg, &stdout, &stderr);
    }
    // as with --prefetch: a busy machine may keep one configuration's lanes on real reads
    assert!(read_ahead > 0, "no configuration read anything ahead");
}

/// The rank worker's counts a run printed under `BMOE_TEST_RANK_COUNTS=1`:
/// (ranked, collected, late).
fn rank_counts(stderr: &str) -> (u64, u64, u64) {
    let [r, c, l] = test_counts(
        stderr,
        "bmoe: test: stale-gate ",
        ["ranked", "collected", "late"],
    );
    (r, c, l)
}

#[test]
fn the_stale_gate_ranks_on_its_worker_and_changes_nothing_computed() {
    let m = deep();
    for extra in [&[][..], &["--overlap"][..]] {
        let mut cfg = vec!["--moe-stream", "--cache-mb", "1", "--predict-prefetch"];
        cfg.extend_from_slice(extra);
        let counts = [("BMOE_TEST_RANK_COUNTS", "1")];
        // never waited for: a ranking is collected in time or counted late, never both
        let (steps, _, stderr) = trace_full_env(m, &cfg, &counts);
        let (ranked, collected, late) = rank_counts(&stderr);
        // layers 2.. of every decode, each ranked two layers early
        let most = steps.len() as u64 * (LAYERS as u64 - 2);
        assert!(
            ranked > 0 && ranked <= most,
            "{cfg:?}: {ranked} of {most}:\n{stderr}"
        );
        assert_eq!(collected + late, ranked, "{cfg:?}:\n{stderr}");
        // whatever was back in time, the result is the resident run's
        assert_identical(m, &[&cfg]);
        // waited for (the test knob): every ranking is collected, and the guesses are read
        let mut env = counts.to_vec();
        env.extend_from_slice(&RANK_WAIT);
        env.extend_from_slice(&SPEC_COUNTS);
        let (waited, stdout, stderr) = trace_full_env(m, &cfg, &env);
        assert_eq!(waited, steps, "{cfg:?}: waiting changed the output");
        let (ranked, collected, late) = rank_counts(&stderr);
        assert_eq!((collected, late), (ranked, 0), "{cfg:?}:\n{stderr}");
        if extra.is_empty() {
            // serially the guesses are read when issued
            let p = PerfReport::parse(&stdout)
                .moe_prefetch
                .expect("moe-prefetch line");
            assert!(p.prefetched > 0 && p.useful <= p.prefetched, "{stdout}");
        } else {
            // overlapped, a busy lane may complete none of what was issued
            checked_read_ahead(&cfg, &stdout, &stderr);
        }
    }
}

/// Recounts route-ahead's agreement from the committed routings a run logged under
/// `BMOE_TEST_RA_LOG=1`: (per (layer, n-th commit of that layer) the committed ids, percent of
/// slots whose committed id the router chose too).
fn recount(stderr: &str) -> (Vec<(u32, Vec<i32>)>, f64) {
    let ids = |v: &str| -> Vec<i32> { v.split(',').map(|x| x.parse().expect("id")).collect() };
    let (mut slots, mut hits) = (0usize, 0usize);
    let mut commits = Vec::new();
    for l in stderr
        .lines()
        .filter_map(|l| l.strip_prefix("bmoe: test: route-ahead "))
    {
        let f: Vec<&str> = l.split_whitespace().collect();
        let get = |k: &str| {
            f.iter()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {k} in {l}"))
        };
        let (router, committed) = (ids(get("router")), ids(get("committed")));
        assert_eq!(router.len(), committed.len(), "{l}");
        slots += router.len();
        hits += committed.iter().filter(|c| router.contains(c)).count();
        commits.push((get("layer").parse().expect("layer"), committed));
    }
    assert!(slots > 0, "nothing committed:\n{stderr}");
    (commits, 100.0 * hits as f64 / slots as f64)
}

#[test]
fn overlap_route_ahead_commits_what_the_serial_path_commits() {
    let m = deep();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let route = dir.path().join("route.csv");
    let route_s = route.to_str().expect("utf-8 path");
    let log = [("BMOE_TEST_RA_LOG", "1")];
    for cache in ["1", "3"] {
        let serial: Vec<&str> = vec!["--moe-stream", "--cache-mb", cache, "--route-ahead", "1"];
        let (want, want_out, want_err) = trace_full_env(m, &serial, &log);
        let want_line = route_ahead_line(&want_out);
        let (want_commits, want_pct) = recount(&want_err);
        assert!(
            (want_pct - want_line.3).abs() <= 0.05 + 1e-9,
            "serial: recount {want_pct:.2} vs line {}",
            want_line.3
        );
        for kind in KINDS {
            for lanes in ["1", "4"] {
                let mut cfg = serial.clone();
                cfg.extend_from_slice(&["--io-threads", lanes, "--route-trace", route_s]);
                cfg.extend_from_slice(kind);
                let (got, out, err) = trace_full_env(m, &cfg, &log);
                // same committed ids, same text: the early reads change only when bytes arrive
                assert_eq!(got, want, "{cfg:?} differs from the serial route-ahead run");
                let line = route_ahead_line(&out);
                assert_eq!(line, want_line, "{cfg:?}:\n{out}");
                let (commits, pct) = recount(&err);
                assert_eq!(commits, want_commits, "{cfg:?}: other routings committed");
                assert!(
                    (pct - line.3).abs() <= 0.05 + 1e-9,
                    "{cfg:?}: recount {pct:.2} vs line {}",
                    line.3
                );
                assert!(out.contains(" [route-ahead]"), "{cfg:?}:\n{out}");
                // what was loaded is what was committed: the route trace's decode routing of
                // each committed layer, in order, is the committed selection
                let rows: Vec<RouteRow> = RouteTraceReader::open(&route)
                    .expect("route trace parses")
                    .map(|r| r.expect("row"))
                    .collect();
                let mut traced: BTreeMap<(i64, u32), Vec<i32>> = BTreeMap::new();
                for r in rows
                    .iter()
                    .filter(|r| r.phase == PHASE_DECODE && r.layer >= 1)
                {
                    traced
                        .entry((r.step, r.layer))
                        .or_default()
                        .push(r.expert as i32);
                }
                let mut per_layer: BTreeMap<u32, Vec<Vec<i32>>> = BTreeMap::new();
                for ((_, layer), ids) in traced {
                    per_layer.entry(layer).or_default().push(ids);
                }
                let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
                for (layer, committed) in &commits {
                    let n = seen.entry(*layer).or_default();
                    let loaded = &per_layer[layer][*n];
                    *n += 1;
                    assert_eq!(loaded, committed, "{cfg:?}: layer {layer} loaded other ids");
                }
            }
        }
    }
}

#[test]
fn overlap_route_ahead_adopts_its_reads_and_measures_its_columns() {
    use bmoe_telemetry::metrics::MetricsFile;
    let m = deep();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let csv = dir.path().join("m.csv");
    let csv_s = csv.to_str().expect("utf-8 path");
    let base = ["--moe-stream", "--cache-mb", "3", "--route-ahead", "1"];
    let (want, _, _) = trace_full(m, &base);
    // the serial path reads the committed selection when it is issued: nothing to adopt
    let mut serial = base.to_vec();
    serial.extend_from_slice(&["--csv", csv_s]);
    trace_full(m, &serial);
    let f = MetricsFile::read(&csv).expect("metrics CSV parses");
    let sum = |f: &MetricsFile, pick: fn(&bmoe_telemetry::metrics::TokenRow) -> Option<f64>| {
        f.rows.iter().map(|r| pick(r).expect("column")).sum::<f64>()
    };
    assert_eq!(sum(&f, |r| r.adopt_ms), 0.0);
    assert!(sum(&f, |r| r.ra_issue_ms) > 0.0, "serial: no issue time");
    assert!(
        sum(&f, |r| r.ra_wd_ms) > 0.0,
        "serial: the watchdog never sampled"
    );
    for kind in KINDS {
        // the lane holds each unit it takes until the next load starts: that load meets its own
        // committed reads still queued, and must complete them rather than cancel them. A timed
        // pause (3 ms, then 20 ms) depended on a layer's compute time; on a loaded CI machine
        // every read could complete before its load came, and none was adopted
        let mut cfg = serial.clone();
        cfg.extend_from_slice(&["--io-threads", "1"]);
        cfg.extend_from_slice(kind);
        let (got, out, err) = trace_full_env(
            m,
            &cfg,
            &[("BMOE_TEST_SPEC_COUNTS", "1"), ("BMOE_TEST_SPEC_HOLD", "1")],
        );
        assert_eq!(got, want, "{cfg:?}: held early reads changed the output");
        let (queued, cancelled, adopted, completed) = spec_counts(&err);
        assert_eq!(cancelled, 0, "{cfg:?}: adopt mode cancelled:\n{err}");
        assert!(adopted > 0, "{cfg:?}: no load adopted its reads:\n{err}");
        assert!(completed > 0 && completed <= queued, "{cfg:?}:\n{err}");
        let f = MetricsFile::read(&csv).expect("metrics CSV parses");
        let n = f.rows.len() as f64;
        let adopt = sum(&f, |r| r.adopt_ms);
        assert!(adopt > 0.0, "{cfg:?}: adopt_ms never measured");
        // adoption is part of the loads' cache management
        assert!(adopt <= sum(&f, |r| r.mgmt_ms) + 1e-6, "{cfg:?}");
        assert!(sum(&f, |r| r.ra_issue_ms) > 0.0, "{cfg:?}: no issue time");
        let t = f.summaries.last().expect("trailer");
        let per_tok = t.get_f64("adopt_s/tok").expect("adopt_s/tok");
        assert!(
            (per_tok - adopt / 1e3 / n).abs() <= 0.0005 + 1e-9,
            "{cfg:?}: adopt_s/tok {per_tok} vs Σ adopt_ms {adopt} over {n} rows"
        );
        let p = PerfReport::parse(&out)
            .moe_prefetch
            .expect("moe-prefetch line");
        assert!(p.prefetched > 0 && p.useful <= p.prefetched, "{out}");
    }
}
