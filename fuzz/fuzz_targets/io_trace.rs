//! Io trace reader (`TraceReader<IoRow>`): rows or an error.
#![no_main]

use bmoe_telemetry::trace::{IoRow, TraceReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = TraceReader::<_, IoRow>::new(data, "fuzz.io.csv") else {
        return;
    };
    let _ = r.info();
    for row in r.by_ref() {
        if row.is_err() {
            break;
        }
    }
    let _ = r.truncated();
});
