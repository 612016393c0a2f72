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
fn synth_and_inspect_describe_the_hybrid_and_mla_architectures() {
    let dir = tempfile::tempdir().unwrap();
    for (preset, arch, shape) in [
        // per-layer KV heads (0 on conv / KDA layers): the attention layers' count, how many
        // attend, and llama.cpp's head size (n_embd / heads without key_length; MLA's
        // key_length_mla, not the latent cache width)
        (
            "lfm2moe-tiny",
            "lfm2moe",
            "heads 4/2 x 64 (1 of 3 layers attend)",
        ),
        (
            "bailingmoe3-tiny",
            "bailingmoe3",
            "heads 4/1 x 96 (1 of 4 layers attend)",
        ),
        ("deepseek4-tiny", "deepseek4", "heads 4/1 x 64, vocab"),
        ("qwen35moe-tiny", "qwen35moe", "heads 4/2 x 64, vocab"),
    ] {
        let file = format!("{preset}.gguf");
        let out = bench(
            dir.path(),
            &["model", "synth", "--preset", preset, "-o", &file],
        );
        assert!(out.status.success(), "{preset}: {}", text(&out.stderr));
        let out = bench(dir.path(), &["model", "inspect", &file]);
        assert!(out.status.success(), "{preset}: {}", text(&out.stderr));
        let t = text(&out.stdout);
        assert!(t.contains(&format!("arch         {arch}\n")), "{t}");
        assert!(t.contains(shape), "{preset}: {t}");
        assert!(!t.contains("/?") && !t.contains("x ?"), "{preset}: {t}");
    }
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

fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".partial-"))
        .collect()
}

#[test]
fn an_interrupted_synth_removes_its_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    for sig in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        // ~200 MB: long enough to be caught mid-write, small enough for a shared disk
        let mut child = Command::new(env!("CARGO_BIN_EXE_bmoe-bench"))
            .args([
                "model",
                "synth",
                "--preset",
                "tiny",
                "--layers",
                "4",
                "--experts",
                "64",
                "--embd",
                "512",
                "--ff",
                "512",
                "-o",
                "big.gguf",
            ])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while partials(dir.path()).is_empty() {
            assert!(start.elapsed().as_secs() < 60, "no partial file appeared");
            assert!(
                child.try_wait().unwrap().is_none(),
                "synth ended before it was signalled"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        nix::sys::signal::kill(pid, sig).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{sig}: {err}");
        assert!(
            err.contains("interrupted — removed the partial file"),
            "{err}"
        );
        assert_eq!(partials(dir.path()), Vec::<String>::new(), "{sig}");
        assert!(!dir.path().join("big.gguf").exists());
    }
}

#[test]
fn the_next_synth_sweeps_stale_partials_and_keeps_live_ones() {
    let dir = tempfile::tempdir().unwrap();
    // a PID that was just alive and is gone now (a synth killed with SIGKILL)
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = dir.path().join(format!(".old.gguf.partial-{dead}"));
    let live = dir
        .path()
        .join(format!(".other.gguf.partial-{}", std::process::id()));
    let unrelated = dir.path().join("notes.partial-x");
    for p in [&stale, &live, &unrelated] {
        std::fs::write(p, b"half a model").unwrap();
    }
    let out = bench(
        dir.path(),
        &["model", "synth", "--preset", "tiny", "-o", "tiny.gguf"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "removed the stale partial file ./.old.gguf.partial-{dead} "
        )) && err.contains(&format!("PID {dead}")),
        "{err}"
    );
    assert!(!stale.exists());
    assert!(
        live.exists() && unrelated.exists(),
        "only stale partials go"
    );
}

#[test]
fn inspect_refuses_what_the_engine_refuses_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(
        dir.path(),
        &["model", "synth", "--preset", "tiny", "-o", "t.gguf"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut b = std::fs::read(dir.path().join("t.gguf")).unwrap();
    let key = b"qwen3moe.block_count";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    for (v, want) in [
        (u32::MAX, "4294967295"),
        (2_000_000, "2000000"),
        (9, "no tensors for layer 2"),
    ] {
        b[at..at + 4].copy_from_slice(&u32::to_le_bytes(v));
        std::fs::write(dir.path().join("bad.gguf"), &b).unwrap();
        let out = bench(dir.path(), &["model", "inspect", "bad.gguf"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty(), "partial output for {v}");
        assert!(
            err.starts_with("error: bad.gguf: qwen3moe.block_count (at byte") && err.contains(want),
            "{err}"
        );
        assert!(err.contains("\nhint: "), "{err}");
    }
    // an architecture no recipe names: refused by name, as bmoe-cli does, not by a missing key
    let mut b = std::fs::read(dir.path().join("t.gguf")).unwrap();
    let key = b"general.architecture";
    // key, then the u32 value type and the u64 string length, then the 8 bytes "qwen3moe"
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4 + 8;
    assert_eq!(&b[at..at + 8], b"qwen3moe");
    b[at..at + 8].copy_from_slice(b"nosuch\x07x");
    std::fs::write(dir.path().join("arch.gguf"), &b).unwrap();
    let out = bench(dir.path(), &["model", "inspect", "arch.gguf"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: arch.gguf: unknown architecture 'nosuch\\u{{7}}x'; supported: {}",
            bmoe_gguf::MOE_ARCHITECTURES.join(", ")
        )),
        "{err}"
    );
    assert!(
        err.lines()
            .last()
            .is_some_and(|l| l.starts_with("hint: ") && l.contains("--list-archs")),
        "{err}"
    );
}
