//! `bmoe-analyze convert`: every trace and metrics file of shared/realdata converted to Parquet
//! and Arrow IPC by the real binary, read back with the parquet / arrow-ipc crates and compared
//! value by value with what the bmoe-telemetry readers return; bad input fails with file and
//! line and leaves no output behind. Skips (with a message) when shared/ is absent.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, UInt8Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use bmoe_telemetry::detect::{FileKind, detect_format};
use bmoe_telemetry::metrics::MetricsReader;
use bmoe_telemetry::trace::{ComputeRow, IoRow, RouteRow, TraceReader};

fn shared() -> Option<PathBuf> {
    let p = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    p.join("realdata").is_dir().then_some(p)
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze")
}

fn convert(input: &Path, to: &str, out: &Path) -> Output {
    run(&[
        "convert".as_ref(),
        input.as_os_str(),
        "--to".as_ref(),
        to.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
}

/// What a converted file holds: schema metadata, footer metadata, column names and types,
/// and every cell as text.
struct ReadBack {
    schema_meta: HashMap<String, String>,
    footer_meta: HashMap<String, String>,
    names: Vec<String>,
    types: Vec<DataType>,
    rows: Vec<Vec<String>>,
    batches: usize,
}

fn read_parquet(path: &Path) -> ReadBack {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let b = ParquetRecordBatchReaderBuilder::try_new(File::open(path).expect("open"))
        .expect("parquet footer");
    let footer_meta = b
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kv| {
            kv.iter()
                .map(|k| (k.key.clone(), k.value.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let schema = b.schema().clone();
    let batches: Vec<RecordBatch> = b
        .build()
        .expect("reader")
        .collect::<Result<_, _>>()
        .expect("batches");
    collect(schema, footer_meta, &batches)
}

fn read_arrow(path: &Path) -> ReadBack {
    let r = arrow_ipc::reader::FileReader::try_new(File::open(path).expect("open"), None)
        .expect("arrow footer");
    let footer_meta = r.custom_metadata().clone();
    let schema = r.schema();
    let batches: Vec<RecordBatch> = r.collect::<Result<_, _>>().expect("batches");
    collect(schema, footer_meta, &batches)
}

fn collect(
    schema: arrow_schema::SchemaRef,
    footer_meta: HashMap<String, String>,
    batches: &[RecordBatch],
) -> ReadBack {
    let mut rows = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            rows.push(b.columns().iter().map(|c| cell(c.as_ref(), i)).collect());
        }
    }
    ReadBack {
        schema_meta: schema.metadata().clone().into(),
        footer_meta,
        names: schema.fields().iter().map(|f| f.name().clone()).collect(),
        types: schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect(),
        rows,
        batches: batches.len(),
    }
}

fn float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else {
        format!("{x:?}")
    }
}

fn cell(a: &dyn Array, i: usize) -> String {
    if a.is_null(i) {
        return "null".into();
    }
    match a.data_type() {
        DataType::UInt8 => a.as_primitive::<UInt8Type>().value(i).to_string(),
        DataType::UInt32 => a.as_primitive::<UInt32Type>().value(i).to_string(),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i).to_string(),
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i).to_string(),
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i).to_string(),
        DataType::Float64 => float(a.as_primitive::<Float64Type>().value(i)),
        DataType::Boolean => a.as_boolean().value(i).to_string(),
        DataType::Dictionary(_, _) => {
            let d = a.as_dictionary::<Int32Type>();
            let key = usize::try_from(d.keys().value(i)).expect("key");
            d.values().as_string::<i32>().value(key).to_string()
        }
        other => panic!("unexpected column type {other}"),
    }
}

/// What the telemetry readers say the file holds: format, preamble lines, column names and
/// every cell as text (same spelling as [`cell`]).
struct Expected {
    format: String,
    preamble: Vec<String>,
    names: Vec<String>,
    rows: Vec<Vec<String>>,
    summaries: usize,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}

