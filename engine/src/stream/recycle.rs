//! Page recycling: the pages of evicted experts are handed to the experts about to be read
//! instead of being released and faulted in again.
//!
//! Releasing an evicted slice (`MADV_DONTNEED`) frees its pages; the next read into a missed
//! slice then faults fresh pages in — inside the O_DIRECT read, each one allocated, charged to
//! the memory cgroup and zero-filled before the device overwrites it. With the cache off that
//! round trip covers every routed byte of every token (972 MiB/token on the Qwen3-30B-A3B
//! shape). Moving the evicted pages to the missed slices (`mremap`, see
//! [`crate::vm::Arena::move_pages`]) keeps the same number of pages resident — the budget is
//! honoured exactly as before — but skips the free, the allocation and the zero-fill.
//!
//! Each move into a slice that is not yet its own mapping splits the arena's mapping (+2
//! mappings); moving into a slice that an earlier whole-slice move made its own mapping costs
//! nothing. [`MapBudget`] keeps the process under `vm.max_map_count`: once the budget is spent,
//! only already-converted slices receive pages and the rest fault as before.
//!
//! Pure planning: no memory is touched here.

use std::collections::HashMap;

/// A whole-page address range `[addr, addr+len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRun {
    /// First byte (page aligned).
    pub addr: usize,
    /// Length in bytes (whole pages).
    pub len: usize,
}

/// One page move: `len` bytes of pages from `src` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Source (an evicted slice's pages).
    pub src: usize,
    /// Destination (a missed slice's pages).
    pub dst: usize,
    /// Bytes.
    pub len: usize,
}

/// How many more mappings recycling may create, and which slices already are their own
/// mapping.
#[derive(Debug, Clone, Default)]
pub struct MapBudget {
    left: usize,
    converted: HashMap<usize, usize>,
}

/// Mappings each split of the arena can add (the moved range plus the remainder behind it).
const SPLIT_COST: usize = 2;

impl MapBudget {
    /// A budget of `left` new mappings.
    pub fn new(left: usize) -> Self {
        Self {
            left,
            converted: HashMap::new(),
        }
    }

    #[cfg(test)]
    /// Mappings still available.
    pub fn left(&self) -> usize {
        self.left
    }

    /// What filling `dest` with `pieces` moves costs: nothing when a single move covers a slice
    /// that already is its own mapping of the same size.
    fn cost(&self, dest: PageRun, pieces: usize) -> usize {
        if pieces == 1 && self.converted.get(&dest.addr) == Some(&dest.len) {
            0
        } else {
            SPLIT_COST * pieces
        }
    }
}

/// The moves of one load and the donor pages nobody took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Moves to perform, in order.
    pub moves: Vec<Move>,
    /// Donor pages left over: the caller releases them.
    pub leftover: Vec<PageRun>,
}

