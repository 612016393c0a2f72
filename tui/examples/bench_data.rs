//! Writes benchmark inputs with the `bmoe-telemetry` writers:
//!
//! ```text
//! cargo run --release -p bmoe-top --example bench_data -- protocol 1200 lines.txt
//! cargo run --release -p bmoe-top --example bench_data -- csv 100000 run.csv
//! ```
//!
//! `protocol N` writes N tokens of `BMOE_LOAD` + `BMOE_PROGRESS` lines (with answer and
//! reasoning deltas); `csv N` a v2 metrics CSV of N rows with a `# summary` trailer.

use std::io::Write;

use anyhow::{Context, Result, bail};
use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
use bmoe_telemetry::protocol::{Load, Progress};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, n, out] = args.as_slice() else {
        bail!("usage: bench_data <protocol|csv> <N> <OUT>\nhint: bench_data csv 100000 run.csv");
    };
    let n: u64 = n
        .parse()
        .with_context(|| format!("N must be a count, got `{n}`"))?;
    match kind.as_str() {
        "protocol" => protocol(n, out),
        "csv" => csv(n, out),
        other => bail!("unknown kind `{other}`\nhint: protocol or csv"),
    }
}

/// A deterministic wobble so sparklines and bars move like a real run.
fn wobble(i: u64, period: u64, amp: f64) -> f64 {
    ((i % period) as f64 / period as f64 - 0.5) * 2.0 * amp
}

fn protocol(n: u64, out: &str) -> Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(out).with_context(|| format!("cannot create {out}"))?,
    );
    let words = [
        "Experts ", "are ", "routed ", "per ", "token ", "by ", "a ", "small ", "gate.\n",
    ];
    for i in 1..=n {
        let wall = 50.0 + wobble(i, 17, 10.0);
        let read = 40.0 + wobble(i, 23, 20.0);
        writeln!(f, "{}", Load { mb: read, ms: 30.0 }.to_line())?;
        let p = Progress {
            step: i,
            steps: n,
            wall_ms: wall,
            io_ms: 80.0,
            compute_ms: wall - 12.0,
            mgmt_ms: 2.0,
            stall_ms: 10.0,
            read_mb: read,
            cache_hit_pct: 60.0 + wobble(i, 50, 5.0),
            majflt: i % 4,
            cpu_ms: 150.0,
            dense_resident_frac: 0.97,
            reset: false,
            delta_reasoning: if i <= 20 {
                "thinking ".into()
            } else {
                String::new()
            },
            delta_text: if i > 20 {
                words[(i % 9) as usize].into()
            } else {
                String::new()
            },
        };
        writeln!(f, "{}", p.to_line())?;
    }
    f.flush()?;
    Ok(())
}

fn csv(n: u64, out: &str) -> Result<()> {
    let info = RunInfo {
        version: Some(2),
        engine: Some("bench".into()),
        model: Some("Qwen3-30B-A3B-Q4_K_M.gguf".into()),
        arch: Some("qwen3moe".into()),
        n_expert_used: Some(8),
        threads: Some(4),
        moe_stream: Some(true),
        cache_mb: Some(3000),
        io_threads: Some(4),
        overlap: Some(true),
        dense_weights: Some("anon".into()),
        temp: Some(0.0),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::new(
        std::io::BufWriter::new(
            std::fs::File::create(out).with_context(|| format!("cannot create {out}"))?,
        ),
        &info,
    )?;
    for i in 1..=n {
        let wall = 50.0 + wobble(i, 17, 10.0);
        w.write_row(&TokenRow {
            step: Some(i),
            steps: Some(n),
            wall_ms: Some(wall),
            io_ms: Some(80.0),
            compute_ms: Some(wall - 12.0),
            read_bytes: Some(((40.0 + wobble(i, 23, 20.0)) * 1048576.0) as u64),
            cache_hit_pct: Some(60.0),
            stall_ms: Some(10.0),
            mgmt_ms: Some(2.0),
            majflt: Some(i % 4),
            cpu_ms: Some(150.0),
            dense_resident_frac: Some(0.97),
            turn: Some(0),
            rss_mib: Some(5200.0),
            rss_anon_mib: Some(4800.0),
            rss_file_mib: Some(400.0),
            swap_mib: Some(0.0),
            mem_available_mib: Some(1500.0),
            mem_free_mib: Some(300.0),
            swap_free_mib: Some(8000.0),
            loop_overhead_ms: Some(1.0),
            mtp_batch: Some(1),
            ..TokenRow::default()
        })?;
    }
    let mut t = SummaryTrailer::new();
    t.push("tokens", n.to_string());
    t.push("s/tok", "0.050");
    t.push("tok/s", "20.000");
    w.write_summary(&t)?;
    Ok(())
}
