//! route-replay: offline cache-policy simulator over a route trace.
//!
//! Replays the engine's `load_layer` call sequence (one batch per layer in prefill, one per
//! (step, layer) in decode) against a byte-budgeted expert cache under several eviction policies.
//! The victim rules are exactly the reference's; the data structures are not: every policy keeps
//! an ordered index of its unprotected residents, so an eviction costs O(log n) instead of a scan
//! of the whole cache.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use crate::mt19937::PyRandom;
use crate::pyfmt::f;
use crate::route::RouteTrace;
use crate::table::{Table, num};
use crate::{AnalyzeError, Result};
use serde_json::json;

/// An eviction policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Evict the resident whose next use is furthest in the future (Belady's MIN rule, with the
    /// current batch protected; ties → earliest admitted).
    Belady,
    /// Least recently used.
    Lru,
    /// Least frequently used (frequency survives eviction), ties by recency.
    Lfu,
    /// Uniformly random victim (CPython `Random(1234)`, reproduces the reference).
    Random,
    /// Per-layer partitions (budget / n_layer each), LRU inside a layer.
    Layer,
    /// Per-layer partitions, LFU inside a layer.
    LayerLfu,
}

impl Policy {
    /// Every policy, in the reference's default order.
    pub const ALL: [Policy; 6] = [
        Policy::Belady,
        Policy::Lru,
        Policy::Lfu,
        Policy::Random,
        Policy::Layer,
        Policy::LayerLfu,
    ];

    /// The CLI name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Belady => "belady",
            Self::Lru => "lru",
            Self::Lfu => "lfu",
            Self::Random => "random",
            Self::Layer => "layer",
            Self::LayerLfu => "layerlfu",
        }
    }

    /// Parse a comma list (empty parts ignored); unknown names are an error listing them.
    pub fn parse_list(spec: &str) -> Result<Vec<Policy>> {
        let mut out = Vec::new();
        let mut unknown = Vec::new();
        for name in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match Self::ALL.iter().find(|p| p.name() == name) {
                Some(&p) => out.push(p),
                None => unknown.push(name.to_string()),
            }
        }
        if !unknown.is_empty() {
            let known: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "unknown policy {}; known: {}",
                    unknown.join(", "),
                    known.join(", ")
                ),
                hint: "pass --policies as a comma list of the known names".into(),
            });
        }
        Ok(out)
    }

    fn per_layer(self) -> bool {
        matches!(self, Self::Layer | Self::LayerLfu)
    }
}

/// Parse `--budgets` (MiB, comma list, empty parts ignored; empty → the default sweep).
pub fn parse_budgets(spec: &str) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let v: f64 = part.parse().map_err(|_| AnalyzeError::Invalid {
            message: format!("--budgets: {part:?} is not a number of MiB"),
            hint: "write --budgets like 250,500,1000".into(),
        })?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "--budgets: {part:?} must be a finite, non-negative number of MiB"
                ),
                hint: "write --budgets like 250,500,1000".into(),
            });
        }
        out.push(v);
    }
    if out.is_empty() {
        out = vec![
            250.0, 500.0, 750.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 6000.0,
        ];
    }
    Ok(out)
}

/// The `load_layer` call sequence of a trace.
#[derive(Debug, Clone)]
pub struct Batches {
    /// Dense key id of every lookup, batch after batch.
    keys: Vec<u32>,
    /// Start of each batch in `keys` (plus the end).
    start: Vec<usize>,
    /// Layer index (into `layers`) of each batch.
    batch_layer: Vec<u32>,
    /// Number of leading prefill batches.
    pub n_prefill: usize,
    /// Distinct layers with rows, ascending.
    pub layers: Vec<u16>,
    /// Layer index of each key.
    key_layer: Vec<u32>,
    /// Next batch (strictly later) using the key of each lookup; `u32::MAX` = never.
    next_use: Vec<u32>,
}

