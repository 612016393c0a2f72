//! Expansion: a parsed [`Manifest`] becomes cells (one resolved argv on one device with one
//! model) and an ordered list of runs (cell × repetition, warm-ups included).
//!
//! Every semantic error (undefined device, axis without values, link of unequal lengths, two
//! cells with one tag, ...) names the manifest line it comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use bmoe_stats::SplitMix64;
use indexmap::IndexMap;
use serde::Serialize;

use super::manifest::{
    AnalysisDef, AxisDef, AxisKind, CooldownDef, CooldownMode, DeviceDef, DeviceKind, Manifest,
    ManifestError, ModelPath, OnTimeout, OrderMode, Source, SweepDef, UntilDef, parse_size,
};

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

/// Renders a scalar TOML value as text (`0.5`, `4000`, `auto`, `true`).
pub fn render_value(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Replaces `{name}` placeholders from `vars`; `Err(name)` for the first unknown one.
pub fn substitute(template: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let name = &after[..close];
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => return Err(name.to_string()),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Makes a tag safe as a directory name.
pub fn sanitize_tag(tag: &str) -> String {
    let s: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '=') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("cell{s}")
    } else {
        s
    }
}

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

    // Devices: none declared = one local device.
    let mut devices: Vec<DeviceDef> = Vec::new();
    for d in &m.devices {
        let dd = d.get_ref();
        if devices.iter().any(|x| x.id == dd.id) {
            return Err(cx.err(d.span(), format!("device `{}` is declared twice", dd.id)));
        }
        match dd.kind {
            DeviceKind::Ssh if dd.host.is_none() => {
                return Err(cx.err_hint(
                    d.span(),
                    format!("ssh device `{}` has no host", dd.id),
                    "add host = \"name-or-address\"",
                ));
            }
            DeviceKind::Adb if dd.serial.is_none() => {
                return Err(cx.err_hint(
                    d.span(),
                    format!("adb device `{}` has no serial", dd.id),
                    "add serial = \"...\" (see `adb devices`)",
                ));
            }
            _ => {}
        }
        devices.push(dd.clone());
    }
    if devices.is_empty() {
        devices.push(DeviceDef {
            id: "local".into(),
            kind: DeviceKind::Local,
            host: None,
            user: None,
            port: None,
            identity_file: None,
            ssh_options: Vec::new(),
            serial: None,
            workdir: None,
            binary: None,
            env: BTreeMap::new(),
        });
    }

    // Models.
    let mut models = BTreeMap::new();
    for md in &m.models {
        let d = md.get_ref();
        if models.contains_key(&d.id) {
            return Err(cx.err(md.span(), format!("model `{}` is declared twice", d.id)));
        }
        let source = match (&d.path, &d.preset) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(cx.err_hint(
                    md.span(),
                    format!("model `{}` needs exactly one of `path` and `preset`", d.id),
                    "e.g. preset = \"tiny\" (built on first use) or path = \"models/x.gguf\"",
                ));
            }
            (Some(ModelPath::One(p)), None) => ModelSource::File(manifest_dir.join(p)),
            (Some(ModelPath::PerDevice(map)), None) => {
                for dev in map.keys() {
                    if !devices.iter().any(|x| &x.id == dev) {
                        return Err(cx.err(
                            md.span(),
                            format!("model `{}` names undeclared device `{dev}`", d.id),
                        ));
                    }
                }
                ModelSource::PerDevice(map.clone())
            }
            (None, Some(p)) => {
                if bmoe_gguf::synth::Preset::from_name(p).is_none() {
                    return Err(cx.err_hint(
                        md.span(),
                        format!("model `{}`: unknown preset `{p}`", d.id),
                        "presets: tiny, qwen2moe-tiny, gpt-oss-tiny, qwen3-30b-a3b",
                    ));
                }
                if let Some(t) = &d.expert_type
                    && bmoe_gguf::GgmlType::from_name(t).is_none()
                {
                    return Err(cx.err(
                        md.span(),
                        format!("model `{}`: unknown expert_type `{t}`", d.id),
                    ));
                }
                ModelSource::Preset {
                    preset: p.clone(),
                    expert_type: d.expert_type.clone(),
                    seed: d.seed,
                }
            }
        };
        models.insert(d.id.clone(), source);
    }

    // Axis definitions must render somehow.
    for (name, def) in &m.axes {
        check_axis_def(&cx, name, def.get_ref(), def.span())?;
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

fn check_axis_def(cx: &Ctx<'_>, name: &str, def: &AxisDef, span: Range<usize>) -> Res<()> {
    if matches!(name, "model" | "device" | "cell") {
        return Err(cx.err(
            span,
            format!("`{name}` is reserved and cannot be an axis name"),
        ));
    }
    match def.kind {
        AxisKind::Flag => {
            let ways = [
                def.flag.is_some(),
                def.switch.is_some(),
                def.map.is_some(),
                def.env.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if ways != 1 {
                return Err(cx.err_hint(
                    span,
                    format!("axis `{name}` must have exactly one of flag, switch, map, env"),
                    "e.g. [axes.cache] flag = \"--cache-mb\"",
                ));
            }
            if let Some(map) = &def.map {
                for (k, v) in map {
                    let ok = match v {
                        toml::Value::Array(a) => a.iter().all(|x| x.is_str()),
                        toml::Value::String(_) => true,
                        _ => false,
                    };
                    if !ok {
                        return Err(cx.err(
                            span.clone(),
                            format!("axis `{name}`: map value for `{k}` must be a string or an array of strings"),
                        ));
                    }
                }
            }
        }
        AxisKind::Binary | AxisKind::Model => {
            if let Some(map) = &def.map
                && map.values().any(|v| !v.is_str())
            {
                return Err(cx.err(
                    span,
                    format!("axis `{name}`: map values must be strings (paths or model ids)"),
                ));
            }
        }
        AxisKind::MemLimit => {}
    }
    Ok(())
}

/// One combination of axis values (axis -> raw value) plus the explicit cell it came from.
#[derive(Debug, Clone)]
struct Combo {
    values: IndexMap<String, toml::Value>,
    cell_name: Option<String>,
    cell_flags: Vec<String>,
    /// Axes set by the explicit cell (its name stands for them in the default tag).
    cell_keys: Vec<String>,
    span: Range<usize>,
}

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

    // Devices of the block.
    let dev_ids: Vec<String> = match &sw.devices {
        Some(list) => {
            let mut out = Vec::new();
            for d in list {
                if !devices.iter().any(|x| &x.id == d.get_ref()) {
                    let known: Vec<&str> = devices.iter().map(|x| x.id.as_str()).collect();
                    return Err(cx.err_hint(
                        d.span(),
                        format!(
                            "sweep `{sweep}` uses device `{}`, which is not declared",
                            d.get_ref()
                        ),
                        format!(
                            "declare it with [[device]] id = \"{}\" ... (declared: {})",
                            d.get_ref(),
                            known.join(", ")
                        ),
                    ));
                }
                out.push(d.get_ref().clone());
            }
            out
        }
        None => devices.iter().map(|d| d.id.clone()).collect(),
    };
    if dev_ids.is_empty() {
        return Err(cx.err(span, format!("sweep `{sweep}` has an empty device list")));
    }

    // Axis names used by the block, in order: sweep.axes, per_model, explicit cells.
    let mut axis_order: Vec<String> = sw.axes.keys().cloned().collect();
    for (_, pm) in &sw.per_model {
        for k in pm.get_ref().keys() {
            if !axis_order.contains(k) {
                axis_order.push(k.clone());
            }
        }
    }
    for c in &sw.cells {
        for k in c.get_ref().keys() {
            if !matches!(k.as_str(), "cell" | "flags") && !axis_order.contains(k) {
                axis_order.push(k.clone());
            }
        }
    }
    for name in &axis_order {
        if !cx.m.axes.contains_key(name) {
            let span = sw
                .axes
                .get(name)
                .map(|v| v.span())
                .or_else(|| sw.cells.first().map(|c| c.span()))
                .unwrap_or_else(|| span.clone());
            return Err(cx.err_hint(
                span,
                format!(
                    "sweep `{sweep}` uses axis `{name}`, which has no [axes.{name}] definition"
                ),
                format!(
                    "add e.g. [axes.{name}] flag = \"--{}\"",
                    name.replace('_', "-")
                ),
            ));
        }
    }
    for (name, vals) in &sw.axes {
        if vals.get_ref().is_empty() {
            return Err(cx.err_hint(
                vals.span(),
                format!("axis `{name}` in sweep `{sweep}` has no values"),
                format!("give it at least one value, e.g. {name} = [1, 2], or remove it"),
            ));
        }
        for v in vals.get_ref() {
            if render_value(v).is_none() {
                return Err(cx.err(
                    vals.span(),
                    format!("axis `{name}`: values must be strings, numbers or booleans"),
                ));
            }
        }
    }
    for (model, pm) in &sw.per_model {
        for (axis, vals) in pm.get_ref() {
            if vals.is_empty() {
                return Err(cx.err(pm.span(), format!("per_model.{model}.{axis} has no values")));
            }
        }
    }

    // Models of the block (a model-kind axis replaces the list).
    let model_axis = axis_order
        .iter()
        .find(|a| cx.m.axes[*a].get_ref().kind == AxisKind::Model)
        .cloned();
    let model_ids: Vec<String> = if model_axis.is_some() {
        vec![String::new()]
    } else {
        match &sw.models {
            Some(list) => {
                let mut out = Vec::new();
                for mid in list {
                    if !models.contains_key(mid.get_ref()) {
                        return Err(cx.err_hint(
                            mid.span(),
                            format!("sweep `{sweep}` uses model `{}`, which is not declared", mid.get_ref()),
                            "declare it with [[model]] id = \"...\" preset = \"tiny\" (or path = ...)",
                        ));
                    }
                    out.push(mid.get_ref().clone());
                }
                out
            }
            None => models.keys().cloned().collect(),
        }
    };
    if model_ids.is_empty() {
        return Err(cx.err_hint(
            span,
            format!("sweep `{sweep}` has no model"),
            "declare one with [[model]] id = \"tiny\" preset = \"tiny\"",
        ));
    }
    for (model, pm) in &sw.per_model {
        if !model_ids.contains(model) {
            return Err(cx.err(
                pm.span(),
                format!("per_model names model `{model}`, which this sweep does not run"),
            ));
        }
    }

    // Links.
    let mut link_of: BTreeMap<String, usize> = BTreeMap::new();
    for (i, l) in sw.link.iter().enumerate() {
        if l.get_ref().len() < 2 {
            return Err(cx.err(l.span(), "a link needs at least two axes"));
        }
        for a in l.get_ref() {
            if !axis_order.contains(a)
                || !sw.axes.contains_key(a)
                    && !sw.per_model.values().any(|p| p.get_ref().contains_key(a))
            {
                return Err(cx.err(
                    l.span(),
                    format!("link names axis `{a}`, which this sweep does not sweep"),
                ));
            }
            if link_of.insert(a.clone(), i).is_some() {
                return Err(cx.err(l.span(), format!("axis `{a}` is in two links")));
            }
        }
    }

    let repetitions = settings.repetitions.unwrap_or(1);
    if repetitions == 0 {
        return Err(cx.err(
            span,
            format!("sweep `{sweep}`: repetitions must be at least 1"),
        ));
    }
    let mem_limit_default = match &settings.mem_limit {
        Some(s) => Some(parse_size(s.get_ref()).ok_or_else(|| {
            cx.err_hint(
                s.span(),
                format!("mem_limit `{}` is not a size", s.get_ref()),
                "write e.g. \"8GiB\", \"512MiB\"",
            )
        })?),
        None => None,
    };
    let prompt = match &settings.prompt_file {
        Some(pf) => {
            let p = cx
                .src
                .path
                .parent()
                .unwrap_or(Path::new("."))
                .join(pf.get_ref());
            Some(std::fs::read_to_string(&p).map_err(|e| {
                cx.err(
                    pf.span(),
                    format!("cannot read prompt_file {}: {e}", p.display()),
                )
            })?)
        }
        None => settings.prompt.clone(),
    };
    let stdin = match &settings.session {
        Some(sd) => Some(session_input(cx, sd, settings.n_predict)?),
        None => None,
    };
    let warmup = settings.warmup.clone().unwrap_or_default();
    let cooldown = Cooldown::from_def(settings.cooldown.as_ref());
    let base_flags = settings.flags.clone().unwrap_or_default();

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
                        base_flags: &base_flags,
                        prompt: prompt.as_deref(),
                        n_predict: settings.n_predict,
                        session: stdin.is_some(),
                        mem_limit: mem_limit_default,
                        env: settings.env.clone().unwrap_or_default(),
                    },
                    &combo,
                )?;
                let Some(mut cell) = cell else { continue };
                cell.timeout_s = settings.timeout_s;
                cell.cooldown = cooldown.clone();
                cell.stdin = stdin.clone();
                cell.discard_tokens = warmup.discard_tokens;
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

