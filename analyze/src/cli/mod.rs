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
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bmoe_analyze::route::{RouteFilter, RouteTrace};
use bmoe_analyze::table::Table;
use bmoe_analyze::{AnalyzeError, Result, decode, table};
use clap::{Args, ValueEnum};

/// `--format` of every analysis.
// The variants have no doc comments on purpose: clap would add them to `--help`, which lists
// the bare values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
}

/// `--table` and `--out-dir`: the tables of `--format csv` as plain CSV files, one header and
/// no `#` line each, which pandas or DuckDB load as they are (the default stream of
/// `# table=` sections is one file holding several tables).
#[derive(Args, Debug, Clone, Default)]
pub struct CsvTables {
    /// With --format csv: print only this table, as a plain CSV (one header line, no `#` lines).
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// With --format csv: write each table to DIR/<name>.csv (plain CSV) instead of stdout.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

impl CsvTables {
    /// Refuses `--table`/`--out-dir` with another format, before any input is read.
    pub fn check(&self, format: Format) -> Result<()> {
        let flag = match (&self.table, &self.out_dir) {
            (Some(_), _) => "--table",
            (None, Some(_)) => "--out-dir",
            (None, None) => return Ok(()),
        };
        if format == Format::Csv {
            return Ok(());
        }
        Err(AnalyzeError::Invalid {
            message: format!(
                "{flag} selects CSV tables, but the output format is {}",
                format
                    .to_possible_value()
                    .map_or_else(|| "text".to_string(), |v| v.get_name().to_string())
            ),
            hint: "add `--format csv`".into(),
        })
    }

    /// The `--format csv` output of `tables`: the `# table=` stream, one table as plain CSV
    /// (`--table`), or nothing on stdout and a file per table (`--out-dir`, each path said on
    /// stderr as `csv -> PATH`).
    pub fn render(&self, tables: &[Table]) -> Result<String> {
        let chosen: Vec<&Table> = match &self.table {
            None => tables.iter().collect(),
            Some(name) => {
                let Some(t) = tables.iter().find(|t| t.name == name.as_str()) else {
                    let names: Vec<&str> = tables.iter().map(|t| t.name).collect();
                    return Err(AnalyzeError::Invalid {
                        message: format!(
                            "--table {name}: this report has no such table; its tables: {}",
                            if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                        hint: format!(
                            "pass one of the tables listed, e.g. `--table {}`",
                            names.first().copied().unwrap_or("NAME")
                        ),
                    });
                };
                vec![t]
            }
        };
        let Some(dir) = &self.out_dir else {
            return Ok(match self.table {
                Some(_) => chosen.iter().map(|t| t.plain_csv()).collect(),
                None => table::to_csv(tables),
            });
        };
        std::fs::create_dir_all(dir).map_err(|e| AnalyzeError::Invalid {
            message: format!(
                "--out-dir {}: cannot create the directory: {e}",
                dir.display()
            ),
            hint: "pick a writable --out-dir path".into(),
        })?;
        for t in chosen {
            let path = dir.join(format!("{}.csv", t.name));
            std::fs::write(&path, t.plain_csv()).map_err(|e| AnalyzeError::Invalid {
                message: format!(
                    "--out-dir {}: cannot write {}: {e}",
                    dir.display(),
                    path.display()
                ),
                hint: "check that the --out-dir directory is writable and has space".into(),
            })?;
            eprintln!("csv -> {}", path.display());
        }
        Ok(String::new())
    }
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
pub fn decode_report(
    path: &Path,
    r: decode::Report,
    format: Format,
    csv: &CsvTables,
) -> Result<String> {
    // The reference silently reports prefill rows as decode when a trace has no decode rows; we
    // keep its numbers but say so.
    if r.fell_back {
        eprintln!(
            "note: {} has no decode rows (phase 1); reporting all rows instead",
            path.display()
        );
    }
    Ok(match format {
        Format::Text => r.text,
        Format::Json => table::to_json(r.meta, &r.tables),
        Format::Csv => csv.render(&r.tables)?,
    })
}
