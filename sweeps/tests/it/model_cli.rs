//! `bmoe-bench model synth|inspect` run as real subprocesses.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

fn bench(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-bench"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

#[test]
fn inspect_tiny_table_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(
        dir.path(),
        &["model", "synth", "--preset", "tiny", "-o", "tiny.gguf"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "tiny.gguf\n");
    let out = bench(dir.path(), &["model", "inspect", "tiny.gguf"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    insta::assert_snapshot!("inspect_tiny", text(&out.stdout));
}

#[test]
fn inspect_json_matches_the_library_description() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(
        dir.path(),
        &[
            "model",
            "synth",
            "--preset",
            "tiny",
            "--split",
            "3",
            "--expert-quant",
            "Q4_K",
            "-o",
            "m.gguf",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = bench(
        dir.path(),
        &["model", "inspect", "--json", "m-00001-of-00003.gguf"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let model = bmoe_gguf::GgufModel::open(dir.path().join("m-00001-of-00003.gguf")).unwrap();
    let info = bmoe_gguf::ModelInfo::from_model(&model).unwrap();
    assert_eq!(v["cache_cycle_bytes"], info.cache_cycle_bytes);
    assert_eq!(v["shards"].as_array().unwrap().len(), 3);
    assert_eq!(v["layers"][0]["expert_tensors"][0]["ggml_type"], "Q4_K");
    assert_eq!(v["expert_types"]["Q4_K"], 6);
}

#[test]
fn errors_name_the_problem_and_give_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(dir.path(), &["model", "inspect", "missing.gguf"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.starts_with("error: missing.gguf:"), "{err}");
    assert!(err.contains("\nhint: "), "{err}");

    std::fs::write(
        dir.path().join("junk.gguf"),
        b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff",
    )
    .unwrap();
    let out = bench(dir.path(), &["model", "inspect", "junk.gguf"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("junk.gguf: not a valid GGUF file"), "{err}");
    assert!(err.contains("hint: "), "{err}");

    let out = bench(
        dir.path(),
        &["model", "synth", "--preset", "nope", "-o", "x.gguf"],
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("qwen3-30b-a3b"));

    let out = bench(
        dir.path(),
        &["model", "synth", "--top-k", "99", "-o", "x.gguf"],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("top-k 99") && err.contains("hint: "), "{err}");
    assert!(!dir.path().join("x.gguf").exists());
}

#[test]
fn dry_run_of_the_big_preset_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(
        dir.path(),
        &[
            "model",
            "synth",
            "--preset",
            "qwen3-30b-a3b",
            "--dry-run",
            "--json",
            "-o",
            "big.gguf",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["n_layer"], 48);
    assert_eq!(v["n_expert"], 128);
    assert_eq!(v["cache_cycle_bytes"], 8u64 * 48 * 3 * 884_736);
    assert!(!dir.path().join("big.gguf").exists());
}
