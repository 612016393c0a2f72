//! `--dense-weights`: where the non-expert weights live once experts stream (engine spec §2.10).
//!
//! - `mmap`: left in llama.cpp's file mapping; the kernel may drop those pages under pressure
//!   and every re-fault is a flash read inside the decode (`majflt`).
//! - `warm`: the same mapping, pre-faulted at load by one sequential buffered sweep over the
//!   dense byte ranges, so the first tokens do not pay the faults.
//! - `anon`: the dense pages are replaced (same addresses, through [`crate::vm::Arena`]) by
//!   anonymous memory and filled with O_DIRECT reads: page-cache pressure can no longer drop
//!   them (only swap/zram could move them, and `dense_resident_frac` shows it).
//!
//! Pages shared with an expert tensor belong to the expert arena (already anonymous and
//! refilled by the streamer) and are left alone.

use crate::memory::residency::dense_file_ranges_skipping;
use crate::model::index::ModelIndex;
use crate::stream::layout::ExpertLayout;
use crate::vm::{Arena, PAGE};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

/// `--dense-weights`: where the non-expert weights live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DenseWeights {
    /// The model's mmap, left to the page cache.
    #[default]
    Mmap,
    /// The mmap, pre-faulted by one sequential read at load.
    Warm,
    /// Anonymous memory filled with O_DIRECT reads (page-cache pressure cannot drop it).
    Anon,
}

impl DenseWeights {
    /// The flag / CSV spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DenseWeights::Mmap => "mmap",
            DenseWeights::Warm => "warm",
            DenseWeights::Anon => "anon",
        }
    }
}

/// Chunk of one dense read.
const CHUNK: usize = 8 << 20;

/// What a policy did at load.
#[derive(Debug)]
pub struct DenseOutcome {
    /// Bytes read (warm: swept; anon: copied).
    pub bytes: u64,
    /// Seconds it took.
    pub seconds: f64,
    /// Whether every read used O_DIRECT (anon).
    pub o_direct: bool,
    /// The anonymous arena holding the dense pages (anon); kept for the run's lifetime.
    pub arena: Option<Arena>,
}

/// A dense-policy failure, naming the file and offset.
#[derive(Debug, thiserror::Error)]
#[error("--dense-weights: reading {path} at offset {offset}: {source}")]
pub struct DenseError {
    /// The shard.
    pub path: String,
    /// File offset of the failed read.
    pub offset: u64,
    /// The OS error.
    pub source: io::Error,
}

fn page_floor(x: u64) -> u64 {
    x / PAGE as u64 * PAGE as u64
}

fn page_ceil(x: u64) -> u64 {
    x.div_ceil(PAGE as u64) * PAGE as u64
}

/// Merges sorted `(start, end)` ranges.
fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// `a` minus every range of `b` (both sorted, merged).
fn subtract(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(s, e) in a {
        let mut cur = s;
        for &(bs, be) in b {
            if be <= cur || bs >= e {
                continue;
            }
            if bs > cur {
                out.push((cur, bs));
            }
            cur = cur.max(be);
        }
        if cur < e {
            out.push((cur, e));
        }
    }
    out
}

/// Per shard, the whole pages (file offsets) holding dense tensors and no expert bytes.
pub fn dense_pages(
    dense: &[(usize, u64, u64)],
    experts: &[(usize, u64, u64)],
    n_shards: usize,
) -> Vec<Vec<(u64, u64)>> {
    (0..n_shards)
        .map(|shard| {
            let pages = |v: &[(usize, u64, u64)]| {
                merge(
                    v.iter()
                        .filter(|r| r.0 == shard && r.2 > 0)
                        .map(|&(_, off, len)| (page_floor(off), page_ceil(off + len)))
                        .collect(),
                )
            };
            subtract(&pages(dense), &pages(experts))
        })
        .collect()
}

/// `warm`: reads every dense byte range once through the page cache, except `skip` (the table
/// `--row-stream` takes over).
///
/// # Errors
/// The first failed read (a best-effort policy: the caller may warn and continue).
pub fn warm(
    index: &ModelIndex,
    skip: Option<(usize, u64, u64)>,
) -> Result<DenseOutcome, DenseError> {
    let t0 = Instant::now();
    let mut buf = vec![0u8; CHUNK];
    let mut bytes = 0u64;
    let files: Vec<File> = index
        .shards
        .iter()
        .map(|p| File::open(p).map_err(|e| err(p, 0, e)))
        .collect::<Result<_, _>>()?;
    for (shard, off, len) in dense_file_ranges_skipping(index, skip) {
        let (Some(f), Some(path)) = (files.get(shard), index.shards.get(shard)) else {
            continue;
        };
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK as u64) as usize;
            let got = f
                .read_at(&mut buf[..n], off + done)
                .map_err(|e| err(path, off + done, e))?;
            if got == 0 {
                break;
            }
            done += got as u64;
        }
        bytes += done;
    }
    Ok(DenseOutcome {
        bytes,
        seconds: t0.elapsed().as_secs_f64(),
        o_direct: false,
        arena: None,
    })
}

