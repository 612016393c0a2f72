//! `--cache-mb auto`: the expert-cache budget sized once at load from the memory this process
//! can actually use — `MemAvailable`, or the memory cgroup's headroom when that is tighter —
//! minus `--cache-floor-mb` left free, capped by `--cache-ceil-mb` and by the model's whole
//! expert set (a bigger cache could never fill).
//!
//! Unlike the original engine there is no absolute minimum (it forced 1500 MiB): inside a small
//! cgroup a budget above the headroom is an OOM kill, not a faster run. A budget below the
//! model's one-token worst case (`cache_cycle`) is allowed and warned about once.

use crate::memory::{CgroupMemory, MIB, SystemMemory};

/// Default `--cache-floor-mb`: MiB left free for everything else.
pub const DEFAULT_FLOOR_MB: u64 = 1536;

/// What the sizing sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AutoInputs {
    /// `/proc/meminfo` `MemAvailable` (bytes); 0 = unknown.
    pub mem_available: u64,
    /// The memory cgroup's headroom (bytes), when inside a limited one.
    pub cgroup_headroom: Option<u64>,
    /// MiB to leave free (`--cache-floor-mb`).
    pub floor_mb: u64,
    /// Cap in MiB (`--cache-ceil-mb`), 0 = none.
    pub ceil_mb: u64,
    /// Bytes of every expert of every layer (the cache can never hold more).
    pub total_expert_bytes: u64,
    /// One token's worst-case routed bytes (`cache_cycle`).
    pub cache_cycle_bytes: u64,
    /// Dense bytes the `anon` policy is about to copy into anonymous memory (0 for mmap/warm).
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

/// The sized budget and how it was reached (for the load-time note).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoBudget {
    /// The budget in MiB (0 = the cache is off: not even one MiB was free).
    pub budget_mb: u64,
    /// Usable memory before the floor, MiB (after the dense reserve).
    pub avail_mb: u64,
    /// Where `avail_mb` came from.
    pub source: AvailSource,
    /// The cap applied (ceil and/or whole expert set), MiB.
    pub cap_mb: u64,
    /// MiB reserved for the `anon` dense copy.
    pub dense_reserve_mb: u64,
    /// Whether the budget is below one token's worst case.
    pub below_cycle: bool,
}

const MIB_U: u64 = 1024 * 1024;

/// Sizes the budget (pure; see the module docs for the rule).
pub fn size_budget(i: &AutoInputs) -> AutoBudget {
    let (avail, source) = match (i.mem_available, i.cgroup_headroom) {
        (0, None) => (0, AvailSource::Unknown),
        (0, Some(h)) => (h, AvailSource::Cgroup),
        (m, Some(h)) if h < m => (h, AvailSource::Cgroup),
        (m, _) => (m, AvailSource::MemAvailable),
    };
    let dense_reserve = i.dense_reserve_bytes.min(avail);
    let avail = avail - dense_reserve;
    let total_mb = i.total_expert_bytes.div_ceil(MIB_U);
    let cap_mb = if i.ceil_mb > 0 {
        i.ceil_mb.min(total_mb)
    } else {
        total_mb
    };
    let budget_mb = match source {
        // nothing to measure against: one token cycle, the least that can hit at all
        AvailSource::Unknown => i.cache_cycle_bytes.div_ceil(MIB_U).min(cap_mb),
        _ => (avail / MIB_U).saturating_sub(i.floor_mb).min(cap_mb),
    };
    AutoBudget {
        budget_mb,
        avail_mb: avail / MIB_U,
        source,
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

impl AutoBudget {
    /// The load-time note (stderr), e.g.
    /// `cache auto — 20480 MiB available (MemAvailable), leaving 1536 MiB free → 18944 MiB budget (cap 24000 MiB)`.
    pub fn note(&self, floor_mb: u64) -> String {
        let src = match self.source {
            AvailSource::MemAvailable => "MemAvailable",
            AvailSource::Cgroup => "memory cgroup limit − usage",
            AvailSource::Unknown => "unknown: sized to one token cycle",
        };
        let reserve = if self.dense_reserve_mb > 0 {
            format!(
                " after reserving {} MiB for the dense-weight copy",
                self.dense_reserve_mb
            )
        } else {
            String::new()
        };
        format!(
            "cache auto — {} MiB available ({src}){reserve}, leaving {floor_mb} MiB free → {} MiB budget (cap {} MiB)",
            self.avail_mb, self.budget_mb, self.cap_mb
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

    const GIB: u64 = 1 << 30;

    fn inputs() -> AutoInputs {
        AutoInputs {
            mem_available: 20 * GIB,
            cgroup_headroom: None,
            floor_mb: DEFAULT_FLOOR_MB,
            ceil_mb: 0,
            total_expert_bytes: 16 * GIB,
            cache_cycle_bytes: GIB,
            dense_reserve_bytes: 0,
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
        assert!(!b.below_cycle);
    }

    #[test]
    fn a_tighter_cgroup_wins_and_the_budget_stays_below_its_headroom() {
        let b = size_budget(&AutoInputs {
            cgroup_headroom: Some(4 * GIB),
            floor_mb: 512,
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
        assert!(b.note(1536).contains("reserving 2048 MiB"));
    }

    #[test]
    fn too_little_memory_gives_a_small_budget_and_one_warning() {
        let b = size_budget(&AutoInputs {
            mem_available: 2 * GIB,
            ..inputs()
        });
        assert_eq!(b.budget_mb, 512);
        assert!(b.below_cycle);
        assert!(b.cycle_warning(GIB).unwrap().contains("1024.0 MiB"));
        let none = size_budget(&AutoInputs {
            mem_available: GIB,
            ..inputs()
        });
        assert_eq!(none.budget_mb, 0, "never more than is free");
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
