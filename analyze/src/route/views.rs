//! The route-analyze views (everything but `matrix`, which lives in its own module).
//!
//! Each view appends its text to a `String`, starting with an empty line and a `=== title ===`
//! line, exactly as the reference prints it.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::json;

use super::{Cells, RouteTrace};
use crate::pyfmt::{f, fw};
use crate::table::{Table, num};

const MIB: f64 = 1_048_576.0;

/// A map from expert id to a value: dense when ids are small, hashed otherwise.
pub(crate) enum ExpertMap<V: Copy> {
    Dense(Vec<Option<V>>),
    Sparse(HashMap<u32, V>),
}

impl<V: Copy> ExpertMap<V> {
    pub(crate) fn new(max_id: u32) -> Self {
        if max_id < (1 << 20) {
            Self::Dense(vec![None; max_id as usize + 1])
        } else {
            Self::Sparse(HashMap::new())
        }
    }
    pub(crate) fn get(&self, id: u32) -> Option<V> {
        match self {
            Self::Dense(v) => v.get(id as usize).copied().flatten(),
            Self::Sparse(m) => m.get(&id).copied(),
        }
    }
    pub(crate) fn insert(&mut self, id: u32, value: V) {
        match self {
            Self::Dense(v) => {
                if let Some(slot) = v.get_mut(id as usize) {
                    *slot = Some(value);
                }
            }
            Self::Sparse(m) => {
                m.insert(id, value);
            }
        }
    }
}

fn max_expert(t: &RouteTrace) -> u32 {
    t.rows.expert.iter().copied().max().unwrap_or(0)
}

/// Position lists per layer, stored flat: for each layer (ascending) the expert ids of each
/// position (its cells by step), ordered by (slot, expert).
pub struct Seq {
    ids: Vec<u32>,
    start: Vec<usize>,
    layer_start: Vec<usize>,
}

impl Seq {
    /// No layers (for view sets that do not need positions).
    pub fn empty() -> Self {
        Self {
            ids: Vec::new(),
            start: vec![0],
            layer_start: vec![0],
        }
    }

    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.layer_start.len() - 1
    }

    /// The positions of layer index `li`.
    pub fn layer(&self, li: usize) -> Vec<&[u32]> {
        (self.layer_start[li]..self.layer_start[li + 1])
            .map(|p| &self.ids[self.start[p]..self.start[p + 1]])
            .collect()
    }

    /// Number of positions of layer index `li`.
    pub fn len(&self, li: usize) -> usize {
        self.layer_start[li + 1] - self.layer_start[li]
    }
}

pub(crate) fn seq_by_layer(t: &RouteTrace, cells: &Cells) -> Seq {
    let mut ids = Vec::with_capacity(t.rows.len());
    let mut start = vec![0usize];
    let mut layer_start = vec![0usize];
    let mut tmp: Vec<(u16, u32)> = Vec::new();
    for list in &cells.by_layer {
        for &c in list {
            tmp.clear();
            tmp.extend(
                cells
                    .rows(c)
                    .iter()
                    .map(|&r| (t.rows.slot[r as usize], t.rows.expert[r as usize])),
            );
            tmp.sort_unstable();
            ids.extend(tmp.iter().map(|&(_, e)| e));
            start.push(ids.len());
        }
        layer_start.push(start.len() - 1);
    }
    Seq {
        ids,
        start,
        layer_start,
    }
}

