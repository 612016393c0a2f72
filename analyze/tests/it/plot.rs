//! `--plot OUT.svg|OUT.png`: the picture is written, is well-formed SVG naming its series (or a
//! PNG of the right size with drawn text and shapes), leaves the text report unchanged, and bad
//! paths give a clear error. Inputs are written at test time.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Two layers, eight experts, three decode steps with hits and misses.
const ROUTE: &str = "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=0\n# layer=1 expert_bytes=1048576 dense_bytes=0\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,1,5,0,0,1,0.7,0,1048576\n0,1,5,0,1,2,0.3,0,1048576\n0,1,5,1,0,3,0.6,0,1048576\n0,1,5,1,1,4,0.4,0,1048576\n\
0,1,6,0,0,1,0.8,1,0\n0,1,6,0,1,5,0.2,0,1048576\n0,1,6,1,0,3,0.5,1,0\n0,1,6,1,1,4,0.5,1,0\n\
0,1,7,0,0,2,0.6,1,0\n0,1,7,0,1,1,0.4,1,0\n0,1,7,1,0,6,0.9,0,1048576\n0,1,7,1,1,3,0.1,1,0\n";

/// Tags balance: every opened element is closed in order (enough to catch truncation and
/// broken nesting without an XML parser).
fn assert_well_formed_svg(svg: &str) {
    let start = svg.find("<svg").expect("an <svg> element");
    assert!(svg[..start].trim().is_empty() || svg[..start].trim_start().starts_with("<?xml"));
    assert!(svg.trim_end().ends_with("</svg>"), "ends with </svg>");
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = &svg[start..];
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').expect("tag closed") + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop(),
                Some(name.trim()),
                "close tag </{name}> matches"
            );
        } else {
            stack.push(tag.split_whitespace().next().expect("tag name"));
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
}

/// The trimmed contents of every `<text>` element.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            let raw = body[..body.find("</text>")?].trim();
            Some(
                raw.replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&amp;", "&"),
            )
        })
        .collect()
}

/// A decoded PNG: width, height and RGB bytes.
fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let bytes = std::fs::read(path).expect("png written");
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG header");
    let mut px = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut px).expect("PNG data decodes");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    px.truncate(info.buffer_size());
    (info.width, info.height, px)
}

/// The PNG is 1000x640 and not blank: a fair share of non-white pixels in several colours, and
/// dark text pixels in the title band and in the left label area.
fn assert_drawn_png(path: &Path) {
    let (w, h, px) = decode_png(path);
    assert_eq!((w, h), (1000, 640));
    let pixel = |x: u32, y: u32| {
        let i = ((y * w + x) * 3) as usize;
        (px[i], px[i + 1], px[i + 2])
    };
    let all: Vec<(u8, u8, u8)> = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .map(|(x, y)| pixel(x, y))
        .collect();
    let inked = all.iter().filter(|&&p| p != (255, 255, 255)).count();
    assert!(
        inked > (w * h / 50) as usize,
        "only {inked} non-white pixels"
    );
    let colours: std::collections::HashSet<(u8, u8, u8)> = all.iter().copied().collect();
    assert!(colours.len() >= 8, "{} colours", colours.len());
    let dark = |x0: u32, x1: u32, y0: u32, y1: u32| {
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| (x, y)))
            .filter(|&(x, y)| {
                let (r, g, b) = pixel(x, y);
                r < 90 && g < 90 && b < 90
            })
            .count()
    };
    assert!(dark(200, 800, 0, 40) > 150, "title text drawn");
    assert!(dark(0, 120, 60, 580) > 60, "y-axis labels drawn");
}

/// Run `cmd` on `input` (written to a file named `input_name`, inserted after the subcommand,
/// then `args`) without and with `--plot`; stdout must not change. An SVG must be well-formed
/// and have every `must_contain` entry: `=x` a text exactly `x`, `<tag` raw markup, otherwise a
/// substring of some text. A PNG must decode as a drawn 1000x640 picture.
fn plot_input(
    cmd: &str,
    input_name: &str,
    input: &str,
    args: &[&str],
    file: &str,
    must_contain: &[&str],
) {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join(input_name);
    std::fs::write(&trace, input).expect("write input");
    let trace = trace.display().to_string();
    let out_path = d.path().join(file);
    let out_arg = out_path.display().to_string();
    let mut with_plot: Vec<&str> = vec![cmd, &trace];
    with_plot.extend_from_slice(args);
    let plain = run(&with_plot);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    with_plot.extend_from_slice(&["--plot", &out_arg]);
    let out = run(&with_plot);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout, plain.stdout, "--plot leaves stdout unchanged");
    assert!(text(&out.stderr).contains(&format!("plot -> {out_arg}")));
    if file.to_ascii_lowercase().ends_with(".png") {
        assert_drawn_png(&out_path);
        return;
    }
    let svg = std::fs::read_to_string(&out_path).expect("plot written");
    assert_well_formed_svg(&svg);
    let labels = texts(&svg);
    for s in must_contain {
        let found = match s.strip_prefix('=') {
            Some(exact) => labels.iter().any(|l| l == exact),
            None if s.starts_with('<') => svg.contains(s),
            None => labels.iter().any(|l| l.contains(s)),
        };
        assert!(found, "{file} has {s:?} (texts: {labels:?})");
    }
}

