//! The diagnostic traces on real runs of a synthetic model: `--route-trace` read back through
//! `bmoe-telemetry`'s reader and checked against the metrics CSV of the same run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use bmoe_gguf::info::ModelInfo;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::trace::{
    ComputeRow, ComputeTraceReader, IoRow, IoTraceReader, PHASE_DECODE, PHASE_PREFILL, RouteRow,
    RouteTraceReader,
};

const MIB: f64 = 1024.0 * 1024.0;

struct Tiny {
    dir: tempfile::TempDir,
    path: PathBuf,
    info: ModelInfo,
}

fn tiny() -> &'static Tiny {
    static M: OnceLock<Tiny> = OnceLock::new();
    M.get_or_init(|| {
        // under the target dir, not /tmp: tmpfs refuses O_DIRECT
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let s = write_model(
            &SynthOptions::preset(Preset::Tiny),
            &dir.path().join("t.gguf"),
        )
        .expect("synthesise model");
        Tiny {
            path: s.paths[0].clone(),
            info: s.info,
            dir,
        }
    })
}

fn run(extra: &[&str]) -> Output {
    let m = tiny();
    Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(&m.path)
        .args([
            "-p",
            "Hello world, route traces",
            "-t",
            "2",
            "-c",
            "256",
            "-n",
            "10",
        ])
        .args(extra)
        .output()
        .expect("run bmoe-cli")
}

fn file(name: &str) -> PathBuf {
    tiny().dir.path().join(name)
}

fn arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn ok(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "bmoe-cli failed:\n{stderr}");
    stderr
}

