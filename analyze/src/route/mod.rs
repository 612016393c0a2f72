//! Route traces (`# route_trace v1`): reading, grouping into cells, and the route-analyze views.

pub mod cells;
pub mod matrix;
pub mod tables;
pub mod trace;
pub mod views;

pub use cells::Cells;
pub use trace::{Phase, RouteFilter, RouteMeta, RouteRows, RouteTrace};

use std::fmt::Write as _;

use crate::table::Table;
use crate::{AnalyzeError, Result};
pub use matrix::{CellMode, MatrixOptions, Span};

/// One route-analyze view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum View {
    /// sanity, hot, reuse, overlap, workset, cache, entropy, bytes.
    Default,
    /// matrix, hot, reuse, overlap, workset, cache, entropy, bytes, sanity.
    All,
    /// Step × layer grid.
    Matrix,
    /// Most activated experts per layer.
    Hot,
    /// Reuse distances.
    Reuse,
    /// Overlap with earlier steps.
    Overlap,
    /// Working-set growth.
    Workset,
    /// Residency outcome shares.
    Cache,
    /// Routing entropy.
    Entropy,
    /// Bytes read.
    Bytes,
    /// Consistency checks.
    Sanity,
}

impl View {
    /// The single views this selection expands to, in print order.
    #[must_use]
    pub fn expand(self) -> Vec<View> {
        use View::*;
        match self {
            Default => vec![Sanity, Hot, Reuse, Overlap, Workset, Cache, Entropy, Bytes],
            All => vec![
                Matrix, Hot, Reuse, Overlap, Workset, Cache, Entropy, Bytes, Sanity,
            ],
            v => vec![v],
        }
    }

    /// The view as `--view` spells it (error messages quote the user's word).
    #[must_use]
    pub fn name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value()
            .map_or_else(|| format!("{self:?}"), |p| p.get_name().to_string())
    }

    /// Whether `route --plot` can draw this view.
    #[must_use]
    pub fn has_plot(self) -> bool {
        matches!(self, View::Hot | View::Reuse | View::Matrix)
    }
}

/// What in a `route` invocation reads the `residency` column, worded for the missing-column
/// error; `None` when nothing does, so a trace recorded without it is still accepted.
/// `tables` is true for `--format json|csv`, whose matrix rows list residency.
#[must_use]
pub fn residency_needed_by(view: View, cells: CellMode, tables: bool) -> Option<String> {
    let views = view.expand();
    if views.contains(&View::Cache) {
        Some(if view == View::Cache {
            "--view cache".to_string()
        } else {
            format!("--view {} (its cache view)", view.name())
        })
    } else if views.contains(&View::Matrix) && cells == CellMode::Hit {
        Some("--view matrix --cells hit".to_string())
    } else if views.contains(&View::Matrix) && tables {
        Some("--view matrix --format json/csv (its rows list residency)".to_string())
    } else {
        None
    }
}

/// [`RouteTrace::read_for`], handing `note` the line a cut-short trace lost (a killed writer
/// leaves a last line without its end; the rows before it are kept).
pub fn read_noted(
    path: &std::path::Path,
    filter: RouteFilter,
    residency_needed_by: Option<&str>,
    note: &mut dyn FnMut(String),
) -> Result<RouteTrace> {
    let trace = RouteTrace::read_for(path, filter, residency_needed_by)?;
    if let Some(cut) = &trace.truncated {
        note(crate::decode::cut_note(path, cut));
    }
    Ok(trace)
}

/// Options of `bmoe-analyze route`.
#[derive(Debug, Clone)]
pub struct RouteOptions {
    /// Which view(s).
    pub view: View,
    /// Row filter.
    pub filter: RouteFilter,
    /// Matrix options.
    pub matrix: MatrixOptions,
    /// `--top` for hot.
    pub top: i64,
}

