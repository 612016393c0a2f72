//! `--cache-mb auto`: the expert-cache budget sized once at load from the memory this process
//! can actually use — `MemAvailable`, or the memory cgroup's headroom when that is tighter —
//! minus the dense weights (which must stay resident whatever `--dense-weights` says) and a
//! floor left free, capped by `--cache-ceil-mb` and by the model's whole expert set (a bigger
//! cache could never fill).
//!
//! The floor: `--cache-floor-mb F` leaves exactly F MiB free. Unset, the floor scales with
//! what there is: a quarter of the usable memory, at least [`MIN_FLOOR_MB`] (and twice one
//! layer's load, the transient overshoot of a load), at most [`DEFAULT_FLOOR_MB`]. When that
//! leaves the budget below the model's one-token worst case (`cache_cycle`), the scaled floor
//! gives way — down to its minimum — so the budget reaches one cycle: an LRU smaller than the
//! cycle it serves evicts each expert before its next use and hits almost never, so those
//! MiB buy nothing as cache, while as headroom they are only slack. A fixed 1536 MiB floor
//! sized 470 MiB inside a 3 GiB cgroup on the Qwen3-30B-A3B shape (cycle 972 MiB); the scaled
//! floor sizes 1505 MiB there.
//!
//! Unlike the original engine there is no absolute minimum budget (it forced 1500 MiB): inside
//! a small cgroup a budget above the headroom is an OOM kill, not a faster run. A budget below
//! `cache_cycle` is allowed and warned about once.

use crate::memory::picture::{CgroupMemory, MIB, SystemMemory};

/// The most an unset `--cache-floor-mb` leaves free, MiB (what a large machine keeps for
/// everything else).
pub const DEFAULT_FLOOR_MB: u64 = 1536;

/// The least an unset `--cache-floor-mb` leaves free, MiB.
pub const MIN_FLOOR_MB: u64 = 128;

/// An unset floor is this fraction (1/n) of the usable memory before clamping.
const FLOOR_SHARE: u64 = 4;

/// What the sizing sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AutoInputs {
    /// `/proc/meminfo` `MemAvailable` (bytes); 0 = unknown.
    pub mem_available: u64,
    /// The memory cgroup's headroom (bytes), when inside a limited one.
    pub cgroup_headroom: Option<u64>,
    /// MiB to leave free (`--cache-floor-mb`); `None` = scaled (see the module docs).
    pub floor_mb: Option<u64>,
    /// Cap in MiB (`--cache-ceil-mb`), 0 = none.
    pub ceil_mb: u64,
    /// Bytes of every expert of every layer (the cache can never hold more).
    pub total_expert_bytes: u64,
    /// One token's worst-case routed bytes (`cache_cycle`).
    pub cache_cycle_bytes: u64,
    /// One token's worst-case routed bytes in the widest layer (top-k × its expert bytes).
    pub layer_load_bytes: u64,
    /// Dense (non-expert) weight bytes: they must stay resident, so they are reserved first
    /// (file-backed pages count as free memory in both figures above).
    pub dense_reserve_bytes: u64,
}

/// Where the usable-memory figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvailSource {
    /// `/proc/meminfo` `MemAvailable`.
    MemAvailable,
    /// The memory cgroup's limit minus its usage (tighter than `MemAvailable`).
    Cgroup,
    /// Neither could be read.
    Unknown,
}

/// How the floor was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorRule {
    /// `--cache-floor-mb` as given.
    Explicit,
    /// Scaled with the usable memory.
    Scaled,
    /// Scaled, then lowered so the budget holds one cache cycle.
    GaveWayToCycle,
}

/// The sized budget and how it was reached (for the load-time note).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoBudget {
    /// The budget in MiB (0 = the cache is off: not even one MiB was free).
    pub budget_mb: u64,
    /// Usable memory before the floor, MiB (after the dense reserve).
    pub avail_mb: u64,
    /// Where `avail_mb` came from.
    pub source: AvailSource,
    /// The floor left free, MiB.
    pub floor_mb: u64,
    /// How the floor was chosen.
    pub floor_rule: FloorRule,
    /// The cap applied (ceil and/or whole expert set), MiB.
    pub cap_mb: u64,
    /// MiB reserved for the dense weights.
    pub dense_reserve_mb: u64,
    /// Whether the budget is below one token's worst case.
    pub below_cycle: bool,
}

const MIB_U: u64 = 1024 * 1024;

