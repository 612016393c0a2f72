//! `--mtp` self-speculation: the model's own MTP head drafts, the shared verify loop
//! ([`super::speculate`]) keeps what the target's argmax confirms.
//!
//! The head runs on (token at p, the target's hidden state of p − 1) pairs in a context of its
//! own ([`crate::ffi::MtpHead`], owned by the target [`crate::ffi::Context`] and sharing its
//! eval hook, so under `--moe-stream` the head block's routed experts load through the cache).
//! Its KV must hold every confirmed position, so after each target decode it *catches up*: it
//! processes the decode's confirmed tokens — the prompt after a prefill, `[tok, accepted…]`
//! after a verify decode, `[tok]` after a plain one — each paired with the target's state of the
//! position before, and keeps the last one's state for the next draft. Drafting then runs the
//! head from the token about to be decoded and its own states, one draft per step, and drops
//! the drafted positions from the head's KV again (the catch-up writes the accepted ones from
//! the target's states).

use super::Engine;
use super::decode::TokenLoop;
use super::pick::argmax_except;
use super::speculate::DraftSource;
use crate::error::EngineError;
use crate::ffi::{DecodeError, MtpHead, Token};
use crate::graph::hook::MoeHook;

/// How many of the head's best candidates its draft probability is taken over: llama.cpp's MTP
/// driver drafts through a top-10 sampler and compares `--mtp-p-min` with the first
/// candidate's probability among those ten.
const P_MIN_TOP_K: usize = 10;

/// The target's side of the head, carried from one decode to the next.
pub(super) struct MtpState {
    /// The target's hidden state at position `pos` (n_embd floats).
    state: Vec<f32>,
    /// The position `state` belongs to; `None` before the first decode.
    pos: Option<i64>,
    /// `--mtp-p-min`.
    pub(super) p_min: f32,
}

impl MtpState {
    /// No state yet: the head's first pair gets zeros, as llama.cpp's driver starts.
    pub(super) fn new(n_embd: usize, p_min: f32) -> Self {
        Self {
            state: vec![0.0; n_embd],
            pos: None,
            p_min,
        }
    }

    /// The state to pair with the token at `pos`: the target's state of `pos − 1` when that is
    /// the one kept, zeros otherwise (a KV truncated by a session, the first position) — the
    /// drafts are then worse, never wrong: the target verifies them.
    fn paired(&self, pos: i64) -> Vec<f32> {
        if self.pos == Some(pos - 1) {
            self.state.clone()
        } else {
            vec![0.0; self.state.len()]
        }
    }
}

/// MTP drafting for one step: the head run from the token about to be decoded at `pos`.
pub(super) struct MtpSource<'a, 'm> {
    /// The head.
    pub(super) head: &'a mut MtpHead<'m>,
    /// The target's state of `pos − 1` (or zeros).
    pub(super) state: Vec<f32>,
    /// Where the token about to be decoded sits.
    pub(super) pos: i32,
    /// `--mtp-p-min`.
    pub(super) p_min: f32,
    /// Tokens never picked (`--ignore-eos`): the target never confirms them.
    pub(super) banned: &'a [Token],
}

impl DraftSource for MtpSource<'_, '_> {
    fn draft(&mut self, history: &[Token], n: usize) -> Result<Vec<Token>, EngineError> {
        let Some(&tok) = history.last() else {
            return Ok(Vec::new());
        };
        let r = self.run(tok, n);
        // the drafted positions leave the head's KV: the catch-up writes the confirmed ones
        // from the target's states
        if !self.head.seq_rm(self.pos) {
            return Err(EngineError::Internal(
                "the MTP head's KV refused to drop its drafts",
            ));
        }
        r.map_err(|e| EngineError::decode("MTP draft step", e, None))
    }
}