/// [`plot_input`] on the toy route trace.
fn plot_case(args: &[&str], file: &str, must_contain: &[&str]) {
    plot_input(args[0], "t.csv", ROUTE, &args[1..], file, must_contain);
}

#[test]
fn replay_plot_has_a_line_per_policy_with_belady() {
    plot_case(
        &["replay", "--budgets", "1,2,4"],
        "replay.svg",
        &[
            "Decode hit rate vs cache budget - toy.gguf",
            "cache budget (MiB)",
            "decode hit rate (%)",
            "=belady (ceiling at equal bytes held)",
            "=lru",
            "=lfu",
            "=random",
            "=layer (holds the last batch per layer)",
            "=layerlfu (holds the last batch per layer)",
            "<polyline",
        ],
    );
}

#[test]
fn route_hot_reuse_and_matrix_plots() {
    plot_case(
        &["route", "--view", "hot"],
        "hot.svg",
        &["Hot experts per layer", "expert id", "=layer", "hottest ("],
    );
    plot_case(
        &["route", "--view", "reuse"],
        "reuse.svg",
        &[
            "Reuse distance per (layer, expert) - 6 reuses",
            "share of reuses (%)",
            "all layers pooled",
        ],
    );
    plot_case(
        &["route", "--view", "matrix"],
        "matrix.svg",
        &["Step x layer top expert", "=step", "slot-0 expert id 7"],
    );
    plot_case(
        &["route", "--view", "matrix", "--cells", "hit"],
        "hit.svg",
        &[
            "Step x layer cache hits",
            "=100% (all hits)",
            "=0% (all read from flash)",
        ],
    );
}

#[test]
fn bad_plot_paths_and_views_fail_clearly() {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("t.csv");
    std::fs::write(&trace, ROUTE).expect("write trace");
    let trace = trace.display().to_string();
    let missing_dir = d.path().join("no-such-dir").join("p.svg");
    let missing = missing_dir.display().to_string();
    let out = run(&["replay", &trace, "--budgets", "1", "--plot", &missing]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("--plot {missing}: cannot write the plot")),
        "{err}"
    );
    assert!(
        err.contains("\nhint: check that the directory exists"),
        "{err}"
    );
    assert!(!Path::new(&missing).exists());

    let jpg = d.path().join("p.jpg").display().to_string();
    let out = run(&["route", &trace, "--view", "hot", "--plot", &jpg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "rejected before any output");
    let err = text(&out.stderr);
    assert!(
        err.contains("unknown plot format (the file name must end in .svg or .png)"),
        "{err}"
    );
    assert!(
        err.contains("hint: name the output like `--plot out.svg`"),
        "{err}"
    );
    assert!(!Path::new(&jpg).exists());

    let svg = d.path().join("p.svg").display().to_string();
    let out = run(&["route", &trace, "--view", "cache", "--plot", &svg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("view `cache` has no plot"));
    assert!(!Path::new(&svg).exists());
}

#[test]
fn every_route_and_replay_plot_renders_as_png() {
    plot_case(&["replay", "--budgets", "1,2,4"], "replay.png", &[]);
    plot_case(&["route", "--view", "hot"], "hot.png", &[]);
    plot_case(&["route", "--view", "reuse"], "reuse.png", &[]);
    plot_case(&["route", "--view", "matrix"], "matrix.png", &[]);
    plot_case(
        &["route", "--view", "matrix", "--cells", "hit"],
        "hit.PNG",
        &[],
    );
}

/// Two decode steps of three ops (MUL_MAT_ID 2.5 ms, MUL_MAT 1 ms, ADD 0.1 ms per token).
const COMPUTE: &str = "# compute_trace v1\n\
# model=/m/toy.gguf arch=toy n_layer=2 n_threads=4 io_threads=2 o_direct=1 overlap=0\n\
turn,phase,step,seq,layer,op,name,wall_ns,majflt\n\
0,0,0,0,0,MUL_MAT_ID,ffn_moe-0,9000000,0\n\
0,1,1,0,0,MUL_MAT_ID,ffn_moe-0,3000000,2\n0,1,1,1,0,MUL_MAT,Qcur-0,1000000,0\n0,1,1,2,0,ADD,add-0,100000,0\n\
0,1,2,0,0,MUL_MAT_ID,ffn_moe-0,2000000,0\n0,1,2,1,0,MUL_MAT,Qcur-0,1000000,0\n0,1,2,2,0,ADD,add-0,100000,0\n";

/// The `op ms/token share% ...` lines of the compute text report as (op, "share% (ms ms)").
fn op_labels(report: &str) -> Vec<(String, String)> {
    report
        .lines()
        .skip_while(|l| !l.starts_with("op "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t[0].to_string(), format!("{} ({} ms)", t[2], t[1]))
        })
        .collect()
}

