//! `bmoe-analyze`: route views, cache replay, dropping replay, compute/io reports and metrics
//! tables for bmoe traces. Data goes to stdout; errors go to stderr with a `hint:` line.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use bmoe_analyze::route::{
    self, CellMode, MatrixOptions, Phase, RouteFilter, RouteTrace, Span, View,
};
use bmoe_analyze::{AnalyzeError, Result, convert, decode, drop, metrics, plot, replay, table};
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
    /// Offline cache-policy simulator (route-replay), with the Belady bound.
    Replay(ReplayArgs),
    /// Cache-aware expert-dropping replay (route-drop-replay).
    Drop(DropArgs),
    /// Compute-trace report: time and faults by op or layer segment (decode-analyze compute).
    Compute(ComputeArgs),
    /// Io-trace report: bandwidth, latency, sizes, lanes (decode-analyze io).
    Io(IoArgs),
    /// Metrics CSVs: bench-analyze tables for a session directory, per-run bootstrap CIs.
    Metrics(MetricsArgs),
    /// A trace or metrics CSV as a typed Parquet or Arrow IPC file (preamble kept as metadata).
    Convert(ConvertArgs),
}

#[derive(Args, Debug)]
#[command(infer_long_args = true)]
struct MetricsArgs {
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
    /// Also draw one run's per-token time breakdown (compute / flash wait / mgmt /
    /// unattributed, stacked) as SVG or PNG; needs exactly one metrics CSV. With --compare:
    /// both runs' per-token wall times and their ECDFs, titled with the A/B ratio and its CI.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(infer_long_args = true)]
struct ComputeArgs {
    /// Compute trace (`# compute_trace v1`).
    trace: PathBuf,
    /// Ops listed.
    #[arg(long, default_value_t = 12, allow_negative_numbers = true)]
    top: i64,
    /// Add the per-layer breakdown.
    #[arg(long)]
    layers: bool,
    /// Output format (json/csv: the ops or segments table, and layers with --layers).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Also draw the compute share by op (or layer segment) as SVG or PNG.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(infer_long_args = true)]
struct IoArgs {
    /// Io trace (`# io_trace v1`).
    trace: PathBuf,
    /// Add the adjacency (coalescing ceiling) section.
    #[arg(long)]
    adjacent: bool,
    /// Output format (json: header figures and the latency, sizes, lanes tables; csv: the tables).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Also draw the per-read latency CDF (all lanes and each lane) as SVG or PNG.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    Csv,
}

#[derive(Args, Debug)]
#[command(infer_long_args = true)]
struct ReplayArgs {
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
    /// Also draw the hit-rate vs budget curve per policy as SVG or PNG.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct DropArgs {
    /// Route traces.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Output format (json/csv: the threshold, static-k and phases tables, one row per file and phase).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Also draw flash saved vs weight mass lost per phase (cache-aware thresholds and the
    /// static top-k cut) as SVG or PNG; needs exactly one trace.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
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
    /// Output format (json/csv: the tables of the selected views).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Also draw the view as SVG or PNG (views hot, reuse, matrix).
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
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
        all_columns: false,
    };
    if let Some(path) = &a.plot {
        if !matches!(a.view, View::Hot | View::Reuse | View::Matrix) {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "--plot {}: view `{}` has no plot",
                    path.display(),
                    view_name(a.view)
                ),
                hint: "use --plot with --view hot, --view reuse or --view matrix".into(),
            });
        }
        plot::check_path(path)?;
    }
    let views = a.view.expand();
    let needs_residency = if views.contains(&View::Cache) {
        Some(if a.view == View::Cache {
            "--view cache".to_string()
        } else {
            format!("--view {} (its cache view)", view_name(a.view))
        })
    } else if views.contains(&View::Matrix) && a.cells == CellMode::Hit {
        Some("--view matrix --cells hit".to_string())
    } else if views.contains(&View::Matrix) && a.format != Format::Text {
        Some("--view matrix --format json/csv (its rows list residency)".to_string())
    } else {
        None
    };
    let trace = read_route(&a.trace, filter, needs_residency.as_deref())?;
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
    let text = match a.format {
        Format::Text => route::render(&trace, &opt)?,
        Format::Json => {
            let (meta, tables) = route::tables(&trace, &opt)?;
            table::to_json(meta, &tables)
        }
        Format::Csv => table::to_csv(&route::tables(&trace, &opt)?.1),
    };
    if let Some(path) = &a.plot {
        let cells = route::Cells::build(&trace.rows);
        match a.view {
            View::Hot => plot::hot(path, &trace, &cells)?,
            View::Reuse => plot::reuse(path, &trace, &cells)?,
            _ => plot::matrix(
                path,
                &trace,
                &cells,
                &opt.matrix.steps,
                &opt.matrix.layers,
                a.max_steps,
                a.cells,
            )?,
        }
        eprintln!("plot -> {}", path.display());
    }
    Ok(text)
}

