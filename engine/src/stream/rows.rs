//! `--row-stream`: a large table that the graph only reads by row gathers (the token embedding,
//! read by GET_ROWS for the batch's tokens) is bound to reserved address space instead of being
//! resident. bmoe builds every batch, so before each decode it fetches the rows the batch's
//! tokens need from the file (O_DIRECT through [`ShardFile`]), keeps them in a budgeted cache and
//! evicts the least recently used rows under it.
//!
//! Only whole pages inside the table are taken over ([`Arena::take_over`] on the inner page
//! range): the partial pages at either end share bytes with neighbouring tensors, so they stay on
//! llama.cpp's mapping and are never dropped. A page is resident while at least one cached row
//! touches it; the last row leaving it drops it (`MADV_DONTNEED`), so it reads back as zeros —
//! which is why a fetch that failed must stop the run (see [`RowFetchError`]).

use super::io::{DirectOutcome, ShardFile};
use crate::model::index::ModelIndex;
use crate::vm::{Arena, PAGE};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// Smallest table worth streaming: below this the rows' reads cost more than the MiB saved.
pub const MIN_TABLE_BYTES: usize = 1 << 20;

/// The tensor `--row-stream` takes over: the token embedding.
pub const TABLE_NAME: &str = "token_embd.weight";

/// The file range `(shard, offset, bytes)` of the table `--row-stream` will take over, as far as
/// the file alone tells (the graph confirms it after the capture decode): the token embedding,
/// when the model has its own `output.weight` (an embedding tied to the head is read whole by a
/// matmul) and it is at least [`MIN_TABLE_BYTES`]. The first load and the dense policies skip
/// these bytes, so a table that is streamed is never read whole from flash first.
pub fn planned_table(index: &ModelIndex) -> Option<(usize, u64, u64)> {
    if !index.tensors.contains_key("output.weight") {
        return None;
    }
    let p = index.tensors.get(TABLE_NAME)?;
    ((p.size as usize) >= MIN_TABLE_BYTES).then_some((p.shard, p.offset, p.size))
}

/// Where the table lives and how its rows are shaped.
#[derive(Debug, Clone)]
pub struct RowTableSpec {
    /// The GGUF tensor name (for messages).
    pub name: String,
    /// The shard file holding it.
    pub path: PathBuf,
    /// Address of the tensor's data in llama.cpp's mapping.
    pub addr: usize,
    /// Byte offset of the data in the file.
    pub file_offset: u64,
    /// Data size in bytes.
    pub bytes: usize,
    /// Rows (the vocabulary size for a token embedding).
    pub n_rows: usize,
}

/// What the table cost and saved so far (the `moe-rows:` line and the trailer's `row_*` keys).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RowStats {
    /// Size of the table(s): what the ordinary dense policy would keep resident.
    pub table_bytes: u64,
    /// Bytes of the table(s) resident now (`mincore` over the taken-over pages plus the edge
    /// pages that stay on the mapping).
    pub resident_bytes: u64,
    /// Rows fetched from the file (cache misses).
    pub rows: u64,
    /// Read calls issued (adjacent missing pages coalesce into one).
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Rows evicted under the budget.
    pub evictions: u64,
    /// Reads that failed or came back short.
    pub io_errors: u64,
}

/// A row fetch that failed: the table has rows that were never written, so the run must stop.
#[derive(Debug, thiserror::Error)]
#[error(
    "--row-stream: reading rows of {table} failed: {} at offset {offset} ({len} bytes): {reason}",
    path.display()
)]
pub struct RowFetchError {
    /// The table.
    pub table: String,
    /// The file.
    pub path: PathBuf,
    /// File offset of the failed read.
    pub offset: u64,
    /// Bytes asked for.
    pub len: usize,
    /// What went wrong.
    pub reason: String,
}