/// The three header lines (and the dropping note).
pub fn header(out: &mut String, t: &RouteTrace, phase: Phase) {
    let m = &t.meta;
    let _ = writeln!(out, "model   {}", m.model);
    let _ = writeln!(
        out,
        "arch    {}   n_layer {}   n_expert {}   n_expert_used {}",
        m.arch, m.n_layer, m.n_expert, m.n_expert_used
    );
    let _ = writeln!(out, "phase   {}   rows {}", phase.name(), t.rows.len());
    if t.n_dropped > 0 {
        let pct = 100.0 * t.n_dropped as f64 / t.rows.len().max(1) as f64;
        let _ = writeln!(
            out,
            "NOTE    cache-aware dropping was ON: {} of {} routings ({}%) were discarded and never read.",
            t.n_dropped,
            t.rows.len(),
            crate::pyfmt::f(pct, 1)
        );
        out.push_str(
            "        Figures below are what the ROUTER asked for; use scripts/route-drop-replay.py for what it cost.\n",
        );
    }
}

/// When the selected views include the matrix and its `--layers`/`--steps`
/// selection holds no cell: the `note:` saying so and which steps and layers have rows (the
/// report itself prints the reference's one line, or an empty `matrix` table).
#[must_use]
pub fn empty_matrix_note(t: &RouteTrace, opt: &RouteOptions) -> Option<String> {
    if t.rows.is_empty() || !opt.view.expand().contains(&View::Matrix) {
        return None;
    }
    let cells = Cells::build(&t.rows);
    if matrix::selection(t, &cells, &opt.matrix).is_some() {
        return None;
    }
    Some(format!(
        "{}: the matrix selection (--layers, --steps) holds no cell; the {} rows have {}",
        t.path.display(),
        opt.filter.phase.name(),
        matrix::row_ranges(&cells)
    ))
}

/// Render the selected views of an already-read trace.
pub fn render(t: &RouteTrace, opt: &RouteOptions) -> Result<String> {
    if t.rows.is_empty() {
        let turn = opt
            .filter
            .turn
            .map_or("None".to_string(), |v| v.to_string());
        return Err(AnalyzeError::Empty {
            message: format!(
                "{}: no rows for phase={} turn={turn} - is this a route trace?",
                t.path.display(),
                opt.filter.phase.name()
            ),
            hint: match (opt.filter.phase, opt.filter.turn) {
                (Phase::All, None) => {
                    "the trace has no routing rows: record one with `bmoe-cli --route-trace FILE` on a run that generates tokens".into()
                }
                (Phase::All, Some(_)) => {
                    "leave out --turn to keep every turn (turns are numbered from 0)".into()
                }
                (_, None) => "add `--phase all` to keep prefill and decode rows".into(),
                (_, Some(_)) => {
                    "add `--phase all` to keep every phase, and leave out --turn to keep every turn".into()
                }
            },
        });
    }
    let cells = Cells::build(&t.rows);
    let views = opt.view.expand();
    let needs_seq = views
        .iter()
        .any(|v| matches!(v, View::Reuse | View::Overlap | View::Workset));
    let seq = if needs_seq {
        views::seq_by_layer(t, &cells)
    } else {
        views::Seq::empty()
    };
    let mut out = String::new();
    header(&mut out, t, opt.filter.phase);
    let one = |v: View| -> Result<String> {
        let mut out = String::new();
        match v {
            View::Matrix => {
                // The reference's line, alone or inside `all`, and exit 0 (the command line
                // says why on stderr: [`empty_matrix_note`]).
                if !matrix::matrix(&mut out, t, &cells, &opt.matrix) {
                    out.push_str("no rows for that layer/step selection\n");
                }
            }
            View::Hot => views::hot(&mut out, t, &cells, opt.top),
            View::Reuse => views::reuse(&mut out, t, &seq, &cells.layers),
            View::Overlap => views::overlap(&mut out, &seq, &cells.layers),
            View::Workset => views::workset(&mut out, t, &seq, &cells.layers),
            View::Cache => views::cache(&mut out, t, &cells),
            View::Entropy => views::entropy(&mut out, t, &cells),
            View::Bytes => views::bytes(&mut out, t, &cells),
            View::Sanity => views::sanity(&mut out, t, &cells),
            View::Default | View::All => {}
        }
        Ok(out)
    };
    // The views are independent: on big traces, render them on two threads (odd/even) and join
    // the texts in view order.
    let parts: Vec<Result<String>> = if views.len() > 1 && t.rows.len() >= 1_000_000 {
        std::thread::scope(|scope| {
            let odd: Vec<View> = views.iter().copied().skip(1).step_by(2).collect();
            let helper = scope.spawn(|| odd.into_iter().map(one).collect::<Vec<_>>());
            let even: Vec<Result<String>> = views.iter().copied().step_by(2).map(one).collect();
            let odd = helper.join().unwrap_or_default();
            let mut merged = Vec::with_capacity(views.len());
            let mut odd = odd.into_iter();
            for e in even {
                merged.push(e);
                if let Some(o) = odd.next() {
                    merged.push(o);
                }
            }
            merged
        })
    } else {
        views.iter().copied().map(one).collect()
    };
    if parts.len() != views.len() {
        return Err(AnalyzeError::Invalid {
            message: "a view thread failed".into(),
            hint: "re-run; report a bug".into(),
        });
    }
    for part in parts {
        out.push_str(&part?);
    }
    Ok(out)
}

