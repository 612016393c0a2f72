//! Describes telemetry files: what format each is and what it holds.
//!
//! `cargo run -p bmoe-telemetry --example inspect -- FILE...`

use std::path::Path;
use std::process::ExitCode;

use bmoe_telemetry::attribution::{Threads, TokenTimes, bars, cpu_busy_pct};
use bmoe_telemetry::detect::{FileKind, detect_format};
use bmoe_telemetry::kv::read_sidecar;
use bmoe_telemetry::metrics::MetricsReader;
use bmoe_telemetry::summary::PerfReport;
use bmoe_telemetry::trace::{ComputeTraceReader, IoTraceReader, RouteTraceReader};

fn describe(path: &Path) -> bmoe_telemetry::Result<String> {
    let kind = detect_format(path)?;
    Ok(match kind {
        FileKind::Metrics { version } => {
            let mut r = MetricsReader::open(path)?;
            let info = r.run_info().clone();
            // v0 files have no preamble: a non-zero stall can only come from overlap mode.
            let overlap_known = info.overlap;
            let threads = Threads {
                compute: info.threads.unwrap_or(0) as u32,
                io: info.io_threads.unwrap_or(0) as u32,
            };
            let mut n = 0u64;
            let mut wall = 0.0;
            // (sum, count) per bar: compute and unattributed are unmeasured without cpu_ms.
            let mut sums = [(0.0f64, 0u64); 4];
            let mut busy = (0.0, 0u64);
            let mut inferred_overlap = false;
            for row in r.by_ref() {
                let row = row?;
                let Some(t) = TokenTimes::from_row(&row) else {
                    continue;
                };
                let overlap = overlap_known.unwrap_or(t.stall_ms > 0.0);
                inferred_overlap |= overlap;
                n += 1;
                wall += t.wall_ms;
                let b = bars(&t, threads, overlap);
                for (s, v) in sums.iter_mut().zip([
                    b.compute_ms,
                    Some(b.flash_wait_ms),
                    Some(b.mgmt_ms),
                    b.unattributed_ms,
                ]) {
                    if let Some(v) = v {
                        *s = (s.0 + v, s.1 + 1);
                    }
                }
                if let Some(p) = cpu_busy_pct(&t, threads, overlap) {
                    busy = (busy.0 + p, busy.1 + 1);
                }
            }
            let mean = |(x, k): (f64, u64)| {
                if k > 0 {
                    format!("{:.1}", x / k as f64)
                } else {
                    "—".to_string()
                }
            };
            let mut s = format!(
                "metrics CSV v{} — {} rows, {} columns, {} summary trailer(s){}\n",
                version.map_or("0".to_string(), |v| v.to_string()),
                n,
                r.header().len(),
                r.summaries().len(),
                r.truncated().map_or(String::new(), |t| format!(
                    ", LAST LINE CUT (line {})",
                    t.line
                )),
            );
            s += &format!(
                "  model={} arch={} threads={} io_threads={} overlap={}\n",
                info.model.as_deref().unwrap_or("?"),
                info.arch.as_deref().unwrap_or("?"),
                info.threads.map_or("?".into(), |v| v.to_string()),
                info.io_threads.map_or("?".into(), |v| v.to_string()),
                match overlap_known {
                    Some(o) => u8::from(o).to_string(),
                    None => format!("{} (inferred from stall_ms)", u8::from(inferred_overlap)),
                },
            );
            s += &format!(
                "  mean per token: wall {} ms | compute {} | flash wait {} | cache mgmt {} | unattributed {} ms{}",
                mean((wall, n)),
                mean(sums[0]),
                mean(sums[1]),
                mean(sums[2]),
                mean(sums[3]),
                if busy.1 > 0 {
                    format!(" | CPU busy {:.0}%", busy.0 / busy.1 as f64)
                } else {
                    String::new()
                },
            );
            if let Some(t) = r.summaries().last() {
                s += &format!(
                    "\n  trailer: s/tok={} tok/s={} cache_hit_pct={}",
                    t.get("s/tok").unwrap_or("?"),
                    t.get("tok/s").unwrap_or("?"),
                    t.get("cache_hit_pct").unwrap_or("?")
                );
            }
            s
        }
        FileKind::RouteTrace => {
            let mut r = RouteTraceReader::open(path)?;
            let (mut n, mut miss, mut nan, mut bytes) = (0u64, 0u64, 0u64, 0u64);
            for row in r.by_ref() {
                let row = row?;
                n += 1;
                miss += u64::from(row.residency == 0);
                nan += u64::from(row.weight.is_nan());
                bytes += row.expert_bytes;
            }
            let i = r.info();
            format!(
                "route trace v1 — {n} routings over {} layers (top-{}), {:.1}% misses, {:.1} MiB read, {nan} unknown weights, dropped column: {}",
                i.layers.len(),
                i.n_expert_used.unwrap_or(0),
                100.0 * miss as f64 / n.max(1) as f64,
                bytes as f64 / 1048576.0,
                if r.has_column("dropped") { "yes" } else { "no" },
            )
        }
        FileKind::ComputeTrace => {
            let mut r = ComputeTraceReader::open(path)?;
            let (mut n, mut ns, mut flt) = (0u64, 0u64, 0u64);
            for row in r.by_ref() {
                let row = row?;
                n += 1;
                ns += row.wall_ns;
                flt += row.majflt;
            }
            format!(
                "compute trace v1 — {n} rows, {:.1} ms measured, {flt} major faults",
                ns as f64 / 1e6
            )
        }
        FileKind::IoTrace => {
            let mut r = IoTraceReader::open(path)?;
            let (mut n, mut req, mut read) = (0u64, 0u64, 0u64);
            for row in r.by_ref() {
                let row = row?;
                n += 1;
                req += row.req_bytes;
                read += row.read_bytes;
            }
            format!(
                "io trace v1 — {n} reads, {:.1} MiB read for {:.1} MiB wanted (alignment waste {:.1}%)",
                read as f64 / 1048576.0,
                req as f64 / 1048576.0,
                100.0 * (read - req.min(read)) as f64 / read.max(1) as f64
            )
        }
        FileKind::Sidecar => {
            let m = read_sidecar(path)?;
            let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
            format!("sidecar — {} keys: {}", m.len(), keys.join(" "))
        }
        FileKind::RunLog => {
            let text = std::fs::read_to_string(path).map_err(|e| bmoe_telemetry::Error::Io {
                path: path.to_path_buf(),
                source: e,
            })?;
            let r = PerfReport::parse(&text);
            let mut s = String::from("run log —");
            for l in [
                r.generation.map(|x| x.to_string()),
                r.moe_stream.map(|x| x.to_string()),
                r.moe_cache.map(|x| x.to_string()),
            ]
            .into_iter()
            .flatten()
            {
                s += "\n  ";
                s += &l;
            }
            s
        }
        FileKind::OtherCsv => "a CSV that is not a bmoe telemetry format".into(),
        FileKind::Unknown => "not a bmoe telemetry format".into(),
    })
}

fn main() -> ExitCode {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        eprintln!(
            "error: no file given\nhint: cargo run -p bmoe-telemetry --example inspect -- FILE..."
        );
        return ExitCode::from(2);
    }
    let mut status = ExitCode::SUCCESS;
    for p in paths {
        match describe(Path::new(&p)) {
            Ok(d) => println!("{p}: {d}"),
            Err(e) => {
                eprintln!(
                    "error: {e}\nhint: check the file is complete and was written by bmoe-cli"
                );
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}
