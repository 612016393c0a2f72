//! Per-architecture tensor sets and metadata keys, as the vendored llama.cpp loaders require
//! (`src/models/{qwen3moe,qwen2moe,openai-moe}.cpp`, `load_arch_hparams` / `load_arch_tensors`).

use std::sync::Arc;

use super::init::Init;
use super::rng::{WyRand, derive};
use super::tokenizer::Vocab;
use super::{PlannedTensor, SynthOptions};
use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::value::MetaValue;
use crate::writer::TensorSpec;

/// A llama.cpp architecture the synthesiser can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `qwen3moe`: q/k norms, routed experts only.
    Qwen3Moe,
    /// `qwen2moe`: qkv biases, routed experts plus a shared expert with a sigmoid gate.
    Qwen2Moe,
    /// `gpt-oss` (llama.cpp `LLM_ARCH_OPENAI_MOE`): attention sinks, sliding-window layers,
    /// router bias, expert biases, post-attention norm; experts usually MXFP4.
    GptOss,
    /// `gemma4`: fused `ffn_gate_up_exps` experts next to a dense GELU MLP, sliding-window layers,
    /// q/k norms, post-attention / post-FFN norms, a scaled router input.
    Gemma4,
    /// `lfm2moe`: shortconv layers beside attention layers (KV heads 0 marks a conv layer),
    /// dense leading layers, sigmoid routing with an expert-selection bias.
    Lfm2Moe,
    /// `qwen35moe`: gated-delta-net linear attention on 3 of 4 layers, gated full attention on
    /// the 4th, routed experts plus a gated dense shared expert.
    Qwen35Moe,
    /// `deepseek4` (DeepSeek-V4): 4 hyper-connection streams, low-rank q and grouped low-rank
    /// output, one shared KV head; per-layer KV compression (sliding window only, CSA with a
    /// lightning indexer, HCA); hash-routed leading layers; sqrt-softplus routing with a
    /// selection bias; routed experts plus a dense shared expert.
    DeepSeek4,
    /// `bailingmoe3` (Ling 3.0): KDA linear attention on 3 of 4 layers, MLA on the 4th, dense
    /// leading layers, sigmoid group-limited routing with a selection bias, a dense shared
    /// expert.
    BailingMoe3,
}

impl Arch {
    /// The `general.architecture` string.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::GptOss => "gpt-oss",
            Arch::Gemma4 => "gemma4",
            Arch::Lfm2Moe => "lfm2moe",
            Arch::Qwen35Moe => "qwen35moe",
            Arch::DeepSeek4 => "deepseek4",
            Arch::BailingMoe3 => "bailingmoe3",
        }
    }

    /// Parse a `general.architecture` string.
    pub fn from_name(s: &str) -> Option<Self> {
        [
            Arch::Qwen3Moe,
            Arch::Qwen2Moe,
            Arch::GptOss,
            Arch::Gemma4,
            Arch::Lfm2Moe,
            Arch::Qwen35Moe,
            Arch::DeepSeek4,
            Arch::BailingMoe3,
        ]
        .into_iter()
        .find(|a| a.gguf_name() == s)
    }
}

pub(super) fn file_type(t: GgmlType) -> u32 {
    match t {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q8_0 => 7,
        GgmlType::Q4_K => 15,
        GgmlType::MXFP4 => 38,
        _ => 0,
    }
}

/// Per-expert router gains: a seeded ranking of the experts, gain ∝ (rank+1)^-skew, mean 1.
pub fn router_gains(seed: u64, layer: u32, n_expert: u32, skew: f32) -> Vec<f32> {
    let n = n_expert as usize;
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = WyRand::new(derive(seed, "router-rank", u64::from(layer)));
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut gains = vec![1.0f32; n];
    for (rank, &e) in order.iter().enumerate() {
        gains[e] = ((rank + 1) as f32).powf(-skew);
    }
    let mean = gains.iter().sum::<f32>() / n.max(1) as f32;
    gains.iter_mut().for_each(|g| *g /= mean);
    gains
}

