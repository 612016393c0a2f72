//! Every number the panel computes, as small pure functions with hand-worked tests.
//!
//! The attribution rules are the seed's ("The app panel never reads the residual as compute"):
//! four bars that are attribution components, not a partition of wall time, never rescaled to
//! 100 %; and a CPU-busy diagnostic with its own denominator.

use bmoe_telemetry::attribution::{self, Threads, TokenTimes};

use crate::model::Memory;

/// Which measured term stands for the wall time lost to flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashTerm {
    /// Serial mode: `io_ms` is wall time blocked on reads.
    Io,
    /// Overlap: `stall_ms`, the union of stalled intervals (`io_ms` is lane-busy time there).
    Stall,
}

impl FlashTerm {
    /// The term for a run with or without `--overlap`.
    pub fn for_overlap(overlap: bool) -> Self {
        if overlap {
            FlashTerm::Stall
        } else {
            FlashTerm::Io
        }
    }

    /// The source field's name, for labels.
    pub fn field(self) -> &'static str {
        match self {
            FlashTerm::Io => "io",
            FlashTerm::Stall => "stall",
        }
    }
}

/// The four attribution bars of one token (or of the run average), ms, with the wall they are
/// drawn against. The arithmetic is `bmoe_telemetry::attribution`'s; this adds what drawing
/// needs (the wall, which flash term was read, fill fractions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bars {
    /// Token wall time the bars are drawn against.
    pub wall_ms: f64,
    /// `cpu ÷ compute threads`: an upper-bound proxy; `None` when CPU time or the thread count
    /// is unknown (0 CPU time means unmeasured).
    pub compute_ms: Option<f64>,
    /// Flash wait as measured: `io` (serial) or `stall` (overlap).
    pub flash_ms: f64,
    /// Which term `flash_ms` is.
    pub flash_term: FlashTerm,
    /// Cache management.
    pub mgmt_ms: f64,
    /// Non-negative wall remainder after the three above (off-CPU time); `None` when compute
    /// is unknown, because the remainder would then just be the engine's residual again.
    pub unattributed_ms: Option<f64>,
}

impl Bars {
    /// Attributes one token (or per-token means) per the seed.
    ///
    /// `cpu_ms` is process CPU over all threads; `threads` the compute threads.
    pub fn new(
        wall_ms: f64,
        cpu_ms: f64,
        threads: Option<u32>,
        io_ms: f64,
        stall_ms: f64,
        mgmt_ms: f64,
        overlap: bool,
    ) -> Self {
        let times = TokenTimes {
            wall_ms: finite_or_zero(wall_ms),
            io_ms: finite_or_zero(io_ms),
            stall_ms: finite_or_zero(stall_ms),
            mgmt_ms: finite_or_zero(mgmt_ms),
            cpu_ms: finite_or_zero(cpu_ms),
        };
        let th = Threads {
            compute: threads.unwrap_or(0),
            io: 0,
        };
        let b = attribution::bars(&times, th, overlap);
        Bars {
            wall_ms: times.wall_ms,
            compute_ms: b.compute_ms,
            flash_ms: b.flash_wait_ms,
            flash_term: FlashTerm::for_overlap(overlap),
            mgmt_ms: b.mgmt_ms,
            unattributed_ms: b.unattributed_ms,
        }
    }

