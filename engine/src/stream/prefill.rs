//! Prefill splitting: a prompt decoded as one batch routes many tokens, and each layer must hold
//! the union of their experts at once (the expert matmul of a batch reads them all). When that
//! union can exceed the cache budget, the prompt is decoded in chunks.
//!
//! The budget rule (issue #21). The cache holds at most `budget` bytes *beyond the current
//! layer's load* (stream::cache), so the layer being computed is staged transiently on top of the
//! budget, for that layer only, and is evicted before the next layer reads. That staging is
//! bounded by one whole layer's experts, `n_expert × max entry`, whatever the batch. So once a
//! batch is big enough that its union can be the whole layer, a bigger batch costs no more expert
//! memory, only activation memory, which grows linearly with the batch; and a smaller batch
//! costs reads (each chunk re-reads its union) and per-decode overhead (a 628-token prompt in
//! 2-token chunks was 18–28× slower than unconstrained on the tiny model).
//!
//! So when a whole layer does not fit the budget — including `--cache-mb 0` (cache off) — the
//! prompt is decoded in chunks of [`WAVE_TOKENS`] tokens (at least `⌈n_expert / k⌉`, the smallest
//! batch whose union can be a whole layer). The earlier rule — the largest `u` whose `u·k`
//! experts fit the budget — always gives a smaller batch than that (`u·k < n_expert` below a
//! whole layer), down to one token. The expert memory of a prefill is then at most
//! `budget + one whole layer`, and its activation memory that of a `wave`-token batch — the same
//! for every budget below a layer, so cache off never peaks above a 1 MiB cache (before, cache
//! off prefilled the whole prompt in one batch and its compute buffer grew with the prompt).
//!
//! Splitting changes the batches llama.cpp computes, and a matmul's result depends on its batch
//! size, so the split run's logits equal those of a resident run with `--ubatch <chunk>` (which
//! cuts the same batches), not those of an unsplit one. The chunk boundaries sit at absolute
//! positions (multiples of the chunk), so a prompt continued later is cut where a one-shot run
//! of the whole text would be.

/// Tokens per prefill decode when a whole layer does not fit the budget: the batch past which
/// more tokens add activation memory but no expert memory. 64 is where the tiny model's
/// prefill reaches the unconstrained rate (`scripts/bench-prefill-budget.sh`: a 628-token prompt
/// in 64-token batches ran at 1.1× the unconstrained wall, in 16-token batches at 11.7×) while
/// its peak RSS stays within 0.3 MiB of a 16-token batch's.
pub const WAVE_TOKENS: usize = 64;

/// How a prefill is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillSplit {
    /// Tokens per decode.
    pub chunk: usize,
    /// Worst-case expert bytes one chunk routes in the widest layer.
    pub chunk_union_bytes: u64,
    /// Every expert of the widest layer (what an unsplit long prompt can route).
    pub whole_layer_bytes: u64,
}

/// The split for a cache of `budget` bytes (0 = cache off) over layers of `n_expert` experts of
/// at most `max_entry_bytes` each, routed `top_k` per token; `None` when a whole layer fits the
/// budget (nothing to split).
pub fn split_for(
    budget: u64,
    n_expert: usize,
    top_k: usize,
    max_entry_bytes: u64,
) -> Option<PrefillSplit> {
    let k = top_k.clamp(1, n_expert.max(1)) as u64;
    let whole_layer_bytes = n_expert as u64 * max_entry_bytes;
    if max_entry_bytes == 0 || (budget > 0 && whole_layer_bytes <= budget) {
        return None;
    }
    // A batch that fits the budget without staging has u·k < n_expert, so it is always smaller
    // than the wave: below a whole layer the wave is the chunk, whatever the budget.
    let chunk = WAVE_TOKENS.max(n_expert.div_ceil(k as usize));
    Some(PrefillSplit {
        chunk,
        chunk_union_bytes: (chunk as u64)
            .saturating_mul(k)
            .min(n_expert as u64)
            .saturating_mul(max_entry_bytes),
        whole_layer_bytes,
    })
}

/// The cut positions strictly inside `(from, to)`: every multiple of `chunk`.
pub fn cut_points(from: usize, to: usize, chunk: usize) -> Vec<usize> {
    if chunk == 0 {
        return Vec::new();
    }
    let first = (from / chunk + 1) * chunk;
    (first..to).step_by(chunk).collect()
}

impl PrefillSplit {
    /// The load-time note (stderr).
    pub fn note(&self, budget_mb: u64) -> String {
        const MIB: f64 = 1024.0 * 1024.0;
        format!(
            "prefill split into decodes of ≤{} tokens: a whole layer's experts ({:.1} MiB) exceed --cache-mb {budget_mb}, a {}-token batch routes ≤{:.1} MiB per layer, staged beyond the cache for that layer only (a resident run matches with --ubatch {})",
            self.chunk,
            self.whole_layer_bytes as f64 / MIB,
            self.chunk,
            self.chunk_union_bytes as f64 / MIB,
            self.chunk
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn no_split_only_when_a_whole_layer_fits() {
        assert_eq!(split_for(256 * MIB, 128, 8, 2 * MIB), None);
        assert_eq!(split_for(0, 128, 8, 2 * MIB).map(|s| s.chunk), Some(64));
        assert_eq!(
            split_for(255 * MIB, 128, 8, 2 * MIB).map(|s| s.chunk),
            Some(64)
        );
    }

    #[test]
    fn cache_off_and_a_tiny_cache_cut_the_same_batches() {
        // the tiny preset's shape: 8 experts of 200 KiB, top-2
        let entry = 200 * 1024;
        let off = split_for(0, 8, 2, entry).unwrap();
        let one = split_for(MIB, 8, 2, entry).unwrap();
        assert_eq!(off, one);
        assert_eq!(off.chunk, WAVE_TOKENS);
        // the staging bound is one whole layer, not the chunk's k·u experts
        assert_eq!(off.chunk_union_bytes, off.whole_layer_bytes);
    }

    #[test]
    fn below_a_whole_layer_the_chunk_is_the_wave() {
        // the Qwen3-30B-A3B shape: 128 experts of 2.53 MiB, top-8; a whole layer is 324 MiB
        let entry = 2_654_208;
        assert_eq!(split_for(1024 * MIB, 128, 8, entry), None);
        for budget_mb in [0u64, 30, 100, 200, 300] {
            let s = split_for(budget_mb * MIB, 128, 8, entry).unwrap();
            assert_eq!(s.chunk, WAVE_TOKENS, "{budget_mb}");
            assert!(s.chunk_union_bytes <= s.whole_layer_bytes, "{budget_mb}");
        }
        // many experts with a small top-k: the wave grows until its union can be a whole layer
        assert_eq!(split_for(MIB, 512, 2, entry).unwrap().chunk, 256);
        // just below a whole layer: still the wave, a layer's union staged
        assert_eq!(split_for(1023 * MIB, 1024, 1, MIB).unwrap().chunk, 1024);
    }

    #[test]
    fn cuts_sit_at_absolute_multiples() {
        assert_eq!(cut_points(0, 10, 4), vec![4, 8]);
        assert_eq!(cut_points(5, 13, 4), vec![8, 12]);
        assert_eq!(cut_points(0, 8, 4), vec![4]);
        assert!(cut_points(3, 4, 4).is_empty());
        assert!(cut_points(0, 10, 0).is_empty());
    }
}
