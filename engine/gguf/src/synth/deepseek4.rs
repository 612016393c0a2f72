//! `deepseek4` (DeepSeek-V4), as the vendored llama.cpp loads it (`src/models/deepseek4.cpp`
//! `load_arch_hparams` / `load_arch_tensors`): the residual stream is 4 hyper-connection copies
//! mixed per layer (`hc_*`, Sinkhorn-normalised), attention has a low-rank query
//! (`attn_q_a`/`attn_q_b`), one shared KV head (`attn_kv`), attention sinks and a grouped
//! low-rank output (`attn_output_a`/`_b`); each layer compresses its KV by a ratio of 0 (sliding
//! window only), 4 (CSA, with a lightning indexer) or 128 (HCA). The first layers route by a
//! token-id hash table (`ffn_gate_tid2eid`), the rest by sqrt-softplus scores plus a selection
//! bias; every layer has routed experts plus a dense shared expert. No MTP block is written.

use super::arch::{Builder, Metadata, leading_keys, trailing_keys};
use super::init::Init;
use super::tokenizer::Vocab;
use super::{PlannedTensor, SynthOptions};
use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::value::MetaValue;

/// Hyper-connection streams (the graph asserts 4).
const HC_MULT: u64 = 4;
/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS` (the only scoring its loader takes).
const GATING_SQRT_SOFTPLUS: u32 = 4;
/// CSA: compress by 4 and select blocks with the indexer.
const CSA: u32 = 4;
/// HCA: compress by 128.
const HCA: u32 = 128;

/// The dims llama.cpp derives from keys this module writes; DeepSeek-V4-Flash's at n_embd ≥ 4096,
/// scaled down below.
struct Shape {
    /// Rotated dims of each head (`rope.dimension_count`).
    n_rot: u64,
    /// Query low rank (`attention.q_lora_rank`).
    q_lora: u64,
    /// Output groups (`attention.output_group_count`).
    o_groups: u64,
    /// Output low rank per group (`attention.output_lora_rank`).
    o_lora: u64,
    /// Indexer heads and head size.
    idx_heads: u64,
    /// Indexer head size: a multiple of 64 (llama.cpp's smallest Hadamard rotation of the
    /// indexer cache) and unlike the head dim (an equal one forces the rotation on the raw
    /// cache, whose empty full-attention half then divides by zero).
    idx_dim: u64,
    /// Indexer blocks kept per query (`attention.indexer.top_k`).
    idx_top_k: u32,
}

fn shape(o: &SynthOptions) -> Shape {
    if o.n_embd >= 4096 {
        Shape {
            n_rot: 64,
            q_lora: 1024,
            o_groups: 8,
            o_lora: 1024,
            idx_heads: 64,
            idx_dim: 128,
            idx_top_k: 512,
        }
    } else {
        Shape {
            n_rot: (o.head_dim / 8).max(2) & !1,
            q_lora: (o.n_embd / 4).max(16),
            o_groups: 2,
            o_lora: (o.n_embd / 4).max(16),
            idx_heads: 4,
            idx_dim: 128,
            idx_top_k: 8,
        }
    }
}

/// Leading layers routed by the token-id hash table: 3 in DeepSeek-V4-Flash, 1 in small models
/// (so a gate covers both routings).
pub(super) fn hash_layers(n_layer: u32) -> u32 {
    (n_layer / 4).clamp(1, 3)
}

/// KV compression ratio of layer `i`: the first layers (2 of ≥ 8, else 1) keep only the sliding
/// window, then CSA and HCA alternate.
pub(super) fn compress_ratio(i: u32, n_layer: u32) -> u32 {
    let window_only = if n_layer >= 8 { 2 } else { 1 };
    if i < window_only {
        0
    } else if (i - window_only).is_multiple_of(2) {
        CSA
    } else {
        HCA
    }
}

/// Metadata and tensors of a deepseek4 model.
pub(super) fn build(o: &SynthOptions) -> Result<(Metadata, Vec<PlannedTensor>)> {
    let a = "deepseek4";
    let (e, ff, hd) = (o.n_embd, o.n_ff_exp, o.head_dim);
    let s = shape(o);
    if o.n_layer < 3 {
        return Err(GgufError::Invalid(format!(
            "deepseek4 needs ≥ 3 layers (a hash-routed window layer, a CSA and an HCA layer), got {}",
            o.n_layer
        )));
    }
    if o.n_head_kv != 1
        || !o.n_head.is_multiple_of(s.o_groups)
        || s.n_rot > hd.min(s.idx_dim)
        || hd == s.idx_dim
    {
        return Err(GgufError::Invalid(format!(
            "deepseek4 needs 1 KV head (got {}), heads {} divisible by {} output groups and rope dims {} ≤ head dim {hd} ≠ indexer dim {}",
            o.n_head_kv, o.n_head, s.o_groups, s.n_rot, s.idx_dim
        )));
    }
    if o.n_ff_shexp == 0 || !o.n_ff_shexp.is_multiple_of(ff) {
        return Err(GgufError::Invalid(format!(
            "deepseek4's shared expert FF {} must be a positive multiple of the expert FF {ff} (shared experts × expert FF)",
            o.n_ff_shexp
        )));
    }
    let n_hash = hash_layers(o.n_layer);
    let vocab = Vocab::new(o.vocab_extra);
    let nv = vocab.len();
    let kv = |k: &str| format!("{a}.{k}");
    let u = |x: u64| MetaValue::U32(x as u32);
    let mut md = leading_keys(a, o);
    md.extend([
        (kv("attention.head_count"), u(o.n_head)),
        (kv("attention.head_count_kv"), u(1)),
        (kv("attention.key_length"), u(hd)),
        (kv("attention.value_length"), u(hd)),
        (kv("rope.dimension_count"), u(s.n_rot)),
        (kv("rope.freq_base"), MetaValue::F32(10_000.0)),
        (kv("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6)),
        (kv("attention.q_lora_rank"), u(s.q_lora)),
        (
            kv("attention.sliding_window"),
            MetaValue::U32(o.sliding_window),
        ),
        (kv("attention.output_group_count"), u(s.o_groups)),
        (kv("attention.output_lora_rank"), u(s.o_lora)),
        (kv("attention.indexer.head_count"), u(s.idx_heads)),
        (kv("attention.indexer.key_length"), u(s.idx_dim)),
        (kv("attention.indexer.top_k"), MetaValue::U32(s.idx_top_k)),
        (
            kv("attention.compress_ratios"),
            MetaValue::i32_array((0..o.n_layer).map(|i| compress_ratio(i, o.n_layer) as i32)),
        ),
        (
            kv("attention.compress_rope_freq_base"),
            MetaValue::F32(160_000.0),
        ),
        (kv("expert_count"), MetaValue::U32(o.n_expert)),
        (kv("expert_used_count"), MetaValue::U32(o.n_expert_used)),
        (kv("expert_feed_forward_length"), u(ff)),
        (kv("expert_shared_count"), u(o.n_ff_shexp / ff)),
        (kv("expert_weights_scale"), MetaValue::F32(1.5)),
        (kv("expert_weights_norm"), MetaValue::Bool(true)),
        (
            kv("expert_gating_func"),
            MetaValue::U32(GATING_SQRT_SOFTPLUS),
        ),
        (kv("swiglu_clamp_exp"), MetaValue::F32(10.0)),
        (kv("hyper_connection.count"), u(HC_MULT)),
        (
            kv("hyper_connection.sinkhorn_iterations"),
            MetaValue::U32(20),
        ),
        (kv("hyper_connection.epsilon"), MetaValue::F32(1e-6)),
        (kv("hash_layer_count"), MetaValue::U32(n_hash)),
    ]);
    trailing_keys(&mut md, &vocab, o);

    let f32t = GgmlType::F32;
    if o.tied_output {
        return Err(GgufError::Invalid(
            "deepseek4 has no tied output head: llama.cpp requires output.weight".into(),
        ));
    }
    let mut b = Builder::new();
    b.add_embedding_and_head(o, nv, 1.0, "output_norm.weight");
    b.add_matrix("output_hc_fn.weight", f32t, &[HC_MULT * e, HC_MULT]);
    b.add("output_hc_base.weight", f32t, &[HC_MULT], Init::Zeros);
    b.add("output_hc_scale.weight", f32t, &[1], Init::Ones);
    for i in 0..o.n_layer {
        layer(&mut b, o, &s, i, i < n_hash, nv);
    }
    for t in &b.tensors {
        t.spec.n_bytes()?;
    }
    Ok((md, b.tensors))
}

/// One deepseek4 layer (the loader's order, but experts gate, up, down as in every preset).
fn layer(b: &mut Builder, o: &SynthOptions, s: &Shape, i: u32, hashed: bool, nv: u64) {
    let p = |n: &str| format!("blk.{i}.{n}");
    let (e, ff, hd) = (o.n_embd, o.n_ff_exp, o.head_dim);
    let ne = u64::from(o.n_expert);
    let (f32t, dt, xt) = (GgmlType::F32, o.dense_type, o.expert_type);
    let mix = (2 + HC_MULT) * HC_MULT;
    b.add(p("attn_norm.weight"), f32t, &[e], Init::Ones);
    b.add(p("attn_sinks.weight"), f32t, &[o.n_head], Init::Zeros);
    b.add_matrix(p("attn_q_a.weight"), dt, &[e, s.q_lora]);
    b.add(p("attn_q_a_norm.weight"), f32t, &[s.q_lora], Init::Ones);
    b.add_matrix(p("attn_q_b.weight"), dt, &[s.q_lora, o.n_head * hd]);
    b.add_matrix(p("attn_kv.weight"), dt, &[e, hd]);
    b.add(p("attn_kv_a_norm.weight"), f32t, &[hd], Init::Ones);
    // stored [heads × head dim / groups, groups × rank]; llama.cpp reshapes it on load
    let group_in = o.n_head * hd / s.o_groups;
    b.add_matrix(
        p("attn_output_a.weight"),
        dt,
        &[group_in, s.o_groups * s.o_lora],
    );
    b.add_matrix(p("attn_output_b.weight"), dt, &[s.o_groups * s.o_lora, e]);
    for site in ["attn", "ffn"] {
        b.add_matrix(
            p(&format!("hc_{site}_fn.weight")),
            f32t,
            &[HC_MULT * e, mix],
        );
        b.add(
            p(&format!("hc_{site}_base.weight")),
            f32t,
            &[mix],
            Init::Zeros,
        );
        b.add(
            p(&format!("hc_{site}_scale.weight")),
            f32t,
            &[3],
            Init::Ones,
        );
    }
    let ratio = compress_ratio(i, o.n_layer);
    if ratio != 0 {
        let coff = if ratio == CSA { 2 } else { 1 };
        let r = u64::from(ratio);
        b.add_matrix(p("attn_compressor_kv.weight"), dt, &[e, coff * hd]);
        b.add_matrix(p("attn_compressor_gate.weight"), dt, &[e, coff * hd]);
        b.add(
            p("attn_compressor_ape.weight"),
            f32t,
            &[coff * hd, r],
            Init::Random { std: 0.02 },
        );
        b.add(p("attn_compressor_norm.weight"), f32t, &[hd], Init::Ones);
        if ratio == CSA {
            let d = s.idx_dim;
            b.add_matrix(p("indexer.proj.weight"), dt, &[e, s.idx_heads]);
            b.add_matrix(
                p("indexer.attn_q_b.weight"),
                dt,
                &[s.q_lora, s.idx_heads * d],
            );
            b.add_matrix(p("indexer_compressor_kv.weight"), dt, &[e, 2 * d]);
            b.add_matrix(p("indexer_compressor_gate.weight"), dt, &[e, 2 * d]);
            b.add(
                p("indexer_compressor_ape.weight"),
                f32t,
                &[2 * d, r],
                Init::Random { std: 0.02 },
            );
            b.add(p("indexer_compressor_norm.weight"), f32t, &[d], Init::Ones);
        }
    }
    b.add_router(p("ffn_gate_inp.weight"), o, i);
    if hashed {
        b.add(
            p("ffn_gate_tid2eid.weight"),
            GgmlType::I32,
            &[u64::from(o.n_expert_used), nv],
            Init::ExpertIds {
                n_expert: o.n_expert,
                per_row: o.n_expert_used,
            },
        );
    } else {
        b.add(p("exp_probs_b.bias"), f32t, &[ne], Init::Zeros);
    }
    b.add(p("ffn_norm.weight"), f32t, &[e], Init::Ones);
    b.add_matrix(p("ffn_gate_exps.weight"), xt, &[e, ff, ne]);
    b.add_matrix(p("ffn_up_exps.weight"), xt, &[e, ff, ne]);
    b.add_matrix(p("ffn_down_exps.weight"), xt, &[ff, e, ne]);
    b.add_mlp(|w| p(&format!("ffn_{w}_shexp.weight")), dt, e, o.n_ff_shexp);
}
