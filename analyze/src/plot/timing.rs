//! The per-token stacked time breakdown of one metrics CSV, by the seed's attribution rules
//! (`bmoe_telemetry::attribution`).
//!
//! With CPU time measured (`cpu_ms` > 0 and `threads=` in the preamble) each token is the
//! panel's four bars stacked: **compute** = `cpu_ms ÷ threads` (an upper-bound proxy),
//! **flash wait** = `io_ms` (serial) / `stall_ms` (overlap), **cache mgmt** = `mgmt_ms`,
//! **unattributed** = the non-negative remainder of the wall. They are not rescaled: where
//! compute + flash + mgmt exceed the wall the stack rises above the black `wall_ms` line, as
//! the contract says it may. Without CPU time the compute part is the engine's residual
//! (`wall − flash − mgmt`, clamped at 0) and is labelled as such.

use std::path::Path;

use bmoe_telemetry::attribution::{Threads, TokenTimes, bars, compute_residual_ms, flash_wait_ms};
use bmoe_telemetry::metrics::MetricsFile;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{DrawResult, Figure, OrMsg, base, frame, legend, render};
use crate::{AnalyzeError, Result};

/// At most this many bars; longer runs are drawn as means of consecutive tokens.
const MAX_BARS: usize = 250;

struct Breakdown {
    title: String,
    /// (label, colour) per stacked part, bottom first.
    parts: Vec<(String, RGBColor)>,
    /// (first token number, tokens in the bar, part values ms, wall ms).
    bars: Vec<(f64, f64, Vec<f64>, f64)>,
}

