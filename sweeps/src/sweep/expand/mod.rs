//! Expansion: a parsed [`Manifest`] becomes cells (one resolved argv on one device with one
//! model) and an ordered list of runs (cell × repetition, warm-ups included).
//!
//! Every semantic error (undefined device, axis without values, link of unequal lengths, two
//! cells with one tag, ...) names the manifest line it comes from.
//!
//! [`expand`] goes through the manifest in the steps of its submodules: `declare` (devices and
//! models), `axes` (axis definitions and the axes each sweep sweeps), `settings` (what a sweep's
//! cells share, the session requests among it), `combos` (crossed and linked axis values,
//! explicit cells), `cells` (one combination to one [`Cell`], with `template` placeholders and a
//! `tag`) and `order` (the runs of a sweep in its order mode).

mod axes;
mod cells;
mod combos;
mod declare;
#[cfg(test)]
mod fixtures;
mod order;
mod settings;
mod tag;
mod template;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::manifest::{
    AnalysisDef, AxisKind, CooldownDef, CooldownMode, DeviceDef, DeviceKind, Manifest,
    ManifestError, OnTimeout, Source, SweepDef, UntilDef,
};
use cells::{CellInputs, ExcludeTally, build_cell};
use combos::{combos_for, count_combos};
use order::order_runs;
pub use tag::sanitize_tag;
// Reachable here as before the split; only expand's own modules call them today.
#[allow(unused_imports)]
pub use template::{render_value, substitute};

/// Where a model comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// A local file (staged to remote devices).
    File(PathBuf),
    /// A path already on each device.
    PerDevice(BTreeMap<String, String>),
    /// A synthetic preset built on first use.
    Preset {
        /// Preset name.
        preset: String,
        /// Expert weight type override.
        expert_type: Option<String>,
        /// Seed override.
        seed: Option<u64>,
    },
}

/// The resolved cooldown of a cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cooldown {
    /// Mode.
    pub mode: &'static str,
    /// Fixed wait, or minimum wait before polling, seconds.
    pub fixed_s: f64,
    /// Poll interval, seconds.
    pub poll_s: f64,
    /// Maximum wait, seconds.
    pub max_wait_s: f64,
    /// `run-and-flag`, `skip` or `abort`.
    pub on_timeout: &'static str,
    /// The conditions.
    pub until: UntilDef,
}

impl Cooldown {
    fn from_def(def: Option<&CooldownDef>) -> Cooldown {
        let d = def.cloned().unwrap_or_default();
        Cooldown {
            mode: match d.mode {
                CooldownMode::None => "none",
                CooldownMode::Fixed => "fixed",
                CooldownMode::Condition => "condition",
            },
            fixed_s: d.fixed_s.unwrap_or(0.0),
            poll_s: d.poll_s.unwrap_or(5.0),
            max_wait_s: d.max_wait_s.unwrap_or(300.0),
            on_timeout: match d.on_timeout {
                OnTimeout::RunAndFlag => "run-and-flag",
                OnTimeout::Skip => "skip",
                OnTimeout::Abort => "abort",
            },
            until: d.until.map(|u| u.into_inner()).unwrap_or_default(),
        }
    }
}

/// One cell: a resolved command on one device with one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// Sweep block name.
    pub sweep: String,
    /// Cell tag (a directory name).
    pub tag: String,
    /// Device id.
    pub device: String,
    /// Model id.
    pub model: String,
    /// Engine binary (local path or bare name to look up).
    pub binary: String,
    /// Arguments after `-m <model>` (the runner appends `--csv <path>`).
    pub args: Vec<String>,
    /// Where each of `args` comes from in the manifest (``axis `cache` ([axes.cache], line
    /// 7)``), for errors that name it.
    #[serde(skip)]
    pub arg_origins: Vec<String>,
    /// Environment for the run.
    pub env: BTreeMap<String, String>,
    /// Axis name -> rendered value, in axis order.
    pub axes: Vec<(String, String)>,
    /// Memory cap in bytes.
    pub mem_limit: Option<u64>,
    /// Per-run timeout, seconds.
    pub timeout_s: Option<f64>,
    /// Cooldown before each run.
    pub cooldown: Cooldown,
    /// Text fed to stdin (session mode requests).
    pub stdin: Option<String>,
    /// Whether this is a session-mode cell.
    pub session: bool,
    /// (line, column) of the manifest entry that chose `binary` (none for the default).
    #[serde(skip)]
    pub binary_origin: Option<(usize, usize)>,
    /// Tokens the report trims from the start of each run.
    pub discard_tokens: u32,
}