#[test]
fn route_trace_agrees_with_the_model_and_the_metrics_csv() {
    let m = tiny();
    let (route, csv) = (file("route.csv"), file("route-metrics.csv"));
    // 2 MiB: a whole layer (1.6 MiB) fits, so the prompt is one prefill decode (a smaller
    // cache splits it: stream::prefill), and the 3.2 MiB of experts still evict
    ok(&run(&[
        "--moe-stream",
        "--cache-mb",
        "2",
        "--csv",
        arg(&csv),
        "--route-trace",
        arg(&route),
    ]));
    let mut reader = RouteTraceReader::open(&route).expect("route trace parses");
    let info = reader.info().clone();
    assert!(reader.has_column("dropped"));
    let rows: Vec<RouteRow> = reader.by_ref().map(|r| r.expect("row parses")).collect();
    assert!(reader.truncated().is_none());
    let metrics = MetricsFile::read(&csv).expect("metrics CSV parses");

    // preamble: the model file's facts
    let k = u64::from(m.info.n_expert_used);
    assert_eq!(info.n_expert_used, Some(k));
    assert_eq!(info.n_layer, Some(u64::from(m.info.n_layer)));
    assert_eq!(info.layers.len(), m.info.layers.len());
    for (got, want) in info.layers.iter().zip(&m.info.layers) {
        assert_eq!(got.layer, u64::from(want.layer));
        assert_eq!(got.expert_bytes, want.expert_bytes);
        assert_eq!(got.dense_bytes, want.dense_bytes);
    }
    assert_eq!(metrics.info.extra.get("route_trace"), Some("1"));

    // every routed (phase, step, layer) cell has exactly n_expert_used rows, slots 0..k
    let mut cells: BTreeMap<(u8, i64, u32), Vec<&RouteRow>> = BTreeMap::new();
    for r in &rows {
        cells.entry((r.phase, r.step, r.layer)).or_default().push(r);
    }
    for (key, cell) in &cells {
        let slots: Vec<u32> = cell.iter().map(|r| r.slot).collect();
        assert_eq!(slots, (0..k as u32).collect::<Vec<_>>(), "cell {key:?}");
        let experts: BTreeSet<u32> = cell.iter().map(|r| r.expert).collect();
        assert_eq!(experts.len() as u64, k, "distinct experts in cell {key:?}");
        // qwen3moe normalises its top-k weights: the applied weights of a cell sum to 1
        let w: f64 = cell.iter().map(|r| r.weight).sum();
        assert!((w - 1.0).abs() < 1e-4, "cell {key:?} weights sum to {w}");
        assert!(
            cell.iter()
                .all(|r| r.weight > 0.0 && r.dropped == Some(false))
        );
    }

    // one axis: prefill positions 0..n_prompt, then one decode per generated token
    let n_prompt = metrics.summaries.last().and_then(|t| t.get_u64("n_prompt"));
    let n_prompt = n_prompt.expect("n_prompt in the trailer") as i64;
    let n_gen = metrics.rows.len() as i64;
    let last = m.info.n_layer - 1;
    for layer in 0..m.info.n_layer {
        let prefill: Vec<i64> = cells
            .keys()
            .filter(|c| c.0 == PHASE_PREFILL && c.2 == layer)
            .map(|c| c.1)
            .collect();
        let want: Vec<i64> = if layer == last {
            // llama.cpp keeps only the output token before the last layer's FFN
            vec![n_prompt - 1]
        } else {
            (0..n_prompt).collect()
        };
        assert_eq!(prefill, want, "prefill steps of layer {layer}");
        let decode: Vec<i64> = cells
            .keys()
            .filter(|c| c.0 == PHASE_DECODE && c.2 == layer)
            .map(|c| c.1)
            .collect();
        assert_eq!(decode, (n_prompt..n_prompt + n_gen).collect::<Vec<_>>());
    }

    // bytes: per decode, Σ expert_bytes = the CSV row's read_bytes (O_DIRECT windows included)
    for (i, row) in metrics.rows.iter().enumerate() {
        let step = n_prompt + i as i64;
        let traced: u64 = rows
            .iter()
            .filter(|r| r.phase == PHASE_DECODE && r.step == step)
            .map(|r| r.expert_bytes)
            .sum();
        assert_eq!(Some(traced), row.read_bytes, "decode step {step}");
        // one token routes distinct experts: every miss is a read, every hit is free
        for r in rows
            .iter()
            .filter(|r| r.phase == PHASE_DECODE && r.step == step)
        {
            assert_eq!(r.residency == 0, r.expert_bytes > 0, "{r:?}");
        }
    }
    // prefill: a batch reads each missed expert once, on its first routing
    let prefill: u64 = rows
        .iter()
        .filter(|r| r.phase == PHASE_PREFILL)
        .map(|r| r.expert_bytes)
        .sum();
    let t = metrics.summaries.last().expect("# summary trailer");
    let mib = t.get_f64("prefill_read_mib").expect("prefill_read_mib");
    assert!((prefill as f64 / MIB - mib).abs() <= 0.05 + 1e-9);
    assert!(prefill > 0);

    // residency agrees with the CSV hit rate: the cache counts one lookup per distinct expert
    // of a load (a prefill batch routing an expert twice looks it up once)
    let mut first = BTreeSet::new();
    let (mut lookups, mut hits) = (0u64, 0u64);
    for r in &rows {
        let step = if r.phase == PHASE_DECODE { r.step } else { -1 };
        if first.insert((r.phase, step, r.layer, r.expert)) {
            lookups += 1;
            hits += u64::from(r.residency == 1);
        }
    }
    let hit_pct = metrics
        .rows
        .last()
        .and_then(|r| r.cache_hit_pct)
        .expect("hit %");
    let traced_pct = 100.0 * hits as f64 / lookups as f64;
    assert!(
        (hit_pct - traced_pct).abs() <= 0.005 + 1e-9,
        "CSV says {hit_pct}% hits, the trace {traced_pct}%"
    );
}

