//! Synthetic MoE models llama.cpp can load: seeded random weights with valid quant blocks, small
//! scales (activations stay finite), a byte-level BPE vocabulary and a ChatML template.
//!
//! ```no_run
//! use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
//! let opts = SynthOptions::preset(Preset::Tiny);
//! let summary = write_model(&opts, std::path::Path::new("/tmp/tiny.gguf"))?;
//! println!("{} experts per layer, cache cycle {} bytes", summary.info.n_expert, summary.info.cache_cycle_bytes);
//! # Ok::<(), bmoe_gguf::GgufError>(())
//! ```

mod arch;
mod bailingmoe3;
mod deepseek4;
pub mod init;
mod lfm2moe;
mod qwen35moe;
pub mod rng;
pub mod tokenizer;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use arch::Arch;
use init::{Init, generate_page, page_bytes};

use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::info::{ModelInfo, ShardInfo};
use crate::parse::TensorInfo;
use crate::reader::ModelTensor;
use crate::value::MetaValue;
use crate::writer::{
    DirectIo, FileLayout, TensorFill, TensorSpec, layout_model, write_files_cancellable,
};
use std::sync::atomic::AtomicBool;

/// A named starting point for [`SynthOptions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// qwen3moe, 2 layers × 8 experts (top-2), n_embd 256: a few MiB, expert slices page-aligned.
    Tiny,
    /// The real Qwen3-30B-A3B dims (48 layers, 128 experts, top-8, n_embd 2048, expert FF 768,
    /// 32/4 heads, head dim 128), Q4_K experts: ~17 GB. For benchmarks.
    Qwen3_30bA3b,
    /// qwen2moe with a shared expert and shared-expert gate, tiny dims.
    Qwen2MoeTiny,
    /// gpt-oss (MXFP4 experts, expert biases, attention sinks, sliding window), tiny dims.
    GptOssTiny,
    /// gemma4 with fused `ffn_gate_up_exps` experts beside a dense MLP, tiny dims.
    Gemma4Tiny,
    /// lfm2moe, 3 layers (dense conv, MoE conv, MoE attention), tiny dims.
    Lfm2MoeTiny,
    /// LFM2-8B-A1B's dims (24 layers: 2 dense, 6 attention; 32 experts top-4, n_embd 2048,
    /// expert FF 1792, dense FF 7168, 32/8 heads, head dim 64), Q4_K experts. For benchmarks.
    Lfm2_8bA1b,
    /// qwen35moe, 4 layers (3 linear attention, 1 full attention), shared expert, tiny dims.
    Qwen35MoeTiny,
    /// Qwen3.5/3.6-35B-A3B's dims (40 layers, 30 linear + 10 full attention; 256 experts
    /// top-8, n_embd 2048, expert and shared FF 512, 16/2 heads, head dim 256), Q4_K experts.
    Qwen36_35bA3b,
    /// deepseek4, 4 layers (hash-routed window-only, CSA, HCA, CSA), 4 hyper-connection
    /// streams, shared expert, tiny dims.
    DeepSeek4Tiny,
    /// DeepSeek-V4-Flash's dims (43 layers, 3 hash-routed; 256 experts top-6 + 1 shared,
    /// n_embd 4096, expert FF 2048, 64 heads × 512 with one KV head, q rank 1024, 8 output
    /// groups × 1024), Q4_K experts: ~160 GB. For size planning.
    DeepSeekV4Flash,
    /// bailingmoe3, 4 layers (3 KDA, 1 MLA; the first dense), group-limited routing, shared
    /// expert, tiny dims.
    BailingMoe3Tiny,
    /// A Ling-mini-3.0-shaped model (llama.cpp's 7.9B-A1.3B bailingmoe3 type: 24 layers, 6 MLA;
    /// 128 experts top-8 in 8 groups (4 used) + 1 shared, n_embd 1536, expert FF 512,
    /// 12 heads × 128), Q4_K experts. For benchmarks.
    LingMini3,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 13] = [
        Preset::Tiny,
        Preset::Qwen3_30bA3b,
        Preset::Qwen2MoeTiny,
        Preset::GptOssTiny,
        Preset::Gemma4Tiny,
        Preset::Lfm2MoeTiny,
        Preset::Lfm2_8bA1b,
        Preset::Qwen35MoeTiny,
        Preset::Qwen36_35bA3b,
        Preset::DeepSeek4Tiny,
        Preset::DeepSeekV4Flash,
        Preset::BailingMoe3Tiny,
        Preset::LingMini3,
    ];

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Qwen3_30bA3b => "qwen3-30b-a3b",
            Preset::Qwen2MoeTiny => "qwen2moe-tiny",
            Preset::GptOssTiny => "gpt-oss-tiny",
            Preset::Gemma4Tiny => "gemma4-tiny",
            Preset::Lfm2MoeTiny => "lfm2moe-tiny",
            Preset::Lfm2_8bA1b => "lfm2-8b-a1b",
            Preset::Qwen35MoeTiny => "qwen35moe-tiny",
            Preset::Qwen36_35bA3b => "qwen3.6-35b-a3b",
            Preset::DeepSeek4Tiny => "deepseek4-tiny",
            Preset::DeepSeekV4Flash => "deepseek-v4-flash",
            Preset::BailingMoe3Tiny => "bailingmoe3-tiny",
            Preset::LingMini3 => "ling-mini-3.0",
        }
    }

    /// Look a preset up by CLI name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The architecture this preset writes.
    pub fn arch(self) -> Arch {
        SynthOptions::preset(self).arch
    }

    /// The CLI names of the presets of architecture `arch` (a `general.architecture` value),
    /// in [`Preset::ALL`] order; empty for one the synthesiser cannot write.
    pub fn names_for(arch: &str) -> Vec<&'static str> {
        Self::ALL
            .into_iter()
            .filter(|p| p.arch().gguf_name() == arch)
            .map(Preset::name)
            .collect()
    }
}

