//! Progress on stderr: an overall bar (ETA from finished runs), one bar per device, and one
//! line per device showing the current cell's tokens. Without a terminal, one plain line per
//! finished run instead.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::expand::{Cell, Plan};
use super::results::RunRecord;

/// The progress display.
pub struct Progress {
    multi: Option<MultiProgress>,
    overall: ProgressBar,
    devices: BTreeMap<String, (ProgressBar, ProgressBar)>,
    total: usize,
    finished: AtomicUsize,
}

fn style(t: &str) -> ProgressStyle {
    ProgressStyle::with_template(t)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl Progress {
    /// Bars for every device of the plan (hidden when stderr is not a terminal).
    pub fn new(plan: &Plan) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let total = plan.runs.len();
        let multi = tty.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        let add = |b: ProgressBar| match &multi {
            Some(m) => m.add(b),
            None => {
                b.set_draw_target(ProgressDrawTarget::hidden());
                b
            }
        };
        let overall = add(ProgressBar::new(total as u64));
        overall.set_style(style(
            "{prefix:>10} [{bar:30}] {pos}/{len} runs  {elapsed_precise} elapsed, ETA {eta}",
        ));
        overall.set_prefix("sweep");
        let mut devices = BTreeMap::new();
        for d in &plan.devices {
            let n = plan
                .runs
                .iter()
                .filter(|r| plan.cells[r.cell].device == d.id)
                .count();
            if n == 0 {
                continue;
            }
            let bar = add(ProgressBar::new(n as u64));
            bar.set_style(style("{prefix:>10} [{bar:30}] {pos}/{len} runs"));
            bar.set_prefix(d.id.clone());
            let cur = add(ProgressBar::new(0));
            cur.set_style(style("{prefix:>10} {msg} {pos}/{len} tokens"));
            cur.set_prefix("");
            devices.insert(d.id.clone(), (bar, cur));
        }
        Progress {
            multi,
            overall,
            devices,
            total,
            finished: AtomicUsize::new(0),
        }
    }

    /// A run starts on `dev`.
    pub fn run_started(&self, dev: &str, cell: &Cell, rep: &str) {
        if let Some((_, cur)) = self.devices.get(dev) {
            let n = cell
                .args
                .iter()
                .position(|a| a == "-n")
                .and_then(|i| cell.args.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            cur.set_length(n);
            cur.set_position(0);
            cur.set_message(format!("{}/{} {rep}", cell.sweep, cell.tag));
        }
    }

    /// Tokens done by the current run on `dev`.
    pub fn tokens(&self, dev: &str, n: u64) {
        if let Some((_, cur)) = self.devices.get(dev) {
            if n > cur.length().unwrap_or(0) {
                cur.set_length(n);
            }
            cur.set_position(n);
        }
    }

    /// A status note for the current run on `dev` (e.g. cooling down).
    pub fn note(&self, dev: &str, msg: &str) {
        if let Some((_, cur)) = self.devices.get(dev) {
            cur.set_message(msg.to_string());
        }
    }

    /// A run was already complete (resume).
    pub fn run_skipped(&self, dev: &str) {
        self.overall.inc(1);
        self.finished.fetch_add(1, Ordering::Relaxed);
        if let Some((bar, _)) = self.devices.get(dev) {
            bar.inc(1);
        }
    }

    /// A run finished (any status).
    pub fn run_done(&self, dev: &str, rec: &RunRecord, last_on_device: bool) {
        self.overall.inc(1);
        let k = self.finished.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some((bar, cur)) = self.devices.get(dev) {
            bar.inc(1);
            if last_on_device {
                cur.finish_and_clear();
            }
        }
        let rate = rec
            .tok_s
            .map_or(String::new(), |t| format!("  {t:.2} tok/s"));
        let warm = if rec.warmup { " (warm-up)" } else { "" };
        let line = format!(
            "[{k}/{}] {:<7} {} {}/{} {}{warm}{rate}  {:.1} s{}",
            self.total,
            rec.status,
            rec.device,
            rec.sweep,
            rec.cell,
            rec.rep,
            rec.duration_s,
            rec.error
                .as_ref()
                .map_or(String::new(), |e| format!("\n        {e}")),
        );
        match &self.multi {
            Some(m) => {
                let _ = m.println(line);
            }
            None => eprintln!("{line}"),
        }
    }

    /// Removes the bars.
    pub fn finish(&self) {
        for (bar, cur) in self.devices.values() {
            bar.finish_and_clear();
            cur.finish_and_clear();
        }
        self.overall.finish_and_clear();
    }
}
