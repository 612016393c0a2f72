//! The one error type of the library: what failed, where, and what to do about it.

use std::path::{Path, PathBuf};

/// Result alias for this crate.
pub type Result<T, E = AnalyzeError> = std::result::Result<T, E>;

/// Everything that can go wrong while reading or analysing a trace.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line of the file does not follow its format.
    #[error("{path}:{line}: {what}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        what: String,
    },
    /// The file lacks a column a view needs.
    #[error("{path}: no column `{column}` - {why}")]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The missing column.
        column: String,
        /// Which view needs it and why.
        why: String,
    },
    /// Nothing to analyse after reading and filtering.
    #[error("{message}")]
    Empty {
        /// What was empty, and after which filters.
        message: String,
        /// What to do: the filter to widen or the input to pass, in the words of the command
        /// that failed (a filter one command has is not a flag of another).
        hint: String,
    },
    /// A telemetry file the contract reader rejected.
    #[error("{0}")]
    Telemetry(String),
    /// Anything else the user can fix, with its own hint.
    #[error("{message}")]
    Invalid {
        /// What failed.
        message: String,
        /// What to do.
        hint: String,
    },
}

impl AnalyzeError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A malformed line `line` (1-based) of `path`.
    pub fn malformed(path: &Path, line: usize, what: impl Into<String>) -> Self {
        Self::Malformed {
            path: path.to_path_buf(),
            line,
            what: what.into(),
        }
    }

    /// Wrap an error of the `bmoe-telemetry` readers (it already names file and line): a bad
    /// row or line keeps its text and gets the malformed-line hint; a file of another kind
    /// (wrong magic line, missing column) gets the wrong-file hint.
    pub fn from_telemetry(path: &Path, err: bmoe_telemetry::Error) -> Self {
        use bmoe_telemetry::Error as E;
        match err {
            E::Io { source, .. } => Self::io(path, source),
            E::Field {
                path,
                line,
                column,
                message,
                found,
            } => Self::Malformed {
                path,
                line: usize::try_from(line).unwrap_or(usize::MAX),
                what: format!("column `{column}`: {message} (found {found:?})"),
            },
            // Line 1 names the magic line: the file is of another kind.
            E::Line {
                path,
                line,
                message,
            } if line > 1 => Self::Malformed {
                path,
                line: usize::try_from(line).unwrap_or(usize::MAX),
                what: message,
            },
            other => Self::Telemetry(other.to_string()),
        }
    }

    /// The `hint:` line printed under the error.
    #[must_use]
    pub fn hint(&self) -> String {
        match self {
            Self::Io { .. } => "check the path; the file must exist and be readable".into(),
            Self::Malformed { .. } => {
                "fix or remove that line; the format is in docs/telemetry.md (the writer may have been killed mid-line)".into()
            }
            Self::MissingColumn { .. } => {
                "record the trace with a bmoe version that writes this column, or pick another view".into()
            }
            Self::Telemetry(_) => "check that the file is the kind of trace this command reads (docs/telemetry.md)".into(),
            Self::Empty { hint, .. } | Self::Invalid { hint, .. } => hint.clone(),
        }
    }
}
