//! The one error type of the crate.
//!
//! Every file error names the file (or the label the reader was given), the 1-based line
//! number and, where a single field is at fault, the column name — so a message can be acted
//! on without opening a debugger.

use std::path::PathBuf;

/// Convenient alias used by every fallible function of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading or writing a telemetry file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused an open, read or write.
    #[error("{path}: {source}")]
    Io {
        /// File (or reader label) being accessed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A field could not be read as the type its column holds.
    #[error("{path}:{line}: column `{column}`: {message} (found {found:?})")]
    Field {
        /// File (or reader label).
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// Column (or preamble key) name.
        column: String,
        /// What was wrong, e.g. "expected an unsigned integer".
        message: String,
        /// The offending text (truncated to 64 bytes).
        found: String,
    },

    /// A line is structurally wrong (too few fields, an unterminated quote, no header…).
    #[error("{path}:{line}: {message}")]
    Line {
        /// File (or reader label).
        path: PathBuf,
        /// 1-based line number (0 when the problem concerns the whole file).
        line: u64,
        /// What was wrong and, where possible, what to do about it.
        message: String,
    },

    /// The header row lacks a column this reader cannot do without.
    #[error(
        "{path}:{line}: header has no `{column}` column; this does not look like a {format} file"
    )]
    MissingColumn {
        /// File (or reader label).
        path: PathBuf,
        /// 1-based line number of the header row.
        line: u64,
        /// The missing column.
        column: String,
        /// The format the reader expected, e.g. "route trace v1".
        format: &'static str,
    },

    /// A value handed to a writer cannot be represented in the format.
    #[error("cannot write {what}: {message}")]
    Unwritable {
        /// The field or key being written.
        what: String,
        /// Why it cannot be written.
        message: String,
    },
}

impl Error {
    /// Builds an [`Error::Field`], truncating the offending text so a binary blob cannot flood
    /// a terminal.
    pub(crate) fn field(
        path: &std::path::Path,
        line: u64,
        column: &str,
        message: impl Into<String>,
        found: &[u8],
    ) -> Self {
        let shown = &found[..found.len().min(64)];
        Error::Field {
            path: path.to_path_buf(),
            line,
            column: column.to_string(),
            message: message.into(),
            found: String::from_utf8_lossy(shown).into_owned(),
        }
    }

    /// Builds an [`Error::Line`].
    pub(crate) fn line(path: &std::path::Path, line: u64, message: impl Into<String>) -> Self {
        Error::Line {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    /// Builds an [`Error::Io`].
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
