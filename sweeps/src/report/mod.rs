//! `bmoe-bench report RESULTS_DIR`: a table per sweep and model (tok/s mean ± 95 % CI across
//! repetitions and the within-run bootstrap, flash MiB/token, hit %, s/token split) in md, csv,
//! json or jsonl; `--baseline` ratios with intervals; SVG plots; a `findings.md` skeleton.
//!
//! Warm-ups, failed runs and runs whose preamble says they are not benchmark runs (traced,
//! probed, stochastic, speculative) are listed but never averaged.

mod export;
mod findings;
mod plot;
mod render;
pub mod stats;
pub mod warnings;

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, ValueEnum};
use indexmap::IndexMap;
use serde::Serialize;

use crate::sweep::Hinted;
use crate::sweep::results::{RunRecord, read_records_noting};
use crate::sweep::session::TurnRecord;
use stats::{Boot, CellStats, Ratio, RunFigures};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Markdown tables (default).
    Md,
    /// One CSV row per cell.
    Csv,
    /// A JSON array of cells.
    Json,
    /// One JSON object per cell per line.
    Jsonl,
}

/// Options of `bmoe-bench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results directory written by `bmoe-bench sweep`.
    pub results: PathBuf,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "md")]
    pub format: Format,
    /// Add tok/s ratios (with 95 % CIs) against this cell tag, per sweep and model.
    #[arg(long, value_name = "CELL")]
    pub baseline: Option<String>,
    /// Trim this many tokens from the start of every run (default: the manifest's
    /// warmup.discard_tokens).
    #[arg(long)]
    pub trim: Option<usize>,
    /// Write SVG plots into this directory (tok/s per cell with CIs).
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Also plot tok/s against this axis as curves (one per combination of the other axes).
    #[arg(long, value_name = "AXIS", requires = "plots")]
    pub x: Option<String>,
    /// Write a findings.md skeleton into the results directory.
    #[arg(long)]
    pub findings: bool,
    /// Bootstrap resamples (default: the manifest's [analysis], else 2000).
    #[arg(long)]
    pub resamples: Option<usize>,
    /// Also write the cell table (mean, sd, CI, median, min, max, n, samples) as JSON to FILE
    /// (schema in docs/sweeps.md).
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Also write the cell table as a Markdown table to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
}

/// One cell's row in the report.
#[derive(Debug, Clone, Serialize)]
pub struct CellRow {
    /// Sweep block.
    pub sweep: String,
    /// Model id.
    pub model: String,
    /// Device id.
    pub device: String,
    /// Cell tag.
    pub cell: String,
    /// Axis -> value.
    pub axes: IndexMap<String, String>,
    /// Aggregate statistics.
    #[serde(flatten)]
    pub stats: CellStats,
    /// Ratio to the baseline cell.
    pub vs_baseline: Option<Ratio>,
    /// Runs excluded (warm-up, failed, flagged), with the reason.
    pub excluded: Vec<String>,
    /// Engine version from the CSV preamble.
    pub engine: Option<String>,
    /// The comparability class of the runs aggregated, with its evidence, when it is not
    /// plain (`lossy (drop_cold_frac=0.5)`); a cell whose runs span several classes has one
    /// row per class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The class key of the runs aggregated (`plain`, `lossy`, `speculated:ngram`, ...).
    #[serde(skip)]
    pub class_key: String,
    /// Session cells: one row per turn (the k-th turn of every run aggregated), when the runs
    /// have several turns.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnRow>,
    /// The runs aggregated.
    #[serde(skip)]
    pub used: Vec<RunFigures>,
    /// Their records' session turns (answered `generate` requests, in order), per run.
    #[serde(skip)]
    pub used_turns: Vec<Vec<TurnRecord>>,
}

impl CellRow {
    /// The cell tag as tables print it: the tag, then ` [class]` when its runs are not plain.
    #[must_use]
    pub fn label(&self) -> String {
        if self.class.is_some() {
            format!("{} [{}]", self.cell, self.class_key)
        } else {
            self.cell.clone()
        }
    }
}

/// One comparability class of a cell: its key, its runs, their session turns.
type ClassGroup<'a> = (String, Vec<&'a RunFigures>, Vec<Vec<TurnRecord>>);