impl MtpSource<'_, '_> {
    fn run(&mut self, tok: Token, n: usize) -> Result<Vec<Token>, DecodeError> {
        let mut drafts = Vec::with_capacity(n);
        let mut state = std::mem::take(&mut self.state);
        let mut t = tok;
        while drafts.len() < n {
            let pos = self.pos + drafts.len() as i32;
            self.head.process(&[t], &[&state], pos)?;
            let logits = self.head.logits();
            if logits.is_empty() {
                break;
            }
            let d = argmax_except(logits, self.banned);
            if top_k_probability(logits, d, self.banned) < self.p_min {
                break;
            }
            drafts.push(d);
            match self.head.state() {
                Some(s) => state = s.to_vec(),
                None => break,
            }
            t = d;
        }
        Ok(drafts)
    }
}

/// `best`'s probability among the `P_MIN_TOP_K` highest unbanned logits (softmax over them).
fn top_k_probability(logits: &[f32], best: Token, banned: &[Token]) -> f32 {
    let Some(&top) = usize::try_from(best).ok().and_then(|b| logits.get(b)) else {
        return 0.0;
    };
    let mut top_k: Vec<f32> = Vec::with_capacity(P_MIN_TOP_K + 1);
    for (i, &v) in logits.iter().enumerate() {
        if banned.binary_search(&(i as Token)).is_ok() || v.is_nan() {
            continue;
        }
        if top_k.len() < P_MIN_TOP_K || v > top_k[top_k.len() - 1] {
            let at = top_k.partition_point(|&x| x >= v);
            top_k.insert(at, v);
            top_k.truncate(P_MIN_TOP_K);
        }
    }
    let sum: f32 = top_k.iter().map(|&v| (v - top).exp()).sum();
    if sum > 0.0 { 1.0 / sum } else { 0.0 }
}