fn expected(path: &Path) -> Option<Expected> {
    let s = |v: &dyn ToString| v.to_string();
    Some(match detect_format(path).expect("detect") {
        FileKind::RouteTrace => {
            let mut r = TraceReader::<_, RouteRow>::open(path).expect("route");
            let dropped = r.has_column("dropped");
            let preamble = r.preamble().lines.clone();
            let rows = r
                .by_ref()
                .map(|x| {
                    let x = x.expect("row");
                    let mut v = vec![
                        s(&x.turn),
                        s(&x.phase),
                        s(&x.step),
                        s(&x.layer),
                        s(&x.slot),
                        s(&x.expert),
                        float(x.weight),
                        s(&x.residency),
                        s(&x.expert_bytes),
                    ];
                    if dropped {
                        v.push(opt(x.dropped));
                    }
                    v
                })
                .collect();
            let mut names = bmoe_telemetry::trace::ROUTE_COLUMNS
                .map(String::from)
                .to_vec();
            if !dropped {
                names.pop();
            }
            Expected {
                format: "route trace v1".into(),
                preamble,
                names,
                rows,
                summaries: 0,
            }
        }
        FileKind::ComputeTrace => {
            let mut r = TraceReader::<_, ComputeRow>::open(path).expect("compute");
            let preamble = r.preamble().lines.clone();
            let rows = r
                .by_ref()
                .map(|x| {
                    let x = x.expect("row");
                    vec![
                        s(&x.turn),
                        s(&x.phase),
                        s(&x.step),
                        s(&x.seq),
                        s(&x.layer),
                        x.op.clone(),
                        x.name.clone(),
                        s(&x.wall_ns),
                        s(&x.majflt),
                    ]
                })
                .collect();
            Expected {
                format: "compute trace v1".into(),
                preamble,
                names: bmoe_telemetry::trace::COMPUTE_COLUMNS
                    .map(String::from)
                    .to_vec(),
                rows,
                summaries: 0,
            }
        }
        FileKind::IoTrace => {
            let mut r = TraceReader::<_, IoRow>::open(path).expect("io");
            let preamble = r.preamble().lines.clone();
            let rows = r
                .by_ref()
                .map(|x| {
                    let x = x.expect("row");
                    vec![
                        s(&x.turn),
                        s(&x.phase),
                        s(&x.step),
                        s(&x.layer),
                        s(&x.expert),
                        s(&x.proj),
                        s(&x.lane),
                        s(&x.spec),
                        s(&x.offset),
                        s(&x.req_bytes),
                        s(&x.read_bytes),
                        s(&x.latency_ns),
                    ]
                })
                .collect();
            Expected {
                format: "io trace v1".into(),
                preamble,
                names: bmoe_telemetry::trace::IO_COLUMNS.map(String::from).to_vec(),
                rows,
                summaries: 0,
            }
        }
        FileKind::Metrics { .. } => {
            let mut r = MetricsReader::open(path).expect("metrics");
            let names: Vec<String> = r
                .header()
                .iter()
                .filter(|h| bmoe_telemetry::metrics::TOKEN_COLUMNS.contains(&h.as_str()))
                .cloned()
                .collect();
            let preamble = r.preamble().lines.clone();
            let format = format!("metrics CSV v{}", r.preamble().version().unwrap_or(0));
            let ints = ["step", "steps", "read_bytes", "majflt", "turn", "mtp_batch"];
            let rows = r
                .by_ref()
                .map(|x| {
                    let x = x.expect("row");
                    names
                        .iter()
                        .map(|n| match x.get_f64(n) {
                            None => "null".into(),
                            Some(v) if ints.contains(&n.as_str()) => format!("{}", v as u64),
                            Some(v) => float(v),
                        })
                        .collect()
                })
                .collect();
            Expected {
                format,
                preamble,
                names,
                rows,
                summaries: r.summaries().len(),
            }
        }
        _ => return None,
    })
}