/// Why a table could not be taken over.
#[derive(Debug, thiserror::Error)]
pub enum RowSetupError {
    /// The file would not open.
    #[error("--row-stream: cannot open {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The pages could not be remapped.
    #[error("--row-stream: cannot reserve the pages of {table}: {source}")]
    Remap {
        /// The table.
        table: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A row-gathered table bound to reserved address space, with its row cache.
#[derive(Debug)]
pub struct RowTable {
    spec: RowTableSpec,
    arena: Arena,
    file: ShardFile,
    /// `[start, end)`: the whole pages inside the table that the arena took over.
    inner: (usize, usize),
    row_bytes: usize,
    budget_bytes: u64,
    /// Cached rows → their last use.
    cached: HashMap<u32, u64>,
    /// Last use → row (the LRU order).
    order: BTreeMap<u64, u32>,
    /// Taken-over page address → cached rows touching it.
    page_refs: HashMap<usize, u32>,
    tick: u64,
    stats: RowStats,
}

impl RowTable {
    /// Takes over the whole pages of `spec`'s table (they read back as zeros until fetched) and
    /// opens its file for row reads (O_DIRECT when `o_direct` and the file accepts it).
    /// `budget_bytes` is the row cache's size (0 = off: only the current batch's rows stay).
    ///
    /// Must run between decodes.
    ///
    /// # Errors
    /// The file does not open or the pages cannot be remapped.
    pub fn take_over(
        spec: RowTableSpec,
        budget_bytes: u64,
        o_direct: bool,
    ) -> Result<(Self, DirectOutcome), RowSetupError> {
        let (file, outcome) =
            ShardFile::open(&spec.path, o_direct).map_err(|source| RowSetupError::Open {
                path: spec.path.clone(),
                source,
            })?;
        let start = spec.addr.div_ceil(PAGE) * PAGE;
        let end = ((spec.addr + spec.bytes) & !(PAGE - 1)).max(start);
        let remap = |source| RowSetupError::Remap {
            table: spec.name.clone(),
            source,
        };
        let arena = Arena::take_over(&[crate::ffi::WeightRef {
            name: spec.name.clone(),
            addr: start,
            bytes: end - start,
            n_expert: 1,
            expert_stride: end - start,
        }])
        .map_err(remap)?;
        // a huge page faulted in by one row would make hundreds of rows' pages resident (as
        // zeros) and defeat both the budget and the accounting
        arena.no_huge_pages().map_err(remap)?;
        let row_bytes = spec.bytes / spec.n_rows.max(1);
        let stats = RowStats {
            table_bytes: spec.bytes as u64,
            ..Default::default()
        };
        Ok((
            Self {
                spec,
                arena,
                file,
                inner: (start, end),
                row_bytes,
                budget_bytes,
                cached: HashMap::new(),
                order: BTreeMap::new(),
                page_refs: HashMap::new(),
                tick: 0,
                stats,
            },
            outcome,
        ))
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether the reads bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.file.is_direct()
    }

    /// The counters, with the resident bytes measured now.
    pub fn stats(&self) -> RowStats {
        let (start, end) = self.inner;
        let edges = (self.spec.bytes - (end - start)) as u64;
        RowStats {
            resident_bytes: self.arena.resident_bytes() + edges,
            ..self.stats
        }
    }

    /// The taken-over pages row `row` touches, as `[first, last)` page addresses (empty when
    /// the row lies in the edge pages only).
    fn pages_of(&self, row: u32) -> (usize, usize) {
        let a = self.spec.addr + row as usize * self.row_bytes;
        let b = a + self.row_bytes;
        let (start, end) = self.inner;
        let p0 = (a & !(PAGE - 1)).max(start);
        let p1 = (b.div_ceil(PAGE) * PAGE).min(end);
        (p0, p1.max(p0))
    }

    /// Makes every row `tokens` gathers resident: evicts least recently used rows the batch does
    /// not need until the new ones fit the budget, then reads the missing pages (adjacent pages
    /// in one read).
    ///
    /// # Errors
    /// A read failed or came back short: the rows it covered are zeros, so the caller must stop
    /// the run (the count is in [`RowStats::io_errors`]).
    pub fn fetch(&mut self, tokens: &[i32]) -> Result<(), RowFetchError> {
        let mut need: Vec<u32> = tokens
            .iter()
            .filter_map(|&t| u32::try_from(t).ok())
            .filter(|&t| (t as usize) < self.spec.n_rows)
            .collect();
        need.sort_unstable();
        need.dedup();
        self.tick += 1;
        let mut missing = Vec::new();
        for &row in &need {
            match self.cached.get(&row).copied() {
                Some(old) => {
                    self.order.remove(&old);
                    self.tick += 1;
                    self.order.insert(self.tick, row);
                    self.cached.insert(row, self.tick);
                }
                None => missing.push(row),
            }
        }
        self.evict_for(missing.len(), &need);
        let mut pages: Vec<usize> = Vec::new();
        for &row in &missing {
            let (p0, p1) = self.pages_of(row);
            for p in (p0..p1).step_by(PAGE) {
                let refs = self.page_refs.entry(p).or_insert(0);
                if *refs == 0 && pages.last() != Some(&p) {
                    pages.push(p);
                }
                *refs += 1;
            }
            self.tick += 1;
            self.cached.insert(row, self.tick);
            self.order.insert(self.tick, row);
        }
        self.stats.rows += missing.len() as u64;
        pages.sort_unstable();
        pages.dedup();
        self.read_runs(&pages)
    }

    /// Evicts LRU rows outside `need` until `incoming` more rows fit the budget.
    fn evict_for(&mut self, incoming: usize, need: &[u32]) {
        let row = self.row_bytes as u64;
        while (self.cached.len() + incoming) as u64 * row > self.budget_bytes {
            let victim = self
                .order
                .iter()
                .map(|(&t, &r)| (t, r))
                .find(|(_, r)| need.binary_search(r).is_err());
            let Some((t, r)) = victim else {
                break;
            };
            self.order.remove(&t);
            self.cached.remove(&r);
            self.stats.evictions += 1;
            let (p0, p1) = self.pages_of(r);
            for p in (p0..p1).step_by(PAGE) {
                if let Some(refs) = self.page_refs.get_mut(&p) {
                    *refs = refs.saturating_sub(1);
                    if *refs == 0 {
                        self.page_refs.remove(&p);
                        // a failed drop leaves the page resident: only the accounting suffers
                        let _ = self.arena.drop_pages(p, PAGE);
                    }
                }
            }
        }
    }

    /// Reads the sorted pages, coalescing adjacent ones into one read each.
    fn read_runs(&mut self, pages: &[usize]) -> Result<(), RowFetchError> {
        let mut i = 0;
        while i < pages.len() {
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + PAGE {
                j += 1;
            }
            let addr = pages[i];
            let len = (j - i) * PAGE;
            let offset = self.spec.file_offset + (addr - self.spec.addr) as u64;
            self.stats.reads += 1;
            match self.file.read_pages(&self.arena, addr, len, offset) {
                Ok(n) => self.stats.read_bytes += n as u64,
                Err(e) => {
                    self.stats.io_errors += 1;
                    return Err(RowFetchError {
                        table: self.spec.name.clone(),
                        path: self.spec.path.clone(),
                        offset,
                        len,
                        reason: e.to_string(),
                    });
                }
            }
            i = j;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::index::FilePlace;

    fn index(tensors: &[(&str, u64)]) -> ModelIndex {
        let mut index = ModelIndex::default();
        let mut off = 0;
        for &(name, size) in tensors {
            index.tensors.insert(
                name.into(),
                FilePlace {
                    shard: 0,
                    offset: off,
                    size,
                },
            );
            off += size;
        }
        index
    }

    #[test]
    fn the_planned_table_is_an_untied_embedding_worth_streaming() {
        let big = MIN_TABLE_BYTES as u64;
        let untied = index(&[(TABLE_NAME, big), ("output.weight", big)]);
        assert_eq!(planned_table(&untied), Some((0, 0, big)));
        // tied: the head's matmul reads every row, so the load must read it whole
        assert_eq!(planned_table(&index(&[(TABLE_NAME, big)])), None);
        let small = index(&[(TABLE_NAME, big - 1), ("output.weight", big)]);
        assert_eq!(planned_table(&small), None);
    }
}
