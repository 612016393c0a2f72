//! Errors of the reader, the writer and the synthesiser.

use std::path::PathBuf;

/// A malformed GGUF byte stream: what is wrong and at which byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {offset}: {message}")]
pub struct ParseError {
    /// Byte offset where the problem was found.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
}

/// Everything that can go wrong reading, writing or synthesising GGUF files.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// An I/O operation on `path` failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error (part of the message, so not repeated as a source).
        error: std::io::Error,
    },
    /// The file is not a valid GGUF v3 file.
    #[error("{}: not a valid GGUF file: {error}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Where and what (part of the message, so not repeated as a source).
        error: ParseError,
    },
    /// A shard other than the first of a split set was passed.
    #[error(
        "{}: this is shard {} of {} of a split model; open the first shard {} instead",
        path.display(), no + 1, count, first.display()
    )]
    NotFirstShard {
        /// The file passed.
        path: PathBuf,
        /// Its zero-based `split.no`.
        no: u64,
        /// `split.count`.
        count: u64,
        /// The first shard's expected path.
        first: PathBuf,
    },
    /// A shard of a split set is missing or inconsistent.
    #[error("{}: split set is broken: {message}", path.display())]
    Split {
        /// The shard concerned.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file parses, but a hyperparameter or the tensor layout is one llama.cpp would abort
    /// on or refuse (or one bmoe cannot stream): caught before the file is handed to llama.cpp.
    #[error("{}: {key}{}: {message}", path.display(), at_byte(*offset))]
    Hparams {
        /// The file (the shard holding the offending key or tensor).
        path: PathBuf,
        /// The metadata key or tensor name (escaped).
        key: String,
        /// Byte offset of the key's value or the tensor's info record, when known.
        offset: Option<u64>,
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: String,
    },
    /// The file's `general.architecture` names no architecture bmoe streams (and so none it
    /// can check): refused before any architecture-specific key is looked up.
    #[error(
        "{}: unknown architecture '{arch}'; supported: {}",
        path.display(), crate::validate::MOE_ARCHITECTURES.join(", ")
    )]
    UnknownArch {
        /// The file.
        path: PathBuf,
        /// The architecture name as the file spells it (escaped).
        arch: String,
        /// What to do about it.
        hint: String,
    },
    /// Writing was cancelled (a signal); the partial files were removed.
    #[error("interrupted; removed the partial file(s) {}", list(removed))]
    Interrupted {
        /// The partial files removed.
        removed: Vec<PathBuf>,
    },
    /// A request that cannot be satisfied (bad dimensions, bad option value...).
    #[error("{0}")]
    Invalid(String),
}

fn list(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

fn at_byte(offset: Option<u64>) -> String {
    offset.map_or_else(String::new, |o| format!(" (at byte {o})"))
}

impl GgufError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        GgufError::Io {
            path: path.into(),
            error: source,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
