//! Self-speculation's shared half, and `--ngram`'s source: draft (the tokens that followed the
//! most recent longest match of the current suffix in the prompt and the generated text, or
//! the MTP head's, [`super::mtp`]), verify `[tok, drafts…]` in one decode with logits for every
//! position, keep the drafts the target's argmax agrees with, and trim the rejected positions
//! from the KV. A step with no drafts decodes plainly.
//!
//! Accepted tokens are exactly the target's greedy argmax at their positions; the verify
//! decode is a wider batch than a plain one, though, and a matmul's last bits depend on its
//! batch width, so a near-tie can still flip against an unspeculated run (the seed says so).

use super::decode::{Decoded, TokenLoop};
use super::pick::{argmax_except, logits_hash};
use super::{Engine, Turn};
use crate::cli::{NGRAM_MAX_MATCH, Spec};
use crate::error::EngineError;
use crate::ffi::Token;
use std::io::Write;
use std::time::Instant;

/// A verify decode's outcome: the decode, measured (its `batch` the group's size, 1 +
/// accepted), the drafts the target confirmed in order, and the target's pick after the last
/// confirmed token.
pub(super) type Verified = (Decoded, Vec<Token>, Token);

/// Where a speculation step's drafts come from. Everything around it — the verify decode of
/// `[tok, drafts…]`, acceptance against the argmax, the KV trim, the accounting — is shared
/// ([`Engine::verify`]), so a source (prompt lookup here, the MTP head in [`super::mtp`]) only
/// has to say what to draft.
pub(super) trait DraftSource {
    /// Up to `n` drafts to follow `history` (ending with the token about to be decoded; the
    /// n-gram source needs the prompt and the generated text before it, the head only that
    /// token); empty decodes plainly.
    ///
    /// # Errors
    /// A source that decodes (the MTP head) can fail as a decode does.
    fn draft(&mut self, history: &[Token], n: usize) -> Result<Vec<Token>, EngineError>;
}

/// Prompt lookup (`--ngram`): [`ngram_draft`] over the history.
pub(super) struct NgramSource {
    /// The shortest suffix match that drafts.
    pub(super) min_match: usize,
}

impl DraftSource for NgramSource {
    fn draft(&mut self, history: &[Token], n: usize) -> Result<Vec<Token>, EngineError> {
        Ok(ngram_draft(
            history,
            self.min_match,
            NGRAM_MAX_MATCH as usize,
            n,
        ))
    }
}

/// The n-gram source: for the longest suffix of `history` (between `min` and `max` tokens)
/// that also occurs earlier, the up to `n` tokens that followed its most recent earlier
/// occurrence (which may overlap the suffix itself). Empty when no suffix of `min` tokens
/// recurs.
pub fn ngram_draft(history: &[Token], min: usize, max: usize, n: usize) -> Vec<Token> {
    let len = history.len();
    if n == 0 || min == 0 || len < min + 1 {
        return Vec::new();
    }
    for l in (min..=max.min(len - 1)).rev() {
        let suffix = &history[len - l..];
        // the most recent earlier start j (j + l < len keeps at least one following token)
        if let Some(j) = (0..len - l).rev().find(|&j| &history[j..j + l] == suffix) {
            let from = j + l;
            return history[from..len.min(from + n)].to_vec();
        }
    }
    Vec::new()
}