/// One execution of a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedRun {
    /// Index into [`Plan::cells`].
    pub cell: usize,
    /// Run name: `r1`, `r2`, ... for counted runs, `w1`, ... for warm-ups.
    pub rep: String,
    /// Untimed warm-up run (excluded from reports).
    pub warmup: bool,
    /// 1-based pass (repetition) number; 0 for warm-ups.
    pub pass: u32,
}

/// Most runs a manifest may expand to unless `--max-runs` says otherwise: a day of 1-second
/// runs, far beyond any campaign in bench-data/, and a plan of a few hundred MiB at most.
pub const DEFAULT_MAX_RUNS: u64 = 100_000;

/// Most bootstrap resamples `[analysis] resamples` and `report --resamples` take: each is a
/// pass over every token of a cell, and 10⁶ already pins the interval's third digit.
pub const MAX_RESAMPLES: usize = 1_000_000;

/// A fully expanded manifest.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Campaign name.
    pub name: String,
    /// The campaign's directory name: `name` with every character but letters, digits and
    /// `._-+=` replaced and leading dots and dashes dropped, so `name = "../../x"` or an
    /// absolute path cannot put the default `results/<name>` (or a remote device's run
    /// directories) anywhere else.
    pub dir_name: String,
    /// Campaign description.
    pub description: Option<String>,
    /// The manifest's directory (relative paths resolve against it).
    pub manifest_dir: PathBuf,
    /// Devices, in declaration order.
    pub devices: Vec<DeviceDef>,
    /// Models by id.
    pub models: BTreeMap<String, ModelSource>,
    /// Every cell.
    pub cells: Vec<Cell>,
    /// Every run, in execution order (devices run their own runs in this order, in parallel).
    pub runs: Vec<PlannedRun>,
    /// Report settings.
    pub analysis: AnalysisDef,
    /// (line, column) of each model's `[[model]]` entry, for errors about its file.
    #[serde(skip)]
    pub model_origins: BTreeMap<String, (usize, usize)>,
}

impl Serialize for DeviceDef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Device", 3)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field(
            "kind",
            match self.kind {
                DeviceKind::Local => "local",
                DeviceKind::Ssh => "ssh",
                DeviceKind::Adb => "adb",
            },
        )?;
        st.serialize_field(
            "address",
            &self.host.clone().or_else(|| self.serial.clone()),
        )?;
        st.end()
    }
}

/// The manifest and its text: every check gets both, so each error can name its line.
struct Ctx<'a> {
    m: &'a Manifest,
    src: &'a Source,
}

type Res<T> = Result<T, ManifestError>;

impl Ctx<'_> {
    fn err(&self, span: Range<usize>, msg: impl Into<String>) -> ManifestError {
        self.src.error(Some(span), msg)
    }
    fn err_hint(
        &self,
        span: Range<usize>,
        msg: impl Into<String>,
        hint: impl Into<String>,
    ) -> ManifestError {
        self.src.error_hint(Some(span), msg, hint)
    }
}

/// The directory name of campaign `name` (see [`Plan::dir_name`]); `None` when nothing of the
/// name is left to name a directory.
pub fn campaign_dir_name(name: &str) -> Option<String> {
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '=') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = mapped.trim_start_matches(['.', '-']);
    (!s.is_empty()).then(|| s.to_string())
}

/// Expands a manifest into cells and runs, refusing more than [`DEFAULT_MAX_RUNS`] runs.
///
/// # Errors
/// A [`ManifestError`] naming the line of the first semantic problem.
#[cfg(test)]
pub fn expand(m: &Manifest, src: &Source) -> Res<Plan> {
    expand_limited(m, src, DEFAULT_MAX_RUNS)
}

