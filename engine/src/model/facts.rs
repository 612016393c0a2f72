//! What the GGUF headers say before llama.cpp loads anything: every tensor's place, the
//! architecture and the routing counts — read with bmoe-gguf, with a clear error for a path that
//! is not a model file.

use super::index::{FilePlace, ModelIndex, Truncated};
use bmoe_gguf::{GgufError, GgufModel};
use std::path::{Path, PathBuf};

/// The header facts of a model file.
#[derive(Debug, Clone)]
pub struct ModelFacts {
    /// Every tensor's placement, per shard.
    pub index: ModelIndex,
    /// `general.architecture`.
    pub arch: String,
    /// `<arch>.expert_count`, if MoE.
    pub expert_count: Option<i64>,
    /// `<arch>.expert_used_count`, if MoE.
    pub expert_used: Option<i64>,
    /// `<arch>.nextn_predict_layers`: MTP head blocks after the trunk (0 without a head).
    pub mtp_layers: i64,
}

/// Why `-m/--model` is not a model bmoe can read.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The path is a folder.
    #[error("-m/--model is a directory, not a model file: {}", .0.display())]
    IsDirectory(PathBuf),
    /// Nothing is there.
    #[error("model file not found: {}", .0.display())]
    NotFound(PathBuf),
    /// The GGUF headers do not parse.
    #[error(transparent)]
    Unreadable(#[from] GgufError),
    /// A tensor runs past the end of its file.
    #[error(transparent)]
    Truncated(#[from] Truncated),
    /// No `general.architecture` key.
    #[error("{} has no general.architecture", .0.display())]
    NoArchitecture(PathBuf),
}

impl ModelError {
    /// What to do about it.
    pub fn hint(&self) -> &str {
        match self {
            ModelError::IsDirectory(_) => {
                "pass the .gguf file inside it (for a split model, its -00001-of-NNNNN.gguf shard)"
            }
            ModelError::NotFound(_) => "check the -m/--model path",
            ModelError::Unreadable(GgufError::NotFirstShard { .. }) => {
                "pass the -00001-of-NNNNN.gguf shard"
            }
            ModelError::Unreadable(GgufError::Hparams { hint, .. }) => hint,
            ModelError::Unreadable(GgufError::UnknownArch { hint, .. }) => hint,
            ModelError::Unreadable(GgufError::Split { .. }) => {
                "keep every shard of a split model in one folder, named as written"
            }
            ModelError::Unreadable(_) => {
                "is this a GGUF v3 file? a truncated or corrupt file cannot be parsed"
            }
            ModelError::Truncated(_) => {
                "the download or copy was cut short: fetch or regenerate the model file"
            }
            ModelError::NoArchitecture(_) => "not a llama.cpp model file",
        }
    }
}

/// Reads the headers of every shard of `path` (through bmoe-gguf), checks every hyperparameter
/// llama.cpp asserts on and the tensor layout ([`bmoe_gguf::validate`]), and that no tensor runs
/// past its file's end.
///
/// # Errors
/// A [`ModelError`] naming the path.
pub fn read_facts(path: &Path) -> Result<ModelFacts, ModelError> {
    if path.is_dir() {
        return Err(ModelError::IsDirectory(path.to_path_buf()));
    }
    if !path.is_file() {
        return Err(ModelError::NotFound(path.to_path_buf()));
    }
    let model = GgufModel::open(path)?;
    // llama.cpp aborts (GGML_ASSERT, exit 134) on some of these: catch them first, with the key
    bmoe_gguf::validate(&model)?;
    let mut index = ModelIndex::default();
    for shard in model.shards() {
        index.shards.push(shard.path().to_path_buf());
        index.shard_sizes.push(shard.bytes().len() as u64);
    }
    for t in model.tensors() {
        index.tensors.insert(
            t.info.name.clone(),
            FilePlace {
                shard: t.shard,
                offset: t.info.file_offset,
                size: t.info.n_bytes,
            },
        );
    }
    if let Some(cut) = index.truncation() {
        return Err(cut.into());
    }
    let arch = model
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| ModelError::NoArchitecture(path.to_path_buf()))?;
    let int = |key: String| {
        model
            .get(&key)
            .and_then(|v| v.as_u64())
            .and_then(|v| i64::try_from(v).ok())
    };
    Ok(ModelFacts {
        expert_count: int(format!("{arch}.expert_count")),
        expert_used: int(format!("{arch}.expert_used_count")),
        mtp_layers: int(format!("{arch}.nextn_predict_layers")).unwrap_or(0),
        index,
        arch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_model_is_a_clear_error() {
        let e = read_facts(Path::new("/nonexistent/x.gguf")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.gguf") && !e.hint().is_empty());
    }

    #[test]
    fn a_folder_is_not_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_facts(dir.path()).unwrap_err();
        assert!(matches!(e, ModelError::IsDirectory(_)), "{e}");
        assert!(e.hint().contains(".gguf"));
    }
}
