//! What `belady` bounds in `bmoe-analyze replay` (docs/analyze.md "What belady bounds"):
//! under the cache model of `lru`, `lfu` and `random` (one byte budget, the batch being staged
//! protected) it is the optimum for equal-sized experts, checked against an exhaustive search;
//! the layer policies keep every layer's last batch whatever the budget, so they are compared
//! with belady given the bytes they really held.

use crate::common::shared_path;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use bmoe_analyze::replay::{self, Policy, ReplayOptions, ReplayReport};
use bmoe_analyze::route::{Phase, RouteFilter, RouteTrace};

const MIB: u64 = 1_048_576;

/// A set of (layer, expert) keys.
type Keys = BTreeSet<(usize, u32)>;

/// A decode-only route trace: `steps[s][l]` = the experts layer `l` routes to at step `s`.
fn trace_text(n_layer: usize, steps: &[Vec<Vec<u32>>]) -> String {
    let mut t = format!(
        "# route_trace v1\n# model=/m/toy.gguf arch=toy n_layer={n_layer} n_expert=16 n_expert_used=2\n"
    );
    for l in 0..n_layer {
        t.push_str(&format!("# layer={l} expert_bytes={MIB} dense_bytes=0\n"));
    }
    t.push_str("turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n");
    for (s, layers) in steps.iter().enumerate() {
        for (l, experts) in layers.iter().enumerate() {
            for (slot, e) in experts.iter().enumerate() {
                t.push_str(&format!("0,1,{s},{l},{slot},{e},0.5,0,{MIB}\n"));
            }
        }
    }
    t
}

fn read(text: &str) -> RouteTrace {
    RouteTrace::from_reader(
        Path::new("toy.csv"),
        text.as_bytes(),
        RouteFilter {
            turn: None,
            phase: Phase::All,
            all_columns: true,
        },
    )
    .expect("toy trace parses")
}

fn sweep(t: &RouteTrace, budgets: &[f64]) -> ReplayReport {
    replay::run(
        t,
        &ReplayOptions {
            budgets: budgets.to_vec(),
            policies: Policy::ALL.to_vec(),
            validate: None,
        },
    )
    .expect("replay runs")
}

fn cell(rep: &ReplayReport, budget: f64, p: Policy) -> replay::ReplayResult {
    rep.curve
        .iter()
        .find(|c| c.budget_mib == budget && c.policy == p)
        .map(|c| c.result)
        .expect("cell present")
}

/// The most decode hits any eviction schedule can reach with `slots` equal-sized experts held
/// between batches (the batch being staged always stays), by exhaustive search.
fn optimum(batches: &[Keys], slots: usize) -> u64 {
    fn go(
        batches: &[Keys],
        i: usize,
        held: Keys,
        slots: usize,
        memo: &mut HashMap<(usize, Keys), u64>,
    ) -> u64 {
        if i == batches.len() {
            return 0;
        }
        if let Some(&v) = memo.get(&(i, held.clone())) {
            return v;
        }
        let batch = &batches[i];
        let hits = batch.intersection(&held).count() as u64;
        let others: Vec<(usize, u32)> = held.difference(batch).copied().collect();
        let keep_n = slots.saturating_sub(batch.len()).min(others.len());
        let mut best = 0;
        // Every subset of the other residents of size keep_n.
        for mask in 0u32..(1 << others.len()) {
            if mask.count_ones() as usize != keep_n {
                continue;
            }
            let mut next = batch.clone();
            for (j, k) in others.iter().enumerate() {
                if mask & (1 << j) != 0 {
                    next.insert(*k);
                }
            }
            best = best.max(go(batches, i + 1, next, slots, memo));
        }
        memo.insert((i, held), hits + best);
        hits + best
    }
    go(batches, 0, BTreeSet::new(), slots, &mut HashMap::new())
}

/// The `load_layer` batches of a decode-only toy trace: per step, per layer, its distinct keys.
fn batches(steps: &[Vec<Vec<u32>>]) -> Vec<Keys> {
    steps
        .iter()
        .flat_map(|layers| {
            layers
                .iter()
                .enumerate()
                .map(|(l, ex)| ex.iter().map(|&e| (l, e)).collect())
        })
        .collect()
}

#[test]
fn belady_equals_the_hand_worked_optimum() {
    // One layer alternating {1,2} and {3,4}; 3 slots. By hand: each batch after the first
    // finds exactly one of its two experts (the third slot keeps one of the other pair),
    // so the best is 3 hits of 8 decode lookups = 37.5 %.
    let steps: Vec<Vec<Vec<u32>>> = [[1, 2], [3, 4], [1, 2], [3, 4], [1, 2]]
        .iter()
        .map(|e| vec![e.to_vec()])
        .collect();
    let rep = sweep(&read(&trace_text(1, &steps)), &[2.0, 3.0, 4.0]);
    let b = cell(&rep, 3.0, Policy::Belady);
    assert_eq!((b.dec_hits, b.dec_lookups), (3, 10));
    assert_eq!(optimum(&batches(&steps), 3), 3);
    // 2 slots hold only the batch: nothing survives; 4 slots hold both pairs: 6 hits.
    assert_eq!(cell(&rep, 2.0, Policy::Belady).dec_hits, 0);
    assert_eq!(cell(&rep, 4.0, Policy::Belady).dec_hits, 6);
}