/// The k-th turn of a session cell, over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRow {
    /// 1-based position of the turn in every run.
    pub turn: usize,
    /// The CSV's `turn` value of the first run (the engine's own numbering).
    pub csv_turn: u64,
    /// Aggregate over the runs that have this turn (decode figures from the CSV rows).
    #[serde(flatten)]
    pub stats: CellStats,
    /// Mean prefill time of the turn, s (`BMOE_DONE.prefill_s`).
    pub prefill_s: Option<f64>,
    /// Mean tokens prefilled (the suffix after a reused KV prefix).
    pub n_prompt: Option<f64>,
    /// Mean context length after the turn.
    pub n_past: Option<f64>,
    /// Mean request-to-answer wall time, s (prefill and decode as a user waits for them).
    pub wall_s: Option<f64>,
}

/// Per-turn rows of a cell: the k-th turn of each run's CSV with the k-th answered request.
fn turn_rows(runs: &[RunFigures], recs: &[Vec<TurnRecord>], boot: Boot) -> Vec<TurnRow> {
    let n = runs.iter().map(|r| r.turns.len()).max().unwrap_or(0);
    let mean_of = |xs: Vec<f64>| (!xs.is_empty()).then(|| bmoe_stats::mean(&xs));
    (0..n)
        .map(|k| {
            let per_run: Vec<&RunFigures> = runs
                .iter()
                .filter_map(|r| r.turns.get(k).map(|t| &t.stats))
                .collect();
            let answered: Vec<&TurnRecord> = recs.iter().filter_map(|t| t.get(k)).collect();
            TurnRow {
                turn: k + 1,
                csv_turn: runs
                    .iter()
                    .find_map(|r| r.turns.get(k).map(|t| t.turn))
                    .unwrap_or(0),
                stats: stats::aggregate(&per_run, boot),
                prefill_s: mean_of(answered.iter().filter_map(|t| t.prefill_s).collect()),
                n_prompt: mean_of(
                    answered
                        .iter()
                        .filter_map(|t| t.n_prompt.map(|v| v as f64))
                        .collect(),
                ),
                n_past: mean_of(
                    answered
                        .iter()
                        .filter_map(|t| t.n_past.map(|v| v as f64))
                        .collect(),
                ),
                wall_s: mean_of(answered.iter().map(|t| t.wall_s).collect()),
            }
        })
        .collect()
}

/// `f` over `items` on every available core, results in order.
fn par_map<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(items.len().max(1));
    let chunk = items.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(|| c.iter().map(&f).collect::<Vec<U>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// A cell with fewer runs recorded than its plan has (an interrupted or still running sweep).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortCell {
    /// Sweep block.
    pub sweep: String,
    /// Cell tag.
    pub cell: String,
    /// Counted runs recorded (any status).
    pub recorded: usize,
    /// Counted runs planned.
    pub planned: usize,
    /// Planned warm-up runs with no record.
    pub warmups_missing: usize,
}

/// How much of the plan (`plan.json`) the results hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completeness {
    /// Planned runs, warm-ups included.
    pub planned: usize,
    /// Of those, runs with a record.
    pub recorded: usize,
    /// The cells that are short, in plan order.
    pub short: Vec<ShortCell>,
}

impl Completeness {
    /// One line for a log: `13 of 24 planned runs recorded; short: s/c8 (1 of 3 runs), ...`.
    pub fn summary(&self) -> String {
        let cells: Vec<String> = self
            .short
            .iter()
            .map(|c| format!("{}/{} ({})", c.sweep, c.cell, c.runs_text()))
            .collect();
        format!(
            "{} of {} planned runs recorded; short cells: {}",
            self.recorded,
            self.planned,
            cells.join(", ")
        )
    }
}

impl ShortCell {
    /// `1 of 3 runs`, or `0 of 3 runs, 1 warm-up(s) missing`.
    pub fn runs_text(&self) -> String {
        let mut t = format!("{} of {} runs", self.recorded, self.planned);
        if self.warmups_missing > 0 {
            t.push_str(&format!(", {} warm-up(s) missing", self.warmups_missing));
        }
        t
    }
}

