//! `--list-devices` and `--prefill-device NAME` (issue #22): the prompt's graph on a ggml
//! backend device (Vulkan, tested on Mesa's lavapipe), the decode on the CPU.

use super::{ConfigError, RunConfig};
use crate::ffi::{BackendDevice, backend_devices};
use bmoe_gguf::reader::GgufModel;
use bmoe_gguf::value::MetaValue;
use std::path::Path;

/// Whether this binary was built with llama.cpp's Vulkan backend.
const BUILT_WITH_DEVICE: bool = cfg!(feature = "prefill-device");

const BUILD_HINT: &str = "install the Vulkan packages with `scripts/install-deps.sh --prefill-device`, \
     then build with `cargo build --release -p bmoe-engine --features prefill-device`; \
     `bmoe-cli --list-devices` shows what a build offers";

/// The most rows per token that an op on a host weight computes in the model at `path`, for
/// [`crate::ffi::keep_decodes_on_host`]: the largest attention head count when the model has
/// per-head Q/K norms (qwen3's `attn_q_norm`, a multiply over `head_dim × n_head × n_tokens`),
/// else 1. 0 when the header cannot be read: the load reports that.
pub(super) fn per_token_rows(path: &Path) -> u64 {
    let Ok(model) = GgufModel::open(path) else {
        return 0;
    };
    let per_head_norms = model.tensors().iter().any(|t| {
        let name = &t.info.name;
        name.ends_with("attn_q_norm.weight") || name.ends_with("attn_k_norm.weight")
    });
    if !per_head_norms {
        return 1;
    }
    let Some(arch) = model
        .get("general.architecture")
        .and_then(MetaValue::as_str)
    else {
        return 0;
    };
    match model.get(&format!("{arch}.attention.head_count")) {
        Some(MetaValue::Array(a)) => a.values.iter().filter_map(MetaValue::as_u64).max(),
        Some(v) => v.as_u64(),
        None => None,
    }
    .unwrap_or(0)
}

/// Checks `--prefill-device NAME` against the devices this build and machine offer.
///
/// # Errors
/// A build without the `prefill-device` feature, or a name no offloadable device has.
pub(super) fn check(name: &str) -> Result<(), ConfigError> {
    check_against(name, &backend_devices(), BUILT_WITH_DEVICE)
}

/// Refuses what `--prefill-device` has not been verified with: each of these reads or edits
/// graph state at a point the device split has already passed (the staged overlap waits at the
/// projection nodes, after ggml copied their experts; the routing edits and predictors rewrite
/// or read routing the device holds), or fetches rows outside the graph and has not been run
/// with the device (`--row-stream`), or has not been compared across backends (drafting's
/// verify decodes). A `decide` prefill runs on the device like a turn's (`BMOE_DECIDE`'s
/// `prefill_dev_*` keys).
///
/// # Errors
/// The first such flag the run has, by name.
pub(super) fn check_combination(cfg: &RunConfig) -> Result<(), ConfigError> {
    let overlap = cfg.stream.as_ref().is_some_and(|s| s.overlap.is_some());
    let prefetch = cfg.stream.as_ref().is_some_and(|s| s.prefetch > 0);
    let refused = [
        (overlap, "--overlap"),
        (prefetch, "--prefetch"),
        (
            cfg.routing.any(),
            "--drop-cold-experts / --expert-substitute / --route-replay",
        ),
        (
            cfg.predict.any(),
            "--predict-log / --predict-prefetch / --route-ahead",
        ),
        (cfg.row_stream.is_some(), "--row-stream"),
        // a verify decode's logits for every position have not been compared across backends
        (cfg.spec.name() != "off", "--ngram / --mtp"),
    ];
    match refused.into_iter().find(|r| r.0) {
        Some((_, flag)) => Err(ConfigError::new(
            "--prefill-device",
            format!("--prefill-device cannot be combined with {flag} yet"),
            "the device prefill is verified with serial --moe-stream loads and resident runs; \
             drop one of the two",
        )),
        None => Ok(()),
    }
}

fn check_against(name: &str, devices: &[BackendDevice], built: bool) -> Result<(), ConfigError> {
    const FLAG: &str = "--prefill-device";
    let offer: Vec<&str> = devices
        .iter()
        .filter(|d| d.offloadable())
        .map(|d| d.name.as_str())
        .collect();
    let offer_text = if offer.is_empty() {
        "none (CPU only)".to_string()
    } else {
        offer.join(", ")
    };
    if !built {
        return Err(ConfigError::new(
            FLAG,
            format!(
                "--prefill-device {name}: this bmoe-cli was built without the prefill-device feature \
                 (devices: {offer_text})"
            ),
            BUILD_HINT,
        ));
    }
    if !offer.contains(&name) {
        return Err(ConfigError::new(
            FLAG,
            format!("--prefill-device {name}: no such device (available: {offer_text})"),
            "pick a name from `bmoe-cli --list-devices` (the CPU itself is not a prefill device); \
             on a machine without a GPU, `scripts/install-deps.sh --prefill-device` installs lavapipe",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, kind: &'static str) -> BackendDevice {
        BackendDevice {
            name: name.into(),
            description: String::new(),
            free: 0,
            total: 0,
            kind,
        }
    }

    #[test]
    fn without_the_feature_the_error_names_the_build_and_the_devices() {
        let e = check_against("Vulkan0", &[dev("CPU", "cpu")], false).unwrap_err();
        assert!(
            e.message.contains("without the prefill-device feature"),
            "{e:?}"
        );
        assert!(e.message.contains("none (CPU only)"), "{e:?}");
        assert!(e.hint.contains("--features prefill-device"), "{e:?}");
    }

    #[test]
    fn an_unknown_name_lists_the_offloadable_devices_only() {
        let devs = [
            dev("CPU", "cpu"),
            dev("Vulkan0", "gpu"),
            dev("Vulkan1", "gpu"),
        ];
        let e = check_against("Vulkan7", &devs, true).unwrap_err();
        assert!(e.message.contains("no such device"), "{e:?}");
        assert!(e.message.contains("Vulkan0, Vulkan1"), "{e:?}");
        let e = check_against("CPU", &devs, true).unwrap_err();
        assert!(e.message.contains("no such device"), "{e:?}");
    }

    #[test]
    fn the_real_build_rejects_a_device_it_does_not_have() {
        let e = check("NoSuchDevice9").unwrap_err();
        assert_eq!(e.flag, "--prefill-device");
        let expect = if BUILT_WITH_DEVICE {
            "no such device"
        } else {
            "without the prefill-device feature"
        };
        assert!(e.message.contains(expect), "{e:?}");
    }

    fn rows_of(opts: &bmoe_gguf::synth::SynthOptions) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        bmoe_gguf::synth::write_model(opts, &path).unwrap();
        per_token_rows(&path)
    }

    #[test]
    fn per_head_norms_make_the_head_count_the_rows_per_token() {
        use bmoe_gguf::synth::{Preset, SynthOptions};
        let tiny = SynthOptions::preset(Preset::Tiny);
        assert_eq!(rows_of(&tiny), tiny.n_head);
        let wide = SynthOptions {
            n_head: 32,
            ..SynthOptions::preset(Preset::Tiny)
        };
        assert_eq!(rows_of(&wide), 32);
        // qwen2moe has no per-head norms: its widest host-weight op has one row per token
        assert_eq!(rows_of(&SynthOptions::preset(Preset::Qwen2MoeTiny)), 1);
        assert_eq!(per_token_rows(Path::new("/nonexistent/model.gguf")), 0);
    }
}
