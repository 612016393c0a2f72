//! Axis checks: every `[axes.<name>]` definition renders its values one way, and a sweep sweeps
//! only defined axes, each with values, and links axes it sweeps.

use std::collections::BTreeMap;
use std::ops::Range;

use super::template::render_value;
use super::{Ctx, Res};
use crate::sweep::manifest::{AxisDef, AxisKind, SweepDef};

/// Checks the definition `[axes.<name>]`.
pub(super) fn check_axis_def(
    cx: &Ctx<'_>,
    name: &str,
    def: &AxisDef,
    span: Range<usize>,
) -> Res<()> {
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

/// The axis names sweep `sw` uses, in order: its `axes`, then `per_model`, then explicit cells.
pub(super) fn axis_order(sw: &SweepDef) -> Vec<String> {
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
    axis_order
}

/// Checks the axes of sweep `sw`: each is defined, and each swept axis has values that render.
pub(super) fn check_sweep_axes(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    sweep: &str,
    axis_order: &[String],
    span: &Range<usize>,
) -> Res<()> {
    for name in axis_order {
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
    Ok(())
}

/// The links of sweep `sw`: axis -> index of its link. Each link has two or more axes the
/// sweep sweeps, and no axis is in two links.
pub(super) fn links(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    axis_order: &[String],
) -> Res<BTreeMap<String, usize>> {
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
                return Err(cx.err_hint(
                    l.span(),
                    format!("link names axis `{a}`, which this sweep does not sweep"),
                    format!(
                        "link only axes listed in this sweep's `axes` (swept: {})",
                        axis_order.join(", ")
                    ),
                ));
            }
            if link_of.insert(a.clone(), i).is_some() {
                return Err(cx.err(l.span(), format!("axis `{a}` is in two links")));
            }
        }
    }
    Ok(link_of)
}
