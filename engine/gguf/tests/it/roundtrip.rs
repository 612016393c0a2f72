//! Writer → reader round trips for every preset, split sets, determinism, quant validity.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use bmoe_gguf::synth::{Preset, SynthOptions, plan_model, write_model};
use bmoe_gguf::{GgmlType, GgufError, GgufModel, ModelInfo};

fn small(p: Preset) -> SynthOptions {
    let mut o = SynthOptions::preset(p);
    if p == Preset::Qwen3_30bA3b {
        // Real per-expert dims, few layers/experts so the test writes ~10 MB.
        o.n_layer = 1;
        o.n_expert = 4;
        o.n_expert_used = 2;
    }
    if matches!(
        p,
        Preset::Lfm2_8bA1b | Preset::Qwen36_35bA3b | Preset::LingMini3
    ) {
        // real per-layer dims; the fewest layers that still hold every layer kind
        o.n_layer = if p == Preset::Lfm2_8bA1b { 3 } else { 4 };
        o.n_expert = 4;
        o.n_expert_used = 2;
    }
    o
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Decode a Q4_K block into 256 floats (ggml `dequantize_row_q4_K`).
fn decode_q4k(b: &[u8]) -> Vec<f32> {
    let f16 = |i: usize| half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    let (d, dmin) = (f16(0), f16(2));
    let sc = &b[4..16];
    let qs = &b[16..144];
    let scale_min = |j: usize| -> (f32, f32) {
        if j < 4 {
            ((sc[j] & 63) as f32, (sc[j + 4] & 63) as f32)
        } else {
            (
                ((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4)) as f32,
                ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)) as f32,
            )
        }
    };
    let mut out = Vec::with_capacity(256);
    for c in 0..4 {
        let q = &qs[32 * c..32 * c + 32];
        let (s1, m1) = scale_min(2 * c);
        let (s2, m2) = scale_min(2 * c + 1);
        out.extend(q.iter().map(|&x| d * s1 * (x & 15) as f32 - dmin * m1));
        out.extend(q.iter().map(|&x| d * s2 * (x >> 4) as f32 - dmin * m2));
    }
    out
}

fn decode_q8_0(b: &[u8]) -> Vec<f32> {
    let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    b[2..34].iter().map(|&q| d * (q as i8) as f32).collect()
}

fn decode_mxfp4(b: &[u8]) -> Vec<f32> {
    const K: [f32; 16] = [
        0., 1., 2., 3., 4., 6., 8., 12., 0., -1., -2., -3., -4., -6., -8., -12.,
    ];
    let s = 2f32.powi(b[0] as i32 - 128);
    let mut out = Vec::with_capacity(32);
    for &q in &b[1..17] {
        out.push(K[(q & 15) as usize] * s);
    }
    for &q in &b[1..17] {
        out.push(K[(q >> 4) as usize] * s);
    }
    out
}

fn decode(t: GgmlType, data: &[u8]) -> Vec<f32> {
    match t {
        GgmlType::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        GgmlType::Q8_0 => data.chunks_exact(34).flat_map(decode_q8_0).collect(),
        GgmlType::Q4_K => data.chunks_exact(144).flat_map(decode_q4k).collect(),
        GgmlType::MXFP4 => data.chunks_exact(17).flat_map(decode_mxfp4).collect(),
        GgmlType::I32 => data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        other => panic!("no decoder for {other}"),
    }
}

fn std_of(v: &[f32]) -> f32 {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt() as f32
}

/// Every value of every tensor is finite and every expert tensor has roughly the planned std.
fn check_values(model: &GgufModel, opts: &SynthOptions) {
    for t in model.tensors() {
        let data = model.tensor_data(t);
        assert_eq!(data.len() as u64, t.info.n_bytes);
        let vals = decode(t.info.ggml_type, data);
        assert!(
            vals.iter().all(|v| v.is_finite()),
            "{}: non-finite value",
            t.info.name
        );
        if t.info.name.ends_with("ffn_gate_tid2eid.weight") {
            // deepseek4's hash routing: each token's row holds top-k distinct expert ids
            let k = t.info.dims[0] as usize;
            assert_eq!(k, opts.n_expert_used as usize);
            for row in vals.chunks_exact(k) {
                let mut ids: Vec<i64> = row.iter().map(|&v| v as i64).collect();
                assert!(
                    ids.iter()
                        .all(|&id| (0..i64::from(opts.n_expert)).contains(&id))
                );
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), k, "{}: repeated id in {row:?}", t.info.name);
            }
        }
        if t.info.name.contains("_exps.weight") {
            let fan_in = t.info.dims[0] as f32;
            let want = 1.0 / fan_in.sqrt();
            let got = std_of(&vals);
            assert!(
                got > 0.5 * want && got < 2.0 * want,
                "{} ({:?}): std {got} vs planned {want}",
                t.info.name,
                opts.expert_type
            );
        }
    }
}