/// Reads a route trace; a last line cut short (a killed writer) is left out and said on stderr.
/// Read a route trace; `residency_needed_by` names the analysis that reads the `residency`
/// column (`None`: a trace without it is accepted).
fn read_route(
    path: &std::path::Path,
    filter: RouteFilter,
    residency_needed_by: Option<&str>,
) -> Result<RouteTrace> {
    let trace = RouteTrace::read_for(path, filter, residency_needed_by)?;
    if let Some(cut) = &trace.truncated {
        eprintln!(
            "note: {}: line {} has no line end and does not parse (the writer was killed?); it was left out",
            path.display(),
            cut.line
        );
    }
    Ok(trace)
}

fn view_name(v: View) -> String {
    v.to_possible_value()
        .map_or_else(|| format!("{v:?}"), |p| p.get_name().to_string())
}

fn run_replay(a: &ReplayArgs) -> Result<String> {
    if let Some(path) = &a.plot {
        plot::check_path(path)?;
    }
    let budgets = replay::parse_budgets(&a.budgets)?;
    let policies = replay::Policy::parse_list(&a.policies)?;
    let trace = read_route(
        &a.trace,
        RouteFilter {
            turn: a.turn,
            phase: Phase::All,
            all_columns: true,
        },
        None,
    )?;
    let opt = replay::ReplayOptions {
        budgets,
        policies,
        validate: a.validate,
    };
    let rep = replay::run(&trace, &opt)?;
    if let Some(path) = &a.plot {
        plot::replay_curve(path, &rep)?;
        eprintln!("plot -> {}", path.display());
    }
    let mut text = match a.format {
        Format::Text => rep.text(),
        Format::Json => format!("{:#}\n", rep.json()),
        Format::Csv => rep.curve_csv(),
    };
    if let Some(path) = &a.csv {
        std::fs::write(path, rep.curve_csv()).map_err(|e| AnalyzeError::io(path, e))?;
        if a.format == Format::Text {
            text.push_str(&format!("wrote {}\n", path.display()));
        }
    }
    Ok(text)
}

fn run_drop(a: &DropArgs) -> Result<String> {
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
    let mut out = String::new();
    let mut errors: Vec<AnalyzeError> = Vec::new();
    let mut tables = drop::DropTables::default();
    for path in &a.traces {
        let result = RouteTrace::read_meta(path).and_then(|meta| {
            if meta.n_expert_used <= 0 {
                return Err(AnalyzeError::Invalid {
                    message: format!("{}: no n_expert_used in the preamble; cannot express a threshold", path.display()),
                    hint: "pass a route trace (`# route_trace v1` with a `# model=... n_expert_used=` line)".into(),
                });
            }
            let t = read_route(
                path,
                RouteFilter { turn: None, phase: Phase::All, all_columns: true },
                Some("drop (a routing's hit or miss decides what dropping it saves)"),
            )?;
            Ok(drop::report_with_tables(&t, &mut tables).unwrap_or_default())
        });
        match result {
            Ok(text) => out.push_str(&text),
            Err(e) => errors.push(e),
        }
    }
    if let (Some(path), [trace], true) = (&a.plot, a.traces.as_slice(), errors.is_empty()) {
        plot::drop_tradeoff(path, &tables, &drop::file_label(trace))?;
        eprintln!("plot -> {}", path.display());
    }
    let tables = [tables.threshold, tables.static_k, tables.phases];
    if !out.is_empty() {
        match a.format {
            Format::Text => {}
            Format::Json => out = table::to_json(serde_json::json!({"files": a.traces}), &tables),
            Format::Csv => out = table::to_csv(&tables),
        }
    }
    if errors.is_empty() {
        return Ok(out);
    }
    if out.is_empty() && errors.len() == 1 {
        return Err(errors.remove(0));
    }
    // Some files were reported, some rejected: print what we have, then every error; exit 1.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    for e in &errors {
        report(e);
    }
    std::process::exit(1);
}

