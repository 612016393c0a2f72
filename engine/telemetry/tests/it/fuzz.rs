//! Fuzz-style tests: random byte flips, insertions, deletions and truncations over real files
//! (and files written by this crate, so the test has teeth without the shared folder) give
//! errors or truncation flags, never panics. Seeded, so a failure reproduces.

use crate::common;

use std::io::Write as _;

use bmoe_telemetry::detect::{FileKind, detect_text};
use bmoe_telemetry::kv::parse_sidecar;
use bmoe_telemetry::metrics::{MetricsReader, MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
use bmoe_telemetry::protocol::{Progress, parse_line};
use bmoe_telemetry::route_columns::{RouteSelect, RouteTable};
use bmoe_telemetry::summary::PerfReport;
use bmoe_telemetry::trace::{
    ComputeRow, DecodeTraceInfo, IoRow, RouteRow, RouteTraceInfo, TraceReader, TraceRow,
    TraceWriter,
};

/// xorshift64*: small, seeded, good enough to pick offsets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const LABEL: &str = "fuzzed.csv";

#[derive(Debug, Default)]
struct Outcome {
    rows: usize,
    error: Option<String>,
    truncated: bool,
}

/// Counts rows until the first error.
fn drain<T>(rows: impl Iterator<Item = bmoe_telemetry::Result<T>>, out: &mut Outcome) {
    for row in rows {
        match row {
            Ok(_) => out.rows += 1,
            Err(e) => {
                out.error = Some(e.to_string());
                break;
            }
        }
    }
}

fn run_trace<T: TraceRow>(bytes: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    match TraceReader::<_, T>::new(bytes, LABEL) {
        Err(e) => out.error = Some(e.to_string()),
        Ok(mut r) => {
            drain(r.by_ref(), &mut out);
            out.truncated = r.truncated().is_some();
        }
    }
    out
}

/// The row reader's outcome, checked against the columnar reader's: one parser, so on every
/// mutation both read the same rows, fail with the same message or see the same cut.
fn run_route(bytes: &[u8]) -> Outcome {
    let out = run_trace::<RouteRow>(bytes);
    match RouteTable::from_reader(bytes, LABEL, &RouteSelect::default()) {
        Ok(t) => {
            assert_eq!(
                out.error, None,
                "the row reader failed, the columns did not"
            );
            assert_eq!(t.total_rows as usize, out.rows);
            assert_eq!(t.truncated.is_some(), out.truncated);
        }
        // Narrower columns than RouteRow: a storage limit, not a format error.
        Err(e)
            if e.to_string().contains("the column reader stores")
                || e.to_string().contains("of at most 65535") => {}
        Err(e) => assert_eq!(out.error, Some(e.to_string())),
    }
    out
}

fn run_metrics(bytes: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    match MetricsReader::new(bytes, LABEL) {
        Err(e) => out.error = Some(e.to_string()),
        Ok(mut r) => {
            drain(r.by_ref(), &mut out);
            out.truncated = r.truncated().is_some();
        }
    }
    out
}

fn run(kind: FileKind, bytes: &[u8]) -> Outcome {
    let out = match kind {
        FileKind::Metrics { .. } => run_metrics(bytes),
        FileKind::RouteTrace => run_route(bytes),
        FileKind::ComputeTrace => run_trace::<ComputeRow>(bytes),
        FileKind::IoTrace => run_trace::<IoRow>(bytes),
        _ => {
            let text = String::from_utf8_lossy(bytes);
            let _ = parse_sidecar(&text);
            let _ = PerfReport::parse(&text);
            for l in text.lines() {
                let _ = parse_line(l);
            }
            let _ = detect_text(&text);
            Outcome::default()
        }
    };
    if let Some(e) = &out.error {
        // Every error names the file it is about.
        assert!(e.starts_with(LABEL), "error without the file name: {e}");
    }
    out
}

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    match rng.below(6) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                if let Some(x) = b.get_mut(i) {
                    *x = rng.next() as u8;
                }
            }
        }
        1 => {
            // Flip to characters that matter to the parsers.
            let specials = b",\"#\n\r=-.e 0";
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                let c = specials[rng.below(specials.len())];
                if let Some(x) = b.get_mut(i) {
                    *x = c;
                }
            }
        }
        2 => b.truncate(rng.below(b.len() + 1)),
        3 => {
            let i = rng.below(b.len() + 1);
            let n = 1 + rng.below(32);
            let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            b.splice(i..i, junk);
        }
        4 => {
            let i = rng.below(b.len() + 1);
            let j = (i + rng.below(64)).min(b.len());
            b.drain(i..j);
        }
        _ => {
            // CRLF everywhere, then cut.
            let mut c = Vec::with_capacity(b.len() * 2);
            for &x in &b {
                if x == b'\n' {
                    c.push(b'\r');
                }
                c.push(x);
            }
            let cut = rng.below(c.len() + 1);
            c.truncate(cut);
            b = c;
        }
    }
    b
}