fn write(opts: &SynthOptions, dir: &Path, name: &str) -> (PathBuf, ModelInfo) {
    let path = dir.join(name);
    let summary = write_model(opts, &path).unwrap();
    (summary.paths[0].clone(), summary.info)
}

#[test]
fn every_preset_round_trips_through_the_reader() {
    let dir = tmp();
    for p in Preset::ALL {
        if p == Preset::DeepSeekV4Flash {
            // even 3 layers of its real dims are ~0.5 GB: deepseek_v4_flash_dry_run_has_the_real_layout
            continue;
        }
        let opts = small(p);
        let (path, planned) = write(&opts, dir.path(), &format!("{}.gguf", p.name()));
        let model = GgufModel::open(&path).unwrap();
        let info = ModelInfo::from_model(&model).unwrap();
        assert_eq!(
            info,
            planned,
            "{}: dry-run info differs from the file's",
            p.name()
        );
        assert_eq!(info.arch, opts.arch.gguf_name());
        assert_eq!(info.n_layer, opts.n_layer);
        assert_eq!(info.n_expert, opts.n_expert);
        assert_eq!(info.n_expert_used, opts.n_expert_used);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            info.shards[0].file_len
        );
        let plan = plan_model(&opts, &path).unwrap();
        assert_eq!(model.tensors().len(), plan.tensors.len());
        for (t, pt) in model.tensors().iter().zip(&plan.tensors) {
            assert_eq!(t.info.name, pt.spec.name);
            assert_eq!(t.info.dims, pt.spec.dims);
            assert_eq!(t.info.ggml_type, pt.spec.ggml_type);
        }
        for (k, v) in &plan.metadata {
            assert_eq!(model.get(k), Some(v), "{}: metadata {k}", p.name());
        }
        for l in &info.layers {
            if l.expert_tensors.is_empty()
                && matches!(opts.arch.gguf_name(), "lfm2moe" | "bailingmoe3")
            {
                // lfm2moe's / bailingmoe3's dense leading layer: an MLP, no experts
                assert!(l.dense_bytes > 0);
                continue;
            }
            let kinds: Vec<&str> = l.expert_tensors.iter().map(|t| t.kind.as_str()).collect();
            let want: &[&str] = if p == Preset::Gemma4Tiny {
                &["gate_up", "down"]
            } else {
                &["gate", "up", "down"]
            };
            assert_eq!(kinds, want, "{}", p.name());
            assert!(l.dense_bytes > 0);
        }
        check_values(&model, &opts);
    }
}

