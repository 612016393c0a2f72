//! `bmoe-bench sweep MANIFEST.toml`: manifest-driven benchmark grids across devices.
//!
//! [`manifest`] parses (errors name the line), [`expand`] turns the manifest into cells and an
//! ordered run list, [`runner`] executes it on [`device`]s with [`cgroup`] caps and [`state`]
//! probes, and [`results`] owns the on-disk layout, atomic commits and resume.

pub mod cgroup;
pub mod device;
pub mod engine_flags;
pub mod expand;
pub mod lock;
pub mod manifest;
pub mod progress;
pub mod results;
pub mod runner;
pub mod session;
pub mod state;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

/// An error with a `hint:` line (what to do about it).
#[derive(Debug, Clone)]
pub struct Hinted {
    /// What failed.
    pub message: String,
    /// What to do.
    pub hint: String,
}

impl Hinted {
    /// A new hinted error.
    pub fn new(message: impl Into<String>, hint: impl Into<String>) -> Hinted {
        Hinted {
            message: message.into(),
            hint: hint.into(),
        }
    }
}

impl fmt::Display for Hinted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Hinted {}

/// The `hint:` for errors of the sweep and report commands.
pub fn hint_for(err: &anyhow::Error) -> Option<String> {
    for e in err.chain() {
        if let Some(h) = e.downcast_ref::<Hinted>() {
            return Some(h.hint.clone());
        }
        if let Some(m) = e.downcast_ref::<manifest::ManifestError>() {
            return m.hint.clone();
        }
    }
    None
}

/// Options of `bmoe-bench sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The manifest(s) (TOML; see docs/sweeps.md). Several run one after another, each into
    /// its own results directory.
    #[arg(required = true, value_name = "MANIFEST")]
    pub manifests: Vec<PathBuf>,
    /// Results directory [default: results/<manifest name>]. With several manifests, the
    /// parent directory: each writes to OUT/<manifest name>.
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Continue an interrupted sweep: skip runs that already completed.
    #[arg(long)]
    pub resume: bool,
    /// Continue results that were started from a different version of the manifest.
    #[arg(long)]
    pub force: bool,
    /// Only validate the manifest and print what it expands to; run nothing.
    #[arg(long)]
    pub check: bool,
    /// Print every run's command in order (stdout) and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse manifests that expand to more runs than this (warm-ups included), counted before
    /// anything is expanded.
    #[arg(long, value_name = "N", default_value_t = expand::DEFAULT_MAX_RUNS)]
    pub max_runs: u64,
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
///
/// # Errors
/// Other write errors.
pub fn emit(text: &str) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to stdout"),
    }
}

/// Loads and expands a manifest (refusing more than `max_runs` runs).
///
/// # Errors
/// I/O errors and [`manifest::ManifestError`]s (with line and column).
pub fn load(path: &std::path::Path, max_runs: u64) -> Result<(expand::Plan, String)> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::Error::from(Hinted::new(
            format!("cannot read manifest {}: {e}", path.display()),
            "check the path; examples/sweeps/*.toml are runnable examples",
        ))
    })?;
    let (m, src) = manifest::parse(path, &text)?;
    let plan = expand::expand_limited(&m, &src, max_runs)?;
    if plan.dir_name != plan.name {
        eprintln!(
            "note: {}: campaign name `{}` is not a directory name: its default results directory is results/{}",
            path.display(),
            plan.name,
            plan.dir_name
        );
    }
    Ok((plan, text))
}

