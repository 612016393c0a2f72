//! Setting up streaming: open the shards (O_DIRECT verified), take the expert pages over from
//! llama.cpp's mapping, refill the bytes of those pages that belong to other tensors, and start
//! the lanes.

use super::io::{DirectOutcome, Lanes, ReadError, ShardFile};
use super::layout::{ExpertLayout, ReadJob};
use super::overlap::Overlap;
use super::recycle::MapBudget;
use super::{
    MAP_MARGIN, NO_RECYCLE_ENV, PEAK_RESIDENT_ENV, Reader, SetupError, StreamSettings, StreamSetup,
    StreamStats, Streamer,
};
use crate::model::index::ModelIndex;
use crate::stream::cache::ExpertCache;
use crate::vm::Arena;
use crate::vm::uffd::Userfault;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

impl Streamer {
    /// Takes over the expert memory of `layout` (all experts start non-resident), opens the
    /// shards and starts the lanes. Under `--overlap` a failed read raises `abort` from the lane
    /// that saw it.
    pub fn start(
        layout: ExpertLayout,
        index: &ModelIndex,
        settings: StreamSettings,
        abort: Arc<AtomicBool>,
    ) -> Result<(Self, StreamSetup), SetupError> {
        let (files, mut warnings) = open_shards(index, settings.o_direct)?;
        let direct: Vec<bool> = files.iter().map(ShardFile::is_direct).collect();
        let weights: Vec<crate::ffi::WeightRef> = layout
            .tensors()
            .map(|t| crate::ffi::WeightRef {
                name: t.name.clone(),
                addr: t.addr,
                bytes: t.bytes,
                n_expert: layout.n_expert,
                expert_stride: t.stride,
            })
            .collect();
        let arena = Arena::take_over(&weights).map_err(SetupError::Remap)?;
        let mut uffd = match settings.overlap {
            Some(req) if !req.force_staged => open_userfault(&arena, &mut warnings)?,
            _ => None,
        };
        let refilled = refill(&layout, index, &arena, &files, uffd.is_some())?;
        if let Some(u) = &uffd
            && let Err(e) = arena.register(u)
        {
            warnings.push(format!(
                "{e} — --overlap waits at each projection instead (staged)"
            ));
            uffd = None;
        }
        let arena = Arc::new(arena);
        let headroom = || crate::vm::mapping_headroom(MAP_MARGIN).map(MapBudget::new);
        let (reader, lanes, overlap) = match settings.overlap {
            None => {
                let l = Lanes::new(settings.io_threads, files, Arc::clone(&arena));
                let n = l.lanes();
                (Reader::Serial(l), n, None)
            }
            Some(_) => {
                let o = Overlap::start(
                    &layout,
                    Arc::clone(&arena),
                    files,
                    settings.io_threads,
                    uffd,
                    abort,
                    headroom().filter(|_| std::env::var(NO_RECYCLE_ENV).is_err()),
                )
                .map_err(SetupError::Lanes)?;
                let (n, kind) = (o.lanes(), o.kind());
                (Reader::Overlap(Box::new(o)), n, Some(kind))
            }
        };
        let setup = StreamSetup {
            o_direct: !direct.is_empty() && direct.iter().all(|&d| d),
            warnings,
            refilled_bytes: refilled,
            lanes,
            overlap,
        };
        // userfaultfd watches the arena's pages: evictions drop them (recycling by mremap is for
        // reads that land in place, serial or staged)
        let uffd_overlap = matches!(overlap, Some(super::overlap::OverlapKind::Uffd(_)));
        let recycle = if uffd_overlap || std::env::var(NO_RECYCLE_ENV).is_ok_and(|v| v == "1") {
            None
        } else {
            headroom()
        };
        let streamer = Self {
            cache: ExpertCache::new(layout.n_expert, layout.entry_bytes(), settings.cache_bytes),
            seen: vec![0; layout.n_expert],
            layout,
            arena,
            reader,
            direct,
            stats: StreamStats::default(),
            seen_gen: 0,
            poison: None,
            load_all: settings.load_all,
            last_layer: None,
            io_log: None,
            load_reads: 0,
            recycle,
            pause: super::pause::PausePolicy::default(),
            consume_order: Vec::new(),
            stage_nodes: std::collections::HashMap::new(),
            spec: None,
            peak_resident: std::env::var(PEAK_RESIDENT_ENV)
                .is_ok_and(|v| v == "1")
                .then_some(0),
        };
        Ok((streamer, setup))
    }
}

