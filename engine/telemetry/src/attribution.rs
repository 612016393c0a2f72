//! Where a token's wall time went: the seed's attribution rules as pure functions, shared by
//! the engine (which emits the compute residual) and every reader (which must not invert it).
//!
//! Two different things live here and must not be confused:
//!
//! * the **compute residual** the engine reports as `compute_ms`:
//!   `max(0, wall − io − mgmt)` in serial mode, `max(0, wall − stall − mgmt)` under overlap
//!   ([`compute_residual_ms`]). It is whatever is left, not a measurement, and it silently
//!   absorbs page faults and scheduler stalls;
//! * the panel's **four bars** ([`bars`]), which never read the residual as compute:
//!   **compute** = `cpu_ms ÷ compute threads` (a proxy and an upper bound: process CPU includes
//!   the I/O lanes), **flash wait** = `io_ms` (serial) / `stall_ms` (overlap), as measured,
//!   **cache mgmt** = `mgmt_ms`, **unattributed** = `max(0, wall − the three)`. They are **not
//!   rescaled to 100 %**: under heavy streaming compute + flash + mgmt can exceed the wall, and
//!   the remainder is then clamped at 0 rather than showing the overlap.
//!
//! The **CPU-busy diagnostic** ([`cpu_busy_pct`]) is a third quantity with its own
//! denominator, `cpu ÷ (wall × busy threads)` where busy threads include the I/O lanes under
//! overlap; it must not be "simplified" into the compute bar.
//!
//! Never recover flash as `wall − compute − mgmt`: when the residual's clamp fires that gives
//! `wall − mgmt` and over-attributes to flash. Read it with [`flash_wait_ms`].
//!
//! ```
//! use bmoe_telemetry::attribution::{bars, cpu_busy_pct, TokenTimes, Threads};
//! let t = TokenTimes { wall_ms: 500.0, io_ms: 300.0, stall_ms: 0.0, mgmt_ms: 20.0, cpu_ms: 640.0 };
//! let th = Threads { compute: 4, io: 4 };
//! let b = bars(&t, th, false);
//! assert_eq!((b.compute_ms, b.flash_wait_ms, b.mgmt_ms, b.unattributed_ms),
//!            (Some(160.0), 300.0, 20.0, Some(20.0)));
//! assert_eq!(cpu_busy_pct(&t, th, false), Some(32.0));
//! ```

use crate::metrics::TokenRow;
use crate::protocol::{Done, Progress};

/// The measured times of one token (or per-token averages), in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TokenTimes {
    /// Token wall time (brackets `llama_decode`).
    pub wall_ms: f64,
    /// Flash read time: wall blocked on reads (serial) / summed lane busy time (overlap).
    pub io_ms: f64,
    /// Union of stalled intervals (overlap; 0 in serial mode).
    pub stall_ms: f64,
    /// Cache management.
    pub mgmt_ms: f64,
    /// Process CPU time across all threads; 0 = unmeasured.
    pub cpu_ms: f64,
}

impl From<&Progress> for TokenTimes {
    fn from(p: &Progress) -> Self {
        TokenTimes {
            wall_ms: p.wall_ms,
            io_ms: p.io_ms,
            stall_ms: p.stall_ms,
            mgmt_ms: p.mgmt_ms,
            cpu_ms: p.cpu_ms,
        }
    }
}

impl TokenTimes {
    /// From a metrics CSV row; columns the file lacks count as 0 (older files predate
    /// `stall_ms`, `mgmt_ms`, `cpu_ms`). `None` when the row has no `wall_ms`.
    pub fn from_row(r: &TokenRow) -> Option<TokenTimes> {
        Some(TokenTimes {
            wall_ms: r.wall_ms?,
            io_ms: r.io_ms.unwrap_or(0.0),
            stall_ms: r.stall_ms.unwrap_or(0.0),
            mgmt_ms: r.mgmt_ms.unwrap_or(0.0),
            cpu_ms: r.cpu_ms.unwrap_or(0.0),
        })
    }

    /// Per-token averages of a finished turn (`BMOE_DONE`): wall = `1000 / tok_s`, and the
    /// flash term read **as measured** from `io_s_tok` / `stall_s_tok`. `None` when `tok_s`
    /// is not positive.
    pub fn from_done(d: &Done) -> Option<TokenTimes> {
        (d.tok_s > 0.0 && d.tok_s.is_finite()).then(|| TokenTimes {
            wall_ms: 1000.0 / d.tok_s,
            io_ms: d.io_s_tok * 1000.0,
            stall_ms: d.stall_s_tok * 1000.0,
            mgmt_ms: d.mgmt_s_tok * 1000.0,
            cpu_ms: d.cpu_s_tok * 1000.0,
        })
    }
}

