//! The expert cache policy: one LRU over (layer, expert) entries with a byte budget.
//!
//! Pure bookkeeping — no memory is touched here. The streamer asks [`ExpertCache::touch`] for
//! every routed expert of a load, reads the misses, then asks [`ExpertCache::evict_to_budget`]
//! which entries to release. Entries staged by the current load are never evicted, so a budget
//! of 0 ("cache off") keeps exactly the current layer's experts resident, and a single layer
//! bigger than the budget overshoots it until the next load.
//!
//! Speculative entries (the groundwork of `--prefetch`, issue #15) join at the cold end
//! ([`ExpertCache::insert_speculative`]) so a wrong guess is the first thing evicted. While a
//! lane still writes one it is *in flight*: never evicted, and a real lookup of it reports
//! [`Touch::InFlight`] so the caller waits for that read instead of handing half-written memory
//! to a layer or reading it a second time.

/// An entry: expert `expert` of layer `layer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    /// Layer index (the `<il>` of the graph's node names).
    pub layer: usize,
    /// Expert index within the layer.
    pub expert: usize,
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// Already resident: nothing to read.
    Hit,
    /// Not resident: the caller must read it; it is now accounted as resident.
    Miss {
        /// The entry had been resident before and was evicted (bytes paid for twice).
        reread: bool,
    },
    /// Resident because a speculative read completed, and this is the first real lookup of it
    /// (the route trace's `residency=2`). Counted as a hit and as a useful speculation.
    SpecHit,
    /// A speculative read of this entry is still in flight: the caller must wait for it (it
    /// now belongs to this load and can no longer be cancelled). Counted as a hit and as a
    /// useful speculation.
    InFlight,
}

/// Where a speculative entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// Not speculative (or no longer: a real lookup claimed it).
    No,
    /// Being read speculatively; nothing has asked for it yet.
    InFlight,
    /// Being read speculatively, and a real load already claimed it (it waits for the read).
    Adopted,
    /// Read speculatively, not looked up since.
    Landed,
}

/// Cumulative counters since the cache was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounters {
    /// Lookups (one per distinct routed expert per load).
    pub lookups: u64,
    /// Lookups served from memory.
    pub hits: u64,
    /// Entries released.
    pub evictions: u64,
    /// Misses on entries that had been evicted before.
    pub rereads: u64,
    /// Speculative entries whose read completed (the seed's `spec_experts`).
    pub spec_experts: u64,
    /// Speculative entries a later real lookup hit, landed or still in flight (`spec_useful`).
    pub spec_useful: u64,
}

const NIL: usize = usize::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    valid: bool,
    ever_evicted: bool,
    spec: Spec,
    stamp: u64,
    prev: usize,
    next: usize,
}

/// LRU over (layer, expert) with a budget in bytes.
#[derive(Debug, Clone)]
pub struct ExpertCache {
    n_expert: usize,
    entry_bytes: Vec<u64>,
    budget: u64,
    slots: Vec<Slot>,
    head: usize,
    tail: usize,
    resident: u64,
    generation: u64,
    counters: CacheCounters,
}

impl ExpertCache {
    /// A cache for `entry_bytes.len()` layers of `n_expert` experts each, where an entry of layer
    /// `il` costs `entry_bytes[il]` (0 for layers that are not streamed), holding at most
    /// `budget` bytes beyond the current load.
    pub fn new(n_expert: usize, entry_bytes: Vec<u64>, budget: u64) -> Self {
        let n = entry_bytes.len() * n_expert;
        let slot = Slot {
            valid: false,
            ever_evicted: false,
            spec: Spec::No,
            stamp: 0,
            prev: NIL,
            next: NIL,
        };
        Self {
            n_expert,
            entry_bytes,
            budget,
            slots: vec![slot; n],
            head: NIL,
            tail: NIL,
            resident: 0,
            generation: 0,
            counters: CacheCounters::default(),
        }
    }

    /// The budget in bytes (0 = the cache is off).
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes of entries currently resident.
    pub fn resident_bytes(&self) -> u64 {
        self.resident
    }

    /// Cumulative counters.
    pub fn counters(&self) -> CacheCounters {
        self.counters
    }

    /// Whether `id` is resident.
    pub fn is_resident(&self, id: EntryId) -> bool {
        self.index(id).is_some_and(|i| self.slots[i].valid)
    }