/// Runs `bmoe-bench sweep`: every manifest in turn. A manifest that fails (to parse, or
/// because runs failed) is reported and the next one still runs; the result is an error when
/// any failed.
///
/// # Errors
/// With one manifest, its error; with several, a summary naming the ones that failed.
pub fn run(args: &SweepArgs) -> Result<()> {
    if let [one] = args.manifests.as_slice() {
        return run_one(args, one, args.out.clone());
    }
    // Load every manifest first: two that would write into the same directory are refused
    // before anything runs (by --check and --dry-run too: they answer "would this run?"), and
    // a broken one is reported without stopping the others.
    let mut loaded = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut seen: std::collections::BTreeMap<PathBuf, &std::path::Path> = Default::default();
    for path in &args.manifests {
        match load(path, args.max_runs) {
            Ok((plan, _)) => {
                let out = args
                    .out
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("results"))
                    .join(&plan.dir_name);
                if let Some(first) = seen.get(&out) {
                    return Err(Hinted::new(
                        format!(
                            "{} and {} both have name = \"{}\" and would share the results directory {}",
                            first.display(),
                            path.display(),
                            plan.name,
                            out.display()
                        ),
                        "give each manifest its own `name`, or run them separately with -o",
                    )
                    .into());
                }
                seen.insert(out.clone(), path);
                loaded.push((path, Some(out)));
            }
            Err(err) => {
                // Manifest errors already name the file (and line).
                report_failure(None, &err, &mut failed, path);
                loaded.push((path, None));
            }
        }
    }
    let total = args.manifests.len();
    for (i, (path, out)) in loaded.into_iter().enumerate() {
        let Some(out) = out else { continue };
        if stopped() {
            failed.push(format!("{} (not started: interrupted)", path.display()));
            continue;
        }
        eprintln!("==> [{}/{total}] {}", i + 1, path.display());
        if let Err(err) = run_one(args, path, Some(out)) {
            report_failure(Some(path), &err, &mut failed, path);
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    Err(Hinted::new(
        format!("{} of {total} manifest(s) failed: {}", failed.len(), failed.join(", ")),
        "each failure is printed above with its own hint; rerun a manifest alone (with --resume to keep its finished runs)",
    )
    .into())
}

/// Prints one manifest's error (and hint), prefixed by `prefix`, and remembers `path`.
fn report_failure(
    prefix: Option<&std::path::Path>,
    err: &anyhow::Error,
    failed: &mut Vec<String>,
    path: &std::path::Path,
) {
    match prefix {
        Some(p) => eprintln!("error: {}: {err:#}", p.display()),
        None => eprintln!("error: {err:#}"),
    }
    if let Some(h) = hint_for(err) {
        eprintln!("hint: {h}");
    }
    failed.push(path.display().to_string());
}

/// `--check` and `--dry-run`: every cell's arguments against the flags its engine lists in
/// `--help` (run once per binary), so a misspelt flag is refused before anything runs, naming
/// the cell and the manifest entry it comes from. An engine whose help cannot be had here (not
/// built, built for another machine) is reported as not checked, not as an error.
///
/// # Errors
/// Arguments an engine would refuse, all of them in one error.
pub fn check_engine_flags(manifest: &std::path::Path, plan: &expand::Plan) -> Result<()> {
    use std::collections::BTreeMap;
    type Engine = std::result::Result<(PathBuf, engine_flags::EngineFlags), String>;
    /// (binary, origin, word): one mistake in the manifest, however many cells it reaches.
    type Mistake = (String, String, String);
    /// The first cell it reaches, how many, the flag it is closest to.
    type Reach = (String, usize, Option<String>);
    let mut engines: BTreeMap<String, Engine> = BTreeMap::new();
    let mut problems: indexmap::IndexMap<Mistake, Reach> = indexmap::IndexMap::new();
    for c in &plan.cells {
        let engine = engines.entry(c.binary.clone()).or_insert_with(|| {
            let path = runner::resolve_binary(&c.binary).map_err(|e| format!("{e:#}"))?;
            let flags = engine_flags::EngineFlags::from_binary(&path)?;
            Ok((path, flags))
        });
        let Ok((path, flags)) = engine else { continue };
        for u in flags.unknown(&c.args) {
            let origin = c
                .arg_origins
                .get(u.index)
                .cloned()
                .unwrap_or_else(|| "the cell's arguments".into());
            let e = problems
                .entry((path.display().to_string(), origin, u.word))
                .or_insert_with(|| {
                    (
                        format!("sweep `{}`, cell `{}`", c.sweep, c.tag),
                        0,
                        u.similar,
                    )
                });
            e.1 += 1;
        }
    }
    for (bin, e) in &engines {
        if let Err(why) = e {
            eprintln!(
                "warning: {}: flags not checked against engine `{bin}`: {why}",
                manifest.display()
            );
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let mut msg = format!(
        "{}: {} argument(s) the engine does not take:",
        manifest.display(),
        problems.len()
    );
    for ((bin, origin, word), (cell, n, similar)) in &problems {
        let what = if word.starts_with('-') {
            format!("is not a flag of {bin}")
        } else {
            format!("is no flag's value, and {bin} takes no positional argument")
        };
        let more = if *n > 1 {
            format!(" (and {} more cell(s))", n - 1)
        } else {
            String::new()
        };
        let tip = similar
            .as_ref()
            .map_or(String::new(), |s| format!("; did you mean `{s}`?"));
        msg.push_str(&format!(
            "\n  {cell}{more}: `{word}` from {origin} {what}{tip}"
        ));
    }
    let bin = problems
        .keys()
        .next()
        .map_or("bmoe-cli", |(b, _, _)| b.as_str());
    Err(Hinted::new(
        msg,
        format!("fix the flag in the manifest; `{bin} --help` lists every flag the engine takes"),
    )
    .into())
}

/// Every engine binary and model file the plan runs is there (a remote device's are copied
/// from here too), each missing one named with the manifest line that chose it: `--check`
/// answers "would this run?", and the run itself would stop at the first.
///
/// # Errors
/// The first binary that cannot be found, else the first model file that does not exist.
pub fn check_files(manifest: &std::path::Path, plan: &expand::Plan) -> Result<()> {
    let at = |pos: Option<(usize, usize)>| match pos {
        Some((l, c)) => format!("{}:{l}:{c}", manifest.display()),
        None => manifest.display().to_string(),
    };
    let mut seen = std::collections::BTreeSet::new();
    for c in &plan.cells {
        if !seen.insert(c.binary.clone()) {
            continue;
        }
        if let Err(e) = runner::resolve_binary(&c.binary) {
            let hint = hint_for(&e).unwrap_or_default();
            let whose = if c.binary_origin.is_none() {
                " (the default: the manifest sets no `binary`)"
            } else {
                ""
            };
            return Err(Hinted::new(format!("{}: {e:#}{whose}", at(c.binary_origin)), hint).into());
        }
    }
    for (id, src) in &plan.models {
        if let expand::ModelSource::File(p) = src
            && !p.is_file()
        {
            return Err(Hinted::new(
                format!(
                    "{}: model `{id}`: file {} does not exist",
                    at(plan.model_origins.get(id).copied()),
                    p.display()
                ),
                "fix `path` (relative paths resolve against the manifest's directory), or use preset = \"tiny\" for a synthetic model",
            )
            .into());
        }
    }
    Ok(())
}

/// Runs one manifest into `out` [default: results/<name>].
///
/// # Errors
/// Manifest, setup and I/O errors; also when runs failed (after all ran).
fn run_one(args: &SweepArgs, manifest: &std::path::Path, out: Option<PathBuf>) -> Result<()> {
    let (plan, text) = load(manifest, args.max_runs)?;
    check_files(manifest, &plan)?;
    if args.check || args.dry_run {
        check_engine_flags(manifest, &plan)?;
        let warm = plan.runs.iter().filter(|r| r.warmup).count();
        let sweeps: std::collections::BTreeSet<&str> =
            plan.cells.iter().map(|c| c.sweep.as_str()).collect();
        let mut out = format!(
            "{}: ok — {} sweep(s), {} device(s), {} cell(s), {} run(s) ({} warm-up)\n",
            manifest.display(),
            sweeps.len(),
            plan.devices.len(),
            plan.cells.len(),
            plan.runs.len(),
            warm
        );
        if args.dry_run {
            for (i, r) in plan.runs.iter().enumerate() {
                let c = &plan.cells[r.cell];
                let mut words = vec![c.binary.clone(), "-m".into(), format!("<{}>", c.model)];
                words.extend(c.args.iter().cloned());
                let mem = c
                    .mem_limit
                    .map_or(String::new(), |b| format!(" [mem_limit {} MiB]", b >> 20));
                out.push_str(&format!(
                    "{:>4} {} {}/{}/{}{mem}: {}\n",
                    i + 1,
                    c.device,
                    c.sweep,
                    c.tag,
                    r.rep,
                    device::shell_join(&words)
                ));
            }
        }
        return emit(&out);
    }
    let out = out.unwrap_or_else(|| PathBuf::from("results").join(&plan.dir_name));
    let opts = runner::RunOptions {
        out: out.clone(),
        resume: args.resume,
        force: args.force,
    };
    execute(&plan, &text, &opts)?;
    eprintln!("next: bmoe-bench report {}", out.display());
    Ok(())
}

/// The flag SIGINT, SIGTERM and SIGHUP set (registered once per process): the runner then
/// forwards SIGINT to the running engines' process groups, records nothing of the runs cut
/// short and starts no other. A second signal ends bmoe-bench at once (exit 130); the engines
/// it leaves keep the results directory locked until they end (see [`lock`]).
///
/// # Errors
/// The handlers cannot be installed.
fn stop_flag() -> Result<std::sync::Arc<AtomicBool>> {
    use std::sync::{Arc, OnceLock};
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    if let Some(f) = FLAG.get() {
        return Ok(Arc::clone(f));
    }
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag))
            .context("cannot install the signal handlers")?;
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .context("cannot install the signal handlers")?;
    }
    Ok(Arc::clone(FLAG.get_or_init(|| flag)))
}

