//! `bmoe-analyze replay TRACE`: the cache-policy hit-rate curve (with the Belady bound).

use std::path::PathBuf;

use bmoe_analyze::route::{Phase, RouteFilter};
use bmoe_analyze::{AnalyzeError, Result, plot, replay};
use clap::Args;

use super::{CsvTables, Format};

/// The arguments of `replay` (the fields' doc comments are their `--help` text).
#[derive(Args, Debug)]
#[command(infer_long_args = true)]
pub struct ReplayArgs {
    /// Route trace.
    trace: PathBuf,
    /// Cache budgets in MiB, comma-separated (default 250,500,750,1000,1500,2000,3000,4000,6000).
    #[arg(long, default_value = "")]
    budgets: String,
    /// Policies, comma-separated: belady, lru, lfu, random, layer, layerlfu.
    #[arg(long, default_value = "belady,lru,lfu,random,layer,layerlfu")]
    policies: String,
    /// Run LRU at this budget (MiB) first and print its hit rates (compare with the run's summary).
    #[arg(long)]
    validate: Option<f64>,
    /// Only rows of this turn.
    #[arg(long, allow_negative_numbers = true)]
    turn: Option<i64>,
    /// Also write the curve as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    tables: CsvTables,
    /// Also draw the hit-rate vs budget curve per policy as SVG or PNG.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

/// Runs `replay`: the curve in the chosen format, plus the `--csv` file and the plot if asked.
pub fn run(a: &ReplayArgs) -> Result<String> {
    a.tables.check(a.format)?;
    if let Some(path) = &a.plot {
        plot::check_path(path)?;
    }
    let budgets = replay::parse_budgets(&a.budgets)?;
    let policies = replay::Policy::parse_list(&a.policies)?;
    let trace = super::read_route(
        &a.trace,
        RouteFilter {
            turn: a.turn,
            phase: Phase::All,
            all_columns: true,
        },
        None,
    )?;
    if trace.total_rows == 0 {
        // As `route` and `drop` do: a table of 0 % hit rates would read as a real result.
        return Err(AnalyzeError::Empty {
            message: format!(
                "{}: no rows - is this a route trace? (a header and no routings)",
                a.trace.display()
            ),
            hint: "the trace has no routing rows: record one with `bmoe-cli --route-trace FILE` on a run that generates tokens".into(),
        });
    }
    if trace.rows.is_empty() {
        // The reference prints its all-zero table here (kept byte for byte); say why it is empty.
        eprintln!(
            "note: {}: no rows for turn {} ({} rows in other turns); every hit rate below is 0",
            a.trace.display(),
            a.turn.map_or_else(|| "None".to_string(), |t| t.to_string()),
            trace.total_rows
        );
    }
    let opt = replay::ReplayOptions {
        budgets,
        policies,
        validate: a.validate,
    };
    let rep = replay::run(&trace, &opt)?;
    if let Some(path) = &a.plot {
        plot::replay_curve(path, &rep)?;
        super::plotted(path);
    }
    let mut text = match a.format {
        Format::Text => rep.text(),
        Format::Json => format!("{:#}\n", rep.json()),
        Format::Csv => a.tables.render(&rep.tables())?,
    };
    if let Some(path) = &a.csv {
        std::fs::write(path, rep.curve_csv()).map_err(|e| AnalyzeError::io(path, e))?;
        if a.format == Format::Text {
            text.push_str(&format!("wrote {}\n", path.display()));
        }
    }
    Ok(text)
}
