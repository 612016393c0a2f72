//! `bmoe-bench model inspect`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use bmoe_gguf::{GgufModel, ModelInfo};
use clap::Args;

use super::human_bytes;

/// Options of `model inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The model (for a split set, the -00001-of-0000N.gguf shard).
    pub file: PathBuf,
    /// Print the full description as JSON (every expert tensor's shard, offset and nb2).
    #[arg(long)]
    pub json: bool,
}

/// Run `model inspect`.
pub fn run(a: &InspectArgs) -> anyhow::Result<()> {
    let model = GgufModel::open(&a.file)?;
    // the engine's checks, so inspect never describes a file bmoe-cli refuses; they also bound
    // the description (≤ 512 layers, each holding tensors of this file) by the file's size
    bmoe_gguf::validate(&model)?;
    let info = ModelInfo::from_model(&model)
        .with_context(|| format!("{}: not a MoE model bmoe can describe", a.file.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        let name = model
            .get("general.name")
            .and_then(|v| v.as_str())
            .map_or_else(|| "-".to_string(), bmoe_gguf::escape);
        let shape = shape_line(&model, &info.arch);
        print!(
            "{}",
            render(&a.file.display().to_string(), &name, &shape, &info)
        );
    }
    Ok(())
}

/// `n_embd 256, expert FF 256, heads 4/2 x 64, vocab 269, ctx 4096` from the metadata (`?` when a
/// key is absent). Where `head_count_kv` is per layer (lfm2moe's conv layers, bailingmoe3's KDA
/// layers have 0), the attention layers' KV heads and how many layers attend; the head size is
/// llama.cpp's (`key_length_mla` for MLA, else `key_length`, else n_embd / heads).
fn shape_line(model: &GgufModel, arch: &str) -> String {
    let get = |k: &str| model.get(&format!("{arch}.{k}"));
    let num = |k: &str| {
        get(k)
            .and_then(|v| v.as_u64())
            .map_or_else(|| "?".to_string(), |v| v.to_string())
    };
    let vocab = model
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or_else(|| "?".to_string(), |a| a.values.len().to_string());
    let heads = get("attention.head_count").and_then(|v| v.as_u64());
    let per_layer_kv: Option<Vec<u64>> = get("attention.head_count_kv")
        .and_then(|v| v.as_array())
        .map(|a| a.values.iter().filter_map(|x| x.as_u64()).collect());
    let (kv, attending) = match &per_layer_kv {
        Some(v) => {
            let n = v.iter().filter(|&&k| k > 0).count();
            let kv = v
                .iter()
                .copied()
                .max()
                .map_or_else(|| "?".into(), |k| k.to_string());
            (kv, format!(" ({n} of {} layers attend)", v.len()))
        }
        None => (num("attention.head_count_kv"), String::new()),
    };
    let head_size = ["attention.key_length_mla", "attention.key_length"]
        .iter()
        .find_map(|k| get(k).and_then(|v| v.as_u64()))
        .or_else(|| {
            let e = get("embedding_length").and_then(|v| v.as_u64())?;
            heads.filter(|&h| h > 0).map(|h| e / h)
        })
        .map_or_else(|| "?".to_string(), |v| v.to_string());
    format!(
        "n_embd {}, expert FF {}, heads {}/{kv} x {head_size}{attending}, vocab {vocab}, ctx {}",
        num("embedding_length"),
        num("expert_feed_forward_length"),
        num("attention.head_count"),
        num("context_length"),
    )
}

fn join_counts<V: std::fmt::Display>(
    m: &std::collections::BTreeMap<String, V>,
    f: impl Fn(&V) -> String,
) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {}", f(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human-readable description (stable layout; no colour).
pub fn render(path: &str, name: &str, shape: &str, info: &ModelInfo) -> String {
    let mut s = String::new();
    let per_token: u64 = info.layers.iter().map(|l| l.expert_bytes).sum();
    let _ = writeln!(s, "model        {path}");
    let _ = writeln!(s, "name         {name}");
    let _ = writeln!(s, "arch         {}", bmoe_gguf::escape(&info.arch));
    let _ = writeln!(s, "layers       {}", info.n_layer);
    let _ = writeln!(s, "shape        {shape}");
    let _ = writeln!(
        s,
        "experts      {} per layer, top-{} used",
        info.n_expert, info.n_expert_used
    );
    let _ = writeln!(
        s,
        "expert quant {}",
        join_counts(&info.expert_types, |n| format!("({n} tensors)"))
    );
    let _ = writeln!(
        s,
        "bytes/type   {}",
        join_counts(&info.bytes_by_type, |b| human_bytes(*b))
    );
    let _ = writeln!(
        s,
        "alignment    {} (expert slices page-aligned: {})",
        info.alignment,
        if info.experts_page_aligned {
            "yes"
        } else {
            "no"
        }
    );
    let _ = writeln!(
        s,
        "dense        {} bytes ({}), of which {} outside layers",
        info.dense_bytes,
        human_bytes(info.dense_bytes),
        info.global_dense_bytes
    );
    let _ = writeln!(
        s,
        "experts all  {} bytes ({})",
        info.expert_bytes_total,
        human_bytes(info.expert_bytes_total)
    );
    let _ = writeln!(
        s,
        "cache_cycle  {} bytes ({}) = top-{} x {} bytes (one expert per layer, all layers)",
        info.cache_cycle_bytes,
        human_bytes(info.cache_cycle_bytes),
        info.n_expert_used,
        per_token
    );
    let _ = writeln!(s, "shards       {}", info.shards.len());
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>5}  {:>14}  {:>7}  {:>11}  file",
        "shard", "bytes", "tensors", "data_offset"
    );
    for (i, sh) in info.shards.iter().enumerate() {
        let _ = writeln!(
            s,
            "{:>5}  {:>14}  {:>7}  {:>11}  {}",
            i + 1,
            sh.file_len,
            sh.n_tensors,
            sh.data_offset,
            sh.path.display()
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>5}  {:>12}  {:>12}  expert tensors (type, bytes per expert, shard)",
        "layer", "expert_bytes", "dense_bytes"
    );
    for l in &info.layers {
        let tensors = l
            .expert_tensors
            .iter()
            .map(|t| format!("{} {} {}@{}", t.kind, t.ggml_type, t.nb2, t.shard + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "{:>5}  {:>12}  {:>12}  {}",
            l.layer, l.expert_bytes, l.dense_bytes, tensors
        );
    }
    s
}
