//! Fuzz-style robustness: thousands of deterministic mutations (byte flips, deletions, duplicated
//! and truncated lines, swapped fields, hostile numbers) of real files go through every reader and
//! view. Each must return `Ok` or an error — never panic. (Stands in for cargo-fuzz targets; see
//! docs/analyze.md.)

use std::path::{Path, PathBuf};

use bmoe_analyze::route::{
    self, CellMode, MatrixOptions, Phase, RouteFilter, RouteOptions, RouteTrace, Span, View,
};
use bmoe_analyze::{decode, drop, metrics, replay};
use bmoe_stats::SplitMix64;

fn shared() -> Option<PathBuf> {
    let p = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    p.join("realdata").is_dir().then_some(p)
}

const HOSTILE: [&str; 12] = [
    "",
    "-1",
    "99999999999999999999",
    "nan",
    "inf",
    "-0",
    "1e308",
    "0x10",
    " 7 ",
    "\u{feff}3",
    "1_000",
    "4294967296",
];

fn mutate(lines: &[String], rng: &mut SplitMix64) -> String {
    let mut v: Vec<String> = lines.to_vec();
    for _ in 0..1 + rng.below(4) {
        if v.is_empty() {
            break;
        }
        let i = rng.below(v.len());
        match rng.below(7) {
            0 => {
                let cut = rng.below(v[i].len() + 1);
                let mut s = v[i].clone().into_bytes();
                s.truncate(cut);
                v[i] = String::from_utf8_lossy(&s).into_owned();
            }
            1 => {
                v.remove(i);
            }
            2 => {
                let dup = v[i].clone();
                v.insert(i, dup);
            }
            3 => {
                let mut f: Vec<String> = v[i].split(',').map(str::to_string).collect();
                let j = rng.below(f.len());
                f[j] = HOSTILE[rng.below(HOSTILE.len())].to_string();
                v[i] = f.join(",");
            }
            4 => {
                let mut f: Vec<String> = v[i].split(',').map(str::to_string).collect();
                let (a, b) = (rng.below(f.len()), rng.below(f.len()));
                f.swap(a, b);
                v[i] = f.join(",");
            }
            5 => {
                let mut s = v[i].clone().into_bytes();
                if !s.is_empty() {
                    let j = rng.below(s.len());
                    s[j] = (rng.next_u64() & 0x7f) as u8;
                }
                v[i] = String::from_utf8_lossy(&s).into_owned();
            }
            _ => {
                let extra = format!("{},{}", v[i], HOSTILE[rng.below(HOSTILE.len())]);
                v[i] = extra;
            }
        }
    }
    let mut s = v.join("\n");
    if rng.below(2) == 0 {
        s.push('\n');
    }
    s
}

fn head_lines(path: &Path, n: usize) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("read input")
        .lines()
        .take(n)
        .map(str::to_string)
        .collect()
}

fn exercise_route(text: &str) {
    let path = Path::new("fuzz.csv");
    for phase in [Phase::Decode, Phase::Prefill, Phase::All] {
        let filter = RouteFilter {
            turn: None,
            phase,
            all_columns: true,
        };
        let Ok(t) = RouteTrace::from_reader(path, text.as_bytes(), filter) else {
            continue;
        };
        for cells in [
            CellMode::Experts,
            CellMode::Weights,
            CellMode::Mb,
            CellMode::Hit,
        ] {
            let opt = RouteOptions {
                view: View::All,
                filter,
                matrix: MatrixOptions {
                    layers: Span::default(),
                    steps: Span::default(),
                    max_steps: 3,
                    cells,
                    width: 14,
                },
                top: -2,
            };
            let _ = route::render(&t, &opt);
        }
        let _ = drop::report(&t);
        let ropt = replay::ReplayOptions {
            budgets: vec![0.0, 3.0, 50.0],
            policies: replay::Policy::ALL.to_vec(),
            validate: Some(1.0),
        };
        if let Ok(rep) = replay::run(&t, &ropt) {
            let _ = rep.text();
            let _ = rep.curve_csv();
        }
    }
}

#[test]
fn route_readers_and_views_never_panic() {
    let Some(shared) = shared() else {
        eprintln!("SKIP robustness: shared/realdata not found");
        return;
    };
    // Preamble + header + the first prefill and decode rows of both real traces.
    for name in ["qwen.route.csv", "gemma.route.csv"] {
        let lines = head_lines(
            &shared.join("realdata/2026-07-15-route-trace").join(name),
            120,
        );
        let mut rng = SplitMix64::new(0x5eed);
        exercise_route(&lines.join("\n"));
        for _ in 0..400 {
            exercise_route(&mutate(&lines, &mut rng));
        }
    }
}

#[test]
fn compute_io_metrics_readers_never_panic() {
    let Some(shared) = shared() else {
        eprintln!("SKIP robustness: shared/realdata not found");
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let inputs = [
        ("synthetic/synthetic.compute.csv", 0),
        ("synthetic/synthetic.compute-layers.csv", 0),
        ("synthetic/synthetic.io.csv", 1),
        ("synthetic/synthetic.metrics-v2.csv", 2),
        ("2026-07-12/qwen_stream.csv", 2),
    ];
    let mut rng = SplitMix64::new(7);
    for (rel, kind) in inputs {
        let lines = head_lines(&shared.join("realdata").join(rel), 80);
        for i in 0..150 {
            let p = tmp.path().join(format!("m{i}.csv"));
            std::fs::write(&p, mutate(&lines, &mut rng)).expect("write");
            match kind {
                0 => {
                    let _ = decode::compute(
                        &p,
                        decode::ComputeOptions {
                            top: 5,
                            layers: true,
                        },
                    );
                }
                1 => {
                    let _ = decode::io(&p, true);
                }
                _ => {
                    if let Ok(Some(r)) = metrics::RunStats::read(&p, 0) {
                        let _ = metrics::runs_table(std::slice::from_ref(&r));
                        let _ = metrics::compare(&r, &r);
                    }
                }
            }
        }
    }
}