/// `hot`: the most activated experts per layer.
pub fn hot(out: &mut String, t: &RouteTrace, cells: &Cells, top: i64) {
    let _ = writeln!(
        out,
        "\n=== hot experts per layer (top {top}) - 'coverage' = share of this layer's activations ==="
    );
    out.push_str("layer  unique coverage  expert:activations\n");
    let max_id = max_expert(t);
    for (li, &layer) in cells.layers.iter().enumerate() {
        let counts = hot_counts(t, cells, li, max_id);
        let total: u64 = counts.iter().map(|c| c.1).sum();
        let unique = counts.len();
        let shown = py_slice_len(counts.len(), top);
        let top_sum: u64 = counts[..shown].iter().map(|c| c.1).sum();
        let coverage = if total > 0 {
            100.0 * top_sum as f64 / total as f64
        } else {
            0.0
        };
        let list: Vec<String> = counts[..shown]
            .iter()
            .map(|(e, n, _)| format!("{e}:{n}"))
            .collect();
        let _ = writeln!(
            out,
            "{layer:5} {unique:7} {}%  {}",
            fw(coverage, 7, 1),
            list.join(" ")
        );
    }
}

/// `hot` as tables: `hot_layers` (layer, unique, coverage_pct of the top N) and `hot_experts`
/// (layer, rank, expert, activations, share_pct), the same figures as the text.
#[must_use]
pub fn hot_tables(t: &RouteTrace, cells: &Cells, top: i64) -> Vec<Table> {
    let mut layers = Table::new("hot_layers", &["layer", "unique", "coverage_pct"]);
    let mut experts = Table::new(
        "hot_experts",
        &["layer", "rank", "expert", "activations", "share_pct"],
    );
    let max_id = max_expert(t);
    for (li, &layer) in cells.layers.iter().enumerate() {
        let counts = hot_counts(t, cells, li, max_id);
        let total = counts.iter().map(|c| c.1).sum::<u64>().max(1) as f64;
        let shown = py_slice_len(counts.len(), top);
        let top_sum: u64 = counts[..shown].iter().map(|c| c.1).sum();
        layers.push(vec![
            json!(layer),
            json!(counts.len()),
            num(100.0 * top_sum as f64 / total),
        ]);
        for (rank, (e, n, _)) in counts[..shown].iter().enumerate() {
            experts.push(vec![
                json!(layer),
                json!(rank + 1),
                json!(e),
                json!(n),
                num(100.0 * *n as f64 / total),
            ]);
        }
    }
    vec![layers, experts]
}

/// (expert, activations, first row) of layer `li`, most activated first; ties rank by first
/// appearance in the file.
fn hot_counts(t: &RouteTrace, cells: &Cells, li: usize, max_id: u32) -> Vec<(u32, u64, u32)> {
    {
        let mut index: ExpertMap<u32> = ExpertMap::new(max_id);
        let mut counts: Vec<(u32, u64, u32)> = Vec::new();
        for &c in &cells.by_layer[li] {
            for &r in cells.rows(c) {
                let e = t.rows.expert[r as usize];
                match index.get(e) {
                    Some(i) => {
                        let entry = &mut counts[i as usize];
                        entry.1 += 1;
                        entry.2 = entry.2.min(r);
                    }
                    None => {
                        index.insert(e, counts.len() as u32);
                        counts.push((e, 1, r));
                    }
                }
            }
        }
        counts.sort_by_key(|c| (std::cmp::Reverse(c.1), c.2));
        counts
    }
}

/// Length of Python's `xs[:n]` for a list of `len` items.
pub(crate) fn py_slice_len(len: usize, n: i64) -> usize {
    if n >= 0 {
        (n as usize).min(len)
    } else {
        len.saturating_sub(n.unsigned_abs() as usize)
    }
}