/// Whether a signal asked the sweep to stop (later manifests are not started).
fn stopped() -> bool {
    stop_flag().is_ok_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
}

/// Runs an expanded manifest (`text` is what the results directory keeps) into `opts.out` and
/// prints the summary on stderr.
///
/// # Errors
/// Setup and I/O errors; also when runs failed (after all ran).
pub fn execute(plan: &expand::Plan, text: &str, opts: &runner::RunOptions) -> Result<()> {
    let out = &opts.out;
    let stop = stop_flag()?;
    let t0 = Instant::now();
    let outcome = runner::run(plan, text, opts, &stop).context("sweep failed")?;
    let ok = outcome.by_status.get("ok").copied().unwrap_or(0);
    let bad: usize = outcome
        .by_status
        .iter()
        .filter(|(k, _)| k.as_str() != "ok")
        .map(|(_, v)| v)
        .sum();
    let detail: Vec<String> = outcome
        .by_status
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    eprintln!(
        "done in {:.1} s: {}{} -> {}",
        t0.elapsed().as_secs_f64(),
        if detail.is_empty() {
            "nothing to run".into()
        } else {
            detail.join(", ")
        },
        if outcome.resumed > 0 {
            format!(" ({} already complete)", outcome.resumed)
        } else {
            String::new()
        },
        out.display()
    );
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Hinted::new(
            format!(
                "interrupted by a signal: {} run(s) in flight stopped and not recorded",
                outcome.interrupted
            ),
            format!(
                "`bmoe-bench sweep MANIFEST -o {} --resume` runs what is missing",
                out.display()
            ),
        )
        .into());
    }
    for d in &outcome.lost_devices {
        eprintln!(
            "warning: device `{d}` dropped out; its remaining runs are marked device-lost (rerun with --resume)"
        );
    }
    if bad > 0 {
        return Err(Hinted::new(
            format!("{bad} of {} run(s) did not succeed", ok + bad),
            format!("see `status`/`error` in {}/results.jsonl and each run's stderr.txt; `--resume` retries runs that left no result", out.display()),
        )
        .into());
    }
    Ok(())
}