impl Batches {
    /// Build the batches of `t` (rows of every phase; turn already filtered).
    #[must_use]
    pub fn build(t: &RouteTrace) -> Self {
        let rows = &t.rows;
        let mut layers: Vec<u16> = rows.layer.clone();
        layers.sort_unstable();
        layers.dedup();
        let layer_idx = |l: u16| layers.binary_search(&l).unwrap_or(0) as u32;
        let n_ids = u64::from(rows.expert.iter().copied().max().unwrap_or(0)) + 1;
        let mut pre: Vec<u32> = (0..rows.len() as u32)
            .filter(|&r| rows.phase[r as usize] == 0)
            .collect();
        let mut dec: Vec<u32> = (0..rows.len() as u32)
            .filter(|&r| rows.phase[r as usize] != 0)
            .collect();
        let k = |r: u32| {
            let r = r as usize;
            (rows.layer[r], rows.step[r], rows.slot[r], rows.expert[r])
        };
        pre.sort_unstable_by_key(|&r| k(r));
        dec.sort_unstable_by_key(|&r| {
            let (l, s, sl, e) = k(r);
            (s, l, sl, e)
        });
        // Dense key ids in order of first lookup.
        let mut dense: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
        let mut key_layer = Vec::new();
        let mut keys = Vec::with_capacity(rows.len());
        let mut start = Vec::new();
        let mut batch_layer = Vec::new();
        let mut push_row = |r: u32, keys: &mut Vec<u32>| {
            let r = r as usize;
            let li = layer_idx(rows.layer[r]);
            let full = u64::from(li) * n_ids + u64::from(rows.expert[r]);
            let next = dense.len() as u32;
            let id = *dense.entry(full).or_insert(next);
            if id == next {
                key_layer.push(li);
            }
            keys.push(id);
        };
        let mut prev: Option<(i32, u16)> = None;
        for &r in &pre {
            let l = rows.layer[r as usize];
            if prev.map(|p| p.1) != Some(l) {
                start.push(keys.len());
                batch_layer.push(layer_idx(l));
                prev = Some((0, l));
            }
            push_row(r, &mut keys);
        }
        let n_prefill = start.len();
        prev = None;
        for &r in &dec {
            let key = (rows.step[r as usize], rows.layer[r as usize]);
            if prev != Some(key) {
                start.push(keys.len());
                batch_layer.push(layer_idx(key.1));
                prev = Some(key);
            }
            push_row(r, &mut keys);
        }
        start.push(keys.len());
        // Next use per lookup: scan batches backwards remembering each key's latest batch.
        let mut last_seen = vec![u32::MAX; key_layer.len()];
        let mut next_use = vec![u32::MAX; keys.len()];
        for b in (0..start.len() - 1).rev() {
            let span = start[b]..start[b + 1];
            for p in span.clone() {
                next_use[p] = last_seen[keys[p] as usize];
            }
            for p in span {
                last_seen[keys[p] as usize] = b as u32;
            }
        }
        Self {
            keys,
            start,
            batch_layer,
            n_prefill,
            layers,
            key_layer,
            next_use,
        }
    }

    /// Number of batches.
    #[must_use]
    pub fn len(&self) -> usize {
        self.start.len() - 1
    }

    /// True when there is no batch.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Counters of one simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplayResult {
    /// Lookups (first occurrence of a key in a batch).
    pub lookups: u64,
    /// Lookups that found the key resident.
    pub hits: u64,
    /// Bytes read on misses.
    pub read_bytes: u64,
    /// Decode lookups.
    pub dec_lookups: u64,
    /// Decode hits.
    pub dec_hits: u64,
    /// Most bytes resident after any batch's evictions: what the policy really held. `lru`,
    /// `lfu`, `random` and `belady` exceed the budget only by the batch being staged; the layer
    /// policies keep every layer's last batch: about T in decode, and right after prefill
    /// every layer's whole prefill batch.
    pub peak_bytes: u64,
}

impl ReplayResult {
    /// Cumulative hit % (prefill included).
    #[must_use]
    pub fn hit_pct(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            100.0 * self.hits as f64 / self.lookups as f64
        }
    }

    /// Decode-only hit %.
    #[must_use]
    pub fn dec_hit_pct(&self) -> f64 {
        if self.dec_lookups == 0 {
            0.0
        } else {
            100.0 * self.dec_hits as f64 / self.dec_lookups as f64
        }
    }
}

