//! bmoe-analyze `metrics`: per-run statistics with bootstrap CIs, the runs table and the A/B
//! comparison, on any bytes. The input goes through a per-process temporary file.
#![no_main]

use bmoe_analyze::metrics;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("bmoe-fuzz-metrics-{}.csv", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    for trim in [0, 2] {
        if let Ok(Some(r)) = metrics::RunStats::read(&path, trim) {
            let _ = metrics::runs_table(std::slice::from_ref(&r));
            let _ = metrics::runs_json(std::slice::from_ref(&r));
            let _ = metrics::compare(&r, &r);
            let _ = r.token_ms_ci();
        }
    }
});