/// `reuse`: distance in positions between consecutive uses of an expert at a layer.
pub fn reuse(out: &mut String, t: &RouteTrace, seq: &Seq, layers: &[u16]) {
    out.push_str("\n=== reuse distance per (layer, expert), in steps ===\n");
    out.push_str("layer  n_reuse      p50      p90      max never_2nd\n");
    let max_id = max_expert(t);
    for (li, &layer) in layers.iter().enumerate().take(seq.n_layers()) {
        let (dists, never_2nd) = reuse_stats(seq, li, max_id);
        if dists.is_empty() {
            let _ = writeln!(
                out,
                "{layer:5} {:8} {:>8} {:>8} {:>8} {never_2nd:9}",
                0, "-", "-", "-"
            );
        } else {
            let n = dists.len();
            let p = |q: f64| dists[((q * n as f64).floor() as usize).min(n - 1)];
            let _ = writeln!(
                out,
                "{layer:5} {n:8} {:8} {:8} {:8} {never_2nd:9}",
                p(0.5),
                p(0.9),
                dists[n - 1]
            );
        }
    }
    out.push_str(
        "\nnever_2nd = experts this layer routed exactly once (pure cache pollution under LRU).\n",
    );
}

/// Sorted reuse distances of layer `li` and how many of its experts were routed exactly once.
fn reuse_stats(seq: &Seq, li: usize, max_id: u32) -> (Vec<usize>, usize) {
    let positions = seq.layer(li);
    let mut last: ExpertMap<(usize, u32)> = ExpertMap::new(max_id);
    let mut dists: Vec<usize> = Vec::new();
    let mut seen_ids: Vec<u32> = Vec::new();
    for (idx, ids) in positions.iter().enumerate() {
        for &e in ids.iter() {
            match last.get(e) {
                Some((p, uses)) => {
                    dists.push(idx - p);
                    last.insert(e, (idx, uses + 1));
                }
                None => {
                    seen_ids.push(e);
                    last.insert(e, (idx, 1));
                }
            }
        }
    }
    let never_2nd = seen_ids
        .iter()
        .filter(|&&e| last.get(e).is_some_and(|(_, u)| u == 1))
        .count();
    dists.sort_unstable();
    (dists, never_2nd)
}

/// `reuse` as a table `reuse` (layer, n_reuse, p50, p90, max, never_2nd): the text's figures,
/// `null` percentiles for a layer without reuses.
#[must_use]
pub fn reuse_table(t: &RouteTrace, seq: &Seq, layers: &[u16]) -> Table {
    let mut table = Table::new(
        "reuse",
        &["layer", "n_reuse", "p50", "p90", "max", "never_2nd"],
    );
    let max_id = max_expert(t);
    for (li, &layer) in layers.iter().enumerate().take(seq.n_layers()) {
        let (dists, never_2nd) = reuse_stats(seq, li, max_id);
        let n = dists.len();
        let p = |q: f64| {
            if n == 0 {
                serde_json::Value::Null
            } else {
                json!(dists[((q * n as f64).floor() as usize).min(n - 1)])
            }
        };
        table.push(vec![
            json!(layer),
            json!(n),
            p(0.5),
            p(0.9),
            dists.last().map_or(serde_json::Value::Null, |m| json!(m)),
            json!(never_2nd),
        ]);
    }
    table
}

fn intersection_len(a: &[u32], b: &[u32]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                n += 1;
                i += 1;
                j += 1;
            }
        }
    }
    n
}

const LAGS: [usize; 4] = [1, 2, 4, 8];

/// Mean of `vals`, 0 for none (the reference's rule for a lag with no pairs).
fn mean_or_zero(vals: &[f64]) -> f64 {
    if vals.is_empty() {
        0.0
    } else {
        vals.iter().sum::<f64>() / vals.len() as f64
    }
}

/// `overlap`'s figures: per layer and lag (1, 2, 4, 8) the mean % of a position's experts also
/// routed `lag` positions earlier and the number of position pairs compared; then pooled.
pub(crate) struct Overlap {
    /// The lags, in column order.
    pub lags: [usize; 4],
    /// (layer, per lag (mean %, pairs)).
    pub layers: Vec<(u16, [(f64, usize); 4])>,
    /// Per lag over every layer's pairs.
    pub pooled: [(f64, usize); 4],
}

