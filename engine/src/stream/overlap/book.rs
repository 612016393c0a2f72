//! Which expert slice a faulting address belongs to, whether its pages are absent, on their way
//! or present, and which faults wait for them — the bookkeeping between the eval thread (which
//! schedules reads and evictions), the lanes (which install pages) and the fault handler (which
//! sees the faults). Plain data, unit-tested without a kernel.
//!
//! The rule that makes userfaultfd safe here: a present expert page always holds the file's own
//! bytes (except under test poisoning, which drops a slice before it is read again), so a page
//! found present at install time can simply be skipped.

use super::stall::StallClock;
use crate::stream::layout::ExpertLayout;
use std::time::Instant;

/// One expert's slice of one expert tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SliceId {
    /// Index into the layout's tensors (layer by layer, file order within a layer).
    pub tensor: usize,
    /// The expert.
    pub expert: usize,
}

/// Where a slice's pages stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceState {
    /// Its inward pages are not present (never read, or evicted).
    Absent,
    /// A read is scheduled; faults on it wait for the install.
    Pending,
    /// Installed.
    Present,
}

/// What a fault at an address means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The slice is on its way: the wait is counted until it is installed.
    Waits(SliceId),
    /// Already installed (the fault raced the install, which woke the thread).
    Settled,
    /// No read is scheduled for it: the handler must read it itself (now counted as pending).
    Unscheduled(SliceId),
    /// Not expert memory this book knows.
    Foreign,
}

/// A tensor's expert range in memory.
#[derive(Debug, Clone, Copy)]
struct Span {
    addr: usize,
    stride: usize,
    n_expert: usize,
    tensor: usize,
}

/// The slices of a layout, their states and the faults waiting on them.
#[derive(Debug)]
pub struct FaultBook {
    /// Sorted by address.
    spans: Vec<Span>,
    n_expert: usize,
    states: Vec<SliceState>,
    waiters: Vec<u32>,
    stall: StallClock,
    unscheduled: u64,
}

impl FaultBook {
    /// Every slice of `layout`, all absent.
    pub fn new(layout: &ExpertLayout) -> Self {
        let mut spans: Vec<Span> = layout
            .tensors()
            .enumerate()
            .map(|(tensor, t)| Span {
                addr: t.addr,
                stride: t.stride,
                n_expert: layout.n_expert,
                tensor,
            })
            .collect();
        spans.sort_by_key(|s| s.addr);
        let n = spans.len() * layout.n_expert;
        Self {
            spans,
            n_expert: layout.n_expert,
            states: vec![SliceState::Absent; n],
            waiters: vec![0; n],
            stall: StallClock::default(),
            unscheduled: 0,
        }
    }

    fn index(&self, s: SliceId) -> Option<usize> {
        (s.expert < self.n_expert)
            .then(|| s.tensor * self.n_expert + s.expert)
            .filter(|&i| i < self.states.len())
    }

    /// The slice holding `addr`.
    pub fn locate(&self, addr: usize) -> Option<SliceId> {
        let i = self
            .spans
            .partition_point(|s| s.addr <= addr)
            .checked_sub(1)?;
        let s = self.spans[i];
        let off = addr - s.addr;
        let expert = off / s.stride.max(1);
        (expert < s.n_expert).then_some(SliceId {
            tensor: s.tensor,
            expert,
        })
    }

    /// The state of `s`.
    pub fn state(&self, s: SliceId) -> SliceState {
        self.index(s).map_or(SliceState::Absent, |i| self.states[i])
    }

    /// A read of `s` is scheduled.
    pub fn schedule(&mut self, s: SliceId) {
        if let Some(i) = self.index(s) {
            self.states[i] = SliceState::Pending;
        }
    }

    /// `s`'s pages were dropped (an eviction).
    pub fn evicted(&mut self, s: SliceId) {
        if let Some(i) = self.index(s) {
            self.states[i] = SliceState::Absent;
        }
    }

    /// `s` is known present without a read (a cache hit on pages that never left).
    pub fn present(&mut self, s: SliceId) {
        if let Some(i) = self.index(s) {
            self.states[i] = SliceState::Present;
        }
    }