    /// Starts a new load: entries touched from now on are protected from eviction until the next
    /// call.
    pub fn begin_load(&mut self) {
        self.generation += 1;
    }

    /// Looks `id` up for the current load: a hit moves it to the front; a miss makes it resident
    /// (the caller reads it). Out-of-range ids are reported as `None` and change nothing.
    pub fn touch(&mut self, id: EntryId) -> Option<Touch> {
        let i = self.index(id)?;
        self.counters.lookups += 1;
        let gen_now = self.generation;
        if self.slots[i].valid {
            self.counters.hits += 1;
            self.slots[i].stamp = gen_now;
            self.move_to_front(i);
            let found = match self.slots[i].spec {
                Spec::No => Touch::Hit,
                Spec::Landed => {
                    self.slots[i].spec = Spec::No;
                    self.counters.spec_useful += 1;
                    Touch::SpecHit
                }
                Spec::InFlight => {
                    self.slots[i].spec = Spec::Adopted;
                    self.counters.spec_useful += 1;
                    Touch::InFlight
                }
                // a second load of the same entry while its read still runs (a layer repeats
                // before the lane finishes): it still has to wait, but counts once
                Spec::Adopted => Touch::InFlight,
            };
            return Some(found);
        }
        let reread = self.slots[i].ever_evicted;
        if reread {
            self.counters.rereads += 1;
        }
        let slot = &mut self.slots[i];
        slot.valid = true;
        slot.stamp = gen_now;
        self.resident += self.entry_bytes[id.layer];
        self.push_front(i);
        Some(Touch::Miss { reread })
    }

    /// Marks `id` as most recently used without counting a lookup (a duplicate routing of an
    /// expert already staged by this load).
    pub fn refresh(&mut self, id: EntryId) {
        if let Some(i) = self.index(id)
            && self.slots[i].valid
        {
            self.slots[i].stamp = self.generation;
            self.move_to_front(i);
        }
    }

    /// Releases least-recently-used entries until the resident bytes fit the budget, never
    /// touching entries of the current load nor entries a lane is still writing. Returns the
    /// released entries; the caller drops their memory.
    pub fn evict_to_budget(&mut self) -> Vec<EntryId> {
        self.release_cold(self.budget, 0)
    }

    /// Releases least-recently-used entries, coldest first, while `resident + extra > limit`:
    /// never one of the current load's, never one a lane is still writing.
    fn release_cold(&mut self, limit: u64, extra: u64) -> Vec<EntryId> {
        let mut out = Vec::new();
        let mut i = self.tail;
        while self.resident.saturating_add(extra) > limit && i != NIL {
            // walking towards the hot end: the current load's entries are all at the front,
            // so the first one met ends the walk
            if self.slots[i].stamp == self.generation {
                break;
            }
            let warmer = self.slots[i].prev;
            if !matches!(self.slots[i].spec, Spec::InFlight | Spec::Adopted) {
                out.push(self.release(i));
            }
            i = warmer;
        }
        out
    }

    /// Bytes of the entries the current load looked up or refreshed (the LRU's front run of
    /// entries stamped with this load): what the layer being computed holds.
    pub fn current_bytes(&self) -> u64 {
        let mut bytes = 0;
        let mut i = self.head;
        while i != NIL && self.slots[i].stamp == self.generation {
            bytes += self.entry_bytes[i / self.n_expert];
            i = self.slots[i].next;
        }
        bytes
    }

    /// Room for `extra` more bytes of speculative entries within the budget *beyond* the current
    /// load, whose entries hold `current` bytes: releases least-recently-used entries (never the
    /// current load's, never one a lane is still writing) until `resident + extra ≤ budget +
    /// current`. Returns the released entries (the caller drops their memory) and whether the
    /// room was made; when it cannot be, nothing is released.
    pub fn make_room(&mut self, extra: u64, current: u64) -> (Vec<EntryId>, bool) {
        let limit = self.budget.saturating_add(current);
        let mut releasable = 0u64;
        let mut i = self.tail;
        while i != NIL && self.slots[i].stamp != self.generation {
            if !matches!(self.slots[i].spec, Spec::InFlight | Spec::Adopted) {
                releasable += self.entry_bytes[i / self.n_expert];
            }
            i = self.slots[i].prev;
        }
        if self
            .resident
            .saturating_sub(releasable)
            .saturating_add(extra)
            > limit
        {
            return (Vec::new(), false);
        }
        let out = self.release_cold(limit, extra);
        let fits = self.resident.saturating_add(extra) <= limit;
        (out, fits)
    }