#[test]
fn tiny_is_page_aligned_for_every_expert_type_and_experts_differ() {
    let dir = tmp();
    for t in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K] {
        let mut opts = SynthOptions::preset(Preset::Tiny);
        opts.expert_type = t;
        let (path, info) = write(&opts, dir.path(), &format!("tiny-{t}.gguf"));
        assert!(info.experts_page_aligned, "{t}");
        assert_eq!(info.alignment, 4096);
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size < 16 << 20, "tiny {t} is {size} bytes");
        let model = GgufModel::open(&path).unwrap();
        let shard = &model.shards()[0];
        for l in &info.layers {
            for et in &l.expert_tensors {
                assert_eq!(et.nb2 % 4096, 0);
                assert_eq!(et.file_offset % 4096, 0);
                assert_eq!(et.ggml_type, t);
                let bytes = shard.bytes();
                let e0 = &bytes[et.expert_offset(0) as usize..][..et.nb2 as usize];
                let e1 = &bytes[et.expert_offset(1) as usize..][..et.nb2 as usize];
                assert_ne!(e0, e1, "{}: experts 0 and 1 are identical", et.name);
            }
            // one expert over gate+up+down
            let per_expert: u64 = l.expert_tensors.iter().map(|t| t.n_bytes).sum::<u64>() / 8;
            assert_eq!(l.expert_bytes, per_expert);
        }
        let sum: u64 = info.layers.iter().map(|l| l.expert_bytes).sum();
        assert_eq!(info.cache_cycle_bytes, 2 * sum);
        check_values(&model, &opts);
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let dir = tmp();
    let opts = SynthOptions::preset(Preset::Tiny);
    let (a, _) = write(&opts, dir.path(), "a.gguf");
    let (b, _) = write(&opts, dir.path(), "b.gguf");
    let mut other = opts.clone();
    other.seed = 2;
    let (c, _) = write(&other, dir.path(), "c.gguf");
    let (a, b, c) = (
        std::fs::read(a).unwrap(),
        std::fs::read(b).unwrap(),
        std::fs::read(c).unwrap(),
    );
    assert!(a == b, "same seed produced different files");
    assert_eq!(a.len(), c.len());
    assert!(a != c, "different seeds produced the same file");
}

#[test]
fn three_shard_split_holds_the_same_tensors_as_unsplit() {
    let dir = tmp();
    let opts = SynthOptions::preset(Preset::Tiny);
    let (single, single_info) = write(&opts, dir.path(), "m.gguf");
    let mut split = opts.clone();
    split.n_split = 3;
    let (first, info) = write(&split, dir.path(), "s.gguf");
    assert!(
        first.ends_with("s-00001-of-00003.gguf"),
        "{}",
        first.display()
    );
    assert_eq!(info.shards.len(), 3);
    assert_eq!(info.cache_cycle_bytes, single_info.cache_cycle_bytes);
    assert_eq!(info.dense_bytes, single_info.dense_bytes);

    let a = GgufModel::open(&single).unwrap();
    let b = GgufModel::open(&first).unwrap();
    assert_eq!(b.shards().len(), 3);
    assert!(b.tensors().iter().any(|t| t.shard == 2));
    assert_eq!(a.tensors().len(), b.tensors().len());
    for (ta, tb) in a.tensors().iter().zip(b.tensors()) {
        assert_eq!(ta.info.name, tb.info.name);
        assert!(a.tensor_data(ta) == b.tensor_data(tb), "{}", ta.info.name);
    }
    // Expert tensors bind to (shard, offset) correctly.
    for l in &info.layers {
        for et in &l.expert_tensors {
            let t = b.tensor(&et.name).unwrap();
            assert_eq!((t.shard, t.info.file_offset), (et.shard, et.file_offset));
        }
    }
    assert_eq!(b.get("general.architecture"), a.get("general.architecture"));
    assert_eq!(
        b.shards()[1].header().get("split.no"),
        Some(&bmoe_gguf::MetaValue::U16(1))
    );

    // Opening a later shard names the first.
    let second = dir.path().join("s-00002-of-00003.gguf");
    match GgufModel::open(&second) {
        Err(GgufError::NotFirstShard { first, .. }) => {
            assert!(first.ends_with("s-00001-of-00003.gguf"))
        }
        other => panic!("expected NotFirstShard, got {other:?}"),
    }
    // A missing sibling is an error naming it.
    std::fs::remove_file(dir.path().join("s-00003-of-00003.gguf")).unwrap();
    let err = GgufModel::open(&first).unwrap_err();
    assert!(err.to_string().contains("s-00003-of-00003.gguf"), "{err}");
}

#[test]
fn qwen3_30b_a3b_dry_run_has_the_real_layout() {
    let opts = SynthOptions::preset(Preset::Qwen3_30bA3b);
    let plan = plan_model(&opts, Path::new("/nonexistent/q.gguf")).unwrap();
    let info = &plan.info;
    assert_eq!(
        (info.n_layer, info.n_expert, info.n_expert_used),
        (48, 128, 8)
    );
    // gate/up/down: 768×2048 Q4_K each = 884736 bytes per expert.
    let per_expert = 3 * 2048 * 768 / 256 * 144;
    assert!(info.layers.iter().all(|l| l.expert_bytes == per_expert));
    assert_eq!(info.cache_cycle_bytes, 8 * 48 * per_expert);
    assert!(info.experts_page_aligned);
    let total = plan.total_bytes() as f64 / 1e9;
    assert!((16.5..18.0).contains(&total), "{total} GB");
    assert!(!Path::new("/nonexistent/q.gguf").exists());
}

