//! Speculative expert reads: a predictor guesses (layer, expert) entries a later routing will
//! ask for, and [`Streamer::issue_speculative`] reads them into the cache's cold end, so a right
//! guess is a hit and a wrong one is the first thing evicted. The temporal predictor of
//! `--prefetch K` ([`TemporalPredictor`]) is one source of guesses; any other (a stale-gate
//! predictor) hands its list with its own [`SpecTag`].
//!
//! - Serial loads read the guesses on the eval thread right after the real reads (the serial
//!   path has no idle lane to hand them to), so a real read never waits behind a speculative one.
//! - Under `--overlap` they are issued and not waited for: one unit per entry in the lanes'
//!   low-priority queue. The next real load cancels the units no lane has started (their entries
//!   are forgotten) and integrates the finished ones; a routing of an entry still being read
//!   adopts it and waits for that read (userfaultfd: in the kernel, on its pages; staged: on the
//!   eval thread) rather than reading it twice. `--prefetch-sync` drains the queue on the eval
//!   thread right after issuing (a diagnostic; its io rows carry the lane after the last one).
//! - Route-ahead's *adopt* mode ([`Streamer::set_stale_gate_reads`] with `adopt`): the guesses
//!   are the committed routing itself, so a real load never cancels them. Its own layer's queued
//!   units move to the queue's front and are completed (the eval thread reads alongside the
//!   lanes) before it stages, the wait being `adopt_ns` (inside mgmt); other layers' units stay
//!   queued, and integrated entries go to the LRU's front. Serially there is nothing to adopt:
//!   the early reads already ran on the eval thread when they were issued.

use super::cache::EntryId;
use super::overlap::{OverlapKind, SpecDone, SpecUnit};
use super::{IoRecord, Streamer};
use crate::stream::temporal::TemporalPredictor;
use std::time::Instant;

/// Env var (test): `1` prints the speculation's counts on stderr when the streamer is dropped
/// (`bmoe: test: speculation queued=.. cancelled=.. adopted=.. completed=..`).
pub const SPEC_COUNTS_ENV: &str = "BMOE_TEST_SPEC_COUNTS";

/// Env var (test): `1` makes an overlap lane hold each speculative unit it takes until the next
/// load starts, so that units are still queued or in flight when that load comes: cancellation
/// and adoption happen on a tiny model however fast its layers compute or slow the machine is
/// (a timed pause was not enough under a loaded CI machine's debug build).
pub const SPEC_HOLD_ENV: &str = "BMOE_TEST_SPEC_HOLD";

/// Which predictor made a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecTag {
    /// `--prefetch K`: the previous token's routing.
    Temporal,
    /// A stale-gate guess (`--predict-prefetch`, and `--route-ahead`'s early read).
    StaleGate,
    /// The prefill arena's guess (`--prefill-device`, routed mode): a prompt batch's predicted
    /// routed union of the next layer.
    PrefillArena,
}

impl SpecTag {
    fn code(self) -> u8 {
        match self {
            SpecTag::Temporal => 0,
            SpecTag::StaleGate => 1,
            SpecTag::PrefillArena => 2,
        }
    }
}

/// What happened to speculative units (overlap), cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecCounts {
    /// Units handed to the lanes.
    pub queued: u64,
    /// Units a real load took back before any lane started them.
    pub cancelled: u64,
    /// Routings that found their entry still being read speculatively (they waited for it).
    pub adopted: u64,
    /// Units read to the end.
    pub completed: u64,
}

/// What [`Streamer::fill_ahead`] did with one layer's prediction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AheadFill {
    /// Predicted entries already resident (kept for their routing).
    pub kept: usize,
    /// Predicted entries read ahead.
    pub read: usize,
    /// Predicted entries with no room within the budget (read at the routing node if routed).
    pub left: usize,
    /// Time spent reading them inline, ns (serial loads read on the eval thread).
    pub read_ns: u64,
}