/// Corpus written by this crate's writers (so the test runs without the shared folder).
fn generated_corpus() -> Vec<(FileKind, Vec<u8>)> {
    let mut out = Vec::new();
    let info = RunInfo {
        engine: Some("0.1.0".into()),
        model: Some("/sd card/m.gguf".into()),
        n_layer: Some(4),
        overlap: Some(true),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::new(Vec::new(), &info).expect("writer");
    for i in 1..=40u64 {
        w.write_row(&TokenRow {
            step: Some(i),
            steps: Some(40),
            wall_ms: Some(100.0 + i as f64 * 1.25),
            io_ms: Some(50.5),
            cache_hit_pct: Some(-1.0),
            turn: Some(0),
            ..TokenRow::default()
        })
        .expect("row");
    }
    let mut t = SummaryTrailer::new();
    t.push("tokens", "40");
    t.push("s/tok", "0.120");
    w.write_summary(&t).expect("trailer");
    out.push((
        FileKind::Metrics { version: Some(2) },
        w.into_inner().expect("bytes"),
    ));

    let mut w =
        TraceWriter::<_, ComputeRow>::new(Vec::new(), &DecodeTraceInfo::default()).expect("writer");
    for i in 0..60u32 {
        w.write_row(&ComputeRow {
            turn: 0,
            phase: 1,
            step: 30,
            seq: i,
            layer: i as i32 % 4 - 1,
            op: "MUL_MAT".into(),
            name: format!("odd,\"{i}\" name"),
            wall_ns: 1000 + u64::from(i),
            majflt: 0,
        })
        .expect("row");
    }
    out.push((FileKind::ComputeTrace, w.into_inner().expect("bytes")));

    let mut w =
        TraceWriter::<_, RouteRow>::new(Vec::new(), &RouteTraceInfo::default()).expect("writer");
    for i in 0..80u32 {
        w.write_row(&RouteRow {
            turn: 0,
            phase: 1,
            step: 28 + i64::from(i / 8),
            layer: i % 8,
            slot: i % 2,
            expert: i * 7 % 128,
            weight: if i % 5 == 0 {
                f64::NAN
            } else {
                0.1 * f64::from(i)
            },
            residency: (i % 3) as u8,
            expert_bytes: 3_059_712,
            dropped: Some(i % 7 == 0),
        })
        .expect("row");
    }
    out.push((FileKind::RouteTrace, w.into_inner().expect("bytes")));

    let mut log = Vec::new();
    writeln!(
        log,
        "{}\n=== answer ===\nok\n=== perf ===\ngeneration: 2 tokens, 0.500 s/token (2.000 tok/s)\nmoe-cache: 1.0% hit, resident 2.0 MiB\npeak_rss_kb=5",
        Progress::default().to_line()
    )
    .expect("write");
    out.push((FileKind::RunLog, log));
    out
}

/// Real files of every kind, cut to their first 2000 lines so the test stays quick.
fn real_corpus() -> Vec<(FileKind, Vec<u8>)> {
    let Some(shared) = common::shared_dir() else {
        return Vec::new();
    };
    let r = shared.join("realdata");
    let mut out = Vec::new();
    for f in [
        "2026-07-12/qwen_stream.csv",
        "2026-07-14-warmup/warmup_qwen_k8.csv",
        "2026-07-20-cache-replay/lanes4_k2.csv",
        "synthetic/synthetic.metrics-v2.csv",
        "synthetic/qwen.dropped.route.csv",
        "2026-07-15-route-trace/gemma.route.csv",
        "synthetic/synthetic.compute.csv",
        "synthetic/synthetic.io.csv",
        "2026-07-12/qwen_stream.metrics",
        "2026-07-13/qwen_auto_ov.log",
    ] {
        let bytes = std::fs::read(r.join(f)).expect("read");
        let kind = detect_text(&String::from_utf8_lossy(&bytes));
        let mut lines = 0;
        let cut = bytes
            .iter()
            .position(|&b| {
                lines += usize::from(b == b'\n');
                lines == 2000
            })
            .map_or(bytes.len(), |i| i + 1);
        out.push((kind, bytes[..cut].to_vec()));
    }
    out
}

#[test]
fn random_corruption_never_panics() {
    let mut rng = Rng(0x5EED_B0E5);
    let corpus: Vec<_> = generated_corpus()
        .into_iter()
        .chain(real_corpus())
        .collect();
    let mut errors = 0;
    let mut runs = 0;
    for (kind, base) in &corpus {
        let clean = run(*kind, base);
        assert!(
            clean.error.is_none(),
            "{kind:?}: clean input failed: {clean:?}"
        );
        for _ in 0..100 {
            let m = mutate(&mut rng, base);
            let o = run(*kind, &m);
            errors += usize::from(o.error.is_some());
            runs += 1;
        }
    }
    // The corruption must actually reach the parsers: a good share of runs end in an error.
    println!("fuzz: {runs} corrupted inputs, {errors} rejected with an error");
    assert!(
        errors * 10 > runs,
        "only {errors}/{runs} corrupted inputs were rejected"
    );
}

#[test]
fn truncation_after_the_header_is_a_flag_never_an_error() {
    let mut rng = Rng(0x7A11_C0DE);
    let corpus: Vec<_> = generated_corpus()
        .into_iter()
        .chain(real_corpus())
        .collect();
    for (kind, base) in &corpus {
        if !matches!(
            kind,
            FileKind::Metrics { .. }
                | FileKind::RouteTrace
                | FileKind::ComputeTrace
                | FileKind::IoTrace
        ) {
            continue;
        }
        // The end of the header row.
        let text = String::from_utf8_lossy(base);
        let mut header_end = 0;
        for l in text.split_inclusive('\n') {
            header_end += l.len();
            if !l.starts_with('#') && !l.trim().is_empty() {
                break;
            }
        }
        for _ in 0..60 {
            let cut = header_end + rng.below(base.len() - header_end + 1);
            let piece = &base[..cut];
            let o = run(*kind, piece);
            assert!(o.error.is_none(), "{kind:?} cut at {cut}: {o:?}");
            // Complete data lines before the cut, counted independently.
            let complete = String::from_utf8_lossy(piece)
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n') && !l.starts_with('#') && !l.trim().is_empty())
                .count()
                - 1; // the header
            let metrics = matches!(kind, FileKind::Metrics { .. });
            let partial = !piece.ends_with(b"\n") && {
                let last = piece.rsplit(|&b| b == b'\n').next().unwrap_or(b"");
                // A metrics trailer carries totals, so a cut one counts; traces ignore
                // comments after the header, cut or not.
                (metrics || !last.starts_with(b"#")) && !last.trim_ascii().is_empty()
            };
            if partial {
                // A cut row is flagged and left out, even when the cut text still parses
                // (cut inside its last field).
                assert!(
                    o.rows == complete && o.truncated,
                    "{kind:?} cut at {cut}: {o:?}, {complete} complete lines"
                );
            } else {
                assert_eq!(o.rows, complete, "{kind:?} cut at {cut}");
                assert!(!o.truncated, "{kind:?} cut at {cut}");
            }
        }
    }
}