impl Engine<'_> {
    /// After a target decode whose first `tokens.len()` batch rows are `tokens` at `pos0..`:
    /// the head processes them, each paired with the target's state of the position before,
    /// and keeps the last one's state for the next draft. A no-op without `--mtp`. A cancel
    /// that stops the head's decode is left to the token loop, which sees it next.
    ///
    /// # Errors
    /// A failed head decode (with the streamer's read error when that is what stopped it), or
    /// a target that kept no hidden state.
    pub(super) fn mtp_catch_up(&mut self, tokens: &[Token], pos0: i64) -> Result<(), EngineError> {
        let Some(st) = self.mtp.as_mut() else {
            return Ok(());
        };
        let (Some(last), Ok(p0)) = (tokens.len().checked_sub(1), i32::try_from(pos0)) else {
            return Ok(());
        };
        let mut rows = Vec::with_capacity(tokens.len());
        rows.push(st.paired(pos0));
        for k in 0..=last {
            let h = self.ctx.nextn_state(k as i32).ok_or(EngineError::Internal(
                "the target kept no hidden state for the MTP head",
            ))?;
            if k < last {
                rows.push(h.to_vec());
            } else {
                st.state.copy_from_slice(h);
                st.pos = Some(pos0 + last as i64);
            }
        }
        let head = self
            .ctx
            .mtp_mut()
            .ok_or(EngineError::Internal("--mtp without an MTP head context"))?;
        // whatever the head holds from here on (drafts, a truncated session) is replaced
        if !head.seq_rm(p0) {
            return Err(EngineError::Internal(
                "the MTP head's KV refused to drop a stale tail",
            ));
        }
        let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        match head.process(tokens, &refs, p0) {
            Ok(()) => Ok(()),
            Err(e) => {
                let read_err = self.ctx.hook_mut().and_then(MoeHook::take_error);
                if read_err.is_none() && e == DecodeError::Aborted {
                    // the head misses these positions: later drafts are worse, not wrong
                    if let Some(st) = self.mtp.as_mut() {
                        st.pos = None;
                    }
                    return Ok(());
                }
                Err(EngineError::decode("MTP head catch-up", e, read_err))
            }
        }
    }

    /// This step's MTP drafts: up to `n` tokens after `tok`, which is about to be decoded at
    /// `pos`.
    pub(super) fn mtp_draft(
        &mut self,
        tok: Token,
        pos: i64,
        n: usize,
    ) -> Result<Vec<Token>, EngineError> {
        let (Some(st), Some(head)) = (self.mtp.as_ref(), self.ctx.mtp_mut()) else {
            return Err(EngineError::Internal("--mtp without an MTP head context"));
        };
        let pos = i32::try_from(pos).map_err(|_| EngineError::Internal("position overflow"))?;
        MtpSource {
            head,
            state: st.paired(i64::from(pos)),
            pos,
            p_min: st.p_min,
            banned: &self.banned,
        }
        .draft(&[tok], n)
    }

    /// Runs `f` (head decodes, between the target's) and books what it streamed: its bytes
    /// stay in the next row's `read_bytes` (a group's whole cost is on its first row) and are
    /// the turn's `head_read_bytes`; its flash, cache and stall time, spent outside every
    /// decode's bracket, is taken out of that row's (it is in `mtp_draft_ms` instead).
    pub(super) fn head_reads<R>(
        &mut self,
        lp: &mut TokenLoop,
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        let before = self.stream_stats();
        let r = f(self);
        if let (Some(a), Some(b)) = (before, self.stream_stats()) {
            if let Some(p) = lp.prev.as_mut() {
                p.io_ns += b.io_ns - a.io_ns;
                p.mgmt_ns += b.mgmt_ns - a.mgmt_ns;
                p.stall_ns += b.stall_ns - a.stall_ns;
                p.drain_ns += b.drain_ns - a.drain_ns;
            }
            let bytes = b.read_bytes - a.read_bytes;
            lp.head_bytes += bytes;
            if let Some(sp) = lp.spec_mut() {
                sp.head_read_bytes += bytes;
            }
        }
        r
    }

    /// After a decode of the token loop: the head's catch-up, timed into the next group's
    /// drafting (`mtp_draft_ms`) and the turn's drafting seconds.
    ///
    /// # Errors
    /// As [`Engine::mtp_catch_up`].
    pub(super) fn catch_up_after(
        &mut self,
        tokens: &[Token],
        pos0: i64,
        lp: &mut TokenLoop,
    ) -> Result<(), EngineError> {
        if self.mtp.is_none() {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        self.head_reads(lp, |e| e.mtp_catch_up(tokens, pos0))?;
        let secs = t0.elapsed().as_secs_f64();
        lp.catch_up_s += secs;
        if let Some(sp) = lp.spec_mut() {
            sp.draft_s += secs;
        }
        Ok(())
    }

    /// End of turn: the head's KV (like the target's) holds exactly the turn's context.
    pub(super) fn mtp_trim(&mut self, end: i32) {
        if let Some(head) = self.ctx.mtp_mut() {
            head.seq_rm(end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::top_k_probability;

    #[test]
    fn the_draft_probability_is_taken_over_the_ten_best_candidates() {
        // two equal leaders and many far-behind tokens: 1/2 among the top ten
        let mut l = vec![-100.0f32; 50];
        l[3] = 5.0;
        l[7] = 5.0;
        let p = top_k_probability(&l, 3, &[]);
        assert!((p - 0.5).abs() < 1e-4, "{p}");
        // the eleventh-best candidate does not dilute it
        let mut l = vec![0.0f32; 11];
        l[0] = 1.0;
        let p10 = top_k_probability(&l, 0, &[]);
        let want = 1.0 / (1.0 + 9.0 * (-1.0f32).exp());
        assert!((p10 - want).abs() < 1e-4, "{p10} vs {want}");
        // a banned token is no candidate
        let mut l = vec![-100.0f32; 20];
        l[1] = 5.0;
        l[2] = 5.0;
        assert!((top_k_probability(&l, 1, &[2]) - 1.0).abs() < 1e-4);
    }
}
