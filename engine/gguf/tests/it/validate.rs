//! `validate`: every synthetic preset passes; each hyperparameter llama.cpp asserts on, each
//! shape lie, overlap and split-set lie is an error naming the file and the key.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use bmoe_gguf::edit::write_edited;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_gguf::{GgufError, GgufModel, MetaArray, MetaValue, TensorSpec, ValueType, validate};

fn tiny(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.gguf");
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.expert_type = bmoe_gguf::GgmlType::F32;
    o.dense_type = bmoe_gguf::GgmlType::F32;
    write_model(&o, &p).unwrap();
    p
}

/// `base` rewritten with its metadata and specs edited; returns the validation error text.
fn edited(
    base: &Path,
    name: &str,
    f: impl FnOnce(&mut Vec<(String, MetaValue)>, &mut Vec<TensorSpec>),
) -> String {
    let model = GgufModel::open(base).unwrap();
    let path = base.with_file_name(format!("{name}.gguf"));
    write_edited(&model, &path, f).unwrap();
    let m = GgufModel::open(&path).unwrap();
    let e = validate(&m).unwrap_err();
    assert!(
        matches!(e, GgufError::Hparams { .. } | GgufError::UnknownArch { .. }),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains(&format!("{name}.gguf")), "{text}");
    text
}

fn set(md: &mut [(String, MetaValue)], key: &str, v: MetaValue) {
    md.iter_mut().find(|(k, _)| k == key).unwrap().1 = v;
}

#[test]
fn every_small_preset_passes() {
    let dir = tempfile::tempdir().unwrap();
    for p in [
        Preset::Tiny,
        Preset::Qwen2MoeTiny,
        Preset::GptOssTiny,
        Preset::Gemma4Tiny,
        Preset::Lfm2MoeTiny,
        Preset::Qwen35MoeTiny,
        Preset::DeepSeek4Tiny,
        Preset::BailingMoe3Tiny,
    ] {
        let path = dir.path().join(format!("{}.gguf", p.name()));
        write_model(&SynthOptions::preset(p), &path).unwrap();
        validate(&GgufModel::open(&path).unwrap()).unwrap();
    }
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.n_split = 3;
    let s = write_model(&o, &dir.path().join("split.gguf")).unwrap();
    validate(&GgufModel::open(&s.paths[0]).unwrap()).unwrap();
}

