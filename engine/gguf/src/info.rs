//! A model's MoE description: which tensors hold experts, where each expert's bytes live
//! (shard, file offset, stride), and the per-layer byte budgets the engine and traces use.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::reader::{GgufModel, ModelTensor};
use crate::value::MetaValue;

/// One routed-expert tensor of a layer (`blk.N.ffn_{gate,up,down,gate_up}_exps.weight`: 3-D, the
/// outermost dimension is the expert).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpertTensor {
    /// Tensor name.
    pub name: String,
    /// Projection: `gate`, `up`, `down` or `gate_up`.
    pub kind: String,
    /// Shard index (0 for unsplit models).
    pub shard: usize,
    /// Absolute offset of expert 0 in the shard file.
    pub file_offset: u64,
    /// Bytes of all experts.
    pub n_bytes: u64,
    /// One expert's bytes (`nb[2]`); expert `e` starts at `file_offset + e * nb2`.
    pub nb2: u64,
    /// Element type.
    #[serde(serialize_with = "ser_type")]
    pub ggml_type: GgmlType,
    /// Dims, ggml order.
    pub dims: Vec<u64>,
}

fn ser_type<S: serde::Serializer>(t: &GgmlType, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(t.name())
}

impl ExpertTensor {
    /// File offset (in shard [`Self::shard`]) of expert `e`'s slice.
    pub fn expert_offset(&self, e: u64) -> u64 {
        self.file_offset + e * self.nb2
    }
}

/// One layer's tensors and byte budgets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerInfo {
    /// Layer index.
    pub layer: u32,
    /// Routed-expert tensors of this layer, file order.
    pub expert_tensors: Vec<ExpertTensor>,
    /// One expert's bytes over all its projections in this layer (Σ nb2).
    pub expert_bytes: u64,
    /// All other bytes of `blk.N.*` (attention, norms, router, shared expert, expert biases).
    pub dense_bytes: u64,
}

impl LayerInfo {
    /// Where expert `e` of this layer lives: one `(shard, file offset, bytes)` per projection,
    /// in file order.
    pub fn expert_ranges(&self, e: u64) -> Vec<(usize, u64, u64)> {
        self.expert_tensors
            .iter()
            .map(|t| (t.shard, t.expert_offset(e), t.nb2))
            .collect()
    }
}

/// One file of the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardInfo {
    /// Path.
    pub path: PathBuf,
    /// File length in bytes.
    pub file_len: u64,
    /// Tensors in this file.
    pub n_tensors: usize,
    /// Offset of the data section.
    pub data_offset: u64,
}

/// What the engine needs to know about a MoE model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelInfo {
    /// `general.architecture`.
    pub arch: String,
    /// `<arch>.block_count`.
    pub n_layer: u32,
    /// `<arch>.expert_count`.
    pub n_expert: u32,
    /// `<arch>.expert_used_count` (top-k).
    pub n_expert_used: u32,
    /// Alignment of tensor data.
    pub alignment: u64,
    /// Files, first shard first.
    pub shards: Vec<ShardInfo>,
    /// Per-layer description.
    pub layers: Vec<LayerInfo>,
    /// Bytes of tensors outside any layer (embeddings, output, final norm).
    pub global_dense_bytes: u64,
    /// All non-expert bytes (global + every layer's dense bytes).
    pub dense_bytes: u64,
    /// All routed-expert bytes.
    pub expert_bytes_total: u64,
    /// One token's worst-case routed bytes: n_expert_used × Σ_layers expert_bytes(layer).
    pub cache_cycle_bytes: u64,
    /// Bytes per tensor type over the whole model (type name → bytes).
    pub bytes_by_type: BTreeMap<String, u64>,
    /// Expert tensor types (type name → tensor count).
    pub expert_types: BTreeMap<String, usize>,
    /// Whether every expert slice starts on a 4096-byte boundary of its file.
    pub experts_page_aligned: bool,
}

fn meta_u32(get: &dyn Fn(&str) -> Option<MetaValue>, key: &str) -> Result<u32> {
    let shown = crate::value::escape(key);
    let v =
        get(key).ok_or_else(|| GgufError::Invalid(format!("metadata key {shown} is missing")))?;
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| GgufError::Invalid(format!("metadata key {shown} is {v}, expected a u32")))
}

/// Layer index of a `blk.N.` tensor name.
fn layer_of(name: &str) -> Option<u32> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

fn expert_kind(name: &str) -> Option<&'static str> {
    let rest = name.split('.').nth(2)?;
    let kind = match rest {
        "ffn_gate_exps" => "gate",
        "ffn_up_exps" => "up",
        "ffn_down_exps" => "down",
        "ffn_gate_up_exps" => "gate_up",
        _ => return None,
    };
    name.ends_with(".weight").then_some(kind)
}

