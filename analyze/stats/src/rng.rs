//! A tiny seeded generator so resampling is reproducible without a dependency.

/// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, passes BigCrush, trivially seedable.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fully determined by `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform index in `0..n` without modulo bias (Lemire's method). `n` must be > 0.
    pub fn below(&mut self, n: usize) -> usize {
        let n64 = n as u64;
        loop {
            let x = self.next_u64();
            let m = u128::from(x) * u128::from(n64);
            let low = m as u64;
            if low >= n64.wrapping_neg() % n64 {
                return (m >> 64) as usize;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_in_range() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = SplitMix64::new(7);
        let mut seen = [0usize; 5];
        for _ in 0..5000 {
            let i = c.below(5);
            assert!(i < 5);
            seen[i] += 1;
        }
        assert!(seen.iter().all(|&s| s > 800), "roughly uniform: {seen:?}");
    }
}
