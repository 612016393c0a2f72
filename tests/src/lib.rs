//! End-to-end tests across the bmoe programs.
//!
//! The tests live in `tests/tests/it/` (one test binary); they run the real binaries
//! (`bmoe-cli`, `bmoe-analyze`, …) that `cargo test --workspace` builds next to the test
//! executables, on synthetic models made at test time, and check that what one program writes
//! the next one reads.

use std::path::PathBuf;

/// The directory holding the workspace's built binaries (`target/<profile>/`), found from the
/// running test executable (`target/<profile>/deps/<test>`).
pub fn bin_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// The path of a workspace binary, or why it is not available (so a test can skip with a
/// reason: `cargo test -p bmoe-e2e` alone does not build the other packages' binaries).
pub fn workspace_bin(name: &str) -> Result<PathBuf, String> {
    let dir = bin_dir().ok_or("cannot locate the target directory")?;
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is not built (run `cargo test --workspace`, which builds every program)",
            path.display()
        ))
    }
}
