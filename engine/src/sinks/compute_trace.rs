//! `--compute-trace PATH` / `--compute-trace-layers PATH`: the seed's compute trace v1, written
//! with `bmoe_telemetry::trace` from the rows the graph's node timer collected during each decode.

use std::fs::File;
use std::path::{Path, PathBuf};

use bmoe_telemetry::trace::{ComputeRow, DecodeTraceInfo, TraceWriter};

use super::SinkError;
use crate::graph::timing::Granularity;

/// Writes the compute trace, one decode at a time.
pub struct ComputeTraceWriter {
    writer: TraceWriter<File, ComputeRow>,
    /// Where the last complete write ended (a failed one is cut off).
    tail: Option<super::Tail>,
    flag: &'static str,
    path: PathBuf,
}

impl ComputeTraceWriter {
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
    /// [`SinkError::Create`] naming the flag and the file.
    pub fn create(
        path: &Path,
        info: &DecodeTraceInfo,
        granularity: Granularity,
    ) -> Result<Self, SinkError> {
        let flag = granularity.flag();
        let writer = TraceWriter::create(path, info).map_err(SinkError::creating(flag, path))?;
        Ok(Self {
            tail: super::Tail::of(path),
            writer,
            flag,
            path: path.to_path_buf(),
        })
    }

    /// Writes one decode's rows and flushes.
    ///
    /// # Errors
    /// [`SinkError::Write`] naming the file (the trace stops there).
    pub fn write_decode(&mut self, rows: &[ComputeRow]) -> Result<(), SinkError> {
        let err = SinkError::writing(self.flag, &self.path);
        for row in rows {
            self.writer.write_row(row).map_err(err)?;
        }
        self.writer.flush().map_err(err)?;
        super::Tail::commit(&mut self.tail);
        Ok(())
    }
}