/// Every knob of a synthetic model. Start from [`SynthOptions::preset`] and override fields.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthOptions {
    /// Architecture (decides tensor set and metadata keys).
    pub arch: Arch,
    /// Transformer layers.
    pub n_layer: u32,
    /// Routed experts per layer.
    pub n_expert: u32,
    /// Experts used per token (top-k).
    pub n_expert_used: u32,
    /// Hidden size.
    pub n_embd: u64,
    /// Routed expert FFN width.
    pub n_ff_exp: u64,
    /// Shared expert FFN width (qwen2moe, qwen35moe, deepseek4, bailingmoe3) / dense MLP width
    /// (gemma4, lfm2moe).
    pub n_ff_shexp: u64,
    /// Query heads.
    pub n_head: u64,
    /// Key/value heads.
    pub n_head_kv: u64,
    /// Head dimension.
    pub head_dim: u64,
    /// Training context length written to the metadata.
    pub n_ctx: u32,
    /// Sliding window (gpt-oss).
    pub sliding_window: u32,
    /// Extra filler tokens appended to the 256 byte tokens, merges and specials.
    pub vocab_extra: u32,
    /// Type of routed expert weights (F32, F16, Q8_0, Q4_K; MXFP4 for gpt-oss).
    pub expert_type: GgmlType,
    /// Type of attention / shared-expert matrices (F32, F16, Q8_0, Q4_K).
    pub dense_type: GgmlType,
    /// PRNG seed: same seed and options give identical bytes.
    pub seed: u64,
    /// Router skew s ≥ 0: expert of popularity rank r gets router-row gain ∝ (r+1)^-s (a fresh
    /// seeded ranking per layer). 0 = uniform.
    pub router_skew: f32,
    /// Number of shards (1 = single file).
    pub n_split: u32,
    /// Data alignment (4096 keeps expert slices page-aligned when their size allows).
    pub alignment: u64,
    /// MTP (NextN) head blocks appended after the trunk (qwen35moe only; llama.cpp runs at most
    /// one). 0 = no head, the file every other preset writes.
    pub n_mtp_layers: u32,
    /// Leave out `output.weight`: llama.cpp then reuses `token_embd.weight` as the output head
    /// (tied embeddings).
    pub tied_output: bool,
}

/// A vocabulary size below the tokenizer's own tokens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("vocabulary size {asked} is below the {base} tokens the byte-level tokenizer itself needs")]
pub struct VocabTooSmall {
    /// The size asked for.
    pub asked: u64,
    /// The smallest possible.
    pub base: u64,
}

