//! When to put the compute threads to sleep during a layer's reads.
//!
//! Sleeping saves the core ggml's workers would spin on, but waking them costs latency (measured
//! on this machine's virtual CPUs: about a millisecond per layer, +10 % token time at a 4 GiB
//! cache where most layers read only a few MiB). So the workers sleep only when the reads are
//! expected to last several wake-ups: bytes ÷ the lanes' recent bandwidth.

/// A wait shorter than this keeps the workers spinning.
pub const MIN_SLEEP_NS: f64 = 5e6;

/// The bandwidth assumed before any read was timed (bytes/s).
const FIRST_GUESS_BPS: f64 = 1e9;

/// The weight of the newest layer in the bandwidth average.
const EWMA_WEIGHT: f64 = 0.2;

/// Predicts a layer's read wait from the lanes' recent bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PausePolicy {
    bytes_per_s: f64,
}

impl Default for PausePolicy {
    fn default() -> Self {
        Self {
            bytes_per_s: FIRST_GUESS_BPS,
        }
    }
}

impl PausePolicy {
    /// Whether reading `bytes` is expected to take long enough to sleep through.
    pub fn should_sleep(&self, bytes: u64) -> bool {
        bytes as f64 / self.bytes_per_s * 1e9 >= MIN_SLEEP_NS
    }

    /// Learns from a layer that read `bytes` in `ns` of waiting.
    pub fn record(&mut self, bytes: u64, ns: u64) {
        if bytes == 0 || ns == 0 {
            return;
        }
        let bps = bytes as f64 / (ns as f64 / 1e9);
        self.bytes_per_s = (1.0 - EWMA_WEIGHT) * self.bytes_per_s + EWMA_WEIGHT * bps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_reads_sleep_short_ones_spin() {
        let p = PausePolicy::default();
        // 1 GB/s first guess: 5 MB is the 5 ms line
        assert!(!p.should_sleep(2_000_000));
        assert!(p.should_sleep(20_000_000));
    }

    #[test]
    fn the_line_moves_with_the_measured_bandwidth() {
        let mut p = PausePolicy::default();
        for _ in 0..40 {
            p.record(10_000_000, 100_000_000); // 100 MB/s: a slow card
        }
        assert!(p.should_sleep(1_000_000), "1 MB at 100 MB/s is 10 ms");
        for _ in 0..40 {
            p.record(40_000_000, 10_000_000); // 4 GB/s
        }
        assert!(!p.should_sleep(10_000_000), "10 MB at 4 GB/s is 2.5 ms");
        p.record(0, 5);
        p.record(5, 0);
        assert!(!p.should_sleep(10_000_000), "empty samples change nothing");
    }
}
