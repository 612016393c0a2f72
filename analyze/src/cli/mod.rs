//! The subcommands' arguments, one module each: each parses its flags, checks the combinations
//! the library cannot see (a plot of a view that has none, one file where a plot needs one),
//! calls the library and picks the output format. Data is returned for `main` to print; notes
//! and the `plot ->` lines go to stderr as they happen, so that they precede any error.

pub mod compute;
pub mod convert;
pub mod drop;
pub mod io;
pub mod metrics;
pub mod replay;
pub mod route;

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use bmoe_analyze::route::{RouteFilter, RouteTrace};
use bmoe_analyze::{AnalyzeError, Result, decode, table};
use clap::ValueEnum;

/// `--format` of every analysis.
// The variants have no doc comments on purpose: clap would add them to `--help`, which lists
// the bare values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
}

/// How a subcommand ended.
pub enum Outcome {
    /// Its whole output, for stdout.
    Done(String),
    /// Some inputs were reported and others rejected: the output of the former, then every
    /// error on stderr, and exit status 1.
    Partial {
        /// What was reported.
        text: String,
        /// Why each other input was rejected.
        errors: Vec<AnalyzeError>,
    },
}

/// Prints `err` and its hint on stderr; the failure exit status.
pub fn report(err: &AnalyzeError) -> ExitCode {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "error: {err}");
    let _ = writeln!(e, "hint: {}", err.hint());
    ExitCode::FAILURE
}

/// The library's notes, as they arise.
pub fn print_note(note: String) {
    eprintln!("note: {note}");
}

/// Where a plot went (on stderr: stdout stays the report alone).
pub fn plotted(path: &Path) {
    eprintln!("plot -> {}", path.display());
}

/// Reads a route trace, noting a cut-short last line; `residency_needed_by` names the analysis
/// that reads the `residency` column (`None`: a trace without it is accepted).
pub fn read_route(
    path: &Path,
    filter: RouteFilter,
    residency_needed_by: Option<&str>,
) -> Result<RouteTrace> {
    bmoe_analyze::route::read_noted(path, filter, residency_needed_by, &mut print_note)
}

/// A decode-analyze report (`compute`, `io`) in the chosen format.
pub fn decode_report(path: &Path, r: decode::Report, format: Format) -> String {
    // The reference silently reports prefill rows as decode when a trace has no decode rows; we
    // keep its numbers but say so.
    if r.fell_back {
        eprintln!(
            "note: {} has no decode rows (phase 1); reporting all rows instead",
            path.display()
        );
    }
    match format {
        Format::Text => r.text,
        Format::Json => table::to_json(r.meta, &r.tables),
        Format::Csv => table::to_csv(&r.tables),
    }
}