/// Speculative-read state on the streamer (`--prefetch K`, `--predict-prefetch`,
/// `--route-ahead`).
pub(super) struct Speculation {
    /// `--prefetch K`: the previous token's routing per layer (`None` for the stale gate's
    /// reads, which the hook hands over itself).
    pub predictor: Option<TemporalPredictor>,
    /// Experts each token routes to (the router's `n_expert_used`).
    pub n_used: usize,
    /// `--prefetch-sync`: drain the speculative reads on the eval thread right after issuing.
    pub sync: bool,
    /// Overlap: what happened to the units.
    pub counts: SpecCounts,
    /// Overlap, io trace: finished speculative reads with their start sequence numbers, until
    /// the decode's io log is assembled.
    pub rows: Vec<(u64, IoRecord)>,
    /// [`SPEC_COUNTS_ENV`].
    pub print_counts: bool,
    /// Route-ahead's adopt mode: a load completes its own layer's queued guesses instead of
    /// cancelling any.
    pub adopt: bool,
}

impl Speculation {
    fn new(predictor: Option<TemporalPredictor>, n_used: usize) -> Self {
        Self {
            predictor,
            n_used,
            sync: false,
            counts: SpecCounts::default(),
            rows: Vec::new(),
            print_counts: std::env::var(SPEC_COUNTS_ENV).is_ok_and(|v| v == "1"),
            adopt: false,
        }
    }
}

impl Streamer {
    /// Turns on `--prefetch depth` (0 = off): `n_used` is the experts one token routes to.
    pub fn set_prefetch(&mut self, depth: usize, n_used: usize) {
        self.spec = (depth > 0 && n_used > 0).then(|| {
            let p = TemporalPredictor::new(self.layout.layers.len(), self.layout.n_expert, depth);
            Speculation::new(Some(p), n_used)
        });
        self.set_spec_hold();
    }

    /// `--predict-prefetch` (`adopt` false) or `--route-ahead` (`adopt` true: its guesses are
    /// the committed routing, completed by the load that needs them, never cancelled): the hook
    /// hands the stale gate's guesses to [`Self::predict_ahead`].
    pub fn set_stale_gate_reads(&mut self, adopt: bool) {
        let s = self.spec.get_or_insert_with(|| Speculation::new(None, 0));
        s.adopt = adopt;
        self.set_spec_hold();
    }

    /// [`SPEC_HOLD_ENV`] to the lanes.
    fn set_spec_hold(&mut self) {
        let hold = std::env::var(SPEC_HOLD_ENV).is_ok_and(|v| v == "1");
        if let Some(o) = self.overlap() {
            o.set_spec_hold(hold);
        }
    }

    /// `--prefetch-sync`: speculative reads are drained on the eval thread right after they are
    /// issued (the serial path always reads them there).
    pub fn set_prefetch_sync(&mut self, sync: bool) {
        if let Some(s) = self.spec.as_mut() {
            s.sync = sync;
        }
    }