    /// Starts a speculative read of `id`: the entry is accounted resident, at the cold end, and
    /// in flight until [`complete_speculative`](Self::complete_speculative) or
    /// [`cancel_speculative`](Self::cancel_speculative). `false` (nothing changed) when `id` is
    /// out of range, resident or already in flight — there is nothing to read.
    pub fn insert_speculative(&mut self, id: EntryId) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        if self.slots[i].valid {
            return false;
        }
        if self.slots[i].ever_evicted {
            // paid for again, whoever asked: the seed's `rereads` counts reads, not lookups
            self.counters.rereads += 1;
        }
        let slot = &mut self.slots[i];
        slot.valid = true;
        slot.spec = Spec::InFlight;
        // older than anything: not protected by the load that happens to be running
        slot.stamp = 0;
        self.resident += self.entry_bytes[id.layer];
        self.push_back(i);
        true
    }

    /// The speculative read of `id` finished: counted in `spec_experts`; an entry nobody claimed
    /// yet waits at its place for its first lookup ([`Touch::SpecHit`]), an adopted one becomes
    /// a plain entry. No effect on an entry that is not in flight.
    pub fn complete_speculative(&mut self, id: EntryId) {
        let Some(i) = self.index(id) else {
            return;
        };
        let slot = &mut self.slots[i];
        if !slot.valid {
            return;
        }
        slot.spec = match slot.spec {
            Spec::InFlight => Spec::Landed,
            Spec::Adopted => Spec::No,
            Spec::No | Spec::Landed => return,
        };
        self.counters.spec_experts += 1;
    }

    /// Drops a speculative read that was queued or failed before anything claimed it (the entry
    /// is forgotten, not counted as an eviction). Returns `false`, changing nothing, when a real
    /// load already adopted it — that read must complete.
    pub fn cancel_speculative(&mut self, id: EntryId) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        if !(self.slots[i].valid && self.slots[i].spec == Spec::InFlight) {
            return false;
        }
        self.slots[i].spec = Spec::No;
        self.invalidate(id);
        true
    }

    /// Whether a lane is still writing `id` speculatively (adopted or not).
    pub fn is_in_flight(&self, id: EntryId) -> bool {
        self.index(id).is_some_and(|i| {
            self.slots[i].valid && matches!(self.slots[i].spec, Spec::InFlight | Spec::Adopted)
        })
    }

    /// Forgets `id` (its memory no longer holds the file's bytes). Not counted as an eviction.
    pub fn invalidate(&mut self, id: EntryId) {
        if let Some(i) = self.index(id)
            && self.slots[i].valid
        {
            self.unlink(i);
            self.slots[i].valid = false;
            self.slots[i].spec = Spec::No;
            self.resident -= self.entry_bytes[id.layer];
        }
    }

    fn release(&mut self, i: usize) -> EntryId {
        self.unlink(i);
        let id = EntryId {
            layer: i / self.n_expert,
            expert: i % self.n_expert,
        };
        let slot = &mut self.slots[i];
        slot.valid = false;
        slot.ever_evicted = true;
        slot.spec = Spec::No;
        self.resident -= self.entry_bytes[id.layer];
        self.counters.evictions += 1;
        id
    }

    fn index(&self, id: EntryId) -> Option<usize> {
        (id.expert < self.n_expert && id.layer < self.entry_bytes.len())
            .then(|| id.layer * self.n_expert + id.expert)
    }

    fn push_front(&mut self, i: usize) {
        self.slots[i].prev = NIL;
        self.slots[i].next = self.head;
        if self.head != NIL {
            self.slots[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn push_back(&mut self, i: usize) {
        self.slots[i].next = NIL;
        self.slots[i].prev = self.tail;
        if self.tail != NIL {
            self.slots[self.tail].next = i;
        }
        self.tail = i;
        if self.head == NIL {
            self.head = i;
        }
    }

    fn unlink(&mut self, i: usize) {
        let Slot { prev, next, .. } = self.slots[i];
        if prev != NIL {
            self.slots[prev].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.slots[next].prev = prev;
        } else {
            self.tail = prev;
        }
        self.slots[i].prev = NIL;
        self.slots[i].next = NIL;
    }

    fn move_to_front(&mut self, i: usize) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(layer: usize, expert: usize) -> EntryId {
        EntryId { layer, expert }
    }

    #[test]
    fn budget_zero_keeps_only_the_current_load() {
        let mut c = ExpertCache::new(4, vec![10, 10], 0);
        c.begin_load();
        assert_eq!(c.touch(id(0, 1)), Some(Touch::Miss { reread: false }));
        assert_eq!(c.touch(id(0, 2)), Some(Touch::Miss { reread: false }));
        assert!(c.evict_to_budget().is_empty(), "current load is protected");
        assert_eq!(c.resident_bytes(), 20);
        c.begin_load();
        c.touch(id(1, 0));
        let mut ev = c.evict_to_budget();
        ev.sort();
        assert_eq!(ev, vec![id(0, 1), id(0, 2)]);
        assert_eq!(c.resident_bytes(), 10);
        assert!(c.is_resident(id(1, 0)));
        c.begin_load();
        assert_eq!(c.touch(id(0, 1)), Some(Touch::Miss { reread: true }));
        assert_eq!(c.counters().rereads, 1);
        assert_eq!(c.counters().evictions, 2);
    }

    #[test]
    fn lru_order_decides_victims() {
        let mut c = ExpertCache::new(8, vec![10], 30);
        for e in 0..3 {
            c.begin_load();
            c.touch(id(0, e));
        }
        c.begin_load();
        assert_eq!(c.touch(id(0, 0)), Some(Touch::Hit)); // 0 becomes most recent
        c.begin_load();
        c.touch(id(0, 5));
        assert_eq!(c.evict_to_budget(), vec![id(0, 1)]);
        c.begin_load();
        c.touch(id(0, 6));
        assert_eq!(c.evict_to_budget(), vec![id(0, 2)]);
        assert_eq!(
            c.counters(),
            CacheCounters {
                lookups: 6,
                hits: 1,
                evictions: 2,
                rereads: 0,
                spec_experts: 0,
                spec_useful: 0,
            }
        );
    }

    #[test]
    fn refresh_reorders_without_a_lookup() {
        let mut c = ExpertCache::new(4, vec![10], 20);
        c.begin_load();
        c.touch(id(0, 0));
        c.begin_load();
        c.touch(id(0, 1));
        c.begin_load();
        c.refresh(id(0, 0));
        c.touch(id(0, 2));
        assert_eq!(c.evict_to_budget(), vec![id(0, 1)]);
        assert_eq!(c.counters().lookups, 3);
    }

    #[test]
    fn out_of_range_and_invalidate() {
        let mut c = ExpertCache::new(2, vec![10], 100);
        c.begin_load();
        assert_eq!(c.touch(id(0, 9)), None);
        assert_eq!(c.touch(id(3, 0)), None);
        c.touch(id(0, 1));
        c.invalidate(id(0, 1));
        assert!(!c.is_resident(id(0, 1)));
        assert_eq!(c.resident_bytes(), 0);
        assert_eq!(c.touch(id(0, 1)), Some(Touch::Miss { reread: false }));
    }

    #[test]
    fn big_budget_never_evicts() {
        let mut c = ExpertCache::new(4, vec![10, 20], 1000);
        for il in 0..2 {
            for e in 0..4 {
                c.begin_load();
                c.touch(id(il, e));
                assert!(c.evict_to_budget().is_empty());
            }
        }
        assert_eq!(c.resident_bytes(), 120);
    }

    #[test]
    fn a_wrong_guess_is_evicted_first_and_a_right_one_hits_once() {
        let mut c = ExpertCache::new(8, vec![10, 10], 30);
        c.begin_load();
        c.touch(id(0, 0));
        c.touch(id(0, 1));
        assert!(c.insert_speculative(id(1, 4)));
        assert!(c.insert_speculative(id(1, 5)));
        assert!(!c.insert_speculative(id(1, 5)), "already in flight");
        assert!(!c.insert_speculative(id(0, 0)), "already resident");
        c.complete_speculative(id(1, 4));
        c.complete_speculative(id(1, 5));
        assert_eq!(c.counters().spec_experts, 2);
        c.begin_load();
        assert_eq!(c.touch(id(1, 5)), Some(Touch::SpecHit));
        c.touch(id(1, 6));
        // 50 bytes over a 30-byte budget: the untouched guess (1,4) goes before the older real
        // entries, then the least recent of those
        assert_eq!(c.evict_to_budget(), vec![id(1, 4), id(0, 0)]);
        c.begin_load();
        assert_eq!(c.touch(id(1, 5)), Some(Touch::Hit), "residency=2 only once");
        let k = c.counters();
        assert_eq!((k.spec_experts, k.spec_useful), (2, 1));
        assert!(k.spec_useful <= k.spec_experts);
    }

    #[test]
    fn room_for_a_guess_comes_from_cold_entries_never_from_the_current_load() {
        let mut c = ExpertCache::new(8, vec![10, 10, 10], 30);
        c.begin_load();
        c.touch(id(0, 0));
        c.touch(id(0, 1));
        c.begin_load();
        c.touch(id(1, 2));
        c.touch(id(1, 3));
        c.touch(id(1, 4));
        // 50 resident over a 30-byte budget: the current load holds 30
        assert_eq!(c.current_bytes(), 30);
        assert_eq!(c.evict_to_budget(), vec![id(0, 0), id(0, 1)]);
        assert_eq!(c.resident_bytes(), 30);
        c.begin_load();
        c.touch(id(2, 0));
        assert_eq!(c.current_bytes(), 10);
        // 40 resident, the current load 10: 30 beyond it, the whole budget; 20 more bytes of
        // guesses need two cold entries released, least recent first
        let (out, fits) = c.make_room(20, c.current_bytes());
        assert!(fits);
        assert_eq!(out, vec![id(1, 2), id(1, 3)]);
        // more than the budget beyond the current load: it cannot fit, so nothing is released
        let (out, fits) = c.make_room(40, 10);
        assert!(!fits);
        assert!(out.is_empty());
        assert!(c.is_resident(id(1, 4)) && c.is_resident(id(2, 0)));
        // budget 0 (cache off): a guess never fits, nothing of the current load is released
        let mut off = ExpertCache::new(4, vec![10], 0);
        off.begin_load();
        off.touch(id(0, 1));
        assert_eq!(off.make_room(10, off.current_bytes()), (Vec::new(), false));
        assert!(off.is_resident(id(0, 1)));
    }

    #[test]
    fn an_entry_in_flight_is_never_evicted_and_a_real_lookup_adopts_it() {
        let mut c = ExpertCache::new(4, vec![10], 0);
        assert!(c.insert_speculative(id(0, 3)));
        c.begin_load();
        c.touch(id(0, 0));
        assert!(
            c.evict_to_budget().is_empty(),
            "in flight: the lane still writes it"
        );
        assert!(c.is_resident(id(0, 3)));
        c.begin_load();
        assert_eq!(c.touch(id(0, 3)), Some(Touch::InFlight));
        assert!(
            !c.cancel_speculative(id(0, 3)),
            "adopted: its read must complete"
        );
        assert!(c.is_in_flight(id(0, 3)));
        assert_eq!(c.evict_to_budget(), vec![id(0, 0)]);
        c.complete_speculative(id(0, 3));
        assert!(!c.is_in_flight(id(0, 3)));
        c.begin_load();
        assert_eq!(c.touch(id(0, 3)), Some(Touch::Hit));
        let k = c.counters();
        assert_eq!((k.spec_experts, k.spec_useful, k.hits), (1, 1, 2));
    }

    #[test]
    fn cancelled_speculation_is_forgotten_and_rereads_count_reads() {
        let mut c = ExpertCache::new(4, vec![10], 0);
        c.begin_load();
        c.touch(id(0, 1));
        c.begin_load();
        c.touch(id(0, 2));
        assert_eq!(c.evict_to_budget(), vec![id(0, 1)]);
        assert!(c.insert_speculative(id(0, 1)));
        assert_eq!(c.counters().rereads, 1, "bytes paid for twice");
        assert!(c.cancel_speculative(id(0, 1)));
        assert!(!c.is_resident(id(0, 1)));
        assert_eq!(c.resident_bytes(), 10);
        assert_eq!(c.counters().evictions, 1, "a cancel is not an eviction");
        c.complete_speculative(id(0, 1));
        assert_eq!(c.counters().spec_experts, 0, "nothing completed");
    }
}