#[test]
fn deepseek_v4_flash_dry_run_has_the_real_layout() {
    let opts = SynthOptions::preset(Preset::DeepSeekV4Flash);
    let plan = plan_model(&opts, Path::new("/nonexistent/d.gguf")).unwrap();
    let info = &plan.info;
    assert_eq!(
        (info.n_layer, info.n_expert, info.n_expert_used),
        (43, 256, 6)
    );
    // gate/up/down: 4096×2048 Q4_K each
    let per_expert = 3 * 4096 * 2048 / 256 * 144;
    assert!(info.layers.iter().all(|l| l.expert_bytes == per_expert));
    assert_eq!(info.cache_cycle_bytes, 6 * 43 * per_expert);
    let names: Vec<&str> = plan.tensors.iter().map(|t| t.spec.name.as_str()).collect();
    // 3 hash-routed layers, then the selection bias; layers 0-1 window-only, then CSA (with
    // the indexer) and HCA alternate
    for il in 0..3 {
        assert!(names.contains(&format!("blk.{il}.ffn_gate_tid2eid.weight").as_str()));
    }
    assert!(names.contains(&"blk.3.exp_probs_b.bias"));
    assert!(!names.iter().any(|n| n.starts_with("blk.1.attn_compressor")));
    assert!(names.contains(&"blk.2.indexer.proj.weight"));
    assert!(names.contains(&"blk.3.attn_compressor_kv.weight"));
    assert!(!names.contains(&"blk.3.indexer.proj.weight"));
    let total = plan.total_bytes() as f64 / 1e9;
    assert!((150.0..175.0).contains(&total), "{total} GB");
}

#[test]
fn router_skew_makes_router_rows_unequal() {
    let dir = tmp();
    let mut opts = SynthOptions::preset(Preset::Tiny);
    opts.router_skew = 1.2;
    let (path, _) = write(&opts, dir.path(), "skew.gguf");
    let model = GgufModel::open(&path).unwrap();
    let t = model.tensor("blk.0.ffn_gate_inp.weight").unwrap();
    let vals = decode(GgmlType::F32, model.tensor_data(t));
    let norms: Vec<f32> = vals
        .chunks(opts.n_embd as usize)
        .map(|r| r.iter().map(|x| x * x).sum::<f32>().sqrt())
        .collect();
    let max = norms.iter().cloned().fold(0.0, f32::max);
    let min = norms.iter().cloned().fold(f32::MAX, f32::min);
    assert!(max / min > 5.0, "row norms {norms:?}");
}