#[test]
fn belady_is_the_exhaustive_optimum_and_beats_the_global_policies() {
    // Deterministic pseudo-random toy traces (an LCG, no timing): 2 layers, 6 experts each,
    // top-2, 7 steps; every slot count from 0 to 8.
    let mut seed = 0x2545_f491_u64;
    let mut next = move |n: u32| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) % u64::from(n)) as u32
    };
    for _case in 0..12 {
        let steps: Vec<Vec<Vec<u32>>> = (0..7)
            .map(|_| {
                (0..2)
                    .map(|_| {
                        let a = next(6);
                        let b = (a + 1 + next(5)) % 6;
                        vec![a, b]
                    })
                    .collect()
            })
            .collect();
        let budgets: Vec<f64> = (0..=8).map(f64::from).collect();
        let rep = sweep(&read(&trace_text(2, &steps)), &budgets);
        let bs = batches(&steps);
        for &budget in &budgets {
            let best = optimum(&bs, budget as usize);
            let bel = cell(&rep, budget, Policy::Belady);
            assert_eq!(
                bel.dec_hits, best,
                "belady at {budget} slots, trace {steps:?}"
            );
            for p in [Policy::Lru, Policy::Lfu, Policy::Random] {
                let r = cell(&rep, budget, p);
                assert!(r.dec_hits <= best, "{} beat the optimum", p.name());
                assert!(r.peak_bytes <= (budget as u64).max(2) * MIB);
            }
        }
    }
}

#[test]
fn layer_policies_hold_every_layers_last_batch_beyond_the_budget() {
    // Layer 0 always routes {1,2}, layer 1 always {3,4}: at budget 0 the layer policies keep
    // each layer's last batch (4 MiB held) and hit 8 of 12; belady at 0 MiB hits nothing, and
    // given the 4 MiB the layer policy held it hits the same 8.
    let steps: Vec<Vec<Vec<u32>>> = (0..3).map(|_| vec![vec![1, 2], vec![3, 4]]).collect();
    let rep = sweep(&read(&trace_text(2, &steps)), &[0.0, 4.0]);
    let layer = cell(&rep, 0.0, Policy::Layer);
    assert_eq!((layer.dec_hits, layer.dec_lookups), (8, 12));
    assert_eq!(layer.peak_bytes, 4 * MIB);
    assert_eq!(cell(&rep, 0.0, Policy::Belady).dec_hits, 0);
    assert_eq!(cell(&rep, 0.0, Policy::Belady).peak_bytes, 2 * MIB);
    assert_eq!(cell(&rep, 4.0, Policy::Belady).dec_hits, 8);
}

/// On the real phone traces: belady ≥ lru, lfu, random at every default budget; every layer
/// policy cell that beats belady held more bytes than the budget, and belady given one token
/// cycle (T, what a layer policy holds in decode) is at least as good.
#[test]
fn belady_bounds_every_policy_given_the_bytes_it_holds_on_real_traces() {
    for name in ["qwen", "gemma"] {
        let Some(path) = shared_path(&format!("realdata/2026-07-15-route-trace/{name}.route.csv"))
        else {
            continue;
        };
        let t = RouteTrace::read(
            &path,
            RouteFilter {
                turn: None,
                phase: Phase::All,
                all_columns: true,
            },
        )
        .expect("real trace reads");
        let budgets =
            replay::parse_budgets("0,250,500,750,1000,1500,2000,3000,4000,6000").expect("budgets");
        let rep = sweep(&t, &budgets);
        let mut layer_over = 0;
        for &budget in &budgets {
            let bel = cell(&rep, budget, Policy::Belady);
            for p in [Policy::Lru, Policy::Lfu, Policy::Random] {
                let r = cell(&rep, budget, p);
                assert!(
                    r.dec_hits <= bel.dec_hits,
                    "{name} @ {budget} MiB: {} {} > belady {}",
                    p.name(),
                    r.dec_hit_pct(),
                    bel.dec_hit_pct()
                );
            }
            for p in [Policy::Layer, Policy::LayerLfu] {
                let r = cell(&rep, budget, p);
                if r.dec_hits <= bel.dec_hits {
                    continue;
                }
                layer_over += 1;
                let held = r.peak_bytes as f64 / MIB as f64;
                assert!(
                    held > budget,
                    "{name} @ {budget}: {} beat belady within the budget",
                    p.name()
                );
                // In decode a layer policy holds one batch per layer, T in all (its peak is
                // higher: every layer's prefill batch stays until that layer's first decode
                // step). Belady with T MiB does at least as well.
                let cycle = rep.cycle_mib;
                let same = sweep(&t, &[cycle]);
                let fair = cell(&same, cycle, Policy::Belady);
                assert!(
                    fair.dec_hits >= r.dec_hits,
                    "{name}: {} @ {budget} MiB hit {:.1} %; belady @ T = {cycle:.0} MiB {:.1} %",
                    p.name(),
                    r.dec_hit_pct(),
                    fair.dec_hit_pct()
                );
            }
        }
        // The audit's case: below one token cycle the layer policies sit above belady.
        assert!(
            layer_over >= 4,
            "{name}: {layer_over} layer cells above belady"
        );
    }
}
