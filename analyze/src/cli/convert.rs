//! `bmoe-analyze convert FILE --to parquet|arrow`: a trace or metrics CSV as a typed file.

use std::path::PathBuf;

use bmoe_analyze::{Result, convert};
use clap::{Args, ValueEnum};

/// The arguments of `convert` (the fields' doc comments are their `--help` text).
#[derive(Args, Debug)]
#[command(infer_long_args = true)]
pub struct ConvertArgs {
    /// A route, compute or io trace, or a metrics CSV (v0, v1, v2).
    file: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    to: ConvertTo,
    /// Output file (default: FILE with its extension replaced by .parquet or .arrow).
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

/// `--to`: the file format written (the variants' doc comments are their `--help` text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConvertTo {
    /// Apache Parquet (snappy), for DuckDB, Spark, pandas.
    Parquet,
    /// Arrow IPC file (Feather v2), uncompressed.
    Arrow,
}

/// Runs `convert`: writes the output file; the summary line is the command's output.
pub fn run(a: &ConvertArgs) -> Result<String> {
    let target = match a.to {
        ConvertTo::Parquet => convert::Target::Parquet,
        ConvertTo::Arrow => convert::Target::Arrow,
    };
    let output = a
        .output
        .clone()
        .unwrap_or_else(|| convert::default_output(&a.file, target));
    let summary = convert::convert(&a.file, &output, target)?;
    if let Some(t) = &summary.truncated {
        eprintln!(
            "note: {}:{}: the last line was cut short and is left out ({})",
            a.file.display(),
            t.line,
            t.reason
        );
    }
    if !summary.skipped_columns.is_empty() {
        eprintln!(
            "note: {}: columns not known to this bmoe-analyze were left out: {}",
            a.file.display(),
            summary.skipped_columns.join(", ")
        );
    }
    Ok(summary.line())
}
