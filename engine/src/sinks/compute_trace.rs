//! `--compute-trace PATH` (one row per graph node) and `--compute-trace-layers PATH` (one row
//! per layer segment: `pre`, `blk.<il>`, `post`), the seed's compute trace v1, written with
//! `bmoe_telemetry::trace`.
//!
//! A node the eval hook wants is computed alone and reported right after, so the wall time
//! between two reports is the later node's compute (the first node's row starts at the
//! decode's start). Per-node mode
//! asks for every node; layer mode only for the first node of each segment (plus the routing
//! nodes the streamer isolates anyway), and a row covers everything since the previous
//! boundary.

use std::fs::File;
use std::path::Path;
use std::time::Instant;

use bmoe_telemetry::trace::{ComputeRow, DecodeTraceInfo, TraceWriter};

use crate::sinks::route_trace::DecodeSpan;
use crate::vm::process_sample;

/// Per node or per layer segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// `--compute-trace`.
    Node,
    /// `--compute-trace-layers`.
    Layer,
}

/// The layer of a node name's `-<il>` suffix, −1 for none.
pub fn node_layer(name: &str) -> i32 {
    name.rsplit_once('-')
        .filter(|(_, d)| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|(_, d)| d.parse().ok())
        .unwrap_or(-1)
}

/// Writes the compute trace as the hook observes nodes.
pub struct ComputeTracer {
    writer: TraceWriter<File, ComputeRow>,
    path: String,
    granularity: Granularity,
    span: Option<DecodeSpan>,
    seq: u32,
    /// Start of the interval the next row covers, and the major faults then.
    since: Instant,
    since_majflt: u64,
    /// Layer mode: the segment being computed (None before the decode's first node).
    segment: Option<i32>,
    seen_layer: bool,
    /// Layer mode: the segment the wanted node opens.
    opening: Option<i32>,
    error: Option<String>,
}

const PRE: i32 = -1;
const POST: i32 = -2;

impl ComputeTracer {
    /// Creates `path` and writes the preamble.
    ///
    /// # Errors
    /// A message naming the file when it cannot be written.
    pub fn create(
        path: &Path,
        info: &DecodeTraceInfo,
        granularity: Granularity,
    ) -> Result<Self, String> {
        let flag = match granularity {
            Granularity::Node => "--compute-trace",
            Granularity::Layer => "--compute-trace-layers",
        };
        let writer = TraceWriter::create(path, info)
            .map_err(|e| format!("cannot write {flag} {}: {e}", path.display()))?;
        Ok(Self {
            writer,
            path: format!("{flag} {}", path.display()),
            granularity,
            span: None,
            seq: 0,
            since: Instant::now(),
            since_majflt: 0,
            segment: None,
            seen_layer: false,
            opening: None,
            error: None,
        })
    }

    /// Starts a decode.
    pub fn begin_decode(&mut self, span: DecodeSpan) {
        self.span = Some(span);
        self.seq = 0;
        self.segment = None;
        self.seen_layer = false;
        self.opening = None;
        self.restart();
    }

    fn restart(&mut self) {
        self.since_majflt = process_sample().majflt;
        self.since = Instant::now();
    }

    /// The segment a node belongs to: its layer's; a node without a layer suffix (views,
    /// unnamed nodes) stays in the current segment, except the output head (`result_*`),
    /// which opens `post`.
    fn segment_of(&mut self, name: &str) -> i32 {
        let l = node_layer(name);
        if l >= 0 {
            self.seen_layer = true;
            l
        } else if self.seen_layer && name.starts_with("result_") {
            POST
        } else {
            self.segment.unwrap_or(PRE)
        }
    }

    /// Whether the node must be isolated; `forced` when another user isolates it anyway.
    pub fn wants(&mut self, name: &str, forced: bool) -> bool {
        if self.span.is_none() {
            return false;
        }
        match self.granularity {
            // boundary to boundary (as the seed measures): a node's row also carries the
            // scheduler's work between the previous node's report and its own compute
            Granularity::Node => true,
            Granularity::Layer => {
                let seg = self.segment_of(name);
                match self.segment {
                    None => {
                        self.segment = Some(seg);
                        self.opening = None;
                        forced
                    }
                    Some(cur) if cur != seg => {
                        self.opening = Some(seg);
                        true
                    }
                    Some(_) => {
                        self.opening = None;
                        forced
                    }
                }
            }
        }
    }

    /// A wanted node was computed.
    pub fn observe(&mut self, name: &str, op: &str) {
        let Some(span) = self.span else { return };
        // one clock read ends this interval and starts the next, so the tracer's own
        // bookkeeping lands in the next row instead of vanishing from the sum
        let (now, majflt) = (Instant::now(), process_sample().majflt);
        match self.granularity {
            Granularity::Node => {
                let row = self.row(span, node_layer(name), op, name.to_string(), now, majflt);
                self.write(&row);
            }
            Granularity::Layer => {
                let cur = self.segment.unwrap_or(PRE);
                self.close_segment(span, cur, now, majflt);
                if let Some(next) = self.opening.take() {
                    self.segment = Some(next);
                }
            }
        }
        self.seq += 1;
        self.since = now;
        self.since_majflt = majflt;
    }

    fn close_segment(&mut self, span: DecodeSpan, seg: i32, now: Instant, majflt: u64) {
        let (layer, name) = match seg {
            PRE => (-1, "pre".to_string()),
            POST => (-1, "post".to_string()),
            l => (l, format!("blk.{l}")),
        };
        let row = self.row(span, layer, "LAYER", name, now, majflt);
        self.write(&row);
    }

    fn row(
        &self,
        span: DecodeSpan,
        layer: i32,
        op: &str,
        name: String,
        now: Instant,
        majflt: u64,
    ) -> ComputeRow {
        ComputeRow {
            turn: span.turn,
            phase: u8::from(!span.prefill),
            step: span.pos0 + span.n_tokens as i64 - 1,
            seq: self.seq,
            layer,
            op: op.to_string(),
            name,
            wall_ns: now.saturating_duration_since(self.since).as_nanos() as u64,
            majflt: majflt.saturating_sub(self.since_majflt),
        }
    }

    fn write(&mut self, row: &ComputeRow) {
        if self.error.is_none()
            && let Err(e) = self.writer.write_row(row)
        {
            self.error = Some(format!("writing {}: {e}", self.path));
        }
    }

    /// Ends the decode (layer mode: the open segment's row, normally `post`) and flushes.
    ///
    /// # Errors
    /// The first write error, naming the file.
    pub fn end_decode(&mut self) -> Result<(), String> {
        if let (Some(span), Granularity::Layer) = (self.span, self.granularity) {
            let cur = self.segment.unwrap_or(PRE);
            self.close_segment(span, cur, Instant::now(), process_sample().majflt);
            self.seq += 1;
        }
        self.span = None;
        if self.error.is_none()
            && let Err(e) = self.writer.flush()
        {
            self.error = Some(format!("writing {}: {e}", self.path));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_suffixes() {
        assert_eq!(node_layer("norm-0"), 0);
        assert_eq!(node_layer("ffn_moe_topk-12"), 12);
        assert_eq!(node_layer("result_output"), -1);
        assert_eq!(node_layer("inp_embd"), -1);
        assert_eq!(node_layer("x-"), -1);
        assert_eq!(node_layer("leaf_3 (copy)"), -1);
    }
}
