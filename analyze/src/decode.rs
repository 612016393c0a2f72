//! decode-analyze: compute-trace and io-trace reports.
//!
//! Rows come from `bmoe-telemetry`'s typed trace readers. Decode rows (phase 1) are analysed;
//! a trace without decode rows falls back to all rows, as the reference does, but says so on
//! stderr.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use bmoe_telemetry::table::Truncated;
use bmoe_telemetry::trace::{
    ComputeRow, ComputeTraceReader, DecodeTraceInfo, IoRow, IoTraceReader, TraceReader, TraceRow,
};

use serde_json::json;

use crate::pyfmt::{f, fw};
use crate::table::{Table, num};
use crate::{AnalyzeError, Result};

const MIB: f64 = 1_048_576.0;

fn fmt_ms(ns: f64) -> String {
    fw(ns / 1e6, 9, 2)
}

fn bar(frac: f64, width: usize) -> String {
    let r = (frac * width as f64).round_ties_even().max(0.0) as usize;
    format!("{}{}", "#".repeat(r), ".".repeat(width.saturating_sub(r)))
}

fn opt_num<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "?".to_string(), ToString::to_string)
}

fn flag(v: Option<bool>) -> String {
    v.map_or_else(|| "?".to_string(), |b| u8::from(b).to_string())
}

/// Every row of a trace. A last line cut short (a killed writer) is not a row: the rows before
/// it are returned and the cut is handed back for the caller to report (see [`note_cut`]).
pub(crate) fn read_all<R: std::io::BufRead, T: TraceRow>(
    path: &Path,
    mut reader: TraceReader<R, T>,
) -> Result<(Vec<T>, Option<Truncated>)> {
    let rows = reader
        .by_ref()
        .collect::<bmoe_telemetry::Result<Vec<T>>>()
        .map_err(|e| AnalyzeError::from_telemetry(path, e))?;
    Ok((rows, reader.truncated().cloned()))
}

/// Say on stderr that a cut-short last line was left out (every reader's note).
pub(crate) fn note_cut(path: &Path, cut: Option<&Truncated>) {
    if let Some(cut) = cut {
        eprintln!("note: {}", cut_note(path, cut));
    }
}

/// The text of the note for a last line without a line end: the file was cut there (a killed
/// writer), so the line — parsable or not — is not a whole row and was left out.
pub(crate) fn cut_note(path: &Path, cut: &Truncated) -> String {
    format!(
        "{}: line {} has no line end: the file was cut short inside it (the writer was killed?); that line was left out, every row before it is used",
        path.display(),
        cut.line
    )
}

/// Keep decode rows, or every row when there are none. `None` when the file has no rows.
pub(crate) fn select<T>(
    path: &Path,
    rows: Vec<T>,
    phase: impl Fn(&T) -> u8,
) -> Result<(Vec<T>, bool)> {
    if rows.is_empty() {
        return Err(AnalyzeError::Empty {
            message: format!("{}: no rows", path.display()),
            hint: "the trace has its header but no rows (the run ended before its first traced step?); record a run that generates tokens (`bmoe-cli --compute-trace FILE` or `bmoe-cli --io-trace FILE`)".into(),
        });
    }
    let has_decode = rows.iter().any(|r| phase(r) == 1);
    if has_decode {
        Ok((rows.into_iter().filter(|r| phase(r) == 1).collect(), false))
    } else {
        Ok((rows, true))
    }
}

/// Options of `bmoe-analyze compute`.
#[derive(Debug, Clone, Copy)]
pub struct ComputeOptions {
    /// Ops listed.
    pub top: i64,
    /// Add the per-layer section.
    pub layers: bool,
}

/// A decode-analyze report: the reference text plus the same figures as tables.
#[derive(Debug, Clone)]
pub struct Report {
    /// The reference layout.
    pub text: String,
    /// Header figures (`meta` in JSON).
    pub meta: serde_json::Value,
    /// The report's tables, unrounded.
    pub tables: Vec<Table>,
    /// True when the file had no decode rows and all rows were used.
    pub fell_back: bool,
}