#[test]
fn counts_llama_cpp_asserts_on_are_errors_with_the_key_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny(dir.path());
    let cases: Vec<(&str, &str, MetaValue, &str)> = vec![
        (
            "used9",
            "qwen3moe.expert_used_count",
            MetaValue::U32(9),
            "more experts",
        ),
        (
            "used0",
            "qwen3moe.expert_used_count",
            MetaValue::U32(0),
            "at least one",
        ),
        (
            "used-i32",
            "qwen3moe.expert_used_count",
            MetaValue::I32(2),
            "u32",
        ),
        ("exp0", "qwen3moe.expert_count", MetaValue::U32(0), "is 2"),
        (
            "exp1",
            "qwen3moe.expert_count",
            MetaValue::U32(1),
            "more experts",
        ),
        (
            "exp2000",
            "qwen3moe.expert_count",
            MetaValue::U32(2000),
            "at most 1024",
        ),
        ("blk0", "qwen3moe.block_count", MetaValue::U32(0), "1..=512"),
        (
            "blk1000",
            "qwen3moe.block_count",
            MetaValue::U32(1000),
            "1..=512",
        ),
        (
            "blkmax",
            "qwen3moe.block_count",
            MetaValue::U32(u32::MAX),
            "1..=512",
        ),
        (
            "blk3",
            "qwen3moe.block_count",
            MetaValue::U32(3),
            "no tensors for layer 2",
        ),
        (
            "blk1",
            "qwen3moe.block_count",
            MetaValue::U32(1),
            "not in a layer",
        ),
        (
            "eps-nan",
            "qwen3moe.attention.layer_norm_rms_epsilon",
            MetaValue::F32(f32::NAN),
            "finite",
        ),
        (
            "eps-neg",
            "qwen3moe.attention.layer_norm_rms_epsilon",
            MetaValue::F32(-1.0),
            "finite",
        ),
        (
            "eps-u32",
            "qwen3moe.attention.layer_norm_rms_epsilon",
            MetaValue::U32(1),
            "f32",
        ),
        (
            "rope32",
            "qwen3moe.rope.dimension_count",
            MetaValue::U32(32),
            "head size",
        ),
        (
            "rope63",
            "qwen3moe.rope.dimension_count",
            MetaValue::U32(63),
            "even",
        ),
        (
            "kv3",
            "qwen3moe.attention.head_count_kv",
            MetaValue::U32(3),
            "divide",
        ),
        (
            "heads8",
            "qwen3moe.attention.head_count",
            MetaValue::U32(8),
            "shape",
        ),
        (
            "embd128",
            "qwen3moe.embedding_length",
            MetaValue::U32(128),
            "shape",
        ),
        (
            "ff128",
            "qwen3moe.expert_feed_forward_length",
            MetaValue::U32(128),
            "expert tensor",
        ),
        (
            "scaling",
            "qwen3moe.rope.scaling.type",
            MetaValue::String("x\0".into()),
            "llama.cpp knows",
        ),
        (
            "tok",
            "tokenizer.ggml.model",
            MetaValue::String("bogus".into()),
            "tokenizer",
        ),
        (
            "arch-nul",
            "general.architecture",
            MetaValue::String("qwen3moe\0\u{1b}".into()),
            "unknown architecture 'qwen3moe\\u{0}\\u{1b}'",
        ),
    ];
    for (name, key, v, want) in cases {
        let (key, v) = (key.to_string(), v.clone());
        let text = edited(&base, name, |md, _| {
            if md.iter().any(|(k, _)| *k == key) {
                set(md, &key, v);
            } else {
                md.push((key.clone(), v));
            }
        });
        assert!(text.contains(want), "{name}: {text}");
        assert!(
            !text.chars().any(|c| c.is_control()),
            "{name}: raw bytes in {text:?}"
        );
    }
    // The offset points at the key's value in the file.
    let text = edited(&base, "used9b", |md, _| {
        set(md, "qwen3moe.expert_used_count", MetaValue::U32(9));
    });
    let at: u64 = text
        .split("(at byte ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap()
        .parse()
        .unwrap();
    let bytes = std::fs::read(dir.path().join("used9b.gguf")).unwrap();
    let key = b"qwen3moe.expert_used_count";
    assert_eq!(&bytes[at as usize - key.len()..at as usize], key);
    // A per-layer array with one layer over the count.
    let text = edited(&base, "used-arr", |md, _| {
        set(
            md,
            "qwen3moe.expert_used_count",
            MetaValue::Array(MetaArray {
                elem_type: ValueType::U32,
                values: vec![MetaValue::U32(2), MetaValue::U32(9)],
            }),
        );
    });
    assert!(text.contains("is 9"), "{text}");
}

