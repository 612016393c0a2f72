//! A run whose preamble says it was traced (`route_trace=1`, written by `bmoe-cli --route-trace`)
//! is tagged as instrumented in every `metrics` format, naming the key.

use crate::common::stdout;

#[test]
fn a_route_traced_run_is_tagged_instrumented_with_its_key() {
    let d = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, extra: &str| {
        let p = d.path().join(name);
        std::fs::write(
            &p,
            format!(
                "# bmoe_metrics v2\n# engine=t\n# model=/m/toy.gguf threads=4\n\
# moe_stream=1 predict_log=0 prefetch_sync=0\n# temp=0 compute_trace_layers=0\n{extra}\
step,steps,wall_ms,io_ms\n1,2,10.000,1.000\n2,2,12.000,1.000\n"
            ),
        )
        .expect("write");
        p.display().to_string()
    };
    let traced = write("traced.csv", "# cgroup=none route_trace=1\n");
    let plain = write("plain.csv", "# cgroup=none\n");

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["metrics", &traced, &plain, "--format", "json"]))
            .expect("JSON");
    assert_eq!(json[0]["instrumented"], true, "{json}");
    assert_eq!(
        json[0]["instrumented_by"],
        serde_json::json!(["route_trace"])
    );
    assert_eq!(json[1]["instrumented"], false, "{json}");
    assert_eq!(json[1]["instrumented_by"], serde_json::json!([]));

    let text = stdout(&["metrics", &traced, &plain]);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no {name} line: {text}"))
            .to_string()
    };
    assert!(
        line("traced.csv").ends_with("traced.csv [traced (route_trace)]"),
        "{text}"
    );
    assert!(line("plain.csv").ends_with("plain.csv"), "{text}");
}
