//! `--list-devices` and `--prefill-device` (issue #22) through the real binary: the listing is
//! what ggml's backend registry of this build holds, and a prefill device the build cannot use
//! is a flag error (exit 2) that names what is available, before any model is opened.

use crate::gates::{cli, models, run};

#[test]
fn list_devices_prints_the_cpu_and_exits_zero() {
    let out = cli()
        .arg("--list-devices")
        .output()
        .expect("spawn bmoe-cli");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("name\ttype\ttotal_mib\tfree_mib\tdescription")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 5), "{text}");
    assert!(
        rows.iter().any(|r| r[0] == "CPU" && r[1] == "cpu"),
        "{text}"
    );
    let vulkan = rows.iter().any(|r| r[0].starts_with("Vulkan"));
    assert_eq!(vulkan, cfg!(feature = "prefill-device"), "{text}");
}

#[test]
fn an_unusable_prefill_device_is_a_flag_error_with_a_hint() {
    let m = models();
    let out = run(&m.q8, &["--prefill-device", "NoSuchDevice9"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: --prefill-device NoSuchDevice9"),
        "{err}"
    );
    assert!(err.contains("\nhint: "), "{err}");
    let why = if cfg!(feature = "prefill-device") {
        "no such device"
    } else {
        "without the prefill-device feature"
    };
    assert!(err.contains(why), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("BMOE_DONE"));
}