/// The unset floor's bounds for `usable_mb` of usable memory: `(scaled, minimum)`.
pub fn scaled_floor_mb(usable_mb: u64, layer_load_bytes: u64) -> (u64, u64) {
    let min = MIN_FLOOR_MB.max(2 * layer_load_bytes.div_ceil(MIB_U));
    let scaled = (usable_mb / FLOOR_SHARE).min(DEFAULT_FLOOR_MB).max(min);
    (scaled, min)
}

/// Sizes the budget (pure; see the module docs for the rule).
pub fn size_budget(i: &AutoInputs) -> AutoBudget {
    let (avail, source) = match (i.mem_available, i.cgroup_headroom) {
        (0, None) => (0, AvailSource::Unknown),
        (0, Some(h)) => (h, AvailSource::Cgroup),
        (m, Some(h)) if h < m => (h, AvailSource::Cgroup),
        (m, _) => (m, AvailSource::MemAvailable),
    };
    let dense_reserve = i.dense_reserve_bytes.min(avail);
    let usable_mb = (avail - dense_reserve) / MIB_U;
    let total_mb = i.total_expert_bytes.div_ceil(MIB_U);
    let cap_mb = if i.ceil_mb > 0 {
        i.ceil_mb.min(total_mb)
    } else {
        total_mb
    };
    let cycle_mb = i.cache_cycle_bytes.div_ceil(MIB_U);
    let (floor_mb, floor_rule, budget_mb) = match (source, i.floor_mb) {
        // nothing to measure against: one token cycle, the least that can hit at all
        (AvailSource::Unknown, f) => (
            f.unwrap_or(0),
            if f.is_some() {
                FloorRule::Explicit
            } else {
                FloorRule::Scaled
            },
            cycle_mb.min(cap_mb),
        ),
        (_, Some(f)) => (
            f,
            FloorRule::Explicit,
            usable_mb.saturating_sub(f).min(cap_mb),
        ),
        (_, None) => {
            let (scaled, min) = scaled_floor_mb(usable_mb, i.layer_load_bytes);
            let budget = usable_mb.saturating_sub(scaled);
            if budget < cycle_mb.min(cap_mb) && usable_mb > min {
                // give way: up to one cycle, never below the minimum floor
                let b = cycle_mb.min(cap_mb).min(usable_mb - min);
                (usable_mb - b, FloorRule::GaveWayToCycle, b)
            } else {
                (scaled, FloorRule::Scaled, budget.min(cap_mb))
            }
        }
    };
    AutoBudget {
        budget_mb,
        avail_mb: usable_mb,
        source,
        floor_mb,
        floor_rule,
        cap_mb,
        dense_reserve_mb: dense_reserve / MIB_U,
        below_cycle: budget_mb.saturating_mul(MIB_U) < i.cache_cycle_bytes,
    }
}

/// Reads the inputs' memory side from this machine (`MemAvailable`, cgroup headroom).
pub fn measure(system: Option<SystemMemory>, cgroup: Option<&CgroupMemory>) -> (u64, Option<u64>) {
    (
        system.map_or(0, |s| s.available),
        cgroup.and_then(CgroupMemory::headroom),
    )
}

/// The warning a plain (non-streamed) run prints once when the model is larger than the memory
/// it can use (`MemAvailable`, or the memory cgroup's headroom when tighter): plain mmap then
/// re-reads weights from flash on every token. `None` when it fits or nothing was measured.
pub fn plain_oversize_warning(
    model_bytes: u64,
    mem_available: u64,
    cgroup_headroom: Option<u64>,
) -> Option<String> {
    let (usable, source) = match cgroup_headroom {
        Some(c) if c < mem_available || mem_available == 0 => (c, "memory cgroup limit − usage"),
        _ => (mem_available, "MemAvailable"),
    };
    if usable == 0 || model_bytes <= usable {
        return None;
    }
    Some(format!(
        "the model ({} MiB) is larger than the memory this run can use ({} MiB, {source}): plain mmap will re-read weights from flash on every token — run with --moe-stream to stream the experts, or --auto to let bmoe pick the settings",
        model_bytes / MIB_U,
        usable / MIB_U
    ))
}