/// Fills `dests` (the whole pages of the slices about to be read) from `donors` (the whole
/// pages of the slices just evicted), in order, as far as the donors and `budget` allow. A
/// destination is filled completely or not at all, so a slice never ends up half recycled and
/// half faulted (both would work; this keeps the mapping count predictable).
pub fn plan(donors: &[PageRun], dests: &[PageRun], budget: &mut MapBudget) -> Plan {
    let mut pool: Vec<PageRun> = donors.iter().rev().copied().collect(); // pop from the front
    let mut moves = Vec::new();
    for &dest in dests {
        if dest.len == 0 {
            continue;
        }
        if pool.iter().map(|r| r.len).sum::<usize>() < dest.len {
            continue;
        }
        // the pieces this destination would take, without consuming them yet
        let mut pieces = 0usize;
        let mut need = dest.len;
        for r in pool.iter().rev() {
            pieces += 1;
            if r.len >= need {
                break;
            }
            need -= r.len;
        }
        let cost = budget.cost(dest, pieces);
        if cost > budget.left {
            continue;
        }
        budget.left -= cost;
        let mut at = dest.addr;
        let mut need = dest.len;
        while need > 0 {
            let Some(r) = pool.pop() else { break };
            let n = r.len.min(need);
            moves.push(Move {
                src: r.addr,
                dst: at,
                len: n,
            });
            if n < r.len {
                pool.push(PageRun {
                    addr: r.addr + n,
                    len: r.len - n,
                });
            }
            at += n;
            need -= n;
        }
        if pieces == 1 {
            budget.converted.insert(dest.addr, dest.len);
        } else {
            budget.converted.remove(&dest.addr);
        }
    }
    pool.reverse();
    Plan {
        moves,
        leftover: pool,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(addr: usize, len: usize) -> PageRun {
        PageRun { addr, len }
    }

    fn page_move(src: usize, dst: usize, len: usize) -> Move {
        Move { src, dst, len }
    }

    #[test]
    fn equal_slices_pair_one_to_one_and_leftovers_are_released() {
        let mut b = MapBudget::new(100);
        let p = plan(
            &[
                run(0x10000, 0x3000),
                run(0x20000, 0x3000),
                run(0x30000, 0x3000),
            ],
            &[run(0x90000, 0x3000), run(0xa0000, 0x3000)],
            &mut b,
        );
        assert_eq!(
            p.moves,
            vec![
                page_move(0x10000, 0x90000, 0x3000),
                page_move(0x20000, 0xa0000, 0x3000)
            ]
        );
        assert_eq!(p.leftover, vec![run(0x30000, 0x3000)]);
        assert_eq!(b.left(), 96);
        // the same destinations again are their own mappings now: free
        let p = plan(
            &[run(0x10000, 0x3000), run(0x20000, 0x3000)],
            &[run(0x90000, 0x3000), run(0xa0000, 0x3000)],
            &mut b,
        );
        assert_eq!(p.moves.len(), 2);
        assert_eq!(b.left(), 96);
    }

    #[test]
    fn unequal_sizes_split_and_a_short_pool_leaves_the_rest_to_faults() {
        let mut b = MapBudget::new(100);
        let p = plan(
            &[run(0x10000, 0x2000), run(0x20000, 0x3000)],
            &[run(0x90000, 0x3000), run(0xa0000, 0x3000)],
            &mut b,
        );
        assert_eq!(
            p.moves,
            vec![
                page_move(0x10000, 0x90000, 0x2000),
                page_move(0x20000, 0x92000, 0x1000)
            ]
        );
        // 0x2000 of donor left, not enough for the second 0x3000 destination
        assert_eq!(p.leftover, vec![run(0x21000, 0x2000)]);
        assert_eq!(b.left(), 96, "two pieces cost two splits each");
        let moved: usize = p.moves.iter().map(|m| m.len).sum();
        assert_eq!(moved, 0x3000);
    }

    #[test]
    fn a_spent_budget_only_reuses_converted_slices() {
        let mut b = MapBudget::new(2);
        let p = plan(
            &[run(0x10000, 0x1000), run(0x20000, 0x1000)],
            &[run(0x90000, 0x1000), run(0xa0000, 0x1000)],
            &mut b,
        );
        assert_eq!(p.moves.len(), 1, "budget for one split only");
        assert_eq!(p.moves[0].dst, 0x90000);
        assert_eq!(p.leftover, vec![run(0x20000, 0x1000)]);
        assert_eq!(b.left(), 0);
        let p = plan(
            &[run(0x10000, 0x1000), run(0x20000, 0x1000)],
            &[run(0xa0000, 0x1000), run(0x90000, 0x1000)],
            &mut b,
        );
        assert_eq!(
            p.moves,
            vec![page_move(0x10000, 0x90000, 0x1000)],
            "only the converted slice receives pages"
        );
        assert_eq!(p.leftover, vec![run(0x20000, 0x1000)]);
    }

    #[test]
    fn no_donors_no_moves() {
        let mut b = MapBudget::new(10);
        let p = plan(&[], &[run(0x1000, 0x1000)], &mut b);
        assert_eq!(p, Plan::default());
    }
}