#[test]
fn shape_lies_and_overlaps_are_errors_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny(dir.path());
    let text = edited(&base, "exps4", |_, specs| {
        let s = specs
            .iter_mut()
            .find(|s| s.name == "blk.0.ffn_up_exps.weight")
            .unwrap();
        s.dims = vec![256, 512, 4];
    });
    assert!(
        text.contains("tensor blk.0.ffn_up_exps.weight") && text.contains("[256, 256, 8]"),
        "{text}"
    );
    let text = edited(&base, "router", |_, specs| {
        let s = specs
            .iter_mut()
            .find(|s| s.name == "blk.1.ffn_gate_inp.weight")
            .unwrap();
        s.dims = vec![512, 4];
    });
    assert!(text.contains("blk.1.ffn_gate_inp.weight"), "{text}");
    let text = edited(&base, "vocab", |md, _| {
        for (k, v) in md.iter_mut() {
            if k == "tokenizer.ggml.tokens"
                && let MetaValue::Array(a) = v
            {
                a.values.truncate(100);
            }
        }
    });
    assert!(text.contains("token_embd.weight"), "{text}");

    // Overlap: point one expert tensor's data at another's.
    let mut bytes = std::fs::read(&base).unwrap();
    let model = GgufModel::open(&base).unwrap();
    let gate = model
        .tensor("blk.0.ffn_gate_exps.weight")
        .unwrap()
        .info
        .clone();
    let up = model
        .tensor("blk.0.ffn_up_exps.weight")
        .unwrap()
        .info
        .clone();
    let at = (up.info_offset + 4 + 8 * 3 + 4) as usize;
    assert_eq!(
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()),
        up.rel_offset
    );
    bytes[at..at + 8].copy_from_slice(&(gate.rel_offset + 4096).to_le_bytes());
    let p = dir.path().join("overlap.gguf");
    std::fs::write(&p, &bytes).unwrap();
    let e = validate(&GgufModel::open(&p).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("overlap.gguf") && e.contains("overlaps tensor blk.0.ffn_gate_exps.weight"),
        "{e}"
    );
}

#[test]
fn a_shard_whose_split_count_disagrees_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.n_split = 3;
    let s = write_model(&o, &dir.path().join("m.gguf")).unwrap();
    let p = &s.paths[1];
    let mut b = std::fs::read(p).unwrap();
    let key = b"split.count";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    b[at..at + 2].copy_from_slice(&5u16.to_le_bytes());
    std::fs::write(p, b).unwrap();
    let e = GgufModel::open(&s.paths[0]).unwrap_err().to_string();
    assert!(
        e.contains("m-00002-of-00003.gguf") && e.contains("split.count is 5"),
        "{e}"
    );
}

#[test]
fn a_block_count_the_tensors_cannot_hold_is_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny(dir.path());
    let model = GgufModel::open(&base).unwrap();
    let get = |k: &str| {
        if k == "qwen3moe.block_count" {
            Some(MetaValue::U32(u32::MAX))
        } else {
            model.get(k).cloned()
        }
    };
    let e = bmoe_gguf::ModelInfo::from_parts(&get, model.tensors(), vec![], 4096).unwrap_err();
    assert!(e.to_string().contains("4294967295"), "{e}");
}

#[test]
fn strings_from_a_file_are_escaped_in_messages() {
    assert_eq!(bmoe_gguf::escape("a\0b\u{1b}[31m"), "a\\u{0}b\\u{1b}[31m");
    assert_eq!(bmoe_gguf::escape("x\u{202e}y"), "x\\u{202e}y");
    let long = "k".repeat(500);
    assert_eq!(bmoe_gguf::escape(&long).chars().count(), 97);
    assert_eq!(bmoe_gguf::escape("héllo"), "héllo");
}

#[test]
fn an_unknown_architecture_is_refused_by_name_with_the_supported_list() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny(dir.path());
    for (name, arch, shown) in [
        ("nosucharch", "nosucharch", "nosucharch"),
        ("llama", "llama", "llama"),
        ("empty", "", ""),
        ("ctl", "x\0y\u{7}", "x\\u{0}y\\u{7}"),
    ] {
        let text = edited(&base, name, |md, _| {
            set(md, "general.architecture", MetaValue::String(arch.into()));
        });
        let path = dir.path().join(format!("{name}.gguf"));
        let want = format!("{}: unknown architecture '{shown}'", path.display());
        assert!(text.starts_with(&want), "{text}");
        // the supported list, not the first arch key that happens to be missing
        for a in bmoe_gguf::MOE_ARCHITECTURES {
            assert!(text.contains(a), "{a}: {text}");
        }
        assert!(!text.contains("block_count"), "{text}");
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
        let e = validate(&GgufModel::open(&path).unwrap()).unwrap_err();
        let GgufError::UnknownArch { hint, .. } = e else {
            panic!("{e}")
        };
        assert!(hint.contains("--list-archs"), "{hint}");
    }
}

