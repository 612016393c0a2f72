//! The replay curve: decode hit % against cache budget, one line per policy, Belady thick.
//!
//! The legend says what Belady bounds: the policies that hold at most the budget (plus the
//! batch being staged). The layer policies keep every layer's last batch whatever the budget,
//! so below one token cycle they hold more than the budget and can sit above the Belady line.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{DrawResult, Figure, OrMsg, frame, legend, render};
use crate::Result;
use crate::replay::{Policy, ReplayReport};

/// One line: policy name and its (budget MiB, hit %) points.
struct Curves {
    title: String,
    x_max: f64,
    lines: Vec<(String, Vec<(f64, f64)>)>,
}

impl Figure for Curves {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let mut chart = frame(root, &self.title, 55)
            .build_cartesian_2d(0.0..self.x_max * 1.02, 0.0..100.0)
            .msg()?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("cache budget (MiB)")
            .y_desc("decode hit rate (%)")
            .draw()
            .msg()?;
        let mut others = 0;
        for (name, pts) in &self.lines {
            // Colour-blind-safe categories; Belady, the bound, is the thick black line.
            let colour = if name.starts_with("belady") {
                super::axis::category(0)
            } else {
                others += 1;
                super::axis::category(1 + (others - 1) % (super::axis::OKABE_ITO.len() - 1))
            }
            .to_rgba();
            let width = if name.starts_with("belady") { 3 } else { 2 };
            chart
                .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(width)))
                .msg()?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(width))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                .msg()?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

/// `replay --plot`: decode hit % against budget, one line per policy (Belady included).
///
/// # Errors
/// An unwritable path or a drawing failure, naming `--plot PATH`.
pub fn replay_curve(path: &Path, rep: &ReplayReport) -> Result<()> {
    let lines = rep
        .policies
        .iter()
        .map(|&policy| {
            let pts = rep
                .curve
                .iter()
                .filter(|p| p.policy == policy)
                .map(|p| (p.budget_mib, p.result.dec_hit_pct()))
                .collect();
            (legend_label(policy), pts)
        })
        .collect();
    render(
        path,
        &Curves {
            title: format!("Decode hit rate vs cache budget - {}", rep.model),
            x_max: rep
                .curve
                .iter()
                .map(|p| p.budget_mib)
                .fold(1.0_f64, f64::max),
            lines,
        },
    )
}

/// The legend text of a policy: what Belady bounds, and which policies may hold more than the
/// budget (docs/analyze.md "What belady bounds").
fn legend_label(policy: Policy) -> String {
    match policy {
        Policy::Belady => "belady (ceiling at equal bytes held)".into(),
        Policy::Layer | Policy::LayerLfu => {
            format!("{} (holds the last batch per layer)", policy.name())
        }
        _ => policy.name().into(),
    }
}
