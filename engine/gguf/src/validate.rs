//! Checks of a parsed model against what the vendored llama.cpp (llama-cpp-sys-2 0.1.161)
//! asserts on or refuses, so a hostile or corrupted file ends in an error naming the file and
//! the key instead of a `GGML_ASSERT` abort inside llama.cpp (exit 134) — and `bmoe-bench model
//! inspect` refuses what the engine refuses.
//!
//! The truth is llama.cpp's source: `llama_model_base::load_hparams` (src/llama-model.cpp:
//! `n_layer_all` in 1..=`LLAMA_MAX_LAYERS`, `n_expert` ≤ `LLAMA_MAX_EXPERTS`, the expert-used and
//! expert-group relations, a known rope scaling type), the GGUF getters in
//! src/llama-model-loader.cpp (a key must have exactly the type llama.cpp reads — u32 counts,
//! f32 epsilons — and a per-layer array exactly `block_count` entries), the per-architecture
//! graphs and loaders in src/models/*.cpp (qwen3moe/qwen2moe: head size = rope dims; deepseek4
//! and bailingmoe3: their required keys, compress ratios, hyper-connection count and KDA gate; gpt-oss
//! and gemma4: their required sliding-window keys, pattern arrays, head sizes and the shapes
//! their loaders derive from the counts), and ggml's CPU ops
//! (`rms_norm`: eps ≥ 0; `rope`: rope dims even and ≤ the head size). Tensor shapes are checked
//! against the declared dims, and the tensors an architecture requires and the data packing
//! (ggml/src/gguf.cpp: each tensor starts where the previous one ends) are checked, where
//! llama.cpp would refuse the file anyway, so `inspect` and the engine agree. A file of an
//! architecture outside [`MOE_ARCHITECTURES`] is refused by name before any of its keys.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{GgufError, Result};
use crate::reader::{GgufFile, GgufModel, ModelTensor};
use crate::value::{MetaValue, escape};

/// llama.cpp's `LLAMA_MAX_LAYERS` (src/llama-hparams.h).
pub const MAX_LAYERS: u32 = 512;
/// llama.cpp's `LLAMA_MAX_EXPERTS` (src/llama-hparams.h).
pub const MAX_EXPERTS: u32 = 1024;

/// Every `general.architecture` bmoe streams, sorted: the one list both the engine's recipe
/// registry (a test there keeps the two equal) and these checks use, so a file of any other
/// architecture is refused by name before its (unknowable) keys are looked up.
pub const MOE_ARCHITECTURES: &[&str] = &[
    "bailingmoe3",
    "deepseek4",
    "gemma4",
    "gpt-oss",
    "lfm2moe",
    "qwen2moe",
    "qwen35moe",
    "qwen3moe",
];

/// Whether bmoe streams architecture `arch` (a `general.architecture` value).
pub fn is_supported_arch(arch: &str) -> bool {
    MOE_ARCHITECTURES.contains(&arch)
}

/// Architectures whose llama.cpp loader requires `<arch>.attention.layer_norm_rms_epsilon`.
const RMS_ARCHS: &[&str] = &[
    "qwen3moe",
    "qwen2moe",
    "qwen35moe",
    "gpt-oss",
    "gemma4",
    "lfm2moe",
    "deepseek4",
    "bailingmoe3",
];
/// Architectures that refuse (or assert on) a model without routed experts.
const MOE_ONLY: &[&str] = &["qwen3moe", "qwen2moe", "gpt-oss", "lfm2moe"];
/// Architectures whose loader marks a layer recurrent (no attention) by KV heads = 0 in the
/// per-layer `attention.head_count_kv` array (lfm2moe's shortconv, bailingmoe3's KDA layers).
const KV0_RECURRENT: &[&str] = &["lfm2moe", "bailingmoe3"];
/// Architectures whose graph asserts head size K = head size V = rope dims, and whose attention
/// projections are exactly `[n_embd, heads × head size]` (the archs `model synth` writes).
const PLAIN_ATTENTION: &[&str] = &["qwen3moe", "qwen2moe"];
/// Rope scaling types llama.cpp knows (`LLAMA_ROPE_SCALING_TYPES`); anything else asserts.
const ROPE_SCALING: &[&str] = &["none", "linear", "yarn", "longrope"];
/// `tokenizer.ggml.model` values llama-vocab.cpp accepts.
const TOKENIZERS: &[&str] = &[
    "no_vocab",
    "none",
    "llama",
    "bert",
    "gpt2",
    "hybriddna",
    "whitespace",
    "t5",
    "rwkv",
    "test",
    "plamo2",
    "gemma4",
];

