//! `--list-devices` and `--prefill-device NAME` (issue #22): the prompt's graph on a ggml
//! backend device (Vulkan, tested on Mesa's lavapipe), the decode on the CPU.

use super::ConfigError;
use crate::ffi::{BackendDevice, backend_devices};

/// Whether this binary was built with llama.cpp's Vulkan backend.
const BUILT_WITH_DEVICE: bool = cfg!(feature = "prefill-device");

const BUILD_HINT: &str = "install the Vulkan packages with `scripts/install-deps.sh --prefill-device`, \
     then build with `cargo build --release -p bmoe-engine --features prefill-device`; \
     `bmoe-cli --list-devices` shows what a build offers";

/// Checks `--prefill-device NAME` against the devices this build and machine offer.
///
/// # Errors
/// A build without the `prefill-device` feature, a name no offloadable device has, and (for
/// now) any valid device: the offload itself is not built yet, so running would silently be a
/// CPU prefill.
pub(super) fn check(name: &str) -> Result<(), ConfigError> {
    check_against(name, &backend_devices(), BUILT_WITH_DEVICE)
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
    Err(ConfigError::new(
        FLAG,
        format!(
            "--prefill-device {name}: the device exists, but offloading the prompt's graph is not \
             built yet (issue #22)"
        ),
        "run without --prefill-device (the CPU prefill gives the same text)",
    ))
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
}
