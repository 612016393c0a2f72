//! Where the dense (non-expert) weights live in this process, and which pages to probe for
//! `dense_resident_frac`: a stratified sample of single pages spread over the dense bytes, so
//! one probe costs a fixed number of `mincore` calls whatever the model size.
//!
//! Under `mmap`/`warm` the dense weights are the model file's mapping (found in
//! `/proc/self/maps`: the VMA of each shard, `addr = start + (file_offset − vma_offset)`).
//! The probe itself (`mincore`) is a VM call and lives in [`crate::vm`].

use crate::model::index::ModelIndex;
use std::path::{Path, PathBuf};

/// Pages probed per sample (as the original engine).
pub const PROBE_PAGES: usize = 256;

/// Probe every this many generated tokens (first token included).
pub const PROBE_EVERY: usize = 8;

/// One line of `/proc/self/maps` that maps a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMapping {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
    /// File offset of `start`.
    pub offset: u64,
    /// The mapped file.
    pub path: PathBuf,
}

/// Parses `/proc/self/maps` text, keeping file-backed lines.
pub fn parse_maps(text: &str) -> Vec<FileMapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let range = f.next()?;
            let _perms = f.next()?;
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let _dev = f.next()?;
            let _inode = f.next()?;
            let path: Vec<&str> = f.collect();
            let path = path.join(" ");
            if !path.starts_with('/') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some(FileMapping {
                start: usize::from_str_radix(a, 16).ok()?,
                end: usize::from_str_radix(b, 16).ok()?,
                offset,
                path: PathBuf::from(path),
            })
        })
        .collect()
}

/// Whether a tensor name is a routed-expert tensor (`*_exps.*`): everything else is dense.
pub fn is_expert_tensor(name: &str) -> bool {
    name.contains("_exps.")
}

/// The dense tensors' `(shard, file_offset, bytes)`, sorted.
pub fn dense_file_ranges(index: &ModelIndex) -> Vec<(usize, u64, u64)> {
    dense_file_ranges_skipping(index, None)
}

