//! `bailingmoe3` (inclusionAI Ling 3.0), as the vendored llama.cpp loads it
//! (`src/models/bailingmoe3.cpp` `load_arch_hparams` / `load_arch_tensors`): three of every four
//! layers are KDA linear attention (per-layer `head_count_kv` 0: separate q/k/v projections
//! each through a causal conv, a forget gate `ssm_f_a`, an output gate `ssm_g_a`), every fourth
//! is MLA (one latent KV head of `kv_lora_rank` + rope dims, `attn_k_b`/`attn_v_b` up-projections
//! per head, a sigmoid head gate). The first layers have a dense MLP, the rest routed experts
//! with sigmoid, group-limited routing and a selection bias, plus a dense shared expert. No MTP
//! block is written.

use super::arch::{Builder, Metadata, inv_sqrt, leading_keys, trailing_keys};
use super::init::Init;
use super::tokenizer::Vocab;
use super::{PlannedTensor, SynthOptions};
use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::value::MetaValue;

/// Every fourth layer is MLA, the rest KDA.
const ATTN_INTERVAL: u32 = 4;
/// Causal conv width of the KDA layers (`ssm.conv_kernel`).
const CONV_KERNEL: u64 = 4;
/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID`.
const GATING_SIGMOID: u32 = 2;

/// Layer `i` is an MLA (softmax attention) layer, else a KDA (linear attention) layer.
pub(super) fn is_attention(i: u32) -> bool {
    (i + 1).is_multiple_of(ATTN_INTERVAL)
}

/// Dense leading layers: one (Ling's first layer), none if that would leave no MoE layer.
pub(super) fn dense_lead(n_layer: u32) -> u32 {
    u32::from(n_layer > 1)
}

/// Expert groups and groups used per token: 8 of which 4 at ≥ 64 experts, else 4 of which 2
/// (each group keeps ≥ 2 experts, as llama.cpp's group score sums a group's top 2).
pub(super) fn expert_groups(n_expert: u32) -> (u32, u32) {
    if n_expert >= 64 && n_expert.is_multiple_of(8) {
        (8, 4)
    } else if n_expert >= 8 && n_expert.is_multiple_of(4) {
        (4, 2)
    } else {
        (0, 0)
    }
}

/// Metadata and tensors of a bailingmoe3 model. `head_dim` is the KDA head size and the MLA
/// value head size; the MLA query/key head adds `head_dim / 2` rotated dims and the latent KV
/// rank is `4 × head_dim`.
pub(super) fn build(o: &SynthOptions) -> Result<(Metadata, Vec<PlannedTensor>)> {
    let a = "bailingmoe3";
    let (e, ff, hd, fs) = (o.n_embd, o.n_ff_exp, o.head_dim, o.n_ff_shexp);
    if o.n_layer < ATTN_INTERVAL {
        return Err(GgufError::Invalid(format!(
            "bailingmoe3 needs ≥ {ATTN_INTERVAL} layers (the 4th is the first MLA layer), got {}",
            o.n_layer
        )));
    }
    if o.n_head_kv != 1 || fs == 0 {
        return Err(GgufError::Invalid(format!(
            "bailingmoe3 needs 1 KV head (MLA's latent head, got {}) and a shared expert FF > 0 (got {fs})",
            o.n_head_kv
        )));
    }
    let n_rot = hd / 2;
    let kv_lora = 4 * hd;
    let lead = dense_lead(o.n_layer);
    let dense_ff = ff * u64::from(o.n_expert_used + 1);
    let (groups, groups_used) = expert_groups(o.n_expert);
    let vocab = Vocab::new(o.vocab_extra);
    let nv = vocab.len();
    let kv = |k: &str| format!("{a}.{k}");
    let u = |x: u64| MetaValue::U32(x as u32);
    let kv_heads = (0..o.n_layer).map(|i| i32::from(is_attention(i)));
    let mut md = leading_keys(a, o);
    md.extend([
        (kv("feed_forward_length"), u(dense_ff)),
        (kv("attention.head_count"), u(o.n_head)),
        (
            kv("attention.head_count_kv"),
            MetaValue::i32_array(kv_heads),
        ),
        // the KV cache holds the latent: key = rank + rope dims, value = rank
        (kv("attention.key_length"), u(kv_lora + n_rot)),
        (kv("attention.value_length"), u(kv_lora)),
        (kv("attention.key_length_mla"), u(hd + n_rot)),
        (kv("attention.value_length_mla"), u(hd)),
        (kv("attention.kv_lora_rank"), u(kv_lora)),
        (kv("rope.dimension_count"), u(n_rot)),
        (kv("rope.freq_base"), MetaValue::F32(1_000_000.0)),
        (kv("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6)),
        (kv("ssm.conv_kernel"), u(CONV_KERNEL)),
        (kv("kda.head_dim"), u(hd)),
        (kv("kda.gate_lower_bound"), MetaValue::F32(-5.0)),
        (kv("leading_dense_block_count"), MetaValue::U32(lead)),
        (kv("expert_count"), MetaValue::U32(o.n_expert)),
        (kv("expert_used_count"), MetaValue::U32(o.n_expert_used)),
        (kv("expert_feed_forward_length"), u(ff)),
        (kv("expert_shared_feed_forward_length"), u(fs)),
        (kv("expert_shared_count"), MetaValue::U32(1)),
        (kv("expert_weights_scale"), MetaValue::F32(2.5)),
        (kv("expert_weights_norm"), MetaValue::Bool(true)),
        (kv("expert_gating_func"), MetaValue::U32(GATING_SIGMOID)),
    ]);
    if groups > 1 {
        md.push((kv("expert_group_count"), MetaValue::U32(groups)));
        md.push((kv("expert_group_used_count"), MetaValue::U32(groups_used)));
    }
    trailing_keys(&mut md, &vocab, o);

    let f32t = GgmlType::F32;
    let mut b = Builder::new();
    // a tied head is fine: llama.cpp falls back to token_embd when output.weight is absent
    b.add_embedding_and_head(o, nv, 1.0, "output_norm.weight");
    for i in 0..o.n_layer {
        let p = |s: &str| format!("blk.{i}.{s}");
        b.add(p("attn_norm.weight"), f32t, &[e], Init::Ones);
        if is_attention(i) {
            mla(&mut b, o, i, n_rot, kv_lora);
        } else {
            kda(&mut b, o, i);
        }
        b.add(p("ffn_norm.weight"), f32t, &[e], Init::Ones);
        if i < lead {
            b.add_mlp(|w| p(&format!("ffn_{w}.weight")), o.dense_type, e, dense_ff);
        } else {
            let (dt, xt, ne) = (o.dense_type, o.expert_type, u64::from(o.n_expert));
            b.add_router(p("ffn_gate_inp.weight"), o, i);
            b.add(p("exp_probs_b.bias"), f32t, &[ne], Init::Zeros);
            b.add_matrix(p("ffn_gate_exps.weight"), xt, &[e, ff, ne]);
            b.add_matrix(p("ffn_up_exps.weight"), xt, &[e, ff, ne]);
            b.add_matrix(p("ffn_down_exps.weight"), xt, &[ff, e, ne]);
            b.add_mlp(|w| p(&format!("ffn_{w}_shexp.weight")), dt, e, fs);
        }
    }
    for t in &b.tensors {
        t.spec.n_bytes()?;
    }
    Ok((md, b.tensors))
}

/// A KDA layer's attention tensors.
fn kda(b: &mut Builder, o: &SynthOptions, i: u32) {
    let p = |s: &str| format!("blk.{i}.{s}");
    let (e, hd, nh) = (o.n_embd, o.head_dim, o.n_head);
    let d_inner = hd * nh;
    let (f32t, dt) = (GgmlType::F32, o.dense_type);
    for c in ["q", "k", "v"] {
        b.add(
            p(&format!("ssm_conv1d_{c}.weight")),
            f32t,
            &[CONV_KERNEL, 1, d_inner],
            Init::Random {
                std: inv_sqrt(CONV_KERNEL),
            },
        );
    }
    for c in ["q", "k", "v"] {
        b.add_matrix(p(&format!("attn_{c}.weight")), dt, &[e, d_inner]);
    }
    b.add_matrix(p("ssm_f_a.weight"), dt, &[e, d_inner]);
    b.add_matrix(p("ssm_beta.weight"), dt, &[e, nh]);
    b.add(p("ssm_a"), f32t, &[1, nh], Init::Const(1.0));
    b.add(p("ssm_dt.bias"), f32t, &[d_inner], Init::Zeros);
    b.add_matrix(p("ssm_g_a.weight"), dt, &[e, d_inner]);
    b.add(p("ssm_norm.weight"), f32t, &[hd], Init::Ones);
    b.add_matrix(p("attn_output.weight"), dt, &[d_inner, e]);
}

/// An MLA layer's attention tensors (no query low rank: `attn_q` directly).
fn mla(b: &mut Builder, o: &SynthOptions, i: u32, n_rot: u64, kv_lora: u64) {
    let p = |s: &str| format!("blk.{i}.{s}");
    let (e, hd, nh) = (o.n_embd, o.head_dim, o.n_head);
    let (f32t, dt) = (GgmlType::F32, o.dense_type);
    b.add_matrix(p("attn_q.weight"), dt, &[e, nh * (hd + n_rot)]);
    b.add_matrix(p("attn_kv_a_mqa.weight"), dt, &[e, kv_lora + n_rot]);
    b.add(p("attn_kv_a_norm.weight"), f32t, &[kv_lora], Init::Ones);
    b.add_matrix(p("attn_k_b.weight"), dt, &[hd, kv_lora, nh]);
    b.add_matrix(p("attn_v_b.weight"), dt, &[kv_lora, hd, nh]);
    b.add_matrix(p("attn_gate.weight"), dt, &[e, nh]);
    b.add_matrix(p("attn_output.weight"), dt, &[nh * hd, e]);
}