impl AutoBudget {
    /// The load-time note (stderr), e.g.
    /// `cache auto — 2006 MiB available (memory cgroup limit − usage) after reserving 971 MiB for the dense weights, leaving 501 MiB free (scaled) → 1505 MiB budget (cap 15552 MiB)`.
    pub fn note(&self) -> String {
        let src = match self.source {
            AvailSource::MemAvailable => "MemAvailable",
            AvailSource::Cgroup => "memory cgroup limit − usage",
            AvailSource::Unknown => "unknown: sized to one token cycle",
        };
        let reserve = if self.dense_reserve_mb > 0 {
            format!(
                " after reserving {} MiB for the dense weights",
                self.dense_reserve_mb
            )
        } else {
            String::new()
        };
        let rule = match self.floor_rule {
            FloorRule::Explicit => "--cache-floor-mb",
            FloorRule::Scaled => "scaled",
            FloorRule::GaveWayToCycle => "scaled, lowered to fit one cache cycle",
        };
        format!(
            "cache auto — {} MiB available ({src}){reserve}, leaving {} MiB free ({rule}) → {} MiB budget (cap {} MiB)",
            self.avail_mb, self.floor_mb, self.budget_mb, self.cap_mb
        )
    }

    /// The one-time warning when the budget cannot hold a token cycle.
    pub fn cycle_warning(&self, cycle_bytes: u64) -> Option<String> {
        self.below_cycle.then(|| {
            format!(
                "cache auto sized {} MiB, below this model's cache cycle ({:.1} MiB): most lookups will miss",
                self.budget_mb,
                cycle_bytes as f64 / MIB
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_oversize_warns_only_when_the_model_exceeds_usable_memory() {
        const G: u64 = 1 << 30;
        assert_eq!(plain_oversize_warning(4 * G, 8 * G, None), None);
        let w = plain_oversize_warning(17 * G, 20 * G, Some(8 * G)).expect("cgroup is tighter");
        assert!(
            w.contains("8192 MiB")
                && w.contains("cgroup")
                && w.contains("--moe-stream")
                && w.contains("--auto"),
            "{w}"
        );
        let w = plain_oversize_warning(17 * G, 6 * G, Some(8 * G)).expect("MemAvailable tighter");
        assert!(w.contains("6144 MiB") && w.contains("MemAvailable"), "{w}");
        assert_eq!(
            plain_oversize_warning(17 * G, 0, None),
            None,
            "nothing measured"
        );
    }

    const GIB: u64 = 1 << 30;
    const MIB_: u64 = 1 << 20;

    fn inputs() -> AutoInputs {
        AutoInputs {
            mem_available: 20 * GIB,
            cgroup_headroom: None,
            floor_mb: Some(DEFAULT_FLOOR_MB),
            ceil_mb: 0,
            total_expert_bytes: 16 * GIB,
            cache_cycle_bytes: GIB,
            layer_load_bytes: 20 * MIB_,
            dense_reserve_bytes: 0,
        }
    }

    /// The Qwen3-30B-A3B shape: 972 MiB cycle, 20.25 MiB per layer load, 971 MiB dense.
    fn qwen3(headroom_mb: u64) -> AutoInputs {
        AutoInputs {
            mem_available: 20 * GIB,
            cgroup_headroom: Some(headroom_mb * MIB_),
            floor_mb: None,
            ceil_mb: 0,
            total_expert_bytes: 15552 * MIB_,
            cache_cycle_bytes: 972 * MIB_,
            layer_load_bytes: 20 * MIB_ + 256 * 1024,
            dense_reserve_bytes: 971 * MIB_,
        }
    }

    #[test]
    fn mem_available_minus_floor_capped_by_the_expert_set() {
        let b = size_budget(&inputs());
        assert_eq!(b.source, AvailSource::MemAvailable);
        // 20 GiB − 1536 MiB = 18944 MiB, above the 16 GiB expert set → capped
        assert_eq!(b.budget_mb, 16 * 1024);
        let b = size_budget(&AutoInputs {
            mem_available: 8 * GIB,
            ..inputs()
        });
        assert_eq!(b.budget_mb, 8 * 1024 - 1536);
        assert_eq!(b.floor_rule, FloorRule::Explicit);
        assert!(!b.below_cycle);
    }

    #[test]
    fn a_tighter_cgroup_wins_and_the_budget_stays_below_its_headroom() {
        let b = size_budget(&AutoInputs {
            cgroup_headroom: Some(4 * GIB),
            floor_mb: Some(512),
            ..inputs()
        });
        assert_eq!(b.source, AvailSource::Cgroup);
        assert_eq!(b.budget_mb, 4 * 1024 - 512);
        // a looser cgroup changes nothing
        let c = size_budget(&AutoInputs {
            cgroup_headroom: Some(64 * GIB),
            ..inputs()
        });
        assert_eq!(c.source, AvailSource::MemAvailable);
    }

    #[test]
    fn ceil_and_dense_reserve() {
        let b = size_budget(&AutoInputs {
            ceil_mb: 2000,
            ..inputs()
        });
        assert_eq!((b.budget_mb, b.cap_mb), (2000, 2000));
        let b = size_budget(&AutoInputs {
            mem_available: 8 * GIB,
            dense_reserve_bytes: 2 * GIB,
            ..inputs()
        });
        assert_eq!(b.budget_mb, 6 * 1024 - 1536);
        assert_eq!(b.dense_reserve_mb, 2048);
        assert!(b.note().contains("reserving 2048 MiB"));
    }

    #[test]
    fn an_explicit_floor_is_kept_even_below_the_cycle() {
        let b = size_budget(&AutoInputs {
            mem_available: 2 * GIB,
            ..inputs()
        });
        assert_eq!((b.budget_mb, b.floor_mb), (512, 1536));
        assert!(b.below_cycle);
        assert!(b.cycle_warning(GIB).unwrap().contains("1024.0 MiB"));
        let none = size_budget(&AutoInputs {
            mem_available: GIB,
            ..inputs()
        });
        assert_eq!(none.budget_mb, 0, "never more than is free");
    }

    #[test]
    fn the_scaled_floor_follows_the_limit() {
        // 3 GiB cgroup after load (the quiet benchmark's figures): 2977 MiB headroom
        let b = size_budget(&qwen3(2977));
        assert_eq!(b.avail_mb, 2006);
        assert_eq!((b.floor_mb, b.floor_rule), (501, FloorRule::Scaled));
        assert_eq!(b.budget_mb, 1505);
        assert!(!b.below_cycle, "a 3 GiB device holds one cycle");
        assert!(
            b.note().contains("leaving 501 MiB free (scaled)"),
            "{}",
            b.note()
        );
        // 8 GiB: a quarter would be more than the cap: 1536 MiB kept free
        let b = size_budget(&qwen3(8000));
        assert_eq!(b.floor_mb, DEFAULT_FLOOR_MB);
        assert_eq!(b.budget_mb, 8000 - 971 - 1536);
        // the floor grows with the limit and never passes its bounds
        let mut last = 0;
        for mb in (1200..40000).step_by(700) {
            let b = size_budget(&qwen3(mb));
            assert!(b.floor_mb >= last || b.floor_rule == FloorRule::GaveWayToCycle);
            assert!(
                (MIN_FLOOR_MB..=DEFAULT_FLOOR_MB).contains(&b.floor_mb),
                "{mb}: {b:?}"
            );
            assert!(b.budget_mb + b.floor_mb <= b.avail_mb, "{mb}: {b:?}");
            if b.floor_rule == FloorRule::Scaled {
                last = b.floor_mb;
            }
        }
    }

    #[test]
    fn the_scaled_floor_gives_way_to_one_cycle_but_not_below_its_minimum() {
        // 2.2 GiB: a quarter of the 1282 usable MiB (320) would leave 962 < 972 MiB
        let b = size_budget(&qwen3(2253));
        assert_eq!(b.avail_mb, 1282);
        assert_eq!(b.floor_rule, FloorRule::GaveWayToCycle);
        assert_eq!((b.budget_mb, b.floor_mb), (972, 310));
        assert!(!b.below_cycle);
        // 2 GiB: even the minimum floor cannot make room for a cycle: stop at the minimum
        let b = size_budget(&qwen3(2000));
        assert_eq!(b.avail_mb, 1029);
        assert_eq!(
            (b.floor_mb, b.budget_mb),
            (MIN_FLOOR_MB, 1029 - MIN_FLOOR_MB)
        );
        assert!(b.below_cycle);
        // the minimum also covers a load's transient overshoot (two layer loads)
        let (_, min) = scaled_floor_mb(10_000, 100 * MIB_);
        assert_eq!(min, 200);
    }

    #[test]
    fn unknown_memory_sizes_one_cycle() {
        let b = size_budget(&AutoInputs {
            mem_available: 0,
            ..inputs()
        });
        assert_eq!((b.source, b.budget_mb), (AvailSource::Unknown, 1024));
        assert!(b.cycle_warning(GIB).is_none());
    }
}
