//! `bmoe-bench report` on real sweep results: an interrupted sweep's report says it is
//! incomplete and which cells are short.

use std::path::Path;
use std::time::{Duration, Instant};

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
    fake_engine(t.path(), 0.4);
    write(t.path(), "slow.toml", SLOW);
    let mut child = bench()
        .current_dir(t.path())
        .env("BMOE_CACHE_DIR", t.path().join("cache"))
        .args(["sweep", "slow.toml", "-o", "res"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let res = t.path().join("res");
    let deadline = Instant::now() + Duration::from_secs(60);
    while records(&res).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
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
