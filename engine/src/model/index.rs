//! Where every tensor of a (possibly split) model lives in its files: what the GGUF headers say,
//! before llama.cpp maps anything.

use std::collections::HashMap;
use std::path::PathBuf;

/// One tensor's placement in a (possibly split) model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilePlace {
    /// Shard index (0 for a single-file model).
    pub shard: usize,
    /// Absolute byte offset of the data in that shard.
    pub offset: u64,
    /// Data size in bytes.
    pub size: u64,
}

/// Every tensor of a model by name, and the shard files.
#[derive(Debug, Clone, Default)]
pub struct ModelIndex {
    /// Shard paths in order (one entry for a single-file model).
    pub shards: Vec<PathBuf>,
    /// Shard sizes in bytes.
    pub shard_sizes: Vec<u64>,
    /// Tensor name → placement.
    pub tensors: HashMap<String, FilePlace>,
}

/// A tensor whose data runs past the end of its shard: the file was cut short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "model file is truncated: {} has {shard_bytes} bytes but tensor '{tensor}' needs bytes up to {needs}",
    shard.display()
)]
pub struct Truncated {
    /// The shard.
    pub shard: PathBuf,
    /// Its size.
    pub shard_bytes: u64,
    /// The first tensor (by offset) that does not fit.
    pub tensor: String,
    /// The byte its data ends at.
    pub needs: u64,
}

impl ModelIndex {
    /// The first tensor (by offset) whose data runs past the end of its shard.
    pub fn truncation(&self) -> Option<Truncated> {
        let mut worst: Option<(&String, &FilePlace)> = None;
        for (name, p) in &self.tensors {
            let size = self.shard_sizes.get(p.shard).copied().unwrap_or(0);
            if p.offset + p.size > size && worst.is_none_or(|(_, w)| p.offset < w.offset) {
                worst = Some((name, p));
            }
        }
        worst.map(|(name, p)| Truncated {
            shard: self.shards.get(p.shard).cloned().unwrap_or_default(),
            shard_bytes: self.shard_sizes.get(p.shard).copied().unwrap_or(0),
            tensor: name.clone(),
            needs: p.offset + p.size,
        })
    }
}
