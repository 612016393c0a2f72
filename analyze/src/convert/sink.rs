//! Where record batches go: a Parquet or Arrow IPC writer over a temporary file that becomes
//! the output only when [`Sink::finish`] succeeds.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::writer::{DictionaryHandling, FileWriter, IpcWriteOptions};
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use tempfile::NamedTempFile;

use crate::{AnalyzeError, Result};

/// The file format `convert` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Apache Parquet, snappy-compressed, row groups of at most
    /// [`super::ROW_GROUP_ROWS`] rows.
    Parquet,
    /// Arrow IPC file format (Feather v2), uncompressed: memory-mappable as is.
    Arrow,
}

impl Target {
    /// The file extension of the format.
    pub fn extension(self) -> &'static str {
        match self {
            Target::Parquet => "parquet",
            Target::Arrow => "arrow",
        }
    }
}

enum Writer {
    Parquet(ArrowWriter<File>),
    Ipc(FileWriter<BufWriter<File>>),
}

/// An open output: batches are written to a hidden temporary file next to the target.
pub(crate) struct Sink {
    writer: Writer,
    // Removed on drop unless persisted: a failed conversion leaves nothing behind.
    tmp: NamedTempFile,
    output: PathBuf,
    target: Target,
}

impl Sink {
    /// Creates the temporary file and writes the format's header (Arrow: the schema).
    pub(crate) fn create(
        output: &Path,
        target: Target,
        schema: SchemaRef,
        meta: &[(String, String)],
    ) -> Result<Sink> {
        let dir = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = output
            .file_name()
            .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(dir)
            .map_err(|e| cannot_write(output, target, e.to_string()))?;
        let file = tmp
            .as_file()
            .try_clone()
            .map_err(|e| AnalyzeError::io(tmp.path(), e))?;
        let writer = match target {
            Target::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .set_max_row_group_row_count(Some(super::ROW_GROUP_ROWS))
                    .set_key_value_metadata(Some(
                        meta.iter()
                            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                            .collect(),
                    ))
                    .build();
                Writer::Parquet(
                    ArrowWriter::try_new(file, schema, Some(props))
                        .map_err(|e| cannot_write(output, target, e.to_string()))?,
                )
            }
            Target::Arrow => {
                let options =
                    IpcWriteOptions::default().with_dictionary_handling(DictionaryHandling::Delta);
                Writer::Ipc(
                    FileWriter::try_new_with_options(
                        BufWriter::with_capacity(1 << 20, file),
                        &schema,
                        options,
                    )
                    .map_err(|e| cannot_write(output, target, e.to_string()))?,
                )
            }
        };
        Ok(Sink {
            writer,
            tmp,
            output: output.to_path_buf(),
            target,
        })
    }

    /// Appends one batch.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let r = match &mut self.writer {
            Writer::Parquet(w) => w.write(batch).map_err(|e| e.to_string()),
            Writer::Ipc(w) => w.write(batch).map_err(|e| e.to_string()),
        };
        r.map_err(|e| cannot_write(&self.output, self.target, e))
    }

    /// Writes the footer (with `tail`, metadata known only at the end), syncs, and renames the
    /// temporary file over the output.
    pub(crate) fn finish(self, tail: &[(String, String)]) -> Result<()> {
        let Sink {
            writer,
            tmp,
            output,
            target,
        } = self;
        let fail = |e: String| cannot_write(&output, target, e);
        match writer {
            Writer::Parquet(mut w) => {
                for (k, v) in tail {
                    w.append_key_value_metadata(KeyValue::new(k.clone(), v.clone()));
                }
                w.close().map_err(|e| fail(e.to_string()))?;
            }
            Writer::Ipc(mut w) => {
                for (k, v) in tail {
                    w.write_metadata(k.clone(), v.clone());
                }
                w.finish().map_err(|e| fail(e.to_string()))?;
                w.into_inner()
                    .map_err(|e| fail(e.to_string()))?
                    .into_inner()
                    .map_err(|e| fail(e.error().to_string()))?;
            }
        }
        tmp.as_file().sync_all().map_err(|e| fail(e.to_string()))?;
        // The temporary file is created 0600; the output is an ordinary data file.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = tmp
                .as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644));
        }
        tmp.persist(&output)
            .map_err(|e| fail(e.error.to_string()))?;
        Ok(())
    }
}

fn cannot_write(output: &Path, target: Target, why: String) -> AnalyzeError {
    AnalyzeError::Invalid {
        message: format!(
            "{}: cannot write the {} file: {why}",
            output.display(),
            target.extension()
        ),
        hint: "check that the output directory exists, is writable and has space (pick another with -o)".into(),
    }
}
