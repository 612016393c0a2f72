//! `bmoe-analyze metrics`: a bench-analyze session directory, per-run statistics of metrics
//! CSVs, or the `--compare` of two runs.

use std::path::{Path, PathBuf};

use bmoe_analyze::metrics::{self, RunStats};
use bmoe_analyze::metrics_files::{self as files, read_run};
use bmoe_analyze::metrics_tables as tables;
use bmoe_analyze::{AnalyzeError, Result, plot, table};
use clap::Args;

use super::{CsvTables, Format};

/// The arguments of `metrics` (the fields' doc comments are their `--help` text).
#[derive(Args, Debug)]
#[command(infer_long_args = true)]
pub struct MetricsArgs {
    /// A session directory (bench-analyze tables) or metrics CSV files / directories of them.
    #[arg(required_unless_present = "compare")]
    paths: Vec<PathBuf>,
    /// Compare two runs: ratio of mean token time A/B with its bootstrap 95% CI.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    compare: Option<Vec<PathBuf>>,
    /// Session directory mode: also write bench-analyze's markdown summary to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Session directory mode: append the per-run CI table.
    #[arg(long)]
    ci: bool,
    /// Drop this many leading token rows (warm-up) before the statistics.
    #[arg(long, default_value_t = 0)]
    trim: usize,
    /// Output format (json/csv: per-run statistics, or the --compare ratio).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    tables: CsvTables,
    /// Also draw one run's per-token time breakdown (compute / flash wait / mgmt /
    /// unattributed, stacked) as SVG or PNG; needs exactly one metrics CSV. With --compare:
    /// both runs' per-token wall times and their ECDFs, titled with the A/B ratio and its CI.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

/// Runs `metrics` in the mode its arguments select: `--compare`, one session directory, or
/// any number of metrics CSVs and directories of them.
pub fn run(a: &MetricsArgs) -> Result<String> {
    a.tables.check(a.format)?;
    plot_first(a)?;
    if let Some(pair) = &a.compare {
        return compare(a, &pair[0], &pair[1]);
    }
    if let [dir] = a.paths.as_slice()
        && dir.is_dir()
        && !files::loose_runs(dir, a.markdown.as_deref(), &mut super::print_note)?
    {
        return session_dir(a, dir);
    }
    let runs = files::read_runs(&files::expand(&a.paths, &mut super::print_note)?, a.trim)?;
    // Runs of different comparability classes are never tabled together: grouped by class
    // (in order of each class's first run), each group labelled, and stderr says which files.
    let groups = metrics::class_groups(&runs);
    if let Some(note) = metrics::class_note(&groups) {
        eprintln!("{note}");
    }
    let grouped: Vec<RunStats> = groups.iter().flat_map(|(_, g)| g.iter().cloned()).collect();
    Ok(match a.format {
        Format::Json => format!("{:#}\n", metrics::runs_json(&grouped)),
        Format::Csv => a.tables.render(&[tables::runs_table(&grouped)])?,
        Format::Text => metrics::runs_table_by_class(&groups),
    })
}

/// The `--plot` checks, made before any run is read; a one-run breakdown is drawn here too (it
/// reads the CSV itself), a `--compare` plot once both runs are read.
fn plot_first(a: &MetricsArgs) -> Result<()> {
    let Some(out) = &a.plot else {
        return Ok(());
    };
    plot::check_path(out)?;
    if a.compare.is_some() {
        if !a.paths.is_empty() {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "metrics --compare --plot {}: {} more path(s) besides A and B",
                    out.display(),
                    a.paths.len()
                ),
                hint: "pass only the two runs: `metrics --compare A.csv B.csv --plot OUT.svg`"
                    .into(),
            });
        }
        return Ok(());
    }
    let one_run = |message: String| AnalyzeError::Invalid {
        message,
        hint: "pass exactly one metrics CSV file with --plot, or `--compare A B --plot`".into(),
    };
    let [csv] = a.paths.as_slice() else {
        return Err(one_run(format!(
            "metrics --plot {}: the breakdown is drawn for one run, {} paths given",
            out.display(),
            a.paths.len()
        )));
    };
    if csv.is_dir() {
        return Err(one_run(format!(
            "metrics --plot {}: {} is not one metrics CSV file",
            out.display(),
            csv.display()
        )));
    }
    files::check_kind(csv)?;
    plot::token_breakdown(out, csv, a.trim)?;
    super::plotted(out);
    Ok(())
}

/// `--compare A B`: the ratio of mean token time A/B with its CI, and the compare plot.
fn compare(a: &MetricsArgs, path_a: &Path, path_b: &Path) -> Result<String> {
    let (x, y) = (read_run(path_a, a.trim)?, read_run(path_b, a.trim)?);
    if x.class.key() != y.class.key() {
        eprintln!(
            "note: {} is {} and {} is {}: runs of different comparability classes",
            path_a.display(),
            x.class.describe(),
            path_b.display(),
            y.class.describe()
        );
    }
    if let Some(out) = &a.plot {
        plot::compare_runs(out, &x, &y, a.trim)?;
        super::plotted(out);
    }
    Ok(match a.format {
        Format::Text => metrics::compare(&x, &y)?,
        Format::Csv => a
            .tables
            .render(&[tables::compare_table(path_a, path_b, &x, &y)])?,
        Format::Json => format!("{:#}\n", tables::compare_json(&x, &y)),
    })
}

/// One bench-analyze session directory: its tables (and `--markdown` file, `--ci` table).
fn session_dir(a: &MetricsArgs, dir: &Path) -> Result<String> {
    let bench = metrics::bench_dir(dir)?;
    let runs: Vec<RunStats> = bench.runs.iter().map(|b| b.run.clone()).collect();
    if let Some(path) = &a.markdown {
        std::fs::write(path, &bench.markdown).map_err(|e| AnalyzeError::io(path, e))?;
    }
    if a.format != Format::Text {
        // The text's tables, unrounded; --ci adds the per-run table as in text.
        let mut tables = bench.tables();
        if a.ci {
            tables.push(tables::runs_table(&runs));
        }
        return Ok(match a.format {
            Format::Json => table::to_json(
                serde_json::json!({"dir": dir.display().to_string()}),
                &tables,
            ),
            _ => a.tables.render(&tables)?,
        });
    }
    let mut out = bench.text;
    if let Some(path) = &a.markdown {
        out.push_str(&format!("\nmarkdown -> {}\n", path.display()));
    }
    if a.ci {
        out.push('\n');
        out.push_str(&metrics::runs_table(&runs));
    }
    Ok(out)
}
