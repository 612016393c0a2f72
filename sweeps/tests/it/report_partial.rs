//! `bmoe-bench report` on real sweep results: an interrupted sweep's report says it is
//! incomplete and which cells are short, and a plot's legend says which interval its whiskers
//! are (across runs, or within runs where there are too few runs).

use std::path::Path;
use std::time::Duration;

use crate::sweep_common::*;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

const SLOW: &str = r#"
name = "slow"
binary = "./fake-cli"
[defaults]
n_predict = 4
repetitions = 2
[[model]]
id = "tiny"
preset = "tiny"
[axes.cache]
flag = "--cache-mb"
[[sweep]]
name = "s"
axes = { cache = [1, 2] }
"#;

#[test]
fn an_interrupted_sweeps_report_names_the_short_cells() {
    let t = tempfile::tempdir().expect("tmp");
    // 1 s a run: the kill lands after the first record even if this thread stalls a second
    fake_engine(t.path(), 1.0);
    write(t.path(), "slow.toml", SLOW);
    let res = sweep_killed_after(t.path(), "slow.toml", 1, Duration::ZERO);
    let recs = records(&res);
    let done = recs.len();
    assert!((1..4).contains(&done), "{done}");
    // Runs go cell by cell (as written): tiny_cache1 r1 r2, then tiny_cache2 r1 r2.
    let of = |cell: &str| recs.iter().filter(|r| r["cell"] == cell).count();
    let (c1, c2) = (of("tiny_cache1"), of("tiny_cache2"));

    let o = run(t.path(), &["report", "res"]);
    assert!(o.status.success(), "exit status unchanged: {}", text(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains(&format!(
            "**Incomplete: {done} of 4 planned runs recorded** (warm-ups included)"
        )),
        "{md}"
    );
    assert!(
        md.contains(&format!("- sweep `s` · `tiny_cache2`: {c2} of 2 runs")),
        "{md}"
    );
    if c1 < 2 {
        assert!(
            md.contains(&format!("- sweep `s` · `tiny_cache1`: {c1} of 2 runs")),
            "{md}"
        );
    } else {
        assert!(
            !md.contains("`tiny_cache1`: "),
            "a full cell is not short: {md}"
        );
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "is incomplete: {done} of 4 planned runs recorded; short cells:"
        )) && err.contains(&format!("s/tiny_cache2 ({c2} of 2 runs)")),
        "{err}"
    );
    // csv keeps its shape; stderr still says so.
    let o = run(t.path(), &["report", "res", "-f", "csv"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("Incomplete"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is incomplete"));
    // findings.md lists it under the caveats.
    let o = run(t.path(), &["report", "res", "--findings"]);
    assert!(o.status.success(), "{}", text(&o));
    let findings = std::fs::read_to_string(res.join("findings.md")).expect("findings");
    assert!(
        findings.contains(&format!(
            "- **Incomplete:** {done} of 4 planned runs recorded; short cells:"
        )),
        "{findings}"
    );

    // Once resumed to the end, nothing is short.
    let o = run(t.path(), &["sweep", "slow.toml", "-o", "res", "--resume"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(t.path(), &["report", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("Incomplete"));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("incomplete"));
}

/// The `<text>` elements of an SVG, joined.
fn svg_text(path: &Path) -> String {
    let svg = std::fs::read_to_string(path).expect("svg");
    svg.split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once("</text>")))
        .map(|(txt, _)| txt.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn plot_whiskers_are_labelled_with_the_interval_drawn() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 0.0);
    // One run per cell: only the within-run interval exists. Three: the across-run one.
    for reps in [1, 3] {
        write(
            t.path(),
            &format!("r{reps}.toml"),
            &SLOW
                .replace("name = \"slow\"", &format!("name = \"r{reps}\""))
                .replace("repetitions = 2", &format!("repetitions = {reps}")),
        );
        let o = run(t.path(), &["sweep", &format!("r{reps}.toml")]);
        assert!(o.status.success(), "{}", text(&o));
        let plots = format!("plots{reps}");
        let o = run(
            t.path(),
            &[
                "report",
                &format!("results/r{reps}"),
                "--plots",
                &plots,
                "--x",
                "cache",
            ],
        );
        assert!(o.status.success(), "{}", text(&o));
        let cells = svg_text(&t.path().join(&plots).join("tok_s-s-tiny.svg"));
        let curve = svg_text(&t.path().join(&plots).join("tok_s-vs-cache-s-tiny.svg"));
        let (is, isnt) = if reps == 1 {
            ("95% CI within runs", "95% CI across runs")
        } else {
            ("95% CI across runs", "95% CI within runs")
        };
        for (what, txt) in [("cells", &cells), ("curve", &curve)] {
            assert!(txt.contains(is), "{reps} run(s), {what} plot: {txt}");
            assert!(!txt.contains(isnt), "{reps} run(s), {what} plot: {txt}");
            assert!(
                !txt.contains("(95% CI)"),
                "no unqualified label: {reps} run(s), {what} plot: {txt}"
            );
        }
    }
}