/// Metadata in file order.
pub(super) type Metadata = Vec<(String, MetaValue)>;

pub(super) struct Builder {
    pub(super) tensors: Vec<PlannedTensor>,
}

impl Builder {
    pub(super) fn new() -> Self {
        Builder {
            tensors: Vec::new(),
        }
    }

    /// The tensors every preset opens with: the F32 token embedding (rows drawn with
    /// `embd_std`), the final norm (`norm` names it: llama.cpp's name varies by arch) and the
    /// output head, which `o.tied_output` leaves out so llama.cpp reuses the embedding.
    pub(super) fn add_embedding_and_head(
        &mut self,
        o: &SynthOptions,
        n_vocab: u64,
        embd_std: f32,
        norm: &str,
    ) {
        let (e, f32t) = (o.n_embd, GgmlType::F32);
        self.add(
            "token_embd.weight",
            f32t,
            &[e, n_vocab],
            Init::Random { std: embd_std },
        );
        self.add(norm, f32t, &[e], Init::Ones);
        if !o.tied_output {
            self.add_matrix("output.weight", f32t, &[e, n_vocab]);
        }
    }

    pub(super) fn add(&mut self, name: impl Into<String>, t: GgmlType, dims: &[u64], init: Init) {
        self.tensors.push(PlannedTensor {
            spec: TensorSpec::new(name, t, dims),
            init,
        });
    }

    /// A weight matrix (or vector) whose first dimension is its input width, drawn with
    /// standard deviation 1/√(input width) so activations keep their scale through it.
    pub(super) fn add_matrix(&mut self, name: impl Into<String>, t: GgmlType, dims: &[u64]) {
        let fan_in = dims.first().copied().unwrap_or(1);
        self.add(
            name,
            t,
            dims,
            Init::Random {
                std: inv_sqrt(fan_in),
            },
        );
    }

    /// The router of layer `i` (n_embd → n_expert, F32): each expert's row is scaled by its
    /// seeded gain, so `router_skew` makes some experts hotter than others.
    pub(super) fn add_router(&mut self, name: String, o: &SynthOptions, i: u32) {
        let e = o.n_embd;
        let gains = Arc::new(router_gains(o.seed, i, o.n_expert, o.router_skew));
        let init = Init::RowGain {
            std: 2.0 * inv_sqrt(e),
            gains,
        };
        self.add(name, GgmlType::F32, &[e, u64::from(o.n_expert)], init);
    }

    /// A dense gated MLP (`gate`, `up`: n_embd → n_ff; `down`: n_ff → n_embd), in that order;
    /// `name` maps `"gate"`/`"up"`/`"down"` to the tensor name.
    pub(super) fn add_mlp(
        &mut self,
        name: impl Fn(&str) -> String,
        t: GgmlType,
        n_embd: u64,
        n_ff: u64,
    ) {
        self.add_matrix(name("gate"), t, &[n_embd, n_ff]);
        self.add_matrix(name("up"), t, &[n_embd, n_ff]);
        self.add_matrix(name("down"), t, &[n_ff, n_embd]);
    }
}

pub(super) fn inv_sqrt(n: u64) -> f32 {
    1.0 / (n.max(1) as f32).sqrt()
}

/// The keys every synthesised file closes its metadata with: the tokenizer's, then bmoe's own
/// provenance (seed and router skew, which `model inspect` reports).
pub(super) fn trailing_keys(md: &mut Metadata, vocab: &Vocab, o: &SynthOptions) {
    md.extend(vocab.metadata());
    md.push(("bmoe.synth.seed".into(), MetaValue::U64(o.seed)));
    md.push((
        "bmoe.synth.router_skew".into(),
        MetaValue::F32(o.router_skew),
    ));
}

