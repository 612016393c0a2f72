//! The `matrix` view: a step × layer grid of expert ids, weights, MiB read or hit letters.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::{Cells, RouteTrace};
use crate::pyfmt::f;
use crate::{AnalyzeError, Result};

/// What a matrix cell shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CellMode {
    /// Expert ids in slot order; `*` = also routed at this layer in the previous printed row.
    Experts,
    /// `id:pct%` router weights.
    Weights,
    /// MiB read by the cell.
    Mb,
    /// One letter per routing: M miss, H hit, P prefetch hit.
    Hit,
}

impl CellMode {
    fn name(self) -> &'static str {
        match self {
            Self::Experts => "experts",
            Self::Weights => "weights",
            Self::Mb => "mb",
            Self::Hit => "hit",
        }
    }
}

/// A `--layers`/`--steps` selection: inclusive ranges; `None` = no filter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Span {
    ranges: Option<Vec<(i64, i64)>>,
}

impl Span {
    /// Parse `"0-3,7,10-12"`. Empty → no filter. A part with `-` after its first character is a
    /// range `a-b` (a > b selects nothing); otherwise a single integer (a leading `-` allowed).
    pub fn parse(flag: &str, spec: &str) -> Result<Self> {
        if spec.trim().is_empty() {
            return Ok(Self::default());
        }
        let bad = |part: &str| AnalyzeError::Invalid {
            message: format!("{flag} {spec:?}: {part:?} is not an integer or a range a-b"),
            hint: format!("write {flag} like 0-11 or 28,30,40-47"),
        };
        let mut ranges = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let split = part
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == '-')
                .map(|(i, _)| i);
            let (a, b) = match split {
                Some(i) => (&part[..i], &part[i + 1..]),
                None => (part, part),
            };
            let a: i64 = a.trim().parse().map_err(|_| bad(part))?;
            let b: i64 = b.trim().parse().map_err(|_| bad(part))?;
            ranges.push((a, b));
        }
        Ok(Self {
            ranges: Some(ranges),
        })
    }

    /// Whether a filter is active.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.ranges.is_some()
    }

    /// Whether `v` is selected (always true without a filter).
    #[must_use]
    pub fn contains(&self, v: i64) -> bool {
        self.ranges
            .as_ref()
            .is_none_or(|r| r.iter().any(|&(a, b)| a <= v && v <= b))
    }

    /// Restrict every range to `0..n` (used for `--layers` when the preamble gives n_layer > 0).
    #[must_use]
    pub fn clamp(self, n: i64) -> Self {
        Self {
            ranges: self.ranges.map(|r| {
                r.into_iter()
                    .map(|(a, b)| (a.max(0), b.min(n - 1)))
                    .collect()
            }),
        }
    }
}

/// Matrix options.
#[derive(Debug, Clone)]
pub struct MatrixOptions {
    /// `--layers`.
    pub layers: Span,
    /// `--steps`.
    pub steps: Span,
    /// `--max-steps`.
    pub max_steps: i64,
    /// `--cells`.
    pub cells: CellMode,
    /// `--width`.
    pub width: usize,
}

/// What a matrix shows: (index into `cells.layers`, layer) pairs and the steps.
pub(crate) type Selection = (Vec<(usize, u16)>, Vec<i32>);

/// The layers (index into `cells.layers`, layer) and steps the matrix shows: `--layers`
/// (clamped to `0..n_layer` when the preamble has it), `--steps`, else the first `--max-steps`
/// steps. `None` when either selection is empty.
pub(crate) fn selection(t: &RouteTrace, cells: &Cells, opt: &MatrixOptions) -> Option<Selection> {
    let layer_span = if t.meta.n_layer > 0 {
        opt.layers.clone().clamp(t.meta.n_layer)
    } else {
        opt.layers.clone()
    };
    let layers: Vec<(usize, u16)> = cells
        .layers
        .iter()
        .enumerate()
        .filter(|&(_, &l)| layer_span.contains(i64::from(l)))
        .map(|(i, &l)| (i, l))
        .collect();
    let mut steps: Vec<i32> = cells
        .steps
        .iter()
        .copied()
        .filter(|&s| opt.steps.contains(i64::from(s)))
        .collect();
    if layers.is_empty() || steps.is_empty() {
        return None;
    }
    if !opt.steps.is_active() {
        let keep = super::views::py_slice_len(steps.len(), opt.max_steps);
        steps.truncate(keep);
    }
    Some((layers, steps))
}

