//! Cell tags: the sweep's `tag` template or the default built from the varying parts, made
//! safe as a directory name (a tag names the cell's results directory).

use std::collections::BTreeMap;

use super::combos::Combo;
use super::template::substitute;
use super::{Ctx, Res};
use crate::sweep::manifest::SweepDef;

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

/// The tag of the cell of `combo` with the axis values `rendered`: the sweep's template filled
/// from `vars`, else `device` and `model` (each when given: the sweep runs on several devices,
/// no axis picks the model), the explicit cell's name and the other axes as `<axis><value>`.
pub(super) fn cell_tag(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    combo: &Combo,
    rendered: &[(String, String)],
    vars: &BTreeMap<String, String>,
    device: Option<&str>,
    model: Option<&str>,
) -> Res<String> {
    let tag = match &sw.tag {
        Some(t) => substitute(t.get_ref(), vars).map_err(|name| {
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
            parts.extend(device.map(str::to_string));
            parts.extend(model.map(str::to_string));
            if let Some(c) = &combo.cell_name {
                parts.push(c.clone());
            }
            for (a, v) in rendered {
                if !(combo.cell_name.is_some() && combo.cell_keys.contains(a)) {
                    parts.push(format!("{a}{v}"));
                }
            }
            parts.join("_")
        }
    };
    Ok(sanitize_tag(&tag))
}
