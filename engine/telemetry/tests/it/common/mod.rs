//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// `<workspace root>/../shared` or `$BMOE_SHARED`; `None` (with a printed reason) when absent.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("BMOE_SHARED") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    if dir.join("realdata").is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIP: {} has no realdata/ (set BMOE_SHARED to the shared folder to run this test)",
            dir.display()
        );
        None
    }
}

/// Every file under `dir`, recursively, sorted.
pub fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Data lines counted the naive way: non-blank lines not starting with `#`, minus the header.
pub fn naive_data_lines(path: &std::path::Path) -> usize {
    let text = std::fs::read_to_string(path).expect("read");
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let n = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    n.saturating_sub(1)
}