impl Engine<'_> {
    /// Whether this turn speculates: `--ngram` or `--mtp`, greedy, and the next token is the
    /// model's own pick (not a benchmark feed or a forced text).
    pub(super) fn spec_on(&self) -> bool {
        !matches!(self.cfg.spec, Spec::Off)
            && self.sampler.is_none()
            && self.feed.is_none()
            && self.forced.is_empty()
    }

    /// This step's drafts (empty: decode plainly) and the time drafting took (ms), which
    /// includes the MTP head's catch-up after the previous decode. `generated` ends with the
    /// token about to be decoded, at `pos`.
    ///
    /// # Errors
    /// A failed MTP draft step.
    pub(super) fn draft(
        &mut self,
        turn: &Turn<'_>,
        generated: &[Token],
        (step, pos): (usize, i64),
        lp: &mut TokenLoop,
    ) -> Result<(Vec<Token>, f64), EngineError> {
        let carried = std::mem::take(&mut lp.catch_up_s);
        if !self.spec_on() {
            return Ok((Vec::new(), carried * 1e3));
        }
        let t0 = Instant::now();
        // each drafted token must be a step of this turn, and under --moe-stream the verify
        // decode's per-layer union must fit the cache as a prefill chunk does
        let room = turn.n_predict.saturating_sub(step);
        let width = self
            .prefill_chunk()
            .map_or(usize::MAX, |c| c.saturating_sub(1));
        let n = (self.cfg.spec.draft_max() as usize).min(room).min(width);
        let drafts = match (self.cfg.spec, generated.last()) {
            (_, None) | (Spec::Off, _) => Vec::new(),
            _ if n == 0 => Vec::new(),
            (Spec::Ngram { min_match, .. }, Some(_)) => {
                let history: Vec<Token> = turn.tokens.iter().chain(generated).copied().collect();
                NgramSource {
                    min_match: min_match as usize,
                }
                .draft(&history, n)?
            }
            (Spec::Mtp { .. }, Some(&tok)) => self.head_reads(lp, |e| e.mtp_draft(tok, pos, n))?,
        };
        let secs = t0.elapsed().as_secs_f64();
        if let Some(sp) = lp.spec_mut() {
            sp.drafted += drafts.len() as u64;
            sp.drafted_steps += u64::from(!drafts.is_empty());
            sp.draft_s += secs;
        }
        Ok((drafts, (secs + carried) * 1e3))
    }

    /// End of a speculated turn: the KV, and the MTP head's, hold exactly the turn's context
    /// (`end` positions) — no draft of the last step stays behind.
    ///
    /// # Errors
    /// A KV that refuses the trim.
    pub(super) fn trim_turn(&mut self, end: i64) -> Result<(), EngineError> {
        let end = i32::try_from(end).map_err(|_| EngineError::Internal("position overflow"))?;
        if !self.ctx.seq_rm(0, end, -1) {
            return Err(EngineError::Internal(
                "the KV cache refused to drop the turn's last drafts",
            ));
        }
        self.mtp_trim(end);
        Ok(())
    }

    /// Decodes `[tok, drafts…]` at `pos..` with logits everywhere, accepts drafts while the
    /// argmax agrees, and removes the rejected positions from the KV. `None` when a cancel
    /// aborted the decode.
    ///
    /// # Errors
    /// A failed decode, or a KV that refuses to drop the rejected tail.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn verify(
        &mut self,
        turn: &Turn<'_>,
        step: usize,
        tok: Token,
        drafts: &[Token],
        pos: i64,
        lp: &mut TokenLoop,
        note: &mut dyn Write,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Verified>, EngineError> {
        let group: Vec<Token> = std::iter::once(tok).chain(drafts.iter().copied()).collect();
        let head_bytes = lp.head_bytes;
        let Some(mut decoded) = self.decode_token(turn, step, &group, pos, lp, note, cancelled)?
        else {
            return Ok(None);
        };
        let mut accepted = Vec::new();
        for (i, &d) in drafts.iter().enumerate() {
            let logits = self.ctx.logits_ith(i as i32);
            // an end-of-generation draft is not kept: the turn ends at the pick instead,
            // exactly where an unspeculated run stops
            if argmax_except(logits, &self.banned) != d || self.ctx.model().is_eog(d) {
                break;
            }
            lp.hashes.push(logits_hash(logits));
            accepted.push(d);
        }
        let a = accepted.len();
        let logits = self.ctx.logits_ith(a as i32);
        lp.hashes.push(logits_hash(logits));
        let next = argmax_except(logits, &self.banned);
        if a < drafts.len() {
            let from = i32::try_from(pos + 1 + a as i64).unwrap_or(i32::MAX);
            if !self.ctx.seq_rm(0, from, -1) {
                return Err(EngineError::Internal(
                    "the KV cache refused to drop a rejected draft",
                ));
            }
        }
        if self.cfg.dump_logits_hash {
            // the gates compare drafts, not only their outcome
            let list: Vec<String> = drafts.iter().map(Token::to_string).collect();
            let _ = writeln!(
                note,
                "spec-draft step={step} token={tok} drafts={} accepted={a}",
                list.join(",")
            );
        }
        decoded.batch = 1 + a as u64;
        if let Some(sp) = lp.spec_mut() {
            sp.accepted += a as u64;
            sp.decodes += 1;
            // the row also carries the head's reads since the previous decode
            sp.verify_read_bytes += decoded.row.read_bytes.saturating_sub(head_bytes);
        }
        Ok(Some((decoded, accepted, next)))
    }
}

#[cfg(test)]
mod tests {
    use super::ngram_draft;

    #[test]
    fn the_longest_suffix_match_drafts_what_followed_it_most_recently() {
        // suffix [1,2] occurs at 0 and 4; the most recent (4) is followed by 9
        let h = [1, 2, 3, 7, 1, 2, 9, 5, 1, 2];
        assert_eq!(ngram_draft(&h, 1, 12, 3), vec![9, 5, 1]);
        // a longer match wins over a more recent shorter one
        let h = [5, 1, 2, 8, 0, 2, 6, 5, 1, 2];
        assert_eq!(ngram_draft(&h, 1, 12, 2), vec![8, 0]);
    }

    #[test]
    fn no_match_of_the_minimum_length_drafts_nothing() {
        let h = [1, 2, 3, 4, 5];
        assert!(ngram_draft(&h, 1, 12, 3).is_empty());
        let h = [1, 2, 3, 1, 9, 2];
        assert!(ngram_draft(&h, 2, 12, 3).is_empty());
        assert_eq!(ngram_draft(&h, 1, 12, 3), vec![3, 1, 9]);
    }

    #[test]
    fn a_match_may_overlap_the_suffix() {
        // [7,7,7]: the suffix [7,7] recurs at 0, followed by the suffix's own 7
        assert_eq!(ngram_draft(&[7, 7, 7], 1, 12, 4), vec![7]);
    }
}
