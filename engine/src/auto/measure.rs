//! Gathering `--auto`'s [`Facts`]: the model's sizes from its headers, the usable memory (the
//! readers `--cache-mb auto` uses), whether userfaultfd opens, a short O_DIRECT read probe of
//! the model file at its expert read size, and a `/proc/stat` sample of the cores' load.

use super::{Facts, LaneProbe, LaneRate, Unavailable};
use crate::memory::autocache::measure as measure_memory;
use crate::memory::picture::{MemorySnapshot, cgroup_memory};
use crate::memory::residency::is_expert_tensor;
use crate::model::facts::ModelFacts;
use crate::model::registry::recipe_for;
use crate::stream::layout::DIRECT_ALIGN;
use crate::vm::AlignedBuf;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

/// Env var (test only): the `MemAvailable` figure `--auto` decides from, in MiB, in place of
/// `/proc/meminfo`'s (the memory cgroup is then ignored) — for machines where a test cannot
/// create a memory cgroup to make a model larger than the usable memory.
pub const TEST_MEM_AVAILABLE_ENV: &str = "BMOE_TEST_AUTO_MEM_AVAILABLE_MB";

/// Lane counts the probe tries.
const PROBE_LANES: [usize; 4] = [1, 2, 4, 8];

/// Bytes one lane count reads at most per pass (about 25 ms at 1.3 GB/s).
const PROBE_BYTES: u64 = 32 << 20;

/// Reads one lane count makes at least and at most.
const PROBE_READS: (u64, u64) = (16, 256);

/// Time one lane count may take at most per pass.
const PROBE_TIME: Duration = Duration::from_millis(400);

/// The CPU-load sample's length.
const CPU_SAMPLE: Duration = Duration::from_millis(200);

/// The routed-expert shape of a model, from its headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ExpertShape {
    total: u64,
    cycle: u64,
    layer_load: u64,
    /// Every expert slice: `(shard, offset, bytes)`.
    slices: Vec<(usize, u64, u64)>,
}

/// The expert shape at top-k `top_k` (slices of every `*_exps.*` tensor, grouped by layer).
fn expert_shape(facts: &ModelFacts, top_k: u64) -> ExpertShape {
    let n_expert = facts.expert_count.unwrap_or(0).max(0) as u64;
    let mut shape = ExpertShape::default();
    if n_expert == 0 {
        return shape;
    }
    let mut per_layer: BTreeMap<&str, u64> = BTreeMap::new();
    for (name, p) in &facts.index.tensors {
        if !is_expert_tensor(name) || p.size == 0 {
            continue;
        }
        let slice = p.size / n_expert;
        let layer = name.split('.').take(2).last().unwrap_or("");
        *per_layer.entry(layer).or_default() += slice;
        shape.total += p.size;
        shape
            .slices
            .extend((0..n_expert).map(|e| (p.shard, p.offset + e * slice, slice)));
    }
    shape.cycle = per_layer.values().map(|b| b * top_k).sum();
    shape.layer_load = per_layer.values().map(|b| b * top_k).max().unwrap_or(0);
    shape.slices.sort_unstable();
    shape
}

/// Measures every fact `--auto` decides from, for `facts`' model at top-k override `k`.
pub fn facts(facts: &ModelFacts, k: Option<u32>) -> Facts {
    let top_k = k.map_or(facts.expert_used.unwrap_or(0).max(0) as u64, u64::from);
    let shape = expert_shape(facts, top_k);
    let model_bytes: u64 = facts.index.shard_sizes.iter().sum();
    let (mem_available, cgroup_headroom) = match std::env::var(TEST_MEM_AVAILABLE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(mb) => (mb << 20, None),
        None => measure_memory(MemorySnapshot::sample().system, cgroup_memory().as_ref()),
    };
    let streamable = match (recipe_for(&facts.arch), shape.total) {
        (Some(_), t) if t > 0 => Ok(()),
        (Some(_), _) => Err(Unavailable::NoExperts),
        (None, _) => Err(Unavailable::Architecture(
            facts.arch.escape_debug().to_string(),
        )),
    };
    let busy_cores = busy_cores();
    Facts {
        mem_available,
        cgroup_headroom,
        model_bytes,
        dense_bytes: model_bytes.saturating_sub(shape.total),
        expert_bytes: shape.total,
        cache_cycle_bytes: shape.cycle,
        layer_load_bytes: shape.layer_load,
        streamable,
        uffd: crate::vm::uffd::Userfault::open()
            .map(drop)
            .map_err(|e| Unavailable::Userfault(e.to_string())),
        probe: probe(&facts.index.shards, &shape.slices),
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        busy_cores,
    }
}

