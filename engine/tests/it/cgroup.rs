//! A fresh memory cgroup for tests that need a real memory limit (v1 here; v2 where that is the
//! hierarchy), removed on drop; commands run inside it by joining it before they exec.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A memory cgroup made for one test.
pub(crate) struct TestCgroup {
    dir: PathBuf,
    procs: PathBuf,
}

impl TestCgroup {
    /// A cgroup of `limit` bytes named after this test process and `tag`; `Err` (with the
    /// reason) when this machine does not let us make one.
    pub(crate) fn create(tag: &str, limit: u64) -> Result<Self, String> {
        let name = format!("bmoe-engine-test-{}-{tag}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (Path::new("/sys/fs/cgroup").join(&name), "memory.max")
        } else {
            return Err("no memory cgroup hierarchy mounted".into());
        };
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let cg = TestCgroup {
            procs: dir.join("cgroup.procs"),
            dir,
        };
        std::fs::write(cg.dir.join(limit_file), limit.to_string())
            .map_err(|e| format!("set {limit_file}: {e}"))?;
        Ok(cg)
    }

    /// `program` run inside the cgroup: a shell joins it, then execs the program (which finds
    /// the cgroup itself); add its arguments to the returned command.
    pub(crate) fn command(&self, program: &Path) -> Command {
        let script = format!("echo $$ > {} && exec \"$0\" \"$@\"", self.procs.display());
        let mut c = Command::new("sh");
        c.arg("-c").arg(script).arg(program);
        c
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}
