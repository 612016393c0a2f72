//! `--plot OUT.svg`: the picture is written, is well-formed SVG naming its series, leaves the
//! text report unchanged, and bad paths give a clear error.

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
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

/// Run `args` (the trace inserted after the subcommand) without and with `--plot`; the SVG must
/// be well-formed and have every `must_contain` entry: `=x` a text exactly `x`, `<tag` raw
/// markup, otherwise a substring of some text.
fn plot_case(args: &[&str], file: &str, must_contain: &[&str]) {
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("t.csv");
    std::fs::write(&trace, ROUTE).expect("write trace");
    let trace = trace.display().to_string();
    let out_svg = d.path().join(file);
    let svg_arg = out_svg.display().to_string();
    let mut with_plot: Vec<&str> = vec![args[0], &trace];
    with_plot.extend_from_slice(&args[1..]);
    let plain = run(&with_plot);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    with_plot.extend_from_slice(&["--plot", &svg_arg]);
    let out = run(&with_plot);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout, plain.stdout, "--plot leaves stdout unchanged");
    assert!(text(&out.stderr).contains(&format!("plot -> {svg_arg}")));
    let svg = std::fs::read_to_string(&out_svg).expect("plot written");
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

    let png = d.path().join("p.png").display().to_string();
    let out = run(&["route", &trace, "--view", "hot", "--plot", &png]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "rejected before any output");
    let err = text(&out.stderr);
    assert!(err.contains("PNG output is not supported"), "{err}");
    assert!(err.contains("hint: write .svg instead"), "{err}");

    let svg = d.path().join("p.svg").display().to_string();
    let out = run(&["route", &trace, "--view", "cache", "--plot", &svg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("view `cache` has no plot"));
    assert!(!Path::new(&svg).exists());
}
