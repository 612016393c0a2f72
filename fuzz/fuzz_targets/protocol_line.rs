//! One line of the engine's stdout/stdin protocol and the other line-level parsers: `BMOE_*`
//! records, session requests, end-of-run summary lines, key=value lines, sidecars, perf
//! reports and the file-kind sniffer.
#![no_main]

use bmoe_telemetry::{detect, kv, protocol, summary};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = detect::detect_text(&text);
    let _ = kv::parse_sidecar(&text);
    let _ = summary::PerfReport::parse(&text);
    for line in text.lines() {
        let _ = protocol::parse_line(line);
        let _ = protocol::Request::parse(line);
        let _ = summary::parse_summary_line(line);
        let kv = kv::parse_kv_line(line);
        // A parsed key=value line formats back (or refuses a value it cannot write).
        let _ = kv::format_kv_line(kv.pairs.iter());
    }
});
