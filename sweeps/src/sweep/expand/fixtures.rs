//! The manifest head the expansion tests share (two models, one axis of every kind) and the
//! helpers that expand a manifest text and show its cells.

use std::path::Path;

use super::{Plan, expand};
use crate::sweep::manifest::{ManifestError, parse};

/// Parses and expands `text` as the manifest `m.toml`.
pub(super) fn plan(text: &str) -> Result<Plan, ManifestError> {
    let (m, src) = parse(Path::new("m.toml"), text)?;
    expand(&m, &src)
}

/// Two models (`tiny`, `big`) and the axes `cache`, `lanes` (flags), `overlap` (a switch), `pf`
/// (a flag with an off value), `drop` (a map) and `build` (a binary axis).
pub(super) const HEAD: &str = r#"
name = "t"
binary = "/bin/echo"
[[model]]
id = "tiny"
path = "/tmp/tiny.gguf"
[[model]]
id = "big"
path = "/tmp/big.gguf"
[axes.cache]
flag = "--cache-mb"
[axes.lanes]
flag = "--io-threads"
[axes.overlap]
switch = "--overlap"
[axes.pf]
flag = "--prefetch"
off = 0
[axes.drop]
map = { off = [], "0.5" = ["--drop-cold-experts", "0.5"] }
[axes.build]
kind = "binary"
map = { a = "/bin/a", b = "/bin/b" }
"#;

/// Each cell as `<tag> <args>`.
pub(super) fn argv(p: &Plan) -> Vec<String> {
    p.cells
        .iter()
        .map(|c| format!("{} {}", c.tag, c.args.join(" ")))
        .collect()
}