fn err(path: &Path, offset: u64, source: io::Error) -> DenseError {
    DenseError {
        path: path.display().to_string(),
        offset,
        source,
    }
}

/// Where each shard is mapped: the expert binding's bases, completed for shards that hold no
/// expert (dense-only shards of a split model) from the addresses the graph read their tensors
/// at (`weights`: name, data address). A shard is only given a base when every captured tensor
/// of it agrees on one page-aligned `address − file offset` — anything else (a tensor llama.cpp
/// copied elsewhere) leaves that shard on its mapping.
pub fn shard_bases(
    index: &ModelIndex,
    layout: &ExpertLayout,
    weights: &[(String, usize)],
) -> Vec<Option<usize>> {
    let mut bases = layout.shard_bases.clone();
    bases.resize(index.shards.len(), None);
    let mut found: Vec<Option<Option<usize>>> = vec![None; index.shards.len()];
    for (name, addr) in weights {
        let Some(p) = index.tensors.get(name) else {
            continue;
        };
        let Some(slot) = found.get_mut(p.shard) else {
            continue;
        };
        let base = addr.wrapping_sub(p.offset as usize);
        *slot = match *slot {
            None if base % PAGE == 0 => Some(Some(base)),
            Some(Some(b)) if b == base => Some(Some(b)),
            // disagreement or misalignment: poison the shard
            _ => Some(None),
        };
    }
    for (shard, f) in found.into_iter().enumerate() {
        if let (Some(None), Some(Some(b))) = (bases.get(shard), f) {
            bases[shard] = Some(b);
        }
    }
    bases
}

