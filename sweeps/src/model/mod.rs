//! `bmoe-bench model …`: synthesise GGUF MoE models and describe existing ones.

mod inspect;
mod synth;

use clap::Subcommand;

pub use inspect::InspectArgs;
pub use synth::SynthArgs;

/// The `model` subcommands.
// parsed once per process: the size gap between the variants costs nothing worth a Box
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Write a synthetic MoE model llama.cpp can load.
    Synth(SynthArgs),
    /// Describe a GGUF model: arch, experts, quant types, per-layer bytes, cache cycle, shards.
    Inspect(InspectArgs),
}

/// Run a `model` subcommand.
pub fn run(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::Synth(a) => synth::run(&a),
        ModelCommand::Inspect(a) => inspect::run(&a),
    }
}

/// A `hint:` line for errors this module knows how to advise on.
pub fn hint_for(err: &anyhow::Error) -> Option<String> {
    use bmoe_gguf::GgufError;
    let gguf = err.chain().find_map(|e| e.downcast_ref::<GgufError>())?;
    Some(match gguf {
        GgufError::NotFirstShard { first, .. } => {
            format!("run the command on {}", first.display())
        }
        GgufError::Split { .. } => {
            "keep every <prefix>-0000i-of-0000N.gguf shard in one directory, unrenamed".into()
        }
        GgufError::Hparams { hint, .. } | GgufError::UnknownArch { hint, .. } => hint.clone(),
        GgufError::Interrupted { .. } => "run the command again to write the file".into(),
        GgufError::Malformed { .. } => {
            "the file is not a complete GGUF v3 file (truncated copy?); re-create it, e.g. `bmoe-bench model synth --preset tiny -o tiny.gguf`".into()
        }
        GgufError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
            "check the path; `bmoe-bench model synth --preset tiny -o tiny.gguf` makes a test model".into()
        }
        GgufError::Io { .. } => "check the path, permissions and free disk space".into(),
        GgufError::Invalid(_) => {
            "for `synth`, see `bmoe-bench model synth --help` for valid option values; for `inspect`, the file must be a GGUF model with `<arch>.block_count`".into()
        }
    })
}

/// `1234567` → `1.18 MiB` style (binary units).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}