pub(crate) fn overlap_stats(seq: &Seq, layers: &[u16]) -> Overlap {
    let mut pooled: Vec<Vec<f64>> = vec![Vec::new(); LAGS.len()];
    let mut rows = Vec::new();
    for (li, &layer) in layers.iter().enumerate().take(seq.n_layers()) {
        let positions = seq.layer(li);
        let mut flat: Vec<u32> = Vec::with_capacity(positions.iter().map(|p| p.len()).sum());
        let mut bounds = Vec::with_capacity(positions.len() + 1);
        bounds.push(0usize);
        for ids in &positions {
            let from = flat.len();
            flat.extend_from_slice(ids);
            flat[from..].sort_unstable();
            let mut w = from;
            for r in from..flat.len() {
                if w == from || flat[w - 1] != flat[r] {
                    flat[w] = flat[r];
                    w += 1;
                }
            }
            flat.truncate(w);
            bounds.push(flat.len());
        }
        let sets: Vec<&[u32]> = bounds.windows(2).map(|b| &flat[b[0]..b[1]]).collect();
        let mut per = [(0.0, 0usize); 4];
        for (gi, &g) in LAGS.iter().enumerate() {
            let mut vals = Vec::new();
            for i in g..sets.len() {
                if sets[i].is_empty() {
                    continue;
                }
                vals.push(
                    100.0 * intersection_len(sets[i], sets[i - g]) as f64 / sets[i].len() as f64,
                );
            }
            per[gi] = (mean_or_zero(&vals), vals.len());
            pooled[gi].extend(vals);
        }
        rows.push((layer, per));
    }
    let mut all = [(0.0, 0usize); 4];
    for (slot, vals) in all.iter_mut().zip(&pooled) {
        *slot = (mean_or_zero(vals), vals.len());
    }
    Overlap {
        lags: LAGS,
        layers: rows,
        pooled: all,
    }
}

/// `overlap`: share of a position's experts also routed `g` positions earlier.
pub fn overlap(out: &mut String, seq: &Seq, layers: &[u16]) {
    let st = overlap_stats(seq, layers);
    out.push_str("\n=== routing overlap with earlier steps (mean % of the top-k shared) ===\n");
    out.push_str("layer");
    for g in st.lags {
        let _ = write!(out, " {:>9}", format!("lag {g}"));
    }
    out.push('\n');
    for (layer, per) in &st.layers {
        let _ = write!(out, "{layer:5}");
        for (m, _) in per {
            let _ = write!(out, " {}%", fw(*m, 8, 1));
        }
        out.push('\n');
    }
    out.push_str("  ALL");
    for (m, _) in &st.pooled {
        let _ = write!(out, " {}%", fw(*m, 8, 1));
    }
    out.push('\n');
}

/// `workset`'s figures: cumulative distinct experts per layer at the marks (positions 1, 2, 5,
/// … and the longest layer's length), and the union's bytes at that length.
pub(crate) struct Workset {
    /// Positions of the longest layer.
    pub longest: usize,
    /// The positions reported (`s1`, `s2`, …).
    pub marks: Vec<usize>,
    /// (layer, distinct experts after each mark; 0 past the layer's own length).
    pub layers: Vec<(u16, Vec<u64>)>,
    /// Σ over layers of expert_bytes × distinct experts at `longest`.
    pub union_bytes: f64,
}