fn session_input(
    cx: &Ctx<'_>,
    sd: &super::manifest::SessionDef,
    n_predict: Option<u32>,
) -> Res<String> {
    use super::manifest::Prompts;
    use bmoe_telemetry::protocol::{GenerateRequest, Request};
    let span = sd.prompts.span();
    let generate = |i: usize, prompt: &str| {
        Request::Generate(GenerateRequest {
            id: i as i64 + 1,
            prompt: prompt.to_string(),
            n_predict: sd.n_predict.or(n_predict).map(u64::from),
            think: None,
            clear_kv: Some(sd.clear_kv.unwrap_or(true)),
        })
        .to_line()
    };
    let lines: Vec<String> = match sd.prompts.get_ref() {
        Prompts::Turns(turns) => {
            if turns.is_empty() {
                return Err(cx.err_hint(
                    span,
                    "session `prompts` is an empty list",
                    "give one prompt per turn: prompts = [\"first\", \"second\"]",
                ));
            }
            turns
                .iter()
                .enumerate()
                .map(|(i, p)| generate(i, p))
                .collect()
        }
        Prompts::File(file) => {
            let p = cx.src.path.parent().unwrap_or(Path::new(".")).join(file);
            let text = std::fs::read_to_string(&p).map_err(|e| {
                cx.err(
                    span.clone(),
                    format!("cannot read session prompts {}: {e}", p.display()),
                )
            })?;
            if p.extension().is_some_and(|e| e == "jsonl") {
                // Checked here, so a typo fails the sweep before any run instead of every run.
                let mut out = Vec::new();
                for (no, line) in text.lines().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    Request::parse(line).map_err(|e| {
                        cx.err_hint(
                            span.clone(),
                            format!("{}:{}: {e}", p.display(), no + 1),
                            "one request per line, e.g. {\"cmd\":\"generate\",\"id\":1,\"prompt\":\"hi\"}",
                        )
                    })?;
                    out.push(line.trim().to_string());
                }
                out
            } else {
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .enumerate()
                    .map(|(i, l)| generate(i, l))
                    .collect()
            }
        }
    };
    if lines.is_empty() {
        return Err(cx.err_hint(
            span,
            "the session prompts file has no requests",
            "put one prompt per line (or one JSON request per line in a .jsonl file)",
        ));
    }
    Ok(lines.iter().map(|l| format!("{l}\n")).collect())
}

