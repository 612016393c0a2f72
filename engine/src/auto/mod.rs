//! `--auto`: the lossless settings picked from facts the engine measures or reads, for the user
//! who types only `-m` and `-p` (issue #18 §3). Plain mode stays the default: it is the
//! documented baseline; `--auto` is opt-in.
//!
//! The rule is [`decide`], a pure function of [`Facts`] (so it is tested over many machines
//! without a model); [`measure`] gathers the facts, [`apply`] merges the choice with the flags
//! the command line gave (which always win). Every choice is printed on stderr with why, marked
//! `[measured]` when a measured or read fact decided it and `[assumed]` when the fact was not
//! available and a default stood in.
//!
//! What it picks, and why:
//! - **streaming** when the model file is larger than the memory this run can use
//!   (`MemAvailable`, or the memory cgroup's headroom when tighter) — the same test as the plain
//!   mode's oversize warning; a model that fits runs plain (resident mmap is the fastest).
//! - **the cache**: `--cache-mb auto` (sized once at load, [`crate::memory::autocache`]).
//! - **dense weights**: `anon` under that pressure (the page cache would drop dense pages and
//!   fault them back every token: bench-data/2026-11-29-engine-pressure), unless the dense set
//!   and one cache cycle do not fit the usable memory, then `mmap`.
//! - **overlap**: on; page waits through userfaultfd when the kernel allows it and the cache
//!   holds a token cycle, the staged waits otherwise (faster at cache off, and needing no
//!   userfaultfd: bench-data/2026-12-02-overlap).
//! - **lanes**: [`DEFAULT_LANES`] when its O_DIRECT read rate at the model's expert read size is
//!   within [`LANE_SHARE`] of the best in a short probe of the model file, else the fewest of
//!   1, 2, 4, 8 that are.
//! - **threads**: all the cores this process may use; `--adaptive-threads` too when other work
//!   kept some of them busy in a short `/proc/stat` sample (it measures, per token, whether
//!   fewer threads are faster: bench-data/2026-12-01-threads).
//!
//! Nothing lossy (routing edits, drafting) ever arms itself.

mod apply;
mod measure;

pub use apply::apply;

use crate::memory::autocache::{AutoBudget, AutoInputs, size_budget};
use crate::memory::dense::DenseWeights;

const MIB: u64 = 1024 * 1024;

/// A lane count is chosen when its probed rate is at least this share of the best rate, and
/// the default holds while it is. Not 0.9: the probe's noise is larger than 10 % here. In the
/// quiet-machine A/B (bench-data/2026-12-05-memory/auto-cg8-quiet-n64) a probe rated 4 lanes
/// 13 % below 1 lane. The 1-lane run it chose then decoded 1.21× slower than the hand-set 4
/// lanes, and a 2-lane pick was 1.07× slower; every 4-lane pick was 0.90–0.99×.
pub const LANE_SHARE: f64 = 0.75;

/// The lanes used when the probe could not measure them (the `--io-threads` default).
pub const DEFAULT_LANES: usize = 4;

/// Where a choice's deciding fact came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Measured on this machine, or read from the model file.
    Measured,
    /// Not available: a default stood in.
    Assumed,
}

impl Source {
    /// The tag printed after the reason.
    pub fn tag(self) -> &'static str {
        match self {
            Source::Measured => "[measured]",
            Source::Assumed => "[assumed]",
        }
    }
}

/// One lane count's probed read rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaneRate {
    /// Parallel readers.
    pub lanes: usize,
    /// MiB/s over the probe.
    pub mib_s: f64,
}

/// The O_DIRECT probe of the model file.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneProbe {
    /// Bytes per read (the model's largest expert slice, page aligned).
    pub read_bytes: u64,
    /// The rate of each lane count tried.
    pub rates: Vec<LaneRate>,
}

