//! A route trace without the `residency` column: the analyses that never read it run as on
//! the full trace; the ones that do fail naming the column and the view that needs it.

use crate::common::{run, shared_path, text};

/// The trace with its `residency` column (the 8th) cut out of the header and every row.
fn without_residency(trace: &str) -> String {
    trace
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                let mut f: Vec<&str> = l.split(',').collect();
                f.remove(7);
                format!("{}\n", f.join(","))
            }
        })
        .collect()
}

const ROUTE: &str = "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer=2 n_expert=8 n_expert_used=2\n\
# layer=0 expert_bytes=1048576 dense_bytes=0\n# layer=1 expert_bytes=1048576 dense_bytes=0\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,1,5,0,0,1,0.7,0,1048576\n0,1,5,0,1,2,0.3,0,1048576\n0,1,5,1,0,3,0.6,0,1048576\n0,1,5,1,1,4,0.4,0,1048576\n\
0,1,6,0,0,1,0.8,1,0\n0,1,6,0,1,5,0.2,0,1048576\n0,1,6,1,0,3,0.5,1,0\n0,1,6,1,1,4,0.5,1,0\n";

fn check(full: &str, cut: &str) {
    assert!(!cut.contains("residency"));
    for args in [
        &["route", "--view", "hot"][..],
        &["route", "--view", "reuse"],
        &["route", "--view", "overlap"],
        &["route", "--view", "workset"],
        &["route", "--view", "entropy"],
        &["route", "--view", "bytes"],
        &["route", "--view", "sanity"],
        &["route", "--view", "matrix"],
        &["route", "--view", "hot", "--format", "json"],
        &["replay", "--budgets", "1,1000"],
    ] {
        let a = run(&[args, &[full]].concat());
        let b = run(&[args, &[cut]].concat());
        assert!(a.status.success(), "{args:?}: {}", text(&a.stderr));
        assert!(b.status.success(), "{args:?}: {}", text(&b.stderr));
        let (ta, tb) = (text(&a.stdout), text(&b.stdout));
        // Only the file name may differ (the json meta names the path).
        assert_eq!(ta.replace(full, "F"), tb.replace(cut, "F"), "{args:?}");
    }
    for (args, view) in [
        (&["route", "--view", "cache"][..], "--view cache needs"),
        (&["route"], "--view default (its cache view) needs"),
        (
            &["route", "--view", "all"],
            "--view all (its cache view) needs",
        ),
        (
            &["route", "--view", "matrix", "--cells", "hit"],
            "--view matrix --cells hit needs",
        ),
        (
            &["route", "--view", "matrix", "--format", "csv"],
            "--view matrix --format json/csv",
        ),
        (&["drop"], "drop (a routing's hit or miss"),
    ] {
        let out = run(&[args, &[cut]].concat());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(out.stdout.is_empty() || args[0] == "drop", "{args:?}");
        assert!(
            err.contains(&format!("{cut}: no column `residency` - {view}")),
            "{args:?}: {err}"
        );
        assert!(err.contains("\nhint: "), "{err}");
    }
}

#[test]
fn views_that_do_not_read_residency_run_without_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let full = d.path().join("full.csv");
    let cut = d.path().join("nores.csv");
    std::fs::write(&full, ROUTE).expect("write");
    std::fs::write(&cut, without_residency(ROUTE)).expect("write");
    check(&full.display().to_string(), &cut.display().to_string());
    // CRLF line ends are kept.
    let crlf = d.path().join("crlf.csv");
    std::fs::write(&crlf, without_residency(ROUTE).replace('\n', "\r\n")).expect("write");
    let out = run(&["route", "--view", "hot", &crlf.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn the_real_qwen_trace_without_residency() {
    let Some(q) = shared_path("realdata/2026-07-15-route-trace/qwen.route.csv") else {
        return;
    };
    let body = std::fs::read_to_string(&q).expect("read qwen trace");
    let d = tempfile::tempdir().expect("tempdir");
    let cut = d.path().join("nores.route.csv");
    std::fs::write(&cut, without_residency(&body)).expect("write");
    check(&q.display().to_string(), &cut.display().to_string());
}