fn combos_for(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    model: &str,
    axis_order: &[String],
    link_of: &BTreeMap<String, usize>,
    span: Range<usize>,
) -> Res<Vec<Combo>> {
    let per_model = sw.per_model.get(model).map(|p| p.get_ref());
    // Values of each swept axis for this model.
    let swept: Vec<(String, Vec<toml::Value>)> = axis_order
        .iter()
        .filter_map(|a| {
            let vals = per_model
                .and_then(|p| p.get(a).cloned())
                .or_else(|| sw.axes.get(a).map(|v| v.get_ref().clone()))?;
            Some((a.clone(), vals))
        })
        .collect();
    // Groups: linked axes zip, others cross.
    let mut groups: Vec<Vec<(String, Vec<toml::Value>)>> = Vec::new();
    let mut group_of_link: BTreeMap<usize, usize> = BTreeMap::new();
    for (a, vals) in swept {
        match link_of.get(&a) {
            Some(l) => {
                if let Some(&g) = group_of_link.get(l) {
                    groups[g].push((a, vals));
                } else {
                    group_of_link.insert(*l, groups.len());
                    groups.push(vec![(a, vals)]);
                }
            }
            None => groups.push(vec![(a, vals)]),
        }
    }
    for (l, &g) in &group_of_link {
        let n = groups[g][0].1.len();
        if groups[g].iter().any(|(_, v)| v.len() != n) {
            let desc: Vec<String> = groups[g]
                .iter()
                .map(|(a, v)| format!("{a}: {}", v.len()))
                .collect();
            return Err(cx.err(
                sw.link[*l].span(),
                format!(
                    "linked axes need the same number of values ({})",
                    desc.join(", ")
                ),
            ));
        }
    }
    let mut product: Vec<IndexMap<String, toml::Value>> = vec![IndexMap::new()];
    for g in &groups {
        let n = g[0].1.len();
        let mut next = Vec::with_capacity(product.len() * n);
        for base in &product {
            for i in 0..n {
                let mut m = base.clone();
                for (a, vals) in g {
                    m.insert(a.clone(), vals[i].clone());
                }
                next.push(m);
            }
        }
        product = next;
    }

    let mut out = Vec::new();
    if sw.cells.is_empty() {
        for values in product {
            out.push(Combo {
                values,
                cell_name: None,
                cell_flags: Vec::new(),
                cell_keys: Vec::new(),
                span: span.clone(),
            });
        }
        return Ok(out);
    }
    for c in &sw.cells {
        let table = c.get_ref();
        let mut values = IndexMap::new();
        let mut cell_name = None;
        let mut cell_flags = Vec::new();
        for (k, v) in table {
            match k.as_str() {
                "cell" => match v {
                    toml::Value::String(s) => cell_name = Some(s.clone()),
                    _ => return Err(cx.err(c.span(), "`cell` must be a string (the cell's name)")),
                },
                "flags" => match v {
                    toml::Value::Array(a) if a.iter().all(|x| x.is_str()) => {
                        cell_flags = a
                            .iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect();
                    }
                    _ => return Err(cx.err(c.span(), "`flags` must be an array of strings")),
                },
                _ => {
                    if render_value(v).is_none() {
                        return Err(cx.err(
                            c.span(),
                            format!(
                                "cell value for axis `{k}` must be a string, number or boolean"
                            ),
                        ));
                    }
                    values.insert(k.clone(), v.clone());
                }
            }
        }
        let cell_keys: Vec<String> = values.keys().cloned().collect();
        for p in &product {
            let mut merged = values.clone();
            for (k, v) in p {
                if merged.contains_key(k) {
                    return Err(cx.err(
                        c.span(),
                        format!("axis `{k}` is set both by this cell and by the sweep's axes"),
                    ));
                }
                merged.insert(k.clone(), v.clone());
            }
            out.push(Combo {
                values: merged,
                cell_name: cell_name.clone(),
                cell_flags: cell_flags.clone(),
                cell_keys: cell_keys.clone(),
                span: c.span(),
            });
        }
    }
    Ok(out)
}

