//! A copy of a GGUF model with its metadata and tensor specs edited, written by the real writer.
//!
//! Hostile-input and validation tests need files where exactly one fact is wrong (a count, a
//! shape, a missing key) while everything else is what the synthesiser wrote; building them by
//! patching bytes would also break offsets and alignment. Editing the parsed model and writing it
//! again keeps the rest of the file valid.

use std::path::Path;

use crate::writer::{FileLayout, TensorFill, TensorSpec, write_gguf};
use crate::{GgufModel, MetaValue, Result};

/// Each tensor's bytes come from the source model's tensor of the same name, zero-padded or cut
/// when an edit changed its size, and zeros for a tensor the edit added.
struct CopyByName<'a> {
    model: &'a GgufModel,
    names: Vec<String>,
}

impl TensorFill for CopyByName<'_> {
    fn fill(&mut self, tensor: usize, offset: u64, out: &mut [u8]) {
        let src = self
            .names
            .get(tensor)
            .and_then(|name| self.model.tensor(name))
            .map_or(&[][..], |t| self.model.tensor_data(t));
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, b) in out.iter_mut().enumerate() {
            *b = start
                .checked_add(i)
                .and_then(|at| src.get(at))
                .copied()
                .unwrap_or(0);
        }
    }
}

/// Writes `model` to `path` as one file after `edit` has changed its metadata and tensor specs,
/// with the first shard's alignment; tensor data is copied by name (see the module docs).
///
/// Returns the layout written, as [`write_gguf`] does.
pub fn write_edited(
    model: &GgufModel,
    path: &Path,
    edit: impl FnOnce(&mut Vec<(String, MetaValue)>, &mut Vec<TensorSpec>),
) -> Result<Vec<FileLayout>> {
    let mut metadata = model.metadata().to_vec();
    let mut specs: Vec<TensorSpec> = model
        .tensors()
        .iter()
        .map(|t| TensorSpec::new(t.info.name.clone(), t.info.ggml_type, &t.info.dims))
        .collect();
    edit(&mut metadata, &mut specs);
    let alignment = model
        .shards()
        .first()
        .map_or(crate::parse::DEFAULT_ALIGNMENT, |s| s.header().alignment);
    let mut fill = CopyByName {
        model,
        names: specs.iter().map(|s| s.name.clone()).collect(),
    };
    write_gguf(path, &metadata, &specs, alignment, 1, &mut fill)
}
