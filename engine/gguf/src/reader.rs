//! Opening GGUF files (memory-mapped) and split sets as one model.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{GgufError, Result};
use crate::parse::{GgufHeader, TensorInfo, parse_header};
use crate::value::MetaValue;

/// Metadata key: zero-based index of a shard in a split set.
pub const KEY_SPLIT_NO: &str = "split.no";
/// Metadata key: number of shards of a split set.
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// Metadata key: total tensors over all shards of a split set.
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// One memory-mapped GGUF file and its parsed header.
pub struct GgufFile {
    path: PathBuf,
    map: memmap2::Mmap,
    header: GgufHeader,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl GgufFile {
    /// Map and parse one file (a single file, or one shard of a split set).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| GgufError::io(&path, e))?;
        let map = crate::mmap::map_readonly(&file).map_err(|e| GgufError::io(&path, e))?;
        // The header is a few pages at the start: on a cold file, read-around on its faults
        // (read_ahead_kb, often MiBs) would read tensor data nobody asked for — the expert bytes
        // a streamed first load must not read. Normal readahead again for tensor readers.
        // Best effort: advice only changes readahead.
        let _ = map.advise(memmap2::Advice::Random);
        let header = parse_header(&map).map_err(|error| GgufError::Malformed {
            path: path.clone(),
            error,
        })?;
        let _ = map.advise(memmap2::Advice::Normal);
        Ok(Self { path, map, header })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The whole mapped file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The data of `tensor` (which must come from this file's header).
    pub fn tensor_data(&self, tensor: &TensorInfo) -> &[u8] {
        let start = tensor.file_offset as usize;
        // Bounds were checked at parse time against this very map.
        self.map
            .get(start..start + tensor.n_bytes as usize)
            .unwrap_or_default()
    }

    fn split_field(&self, key: &str) -> Result<Option<u64>> {
        match self.header.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| GgufError::Split {
                path: self.path.clone(),
                message: format!("{key} is {v}, expected an unsigned integer"),
            }),
        }
    }
}

/// A tensor of a (possibly split) model: its info and the shard holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTensor {
    /// Index of the shard in [`GgufModel::shards`] (0 for unsplit models).
    pub shard: usize,
    /// The tensor info; `file_offset` is within that shard's file.
    pub info: TensorInfo,
}

/// A model: one GGUF file or a whole split set opened through its first shard.
#[derive(Debug)]
pub struct GgufModel {
    shards: Vec<GgufFile>,
    tensors: Vec<ModelTensor>,
}

/// The path of shard `no` (zero-based) of `count` for split prefix `prefix`
/// (llama.cpp's `llama_split_path` convention: `<prefix>-00001-of-00003.gguf`).
pub fn split_path(prefix: &str, no: u64, count: u64) -> PathBuf {
    PathBuf::from(format!("{prefix}-{:05}-of-{count:05}.gguf", no + 1))
}

/// The split prefix of `path` if it is named like shard `no` of `count`.
pub fn split_prefix(path: &Path, no: u64, count: u64) -> Option<String> {
    let s = path.to_str()?;
    let suffix = format!("-{:05}-of-{count:05}.gguf", no + 1);
    s.strip_suffix(&suffix).map(str::to_string)
}

impl GgufModel {
    /// Open a model. For a split set pass the first shard (`…-00001-of-0000N.gguf`); the other
    /// shards are found next to it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let first = GgufFile::open(path)?;
        let count = first.split_field(KEY_SPLIT_COUNT)?.unwrap_or(1);
        let no = first.split_field(KEY_SPLIT_NO)?.unwrap_or(0);
        if count <= 1 {
            let tensors = first
                .header
                .tensors
                .iter()
                .map(|info| ModelTensor {
                    shard: 0,
                    info: info.clone(),
                })
                .collect();
            return Ok(Self {
                shards: vec![first],
                tensors,
            });
        }
        if no >= count {
            return Err(GgufError::Split {
                path: first.path.clone(),
                message: format!("split.no {no} is not below split.count {count}"),
            });
        }
        let prefix = split_prefix(&first.path, no, count).ok_or_else(|| GgufError::Split {
            path: first.path.clone(),
            message: format!(
                "file is shard {} of {count} but is not named <prefix>-{:05}-of-{count:05}.gguf, so its siblings cannot be found",
                no + 1,
                no + 1
            ),
        })?;
        if no != 0 {
            return Err(GgufError::NotFirstShard {
                path: first.path.clone(),
                no,
                count,
                first: split_path(&prefix, 0, count),
            });
        }
        let expected_tensors = first.split_field(KEY_SPLIT_TENSORS_COUNT)?;
        let mut shards = vec![first];
        for i in 1..count {
            let p = split_path(&prefix, i, count);
            if !p.exists() {
                return Err(GgufError::Split {
                    path: p.clone(),
                    message: format!("shard {} of {count} is missing", i + 1),
                });
            }
            let f = GgufFile::open(&p)?;
            let got = f.split_field(KEY_SPLIT_NO)?;
            if got != Some(i) {
                return Err(GgufError::Split {
                    path: p,
                    message: match got {
                        Some(n) => format!("split.no is {n}, expected {i}"),
                        None => format!("split.no is missing, expected {i}"),
                    },
                });
            }
            let theirs = f.split_field(KEY_SPLIT_COUNT)?;
            if theirs != Some(count) {
                return Err(GgufError::Split {
                    path: p,
                    message: match theirs {
                        Some(n) => format!(
                            "split.count is {n} but the first shard says the set has {count} shards"
                        ),
                        None => format!("split.count is missing (the first shard says {count})"),
                    },
                });
            }
            shards.push(f);
        }
        let mut tensors: Vec<ModelTensor> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, s) in shards.iter().enumerate() {
            for info in &s.header.tensors {
                if !seen.insert(info.name.clone()) {
                    return Err(GgufError::Split {
                        path: s.path.clone(),
                        message: format!(
                            "tensor {} appears in more than one shard",
                            crate::value::escape(&info.name)
                        ),
                    });
                }
                tensors.push(ModelTensor {
                    shard: i,
                    info: info.clone(),
                });
            }
        }
        if let Some(n) = expected_tensors
            && n != tensors.len() as u64
        {
            return Err(GgufError::Split {
                path: shards[0].path.clone(),
                message: format!(
                    "split.tensors.count says {n} tensors but the shards hold {}",
                    tensors.len()
                ),
            });
        }
        Ok(Self { shards, tensors })
    }

    /// The shard files, first one first.
    pub fn shards(&self) -> &[GgufFile] {
        &self.shards
    }

    /// All tensors over all shards, in shard then file order.
    pub fn tensors(&self) -> &[ModelTensor] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&ModelTensor> {
        self.tensors.iter().find(|t| t.info.name == name)
    }

    /// Metadata of the first shard (which holds the model's KVs).
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.shards[0].header.metadata
    }

    /// The value of metadata key `key` (first shard).
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.shards[0].header.get(key)
    }

    /// The bytes of a tensor of this model.
    pub fn tensor_data(&self, t: &ModelTensor) -> &[u8] {
        self.shards
            .get(t.shard)
            .map(|s| s.tensor_data(&t.info))
            .unwrap_or_default()
    }
}