/// Fenwick tree over admission sequence numbers: the unprotected residents in admission order,
/// so the k-th candidate (random policy) is found in O(log n).
struct Fenwick {
    tree: Vec<i32>,
}

impl Fenwick {
    fn new(n: usize) -> Self {
        Self {
            tree: vec![0; n + 1],
        }
    }
    fn add(&mut self, pos: usize, delta: i32) {
        let mut i = pos + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }
    /// Position of the k-th (0-based) present element.
    fn kth(&self, mut k: i32) -> usize {
        let mut pos = 0usize;
        let mut step = (self.tree.len()).next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next < self.tree.len() && self.tree[next] <= k {
                pos = next;
                k -= self.tree[next];
            }
            step >>= 1;
        }
        pos
    }
}

/// Ordered set of unprotected residents under the policy's priority (smallest = next victim).
enum Index {
    Ordered(Vec<BTreeSet<(u64, u64, u32)>>),
    Random {
        fenwick: Fenwick,
        count: i32,
        seq_to_key: Vec<u32>,
    },
}

struct Sim<'a> {
    b: &'a Batches,
    policy: Policy,
    cost: &'a [u64],
    resident: Vec<bool>,
    indexed: Vec<bool>,
    adm_seq: Vec<u64>,
    order: Vec<u64>,
    freq: Vec<u64>,
    next_use: Vec<u32>,
    index: Index,
    rng: PyRandom,
}

impl Sim<'_> {
    fn prio(&self, id: u32) -> (u64, u64, u32) {
        let i = id as usize;
        match self.policy {
            Policy::Lru | Policy::Layer => (self.order[i], 0, id),
            Policy::Lfu | Policy::LayerLfu => (self.freq[i], self.order[i], id),
            // Largest next use first; among equals the earliest admitted.
            Policy::Belady => (u64::from(u32::MAX - self.next_use[i]), self.adm_seq[i], id),
            Policy::Random => (self.adm_seq[i], 0, id),
        }
    }

    fn group(&self, id: u32) -> usize {
        if self.policy.per_layer() {
            self.b.key_layer[id as usize] as usize
        } else {
            0
        }
    }

    fn unindex(&mut self, id: u32) {
        if !self.indexed[id as usize] {
            return;
        }
        self.indexed[id as usize] = false;
        let p = self.prio(id);
        let g = self.group(id);
        match &mut self.index {
            Index::Ordered(sets) => {
                sets[g].remove(&p);
            }
            Index::Random { fenwick, count, .. } => {
                fenwick.add(p.0 as usize, -1);
                *count -= 1;
            }
        }
    }

    fn reindex(&mut self, id: u32) {
        if self.indexed[id as usize] || !self.resident[id as usize] {
            return;
        }
        self.indexed[id as usize] = true;
        let p = self.prio(id);
        let g = self.group(id);
        match &mut self.index {
            Index::Ordered(sets) => {
                sets[g].insert(p);
            }
            Index::Random {
                fenwick,
                count,
                seq_to_key,
            } => {
                fenwick.add(p.0 as usize, 1);
                *count += 1;
                seq_to_key[p.0 as usize] = id;
            }
        }
    }

    fn pop_victim(&mut self, group: usize) -> Option<u32> {
        let id = match &mut self.index {
            Index::Ordered(sets) => sets[group].first().map(|p| p.2)?,
            Index::Random {
                fenwick,
                count,
                seq_to_key,
            } => {
                if *count == 0 {
                    return None;
                }
                let k = self.rng.below(*count as usize);
                seq_to_key[fenwick.kth(k as i32)]
            }
        };
        self.unindex(id);
        Some(id)
    }
}

