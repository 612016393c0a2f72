//! Percentiles and central values.
//!
//! The reference scripts use three different percentile rules; each has its own function so a
//! caller names the rule it reproduces instead of passing a flag.

/// Linear interpolation at fractional index `q·(n−1)` (numpy "linear", Excel PERCENTILE.INC).
///
/// `sorted` must be ascending. Returns 0.0 for an empty slice.
#[must_use]
pub fn percentile_linear(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let n = sorted.len();
    let i = q * (n - 1) as f64;
    let lo_f = i.floor().max(0.0);
    let lo = (lo_f as usize).min(n - 1);
    let hi = (lo + 1).min(n - 1);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo as f64)
}

/// Nearest rank by floor: `v[min(n−1, ⌊q·n⌋)]` (route-analyze reuse, decode-analyze latency).
///
/// Returns `None` for an empty slice.
#[must_use]
pub fn percentile_nearest_floor<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let idx = ((q * n as f64).floor().max(0.0) as usize).min(n - 1);
    Some(sorted[idx])
}

/// `v[min(n−1, ⌊q·(n−1)⌋)]` (bench-pr23-summary's p95). Returns `None` for an empty slice.
#[must_use]
pub fn percentile_floor_index<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let idx = ((q * (n - 1) as f64).floor().max(0.0) as usize).min(n - 1);
    Some(sorted[idx])
}

/// Arithmetic mean, summed left to right (the order Python's `sum` uses). 0.0 when empty.
#[must_use]
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().fold(0.0, |a, b| a + b) / values.len() as f64
}

/// Median of an ascending slice (mean of the two middle values for even n). 0.0 when empty.
#[must_use]
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_matches_the_spec_examples() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert!((percentile_linear(&v, 0.05) - 1.15).abs() < 1e-12);
        assert!((percentile_linear(&v, 0.5) - 2.5).abs() < 1e-12);
        assert!((percentile_linear(&v, 0.95) - 3.85).abs() < 1e-12);
        assert_eq!(percentile_linear(&[], 0.5), 0.0);
        assert_eq!(percentile_linear(&[7.0], 0.9), 7.0);
    }

    #[test]
    fn nearest_floor_and_floor_index_differ() {
        let v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile_nearest_floor(&v, 0.5), Some(6));
        assert_eq!(percentile_nearest_floor(&v, 0.9), Some(10));
        assert_eq!(percentile_floor_index(&v, 0.95), Some(9));
        assert_eq!(percentile_nearest_floor::<i32>(&[], 0.5), None);
    }

    #[test]
    fn median_even_and_odd() {
        assert_eq!(median(&[1.0, 2.0, 3.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 3.0, 10.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
