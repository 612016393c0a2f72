//! `route --format json|csv`: every view's figures as tables with stable column names.
//!
//! Each builder reads the same computation the text view prints (`views::*_stats`,
//! `matrix::selection`), so a table row and a text line never disagree; numbers are unrounded
//! and percentages are in % (0–100). Table and column names are documented in docs/analyze.md
//! ("Machine-readable output"); changing one is a breaking change for consumers.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::matrix::{MatrixOptions, cell_at, selection};
use super::views::{
    Seq, bytes_stats, cache_shares, cache_stats, entropy_stats, overlap_stats, sanity_stats,
    workset_stats,
};
use super::{Cells, RouteTrace};
use crate::table::{Table, num};

const MIB: f64 = 1_048_576.0;

/// `overlap` (layer, lag, mean_pct, pairs) and `overlap_all` (lag, mean_pct, pairs): the mean
/// share of a position's distinct experts also routed `lag` positions earlier.
#[must_use]
pub fn overlap(seq: &Seq, layers: &[u16]) -> Vec<Table> {
    let st = overlap_stats(seq, layers);
    let mut per = Table::new("overlap", &["layer", "lag", "mean_pct", "pairs"]);
    for (layer, lags) in &st.layers {
        for (g, (m, n)) in st.lags.iter().zip(lags) {
            per.push(vec![json!(layer), json!(g), num(*m), json!(n)]);
        }
    }
    let mut all = Table::new("overlap_all", &["lag", "mean_pct", "pairs"]);
    for (g, (m, n)) in st.lags.iter().zip(&st.pooled) {
        all.push(vec![json!(g), num(*m), json!(n)]);
    }
    vec![per, all]
}

/// `workset` (layer, step, unique_experts) at the text's marks, and `workset_union` (step,
/// union_mib): the union's expert MiB at the longest layer's last position. Both empty when no
/// layer has a position.
#[must_use]
pub fn workset(t: &RouteTrace, seq: &Seq, layers: &[u16]) -> Vec<Table> {
    let mut per = Table::new("workset", &["layer", "step", "unique_experts"]);
    let mut union = Table::new("workset_union", &["step", "union_mib"]);
    if let Some(st) = workset_stats(t, seq, layers) {
        for (layer, values) in &st.layers {
            for (m, v) in st.marks.iter().zip(values) {
                per.push(vec![json!(layer), json!(m), json!(v)]);
            }
        }
        union.push(vec![json!(st.longest), num(st.union_bytes / MIB)]);
    }
    vec![per, union]
}

fn cache_row(prefix: Option<u16>, c: [u64; 3]) -> Vec<Value> {
    let s = cache_shares(c);
    let mut row: Vec<Value> = prefix.map(|l| json!(l)).into_iter().collect();
    row.extend([
        json!(c[0]),
        json!(c[1]),
        json!(c[2]),
        json!(c.iter().sum::<u64>()),
        num(s[0]),
        num(s[1]),
        num(s[2]),
    ]);
    row
}

/// `cache` (layer, miss, hit, prefetch, routings, miss_pct, hit_pct, prefetch_pct),
/// `cache_all` (the same without layer) and `prefetch_by_slot` (slot, hits).
#[must_use]
pub fn cache(t: &RouteTrace, cells: &Cells) -> Vec<Table> {
    const COLS: [&str; 7] = [
        "miss",
        "hit",
        "prefetch",
        "routings",
        "miss_pct",
        "hit_pct",
        "prefetch_pct",
    ];
    let st = cache_stats(t, cells);
    let mut with_layer = vec!["layer"];
    with_layer.extend(COLS);
    let mut per = Table::new("cache", &with_layer);
    for (layer, c) in &st.layers {
        per.push(cache_row(Some(*layer), *c));
    }
    let mut all = Table::new("cache_all", &COLS);
    all.push(cache_row(None, st.all));
    let mut slots = Table::new("prefetch_by_slot", &["slot", "hits"]);
    for (slot, n) in &st.by_slot {
        slots.push(vec![json!(slot), json!(n)]);
    }
    vec![per, all, slots]
}

/// `entropy` (layer, entropy_bits, top1_share_pct, cells) and `entropy_max` (k, max_bits); both
/// empty when the trace has no usable router weights.
#[must_use]
pub fn entropy(t: &RouteTrace, cells: &Cells) -> Vec<Table> {
    let mut per = Table::new(
        "entropy",
        &["layer", "entropy_bits", "top1_share_pct", "cells"],
    );
    let mut max = Table::new("entropy_max", &["k", "max_bits"]);
    if let Some(st) = entropy_stats(t, cells) {
        for (layer, h, top1, n) in &st.layers {
            per.push(vec![json!(layer), num(*h), num(*top1), json!(n)]);
        }
        max.push(vec![json!(st.k), num(st.max_bits)]);
    }
    vec![per, max]
}