/// The steps and layers that have rows, as `steps 0-767 and layers 0-47`, for the messages of
/// an empty selection.
pub(crate) fn row_ranges(cells: &Cells) -> String {
    let span =
        |v: Option<(i64, i64)>| v.map_or_else(|| "none".to_string(), |(a, b)| format!("{a}-{b}"));
    let steps = cells
        .steps
        .first()
        .zip(cells.steps.last())
        .map(|(&a, &b)| (i64::from(a), i64::from(b)));
    let layers = cells
        .layers
        .first()
        .zip(cells.layers.last())
        .map(|(&a, &b)| (i64::from(a), i64::from(b)));
    format!("steps {} and layers {}", span(steps), span(layers))
}

/// The error of a matrix (its plot) whose `--layers`/`--steps`/`--max-steps` selection holds
/// no cell, with the ranges that do have rows.
pub(crate) fn empty_selection(t: &RouteTrace, cells: &Cells) -> AnalyzeError {
    AnalyzeError::Empty {
        message: format!(
            "{}: no rows for that layer/step selection",
            t.path.display()
        ),
        hint: format!(
            "choose --steps and --layers within the rows' {} (without --steps, a --max-steps above 0)",
            row_ranges(cells)
        ),
    }
}

/// The cell of layer index `li` at step `s`, through the layer's step-sorted position list.
pub(crate) fn cell_at(cells: &Cells, li: usize, s: i32) -> Option<u32> {
    let list = &cells.by_layer[li];
    list.binary_search_by_key(&s, |&c| cells.step[c as usize])
        .ok()
        .map(|i| list[i])
}

/// Render the matrix. Returns `Ok(false)` (after writing nothing) when the selection is empty.
pub fn matrix(out: &mut String, t: &RouteTrace, cells: &Cells, opt: &MatrixOptions) -> bool {
    let Some((layers, steps)) = selection(t, cells, opt) else {
        return false;
    };
    if !opt.steps.is_active() {
        let _ = writeln!(
            out,
            "(showing the first {} steps; use --steps to pick a window)",
            opt.max_steps
        );
    }
    let w = opt.width.clamp(14, 4096);
    let _ = writeln!(
        out,
        "\n=== step x layer matrix - cells: {}  ('*' = also routed at this layer on the previous step) ===",
        opt.cells.name()
    );
    let head: Vec<String> = layers
        .iter()
        .map(|(_, l)| format!("{:<w$}", format!("L{l}")))
        .collect();
    let _ = writeln!(out, "{:>6} | {}", "step", head.join(" | "));
    // Cell lookup per (layer position, step) through each layer's step-sorted position list.
    let mut prev: Vec<HashSet<u32>> = vec![HashSet::new(); layers.len()];
    for &s in &steps {
        let mut fields = Vec::with_capacity(layers.len());
        for (pi, &(li, _)) in layers.iter().enumerate() {
            let rows: &[u32] = cell_at(cells, li, s).map_or(&[], |c| cells.rows(c));
            let text = match opt.cells {
                CellMode::Experts => {
                    let ids: Vec<u32> = rows.iter().map(|&r| t.rows.expert[r as usize]).collect();
                    let parts: Vec<String> = ids
                        .iter()
                        .map(|e| {
                            if prev[pi].contains(e) {
                                format!("*{e}")
                            } else {
                                e.to_string()
                            }
                        })
                        .collect();
                    prev[pi] = ids.into_iter().collect();
                    parts.join(" ")
                }
                CellMode::Weights => rows
                    .iter()
                    .map(|&r| {
                        let wt = t.rows.weight[r as usize];
                        let e = t.rows.expert[r as usize];
                        if wt.is_nan() {
                            format!("{e}:--")
                        } else {
                            format!("{e}:{}%", f(100.0 * wt, 0))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                CellMode::Mb => {
                    let b: u64 = rows.iter().map(|&r| t.rows.expert_bytes[r as usize]).sum();
                    f(b as f64 / 1_048_576.0, 1)
                }
                CellMode::Hit => rows
                    .iter()
                    .map(|&r| match t.rows.residency[r as usize] {
                        0 => 'M',
                        1 => 'H',
                        _ => 'P',
                    })
                    .collect(),
            };
            let cut: String = text.chars().take(w).collect();
            fields.push(format!("{cut:<w$}"));
        }
        let _ = writeln!(out, "{s:>6} | {}", fields.join(" | "));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_rules() {
        let s = Span::parse("--steps", "30,32,40-42").expect("valid");
        assert!(s.contains(30) && s.contains(41) && !s.contains(31));
        assert!(!Span::parse("--steps", "").expect("empty").is_active());
        let neg = Span::parse("--steps", "-3").expect("negative single");
        assert!(neg.contains(-3));
        let none = Span::parse("--layers", "5-2").expect("reversed");
        assert!(none.is_active() && !none.contains(3));
        assert!(Span::parse("--layers", "abc").is_err());
        let c = Span::parse("--layers", "40-47").expect("valid").clamp(30);
        assert!(!c.contains(29) && !c.contains(40));
    }
}
