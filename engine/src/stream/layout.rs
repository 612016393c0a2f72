//! Where every expert lives: captured tensors bound to their GGUF file offsets.
//!
//! Pure planning: binding checks, the O_DIRECT read windows and the refill ranges are computed
//! here without touching memory, so they are unit-tested without a model.

use crate::ffi::WeightRef;
use crate::model::index::ModelIndex;
use crate::model::registry::Recipe;
use std::collections::BTreeMap;

/// Alignment of O_DIRECT windows (file offset, memory address and length).
pub const DIRECT_ALIGN: u64 = 4096;

/// One expert tensor of one layer, bound to memory and file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertTensor {
    /// GGUF name.
    pub name: String,
    /// Address of expert 0 in process memory.
    pub addr: usize,
    /// Total bytes (all experts).
    pub bytes: usize,
    /// Bytes per expert (`nb[2]`).
    pub stride: usize,
    /// Shard index.
    pub shard: usize,
    /// File offset of expert 0.
    pub offset: u64,
}

/// The experts of one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerExperts {
    /// One tensor per recipe slot (gate/up/down or gate_up/down).
    pub tensors: Vec<ExpertTensor>,
}

impl LayerExperts {
    /// Bytes of one expert across all its tensors (a cache entry).
    pub fn entry_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.stride as u64).sum()
    }
}

/// The bound expert layout of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertLayout {
    /// Experts per layer.
    pub n_expert: usize,
    /// Per layer index: its experts, or `None` for layers without routed experts.
    pub layers: Vec<Option<LayerExperts>>,
    /// Per shard: the address of file offset 0 in llama.cpp's mapping, if any expert lives there.
    pub shard_bases: Vec<Option<usize>>,
}

/// Why binding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// No expert tensor was seen during the capture decode.
    #[error("no MoE expert tensors captured — is this a MoE model?")]
    NothingCaptured,
    /// A layer's expert tensors do not form a known layout.
    #[error(
        "layer {layer} has expert tensors [{found}], which is not a layout the {arch} recipe knows ({expected})"
    )]
    BadLayout {
        /// Layer index.
        layer: usize,
        /// Architecture.
        arch: String,
        /// Captured suffixes.
        found: String,
        /// Accepted layouts.
        expected: String,
    },
    /// A captured tensor is not in the GGUF index.
    #[error("no gguf offset for tensor {0}")]
    NoOffset(String),
    /// Expert counts disagree.
    #[error("inconsistent expert count: tensor {name} has {got}, expected {want}")]
    ExpertCount {
        /// Tensor.
        name: String,
        /// Its `ne[2]`.
        got: usize,
        /// The first tensor's.
        want: usize,
    },
    /// Tensor sizes disagree between memory and file.
    #[error("tensor {name} is {mem} bytes in memory but {file} bytes in the file")]
    SizeMismatch {
        /// Tensor.
        name: String,
        /// Bytes in memory.
        mem: usize,
        /// Bytes in the GGUF.
        file: u64,
    },
    /// Tensors of one shard are not at one page-aligned `base + offset`.
    #[error(
        "tensor {name} is not at the mmap base of its file (llama.cpp did not map the model file as-is; streaming needs mmap load mode without repacking)"
    )]
    NotFileMapped {
        /// Tensor.
        name: String,
    },
}

