//! The gpt-oss and gemma4 checks of `bmoe_gguf::validate` refuse only what the vendored
//! llama.cpp itself refuses: each edited tiny model is handed straight to llama.cpp (no bmoe
//! checks in between), which fails the load, while `validate` names the file and the key first.

use std::path::{Path, PathBuf};

use bmoe_engine::internals::{Model, ModelOptions};
use bmoe_gguf::edit::write_edited;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_gguf::{GgmlType, GgufModel, MetaArray, MetaValue, TensorSpec, ValueType, validate};

type Md = Vec<(String, MetaValue)>;
/// An edit of a file's metadata and tensor specs.
type EditFn<'a> = &'a dyn Fn(&mut Md, &mut Vec<TensorSpec>);

fn preset(dir: &Path, p: Preset) -> PathBuf {
    let path = dir.join(format!("{}.gguf", p.name()));
    let mut o = SynthOptions::preset(p);
    o.expert_type = GgmlType::F32;
    o.dense_type = GgmlType::F32;
    write_model(&o, &path).expect("synthesise");
    path
}

/// `base` rewritten with its metadata / tensor specs edited.
fn edited(base: &Path, name: &str, f: EditFn<'_>) -> PathBuf {
    let model = GgufModel::open(base).expect("open");
    let path = base.with_file_name(format!("{name}.gguf"));
    write_edited(&model, &path, f).expect("write");
    path
}

fn put(md: &mut Md, key: &str, v: MetaValue) {
    md.retain(|(k, _)| k != key);
    md.push((key.into(), v));
}

fn grow(specs: &mut [TensorSpec], name: &str, axis: usize) {
    let s = specs.iter_mut().find(|s| s.name == name).expect("tensor");
    let mut dims = s.dims.clone();
    dims[axis] += 1;
    *s = TensorSpec::new(s.name.clone(), s.ggml_type, &dims);
}

/// llama.cpp loads the untouched base, refuses every edit, and `validate` names `key` first.
fn check(base: &Path, cases: &[(&str, &str, EditFn<'_>)]) {
    validate(&GgufModel::open(base).expect("open")).expect("base passes");
    Model::load(base, &ModelOptions::default()).expect("llama.cpp loads the base");
    for (name, key, f) in cases {
        let path = edited(base, name, f);
        let err = validate(&GgufModel::open(&path).expect("open"))
            .expect_err(name)
            .to_string();
        assert!(
            err.contains(&format!("{name}.gguf: {key}")),
            "{name}: {err}"
        );
        assert!(
            Model::load(&path, &ModelOptions::default()).is_err(),
            "{name}: llama.cpp accepted what validate refuses ({err})"
        );
    }
}

#[test]
fn gpt_oss_refusals_are_llama_cpp_s_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = preset(dir.path(), Preset::GptOssTiny);
    check(
        &base,
        &[
            (
                "swa-missing",
                "gpt-oss.attention.sliding_window",
                &|md, _| md.retain(|(k, _)| k != "gpt-oss.attention.sliding_window"),
            ),
            (
                "ff-missing",
                "gpt-oss.expert_feed_forward_length",
                &|md, _| md.retain(|(k, _)| k != "gpt-oss.expert_feed_forward_length"),
            ),
            (
                "pattern-f32",
                "gpt-oss.attention.sliding_window_pattern",
                &|md, _| {
                    let v = MetaValue::Array(MetaArray {
                        elem_type: ValueType::F32,
                        values: vec![MetaValue::F32(1.0); 2],
                    });
                    put(md, "gpt-oss.attention.sliding_window_pattern", v);
                },
            ),
            ("sinks", "tensor blk.1.attn_sinks.weight", &|_, specs| {
                grow(specs, "blk.1.attn_sinks.weight", 0)
            }),
            (
                "router-bias",
                "tensor blk.0.ffn_gate_inp.bias",
                &|_, specs| grow(specs, "blk.0.ffn_gate_inp.bias", 0),
            ),
            (
                "up-bias-experts",
                "tensor blk.1.ffn_up_exps.bias",
                &|_, specs| grow(specs, "blk.1.ffn_up_exps.bias", 1),
            ),
        ],
    );
}

#[test]
fn gemma4_refusals_are_llama_cpp_s_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = preset(dir.path(), Preset::Gemma4Tiny);
    let hd = GgufModel::open(&base)
        .expect("open")
        .get("gemma4.attention.key_length")
        .and_then(MetaValue::as_u64)
        .expect("key_length") as u32;
    let full_first = move |md: &mut Md| {
        let n = md
            .iter()
            .find(|(k, _)| k == "gemma4.block_count")
            .and_then(|(_, v)| v.as_u64())
            .expect("block_count");
        let flags = (0..n).map(|i| MetaValue::Bool(i % 2 == 1)).collect();
        let v = MetaValue::Array(MetaArray {
            elem_type: ValueType::Bool,
            values: flags,
        });
        put(md, "gemma4.attention.sliding_window_pattern", v);
    };
    check(
        &base,
        &[
            (
                "pattern-missing",
                "gemma4.attention.sliding_window_pattern",
                &|md, _| md.retain(|(k, _)| k != "gemma4.attention.sliding_window_pattern"),
            ),
            (
                "pattern-u32",
                "gemma4.attention.sliding_window_pattern",
                &|md, _| {
                    put(
                        md,
                        "gemma4.attention.sliding_window_pattern",
                        MetaValue::U32(2),
                    );
                },
            ),
            (
                "per-layer-missing",
                "gemma4.embedding_length_per_layer_input",
                &|md, _| md.retain(|(k, _)| k != "gemma4.embedding_length_per_layer_input"),
            ),
            (
                "vswa-differs",
                "gemma4.attention.value_length_swa",
                &move |md, _| {
                    put(
                        md,
                        "gemma4.attention.value_length_swa",
                        MetaValue::U32(hd * 2),
                    );
                },
            ),
            (
                "v-differs-full-first",
                "gemma4.attention.value_length",
                &move |md, _| {
                    full_first(md);
                    put(md, "gemma4.attention.value_length", MetaValue::U32(hd * 2));
                },
            ),
        ],
    );
    // the same full-attention-first pattern with equal sizes is a model llama.cpp loads
    let ok = edited(&base, "full-first", &move |md, _| full_first(md));
    validate(&GgufModel::open(&ok).expect("open")).expect("validate");
    Model::load(&ok, &ModelOptions::default()).expect("llama.cpp loads it");
}