    /// After layer `layer`'s load of `ids`: reads ahead what the previous token routed at the
    /// next K layers (not resident), then records this load's routing for the next token.
    pub(super) fn speculate(&mut self, layer: usize, ids: &[i32]) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let Some(predictor) = spec.predictor.as_mut() else {
            return;
        };
        let cache = &self.cache;
        let wanted =
            predictor.candidates(layer, |id| cache.is_resident(id) || cache.is_in_flight(id));
        predictor.record(layer, ids, spec.n_used);
        self.issue_speculative(&wanted, SpecTag::Temporal);
    }

    /// `--predict-prefetch`: after the previous layer's load, the stale gate's guess at
    /// `layer`'s routing (`ranked`, best first): the resident guesses are kept warm (moved to
    /// the LRU's front, not counted as hits), and the misses, at most `spec_max` of them, are
    /// read ahead as speculative entries. A failed read is forgotten, as with `--prefetch`.
    /// With `front` (route-ahead's adopt mode: the guess *is* the routing) the entries read
    /// join the LRU's front instead, so the loads in between do not evict them. Returns the
    /// time the serial path spent reading them inline (counted as flash I/O, not as issuing).
    pub fn predict_ahead(
        &mut self,
        layer: usize,
        ranked: &[i32],
        spec_max: usize,
        front: bool,
    ) -> std::time::Duration {
        // without a cache a guess has nowhere to wait for its routing
        if self.cache.budget() == 0 || !matches!(self.layout.layers.get(layer), Some(Some(_))) {
            return std::time::Duration::ZERO;
        }
        let n_expert = self.layout.n_expert;
        let mut wanted = Vec::new();
        for &e in ranked {
            let Ok(expert) = usize::try_from(e) else {
                continue;
            };
            if expert >= n_expert {
                continue;
            }
            let id = EntryId { layer, expert };
            if self.cache.is_resident(id) {
                self.cache.refresh(id);
            } else if wanted.len() < spec_max && !self.cache.is_in_flight(id) {
                wanted.push(id);
            }
        }
        let read = self.issue_speculative(&wanted, SpecTag::StaleGate);
        if front {
            wanted.into_iter().for_each(|id| self.cache.refresh(id));
        }
        read
    }

    /// The prefill arena (`--prefill-device`, routed mode), right after the current layer's
    /// load: `experts` is the predicted routed union of `layer` for the whole batch. The
    /// predicted entries already resident are kept (moved to the LRU's front, so nothing evicts
    /// them before their routing); the others are read ahead as speculative entries, as many as
    /// fit the budget beyond the current load — cold entries (never the current load's, never
    /// one in flight) are released to make room, so the expert memory stays within `budget +
    /// the current layer`, the bound the prefill split is sized for. The rest is left to the
    /// routing node. With the cache off (budget 0) nothing is read ahead.
    pub fn fill_ahead(&mut self, layer: usize, experts: &[usize]) -> AheadFill {
        let mut f = AheadFill::default();
        let Some(Some(l)) = self.layout.layers.get(layer) else {
            return f;
        };
        let entry = l.entry_bytes();
        let t0 = Instant::now();
        // what the layer being computed holds, before the kept guesses join its stamp
        let current = self.cache.current_bytes();
        let mut wanted = Vec::new();
        for &expert in experts.iter().filter(|&&e| e < self.layout.n_expert) {
            let id = EntryId { layer, expert };
            if self.cache.is_resident(id) {
                self.cache.refresh(id);
                f.kept += 1;
            } else if !self.cache.is_in_flight(id) {
                wanted.push(id);
            }
        }
        let mut victims = Vec::new();
        let mut take = 0;
        while take < wanted.len() {
            let (out, fits) = self.cache.make_room((take as u64 + 1) * entry, current);
            victims.extend(out);
            if !fits {
                break;
            }
            take += 1;
        }
        let dests: Vec<usize> = wanted[..take].iter().map(|id| id.expert).collect();
        self.release(&victims, layer, &dests);
        self.stats.mgmt_ns += t0.elapsed().as_nanos() as u64;
        f.left = wanted.len() - take;
        f.read = take;
        f.read_ns = self
            .issue_speculative(&wanted[..take], SpecTag::PrefillArena)
            .as_nanos() as u64;
        f
    }

    /// Reads `guesses` (most urgent first) speculatively into the cache's cold end; entries
    /// resident or already on their way are skipped. A failed serial speculative read is
    /// forgotten, never an error: the real load reads it again. Returns the time spent reading
    /// inline (serial only; zero under `--overlap`, where the lanes read).
    pub(crate) fn issue_speculative(
        &mut self,
        guesses: &[EntryId],
        tag: SpecTag,
    ) -> std::time::Duration {
        if self.overlap().is_some() {
            self.queue_speculative(guesses, tag);
            return std::time::Duration::ZERO;
        }
        let t0 = Instant::now();
        // per layer, the entries this round reads
        let mut by_layer: Vec<(usize, Vec<usize>)> = Vec::new();
        for &id in guesses {
            if !self.cache.insert_speculative(id) {
                continue;
            }
            match by_layer.last_mut() {
                Some((l, v)) if *l == id.layer => v.push(id.expert),
                _ => by_layer.push((id.layer, vec![id.expert])),
            }
        }
        let reading = !by_layer.is_empty();
        for (il, experts) in by_layer {
            self.read_speculative(il, &experts);
        }
        if reading {
            t0.elapsed()
        } else {
            std::time::Duration::ZERO
        }
    }

    /// The serial form: reads `experts` of `il` now.
    fn read_speculative(&mut self, il: usize, experts: &[usize]) {
        let (jobs, served) = self.plan_reads(il, experts);
        let log_from = self.io_log.as_ref().map_or(0, Vec::len);
        let (result, _) = self.read(il, jobs, &served, Instant::now());
        if let Some(log) = self.io_log.as_mut() {
            log.iter_mut().skip(log_from).for_each(|r| r.spec = true);
        }
        match result {
            Ok(bytes) => {
                // flash traffic counts the aligned windows; spec_read counts slice bytes
                self.stats.read_bytes += bytes;
                self.stats.spec_read_bytes += self.slice_bytes(il) * experts.len() as u64;
                for &e in experts {
                    self.cache.complete_speculative(EntryId {
                        layer: il,
                        expert: e,
                    });
                }
            }
            Err(_) => {
                for &e in experts {
                    self.cache.cancel_speculative(EntryId {
                        layer: il,
                        expert: e,
                    });
                }
            }
        }
    }

    /// The overlapped form: one unit per entry into the lanes' low-priority queue.
    fn queue_speculative(&mut self, guesses: &[EntryId], tag: SpecTag) {
        if self.overlap().is_some_and(|o| o.failed()) {
            return;
        }
        let mut units = Vec::new();
        for &id in guesses {
            if !self.cache.insert_speculative(id) {
                continue;
            }
            let (jobs, _) = self.async_jobs(id.layer, &[id.expert], None);
            if jobs.is_empty() {
                self.cache.cancel_speculative(id);
                continue;
            }
            units.push(SpecUnit {
                layer: id.layer,
                expert: id.expert,
                tag: tag.code(),
                jobs,
            });
        }
        let sync = self.spec.as_ref().is_some_and(|s| s.sync);
        if let Some(s) = self.spec.as_mut() {
            s.counts.queued += units.len() as u64;
        }
        let Some(o) = self.overlap_mut() else { return };
        o.queue_spec(units);
        if sync {
            o.run_spec_here();
            self.collect_speculative();
        }
    }

    /// The start of a real overlapped load of `layer`: queued units are cancelled (their
    /// entries forgotten, their slices back to absent) and finished ones join the cache. In
    /// adopt mode nothing is cancelled: `layer`'s own queued units are completed first.
    pub(super) fn settle_speculative(&mut self, layer: usize) {
        let Some(adopt) = self.spec.as_ref().map(|s| s.adopt) else {
            return;
        };
        if adopt {
            self.adopt_speculative(layer);
            return;
        }
        let Some(o) = self.overlap() else { return };
        let cancelled = o.cancel_spec();
        if let Some(s) = self.spec.as_mut() {
            s.counts.cancelled += cancelled.len() as u64;
        }
        if let Some(book) = self.overlap().and_then(|o| o.book()) {
            let mut b = book.lock().unwrap_or_else(|e| e.into_inner());
            for j in cancelled.iter().flat_map(|u| &u.jobs) {
                b.evicted(j.slice);
            }
        }
        for u in &cancelled {
            self.cache.cancel_speculative(EntryId {
                layer: u.layer,
                expert: u.expert,
            });
        }
        self.collect_speculative();
    }

    /// Adopt mode: `layer`'s queued units move to the queue's front and are read (the eval
    /// thread helping the lanes), the load waiting for them and for every unit in flight; the
    /// wait is `adopt_ns`, inside the load's mgmt window.
    fn adopt_speculative(&mut self, layer: usize) {
        let Some(o) = self.overlap() else { return };
        let t0 = Instant::now();
        let adopted = o.adopt_spec(layer);
        self.stats.adopt_ns += t0.elapsed().as_nanos() as u64;
        if let Some(s) = self.spec.as_mut() {
            s.counts.adopted += adopted as u64;
        }
        self.collect_speculative();
    }

    /// Staged overlap: a routing adopted an entry still being read; its pages are written in
    /// place with no fault to wait on, so the eval thread waits for the reads in flight (at most
    /// one unit per lane) before the layer computes.
    pub(super) fn wait_adopted(&mut self, adopted: usize) {
        if adopted == 0 {
            return;
        }
        if let Some(s) = self.spec.as_mut() {
            s.counts.adopted += adopted as u64;
        }
        let Some(o) = self.overlap_mut() else { return };
        if o.kind() != OverlapKind::Staged {
            // userfaultfd: the compute threads wait on the pages themselves
            return;
        }
        o.wait_spec(false);
        self.collect_speculative();
    }

    /// Integrates the units the lanes finished: counted, completed in the cache, logged.
    pub(super) fn collect_speculative(&mut self) {
        let Some(o) = self.overlap() else { return };
        let done = o.take_spec_done();
        let logging = self.io_log.is_some();
        let front = self.spec.as_ref().is_some_and(|s| s.adopt);
        for d in done {
            let id = EntryId {
                layer: d.unit.layer,
                expert: d.unit.expert,
            };
            if d.ok {
                self.cache.complete_speculative(id);
                if front {
                    // route-ahead: the entry is the committed routing, not a guess to evict first
                    self.cache.refresh(id);
                }
                self.stats.spec_read_bytes += self.slice_bytes(id.layer);
            } else {
                // the run is failing (the lanes raised the abort); the entry holds no file bytes
                self.cache.cancel_speculative(id);
            }
            if let Some(s) = self.spec.as_mut() {
                s.counts.completed += 1;
                if logging {
                    s.rows.extend(spec_rows(&d));
                }
            }
        }
    }

    /// The finished speculative reads' io rows since the last call, with their sequence numbers.
    pub(super) fn take_spec_rows(&mut self) -> Vec<(u64, IoRecord)> {
        self.spec
            .as_mut()
            .map(|s| std::mem::take(&mut s.rows))
            .unwrap_or_default()
    }

    /// [`SPEC_COUNTS_ENV`]: the counts line, when asked for.
    pub(super) fn print_spec_counts(&self) {
        if let Some(s) = self.spec.as_ref().filter(|s| s.print_counts) {
            let c = s.counts;
            eprintln!(
                "bmoe: test: speculation queued={} cancelled={} adopted={} completed={}",
                c.queued, c.cancelled, c.adopted, c.completed
            );
        }
    }

    /// One expert's slice bytes over every tensor of `layer` (unaligned).
    fn slice_bytes(&self, layer: usize) -> u64 {
        match self.layout.layers.get(layer) {
            Some(Some(l)) => l.tensors.iter().map(|t| t.stride as u64).sum(),
            _ => 0,
        }
    }
}

/// A finished unit's io rows (`spec=1`).
fn spec_rows(d: &SpecDone) -> impl Iterator<Item = (u64, IoRecord)> + '_ {
    d.unit
        .jobs
        .iter()
        .zip(&d.timings)
        .zip(&d.seqs)
        .map(|((j, t), &seq)| (seq, super::io_record(d.unit.layer, j, t, true)))
}
