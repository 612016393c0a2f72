//! A GGUF file: the header parser (`parse_header`) on the raw bytes, then — through the file
//! API, as the engine and `bmoe-bench model inspect` see it — `GgufModel::open`, the
//! hyperparameter and layout checks (`validate`) and the MoE description (`ModelInfo`). Every
//! input ends in a value or an error, never a panic; parsed tensors lie inside the input; a file
//! that validates is describable with at most 512 layers; no message carries a raw control byte
//! from the file.
#![no_main]

use bmoe_gguf::{GgufModel, ModelInfo, parse_header, validate};
use libfuzzer_sys::fuzz_target;

fn clean(message: &str) {
    assert!(
        !message.chars().any(|c| c.is_control() && c != '\n'),
        "raw control byte in {message:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    match parse_header(data) {
        Ok(h) => {
            for t in &h.tensors {
                assert!(t.file_offset + t.n_bytes <= data.len() as u64, "{}", t.name);
            }
        }
        Err(e) => {
            clean(&e.to_string());
            return;
        }
    }
    let path = std::env::temp_dir().join(format!("bmoe-fuzz-gguf-{}.gguf", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let model = match GgufModel::open(&path) {
        Ok(m) => m,
        Err(e) => {
            clean(&e.to_string());
            return;
        }
    };
    match validate(&model) {
        Ok(()) => {
            let info = ModelInfo::from_model(&model).expect("a validated model is describable");
            assert!(info.layers.len() <= 512);
        }
        Err(e) => {
            clean(&e.to_string());
            let _ = ModelInfo::from_model(&model);
        }
    }
});