/// What `--auto` decides from.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// `/proc/meminfo` `MemAvailable`, bytes (0 = unreadable).
    pub mem_available: u64,
    /// The memory cgroup's headroom (limit − usage), bytes, inside a limited one.
    pub cgroup_headroom: Option<u64>,
    /// The model's files, bytes.
    pub model_bytes: u64,
    /// Its dense (non-expert) tensors, bytes.
    pub dense_bytes: u64,
    /// Every routed expert of every layer, bytes.
    pub expert_bytes: u64,
    /// One token's worst-case routed bytes (top-k experts in every layer).
    pub cache_cycle_bytes: u64,
    /// One layer's worst-case routed bytes.
    pub layer_load_bytes: u64,
    /// Whether this build streams the model's architecture (why not, when it does not).
    pub streamable: Result<(), Unavailable>,
    /// Whether userfaultfd can be opened (why not, when it cannot).
    pub uffd: Result<(), Unavailable>,
    /// The lane probe (why it did not run, when it did not).
    pub probe: Result<LaneProbe, Unavailable>,
    /// The cores this process may run on.
    pub cores: usize,
    /// Cores kept busy by other work during a short sample (`None` = not measured).
    pub busy_cores: Option<f64>,
}

/// Why a fact `--auto` decides from could not be had: said in the choice's note, and the
/// choice falls back to its default.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The model has no `*_exps.*` tensors.
    #[error("the model has no routed expert tensors to stream")]
    NoExperts,
    /// The architecture has no streaming recipe in this build.
    #[error("this build does not stream the '{0}' architecture (see --list-archs)")]
    Architecture(String),
    /// The kernel refused userfaultfd (the refusal's text, which names the step).
    #[error("{0}")]
    Userfault(String),
    /// A model file refused an O_DIRECT open.
    #[error("O_DIRECT open refused for {path}: {reason}")]
    DirectOpen {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error's text.
        reason: String,
    },
    /// An O_DIRECT read of the probe failed (the OS error's text).
    #[error("O_DIRECT read refused: {0}")]
    DirectRead(String),
    /// The probe had no slice to read, no buffer, or lost a thread.
    #[error("the read probe could not run: {0}")]
    Probe(&'static str),
}

/// Which setting a note is about (so a flag the user gave can replace it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// `--moe-stream`.
    Streaming,
    /// `--cache-mb`.
    Cache,
    /// `--dense-weights`.
    Dense,
    /// `--overlap` / `--overlap-kind`.
    Overlap,
    /// `--io-threads`.
    Lanes,
    /// `-t` / `--adaptive-threads`.
    Threads,
}

/// One choice with why.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// What it sets.
    pub setting: Setting,
    /// The choice and its reason, e.g. `streaming on — the model (…) is larger than …`.
    pub text: String,
    /// Measured or assumed.
    pub source: Source,
}

/// What `--auto` picked. The streaming settings are picked whether or not streaming is, so a
/// given `--moe-stream` still gets them.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// Stream the experts.
    pub stream: bool,
    /// The cache budget `--cache-mb auto` would size now (it sizes again at load).
    pub cache: AutoBudget,
    /// The dense-weight policy.
    pub dense: DenseWeights,
    /// `--overlap` with the staged waits instead of userfaultfd.
    pub overlap_staged: bool,
    /// `--io-threads`.
    pub io_threads: usize,
    /// `-t`.
    pub threads: usize,
    /// `--adaptive-threads`.
    pub adaptive_threads: bool,
    /// Every choice with why, in the order printed.
    pub notes: Vec<Note>,
}

fn mib(bytes: u64) -> u64 {
    bytes / MIB
}

/// The memory this run can use and where the figure came from; `None` when unreadable.
fn usable(f: &Facts) -> Option<(u64, &'static str)> {
    match (f.mem_available, f.cgroup_headroom) {
        (0, None) => None,
        (0, Some(h)) => Some((h, "memory cgroup limit − usage")),
        (m, Some(h)) if h < m => Some((h, "memory cgroup limit − usage")),
        (m, _) => Some((m, "MemAvailable")),
    }
}

