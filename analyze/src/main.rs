//! `bmoe-analyze`: route views, cache replay, dropping replay, compute/io reports and metrics
//! tables for bmoe traces. Data goes to stdout; errors go to stderr with a `hint:` line.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use bmoe_analyze::route::{
    self, CellMode, MatrixOptions, Phase, RouteFilter, RouteTrace, Span, View,
};
use bmoe_analyze::{AnalyzeError, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

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

#[derive(Subcommand, Debug)]
enum Command {
    /// Terminal views over one route trace (route-analyze).
    Route(RouteArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PhaseArg {
    Decode,
    Prefill,
    All,
}

#[derive(Args, Debug)]
#[command(infer_long_args = true)]
struct RouteArgs {
    /// Route trace (`# route_trace v1` CSV).
    trace: PathBuf,
    /// View: default, all, or one of matrix hot reuse overlap workset cache entropy bytes sanity.
    #[arg(long, value_enum, default_value = "default")]
    view: View,
    /// Which phase's rows to analyse.
    #[arg(long, value_enum, default_value = "decode")]
    phase: PhaseArg,
    /// Only rows of this turn (default: all turns, merged).
    #[arg(long, allow_negative_numbers = true)]
    turn: Option<i64>,
    /// matrix: layers to show, e.g. 0-11 or 0,5,47.
    #[arg(long, default_value = "")]
    layers: String,
    /// matrix: steps to show, e.g. 28-40.
    #[arg(long, default_value = "")]
    steps: String,
    /// matrix: number of first steps shown when --steps is absent.
    #[arg(long, default_value_t = 20, allow_negative_numbers = true)]
    max_steps: i64,
    /// matrix: what a cell shows.
    #[arg(long, value_enum, default_value = "experts")]
    cells: CellMode,
    /// matrix: column width (at least 14).
    #[arg(long, default_value_t = 22)]
    width: usize,
    /// hot: experts listed per layer.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    top: i64,
}

fn run_route(a: &RouteArgs) -> Result<String> {
    let layers = Span::parse("--layers", &a.layers)?;
    let steps = Span::parse("--steps", &a.steps)?;
    let phase = match a.phase {
        PhaseArg::Decode => Phase::Decode,
        PhaseArg::Prefill => Phase::Prefill,
        PhaseArg::All => Phase::All,
    };
    let filter = RouteFilter {
        turn: a.turn,
        phase,
    };
    let trace = RouteTrace::read(&a.trace, filter)?;
    let opt = route::RouteOptions {
        view: a.view,
        filter,
        matrix: MatrixOptions {
            layers,
            steps,
            max_steps: a.max_steps,
            cells: a.cells,
            width: a.width,
        },
        top: a.top,
    };
    route::render(&trace, &opt)
}

fn report(err: &AnalyzeError) -> ExitCode {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "error: {err}");
    let _ = writeln!(e, "hint: {}", err.hint());
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Route(a) => run_route(a),
    };
    match result {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            if out
                .write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                // A closed pipe (`| head`) is not an error worth reporting.
                return ExitCode::SUCCESS;
            }
            ExitCode::SUCCESS
        }
        Err(err) => report(&err),
    }
}