/// Run one simulation of `policy` at `budget_mib` over `b`. `cost[layer index]` = bytes of one
/// expert of that layer; `n_layer` sizes the per-layer partitions.
#[must_use]
pub fn simulate(
    b: &Batches,
    policy: Policy,
    budget_mib: f64,
    cost: &[u64],
    n_layer: i64,
) -> ReplayResult {
    let n_keys = b.key_layer.len();
    let budget = (budget_mib * 1_048_576.0).trunc() as u64;
    let part = budget / n_layer.max(1) as u64;
    let index = match policy {
        Policy::Random => Index::Random {
            fenwick: Fenwick::new(b.keys.len() + 1),
            count: 0,
            seq_to_key: vec![0; b.keys.len() + 1],
        },
        p if p.per_layer() => Index::Ordered(vec![BTreeSet::new(); b.layers.len().max(1)]),
        _ => Index::Ordered(vec![BTreeSet::new()]),
    };
    let mut s = Sim {
        b,
        policy,
        cost,
        resident: vec![false; n_keys],
        indexed: vec![false; n_keys],
        adm_seq: vec![0; n_keys],
        order: vec![0; n_keys],
        freq: vec![0; n_keys],
        next_use: vec![u32::MAX; n_keys],
        index,
        rng: PyRandom::new(1234),
    };
    let mut seen_in = vec![u32::MAX; n_keys];
    let mut layer_bytes = vec![0u64; b.layers.len().max(1)];
    let mut used = 0u64;
    let mut clock = 0u64;
    let mut adm = 0u64;
    let mut r = ReplayResult::default();
    let mut touched: Vec<u32> = Vec::new();
    for bi in 0..b.len() {
        let decode = bi >= b.n_prefill;
        let il = b.batch_layer[bi] as usize;
        touched.clear();
        for p in b.start[bi]..b.start[bi + 1] {
            clock += 1;
            let id = b.keys[p];
            let i = id as usize;
            if seen_in[i] == bi as u32 {
                s.order[i] = clock;
                continue;
            }
            seen_in[i] = bi as u32;
            touched.push(id);
            s.unindex(id);
            r.lookups += 1;
            if decode {
                r.dec_lookups += 1;
            }
            if s.resident[i] {
                r.hits += 1;
                if decode {
                    r.dec_hits += 1;
                }
            } else {
                let c = s.cost[b.key_layer[i] as usize];
                s.resident[i] = true;
                s.adm_seq[i] = adm;
                adm += 1;
                used += c;
                layer_bytes[b.key_layer[i] as usize] += c;
                r.read_bytes += c;
            }
            s.freq[i] += 1;
            s.order[i] = clock;
            s.next_use[i] = b.next_use[p];
        }
        if policy.per_layer() {
            while layer_bytes[il] > part {
                let Some(v) = s.pop_victim(il) else { break };
                evict(&mut s, v, &mut used, &mut layer_bytes);
            }
        } else {
            while used > budget {
                let Some(v) = s.pop_victim(0) else { break };
                evict(&mut s, v, &mut used, &mut layer_bytes);
            }
        }
        r.peak_bytes = r.peak_bytes.max(used);
        for &id in &touched {
            s.reindex(id);
        }
    }
    r
}

fn evict(s: &mut Sim<'_>, id: u32, used: &mut u64, layer_bytes: &mut [u64]) {
    let i = id as usize;
    let l = s.b.key_layer[i] as usize;
    let c = s.cost[l];
    s.resident[i] = false;
    *used -= c;
    layer_bytes[l] -= c;
}

/// Options of `bmoe-analyze replay`.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Budgets in MiB.
    pub budgets: Vec<f64>,
    /// Policies, in column order.
    pub policies: Vec<Policy>,
    /// `--validate`: LRU budget to print first.
    pub validate: Option<f64>,
}

/// One (budget, policy) cell of the sweep.
#[derive(Debug, Clone, Copy)]
pub struct CurvePoint {
    /// Budget (MiB).
    pub budget_mib: f64,
    /// Policy.
    pub policy: Policy,
    /// Simulation counters.
    pub result: ReplayResult,
}

/// The full replay report.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    /// Basename of the preamble's model.
    pub model: String,
    /// n_layer from the preamble.
    pub n_layer: i64,
    /// Layers with rows.
    pub n_moe: usize,
    /// n_expert.
    pub n_expert: i64,
    /// n_expert_used.
    pub k: i64,
    /// First preamble expert size (MiB).
    pub first_expert_mib: f64,
    /// Batches.
    pub batches: usize,
    /// Prefill batches.
    pub n_prefill: usize,
    /// MiB touched per token cycle.
    pub cycle_mib: f64,
    /// Validation run (budget, result).
    pub validation: Option<(f64, ReplayResult)>,
    /// Sweep, budget-major.
    pub curve: Vec<CurvePoint>,
    /// Policies in column order.
    pub policies: Vec<Policy>,
}

