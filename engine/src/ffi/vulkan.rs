//! Which Vulkan devices ggml may use (`prefill-device` builds only).
//!
//! ggml-vulkan picks, by default, the machine's dedicated GPUs, else its first non-CPU device,
//! and never a CPU implementation: on a machine without a GPU, Mesa's lavapipe (a conformant
//! Vulkan device on the CPU, how the feature is tested here) would not be offered. When the
//! loader reports CPU devices only, the engine names them all in `GGML_VK_VISIBLE_DEVICES`
//! before ggml's registry starts. A machine with a GPU, or a user who set the variable, keeps
//! ggml's own choice.

use std::ffi::{c_char, c_void};

/// `GGML_VK_VISIBLE_DEVICES`: ggml-vulkan's device selection.
const VISIBLE_ENV: &str = "GGML_VK_VISIBLE_DEVICES";
/// `GGML_OP_OFFLOAD_MIN_BATCH`: the batch size from which ggml-vulkan takes an op on a host
/// weight (read once, when its registry starts).
const MIN_BATCH_ENV: &str = "GGML_OP_OFFLOAD_MIN_BATCH";
/// ggml-vulkan's default of [`MIN_BATCH_ENV`].
const DEFAULT_MIN_BATCH: u64 = 32;
/// `VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO`.
const INSTANCE_CREATE_INFO: u32 = 1;
/// `VK_PHYSICAL_DEVICE_TYPE_CPU`.
const DEVICE_TYPE_CPU: u32 = 4;

#[repr(C)]
struct InstanceCreateInfo {
    s_type: u32,
    p_next: *const c_void,
    flags: u32,
    p_application_info: *const c_void,
    enabled_layer_count: u32,
    pp_enabled_layer_names: *const *const c_char,
    enabled_extension_count: u32,
    pp_enabled_extension_names: *const *const c_char,
}

/// `VkPhysicalDeviceProperties` is 824 bytes; only its leading fields are read (`deviceType`
/// is the fifth `u32`), the rest is room for the driver to write.
#[repr(C, align(8))]
struct Properties {
    head: [u32; 5],
    rest: [u8; 2048],
}

#[link(name = "vulkan")]
unsafe extern "C" {
    fn vkCreateInstance(
        info: *const InstanceCreateInfo,
        allocator: *const c_void,
        instance: *mut *mut c_void,
    ) -> i32;
    fn vkEnumeratePhysicalDevices(
        instance: *mut c_void,
        count: *mut u32,
        devices: *mut *mut c_void,
    ) -> i32;
    fn vkGetPhysicalDeviceProperties(device: *mut c_void, props: *mut Properties);
    fn vkDestroyInstance(instance: *mut c_void, allocator: *const c_void);
}

/// The Vulkan type of every physical device the loader reports, in its order (empty when
/// Vulkan is unavailable).
fn device_types() -> Vec<u32> {
    let info = InstanceCreateInfo {
        s_type: INSTANCE_CREATE_INFO,
        p_next: std::ptr::null(),
        flags: 0,
        p_application_info: std::ptr::null(),
        enabled_layer_count: 0,
        pp_enabled_layer_names: std::ptr::null(),
        enabled_extension_count: 0,
        pp_enabled_extension_names: std::ptr::null(),
    };
    let mut instance = std::ptr::null_mut();
    // SAFETY: info is a valid VkInstanceCreateInfo (no layers, extensions or app info, which
    // Vulkan allows); the handle is written on success only.
    if unsafe { vkCreateInstance(&info, std::ptr::null(), &mut instance) } != 0
        || instance.is_null()
    {
        return Vec::new();
    }
    let mut count = 0u32;
    let mut types = Vec::new();
    // SAFETY: a live instance; a null array asks for the count only.
    if unsafe { vkEnumeratePhysicalDevices(instance, &mut count, std::ptr::null_mut()) } == 0 {
        let mut devices = vec![std::ptr::null_mut(); count as usize];
        // SAFETY: devices has room for count handles; count is updated to those written.
        let rc = unsafe { vkEnumeratePhysicalDevices(instance, &mut count, devices.as_mut_ptr()) };
        if rc >= 0 {
            devices.truncate(count as usize);
            for d in devices {
                let mut p = Properties {
                    head: [0; 5],
                    rest: [0; 2048],
                };
                // SAFETY: d is a physical device of the live instance; p is larger than
                // VkPhysicalDeviceProperties and suitably aligned.
                unsafe { vkGetPhysicalDeviceProperties(d, &mut p) };
                types.push(p.head[4]);
            }
        }
    }
    // SAFETY: the instance was created above and no object of it outlives this call.
    unsafe { vkDestroyInstance(instance, std::ptr::null()) };
    types
}

/// Before ggml's registry starts: on a machine whose Vulkan devices are all CPU devices,
/// makes them visible to ggml (see the module docs).
pub(super) fn expose_cpu_devices() {
    if std::env::var_os(VISIBLE_ENV).is_some() {
        return;
    }
    let types = device_types();
    if types.is_empty() || types.iter().any(|&t| t != DEVICE_TYPE_CPU) {
        return;
    }
    let all: Vec<String> = (0..types.len()).map(|i| i.to_string()).collect();
    // SAFETY: called once from init_backend's Once, before llama.cpp or ggml start a thread
    // or read the environment (the registry reads this variable when it starts, right after).
    unsafe { std::env::set_var(VISIBLE_ENV, all.join(",")) };
}

/// The offload threshold for a model whose host-weight ops compute at most `rows` rows per
/// token: ggml-vulkan's default, or one more than `rows` when a one-token batch would reach the
/// default. ggml-vulkan measures a matmul's batch in tokens but an elementwise op's in rows, and
/// a per-head norm has `n_head` rows per token; past the threshold a prompt batch still offloads
/// its matmuls from `rows + 1` tokens on.
fn offload_min_batch(rows: u64) -> u64 {
    if rows >= DEFAULT_MIN_BATCH {
        rows + 1
    } else {
        DEFAULT_MIN_BATCH
    }
}

/// Before ggml's registry starts: sets [`MIN_BATCH_ENV`] to [`offload_min_batch`] when that
/// differs from ggml's default, unless the user set it.
pub(super) fn raise_offload_threshold(rows: u64) {
    let min = offload_min_batch(rows);
    if min == DEFAULT_MIN_BATCH || std::env::var_os(MIN_BATCH_ENV).is_some() {
        return;
    }
    // SAFETY: called once from init_backend's Once, before llama.cpp or ggml start a thread or
    // read the environment (the registry reads this variable when it starts, right after).
    unsafe { std::env::set_var(MIN_BATCH_ENV, min.to_string()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_rises_past_a_one_token_batchs_rows_only() {
        assert_eq!(offload_min_batch(0), DEFAULT_MIN_BATCH);
        assert_eq!(offload_min_batch(4), DEFAULT_MIN_BATCH);
        assert_eq!(offload_min_batch(31), DEFAULT_MIN_BATCH);
        assert_eq!(offload_min_batch(32), 33);
        assert_eq!(offload_min_batch(64), 65);
    }
}
