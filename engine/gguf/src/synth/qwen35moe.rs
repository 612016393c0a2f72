//! `qwen35moe` (Qwen3.5 / Qwen3.6 MoE), as the vendored llama.cpp loads it
//! (`src/models/qwen35moe.cpp` `load_arch_hparams` / `load_arch_tensors`): three of every four
//! layers are gated-delta-net linear attention (`ssm_*`, fused `attn_qkv` + `attn_gate`), every
//! fourth a gated full attention layer (q carries its gate: 2 × heads × head dim); every layer
//! has routed experts plus a dense shared expert with a sigmoid gate. With `n_mtp_layers = 1` an MTP
//! (NextN) head follows the trunk as block `n_layer` (`block_count` counts it,
//! `nextn_predict_layers` = 1): a full-attention decoder block with routed + shared experts and
//! the `nextn.{eh_proj,enorm,hnorm,shared_head_norm}` tensors (`load_block_mtp`); it reuses
//! `token_embd` and `output` (the optional `nextn.embed_tokens` / `shared_head_head` are omitted).

use super::arch::{Builder, Metadata, inv_sqrt, leading_keys, trailing_keys};
use super::init::Init;
use super::tokenizer::Vocab;
use super::{PlannedTensor, SynthOptions};
use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::value::MetaValue;

/// Every fourth layer is full attention (llama.cpp's default `full_attention_interval`).
const FULL_ATTN_INTERVAL: u32 = 4;
/// Causal conv width of the linear-attention layers (`ssm.conv_kernel`).
const CONV_KERNEL: u64 = 4;

/// Layer `i` is a linear-attention (recurrent) layer, as llama.cpp derives it.
pub(super) fn is_linear(i: u32) -> bool {
    !(i + 1).is_multiple_of(FULL_ATTN_INTERVAL)
}

/// The linear-attention shape: (key heads, value heads, head dim). Qwen3.5-35B-A3B has 16 key
/// and 32 value heads of 128 at n_embd 2048; smaller models scale the head count with n_embd.
fn linear_shape(n_embd: u64) -> (u64, u64, u64) {
    if n_embd >= 2048 {
        (16, 32, 128)
    } else {
        (2, 4, 32)
    }
}