/// Expands a manifest into cells and runs. The number of runs each sweep block can expand to
/// is computed from the sizes of its lists before any cell is built, and a manifest above
/// `max_runs` in all is refused, naming the block: a typo'd `repetitions = 1000000000` or a
/// 1000⁴ grid is an error, not an allocation until the machine runs out of memory.
///
/// # Errors
/// A [`ManifestError`] naming the line of the first semantic problem.
pub fn expand_limited(m: &Manifest, src: &Source, max_runs: u64) -> Res<Plan> {
    let cx = Ctx { m, src };
    let manifest_dir = src.path.parent().map(Path::to_path_buf).unwrap_or_default();

    if let Some(schema) = &m.schema
        && schema.get_ref() != super::manifest::SCHEMA
    {
        return Err(cx.err_hint(
            schema.span(),
            format!("unsupported schema `{}`", schema.get_ref()),
            format!(
                "this bmoe-bench reads schema = \"{}\"",
                super::manifest::SCHEMA
            ),
        ));
    }

    let dir_name = campaign_dir_name(m.name.get_ref()).ok_or_else(|| {
        cx.err_hint(
            m.name.span(),
            format!("campaign name `{}` names no directory", m.name.get_ref()),
            "the default results directory is results/<name>: write e.g. name = \"cache-sweep\" (letters, digits, '.', '_', '-')",
        )
    })?;
    if let Some(a) = &m.analysis {
        check_analysis(&cx, a.get_ref(), a.span())?;
    }
    let devices = declare::devices(&cx)?;
    let models = declare::models(&cx, &devices, &manifest_dir)?;

    // Axis definitions must render somehow.
    for (name, def) in &m.axes {
        axes::check_axis_def(&cx, name, def.get_ref(), def.span())?;
    }

    let mut cells = Vec::new();
    let mut runs = Vec::new();
    let mut sweep_names = BTreeSet::new();
    let mut budget = Budget { max_runs, runs: 0 };
    for sw in &m.sweeps {
        let name = sw.get_ref().name.get_ref().clone();
        if !sweep_names.insert(name.clone()) {
            return Err(cx.err(
                sw.get_ref().name.span(),
                format!("sweep name `{name}` is used twice"),
            ));
        }
        if sanitize_tag(&name) != name {
            return Err(cx.err_hint(
                sw.get_ref().name.span(),
                format!("sweep name `{name}` is not a valid directory name"),
                "use letters, digits, '.', '_', '-'",
            ));
        }
        let first = cells.len();
        expand_sweep(
            &cx,
            sw.get_ref(),
            sw.span(),
            &devices,
            &models,
            &mut budget,
            &mut cells,
        )?;
        order_runs(&cx, sw.get_ref(), first, &cells, &mut runs)?;
    }

    if let (Some(a), Some(b)) = (&m.analysis, &m.analysis().baseline)
        && !cells.iter().any(|c| &c.tag == b)
    {
        let tags: Vec<&str> = cells.iter().map(|c| c.tag.as_str()).take(20).collect();
        return Err(cx.err_hint(
            a.span(),
            format!("[analysis] baseline `{b}` is not a cell of this manifest"),
            format!("name a cell tag: {}", tags.join(", ")),
        ));
    }
    Ok(Plan {
        name: m.name.get_ref().clone(),
        dir_name,
        description: m.description.clone(),
        manifest_dir,
        devices,
        models,
        cells,
        runs,
        analysis: m.analysis(),
        model_origins: m
            .models
            .iter()
            .map(|md| (md.get_ref().id.clone(), src.position(md.span().start)))
            .collect(),
    })
}

/// `[analysis]`: a confidence level strictly between 0 and 1, at most [`MAX_RESAMPLES`].
fn check_analysis(cx: &Ctx<'_>, a: &AnalysisDef, span: Range<usize>) -> Res<()> {
    if !(a.ci > 0.0 && a.ci < 1.0) {
        return Err(cx.err_hint(
            span,
            format!("[analysis] ci = {} is not a confidence level", a.ci),
            "write a level between 0 and 1, e.g. ci = 0.95",
        ));
    }
    if a.resamples > MAX_RESAMPLES {
        return Err(cx.err_hint(
            span,
            format!(
                "[analysis] resamples = {} is above the {MAX_RESAMPLES} the report takes",
                a.resamples
            ),
            "2000 (the default) is plenty for a 95 % interval; write e.g. resamples = 10000",
        ));
    }
    Ok(())
}

/// Runs planned so far against the limit.
struct Budget {
    max_runs: u64,
    runs: u128,
}

