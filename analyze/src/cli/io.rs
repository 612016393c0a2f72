//! `bmoe-analyze io TRACE`: bandwidth, latency, sizes and lanes of an io trace.

use std::path::PathBuf;

use bmoe_analyze::{Result, decode, plot};
use clap::Args;

use super::{CsvTables, Format};

/// The arguments of `io` (the fields' doc comments are their `--help` text).
#[derive(Args, Debug)]
#[command(infer_long_args = true)]
pub struct IoArgs {
    /// Io trace (`# io_trace v1`).
    trace: PathBuf,
    /// Add the adjacency (coalescing ceiling) section.
    #[arg(long)]
    adjacent: bool,
    /// Output format (json: header figures and the latency, sizes, lanes tables; csv: the tables).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    tables: CsvTables,
    /// Also draw the per-read latency CDF (all lanes and each lane) as SVG or PNG.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

/// Runs `io`: the report in the chosen format, and the plot if asked for.
pub fn run(a: &IoArgs) -> Result<String> {
    a.tables.check(a.format)?;
    if let Some(out) = &a.plot {
        plot::check_path(out)?;
    }
    let report = decode::io(&a.trace, a.adjacent)?;
    if let Some(out) = &a.plot {
        plot::io_latency_cdf(out, &a.trace)?;
        super::plotted(out);
    }
    super::decode_report(&a.trace, report, a.format, &a.tables)
}
