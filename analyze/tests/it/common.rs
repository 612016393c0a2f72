//! Helpers the integration tests share: run the built `bmoe-analyze`, read its output, and find
//! the real data in `../shared` (skipping with a printed reason when it is absent).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `bmoe-analyze` with `args`.
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze")
}

/// The stdout of a `bmoe-analyze` run that must succeed (its stderr in the failure message).
pub fn stdout(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .output()
        .expect("run bmoe-analyze");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Lossy UTF-8 of a captured stream.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `rel` under the shared data folder (`$BMOE_SHARED`, else `../shared` beside the workspace), or
/// `None` with a SKIP line when it is not there.
pub fn shared_path(rel: &str) -> Option<PathBuf> {
    let root = std::env::var_os("BMOE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let p = root.join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIP: {} not found (set BMOE_SHARED)", p.display());
        None
    }
}