#[test]
fn compute_plot_shows_each_op_share_as_the_text_reports_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("ct.csv");
    std::fs::write(&trace, COMPUTE).expect("write");
    let report = text(&run(&["compute", trace.to_str().expect("path")]).stdout);
    let ops = op_labels(&report);
    assert_eq!(ops.len(), 3, "{report}");
    let mut want: Vec<String> = vec![
        "Compute share by op - toy.gguf (3.60 ms/token measured)".into(),
        "share of measured compute time (%)".into(),
        "=op".into(),
    ];
    for (op, label) in &ops {
        want.push(format!("={op}"));
        want.push(format!("={label}"));
    }
    assert!(want.contains(&"=69.4% (2.50 ms)".to_string()), "{want:?}");
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    plot_input("compute", "ct.csv", COMPUTE, &[], "compute.svg", &want);
    plot_input("compute", "ct.csv", COMPUTE, &[], "compute.png", &[]);
    // --top 2: ADD is folded into one `other ops` bar with the remaining share.
    plot_input(
        "compute",
        "ct.csv",
        COMPUTE,
        &["--top", "2"],
        "top2.svg",
        &["=MUL_MAT_ID", "=MUL_MAT", "=other ops", "=2.8% (0.10 ms)"],
    );
}

#[test]
fn compute_plot_of_a_layer_trace_has_one_bar_per_segment() {
    let layers = "# compute_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_threads=4\n\
turn,phase,step,seq,layer,op,name,wall_ns,majflt\n\
0,1,1,0,-1,LAYER,pre,1000000,0\n0,1,1,1,0,LAYER,blk.0,3000000,0\n0,1,1,2,1,LAYER,blk.1,5000000,0\n0,1,1,3,-1,LAYER,post,1000000,0\n";
    plot_input(
        "compute",
        "cl.csv",
        layers,
        &[],
        "layers.svg",
        &[
            "Compute share by layer segment - toy.gguf (10.00 ms/token measured)",
            "=pre",
            "=blk.0",
            "=blk.1",
            "=post",
            "=50.0% (5.00 ms)",
        ],
    );
}

/// Ten decode reads on two lanes (100..1000 µs), plus one prefill read the report ignores.
fn io_trace() -> String {
    let mut t = String::from(
        "# io_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_threads=4 io_threads=2 o_direct=1 overlap=0\n\
turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns\n\
0,0,0,0,1,0,0,0,0,131072,131072,99000000\n",
    );
    for i in 1..=10u64 {
        t.push_str(&format!(
            "0,1,{},0,{i},0,{},0,{},131072,131072,{}\n",
            1 + i / 5,
            i % 2,
            i * 131072,
            i * 100_000
        ));
    }
    t
}

#[test]
fn io_plot_is_a_latency_cdf_marked_with_the_reports_percentiles() {
    let trace = io_trace();
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("io.csv");
    std::fs::write(&p, &trace).expect("write");
    let report = text(&run(&["io", p.to_str().expect("path")]).stdout);
    let pct = |label: &str| -> String {
        let line = report
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("{label} in {report}"));
        format!(
            "={label} {} us",
            line.split_whitespace().nth(1).expect("value")
        )
    };
    let (p50, p90, p99) = (pct("p50"), pct("p90"), pct("p99"));
    assert_eq!(
        p50, "=p50 600.0 us",
        "hand-worked: nearest-floor rank of 10 reads"
    );
    plot_input(
        "io",
        "io.csv",
        &trace,
        &[],
        "io.svg",
        &[
            "Per-read latency CDF - toy.gguf",
            "read latency (us, log scale)",
            "reads at or below (%)",
            "=all lanes (10 reads)",
            "=lane 0 (5 reads)",
            "=lane 1 (5 reads)",
            &p50,
            &p90,
            &p99,
            "<polyline",
        ],
    );
    plot_input("io", "io.csv", &trace, &[], "io.png", &[]);
}

const METRICS: &str = "# bmoe_metrics v2\n# model=/m/toy.gguf arch=toy threads=4\n# io_threads=2 overlap=0\n\
step,steps,wall_ms,io_ms,compute_ms,stall_ms,mgmt_ms,cpu_ms\n\
1,3,100.000,40.000,50.000,0.000,10.000,160.000\n\
2,3,200.000,150.000,40.000,0.000,10.000,200.000\n\
3,3,80.000,20.000,55.000,0.000,5.000,240.000\n";

