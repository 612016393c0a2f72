//! Axis value combinations of a sweep for one model: linked axes zip, the other axes cross in
//! written order (the first axis varies slowest), and every explicit cell is combined with every
//! crossed combination.

use std::collections::BTreeMap;
use std::ops::Range;

use indexmap::IndexMap;
use toml::Spanned;

use super::template::render_value;
use super::{Ctx, Res};
use crate::sweep::manifest::SweepDef;

/// One combination of axis values (axis -> raw value) plus the explicit cell it came from.
#[derive(Debug, Clone)]
pub(super) struct Combo {
    pub(super) values: IndexMap<String, toml::Value>,
    pub(super) cell_name: Option<String>,
    pub(super) cell_flags: Vec<String>,
    /// Axes set by the explicit cell (its name stands for them in the default tag).
    pub(super) cell_keys: Vec<String>,
    pub(super) span: Range<usize>,
}

/// An axis with its values for one model.
type Swept = (String, Vec<toml::Value>);

/// An explicit cell of `cells = [...]`: its axis values, name and extra flags.
struct ExplicitCell {
    values: IndexMap<String, toml::Value>,
    name: Option<String>,
    flags: Vec<String>,
}

/// Every combination of `model`'s axis values in sweep `sw`, in expansion order.
pub(super) fn combos_for(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    model: &str,
    axis_order: &[String],
    link_of: &BTreeMap<String, usize>,
    span: Range<usize>,
) -> Res<Vec<Combo>> {
    let groups = value_groups(cx, sw, model, axis_order, link_of)?;
    let product = cross(&groups);

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
        let cell = explicit_cell(cx, c)?;
        let cell_keys: Vec<String> = cell.values.keys().cloned().collect();
        for p in &product {
            let mut merged = cell.values.clone();
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
                cell_name: cell.name.clone(),
                cell_flags: cell.flags.clone(),
                cell_keys: cell_keys.clone(),
                span: c.span(),
            });
        }
    }
    Ok(out)
}

/// How many combinations [`combos_for`] gives for `model`, from the list sizes alone (nothing
/// is crossed): the product of the value groups' lengths, times the explicit cells.
pub(super) fn count_combos(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    model: &str,
    axis_order: &[String],
    link_of: &BTreeMap<String, usize>,
) -> Res<u128> {
    let groups = value_groups(cx, sw, model, axis_order, link_of)?;
    let product = groups
        .iter()
        .fold(1u128, |n, g| n.saturating_mul(g[0].1.len() as u128));
    Ok(product.saturating_mul(sw.cells.len().max(1) as u128))
}

/// The swept axes of `model` (its per_model values, else the sweep's) grouped for crossing: a
/// link is one group whose axes advance together, every other axis a group of its own.
fn value_groups(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    model: &str,
    axis_order: &[String],
    link_of: &BTreeMap<String, usize>,
) -> Res<Vec<Vec<Swept>>> {
    let per_model = sw.per_model.get(model).map(|p| p.get_ref());
    // Values of each swept axis for this model.
    let swept: Vec<Swept> = axis_order
        .iter()
        .filter_map(|a| {
            let vals = per_model
                .and_then(|p| p.get(a).cloned())
                .or_else(|| sw.axes.get(a).map(|v| v.get_ref().clone()))?;
            Some((a.clone(), vals))
        })
        .collect();
    // Groups: linked axes zip, others cross.
    let mut groups: Vec<Vec<Swept>> = Vec::new();
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
    Ok(groups)
}

/// The cartesian product of the groups, the first group varying slowest.
fn cross(groups: &[Vec<Swept>]) -> Vec<IndexMap<String, toml::Value>> {
    let mut product: Vec<IndexMap<String, toml::Value>> = vec![IndexMap::new()];
    for g in groups {
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
    product
}

/// Reads one entry of `cells = [...]`: `cell` (its name), `flags`, and axis values.
fn explicit_cell(cx: &Ctx<'_>, c: &Spanned<toml::Table>) -> Res<ExplicitCell> {
    let table = c.get_ref();
    let mut values = IndexMap::new();
    let mut cell_name = None;
    let mut cell_flags = Vec::new();
    for (k, v) in table {
        match k.as_str() {
            "cell" => match v {
                toml::Value::String(s) => cell_name = Some(s.clone()),
                _ => {
                    return Err(cx.err_hint(
                        c.span(),
                        "`cell` must be a string (the cell's name)",
                        "write e.g. { cell = \"base\" }",
                    ));
                }
            },
            "flags" => match v {
                toml::Value::Array(a) if a.iter().all(|x| x.is_str()) => {
                    cell_flags = a
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect();
                }
                _ => {
                    return Err(cx.err_hint(
                        c.span(),
                        "`flags` must be an array of strings",
                        "write e.g. flags = [\"-c\", \"4096\"]",
                    ));
                }
            },
            _ => {
                if render_value(v).is_none() {
                    return Err(cx.err(
                        c.span(),
                        format!("cell value for axis `{k}` must be a string, number or boolean"),
                    ));
                }
                values.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(ExplicitCell {
        values,
        name: cell_name,
        flags: cell_flags,
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{HEAD, argv, plan};

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
}