impl SynthOptions {
    /// The smallest vocabulary: byte tokens, merges, control and think tokens.
    pub fn base_vocab() -> u64 {
        tokenizer::Vocab::new(0).len()
    }

    /// Sets the total vocabulary size (e.g. 151,936 for Qwen3) by padding with filler tokens.
    ///
    /// # Errors
    /// `n` is below [`Self::base_vocab`].
    pub fn set_vocab(&mut self, n: u64) -> Result<(), VocabTooSmall> {
        let base = Self::base_vocab();
        let extra = n
            .checked_sub(base)
            .and_then(|x| u32::try_from(x).ok())
            .ok_or(VocabTooSmall { asked: n, base })?;
        self.vocab_extra = extra;
        Ok(())
    }

    /// The options of a preset.
    pub fn preset(p: Preset) -> Self {
        let tiny = Self {
            arch: Arch::Qwen3Moe,
            n_layer: 2,
            n_expert: 8,
            n_expert_used: 2,
            n_embd: 256,
            n_ff_exp: 256,
            n_ff_shexp: 512,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            n_ctx: 4096,
            sliding_window: 128,
            vocab_extra: 0,
            expert_type: GgmlType::Q8_0,
            dense_type: GgmlType::Q8_0,
            seed: 1,
            router_skew: 0.0,
            n_split: 1,
            alignment: 4096,
            n_mtp_layers: 0,
            tied_output: false,
        };
        match p {
            Preset::Tiny => tiny,
            Preset::Qwen3_30bA3b => Self {
                n_layer: 48,
                n_expert: 128,
                n_expert_used: 8,
                n_embd: 2048,
                n_ff_exp: 768,
                n_head: 32,
                n_head_kv: 4,
                head_dim: 128,
                expert_type: GgmlType::Q4_K,
                ..tiny
            },
            Preset::Qwen2MoeTiny => Self {
                arch: Arch::Qwen2Moe,
                ..tiny
            },
            Preset::GptOssTiny => Self {
                arch: Arch::GptOss,
                n_expert: 8,
                n_expert_used: 2,
                n_ff_exp: 512,
                expert_type: GgmlType::MXFP4,
                ..tiny
            },
            Preset::Gemma4Tiny => Self {
                arch: Arch::Gemma4,
                ..tiny
            },
            Preset::Lfm2MoeTiny => Self {
                arch: Arch::Lfm2Moe,
                n_layer: 3,
                ..tiny
            },
            Preset::Lfm2_8bA1b => Self {
                arch: Arch::Lfm2Moe,
                n_layer: 24,
                n_expert: 32,
                n_expert_used: 4,
                n_embd: 2048,
                n_ff_exp: 1792,
                n_ff_shexp: 7168,
                n_head: 32,
                n_head_kv: 8,
                head_dim: 64,
                n_ctx: 128 * 1024,
                expert_type: GgmlType::Q4_K,
                ..tiny
            },
            Preset::Qwen35MoeTiny => Self {
                arch: Arch::Qwen35Moe,
                n_layer: 4,
                ..tiny
            },
            Preset::Qwen36_35bA3b => Self {
                arch: Arch::Qwen35Moe,
                n_layer: 40,
                n_expert: 256,
                n_expert_used: 8,
                n_embd: 2048,
                n_ff_exp: 512,
                n_ff_shexp: 512,
                n_head: 16,
                n_head_kv: 2,
                head_dim: 256,
                n_ctx: 256 * 1024,
                expert_type: GgmlType::Q4_K,
                ..tiny
            },
            Preset::DeepSeek4Tiny => Self {
                arch: Arch::DeepSeek4,
                n_layer: 4,
                n_head_kv: 1,
                n_ff_shexp: 256,
                ..tiny
            },
            Preset::DeepSeekV4Flash => Self {
                arch: Arch::DeepSeek4,
                n_layer: 43,
                n_expert: 256,
                n_expert_used: 6,
                n_embd: 4096,
                n_ff_exp: 2048,
                n_ff_shexp: 2048,
                n_head: 64,
                n_head_kv: 1,
                head_dim: 512,
                n_ctx: 1024 * 1024,
                expert_type: GgmlType::Q4_K,
                ..tiny
            },
            Preset::BailingMoe3Tiny => Self {
                arch: Arch::BailingMoe3,
                n_layer: 4,
                n_head_kv: 1,
                ..tiny
            },
            Preset::LingMini3 => Self {
                arch: Arch::BailingMoe3,
                n_layer: 24,
                n_expert: 128,
                n_expert_used: 8,
                n_embd: 1536,
                n_ff_exp: 512,
                n_ff_shexp: 512,
                n_head: 12,
                n_head_kv: 1,
                head_dim: 128,
                n_ctx: 128 * 1024,
                expert_type: GgmlType::Q4_K,
                ..tiny
            },
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(GgufError::Invalid(m));
        if self.n_layer == 0 || self.n_expert == 0 || self.n_embd == 0 || self.n_ff_exp == 0 {
            return bad("layers, experts, n_embd and expert FF must all be > 0".into());
        }
        if self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            return bad(format!(
                "top-k {} must be between 1 and the expert count {}",
                self.n_expert_used, self.n_expert
            ));
        }
        if self.n_head == 0 || self.n_head_kv == 0 || !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(format!(
                "heads {} must be a positive multiple of kv heads {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("head dim {} must be even and > 0", self.head_dim));
        }
        let dims = [
            self.n_embd,
            self.n_ff_exp,
            self.n_ff_shexp,
            self.n_head,
            self.n_head_kv,
            self.head_dim,
        ];
        if dims.iter().any(|&d| d > u64::from(u32::MAX)) {
            return bad(format!("dimensions {dims:?} must each fit in a u32"));
        }
        if !(self.router_skew.is_finite() && self.router_skew >= 0.0) {
            return bad(format!(
                "router skew {} must be finite and ≥ 0",
                self.router_skew
            ));
        }
        for (what, t) in [("expert", self.expert_type), ("dense", self.dense_type)] {
            if !init::supports(t) {
                return bad(format!(
                    "{what} type {t} cannot be generated (use F32, F16, Q8_0, Q4_K or MXFP4)"
                ));
            }
        }
        if self.dense_type == GgmlType::MXFP4 {
            return bad("dense type MXFP4 is not supported (use F32, F16, Q8_0 or Q4_K)".into());
        }
        Ok(())
    }
}

/// A tensor of the plan: its spec and how to fill it.
#[derive(Debug, Clone)]
pub struct PlannedTensor {
    /// Name, type and dims.
    pub spec: TensorSpec,
    /// Value distribution.
    pub init: Init,
}

/// Everything about a model before a byte is written: metadata, tensors, file layouts, and the
/// [`ModelInfo`] the files will have.
#[derive(Debug, Clone)]
pub struct ModelPlan {
    /// Metadata of the (first) file.
    pub metadata: Vec<(String, MetaValue)>,
    /// Tensors in file order.
    pub tensors: Vec<PlannedTensor>,
    /// One layout per file.
    pub layouts: Vec<FileLayout>,
    /// The description the written model will have.
    pub info: ModelInfo,
}

impl ModelPlan {
    /// Total bytes to be written over all files.
    pub fn total_bytes(&self) -> u64 {
        self.layouts.iter().map(|l| l.file_len).sum()
    }
}

/// Plan a model at `path` without writing anything (a dry run: layout, sizes, [`ModelInfo`]).
pub fn plan_model(opts: &SynthOptions, path: &Path) -> Result<ModelPlan> {
    opts.validate()?;
    let (metadata, tensors) = arch::build(opts)?;
    let specs: Vec<TensorSpec> = tensors.iter().map(|t| t.spec.clone()).collect();
    let layouts = layout_model(path, &metadata, &specs, opts.alignment, opts.n_split)?;
    let mut model_tensors = Vec::with_capacity(specs.len());
    let mut shards = Vec::with_capacity(layouts.len());
    for (i, l) in layouts.iter().enumerate() {
        for (k, ti) in l.tensors.clone().enumerate() {
            let s = &specs[ti];
            model_tensors.push(ModelTensor {
                shard: i,
                info: TensorInfo {
                    name: s.name.clone(),
                    dims: s.dims.clone(),
                    ggml_type: s.ggml_type,
                    rel_offset: l.tensor_offsets[k] - l.data_offset(),
                    file_offset: l.tensor_offsets[k],
                    n_bytes: s.n_bytes()?,
                    info_offset: 0,
                },
            });
        }
        shards.push(ShardInfo {
            path: l.path.clone(),
            file_len: l.file_len,
            n_tensors: l.tensors.len(),
            data_offset: l.data_offset(),
        });
    }
    let get = |k: &str| {
        metadata
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let info = ModelInfo::from_parts(&get, &model_tensors, shards, opts.alignment)?;
    Ok(ModelPlan {
        metadata,
        tensors,
        layouts,
        info,
    })
}

/// What [`write_model`] produced.
#[derive(Debug, Clone)]
pub struct ModelSummary {
    /// Files written, first shard first (pass the first to llama.cpp).
    pub paths: Vec<PathBuf>,
    /// Bytes written over all files.
    pub bytes: u64,
    /// Wall time of the write, including the final fsync.
    pub elapsed: Duration,
    /// The written model's description.
    pub info: ModelInfo,
}

struct SynthFill<'a> {
    tensors: &'a [PlannedTensor],
    seed: u64,
    scratch: Vec<u8>,
}

impl TensorFill for SynthFill<'_> {
    fn fill(&mut self, tensor: usize, offset: u64, out: &mut [u8]) {
        let t = &self.tensors[tensor];
        let ty = t.spec.ggml_type;
        let pb = page_bytes(ty);
        let total = t.spec.n_bytes().unwrap_or(0);
        let row_len = t.spec.dims.first().copied().unwrap_or(1);
        let mut pos = offset;
        let end = offset + out.len() as u64;
        while pos < end {
            let page = pos / pb;
            let page_start = page * pb;
            let page_len = pb.min(total - page_start) as usize;
            let within = (pos - page_start) as usize;
            let n = (page_len - within).min((end - pos) as usize);
            let dst = &mut out[(pos - offset) as usize..(pos - offset) as usize + n];
            if within == 0 && n == page_len {
                generate_page(&t.init, ty, row_len, self.seed, &t.spec.name, page, dst);
            } else {
                self.scratch.resize(page_len, 0);
                generate_page(
                    &t.init,
                    ty,
                    row_len,
                    self.seed,
                    &t.spec.name,
                    page,
                    &mut self.scratch,
                );
                dst.copy_from_slice(&self.scratch[within..within + n]);
            }
            pos += n as u64;
        }
    }
}