/// Metadata and tensors of a qwen35moe model.
pub(super) fn build(o: &SynthOptions) -> Result<(Metadata, Vec<PlannedTensor>)> {
    let a = "qwen35moe";
    let (e, ff, hd, fs) = (o.n_embd, o.n_ff_exp, o.head_dim, o.n_ff_shexp);
    if o.n_layer < FULL_ATTN_INTERVAL {
        return Err(GgufError::Invalid(format!(
            "qwen35moe needs ≥ {FULL_ATTN_INTERVAL} layers (the 4th is the first full-attention layer), got {}",
            o.n_layer
        )));
    }
    // rope covers a quarter of the head (Qwen3.5's partial rotary factor), split in mrope
    // sections [t, h, w, 0] whose sum is half the rotated dims
    let n_rot = (hd / 4) & !1;
    if n_rot < 6 {
        return Err(GgufError::Invalid(format!(
            "qwen35moe head dim {hd} is too small for its rope sections (needs ≥ 24)"
        )));
    }
    let half = n_rot / 2;
    let sections = [
        half.div_ceil(3) as i32,
        half.div_ceil(3) as i32,
        (half - 2 * half.div_ceil(3)) as i32,
        0,
    ];
    if o.n_mtp_layers > 1 {
        return Err(GgufError::Invalid(format!(
            "qwen35moe: llama.cpp's MTP graph runs a single NextN block, got n_mtp_layers {}",
            o.n_mtp_layers
        )));
    }
    let (nk, nvh, dh) = linear_shape(e);
    let (key_dim, value_dim) = (nk * dh, nvh * dh);
    let conv_dim = 2 * key_dim + value_dim;
    let vocab = Vocab::new(o.vocab_extra);
    let nv = vocab.len();
    let kv = |k: &str| format!("{a}.{k}");
    let mut md = leading_keys(a, o);
    if o.n_mtp_layers > 0 {
        // llama.cpp: n_layer() = block_count − nextn_predict_layers; the head is the last block
        for (k, v) in md.iter_mut() {
            if *k == kv("block_count") {
                *v = MetaValue::U32(o.n_layer + o.n_mtp_layers);
            }
        }
        md.push((kv("nextn_predict_layers"), MetaValue::U32(o.n_mtp_layers)));
    }
    md.extend([
        (
            kv("feed_forward_length"),
            MetaValue::U32((ff * u64::from(o.n_expert_used)).min(u64::from(u32::MAX)) as u32),
        ),
        (kv("attention.head_count"), MetaValue::U32(o.n_head as u32)),
        (
            kv("attention.head_count_kv"),
            MetaValue::U32(o.n_head_kv as u32),
        ),
        (kv("attention.key_length"), MetaValue::U32(hd as u32)),
        (kv("attention.value_length"), MetaValue::U32(hd as u32)),
        (kv("rope.dimension_count"), MetaValue::U32(n_rot as u32)),
        (
            kv("rope.dimension_sections"),
            MetaValue::i32_array(sections),
        ),
        (kv("rope.freq_base"), MetaValue::F32(10_000_000.0)),
        (kv("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6)),
        (kv("expert_count"), MetaValue::U32(o.n_expert)),
        (kv("expert_used_count"), MetaValue::U32(o.n_expert_used)),
        (kv("expert_feed_forward_length"), MetaValue::U32(ff as u32)),
        (
            kv("expert_shared_feed_forward_length"),
            MetaValue::U32(fs as u32),
        ),
        (kv("ssm.conv_kernel"), MetaValue::U32(CONV_KERNEL as u32)),
        (kv("ssm.inner_size"), MetaValue::U32(value_dim as u32)),
        (kv("ssm.state_size"), MetaValue::U32(dh as u32)),
        (kv("ssm.time_step_rank"), MetaValue::U32(nvh as u32)),
        (kv("ssm.group_count"), MetaValue::U32(nk as u32)),
        (
            kv("full_attention_interval"),
            MetaValue::U32(FULL_ATTN_INTERVAL),
        ),
    ]);
    trailing_keys(&mut md, &vocab, o);

    let (f32t, dt) = (GgmlType::F32, o.dense_type);
    let mut b = Builder::new();
    b.add_embedding_and_head(o, nv, 1.0, "output_norm.weight");
    for i in 0..o.n_layer {
        let p = |s: &str| format!("blk.{i}.{s}");
        b.add(p("attn_norm.weight"), f32t, &[e], Init::Ones);
        b.add(p("post_attention_norm.weight"), f32t, &[e], Init::Ones);
        if is_linear(i) {
            b.add_matrix(p("attn_qkv.weight"), dt, &[e, conv_dim]);
            b.add_matrix(p("attn_gate.weight"), dt, &[e, value_dim]);
            b.add(
                p("ssm_conv1d.weight"),
                f32t,
                &[CONV_KERNEL, conv_dim],
                Init::Random {
                    std: inv_sqrt(CONV_KERNEL),
                },
            );
            b.add(p("ssm_dt.bias"), f32t, &[nvh], Init::Zeros);
            // -exp(A_log): negative decay rates keep the recurrent state bounded
            b.add(p("ssm_a"), f32t, &[nvh], Init::Const(-1.0));
            b.add_matrix(p("ssm_beta.weight"), dt, &[e, nvh]);
            b.add_matrix(p("ssm_alpha.weight"), dt, &[e, nvh]);
            b.add(p("ssm_norm.weight"), f32t, &[dh], Init::Ones);
            b.add_matrix(p("ssm_out.weight"), dt, &[value_dim, e]);
        } else {
            add_full_attention(&mut b, o, i);
        }
        add_ffn(&mut b, o, i);
    }
    for i in o.n_layer..o.n_layer + o.n_mtp_layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        b.add(p("attn_norm.weight"), f32t, &[e], Init::Ones);
        b.add(p("post_attention_norm.weight"), f32t, &[e], Init::Ones);
        add_full_attention(&mut b, o, i);
        add_ffn(&mut b, o, i);
        b.add_matrix(p("nextn.eh_proj.weight"), dt, &[2 * e, e]);
        b.add(p("nextn.enorm.weight"), f32t, &[e], Init::Ones);
        b.add(p("nextn.hnorm.weight"), f32t, &[e], Init::Ones);
        b.add(p("nextn.shared_head_norm.weight"), f32t, &[e], Init::Ones);
    }
    for t in &b.tensors {
        t.spec.n_bytes()?;
    }
    Ok((md, b.tensors))
}

/// A gated full-attention block's tensors (q carries its gate: 2 × heads × head dim).
fn add_full_attention(b: &mut Builder, o: &SynthOptions, i: u32) {
    let (e, hd, dt) = (o.n_embd, o.head_dim, o.dense_type);
    let (q_dim, kv_dim) = (o.n_head * hd, o.n_head_kv * hd);
    let p = |s: &str| format!("blk.{i}.{s}");
    b.add_matrix(p("attn_q.weight"), dt, &[e, 2 * q_dim]);
    b.add_matrix(p("attn_k.weight"), dt, &[e, kv_dim]);
    b.add_matrix(p("attn_v.weight"), dt, &[e, kv_dim]);
    b.add_matrix(p("attn_output.weight"), dt, &[q_dim, e]);
    b.add(p("attn_q_norm.weight"), GgmlType::F32, &[hd], Init::Ones);
    b.add(p("attn_k_norm.weight"), GgmlType::F32, &[hd], Init::Ones);
}

/// Routed experts plus the sigmoid-gated shared expert of block `i`.
fn add_ffn(b: &mut Builder, o: &SynthOptions, i: u32) {
    let (e, ff, fs, xt) = (o.n_embd, o.n_ff_exp, o.n_ff_shexp, o.expert_type);
    let ne = u64::from(o.n_expert);
    let p = |s: &str| format!("blk.{i}.{s}");
    b.add_router(p("ffn_gate_inp.weight"), o, i);
    b.add_matrix(p("ffn_gate_exps.weight"), xt, &[e, ff, ne]);
    b.add_matrix(p("ffn_up_exps.weight"), xt, &[e, ff, ne]);
    b.add_matrix(p("ffn_down_exps.weight"), xt, &[ff, e, ne]);
    b.add_matrix(p("ffn_gate_inp_shexp.weight"), GgmlType::F32, &[e]);
    b.add_mlp(|w| p(&format!("ffn_{w}_shexp.weight")), o.dense_type, e, fs);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test
    use super::*;
    use crate::synth::Preset;

    fn u32_key(md: &Metadata, key: &str) -> Option<u32> {
        md.iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| match v {
                MetaValue::U32(n) => Some(*n),
                _ => None,
            })
    }

    #[test]
    fn the_head_is_one_block_after_the_trunk_with_its_nextn_tensors() {
        let mut o = SynthOptions::preset(Preset::Qwen35MoeTiny);
        let (md, plain) = build(&o).unwrap();
        assert_eq!(u32_key(&md, "qwen35moe.block_count"), Some(4));
        assert_eq!(u32_key(&md, "qwen35moe.nextn_predict_layers"), None);
        assert!(plain.iter().all(|t| !t.spec.name.contains("nextn")));
        o.n_mtp_layers = 1;
        let (md, head) = build(&o).unwrap();
        assert_eq!(u32_key(&md, "qwen35moe.block_count"), Some(5));
        assert_eq!(u32_key(&md, "qwen35moe.nextn_predict_layers"), Some(1));
        let names: Vec<&str> = head.iter().map(|t| t.spec.name.as_str()).collect();
        for t in [
            "blk.4.nextn.eh_proj.weight",
            "blk.4.nextn.enorm.weight",
            "blk.4.nextn.hnorm.weight",
            "blk.4.nextn.shared_head_norm.weight",
            "blk.4.attn_q.weight",
            "blk.4.ffn_down_exps.weight",
            "blk.4.ffn_up_shexp.weight",
        ] {
            assert!(names.contains(&t), "{t} missing");
        }
        // eh_proj maps [embedding ‖ hidden state] (2 × n_embd) to n_embd
        let eh = head
            .iter()
            .find(|t| t.spec.name == "blk.4.nextn.eh_proj.weight")
            .unwrap();
        assert_eq!(eh.spec.dims, vec![2 * o.n_embd, o.n_embd]);
        // the trunk's tensors are the same set as without the head
        let trunk: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !n.starts_with("blk.4."))
            .collect();
        let before: Vec<&str> = plain.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(trunk, before);
    }

    #[test]
    fn more_than_one_head_block_is_refused() {
        let mut o = SynthOptions::preset(Preset::Qwen35MoeTiny);
        o.n_mtp_layers = 2;
        let e = build(&o).unwrap_err().to_string();
        assert!(e.contains("single NextN block"), "{e}");
        let mut o = SynthOptions::preset(Preset::Tiny);
        o.n_mtp_layers = 1;
        let e = crate::synth::plan_model(&o, std::path::Path::new("x.gguf")).unwrap_err();
        assert!(e.to_string().contains("no MTP head"), "{e}");
    }
}
