//! The built-in default model: when `-m` is omitted, bmoe-cli synthesises bmoe-gguf's `tiny`
//! preset once into a cache folder and runs on it, so the first command of the README needs no
//! download and no real weights.

use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use std::path::{Path, PathBuf};

/// File name of the cached model (bump the suffix when the preset's bytes change).
pub const FILE_NAME: &str = "bmoe-tiny-v1.gguf";

/// The cache folder: `$BMOE_CACHE_DIR`, else `$XDG_CACHE_HOME/bmoe`, else `~/.cache/bmoe`.
pub fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("BMOE_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("bmoe")))
        .or_else(|| env("HOME").map(|h| h.join(".cache").join("bmoe")))
}

/// Whether the default model at `path` had to be synthesised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// It was already there.
    Cached,
    /// Written now.
    Synthesised,
}

/// Why the built-in model could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DefaultModelError {
    /// The cache folder cannot be created.
    #[error("cannot create {}: {source}", dir.display())]
    CreateDir {
        /// The folder.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// bmoe-gguf could not write it.
    #[error("cannot synthesise the default model: {0}")]
    Synthesise(#[source] bmoe_gguf::GgufError),
    /// The finished file could not be renamed into place.
    #[error("cannot move the default model into place: {0}")]
    MoveIntoPlace(#[source] std::io::Error),
}

/// The default model's path, synthesising it into `dir` if absent. Written to a temporary name
/// and renamed, so an interrupted run never leaves a half-written model behind.
///
/// # Errors
/// A [`DefaultModelError`] naming the step that failed.
pub fn ensure_in(dir: &Path) -> Result<(PathBuf, Origin), DefaultModelError> {
    let path = dir.join(FILE_NAME);
    if path.is_file() {
        return Ok((path, Origin::Cached));
    }
    std::fs::create_dir_all(dir).map_err(|source| DefaultModelError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let opts = SynthOptions::preset(Preset::Tiny);
    let written = write_model(&opts, &tmp).map_err(DefaultModelError::Synthesise);
    let result = written
        .and_then(|_| std::fs::rename(&tmp, &path).map_err(DefaultModelError::MoveIntoPlace));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| (path, Origin::Synthesised))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthesises_once_then_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let (p, o) = ensure_in(dir.path()).unwrap();
        assert_eq!(o, Origin::Synthesised);
        assert!(p.is_file() && p.ends_with(FILE_NAME));
        let len = std::fs::metadata(&p).unwrap().len();
        let (p2, o2) = ensure_in(dir.path()).unwrap();
        assert_eq!((p2, o2), (p.clone(), Origin::Cached));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), len);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
