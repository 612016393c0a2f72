//! Routing records for `--route-trace`: one [`RouteRow`] per routed expert.
//!
//! The hook sees a layer's routing at `ffn_moe_topk-<il>` (ids, and what the streamer found and
//! read for each) and its final applied weights at the last node of the
//! `ffn_moe_weights[_softmax|_norm|_scaled]-<il>` chain, which llama.cpp computes before the next
//! layer's routing. So a layer's cell is held until the next routing (or the end of the decode)
//! and becomes rows with the latest weights seen; `nan` when the graph exposed none. The rows of
//! a decode are handed to the route-trace sink after it, so no file is written inside the graph.

use bmoe_telemetry::trace::{PHASE_DECODE, PHASE_PREFILL, RouteRow};

use super::span::{DecodeSpan, TokenAxis};
use crate::stream::Routing;

struct Cell {
    layer: usize,
    ids: Vec<i32>,
    routing: Vec<Routing>,
    weights: Option<Vec<f32>>,
    dropped: Vec<bool>,
}

/// Turns the routings the hook observes into route-trace rows, one decode at a time.
pub struct RouteRecorder {
    n_expert_used: usize,
    axis: TokenAxis,
    cell: Option<Cell>,
    rows: Vec<RouteRow>,
}

impl RouteRecorder {
    /// A recorder for a model routing `n_expert_used` experts per token, in a context whose
    /// physical batch is `n_ubatch` tokens.
    pub fn new(n_expert_used: usize, n_ubatch: usize) -> Self {
        Self {
            n_expert_used,
            axis: TokenAxis::new(n_ubatch),
            cell: None,
            rows: Vec::new(),
        }
    }

    /// Starts a decode: routings until [`Self::end_decode`] belong to `span`.
    pub fn begin_decode(&mut self, span: DecodeSpan) {
        self.axis.begin(span);
        self.cell = None;
    }

    /// A layer's routing: `ids` token-major (`n_expert_used` per token), `routing` what the
    /// streamer found for each.
    pub fn route(&mut self, layer: usize, ids: &[i32], routing: &[Routing]) {
        self.route_dropped(layer, ids, routing, &[]);
    }

    /// As [`Self::route`], for a routing `--drop-cold-experts` edited: `dropped` marks the slots
    /// it discarded (their `routing` already carries no bytes).
    pub fn route_dropped(
        &mut self,
        layer: usize,
        ids: &[i32],
        routing: &[Routing],
        dropped: &[bool],
    ) {
        self.close_cell();
        self.cell = Some(Cell {
            layer,
            ids: ids.to_vec(),
            routing: routing.to_vec(),
            weights: None,
            dropped: dropped.to_vec(),
        });
    }

    /// A weight-chain node of `layer` was computed: `w` token-major like the ids.
    pub fn weights(&mut self, layer: usize, w: Vec<f32>) {
        if let Some(c) = self.cell.as_mut()
            && c.layer == layer
            && w.len() == c.ids.len()
        {
            c.weights = Some(w);
        }
    }

    /// Ends the decode: the rows of every routing it made, in graph order.
    pub fn end_decode(&mut self) -> Vec<RouteRow> {
        self.close_cell();
        self.axis.end();
        std::mem::take(&mut self.rows)
    }

    fn close_cell(&mut self) {
        let (Some(c), Some(span)) = (self.cell.take(), self.axis.span()) else {
            return;
        };
        if self.n_expert_used == 0 {
            return;
        }
        let k = self.n_expert_used;
        let Some(first) = self.axis.place(c.layer, c.ids.len() / k) else {
            return;
        };
        let phase = if span.prefill {
            PHASE_PREFILL
        } else {
            PHASE_DECODE
        };
        for (i, (&id, r)) in c.ids.iter().zip(&c.routing).enumerate() {
            self.rows.push(RouteRow {
                turn: span.turn,
                phase,
                step: first + (i / k) as i64,
                layer: c.layer as u32,
                slot: (i % k) as u32,
                expert: u32::try_from(id).unwrap_or(u32::MAX),
                weight: c
                    .weights
                    .as_ref()
                    .and_then(|w| w.get(i))
                    .map_or(f64::NAN, |&w| f64::from(w)),
                residency: r.residency,
                expert_bytes: r.bytes,
                dropped: Some(c.dropped.get(i).copied().unwrap_or(false)),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_become_rows_on_the_context_axis() {
        let mut t = RouteRecorder::new(2, 0);
        t.begin_decode(DecodeSpan {
            turn: 0,
            prefill: true,
            pos0: 0,
            n_tokens: 3,
        });
        let miss = Routing {
            residency: 0,
            bytes: 10,
        };
        t.route(0, &[1, 2, 1, 3, 2, 1], &[miss; 6]);
        t.weights(0, vec![0.5; 6]);
        // the last layer routes only the last token
        t.route(1, &[4, 5], &[miss; 2]);
        let rows = t.end_decode();
        assert_eq!(rows.len(), 8);
        assert_eq!(
            rows.iter().map(|r| r.step).collect::<Vec<_>>(),
            [0, 0, 1, 1, 2, 2, 2, 2]
        );
        assert_eq!(rows[3].slot, 1);
        assert_eq!(rows[3].expert, 3);
        assert!((rows[0].weight - 0.5).abs() < 1e-9);
        assert!(rows[6].weight.is_nan(), "no weight node seen for layer 1");
        assert_eq!(rows[6].layer, 1);
        assert!(t.end_decode().is_empty(), "rows are handed out once");
    }
}
