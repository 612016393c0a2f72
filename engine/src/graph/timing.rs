//! Node timings for `--compute-trace` (one row per graph node) and `--compute-trace-layers` (one
//! row per layer segment: `pre`, `blk.<il>`, `post`), the seed's compute trace v1.
//!
//! A node the eval hook wants is computed alone and reported right after, so the wall time
//! between two reports is the later node's compute (the first node's row starts at the decode's
//! start). Per-node mode asks for every node; layer mode only for the first node of each segment
//! (plus the routing nodes the streamer isolates anyway), and a row covers everything since the
//! previous boundary. Rows are kept until the decode ends and handed to the compute-trace sink,
//! so no file is written inside the graph.

use std::time::Instant;

use bmoe_telemetry::trace::ComputeRow;

use super::names::node_layer;
use super::span::DecodeSpan;
use crate::vm::process_sample;

/// Per node or per layer segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// `--compute-trace`.
    Node,
    /// `--compute-trace-layers`.
    Layer,
}

impl Granularity {
    /// The flag that asks for it.
    pub fn flag(self) -> &'static str {
        match self {
            Granularity::Node => "--compute-trace",
            Granularity::Layer => "--compute-trace-layers",
        }
    }
}

/// The `layer` column of a node: its `-<il>` suffix, −1 for none.
fn layer_column(name: &str) -> i32 {
    node_layer(name)
        .and_then(|il| i32::try_from(il).ok())
        .unwrap_or(-1)
}

/// Times graph nodes into compute-trace rows, one decode at a time.
pub struct NodeTimer {
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
    rows: Vec<ComputeRow>,
}

const PRE: i32 = -1;
const POST: i32 = -2;

impl NodeTimer {
    /// A timer at `granularity`, idle until [`Self::begin_decode`].
    pub fn new(granularity: Granularity) -> Self {
        Self {
            granularity,
            span: None,
            seq: 0,
            since: Instant::now(),
            since_majflt: 0,
            segment: None,
            seen_layer: false,
            opening: None,
            rows: Vec::new(),
        }
    }

    /// Starts a decode whose bracket (the token's wall) opened at `start`: the first row
    /// starts there, so nothing between the bracket and the first node is lost from the sum.
    pub fn begin_decode(&mut self, span: DecodeSpan, start: Instant) {
        self.span = Some(span);
        self.seq = 0;
        self.segment = None;
        self.seen_layer = false;
        self.opening = None;
        self.since_majflt = process_sample().majflt;
        self.since = start;
    }

    /// The segment a node belongs to: its layer's; a node without a layer suffix (views,
    /// unnamed nodes) stays in the current segment, except the output head (`result_*`),
    /// which opens `post`.
    fn segment_of(&mut self, name: &str) -> i32 {
        let l = layer_column(name);
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
        // one clock read ends this interval and starts the next, so the timer's own
        // bookkeeping lands in the next row instead of vanishing from the sum
        let (now, majflt) = (Instant::now(), process_sample().majflt);
        match self.granularity {
            Granularity::Node => {
                let row = self.row(span, layer_column(name), op, name.to_string(), now, majflt);
                self.rows.push(row);
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
        self.rows.push(row);
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
            step: span.last_pos(),
            seq: self.seq,
            layer,
            op: op.to_string(),
            name,
            wall_ns: now.saturating_duration_since(self.since).as_nanos() as u64,
            majflt: majflt.saturating_sub(self.since_majflt),
        }
    }

    /// Ends the decode whose bracket closed at `end` (layer mode: the open segment's row,
    /// normally `post`, ends there, so a decode's segments sum to its wall exactly, whatever
    /// the scheduler did after the bracket closed): the decode's rows.
    pub fn end_decode(&mut self, end: Instant) -> Vec<ComputeRow> {
        if let (Some(span), Granularity::Layer) = (self.span, self.granularity) {
            let cur = self.segment.unwrap_or(PRE);
            self.close_segment(span, cur, end, process_sample().majflt);
            self.seq += 1;
        }
        self.span = None;
        std::mem::take(&mut self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span() -> DecodeSpan {
        DecodeSpan {
            turn: 1,
            prefill: false,
            pos0: 7,
            n_tokens: 1,
        }
    }

    #[test]
    fn layer_mode_rows_are_segments_in_order() {
        let mut t = NodeTimer::new(Granularity::Layer);
        assert!(!t.wants("norm-0", false), "idle before a decode");
        let start = Instant::now();
        t.begin_decode(span(), start);
        for name in ["inp_embd", "norm-0", "attn-0", "norm-1", "result_output"] {
            if t.wants(name, false) {
                t.observe(name, "OP");
            }
        }
        let end = Instant::now() + std::time::Duration::from_millis(3);
        let rows = t.end_decode(end);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["pre", "blk.0", "blk.1", "post"]);
        assert!(
            rows.iter()
                .all(|r| r.step == 7 && r.phase == 1 && r.turn == 1)
        );
        assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
        // the segments partition the bracket: from its start to its end, to the nanosecond
        let sum: u64 = rows.iter().map(|r| r.wall_ns).sum();
        assert_eq!(u128::from(sum), (end - start).as_nanos());
        assert!(
            rows[3].wall_ns >= 3_000_000,
            "post runs to the bracket's end"
        );
        assert!(
            t.end_decode(Instant::now()).is_empty(),
            "rows are handed out once"
        );
    }

    #[test]
    fn node_mode_rows_name_every_node() {
        let mut t = NodeTimer::new(Granularity::Node);
        t.begin_decode(span(), Instant::now());
        for name in ["inp_embd", "ffn_moe_topk-3"] {
            assert!(t.wants(name, false));
            t.observe(name, "ARGSORT");
        }
        let rows = t.end_decode(Instant::now());
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].layer, rows[1].layer), (-1, 3));
        assert_eq!(rows[1].name, "ffn_moe_topk-3");
    }
}
