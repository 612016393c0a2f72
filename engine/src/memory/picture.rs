//! The memory picture a token row carries: this process's resident/anonymous/file/swap split
//! (`/proc/self/status`), what the machine claims about itself (`/proc/meminfo`), and — inside a
//! container or an emulated device — the memory cgroup's own limit and usage (v1 or v2).
//!
//! Everything here is read from text files, so every parser is a pure function tested on
//! captured text; the readers return `None` where the platform has no such file (the CSV then
//! writes `0`, the seed's "unmeasured").

use std::fs;
use std::path::{Path, PathBuf};

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

/// cgroup v1 reports "no limit" as a huge page-rounded number; anything at or above this is
/// treated as unlimited.
const V1_UNLIMITED: u64 = 1 << 62;

/// Per-process memory, from `/proc/self/status` (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// `VmRSS`.
    pub rss: u64,
    /// `RssAnon`: the expert cache (and `anon` dense buffers) live here.
    pub rss_anon: u64,
    /// `RssFile`: the mmap'd model.
    pub rss_file: u64,
    /// `VmSwap`.
    pub swap: u64,
}

/// Machine-wide memory, from `/proc/meminfo` (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemMemory {
    /// `MemAvailable`.
    pub available: u64,
    /// `MemFree`.
    pub free: u64,
    /// `SwapFree`.
    pub swap_free: u64,
}

/// Which cgroup hierarchy a limit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1 `memory` controller.
    V1,
    /// cgroup v2 unified hierarchy.
    V2,
}

/// The memory cgroup this process is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMemory {
    /// Hierarchy.
    pub version: CgroupVersion,
    /// The cgroup's directory.
    pub dir: PathBuf,
    /// The tightest limit on the way to the root (bytes), `None` when unlimited.
    pub limit: Option<u64>,
    /// Current usage of this cgroup (bytes), page cache included.
    pub usage: u64,
    /// File pages inside `usage` (`memory.stat` active + inactive file): page cache — for us
    /// mostly the model's own mapping — that the kernel reclaims before it would OOM-kill
    /// anything. A cgroup fills up to its limit with it, so `limit − usage` alone reads ~0.
    pub reclaimable: u64,
}

impl CgroupMemory {
    /// Bytes left before the limit, counting file-backed page cache as free (it is reclaimed
    /// on demand), `None` when unlimited.
    pub fn headroom(&self) -> Option<u64> {
        let used = self.usage.saturating_sub(self.reclaimable);
        self.limit.map(|l| l.saturating_sub(used))
    }
}

/// One sample of everything above.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemorySnapshot {
    /// This process (`None` off Linux).
    pub process: Option<ProcessMemory>,
    /// The machine (`None` off Linux).
    pub system: Option<SystemMemory>,
}

impl MemorySnapshot {
    /// Reads `/proc/self/status` and `/proc/meminfo` now (two small file reads).
    pub fn sample() -> Self {
        Self {
            process: fs::read_to_string("/proc/self/status")
                .ok()
                .map(|t| parse_status(&t)),
            system: fs::read_to_string("/proc/meminfo")
                .ok()
                .map(|t| parse_meminfo(&t)),
        }
    }
}

/// The value of a `Key:   1234 kB` line, in bytes.
fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let n: u64 = words.next()?.parse().ok()?;
        let unit = words.next().unwrap_or("");
        Some(if unit.eq_ignore_ascii_case("kb") {
            n.saturating_mul(1024)
        } else {
            n
        })
    })
}

/// Parses `/proc/self/status` text (missing keys read as 0: old kernels lack `RssAnon`).
pub fn parse_status(text: &str) -> ProcessMemory {
    ProcessMemory {
        rss: kb_field(text, "VmRSS").unwrap_or(0),
        rss_anon: kb_field(text, "RssAnon").unwrap_or(0),
        rss_file: kb_field(text, "RssFile").unwrap_or(0),
        swap: kb_field(text, "VmSwap").unwrap_or(0),
    }
}

/// Parses `/proc/meminfo` text.
pub fn parse_meminfo(text: &str) -> SystemMemory {
    SystemMemory {
        available: kb_field(text, "MemAvailable").unwrap_or(0),
        free: kb_field(text, "MemFree").unwrap_or(0),
        swap_free: kb_field(text, "SwapFree").unwrap_or(0),
    }
}

/// Where this process sits, from `/proc/self/cgroup` text: the v1 `memory` controller's path
/// if there is one, else the v2 (`0::`) path.
pub fn parse_proc_cgroup(text: &str) -> Option<(CgroupVersion, String)> {
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some((CgroupVersion::V1, path.to_string()));
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some((CgroupVersion::V2, path.to_string()));
        }
    }
    v2
}

/// A v1 limit file's value: `None` for the "unlimited" sentinel.
pub fn parse_v1_limit(text: &str) -> Option<u64> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|&v| v < V1_UNLIMITED)
}

