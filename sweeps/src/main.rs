//! `bmoe-bench`: synthetic models (`model synth`, `model inspect`), benchmark sweeps
//! (`sweep`, `report`) and llama-bench style products from the command line (`run`).

mod model;
mod quick;
mod report;
mod sweep;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Benchmark sweeps and synthetic MoE model tools for bmoe.
#[derive(Debug, Parser)]
#[command(name = "bmoe-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Synthesise and inspect GGUF MoE models.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Run a benchmark sweep described by a TOML manifest (see docs/sweeps.md).
    Sweep(sweep::SweepArgs),
    /// Summarise a results directory: tok/s with CIs per cell, ratios, plots, findings.md.
    Report(report::ReportArgs),
    /// llama-bench style: comma lists crossed into a product, run as a sweep, report printed.
    Run(quick::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Model(cmd) => model::run(cmd),
        Command::Sweep(args) => sweep::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Run(args) => quick::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            if let Some(hint) = model::hint_for(&err).or_else(|| sweep::hint_for(&err)) {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}
