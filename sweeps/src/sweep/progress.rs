//! Progress on stderr: an overall bar (elapsed time ticking, an ETA once a run has finished),
//! one bar per device, and one line per device showing the current cell's tokens. Without a
//! terminal, one plain line per finished run instead.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::expand::{Cell, Plan};
use super::results::RunRecord;

/// The progress display.
pub struct Progress {
    multi: Option<MultiProgress>,
    overall: ProgressBar,
    devices: BTreeMap<String, (ProgressBar, ProgressBar)>,
    total: usize,
    finished: AtomicUsize,
    eta: Arc<Mutex<Eta>>,
}

/// What the ETA is computed from: the runs executed this time (runs a resume skips took no
/// time, so indicatif's rate over the bar's position would be far too fast).
#[derive(Debug)]
struct Eta {
    start: Instant,
    /// Runs executed (not skipped) and finished.
    ran: usize,
    /// Runs not finished yet.
    left: usize,
    /// When the last run finished, and the ETA then.
    at_last: Option<(Instant, Duration)>,
}

impl Eta {
    /// `, ETA 1m 05s`, counting down from the last finished run; nothing before one finished
    /// (an ETA from no data would read `0s`).
    fn text(&self) -> String {
        match self.at_last {
            None => String::new(),
            Some(_) if self.left == 0 => String::new(),
            Some((when, eta)) => match eta.checked_sub(when.elapsed()) {
                Some(d) if d >= Duration::from_secs(1) => format!(", ETA {}", short_duration(d)),
                _ => ", ETA any moment".into(),
            },
        }
    }

    /// A run finished (`ran`: it was executed, not skipped).
    fn done(&mut self, ran: bool) {
        self.left = self.left.saturating_sub(1);
        if ran {
            self.ran += 1;
        }
        if self.ran > 0 {
            let per_run = self.start.elapsed().div_f64(self.ran as f64);
            self.at_last = Some((Instant::now(), per_run.mul_f64(self.left as f64)));
        }
    }
}

/// `42s`, `3m 05s`, `1h 02m`.
fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
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
        let eta = Arc::new(Mutex::new(Eta {
            start: Instant::now(),
            ran: 0,
            left: total,
            at_last: None,
        }));
        let overall = add(ProgressBar::new(total as u64));
        let shown = Arc::clone(&eta);
        overall.set_style(
            style("{prefix:>10} [{bar:30}] {pos}/{len} runs  {elapsed_precise} elapsed{eta_runs}")
                .with_key(
                    "eta_runs",
                    move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                        let t = shown.lock().map(|e| e.text()).unwrap_or_default();
                        let _ = w.write_str(&t);
                    },
                ),
        );
        overall.set_prefix("sweep");
        if multi.is_some() {
            // Redraw twice a second: elapsed time (and the ETA) move while a run is going,
            // not only when one ends.
            overall.enable_steady_tick(Duration::from_millis(500));
        }
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
            eta,
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
        if let Ok(mut e) = self.eta.lock() {
            e.done(false);
        }
        self.overall.inc(1);
        self.finished.fetch_add(1, Ordering::Relaxed);
        if let Some((bar, _)) = self.devices.get(dev) {
            bar.inc(1);
        }
    }

    /// A run finished (any status).
    pub fn run_done(&self, dev: &str, rec: &RunRecord, last_on_device: bool) {
        if let Ok(mut e) = self.eta.lock() {
            e.done(true);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_is_hidden_until_a_run_finished_then_counts_from_executed_runs() {
        let mut e = Eta {
            start: Instant::now() - Duration::from_secs(10),
            ran: 0,
            left: 4,
            at_last: None,
        };
        assert_eq!(e.text(), "");
        // A skipped run gives no rate.
        e.done(false);
        assert_eq!(e.text(), "");
        e.done(true);
        // 10 s for one run, 2 left: about 20 s (a stall of this thread on a loaded machine moves
        // it by a second or two, either way)
        let t = e.text();
        let secs: Option<u64> = t
            .strip_prefix(", ETA ")
            .and_then(|r| r.strip_suffix('s'))
            .and_then(|n| n.parse().ok());
        assert!(secs.is_some_and(|s| (16..=24).contains(&s)), "{t}");
        e.done(true);
        e.done(true);
        assert_eq!(e.text(), "", "nothing left");
        assert_eq!(short_duration(Duration::from_secs(185)), "3m 05s");
        assert_eq!(short_duration(Duration::from_secs(3720)), "1h 02m");
    }
}