/// The O_DIRECT read rate of each of [`PROBE_LANES`] at the largest expert slice's size, over
/// pseudo-random expert slices of the model.
fn probe(
    shards: &[std::path::PathBuf],
    slices: &[(usize, u64, u64)],
) -> Result<LaneProbe, Unavailable> {
    let largest = slices
        .iter()
        .map(|s| s.2)
        .max()
        .ok_or(Unavailable::Probe("no expert slices"))?;
    let read_bytes = largest.div_ceil(DIRECT_ALIGN).max(1) * DIRECT_ALIGN;
    let files = shards
        .iter()
        .map(|p| {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .map_err(|e| Unavailable::DirectOpen {
                    path: p.clone(),
                    reason: e.to_string(),
                })
        })
        .collect::<Result<Vec<File>, Unavailable>>()?;
    let reads = (PROBE_BYTES / read_bytes).clamp(PROBE_READS.0, PROBE_READS.1);
    let mut rates: Vec<LaneRate> = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    // two passes in mirrored order (1, 2, 4, 8, 8, 4, 2, 1), averaged: one pass let the
    // device's warm-up and a neighbour's burst pick 1 lane in one run and 8 in the next
    let order = PROBE_LANES.iter().chain(PROBE_LANES.iter().rev()).copied();
    for lanes in order {
        let offsets: Vec<(usize, u64)> = (0..reads)
            .map(|_| {
                // xorshift: a spread of slices that the device cannot predict
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let s = slices[(seed % slices.len() as u64) as usize];
                (s.0, s.1 / DIRECT_ALIGN * DIRECT_ALIGN)
            })
            .collect();
        let t = Instant::now();
        let got = std::thread::scope(|scope| {
            let handles: Vec<_> = offsets
                .chunks(offsets.len().div_ceil(lanes))
                .map(|part| scope.spawn(|| read_all(&files, part, read_bytes as usize, t)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or(Err(Unavailable::Probe("a probe thread panicked")))
                })
                .sum::<Result<u64, Unavailable>>()
        })?;
        let secs = t.elapsed().as_secs_f64();
        let mib_s = if secs > 0.0 {
            got as f64 / (1024.0 * 1024.0) / secs
        } else {
            0.0
        };
        match rates.iter_mut().find(|r| r.lanes == lanes) {
            Some(r) => r.mib_s = (r.mib_s + mib_s) / 2.0,
            None => rates.push(LaneRate { lanes, mib_s }),
        }
    }
    Ok(LaneProbe { read_bytes, rates })
}

/// Reads `len` bytes at each of `at` (stopping once [`PROBE_TIME`] has passed since `start`);
/// the bytes read.
fn read_all(
    files: &[File],
    at: &[(usize, u64)],
    len: usize,
    start: Instant,
) -> Result<u64, Unavailable> {
    let mut buf =
        AlignedBuf::zeroed(len).ok_or(Unavailable::Probe("no aligned buffer for the read"))?;
    let mut total = 0u64;
    for &(shard, off) in at {
        if start.elapsed() > PROBE_TIME {
            break;
        }
        let f = files
            .get(shard)
            .ok_or(Unavailable::Probe("an expert slice in an unknown shard"))?;
        let n = f
            .read_at(buf.as_mut_slice(), off)
            .map_err(|e| Unavailable::DirectRead(e.to_string()))?;
        total += n as u64;
    }
    Ok(total)
}

/// `(busy, total)` jiffies of all CPUs and the number of CPUs, from `/proc/stat`'s text.
fn cpu_times(stat: &str) -> Option<(u64, u64, usize)> {
    let first = stat.lines().next()?;
    let v: Vec<u64> = first
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: waiting for I/O is idle for compute
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    let cpus = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some((total.saturating_sub(idle), total, cpus))
}

/// Cores (of those this process may use) that other work kept busy over [`CPU_SAMPLE`].
fn busy_cores() -> Option<f64> {
    let read = || std::fs::read_to_string("/proc/stat").ok();
    let (b0, t0, cpus) = cpu_times(&read()?)?;
    std::thread::sleep(CPU_SAMPLE);
    let (b1, t1, _) = cpu_times(&read()?)?;
    let dt = t1.checked_sub(t0).filter(|&d| d > 0)?;
    let ours = std::thread::available_parallelism().map_or(cpus, usize::from);
    let share = b1.saturating_sub(b0) as f64 / dt as f64;
    Some(share * ours.min(cpus.max(1)) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_gives_busy_and_total_jiffies() {
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1\n";
        assert_eq!(cpu_times(stat), Some((150, 1000, 2)));
        assert_eq!(cpu_times("intr 1\n"), None);
    }
}
