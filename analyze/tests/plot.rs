//! `--plot OUT.svg|OUT.png`: the picture is written, is well-formed SVG naming its series (or a
//! PNG of the right size with drawn text and shapes), leaves the text report unchanged, and bad
//! paths give a clear error. Inputs are written at test time.

use std::path::Path;
use std::process::{Command, Output};

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
            "=belady",
            "=lru",
            "=lfu",
            "=random",
            "=layer",
            "=layerlfu",
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
            "reuses (all layers)",
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
            "all served from RAM (hit)",
            "all routings missed",
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
        vec!["metrics", "--compare", &a, &a, "--plot", &out_svg],
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