/// Every shard opened for expert reads (O_DIRECT verified once per file); a refused O_DIRECT
/// becomes a warning.
fn open_shards(
    index: &ModelIndex,
    o_direct: bool,
) -> Result<(Vec<ShardFile>, Vec<String>), SetupError> {
    let mut files = Vec::with_capacity(index.shards.len());
    let mut warnings = Vec::new();
    for path in &index.shards {
        let (f, outcome) = ShardFile::open(path, o_direct).map_err(|source| SetupError::Open {
            path: path.display().to_string(),
            source,
        })?;
        if let DirectOutcome::Fallback(why) = outcome {
            warnings.push(format!(
                "{why} on {} — using buffered I/O for expert reads",
                path.display()
            ));
        }
        files.push(f);
    }
    Ok((files, warnings))
}

/// A userfaultfd for `--overlap`, the arena kept from huge pages; `None` (with the reason among
/// the warnings) where the system refuses it.
fn open_userfault(
    arena: &Arena,
    warnings: &mut Vec<String>,
) -> Result<Option<Userfault>, SetupError> {
    match Userfault::open() {
        Ok(u) => {
            arena.no_huge_pages().map_err(SetupError::Remap)?;
            Ok(Some(u))
        }
        Err(e) => {
            warnings.push(format!(
                "{e} — --overlap waits at each projection instead (staged)"
            ));
            Ok(None)
        }
    }
}

/// Refills the bytes of the taken-over pages that belong to no expert tensor; with
/// `whole_pages` (userfaultfd, where a present page is never written again) every page the
/// refill touches gets all its bytes, an expert's too. Returns the bytes read.
fn refill(
    layout: &ExpertLayout,
    index: &ModelIndex,
    arena: &Arena,
    files: &[ShardFile],
    whole: bool,
) -> Result<u64, SetupError> {
    let mut refilled = 0u64;
    for (shard, offset, len) in layout.refill_ranges(&index.shard_sizes) {
        let Some(base) = layout.shard_bases[shard] else {
            continue;
        };
        let (offset, len) = if whole {
            whole_pages(
                offset,
                len,
                index.shard_sizes.get(shard).copied().unwrap_or(0),
            )
        } else {
            (offset, len)
        };
        let job = ReadJob::plan(shard, offset, base + offset as usize, len as usize, false);
        let n = arena
            .read_into(files[shard].buffered(), job.addr, job.len, job.offset)
            .map_err(|e| {
                SetupError::Refill(ReadError {
                    path: files[shard].path().to_path_buf(),
                    offset,
                    len: len as usize,
                    got: 0,
                    errno: Some(e.raw_os_error().unwrap_or(libc::EIO)),
                })
            })?;
        if n < job.len {
            return Err(SetupError::Refill(ReadError {
                path: files[shard].path().to_path_buf(),
                offset,
                len: job.len,
                got: n,
                errno: None,
            }));
        }
        refilled += n as u64;
    }
    Ok(refilled)
}

/// `[offset, offset+len)` widened to whole pages, clipped to the file.
fn whole_pages(offset: u64, len: u64, file_size: u64) -> (u64, u64) {
    let page = crate::vm::PAGE as u64;
    let a = offset / page * page;
    let b = (offset + len).div_ceil(page) * page;
    let b = b.min(file_size.max(offset + len));
    (a, b - a)
}

#[cfg(test)]
mod tests {
    use super::whole_pages;

    #[test]
    fn refills_widen_to_whole_pages_within_the_file() {
        assert_eq!(whole_pages(5000, 100, 1 << 20), (4096, 4096));
        assert_eq!(whole_pages(4096, 4096, 1 << 20), (4096, 4096));
        assert_eq!(
            whole_pages(8000, 300, 8300),
            (4096, 4204),
            "clipped at the end of file"
        );
    }
}