impl Figure for Breakdown {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let x_lo = self.bars.first().map_or(1.0, |b| b.0);
        let x_hi = self.bars.last().map_or(2.0, |b| b.0 + b.1);
        let y_max = self
            .bars
            .iter()
            .map(|b| b.2.iter().sum::<f64>().max(b.3))
            .fold(1e-3, f64::max);
        let mut chart = frame(root, &self.title, 60)
            // Headroom above the tallest bar keeps the legend (upper right) off the data.
            .build_cartesian_2d(x_lo..x_hi, 0.0..y_max * 1.4)
            .msg()?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("token (metrics row, in file order)")
            .y_desc("ms per token")
            .draw()
            .msg()?;
        for (pi, (label, colour)) in self.parts.iter().enumerate() {
            let colour = *colour;
            chart
                .draw_series(self.bars.iter().map(|(x, w, parts, _)| {
                    let below: f64 = parts[..pi].iter().sum();
                    let gap = 0.15 * w;
                    Rectangle::new(
                        [(*x, below), (x + w - gap, below + parts[pi])],
                        colour.filled(),
                    )
                }))
                .msg()?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled())
                });
        }
        let wall: Vec<(f64, f64)> = self
            .bars
            .iter()
            .flat_map(|(x, w, _, wall)| [(*x, *wall), (x + w, *wall)])
            .collect();
        chart
            .draw_series(LineSeries::new(wall, BLACK.stroke_width(2)))
            .msg()?
            .label("wall_ms (token wall time)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

/// `metrics FILE --plot`: one stacked bar per token row (after `--trim`), or per group of
/// consecutive tokens (their mean) when there are more than 250.
///
/// # Errors
/// The file cannot be read, has no `wall_ms` rows after `trim`, an unwritable path or a
/// drawing failure.
pub fn token_breakdown(path: &Path, csv: &Path, trim: usize) -> Result<()> {
    render(path, &Breakdown::read(csv, trim)?)
}

impl Breakdown {
    /// The bars of `csv`'s token rows after `trim`.
    fn read(csv: &Path, trim: usize) -> Result<Self> {
        let file = MetricsFile::read(csv).map_err(|e| AnalyzeError::from_telemetry(csv, e))?;
        let all: Vec<TokenTimes> = file.rows.iter().filter_map(TokenTimes::from_row).collect();
        let rows = all.len();
        let times: Vec<TokenTimes> = all.into_iter().skip(trim).collect();
        if times.is_empty() {
            return Err(AnalyzeError::Empty {
                message: format!(
                    "{}: no wall_ms values (no token rows) after --trim {trim}; nothing to plot",
                    csv.display()
                ),
                hint: if rows == 0 {
                    "pass the metrics CSV of a run that generated tokens (`bmoe-cli --csv FILE`)"
                        .into()
                } else {
                    format!("use a --trim below {rows} (the file has {rows} token rows)")
                },
            });
        }
        let as_u32 = |v: Option<u64>| v.and_then(|t| u32::try_from(t).ok()).unwrap_or(0);
        let threads = Threads {
            compute: as_u32(file.info.threads),
            io: as_u32(file.info.io_threads),
        };
        // v0 files have no preamble: stall_ms is 0 in serial mode by contract, so a file with
        // stall time was an overlap run (and its io_ms is lane time that can exceed the wall).
        let (overlap, inferred) = match file.info.overlap {
            Some(o) => (o, false),
            None => (times.iter().any(|t| t.stall_ms > 0.0), true),
        };
        let measured = threads.compute > 0 && times.iter().any(|t| t.cpu_ms > 0.0);
        let flash = match (overlap, inferred) {
            (true, false) => "flash wait (stall_ms, overlap)",
            (true, true) => "flash wait (stall_ms; overlap inferred from stall_ms > 0)",
            (false, _) => "flash wait (io_ms, serial)",
        };
        let mut parts = vec![
            (
                if measured {
                    format!("compute (cpu_ms / {} threads)", threads.compute)
                } else {
                    "compute residual (wall - flash - mgmt; cpu_ms unmeasured)".to_string()
                },
                RGBColor(49, 130, 189),
            ),
            (flash.to_string(), RGBColor(253, 141, 60)),
            ("cache mgmt (mgmt_ms)".to_string(), RGBColor(117, 107, 177)),
        ];
        if measured {
            parts.push((
                "unattributed (rest of the wall, >= 0)".to_string(),
                RGBColor(189, 189, 189),
            ));
        }
        let split = |t: &TokenTimes| -> Vec<f64> {
            if measured {
                let b = bars(t, threads, overlap);
                vec![
                    b.compute_ms.unwrap_or(0.0),
                    b.flash_wait_ms,
                    b.mgmt_ms,
                    b.unattributed_ms.unwrap_or(0.0),
                ]
            } else {
                vec![
                    compute_residual_ms(t, overlap),
                    flash_wait_ms(t, overlap),
                    t.mgmt_ms,
                ]
            }
        };
        let group = times.len().div_ceil(MAX_BARS).max(1);
        let bars = times
            .chunks(group)
            .enumerate()
            .map(|(i, chunk)| {
                let k = chunk.len() as f64;
                let mut sum = vec![0.0; parts.len()];
                let mut wall = 0.0;
                for t in chunk {
                    for (s, v) in sum.iter_mut().zip(split(t)) {
                        // A negative or non-finite cell would break the stack; draw it as 0.
                        *s += if v.is_finite() { v.max(0.0) } else { 0.0 };
                    }
                    wall += t.wall_ms;
                }
                (
                    (trim + i * group + 1) as f64,
                    k,
                    sum.into_iter().map(|s| s / k).collect(),
                    wall / k,
                )
            })
            .collect();
        let model = file
            .info
            .model
            .as_deref()
            .map_or_else(|| base(&csv.display().to_string()), base);
        let grouped = if group > 1 {
            format!(", bars = means of {group} tokens")
        } else {
            String::new()
        };
        Ok(Self {
            title: format!(
                "Per-token time breakdown - {model} ({} tokens{grouped})",
                times.len()
            ),
            parts,
            bars,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("m.csv");
        std::fs::write(&p, text).expect("write");
        (d, p)
    }

    fn labels(b: &Breakdown) -> Vec<&str> {
        b.parts.iter().map(|p| p.0.as_str()).collect()
    }

    #[test]
    fn measured_cpu_gives_the_four_panel_bars_unscaled() {
        let (_d, p) = write(
            "# bmoe_metrics v2\n# model=/m/toy.gguf arch=toy threads=4\n# io_threads=2 overlap=0\n\
             step,steps,wall_ms,io_ms,compute_ms,stall_ms,mgmt_ms,cpu_ms\n\
             1,3,100.000,40.000,50.000,0.000,10.000,160.000\n\
             2,3,200.000,150.000,40.000,0.000,10.000,200.000\n\
             3,3,80.000,20.000,55.000,0.000,5.000,240.000\n",
        );
        let b = Breakdown::read(&p, 0).expect("read");
        assert_eq!(b.title, "Per-token time breakdown - toy.gguf (3 tokens)");
        assert_eq!(
            labels(&b),
            [
                "compute (cpu_ms / 4 threads)",
                "flash wait (io_ms, serial)",
                "cache mgmt (mgmt_ms)",
                "unattributed (rest of the wall, >= 0)"
            ]
        );
        // By hand: cpu/4, io (serial), mgmt, max(0, wall - the three).
        let want = [
            (1.0, vec![40.0, 40.0, 10.0, 10.0], 100.0),
            (2.0, vec![50.0, 150.0, 10.0, 0.0], 200.0), // 210 > wall: stack above the line
            (3.0, vec![60.0, 20.0, 5.0, 0.0], 80.0),
        ];
        assert_eq!(b.bars.len(), 3);
        for ((x, w, parts, wall), (wx, wparts, wwall)) in b.bars.iter().zip(want) {
            assert_eq!((*x, *w, *wall), (wx, 1.0, wwall));
            assert_eq!(parts, &wparts);
        }
        // --trim 2: the first bar is token 3.
        let t = Breakdown::read(&p, 2).expect("read");
        assert_eq!(t.bars.len(), 1);
        assert_eq!(t.bars[0].0, 3.0);
        assert!(
            Breakdown::read(&p, 3).is_err(),
            "nothing left after --trim 3"
        );
    }

    #[test]
    fn v0_overlap_file_uses_the_residual_and_stall() {
        // Real first rows of 2026-07-13/gemma_autocap_ov.csv: v0, no preamble, io > wall.
        let (_d, p) = write(
            "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms\n\
             1,256,489.404,1121.622,135.826,808386560,1.70,263.053,90.526\n\
             2,256,487.030,1139.906,131.147,823279616,2.81,261.484,94.400\n",
        );
        let b = Breakdown::read(&p, 0).expect("read");
        assert_eq!(
            labels(&b),
            [
                "compute residual (wall - flash - mgmt; cpu_ms unmeasured)",
                "flash wait (stall_ms; overlap inferred from stall_ms > 0)",
                "cache mgmt (mgmt_ms)"
            ]
        );
        let (_, _, parts, wall) = &b.bars[0];
        assert_eq!(parts[1], 263.053);
        // The residual reproduces the engine's compute_ms column to its 3 decimals, and the
        // stack is the wall exactly.
        assert!((parts[0] - 135.826).abs() < 0.0015, "{}", parts[0]);
        assert!((parts.iter().sum::<f64>() - wall).abs() < 1e-9);
    }

    #[test]
    fn long_runs_are_grouped_into_mean_bars() {
        let mut text = String::from("step,steps,wall_ms,io_ms,stall_ms,mgmt_ms\n");
        for i in 1..=501 {
            text.push_str(&format!("{i},501,{}.000,1.000,0.000,0.000\n", i));
        }
        let (_d, p) = write(&text);
        let b = Breakdown::read(&p, 0).expect("read");
        // 501 tokens → groups of 3 → 167 bars; the first is the mean of walls 1, 2, 3.
        assert_eq!(b.bars.len(), 167);
        assert_eq!(b.bars[0].3, 2.0);
        assert_eq!(b.bars[1].0, 4.0);
        assert!(
            b.title.ends_with("(501 tokens, bars = means of 3 tokens)"),
            "{}",
            b.title
        );
    }
}