/// Thread counts the attribution divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads {
    /// Compute threads (`threads=` in the CSV preamble).
    pub compute: u32,
    /// I/O lanes (`io_threads=`); counted as busy only under overlap.
    pub io: u32,
}

/// The wall-additive flash term, as measured: `stall_ms` under overlap, `io_ms` in serial
/// mode (where `io_ms` is wall time blocked on reads).
pub fn flash_wait_ms(t: &TokenTimes, overlap: bool) -> f64 {
    if overlap { t.stall_ms } else { t.io_ms }
}

/// The compute **residual** the engine emits as `compute_ms`:
/// `max(0, wall − io − mgmt)` (serial) / `max(0, wall − stall − mgmt)` (overlap). Clamped at
/// 0, so the wall-additive identity is not exact when the clamp fires. NaN in, NaN out.
pub fn compute_residual_ms(t: &TokenTimes, overlap: bool) -> f64 {
    let r = t.wall_ms - flash_wait_ms(t, overlap) - t.mgmt_ms;
    if r.is_nan() { r } else { r.max(0.0) }
}

/// The panel's four attribution bars, in milliseconds. Not a partition of the wall and not
/// rescaled to 100 %.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bars {
    /// `cpu_ms ÷ compute threads`: an upper-bound proxy for compute-thread time. `None` when
    /// CPU time is unmeasured (`cpu_ms` ≤ 0) or there are no compute threads.
    pub compute_ms: Option<f64>,
    /// [`flash_wait_ms`].
    pub flash_wait_ms: f64,
    /// `mgmt_ms`, as measured (not clamped).
    pub mgmt_ms: f64,
    /// `max(0, wall − compute − flash − mgmt)`: the off-CPU time (swap-in, preemption,
    /// frequency caps). `None` when compute is unmeasured — the remainder would then just be
    /// the residual again.
    pub unattributed_ms: Option<f64>,
}

impl Bars {
    /// Each bar as a fraction of the wall (`None` for an unmeasured bar or a wall ≤ 0). The
    /// fractions need not sum to 1 — deliberately.
    pub fn fractions_of_wall(&self, wall_ms: f64) -> [Option<f64>; 4] {
        let f = |x: Option<f64>| x.filter(|_| wall_ms > 0.0).map(|v| v / wall_ms);
        [
            f(self.compute_ms),
            f(Some(self.flash_wait_ms)),
            f(Some(self.mgmt_ms)),
            f(self.unattributed_ms),
        ]
    }
}

/// The four bars for one token (or for run averages, see [`TokenTimes::from_done`]).
pub fn bars(t: &TokenTimes, threads: Threads, overlap: bool) -> Bars {
    let flash = flash_wait_ms(t, overlap);
    let compute =
        (t.cpu_ms > 0.0 && threads.compute > 0).then(|| t.cpu_ms / f64::from(threads.compute));
    let unattributed = compute.map(|c| {
        let r = t.wall_ms - c - flash - t.mgmt_ms;
        if r.is_nan() { r } else { r.max(0.0) }
    });
    Bars {
        compute_ms: compute,
        flash_wait_ms: flash,
        mgmt_ms: t.mgmt_ms,
        unattributed_ms: unattributed,
    }
}

/// Threads that can be busy: compute threads, plus the I/O lanes under overlap (process CPU
/// includes them, so leaving them out would report occupancy above 100 %).
pub fn busy_threads(threads: Threads, overlap: bool) -> u32 {
    threads.compute + if overlap { threads.io } else { 0 }
}

/// The CPU-busy diagnostic, percent: `cpu ÷ (wall × busy threads) × 100` with
/// [`busy_threads`]. `None` (hidden) when CPU is unmeasured, the wall is not positive or no
/// thread is busy. Near 100 % is genuinely compute-bound; well below means throttled,
/// preempted or blocked.
///
/// This differs from the CLI's `compute:` line, which divides by compute threads only
/// whatever the mode.
pub fn cpu_busy_pct(t: &TokenTimes, threads: Threads, overlap: bool) -> Option<f64> {
    let busy = busy_threads(threads, overlap);
    (t.cpu_ms > 0.0 && t.wall_ms > 0.0 && busy > 0)
        .then(|| t.cpu_ms / (t.wall_ms * f64::from(busy)) * 100.0)
}

