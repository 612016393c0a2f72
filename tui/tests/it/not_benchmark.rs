//! A replayed run whose preamble says it was traced (`route_trace=1`, written by
//! `bmoe-cli --route-trace`) carries the NOT A BENCHMARK label; a plain run does not.

#![allow(clippy::unwrap_used)] // test helpers: a failed write is a failed test

use crate::common::render;

use bmoe_telemetry::kv::KvMap;
use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, TokenRow};
use bmoe_top::model::RunConfig;
use bmoe_top::replay;
use bmoe_top::state::{App, SourceKind};

fn replayed(extra: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.csv");
    let mut keys = KvMap::new();
    keys.insert("cgroup", "none");
    for (k, v) in extra {
        keys.insert(*k, *v);
    }
    // As bmoe-cli writes a plain greedy run: the always-written instrumentation keys at 0.
    let info = RunInfo {
        version: Some(2),
        model: Some("m.gguf".into()),
        threads: Some(4),
        temp: Some(0.0),
        predict_log: Some(false),
        prefetch_sync: Some(false),
        compute_trace_layers: Some(0),
        spec: Some("off".into()),
        extra: keys,
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(&path, &info).unwrap();
    w.write_row(&TokenRow {
        step: Some(1),
        steps: Some(1),
        wall_ms: Some(10.0),
        ..TokenRow::default()
    })
    .unwrap();
    drop(w);
    let mut app = App::new(SourceKind::Replay, "replay run.csv", RunConfig::default());
    for e in replay::load(&path).unwrap() {
        app.push(e);
    }
    app.seek_tokens(usize::MAX);
    render(&app, 120, 30)
}

#[test]
fn a_route_traced_replay_is_labelled_not_a_benchmark() {
    for key in ["route_trace", "io_trace", "compute_trace"] {
        let screen = replayed(&[(key, "1")]);
        let title = screen.lines().next().unwrap_or_default();
        assert!(
            title.ends_with("NOT A BENCHMARK: traced"),
            "{key}: {screen}"
        );
        assert!(
            screen.contains("not a benchmark: traced"),
            "{key}: {screen}"
        );
    }
    let screen = replayed(&[]);
    assert!(
        !screen.to_lowercase().contains("not a benchmark"),
        "{screen}"
    );
}
