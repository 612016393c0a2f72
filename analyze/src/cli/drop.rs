//! `bmoe-analyze drop TRACE…`: the cache-aware dropping replay of each trace.

use std::path::PathBuf;

use bmoe_analyze::{AnalyzeError, Result, drop, plot, table};
use clap::Args;

use super::{CsvTables, Format, Outcome};

/// The arguments of `drop` (the fields' doc comments are their `--help` text).
#[derive(Args, Debug)]
pub struct DropArgs {
    /// Route traces.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Output format (json/csv: the threshold, static-k and phases tables, one row per file and phase).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    csv: CsvTables,
    /// Also draw flash saved vs weight mass lost per phase (cache-aware thresholds and the
    /// static top-k cut) as SVG or PNG; needs exactly one trace.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

/// Runs `drop`. A lone failing trace is the command's error; when some traces were reported and
/// others not, the reports are printed and the errors follow ([`Outcome::Partial`]).
pub fn run(a: &DropArgs) -> Result<Outcome> {
    a.csv.check(a.format)?;
    if let Some(path) = &a.plot {
        plot::check_path(path)?;
        if a.traces.len() != 1 {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "drop --plot {}: the trade-off is drawn for one trace, {} given",
                    path.display(),
                    a.traces.len()
                ),
                hint: "pass exactly one route trace with --plot (run drop once per trace)".into(),
            });
        }
    }
    let drop::DropBatch {
        mut text,
        tables,
        mut errors,
    } = drop::report_files(&a.traces, &mut super::print_note);
    if let (Some(path), [trace], true) = (&a.plot, a.traces.as_slice(), errors.is_empty()) {
        plot::drop_tradeoff(path, &tables, &drop::file_label(trace))?;
        super::plotted(path);
    }
    let tables = [tables.threshold, tables.static_k, tables.phases];
    // Nothing reported: no empty tables either, only the errors.
    if !text.is_empty() {
        match a.format {
            Format::Text => {}
            Format::Json => {
                text = table::to_json(serde_json::json!({"files": a.traces}), &tables);
            }
            Format::Csv => text = a.csv.render(&tables)?,
        }
    }
    if errors.is_empty() {
        return Ok(Outcome::Done(text));
    }
    if text.is_empty() && errors.len() == 1 {
        return Err(errors.remove(0));
    }
    Ok(Outcome::Partial { text, errors })
}