fn read_run(path: &std::path::Path, trim: usize) -> Result<metrics::RunStats> {
    check_metrics_kind(path)?;
    match metrics::RunStats::read(path, trim)? {
        Some(run) => Ok(run),
        None => Err(no_walls(path, trim)),
    }
}

/// A route/compute/io trace given to `metrics`: name the command that reads it.
fn check_metrics_kind(path: &std::path::Path) -> Result<()> {
    use std::io::Read as _;
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| AnalyzeError::io(path, e))?;
    let head = String::from_utf8_lossy(&head[..n]);
    for (magic, kind, cmd, also) in [
        (
            "# route_trace",
            "a route trace",
            "route",
            " (or `replay` / `drop`)",
        ),
        ("# compute_trace", "a compute trace", "compute", ""),
        ("# io_trace", "an io trace", "io", ""),
    ] {
        if head.starts_with(magic) {
            return Err(AnalyzeError::Invalid {
                message: format!("{}: this is {kind}, not a metrics CSV", path.display()),
                hint: format!("read it with `bmoe-analyze {cmd} {}`{also}", path.display()),
            });
        }
    }
    Ok(())
}

/// Whether `path` opens as a metrics CSV (its magic line and header); bad rows are found later.
fn is_metrics_csv(path: &std::path::Path) -> bool {
    check_metrics_kind(path).is_ok() && bmoe_telemetry::metrics::MetricsReader::open(path).is_ok()
}

/// Why a metrics CSV gave no token times: empty file, no `wall_ms` column, no token rows, or
/// every row dropped by `--trim`.
fn no_walls(path: &std::path::Path, trim: usize) -> AnalyzeError {
    let shown = path.display();
    let file = match bmoe_telemetry::metrics::MetricsFile::read(path) {
        Ok(file) => file,
        Err(e) => return AnalyzeError::from_telemetry(path, e),
    };
    let (message, hint) = if file.header.is_empty() {
        (
            format!("{shown}: no header and no token rows (an empty file?)"),
            "pass the metrics CSV of a run that generated tokens (`bmoe-cli --csv FILE`)"
                .to_string(),
        )
    } else if !file.header.iter().any(|c| c == "wall_ms") {
        (
            format!(
                "{shown}: the header has no `wall_ms` column; metrics needs each token's wall time (columns: {})",
                file.header.join(",")
            ),
            "pass a bmoe metrics CSV (v0/v1/v2 all have wall_ms); the format is in docs/telemetry.md".to_string(),
        )
    } else {
        let rows = file.rows.iter().filter(|r| r.wall_ms.is_some()).count();
        if rows == 0 {
            (
                format!("{shown}: no token rows (the run stopped before its first token?)"),
                "pass the metrics CSV of a run that generated tokens".to_string(),
            )
        } else {
            (
                format!("{shown}: --trim {trim} drops all {rows} token rows"),
                format!("use a --trim below {rows}"),
            )
        }
    };
    AnalyzeError::Invalid { message, hint }
}

/// Metrics CSVs in `dir` (`*.csv`, sorted).
fn csv_files(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let mut inside: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| AnalyzeError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|q| q.is_file() && q.extension().is_some_and(|x| x == "csv"))
        .collect();
    inside.sort();
    Ok(inside)
}

/// A directory that holds metrics CSVs but none of bench-analyze's `<model>_<config>.csv`
/// matrix files is reported run by run (its bench tables would be empty). A directory with no
/// CSV at all keeps the reference's (empty) tables.
fn loose_runs(dir: &std::path::Path, markdown: Option<&std::path::Path>) -> Result<bool> {
    let csvs = csv_files(dir)?;
    if csvs.is_empty() || !metrics::bench_dir(dir)?.runs.is_empty() {
        return Ok(false);
    }
    if let Some(md) = markdown {
        return Err(AnalyzeError::Invalid {
            message: format!(
                "metrics {} --markdown {}: the directory has {} CSV file(s) but no bench matrix run (<model>_<config>.csv, e.g. qwen_c4000_l4.csv)",
                dir.display(),
                md.display(),
                csvs.len()
            ),
            hint:
                "drop --markdown to get one row per run, or pass a bench-analyze session directory"
                    .into(),
        });
    }
    eprintln!(
        "note: {}: no bench matrix run (<model>_<config>.csv); reporting its metrics CSVs run by run ({} CSV files)",
        dir.display(),
        csvs.len()
    );
    Ok(true)
}

