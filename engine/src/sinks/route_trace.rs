//! `--route-trace PATH`: one `# route_trace v1` row per routed expert (the seed's "Route
//! trace"), written with `bmoe_telemetry::trace` from the rows the graph's route recorder
//! collected during each decode.

use std::fs::File;
use std::path::{Path, PathBuf};

use bmoe_telemetry::trace::{LayerBytes, RouteRow, RouteTraceInfo, TraceWriter};

use super::SinkError;

const FLAG: &str = "--route-trace";

/// Writes the route trace, one decode at a time.
pub struct RouteTraceWriter {
    writer: TraceWriter<File, RouteRow>,
    /// Where the last complete write ended (a failed one is cut off).
    tail: Option<super::Tail>,
    path: PathBuf,
}

impl RouteTraceWriter {
    /// Stops the file after a failed write: the writer is dropped (its buffer flushed once
    /// more) and the file cut back to the end of its last complete write.
    pub fn abandon(self) {
        let Self { writer, tail, .. } = self;
        drop(writer);
        super::Tail::cut(tail);
    }

    /// Creates `path` and writes the preamble.
    ///
    /// # Errors
    /// [`SinkError::Create`] naming the file.
    pub fn create(path: &Path, info: &RouteTraceInfo) -> Result<Self, SinkError> {
        let writer = TraceWriter::create(path, info).map_err(SinkError::creating(FLAG, path))?;
        Ok(Self {
            tail: super::Tail::of(path),
            writer,
            path: path.to_path_buf(),
        })
    }

    /// Writes one decode's rows and flushes.
    ///
    /// # Errors
    /// [`SinkError::Write`] naming the file (the trace stops there).
    pub fn write_decode(&mut self, rows: &[RouteRow]) -> Result<(), SinkError> {
        let err = SinkError::writing(FLAG, &self.path);
        for row in rows {
            self.writer.write_row(row).map_err(err)?;
        }
        self.writer.flush().map_err(err)?;
        super::Tail::commit(&mut self.tail);
        Ok(())
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
    use bmoe_telemetry::trace::{PHASE_PREFILL, RouteTraceReader};

    #[test]
    fn rows_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let info = RouteTraceInfo {
            n_expert_used: Some(2),
            ..Default::default()
        };
        let row = |step, slot, expert, weight| RouteRow {
            turn: 0,
            phase: PHASE_PREFILL,
            step,
            layer: 1,
            slot,
            expert,
            weight,
            residency: 0,
            expert_bytes: 10,
            dropped: Some(false),
        };
        let rows = [row(0, 0, 4, 0.5), row(0, 1, 5, f64::NAN)];
        let mut t = RouteTraceWriter::create(&path, &info).unwrap();
        t.write_decode(&rows).unwrap();
        let back: Vec<RouteRow> = RouteTraceReader::open(&path)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back.len(), 2);
        assert_eq!((back[0].expert, back[1].slot), (4, 1));
        assert!((back[0].weight - 0.5).abs() < 1e-9);
        assert!(back[1].weight.is_nan());
    }
}
