//! `--io-trace PATH`: one `# io_trace v1` row per read the streamer issued (the seed's
//! "Decode traces"), written with `bmoe_telemetry::trace`. The streamer's lanes time each read
//! into per-job slots (no lock on the read path); the run loop drains them after every decode
//! and stamps each with its decode and the position of the token whose routing asked for it
//! (`graph::read_steps`).

use std::fs::File;
use std::path::{Path, PathBuf};

use bmoe_telemetry::trace::{DecodeTraceInfo, IoRow, TraceWriter};

use super::SinkError;
use crate::stream::IoRecord;

const FLAG: &str = "--io-trace";

/// Writes the io trace, one decode at a time.
pub struct IoTraceWriter {
    writer: TraceWriter<File, IoRow>,
    /// Where the last complete write ended (a failed one is cut off).
    tail: Option<super::Tail>,
    path: PathBuf,
}

impl IoTraceWriter {
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
    pub fn create(path: &Path, info: &DecodeTraceInfo) -> Result<Self, SinkError> {
        let writer = TraceWriter::create(path, info).map_err(SinkError::creating(FLAG, path))?;
        Ok(Self {
            tail: super::Tail::of(path),
            writer,
            path: path.to_path_buf(),
        })
    }

    /// Writes the reads drained after one decode, `steps[i]` the `step` of `reads[i]`, and
    /// flushes.
    ///
    /// # Errors
    /// [`SinkError::Write`] naming the file (the trace stops there).
    pub fn write_decode(
        &mut self,
        turn: u32,
        phase: u8,
        steps: &[i64],
        reads: &[IoRecord],
    ) -> Result<(), SinkError> {
        let err = SinkError::writing(FLAG, &self.path);
        for (r, &step) in reads.iter().zip(steps) {
            let row = IoRow {
                turn,
                phase,
                step,
                layer: r.layer,
                expert: r.expert,
                proj: r.proj,
                lane: r.lane,
                spec: r.spec,
                offset: r.offset,
                req_bytes: r.req_bytes,
                read_bytes: r.read_bytes,
                latency_ns: r.latency_ns,
            };
            self.writer.write_row(&row).map_err(err)?;
        }
        self.writer.flush().map_err(err)?;
        super::Tail::commit(&mut self.tail);
        Ok(())
    }
}