#[test]
fn metrics_plot_stacks_the_attribution_bars_per_token() {
    plot_input(
        "metrics",
        "m.csv",
        METRICS,
        &[],
        "tokens.svg",
        &[
            "Per-token time breakdown - toy.gguf (3 tokens)",
            "=compute (cpu_ms / 4 threads)",
            "=flash wait (io_ms, serial)",
            "=cache mgmt (mgmt_ms)",
            "=unattributed (rest of the wall, >= 0)",
            "=wall_ms (token wall time)",
            "=ms per token",
        ],
    );
    plot_input(
        "metrics",
        "m.csv",
        METRICS,
        &["--trim", "1"],
        "tokens.png",
        &[],
    );
}

#[test]
fn metrics_plot_needs_exactly_one_file() {
    let d = tempfile::tempdir().expect("tempdir");
    let a = d.path().join("a.csv");
    std::fs::write(&a, METRICS).expect("write");
    let a = a.display().to_string();
    let out_svg = d.path().join("m.svg").display().to_string();
    let dir = d.path().display().to_string();
    for args in [
        vec!["metrics", &a, &a, "--plot", &out_svg],
        vec!["metrics", &dir, "--plot", &out_svg],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty());
        let err = text(&out.stderr);
        assert!(err.contains(&format!("metrics --plot {out_svg}")), "{err}");
        assert!(
            err.contains("hint: pass exactly one metrics CSV file"),
            "{err}"
        );
        assert!(!Path::new(&out_svg).exists());
    }
}

#[test]
fn a_cut_short_last_line_is_noted_once_and_left_out() {
    // A killed writer leaves a last line without its line end: the report and the plot use the
    // rows before it, and stderr says so once (not once per reader).
    let cut = format!("{}0,1,9,0,3,0,1,0,42", io_trace());
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("io.csv");
    std::fs::write(&p, &cut).expect("write");
    let png = d.path().join("io.png");
    let p = p.to_str().expect("path");
    let out = run(&["io", p, "--plot", png.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.matches("has no line end").count(), 1, "{err}");
    assert!(
        err.contains(&format!("note: {p}: line 15 has no line end")),
        "{err}"
    );
    let whole = d.path().join("whole.csv");
    std::fs::write(&whole, io_trace()).expect("write");
    let full = run(&["io", whole.to_str().expect("path")]);
    let strip = |b: &[u8]| text(b).lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(
        strip(&out.stdout),
        strip(&full.stdout),
        "same report as without the cut line"
    );
    assert_drawn_png(&png);
}

/// `<workspace>/../shared` (or `BMOE_SHARED`) when it holds `rel`.
fn shared_file(rel: &str) -> Option<std::path::PathBuf> {
    let root = std::env::var_os("BMOE_SHARED")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let p = root.join(rel);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("SKIP: {} not found (set BMOE_SHARED)", p.display());
        None
    }
}

#[test]
fn drop_plot_of_the_toy_trace_names_its_series() {
    plot_input(
        "drop",
        "t.csv",
        ROUTE,
        &[],
        "drop.svg",
        &[
            "Expert dropping: flash saved vs weight mass lost - t.csv (k=2)",
            "decode: 12 routed, 50.0% misses",
            "router weight mass lost (%)",
            "flash bytes saved (% of miss bytes)",
            "=cache-aware: misses under F x 1/k (50.00%)",
            "=static top-k cut",
            "=no dropping (as recorded)",
            "=F=0.25",
            "=F=1.00",
            "=top-1",
            "<polyline",
        ],
    );
    plot_input("drop", "t.csv", ROUTE, &[], "drop.png", &[]);
}

