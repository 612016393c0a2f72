//! Metrics CSV reader (v0/v1/v2 by column name, `# summary` trailers): rows or an error.
#![no_main]

use bmoe_telemetry::metrics::MetricsReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = MetricsReader::new(data, "fuzz.metrics.csv") else {
        return;
    };
    let _ = (r.run_info().is_instrumented(), r.run_info().is_stochastic());
    for row in r.by_ref() {
        let Ok(row) = row else { break };
        let _ = row.to_f64_array();
    }
    for s in r.summaries() {
        let _ = (s.to_line(), s.get_f64("tokens"), s.get_u64("tokens"));
    }
    let _ = r.truncated();
});
