//! One combination of axis values becomes a [`Cell`]: its model, the template variables, the
//! sweep's excludes, its tag and the command it runs (binary, argv, environment, memory cap).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use super::combos::Combo;
use super::tag::cell_tag;
use super::template::{render_value, substitute};
use super::{Cell, Cooldown, Ctx, ModelSource, Res};
use crate::sweep::manifest::{AxisKind, DeviceDef, SweepDef, parse_size};

/// Template variables: name -> value.
type Vars = BTreeMap<String, String>;

/// A cell's axis values as text: (axis, value), in the combination's order.
type Rendered = Vec<(String, String)>;

/// What the cells of one (sweep, device, model) share.
pub(super) struct CellInputs<'a> {
    pub(super) sweep: &'a str,
    pub(super) device: &'a DeviceDef,
    /// The model id; empty when a model-kind axis picks the model.
    pub(super) model: &'a str,
    /// The sweep's model-kind axis, if it has one.
    pub(super) model_axis: Option<&'a str>,
    pub(super) models: &'a BTreeMap<String, ModelSource>,
    /// The sweep runs on several devices (the device goes into the default tag).
    pub(super) multi_device: bool,
    pub(super) base_flags: &'a [String],
    pub(super) prompt: Option<&'a str>,
    pub(super) n_predict: Option<u32>,
    pub(super) session: bool,
    pub(super) mem_limit: Option<u64>,
    pub(super) env: BTreeMap<String, String>,
}

/// What the excludes of a sweep met: how many cells each removed, and every value each key
/// had among the sweep's cells (for the error about an exclude that removes nothing).
#[derive(Debug, Default)]
pub(super) struct ExcludeTally {
    /// Cells removed, per exclude (in `exclude` order).
    pub(super) hits: Vec<usize>,
    /// `model`, `device`, `cell` and every axis -> the values the cells had.
    pub(super) seen: BTreeMap<String, std::collections::BTreeSet<String>>,
}

/// The cell of `combo`, or `None` when one of the sweep's excludes matches it (counted in
/// `tally`). The caller fills in what is the same for every cell of the sweep (timeout,
/// cooldown, stdin, trim).
pub(super) fn build_cell(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    inp: &CellInputs<'_>,
    combo: &Combo,
    tally: &mut ExcludeTally,
) -> Res<Option<Cell>> {
    let model = cell_model(cx, inp, combo)?;
    let (vars, rendered) = template_vars(cx, sw, inp, combo, &model)?;
    if !sw.exclude.is_empty() {
        let mut note = |k: &str, v: &str| {
            tally
                .seen
                .entry(k.to_string())
                .or_default()
                .insert(v.to_string());
        };
        note("model", &model);
        note("device", &inp.device.id);
        if let Some(c) = &combo.cell_name {
            note("cell", c);
        }
        for (a, v) in &rendered {
            note(a, v);
        }
        if let Some(i) = excluded(sw, inp, combo, &model, &rendered) {
            tally.hits.resize(sw.exclude.len(), 0);
            tally.hits[i] += 1;
            return Ok(None);
        }
    }
    let tag = cell_tag(
        cx,
        sw,
        combo,
        &rendered,
        &vars,
        inp.multi_device.then_some(inp.device.id.as_str()),
        inp.model_axis.is_none().then_some(model.as_str()),
    )?;
    let Invocation {
        binary,
        binary_origin,
        args,
        arg_origins,
        env,
        mem_limit,
    } = invocation(cx, sw, inp, combo, &model, &rendered, &vars)?;
    Ok(Some(Cell {
        sweep: inp.sweep.to_string(),
        tag,
        device: inp.device.id.clone(),
        model,
        binary,
        args,
        arg_origins,
        env,
        axes: rendered,
        mem_limit,
        timeout_s: None,
        cooldown: Cooldown::from_def(None),
        stdin: None,
        session: inp.session,
        discard_tokens: 0,
        binary_origin,
    }))
}