/// A preset written with f32 tensors (small, and copied verbatim by `edited`).
fn preset(dir: &Path, p: Preset) -> PathBuf {
    let path = dir.join(format!("{}.gguf", p.name()));
    let mut o = SynthOptions::preset(p);
    o.expert_type = bmoe_gguf::GgmlType::F32;
    o.dense_type = bmoe_gguf::GgmlType::F32;
    write_model(&o, &path).unwrap();
    validate(&GgufModel::open(&path).unwrap()).unwrap();
    path
}

type Edit = Box<dyn Fn(&mut Vec<(String, MetaValue)>, &mut Vec<TensorSpec>)>;

fn put(key: &'static str, v: MetaValue) -> Edit {
    Box::new(move |md, _| {
        if md.iter().any(|(k, _)| k == key) {
            set(md, key, v.clone());
        } else {
            md.push((key.into(), v.clone()));
        }
    })
}

fn drop_key(key: &'static str) -> Edit {
    Box::new(move |md, _| md.retain(|(k, _)| k != key))
}

/// Tensor `name` with its dimension `axis` grown by one (a header lie the loader's shape
/// check, `create_tensor`'s "wrong shape", refuses).
fn grow(name: &'static str, axis: usize) -> Edit {
    Box::new(move |_, specs| {
        let s = specs.iter_mut().find(|s| s.name == name).unwrap();
        let mut dims = s.dims.clone();
        dims[axis] += 1;
        *s = TensorSpec::new(s.name.clone(), s.ggml_type, &dims);
    })
}

fn arr(elem_type: ValueType, values: Vec<MetaValue>) -> MetaValue {
    MetaValue::Array(MetaArray { elem_type, values })
}

/// Each edit makes the file one the vendored llama.cpp refuses while loading (the throw or the
/// getter named per case, src/models/<arch>.cpp and src/llama-model-loader.cpp); validate
/// refuses it first, naming the file and the key or tensor.
fn refused(base: &Path, cases: Vec<(&str, Edit, &str, &str)>) {
    for (name, edit, key, want) in cases {
        let text = edited(base, name, |md, specs| edit(md, specs));
        assert!(
            text.contains(&format!("{name}.gguf: {key}")),
            "{name}: {text}"
        );
        assert!(text.contains(want), "{name}: {text}");
    }
}