/// Refuses sweep `sw` when the runs it can expand to (`devices` × the axis combinations of
/// its models × repetitions and warm-ups: counted from the list sizes, before any cell is
/// built) take the manifest over the limit.
#[allow(clippy::too_many_arguments)]
fn check_size(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    span: &Range<usize>,
    devices: usize,
    combos: u128,
    settings: &super::manifest::Settings,
    budget: &mut Budget,
) -> Res<()> {
    let reps = u128::from(settings.repetitions.unwrap_or(1));
    let warm = u128::from(settings.warmup.as_ref().map_or(0, |w| w.runs));
    let runs = (devices as u128)
        .saturating_mul(combos)
        .saturating_mul(reps.saturating_add(warm));
    budget.runs = budget.runs.saturating_add(runs);
    if budget.runs <= u128::from(budget.max_runs) {
        return Ok(());
    }
    let before = if sw.exclude.is_empty() {
        ""
    } else {
        " (before `exclude`)"
    };
    Err(cx.err_hint(
        span.clone(),
        format!(
            "sweep `{}` expands to {runs} runs{before}: {devices} device(s) × {combos} cell(s) × ({reps} repetition(s) + {warm} warm-up(s)); the manifest's {} runs in all are above the limit of {}",
            sw.name.get_ref(),
            budget.runs,
            budget.max_runs
        ),
        format!(
            "shrink the grid (fewer values, `link` to zip axes, fewer repetitions), or raise the limit with --max-runs {} if you mean it",
            budget.runs.min(u128::from(u64::MAX))
        ),
    ))
}

/// Refuses excludes that cannot remove anything: a key that is not `model`, `device`, `cell`
/// or an axis of the sweep (a typo), or one whose values no cell has.
fn check_excludes(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    sweep: &str,
    axis_order: &[String],
    tally: Option<&ExcludeTally>,
) -> Res<()> {
    for (i, ex) in sw.exclude.iter().enumerate() {
        for k in ex.get_ref().keys() {
            let known = matches!(k.as_str(), "model" | "device" | "cell")
                || axis_order.iter().any(|a| a == k);
            if !known {
                return Err(cx.err_hint(
                    ex.span(),
                    format!("exclude key `{k}` is not `model`, `device`, `cell` or an axis of sweep `{sweep}`: it would exclude nothing"),
                    format!("exclude keys: model, device, cell{}{}", axis_order.iter().map(|a| format!(", {a}")).collect::<String>(), if axis_order.is_empty() { "" } else { " (the sweep's axes)" }),
                ));
            }
        }
        let Some(tally) = tally else { continue };
        if tally.hits.get(i).copied().unwrap_or(0) > 0 {
            continue;
        }
        let absent: Vec<String> = ex
            .get_ref()
            .iter()
            .filter_map(|(k, v)| {
                let want = template::render_value(v).unwrap_or_default();
                let have = tally.seen.get(k);
                (!have.is_some_and(|h| h.contains(&want))).then(|| {
                    let vals: Vec<&str> = have
                        .map(|h| h.iter().map(String::as_str).collect())
                        .unwrap_or_default();
                    format!(
                        "no cell has {k} = {want} (values: {})",
                        if vals.is_empty() {
                            "none".to_string()
                        } else {
                            vals.join(", ")
                        }
                    )
                })
            })
            .collect();
        let why = if absent.is_empty() {
            "no cell has all of these values at once".to_string()
        } else {
            absent.join("; ")
        };
        return Err(cx.err_hint(
            ex.span(),
            format!("this exclude of sweep `{sweep}` matches no cell: {why}"),
            "fix the value (a typo excludes nothing) or remove the exclude",
        ));
    }
    Ok(())
}