/// The cell's model: fixed, or chosen by the model axis (through its map, if it has one).
fn cell_model(cx: &Ctx<'_>, inp: &CellInputs<'_>, combo: &Combo) -> Res<String> {
    let span = combo.span.clone();
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
    Ok(model)
}

/// The template variables of the cell (per-model vars, then the rendered axis values, then
/// `model`, `device` and `cell`) and its axis values rendered, placeholders filled from the
/// model's vars.
fn template_vars(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    inp: &CellInputs<'_>,
    combo: &Combo,
    model: &str,
) -> Res<(Vars, Rendered)> {
    let span = combo.span.clone();
    let mut vars = Vars::new();
    if let Some(t) = sw.vars.get(model) {
        for (k, v) in t {
            if let Some(s) = render_value(v) {
                vars.insert(k.clone(), s);
            }
        }
    }
    let mut rendered = Rendered::new();
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
    vars.insert("model".into(), model.to_string());
    vars.insert("device".into(), inp.device.id.clone());
    if let Some(c) = &combo.cell_name {
        vars.insert("cell".into(), c.clone());
    }
    Ok((vars, rendered))
}

/// The first of the sweep's excludes that matches the cell (every key of it — model, device,
/// cell or an axis — has the cell's value), by index.
fn excluded(
    sw: &SweepDef,
    inp: &CellInputs<'_>,
    combo: &Combo,
    model: &str,
    rendered: &[(String, String)],
) -> Option<usize> {
    for (i, ex) in sw.exclude.iter().enumerate() {
        let mut all = true;
        for (k, v) in ex.get_ref() {
            let want = render_value(v).unwrap_or_default();
            let have = match k.as_str() {
                "model" => Some(model.to_string()),
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
            return Some(i);
        }
    }
    None
}

/// What a cell runs.
struct Invocation {
    /// Engine binary (a path relative to the manifest is made absolute against it).
    binary: String,
    /// (line, column) of the manifest entry that chose it.
    binary_origin: Option<(usize, usize)>,
    /// Arguments after `-m <model>`.
    args: Vec<String>,
    /// Where each argument comes from, for errors (`--check` against the engine's flags).
    arg_origins: Vec<String>,
    /// Environment: the device's, the sweep's, env-kind axes.
    env: BTreeMap<String, String>,
    /// Memory cap in bytes.
    mem_limit: Option<u64>,
}

impl Invocation {
    /// Attributes the arguments added since the last note to `origin`.
    fn note(&mut self, origin: String) {
        let n = self.args.len() - self.arg_origins.len();
        self.arg_origins.extend(std::iter::repeat_n(origin, n));
    }
}

/// The command of the cell: binary, then argv in the order model flags, the sweep's flags, the
/// explicit cell's flags, the axes, `-n`, and `--session` or `-p`.
fn invocation(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    inp: &CellInputs<'_>,
    combo: &Combo,
    model: &str,
    rendered: &[(String, String)],
    vars: &Vars,
) -> Res<Invocation> {
    let span = combo.span.clone();
    let pos = |span: Range<usize>| Some(cx.src.position(span.start));
    let (binary, binary_origin) = match (&inp.device.binary, &cx.m.binary) {
        (Some(b), _) => (
            b.clone(),
            cx.m.devices
                .iter()
                .find(|d| d.get_ref().id == inp.device.id)
                .and_then(|d| pos(d.span())),
        ),
        (None, Some(b)) => (b.get_ref().clone(), pos(b.span())),
        (None, None) => ("bmoe-cli".to_string(), None),
    };
    let model_def = cx.m.models.iter().find(|md| md.get_ref().id == model);
    let mut env = inp.device.env.clone();
    env.extend(inp.env.clone());
    let mut inv = Invocation {
        binary,
        binary_origin,
        args: Vec::new(),
        arg_origins: Vec::new(),
        env,
        mem_limit: inp.mem_limit,
    };
    let line = |span: Range<usize>| cx.src.position(span.start).0;
    if let Some(md) = model_def {
        inv.args.extend(md.get_ref().flags.iter().cloned());
        inv.note(format!(
            "`flags` of model `{model}` (line {})",
            line(md.span())
        ));
    }
    inv.args.extend(inp.base_flags.iter().cloned());
    inv.note(if sw.flags.is_some() {
        format!("`flags` of sweep `{}`", inp.sweep)
    } else {
        "`flags` of [defaults]".to_string()
    });
    inv.args.extend(combo.cell_flags.iter().cloned());
    inv.note(format!(
        "`flags` of cell `{}` (line {})",
        combo.cell_name.as_deref().unwrap_or("?"),
        line(span.clone())
    ));
    // argv follows the order of the [axes] definitions, whatever order a cell names them in.
    let mut in_def_order: Vec<&(String, String)> = rendered.iter().collect();
    in_def_order.sort_by_key(|(a, _)| cx.m.axes.get_index_of(a));
    for (axis, val) in in_def_order {
        apply_axis(cx, axis, val, &span, &mut inv)?;
        inv.note(format!(
            "axis `{axis}` ([axes.{axis}], line {})",
            line(cx.m.axes[axis.as_str()].span())
        ));
    }
    // Placeholders in fixed flags ({cap} from vars).
    for a in &mut inv.args {
        if a.contains('{') {
            *a = substitute(a, vars).map_err(|name| {
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
        inv.args.push("-n".into());
        inv.args.push(n.to_string());
        inv.note("`n_predict`".into());
    }
    if inp.session {
        inv.args.push("--session".into());
        inv.note("`session`".into());
    } else if let Some(p) = inp.prompt {
        inv.args.push("-p".into());
        inv.args.push(p.to_string());
        inv.note("`prompt`".into());
    }
    if inv.binary.contains('/') && !Path::new(&inv.binary).is_absolute() {
        inv.binary = cx
            .src
            .path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&inv.binary)
            .to_string_lossy()
            .into_owned();
    }
    Ok(inv)
}

/// What the value `val` of `axis` does to the command, by the axis kind: picks the binary, sets
/// the memory cap, or adds flags (a map entry, a switch, a valued flag) or an environment
/// variable; a model axis has already picked the model.
fn apply_axis(
    cx: &Ctx<'_>,
    axis: &str,
    val: &str,
    span: &Range<usize>,
    inv: &mut Invocation,
) -> Res<()> {
    let def = cx.m.axes[axis].get_ref();
    let dspan = cx.m.axes[axis].span();
    match def.kind {
        AxisKind::Model => {}
        AxisKind::Binary => {
            inv.binary_origin = Some(cx.src.position(dspan.start));
            inv.binary = match &def.map {
                Some(map) => map
                    .get(val)
                    .and_then(|v| v.as_str().map(str::to_string))
                    .ok_or_else(|| {
                        cx.err(
                            dspan.clone(),
                            format!("binary axis `{axis}` has no map entry for `{val}`"),
                        )
                    })?,
                None => val.to_string(),
            };
        }
        AxisKind::MemLimit => {
            inv.mem_limit = if matches!(val, "off" | "none" | "0") {
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
                    Some(toml::Value::Array(a)) => inv
                        .args
                        .extend(a.iter().filter_map(|x| x.as_str().map(str::to_string))),
                    Some(toml::Value::String(s)) => inv.args.push(s.clone()),
                    _ => {
                        return Err(cx.err_hint(
                            span.clone(),
                            format!("axis `{axis}` has no map entry for value `{val}`"),
                            format!("add \"{val}\" = [...] to [axes.{axis}].map"),
                        ));
                    }
                }
            } else if off.as_deref() == Some(val) {
            } else if let Some(sw_flag) = &def.switch {
                match val {
                    "true" => inv.args.push(sw_flag.clone()),
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
                inv.args.push(flag.clone());
                inv.args.push(val.to_string());
            } else if let Some(var) = &def.env {
                inv.env.insert(var.clone(), val.to_string());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{HEAD, argv, plan};

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
}