#[test]
fn gpt_oss_keys_and_shapes_its_loader_refuses_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let base = preset(dir.path(), Preset::GptOssTiny);
    let model = GgufModel::open(&base).unwrap();
    let n_head = model.get("gpt-oss.attention.head_count").unwrap().as_u64();
    assert_eq!(
        n_head,
        Some(model.tensor("blk.0.attn_sinks.weight").unwrap().info.dims[0])
    );
    let b = |v| MetaValue::Bool(v);
    refused(
        &base,
        vec![
            // `get_key(LLM_KV_ATTENTION_SLIDING_WINDOW, n_swa)`: required, a u32
            (
                "swa-missing",
                drop_key("gpt-oss.attention.sliding_window"),
                "gpt-oss.attention.sliding_window",
                "is missing",
            ),
            (
                "swa-i32",
                put("gpt-oss.attention.sliding_window", MetaValue::I32(128)),
                "gpt-oss.attention.sliding_window",
                "u32",
            ),
            // `get_key_or_arr(LLM_KV_EXPERT_FEED_FORWARD_LENGTH, …)`: required
            (
                "ff-missing",
                drop_key("gpt-oss.expert_feed_forward_length"),
                "gpt-oss.expert_feed_forward_length",
                "is missing",
            ),
            // `load_swa_pattern`: `get_arr` throws on a float array or > LLAMA_MAX_LAYERS
            // entries; else `get_key` of a u32 throws "wrong type"
            (
                "pattern-f32",
                put(
                    "gpt-oss.attention.sliding_window_pattern",
                    arr(ValueType::F32, vec![MetaValue::F32(1.0); 2]),
                ),
                "gpt-oss.attention.sliding_window_pattern",
                "bool, u32 or i32",
            ),
            (
                "pattern-513",
                put(
                    "gpt-oss.attention.sliding_window_pattern",
                    arr(ValueType::Bool, vec![b(true); 513]),
                ),
                "gpt-oss.attention.sliding_window_pattern",
                "at most 512",
            ),
            (
                "pattern-str",
                put(
                    "gpt-oss.attention.sliding_window_pattern",
                    MetaValue::String("2".into()),
                ),
                "gpt-oss.attention.sliding_window_pattern",
                "u32 period",
            ),
            // create_tensor's shape check: one sink per head, biases by the expert count
            (
                "sinks",
                grow("blk.1.attn_sinks.weight", 0),
                "tensor blk.1.attn_sinks.weight",
                "has shape",
            ),
            (
                "router-bias",
                grow("blk.0.ffn_gate_inp.bias", 0),
                "tensor blk.0.ffn_gate_inp.bias",
                "has shape",
            ),
            (
                "up-bias-experts",
                grow("blk.1.ffn_up_exps.bias", 1),
                "tensor blk.1.ffn_up_exps.bias",
                "has shape",
            ),
            (
                "down-bias-ff",
                grow("blk.0.ffn_down_exps.bias", 0),
                "tensor blk.0.ffn_down_exps.bias",
                "has shape",
            ),
            (
                "q-width",
                grow("blk.0.attn_q.weight", 1),
                "tensor blk.0.attn_q.weight",
                "has shape",
            ),
        ],
    );
    // what load_swa_pattern accepts stays accepted: a u32 period, or a flag array
    for (name, v) in [
        ("period", MetaValue::U32(2)),
        ("flags", arr(ValueType::Bool, vec![b(true), b(false)])),
        ("flags-i32", arr(ValueType::I32, vec![MetaValue::I32(1); 2])),
    ] {
        let path = dir.path().join(format!("{name}.gguf"));
        let mut md = model.metadata().to_vec();
        md.push(("gpt-oss.attention.sliding_window_pattern".into(), v));
        rewrite(&model, &path, md);
        validate(&GgufModel::open(&path).unwrap()).unwrap();
    }
}

