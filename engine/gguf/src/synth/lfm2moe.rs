//! `lfm2moe` (LiquidAI LFM2 MoE), as the vendored llama.cpp loads it (`src/models/lfm2moe.cpp`
//! `load_arch_hparams` / `load_arch_tensors`, graph in `src/models/lfm2.cpp`): most layers are
//! gated short convolutions, a few are attention layers (the per-layer `head_count_kv` is 0 on
//! the conv layers), the first layers have a dense MLP, the rest routed experts with sigmoid
//! gating and an expert-selection bias (`exp_probs_b`).

use super::arch::{Builder, Metadata, inv_sqrt, leading_keys, trailing_keys};
use super::init::Init;
use super::tokenizer::Vocab;
use super::{PlannedTensor, SynthOptions};
use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::value::MetaValue;

/// Width of the short convolution (`shortconv.l_cache`; 3 in every published LFM2).
const L_CACHE: u64 = 3;
/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID`.
const GATING_SIGMOID: u32 = 2;

/// Dense leading layers: LFM2-8B-A1B has 2 of 24; smaller models keep one so at least one
/// dense and one MoE layer exist.
pub(super) fn dense_lead(n_layer: u32) -> u32 {
    (n_layer / 12).clamp(1, n_layer.saturating_sub(1).max(1))
}

/// Layer `i` is an attention layer (else a shortconv layer). LFM2-8B-A1B's attention layers are
/// 2, 6, 10, 14, 18, 21; every fourth from 2 gives the same count and spacing (22 instead of 21).
pub(super) fn is_attention(i: u32) -> bool {
    i % 4 == 2
}

/// Metadata and tensors of an lfm2moe model.
pub(super) fn build(o: &SynthOptions) -> Result<(Metadata, Vec<PlannedTensor>)> {
    let a = "lfm2moe";
    let (e, ff, hd) = (o.n_embd, o.n_ff_exp, o.head_dim);
    let ne = u64::from(o.n_expert);
    if o.n_layer < 3 {
        return Err(GgufError::Invalid(format!(
            "lfm2moe needs ≥ 3 layers (a dense conv layer, a MoE conv layer, an attention layer), got {}",
            o.n_layer
        )));
    }
    if o.n_head * hd != e {
        return Err(GgufError::Invalid(format!(
            "lfm2moe needs heads × head dim = n_embd ({} × {hd} ≠ {e})",
            o.n_head
        )));
    }
    let lead = dense_lead(o.n_layer);
    let vocab = Vocab::new(o.vocab_extra);
    let nv = vocab.len();
    let kv = |k: &str| format!("{a}.{k}");
    let kv_heads = (0..o.n_layer).map(|i| {
        if is_attention(i) {
            o.n_head_kv as i32
        } else {
            0
        }
    });
    let mut md = leading_keys(a, o);
    md.extend([
        // the dense leading layers' MLP width
        (
            kv("feed_forward_length"),
            MetaValue::U32(o.n_ff_shexp as u32),
        ),
        (kv("attention.head_count"), MetaValue::U32(o.n_head as u32)),
        (
            kv("attention.head_count_kv"),
            MetaValue::i32_array(kv_heads),
        ),
        (kv("rope.freq_base"), MetaValue::F32(1_000_000.0)),
        (kv("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-5)),
        (kv("shortconv.l_cache"), MetaValue::U32(L_CACHE as u32)),
        (kv("leading_dense_block_count"), MetaValue::U32(lead)),
        (kv("expert_count"), MetaValue::U32(o.n_expert)),
        (kv("expert_used_count"), MetaValue::U32(o.n_expert_used)),
        (kv("expert_feed_forward_length"), MetaValue::U32(ff as u32)),
        (kv("expert_gating_func"), MetaValue::U32(GATING_SIGMOID)),
    ]);
    trailing_keys(&mut md, &vocab, o);

    let (f32t, dt, xt) = (GgmlType::F32, o.dense_type, o.expert_type);
    let kv_dim = o.n_head_kv * hd;
    let mut b = Builder::new();
    // llama.cpp reads the final norm under this name (LLM_TENSOR_OUTPUT_NORM_LFM2).
    b.add_embedding_and_head(o, nv, 1.0, "token_embd_norm.weight");
    for i in 0..o.n_layer {
        let p = |s: &str| format!("blk.{i}.{s}");
        b.add(p("attn_norm.weight"), f32t, &[e], Init::Ones);
        if is_attention(i) {
            b.add(p("attn_q_norm.weight"), f32t, &[hd], Init::Ones);
            b.add(p("attn_k_norm.weight"), f32t, &[hd], Init::Ones);
            b.add_matrix(p("attn_q.weight"), dt, &[e, e]);
            b.add_matrix(p("attn_k.weight"), dt, &[e, kv_dim]);
            b.add_matrix(p("attn_v.weight"), dt, &[e, kv_dim]);
            b.add_matrix(p("attn_output.weight"), dt, &[e, e]);
        } else {
            // the conv kernel is tiny: 1/√L keeps the mixed signal at unit scale
            b.add(
                p("shortconv.conv.weight"),
                f32t,
                &[L_CACHE, e],
                Init::Random {
                    std: inv_sqrt(L_CACHE),
                },
            );
            b.add_matrix(p("shortconv.in_proj.weight"), dt, &[e, 3 * e]);
            b.add_matrix(p("shortconv.out_proj.weight"), dt, &[e, e]);
        }
        b.add(p("ffn_norm.weight"), f32t, &[e], Init::Ones);
        if i < lead {
            b.add_mlp(|w| p(&format!("ffn_{w}.weight")), dt, e, o.n_ff_shexp);
        } else {
            b.add_router(p("ffn_gate_inp.weight"), o, i);
            b.add(p("exp_probs_b.bias"), f32t, &[ne], Init::Zeros);
            b.add_matrix(p("ffn_gate_exps.weight"), xt, &[e, ff, ne]);
            b.add_matrix(p("ffn_up_exps.weight"), xt, &[e, ff, ne]);
            b.add_matrix(p("ffn_down_exps.weight"), xt, &[ff, e, ne]);
        }
    }
    for t in &b.tensors {
        t.spec.n_bytes()?;
    }
    Ok((md, b.tensors))
}