/// The plan's runs that `records` lack, from `root/plan.json` (written when the sweep
/// started). `None` when there is no readable plan or nothing is missing.
fn completeness(root: &Path, records: &[RunRecord]) -> Option<Completeness> {
    let text = std::fs::read_to_string(root.join("plan.json")).ok()?;
    let plan: serde_json::Value = serde_json::from_str(&text).ok()?;
    let cells = plan.get("cells")?.as_array()?;
    let runs = plan.get("runs")?.as_array()?;
    let have: std::collections::BTreeSet<(&str, &str, &str)> = records
        .iter()
        .map(|r| (r.sweep.as_str(), r.cell.as_str(), r.rep.as_str()))
        .collect();
    let mut out = Completeness::default();
    let mut by_cell: IndexMap<(String, String), ShortCell> = IndexMap::new();
    for run in runs {
        let cell = cells.get(usize::try_from(run.get("cell")?.as_u64()?).ok()?)?;
        let (sweep, tag) = (cell.get("sweep")?.as_str()?, cell.get("tag")?.as_str()?);
        let rep = run.get("rep")?.as_str()?;
        let warmup = run.get("warmup").and_then(serde_json::Value::as_bool) == Some(true);
        let recorded = have.contains(&(sweep, tag, rep));
        out.planned += 1;
        out.recorded += usize::from(recorded);
        let c = by_cell
            .entry((sweep.to_string(), tag.to_string()))
            .or_insert_with(|| ShortCell {
                sweep: sweep.to_string(),
                cell: tag.to_string(),
                recorded: 0,
                planned: 0,
                warmups_missing: 0,
            });
        if warmup {
            c.warmups_missing += usize::from(!recorded);
        } else {
            c.planned += 1;
            c.recorded += usize::from(recorded);
        }
    }
    out.short = by_cell
        .into_values()
        .filter(|c| c.recorded < c.planned || c.warmups_missing > 0)
        .collect();
    (!out.short.is_empty()).then_some(out)
}

/// Everything the renderers need.
#[derive(Debug, Clone)]
pub struct Report {
    /// Results directory.
    pub root: PathBuf,
    /// Campaign name.
    pub campaign: String,
    /// Rows in run order of their first run.
    pub rows: Vec<CellRow>,
    /// Every record (run order).
    pub records: Vec<RunRecord>,
    /// Per-run statistics by record index (None = no usable CSV).
    pub run_stats: Vec<Option<RunFigures>>,
    /// Baseline tag.
    pub baseline: Option<String>,
    /// Bootstrap settings.
    pub boot: Boot,
    /// Trim override.
    pub trim: Option<usize>,
    /// What the plan has that the results lack (`None`: complete, or no plan.json).
    pub incomplete: Option<Completeness>,
    /// Input the report skipped, one line each: `results.jsonl:N: why` and runs rejected for
    /// their metrics (`sweep/cell/rep: metrics.csv token row 3 (step 3): wall_ms = NaN ...`).
    pub skipped: Vec<String>,
    /// Warnings about the runs averaged: a loaded machine, outliers (see [`warnings`]).
    pub warnings: Vec<String>,
    /// The runs each cell's warnings name.
    pub flags: IndexMap<warnings::Key, warnings::CellFlags>,
}

fn analysis_of(root: &Path) -> crate::sweep::manifest::AnalysisDef {
    let path = root.join("manifest.toml");
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| crate::sweep::manifest::parse(&path, &t).ok())
        .map(|(m, _)| m.analysis())
        .unwrap_or_default()
}