/// The tensors llama.cpp's loader requires of an architecture (src/models/<arch>.cpp, flag 0),
/// globally and in every layer; a layer may hold a fused `attn_qkv` instead of `attn_q/k/v`. A
/// name without a `.` means its `.weight`; `x.bias` is the bias.
const REQUIRED: &[(&str, &[&str], &[&str])] = &[
    (
        "qwen3moe",
        &["token_embd", "output_norm"],
        &[
            "attn_norm",
            "attn_output",
            "attn_q_norm",
            "attn_k_norm",
            "ffn_norm",
            "ffn_gate_inp",
            "ffn_gate_exps",
            "ffn_up_exps",
            "ffn_down_exps",
        ],
    ),
    (
        "qwen2moe",
        &["token_embd", "output_norm", "output"],
        &[
            "attn_norm",
            "attn_output",
            "ffn_norm",
            "ffn_gate_inp",
            "ffn_gate_exps",
            "ffn_up_exps",
            "ffn_down_exps",
            "ffn_gate_inp_shexp",
            "ffn_gate_shexp",
            "ffn_up_shexp",
            "ffn_down_shexp",
        ],
    ),
    (
        // src/models/openai-moe.cpp
        "gpt-oss",
        &["token_embd", "output_norm", "output"],
        &[
            "attn_norm",
            "post_attention_norm",
            "attn_output",
            "attn_sinks",
            "ffn_gate_inp",
            "ffn_gate_exps",
            "ffn_up_exps",
            "ffn_down_exps",
            "attn_output.bias",
            "ffn_gate_inp.bias",
            "ffn_gate_exps.bias",
            "ffn_up_exps.bias",
            "ffn_down_exps.bias",
        ],
    ),
];

/// The tensor name of a [`REQUIRED`] entry: `x` is `x.weight`, `x.bias` stays.
fn required_name(prefix: &str, entry: &str) -> String {
    if entry.contains('.') {
        format!("{prefix}{entry}")
    } else {
        format!("{prefix}{entry}.weight")
    }
}

/// What to do about a file that fails a check.
const HINT_CORRUPT: &str = "the file's header is corrupt or was edited; re-create or re-download it (a synthetic model: `bmoe-bench model synth`)";

/// What to do about a file of an architecture bmoe does not stream.
const HINT_UNKNOWN_ARCH: &str = "bmoe streams only the MoE architectures listed (`bmoe-cli --list-archs`); use a GGUF of one of them (a synthetic model: `bmoe-bench model synth`)";

/// Checks every hyperparameter llama.cpp asserts on, the tensor shapes against the declared
/// dims, overlapping tensor data, and the layer count against the tensors present — before the
/// file is handed to llama.cpp.
///
/// # Errors
/// [`GgufError::Hparams`] naming the file, the key or tensor, its byte offset where known, and
/// a hint.
pub fn validate(model: &GgufModel) -> Result<()> {
    let v = Checker::new(model)?;
    v.counts()?;
    v.floats()?;
    v.attention()?;
    v.arch_hparams()?;
    v.vocab()?;
    v.tensors()?;
    v.required_tensors()?;
    v.layout()
}

struct Checker<'a> {
    model: &'a GgufModel,
    /// Tensors by name: a hostile file may hold many, and each layer looks up a dozen names.
    by_name: HashMap<&'a str, &'a ModelTensor>,
    first: &'a GgufFile,
    arch: String,
    n_layer: u32,
    n_embd: u64,
    n_expert: u32,
}

impl<'a> Checker<'a> {
    fn new(model: &'a GgufModel) -> Result<Self> {
        let first = &model.shards()[0];
        let mut c = Checker {
            model,
            by_name: model
                .tensors()
                .iter()
                .map(|t| (t.info.name.as_str(), t))
                .collect(),
            first,
            arch: String::new(),
            n_layer: 0,
            n_embd: 0,
            n_expert: 0,
        };
        let arch = match model.get("general.architecture") {
            None => return Err(c.fail_key("general.architecture", "is missing".into())),
            Some(MetaValue::String(s)) => s.clone(),
            Some(v) => {
                return Err(
                    c.fail_key("general.architecture", format!("is {v}, expected a string"))
                );
            }
        };
        // An unknown name (empty, or holding control bytes, included) has no keys llama.cpp's
        // recipe for it would read: naming the first "missing" one would mislead.
        if !is_supported_arch(&arch) {
            return Err(GgufError::UnknownArch {
                path: first.path().to_path_buf(),
                arch: escape(&arch),
                hint: HINT_UNKNOWN_ARCH.into(),
            });
        }
        c.arch = arch;
        let blocks = c.key("block_count");
        c.n_layer = c.u32_required(&blocks)?;
        if !(1..=MAX_LAYERS).contains(&c.n_layer) {
            return Err(c.fail_key(
                &blocks,
                format!("is {}; llama.cpp allows 1..={MAX_LAYERS} layers", c.n_layer),
            ));
        }
        let embd = c.key("embedding_length");
        c.n_embd = u64::from(c.u32_required(&embd)?);
        if c.n_embd == 0 {
            return Err(c.fail_key(&embd, "is 0".into()));
        }
        c.u32_required(&c.key("context_length"))?;
        c.n_expert = c.u32_opt(&c.key("expert_count"))?.unwrap_or(0);
        Ok(c)
    }