/// The CLI `compute:` line's occupancy, percent: `cpu_s_tok / (s_tok × compute threads) ×
/// 100`. `None` when an input is not positive.
pub fn cli_occupancy_pct(cpu_s_tok: f64, s_tok: f64, compute_threads: u32) -> Option<f64> {
    (cpu_s_tok > 0.0 && s_tok > 0.0 && compute_threads > 0)
        .then(|| cpu_s_tok / (s_tok * f64::from(compute_threads)) * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TH: Threads = Threads { compute: 4, io: 4 };

    #[test]
    fn serial_token_by_hand() {
        // wall 500 = io 300 + mgmt 20 + 180 left; cpu 640 over 4 threads = 160 of compute.
        let t = TokenTimes {
            wall_ms: 500.0,
            io_ms: 300.0,
            stall_ms: 0.0,
            mgmt_ms: 20.0,
            cpu_ms: 640.0,
        };
        assert_eq!(compute_residual_ms(&t, false), 180.0);
        let b = bars(&t, TH, false);
        assert_eq!(b.compute_ms, Some(160.0));
        assert_eq!(b.flash_wait_ms, 300.0);
        assert_eq!(b.mgmt_ms, 20.0);
        assert_eq!(b.unattributed_ms, Some(20.0)); // 500 - 160 - 300 - 20
        // Serial: the lanes are not counted busy. 640 / (500 × 4) = 32 %.
        assert_eq!(cpu_busy_pct(&t, TH, false), Some(32.0));
        assert_eq!(
            b.fractions_of_wall(t.wall_ms),
            [Some(0.32), Some(0.6), Some(0.04), Some(0.04)]
        );
    }

    #[test]
    fn overlap_token_by_hand_bars_exceed_wall() {
        // io 600 is the lanes' summed busy time (> wall); stall 50 is what compute lost.
        let t = TokenTimes {
            wall_ms: 200.0,
            io_ms: 600.0,
            stall_ms: 50.0,
            mgmt_ms: 10.0,
            cpu_ms: 1200.0,
        };
        assert_eq!(compute_residual_ms(&t, true), 140.0); // 200 - 50 - 10
        let b = bars(&t, TH, true);
        assert_eq!(b.compute_ms, Some(300.0)); // 1200 / 4: includes the lanes' CPU
        assert_eq!(b.flash_wait_ms, 50.0);
        // 300 + 50 + 10 = 360 > 200: unattributed clamps at 0, nothing is rescaled.
        assert_eq!(b.unattributed_ms, Some(0.0));
        // 1200 / (200 × (4 + 4)) = 75 %, a different quantity from the compute bar.
        assert_eq!(cpu_busy_pct(&t, TH, true), Some(75.0));
        assert_eq!(busy_threads(TH, true), 8);
    }

    #[test]
    fn residual_clamps_and_unmeasured_cpu() {
        let t = TokenTimes {
            wall_ms: 100.0,
            io_ms: 150.0,
            stall_ms: 0.0,
            mgmt_ms: 5.0,
            cpu_ms: 0.0,
        };
        assert_eq!(compute_residual_ms(&t, false), 0.0);
        let b = bars(&t, TH, false);
        assert_eq!(b.compute_ms, None);
        assert_eq!(b.unattributed_ms, None);
        assert_eq!(cpu_busy_pct(&t, TH, false), None);
    }

    #[test]
    fn done_averages_read_flash_as_measured() {
        let d = Done {
            tok_s: 4.0,
            io_s_tok: 0.3,
            stall_s_tok: 0.05,
            mgmt_s_tok: 0.01,
            cpu_s_tok: 0.6,
            compute_s_tok: 0.19,
            ..Done::default()
        };
        let t = TokenTimes::from_done(&d).expect("tok_s > 0");
        assert_eq!(t.wall_ms, 250.0);
        let b = bars(&t, TH, true);
        assert_eq!(b.flash_wait_ms, 50.0);
        assert_eq!(b.compute_ms, Some(150.0));
        assert_eq!(b.unattributed_ms, Some(40.0)); // 250 - 150 - 50 - 10
        assert_eq!(TokenTimes::from_done(&Done::default()), None);
        assert_eq!(cli_occupancy_pct(0.6, 0.25, 4), Some(60.0));
    }

    #[test]
    fn real_row_from_metrics_csv() {
        // 2026-07-13/qwen_base_ov.csv step 1 (overlap, 9 columns, no cpu_ms):
        // 1,256,370.861,864.208,128.620,670187520,4.51,174.663,67.578
        let row = TokenRow {
            wall_ms: Some(370.861),
            io_ms: Some(864.208),
            compute_ms: Some(128.620),
            stall_ms: Some(174.663),
            mgmt_ms: Some(67.578),
            ..TokenRow::default()
        };
        let t = TokenTimes::from_row(&row).expect("wall");
        // The engine's residual is reproduced to the CSV's 3 decimals.
        assert!((compute_residual_ms(&t, true) - 128.620).abs() < 0.001);
        // Inverting the residual in serial terms would be nonsense: io exceeds the wall.
        assert_eq!(compute_residual_ms(&t, false), 0.0);
    }
}
