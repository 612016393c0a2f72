//! Prefill splitting: a prompt decoded as one batch routes many tokens, and each layer must hold
//! the union of their experts at once (the expert matmul of a batch reads them all). When that
//! union can exceed the cache budget, the prompt is decoded in chunks small enough that it
//! cannot.
//!
//! The worst-case union of a chunk of `u` tokens in a layer is `min(u·k, n_expert)` experts. A
//! whole layer that fits the budget needs no split; otherwise the chunk is the largest `u` with
//! `u·k` experts of the widest layer within the budget, and at least one token (a budget below
//! one token's layer load cannot be met by splitting: that load is the floor every decode pays).
//! With the split and eviction before reading, the experts resident during a load never exceed
//! `max(budget, one token's layer load)`.
//!
//! `--cache-mb 0` (cache off) is not split: it promises only that no layer other than the
//! current one stays resident, and a prompt's union is the current layer's experts. Splitting it
//! would multiply the prefill's reads by up to `n_expert / k`.
//!
//! Splitting changes the batches llama.cpp computes, and a matmul's result depends on its batch
//! size, so the split run's logits equal those of a resident run with `--ubatch <chunk>` (which
//! cuts the same batches), not those of an unsplit one. The chunk boundaries sit at absolute
//! positions (multiples of the chunk), so a prompt continued later is cut where a one-shot run
//! of the whole text would be.

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

/// The split for a cache of `budget` bytes over layers of `n_expert` experts of at most
/// `max_entry_bytes` each, routed `top_k` per token; `None` when no split is needed (cache off,
/// or a whole layer fits).
pub fn split_for(
    budget: u64,
    n_expert: usize,
    top_k: usize,
    max_entry_bytes: u64,
) -> Option<PrefillSplit> {
    let k = top_k.clamp(1, n_expert.max(1)) as u64;
    let whole_layer_bytes = n_expert as u64 * max_entry_bytes;
    if budget == 0 || max_entry_bytes == 0 || whole_layer_bytes <= budget {
        return None;
    }
    let chunk = (budget / (k * max_entry_bytes)).max(1);
    // below a whole layer, chunk·k < n_expert, so the union bound is chunk·k experts
    let chunk = usize::try_from(chunk).unwrap_or(usize::MAX);
    Some(PrefillSplit {
        chunk,
        chunk_union_bytes: (chunk as u64 * k).min(n_expert as u64) * max_entry_bytes,
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
            "prefill split into decodes of ≤{} tokens: a whole layer's experts ({:.1} MiB) exceed --cache-mb {budget_mb}, a {}-token batch routes ≤{:.1} MiB per layer (a resident run matches with --ubatch {})",
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
    fn no_split_when_the_cache_is_off_or_a_whole_layer_fits() {
        assert_eq!(split_for(0, 128, 8, 2 * MIB), None);
        assert_eq!(split_for(256 * MIB, 128, 8, 2 * MIB), None);
        assert_eq!(
            split_for(255 * MIB, 128, 8, 2 * MIB).map(|s| s.chunk),
            Some(15)
        );
    }

    #[test]
    fn the_chunk_keeps_its_union_within_the_budget() {
        // the Qwen3-30B-A3B shape: 128 experts of 2.53 MiB, top-8
        let entry = 2_654_208;
        for budget_mb in [30u64, 100, 200, 300] {
            let s = split_for(budget_mb * MIB, 128, 8, entry).unwrap();
            assert!(s.chunk_union_bytes <= budget_mb * MIB, "{budget_mb}: {s:?}");
            // one more token would not fit
            assert!(
                (s.chunk as u64 + 1) * 8 * entry > budget_mb * MIB,
                "{budget_mb}"
            );
        }
        // a whole layer is 324 MiB: a 1 GiB cache never splits, 256 MiB prefills 12 at a time
        assert_eq!(split_for(1024 * MIB, 128, 8, entry), None);
        assert_eq!(split_for(256 * MIB, 128, 8, entry).unwrap().chunk, 12);
    }

    #[test]
    fn a_budget_below_one_token_still_prefills_one_token_at_a_time() {
        let s = split_for(MIB, 8, 2, 200 * 1024 * 3).unwrap();
        assert_eq!(s.chunk, 1);
        assert!(s.chunk_union_bytes > MIB, "the floor every decode pays");
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