/// Builds the report of a results directory.
///
/// # Errors
/// The directory has no readable `results.jsonl`.
pub fn build(
    root: &Path,
    baseline: Option<String>,
    trim: Option<usize>,
    resamples: Option<usize>,
) -> Result<Report> {
    let (records, mut skipped) = read_records_noting(root)?;
    if let Some(r) = resamples
        && r > crate::sweep::expand::MAX_RESAMPLES
    {
        return Err(Hinted::new(
            format!(
                "--resamples {r} is above the {} the report takes",
                crate::sweep::expand::MAX_RESAMPLES
            ),
            "2000 (the default) is plenty for a 95 % interval; give e.g. --resamples 10000",
        )
        .into());
    }
    if records.is_empty() {
        return Err(Hinted::new(
            format!("{} has no runs yet", root.display()),
            "run `bmoe-bench sweep MANIFEST` first",
        )
        .into());
    }
    let analysis = analysis_of(root);
    let boot = Boot {
        resamples: resamples.unwrap_or(analysis.resamples),
        level: analysis.ci,
        seed: analysis.seed,
    };
    let baseline = baseline.or(analysis.baseline);
    let read: Vec<Option<Result<RunFigures, String>>> = par_map(&records, |r| {
        if r.status != "ok" {
            return None;
        }
        let t = trim.unwrap_or(r.discard_tokens as usize);
        Some(
            stats::run_stats(&root.join(&r.dir).join("metrics.csv"), t)
                .map_err(|e| format!("{e:#}")),
        )
    });
    let mut rejected: Vec<Option<String>> = vec![None; records.len()];
    let run_stats: Vec<Option<RunFigures>> = read
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Some(Ok(f)) => Some(f),
            Some(Err(why)) => {
                skipped.push(format!("run {}: rejected: {why}", records[i].dir));
                rejected[i] = Some(why);
                None
            }
            None => None,
        })
        .collect();

    // Cells in order of their first run.
    let mut cells: IndexMap<(String, String), Vec<usize>> = IndexMap::new();
    for (i, r) in records.iter().enumerate() {
        cells
            .entry((r.sweep.clone(), r.cell.clone()))
            .or_default()
            .push(i);
    }
    let mut rows = Vec::new();
    // One line per cell whose runs span several comparability classes (report warnings).
    let mut kept_apart: Vec<String> = Vec::new();
    for ((sweep, cell), idx) in &cells {
        let first = &records[idx[0]];
        let mut used: Vec<&RunFigures> = Vec::new();
        let mut used_turns: Vec<Vec<TurnRecord>> = Vec::new();
        let mut excluded = Vec::new();
        for &i in idx {
            let r = &records[i];
            let name = format!("{} ({})", r.rep, r.dir);
            if r.warmup {
                excluded.push(format!("{name}: warm-up"));
            } else if r.status != "ok" {
                match r.oom_text() {
                    Some(oom) => excluded.push(format!("{name}: {} — {oom}", r.status)),
                    None => excluded.push(format!("{name}: {}", r.status)),
                }
            } else {
                match &run_stats[i] {
                    None => excluded.push(format!(
                        "{name}: rejected: {}",
                        rejected[i].as_deref().unwrap_or("unreadable metrics.csv")
                    )),
                    Some(s) if s.decode.tokens() == 0 => {
                        excluded.push(format!("{name}: no tokens after the trim"))
                    }
                    Some(s) => match &s.flag {
                        Some(f) => excluded.push(format!("{name}: {f}")),
                        None => {
                            used.push(s);
                            // The turns that produced tokens, matching the CSV's turns.
                            used_turns.push(
                                r.turns
                                    .iter()
                                    .filter(|t| {
                                        t.cmd == "generate"
                                            && matches!(t.status.as_str(), "done" | "cancelled")
                                    })
                                    .cloned()
                                    .collect(),
                            );
                        }
                    },
                }
            }
        }
        let engine = idx
            .iter()
            .find_map(|&i| run_stats[i].as_ref().and_then(|s| s.engine.clone()));
        // Runs of different comparability classes are never averaged: one row per class,
        // in order of each class's first run (a plain-only cell is one row, as before).
        let mut groups: Vec<ClassGroup<'_>> = Vec::new();
        for (u, t) in used.into_iter().zip(used_turns) {
            let key = u.class.key();
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, us, ts)) => {
                    us.push(u);
                    ts.push(t);
                }
                None => groups.push((key, vec![u], vec![t])),
            }
        }
        if groups.is_empty() {
            groups.push(("plain".into(), Vec::new(), Vec::new()));
        }
        if groups.len() > 1 {
            let parts: Vec<String> = groups
                .iter()
                .map(|(k, us, _)| {
                    let dirs: Vec<String> = idx
                        .iter()
                        .filter(|&&i| {
                            run_stats[i]
                                .as_ref()
                                .is_some_and(|s| us.iter().any(|u| std::ptr::eq(*u, s)))
                        })
                        .map(|&i| records[i].dir.clone())
                        .collect();
                    let why = us.first().map(|u| u.class.describe()).unwrap_or_default();
                    format!("{k}: {} — {why}", dirs.join(", "))
                })
                .collect();
            kept_apart.push(format!(
                "cell `{cell}` ({sweep}): runs of {} comparability classes kept apart, one row each (never averaged together): {}",
                groups.len(),
                parts.join("; ")
            ));
        }
        for (g, (key, us, ts)) in groups.into_iter().enumerate() {
            let class = us
                .first()
                .filter(|u| !u.class.is_plain())
                .map(|u| u.class.describe());
            rows.push(CellRow {
                sweep: sweep.clone(),
                model: first.model.clone(),
                device: first.device.clone(),
                cell: cell.clone(),
                axes: first.axes.clone(),
                stats: stats::CellStats::default(),
                used: us.iter().map(|u| (*u).clone()).collect(),
                used_turns: ts,
                turns: Vec::new(),
                vs_baseline: None,
                // the cell's exclusions are listed once, on its first row
                excluded: if g == 0 { excluded.clone() } else { Vec::new() },
                engine: engine.clone(),
                class,
                class_key: key,
            });
        }
    }
    // The bootstraps dominate: run them on every core.
    let aggregates = par_map(&rows, |r: &CellRow| {
        stats::aggregate(&r.used.iter().collect::<Vec<_>>(), boot)
    });
    for (r, a) in rows.iter_mut().zip(aggregates) {
        r.stats = a;
        r.turns = turn_rows(&r.used, &r.used_turns, boot);
    }
    // Baseline ratios within each (sweep, model).
    if let Some(b) = &baseline {
        // Only the runs of the row's own class: a ratio never mixes classes either.
        let usable = |sweep: &str, cell: &str, class: &str| -> Vec<&RunFigures> {
            records
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.sweep == sweep && r.cell == cell && !r.warmup && r.status == "ok"
                })
                .filter_map(|(i, _)| run_stats[i].as_ref())
                .filter(|s| s.flag.is_none() && s.decode.tokens() > 0)
                .filter(|s| s.class.key() == class)
                .collect()
        };
        let found = rows.iter().any(|r| &r.cell == b);
        if !found {
            let tags: Vec<&str> = rows.iter().map(|r| r.cell.as_str()).collect();
            return Err(Hinted::new(
                format!("baseline cell `{b}` is not in these results"),
                format!("cells: {}", tags.join(", ")),
            )
            .into());
        }
        for i in 0..rows.len() {
            let Some(base) = rows
                .iter()
                .find(|r| &r.cell == b && r.sweep == rows[i].sweep)
            else {
                continue;
            };
            if rows[i].cell == base.cell && rows[i].class_key == base.class_key {
                // The baseline against itself is 1 by definition; a bootstrap of two
                // independent resamples of the same runs would only show their spread.
                rows[i].vs_baseline = Some(stats::Ratio::baseline());
                continue;
            }
            let base_runs = usable(&base.sweep, &base.cell, &base.class_key);
            let cell_runs = usable(&rows[i].sweep, &rows[i].cell, &rows[i].class_key);
            rows[i].vs_baseline = stats::ratio(&cell_runs, &base_runs, boot);
        }
    }
    let incomplete = completeness(root, &records);
    let (mut warnings, flags) = warnings::warnings(&rows, &records, &run_stats);
    warnings.extend(kept_apart);
    Ok(Report {
        incomplete,
        skipped,
        warnings,
        flags,
        root: root.to_path_buf(),
        campaign: records[0].campaign.clone(),
        rows,
        records,
        run_stats,
        baseline,
        boot,
        trim,
    })
}

