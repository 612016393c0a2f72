//! The built-in default model: when `-m` is omitted, bmoe-cli synthesises bmoe-gguf's `tiny`
//! preset once into a cache folder and runs on it, so the first command of the README needs no
//! download and no real weights.

use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_gguf::{GgufModel, validate};
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// It was already there, intact.
    Cached,
    /// Written now.
    Synthesised,
    /// The cached copy was corrupt (why) and was written again.
    Rebuilt(String),
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

/// The default model's path, synthesising it into `dir` if absent — or again if the cached copy
/// fails its checks (the GGUF checks the engine applies to any model, its size and its checksum),
/// so a cut or bit-flipped cache file is replaced rather than handed to llama.cpp. Written to a
/// temporary name and renamed, so an interrupted run never leaves a half-written model behind.
///
/// # Errors
/// A [`DefaultModelError`] naming the step that failed.
pub fn ensure_in(dir: &Path) -> Result<(PathBuf, Origin), DefaultModelError> {
    let path = dir.join(FILE_NAME);
    let mut origin = Origin::Synthesised;
    if path.is_file() {
        match unusable(&path, &sum_path(dir)) {
            None => return Ok((path, Origin::Cached)),
            Some(why) => origin = Origin::Rebuilt(why),
        }
    }
    std::fs::create_dir_all(dir).map_err(|source| DefaultModelError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let opts = SynthOptions::preset(Preset::Tiny);
    let written = write_model(&opts, &tmp).map_err(DefaultModelError::Synthesise);
    let result = written.and_then(|_| {
        let bytes = std::fs::read(&tmp).map_err(DefaultModelError::MoveIntoPlace)?;
        let sum = format!("{} {:016x}\n", bytes.len(), fingerprint(&bytes));
        std::fs::rename(&tmp, &path).map_err(DefaultModelError::MoveIntoPlace)?;
        // the checksum lands after the model: a run cut in between rebuilds once more
        std::fs::write(sum_path(dir), sum).map_err(DefaultModelError::MoveIntoPlace)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| (path, origin))
}

/// Where the cached model's `<length> <fingerprint>` line is kept.
fn sum_path(dir: &Path) -> PathBuf {
    dir.join(format!(".{FILE_NAME}.sum"))
}

/// FNV-1a over 8-byte words: cheap enough to run on every use of the 4 MiB model (a few ms in
/// a debug build), and any flipped or cut byte changes it.
fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Why the cached model cannot be used, if it cannot (said on stderr, then it is rebuilt).
fn unusable(path: &Path, sum: &Path) -> Option<String> {
    let model = match GgufModel::open(path) {
        Ok(m) => m,
        Err(e) => return Some(e.to_string()),
    };
    if let Err(e) = validate(&model) {
        return Some(e.to_string());
    }
    drop(model);
    let Ok(line) = std::fs::read_to_string(sum) else {
        return Some(format!(
            "{} is missing (made by an older bmoe?)",
            sum.display()
        ));
    };
    let mut it = line.split_whitespace();
    let want_len: Option<u64> = it.next().and_then(|v| v.parse().ok());
    let want_sum = it.next().and_then(|v| u64::from_str_radix(v, 16).ok());
    let (Some(want_len), Some(want_sum)) = (want_len, want_sum) else {
        return Some(format!("{} is unreadable", sum.display()));
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return Some(format!("{}: {e}", path.display())),
    };
    if bytes.len() as u64 != want_len {
        return Some(format!("it has {} bytes, expected {want_len}", bytes.len()));
    }
    (fingerprint(&bytes) != want_sum).then(|| "its contents changed (checksum mismatch)".into())
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
        let good = std::fs::read(&p).unwrap();
        // a flipped byte in the weights (the header still parses), then a cut file, then a
        // block_count llama.cpp would abort on: each is detected and rebuilt to the same bytes
        let mut flipped = good.clone();
        let last = flipped.len() - 100;
        flipped[last] ^= 0x40;
        let data_offset = bmoe_gguf::parse_header(&good).unwrap().data_offset as usize;
        let mut lying = good.clone();
        let key = b"qwen3moe.block_count";
        let at = lying.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
        lying[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        for (bad, why) in [
            (flipped, "checksum"),
            (good[..data_offset + 4096].to_vec(), "past the end"),
            (lying, "block_count"),
        ] {
            std::fs::write(&p, bad).unwrap();
            let (_, o) = ensure_in(dir.path()).unwrap();
            let Origin::Rebuilt(reason) = o else {
                panic!("{why}: not rebuilt: {o:?}")
            };
            assert!(reason.contains(why), "{reason}");
            assert_eq!(std::fs::read(&p).unwrap(), good, "{why}");
            assert_eq!(ensure_in(dir.path()).unwrap().1, Origin::Cached);
        }
        assert_eq!(std::fs::metadata(&p).unwrap().len(), len);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
