//! The `step` of each `--io-trace` row: the context position of the token whose routing asked
//! for the read, so that the io trace joins the route trace on `(turn, phase, step)` — and on
//! `(turn, phase, step, layer, expert)` it meets exactly the route row that carries the read's
//! `expert_bytes`.
//!
//! A prefill batch routes many tokens and reads each missed expert once, for the first token that
//! routed it; only the hook sees which token that was (the streamer gets the batch's ids without
//! their token shape). So the hook records, per load, each expert's first routing position and how
//! many reads the load issued; the streamer's io log lists the reads in load order (the serial
//! lanes log as they read, the overlap logs each load's batch in submission order), which is how
//! the two are matched after the decode.

use std::collections::HashMap;

use super::span::{DecodeSpan, TokenAxis};
use crate::stream::IoRecord;

/// One layer load of a decode.
#[derive(Debug)]
struct Load {
    layer: u32,
    /// Position of the load's first routed token (for reads no routing asked for: `--load-all`).
    first: i64,
    /// Each routed expert's first routing position.
    experts: HashMap<u32, i64>,
    /// Reads the load issued (its entries in the io log).
    reads: usize,
}

/// Records, during a decode, where each load's reads belong on the context axis.
#[derive(Debug)]
pub struct ReadSteps {
    n_expert_used: usize,
    axis: TokenAxis,
    loads: Vec<Load>,
}

impl ReadSteps {
    /// A recorder for a model routing `n_expert_used` experts per token, in a context whose
    /// physical batch is `n_ubatch` tokens.
    pub fn new(n_expert_used: usize, n_ubatch: usize) -> Self {
        Self {
            n_expert_used,
            axis: TokenAxis::new(n_ubatch),
            loads: Vec::new(),
        }
    }

    /// Starts a decode.
    pub fn begin_decode(&mut self, span: DecodeSpan) {
        self.axis.begin(span);
        self.loads.clear();
    }

    /// A layer was loaded for `ids` (token-major, `n_expert_used` per token) and issued `reads`
    /// reads.
    pub fn load(&mut self, layer: usize, ids: &[i32], reads: usize) {
        let k = self.n_expert_used.max(1);
        let Some(first) = self.axis.place(layer, ids.len() / k) else {
            return;
        };
        let mut experts = HashMap::new();
        for (i, &id) in ids.iter().enumerate() {
            if let Ok(e) = u32::try_from(id) {
                experts.entry(e).or_insert(first + (i / k) as i64);
            }
        }
        self.loads.push(Load {
            layer: layer as u32,
            first,
            experts,
            reads,
        });
    }

    /// Ends the decode: what its reads are stamped with.
    pub fn end_decode(&mut self) -> ReadStamps {
        let fallback = self.axis.span().map_or(-1, |s| s.last_pos());
        self.axis.end();
        ReadStamps {
            loads: std::mem::take(&mut self.loads),
            fallback,
        }
    }
}

/// A decode's loads, to stamp its io log with.
#[derive(Debug, Default)]
pub struct ReadStamps {
    loads: Vec<Load>,
    fallback: i64,
}

impl ReadStamps {
    /// The `step` of each of `reads` (the decode's io log, in order). A read no load accounts
    /// for — none is expected — gets the batch's last position, as the compute trace's rows.
    pub fn steps(&self, reads: &[IoRecord]) -> Vec<i64> {
        // speculative reads (`spec=1`) belong to no routing: the loads count only real reads
        let mut out = vec![self.fallback; reads.len()];
        let mut rest = reads.iter().enumerate().filter(|(_, r)| !r.spec);
        for load in &self.loads {
            for (i, r) in rest.by_ref().take(load.reads) {
                if r.layer == load.layer {
                    out[i] = load.experts.get(&r.expert).copied().unwrap_or(load.first);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(layer: u32, expert: u32) -> IoRecord {
        IoRecord {
            layer,
            expert,
            proj: 0,
            lane: 0,
            offset: 0,
            req_bytes: 1,
            read_bytes: 1,
            latency_ns: 1,
            spec: false,
        }
    }

    #[test]
    fn reads_take_the_position_of_their_first_routing() {
        let mut s = ReadSteps::new(2, 0);
        s.begin_decode(DecodeSpan {
            turn: 0,
            prefill: true,
            pos0: 4,
            n_tokens: 3,
        });
        // layer 0 routes tokens 4, 5, 6: experts 1 (first at 4), 3 (at 4), 2 (at 5), 0 (at 6)
        s.load(0, &[1, 3, 2, 1, 0, 3], 4);
        // the last layer routes only the last token
        s.load(1, &[5, 6], 2);
        let stamps = s.end_decode();
        let reads = [
            read(0, 1),
            read(0, 3),
            read(0, 2),
            read(0, 0),
            read(1, 6),
            read(1, 5),
            read(9, 9),
        ];
        assert_eq!(stamps.steps(&reads), [4, 4, 5, 6, 6, 6, 6]);
    }

    #[test]
    fn a_reread_in_a_later_ubatch_is_stamped_there_and_unrouted_reads_take_the_first_token() {
        let mut s = ReadSteps::new(1, 2);
        s.begin_decode(DecodeSpan {
            turn: 1,
            prefill: true,
            pos0: 0,
            n_tokens: 4,
        });
        // two ubatches of one MoE layer, each reading expert 7 (evicted in between)
        s.load(0, &[7, 7], 1);
        s.load(0, &[2, 7], 2);
        let stamps = s.end_decode();
        // the second load's second read is an expert nobody routed (--load-all)
        assert_eq!(
            stamps.steps(&[read(0, 7), read(0, 7), read(0, 5)]),
            [0, 3, 2]
        );
    }

    #[test]
    fn speculative_reads_among_the_real_ones_take_the_last_position_and_shift_nothing() {
        let mut s = ReadSteps::new(1, 0);
        s.begin_decode(DecodeSpan {
            turn: 0,
            prefill: true,
            pos0: 10,
            n_tokens: 2,
        });
        s.load(0, &[1, 2], 2);
        s.load(1, &[3, 4], 1);
        let stamps = s.end_decode();
        let spec = |layer, expert| IoRecord {
            spec: true,
            ..read(layer, expert)
        };
        // read-start order under --overlap: speculative rows interleave with the real batches
        let reads = [read(0, 1), spec(1, 4), read(0, 2), spec(1, 3), read(1, 3)];
        assert_eq!(stamps.steps(&reads), [10, 11, 11, 11, 10]);
    }
}