impl ModelInfo {
    /// Describe an opened model.
    pub fn from_model(model: &GgufModel) -> Result<Self> {
        let shards = model
            .shards()
            .iter()
            .map(|s| ShardInfo {
                path: s.path().to_path_buf(),
                file_len: s.header().file_len,
                n_tensors: s.header().tensors.len(),
                data_offset: s.header().data_offset,
            })
            .collect();
        let alignment = model.shards()[0].header().alignment;
        Self::from_parts(
            &|k| model.get(k).cloned(),
            model.tensors(),
            shards,
            alignment,
        )
    }

    /// Describe a model from its metadata lookup, tensors and shard list (used for files on disk
    /// and for dry-run layouts alike).
    pub fn from_parts(
        get: &dyn Fn(&str) -> Option<MetaValue>,
        tensors: &[ModelTensor],
        shards: Vec<ShardInfo>,
        alignment: u64,
    ) -> Result<Self> {
        let arch = get("general.architecture")
            .and_then(|v| v.as_str().map(str::to_string))
            .ok_or_else(|| {
                GgufError::Invalid("metadata key general.architecture is missing".into())
            })?;
        let n_layer = meta_u32(get, &format!("{arch}.block_count"))?;
        let n_expert = meta_u32(get, &format!("{arch}.expert_count")).unwrap_or(0);
        let n_expert_used = meta_u32(get, &format!("{arch}.expert_used_count")).unwrap_or(0);
        // every layer holds at least one tensor, so a count above the tensors is a lie: refuse it
        // before allocating a description per layer (0xffffffff layers would be 192 GiB)
        if n_layer as usize > tensors.len() {
            return Err(GgufError::Invalid(format!(
                "metadata key {}.block_count is {n_layer} but the model has only {} tensors",
                crate::value::escape(&arch),
                tensors.len()
            )));
        }
        let mut layers: Vec<LayerInfo> = (0..n_layer)
            .map(|layer| LayerInfo {
                layer,
                expert_tensors: Vec::new(),
                expert_bytes: 0,
                dense_bytes: 0,
            })
            .collect();
        let mut global_dense_bytes = 0;
        let mut bytes_by_type = BTreeMap::new();
        let mut expert_types = BTreeMap::new();
        let mut aligned = true;
        for t in tensors {
            let info = &t.info;
            *bytes_by_type
                .entry(info.ggml_type.name().to_string())
                .or_insert(0) += info.n_bytes;
            let layer = layer_of(&info.name).and_then(|l| layers.get_mut(l as usize));
            let Some(layer) = layer else {
                global_dense_bytes += info.n_bytes;
                continue;
            };
            let kind = expert_kind(&info.name);
            match kind {
                Some(kind)
                    if info.dims.len() == 3
                        && info.dims[2] == u64::from(n_expert)
                        && n_expert > 0 =>
                {
                    let nb2 = info.n_bytes / u64::from(n_expert);
                    aligned &= info.file_offset.is_multiple_of(4096) && nb2.is_multiple_of(4096);
                    *expert_types
                        .entry(info.ggml_type.name().to_string())
                        .or_insert(0) += 1;
                    layer.expert_bytes += nb2;
                    layer.expert_tensors.push(ExpertTensor {
                        name: info.name.clone(),
                        kind: kind.to_string(),
                        shard: t.shard,
                        file_offset: info.file_offset,
                        n_bytes: info.n_bytes,
                        nb2,
                        ggml_type: info.ggml_type,
                        dims: info.dims.clone(),
                    });
                }
                _ => layer.dense_bytes += info.n_bytes,
            }
        }
        let layer_dense: u64 = layers.iter().map(|l| l.dense_bytes).sum();
        let per_token: u64 = layers.iter().map(|l| l.expert_bytes).sum();
        let expert_bytes_total = layers
            .iter()
            .flat_map(|l| &l.expert_tensors)
            .map(|t| t.n_bytes)
            .sum();
        Ok(Self {
            arch,
            n_layer,
            n_expert,
            n_expert_used,
            alignment,
            shards,
            layers,
            global_dense_bytes,
            dense_bytes: global_dense_bytes + layer_dense,
            expert_bytes_total,
            cache_cycle_bytes: u64::from(n_expert_used) * per_token,
            bytes_by_type,
            expert_types,
            experts_page_aligned: aligned && per_token > 0,
        })
    }

    /// Total bytes of all files.
    pub fn total_file_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.file_len).sum()
    }
}
