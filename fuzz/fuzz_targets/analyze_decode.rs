//! bmoe-analyze `compute` and `io` (decode-analyze) on any bytes: a report or an error. The
//! entry points take a path, so the input is written to a per-process temporary file.
#![no_main]

use bmoe_analyze::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("bmoe-fuzz-decode-{}.csv", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    for layers in [false, true] {
        if let Ok(r) = decode::compute(&path, decode::ComputeOptions { top: 3, layers }) {
            let _ = bmoe_analyze::table::to_csv(&r.tables);
        }
    }
    for adjacent in [false, true] {
        if let Ok(r) = decode::io(&path, adjacent) {
            let _ = bmoe_analyze::table::to_json(r.meta, &r.tables);
        }
    }
});