/// The compute report.
pub fn compute(path: &Path, opt: ComputeOptions) -> Result<Report> {
    let reader =
        ComputeTraceReader::open(path).map_err(|e| AnalyzeError::from_telemetry(path, e))?;
    let info: DecodeTraceInfo = reader.info().clone();
    let (rows, cut) = read_all(path, reader)?;
    note_cut(path, cut.as_ref());
    let (rows, fell_back) = select(path, rows, |r: &ComputeRow| r.phase)?;
    let n = rows
        .iter()
        .map(|r| r.step)
        .collect::<HashSet<_>>()
        .len()
        .max(1) as f64;
    let total_ns: u64 = rows.iter().map(|r| r.wall_ns).sum();
    let total_flt: u64 = rows.iter().map(|r| r.majflt).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "model={} arch={} n_layer={} threads={}",
        opt_str(&info.model),
        opt_str(&info.arch),
        opt_num(&info.n_layer),
        opt_num(&info.n_threads)
    );
    let layer_mode = rows.iter().all(|r| r.op == "LAYER");
    if layer_mode {
        let _ = writeln!(
            out,
            "decode steps={}  layer granularity  measured compute={} ms/token  majflt={}/token",
            n as u64,
            fmt_ms(total_ns as f64 / n),
            f(total_flt as f64 / n, 0)
        );
        out.push_str("\nNOTE: one barrier per layer - coalescing and the expert prefetch survive, so these\n");
        out.push_str(
            "      numbers sit close to an untraced run. No per-op detail inside a segment.\n\n",
        );
        let _ = writeln!(
            out,
            "{:<10}{:>10}{:>8}  {:>10}",
            "segment", "ms/token", "share", "majflt/tok"
        );
        let mut segs: Vec<(String, u64, u64)> = Vec::new();
        let mut idx: HashMap<String, usize> = HashMap::new();
        for r in &rows {
            let i = *idx.entry(r.name.clone()).or_insert_with(|| {
                segs.push((r.name.clone(), 0, 0));
                segs.len() - 1
            });
            segs[i].1 += r.wall_ns;
            segs[i].2 += r.majflt;
        }
        let rank = |name: &str| -> (u8, i64) {
            if name == "pre" {
                (0, 0)
            } else if let Some(i) = name
                .strip_prefix("blk.")
                .and_then(|s| s.parse::<i64>().ok())
            {
                (1, i)
            } else if name == "post" {
                (3, 0)
            } else {
                (2, 0)
            }
        };
        segs.sort_by_key(|s| rank(&s.0));
        let largest = segs.iter().map(|s| s.1).max().unwrap_or(0).max(1) as f64;
        let mut table = Table::new(
            "segments",
            &["segment", "ms_per_token", "share_pct", "majflt_per_token"],
        );
        for (name, ns, flt) in &segs {
            table.push(vec![
                json!(name),
                num(*ns as f64 / n / 1e6),
                num(100.0 * *ns as f64 / total_ns.max(1) as f64),
                num(*flt as f64 / n),
            ]);
            let _ = writeln!(
                out,
                "{name:<10}{}{}%  {}  {}",
                fmt_ms(*ns as f64 / n),
                fw(100.0 * *ns as f64 / total_ns.max(1) as f64, 7, 1),
                fw(*flt as f64 / n, 10, 1),
                bar(*ns as f64 / largest, 28)
            );
        }
        return Ok(Report {
            text: out,
            meta: compute_meta(&info, n, total_ns, total_flt, "layer"),
            tables: vec![table],
            fell_back,
        });
    }
    let _ = writeln!(
        out,
        "decode steps={}  nodes/step={}  measured compute={} ms/token  majflt={}/token",
        n as u64,
        rows.len() as u64 / n as u64,
        fmt_ms(total_ns as f64 / n),
        f(total_flt as f64 / n, 0)
    );
    out.push_str(
        "\nNOTE: measured, not a residual - each node was isolated and synchronized. The barrier\n",
    );
    out.push_str(
        "      that makes it measurable also inflates it; compare shares, not absolutes.\n\n",
    );
    let _ = writeln!(
        out,
        "{:<18}{:>10}{:>8}  {:>10}  {}",
        "op",
        "ms/token",
        "share",
        "majflt/tok",
        " ".repeat(28)
    );
    // (op, ns, faults, ns of faulting rows, faults of faulting rows) in first-appearance order.
    let mut ops: Vec<(String, u64, u64, u64)> = Vec::new();
    let mut idx: HashMap<&str, usize> = HashMap::new();
    for r in &rows {
        let i = *idx.entry(r.op.as_str()).or_insert_with(|| {
            ops.push((r.op.clone(), 0, 0, 0));
            ops.len() - 1
        });
        ops[i].1 += r.wall_ns;
        ops[i].2 += r.majflt;
        if r.majflt > 0 {
            ops[i].3 += r.wall_ns;
        }
    }
    let mut by_ns = ops.clone();
    by_ns.sort_by_key(|o| std::cmp::Reverse(o.1));
    let total = total_ns.max(1) as f64;
    let mut tables = vec![Table::new(
        "ops",
        &["op", "ms_per_token", "share_pct", "majflt_per_token"],
    )];
    for (op, ns, flt, _) in by_ns
        .iter()
        .take(crate::route::views::py_slice_len(by_ns.len(), opt.top))
    {
        let share = *ns as f64 / total;
        tables[0].push(vec![
            json!(op),
            num(*ns as f64 / n / 1e6),
            num(100.0 * share),
            num(*flt as f64 / n),
        ]);
        let _ = writeln!(
            out,
            "{op:<18}{}{}%  {}  {}",
            fmt_ms(*ns as f64 / n),
            fw(100.0 * share, 7, 1),
            fw(*flt as f64 / n, 10, 1),
            bar(share, 28)
        );
    }
    if total_flt > 0 {
        out.push_str("\nfault attribution - where the >RAM stall is billed as compute\n");
        let mut faulting: Vec<&(String, u64, u64, u64)> = ops.iter().filter(|o| o.2 > 0).collect();
        faulting.sort_by_key(|o| std::cmp::Reverse(o.2));
        let fault_ns: u64 = faulting.iter().map(|o| o.3).sum();
        for (op, _, flt, ns) in faulting.iter().take(8).map(|o| (&o.0, o.1, o.2, o.3)) {
            let _ = writeln!(
                out,
                "  {op:<16}{} majflt/tok  in {} ms/tok ({}% of compute)",
                fw(flt as f64 / n, 9, 1),
                fmt_ms(ns as f64 / n),
                fw(100.0 * ns as f64 / total, 4, 1)
            );
        }
        let _ = writeln!(
            out,
            "  {:<16}{} majflt/tok  in {} ms/tok ({}% of compute)",
            "TOTAL",
            fw(total_flt as f64 / n, 9, 1),
            fmt_ms(fault_ns as f64 / n),
            fw(100.0 * fault_ns as f64 / total, 4, 1)
        );
        out.push_str("  ^ nodes that faulted. Their time is flash wait, not arithmetic - subtract it before\n");
        out.push_str("    calling this model compute-bound.\n");
    }
    if opt.layers {
        out.push_str("\nby layer (-1 = no layer: embeddings, output head, masks)\n");
        let mut layers: BTreeMap<i32, u64> = BTreeMap::new();
        for r in &rows {
            *layers.entry(r.layer).or_default() += r.wall_ns;
        }
        let largest = layers.values().copied().max().unwrap_or(0).max(1) as f64;
        let mut table = Table::new("layers", &["layer", "ms_per_token"]);
        for (l, ns) in &layers {
            table.push(vec![json!(l), num(*ns as f64 / n / 1e6)]);
            let _ = writeln!(
                out,
                "  layer {l:3} {} ms/tok  {}",
                fmt_ms(*ns as f64 / n),
                bar(*ns as f64 / largest, 28)
            );
        }
        tables.push(table);
    }
    Ok(Report {
        text: out,
        meta: compute_meta(&info, n, total_ns, total_flt, "op"),
        tables,
        fell_back,
    })
}