    fn tensor(&self, name: &str) -> Option<&'a ModelTensor> {
        self.by_name.get(name).copied()
    }

    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    fn fail_key(&self, key: &str, message: String) -> GgufError {
        GgufError::Hparams {
            path: self.first.path().to_path_buf(),
            key: escape(key),
            offset: self.first.header().kv_offset(key),
            message,
            hint: HINT_CORRUPT.into(),
        }
    }

    fn fail_tensor(&self, shard: usize, name: &str, message: String) -> GgufError {
        let file = self.model.shards().get(shard).unwrap_or(self.first);
        GgufError::Hparams {
            path: file.path().to_path_buf(),
            key: format!("tensor {}", escape(name)),
            offset: file.header().tensor(name).map(|t| t.info_offset),
            message,
            hint: HINT_CORRUPT.into(),
        }
    }

    /// A u32 key, if present: llama.cpp's getter refuses any other type.
    fn u32_opt(&self, key: &str) -> Result<Option<u32>> {
        match self.model.get(key) {
            None => Ok(None),
            Some(MetaValue::U32(x)) => Ok(Some(*x)),
            Some(v) => Err(self.fail_key(key, format!("is {v}, llama.cpp reads it as a u32"))),
        }
    }

    fn u32_required(&self, key: &str) -> Result<u32> {
        self.u32_opt(key)?
            .ok_or_else(|| self.fail_key(key, "is missing".into()))
    }

    /// A per-layer u32 key: one value, or an array of exactly `block_count` u32/i32 values.
    fn per_layer(&self, key: &str) -> Result<Option<Vec<u32>>> {
        let Some(v) = self.model.get(key) else {
            return Ok(None);
        };
        let n = self.n_layer as usize;
        match v {
            MetaValue::U32(x) => Ok(Some(vec![*x; n])),
            MetaValue::Array(a) => {
                if a.values.len() != n {
                    return Err(self.fail_key(
                        key,
                        format!(
                            "has {} per-layer values but block_count is {n}",
                            a.values.len()
                        ),
                    ));
                }
                a.values
                    .iter()
                    .map(|e| match e {
                        MetaValue::U32(x) => Ok(*x),
                        MetaValue::I32(x) if *x >= 0 => Ok(x.unsigned_abs()),
                        e => Err(self.fail_key(
                            key,
                            format!("holds {e}, expected non-negative u32/i32 values"),
                        )),
                    })
                    .collect::<Result<Vec<u32>>>()
                    .map(Some)
            }
            v => Err(self.fail_key(
                key,
                format!("is {v}, llama.cpp reads a u32 or a per-layer array"),
            )),
        }
    }

    fn counts(&self) -> Result<()> {
        let nextn = self.key("nextn_predict_layers");
        if let Some(n) = self.u32_opt(&nextn)?
            && n > self.n_layer
        {
            return Err(self.fail_key(
                &nextn,
                format!("is {n}, more than block_count {}", self.n_layer),
            ));
        }
        let experts = self.key("expert_count");
        if self.n_expert > MAX_EXPERTS {
            return Err(self.fail_key(
                &experts,
                format!(
                    "is {}; llama.cpp allows at most {MAX_EXPERTS}",
                    self.n_expert
                ),
            ));
        }
        let used_key = self.key("expert_used_count");
        let used = self.per_layer(&used_key)?.unwrap_or_default();
        let used_max = used.iter().copied().max().unwrap_or(0);
        if used_max > self.n_expert {
            return Err(self.fail_key(
                &used_key,
                format!(
                    "is {used_max}: a token cannot use more experts than the layer has ({experts} = {})",
                    self.n_expert
                ),
            ));
        }
        let groups_key = self.key("expert_group_count");
        let groups = self.u32_opt(&groups_key)?.unwrap_or(0);
        let group_used_key = self.key("expert_group_used_count");
        let group_used = self.u32_opt(&group_used_key)?.unwrap_or(0);
        if self.n_expert == 0 {
            if used_max > 0 {
                return Err(self.fail_key(
                    &used_key,
                    format!(
                        "is {used_max} but the model has no experts ({experts} is 0 or missing)"
                    ),
                ));
            }
            if groups > 0 {
                return Err(self.fail_key(
                    &groups_key,
                    format!("is {groups} but the model has no experts"),
                ));
            }
            if MOE_ONLY.contains(&self.arch.as_str()) {
                return Err(self.fail_key(
                    &experts,
                    format!("is 0 or missing; {} needs routed experts", self.arch),
                ));
            }
            return Ok(());
        }
        if used_max == 0 {
            return Err(self.fail_key(
                &used_key,
                format!(
                    "is 0 or missing but the model has {} experts: every token needs at least one",
                    self.n_expert
                ),
            ));
        }
        if MOE_ONLY.contains(&self.arch.as_str()) && used.contains(&0) {
            return Err(self.fail_key(&used_key, "is 0 for a layer".into()));
        }
        if groups >= self.n_expert {
            return Err(self.fail_key(
                &groups_key,
                format!("is {groups}, not below {experts} = {}", self.n_expert),
            ));
        }
        if groups > 1 {
            if !self.n_expert.is_multiple_of(groups) {
                return Err(self.fail_key(
                    &groups_key,
                    format!("{groups} groups do not divide {} experts", self.n_expert),
                ));
            }
            if group_used == 0 || group_used >= groups {
                return Err(self.fail_key(
                    &group_used_key,
                    format!("is {group_used}; it must be in 1..{groups} (the group count)"),
                ));
            }
        }
        Ok(())
    }

    /// An f32 key, if present, finite and positive (`strictly`) or non-negative.
    fn positive_f32(&self, key: &str, strictly: bool) -> Result<Option<f32>> {
        match self.model.get(key) {
            None => Ok(None),
            Some(MetaValue::F32(x)) => {
                let ok = x.is_finite() && (*x > 0.0 || (!strictly && *x == 0.0));
                if ok {
                    Ok(Some(*x))
                } else {
                    let want = if strictly { "> 0" } else { "≥ 0" };
                    Err(self.fail_key(key, format!("is {x}; it must be finite and {want}")))
                }
            }
            Some(v) => Err(self.fail_key(key, format!("is {v}, llama.cpp reads it as an f32"))),
        }
    }

    fn floats(&self) -> Result<()> {
        let rms = self.key("attention.layer_norm_rms_epsilon");
        let got = self.positive_f32(&rms, true)?;
        if got.is_none() && RMS_ARCHS.contains(&self.arch.as_str()) {
            return Err(self.fail_key(&rms, "is missing".into()));
        }
        self.positive_f32(&self.key("attention.layer_norm_epsilon"), true)?;
        self.positive_f32(&self.key("rope.freq_base"), true)?;
        self.positive_f32(&self.key("rope.freq_base_swa"), true)?;
        self.positive_f32(&self.key("rope.scaling.factor"), false)?;
        let scaling = self.key("rope.scaling.type");
        match self.model.get(&scaling) {
            None => {}
            Some(MetaValue::String(s)) if ROPE_SCALING.contains(&s.as_str()) => {}
            Some(v) => {
                return Err(self.fail_key(
                    &scaling,
                    format!("is {v}; llama.cpp knows {}", ROPE_SCALING.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Head counts and sizes: what the attention of every architecture needs (heads divisible
    /// by KV heads, positive sizes), and for the plain-attention archs what their graphs assert.
    fn attention(&self) -> Result<()> {
        let heads_key = self.key("attention.head_count");
        let kv_key = self.key("attention.head_count_kv");
        let heads = self.per_layer(&heads_key)?.unwrap_or_default();
        let kv = self.per_layer(&kv_key)?.unwrap_or_else(|| heads.clone());
        for (il, (&h, &k)) in heads.iter().zip(&kv).enumerate() {
            let recurrent = k == 0 && KV0_RECURRENT.contains(&self.arch.as_str());
            if h > 0 && !recurrent && (k == 0 || !h.is_multiple_of(k)) {
                return Err(self.fail_key(
                    &kv_key,
                    format!("is {k} in layer {il}; it must divide {heads_key} = {h}"),
                ));
            }
        }
        let n_head = heads.first().copied().unwrap_or(0);
        if n_head == 0 {
            if PLAIN_ATTENTION.contains(&self.arch.as_str()) {
                return Err(self.fail_key(&heads_key, "is 0 or missing".into()));
            }
            return Ok(());
        }
        let klen_key = self.key("attention.key_length");
        let vlen_key = self.key("attention.value_length");
        let rot_key = self.key("rope.dimension_count");
        let default = u32::try_from(self.n_embd / u64::from(n_head)).unwrap_or(u32::MAX);
        let head_k = self.u32_opt(&klen_key)?.unwrap_or(default);
        let head_v = self.u32_opt(&vlen_key)?.unwrap_or(default);
        let n_rot = self.u32_opt(&rot_key)?.unwrap_or(head_k);
        for (key, v) in [(&klen_key, head_k), (&vlen_key, head_v)] {
            if v == 0 {
                return Err(self.fail_key(key, "is 0".into()));
            }
        }
        if RMS_ARCHS.contains(&self.arch.as_str())
            && (n_rot == 0 || n_rot % 2 != 0 || n_rot > head_k)
        {
            return Err(self.fail_key(
                &rot_key,
                format!("is {n_rot}; rope needs an even count in 2..={head_k} (the key length)"),
            ));
        }
        if PLAIN_ATTENTION.contains(&self.arch.as_str()) {
            if head_v != head_k {
                return Err(self.fail_key(
                    &vlen_key,
                    format!(
                        "is {head_v}; {} needs it equal to {klen_key} = {head_k}",
                        self.arch
                    ),
                ));
            }
            if n_rot != head_k {
                return Err(self.fail_key(
                    &rot_key,
                    format!(
                        "is {n_rot}; {} needs it equal to the head size {head_k}",
                        self.arch
                    ),
                ));
            }
            self.attention_shapes(&heads, &kv, u64::from(head_k), u64::from(head_v))?;
        }
        Ok(())
    }

    /// The keys the gpt-oss (`LLM_ARCH_OPENAI_MOE`, src/models/openai-moe.cpp) and gemma4
    /// (src/models/gemma4.cpp) loaders read as required, or whose values they throw on.
    fn arch_hparams(&self) -> Result<()> {
        match self.arch.as_str() {
            "gpt-oss" => {
                // `get_key` / `get_key_or_arr` with `required`: "key not found in model"
                self.u32_required(&self.key("attention.sliding_window"))?;
                let ff = self.key("expert_feed_forward_length");
                if self.model.get(&ff).is_none() {
                    return Err(self.fail_key(&ff, "is missing".into()));
                }
                self.swa_pattern(false)?;
                self.gpt_oss_shapes()
            }
            "gemma4" => {
                let first_swa = self.swa_pattern(true)?;
                self.u32_required(&self.key("attention.sliding_window"))?;
                self.u32_required(&self.key("embedding_length_per_layer_input"))?;
                let kswa_key = self.key("attention.key_length_swa");
                let vswa_key = self.key("attention.value_length_swa");
                let kswa = self.u32_required(&kswa_key)?;
                let vswa = self.u32_required(&vswa_key)?;
                // load_tensors throws "Gemma 4 requires n_embd_head_k_swa == n_embd_head_v_swa"
                if kswa != vswa {
                    return Err(self.fail_key(
                        &vswa_key,
                        format!("is {vswa}; gemma4 needs it equal to {kswa_key} = {kswa}"),
                    ));
                }
                // …and "n_embd_head_k == n_embd_head_v" of layer 0: the full-attention sizes
                // when layer 0 is not a sliding-window layer (else the check above is it)
                if first_swa == Some(false) {
                    let heads = self.per_layer(&self.key("attention.head_count"))?;
                    let n_head = heads.and_then(|h| h.first().copied()).unwrap_or(0);
                    if n_head > 0 {
                        let default =
                            u32::try_from(self.n_embd / u64::from(n_head)).unwrap_or(u32::MAX);
                        let klen_key = self.key("attention.key_length");
                        let vlen_key = self.key("attention.value_length");
                        let k = self.u32_opt(&klen_key)?.unwrap_or(default);
                        let v = self.u32_opt(&vlen_key)?.unwrap_or(default);
                        if k != v {
                            return Err(self.fail_key(
                                &vlen_key,
                                format!("is {v}; gemma4 needs it equal to {klen_key} = {k}"),
                            ));
                        }
                    }
                }
                Ok(())
            }
            "deepseek4" => self.deepseek4_hparams(),
            "bailingmoe3" => self.bailingmoe3_hparams(),
            _ => Ok(()),
        }
    }

    /// An f32 key llama.cpp reads as required.
    fn f32_required(&self, key: &str) -> Result<f32> {
        match self.model.get(key) {
            None => Err(self.fail_key(key, "is missing".into())),
            Some(MetaValue::F32(x)) if x.is_finite() => Ok(*x),
            Some(v) => {
                Err(self.fail_key(key, format!("is {v}, llama.cpp reads it as a finite f32")))
            }
        }
    }

    /// A bool key, if present: llama.cpp's getter refuses any other type.
    fn bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.model.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.fail_key(key, format!("is {v}, llama.cpp reads it as a bool"))),
        }
    }

    /// The keys the deepseek4 loader (src/models/deepseek4.cpp `load_arch_hparams` and
    /// `load_arch_tensors`) reads as required, and the values it or its graph throws or
    /// asserts on.
    fn deepseek4_hparams(&self) -> Result<()> {
        for k in [
            "attention.q_lora_rank",
            "attention.sliding_window",
            "expert_shared_count",
            "attention.indexer.head_count",
            "attention.indexer.top_k",
            "hyper_connection.sinkhorn_iterations",
            "hash_layer_count",
        ] {
            self.u32_required(&self.key(k))?;
        }
        for k in [
            "expert_weights_scale",
            "attention.compress_rope_freq_base",
            "hyper_connection.epsilon",
        ] {
            self.f32_required(&self.key(k))?;
        }
        let norm = self.key("expert_weights_norm");
        if self.bool_opt(&norm)?.is_none() {
            return Err(self.fail_key(&norm, "is missing".into()));
        }
        for k in ["expert_feed_forward_length", "swiglu_clamp_exp"] {
            let key = self.key(k);
            if self.model.get(&key).is_none() {
                return Err(self.fail_key(&key, "is missing".into()));
            }
        }
        // build_hc_pre: GGML_ASSERT(hc == 4)
        let hc_key = self.key("hyper_connection.count");
        let hc = self.u32_required(&hc_key)?;
        if hc != 4 {
            return Err(self.fail_key(&hc_key, format!("is {hc}; the deepseek4 graph needs 4")));
        }
        // "DeepSeek-V4 loader currently expects sqrtsoftplus MoE scoring"
        let gating_key = self.key("expert_gating_func");
        let gating = self.u32_required(&gating_key)?;
        if gating != 4 {
            return Err(self.fail_key(
                &gating_key,
                format!("is {gating}; deepseek4 needs 4 (sqrt-softplus scoring)"),
            ));
        }
        let groups_key = self.key("attention.output_group_count");
        let groups = self.u32_required(&groups_key)?;
        self.u32_required(&self.key("attention.output_lora_rank"))?;
        let heads = self.per_layer(&self.key("attention.head_count"))?;
        let n_head = heads.and_then(|h| h.first().copied()).unwrap_or(0);
        if groups == 0 || !n_head.is_multiple_of(groups) {
            return Err(self.fail_key(
                &groups_key,
                format!("is {groups}; it must divide the {n_head} heads"),
            ));
        }
        let idx_key = self.key("attention.indexer.key_length");
        let idx = self.u32_required(&idx_key)?;
        let rot = self
            .u32_opt(&self.key("rope.dimension_count"))?
            .unwrap_or(0);
        if idx < rot {
            return Err(self.fail_key(
                &idx_key,
                format!("is {idx}, below the {rot} rope dims the indexer rotates"),
            ));
        }
        // the graph asserts K head = V head; the indexer cache's Hadamard rotation needs a
        // multiple of 64, and one equal to the head size makes llama.cpp divide by zero
        let default = u32::try_from(self.n_embd / u64::from(n_head.max(1))).unwrap_or(u32::MAX);
        let klen_key = self.key("attention.key_length");
        let vlen_key = self.key("attention.value_length");
        let k = self.u32_opt(&klen_key)?.unwrap_or(default);
        let v = self.u32_opt(&vlen_key)?.unwrap_or(default);
        if k != v {
            return Err(self.fail_key(
                &vlen_key,
                format!("is {v}; deepseek4 needs it equal to {klen_key} = {k}"),
            ));
        }
        if idx % 64 != 0 || idx == k {
            return Err(self.fail_key(
                &idx_key,
                format!("is {idx}; llama.cpp needs a multiple of 64 other than {klen_key} = {k}"),
            ));
        }
        self.compress_ratios()
    }

    /// `attention.compress_ratios`: ≥ block_count entries ("DeepSeek-V4 compress_ratios is
    /// shorter than block_count"), each 0, 4 or 128 ("only supports compression ratios 0, 4,
    /// and 128").
    fn compress_ratios(&self) -> Result<()> {
        let key = self.key("attention.compress_ratios");
        let Some(MetaValue::Array(a)) = self.model.get(&key) else {
            return Err(self.fail_key(&key, "is missing or not an array".into()));
        };
        if a.values.len() < self.n_layer as usize || a.values.len() > MAX_LAYERS as usize {
            return Err(self.fail_key(
                &key,
                format!(
                    "has {} entries; it needs block_count = {} to {MAX_LAYERS}",
                    a.values.len(),
                    self.n_layer
                ),
            ));
        }
        for (il, v) in a.values.iter().enumerate() {
            let ok = matches!(v, MetaValue::U32(0 | 4 | 128) | MetaValue::I32(0 | 4 | 128));
            if !ok {
                return Err(self.fail_key(
                    &key,
                    format!("is {v} in layer {il}; llama.cpp takes 0, 4 or 128 (u32/i32)"),
                ));
            }
        }
        Ok(())
    }

    /// The keys the bailingmoe3 loader (src/models/bailingmoe3.cpp `load_arch_hparams`) reads
    /// as required, and the KDA gate values it asserts on.
    fn bailingmoe3_hparams(&self) -> Result<()> {
        for k in [
            "attention.key_length_mla",
            "attention.value_length_mla",
            "attention.kv_lora_rank",
            "ssm.conv_kernel",
            "kda.head_dim",
            "expert_shared_count",
            "leading_dense_block_count",
            "expert_gating_func",
        ] {
            self.u32_required(&self.key(k))?;
        }
        let ff = self.key("expert_feed_forward_length");
        if self.model.get(&ff).is_none() {
            return Err(self.fail_key(&ff, "is missing".into()));
        }
        // GGML_ASSERT(hparams.kda_safe_gate) and GGML_ASSERT(kda_gate_lower_bound < 0)
        let safe = self.key("kda.safe_gate");
        if self.bool_opt(&safe)? == Some(false) {
            return Err(self.fail_key(&safe, "is false; llama.cpp asserts it is true".into()));
        }
        let lb_key = self.key("kda.gate_lower_bound");
        let lb = self.f32_required(&lb_key)?;
        if lb >= 0.0 {
            return Err(self.fail_key(&lb_key, format!("is {lb}; llama.cpp asserts it is < 0")));
        }
        self.bool_opt(&self.key("expert_weights_norm"))?;
        Ok(())
    }

    /// `attention.sliding_window_pattern` as `load_swa_pattern` / `get_arr` read it: an array
    /// of bool/u32/i32 flags, at most `LLAMA_MAX_LAYERS` long, or (when not `required`, i.e.
    /// gpt-oss) a u32 period. Returns whether layer 0 is a sliding-window layer, when known.
    fn swa_pattern(&self, required: bool) -> Result<Option<bool>> {
        let key = self.key("attention.sliding_window_pattern");
        match self.model.get(&key) {
            None if required => Err(self.fail_key(
                &key,
                format!(
                    "is missing; {} reads one sliding-window flag per layer from it",
                    self.arch
                ),
            )),
            None => Ok(None),
            Some(MetaValue::Array(a)) => {
                use crate::value::ValueType as T;
                if !matches!(a.elem_type, T::Bool | T::U32 | T::I32) {
                    return Err(self.fail_key(
                        &key,
                        "is an array of another type; llama.cpp reads bool, u32 or i32 flags"
                            .into(),
                    ));
                }
                if a.values.len() > MAX_LAYERS as usize {
                    return Err(self.fail_key(
                        &key,
                        format!(
                            "has {} values; llama.cpp allows at most {MAX_LAYERS}",
                            a.values.len()
                        ),
                    ));
                }
                Ok(a.values.first().map(|v| match v {
                    MetaValue::Bool(b) => *b,
                    MetaValue::U32(x) => *x != 0,
                    MetaValue::I32(x) => *x != 0,
                    _ => false,
                }))
            }
            Some(MetaValue::U32(_)) if !required => Ok(None),
            Some(v) if required => Err(self.fail_key(
                &key,
                format!(
                    "is {v}; {} reads it as an array (a flag per layer)",
                    self.arch
                ),
            )),
            Some(v) => Err(self.fail_key(
                &key,
                format!("is {v}; llama.cpp reads a per-layer array or a u32 period"),
            )),
        }
    }

    /// gpt-oss tensors whose shapes llama.cpp's loader derives from the counts (and refuses as
    /// "wrong shape" otherwise): attention by heads × rope dims, one sink per head, and the
    /// router and expert biases by the expert count and FF width.
    fn gpt_oss_shapes(&self) -> Result<()> {
        let e = self.n_embd;
        let n_exp = u64::from(self.n_expert);
        let heads = self
            .per_layer(&self.key("attention.head_count"))?
            .unwrap_or_default();
        let kv = self
            .per_layer(&self.key("attention.head_count_kv"))?
            .unwrap_or_else(|| heads.clone());
        let ff = self
            .per_layer(&self.key("expert_feed_forward_length"))?
            .unwrap_or_default();
        let Some(&h0) = heads.first() else {
            return Ok(());
        };
        if h0 == 0 {
            return Ok(());
        }
        let default = self.n_embd / u64::from(h0);
        let head_k = self
            .u32_opt(&self.key("attention.key_length"))?
            .map_or(default, u64::from);
        let n_rot = self
            .u32_opt(&self.key("rope.dimension_count"))?
            .map_or(head_k, u64::from);
        // the loader sizes every layer by layer 0's counts (`n_head`, `n_head_kv`, `n_ff_exp`)
        let (h, k) = (u64::from(h0), u64::from(kv.first().copied().unwrap_or(h0)));
        let f = u64::from(ff.first().copied().unwrap_or(0));
        for il in 0..self.n_layer as usize {
            let p = |s: &str| format!("blk.{il}.{s}");
            for (name, want) in [
                (p("attn_q.weight"), vec![e, h * n_rot]),
                (p("attn_k.weight"), vec![e, k * n_rot]),
                (p("attn_v.weight"), vec![e, k * n_rot]),
                (p("attn_output.weight"), vec![h * n_rot, e]),
                (p("attn_sinks.weight"), vec![h]),
                (p("ffn_gate_inp.bias"), vec![n_exp]),
                (p("ffn_gate_exps.bias"), vec![f, n_exp]),
                (p("ffn_up_exps.bias"), vec![f, n_exp]),
                (p("ffn_down_exps.bias"), vec![e, n_exp]),
            ] {
                self.expect_dims(&name, &want)?;
            }
        }
        Ok(())
    }

    fn attention_shapes(&self, heads: &[u32], kv: &[u32], hk: u64, hv: u64) -> Result<()> {
        let e = self.n_embd;
        for il in 0..self.n_layer as usize {
            let (h, k) = (u64::from(heads[il]), u64::from(kv[il]));
            for (suffix, want) in [
                ("attn_q.weight", [e, h * hk]),
                ("attn_k.weight", [e, k * hk]),
                ("attn_v.weight", [e, k * hv]),
                ("attn_output.weight", [h * hv, e]),
            ] {
                self.expect_dims(&format!("blk.{il}.{suffix}"), &want)?;
            }
        }
        Ok(())
    }

    /// If tensor `name` exists, its dims must be `want`.
    fn expect_dims(&self, name: &str, want: &[u64]) -> Result<()> {
        if let Some(t) = self.tensor(name)
            && t.info.dims != want
        {
            return Err(self.fail_tensor(
                t.shard,
                name,
                format!(
                    "has shape {:?} but the metadata makes it {want:?}",
                    t.info.dims
                ),
            ));
        }
        Ok(())
    }

    fn vocab(&self) -> Result<()> {
        let model_key = "tokenizer.ggml.model";
        match self.model.get(model_key) {
            None => return Err(self.fail_key(model_key, "is missing".into())),
            Some(MetaValue::String(s)) if s == "no_vocab" || s == "none" => {}
            Some(MetaValue::String(s)) if TOKENIZERS.contains(&s.as_str()) => {
                let tokens = "tokenizer.ggml.tokens";
                match self.model.get(tokens) {
                    Some(MetaValue::Array(a)) if a.elem_type == crate::value::ValueType::String => {
                    }
                    Some(v) => {
                        return Err(
                            self.fail_key(tokens, format!("is {v}, expected an array of strings"))
                        );
                    }
                    None => return Err(self.fail_key(tokens, "is missing".into())),
                }
            }
            Some(v) => {
                return Err(self.fail_key(
                    model_key,
                    format!("is {v}, not a tokenizer llama.cpp knows"),
                ));
            }
        }
        Ok(())
    }

    fn n_vocab(&self) -> Option<u64> {
        match self.model.get("tokenizer.ggml.tokens") {
            Some(MetaValue::Array(a)) => Some(a.values.len() as u64),
            _ => None,
        }
    }

    /// Tensor names against `block_count`, and the shapes every MoE layout shares: embeddings
    /// and norms `n_embd` wide, the router `[n_embd, n_expert]`, expert tensors 3-D with
    /// `n_expert` as their last dimension and the expert FF width in its place.
    fn tensors(&self) -> Result<()> {
        let e = self.n_embd;
        let mut seen = vec![false; self.n_layer as usize];
        for t in self.model.tensors() {
            let name = &t.info.name;
            let Some(rest) = name.strip_prefix("blk.") else {
                continue;
            };
            let layer = rest
                .split('.')
                .next()
                .and_then(|l| l.parse::<u32>().ok())
                .filter(|l| *l < self.n_layer);
            match layer {
                Some(l) => seen[l as usize] = true,
                None => {
                    return Err(self.fail_tensor(
                        t.shard,
                        name,
                        format!(
                            "is not in a layer 0..{} ({} = {})",
                            self.n_layer,
                            self.key("block_count"),
                            self.n_layer
                        ),
                    ));
                }
            }
        }
        if let Some(l) = seen.iter().position(|s| !s) {
            return Err(self.fail_key(
                &self.key("block_count"),
                format!(
                    "is {} but the file has no tensors for layer {l}",
                    self.n_layer
                ),
            ));
        }
        let n_vocab = self.n_vocab();
        for name in ["token_embd.weight", "output.weight"] {
            if let Some(t) = self.tensor(name) {
                let d = &t.info.dims;
                let ok = d.len() == 2 && d[0] == e && n_vocab.is_none_or(|v| d[1] == v);
                if !ok {
                    let vocab = n_vocab.map_or_else(|| "n_vocab".to_string(), |v| v.to_string());
                    return Err(self.fail_tensor(
                        t.shard,
                        name,
                        format!("has shape {d:?}; the metadata makes it [{e}, {vocab}] (embedding_length, vocabulary size)"),
                    ));
                }
            }
        }
        self.expect_dims("output_norm.weight", &[e])?;
        let ff = self.per_layer(&self.key("expert_feed_forward_length"))?;
        let n_exp = u64::from(self.n_expert);
        for il in 0..self.n_layer as usize {
            for norm in [
                "attn_norm",
                "ffn_norm",
                "post_attention_norm",
                "post_ffw_norm",
            ] {
                self.expect_dims(&format!("blk.{il}.{norm}.weight"), &[e])?;
            }
            if n_exp > 0 {
                self.expect_dims(&format!("blk.{il}.ffn_gate_inp.weight"), &[e, n_exp])?;
            }
            let f = ff.as_ref().map(|v| u64::from(v[il]));
            for kind in ["gate", "up", "down", "gate_up"] {
                let name = format!("blk.{il}.ffn_{kind}_exps.weight");
                let Some(t) = self.tensor(&name) else {
                    continue;
                };
                let d = &t.info.dims;
                let (inner, outer) = match kind {
                    "down" => (f, Some(e)),
                    "gate_up" => (Some(e), f.map(|f| 2 * f)),
                    _ => (Some(e), f),
                };
                let ok = d.len() == 3
                    && n_exp > 0
                    && d[2] == n_exp
                    && inner.is_none_or(|x| d[0] == x)
                    && outer.is_none_or(|x| d[1] == x);
                if !ok {
                    let show =
                        |x: Option<u64>| x.map_or_else(|| "?".to_string(), |x| x.to_string());
                    return Err(self.fail_tensor(
                        t.shard,
                        &name,
                        format!(
                            "has shape {d:?}; an expert tensor must be [{}, {}, {n_exp}] ({} = {n_exp} experts last)",
                            show(inner),
                            show(outer),
                            self.key("expert_count")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every tensor the architecture's loader requires is present (a name cut or flipped in the
    /// header would make llama.cpp refuse the file).
    fn required_tensors(&self) -> Result<()> {
        let Some((_, global, per_layer)) = REQUIRED.iter().find(|(a, _, _)| *a == self.arch) else {
            return Ok(());
        };
        let missing = |name: String| {
            self.fail_key(
                "general.architecture",
                format!(
                    "is {}, whose loader needs tensor {name}, and the file has none",
                    self.arch
                ),
            )
        };
        for g in *global {
            let name = required_name("", g);
            if self.tensor(&name).is_none() {
                return Err(missing(name));
            }
        }
        for il in 0..self.n_layer {
            let prefix = format!("blk.{il}.");
            let has = |s: &str| self.tensor(&required_name(&prefix, s)).is_some();
            for s in per_layer.iter().copied() {
                if !has(s) {
                    return Err(missing(required_name(&prefix, s)));
                }
            }
            if !has("attn_qkv") {
                for s in ["attn_q", "attn_k", "attn_v"] {
                    if !has(s) {
                        return Err(missing(format!("blk.{il}.{s}.weight")));
                    }
                }
            }
        }
        Ok(())
    }

    /// Tensor data is packed as GGUF (and llama.cpp's reader) requires: each tensor starts where
    /// the one before it in the header ends, padded to the alignment — so no two tensors share
    /// bytes (the expert streamer binds each slice to its own) and none hides a gap.
    fn layout(&self) -> Result<()> {
        for (shard, file) in self.model.shards().iter().enumerate() {
            let h = file.header();
            let mut spans: Vec<(u64, u64, &str)> = h
                .tensors
                .iter()
                .filter(|t| t.n_bytes > 0)
                .map(|t| (t.file_offset, t.file_offset + t.n_bytes, t.name.as_str()))
                .collect();
            spans.sort_unstable();
            for w in spans.windows(2) {
                let ((_, end, a), (start, _, b)) = (w[0], w[1]);
                if start < end {
                    return Err(self.fail_tensor(
                        shard,
                        b,
                        format!(
                            "data at byte {start} overlaps tensor {} (which ends at byte {end})",
                            escape(a)
                        ),
                    ));
                }
            }
            let mut expected = 0u64;
            for t in &h.tensors {
                if t.rel_offset != expected {
                    return Err(self.fail_tensor(
                        shard,
                        &t.name,
                        format!(
                            "data offset is {} but the tensors before it end at {expected} (GGUF packs tensor data in header order)",
                            t.rel_offset
                        ),
                    ));
                }
                expected =
                    crate::parse::pad_to(expected + t.n_bytes, h.alignment).unwrap_or(u64::MAX);
            }
        }
        Ok(())
    }
}

/// The same checks for a single file path: open (all shards of a split set) and validate.
///
/// # Errors
/// As [`GgufModel::open`] and [`validate`].
pub fn open_validated(path: &Path) -> Result<GgufModel> {
    let model = GgufModel::open(path)?;
    validate(&model)?;
    Ok(model)
}
