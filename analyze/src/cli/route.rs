//! `bmoe-analyze route TRACE`: the route-analyze views of one trace, as text, tables or a plot.

use std::path::PathBuf;

use bmoe_analyze::route::{
    self, CellMode, MatrixOptions, Phase, RouteFilter, RouteOptions, RouteTrace, Span, View,
};
use bmoe_analyze::{AnalyzeError, Result, plot, table};
use clap::{Args, ValueEnum};

use super::{CsvTables, Format};

/// The arguments of `route` (the fields' doc comments are their `--help` text).
#[derive(Args, Debug)]
#[command(infer_long_args = true)]
pub struct RouteArgs {
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
    /// Output format (json/csv: the tables of the selected views).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    tables: CsvTables,
    /// Also draw the view as SVG or PNG (views hot, reuse, matrix).
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

/// `--phase`, mapped onto the library's [`Phase`].
// The variants have no doc comments on purpose: clap would add them to `--help`, which lists
// the bare values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PhaseArg {
    Decode,
    Prefill,
    All,
}

impl From<PhaseArg> for Phase {
    fn from(p: PhaseArg) -> Self {
        match p {
            PhaseArg::Decode => Phase::Decode,
            PhaseArg::Prefill => Phase::Prefill,
            PhaseArg::All => Phase::All,
        }
    }
}

/// Runs `route`: the selected views in the chosen format, and the plot if asked for.
pub fn run(a: &RouteArgs) -> Result<String> {
    a.tables.check(a.format)?;
    let layers = Span::parse("--layers", &a.layers)?;
    let steps = Span::parse("--steps", &a.steps)?;
    let filter = RouteFilter {
        turn: a.turn,
        phase: a.phase.into(),
        all_columns: false,
    };
    check_plot(a)?;
    let needs_residency = route::residency_needed_by(a.view, a.cells, a.format != Format::Text);
    let trace = super::read_route(&a.trace, filter, needs_residency.as_deref())?;
    let opt = RouteOptions {
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
    let text = match a.format {
        Format::Text => route::render(&trace, &opt)?,
        Format::Json => {
            let (meta, tables) = route::tables(&trace, &opt)?;
            table::to_json(meta, &tables)
        }
        Format::Csv => a.tables.render(&route::tables(&trace, &opt)?.1)?,
    };
    if let Some(note) = route::empty_matrix_note(&trace, &opt) {
        super::print_note(note);
    }
    if let Some(path) = &a.plot {
        draw(path, a, &trace, &opt)?;
        super::plotted(path);
    }
    Ok(text)
}

/// Refuses `--plot` before any reading when the view has no plot or the path no known format.
fn check_plot(a: &RouteArgs) -> Result<()> {
    let Some(path) = &a.plot else {
        return Ok(());
    };
    if !a.view.has_plot() {
        return Err(AnalyzeError::Invalid {
            message: format!(
                "--plot {}: view `{}` has no plot",
                path.display(),
                a.view.name()
            ),
            hint: "use --plot with --view hot, --view reuse or --view matrix".into(),
        });
    }
    plot::check_path(path)?;
    Ok(())
}

fn draw(
    path: &std::path::Path,
    a: &RouteArgs,
    trace: &RouteTrace,
    opt: &RouteOptions,
) -> Result<()> {
    let cells = route::Cells::build(&trace.rows);
    match a.view {
        View::Hot => plot::hot(path, trace, &cells),
        View::Reuse => plot::reuse(path, trace, &cells),
        _ => plot::matrix(
            path,
            trace,
            &cells,
            &opt.matrix.steps,
            &opt.matrix.layers,
            a.max_steps,
            a.cells,
        ),
    }
}