/// A v2 `memory.max` value: `None` for `max`.
pub fn parse_v2_max(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The memory cgroup of this process under the usual mount points (`/sys/fs/cgroup/memory` for
/// v1, `/sys/fs/cgroup` for v2). `None` when not in one or the files are not readable.
pub fn cgroup_memory() -> Option<CgroupMemory> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let (version, rel) = parse_proc_cgroup(&text)?;
    let root = match version {
        CgroupVersion::V1 => Path::new("/sys/fs/cgroup/memory"),
        CgroupVersion::V2 => Path::new("/sys/fs/cgroup"),
    };
    cgroup_at(version, root, &rel)
}

/// The memory cgroup `rel` under the hierarchy mounted at `root`: its usage and the tightest
/// limit between it and `root` (a parent's limit binds its children too).
pub fn cgroup_at(version: CgroupVersion, root: &Path, rel: &str) -> Option<CgroupMemory> {
    let rel = rel.trim_start_matches('/');
    let mut dir = root.join(rel);
    if !dir.is_dir() {
        // inside a cgroup namespace the mount's root is already our own group
        dir = root.to_path_buf();
    }
    let (limit_file, usage_file) = match version {
        CgroupVersion::V1 => ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        CgroupVersion::V2 => ("memory.max", "memory.current"),
    };
    let usage = read_trimmed(&dir.join(usage_file))?.parse().ok()?;
    let keys: [&str; 2] = match version {
        CgroupVersion::V1 => ["total_active_file", "total_inactive_file"],
        CgroupVersion::V2 => ["active_file", "inactive_file"],
    };
    let reclaimable = fs::read_to_string(dir.join("memory.stat"))
        .ok()
        .map(|t| keys.iter().filter_map(|k| stat_field(&t, k)).sum::<u64>())
        .unwrap_or(0)
        .min(usage);
    let mut limit: Option<u64> = None;
    let mut at = dir.clone();
    loop {
        if let Some(text) = read_trimmed(&at.join(limit_file)) {
            let l = match version {
                CgroupVersion::V1 => parse_v1_limit(&text),
                CgroupVersion::V2 => parse_v2_max(&text),
            };
            if let Some(l) = l {
                limit = Some(limit.map_or(l, |m: u64| m.min(l)));
            }
        }
        if at == root {
            break;
        }
        match at.parent() {
            Some(p) if p.starts_with(root) => at = p.to_path_buf(),
            _ => break,
        }
    }
    Some(CgroupMemory {
        version,
        dir,
        limit,
        usage,
        reclaimable,
    })
}

/// The value of a `key value` line of a cgroup `memory.stat`.
pub fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Bytes → MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tbmoe-cli\nVmPeak:\t  123456 kB\nVmRSS:\t   20480 kB\nRssAnon:\t    8192 kB\nRssFile:\t   12288 kB\nRssShmem:\t       0 kB\nVmSwap:\t       4 kB\n";
    const MEMINFO: &str = "MemTotal:       24683656 kB\nMemFree:         1000000 kB\nMemAvailable:   21104212 kB\nSwapTotal: 0 kB\nSwapFree:              0 kB\n";

    #[test]
    fn status_fields_in_bytes() {
        let p = parse_status(STATUS);
        assert_eq!(p.rss, 20480 * 1024);
        assert_eq!(p.rss_anon, 8192 * 1024);
        assert_eq!(p.rss_file, 12288 * 1024);
        assert_eq!(p.swap, 4096);
        // VmRSS must not be confused with a key that merely starts the same way
        assert_eq!(parse_status("VmRSSx: 5 kB\n").rss, 0);
    }

    #[test]
    fn meminfo_fields_in_bytes() {
        let m = parse_meminfo(MEMINFO);
        assert_eq!(m.available, 21_104_212 * 1024);
        assert_eq!(m.free, 1_000_000 * 1024);
        assert_eq!(m.swap_free, 0);
    }

    #[test]
    fn proc_cgroup_prefers_the_v1_memory_controller() {
        let v1 = "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n";
        assert_eq!(
            parse_proc_cgroup(v1),
            Some((CgroupVersion::V1, "/process_api/abc".to_string()))
        );
        assert_eq!(
            parse_proc_cgroup("3:cpu,memory:/x\n"),
            Some((CgroupVersion::V1, "/x".into()))
        );
        assert_eq!(
            parse_proc_cgroup("0::/user.slice/app\n"),
            Some((CgroupVersion::V2, "/user.slice/app".into()))
        );
        assert_eq!(parse_proc_cgroup("garbage"), None);
    }

    #[test]
    fn limit_sentinels_mean_unlimited() {
        assert_eq!(parse_v1_limit("9223372036854771712\n"), None);
        assert_eq!(parse_v1_limit("8589934592"), Some(8 << 30));
        assert_eq!(parse_v2_max("max\n"), None);
        assert_eq!(parse_v2_max("1073741824"), Some(1 << 30));
    }

    #[test]
    fn tightest_limit_on_the_path_wins() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join("a");
        let child = parent.join("b");
        fs::create_dir_all(&child).unwrap();
        fs::write(root.path().join("memory.max"), "max\n").unwrap();
        fs::write(parent.join("memory.max"), "1048576\n").unwrap();
        fs::write(child.join("memory.max"), "max\n").unwrap();
        fs::write(child.join("memory.current"), "16384\n").unwrap();
        fs::write(
            child.join("memory.stat"),
            "anon 4096\nactive_file 4096\ninactive_file 8192\n",
        )
        .unwrap();
        let cg = cgroup_at(CgroupVersion::V2, root.path(), "/a/b").unwrap();
        assert_eq!(cg.limit, Some(1_048_576));
        assert_eq!((cg.usage, cg.reclaimable), (16384, 12288));
        assert_eq!(cg.headroom(), Some(1_048_576 - 4096));
        // no usage file → not a cgroup we can read
        assert_eq!(cgroup_at(CgroupVersion::V1, root.path(), "/a"), None);
    }

    #[test]
    fn live_sample_on_linux_is_positive() {
        if !Path::new("/proc/self/status").exists() {
            eprintln!("skipped: no /proc on this platform");
            return;
        }
        let s = MemorySnapshot::sample();
        let p = s.process.unwrap();
        assert!(p.rss > 0 && p.rss >= p.rss_anon);
        assert!(s.system.unwrap().available > 0);
    }
}