struct CellInputs<'a> {
    sweep: &'a str,
    device: &'a DeviceDef,
    model: &'a str,
    model_axis: Option<&'a str>,
    models: &'a BTreeMap<String, ModelSource>,
    multi_device: bool,
    base_flags: &'a [String],
    prompt: Option<&'a str>,
    n_predict: Option<u32>,
    session: bool,
    mem_limit: Option<u64>,
    env: BTreeMap<String, String>,
}

fn build_cell(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    inp: &CellInputs<'_>,
    combo: &Combo,
) -> Res<Option<Cell>> {
    let span = combo.span.clone();
    // Model: fixed, or chosen by the model axis.
    let mut model = inp.model.to_string();
    if let Some(ax) = inp.model_axis {
        let def = cx.m.axes[ax].get_ref();
        let raw = combo.values.get(ax).and_then(render_value).ok_or_else(|| {
            cx.err(
                span.clone(),
                format!("model axis `{ax}` has no value for this cell"),
            )
        })?;
        model = match &def.map {
            Some(map) => map
                .get(&raw)
                .and_then(|v| v.as_str().map(str::to_string))
                .ok_or_else(|| {
                    cx.err(
                        cx.m.axes[ax].span(),
                        format!("axis `{ax}` has no map entry for `{raw}`"),
                    )
                })?,
            None => raw,
        };
        if !inp.models.contains_key(&model) {
            return Err(cx.err(
                cx.m.axes[ax].span(),
                format!("axis `{ax}` selects model `{model}`, which is not declared"),
            ));
        }
    }

    // Template variables: per-model vars, then rendered axis values.
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    if let Some(t) = sw.vars.get(&model) {
        for (k, v) in t {
            if let Some(s) = render_value(v) {
                vars.insert(k.clone(), s);
            }
        }
    }
    let mut rendered: Vec<(String, String)> = Vec::new();
    for (axis, v) in &combo.values {
        let raw = render_value(v).unwrap_or_default();
        let val = substitute(&raw, &vars).map_err(|name| {
            cx.err_hint(
                span.clone(),
                format!("unknown placeholder `{{{name}}}` in value of axis `{axis}`"),
                format!("define it under vars.{model}"),
            )
        })?;
        rendered.push((axis.clone(), val));
    }
    for (a, v) in &rendered {
        vars.insert(a.clone(), v.clone());
    }
    vars.insert("model".into(), model.clone());
    vars.insert("device".into(), inp.device.id.clone());
    if let Some(c) = &combo.cell_name {
        vars.insert("cell".into(), c.clone());
    }

    // Excludes.
    for ex in &sw.exclude {
        let mut all = true;
        for (k, v) in ex.get_ref() {
            let want = render_value(v).unwrap_or_default();
            let have = match k.as_str() {
                "model" => Some(model.clone()),
                "device" => Some(inp.device.id.clone()),
                "cell" => combo.cell_name.clone(),
                _ => rendered
                    .iter()
                    .find(|(a, _)| a == k)
                    .map(|(_, v)| v.clone()),
            };
            if have.as_deref() != Some(want.as_str()) {
                all = false;
                break;
            }
        }
        if all {
            return Ok(None);
        }
    }

    // Tag.
    let tag = match &sw.tag {
        Some(t) => substitute(t.get_ref(), &vars).map_err(|name| {
            cx.err_hint(
                t.span(),
                format!(
                    "tag uses `{{{name}}}`, which is neither an axis of this sweep nor a variable"
                ),
                "placeholders: {model}, {device}, {cell}, any axis, any vars entry",
            )
        })?,
        None => {
            let mut parts = Vec::new();
            if inp.multi_device {
                parts.push(inp.device.id.clone());
            }
            if inp.model_axis.is_none() {
                parts.push(model.clone());
            }
            if let Some(c) = &combo.cell_name {
                parts.push(c.clone());
            }
            for (a, v) in &rendered {
                if !(combo.cell_name.is_some() && combo.cell_keys.contains(a)) {
                    parts.push(format!("{a}{v}"));
                }
            }
            parts.join("_")
        }
    };
    let tag = sanitize_tag(&tag);

    // argv.
    let binary_default = inp
        .device
        .binary
        .clone()
        .or_else(|| cx.m.binary.as_ref().map(|b| b.get_ref().clone()))
        .unwrap_or_else(|| "bmoe-cli".into());
    let mut binary = binary_default;
    let model_def = cx.m.models.iter().find(|md| md.get_ref().id == model);
    let mut args: Vec<String> = Vec::new();
    let mut env = inp.device.env.clone();
    env.extend(inp.env.clone());
    let mut mem_limit = inp.mem_limit;
    if let Some(md) = model_def {
        args.extend(md.get_ref().flags.iter().cloned());
    }
    args.extend(inp.base_flags.iter().cloned());
    args.extend(combo.cell_flags.iter().cloned());
    // argv follows the order of the [axes] definitions, whatever order a cell names them in.
    let mut in_def_order: Vec<&(String, String)> = rendered.iter().collect();
    in_def_order.sort_by_key(|(a, _)| cx.m.axes.get_index_of(a));
    for (axis, val) in in_def_order {
        let def = cx.m.axes[axis].get_ref();
        let dspan = cx.m.axes[axis].span();
        match def.kind {
            AxisKind::Model => {}
            AxisKind::Binary => {
                binary = match &def.map {
                    Some(map) => map
                        .get(val)
                        .and_then(|v| v.as_str().map(str::to_string))
                        .ok_or_else(|| {
                            cx.err(
                                dspan.clone(),
                                format!("binary axis `{axis}` has no map entry for `{val}`"),
                            )
                        })?,
                    None => val.clone(),
                };
            }
            AxisKind::MemLimit => {
                mem_limit = if matches!(val.as_str(), "off" | "none" | "0") {
                    None
                } else {
                    Some(parse_size(val).ok_or_else(|| {
                        cx.err_hint(
                            span.clone(),
                            format!("mem_limit axis `{axis}`: `{val}` is not a size"),
                            "write e.g. \"8GiB\"",
                        )
                    })?)
                };
            }
            AxisKind::Flag => {
                let off = def.off.as_ref().and_then(render_value);
                if let Some(map) = &def.map {
                    match map.get(val) {
                        Some(toml::Value::Array(a)) => {
                            args.extend(a.iter().filter_map(|x| x.as_str().map(str::to_string)))
                        }
                        Some(toml::Value::String(s)) => args.push(s.clone()),
                        _ => {
                            return Err(cx.err_hint(
                                span.clone(),
                                format!("axis `{axis}` has no map entry for value `{val}`"),
                                format!("add \"{val}\" = [...] to [axes.{axis}].map"),
                            ));
                        }
                    }
                } else if off.as_deref() == Some(val.as_str()) {
                } else if let Some(sw_flag) = &def.switch {
                    match val.as_str() {
                        "true" => args.push(sw_flag.clone()),
                        "false" => {}
                        _ => {
                            return Err(cx.err_hint(
                                span.clone(),
                                format!("switch axis `{axis}` needs true or false, got `{val}`"),
                                "use flag = \"...\" for a valued flag",
                            ));
                        }
                    }
                } else if let Some(flag) = &def.flag {
                    args.push(flag.clone());
                    args.push(val.clone());
                } else if let Some(var) = &def.env {
                    env.insert(var.clone(), val.clone());
                }
            }
        }
    }
    // Placeholders in fixed flags ({cap} from vars).
    for a in &mut args {
        if a.contains('{') {
            *a = substitute(a, &vars).map_err(|name| {
                cx.err_hint(
                    span.clone(),
                    format!("flag `{a}` uses unknown placeholder `{{{name}}}`"),
                    format!("define it under vars.{model}"),
                )
            })?;
        }
    }
    if let Some(n) = inp.n_predict
        && !inp.session
    {
        args.push("-n".into());
        args.push(n.to_string());
    }
    if inp.session {
        args.push("--session".into());
    } else if let Some(p) = inp.prompt {
        args.push("-p".into());
        args.push(p.to_string());
    }
    if binary.contains('/') && !Path::new(&binary).is_absolute() {
        binary = cx
            .src
            .path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&binary)
            .to_string_lossy()
            .into_owned();
    }
    Ok(Some(Cell {
        sweep: inp.sweep.to_string(),
        tag,
        device: inp.device.id.clone(),
        model,
        binary,
        args,
        env,
        axes: rendered,
        mem_limit,
        timeout_s: None,
        cooldown: Cooldown::from_def(None),
        stdin: None,
        session: inp.session,
        discard_tokens: 0,
    }))
}