#[test]
fn bad_options_are_clear_errors() {
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.n_expert_used = 9;
    let e = plan_model(&o, Path::new("x.gguf")).unwrap_err().to_string();
    assert!(e.contains("top-k 9"), "{e}");
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.expert_type = GgmlType::Q4_K;
    o.n_ff_exp = 100;
    let e = plan_model(&o, Path::new("x.gguf")).unwrap_err().to_string();
    assert!(
        e.contains("ffn_down_exps") || e.contains("ffn_gate_exps"),
        "{e}"
    );
    let o = SynthOptions::preset(Preset::Tiny);
    let e = write_model(&o, Path::new("/nonexistent-bmoe-dir/x.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("/nonexistent-bmoe-dir/x.gguf:"), "{e}");
}

#[test]
fn direct_and_buffered_writes_give_identical_files() {
    use bmoe_gguf::synth::write_plan_with;
    use bmoe_gguf::writer::DirectIo;
    let dir = tmp();
    for alignment in [4096, 32] {
        let mut opts = SynthOptions::preset(Preset::Tiny);
        opts.alignment = alignment;
        opts.n_split = 2;
        let mut files = Vec::new();
        for (name, mode) in [("d", DirectIo::Always), ("b", DirectIo::Never)] {
            let plan =
                plan_model(&opts, &dir.path().join(format!("{name}{alignment}.gguf"))).unwrap();
            let s = write_plan_with(&plan, opts.seed, &mut |_, _| {}, mode).unwrap();
            let bytes: Vec<Vec<u8>> = s.paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
            for (b, l) in bytes.iter().zip(&plan.layouts) {
                assert_eq!(b.len() as u64, l.file_len);
            }
            files.push(bytes);
        }
        assert!(
            files[0] == files[1],
            "alignment {alignment}: O_DIRECT output differs"
        );
        GgufModel::open(dir.path().join(format!("d{alignment}-00001-of-00002.gguf"))).unwrap();
    }
}

#[test]
fn vocab_extra_grows_embeddings_and_token_list() {
    let mut opts = SynthOptions::preset(Preset::Tiny);
    opts.vocab_extra = 1000;
    let plan = plan_model(&opts, Path::new("v.gguf")).unwrap();
    let emb = plan
        .tensors
        .iter()
        .find(|t| t.spec.name == "token_embd.weight")
        .unwrap();
    let n_tokens = match plan
        .metadata
        .iter()
        .find(|(k, _)| k == "tokenizer.ggml.tokens")
    {
        Some((_, v)) => v.as_array().unwrap().values.len() as u64,
        None => panic!("no token list"),
    };
    assert_eq!(emb.spec.dims, [opts.n_embd, n_tokens]);
    assert_eq!(n_tokens, 256 + 8 + 1000 + 5);
}

#[test]
fn writes_leave_only_complete_files_and_expert_ranges_point_at_experts() {
    let dir = tmp();
    let mut opts = SynthOptions::preset(Preset::Tiny);
    opts.n_split = 2;
    let s = write_model(&opts, &dir.path().join("m.gguf")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]);
    let model = GgufModel::open(&s.paths[0]).unwrap();
    let l1 = &s.info.layers[1];
    let ranges = l1.expert_ranges(5);
    assert_eq!(ranges.len(), 3);
    for ((shard, off, len), t) in ranges.iter().zip(&l1.expert_tensors) {
        let mt = model.tensor(&t.name).unwrap();
        assert_eq!(*shard, mt.shard);
        let file = &model.shards()[*shard];
        let whole = model.tensor_data(mt);
        let slice = &file.bytes()[*off as usize..(*off + *len) as usize];
        assert!(slice == &whole[5 * *len as usize..6 * *len as usize]);
    }
}

#[test]
fn vocab_sets_the_total_size_and_tied_drops_the_output_head() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small(Preset::Tiny);
    assert!(opts.set_vocab(SynthOptions::base_vocab() - 1).is_err());
    opts.set_vocab(3000).unwrap();
    opts.tied_output = true;
    let path = dir.path().join("v.gguf");
    write_model(&opts, &path).unwrap();
    let m = GgufModel::open(&path).unwrap();
    let embd = m
        .tensors()
        .iter()
        .find(|t| t.info.name == "token_embd.weight")
        .unwrap();
    assert_eq!(embd.info.dims[1], 3000);
    assert!(m.tensors().iter().all(|t| t.info.name != "output.weight"));
}

#[test]
fn every_preset_honours_a_tied_head_or_refuses_it() {
    // bailingmoe3's loader falls back to token_embd without output.weight; deepseek4's
    // requires output.weight, so a tied deepseek4 is refused rather than written wrong
    let dir = tempfile::tempdir().unwrap();
    for preset in [
        Preset::Tiny,
        Preset::Lfm2MoeTiny,
        Preset::Qwen35MoeTiny,
        Preset::BailingMoe3Tiny,
    ] {
        let mut opts = small(preset);
        opts.tied_output = true;
        let path = dir.path().join(format!("{}.gguf", preset.name()));
        write_model(&opts, &path).unwrap();
        let m = GgufModel::open(&path).unwrap();
        assert!(
            m.tensors().iter().all(|t| t.info.name != "output.weight"),
            "{}",
            preset.name()
        );
        assert!(
            m.tensors()
                .iter()
                .any(|t| t.info.name == "token_embd.weight")
        );
    }
    let mut opts = small(Preset::DeepSeek4Tiny);
    opts.tied_output = true;
    let err = write_model(&opts, &dir.path().join("ds4.gguf")).unwrap_err();
    assert!(err.to_string().contains("output.weight"), "{err}");
}