#[test]
fn gemma4_keys_its_loader_refuses_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let base = preset(dir.path(), Preset::Gemma4Tiny);
    let model = GgufModel::open(&base).unwrap();
    let hd = model
        .get("gemma4.attention.key_length")
        .unwrap()
        .as_u64()
        .unwrap() as u32;
    // the synthetic gemma4 has a sliding-window layer 0; a full-attention layer 0 instead
    let full_first = |md: &mut Vec<(String, MetaValue)>| {
        let n = md
            .iter()
            .find(|(k, _)| k == "gemma4.block_count")
            .and_then(|(_, v)| v.as_u64())
            .unwrap() as usize;
        let flags = (0..n).map(|i| MetaValue::Bool(i % 2 == 1)).collect();
        set(
            md,
            "gemma4.attention.sliding_window_pattern",
            arr(ValueType::Bool, flags),
        );
    };
    refused(
        &base,
        vec![
            // `get_arr(LLM_KV_ATTENTION_SLIDING_WINDOW_PATTERN, is_swa_impl)`: required array
            (
                "pattern-missing",
                drop_key("gemma4.attention.sliding_window_pattern"),
                "gemma4.attention.sliding_window_pattern",
                "is missing",
            ),
            (
                "pattern-u32",
                put("gemma4.attention.sliding_window_pattern", MetaValue::U32(2)),
                "gemma4.attention.sliding_window_pattern",
                "as an array",
            ),
            (
                "pattern-str",
                put(
                    "gemma4.attention.sliding_window_pattern",
                    arr(ValueType::String, vec![MetaValue::String("x".into())]),
                ),
                "gemma4.attention.sliding_window_pattern",
                "bool, u32 or i32",
            ),
            (
                "pattern-600",
                put(
                    "gemma4.attention.sliding_window_pattern",
                    arr(ValueType::U32, vec![MetaValue::U32(1); 600]),
                ),
                "gemma4.attention.sliding_window_pattern",
                "at most 512",
            ),
            // required `get_key`s
            (
                "swa-missing",
                drop_key("gemma4.attention.sliding_window"),
                "gemma4.attention.sliding_window",
                "is missing",
            ),
            (
                "per-layer-missing",
                drop_key("gemma4.embedding_length_per_layer_input"),
                "gemma4.embedding_length_per_layer_input",
                "is missing",
            ),
            (
                "kswa-missing",
                drop_key("gemma4.attention.key_length_swa"),
                "gemma4.attention.key_length_swa",
                "is missing",
            ),
            (
                "vswa-u64",
                put(
                    "gemma4.attention.value_length_swa",
                    MetaValue::U64(hd.into()),
                ),
                "gemma4.attention.value_length_swa",
                "u32",
            ),
            // load_tensors: "Gemma 4 requires n_embd_head_k_swa == n_embd_head_v_swa"
            (
                "vswa-differs",
                put("gemma4.attention.value_length_swa", MetaValue::U32(hd * 2)),
                "gemma4.attention.value_length_swa",
                "needs it equal to gemma4.attention.key_length_swa",
            ),
            // …and "n_embd_head_k == n_embd_head_v" (layer 0's sizes: full attention here)
            (
                "v-differs-full-first",
                Box::new(move |md, _| {
                    full_first(md);
                    set(md, "gemma4.attention.value_length", MetaValue::U32(hd * 2));
                }),
                "gemma4.attention.value_length",
                "needs it equal to gemma4.attention.key_length",
            ),
        ],
    );
}

#[test]
fn deepseek4_keys_its_loader_and_graph_refuse_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let base = preset(dir.path(), Preset::DeepSeek4Tiny);
    let ratios = |v: Vec<i32>| arr(ValueType::I32, v.into_iter().map(MetaValue::I32).collect());
    refused(
        &base,
        vec![
            (
                "q-lora-missing",
                drop_key("deepseek4.attention.q_lora_rank"),
                "deepseek4.attention.q_lora_rank",
                "is missing",
            ),
            (
                "hash-missing",
                drop_key("deepseek4.hash_layer_count"),
                "deepseek4.hash_layer_count",
                "is missing",
            ),
            (
                "scale-u32",
                put("deepseek4.expert_weights_scale", MetaValue::U32(1)),
                "deepseek4.expert_weights_scale",
                "f32",
            ),
            (
                "norm-missing",
                drop_key("deepseek4.expert_weights_norm"),
                "deepseek4.expert_weights_norm",
                "is missing",
            ),
            (
                "hc-2",
                put("deepseek4.hyper_connection.count", MetaValue::U32(2)),
                "deepseek4.hyper_connection.count",
                "needs 4",
            ),
            (
                "softmax",
                put("deepseek4.expert_gating_func", MetaValue::U32(1)),
                "deepseek4.expert_gating_func",
                "sqrt-softplus",
            ),
            (
                "groups-3",
                put("deepseek4.attention.output_group_count", MetaValue::U32(3)),
                "deepseek4.attention.output_group_count",
                "must divide",
            ),
            (
                "ratios-short",
                put("deepseek4.attention.compress_ratios", ratios(vec![0, 4])),
                "deepseek4.attention.compress_ratios",
                "has 2 entries",
            ),
            (
                "ratio-8",
                put(
                    "deepseek4.attention.compress_ratios",
                    ratios(vec![0, 4, 8, 4]),
                ),
                "deepseek4.attention.compress_ratios",
                "0, 4 or 128",
            ),
            (
                "v-differs",
                put("deepseek4.attention.value_length", MetaValue::U32(128)),
                "deepseek4.attention.value_length",
                "needs it equal to deepseek4.attention.key_length",
            ),
            // the indexer's Hadamard rotation: 96 is no multiple of 64, 64 is the head size
            (
                "indexer-96",
                put("deepseek4.attention.indexer.key_length", MetaValue::U32(96)),
                "deepseek4.attention.indexer.key_length",
                "multiple of 64",
            ),
            (
                "indexer-64",
                put("deepseek4.attention.indexer.key_length", MetaValue::U32(64)),
                "deepseek4.attention.indexer.key_length",
                "other than deepseek4.attention.key_length = 64",
            ),
        ],
    );
}