#[test]
fn io_trace_accounts_for_every_byte_the_route_trace_and_csv_report() {
    let (route, io, csv) = (file("io-route.csv"), file("io.csv"), file("io-metrics.csv"));
    ok(&run(&[
        "--moe-stream",
        "--cache-mb",
        "1",
        "--io-threads",
        "3",
        "--csv",
        arg(&csv),
        "--route-trace",
        arg(&route),
        "--io-trace",
        arg(&io),
    ]));
    let routes: Vec<RouteRow> = RouteTraceReader::open(&route)
        .expect("route trace parses")
        .map(|r| r.expect("row"))
        .collect();
    let mut reader = IoTraceReader::open(&io).expect("io trace parses");
    let info = reader.info().clone();
    let ios: Vec<IoRow> = reader.by_ref().map(|r| r.expect("row")).collect();
    assert!(reader.truncated().is_none());
    let metrics = MetricsFile::read(&csv).expect("metrics CSV parses");
    assert_eq!(metrics.info.extra.get("io_trace"), Some("1"));
    assert_eq!(info.io_threads, metrics.info.io_threads);
    assert_eq!(info.o_direct, metrics.info.o_direct);
    assert!(!ios.is_empty());

    // Σ io read_bytes = Σ route expert_bytes = Σ CSV read_bytes (+ prefill)
    let io_sum: u64 = ios.iter().map(|r| r.read_bytes).sum();
    let route_sum: u64 = routes.iter().map(|r| r.expert_bytes).sum();
    assert_eq!(io_sum, route_sum);
    let decode_io: u64 = ios
        .iter()
        .filter(|r| r.phase == PHASE_DECODE)
        .map(|r| r.read_bytes)
        .sum();
    let csv_sum: u64 = metrics.rows.iter().map(|r| r.read_bytes.unwrap_or(0)).sum();
    assert_eq!(decode_io, csv_sum);
    // the aligned window covers the request; the waste is under two alignment blocks
    let direct = info.o_direct == Some(true);
    for r in &ios {
        assert!(r.read_bytes >= r.req_bytes, "{r:?}");
        assert!(r.read_bytes - r.req_bytes < 2 * 4096, "{r:?}");
        assert!(!direct || r.offset % 4096 == 0, "{r:?}");
        assert!(r.lane < 3 && !r.spec && r.latency_ns > 0, "{r:?}");
    }
    let waste: u64 = ios.iter().map(|r| r.read_bytes - r.req_bytes).sum();
    let req: u64 = ios.iter().map(|r| r.req_bytes).sum();
    assert_eq!(req + waste, io_sum);

    // each decode miss is one read per projection of that expert, summing to its bytes
    let n_proj = tiny().info.layers[0].expert_tensors.len();
    let mut per_expert: BTreeMap<(i64, u32, u32), (usize, u64)> = BTreeMap::new();
    for r in ios.iter().filter(|r| r.phase == PHASE_DECODE) {
        let e = per_expert.entry((r.step, r.layer, r.expert)).or_default();
        e.0 += 1;
        e.1 += r.read_bytes;
    }
    let misses: BTreeMap<(i64, u32, u32), (usize, u64)> = routes
        .iter()
        .filter(|r| r.phase == PHASE_DECODE && r.expert_bytes > 0)
        .map(|r| ((r.step, r.layer, r.expert), (n_proj, r.expert_bytes)))
        .collect();
    assert_eq!(per_expert, misses);
}

#[test]
fn traces_without_streaming_warn_and_write_nothing() {
    let route = file("plain-route.csv");
    let csv = file("plain-metrics.csv");
    let io = file("plain-io.csv");
    let stderr = ok(&run(&[
        "--csv",
        arg(&csv),
        "--route-trace",
        arg(&route),
        "--io-trace",
        arg(&io),
    ]));
    for flag in ["--route-trace", "--io-trace"] {
        assert!(
            stderr.contains(&format!("{flag} needs --moe-stream")),
            "no warning for {flag}:\n{stderr}"
        );
    }
    assert!(!route.exists() && !io.exists());
    assert_eq!(metrics_io_key(&csv), None);
    let metrics = MetricsFile::read(&csv).expect("metrics CSV parses");
    assert_eq!(metrics.info.extra.get("route_trace"), None);
}

fn metrics_io_key(csv: &Path) -> Option<String> {
    let m = MetricsFile::read(csv).expect("metrics CSV parses");
    m.info.extra.get("io_trace").map(str::to_string)
}

