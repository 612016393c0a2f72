//! Every file under `shared/realdata` parses, with row counts checked against an independent
//! naive count. Skips (with a printed reason) when the shared folder is absent.

use crate::common;

use std::path::Path;

use bmoe_telemetry::detect::{FileKind, detect_format};
use bmoe_telemetry::kv::read_sidecar;
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::summary::PerfReport;
use bmoe_telemetry::table::{Line, TableReader};
use bmoe_telemetry::trace::{ComputeRow, IoRow, RouteRow, TraceReader, TraceRow};

fn text(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).expect("read")).into_owned()
}

fn read_trace<T: TraceRow>(
    p: &Path,
) -> (Vec<T>, TraceReader<std::io::BufReader<std::fs::File>, T>) {
    let mut r = TraceReader::<_, T>::open(p).unwrap_or_else(|e| panic!("{e}"));
    let rows: Vec<T> = r
        .by_ref()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(r.truncated().is_none(), "{}: truncated", p.display());
    (rows, r)
}

#[test]
fn every_real_file_parses_with_the_expected_row_count() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    let files = common::files_under(&shared.join("realdata"));
    assert!(
        files.len() > 100,
        "expected the full realdata set, got {}",
        files.len()
    );
    let mut by_kind = std::collections::BTreeMap::<String, usize>::new();
    for p in &files {
        let name = p.display().to_string();
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        let kind = detect_format(p).unwrap_or_else(|e| panic!("{e}"));
        *by_kind.entry(format!("{kind:?}")).or_default() += 1;
        let expected = common::naive_data_lines(p);
        let body = text(p);
        match kind {
            FileKind::Metrics { version } => {
                assert!(matches!(ext, "csv" | "metrics"), "{name}: {kind:?}");
                let f = MetricsFile::read(p).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(f.rows.len(), expected, "{name}");
                assert!(f.truncated.is_none(), "{name}");
                assert_eq!(f.info.version, version, "{name}");
                let trailers = body.lines().filter(|l| l.starts_with("# summary")).count();
                assert_eq!(f.summaries.len(), trailers, "{name}");
                // Every row has the columns its header names, and a real step.
                for (i, r) in f.rows.iter().enumerate() {
                    assert!(r.step.is_some() && r.wall_ms.is_some(), "{name} row {i}");
                }
                if f.header.iter().any(|h| h == "mgmt_ms") {
                    assert!(f.rows.iter().all(|r| r.mgmt_ms.is_some()), "{name}");
                } else {
                    assert!(f.rows.iter().all(|r| r.mgmt_ms.is_none()), "{name}");
                }
                if version.is_some() {
                    assert!(f.info.model.is_some(), "{name}: preamble without model=");
                }
            }
            FileKind::RouteTrace => {
                let (rows, r) = read_trace::<RouteRow>(p);
                assert_eq!(rows.len(), expected, "{name}");
                let info = r.info();
                let layer_lines = body.lines().filter(|l| l.starts_with("# layer=")).count();
                assert_eq!(info.layers.len(), layer_lines, "{name}");
                assert_eq!(Some(info.layers.len() as u64), info.n_layer, "{name}");
                let nan_rows = body.lines().filter(|l| l.contains(",nan,")).count();
                assert_eq!(
                    rows.iter().filter(|r| r.weight.is_nan()).count(),
                    nan_rows,
                    "{name}"
                );
                assert_eq!(
                    r.has_column("dropped"),
                    rows.iter().all(|r| r.dropped.is_some()),
                    "{name}"
                );
                let k = info.n_expert_used.unwrap_or(0);
                assert!(
                    rows.iter().all(|r| u64::from(r.slot) < k),
                    "{name}: slot >= top-k"
                );
            }
            FileKind::ComputeTrace => {
                let (rows, r) = read_trace::<ComputeRow>(p);
                assert_eq!(rows.len(), expected, "{name}");
                assert!(r.info().n_threads.is_some(), "{name}");
                if name.contains("layers") {
                    assert!(rows.iter().all(ComputeRow::is_layer_segment), "{name}");
                }
            }
            FileKind::IoTrace => {
                let (rows, _) = read_trace::<IoRow>(p);
                assert_eq!(rows.len(), expected, "{name}");
                assert!(rows.iter().all(|r| r.read_bytes >= r.req_bytes), "{name}");
            }
            FileKind::Sidecar => {
                let m = read_sidecar(p).unwrap_or_else(|e| panic!("{e}"));
                let keys: std::collections::BTreeSet<&str> = body
                    .lines()
                    .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
                    .collect();
                assert_eq!(m.len(), keys.len(), "{name}");
                assert!(!m.is_empty(), "{name}");
            }
            FileKind::RunLog => {
                let r = PerfReport::parse(&body);
                assert!(r.errors.is_empty(), "{name}: {:?}", r.errors);
                assert_eq!(
                    r.generation.is_some(),
                    body.contains("generation: "),
                    "{name}"
                );
                assert_eq!(
                    r.moe_stream.is_some(),
                    body.contains("moe-stream: "),
                    "{name}"
                );
                assert_eq!(
                    r.moe_cache.is_some(),
                    body.contains("% hit, resident"),
                    "{name}"
                );
            }
            FileKind::OtherCsv => {
                let mut t = TableReader::open(p).unwrap_or_else(|e| panic!("{e}"));
                let width = t.header().len();
                let mut n = 0;
                while let Some(l) = t.next_line().unwrap_or_else(|e| panic!("{e}")) {
                    if let Line::Row(f) = l {
                        assert_eq!(f.len(), width, "{name}:{}", f.line);
                        n += 1;
                    }
                }
                assert_eq!(n, expected, "{name}");
            }
            FileKind::Unknown => {
                assert!(matches!(ext, "state" | "txt"), "{name}: unrecognised");
            }
        }
    }
    println!("realdata: {} files by kind: {by_kind:?}", files.len());
}