    /// How much of a bar of full width `value` fills: `value ÷ wall`, clamped to `0..=1`.
    /// Each bar is judged against the wall on its own; the four are not rescaled to sum to 1.
    pub fn fill(&self, value_ms: f64) -> f64 {
        if self.wall_ms > 0.0 && value_ms.is_finite() {
            (value_ms / self.wall_ms).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// True when compute + flash + mgmt exceed the wall: the process CPU includes the I/O lanes'
    /// work, so the compute proxy overlaps flash wait, and the remainder was clamped at 0.
    pub fn overlapping(&self) -> bool {
        self.compute_ms.unwrap_or(0.0) + self.flash_ms + self.mgmt_ms > self.wall_ms + 1e-9
    }
}

fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// Threads that can be busy: compute threads, plus the I/O lanes under overlap (process CPU
/// counts the lanes' work). `None` when a needed count is unknown.
pub fn busy_threads(threads: Option<u32>, io_threads: Option<u32>, overlap: bool) -> Option<u32> {
    let t = threads.filter(|t| *t > 0)?;
    if overlap {
        Some(t + io_threads?)
    } else {
        Some(t)
    }
}

/// CPU-busy diagnostic, percent: `cpu ÷ (wall × busy threads)` (`bmoe_telemetry::attribution`).
/// Its own denominator, not the compute bar's. `None` when CPU is unmeasured (0) or a count is
/// unknown.
pub fn cpu_busy_pct(cpu_ms: f64, wall_ms: f64, busy_threads: Option<u32>) -> Option<f64> {
    let busy = busy_threads.filter(|b| *b > 0)?;
    let t = TokenTimes {
        wall_ms: finite_or_zero(wall_ms),
        cpu_ms: finite_or_zero(cpu_ms),
        ..TokenTimes::default()
    };
    // `busy` already counts the lanes when they apply, so pass it as compute threads, serial.
    attribution::cpu_busy_pct(
        &t,
        Threads {
            compute: busy,
            io: 0,
        },
        false,
    )
}

/// Decode rate of one token group: `batch × 1000 ÷ wall_ms`.
pub fn tok_s(wall_ms: f64, batch: u64) -> Option<f64> {
    (wall_ms.is_finite() && wall_ms > 0.0).then(|| batch.max(1) as f64 * 1000.0 / wall_ms)
}

/// Run-average decode rate: tokens ÷ summed decode seconds (decode time only, like the
/// engine's `tok/s`; loop overhead excluded).
pub fn run_tok_s(tokens: u64, total_wall_ms: f64) -> Option<f64> {
    (tokens > 0 && total_wall_ms.is_finite() && total_wall_ms > 0.0)
        .then(|| tokens as f64 * 1000.0 / total_wall_ms)
}

/// The rate a user waits through when the gap between decodes is counted:
/// `tokens ÷ (decode + loop overhead)`.
pub fn experienced_tok_s(tokens: u64, total_wall_ms: f64, total_overhead_ms: f64) -> Option<f64> {
    run_tok_s(tokens, total_wall_ms + total_overhead_ms.max(0.0))
}

/// Flash read bandwidth, MiB/s, as the engine's `moe-stream:` line computes it: MiB read ÷ read
/// time. Under overlap the read time is summed lane-busy time, so this is per-lane throughput.
pub fn flash_mib_s(read_mib: f64, io_ms: f64) -> Option<f64> {
    (read_mib.is_finite() && io_ms.is_finite() && io_ms > 0.0 && read_mib >= 0.0)
        .then(|| read_mib / (io_ms / 1000.0))
}

/// Headroom once this process's own mmap'd pages are taken out: `MemAvailable` counts them as
/// reclaimable, so it over-states what is free for anything else by `rss_file`.
pub fn honest_headroom_mib(mem: &Memory) -> f64 {
    mem.mem_available_mib - mem.rss_file_mib
}

/// Percent with `n/d`, `None` for an empty denominator.
pub fn pct(n: f64, d: f64) -> Option<f64> {
    (d > 0.0 && n.is_finite()).then(|| n / d * 100.0)
}

/// Progress through the generation, `0..=1`.
pub fn progress(step: u64, steps: u64) -> f64 {
    if steps == 0 {
        0.0
    } else {
        (step as f64 / steps as f64).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn serial_bars_read_io_as_flash_and_divide_cpu_by_compute_threads() {
        // wall 500, cpu 1200 over 4 threads -> compute 300; io 150 is the flash term in serial;
        // mgmt 20; remainder 500-300-150-20 = 30.
        let b = Bars::new(500.0, 1200.0, Some(4), 150.0, 0.0, 20.0, false);
        close(b.compute_ms.unwrap(), 300.0);
        close(b.flash_ms, 150.0);
        assert_eq!(b.flash_term, FlashTerm::Io);
        close(b.unattributed_ms.unwrap(), 30.0);
        close(b.fill(300.0), 0.6);
        assert!(!b.overlapping());
    }

    #[test]
    fn overlap_bars_read_stall_not_lane_busy_io() {
        // io 1600 is lane-busy time and must not be drawn; stall 380 is. cpu 800/4 = 200;
        // 200+380+10 = 590 > wall 500 -> remainder clamps to 0 and the overlap is flagged.
        let b = Bars::new(500.0, 800.0, Some(4), 1600.0, 380.0, 10.0, true);
        close(b.flash_ms, 380.0);
        assert_eq!(b.flash_term, FlashTerm::Stall);
        close(b.unattributed_ms.unwrap(), 0.0);
        assert!(b.overlapping());
        // Not rescaled: each fill is against the wall alone.
        close(b.fill(380.0), 0.76);
        close(b.fill(1600.0), 1.0);
    }

    #[test]
    fn unmeasured_cpu_or_unknown_threads_leave_compute_unknown() {
        let b = Bars::new(400.0, 0.0, Some(4), 100.0, 0.0, 0.0, false);
        assert_eq!(b.compute_ms, None);
        // without compute the remainder would be the residual again: not shown
        assert_eq!(b.unattributed_ms, None);
        let b = Bars::new(400.0, 900.0, None, 100.0, 0.0, 0.0, false);
        assert_eq!(b.compute_ms, None);
        let b = Bars::new(f64::NAN, 900.0, Some(3), 100.0, 0.0, 0.0, false);
        close(b.wall_ms, 0.0);
        close(b.fill(10.0), 0.0);
    }

    #[test]
    fn cpu_busy_has_its_own_denominator_with_lanes_under_overlap() {
        // serial: 1200 / (500 x 4) = 60 %
        close(
            cpu_busy_pct(1200.0, 500.0, busy_threads(Some(4), Some(4), false)).unwrap(),
            60.0,
        );
        // overlap: 1200 / (500 x (4+4)) = 30 %, while the compute bar still divides by 4 only.
        close(
            cpu_busy_pct(1200.0, 500.0, busy_threads(Some(4), Some(4), true)).unwrap(),
            30.0,
        );
        assert_eq!(busy_threads(Some(4), None, true), None);
        assert_eq!(busy_threads(Some(4), None, false), Some(4));
        assert_eq!(cpu_busy_pct(0.0, 500.0, Some(4)), None);
        assert_eq!(cpu_busy_pct(100.0, 0.0, Some(4)), None);
    }

    #[test]
    fn rates() {
        close(tok_s(250.0, 1).unwrap(), 4.0);
        close(tok_s(300.0, 3).unwrap(), 10.0);
        assert_eq!(tok_s(0.0, 1), None);
        // 256 tokens over 201 s of decode -> 1.2736...
        close(run_tok_s(256, 201_000.0).unwrap(), 256.0 / 201.0);
        assert_eq!(run_tok_s(0, 10.0), None);
        // 10 tokens, 1000 ms decode + 250 ms overhead -> 8 tok/s
        close(experienced_tok_s(10, 1000.0, 250.0).unwrap(), 8.0);
        // the CLI's moe-stream line: 587.39 MiB/token over 1.065 s/token -> 551.5 MiB/s
        close(flash_mib_s(587.39, 1065.0).unwrap(), 587.39 / 1.065);
        assert_eq!(flash_mib_s(10.0, 0.0), None);
        close(pct(22.0, 30.0).unwrap(), 73.333_333_333_333_33);
        assert_eq!(pct(1.0, 0.0), None);
        close(progress(64, 256), 0.25);
        close(progress(5, 0), 0.0);
        close(progress(300, 256), 1.0);
    }

    #[test]
    fn headroom_takes_own_file_pages_out_of_mem_available() {
        let m = Memory {
            mem_available_mib: 1500.0,
            rss_file_mib: 400.0,
            ..Memory::default()
        };
        close(honest_headroom_mib(&m), 1100.0);
    }
}