/// Run the replay sweep on a trace read with `Phase::All`.
pub fn run(t: &RouteTrace, opt: &ReplayOptions) -> Result<ReplayReport> {
    let b = Batches::build(t);
    let mut cost = Vec::with_capacity(b.layers.len());
    for &l in &b.layers {
        match t.meta.expert_bytes.get(&i64::from(l)) {
            Some(&c) => cost.push(c),
            None => {
                return Err(AnalyzeError::Invalid {
                    message: format!("{}: no expert_bytes for layer {l} in the trace preamble", t.path.display()),
                    hint: "the replay needs the `# layer=<l> expert_bytes=<n>` preamble lines; re-record with a current bmoe".into(),
                });
            }
        }
    }
    let model = Path::new(&t.meta.model).file_name().map_or_else(
        || t.meta.model.clone(),
        |s| s.to_string_lossy().into_owned(),
    );
    let k = t.meta.n_expert_used;
    // fold from +0.0: an empty f64 `sum()` is -0.0 and would print "-0".
    let cycle: f64 = cost.iter().fold(0.0, |acc, &c| acc + c as f64 * k as f64) / 1_048_576.0;
    let validation = opt
        .validate
        .map(|v| (v, simulate(&b, Policy::Lru, v, &cost, t.meta.n_layer)));
    let mut curve = Vec::new();
    for &budget in &opt.budgets {
        for &p in &opt.policies {
            curve.push(CurvePoint {
                budget_mib: budget,
                policy: p,
                result: simulate(&b, p, budget, &cost, t.meta.n_layer),
            });
        }
    }
    Ok(ReplayReport {
        model,
        n_layer: t.meta.n_layer,
        n_moe: b.layers.len(),
        n_expert: t.meta.n_expert,
        k,
        first_expert_mib: t.meta.first_expert_bytes.unwrap_or(0) as f64 / 1_048_576.0,
        batches: b.len(),
        n_prefill: b.n_prefill,
        cycle_mib: cycle,
        validation,
        curve,
        policies: opt.policies.clone(),
    })
}