/// The plotted points of the real qwen trace are the rows `drop --format json` prints, and
/// rounded as the text rounds them they are the text's table cells.
#[test]
fn drop_plot_points_are_the_reports_rows() {
    use bmoe_analyze::route::{Phase, RouteFilter, RouteTrace};
    let Some(trace) = shared_file("realdata/2026-07-15-route-trace/qwen.route.csv") else {
        return;
    };
    let t = RouteTrace::read(
        &trace,
        RouteFilter {
            turn: None,
            phase: Phase::All,
            all_columns: true,
        },
    )
    .expect("read the qwen trace");
    let mut tables = bmoe_analyze::drop::DropTables::default();
    bmoe_analyze::drop::report_with_tables(&t, &mut tables).expect("k in the preamble");
    let panels = bmoe_analyze::plot::drop::tradeoff(&tables, "qwen.route.csv");
    assert_eq!(
        panels.iter().map(|p| p.phase.as_str()).collect::<Vec<_>>(),
        ["decode", "prefill"]
    );

    let p = trace.to_str().expect("utf-8 path");
    let out = run(&["drop", p, "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_str(&text(&out.stdout)).expect("JSON");
    let report = text(&run(&["drop", p]).stdout);
    let close = |a: f64, b: &serde_json::Value| {
        let b = b.as_f64().expect("number");
        assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
    };
    for panel in &panels {
        let rows = |table: &str| -> Vec<serde_json::Value> {
            json[table]
                .as_array()
                .expect("table")
                .iter()
                .filter(|r| r["phase"] == panel.phase.as_str())
                .cloned()
                .collect()
        };
        let (thr, stat, head) = (rows("threshold"), rows("static_k"), rows("phases"));
        assert_eq!(panel.threshold.len(), 4);
        assert_eq!(panel.static_k.len(), 5, "k=6: keep 5 down to 1");
        assert_eq!((thr.len(), stat.len(), head.len()), (4, 5, 1));
        assert_eq!(panel.k, 6);
        assert_eq!(json!(panel.routed), head[0]["routed"]);
        close(panel.miss_pct, &head[0]["miss_pct"]);
        let label = panel.phase.to_uppercase();
        assert!(
            report.contains(&format!(
                "[{label}] {} routing cells, {} routed experts, {:.1}% misses",
                head[0]["cells"], panel.routed, panel.miss_pct
            )),
            "{report}"
        );
        for (pt, row) in panel.threshold.iter().zip(&thr) {
            close(pt.io_saved_pct, &row["io_saved_pct"]);
            close(pt.mass_lost_pct, &row["mass_lost_pct"]);
            let frac = row["frac"].as_f64().expect("frac");
            assert_eq!(pt.label, format!("F={frac:.2}"));
            let line = format!(
                "  {frac:6.2}  {:7.2}%  {:8.1}%  {:9.2}%",
                row["thr_pct"].as_f64().expect("thr"),
                pt.io_saved_pct,
                pt.mass_lost_pct
            );
            assert!(report.contains(&line), "text has {line:?}");
        }
        for (pt, row) in panel.static_k.iter().zip(&stat) {
            close(pt.io_saved_pct, &row["io_saved_pct"]);
            close(pt.mass_lost_pct, &row["mass_lost_pct"]);
            assert_eq!(pt.label, format!("top-{}", row["keep_k"]));
            let line = format!(
                "  {:6}  {:8.1}%  {:9.2}%",
                row["keep_k"], pt.io_saved_pct, pt.mass_lost_pct
            );
            assert!(report.contains(&line), "text has {line:?}");
        }
    }
    // The published comparison (CHANGELOG): decode F=1.0 saves 66 % for 9.5 % of the mass.
    assert_eq!(
        (
            format!("{:.1}", panels[0].threshold[3].io_saved_pct),
            format!("{:.2}", panels[0].threshold[3].mass_lost_pct)
        ),
        ("66.1".to_string(), "9.46".to_string())
    );

    let d = tempfile::tempdir().expect("tempdir");
    let svg = d.path().join("drop.svg");
    let png = d.path().join("drop.png");
    for out in [&svg, &png] {
        let o = run(&["drop", p, "--plot", out.to_str().expect("path")]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(text(&o.stdout), report, "--plot leaves stdout unchanged");
    }
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    assert_well_formed_svg(&svg);
    let labels = texts(&svg);
    for want in [
        "Expert dropping: flash saved vs weight mass lost - qwen.route.csv (k=6)",
        "decode: 36864 routed, 19.7% misses",
        "prefill: 7902 routed, 100.0% misses",
        "cache-aware: misses under F x 1/k (16.67%)",
        "top-5",
        "F=0.75",
    ] {
        assert!(labels.iter().any(|l| l == want), "{want:?} in {labels:?}");
    }
    assert_drawn_png(&png);
}

/// A metrics CSV with the given wall times.
fn walls_csv(dir: &Path, name: &str, walls: &[f64]) -> String {
    let mut t = String::from(
        "# bmoe_metrics v1\n# model=/m/toy.gguf arch=toy threads=4\nstep,steps,wall_ms,io_ms\n",
    );
    for (i, w) in walls.iter().enumerate() {
        t.push_str(&format!("{},{},{w:.3},1.000\n", i + 1, walls.len()));
    }
    let p = dir.join(name);
    std::fs::write(&p, t).expect("write");
    p.display().to_string()
}

/// The compare plot of two runs: stdout unchanged, the title carries the text's ratio, CI and
/// verdict, the legend the text's means, and the plotted series are the runs' token times.
fn check_compare_plot(a: &str, b: &str, trim: usize) {
    let trim_s = trim.to_string();
    let base = ["metrics", "--trim", &trim_s, "--compare", a, b];
    let plain = run(&base);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let report = text(&plain.stdout);
    // "mean token time A/B = 0.672 (95% CI 0.514 .. 0.834; 188.32 vs 280.31 ms/tok)"
    let line = report
        .lines()
        .find(|l| l.starts_with("mean token time A/B = "))
        .expect("ratio line");
    let nums: Vec<&str> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|s| s.contains('.') && s.chars().any(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(nums.len(), 5, "{line}: ratio, low, high, mean A, mean B");
    let verdict = report.lines().nth(3).expect("verdict line");
    let short = verdict.split(" (").next().expect("short verdict");
    let title = format!(
        "Per-token wall time - A/B = {} (95% CI {} .. {}), {short}",
        nums[0], nums[1], nums[2]
    );

    let ra = bmoe_analyze::metrics::RunStats::read(Path::new(a), trim)
        .expect("read A")
        .expect("rows");
    let rb = bmoe_analyze::metrics::RunStats::read(Path::new(b), trim)
        .expect("read B")
        .expect("rows");
    let series = bmoe_analyze::plot::compare::compare_series(&ra, &rb, trim).expect("series");
    assert_eq!(series.title(), title);
    for (s, r, mean) in [(&series.a, &ra, nums[3]), (&series.b, &rb, nums[4])] {
        assert_eq!(
            s.walls, r.walls,
            "the plotted walls are the statistics' input"
        );
        assert_eq!(s.first_token, trim + 1);
        assert_eq!(format!("{:.2}", s.mean_ms), mean);
        let mut sorted = r.walls.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(s.ecdf.first().map(|p| p.0), sorted.first().copied());
        assert_eq!(s.ecdf.last().copied(), sorted.last().map(|&w| (w, 100.0)));
        assert!(
            s.ecdf
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1)
        );
    }

    let d = tempfile::tempdir().expect("tempdir");
    let svg = d.path().join("cmp.svg");
    let png = d.path().join("cmp.png");
    for out in [&svg, &png] {
        let mut args = base.to_vec();
        let o = out.to_str().expect("path");
        args.extend_from_slice(&["--plot", o]);
        let r = run(&args);
        assert!(r.status.success(), "{}", text(&r.stderr));
        assert_eq!(text(&r.stdout), report, "--plot leaves stdout unchanged");
        assert!(text(&r.stderr).contains(&format!("plot -> {o}")));
    }
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    assert_well_formed_svg(&svg);
    let labels = texts(&svg);
    let name = |p: &str| {
        Path::new(p)
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned()
    };
    for want in [
        title,
        format!("A: {} ({} tokens)", name(a), ra.walls.len()),
        format!("B: {} ({} tokens)", name(b), rb.walls.len()),
        format!("A mean {} ms/tok", nums[3]),
        format!("B mean {} ms/tok", nums[4]),
        "wall ms per token (log scale)".into(),
        "tokens at or below (%)".into(),
        "token (metrics row after --trim)".into(),
    ] {
        assert!(labels.contains(&want), "{want:?} in {labels:?}");
    }
    assert_drawn_png(&png);
}

#[test]
fn compare_plot_of_two_synthetic_runs() {
    let d = tempfile::tempdir().expect("tempdir");
    let a = walls_csv(
        d.path(),
        "fast.csv",
        &[900.0, 100.0, 110.0, 90.0, 105.0, 95.0],
    );
    let b = walls_csv(
        d.path(),
        "slow.csv",
        &[950.0, 200.0, 210.0, 190.0, 205.0, 0.0],
    );
    check_compare_plot(&a, &b, 0);
    check_compare_plot(&a, &b, 1);
}

#[test]
fn compare_plot_of_two_real_phone_runs() {
    let (Some(a), Some(b)) = (
        shared_file("realdata/2026-07-20-cache-replay/qwen-lru_a.csv"),
        shared_file("realdata/2026-07-20-cache-replay/qwen-lfu_a.csv"),
    ) else {
        return;
    };
    check_compare_plot(a.to_str().expect("utf-8"), b.to_str().expect("utf-8"), 0);
}

#[test]
fn drop_and_compare_plot_errors_are_clear_and_leave_no_file() {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("t.csv");
    std::fs::write(&trace, ROUTE).expect("write trace");
    let trace = trace.display().to_string();
    let a = walls_csv(d.path(), "a.csv", &[100.0, 110.0]);
    let svg = d.path().join("p.svg").display().to_string();
    let jpg = d.path().join("p.jpg").display().to_string();
    // A directory where the picture should go: the rename fails, the temporary file goes.
    let dir_svg = d.path().join("taken.svg");
    std::fs::create_dir(&dir_svg).expect("mkdir");
    let dir_svg = dir_svg.display().to_string();
    let cases: [(Vec<&str>, String, &str); 6] = [
        (
            vec!["drop", &trace, &trace, "--plot", &svg],
            format!("drop --plot {svg}: the trade-off is drawn for one trace, 2 given"),
            "pass exactly one route trace with --plot",
        ),
        (
            vec!["drop", &trace, "--plot", &jpg],
            format!("--plot {jpg}: unknown plot format"),
            "name the output like `--plot out.svg`",
        ),
        (
            vec!["drop", &trace, "--plot", &dir_svg],
            format!("--plot {dir_svg}: cannot write the plot"),
            "check that the directory exists and is writable",
        ),
        (
            vec!["metrics", "--compare", &a, &a, "--plot", &jpg],
            format!("--plot {jpg}: unknown plot format"),
            "name the output like `--plot out.svg`",
        ),
        (
            vec!["metrics", &a, "--compare", &a, &a, "--plot", &svg],
            format!("metrics --compare --plot {svg}: 1 more path(s) besides A and B"),
            "pass only the two runs",
        ),
        (
            vec!["metrics", "--compare", &a, &a, "--plot", &dir_svg],
            format!("--plot {dir_svg}: cannot write the plot"),
            "check that the directory exists and is writable",
        ),
    ];
    for (args, message, hint) in cases {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: no report on a failed plot"
        );
        let err = text(&out.stderr);
        assert!(err.contains(&message), "{err}");
        assert!(err.contains(&format!("\nhint: {hint}")), "{err}");
    }
    assert!(!Path::new(&svg).exists() && !Path::new(&jpg).exists());
    assert!(Path::new(&dir_svg).is_dir());
    let left: Vec<String> = std::fs::read_dir(d.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".partial"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// Every `<text>` element with its `x` and `y` attributes.
fn placed_texts(svg: &str) -> Vec<(f64, f64, String)> {
    let attr = |tag: &str, name: &str| -> Option<f64> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        tag[at..].split('"').next()?.parse().ok()
    };
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let end = t.find('>')?;
            let body = &t[end + 1..];
            let label = body[..body.find("</text>")?].trim().to_string();
            Some((attr(&t[..end], "x")?, attr(&t[..end], "y")?, label))
        })
        .collect()
}

/// Every `<rect>` with a fill: (x, y, width, height, fill).
fn filled_rects(svg: &str) -> Vec<(f64, f64, f64, f64, String)> {
    svg.split("<rect")
        .skip(1)
        .filter_map(|t| {
            let tag = &t[..t.find('>')?];
            let get = |name: &str| -> Option<&str> {
                let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
                tag[at..].split('"').next()
            };
            let num = |name: &str| get(name).and_then(|v| v.parse::<f64>().ok());
            let fill = get("fill")?;
            (fill != "none").then(|| {
                Some((
                    num("x")?,
                    num("y")?,
                    num("width")?,
                    num("height")?,
                    fill.to_string(),
                ))
            })?
        })
        .collect()
}

fn hex(fill: &str) -> (u8, u8, u8) {
    let v = u32::from_str_radix(fill.trim_start_matches('#'), 16).expect("a #RRGGBB fill");
    ((v >> 16) as u8, (v >> 8) as u8, v as u8)
}

#[test]
fn a_log_axis_over_196_to_2441_ms_is_labelled_1_2_5() {
    let d = tempfile::tempdir().expect("tempdir");
    let walls = [196.0, 240.0, 310.0, 420.0, 700.0, 1200.0, 2441.0];
    let a = walls_csv(d.path(), "a.csv", &walls);
    let b = walls_csv(d.path(), "b.csv", &walls.map(|w| w * 0.9 + 20.0));
    let svg_path = d.path().join("cmp.svg");
    let out = run(&[
        "metrics",
        "--compare",
        &a,
        &b,
        "--plot",
        svg_path.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&svg_path).expect("plot written");
    let labels = texts(&svg);
    // Both panels (over tokens, ECDF) carry the wall-time axis: each label twice, not only
    // 1000 and 2000 as plotters' decade labels gave.
    for want in ["200", "500", "1000", "2000"] {
        let n = labels.iter().filter(|l| *l == want).count();
        assert_eq!(n, 2, "label {want} on both wall-time axes: {labels:?}");
    }
}

/// The legend panel starts here (the picture less [`LEGEND_PANEL_PX`] = 250).
const LEGEND_X: f64 = 750.0;

/// In a heat map SVG the data cells stay left of the legend panel and the legend (its
/// swatches and labels) right of it; returns the swatch fills, top to bottom.
fn legend_outside_the_data(svg: &str, labels: &[&str]) -> Vec<(u8, u8, u8)> {
    let rects = filled_rects(svg);
    let mut swatches = Vec::new();
    let mut cells = 0;
    for (x, y, w, h, fill) in &rects {
        if *w >= 999.0 {
            continue; // the white background
        }
        if *x >= LEGEND_X {
            assert!(
                *w <= 20.0 && *h <= 20.0,
                "only swatches in the panel: {x},{y} {w}x{h}"
            );
            swatches.push((*y, hex(fill)));
        } else {
            assert!(
                x + w <= LEGEND_X + 0.5,
                "a data cell reaches into the legend: {x}+{w}"
            );
            cells += 1;
        }
    }
    assert!(cells > 0, "data cells drawn");
    let placed = placed_texts(svg);
    for l in labels {
        let (x, _, _) = placed
            .iter()
            .find(|(_, _, t)| t.contains(l))
            .unwrap_or_else(|| panic!("legend label {l:?}"));
        assert!(
            *x >= LEGEND_X,
            "legend label {l:?} at x={x}, inside the data area"
        );
    }
    swatches.sort_by(|a, b| a.0.total_cmp(&b.0));
    swatches.into_iter().map(|(_, c)| c).collect()
}

fn plot_svg(args: &[&str], input: &str) -> String {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("t.csv");
    std::fs::write(&trace, input).expect("write");
    let out_path = d.path().join("p.svg");
    let mut a = vec![args[0], trace.to_str().expect("utf-8")];
    a.extend_from_slice(&args[1..]);
    a.extend_from_slice(&["--plot", out_path.to_str().expect("utf-8")]);
    let out = run(&a);
    assert!(out.status.success(), "{a:?}: {}", text(&out.stderr));
    std::fs::read_to_string(&out_path).expect("plot written")
}

#[test]
fn heat_map_legends_sit_beside_the_data_and_the_hit_scale_is_colour_blind_safe() {
    let real = shared_file("realdata/2026-07-15-route-trace/qwen.route.csv")
        .map(|p| std::fs::read_to_string(p).expect("read qwen trace"));
    for input in std::iter::once(ROUTE.to_string()).chain(real) {
        let hot = plot_svg(&["route", "--view", "hot"], &input);
        let fills = legend_outside_the_data(&hot, &["never routed", "rarely routed", "hottest ("]);
        assert_eq!(fills.len(), 3);
        let hit = plot_svg(&["route", "--view", "matrix", "--cells", "hit"], &input);
        let scale = legend_outside_the_data(
            &hit,
            &["0% (all read from flash)", "50%", "100% (all hits)"],
        );
        assert_eq!(scale.len(), 5, "{scale:?}");
        let red_ish =
            |&(r, g, b): &(u8, u8, u8)| r > g.saturating_add(60) && r > b.saturating_add(60);
        let green_ish =
            |&(r, g, b): &(u8, u8, u8)| g > r.saturating_add(60) && g > b.saturating_add(60);
        assert!(
            !(scale.iter().any(red_ish) && scale.iter().any(green_ish)),
            "a red/green pair in the hit scale: {scale:?}"
        );
        // Sequential: lighter with more hits, so it also reads in greyscale.
        let lum = |&(r, g, b): &(u8, u8, u8)| {
            0.2126 * f64::from(r) + 0.7152 * f64::from(g) + 0.0722 * f64::from(b)
        };
        let l: Vec<f64> = scale.iter().map(lum).collect();
        assert!(l.windows(2).all(|w| w[1] > w[0] + 20.0), "{l:?}");
        // Every data cell takes a colour of the same scale's ends or between (no red, no green
        // pure hue): the all-miss and all-hit cells are the legend's ends.
        let cells: std::collections::HashSet<(u8, u8, u8)> = filled_rects(&hit)
            .iter()
            .filter(|r| r.0 < LEGEND_X && r.2 < 999.0)
            .map(|r| hex(&r.4))
            .collect();
        assert!(cells.iter().all(|c| !red_ish(c)), "{cells:?}");
    }
}

#[test]
fn reuse_bucket_labels_sit_under_the_centre_of_every_bar() {
    let Some(q) = shared_file("realdata/2026-07-15-route-trace/qwen.route.csv") else {
        return;
    };
    let svg = plot_svg(
        &["route", "--view", "reuse"],
        &std::fs::read_to_string(q).expect("read"),
    );
    let bars: Vec<f64> = filled_rects(&svg)
        .iter()
        .filter(|r| r.4 == "#506D97")
        .map(|r| r.0 + r.2 / 2.0)
        .collect();
    let buckets = ["1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127"];
    assert_eq!(
        bars.len(),
        buckets.len(),
        "the qwen decode histogram has 7 buckets"
    );
    let placed = placed_texts(&svg);
    for (centre, want) in bars.iter().zip(buckets) {
        let (x, _, _) = placed
            .iter()
            .find(|(_, _, t)| t == want)
            .unwrap_or_else(|| panic!("bucket label {want}: {placed:?}"));
        assert!(
            (x - centre).abs() <= 1.0,
            "{want} at x={x}, its bar's centre is {centre}"
        );
    }
}
