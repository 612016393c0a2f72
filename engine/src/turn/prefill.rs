//! The prompt phase of a turn: the tokens the KV does not hold yet, in one decode — or in
//! chunks, when the expert cache cannot hold a whole layer's union (`stream::prefill`) or a test
//! asks for a session's batches — with its flash, CPU and cache-management cost measured for
//! the trailer.

use super::outputs::Outputs;
use super::{Engine, Turn};
use crate::error::EngineError;
use crate::ffi::DecodeError;
use crate::graph::arena::{ARENA_COUNTS_ENV, ArenaTally};
use crate::graph::device_share::DecodeMark;
use crate::graph::hook::MoeHook;
use crate::graph::span::DecodeSpan;
use crate::sinks::csv::{PrefillDevice, TrailerContext};
use crate::vm::process_sample;
use std::io::Write;
use std::time::Instant;

/// How the prompt phase ended.
pub(super) enum Prefilled {
    /// The KV holds the whole prompt.
    Done {
        /// Wall time of the prefill decodes, s.
        prefill_s: f64,
        /// The prefill's attribution, as the trailer reports it.
        trailer: TrailerContext,
    },
    /// A cancel (session mode) or a SIGINT stopped it.
    Cancelled,
}

impl Engine<'_> {
    /// Decodes `turn.tokens[turn.n_reused..]`.
    pub(super) fn prefill(
        &mut self,
        turn: &Turn<'_>,
        note: &mut dyn Write,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Prefilled, EngineError> {
        let cuts = self.prefill_cuts(turn);
        let pre_stats = self.stream_stats();
        let pre_proc = process_sample();
        let t_prefill = Instant::now();
        let mut from = turn.n_reused;
        let mut dev = self
            .cfg
            .prefill_device
            .is_some()
            .then(PrefillDevice::default);
        // routed mode's counts of the decodes the device computed (the whole tally for the
        // test line, routed and demand for the record)
        let mut arena = ArenaTally::default();
        for to in cuts {
            // a one-shot Ctrl-C does not abort the decode in flight: it is seen between decodes
            if cancelled() {
                return Ok(Prefilled::Cancelled);
            }
            let mut chunk = turn.tokens[from..to].to_vec();
            let span = DecodeSpan {
                turn: turn.turn,
                prefill: true,
                pos0: from as i64,
                n_tokens: chunk.len(),
            };
            let start = Instant::now();
            self.fetch_rows(&chunk, note)?;
            let before = DecodeMark::take(&mut self.ctx);
            Outputs::begin_decode(&mut self.ctx, span, start);
            let r = self.ctx.decode(&mut chunk);
            self.outputs
                .end_decode(&mut self.ctx, span, Instant::now(), note);
            if let Some(d) = dev.as_mut() {
                arena.add(&before.charge(&mut self.ctx, d));
            }
            if let Err(e) = r {
                let read_err = self.ctx.hook_mut().and_then(MoeHook::take_error);
                if read_err.is_none() && e == DecodeError::Aborted && cancelled() {
                    return Ok(Prefilled::Cancelled);
                }
                return Err(EngineError::decode("prefill decode", e, read_err));
            }
            // the MTP head catches up chunk by chunk: its union fits the cache as the chunk's did
            self.mtp_catch_up(&turn.tokens[from..to], from as i64)?;
            from = to;
        }
        let prefill_s = t_prefill.elapsed().as_secs_f64();
        let post_proc = process_sample();
        let mut trailer = TrailerContext {
            cache_budget_mib: self.cache_budget_mib(),
            prefill_cpu_s: post_proc.cpu_ns.saturating_sub(pre_proc.cpu_ns) as f64 / 1e9,
            ..Default::default()
        };
        if let (Some(a), Some(b)) = (pre_stats, self.stream_stats()) {
            trailer.prefill_read_bytes = b.read_bytes - a.read_bytes;
            trailer.prefill_io_s = (b.io_ns - a.io_ns) as f64 / 1e9;
            trailer.prefill_mgmt_s = (b.mgmt_ns - a.mgmt_ns) as f64 / 1e9;
            trailer.prefill_stall_s = (b.stall_ns - a.stall_ns) as f64 / 1e9;
        }
        if dev.is_some() && std::env::var(ARENA_COUNTS_ENV).is_ok_and(|v| v == "1") {
            let _ = writeln!(note, "{}", arena.line());
        }
        trailer.prefill_dev = dev;
        Ok(Prefilled::Done { prefill_s, trailer })
    }

    /// Where the prefill's decodes end: one decode for the whole prompt (n_batch = n_ctx), cut
    /// where the cache budget needs it and where a test asks for the batches a session built its
    /// KV from; the last cut is the prompt's end.
    fn prefill_cuts(&self, turn: &Turn<'_>) -> Vec<usize> {
        let n_ctx_tokens = turn.tokens.len();
        let mut cuts: Vec<usize> = self
            .cfg
            .prefill_split
            .iter()
            .copied()
            .filter(|&p| p > turn.n_reused && p < n_ctx_tokens)
            .collect();
        if let Some(chunk) = self.resolved.prefill_chunk {
            // each layer's expert union must fit the cache budget (stream::prefill)
            cuts.extend(crate::stream::prefill::cut_points(
                turn.n_reused,
                n_ctx_tokens,
                chunk as usize,
            ));
        }
        cuts.sort_unstable();
        cuts.dedup();
        cuts.push(n_ctx_tokens);
        cuts
    }
}
