//! A small, fast, seedable PRNG (wyrand) and seed derivation (one SplitMix64 step, bmoe-stats').
//!
//! Bulk quant data is random bytes, so speed matters more than statistical quality: wyrand fills
//! 8 bytes per step with one multiply.

/// Mix a 64-bit value (the first output of a SplitMix64 seeded with it); used to derive
/// independent seeds.
pub fn mix(z: u64) -> u64 {
    bmoe_stats::SplitMix64::new(z).next_u64()
}

/// A seed for `(seed, tensor name, page)`, independent across all three.
pub fn derive(seed: u64, name: &str, page: u64) -> u64 {
    // FNV-1a over the name, then mixed with the seed and the page index.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix(mix(seed ^ h).wrapping_add(page))
}

/// wyrand: 64-bit state, one multiply per output.
#[derive(Debug, Clone)]
pub struct WyRand(u64);

impl WyRand {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xA076_1D64_78BD_642F);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xE703_7ED1_A0B4_28DB);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// A uniform float in `[-1, 1)` built from bits (no division).
    #[inline]
    pub fn next_signed_unit(&mut self) -> f32 {
        let bits = (self.next_u64() >> 41) as u32; // 23 bits
        f32::from_bits(0x4000_0000 | bits) - 3.0 // [2, 4) - 3
    }

    /// Fill `out` with random bytes.
    pub fn fill_bytes(&mut self, out: &mut [u8]) {
        let mut chunks = out.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let v = self.next_u64().to_le_bytes();
            let n = rest.len();
            rest.copy_from_slice(&v[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_the_splitmix64_step_the_models_were_made_with() {
        // synthesised models (and the cached default one) must keep their bytes
        let old = |mut z: u64| {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        for z in [0, 1, 42, u64::MAX, 0x1234_5678_9abc_def0] {
            assert_eq!(mix(z), old(z));
        }
    }

    #[test]
    fn unit_floats_stay_in_range_and_streams_differ() {
        let mut r = WyRand::new(1);
        for _ in 0..10_000 {
            let f = r.next_signed_unit();
            assert!((-1.0..1.0).contains(&f), "{f}");
        }
        assert_ne!(derive(1, "a", 0), derive(1, "a", 1));
        assert_ne!(derive(1, "a", 0), derive(1, "b", 0));
        assert_ne!(derive(1, "a", 0), derive(2, "a", 0));
    }
}
