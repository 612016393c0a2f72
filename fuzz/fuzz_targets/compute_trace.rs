//! Compute trace reader (`TraceReader<ComputeRow>`, quoted node names): rows or an error.
#![no_main]

use bmoe_telemetry::trace::{ComputeRow, TraceReader, TraceRow};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = TraceReader::<_, ComputeRow>::new(data, "fuzz.compute.csv") else {
        return;
    };
    for row in r.by_ref() {
        let Ok(row) = row else { break };
        // Written back and read again, a row is unchanged (quoting round-trips).
        let mut text = String::from("turn,phase,step,seq,layer,op,name,wall_ns,majflt\n");
        row.write_csv(&mut text);
        text.push('\n');
        if !row.name.contains(['\n', '\r']) && !row.op.contains(['\n', '\r']) {
            let back: Vec<ComputeRow> = TraceReader::<_, ComputeRow>::new(text.as_bytes(), "rt")
                .expect("own header")
                .collect::<Result<_, _>>()
                .expect("own row");
            assert_eq!(back.len(), 1);
            assert_eq!(back[0].wall_ns, row.wall_ns);
            assert_eq!(back[0].name.trim(), row.name.trim());
        }
    }
    let _ = r.truncated();
});