fn order_runs(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    first: usize,
    cells: &[Cell],
    runs: &mut Vec<PlannedRun>,
) -> Res<()> {
    let settings = sw.settings().or(&cx.m.defaults);
    let reps = settings.repetitions.unwrap_or(1);
    let order = settings.order.clone().unwrap_or_default();
    let warm = settings.warmup.clone().unwrap_or_default().runs;
    let ids: Vec<usize> = (first..cells.len()).collect();
    let run = |cell: usize, pass: u32| PlannedRun {
        cell,
        rep: format!("r{pass}"),
        warmup: false,
        pass,
    };
    let mut counted: Vec<PlannedRun> = Vec::new();
    match order.mode {
        OrderMode::AsWritten => {
            for &c in &ids {
                for p in 1..=reps {
                    counted.push(run(c, p));
                }
            }
        }
        OrderMode::Interleaved => {
            for p in 1..=reps {
                counted.extend(ids.iter().map(|&c| run(c, p)));
            }
        }
        OrderMode::ReversePasses => {
            for p in 1..=reps {
                if p % 2 == 1 {
                    counted.extend(ids.iter().map(|&c| run(c, p)));
                } else {
                    counted.extend(ids.iter().rev().map(|&c| run(c, p)));
                }
            }
        }
        OrderMode::Shuffle => {
            for p in 1..=reps {
                counted.extend(ids.iter().map(|&c| run(c, p)));
            }
            let mut rng = SplitMix64::new(order.seed.unwrap_or(1));
            for i in (1..counted.len()).rev() {
                let j = rng.below(i + 1);
                counted.swap(i, j);
            }
        }
        OrderMode::Explicit => {
            let Some(seq) = &order.sequence else {
                return Err(cx.err(
                    sw.name.span(),
                    "order mode `explicit` needs `sequence = [cell tags]`",
                ));
            };
            let mut seq_ids = Vec::new();
            for t in seq.get_ref() {
                let matches: Vec<usize> = ids
                    .iter()
                    .copied()
                    .filter(|&c| &cells[c].tag == t)
                    .collect();
                if matches.is_empty() {
                    let tags: Vec<&str> = ids.iter().map(|&c| cells[c].tag.as_str()).collect();
                    return Err(cx.err_hint(
                        seq.span(),
                        format!("sequence names `{t}`, which is not a cell of this sweep"),
                        format!("cells: {}", tags.join(", ")),
                    ));
                }
                seq_ids.extend(matches);
            }
            for &c in &ids {
                if !seq_ids.contains(&c) {
                    return Err(cx.err(
                        seq.span(),
                        format!("sequence leaves out cell `{}`", cells[c].tag),
                    ));
                }
            }
            for p in 1..=reps {
                counted.extend(seq_ids.iter().map(|&c| run(c, p)));
            }
        }
    }
    // Warm-ups right before each cell's first counted run.
    let mut warmed = BTreeSet::new();
    for r in counted {
        if warm > 0 && warmed.insert(r.cell) {
            for w in 1..=warm {
                runs.push(PlannedRun {
                    cell: r.cell,
                    rep: format!("w{w}"),
                    warmup: true,
                    pass: 0,
                });
            }
        }
        runs.push(r);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::manifest::parse;

    fn plan(text: &str) -> Result<Plan, ManifestError> {
        let (m, src) = parse(Path::new("m.toml"), text)?;
        expand(&m, &src)
    }

    const HEAD: &str = r#"
name = "t"
binary = "/bin/echo"
[[model]]
id = "tiny"
path = "/tmp/tiny.gguf"
[[model]]
id = "big"
path = "/tmp/big.gguf"
[axes.cache]
flag = "--cache-mb"
[axes.lanes]
flag = "--io-threads"
[axes.overlap]
switch = "--overlap"
[axes.pf]
flag = "--prefetch"
off = 0
[axes.drop]
map = { off = [], "0.5" = ["--drop-cold-experts", "0.5"] }
[axes.build]
kind = "binary"
map = { a = "/bin/a", b = "/bin/b" }
"#;

    fn argv(p: &Plan) -> Vec<String> {
        p.cells
            .iter()
            .map(|c| format!("{} {}", c.tag, c.args.join(" ")))
            .collect()
    }

    #[test]
    fn product_nested_in_written_order() {
        let p = plan(&format!("{HEAD}[[sweep]]\nname = \"s\"\nmodels = [\"tiny\"]\naxes = {{ cache = [0, 8], lanes = [1, 2] }}\n")).expect("ok");
        assert_eq!(
            argv(&p),
            [
                "tiny_cache0_lanes1 --cache-mb 0 --io-threads 1",
                "tiny_cache0_lanes2 --cache-mb 0 --io-threads 2",
                "tiny_cache8_lanes1 --cache-mb 8 --io-threads 1",
                "tiny_cache8_lanes2 --cache-mb 8 --io-threads 2",
            ]
        );
        assert_eq!(p.runs.len(), 4);
    }

    #[test]
    fn off_switch_map_link_vars_and_exclude() {
        let p = plan(&format!(
            "{HEAD}[[sweep]]\nname = \"s\"\ntag = \"{{model}}_pf{{pf}}_{{drop}}\"\naxes = {{ pf = [0, 2], drop = [\"off\", \"0.5\"], cache = [\"{{cap}}\"] }}\nlink = [[\"pf\", \"drop\"]]\nvars = {{ tiny = {{ cap = 4 }}, big = {{ cap = 9 }} }}\nexclude = [{{ model = \"big\", pf = 2 }}]\nflags = [\"--moe-stream\", \"--x\", \"{{cap}}\"]\n"
        ));
        let p = p.expect("ok");
        let a = argv(&p);
        // model order is the BTreeMap order of ids unless `models` is given: big, tiny.
        assert!(
            a.contains(&"tiny_pf0_off --moe-stream --x 4 --cache-mb 4".to_string()),
            "{a:?}"
        );
        assert!(a.contains(&"tiny_pf2_0.5 --moe-stream --x 4 --cache-mb 4 --prefetch 2 --drop-cold-experts 0.5".to_string()), "{a:?}");
        assert!(
            a.contains(&"big_pf0_off --moe-stream --x 9 --cache-mb 9".to_string()),
            "{a:?}"
        );
        assert!(
            !a.iter().any(|s| s.starts_with("big_pf2")),
            "excluded: {a:?}"
        );
    }

    #[test]
    fn duplicate_tags_are_refused() {
        let err = plan(&format!("{HEAD}[[sweep]]\nname = \"s\"\nmodels = [\"tiny\"]\ntag = \"x\"\naxes = {{ cache = [0, 8] }}\n")).expect_err("dup");
        assert!(err.message.contains("tag `x`"), "{err}");
    }

    #[test]
    fn explicit_cells_binary_axis_and_per_model() {
        let p = plan(&format!(
            "{HEAD}[[sweep]]\nname = \"s\"\ncells = [{{ cell = \"base\" }}, {{ cell = \"ov\", overlap = true, cache = 2 }}]\naxes = {{ build = [\"a\", \"b\"] }}\nper_model = {{ big = {{ build = [\"b\"] }} }}\n"
        )).expect("ok");
        let cells: Vec<(String, String, String)> = p
            .cells
            .iter()
            .map(|c| (c.tag.clone(), c.binary.clone(), c.args.join(" ")))
            .collect();
        assert_eq!(
            cells,
            [
                ("big_base_buildb".into(), "/bin/b".into(), "".into()),
                (
                    "big_ov_buildb".into(),
                    "/bin/b".into(),
                    "--cache-mb 2 --overlap".into()
                ),
                ("tiny_base_builda".into(), "/bin/a".into(), "".into()),
                ("tiny_base_buildb".into(), "/bin/b".into(), "".into()),
                (
                    "tiny_ov_builda".into(),
                    "/bin/a".into(),
                    "--cache-mb 2 --overlap".into()
                ),
                (
                    "tiny_ov_buildb".into(),
                    "/bin/b".into(),
                    "--cache-mb 2 --overlap".into()
                ),
            ]
        );
    }

    fn order_of(mode: &str, reps: u32) -> Vec<String> {
        let p = plan(&format!("{HEAD}[[sweep]]\nname = \"s\"\nmodels = [\"tiny\"]\ntag = \"{{cache}}\"\naxes = {{ cache = [1, 2, 3] }}\nrepetitions = {reps}\norder = {mode}\nwarmup = {{ runs = 1 }}\n")).expect("ok");
        p.runs
            .iter()
            .map(|r| format!("{}{}", p.cells[r.cell].tag, r.rep))
            .collect()
    }

    #[test]
    fn orders() {
        assert_eq!(
            order_of("{ mode = \"as-written\" }", 2),
            [
                "1w1", "1r1", "1r2", "2w1", "2r1", "2r2", "3w1", "3r1", "3r2"
            ]
        );
        assert_eq!(
            order_of("{ mode = \"interleaved\" }", 2),
            [
                "1w1", "1r1", "2w1", "2r1", "3w1", "3r1", "1r2", "2r2", "3r2"
            ]
        );
        assert_eq!(
            order_of("{ mode = \"reverse-passes\" }", 2),
            [
                "1w1", "1r1", "2w1", "2r1", "3w1", "3r1", "3r2", "2r2", "1r2"
            ]
        );
        assert_eq!(
            order_of(
                "{ mode = \"explicit\", sequence = [\"3\", \"1\", \"2\"] }",
                1
            ),
            ["3w1", "3r1", "1w1", "1r1", "2w1", "2r1"]
        );
        let a = order_of("{ mode = \"shuffle\", seed = 7 }", 3);
        let b = order_of("{ mode = \"shuffle\", seed = 7 }", 3);
        let c = order_of("{ mode = \"shuffle\", seed = 8 }", 3);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 12);
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

    #[test]
    fn substitute_works() {
        let mut v = BTreeMap::new();
        v.insert("a".to_string(), "1".to_string());
        assert_eq!(substitute("x{a}y{a}", &v), Ok("x1y1".to_string()));
        assert_eq!(substitute("{b}", &v), Err("b".to_string()));
        assert_eq!(sanitize_tag("a b/c"), "a-b-c");
    }
}
