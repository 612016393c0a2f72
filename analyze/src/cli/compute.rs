//! `bmoe-analyze compute TRACE`: time and faults by op (or layer segment) of a compute trace.

use std::path::PathBuf;

use bmoe_analyze::{Result, decode, plot};
use clap::Args;

use super::{CsvTables, Format};

/// The arguments of `compute` (the fields' doc comments are their `--help` text).
#[derive(Args, Debug)]
#[command(infer_long_args = true)]
pub struct ComputeArgs {
    /// Compute trace (`# compute_trace v1`).
    trace: PathBuf,
    /// Ops listed.
    #[arg(long, default_value_t = 12, allow_negative_numbers = true)]
    top: i64,
    /// Add the per-layer breakdown.
    #[arg(long)]
    layers: bool,
    /// Output format (json/csv: the ops or segments table, and layers with --layers).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    tables: CsvTables,
    /// Also draw the compute share by op (or layer segment) as SVG or PNG.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

/// Runs `compute`: the report in the chosen format, and the plot if asked for.
pub fn run(a: &ComputeArgs) -> Result<String> {
    a.tables.check(a.format)?;
    if let Some(out) = &a.plot {
        plot::check_path(out)?;
    }
    let opt = decode::ComputeOptions {
        top: a.top,
        layers: a.layers,
    };
    let report = decode::compute(&a.trace, opt)?;
    if let Some(out) = &a.plot {
        plot::compute_share(out, &report)?;
        super::plotted(out);
    }
    super::decode_report(&a.trace, report, a.format, &a.tables)
}
