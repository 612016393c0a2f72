//! Memory-capped runs: a memory cgroup per run (v1 `memory.limit_in_bytes` or v2 `memory.max`,
//! whichever the device has), created and removed by shell scripts run on the device, so a
//! phone's RAM is emulated on a bigger machine, locally or over ssh.

use serde::{Deserialize, Serialize};

/// The script that creates the cgroup `name` with `limit` bytes and prints its directory.
/// Exit 3 = no memory controller; other failures carry the shell's error (e.g. permission).
pub fn setup_script(name: &str, limit: u64) -> String {
    format!(
        r#"set -e
if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  d=/sys/fs/cgroup/memory/{name}
  mkdir -p "$d"
  echo {limit} > "$d/memory.limit_in_bytes"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory > /sys/fs/cgroup/cgroup.subtree_control
  d=/sys/fs/cgroup/{name}
  mkdir -p "$d"
  echo {limit} > "$d/memory.max"
  if [ -f "$d/memory.swap.max" ]; then echo 0 > "$d/memory.swap.max"; fi
else
  echo "no memory cgroup controller (neither /sys/fs/cgroup/memory nor cgroup v2 with memory)" >&2
  exit 3
fi
echo "$d""#
    )
}

/// The script that prints the cgroup's peak usage and OOM kills, then removes it.
pub fn cleanup_script(dir: &str) -> String {
    let d = super::device::shell_quote(dir);
    format!(
        r#"d={d}
if [ -f "$d/memory.max_usage_in_bytes" ]; then
  echo "peak_bytes: $(cat "$d/memory.max_usage_in_bytes")"
  echo "failcnt: $(cat "$d/memory.failcnt")"
  grep oom_kill "$d/memory.oom_control" | sed 's/ /: /'
elif [ -f "$d/memory.peak" ]; then
  echo "peak_bytes: $(cat "$d/memory.peak")"
  grep oom_kill "$d/memory.events" | sed 's/ /: /'
fi
rmdir "$d" 2>/dev/null || true"#
    )
}

/// What a capped run's cgroup recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupStats {
    /// The cgroup directory on the device.
    pub dir: String,
    /// The limit, bytes.
    pub limit_bytes: u64,
    /// Peak charged memory, bytes (page cache included).
    pub peak_bytes: Option<u64>,
    /// OOM kills inside the cgroup.
    pub oom_kill: Option<u64>,
    /// The run's `/proc/self/cgroup` as it started (proof it ran inside).
    pub membership: Option<String>,
}

impl CgroupStats {
    /// Fills the counters from the cleanup script's output.
    pub fn parse_cleanup(&mut self, text: &str) {
        for line in text.lines() {
            if let Some((k, v)) = line.split_once(':') {
                let v = v.trim().parse().ok();
                match k.trim() {
                    "peak_bytes" => self.peak_bytes = v,
                    "oom_kill" => self.oom_kill = v,
                    _ => {}
                }
            }
        }
    }
}

/// The hint for a cgroup that could not be created.
pub const HINT: &str = "memory-capped cells need a writable memory cgroup: run as root, or \
    delegate one (e.g. `systemd-run --user -p Delegate=yes --shell`), or remove `mem_limit`";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_parse() {
        let mut s = CgroupStats::default();
        s.parse_cleanup("peak_bytes: 123456\nfailcnt: 0\noom_kill: 2\n");
        assert_eq!(s.peak_bytes, Some(123_456));
        assert_eq!(s.oom_kill, Some(2));
    }

    #[test]
    fn scripts_are_valid_sh() {
        for script in [
            setup_script("x", 1 << 30),
            cleanup_script("/nonexistent dir"),
        ] {
            let out = std::process::Command::new("sh")
                .arg("-n")
                .arg("-c")
                .arg(&script)
                .output()
                .expect("sh");
            assert!(
                out.status.success(),
                "{script}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
