//! `--io-trace PATH`: one `# io_trace v1` row per read the streamer issued (the seed's
//! "Decode traces"), written with `bmoe_telemetry::trace`. The streamer's lanes time each read
//! into per-job slots (no lock on the read path); the run loop drains them after every decode
//! and stamps them with that decode.

use std::fs::File;
use std::path::Path;

use bmoe_telemetry::trace::{DecodeTraceInfo, IoRow, TraceWriter};

use crate::stream::IoRecord;

/// Writes the io trace, one decode at a time.
pub struct IoTracer {
    writer: TraceWriter<File, IoRow>,
    path: String,
}

impl IoTracer {
    /// Creates `path` and writes the preamble.
    ///
    /// # Errors
    /// A message naming the file when it cannot be written.
    pub fn create(path: &Path, info: &DecodeTraceInfo) -> Result<Self, String> {
        let writer = TraceWriter::create(path, info)
            .map_err(|e| format!("cannot write --io-trace {}: {e}", path.display()))?;
        Ok(Self {
            writer,
            path: path.display().to_string(),
        })
    }

    /// Writes the reads drained after one decode and flushes.
    ///
    /// # Errors
    /// A message naming the file on a write error.
    pub fn write_decode(
        &mut self,
        turn: u32,
        phase: u8,
        step: i64,
        reads: &[IoRecord],
    ) -> Result<(), String> {
        let err = |e: bmoe_telemetry::Error| format!("writing --io-trace {}: {e}", self.path);
        for r in reads {
            let row = IoRow {
                turn,
                phase,
                step,
                layer: r.layer,
                expert: r.expert,
                proj: r.proj,
                lane: r.lane,
                spec: false,
                offset: r.offset,
                req_bytes: r.req_bytes,
                read_bytes: r.read_bytes,
                latency_ns: r.latency_ns,
            };
            self.writer.write_row(&row).map_err(err)?;
        }
        self.writer.flush().map_err(err)
    }
}
