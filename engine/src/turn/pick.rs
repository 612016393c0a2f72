//! How the next token is chosen, as plain functions: greedy argmax (with `--ignore-eos`'s bans),
//! the benchmark feed (`--feed-random`) — and the logits hash every gate compares. The engine's
//! `pick` (sampler, feed or forced text) is in `decode`.

use crate::ffi::{Model, Token};
use bmoe_stats::SplitMix64;

/// FNV-1a over the logits' bytes.
pub fn logits_hash(logits: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in logits {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The highest logit's token among those not in `banned` (sorted); the first on ties. With
/// everything banned (impossible for a real vocabulary) it falls back to token 0.
pub(super) fn argmax_except(logits: &[f32], banned: &[Token]) -> Token {
    let mut best: Option<usize> = None;
    for (i, &v) in logits.iter().enumerate() {
        if banned.binary_search(&(i as Token)).is_ok() {
            continue;
        }
        if best.is_none_or(|b| v > logits[b]) {
            best = Some(i);
        }
    }
    best.unwrap_or(0) as Token
}

/// Every end-of-generation token of the vocabulary, sorted: what `--ignore-eos` bans.
pub(super) fn eog_tokens(model: &Model) -> Vec<Token> {
    (0..model.n_vocab())
        .filter_map(|t| Token::try_from(t).ok())
        .filter(|&t| model.is_eog(t))
        .collect()
}

/// Seeded pseudo-random tokens for benchmark feeds (`--feed-random`).
#[derive(Debug, Clone)]
pub struct TokenFeed(SplitMix64);

impl TokenFeed {
    /// A feed seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    /// The next token in `0..n_vocab` for which `skip` is false (e.g. end-of-generation ids).
    pub fn next_token(&mut self, n_vocab: usize, skip: impl Fn(Token) -> bool) -> Token {
        loop {
            // a plain modulo, not `below`: recorded benchmark feeds must keep their tokens
            let t = (self.0.next_u64() % n_vocab.max(1) as u64) as Token;
            if !skip(t) {
                return t;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feed_is_seeded_and_skips() {
        let mut a = TokenFeed::new(7);
        let mut b = TokenFeed::new(7);
        let xs: Vec<Token> = (0..50).map(|_| a.next_token(10, |t| t == 3)).collect();
        let ys: Vec<Token> = (0..50).map(|_| b.next_token(10, |t| t == 3)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|&t| (0..10).contains(&t) && t != 3));
        assert!(xs.iter().collect::<std::collections::HashSet<_>>().len() > 5);
    }

    #[test]
    fn feed_keeps_the_recorded_sequence() {
        // the tokens the feed gave before it shared bmoe-stats' generator: benchmark inputs
        // recorded in bench-data must stay reproducible
        let mut f = TokenFeed::new(1);
        let xs: Vec<Token> = (0..6).map(|_| f.next_token(1000, |_| false)).collect();
        let mut state: u64 = 1;
        let expected: Vec<Token> = (0..6)
            .map(|_| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                (z % 1000) as Token
            })
            .collect();
        assert_eq!(xs, expected);
    }

    #[test]
    fn hash_and_argmax() {
        assert_ne!(logits_hash(&[1.0, 2.0]), logits_hash(&[2.0, 1.0]));
        assert_eq!(argmax_except(&[0.5, 3.0, 3.0, -1.0], &[]), 1);
    }

    #[test]
    fn argmax_skips_banned_tokens() {
        let logits = [0.5, 3.0, 3.0, -1.0, 9.0];
        assert_eq!(argmax_except(&logits, &[4]), 1);
        assert_eq!(argmax_except(&logits, &[1, 4]), 2);
        assert_eq!(argmax_except(&logits, &[1, 2, 4]), 0);
        assert_eq!(argmax_except(&[-2.0, -1.0], &[1]), 0);
    }
}