/// The report as text in `format`.
///
/// # Errors
/// JSON serialisation.
pub fn render(report: &Report, format: Format) -> Result<String> {
    Ok(match format {
        Format::Md => render::markdown(report),
        Format::Csv => render::csv(report),
        Format::Json => render::json(report)?,
        Format::Jsonl => render::jsonl(report)?,
    })
}

/// Runs `bmoe-bench report`.
///
/// # Errors
/// Unreadable results, unwritable outputs.
pub fn run(args: &ReportArgs) -> Result<()> {
    let report = build(
        &args.results,
        args.baseline.clone(),
        args.trim,
        args.resamples,
    )?;
    crate::sweep::emit(&render(&report, args.format)?)?;
    for s in &report.skipped {
        eprintln!("warning: skipped {s}");
    }
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    // The md text says so itself; csv and json keep their shape, so say it on stderr too.
    if let Some(c) = &report.incomplete {
        eprintln!(
            "warning: {} is incomplete: {}",
            args.results.display(),
            c.summary()
        );
        eprintln!(
            "hint: `bmoe-bench sweep MANIFEST -o {} --resume` runs what is missing",
            args.results.display()
        );
    }
    if let Some(path) = &args.export_json {
        export::write(path, &export::json(&report)?)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.export_markdown {
        export::write(path, &export::markdown(&report))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plots {
        let files = plot::write_all(&report, dir, args.x.as_deref())?;
        for f in files {
            eprintln!("wrote {}", f.display());
        }
    }
    if args.findings {
        let path = args.results.join("findings.md");
        crate::sweep::results::write_atomic(&path, findings::skeleton(&report).as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
