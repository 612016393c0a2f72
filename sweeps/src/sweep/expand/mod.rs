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
use cells::{CellInputs, build_cell};
use combos::combos_for;
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

/// A fully expanded manifest.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Campaign name.
    pub name: String,
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

/// Expands a manifest into cells and runs.
///
/// # Errors
/// A [`ManifestError`] naming the line of the first semantic problem.
pub fn expand(m: &Manifest, src: &Source) -> Res<Plan> {
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

    let devices = declare::devices(&cx)?;
    let models = declare::models(&cx, &devices, &manifest_dir)?;

    // Axis definitions must render somehow.
    for (name, def) in &m.axes {
        axes::check_axis_def(&cx, name, def.get_ref(), def.span())?;
    }

    let mut cells = Vec::new();
    let mut runs = Vec::new();
    let mut sweep_names = BTreeSet::new();
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
        expand_sweep(&cx, sw.get_ref(), sw.span(), &devices, &models, &mut cells)?;
        order_runs(&cx, sw.get_ref(), first, &cells, &mut runs)?;
    }

    Ok(Plan {
        name: m.name.get_ref().clone(),
        description: m.description.clone(),
        manifest_dir,
        devices,
        models,
        cells,
        runs,
        analysis: m.analysis.clone(),
    })
}

/// Appends the cells of sweep `sw` to `cells`: every (device, model, combination of axis
/// values) that no exclude removes, each with a tag of its own.
fn expand_sweep(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    span: Range<usize>,
    devices: &[DeviceDef],
    models: &BTreeMap<String, ModelSource>,
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
                        n_predict: settings.n_predict,
                        session: shared.stdin.is_some(),
                        mem_limit: shared.mem_limit,
                        env: settings.env.clone().unwrap_or_default(),
                    },
                    &combo,
                )?;
                let Some(mut cell) = cell else { continue };
                cell.timeout_s = settings.timeout_s;
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
    Ok(())
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
