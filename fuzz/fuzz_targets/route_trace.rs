//! Route trace reader (`bmoe_telemetry::trace::TraceReader<RouteRow>`): any bytes give rows or an
//! error, never a panic; rows before an error are well-formed.
#![no_main]

use bmoe_telemetry::trace::{RouteRow, TraceReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = TraceReader::<_, RouteRow>::new(data, "fuzz.route.csv") else {
        return;
    };
    let _ = (r.info(), r.header(), r.has_column("dropped"));
    for row in r.by_ref() {
        let Ok(row) = row else { break };
        // What a reader returns must write back as one CSV line.
        let mut line = String::new();
        bmoe_telemetry::trace::TraceRow::write_csv(&row, &mut line);
        assert!(!line.contains('\n'));
    }
    let _ = r.truncated();
});
