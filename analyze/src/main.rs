//! `bmoe-analyze`: route views, cache replay, dropping replay, compute/io reports and metrics
//! tables for bmoe traces. Data goes to stdout; errors go to stderr with a `hint:` line.

mod cli;
#[cfg(test)]
mod hint_check;

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cli::Outcome;

#[derive(Parser, Debug)]
#[command(
    name = "bmoe-analyze",
    version,
    about = "Analyse bmoe route, compute, io and metrics traces"
)]
#[command(infer_long_args = true, args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// The variants' doc comments are the subcommands' `--help` lines.
#[derive(Subcommand, Debug)]
enum Command {
    /// Terminal views over one route trace (route-analyze).
    Route(cli::route::RouteArgs),
    /// Offline cache-policy simulator (route-replay), with the Belady bound.
    Replay(cli::replay::ReplayArgs),
    /// Cache-aware expert-dropping replay (route-drop-replay).
    Drop(cli::drop::DropArgs),
    /// Compute-trace report: time and faults by op or layer segment (decode-analyze compute).
    Compute(cli::compute::ComputeArgs),
    /// Io-trace report: bandwidth, latency, sizes, lanes (decode-analyze io).
    Io(cli::io::IoArgs),
    /// Metrics CSVs: bench-analyze tables for a session directory, per-run bootstrap CIs.
    Metrics(cli::metrics::MetricsArgs),
    /// A trace or metrics CSV as a typed Parquet or Arrow IPC file (preamble kept as metadata).
    Convert(cli::convert::ConvertArgs),
}

impl Command {
    fn run(&self) -> bmoe_analyze::Result<Outcome> {
        match self {
            Command::Convert(a) => cli::convert::run(a).map(Outcome::Done),
            Command::Route(a) => cli::route::run(a).map(Outcome::Done),
            Command::Replay(a) => cli::replay::run(a).map(Outcome::Done),
            Command::Drop(a) => cli::drop::run(a),
            Command::Compute(a) => cli::compute::run(a).map(Outcome::Done),
            Command::Metrics(a) => cli::metrics::run(a).map(Outcome::Done),
            Command::Io(a) => cli::io::run(a).map(Outcome::Done),
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command.run() {
        Ok(Outcome::Done(text)) => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth reporting.
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            ExitCode::SUCCESS
        }
        Ok(Outcome::Partial { text, errors }) => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            for e in &errors {
                cli::report(e);
            }
            ExitCode::FAILURE
        }
        Err(err) => cli::report(&err),
    }
}