/// `None` when no layer has a position.
pub(crate) fn workset_stats(t: &RouteTrace, seq: &Seq, layers: &[u16]) -> Option<Workset> {
    let longest = (0..seq.n_layers()).map(|li| seq.len(li)).max().unwrap_or(0);
    if longest == 0 {
        return None;
    }
    let mut marks: Vec<usize> = [1, 2, 5, 10, 25, 50, 100, 200, 500, 1000]
        .into_iter()
        .filter(|&m| m <= longest)
        .collect();
    if marks.last() != Some(&longest) {
        marks.push(longest);
    }
    let max_id = max_expert(t);
    let mut union_bytes = 0.0f64;
    let mut rows = Vec::new();
    for (li, &layer) in layers.iter().enumerate().take(seq.n_layers()) {
        let positions = seq.layer(li);
        let mut seen: ExpertMap<()> = ExpertMap::new(max_id);
        let mut curve = Vec::with_capacity(positions.len());
        let mut distinct = 0u64;
        for ids in &positions {
            for &e in ids.iter() {
                if seen.get(e).is_none() {
                    seen.insert(e, ());
                    distinct += 1;
                }
            }
            curve.push(distinct);
        }
        let at = |m: usize| if m <= curve.len() { curve[m - 1] } else { 0 };
        rows.push((layer, marks.iter().map(|&m| at(m)).collect()));
        let eb = t
            .meta
            .expert_bytes
            .get(&i64::from(layer))
            .copied()
            .unwrap_or(0);
        union_bytes += eb as f64 * at(longest) as f64;
    }
    Some(Workset {
        longest,
        marks,
        layers: rows,
        union_bytes,
    })
}

