//! bmoe-analyze on a route trace: the reader, every route view in every matrix cell mode, the
//! cache replay with every policy (Belady included) and the dropping replay. `Ok` or an
//! error, never a panic. The first input byte picks the phase, the top-N and a budget.
#![no_main]

use std::path::Path;

use bmoe_analyze::route::{
    self, CellMode, MatrixOptions, Phase, RouteFilter, RouteOptions, RouteTrace, Span, View,
};
use bmoe_analyze::{drop, replay};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knob, text)) = data.split_first() else {
        return;
    };
    let phase = [Phase::Decode, Phase::Prefill, Phase::All][usize::from(knob % 3)];
    let filter = RouteFilter {
        turn: (knob & 0x80 != 0).then_some(0),
        phase,
        all_columns: true,
    };
    let Ok(t) = RouteTrace::from_reader(Path::new("fuzz.route.csv"), text, filter) else {
        return;
    };
    let cells = [
        CellMode::Experts,
        CellMode::Weights,
        CellMode::Mb,
        CellMode::Hit,
    ][usize::from((knob >> 2) % 4)];
    let opt = |view: View| RouteOptions {
        view,
        filter,
        matrix: MatrixOptions {
            layers: Span::default(),
            steps: Span::default(),
            max_steps: 4,
            cells,
            width: 14,
        },
        top: i64::from(knob >> 4) - 2,
    };
    let _ = route::render(&t, &opt(View::All));
    let _ = route::tables(&t, &opt(View::Hot));
    let _ = route::tables(&t, &opt(View::Reuse));
    let _ = drop::report(&t);
    let ropt = replay::ReplayOptions {
        budgets: vec![0.0, 0.004, f64::from(knob) * 0.5],
        policies: replay::Policy::ALL.to_vec(),
        validate: Some(0.01),
    };
    if let Ok(rep) = replay::run(&t, &ropt) {
        let _ = (rep.text(), rep.curve_csv(), rep.json());
    }
});
