//! `--dense-weights anon` on a split model whose first shards hold no expert: those shards'
//! dense pages must move to anonymous memory too (the expert binding alone does not say where
//! such a shard is mapped), with the output unchanged.

use bmoe_gguf::GgufModel;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::metrics::MetricsFile;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tiny preset in 3 shards with a large vocabulary, so the embedding and output matrices
/// fill shards 1 and 2 and every expert lands in shard 3.
fn split_model(dir: &Path) -> PathBuf {
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.n_split = 3;
    o.vocab_extra = 8000;
    write_model(&o, &dir.join("dense-split.gguf"))
        .expect("synthesise model")
        .paths[0]
        .clone()
}

/// Bytes of tensors in shards that hold no expert tensor.
fn dense_only_shard_bytes(path: &Path) -> (u64, usize) {
    let model = GgufModel::open(path).expect("open model");
    let n = model.shards().len();
    let mut has_expert = vec![false; n];
    let mut bytes = vec![0u64; n];
    for t in model.tensors() {
        bytes[t.shard] += t.info.n_bytes;
        if t.info.name.contains("_exps.") {
            has_expert[t.shard] = true;
        }
    }
    let dense_only: Vec<usize> = (0..n).filter(|&s| !has_expert[s]).collect();
    (dense_only.iter().map(|&s| bytes[s]).sum(), dense_only.len())
}

/// Runs bmoe-cli; returns (stderr, logits-hash lines, mean rss_file MiB from the CSV).
fn run(model: &Path, csv: &Path, extra: &[&str]) -> (String, Vec<String>, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(model)
        .args(["-p", "Dense shards of a split model", "-n", "6", "-t", "2"])
        .args(["-c", "128", "--dump-logits-hash", "--csv"])
        .arg(csv)
        .args(extra)
        .output()
        .expect("run bmoe-cli");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{extra:?}:\n{stderr}");
    let hashes = stderr
        .lines()
        .filter(|l| l.starts_with("logits-hash "))
        .map(str::to_string)
        .collect();
    let f = MetricsFile::read(csv).expect("metrics CSV parses");
    let rss: Vec<f64> = f.rows.iter().filter_map(|r| r.rss_file_mib).collect();
    assert!(!rss.is_empty(), "rss_file_mib measured");
    (stderr, hashes, rss.iter().sum::<f64>() / rss.len() as f64)
}

#[test]
fn anon_moves_the_dense_only_shards_too() {
    // under the target dir, not /tmp: tmpfs refuses O_DIRECT
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let model = split_model(dir.path());
    let (dense_only, n_dense_only) = dense_only_shard_bytes(&model);
    assert!(
        n_dense_only >= 1 && dense_only > 8 << 20,
        "the test model needs a big dense-only shard ({n_dense_only} shards, {dense_only} B)"
    );

    let csv = |n: &str| dir.path().join(n);
    let (_, resident, _) = run(&model, &csv("plain.csv"), &[]);
    let (_, mmap, rss_mmap) = run(
        &model,
        &csv("mmap.csv"),
        &["--moe-stream", "--cache-mb", "1", "--dense-weights", "mmap"],
    );
    let (err, anon, rss_anon) = run(
        &model,
        &csv("anon.csv"),
        &["--moe-stream", "--cache-mb", "1", "--dense-weights", "anon"],
    );
    assert_eq!(mmap, resident, "streamed (mmap dense) vs resident");
    assert_eq!(anon, resident, "streamed (anon dense) vs resident");

    let copied_mib: f64 = err
        .split("dense-weights=anon — ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no anon note:\n{err}"));
    let dense_only_mib = dense_only as f64 / (1024.0 * 1024.0);
    assert!(
        copied_mib >= dense_only_mib * 0.99,
        "anon copied {copied_mib} MiB, but the dense-only shards alone hold {dense_only_mib:.1} MiB"
    );
    // the file-backed resident set shrinks by (at least most of) the dense-only shards
    assert!(
        rss_mmap - rss_anon >= dense_only_mib * 0.9,
        "rss_file {rss_mmap:.1} MiB (mmap) vs {rss_anon:.1} MiB (anon); dense-only shards {dense_only_mib:.1} MiB"
    );
}