/// Write a synthetic model to `path` (or `n_split` shards next to it). Streamed: memory stays at a
/// few 8 MiB buffers whatever the size.
pub fn write_model(opts: &SynthOptions, path: &Path) -> Result<ModelSummary> {
    write_model_with_progress(opts, path, &mut |_, _| {})
}

/// [`write_model`] reporting `(bytes_done, bytes_total)` after each chunk.
pub fn write_model_with_progress(
    opts: &SynthOptions,
    path: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ModelSummary> {
    let plan = plan_model(opts, path)?;
    write_plan(&plan, opts.seed, progress)
}

/// Write an already computed plan.
pub fn write_plan(
    plan: &ModelPlan,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ModelSummary> {
    write_plan_with(plan, seed, progress, DirectIo::Auto)
}

/// [`write_plan`] with an explicit O_DIRECT policy.
pub fn write_plan_with(
    plan: &ModelPlan,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
    direct: DirectIo,
) -> Result<ModelSummary> {
    write_plan_cancellable(plan, seed, progress, direct, &AtomicBool::new(false))
}

/// [`write_plan_with`] that stops once `cancel` is set (a signal handler's flag), removing
/// its partial files ([`GgufError::Interrupted`]).
pub fn write_plan_cancellable(
    plan: &ModelPlan,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
    direct: DirectIo,
    cancel: &AtomicBool,
) -> Result<ModelSummary> {
    let total = plan.total_bytes();
    let specs: Vec<TensorSpec> = plan.tensors.iter().map(|t| t.spec.clone()).collect();
    let mut fill = SynthFill {
        tensors: &plan.tensors,
        seed,
        scratch: Vec::new(),
    };
    let start = Instant::now();
    let mut done = 0u64;
    write_files_cancellable(
        &plan.layouts,
        &specs,
        &mut fill,
        &mut |n| {
            done += n;
            progress(done, total);
        },
        direct,
        cancel,
    )?;
    Ok(ModelSummary {
        paths: plan.layouts.iter().map(|l| l.path.clone()).collect(),
        bytes: total,
        elapsed: start.elapsed(),
        info: plan.info.clone(),
    })
}