    /// A thread faulted at `addr` at `now`.
    pub fn fault(&mut self, addr: usize, now: Instant) -> FaultKind {
        let Some(s) = self.locate(addr) else {
            return FaultKind::Foreign;
        };
        let Some(i) = self.index(s) else {
            return FaultKind::Foreign;
        };
        match self.states[i] {
            SliceState::Present => FaultKind::Settled,
            SliceState::Pending => {
                self.waiters[i] += 1;
                self.stall.open(now);
                FaultKind::Waits(s)
            }
            SliceState::Absent => {
                self.states[i] = SliceState::Pending;
                self.waiters[i] += 1;
                self.stall.open(now);
                self.unscheduled += 1;
                FaultKind::Unscheduled(s)
            }
        }
    }

    /// `s`'s pages were installed at `now`: its waits close.
    pub fn installed(&mut self, s: SliceId, now: Instant) {
        let Some(i) = self.index(s) else { return };
        self.states[i] = SliceState::Present;
        let w = std::mem::take(&mut self.waiters[i]);
        self.stall.close(u64::from(w), now);
    }

    /// The union of stall intervals so far, ns (an open one up to `now`).
    pub fn stall_ns(&self, now: Instant) -> u64 {
        self.stall.total_ns(now)
    }

    /// Faults on slices no read was scheduled for (the handler read them itself).
    pub fn unscheduled(&self) -> u64 {
        self.unscheduled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::layout::{ExpertTensor, LayerExperts};
    use std::time::Duration;

    fn layout() -> ExpertLayout {
        let t = |name: &str, addr| ExpertTensor {
            name: name.into(),
            addr,
            bytes: 4 * 10_000,
            stride: 10_000,
            shard: 0,
            offset: 0,
        };
        ExpertLayout {
            n_expert: 4,
            layers: vec![
                None,
                Some(LayerExperts {
                    tensors: vec![t("up", 0x20_0000), t("down", 0x10_0000)],
                }),
            ],
            shard_bases: vec![Some(0)],
        }
    }

    #[test]
    fn addresses_find_their_slice_and_nothing_else() {
        let b = FaultBook::new(&layout());
        let up = |e| SliceId {
            tensor: 0,
            expert: e,
        };
        assert_eq!(b.locate(0x20_0000), Some(up(0)));
        assert_eq!(b.locate(0x20_0000 + 9_999), Some(up(0)));
        assert_eq!(b.locate(0x20_0000 + 10_000), Some(up(1)));
        assert_eq!(b.locate(0x20_0000 + 39_999), Some(up(3)));
        assert_eq!(b.locate(0x20_0000 + 40_000), None);
        assert_eq!(
            b.locate(0x10_0000 + 25_000),
            Some(SliceId {
                tensor: 1,
                expert: 2
            })
        );
        assert_eq!(b.locate(0x0f_ffff), None);
    }

    #[test]
    fn waits_close_on_install_and_races_are_settled() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut b = FaultBook::new(&layout());
        let s = SliceId {
            tensor: 0,
            expert: 2,
        };
        b.schedule(s);
        assert_eq!(b.fault(0x20_0000 + 20_500, ms(1)), FaultKind::Waits(s));
        assert_eq!(b.fault(0x20_0000 + 29_000, ms(2)), FaultKind::Waits(s));
        assert_eq!(
            b.stall_ns(ms(4)),
            3_000_000,
            "open interval counts to the reading"
        );
        b.installed(s, ms(6));
        assert_eq!(b.state(s), SliceState::Present);
        // a fault message read after the install woke its thread
        assert_eq!(b.fault(0x20_0000 + 20_500, ms(7)), FaultKind::Settled);
        assert_eq!(b.stall_ns(ms(50)), 5_000_000);
        b.evicted(s);
        assert_eq!(b.state(s), SliceState::Absent);
    }

    #[test]
    fn a_fault_nobody_scheduled_is_handed_to_the_handler_once() {
        let t0 = Instant::now();
        let mut b = FaultBook::new(&layout());
        let s = SliceId {
            tensor: 1,
            expert: 0,
        };
        assert_eq!(b.fault(0x10_0000 + 5, t0), FaultKind::Unscheduled(s));
        // a second thread on the same slice waits for the handler's install
        assert_eq!(b.fault(0x10_0000 + 4_096, t0), FaultKind::Waits(s));
        assert_eq!(b.unscheduled(), 1);
        b.installed(s, t0 + Duration::from_millis(2));
        assert_eq!(b.stall_ns(t0 + Duration::from_secs(1)), 2_000_000);
        assert_eq!(b.fault(0x99_0000, t0), FaultKind::Foreign);
    }
}