/// `anon`: moves the dense pages of every shard with a known mapping base ([`shard_bases`]) into
/// anonymous memory at the same addresses and fills them from the file (O_DIRECT when
/// `want_direct` and the file accepts it; buffered otherwise). `skip` (the table `--row-stream`
/// takes over) stays on the mapping.
///
/// Must run between decodes (nothing may compute while pages are replaced).
///
/// # Errors
/// A failed remap or read, naming the file and offset: the dense weights are then incomplete,
/// so the run must not continue.
pub fn anon(
    index: &ModelIndex,
    layout: &ExpertLayout,
    weights: &[(String, usize)],
    want_direct: bool,
    skip: Option<(usize, u64, u64)>,
) -> Result<DenseOutcome, DenseError> {
    let t0 = Instant::now();
    let bases = shard_bases(index, layout, weights);
    let experts: Vec<(usize, u64, u64)> = layout
        .tensors()
        .map(|t| (t.shard, t.offset, t.bytes as u64))
        .collect();
    let per_shard = dense_pages(
        &dense_file_ranges_skipping(index, skip),
        &experts,
        index.shards.len(),
    );
    let mut weights = Vec::new();
    let mut plan = Vec::new();
    for (shard, ranges) in per_shard.iter().enumerate() {
        let Some(Some(base)) = bases.get(shard) else {
            continue;
        };
        for &(s, e) in ranges {
            let addr = base + s as usize;
            weights.push(crate::ffi::WeightRef {
                name: format!("dense@{shard}:{s}"),
                addr,
                bytes: (e - s) as usize,
                n_expert: 1,
                expert_stride: (e - s) as usize,
            });
            plan.push((shard, s, e - s, addr));
        }
    }
    if plan.is_empty() {
        return Ok(DenseOutcome {
            bytes: 0,
            seconds: 0.0,
            o_direct: false,
            arena: None,
        });
    }
    let first_path = index.shards.first().map_or(Path::new(""), |p| p.as_path());
    let arena = Arena::take_over(&weights).map_err(|e| err(first_path, 0, e))?;
    let mut all_direct = true;
    let mut bytes = 0u64;
    for (shard, path) in index.shards.iter().enumerate() {
        let buffered = File::open(path).map_err(|e| err(path, 0, e))?;
        let direct = if want_direct {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .ok()
        } else {
            None
        };
        for &(_, off, len, addr) in plan.iter().filter(|p| p.0 == shard) {
            let file_len = index.shard_sizes.get(shard).copied().unwrap_or(0);
            let want = len.min(file_len.saturating_sub(off));
            let mut done = 0u64;
            while done < want {
                let n = (len - done).min(CHUNK as u64) as usize;
                let at = (addr + done as usize, off + done);
                let got = match direct.as_ref().map(|f| arena.read_into(f, at.0, n, at.1)) {
                    Some(Ok(g)) => g,
                    // O_DIRECT refused this read (alignment, filesystem): buffered instead
                    _ => {
                        all_direct = false;
                        arena
                            .read_into(&buffered, at.0, n, at.1)
                            .map_err(|e| err(path, at.1, e))?
                    }
                };
                if got == 0 {
                    break;
                }
                done += got as u64;
            }
            if done < want {
                return Err(err(
                    path,
                    off + done,
                    io::Error::new(io::ErrorKind::UnexpectedEof, "file ended early"),
                ));
            }
            bytes += want;
        }
        if direct.is_none() {
            all_direct = false;
        }
    }
    Ok(DenseOutcome {
        bytes,
        seconds: t0.elapsed().as_secs_f64(),
        o_direct: all_direct,
        arena: Some(arena),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_pages_exclude_pages_shared_with_experts() {
        // dense [0, 5000) and [20000, 20100); expert [5000, 12288) on shard 0; a shard-1 tensor
        let dense = [(0, 0, 5000), (0, 20000, 100), (1, 100, 10)];
        let experts = [(0, 5000, 7288)];
        let p = dense_pages(&dense, &experts, 2);
        // page 4096..8192 holds expert bytes: it stays with the expert arena
        assert_eq!(p[0], vec![(0, 4096), (16384, 20480)]);
        assert_eq!(p[1], vec![(0, 4096)]);
    }

    #[test]
    fn dense_only_shards_get_the_base_their_tensors_agree_on() {
        let mut index = ModelIndex::default();
        for i in 0..4 {
            index.shards.push(format!("m-{i}.gguf").into());
            index.shard_sizes.push(1 << 20);
        }
        let place = |shard, offset| crate::model::index::FilePlace {
            shard,
            offset,
            size: 100,
        };
        for (name, shard, off) in [
            ("token_embd.weight", 1, 8192),
            ("output.weight", 1, 16384),
            ("a.weight", 2, 8192),
            ("b.weight", 2, 12288),
            ("c.weight", 3, 100),
        ] {
            index.tensors.insert(name.into(), place(shard, off));
        }
        let layout = ExpertLayout {
            n_expert: 1,
            layers: Vec::new(),
            shard_bases: vec![Some(0x10_0000), None, None, None],
        };
        let base = 0x7000_0000usize;
        let weights = vec![
            ("token_embd.weight".to_string(), base + 8192),
            ("output.weight".to_string(), base + 16384),
            // shard 2: two tensors disagree (one was copied elsewhere): left alone
            ("a.weight".to_string(), 0x8000_0000 + 8192),
            ("b.weight".to_string(), 0x9000_0000 + 12288),
            // shard 3: a base that is not page aligned: left alone
            ("c.weight".to_string(), 0xa000_0000 + 4096),
            ("inp_embd".to_string(), 0x1234),
        ];
        assert_eq!(
            shard_bases(&index, &layout, &weights),
            vec![Some(0x10_0000), Some(base), None, None]
        );
    }

    #[test]
    fn subtract_and_merge() {
        assert_eq!(merge(vec![(5, 9), (0, 3), (2, 6)]), vec![(0, 9)]);
        assert_eq!(
            subtract(&[(0, 10)], &[(2, 3), (5, 20)]),
            vec![(0, 2), (3, 5)]
        );
    }

    #[test]
    fn warm_reads_every_dense_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.bin");
        std::fs::write(&path, vec![7u8; 100_000]).unwrap();
        let mut index = ModelIndex::default();
        index.shards.push(path);
        index.shard_sizes.push(100_000);
        for (name, off, size) in [
            ("token_embd.weight", 0u64, 40_000u64),
            ("blk.0.ffn_up_exps.weight", 40_000, 50_000),
        ] {
            index.tensors.insert(
                name.into(),
                crate::model::index::FilePlace {
                    shard: 0,
                    offset: off,
                    size,
                },
            );
        }
        let w = warm(&index, None).unwrap();
        assert_eq!(w.bytes, 40_000);
        // the table --row-stream takes over is left alone
        let w = warm(&index, Some((0, 0, 40_000))).unwrap();
        assert_eq!(w.bytes, 0);
    }
}