/// `workset`: cumulative distinct experts per layer after 1, 2, 5, … positions.
pub fn workset(out: &mut String, t: &RouteTrace, seq: &Seq, layers: &[u16]) {
    let Some(st) = workset_stats(t, seq, layers) else {
        return;
    };
    out.push_str("\n=== cumulative unique experts (working-set growth) ===\n");
    let _ = write!(out, "layer {:>7}", "of");
    for m in &st.marks {
        let _ = write!(out, " {:>7}", format!("s{m}"));
    }
    out.push('\n');
    for (layer, values) in &st.layers {
        let _ = write!(out, "{layer:5} {:7}", t.meta.n_expert);
        for v in values {
            let _ = write!(out, " {v:7}");
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\nAt step {} the union of routed experts is {} MiB of expert weights across all layers.",
        st.longest,
        f(st.union_bytes / MIB, 1)
    );
    out.push_str("Compare that to the cache budget: a working set that fits is a cache that stops missing.\n");
}

/// `cache`'s figures: routings by residency (miss, hit, prefetch hit) per layer and overall,
/// and prefetch hits by router slot.
pub(crate) struct CacheStats {
    /// (layer, [miss, hit, prefetch]).
    pub layers: Vec<(u16, [u64; 3])>,
    /// Over every layer.
    pub all: [u64; 3],
    /// Prefetch hits (residency 2) per router slot.
    pub by_slot: std::collections::BTreeMap<u16, u64>,
}

pub(crate) fn cache_stats(t: &RouteTrace, cells: &Cells) -> CacheStats {
    let mut all = [0u64; 3];
    let mut by_slot: std::collections::BTreeMap<u16, u64> = std::collections::BTreeMap::new();
    let mut layers = Vec::with_capacity(cells.layers.len());
    for (li, &layer) in cells.layers.iter().enumerate() {
        let mut c = [0u64; 3];
        for &cell in &cells.by_layer[li] {
            for &r in cells.rows(cell) {
                let res = t.rows.residency[r as usize] as usize;
                c[res.min(2)] += 1;
                if res == 2 {
                    *by_slot.entry(t.rows.slot[r as usize]).or_default() += 1;
                }
            }
        }
        for i in 0..3 {
            all[i] += c[i];
        }
        layers.push((layer, c));
    }
    CacheStats {
        layers,
        all,
        by_slot,
    }
}

/// Shares in % of `c` (miss, hit, prefetch) as the text prints them (÷ max(total, 1)).
pub(crate) fn cache_shares(c: [u64; 3]) -> [f64; 3] {
    let d = c.iter().sum::<u64>().max(1) as f64;
    c.map(|v| 100.0 * v as f64 / d)
}

/// `cache`: miss/hit/prefetch shares per layer, from the trace's own residency column.
pub fn cache(out: &mut String, t: &RouteTrace, cells: &Cells) {
    let st = cache_stats(t, cells);
    out.push_str("\n=== cache outcome per layer (share of routings) ===\n");
    let _ = writeln!(
        out,
        "layer {:>9} {:>9} {:>9} {:>10}",
        "miss", "hit", "prefetch", "routings"
    );
    let row_line = |out: &mut String, label: String, c: [u64; 3]| {
        let n: u64 = c.iter().sum();
        let s = cache_shares(c);
        let _ = writeln!(
            out,
            "{label} {}% {}% {}% {n:10}",
            fw(s[0], 8, 1),
            fw(s[1], 8, 1),
            fw(s[2], 8, 1)
        );
    };
    for (layer, c) in &st.layers {
        row_line(out, format!("{layer:5}"), *c);
    }
    row_line(out, "  ALL".to_string(), st.all);
    if st.by_slot.is_empty() {
        out.push_str("\nno prefetch hits recorded (--prefetch off, or every guess missed).\n");
    } else {
        let parts: Vec<String> = st
            .by_slot
            .iter()
            .map(|(s, n)| format!("s{s}:{n}"))
            .collect();
        let _ = writeln!(
            out,
            "\nprefetch hits by router slot (s0 = top choice): {}",
            parts.join(" ")
        );
    }
}

/// `entropy`'s figures: the routing width `k` and its maximum entropy, and per layer the mean
/// entropy (bits) and mean top-1 weight share (%) over its cells with usable weights.
pub(crate) struct EntropyStats {
    /// n_expert_used, or the largest cell when the preamble lacks it.
    pub k: i64,
    /// log2(k) (0 for k ≤ 1).
    pub max_bits: f64,
    /// (layer, mean entropy bits, mean top-1 share %, cells measured).
    pub layers: Vec<(u16, f64, f64, usize)>,
}

/// `None` when no cell has a usable weight (every weight NaN, or sums ≤ 0).
pub(crate) fn entropy_stats(t: &RouteTrace, cells: &Cells) -> Option<EntropyStats> {
    let mut per_layer: std::collections::BTreeMap<u16, (Vec<f64>, Vec<f64>)> =
        std::collections::BTreeMap::new();
    let mut largest_cell = 0usize;
    for c in 0..cells.len() as u32 {
        let rows = cells.rows(c);
        largest_cell = largest_cell.max(rows.len());
        let w: Vec<f64> = rows
            .iter()
            .map(|&r| t.rows.weight[r as usize])
            .filter(|x| !x.is_nan())
            .collect();
        if w.is_empty() {
            continue;
        }
        let s: f64 = w.iter().sum();
        if s <= 0.0 {
            continue;
        }
        let ps: Vec<f64> = w.iter().map(|x| x / s).collect();
        let h = -ps
            .iter()
            .filter(|&&p| p > 0.0)
            .map(|&p| p * p.log2())
            .sum::<f64>();
        let top1 = 100.0 * ps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e = per_layer.entry(cells.layer[c as usize]).or_default();
        e.0.push(h);
        e.1.push(top1);
    }
    if per_layer.is_empty() {
        return None;
    }
    let k = if t.meta.n_expert_used > 0 {
        t.meta.n_expert_used as f64
    } else {
        largest_cell as f64
    };
    Some(EntropyStats {
        k: k as i64,
        max_bits: if k > 1.0 { k.log2() } else { 0.0 },
        layers: per_layer
            .iter()
            .map(|(&layer, (hs, tops))| {
                (
                    layer,
                    hs.iter().sum::<f64>() / hs.len() as f64,
                    tops.iter().sum::<f64>() / tops.len() as f64,
                    hs.len(),
                )
            })
            .collect(),
    })
}

/// `entropy`: routing entropy (bits) and top-1 weight share per layer.
pub fn entropy(out: &mut String, t: &RouteTrace, cells: &Cells) {
    let Some(st) = entropy_stats(t, cells) else {
        out.push_str("\n=== routing entropy ===\n");
        out.push_str(
            "no router weights in this trace (every weight is nan), nothing to measure.\n",
        );
        return;
    };
    let _ = writeln!(
        out,
        "\n=== routing entropy per layer (bits; max = {} at k={}) and top-1 weight share ===",
        f(st.max_bits, 2),
        st.k
    );
    out.push_str("layer   entropy    top-1 share\n");
    for (layer, mh, mt, _) in &st.layers {
        let _ = writeln!(out, "{layer:5} {} {}%", fw(*mh, 9, 2), fw(*mt, 13, 1));
    }
}

/// `bytes`' figures: expert bytes read per layer and in total, and the preamble's sizes.
pub(crate) struct BytesStats {
    /// Σ expert_bytes over the kept rows.
    pub total: u64,
    /// Distinct steps.
    pub steps: usize,
    /// (layer, bytes read, expert bytes, dense bytes) — sizes from the preamble, 0 if absent.
    pub layers: Vec<(u16, u64, u64, u64)>,
    /// Σ dense_bytes of the preamble.
    pub dense_total: u64,
}

pub(crate) fn bytes_stats(t: &RouteTrace, cells: &Cells) -> BytesStats {
    let mut total = 0u64;
    let mut layers = Vec::with_capacity(cells.layers.len());
    for (li, list) in cells.by_layer.iter().enumerate() {
        let mut read = 0u64;
        for &c in list {
            for &r in cells.rows(c) {
                read += t.rows.expert_bytes[r as usize];
            }
        }
        total += read;
        let l = i64::from(cells.layers[li]);
        layers.push((
            cells.layers[li],
            read,
            t.meta.expert_bytes.get(&l).copied().unwrap_or(0),
            t.meta.dense_bytes.get(&l).copied().unwrap_or(0),
        ));
    }
    BytesStats {
        total,
        steps: cells.steps.len(),
        layers,
        dense_total: t.meta.dense_bytes.values().sum(),
    }
}

/// `bytes`: expert bytes read per layer and per step.
pub fn bytes(out: &mut String, t: &RouteTrace, cells: &Cells) {
    let st = bytes_stats(t, cells);
    out.push_str("\n=== expert bytes read ===\n");
    let _ = writeln!(
        out,
        "total {} MiB over {} steps ({} MiB/step average)",
        f(st.total as f64 / MIB, 1),
        st.steps,
        f(st.total as f64 / MIB / st.steps.max(1) as f64, 2)
    );
    let _ = writeln!(
        out,
        "\nlayer {:>12} {:>12} {:>12}",
        "read MiB", "expert MiB", "dense MiB"
    );
    for (layer, read, eb, db) in &st.layers {
        let _ = writeln!(
            out,
            "{layer:5} {} {} {}",
            fw(*read as f64 / MIB, 12, 1),
            fw(*eb as f64 / MIB, 12, 2),
            fw(*db as f64 / MIB, 12, 1)
        );
    }
    let _ = writeln!(
        out,
        "\ndense total {} MiB - static: it is mmap-resident, never streamed, so this is what a",
        f(st.dense_total as f64 / MIB, 1)
    );
    out.push_str(
        "cold layer costs to page in, not a per-step measurement. See docs/telemetry.md.\n",
    );
}

/// `sanity`'s figures.
pub(crate) struct Sanity {
    /// Kept rows.
    pub rows: usize,
    /// (step, layer) cells.
    pub cells: usize,
    /// Distinct steps.
    pub steps: usize,
    /// Distinct MoE layers.
    pub layers: usize,
    /// n_expert_used of the preamble (0 = unknown: no cell is counted as wrong).
    pub k: i64,
    /// Cells whose routing count is not `k`.
    pub cells_not_k: usize,
    /// Fewest and most steps (cells) of a layer.
    pub steps_per_layer: (usize, usize),
    /// When layers differ: the layer with the fewest steps (ties: its first cell earliest).
    pub fewest_layer: Option<u16>,
    /// Smallest and largest router-weight sum of a cell without NaN weights.
    pub weight_sum: Option<(f64, f64)>,
}

impl Sanity {
    /// Whether the weight sums look normalised (largest within 0.05 of 1).
    pub fn normalized(&self) -> Option<bool> {
        self.weight_sum.map(|(_, hi)| (hi - 1.0).abs() < 0.05)
    }
}

pub(crate) fn sanity_stats(t: &RouteTrace, cells: &Cells) -> Sanity {
    let k = t.meta.n_expert_used;
    let cells_not_k = if k == 0 {
        0
    } else {
        (0..cells.len() as u32)
            .filter(|&c| cells.rows(c).len() as i64 != k)
            .count()
    };
    let counts: Vec<usize> = cells.by_layer.iter().map(Vec::len).collect();
    let min = counts.iter().copied().min().unwrap_or(0);
    let max = counts.iter().copied().max().unwrap_or(0);
    let fewest_layer = if counts.windows(2).any(|w| w[0] != w[1]) {
        // Ties: the layer whose first cell appeared earliest in the file.
        Some(
            (0..counts.len())
                .filter(|&li| counts[li] == min)
                .min_by_key(|&li| cells.by_layer[li].iter().copied().min().unwrap_or(u32::MAX))
                .map_or(0, |li| cells.layers[li]),
        )
    } else {
        None
    };
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    let mut any = false;
    for c in 0..cells.len() as u32 {
        let rows = cells.rows(c);
        if rows.iter().any(|&r| t.rows.weight[r as usize].is_nan()) {
            continue;
        }
        let s: f64 = rows.iter().map(|&r| t.rows.weight[r as usize]).sum();
        lo = lo.min(s);
        hi = hi.max(s);
        any = true;
    }
    Sanity {
        rows: t.rows.len(),
        cells: cells.len(),
        steps: cells.steps.len(),
        layers: cells.layers.len(),
        k,
        cells_not_k,
        steps_per_layer: (min, max),
        fewest_layer,
        weight_sum: any.then_some((lo, hi)),
    }
}

/// `sanity`: row/cell counts, cells with an unexpected size, uneven steps per layer, weight sums.
pub fn sanity(out: &mut String, t: &RouteTrace, cells: &Cells) {
    let st = sanity_stats(t, cells);
    out.push_str("\n=== sanity ===\n");
    let _ = writeln!(out, "rows              {}", st.rows);
    let _ = writeln!(
        out,
        "cells (step,layer) {} over {} steps x {} MoE layers",
        st.cells, st.steps, st.layers
    );
    let bad = st.cells_not_k;
    let marker = if bad > 0 { "<-- expected 0" } else { "" };
    let _ = writeln!(out, "cells not k={:<4}  {bad} {marker}", st.k.to_string());
    if let Some(fewest) = st.fewest_layer {
        let (min, max) = st.steps_per_layer;
        let _ = writeln!(
            out,
            "steps per layer   uneven: layer {fewest} has {min}, the rest up to {max}"
        );
        out.push_str(
            "                  expected in prefill - llama.cpp gathers only the output token\n",
        );
        out.push_str("                  before the LAST layer's FFN. See docs/telemetry.md.\n");
    }
    match (st.weight_sum, st.normalized()) {
        (Some((lo, hi)), Some(normalized)) => {
            let verdict = if normalized {
                "normalized: ~1.0 expected"
            } else {
                "does not normalize: ~1.0 expected"
            };
            let _ = writeln!(
                out,
                "weight sum/cell   min {}  max {} ({verdict})",
                f(lo, 3),
                f(hi, 3)
            );
        }
        _ => out.push_str("weight sum/cell   n/a (every cell has a nan weight)\n"),
    }
}