/// `--format json|csv` of `route`: the header as `meta` and the tables of every selected view,
/// in the text's view order (see [`tables`] for each view's tables).
pub fn tables(t: &RouteTrace, opt: &RouteOptions) -> Result<(serde_json::Value, Vec<Table>)> {
    if t.rows.is_empty() {
        return render(t, opt).map(|_| (serde_json::Value::Null, Vec::new()));
    }
    let cells = Cells::build(&t.rows);
    let views = opt.view.expand();
    let seq = if views
        .iter()
        .any(|v| matches!(v, View::Reuse | View::Overlap | View::Workset))
    {
        views::seq_by_layer(t, &cells)
    } else {
        views::Seq::empty()
    };
    let mut out = Vec::new();
    for v in views {
        match v {
            // An empty selection is an empty table, as the text prints its one line.
            View::Matrix => out.push(tables::matrix(t, &cells, &opt.matrix)),
            View::Hot => out.extend(views::hot_tables(t, &cells, opt.top)),
            View::Reuse => out.push(views::reuse_table(t, &seq, &cells.layers)),
            View::Overlap => out.extend(tables::overlap(&seq, &cells.layers)),
            View::Workset => out.extend(tables::workset(t, &seq, &cells.layers)),
            View::Cache => out.extend(tables::cache(t, &cells)),
            View::Entropy => out.extend(tables::entropy(t, &cells)),
            View::Bytes => out.extend(tables::bytes(t, &cells)),
            View::Sanity => out.extend(tables::sanity(t, &cells)),
            View::Default | View::All => {}
        }
    }
    let m = &t.meta;
    let meta = serde_json::json!({
        "model": m.model, "arch": m.arch, "n_layer": m.n_layer, "n_expert": m.n_expert,
        "n_expert_used": m.n_expert_used, "phase": opt.filter.phase.name(), "turn": opt.filter.turn,
        "rows": t.rows.len(), "dropped": t.n_dropped,
    });
    Ok((meta, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residency_is_needed_by_the_cache_view_hit_cells_and_matrix_tables_only() {
        let need = |v, c, t| residency_needed_by(v, c, t);
        assert_eq!(
            need(View::Cache, CellMode::Experts, false).as_deref(),
            Some("--view cache")
        );
        assert_eq!(
            need(View::All, CellMode::Experts, false).as_deref(),
            Some("--view all (its cache view)")
        );
        assert_eq!(
            need(View::Matrix, CellMode::Hit, false).as_deref(),
            Some("--view matrix --cells hit")
        );
        assert_eq!(
            need(View::Matrix, CellMode::Weights, true).as_deref(),
            Some("--view matrix --format json/csv (its rows list residency)")
        );
        assert_eq!(need(View::Matrix, CellMode::Experts, false), None);
        // --cells and --format only matter to the matrix view.
        assert_eq!(need(View::Hot, CellMode::Hit, true), None);
    }

    #[test]
    fn views_are_named_as_the_cli_spells_them() {
        assert_eq!(View::Workset.name(), "workset");
        assert_eq!(View::Default.name(), "default");
        let plotted: Vec<View> = View::All
            .expand()
            .into_iter()
            .filter(|v| v.has_plot())
            .collect();
        assert_eq!(plotted, [View::Matrix, View::Hot, View::Reuse]);
    }
}
