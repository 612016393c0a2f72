//! Percentile bootstrap confidence intervals (design.md "Statistics": 2000 resamples,
//! percentile interval, fixed seed).

use crate::{SplitMix64, mean, percentile_linear};

/// A point estimate with a two-sided confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootstrapCi {
    /// The statistic on the original sample.
    pub estimate: f64,
    /// Lower bound of the interval.
    pub low: f64,
    /// Upper bound of the interval.
    pub high: f64,
}

/// A ratio of two means with its bootstrap interval (`a / b`).
pub type RatioCi = BootstrapCi;

fn interval(mut stats: Vec<f64>, level: f64) -> (f64, f64) {
    stats.sort_by(f64::total_cmp);
    let alpha = (1.0 - level) / 2.0;
    (
        percentile_linear(&stats, alpha),
        percentile_linear(&stats, 1.0 - alpha),
    )
}

fn resample_mean(values: &[f64], rng: &mut SplitMix64) -> f64 {
    let n = values.len();
    let mut sum = 0.0;
    for _ in 0..n {
        sum += values[rng.below(n)];
    }
    sum / n as f64
}

/// Bootstrap CI of the mean of `values`: `resamples` resamples with replacement, percentile
/// interval at `level` (e.g. 0.95), generator seeded with `seed`. `None` when `values` is empty
/// or `resamples` is 0.
#[must_use]
pub fn bootstrap_mean_ci(
    values: &[f64],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Option<BootstrapCi> {
    if values.is_empty() || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64::new(seed);
    let stats: Vec<f64> = (0..resamples)
        .map(|_| resample_mean(values, &mut rng))
        .collect();
    let (low, high) = interval(stats, level);
    Some(BootstrapCi {
        estimate: mean(values),
        low,
        high,
    })
}

/// Bootstrap CI of `mean(a) / mean(b)`, resampling the two samples independently (two separate
/// runs are independent measurements). `None` when either sample is empty, `resamples` is 0, or
/// `mean(b)` is 0.
#[must_use]
pub fn bootstrap_ratio_of_means_ci(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Option<RatioCi> {
    if a.is_empty() || b.is_empty() || resamples == 0 {
        return None;
    }
    let mb = mean(b);
    if mb == 0.0 {
        return None;
    }
    let mut rng = SplitMix64::new(seed);
    let mut stats = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let ra = resample_mean(a, &mut rng);
        let rb = resample_mean(b, &mut rng);
        if rb != 0.0 {
            stats.push(ra / rb);
        }
    }
    if stats.is_empty() {
        return None;
    }
    let (low, high) = interval(stats, level);
    Some(RatioCi {
        estimate: mean(a) / mb,
        low,
        high,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_contains_the_mean_and_is_reproducible() {
        let v: Vec<f64> = (0..200).map(|i| 100.0 + f64::from(i % 17)).collect();
        let a = bootstrap_mean_ci(&v, 2000, 0.95, 1).expect("non-empty");
        let b = bootstrap_mean_ci(&v, 2000, 0.95, 1).expect("non-empty");
        assert_eq!(a, b);
        assert!(a.low < a.estimate && a.estimate < a.high, "{a:?}");
        // The CI of a mean shrinks like 1/sqrt(n): far narrower than the data's range (0..16).
        assert!(a.high - a.low < 2.0, "{a:?}");
    }

    #[test]
    fn constant_sample_has_zero_width() {
        let ci = bootstrap_mean_ci(&[5.0; 10], 500, 0.95, 3).expect("non-empty");
        assert_eq!((ci.low, ci.estimate, ci.high), (5.0, 5.0, 5.0));
    }

    #[test]
    fn ratio_ci_brackets_the_true_ratio() {
        let a: Vec<f64> = (0..100).map(|i| 200.0 + f64::from(i % 7)).collect();
        let b: Vec<f64> = (0..100).map(|i| 100.0 + f64::from(i % 5)).collect();
        let r = bootstrap_ratio_of_means_ci(&a, &b, 2000, 0.95, 9).expect("valid");
        assert!(r.low < r.estimate && r.estimate < r.high);
        assert!(r.low > 1.9 && r.high < 2.1, "{r:?}");
        assert!(bootstrap_ratio_of_means_ci(&a, &[0.0, 0.0], 100, 0.95, 1).is_none());
        assert!(bootstrap_mean_ci(&[], 100, 0.95, 1).is_none());
    }
}