fn realdata_files(shared: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![shared.join("realdata")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn check(path: &Path, exp: &Expected, got: &ReadBack, what: &str) {
    let ctx = format!("{} ({what})", path.display());
    assert_eq!(got.names, exp.names, "{ctx}: columns");
    assert_eq!(got.rows.len(), exp.rows.len(), "{ctx}: row count");
    for (i, (g, e)) in got.rows.iter().zip(&exp.rows).enumerate() {
        assert_eq!(g, e, "{ctx}: data row {i}");
    }
    let meta = &got.schema_meta;
    assert_eq!(meta.get("bmoe.format"), Some(&exp.format), "{ctx}");
    assert_eq!(
        meta.get("bmoe.preamble"),
        Some(&exp.preamble.join("\n")),
        "{ctx}"
    );
    assert_eq!(
        meta.contains_key("bmoe.summary"),
        exp.summaries > 0,
        "{ctx}: summary trailer"
    );
}

#[test]
fn every_realdata_trace_and_metrics_file_round_trips_through_parquet_and_arrow() {
    let Some(shared) = shared() else {
        eprintln!("SKIP: shared/realdata not found (set BMOE_SHARED)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut kinds: HashMap<String, usize> = HashMap::new();
    for path in realdata_files(&shared) {
        let Some(exp) = expected(&path) else { continue };
        *kinds.entry(exp.format.clone()).or_default() += 1;
        let stem = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        for to in ["parquet", "arrow"] {
            let out = dir.path().join(format!("{stem}.{to}"));
            let o = convert(&path, to, &out);
            assert!(
                o.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(
                stdout.contains(&format!("{} rows", exp.rows.len())),
                "{stdout}"
            );
            let got = if to == "parquet" {
                read_parquet(&out)
            } else {
                read_arrow(&out)
            };
            check(&path, &exp, &got, to);
            if to == "parquet" {
                // Plain footer key-values too (what DuckDB's parquet_kv_metadata shows).
                assert_eq!(got.footer_meta.get("bmoe.format"), Some(&exp.format));
                assert!(got.footer_meta.contains_key("ARROW:schema"));
            }
        }
    }
    for kind in [
        "route trace v1",
        "compute trace v1",
        "io trace v1",
        "metrics CSV v0",
        "metrics CSV v1",
        "metrics CSV v2",
    ] {
        assert!(
            kinds.get(kind).is_some_and(|n| *n > 0),
            "no {kind} file in realdata: {kinds:?}"
        );
    }
}

#[test]
fn columns_are_typed_and_the_preamble_is_metadata() {
    let Some(shared) = shared() else {
        eprintln!("SKIP: shared/realdata not found (set BMOE_SHARED)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let route = shared.join("realdata/synthetic/qwen.dropped.route.csv");
    let out = dir.path().join("r.parquet");
    assert!(convert(&route, "parquet", &out).status.success());
    let got = read_parquet(&out);
    use DataType::*;
    assert_eq!(
        got.types,
        [
            UInt32, UInt8, Int64, UInt32, UInt32, UInt32, Float64, UInt8, UInt64, Boolean
        ]
    );
    let m = &got.footer_meta;
    assert!(
        m.get("bmoe.model").is_some_and(|v| v.ends_with(".gguf")),
        "{m:?}"
    );
    assert!(m.contains_key("bmoe.n_expert_used"), "{m:?}");
    let layers: serde_json::Value =
        serde_json::from_str(m.get("bmoe.layers").expect("layers")).expect("json");
    assert!(layers[0]["expert_bytes"].as_u64().is_some_and(|b| b > 0));
    // The per-layer lines are not flattened into one misleading `layer=` key.
    assert!(!m.contains_key("bmoe.layer") && !m.contains_key("bmoe.dense_bytes"));

    let compute = shared.join("realdata/synthetic/synthetic.compute.csv");
    let out = dir.path().join("c.arrow");
    assert!(convert(&compute, "arrow", &out).status.success());
    let got = read_arrow(&out);
    let dict = Dictionary(Box::new(Int32), Box::new(Utf8));
    assert_eq!(got.types[5], dict);
    assert_eq!(got.types[6], dict);

    let metrics = shared.join("realdata/synthetic/synthetic.metrics-v2.csv");
    let out = dir.path().join("m.parquet");
    assert!(convert(&metrics, "parquet", &out).status.success());
    let got = read_parquet(&out);
    assert_eq!(got.types[0], UInt64, "step");
    assert_eq!(got.types[2], Float64, "wall_ms");
    let m = &got.footer_meta;
    assert_eq!(m.get("bmoe.summary.tokens").map(String::as_str), Some("40"));
    assert_eq!(m.get("bmoe.engine").map(String::as_str), Some("0.18.0"));
    assert!(m.contains_key("bmoe.cache_mb"), "{m:?}");
}

/// A route trace written here, big enough for several record batches.
fn synthetic_route(path: &Path, rows: usize, bad_line_at: Option<usize>) {
    use std::fmt::Write as _;
    let mut s = String::from(
        "# route_trace v1\n# model=/m/x y.gguf arch=qwen3moe n_layer=2 n_expert=8 n_expert_used=2\n\
         # layer=0 expert_bytes=4096 dense_bytes=100\n# layer=1 expert_bytes=4096 dense_bytes=100\n\
         turn,phase,step,layer,slot,expert,weight,residency,expert_bytes,dropped\n",
    );
    for i in 0..rows {
        // Header + 4 preamble lines: data row i is on line i + 6.
        if bad_line_at == Some(i + 6) {
            s.push_str("0,1,7,0,0,three,0.5,0,4096,0\n");
            continue;
        }
        let _ = writeln!(
            s,
            "0,1,{},{},{},{},{},{},{},{}",
            i / 4,
            (i / 2) % 2,
            i % 2,
            i % 8,
            if i % 5 == 0 {
                "nan".to_string()
            } else {
                format!("{:.6}", 0.01 * (i % 97) as f64)
            },
            i % 3,
            if i % 3 == 0 { 4096 } else { 0 },
            if i % 7 == 0 { "" } else { "0" },
        );
    }
    std::fs::write(path, s).expect("write trace");
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".partial"))
        .collect()
}

#[test]
fn many_batches_round_trip_and_empty_dropped_cells_are_null() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("big.route.csv");
    synthetic_route(&trace, 150_000, None);
    let exp = expected(&trace).expect("route");
    for (to, read) in [
        ("parquet", read_parquet as fn(&Path) -> ReadBack),
        ("arrow", read_arrow),
    ] {
        let out = dir.path().join(format!("big.{to}"));
        let o = convert(&trace, to, &out);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = read(&out);
        assert!(got.batches >= 2, "{to}: {} batches", got.batches);
        check(&trace, &exp, &got, to);
        assert_eq!(got.rows[0][9], "null", "empty dropped cell");
        assert_eq!(got.rows[0][6], "NaN", "nan weight");
    }
}

#[test]
fn a_bad_row_names_file_and_line_and_leaves_no_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("bad.route.csv");
    // The bad row comes after two full record batches, so the writer has already written.
    synthetic_route(&trace, 150_000, Some(140_000));
    for to in ["parquet", "arrow"] {
        let out = dir.path().join(format!("bad.{to}"));
        // An older output of the same name must survive a failed conversion untouched.
        std::fs::write(&out, b"previous").expect("write");
        let o = convert(&trace, to, &out);
        assert_eq!(o.status.code(), Some(1), "{to}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("{}:140000: column `expert`", trace.display())),
            "{err}"
        );
        assert!(err.contains("hint:"), "{err}");
        assert!(o.stdout.is_empty());
        assert_eq!(std::fs::read(&out).expect("read"), b"previous");
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }
}

#[test]
fn a_cut_short_last_line_is_left_out_and_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("cut.route.csv");
    synthetic_route(&trace, 100, None);
    let mut text = std::fs::read_to_string(&trace).expect("read");
    text.push_str("0,1,99,1,0,3,0.2"); // a writer killed mid-row: no newline
    std::fs::write(&trace, text).expect("write");
    let out = dir.path().join("cut.parquet");
    let o = convert(&trace, "parquet", &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(":106: the last line was cut short"), "{err}");
    let got = read_parquet(&out);
    assert_eq!(got.rows.len(), 100);
    assert!(
        got.footer_meta
            .get("bmoe.truncated")
            .is_some_and(|v| v.starts_with("line 106")),
        "{:?}",
        got.footer_meta
    );
    let out = dir.path().join("cut.arrow");
    assert!(convert(&trace, "arrow", &out).status.success());
    assert!(read_arrow(&out).footer_meta.contains_key("bmoe.truncated"));
}

#[test]
fn files_that_are_not_traces_are_refused_with_a_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sidecar = dir.path().join("run.metrics");
    std::fs::write(&sidecar, "peak_rss_kb=100\nexit=0\n").expect("write");
    let out = dir.path().join("x.parquet");
    let o = convert(&sidecar, "parquet", &out);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("run.metrics: not a trace or metrics CSV"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");
    assert!(!out.exists());

    let missing = dir.path().join("nope.csv");
    let o = convert(&missing, "arrow", &out);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope.csv"));

    // Converting a file onto itself would destroy it.
    let trace = dir.path().join("t.parquet");
    synthetic_route(&trace, 3, None);
    let o = convert(&trace, "parquet", &trace);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is the input file"));

    // An output directory that does not exist: error, nothing written.
    let o = convert(&trace, "parquet", &dir.path().join("no/such/dir/x.parquet"));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot write the parquet file"), "{err}");
}

#[test]
fn default_output_replaces_the_extension() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("run.route.csv");
    synthetic_route(&trace, 10, None);
    let o = run(&[
        "convert".as_ref(),
        trace.as_os_str(),
        "--to".as_ref(),
        "arrow".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.path().join("run.route.arrow");
    assert_eq!(read_arrow(&out).rows.len(), 10);
    assert!(String::from_utf8_lossy(&o.stdout).contains("run.route.arrow"));
}
