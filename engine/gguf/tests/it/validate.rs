//! `validate`: every synthetic preset passes; each hyperparameter llama.cpp asserts on, each
//! shape lie, overlap and split-set lie is an error naming the file and the key.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_gguf::writer::{TensorFill, write_gguf};
use bmoe_gguf::{GgufError, GgufModel, MetaArray, MetaValue, TensorSpec, ValueType, validate};

struct CopyFill<'a> {
    model: &'a GgufModel,
    names: Vec<String>,
}

impl TensorFill for CopyFill<'_> {
    fn fill(&mut self, tensor: usize, offset: u64, out: &mut [u8]) {
        let src = self
            .model
            .tensor(&self.names[tensor])
            .map_or(&[][..], |t| self.model.tensor_data(t));
        for (i, b) in out.iter_mut().enumerate() {
            *b = src.get(offset as usize + i).copied().unwrap_or(0);
        }
    }
}

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
    let mut md = model.metadata().to_vec();
    let mut specs: Vec<TensorSpec> = model
        .tensors()
        .iter()
        .map(|t| TensorSpec::new(t.info.name.clone(), t.info.ggml_type, &t.info.dims))
        .collect();
    f(&mut md, &mut specs);
    let path = base.with_file_name(format!("{name}.gguf"));
    let names = specs.iter().map(|s| s.name.clone()).collect();
    let mut fill = CopyFill {
        model: &model,
        names,
    };
    write_gguf(&path, &md, &specs, 4096, 1, &mut fill).unwrap();
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