/// Appends the cells of sweep `sw` to `cells`: every (device, model, combination of axis
/// values) that no exclude removes, each with a tag of its own.
fn expand_sweep(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    span: Range<usize>,
    devices: &[DeviceDef],
    models: &BTreeMap<String, ModelSource>,
    budget: &mut Budget,
    cells: &mut Vec<Cell>,
) -> Res<()> {
    let sweep = sw.name.get_ref().clone();
    let settings = sw.settings().or(&cx.m.defaults);
    let dev_ids = declare::sweep_devices(cx, sw, &sweep, devices, &span)?;
    let axis_order = axes::axis_order(sw);
    axes::check_sweep_axes(cx, sw, &sweep, &axis_order, &span)?;
    // A model-kind axis replaces the block's model list.
    let model_axis = axis_order
        .iter()
        .find(|a| cx.m.axes[*a].get_ref().kind == AxisKind::Model)
        .cloned();
    let model_ids = declare::sweep_models(cx, sw, &sweep, models, model_axis.is_some(), &span)?;
    let link_of = axes::links(cx, sw, &axis_order)?;
    let shared = settings::shared(cx, &settings, &sweep, &span)?;
    check_excludes(cx, sw, &sweep, &axis_order, None)?;
    let mut combos = 0u128;
    for model in &model_ids {
        combos = combos.saturating_add(count_combos(cx, sw, model, &axis_order, &link_of)?);
    }
    check_size(cx, sw, &span, dev_ids.len(), combos, &settings, budget)?;

    let mut tally = ExcludeTally::default();
    let mut seen_tags: BTreeMap<String, Range<usize>> = BTreeMap::new();
    for dev in &dev_ids {
        let device = devices
            .iter()
            .find(|d| &d.id == dev)
            .expect("checked above");
        for model in &model_ids {
            let combos = combos_for(cx, sw, model, &axis_order, &link_of, span.clone())?;
            for combo in combos {
                let cell = build_cell(
                    cx,
                    sw,
                    &CellInputs {
                        sweep: &sweep,
                        device,
                        model,
                        model_axis: model_axis.as_deref(),
                        models,
                        multi_device: dev_ids.len() > 1,
                        base_flags: &shared.base_flags,
                        prompt: shared.prompt.as_deref(),
                        n_predict: settings.n_predict.as_ref().map(|n| *n.get_ref()),
                        session: shared.stdin.is_some(),
                        mem_limit: shared.mem_limit,
                        env: settings.env.clone().unwrap_or_default(),
                    },
                    &combo,
                    &mut tally,
                )?;
                let Some(mut cell) = cell else { continue };
                cell.timeout_s = settings.timeout_s.as_ref().map(|t| *t.get_ref());
                cell.cooldown = shared.cooldown.clone();
                cell.stdin = shared.stdin.clone();
                cell.discard_tokens = shared.discard_tokens;
                if let Some(prev) = seen_tags.insert(cell.tag.clone(), combo.span.clone()) {
                    let (l, _) = cx.src.position(prev.start);
                    let tspan = sw.tag.as_ref().map_or(combo.span.clone(), |t| t.span());
                    return Err(cx.err_hint(
                        tspan,
                        format!("two cells of sweep `{sweep}` get the tag `{}` (first from line {l})", cell.tag),
                        "put every varying axis into `tag`, e.g. tag = \"{model}_c{cache}_io{lanes}\"",
                    ));
                }
                cells.push(cell);
            }
        }
    }
    check_excludes(cx, sw, &sweep, &axis_order, Some(&tally))
}

#[cfg(test)]
mod tests {
    use super::fixtures::{HEAD, plan};

    #[test]
    fn duplicate_tags_are_refused() {
        let err = plan(&format!("{HEAD}[[sweep]]\nname = \"s\"\nmodels = [\"tiny\"]\ntag = \"x\"\naxes = {{ cache = [0, 8] }}\n")).expect_err("dup");
        assert!(err.message.contains("tag `x`"), "{err}");
    }

    #[test]
    fn errors_name_lines() {
        let base = format!("{HEAD}[[sweep]]\nname = \"s\"\n");
        let head_lines = base.lines().count();
        let err = plan(&format!("{base}axes = {{ cache = [] }}\n")).expect_err("empty");
        assert_eq!(err.line, head_lines + 1, "{err}");
        assert!(err.message.contains("no values"), "{err}");
        let err = plan(&format!("{base}devices = [\"phone\"]\n")).expect_err("device");
        assert_eq!(err.line, head_lines + 1, "{err}");
        assert!(err.message.contains("`phone`"), "{err}");
        let err = plan(&format!("{base}axes = {{ nope = [1] }}\n")).expect_err("axis");
        assert_eq!(err.line, head_lines + 1, "{err}");
        let err = plan(&format!("{base}tag = \"{{zzz}}\"\n")).expect_err("tag");
        assert_eq!(err.line, head_lines + 1, "{err}");
    }
}