/// The keys every synthesised file opens with, in this order: identity, quantisation, context,
/// width and depth (each builder appends its architecture's own keys after them).
pub(super) fn leading_keys(a: &str, o: &SynthOptions) -> Metadata {
    let kv = |k: &str| format!("{a}.{k}");
    vec![
        ("general.architecture".into(), MetaValue::String(a.into())),
        (
            "general.name".into(),
            MetaValue::String(format!("bmoe synthetic {a}")),
        ),
        (
            "general.file_type".into(),
            MetaValue::U32(file_type(o.expert_type)),
        ),
        ("general.quantization_version".into(), MetaValue::U32(2)),
        (kv("context_length"), MetaValue::U32(o.n_ctx)),
        (kv("embedding_length"), MetaValue::U32(o.n_embd as u32)),
        (kv("block_count"), MetaValue::U32(o.n_layer)),
    ]
}

pub(super) fn build(o: &SynthOptions) -> Result<(Metadata, Vec<PlannedTensor>)> {
    if o.arch == Arch::Lfm2Moe {
        return super::lfm2moe::build(o);
    }
    if o.arch == Arch::Qwen35Moe {
        return super::qwen35moe::build(o);
    }
    if o.n_mtp_layers > 0 {
        return Err(GgufError::Invalid(format!(
            "{} has no MTP head in this synthesiser (only qwen35moe does)",
            o.arch.gguf_name()
        )));
    }
    if o.arch == Arch::DeepSeek4 {
        return super::deepseek4::build(o);
    }
    if o.arch == Arch::BailingMoe3 {
        return super::bailingmoe3::build(o);
    }
    let a = o.arch.gguf_name();
    let e = o.n_embd;
    let ff = o.n_ff_exp;
    let ne = u64::from(o.n_expert);
    let hd = o.head_dim;
    let q_dim = o.n_head * hd;
    let kv_dim = o.n_head_kv * hd;
    if o.arch == Arch::Qwen2Moe && q_dim != e {
        return Err(GgufError::Invalid(format!(
            "qwen2moe needs heads × head dim = n_embd ({} × {hd} ≠ {e})",
            o.n_head
        )));
    }
    let vocab = Vocab::new(o.vocab_extra);
    let nv = vocab.len();

    let kv = |k: &str| format!("{a}.{k}");
    let mut md = leading_keys(a, o);
    md.extend([
        (
            kv("feed_forward_length"),
            // gemma4's dense MLP width; the others only use it as a fallback for the expert FF.
            MetaValue::U32(if o.arch == Arch::Gemma4 {
                o.n_ff_shexp as u32
            } else {
                (ff * u64::from(o.n_expert_used)).min(u64::from(u32::MAX)) as u32
            }),
        ),
        (kv("attention.head_count"), MetaValue::U32(o.n_head as u32)),
        (
            kv("attention.head_count_kv"),
            MetaValue::U32(o.n_head_kv as u32),
        ),
        (kv("attention.key_length"), MetaValue::U32(hd as u32)),
        (kv("attention.value_length"), MetaValue::U32(hd as u32)),
        (kv("rope.dimension_count"), MetaValue::U32(hd as u32)),
        (
            kv("rope.freq_base"),
            MetaValue::F32(if o.arch == Arch::GptOss {
                150_000.0
            } else {
                1_000_000.0
            }),
        ),
        (kv("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6)),
        (kv("expert_count"), MetaValue::U32(o.n_expert)),
        (kv("expert_used_count"), MetaValue::U32(o.n_expert_used)),
        (kv("expert_feed_forward_length"), MetaValue::U32(ff as u32)),
    ]);
    match o.arch {
        Arch::Qwen2Moe => md.push((
            kv("expert_shared_feed_forward_length"),
            MetaValue::U32(o.n_ff_shexp as u32),
        )),
        Arch::GptOss => md.push((
            kv("attention.sliding_window"),
            MetaValue::U32(o.sliding_window),
        )),
        Arch::Gemma4 => md.extend([
            (
                kv("attention.sliding_window"),
                MetaValue::U32(o.sliding_window),
            ),
            (
                kv("attention.sliding_window_pattern"),
                MetaValue::bool_array((0..o.n_layer).map(gemma4_is_swa)),
            ),
            (kv("embedding_length_per_layer_input"), MetaValue::U32(0)),
            (kv("attention.key_length_swa"), MetaValue::U32(hd as u32)),
            (kv("attention.value_length_swa"), MetaValue::U32(hd as u32)),
        ]),
        Arch::Qwen3Moe | Arch::Lfm2Moe | Arch::Qwen35Moe | Arch::DeepSeek4 | Arch::BailingMoe3 => {}
    }
    trailing_keys(&mut md, &vocab, o);

    let dt = o.dense_type;
    let xt = o.expert_type;
    let f32t = GgmlType::F32;
    let mut b = Builder::new();
    // gemma4 multiplies embeddings by sqrt(n_embd); keep its residual stream at unit scale too.
    let embd_std = if o.arch == Arch::Gemma4 {
        inv_sqrt(e)
    } else {
        1.0
    };
    b.add_embedding_and_head(o, nv, embd_std, "output_norm.weight");
    let mut rope_freqs_done = false;
    for i in 0..o.n_layer {
        let p = |s: &str| format!("blk.{i}.{s}");
        if o.arch == Arch::Gemma4 {
            gemma4_layer(&mut b, o, i, &mut rope_freqs_done);
            continue;
        }
        b.add(p("attn_norm.weight"), f32t, &[e], Init::Ones);
        if o.arch == Arch::GptOss {
            b.add(p("post_attention_norm.weight"), f32t, &[e], Init::Ones);
        }
        b.add_matrix(p("attn_q.weight"), dt, &[e, q_dim]);
        b.add_matrix(p("attn_k.weight"), dt, &[e, kv_dim]);
        b.add_matrix(p("attn_v.weight"), dt, &[e, kv_dim]);
        if o.arch != Arch::Qwen3Moe {
            let small = Init::Random { std: 0.02 };
            b.add(p("attn_q.bias"), f32t, &[q_dim], small.clone());
            b.add(p("attn_k.bias"), f32t, &[kv_dim], small.clone());
            b.add(p("attn_v.bias"), f32t, &[kv_dim], small);
        }
        b.add_matrix(p("attn_output.weight"), dt, &[q_dim, e]);
        match o.arch {
            Arch::Qwen3Moe => {
                b.add(p("attn_q_norm.weight"), f32t, &[hd], Init::Ones);
                b.add(p("attn_k_norm.weight"), f32t, &[hd], Init::Ones);
            }
            Arch::GptOss => {
                b.add(
                    p("attn_output.bias"),
                    f32t,
                    &[e],
                    Init::Random { std: 0.02 },
                );
                b.add(p("attn_sinks.weight"), f32t, &[o.n_head], Init::Zeros);
            }
            Arch::Qwen2Moe
            | Arch::Gemma4
            | Arch::Lfm2Moe
            | Arch::Qwen35Moe
            | Arch::DeepSeek4
            | Arch::BailingMoe3 => {}
        }
        if o.arch != Arch::GptOss {
            b.add(p("ffn_norm.weight"), f32t, &[e], Init::Ones);
        }
        b.add_router(p("ffn_gate_inp.weight"), o, i);
        if o.arch == Arch::GptOss {
            b.add(p("ffn_gate_inp.bias"), f32t, &[ne], Init::Zeros);
        }
        b.add_matrix(p("ffn_gate_exps.weight"), xt, &[e, ff, ne]);
        b.add_matrix(p("ffn_up_exps.weight"), xt, &[e, ff, ne]);
        b.add_matrix(p("ffn_down_exps.weight"), xt, &[ff, e, ne]);
        match o.arch {
            Arch::GptOss => {
                let small = Init::Random { std: 0.01 };
                b.add(p("ffn_gate_exps.bias"), f32t, &[ff, ne], small.clone());
                b.add(p("ffn_up_exps.bias"), f32t, &[ff, ne], small.clone());
                b.add(p("ffn_down_exps.bias"), f32t, &[e, ne], small);
            }
            Arch::Qwen2Moe => {
                let fs = o.n_ff_shexp;
                b.add_matrix(p("ffn_gate_inp_shexp.weight"), f32t, &[e]);
                b.add_mlp(|w| p(&format!("ffn_{w}_shexp.weight")), dt, e, fs);
            }
            Arch::Qwen3Moe
            | Arch::Gemma4
            | Arch::Lfm2Moe
            | Arch::Qwen35Moe
            | Arch::DeepSeek4
            | Arch::BailingMoe3 => {}
        }
    }
    for t in &b.tensors {
        t.spec.n_bytes()?;
    }
    let _ = rope_freqs_done;
    Ok((md, b.tensors))
}

/// gemma4 layer `i` uses sliding-window attention on even layers (full attention on odd ones).
fn gemma4_is_swa(i: u32) -> bool {
    i.is_multiple_of(2)
}

/// One gemma4 MoE layer (`src/models/gemma4.cpp`, `load_arch_tensors`).
fn gemma4_layer(b: &mut Builder, o: &SynthOptions, i: u32, rope_freqs_done: &mut bool) {
    let p = |s: &str| format!("blk.{i}.{s}");
    let (e, ff, hd) = (o.n_embd, o.n_ff_exp, o.head_dim);
    let ne = u64::from(o.n_expert);
    let (q_dim, kv_dim) = (o.n_head * hd, o.n_head_kv * hd);
    let (f32t, dt, xt) = (GgmlType::F32, o.dense_type, o.expert_type);
    let fs = o.n_ff_shexp;
    b.add(p("attn_norm.weight"), f32t, &[e], Init::Ones);
    b.add_matrix(p("attn_q.weight"), dt, &[e, q_dim]);
    b.add_matrix(p("attn_k.weight"), dt, &[e, kv_dim]);
    b.add_matrix(p("attn_v.weight"), dt, &[e, kv_dim]);
    b.add_matrix(p("attn_output.weight"), dt, &[q_dim, e]);
    b.add(p("attn_q_norm.weight"), f32t, &[hd], Init::Ones);
    b.add(p("attn_k_norm.weight"), f32t, &[hd], Init::Ones);
    b.add(p("post_attention_norm.weight"), f32t, &[e], Init::Ones);
    if !gemma4_is_swa(i) && !*rope_freqs_done {
        // One tensor shared by every full-attention layer (llama.cpp TENSOR_DUPLICATED).
        b.add("rope_freqs.weight", f32t, &[hd / 2], Init::Ones);
        *rope_freqs_done = true;
    }
    b.add(p("ffn_norm.weight"), f32t, &[e], Init::Ones);
    b.add_mlp(|w| p(&format!("ffn_{w}.weight")), dt, e, fs);
    b.add(p("post_ffw_norm.weight"), f32t, &[e], Init::Ones);
    b.add_router(p("ffn_gate_inp.weight"), o, i);
    // The router input is rms_norm(x) / sqrt(n_embd) * scale: scale = sqrt(n_embd) restores the
    // logit scale the other architectures have.
    b.add(
        p("ffn_gate_inp.scale"),
        f32t,
        &[e],
        Init::Const((e as f32).sqrt()),
    );
    b.add(p("pre_ffw_norm_2.weight"), f32t, &[e], Init::Ones);
    b.add(p("post_ffw_norm_1.weight"), f32t, &[e], Init::Ones);
    b.add(p("post_ffw_norm_2.weight"), f32t, &[e], Init::Ones);
    b.add_matrix(p("ffn_gate_up_exps.weight"), xt, &[e, 2 * ff, ne]);
    b.add_matrix(p("ffn_down_exps.weight"), xt, &[ff, e, ne]);
}