#[test]
fn route_trace_into_a_missing_folder_is_a_clear_error() {
    let out = run(&[
        "--moe-stream",
        "--route-trace",
        "/nonexistent-bmoe-dir/route.csv",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent-bmoe-dir/route.csv"),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
}

fn compute_rows(path: &Path) -> Vec<ComputeRow> {
    let mut r = ComputeTraceReader::open(path).expect("compute trace parses");
    let rows: Vec<ComputeRow> = r.by_ref().map(|x| x.expect("row")).collect();
    assert!(r.truncated().is_none());
    rows
}

/// Per decode step, Σ wall_ns of the trace against the CSV row's wall_ms (written to the µs).
/// Layer mode: the segments partition the token's bracket (`pre` opens at its start, `post`
/// closes at its end, the throttled dense-residency probe included), so they sum to it exactly,
/// however the scheduler treated the run. Node mode: the rows end at the last node, so the sum
/// can only fall short of the wall, by llama.cpp's tail after the graph and the probe (in
/// `mgmt_ms`): within 10 % of the rest, or 2 ms on a step of a millisecond or two that lost a
/// scheduler slice in that tail on a loaded machine; the run's total keeps the 10 %.
fn sums_match_decode_wall(rows: &[ComputeRow], metrics: &MetricsFile, n_prompt: i64, layers: bool) {
    const ROUNDING_NS: f64 = 1_000.0;
    const SLICE_NS: f64 = 2e6;
    assert!(!metrics.rows.is_empty());
    let (mut all_traced, mut all_lo) = (0.0, 0.0);
    for (i, m) in metrics.rows.iter().enumerate() {
        let step = n_prompt + i as i64;
        let traced: u64 = rows
            .iter()
            .filter(|r| r.phase == PHASE_DECODE && r.step == step)
            .map(|r| r.wall_ns)
            .sum();
        let wall = m.wall_ms.expect("wall_ms") * 1e6;
        let mgmt = m.mgmt_ms.unwrap_or(0.0) * 1e6;
        let traced = traced as f64;
        let what =
            format!("step {step}: traced {traced} ns vs decode wall {wall} ns (mgmt {mgmt} ns)");
        assert!(traced <= wall + ROUNDING_NS, "{what}");
        if layers {
            assert!(traced >= wall - ROUNDING_NS, "{what}");
        } else {
            let lo = wall - mgmt;
            assert!(traced >= (0.9 * lo).min(lo - SLICE_NS), "{what}");
        }
        (all_traced, all_lo) = (all_traced + traced, all_lo + wall - mgmt);
    }
    assert!(
        all_traced >= 0.9 * all_lo,
        "all steps: traced {all_traced} ns vs decode wall − mgmt {all_lo} ns"
    );
}

#[test]
fn compute_trace_times_every_node_without_streaming() {
    let (ct, csv) = (file("ct.csv"), file("ct-metrics.csv"));
    ok(&run(&["--csv", arg(&csv), "--compute-trace", arg(&ct)]));
    let rows = compute_rows(&ct);
    let metrics = MetricsFile::read(&csv).expect("metrics CSV parses");
    assert_eq!(metrics.info.extra.get("compute_trace"), Some("1"));
    assert_eq!(metrics.info.compute_trace_layers, Some(0));
    let n_prompt = metrics.summaries.last().and_then(|t| t.get_u64("n_prompt"));
    let n_prompt = n_prompt.expect("n_prompt") as i64;
    // one decode per step; seq counts the nodes 0.. in execution order
    let mut by_step: BTreeMap<(u8, i64), Vec<&ComputeRow>> = BTreeMap::new();
    for r in &rows {
        by_step.entry((r.phase, r.step)).or_default().push(r);
    }
    assert_eq!(
        by_step.len(),
        1 + metrics.rows.len(),
        "prefill + each decode"
    );
    assert!(by_step.contains_key(&(PHASE_PREFILL, n_prompt - 1)));
    for (key, nodes) in &by_step {
        let seq: Vec<u32> = nodes.iter().map(|r| r.seq).collect();
        assert_eq!(seq, (0..nodes.len() as u32).collect::<Vec<_>>(), "{key:?}");
        assert!(
            nodes.iter().any(|r| r.op == "MUL_MAT_ID"),
            "{key:?} has expert matmuls"
        );
        for r in nodes {
            assert!(!r.op.is_empty() && !r.is_layer_segment());
            let suffix = r
                .name
                .rsplit_once('-')
                .and_then(|(_, d)| d.parse::<i32>().ok());
            assert_eq!(r.layer, suffix.unwrap_or(-1), "{r:?}");
        }
    }
    sums_match_decode_wall(&rows, &metrics, n_prompt, false);
}

#[test]
fn compute_trace_layers_gives_one_row_per_segment_while_streaming() {
    let (ct, csv) = (file("ctl.csv"), file("ctl-metrics.csv"));
    // 2 MiB: one prefill decode (a cache below a whole layer splits the prompt)
    ok(&run(&[
        "--moe-stream",
        "--cache-mb",
        "2",
        "--csv",
        arg(&csv),
        "--compute-trace-layers",
        arg(&ct),
    ]));
    let rows = compute_rows(&ct);
    let metrics = MetricsFile::read(&csv).expect("metrics CSV parses");
    assert_eq!(metrics.info.compute_trace_layers, Some(1));
    let n_prompt = metrics.summaries.last().and_then(|t| t.get_u64("n_prompt"));
    let n_prompt = n_prompt.expect("n_prompt") as i64;
    let n_layer = tiny().info.n_layer as i32;
    let mut by_step: BTreeMap<(u8, i64), Vec<&ComputeRow>> = BTreeMap::new();
    for r in &rows {
        assert!(r.is_layer_segment(), "{r:?}");
        by_step.entry((r.phase, r.step)).or_default().push(r);
    }
    assert_eq!(by_step.len(), 1 + metrics.rows.len());
    for (key, segs) in &by_step {
        let names: Vec<&str> = segs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names.first(), Some(&"pre"), "{key:?}: {names:?}");
        assert_eq!(names.last(), Some(&"post"), "{key:?}: {names:?}");
        // blk.<il> rows in layer order, every layer present (routing nodes may split one)
        let layers: Vec<i32> = segs[1..segs.len() - 1].iter().map(|r| r.layer).collect();
        assert!(
            layers.windows(2).all(|w| w[0] <= w[1]),
            "{key:?}: {names:?}"
        );
        let distinct: BTreeSet<i32> = layers.iter().copied().collect();
        assert_eq!(distinct, (0..n_layer).collect(), "{key:?}: {names:?}");
        for r in &segs[1..segs.len() - 1] {
            assert_eq!(r.name, format!("blk.{}", r.layer));
        }
    }
    sums_match_decode_wall(&rows, &metrics, n_prompt, true);
}

/// The io trace's `step` is the position of the token whose routing asked for the read (docs/
/// telemetry.md), so the two traces of one run join on `(turn, phase, step)`: each read meets
/// the route row that carries its bytes — in one prefill batch, in ubatches, in decode, read
/// serially or overlapped. (Before, a prefill's reads were all stamped with its last position,
/// which the route trace gives only to the last token's routings.)
#[test]
fn io_trace_joins_the_route_trace_on_turn_phase_step() {
    type Key = (u32, u8, i64, u32, u32);
    for (name, extra) in [
        // a 1 MiB cache cuts the prompt into decodes of 2 tokens
        ("serial", &["--cache-mb", "1"][..]),
        // cache off: one decode in ubatches of 3, each re-reading the experts the layer before
        // evicted
        ("ubatch", &["--cache-mb", "0", "--ubatch", "3"][..]),
        (
            "overlap",
            &["--cache-mb", "1", "--overlap", "--overlap-kind", "staged"][..],
        ),
    ] {
        let route = file(&format!("join-{name}-route.csv"));
        let io = file(&format!("join-{name}-io.csv"));
        let mut args = vec!["--moe-stream", "--ignore-eos"];
        args.extend_from_slice(extra);
        args.extend(["--route-trace", arg(&route), "--io-trace", arg(&io)]);
        ok(&run(&args));
        let routes: Vec<RouteRow> = RouteTraceReader::open(&route)
            .expect("route trace parses")
            .map(|r| r.expect("row"))
            .collect();
        let ios: Vec<IoRow> = IoTraceReader::open(&io)
            .expect("io trace parses")
            .map(|r| r.expect("row"))
            .collect();
        assert!(ios.iter().any(|r| r.phase == PHASE_PREFILL), "{name}");
        assert!(ios.iter().any(|r| r.phase == PHASE_DECODE), "{name}");

        // the join: every (turn, phase, step) of the io trace is one of the route trace's
        let steps: BTreeSet<(u32, u8, i64)> =
            routes.iter().map(|r| (r.turn, r.phase, r.step)).collect();
        for r in &ios {
            assert!(steps.contains(&(r.turn, r.phase, r.step)), "{name}: {r:?}");
        }
        // and on (…, layer, expert) it meets exactly the rows that carry the bytes it read
        let mut carried: BTreeMap<Key, u64> = BTreeMap::new();
        for r in routes.iter().filter(|r| r.expert_bytes > 0) {
            *carried
                .entry((r.turn, r.phase, r.step, r.layer, r.expert))
                .or_default() += r.expert_bytes;
        }
        let mut read: BTreeMap<Key, u64> = BTreeMap::new();
        for r in &ios {
            *read
                .entry((r.turn, r.phase, r.step, r.layer, r.expert))
                .or_default() += r.read_bytes;
        }
        assert_eq!(read, carried, "{name}");
        // a prefill's reads sit at the positions that asked for them, not at one stamp
        let prefill: BTreeSet<i64> = ios
            .iter()
            .filter(|r| r.phase == PHASE_PREFILL)
            .map(|r| r.step)
            .collect();
        assert!(
            prefill.len() > 1 && prefill.contains(&0),
            "{name}: {prefill:?}"
        );
        // in ubatches too, the first layer routes every prompt position once per slot
        let first_layer: Vec<i64> = routes
            .iter()
            .filter(|r| r.phase == PHASE_PREFILL && r.layer == 0 && r.slot == 0)
            .map(|r| r.step)
            .collect();
        let n_prompt = first_layer.len() as i64;
        assert!(n_prompt > 3, "{name}: a prompt longer than one ubatch");
        assert_eq!(first_layer, (0..n_prompt).collect::<Vec<_>>(), "{name}");
    }
}
