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
    flag: &'static str,
    path: PathBuf,
}

impl ComputeTraceWriter {
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
        self.writer.flush().map_err(err)
    }
}