/// [`dense_file_ranges`] without the tensor at `skip` (`(shard, file_offset, bytes)`): the
/// table `--row-stream` takes over, which no dense policy should read whole.
pub fn dense_file_ranges_skipping(
    index: &ModelIndex,
    skip: Option<(usize, u64, u64)>,
) -> Vec<(usize, u64, u64)> {
    let mut v: Vec<(usize, u64, u64)> = index
        .tensors
        .iter()
        .filter(|(name, p)| !is_expert_tensor(name) && p.size > 0)
        .map(|(_, p)| (p.shard, p.offset, p.size))
        .filter(|r| Some(*r) != skip)
        .collect();
    v.sort_unstable();
    v
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

/// The address ranges `(addr, len)` of file ranges `(shard, offset, len)` inside the mappings of
/// `shards`; parts not mapped are left out.
pub fn mapped_ranges(
    maps: &[FileMapping],
    shards: &[PathBuf],
    ranges: &[(usize, u64, u64)],
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (si, shard) in shards.iter().enumerate() {
        let vmas: Vec<&FileMapping> = maps.iter().filter(|m| same_file(&m.path, shard)).collect();
        for &(_, off, len) in ranges.iter().filter(|r| r.0 == si) {
            for m in &vmas {
                let vma_len = (m.end - m.start) as u64;
                let lo = off.max(m.offset);
                let hi = (off + len).min(m.offset + vma_len);
                if lo < hi {
                    out.push((m.start + (lo - m.offset) as usize, (hi - lo) as usize));
                }
            }
        }
    }
    out
}

/// `n` page addresses spread evenly over `ranges` (one per stratum, at its middle).
pub fn stratified_pages(ranges: &[(usize, usize)], n: usize, page: usize) -> Vec<usize> {
    let total: usize = ranges.iter().map(|r| r.1).sum();
    if total == 0 || n == 0 || page == 0 {
        return Vec::new();
    }
    let n = n.min(total.div_ceil(page));
    let mut out = Vec::with_capacity(n);
    let mut ri = 0usize;
    let mut before = 0usize; // bytes of ranges before ranges[ri]
    for i in 0..n {
        let pos = ((2 * i + 1) as u128 * total as u128 / (2 * n) as u128) as usize;
        while ri < ranges.len() && before + ranges[ri].1 <= pos {
            before += ranges[ri].1;
            ri += 1;
        }
        let Some(&(addr, _)) = ranges.get(ri) else {
            break;
        };
        let a = (addr + (pos - before)) & !(page - 1);
        if out.last() != Some(&a) {
            out.push(a);
        }
    }
    out
}

/// The pages to probe for this process's dense weights, from `/proc/self/maps`; empty when the
/// model is not mapped (or not on Linux).
pub fn dense_probe_pages(index: &ModelIndex, page: usize) -> Vec<usize> {
    let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let ranges = mapped_ranges(&parse_maps(&text), &index.shards, &dense_file_ranges(index));
    stratified_pages(&ranges, PROBE_PAGES, page)
}

/// The throttled `dense_resident_frac` sensor: probes [`PROBE_PAGES`] pages every
/// [`PROBE_EVERY`] tokens and remembers the last fraction (`-1` until one was measured).
#[derive(Debug, Clone)]
pub struct DenseProbe {
    pages: Vec<usize>,
    last: f64,
}

impl DenseProbe {
    /// A probe over `pages` (from [`dense_probe_pages`]); empty = unmeasurable, reads `-1`.
    pub fn new(pages: Vec<usize>) -> Self {
        Self { pages, last: -1.0 }
    }

    /// The fraction for generated token `step` (1-based), probing when due, and the time the
    /// probe took (ms, 0 when not due) — the caller adds it to `mgmt_ms`, as the seed says.
    pub fn sample(&mut self, step: usize) -> (f64, f64) {
        if self.pages.is_empty() || !step.saturating_sub(1).is_multiple_of(PROBE_EVERY) {
            return (self.last, 0.0);
        }
        let t0 = std::time::Instant::now();
        if let Some((resident, probed)) = crate::vm::resident_pages(&self.pages) {
            self.last = resident as f64 / probed as f64;
        }
        (self.last, t0.elapsed().as_secs_f64() * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let text = "7f0000000000-7f0000100000 r--s 00002000 08:01 1234   /models/a b.gguf\n\
                    7f0000200000-7f0000201000 rw-p 00000000 00:00 0 \n\
                    7ffd0000-7ffd1000 rw-p 00000000 00:00 0   [stack]\n";
        let m = parse_maps(text);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].start, 0x7f00_0000_0000);
        assert_eq!(m[0].offset, 0x2000);
        assert_eq!(m[0].path, PathBuf::from("/models/a b.gguf"));
    }

    #[test]
    fn file_ranges_map_through_the_vma_offset() {
        let maps = vec![FileMapping {
            start: 0x10000,
            end: 0x20000,
            offset: 0x1000,
            path: PathBuf::from("/m.gguf"),
        }];
        let shards = vec![PathBuf::from("/m.gguf")];
        // partly before the mapping, partly inside
        let r = mapped_ranges(&maps, &shards, &[(0, 0x800, 0x1000), (1, 0, 10)]);
        assert_eq!(r, vec![(0x10000, 0x800)]);
    }

    #[test]
    fn strata_cover_every_range_once() {
        let ranges = [(0x1000, 0x4000), (0x100000, 0x4000)];
        let p = stratified_pages(&ranges, 8, 0x1000);
        assert_eq!(
            p,
            vec![
                0x1000, 0x2000, 0x3000, 0x4000, 0x100000, 0x101000, 0x102000, 0x103000
            ]
        );
        // more samples than pages: one per page
        assert_eq!(stratified_pages(&ranges, 100, 0x1000).len(), 8);
        assert!(stratified_pages(&[], 8, 4096).is_empty());
    }

    #[test]
    fn expert_tensors_are_recognised() {
        assert!(is_expert_tensor("blk.0.ffn_gate_exps.weight"));
        assert!(is_expert_tensor("blk.3.ffn_gate_up_exps.weight"));
        assert!(!is_expert_tensor("blk.0.ffn_gate_inp.weight"));
        assert!(!is_expert_tensor("blk.0.ffn_down_shexp.weight"));
    }
}