/// Picks the settings (pure; see the module docs for the rules).
pub fn decide(f: &Facts) -> Choice {
    let mut notes = Vec::new();
    let mut note = |setting, source, text: String| {
        notes.push(Note {
            setting,
            text,
            source,
        })
    };
    let usable = usable(f);
    let (stream, source, why) = streaming(f, usable);
    note(Setting::Streaming, source, why);
    let cache = size_budget(&AutoInputs {
        mem_available: f.mem_available,
        cgroup_headroom: f.cgroup_headroom,
        floor_mb: None,
        ceil_mb: 0,
        total_expert_bytes: f.expert_bytes,
        cache_cycle_bytes: f.cache_cycle_bytes,
        layer_load_bytes: f.layer_load_bytes,
        dense_reserve_bytes: f.dense_bytes,
    });
    note(
        Setting::Cache,
        if usable.is_some() {
            Source::Measured
        } else {
            Source::Assumed
        },
        format!(
            "cache auto — sized at load from the usable memory (now about {} MiB; one token cycle is {} MiB)",
            cache.budget_mb,
            f.cache_cycle_bytes.div_ceil(MIB)
        ),
    );
    let (dense, source, why) = dense_policy(f, usable.map(|u| u.0));
    note(
        Setting::Dense,
        source,
        format!("dense {} — {why}", dense.as_str()),
    );
    let holds_cycle = !cache.below_cycle && cache.budget_mb > 0;
    let (overlap_staged, source, why) = overlap_kind(f, holds_cycle);
    note(
        Setting::Overlap,
        source,
        format!(
            "overlap {} — {why}",
            if overlap_staged { "staged" } else { "uffd" }
        ),
    );
    let (io_threads, source, why) = lanes(&f.probe);
    note(
        Setting::Lanes,
        source,
        format!("io-threads {io_threads} — {why}"),
    );
    let (threads, adaptive_threads, source, why) = threads(f.cores, f.busy_cores);
    note(
        Setting::Threads,
        source,
        format!(
            "threads {threads}{} — {why}",
            if adaptive_threads {
                " with --adaptive-threads"
            } else {
                ""
            }
        ),
    );
    Choice {
        stream,
        cache,
        dense,
        overlap_staged,
        io_threads,
        threads,
        adaptive_threads,
        notes,
    }
}

/// Streaming on when the model is larger than the usable memory and this build streams it.
fn streaming(f: &Facts, usable: Option<(u64, &str)>) -> (bool, Source, String) {
    let model = mib(f.model_bytes);
    match (&f.streamable, usable) {
        (Err(why), _) => (false, Source::Measured, format!("streaming off — {why}")),
        (Ok(()), None) => (
            false,
            Source::Assumed,
            format!(
                "streaming off — the usable memory could not be read, so the model ({model} MiB) is taken to fit"
            ),
        ),
        (Ok(()), Some((u, src))) if f.model_bytes > u => (
            true,
            Source::Measured,
            format!(
                "streaming on — the model ({model} MiB) is larger than the memory this run can use ({} MiB, {src})",
                mib(u)
            ),
        ),
        (Ok(()), Some((u, src))) => (
            false,
            Source::Measured,
            format!(
                "streaming off — the model ({model} MiB) fits the memory this run can use ({} MiB, {src}): plain mmap keeps it resident",
                mib(u)
            ),
        ),
    }
}

/// Userfaultfd waits when it opens and the cache holds a token cycle; staged waits otherwise.
/// Returns whether the overlap is staged.
fn overlap_kind(f: &Facts, holds_cycle: bool) -> (bool, Source, String) {
    match (&f.uffd, holds_cycle) {
        (Err(why), _) => (true, Source::Measured, why.to_string()),
        (Ok(()), false) => (
            true,
            Source::Measured,
            "the cache cannot hold one token cycle, where staged waits cost less than page faults"
                .to_string(),
        ),
        (Ok(()), true) => (
            false,
            Source::Measured,
            "userfaultfd is available and the cache holds a token cycle".to_string(),
        ),
    }
}

