//! The seed's `stall_ms`: the union of the intervals during which at least one compute thread
//! was blocked on a streamed expert. Overlapping waits count once; a reading taken mid-stall
//! includes the open interval up to that instant.

use std::time::Instant;

/// Accumulates the union of stall intervals from waits that open and close in any order.
#[derive(Debug, Clone, Default)]
pub struct StallClock {
    /// Waits open now.
    open: u64,
    /// When the current union interval opened (while `open > 0`).
    since: Option<Instant>,
    /// Closed union intervals, ns.
    closed_ns: u64,
}

impl StallClock {
    /// A wait opens at `now`.
    pub fn open(&mut self, now: Instant) {
        if self.open == 0 {
            self.since = Some(now);
        }
        self.open += 1;
    }

    /// `n` waits close at `now` (more than are open is clamped: a wait closes once).
    pub fn close(&mut self, n: u64, now: Instant) {
        if n == 0 || self.open == 0 {
            return;
        }
        self.open = self.open.saturating_sub(n);
        if self.open == 0
            && let Some(s) = self.since.take()
        {
            self.closed_ns += now.saturating_duration_since(s).as_nanos() as u64;
        }
    }

    /// Waits open now.
    #[cfg(test)]
    pub fn waiting(&self) -> u64 {
        self.open
    }

    /// The union so far, ns, the open interval counted up to `now`.
    pub fn total_ns(&self, now: Instant) -> u64 {
        let open = match self.since {
            Some(s) if self.open > 0 => now.saturating_duration_since(s).as_nanos() as u64,
            _ => 0,
        };
        self.closed_ns + open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn overlapping_waits_count_once() {
        let t0 = Instant::now();
        let mut c = StallClock::default();
        c.open(at(t0, 0)); // [0, 10)
        c.open(at(t0, 5)); // [5, 15)
        c.close(1, at(t0, 10));
        c.close(1, at(t0, 15));
        assert_eq!(c.total_ns(at(t0, 100)), 15_000_000);
    }

    #[test]
    fn nested_waits_count_the_outer_one() {
        let t0 = Instant::now();
        let mut c = StallClock::default();
        c.open(at(t0, 0)); // [0, 20)
        c.open(at(t0, 5)); // [5, 8) inside
        c.close(1, at(t0, 8));
        assert_eq!(c.waiting(), 1);
        c.close(1, at(t0, 20));
        assert_eq!(c.total_ns(at(t0, 50)), 20_000_000);
    }

    #[test]
    fn disjoint_waits_add_and_gaps_do_not() {
        let t0 = Instant::now();
        let mut c = StallClock::default();
        c.open(at(t0, 0));
        c.close(1, at(t0, 3));
        c.open(at(t0, 10));
        c.close(1, at(t0, 14));
        assert_eq!(c.total_ns(at(t0, 30)), 7_000_000);
    }

    #[test]
    fn an_open_interval_counts_up_to_the_reading() {
        let t0 = Instant::now();
        let mut c = StallClock::default();
        c.open(at(t0, 2));
        assert_eq!(c.total_ns(at(t0, 2)), 0);
        assert_eq!(c.total_ns(at(t0, 9)), 7_000_000);
        // several waits closing together, and a stray close, leave it consistent
        c.open(at(t0, 3));
        c.close(5, at(t0, 12));
        c.close(1, at(t0, 13));
        assert_eq!(c.waiting(), 0);
        assert_eq!(c.total_ns(at(t0, 40)), 10_000_000);
    }
}