fn compute_meta(
    info: &DecodeTraceInfo,
    steps: f64,
    total_ns: u64,
    total_flt: u64,
    granularity: &str,
) -> serde_json::Value {
    json!({
        "model": info.model, "arch": info.arch, "n_layer": info.n_layer, "threads": info.n_threads,
        "granularity": granularity,
        "decode_steps": steps as u64,
        "compute_ms_per_token": num(total_ns as f64 / steps / 1e6),
        "majflt_per_token": num(total_flt as f64 / steps),
    })
}

fn opt_str(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "?".into())
}

/// The io report. The `bool` is true when the file had no decode rows and all rows were used.
pub fn io(path: &Path, adjacent: bool) -> Result<Report> {
    let reader = IoTraceReader::open(path).map_err(|e| AnalyzeError::from_telemetry(path, e))?;
    let info: DecodeTraceInfo = reader.info().clone();
    let (rows, cut) = read_all(path, reader)?;
    note_cut(path, cut.as_ref());
    let (rows, fell_back) = select(path, rows, |r: &IoRow| r.phase)?;
    let steps: HashSet<i64> = rows.iter().map(|r| r.step).collect();
    let n = steps.len().max(1) as f64;
    let got: u64 = rows.iter().map(|r| r.read_bytes).sum();
    let want: u64 = rows.iter().map(|r| r.req_bytes).sum();
    let busy: u64 = rows.iter().map(|r| r.latency_ns).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "model={} io_threads={} o_direct={} overlap={}",
        opt_str(&info.model),
        opt_num(&info.io_threads),
        flag(info.o_direct),
        flag(info.overlap)
    );
    let _ = writeln!(
        out,
        "decode steps={}  reads={} ({}/token)  read={} MiB/token",
        steps.len(),
        rows.len(),
        f(rows.len() as f64 / n, 0),
        f(got as f64 / MIB / n, 1)
    );
    let bw = if busy > 0 {
        f(got as f64 / MIB / (busy as f64 / 1e9), 0)
    } else {
        "n/a".to_string()
    };
    let _ = writeln!(
        out,
        "lane-busy bandwidth={bw} MiB/s aggregated over lanes ({} ms lane-busy/token)",
        f(busy as f64 / 1e6 / n, 0)
    );
    let waste = if got > 0 {
        100.0 * (got as f64 - want as f64) / got as f64
    } else {
        0.0
    };
    let _ = writeln!(
        out,
        "alignment waste={}% ({} MiB/token read but not wanted)",
        f(waste, 1),
        f((got as f64 - want as f64) / MIB / n, 2)
    );
    let mut meta = json!({
        "model": info.model, "io_threads": info.io_threads, "o_direct": info.o_direct,
        "overlap": info.overlap, "decode_steps": steps.len(), "reads": rows.len(),
        "read_mib_per_token": num(got as f64 / MIB / n),
        "lane_busy_ms_per_token": num(busy as f64 / 1e6 / n),
        "bandwidth_mib_s": if busy > 0 { num(got as f64 / MIB / (busy as f64 / 1e9)) } else { serde_json::Value::Null },
        "alignment_waste_pct": num(waste),
    });
    let mut lat: Vec<u64> = rows.iter().map(|r| r.latency_ns).collect();
    lat.sort_unstable();
    let mut latency = Table::new("latency", &["percentile", "us"]);
    out.push_str("\nper-read latency (us)\n");
    for (label, q) in [("50", 0.5), ("90", 0.9), ("99", 0.99)] {
        let v = bmoe_stats::percentile_nearest_floor(&lat, q).unwrap_or(0);
        latency.push(vec![json!(format!("p{label}")), num(v as f64 / 1e3)]);
        let _ = writeln!(out, "  p{label:<3} {}", fw(v as f64 / 1e3, 9, 1));
    }
    let max_us = lat.last().copied().unwrap_or(0) as f64 / 1e3;
    latency.push(vec![json!("max"), num(max_us)]);
    let _ = writeln!(out, "  max  {}", fw(max_us, 9, 1));
    out.push_str("\nby request size - the per-read cost of scattering\n");
    let _ = writeln!(
        out,
        "{:>10}{:>9}{:>9}{:>9}{:>9}",
        "size", "reads", "MiB", "MiB/s", "us/read"
    );
    let mut buckets: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for r in &rows {
        let kib = r.read_bytes / 1024;
        let b = if kib == 0 {
            0
        } else {
            1u64 << (63 - kib.leading_zeros())
        };
        let e = buckets.entry(b).or_default();
        e.0 += 1;
        e.1 += r.read_bytes;
        e.2 += r.latency_ns;
    }
    let mut sizes = Table::new(
        "sizes",
        &["size_kib", "reads", "mib", "mib_per_s", "us_per_read"],
    );
    for (b, (count, bytes, ns)) in &buckets {
        sizes.push(vec![
            json!(b),
            json!(count),
            num(*bytes as f64 / MIB),
            if *ns > 0 {
                num(*bytes as f64 / MIB / (*ns as f64 / 1e9))
            } else {
                serde_json::Value::Null
            },
            num(*ns as f64 / 1e3 / *count as f64),
        ]);
        let rate = if *ns > 0 {
            fw(*bytes as f64 / MIB / (*ns as f64 / 1e9), 9, 0)
        } else {
            format!("{:>9}", "-")
        };
        let _ = writeln!(
            out,
            "  {b:6} K{count:9}{}{rate}{}",
            fw(*bytes as f64 / MIB, 9, 1),
            fw(*ns as f64 / 1e3 / *count as f64, 9, 1)
        );
    }
    out.push_str(
        "\nby lane - uneven busy time means a lane is starved, not that the drive is full\n",
    );
    let mut lanes: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for r in &rows {
        let e = lanes.entry(r.lane).or_default();
        e.0 += r.read_bytes;
        e.1 += r.latency_ns;
    }
    let mut lane_table = Table::new(
        "lanes",
        &["lane", "mib_per_token", "busy_ms_per_token", "mib_per_s"],
    );
    for (lane, (bytes, ns)) in &lanes {
        lane_table.push(vec![
            json!(lane),
            num(*bytes as f64 / MIB / n),
            num(*ns as f64 / 1e6 / n),
            if *ns > 0 {
                num(*bytes as f64 / MIB / (*ns as f64 / 1e9))
            } else {
                serde_json::Value::Null
            },
        ]);
        let rate = if *ns > 0 {
            fw(*bytes as f64 / MIB / (*ns as f64 / 1e9), 6, 0)
        } else {
            format!("{:>6}", "-")
        };
        let _ = writeln!(
            out,
            "  lane {lane}: {} MiB/tok  busy {} ms/tok  {rate} MiB/s",
            fw(*bytes as f64 / MIB / n, 7, 1),
            fw(*ns as f64 / 1e6 / n, 7, 1)
        );
    }
    let spec: Vec<&IoRow> = rows.iter().filter(|r| r.spec).collect();
    if !spec.is_empty() {
        let sb: u64 = spec.iter().map(|r| r.read_bytes).sum();
        meta["speculative_reads"] = json!(spec.len());
        meta["speculative_mib_per_token"] = num(sb as f64 / MIB / n);
        let _ = writeln!(
            out,
            "\nspeculative: {} reads, {} MiB/token ({}% of bytes read)",
            spec.len(),
            f(sb as f64 / MIB / n, 1),
            f(
                if got > 0 {
                    100.0 * sb as f64 / got as f64
                } else {
                    0.0
                },
                0
            )
        );
    }
    if adjacent {
        let mut per_step: HashMap<i64, Vec<(u64, u64)>> = HashMap::new();
        for r in &rows {
            per_step
                .entry(r.step)
                .or_default()
                .push((r.offset, r.offset.saturating_add(r.read_bytes)));
        }
        let (mut reads, mut runs) = (0u64, 0u64);
        for ext in per_step.values_mut() {
            ext.sort_unstable();
            reads += ext.len() as u64;
            let mut end = ext[0].1;
            let mut k = 1u64;
            for &(s, e) in &ext[1..] {
                if s > end {
                    k += 1;
                }
                end = end.max(e);
            }
            runs += k;
        }
        meta["adjacent_reads_per_token"] = num(reads as f64 / n);
        meta["adjacent_runs_per_token"] = num(runs as f64 / n);
        out.push_str("\nadjacency - the coalescing ceiling\n");
        let _ = writeln!(
            out,
            "  {} reads/token span {} contiguous runs/token",
            f(reads as f64 / n, 0),
            f(runs as f64 / n, 0)
        );
        let _ = writeln!(
            out,
            "  perfectly coalesced, that is {}x fewer requests for the same bytes",
            f(reads as f64 / runs.max(1) as f64, 1)
        );
    }
    Ok(Report {
        text: out,
        meta,
        tables: vec![latency, sizes, lane_table],
        fell_back,
    })
}