/// `anon` under pressure when the dense set and one token cycle fit; `mmap` otherwise.
fn dense_policy(f: &Facts, usable: Option<u64>) -> (DenseWeights, Source, String) {
    let dense = mib(f.dense_bytes);
    let Some(u) = usable else {
        return (
            DenseWeights::Mmap,
            Source::Assumed,
            "the usable memory could not be read: the page cache keeps the dense weights"
                .to_string(),
        );
    };
    if f.model_bytes <= u {
        return (
            DenseWeights::Mmap,
            Source::Measured,
            "no memory pressure: the page cache keeps the dense weights".to_string(),
        );
    }
    if f.dense_bytes + f.cache_cycle_bytes > u {
        return (
            DenseWeights::Mmap,
            Source::Measured,
            format!(
                "the dense weights ({dense} MiB) and one token cycle ({} MiB) exceed the usable {} MiB: pinning them would not fit",
                f.cache_cycle_bytes.div_ceil(MIB),
                mib(u)
            ),
        );
    }
    (
        DenseWeights::Anon,
        Source::Measured,
        format!(
            "under memory pressure the page cache would drop dense pages and re-read them every token: the {dense} MiB are pinned in anonymous memory"
        ),
    )
}

/// The fewest lanes within [`LANE_SHARE`] of the best probed rate.
fn lanes(probe: &Result<LaneProbe, Unavailable>) -> (usize, Source, String) {
    let p = match probe {
        Ok(p) if p.rates.iter().any(|r| r.mib_s > 0.0) => p,
        Ok(_) => {
            return (
                DEFAULT_LANES,
                Source::Assumed,
                "the read probe measured nothing".to_string(),
            );
        }
        Err(why) => {
            return (
                DEFAULT_LANES,
                Source::Assumed,
                format!("no read probe ({why})"),
            );
        }
    };
    let best = p.rates.iter().map(|r| r.mib_s).fold(0.0, f64::max);
    let mut rates = p.rates.clone();
    rates.sort_by_key(|r| r.lanes);
    // the default stays unless the probe clearly beats it: in the decode, reads overlap compute
    // and latency, and probes that picked 1 or 2 lanes on a near tie ran 1.07-1.4x slower than 4
    // (bench-data/2026-12-05-memory/auto-cg8*)
    let default_holds = rates
        .iter()
        .any(|r| r.lanes == DEFAULT_LANES && r.mib_s >= LANE_SHARE * best);
    let pick = if default_holds {
        DEFAULT_LANES
    } else {
        rates
            .iter()
            .find(|r| r.mib_s >= LANE_SHARE * best)
            .map_or(DEFAULT_LANES, |r| r.lanes)
    };
    let table: Vec<String> = rates
        .iter()
        .map(|r| format!("{}: {:.0}", r.lanes, r.mib_s))
        .collect();
    (
        pick,
        Source::Measured,
        format!(
            "O_DIRECT reads of {} KiB from the model file, MiB/s by lanes {}: {DEFAULT_LANES} when within {:.0} % of the best, else the fewest that are",
            p.read_bytes / 1024,
            table.join(", "),
            LANE_SHARE * 100.0
        ),
    )
}

/// Every core; `--adaptive-threads` too when other work holds some of them.
fn threads(cores: usize, busy: Option<f64>) -> (usize, bool, Source, String) {
    let cores = cores.max(1);
    let Some(busy) = busy else {
        return (
            cores,
            false,
            Source::Assumed,
            format!("the CPU load could not be sampled: all {cores} core(s) taken to be free"),
        );
    };
    let busy = busy.clamp(0.0, cores as f64);
    let free = ((cores as f64 - busy).round() as usize).max(1);
    if free >= cores {
        return (
            cores,
            false,
            Source::Measured,
            format!("all {cores} core(s) were idle"),
        );
    }
    (
        cores,
        true,
        Source::Measured,
        format!(
            "other work kept {busy:.1} of {cores} cores busy (about {free} free): each token measures whether fewer threads are faster"
        ),
    )
}

#[cfg(test)]
mod tests;