/// `bytes` (layer, read_bytes, read_mib, expert_mib, dense_mib) and `bytes_total`
/// (read_bytes, read_mib, steps, mib_per_step, dense_mib).
#[must_use]
pub fn bytes(t: &RouteTrace, cells: &Cells) -> Vec<Table> {
    let st = bytes_stats(t, cells);
    let mut per = Table::new(
        "bytes",
        &["layer", "read_bytes", "read_mib", "expert_mib", "dense_mib"],
    );
    for (layer, read, eb, db) in &st.layers {
        per.push(vec![
            json!(layer),
            json!(read),
            num(*read as f64 / MIB),
            num(*eb as f64 / MIB),
            num(*db as f64 / MIB),
        ]);
    }
    let mut total = Table::new(
        "bytes_total",
        &[
            "read_bytes",
            "read_mib",
            "steps",
            "mib_per_step",
            "dense_mib",
        ],
    );
    total.push(vec![
        json!(st.total),
        num(st.total as f64 / MIB),
        json!(st.steps),
        num(st.total as f64 / MIB / st.steps.max(1) as f64),
        num(st.dense_total as f64 / MIB),
    ]);
    vec![per, total]
}

/// `sanity`: one row (rows, cells, steps, moe_layers, k, cells_not_k, steps_per_layer_min,
/// steps_per_layer_max, fewest_steps_layer, weight_sum_min, weight_sum_max, weights_normalized);
/// `null` for fewest_steps_layer when every layer has the same steps, and for the weight
/// figures when every cell has a NaN weight.
#[must_use]
pub fn sanity(t: &RouteTrace, cells: &Cells) -> Vec<Table> {
    let st = sanity_stats(t, cells);
    let mut table = Table::new(
        "sanity",
        &[
            "rows",
            "cells",
            "steps",
            "moe_layers",
            "k",
            "cells_not_k",
            "steps_per_layer_min",
            "steps_per_layer_max",
            "fewest_steps_layer",
            "weight_sum_min",
            "weight_sum_max",
            "weights_normalized",
        ],
    );
    let (lo, hi) = st
        .weight_sum
        .map_or((Value::Null, Value::Null), |(lo, hi)| (num(lo), num(hi)));
    table.push(vec![
        json!(st.rows),
        json!(st.cells),
        json!(st.steps),
        json!(st.layers),
        json!(st.k),
        json!(st.cells_not_k),
        json!(st.steps_per_layer.0),
        json!(st.steps_per_layer.1),
        json!(st.fewest_layer),
        lo,
        hi,
        json!(st.normalized()),
    ]);
    vec![table]
}

/// `matrix`: one row per routing of the selected (step, layer) cells, steps ascending, layers
/// ascending, slot order — (step, layer, slot, expert, weight, residency, expert_bytes,
/// also_prev). `weight` is `null` for NaN; `also_prev` is the text's `*`: the expert was also
/// routed at this layer in the previous selected step. No rows when the selection is empty.
#[must_use]
pub fn matrix(t: &RouteTrace, cells: &Cells, opt: &MatrixOptions) -> Table {
    let mut table = Table::new(
        "matrix",
        &[
            "step",
            "layer",
            "slot",
            "expert",
            "weight",
            "residency",
            "expert_bytes",
            "also_prev",
        ],
    );
    let Some((layers, steps)) = selection(t, cells, opt) else {
        return table;
    };
    let mut prev: Vec<HashSet<u32>> = vec![HashSet::new(); layers.len()];
    for &s in &steps {
        for (pi, &(li, layer)) in layers.iter().enumerate() {
            let rows: &[u32] = cell_at(cells, li, s).map_or(&[], |c| cells.rows(c));
            for &r in rows {
                let r = r as usize;
                let e = t.rows.expert[r];
                table.push(vec![
                    json!(s),
                    json!(layer),
                    json!(t.rows.slot[r]),
                    json!(e),
                    num(t.rows.weight[r]),
                    json!(t.rows.residency[r]),
                    json!(t.rows.expert_bytes[r]),
                    json!(prev[pi].contains(&e)),
                ]);
            }
            prev[pi] = rows.iter().map(|&r| t.rows.expert[r as usize]).collect();
        }
    }
    table
}
