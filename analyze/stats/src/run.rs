//! One run's decode statistics from its per-token wall times: the warm-up trim and tok/s.
//!
//! bmoe-analyze and bmoe-bench report the same run, so both build these figures here; they
//! differ only in what a row without a wall time is, and each names its rule by the constructor
//! it calls.

/// A run's decode token times after the warm-up trim, with its decode rate.
///
/// The fields are public so a caller can state a run directly (tests, synthetic runs); the
/// constructors keep `tok_s` consistent with `wall_ms`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStats {
    /// Per-token wall times kept after the trim, ms, in run order (zero-wall rows included).
    pub wall_ms: Vec<f64>,
    /// Leading tokens dropped as warm-up.
    pub trimmed: usize,
    /// Decode rate, tokens / Σ `wall_ms` in seconds (llama-bench's `avg_ts` of one run); 0 when
    /// Σ `wall_ms` is 0.
    pub tok_s: f64,
}

impl RunStats {
    /// Drops the first `trim` values of `walls` (fewer when there are fewer) and computes tok/s
    /// over the rest.
    #[must_use]
    pub fn from_walls(walls: impl IntoIterator<Item = f64>, trim: usize) -> Self {
        let mut wall_ms: Vec<f64> = walls.into_iter().collect();
        let trimmed = trim.min(wall_ms.len());
        wall_ms.drain(..trimmed);
        // Summed left to right from +0.0, the order the reference scripts use, so the rate is
        // bit-identical to theirs.
        let total = wall_ms.iter().fold(0.0, |a, b| a + b);
        let tok_s = if total > 0.0 {
            wall_ms.len() as f64 / (total / 1000.0)
        } else {
            0.0
        };
        Self {
            wall_ms,
            trimmed,
            tok_s,
        }
    }

    /// bench-analyze's rule: a row without a wall time is not a token, so the trim counts only
    /// rows that have one.
    #[must_use]
    pub fn skipping_missing(walls: impl IntoIterator<Item = Option<f64>>, trim: usize) -> Self {
        Self::from_walls(walls.into_iter().flatten(), trim)
    }

    /// `bmoe-bench report`'s rule: a row without a wall time is a token that took 0 ms, so the
    /// trim counts rows and the kept walls line up with the kept rows.
    #[must_use]
    pub fn zero_filling_missing(walls: impl IntoIterator<Item = Option<f64>>, trim: usize) -> Self {
        Self::from_walls(walls.into_iter().map(|w| w.unwrap_or(0.0)), trim)
    }

    /// Tokens kept after the trim.
    #[must_use]
    pub fn tokens(&self) -> usize {
        self.wall_ms.len()
    }

    /// Per-token rates `1000 / wall` in ascending order; zero-wall tokens have no rate and are
    /// left out.
    #[must_use]
    pub fn token_rates(&self) -> Vec<f64> {
        let mut tps: Vec<f64> = self
            .wall_ms
            .iter()
            .filter(|&&w| w > 0.0)
            .map(|w| 1000.0 / w)
            .collect();
        tps.sort_by(f64::total_cmp);
        tps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_and_rate() {
        let r = RunStats::from_walls([900.0, 100.0, 200.0, 0.0], 1);
        assert_eq!(r.wall_ms, [100.0, 200.0, 0.0]);
        assert_eq!((r.trimmed, r.tokens()), (1, 3));
        assert_eq!(r.tok_s, 3.0 / 0.3);
        assert_eq!(r.token_rates(), [5.0, 10.0]);
        let all = RunStats::from_walls([1.0, 2.0], 5);
        assert_eq!((all.trimmed, all.tokens(), all.tok_s), (2, 0, 0.0));
        assert_eq!(RunStats::from_walls([0.0, 0.0], 0).tok_s, 0.0);
    }

    #[test]
    fn the_two_rules_for_rows_without_a_wall() {
        let rows = [Some(50.0), None, Some(100.0), Some(100.0)];
        let skip = RunStats::skipping_missing(rows, 1);
        assert_eq!(
            (skip.wall_ms.as_slice(), skip.trimmed),
            (&[100.0, 100.0][..], 1)
        );
        let zero = RunStats::zero_filling_missing(rows, 1);
        assert_eq!(
            (zero.wall_ms.as_slice(), zero.trimmed),
            (&[0.0, 100.0, 100.0][..], 1)
        );
        assert_eq!((skip.tok_s, zero.tok_s), (10.0, 15.0));
    }
}
