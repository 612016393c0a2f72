//! Runs of different comparability classes (plain, lossy, replayed, ...) are never tabled
//! together by `metrics`: real plain runs next to a copy edited here into a lossy one
//! (`drop_cold_frac=0.5` in its preamble) and a replayed one (`route_replay=`).

use crate::common::{run, shared_path, stdout, text};

fn copy_edited(from: &std::path::Path, to: &std::path::Path, add: &str) {
    let body = std::fs::read_to_string(from).expect("read real run");
    let edited = if add.is_empty() {
        body
    } else {
        // the streaming preamble line gains the key, as bmoe-cli writes it
        body.replacen("# moe_stream=", &format!("# {add} moe_stream="), 1)
    };
    std::fs::write(to, edited).expect("write copy");
}

#[test]
fn lossy_and_replayed_runs_are_grouped_apart_and_named_on_stderr() {
    let (Some(a), Some(b)) = (
        shared_path("realdata/2026-07-20-cache-replay/qwen-lru_a.csv"),
        shared_path("realdata/2026-07-20-cache-replay/qwen-lru_b.csv"),
    ) else {
        return;
    };
    let d = tempfile::tempdir().expect("tempdir");
    let plain = d.path().join("plain.csv");
    let lossy = d.path().join("lossy.csv");
    let replayed = d.path().join("replayed.csv");
    let plain2 = d.path().join("plain2.csv");
    copy_edited(&a, &plain, "");
    copy_edited(&b, &lossy, "drop_cold_frac=0.5");
    copy_edited(&b, &replayed, "route_replay=trace.csv");
    copy_edited(&b, &plain2, "");
    let s = |p: &std::path::Path| p.display().to_string();

    let out = run(&[
        "metrics",
        &s(&plain),
        &s(&lossy),
        &s(&replayed),
        &s(&plain2),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    // three groups in order of first appearance; the two plain runs together
    let heads: Vec<&str> = so.lines().filter(|l| l.starts_with("== class:")).collect();
    assert_eq!(
        heads,
        [
            "== class: plain ==",
            "== class: lossy ==",
            "== class: replayed =="
        ],
        "{so}"
    );
    let plain_block = so.split("== class: lossy ==").next().unwrap_or_default();
    assert!(
        plain_block.contains("plain.csv") && plain_block.contains("plain2.csv"),
        "{so}"
    );
    assert!(!plain_block.contains("lossy.csv"), "{so}");
    assert!(so.contains("[lossy (drop_cold_frac=0.5)]"), "{so}");
    assert!(so.contains("[replayed (route_replay=trace.csv)]"), "{so}");
    assert!(se.contains("3 comparability classes, kept apart"), "{se}");
    assert!(
        se.lines().any(|l| l.contains("lossy: ")
            && l.contains("lossy.csv")
            && l.contains("drop_cold_frac=0.5")),
        "{se}"
    );

    let json: serde_json::Value = serde_json::from_str(&stdout(&[
        "metrics",
        &s(&plain),
        &s(&lossy),
        &s(&plain2),
        "--format",
        "json",
    ]))
    .expect("json");
    // grouped order: the plain runs first, the lossy one after, only it carries a class
    assert!(json[0].get("class").is_none(), "{json}");
    assert!(json[1].get("class").is_none(), "{json}");
    assert_eq!(json[2]["class"], "lossy", "{json}");

    // --compare across classes says so
    let cmp = run(&["metrics", "--compare", &s(&lossy), &s(&plain)]);
    assert!(cmp.status.success(), "{}", text(&cmp.stderr));
    assert!(text(&cmp.stderr).contains("different comparability classes"));
    assert!(text(&cmp.stdout).contains("warning: A is lossy (drop_cold_frac=0.5) and B is plain"));
}

#[test]
fn plain_only_inputs_print_as_before() {
    let (Some(a), Some(b)) = (
        shared_path("realdata/2026-07-20-cache-replay/qwen-lru_a.csv"),
        shared_path("realdata/2026-07-20-cache-replay/qwen-lru_b.csv"),
    ) else {
        return;
    };
    let out = run(&[
        "metrics",
        &a.display().to_string(),
        &b.display().to_string(),
    ]);
    assert!(out.status.success());
    let so = text(&out.stdout);
    assert!(!so.contains("== class:"), "{so}");
    assert!(!text(&out.stderr).contains("comparability"));
    // the one-table layout: a header, one line per run, the footnote
    assert_eq!(so.lines().count(), 4, "{so}");
}