#[test]
fn bailingmoe3_keys_its_loader_refuses_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let base = preset(dir.path(), Preset::BailingMoe3Tiny);
    refused(
        &base,
        vec![
            (
                "kv-lora-missing",
                drop_key("bailingmoe3.attention.kv_lora_rank"),
                "bailingmoe3.attention.kv_lora_rank",
                "is missing",
            ),
            (
                "mla-k-missing",
                drop_key("bailingmoe3.attention.key_length_mla"),
                "bailingmoe3.attention.key_length_mla",
                "is missing",
            ),
            (
                "kda-dim-missing",
                drop_key("bailingmoe3.kda.head_dim"),
                "bailingmoe3.kda.head_dim",
                "is missing",
            ),
            (
                "lower-bound-positive",
                put("bailingmoe3.kda.gate_lower_bound", MetaValue::F32(1.0)),
                "bailingmoe3.kda.gate_lower_bound",
                "< 0",
            ),
            (
                "unsafe-gate",
                put("bailingmoe3.kda.safe_gate", MetaValue::Bool(false)),
                "bailingmoe3.kda.safe_gate",
                "asserts it is true",
            ),
            (
                "gating-missing",
                drop_key("bailingmoe3.expert_gating_func"),
                "bailingmoe3.expert_gating_func",
                "is missing",
            ),
            // the KDA layers' 0 KV heads are recurrent layers, but not on an attention arch
            // without them: a 3 that does not divide 4 heads still refuses
            (
                "kv-3",
                put(
                    "bailingmoe3.attention.head_count_kv",
                    arr(ValueType::I32, vec![MetaValue::I32(3); 4]),
                ),
                "bailingmoe3.attention.head_count_kv",
                "must divide",
            ),
        ],
    );
}

/// `model`'s tensors (data copied) under metadata `md`, written to `path`.
fn rewrite(model: &GgufModel, path: &Path, md: Vec<(String, MetaValue)>) {
    write_edited(model, path, |m, _| *m = md).unwrap();
}

#[test]
fn a_gpt_oss_file_missing_a_tensor_its_loader_requires_is_refused_naming_it() {
    // src/models/openai-moe.cpp creates each of these with flags 0 (required): sinks, the
    // post-attention norm and the biases of the output projection, router and experts
    let dir = tempfile::tempdir().unwrap();
    let base = preset(dir.path(), Preset::GptOssTiny);
    let model = GgufModel::open(&base).unwrap();
    let required = [
        "output.weight",
        "blk.1.attn_sinks.weight",
        "blk.1.post_attention_norm.weight",
        "blk.1.attn_output.bias",
        "blk.1.ffn_gate_inp.bias",
        "blk.1.ffn_gate_exps.bias",
        "blk.1.ffn_up_exps.bias",
        "blk.1.ffn_down_exps.bias",
        "blk.0.ffn_gate_exps.weight",
    ];
    for (i, name) in required.iter().enumerate() {
        assert!(model.tensor(name).is_some(), "the preset has {name}");
        let text = edited(&base, &format!("no-tensor-{i}"), |_, specs| {
            specs.retain(|s| s.name != *name)
        });
        assert!(
            text.contains(&format!("needs tensor {name}")),
            "{name}: {text}"
        );
    }
}
