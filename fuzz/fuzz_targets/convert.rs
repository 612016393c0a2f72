//! `bmoe-analyze convert` on any bytes, to Parquet and to Arrow IPC: a file or an error, and
//! after an error no output (and no temporary file) is left behind.
#![no_main]

use bmoe_analyze::convert::{self, Target};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("bmoe-fuzz-convert-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let input = dir.join("in.csv");
    if std::fs::write(&input, data).is_err() {
        return;
    }
    for target in [Target::Parquet, Target::Arrow] {
        let out = dir.join(format!("out.{}", target.extension()));
        let _ = std::fs::remove_file(&out);
        match convert::convert(&input, &out, target) {
            Ok(s) => assert!(out.exists() && s.output_bytes > 0),
            Err(_) => assert!(!out.exists()),
        }
    }
    let stray = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        })
        .unwrap_or(false);
    assert!(!stray, "a temporary file was left behind");
});