impl ReplayReport {
    /// The reference text layout.
    #[must_use]
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "model   {}", self.model);
        let _ = writeln!(
            out,
            "shape   {} layers ({} MoE), {} experts, top-{}, {} MiB/expert",
            self.n_layer,
            self.n_moe,
            self.n_expert,
            self.k,
            f(self.first_expert_mib, 2)
        );
        let _ = writeln!(
            out,
            "batches {} ({} prefill + {} decode)",
            self.batches,
            self.n_prefill,
            self.batches - self.n_prefill
        );
        let _ = writeln!(
            out,
            "T       {} MiB touched per token cycle (all layers x top-k, worst case)",
            f(self.cycle_mib, 0)
        );
        if let Some((v, r)) = self.validation {
            let _ = writeln!(
                out,
                "\nvalidation @ {} MiB: LRU replay = {}% cumulative ({}% decode-only)",
                f(v, 0),
                f(r.hit_pct(), 1),
                f(r.dec_hit_pct(), 1)
            );
            out.push_str("compare against cache_hit_pct in the run's .metrics summary\n");
        }
        let _ = write!(out, "\n{:<8}", "budget");
        for p in &self.policies {
            let _ = write!(out, " {:>9}", p.name());
        }
        let _ = write!(out, "\n{:<8}", "(MiB)");
        for _ in &self.policies {
            let _ = write!(out, " {:>9}", "hit%");
        }
        out.push('\n');
        let labels = self.budget_labels();
        for (row, label) in self.curve.chunks(self.policies.len().max(1)).zip(&labels) {
            let _ = write!(out, "{label:<8}");
            for c in row {
                let _ = write!(out, " {:>9}", f(c.result.dec_hit_pct(), 1));
            }
            out.push('\n');
        }
        out.push_str(
            "\n(decode-only hit%; C=T boundary is where a budget stops holding one token cycle)\n",
        );
        out
    }

    /// The label of each budget row, in sweep order: `%.0f` as the reference prints it, unless
    /// that would give two different budgets the same label (`0.5,0.9,1` → `0`, `1`, `1`);
    /// then every budget is labelled as given (`0.5`, `0.9`, `1`: Rust's shortest round-trip
    /// form of the number parsed from `--budgets`).
    #[must_use]
    pub fn budget_labels(&self) -> Vec<String> {
        let budgets: Vec<f64> = self
            .curve
            .chunks(self.policies.len().max(1))
            .filter_map(|row| row.first().map(|c| c.budget_mib))
            .collect();
        let rounded: Vec<String> = budgets.iter().map(|&b| f(b, 0)).collect();
        let ambiguous = budgets.iter().enumerate().any(|(i, &a)| {
            budgets[..i]
                .iter()
                .zip(&rounded)
                .any(|(&b, label)| b != a && *label == rounded[i])
        });
        if ambiguous {
            budgets.iter().map(|b| b.to_string()).collect()
        } else {
            rounded
        }
    }

    /// The `--csv` curve file (the reference's columns and rounding; budgets labelled as in
    /// the text, [`Self::budget_labels`]).
    #[must_use]
    pub fn curve_csv(&self) -> String {
        let mut out = String::from("budget_mib,policy,hit_pct_cum,hit_pct_decode,read_mib\n");
        let labels = self.budget_labels();
        let per_row = self.policies.len().max(1);
        for (i, c) in self.curve.iter().enumerate() {
            let _ = writeln!(
                out,
                "{},{},{},{},{}",
                labels.get(i / per_row).map_or("", String::as_str),
                c.policy.name(),
                f(c.result.hit_pct(), 3),
                f(c.result.dec_hit_pct(), 3),
                f(c.result.read_bytes as f64 / 1_048_576.0, 1)
            );
        }
        out
    }

    /// `--format csv`: the `curve` table, one row per (budget, policy) with the figures of
    /// `--format json`'s `curve` unrounded (budget as parsed, `peak_resident_mib`, `lookups`),
    /// and with `--validate` the `validation` table.
    #[must_use]
    pub fn tables(&self) -> Vec<Table> {
        let mut curve = Table::new(
            "curve",
            &[
                "budget_mib",
                "policy",
                "hit_pct_cum",
                "hit_pct_decode",
                "read_mib",
                "peak_resident_mib",
                "lookups",
            ],
        );
        for c in &self.curve {
            curve.push(vec![
                num(c.budget_mib),
                json!(c.policy.name()),
                num(c.result.hit_pct()),
                num(c.result.dec_hit_pct()),
                num(c.result.read_bytes as f64 / 1_048_576.0),
                num(c.result.peak_bytes as f64 / 1_048_576.0),
                json!(c.result.lookups),
            ]);
        }
        let mut out = vec![curve];
        if let Some((v, r)) = self.validation {
            let mut t = Table::new(
                "validation",
                &["budget_mib", "policy", "hit_pct_cum", "hit_pct_decode"],
            );
            t.push(vec![
                num(v),
                json!("lru"),
                num(r.hit_pct()),
                num(r.dec_hit_pct()),
            ]);
            out.push(t);
        }
        out
    }

    /// Machine-readable report.
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "model": self.model,
            "n_layer": self.n_layer,
            "moe_layers": self.n_moe,
            "n_expert": self.n_expert,
            "n_expert_used": self.k,
            "batches": self.batches,
            "prefill_batches": self.n_prefill,
            "cycle_mib": self.cycle_mib,
            "validation": self.validation.map(|(v, r)| serde_json::json!({
                "budget_mib": v, "policy": "lru", "hit_pct_cum": r.hit_pct(), "hit_pct_decode": r.dec_hit_pct(),
            })),
            "curve": self.curve.iter().map(|c| serde_json::json!({
                "budget_mib": c.budget_mib,
                "policy": c.policy.name(),
                "hit_pct_cum": c.result.hit_pct(),
                "hit_pct_decode": c.result.dec_hit_pct(),
                "read_mib": c.result.read_bytes as f64 / 1_048_576.0,
                "peak_resident_mib": c.result.peak_bytes as f64 / 1_048_576.0,
                "lookups": c.result.lookups,
            })).collect::<Vec<_>>(),
        })
    }
}
