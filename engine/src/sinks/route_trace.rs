//! `--route-trace PATH`: one `# route_trace v1` row per routed expert (the seed's "Route
//! trace"), written with `bmoe_telemetry::trace`.
//!
//! The hook sees a layer's routing at `ffn_moe_topk-<il>` (ids, and what the streamer found
//! and read for each) and its final applied weights at the last node of the
//! `ffn_moe_weights[_softmax|_norm|_scaled]-<il>` chain, which llama.cpp computes before the
//! next layer's routing. So a layer's cell is held until the next routing (or the end of the
//! decode) and written with the latest weights seen; `nan` when the graph exposed none.

use std::fs::File;
use std::path::Path;

use bmoe_telemetry::trace::{
    LayerBytes, PHASE_DECODE, PHASE_PREFILL, RouteRow, RouteTraceInfo, TraceWriter,
};

use crate::stream::Routing;

/// Node names of the weight chain, in graph order: the last one computed is the applied weight.
pub const WEIGHT_NODES: [&str; 4] = [
    "ffn_moe_weights",
    "ffn_moe_weights_softmax",
    "ffn_moe_weights_norm",
    "ffn_moe_weights_scaled",
];

/// The layer of a weight-chain node name (`ffn_moe_weights_norm-3` → 3).
pub fn weight_node_layer(name: &str) -> Option<usize> {
    WEIGHT_NODES
        .iter()
        .find_map(|base| crate::graph::hook::layer_of(name, base))
}

/// The decode being traced: which rows its routings become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeSpan {
    /// Session turn (0 one-shot).
    pub turn: u32,
    /// Prefill (a batch) or decode (one token).
    pub prefill: bool,
    /// Context position of the batch's first token.
    pub pos0: i64,
    /// Tokens in the batch.
    pub n_tokens: usize,
}

struct Cell {
    layer: usize,
    ids: Vec<i32>,
    routing: Vec<Routing>,
    weights: Option<Vec<f32>>,
}

/// Writes the route trace as the hook observes routings.
pub struct RouteTracer {
    writer: TraceWriter<File, RouteRow>,
    path: String,
    n_expert_used: usize,
    span: Option<DecodeSpan>,
    cell: Option<Cell>,
    error: Option<String>,
}

impl RouteTracer {
    /// Creates `path` and writes the preamble.
    ///
    /// # Errors
    /// A message naming the file when it cannot be written.
    pub fn create(path: &Path, info: &RouteTraceInfo) -> Result<Self, String> {
        let writer = TraceWriter::create(path, info)
            .map_err(|e| format!("cannot write --route-trace {}: {e}", path.display()))?;
        Ok(Self {
            writer,
            path: path.display().to_string(),
            n_expert_used: info.n_expert_used.unwrap_or(0) as usize,
            span: None,
            cell: None,
            error: None,
        })
    }

    /// Starts a decode: routings until [`Self::end_decode`] belong to `span`.
    pub fn begin_decode(&mut self, span: DecodeSpan) {
        self.span = Some(span);
        self.cell = None;
    }

    /// A layer's routing: `ids` token-major (`n_expert_used` per token), `routing` what the
    /// streamer found for each.
    pub fn route(&mut self, layer: usize, ids: &[i32], routing: &[Routing]) {
        self.write_cell();
        self.cell = Some(Cell {
            layer,
            ids: ids.to_vec(),
            routing: routing.to_vec(),
            weights: None,
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

    /// Ends the decode: writes the pending cell and flushes the file.
    ///
    /// # Errors
    /// The first write error of the run, naming the file (the trace stops there).
    pub fn end_decode(&mut self) -> Result<(), String> {
        self.write_cell();
        self.span = None;
        if self.error.is_none()
            && let Err(e) = self.writer.flush()
        {
            self.error = Some(format!("writing --route-trace {}: {e}", self.path));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn write_cell(&mut self) {
        let (Some(c), Some(span)) = (self.cell.take(), self.span) else {
            return;
        };
        if self.error.is_some() || self.n_expert_used == 0 {
            return;
        }
        let k = self.n_expert_used;
        let rows = c.ids.len() / k;
        // a layer that routes fewer tokens than the batch (llama.cpp keeps only the tokens
        // with outputs before the last layer's FFN) routes the batch's last tokens
        let first = span.pos0 + span.n_tokens.saturating_sub(rows) as i64;
        for (i, (&id, r)) in c.ids.iter().zip(&c.routing).enumerate() {
            let row = RouteRow {
                turn: span.turn,
                phase: if span.prefill {
                    PHASE_PREFILL
                } else {
                    PHASE_DECODE
                },
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
                dropped: Some(false),
            };
            if let Err(e) = self.writer.write_row(&row) {
                self.error = Some(format!("writing --route-trace {}: {e}", self.path));
                return;
            }
        }
    }
}

/// The preamble's facts from the model file: per MoE layer, one expert's bytes and the dense
/// bytes of the layer.
pub fn trace_info(
    model: &str,
    info: &bmoe_gguf::info::ModelInfo,
    n_expert_used: u64,
) -> RouteTraceInfo {
    RouteTraceInfo {
        model: Some(model.to_string()),
        arch: Some(info.arch.clone()),
        n_layer: Some(u64::from(info.n_layer)),
        n_expert: Some(u64::from(info.n_expert)),
        n_expert_used: Some(n_expert_used),
        layers: info
            .layers
            .iter()
            .filter(|l| l.expert_bytes > 0)
            .map(|l| LayerBytes {
                layer: u64::from(l.layer),
                expert_bytes: l.expert_bytes,
                dense_bytes: l.dense_bytes,
            })
            .collect(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmoe_telemetry::trace::RouteTraceReader;

    #[test]
    fn weight_chain_names_parse_and_others_do_not() {
        assert_eq!(weight_node_layer("ffn_moe_weights-2"), Some(2));
        assert_eq!(weight_node_layer("ffn_moe_weights_norm-11"), Some(11));
        assert_eq!(weight_node_layer("ffn_moe_weights_scaled-0"), Some(0));
        assert_eq!(weight_node_layer("ffn_moe_weights_sum-0"), None);
        assert_eq!(weight_node_layer("ffn_moe_topk-0"), None);
    }

    #[test]
    fn cells_become_rows_on_the_context_axis() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let info = RouteTraceInfo {
            n_expert_used: Some(2),
            ..Default::default()
        };
        let mut t = RouteTracer::create(&path, &info).unwrap();
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
        t.end_decode().unwrap();
        let rows: Vec<RouteRow> = RouteTraceReader::open(&path)
            .unwrap()
            .map(Result::unwrap)
            .collect();
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
    }
}