fn run_metrics(a: &MetricsArgs) -> Result<String> {
    if let (Some(out), Some(_)) = (&a.plot, &a.compare) {
        // Checked before any reading; drawn below, once both runs are read.
        plot::check_path(out)?;
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
    } else if let Some(out) = &a.plot {
        plot::check_path(out)?;
        let [csv] = a.paths.as_slice() else {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "metrics --plot {}: the breakdown is drawn for one run, {} paths given",
                    out.display(),
                    a.paths.len()
                ),
                hint: "pass exactly one metrics CSV file with --plot, or `--compare A B --plot`"
                    .into(),
            });
        };
        if csv.is_dir() {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "metrics --plot {}: {} is not one metrics CSV file",
                    out.display(),
                    csv.display()
                ),
                hint: "pass exactly one metrics CSV file with --plot, or `--compare A B --plot`"
                    .into(),
            });
        }
        check_metrics_kind(csv)?;
        plot::token_breakdown(out, csv, a.trim)?;
        eprintln!("plot -> {}", out.display());
    }
    if let Some(pair) = &a.compare {
        let (x, y) = (read_run(&pair[0], a.trim)?, read_run(&pair[1], a.trim)?);
        if let Some(out) = &a.plot {
            plot::compare_runs(out, &x, &y, a.trim)?;
            eprintln!("plot -> {}", out.display());
        }
        if a.format == Format::Text {
            return metrics::compare(&x, &y);
        }
        let ci = metrics::ratio_ci(&x, &y);
        let (ja, jb) = (
            metrics::runs_json(std::slice::from_ref(&x)),
            metrics::runs_json(std::slice::from_ref(&y)),
        );
        if a.format == Format::Csv {
            let mut t = table::Table::new("compare", &COMPARE_COLUMNS);
            let mean = |j: &serde_json::Value| j[0]["mean_ms_per_token"].clone();
            t.push(vec![
                serde_json::json!(pair[0].display().to_string()),
                serde_json::json!(pair[1].display().to_string()),
                mean(&ja),
                mean(&jb),
                ci.map_or(serde_json::Value::Null, |c| table::num(c.estimate)),
                ci.map_or(serde_json::Value::Null, |c| table::num(c.low)),
                ci.map_or(serde_json::Value::Null, |c| table::num(c.high)),
            ]);
            return Ok(table::to_csv(&[t]));
        }
        return Ok(format!(
            "{:#}\n",
            serde_json::json!({"a": ja, "b": jb,
                "ratio_a_over_b": ci.map(|c| c.estimate), "ci95_low": ci.map(|c| c.low), "ci95_high": ci.map(|c| c.high)})
        ));
    }
    if let [dir] = a.paths.as_slice()
        && dir.is_dir()
        && !loose_runs(dir, a.markdown.as_deref())?
    {
        let bench = metrics::bench_dir(dir)?;
        let runs: Vec<metrics::RunStats> = bench.runs.iter().map(|b| b.run.clone()).collect();
        if let Some(path) = &a.markdown {
            std::fs::write(path, &bench.markdown).map_err(|e| AnalyzeError::io(path, e))?;
        }
        if a.format != Format::Text {
            // The text's tables, unrounded; --ci adds the per-run table as in text.
            let mut tables = bench.tables();
            if a.ci {
                tables.push(runs_table(&runs));
            }
            return Ok(match a.format {
                Format::Json => table::to_json(
                    serde_json::json!({"dir": dir.display().to_string()}),
                    &tables,
                ),
                _ => table::to_csv(&tables),
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
        return Ok(out);
    }
    let mut files = Vec::new();
    for p in &a.paths {
        if p.is_dir() {
            let inside = csv_files(p)?;
            if inside.is_empty() {
                return Err(AnalyzeError::Invalid {
                    message: format!("{}: no *.csv file in this directory", p.display()),
                    hint: "pass metrics CSV files or a directory holding them".into(),
                });
            }
            for q in inside {
                // A session directory also holds other CSVs (replay curves, …): skip those.
                if is_metrics_csv(&q) {
                    files.push(q);
                } else {
                    eprintln!("note: skipping {}: not a metrics CSV", q.display());
                }
            }
            if files.is_empty() {
                return Err(AnalyzeError::Invalid {
                    message: format!("{}: none of its CSV files is a metrics CSV", p.display()),
                    hint:
                        "pass a directory of bmoe metrics CSVs (`bmoe-cli --csv FILE` writes one)"
                            .into(),
                });
            }
        } else {
            files.push(p.clone());
        }
    }
    let mut runs = Vec::new();
    for p in &files {
        runs.push(read_run(p, a.trim)?);
    }
    if runs.is_empty() {
        return Err(AnalyzeError::Invalid {
            message: "metrics: no metrics CSV given".into(),
            hint: "pass metrics CSV files, a directory of them, or `--compare A B`".into(),
        });
    }
    Ok(match a.format {
        Format::Json => format!("{:#}\n", metrics::runs_json(&runs)),
        Format::Csv => table::to_csv(&[runs_table(&runs)]),
        Format::Text => metrics::runs_table(&runs),
    })
}

/// The `runs` table: each run's `--format json` keys as columns.
fn runs_table(runs: &[metrics::RunStats]) -> table::Table {
    let mut t = table::Table::new("runs", &RUN_COLUMNS);
    for run in metrics::runs_json(runs).as_array().into_iter().flatten() {
        t.push(RUN_COLUMNS.iter().map(|c| run[*c].clone()).collect());
    }
    t
}

/// `metrics --format csv`: the `--format json` keys of a run, as the `runs` table's columns.
const RUN_COLUMNS: [&str; 10] = [
    "path",
    "tokens",
    "mean_ms_per_token",
    "ci95_low_ms",
    "ci95_high_ms",
    "tok_per_s",
    "median_tok_per_s",
    "p95_tok_per_s",
    "instrumented",
    "stochastic",
];

/// `metrics --compare A B --format csv`: one `compare` row.
const COMPARE_COLUMNS: [&str; 7] = [
    "a",
    "b",
    "a_mean_ms_per_token",
    "b_mean_ms_per_token",
    "ratio_a_over_b",
    "ci95_low",
    "ci95_high",
];

/// The reference silently reports prefill rows as decode when a trace has no decode rows; we
/// keep its numbers but say so.
fn note_fallback(path: &std::path::Path, (text, fell_back): (String, bool)) -> String {
    if fell_back {
        eprintln!(
            "note: {} has no decode rows (phase 1); reporting all rows instead",
            path.display()
        );
    }
    text
}

/// A decode-analyze report in the chosen format.
fn formatted(path: &std::path::Path, r: decode::Report, format: Format) -> String {
    let text = note_fallback(path, (r.text, r.fell_back));
    match format {
        Format::Text => text,
        Format::Json => table::to_json(r.meta, &r.tables),
        Format::Csv => table::to_csv(&r.tables),
    }
}

fn run_compute(a: &ComputeArgs) -> Result<String> {
    if let Some(out) = &a.plot {
        plot::check_path(out)?;
    }
    let opt = decode::ComputeOptions {
        top: a.top,
        layers: a.layers,
    };
    let report = decode::compute(&a.trace, opt)?;
    if let Some(out) = &a.plot {
        plot::compute_share(out, &report)?;
        eprintln!("plot -> {}", out.display());
    }
    Ok(formatted(&a.trace, report, a.format))
}

fn run_io(a: &IoArgs) -> Result<String> {
    if let Some(out) = &a.plot {
        plot::check_path(out)?;
    }
    let report = decode::io(&a.trace, a.adjacent)?;
    if let Some(out) = &a.plot {
        plot::io_latency_cdf(out, &a.trace)?;
        eprintln!("plot -> {}", out.display());
    }
    Ok(formatted(&a.trace, report, a.format))
}

#[derive(Args, Debug)]
#[command(infer_long_args = true)]
struct ConvertArgs {
    /// A route, compute or io trace, or a metrics CSV (v0, v1, v2).
    file: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    to: ConvertTo,
    /// Output file (default: FILE with its extension replaced by .parquet or .arrow).
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ConvertTo {
    /// Apache Parquet (snappy), for DuckDB, Spark, pandas.
    Parquet,
    /// Arrow IPC file (Feather v2), uncompressed.
    Arrow,
}

fn run_convert(a: &ConvertArgs) -> Result<String> {
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

fn report(err: &AnalyzeError) -> ExitCode {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "error: {err}");
    let _ = writeln!(e, "hint: {}", err.hint());
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Convert(a) => run_convert(a),
        Command::Route(a) => run_route(a),
        Command::Replay(a) => run_replay(a),
        Command::Drop(a) => run_drop(a),
        Command::Compute(a) => run_compute(a),
        Command::Metrics(a) => run_metrics(a),
        Command::Io(a) => run_io(a),
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
