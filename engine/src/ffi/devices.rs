//! The ggml backend devices this build and machine offer (`--list-devices`, `--prefill-device`).
//!
//! Without the `prefill-device` feature llama.cpp is built CPU-only and the list holds the CPU
//! alone; with it, ggml's Vulkan backend adds one entry per Vulkan device (on a machine without
//! a GPU: Mesa's lavapipe).

use super::{init_backend, ll};
use std::ffi::CStr;

/// One ggml backend device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendDevice {
    /// ggml's short name (`CPU`, `Vulkan0`, …): what `--prefill-device` takes.
    pub name: String,
    /// The driver's description (`llvmpipe (LLVM 15.0.6, 256 bits)`, …).
    pub description: String,
    /// Free memory the device reports, bytes.
    pub free: usize,
    /// Total memory the device reports, bytes.
    pub total: usize,
    /// `cpu`, `gpu`, `igpu`, `accel` or `meta`.
    pub kind: &'static str,
}

impl BackendDevice {
    /// Whether a prompt's graph can be offloaded to it (any device but the CPU itself).
    pub fn offloadable(&self) -> bool {
        self.kind != "cpu"
    }
}

fn text(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ggml returns NUL-terminated strings owned by the registry, valid for the process.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Every device the ggml backend registry knows, in its order.
pub fn backend_devices() -> Vec<BackendDevice> {
    init_backend();
    // SAFETY: the registry is filled at first use and never shrinks; indices < count are valid.
    let n = unsafe { ll::ggml_backend_dev_count() };
    (0..n)
        .filter_map(|i| {
            // SAFETY: i < ggml_backend_dev_count(); the handle lives as long as the process.
            let dev = unsafe { ll::ggml_backend_dev_get(i) };
            if dev.is_null() {
                return None;
            }
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: dev is a live device handle; the out-pointers are valid locals.
            let (name, description, kind) = unsafe {
                ll::ggml_backend_dev_memory(dev, &mut free, &mut total);
                (
                    text(ll::ggml_backend_dev_name(dev)),
                    text(ll::ggml_backend_dev_description(dev)),
                    ll::ggml_backend_dev_type(dev),
                )
            };
            let kind = match kind {
                ll::GGML_BACKEND_DEVICE_TYPE_CPU => "cpu",
                ll::GGML_BACKEND_DEVICE_TYPE_GPU => "gpu",
                ll::GGML_BACKEND_DEVICE_TYPE_IGPU => "igpu",
                ll::GGML_BACKEND_DEVICE_TYPE_ACCEL => "accel",
                _ => "meta",
            };
            Some(BackendDevice {
                name,
                description,
                free,
                total,
                kind,
            })
        })
        .collect()
}

/// `--list-devices`' output: one line per device, tab-separated
/// `name  type  total_mib  free_mib  description`, after a header line.
pub fn devices_listing(devices: &[BackendDevice]) -> String {
    let mut s = String::from("name\ttype\ttotal_mib\tfree_mib\tdescription\n");
    for d in devices {
        s.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            d.name,
            d.kind,
            d.total >> 20,
            d.free >> 20,
            d.description
        ));
    }
    s
}
