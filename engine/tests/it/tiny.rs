//! The tiny synthetic model that the subprocess tests of several modules run on: each module
//! keeps its own copy (its own directory), so output files written beside it never collide.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use std::path::PathBuf;

/// A synthesised tiny model and the directory that holds it (removed when dropped).
pub struct Tiny {
    /// The model's directory; tests may write their output files into it.
    pub dir: tempfile::TempDir,
    /// The model file.
    pub path: PathBuf,
}

/// Writes a tiny model under the target dir, not /tmp: tmpfs refuses O_DIRECT.
pub fn synth_tiny() -> Tiny {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = write_model(
        &SynthOptions::preset(Preset::Tiny),
        &dir.path().join("t.gguf"),
    )
    .unwrap();
    Tiny {
        path: s.paths[0].clone(),
        dir,
    }
}