/// Binds captured expert tensors to file places: every layer must match one of the recipe's
/// layouts, every tensor must have a GGUF place of the same size and a consistent expert count,
/// and every shard's tensors must sit at one page-aligned mapping base.
pub fn bind(
    recipe: &Recipe,
    captured: &[(usize, &'static str, WeightRef)],
    index: &ModelIndex,
) -> Result<ExpertLayout, BindError> {
    if captured.is_empty() {
        return Err(BindError::NothingCaptured);
    }
    let mut by_layer: BTreeMap<usize, Vec<(&'static str, &WeightRef)>> = BTreeMap::new();
    for (il, suffix, w) in captured {
        let v = by_layer.entry(*il).or_default();
        if !v.iter().any(|(s, _)| s == suffix) {
            v.push((suffix, w));
        }
    }
    let n_expert = captured[0].2.n_expert;
    let n_layers = by_layer.keys().next_back().map_or(0, |l| l + 1);
    let mut layers = vec![None; n_layers];
    let mut shard_bases: Vec<Option<usize>> = vec![None; index.shards.len()];
    for (il, found) in by_layer {
        let suffixes: Vec<&str> = found.iter().map(|(s, _)| *s).collect();
        let layout = recipe
            .layout_for(&suffixes)
            .ok_or_else(|| BindError::BadLayout {
                layer: il,
                arch: recipe.arch.to_string(),
                found: suffixes.join(", "),
                expected: recipe
                    .layouts
                    .iter()
                    .map(|l| l.join(" + "))
                    .collect::<Vec<_>>()
                    .join(" | "),
            })?;
        let mut tensors = Vec::with_capacity(layout.len());
        for slot in layout {
            let Some((_, w)) = found.iter().find(|(s, _)| s == slot) else {
                continue;
            };
            if w.n_expert != n_expert {
                return Err(BindError::ExpertCount {
                    name: w.name.clone(),
                    got: w.n_expert,
                    want: n_expert,
                });
            }
            let place = index
                .tensors
                .get(&w.name)
                .ok_or_else(|| BindError::NoOffset(w.name.clone()))?;
            if place.size != w.bytes as u64 || w.expert_stride * w.n_expert != w.bytes {
                return Err(BindError::SizeMismatch {
                    name: w.name.clone(),
                    mem: w.bytes,
                    file: place.size,
                });
            }
            let base = w.addr.wrapping_sub(place.offset as usize);
            let slot_base = shard_bases
                .get_mut(place.shard)
                .ok_or_else(|| BindError::NoOffset(w.name.clone()))?;
            match slot_base {
                Some(b) if *b != base => {
                    return Err(BindError::NotFileMapped {
                        name: w.name.clone(),
                    });
                }
                _ if base % DIRECT_ALIGN as usize != 0 => {
                    return Err(BindError::NotFileMapped {
                        name: w.name.clone(),
                    });
                }
                _ => *slot_base = Some(base),
            }
            tensors.push(ExpertTensor {
                name: w.name.clone(),
                addr: w.addr,
                bytes: w.bytes,
                stride: w.expert_stride,
                shard: place.shard,
                offset: place.offset,
            });
        }
        layers[il] = Some(LayerExperts { tensors });
    }
    Ok(ExpertLayout {
        n_expert,
        layers,
        shard_bases,
    })
}

impl ExpertLayout {
    /// Bytes of one entry (expert) per layer; 0 for layers without experts.
    pub fn entry_bytes(&self) -> Vec<u64> {
        self.layers
            .iter()
            .map(|l| l.as_ref().map_or(0, LayerExperts::entry_bytes))
            .collect()
    }

    /// Bytes of every expert of every layer.
    pub fn total_bytes(&self) -> u64 {
        self.entry_bytes().iter().sum::<u64>() * self.n_expert as u64
    }

    /// One token's worst case: `top_k` distinct experts in every streamed layer.
    pub fn cache_cycle_bytes(&self, top_k: usize) -> u64 {
        self.entry_bytes().iter().sum::<u64>() * top_k.min(self.n_expert) as u64
    }

    /// Bytes of one expert in the widest layer.
    pub fn max_entry_bytes(&self) -> u64 {
        self.entry_bytes().into_iter().max().unwrap_or(0)
    }

    /// One token's worst case in the widest layer: `top_k` distinct experts of it.
    pub fn layer_load_bytes(&self, top_k: usize) -> u64 {
        self.entry_bytes().into_iter().max().unwrap_or(0) * top_k.min(self.n_expert) as u64
    }

    /// Every bound tensor.
    pub fn tensors(&self) -> impl Iterator<Item = &ExpertTensor> {
        self.layers.iter().flatten().flat_map(|l| l.tensors.iter())
    }

    /// Byte ranges `(shard, file offset, len)` inside the pages taken over from the file that
    /// belong to no expert tensor: they must be refilled from the file after the takeover.
    /// Ranges past a shard's end are clipped (those pages were zero in the mapping too).
    pub fn refill_ranges(&self, shard_sizes: &[u64]) -> Vec<(usize, u64, u64)> {
        let a = DIRECT_ALIGN;
        let mut out = Vec::new();
        for shard in 0..self.shard_bases.len() {
            let mut tens: Vec<(u64, u64)> = self
                .tensors()
                .filter(|t| t.shard == shard)
                .map(|t| (t.offset, t.offset + t.bytes as u64))
                .collect();
            tens.sort();
            let spans: Vec<(u64, u64)> = {
                let mut merged: Vec<(u64, u64)> = Vec::new();
                for &(s, e) in &tens {
                    let (ps, pe) = (s / a * a, e.div_ceil(a) * a);
                    match merged.last_mut() {
                        Some(last) if ps <= last.1 => last.1 = last.1.max(pe),
                        _ => merged.push((ps, pe)),
                    }
                }
                merged
            };
            let size = shard_sizes.get(shard).copied().unwrap_or(0);
            for (ps, pe) in spans {
                let end = pe.min(size);
                let mut cur = ps;
                for &(ts, te) in &tens {
                    if te <= ps || ts >= end {
                        continue;
                    }
                    if ts > cur {
                        out.push((shard, cur, ts - cur));
                    }
                    cur = cur.max(te);
                }
                if cur < end {
                    out.push((shard, cur, end - cur));
                }
            }
        }
        out
    }
}

/// One read into expert memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadJob {
    /// Shard to read.
    pub shard: usize,
    /// File offset of the first byte read.
    pub offset: u64,
    /// Destination address of that byte.
    pub addr: usize,
    /// Bytes to request.
    pub len: usize,
    /// Bytes that must arrive (the slice's end minus `offset`); fewer is a short read.
    pub need: usize,
    /// The slice's own first byte (for error messages).
    pub slice_offset: u64,
}

impl ReadJob {
    /// The read of `len` bytes at file `offset` into `addr`: exact when buffered; with O_DIRECT
    /// widened to aligned windows (the extra bytes are the file's own, written in place).
    pub fn plan(shard: usize, offset: u64, addr: usize, len: usize, direct: bool) -> Self {
        if !direct {
            return Self {
                shard,
                offset,
                addr,
                len,
                need: len,
                slice_offset: offset,
            };
        }
        let a = DIRECT_ALIGN;
        let a0 = offset / a * a;
        let a1 = (offset + len as u64).div_ceil(a) * a;
        let lead = (offset - a0) as usize;
        Self {
            shard,
            offset: a0,
            addr: addr - lead,
            len: (a1 - a0) as usize,
            need: lead + len,
            slice_offset: offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::index::FilePlace;
    use crate::model::registry::recipe_for;

    const BASE: usize = 0x7f00_0000_0000;

    fn index(entries: &[(&str, usize, u64, u64)]) -> ModelIndex {
        ModelIndex {
            shards: vec!["a.gguf".into(), "b.gguf".into()],
            shard_sizes: vec![1 << 20, 1 << 20],
            tensors: entries
                .iter()
                .map(|(n, s, o, z)| {
                    (
                        n.to_string(),
                        FilePlace {
                            shard: *s,
                            offset: *o,
                            size: *z,
                        },
                    )
                })
                .collect(),
        }
    }

    /// What the hook records for tensor `blk.<il>.<suffix>.weight` of `n_expert` experts of
    /// `stride` bytes, mapped `offset` bytes past [`BASE`].
    fn captured(
        il: usize,
        suffix: &'static str,
        offset: usize,
        n_expert: usize,
        stride: usize,
    ) -> (usize, &'static str, WeightRef) {
        let weight = WeightRef {
            name: format!("blk.{il}.{suffix}.weight"),
            addr: BASE + offset,
            bytes: n_expert * stride,
            n_expert,
            expert_stride: stride,
        };
        (il, suffix, weight)
    }

    #[test]
    fn binds_layers_and_prices_cycles() {
        let r = recipe_for("qwen3moe").unwrap();
        let idx = index(&[
            ("blk.1.ffn_gate_exps.weight", 0, 8192, 4000),
            ("blk.1.ffn_up_exps.weight", 0, 12192, 4000),
            ("blk.1.ffn_down_exps.weight", 0, 16192, 4000),
        ]);
        let cap = vec![
            captured(1, "ffn_down_exps", 16192, 4, 1000),
            captured(1, "ffn_gate_exps", 8192, 4, 1000),
            captured(1, "ffn_up_exps", 12192, 4, 1000),
            captured(1, "ffn_up_exps", 12192, 4, 1000),
        ];
        let l = bind(r, &cap, &idx).unwrap();
        assert_eq!(l.layers.len(), 2);
        assert!(l.layers[0].is_none());
        let names: Vec<&str> = l.layers[1]
            .as_ref()
            .unwrap()
            .tensors
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "blk.1.ffn_gate_exps.weight",
                "blk.1.ffn_up_exps.weight",
                "blk.1.ffn_down_exps.weight"
            ]
        );
        assert_eq!(l.entry_bytes(), vec![0, 3000]);
        assert_eq!(l.cache_cycle_bytes(2), 6000);
        assert_eq!(l.total_bytes(), 12000);
        assert_eq!(l.shard_bases, vec![Some(BASE), None]);
    }

    #[test]
    fn rejects_inconsistent_captures() {
        let r = recipe_for("qwen3moe").unwrap();
        let idx = index(&[
            ("blk.0.ffn_gate_exps.weight", 0, 8192, 4000),
            ("blk.0.ffn_up_exps.weight", 0, 12192, 4000),
        ]);
        let partial = vec![
            captured(0, "ffn_gate_exps", 8192, 4, 1000),
            captured(0, "ffn_up_exps", 12192, 4, 1000),
        ];
        assert!(matches!(
            bind(r, &partial, &idx),
            Err(BindError::BadLayout { layer: 0, .. })
        ));
        assert_eq!(bind(r, &[], &idx), Err(BindError::NothingCaptured));
        let idx2 = index(&[
            ("blk.0.ffn_gate_exps.weight", 0, 8192, 4000),
            ("blk.0.ffn_up_exps.weight", 0, 12192, 4000),
            ("blk.0.ffn_down_exps.weight", 0, 16192, 4000),
        ]);
        let moved = vec![
            captured(0, "ffn_gate_exps", 8192, 4, 1000),
            captured(0, "ffn_up_exps", 12192 + 64, 4, 1000),
            captured(0, "ffn_down_exps", 16192, 4, 1000),
        ];
        assert!(matches!(
            bind(r, &moved, &idx2),
            Err(BindError::NotFileMapped { .. })
        ));
        let missing = vec![
            captured(0, "ffn_gate_exps", 8192, 4, 1000),
            captured(0, "ffn_up_exps", 12192, 4, 1000),
            captured(0, "ffn_down_exps", 16192, 4, 1000),
        ];
        assert!(matches!(
            bind(r, &missing, &idx),
            Err(BindError::NoOffset(_))
        ));
    }

    #[test]
    fn refill_covers_foreign_bytes_in_taken_pages() {
        let r = recipe_for("gemma4").unwrap();
        let idx = index(&[
            ("blk.0.ffn_gate_up_exps.weight", 0, 5000, 2000),
            ("blk.0.ffn_down_exps.weight", 0, 9000, 1000),
        ]);
        let cap = vec![
            captured(0, "ffn_gate_up_exps", 5000, 2, 1000),
            captured(0, "ffn_down_exps", 9000, 2, 500),
        ];
        let l = bind(r, &cap, &idx).unwrap();
        // pages [4096, 12288): tensors cover [5000,7000) and [9000,10000)
        assert_eq!(
            l.refill_ranges(&[1 << 20, 0]),
            vec![(0, 4096, 904), (0, 7000, 2000), (0, 10000, 2288)]
        );
        // a shard that ends inside the last page clips the refill
        assert_eq!(
            l.refill_ranges(&[10100, 0]),
            vec![(0, 4096, 904), (0, 7000, 2000), (0, 10000, 100)]
        );
    }

    #[test]
    fn direct_reads_use_aligned_windows() {
        let j = ReadJob::plan(0, 5000, BASE + 5000, 3000, true);
        assert_eq!(
            (j.offset, j.addr, j.len, j.need),
            (4096, BASE + 4096, 4096, 3904)
        );
        let j = ReadJob::plan(0, 8192, BASE + 8192, 4096, true);
        assert_eq!((j.offset, j.len, j.need), (8192, 4096, 4096));
        let j = ReadJob::plan(1, 5000, BASE + 5000, 3000, false);
        assert_eq!(
            (j.offset, j.addr, j.len, j.need, j.shard),
            (5000, BASE + 5000, 3000, 3000, 1)
        );
    }

    #[test]
    fn truncation_names_the_first_cut_tensor() {
        let mut idx = index(&[("a", 0, 100, 50), ("b", 0, 900, 200), ("c", 0, 2000, 10)]);
        idx.shard_sizes = vec![1000, 0];
        let msg = idx.truncation().unwrap().to_string();
        assert!(
            msg.contains("'b'") && msg.contains("1100") && msg.contains("a.gguf"),
            "{msg}"
        );
        idx.shard_sizes = vec![5000, 0];
        assert!(idx.truncation().is_none());
    }
}
