//! Model files llama.cpp would abort on (`GGML_ASSERT`, exit 134) are refused before it sees
//! them, on the real binary: a clear error naming the file and the key, plain, streamed and in
//! `--session` (a fatal `BMOE_ERROR` first on stdout); and a corrupted cached built-in model is
//! rebuilt, said on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bmoe_gguf::synth::{Preset, SynthOptions, write_model};

const BIN: &str = env!("CARGO_BIN_EXE_bmoe-cli");

fn tiny(dir: &Path) -> PathBuf {
    write_model(&SynthOptions::preset(Preset::Tiny), &dir.join("t.gguf"))
        .expect("synthesise")
        .paths[0]
        .clone()
}

/// `base` with metadata key `key`'s 4-byte value replaced (the layout is unchanged).
fn patched(base: &Path, name: &str, key: &str, value: [u8; 4]) -> PathBuf {
    let mut b = std::fs::read(base).expect("read");
    let at = b
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .expect("key")
        + key.len()
        + 4;
    b[at..at + 4].copy_from_slice(&value);
    let p = base.with_file_name(name);
    std::fs::write(&p, b).expect("write");
    p
}

fn run(model: &Path, extra: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .arg("-m")
        .arg(model)
        .args(["-n", "2", "-p", "hi"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bmoe-cli");
    use std::io::Write;
    let _ = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes());
    child.wait_with_output().expect("wait")
}

#[test]
fn hyperparameters_llama_cpp_asserts_on_are_clear_errors_in_every_mode() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let base = tiny(dir.path());
    let cases = [
        (
            "used9.gguf",
            "qwen3moe.expert_used_count",
            9u32.to_le_bytes(),
            "is 9",
        ),
        (
            "blocks.gguf",
            "qwen3moe.block_count",
            u32::MAX.to_le_bytes(),
            "1..=512",
        ),
        (
            "eps.gguf",
            "qwen3moe.attention.layer_norm_rms_epsilon",
            f32::NAN.to_le_bytes(),
            "finite",
        ),
        (
            "experts1.gguf",
            "qwen3moe.expert_count",
            1u32.to_le_bytes(),
            "more experts",
        ),
    ];
    let request = "{\"cmd\":\"generate\",\"id\":1,\"prompt\":\"hi\",\"n_predict\":2}\n";
    for (name, key, value, says) in cases {
        let model = patched(&base, name, key, value);
        for extra in [&[][..], &["--moe-stream"], &["--session", "--moe-stream"]] {
            let o = run(&model, extra, request);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{name} {extra:?}: {err}");
            let error = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
            assert!(
                error.contains(name) && error.contains(key) && error.contains(says),
                "{name} {extra:?}: {err}"
            );
            assert!(error.contains("(at byte "), "{err}");
            assert!(err.contains("\nhint: "), "{err}");
            assert!(!err.contains("llama.cpp:"), "llama.cpp saw the file: {err}");
            if extra.contains(&"--session") {
                let out = String::from_utf8_lossy(&o.stdout);
                let first = out.lines().next().unwrap_or("");
                assert!(
                    first.starts_with("BMOE_ERROR ")
                        && first.contains("\"fatal\":true")
                        && first.contains(key),
                    "{out}"
                );
            }
        }
    }
    // an architecture without a recipe (every `qwen3moe` of the header renamed, keys too):
    // bmoe-gguf's checks refuse it by name, with the supported list, before the registry looks
    let mut b = std::fs::read(&base).expect("read");
    let header = bmoe_gguf::parse_header(&b).expect("parse").data_offset as usize;
    let mut at = 0;
    while let Some(i) = b[at..header].windows(8).position(|w| w == b"qwen3moe") {
        b[at + i..at + i + 8].copy_from_slice(b"qwen9moe");
        at += i + 8;
    }
    let p = dir.path().join("norecipe.gguf");
    std::fs::write(&p, b).expect("write");
    let o = run(&p, &["--moe-stream"], "");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("norecipe.gguf: unknown architecture 'qwen9moe'; supported: ")
            && err.lines().last().is_some_and(|l| l.starts_with("hint: ")),
        "{err}"
    );
}

#[test]
fn a_corrupted_cached_default_model_is_rebuilt_and_said() {
    let cache = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let first = Command::new(BIN)
        .args(["-n", "1", "-p", "hi"])
        .env("BMOE_CACHE_DIR", cache.path())
        .output()
        .expect("run");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let model = cache.path().join("bmoe-tiny-v1.gguf");
    let good = std::fs::read(&model).expect("cached model");
    // cut inside the weights: the header still parses, the file does not hold its tensors
    std::fs::write(&model, &good[..good.len() / 2]).expect("cut");
    let o = Command::new(BIN)
        .args(["-n", "1", "-p", "hi"])
        .env("BMOE_CACHE_DIR", cache.path())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("(rebuilt now: the cached copy was corrupt"),
        "{err}"
    );
    assert_eq!(std::fs::read(&model).expect("rebuilt"), good);
}
