//! Loading: read the header, check the flags that depend on the model, create every output
//! file the run will write (so a bad path fails in a second, not after a long load), and load
//! the weights through llama.cpp.

use crate::cli::{Cli, RunConfig};
use crate::error::EngineError;
use crate::ffi::firstload::Armed;
use crate::ffi::{Model, ModelOptions};
use crate::memory::autocache::{measure, plain_oversize_warning};
use crate::memory::dense::{DenseWeights, dense_pages};
use crate::memory::picture::{MemorySnapshot, cgroup_memory};
use crate::memory::residency::{dense_file_ranges_skipping, is_expert_tensor};
use crate::model::default_model;
use crate::model::facts::{ModelFacts, read_facts};
use crate::model::registry::recipe_for;
use crate::sinks::preflight;
use crate::vm::sigbus::TestHookError;
use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Env var (test only): after llama.cpp has loaded the model, rename this file over the model
/// path, so expert reads hit a different (e.g. truncated) file — a deterministic stand-in for a
/// file changing under a running engine.
pub const TEST_REPLACE_ENV: &str = "BMOE_TEST_REPLACE_AFTER_LOAD";

/// A model loaded by llama.cpp, with what its header says.
pub struct LoadedModel {
    /// The header facts.
    pub facts: ModelFacts,
    /// The weights.
    pub model: Model,
    /// When loading started (the `load_s` clock).
    pub(super) t_load: Instant,
}

/// Reads the header, checks the flags that depend on the model, creates every output file the
/// run will write, and loads the weights.
///
/// # Errors
/// The model file, a flag the model cannot honour, an output path, or llama.cpp's refusal.
pub fn load_model(cfg: &RunConfig) -> Result<LoadedModel, EngineError> {
    let t_load = Instant::now();
    let facts = read_facts(&cfg.model)?;
    if cfg.stream.is_some() && recipe_for(&facts.arch).is_none() {
        return Err(EngineError::NoRecipe {
            model: cfg.model.clone(),
            arch: facts.arch.clone(),
        });
    }
    let model_opts = model_options(cfg, &facts)?;
    create_outputs(cfg)?;
    // streamed: llama.cpp must not read the experts at load (they are streamed from flash)
    let armed = cfg
        .stream
        .is_some()
        .then(|| crate::ffi::firstload::arm(&facts.index.shards));
    if cfg.stream.is_none() {
        warn_plain_oversize(&facts, &mut std::io::stderr());
    }
    let model = Model::load(&cfg.model, &model_opts).map_err(EngineError::Load)?;
    if let Some(armed) = armed {
        read_dense_only(cfg, &facts, &armed, &mut std::io::stderr());
    }
    // a model file cut under the mapping ends in an error, not a silent SIGBUS (docs/engine.md)
    crate::vm::sigbus::install(&facts.index.shards, cfg.session);
    crate::vm::sigbus::truncate_if_testing(&cfg.model)?;
    if let Ok(replacement) = std::env::var(TEST_REPLACE_ENV) {
        std::fs::rename(&replacement, &cfg.model).map_err(|source| TestHookError::Rename {
            var: TEST_REPLACE_ENV,
            source,
        })?;
    }
    Ok(LoadedModel {
        facts,
        model,
        t_load,
    })
}

/// After a streamed load whose populate was dropped: reads in (populates) the dense ranges
/// only (under `--dense-weights mmap`; `warm` and `anon` read them themselves), and says
/// what happened on `note`.
fn read_dense_only(cfg: &RunConfig, facts: &ModelFacts, armed: &Armed, note: &mut dyn Write) {
    let maps = armed.mappings();
    if maps.is_empty() {
        // the binary is not wrapped (a test harness): llama.cpp read the file as before
        return;
    }
    let experts: Vec<(usize, u64, u64)> = facts
        .index
        .tensors
        .iter()
        .filter(|(name, p)| is_expert_tensor(name) && p.size > 0)
        .map(|(_, p)| (p.shard, p.offset, p.size))
        .collect();
    // the capture decode computes with the mapped experts: blank the ones the streamer takes
    // over (never their `.bias` / `.scale` companions, which stay mapped) so it reads none
    let streamed: Vec<(usize, u64, u64)> = match recipe_for(&facts.arch) {
        Some(r) => facts
            .index
            .tensors
            .iter()
            .filter(|(name, p)| r.match_tensor(name).is_some() && p.size > 0)
            .map(|(_, p)| (p.shard, p.offset, p.size))
            .collect(),
        None => Vec::new(),
    };
    let mut blanked = 0u64;
    for (shard, base, len) in &maps {
        let ranges: Vec<(u64, u64)> = streamed
            .iter()
            .filter(|e| e.0 == *shard)
            .map(|&(_, off, size)| (off, off + size))
            .collect();
        blanked += crate::ffi::firstload::blank_experts(*base, *len, &ranges);
    }
    let mut advised = 0u64;
    if cfg.dense_weights == DenseWeights::Mmap {
        let pages = dense_pages(
            &dense_file_ranges_skipping(&facts.index, super::streaming::row_skip(cfg, facts)),
            &experts,
            facts.index.shards.len(),
        );
        for (shard, base, len) in &maps {
            if let Some(ranges) = pages.get(*shard) {
                advised += crate::ffi::firstload::advise_dense(*base, *len, ranges);
            }
        }
    }
    let _ = writeln!(
        note,
        "bmoe: first load — experts left on flash ({} mapping(s) not populated, {} WILLNEED advice(s) skipped, {:.1} MiB of expert pages blanked for the capture); dense read {:.1} MiB ({})",
        maps.len(),
        armed.skipped_advice(),
        blanked as f64 / (1024.0 * 1024.0),
        advised as f64 / (1024.0 * 1024.0),
        cfg.dense_weights.as_str()
    );
}

/// Plain mode on a model larger than usable memory: says so once, naming `--moe-stream`.
fn warn_plain_oversize(facts: &ModelFacts, note: &mut dyn Write) {
    let model_bytes: u64 = facts
        .index
        .shards
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let (avail, cgroup) = measure(MemorySnapshot::sample().system, cgroup_memory().as_ref());
    if let Some(w) = plain_oversize_warning(model_bytes, avail, cgroup) {
        let _ = writeln!(note, "bmoe: warning: {w}");
    }
}

/// llama.cpp's load options: the `--n-expert-used` override, checked against the model.
fn model_options(cfg: &RunConfig, facts: &ModelFacts) -> Result<ModelOptions, EngineError> {
    let mut opts = ModelOptions {
        device: cfg.prefill_device.clone(),
        ..ModelOptions::default()
    };
    if matches!(cfg.spec, crate::cli::Spec::Mtp { .. }) {
        if facts.mtp_layers <= 0 {
            return Err(EngineError::NoMtpHead {
                arch: facts.arch.clone(),
            });
        }
        opts.load_mtp = true;
    }
    if let Some(k) = cfg.n_expert_used {
        let Some(n) = facts.expert_count else {
            return Err(EngineError::NotMoe {
                arch: facts.arch.clone(),
            });
        };
        if i64::from(k) > n {
            return Err(EngineError::TooManyExpertsUsed { k, n });
        }
        opts.expert_used_override =
            Some((format!("{}.expert_used_count", facts.arch), i64::from(k)));
    }
    Ok(opts)
}

/// Creates (truncates) every file the run will write.
fn create_outputs(cfg: &RunConfig) -> Result<(), EngineError> {
    if let Some(p) = &cfg.csv {
        preflight(p, "--csv")?;
    }
    if cfg.stream.is_some() {
        if let Some(p) = &cfg.route_trace {
            preflight(p, "--route-trace")?;
        }
        if let Some(p) = &cfg.io_trace {
            preflight(p, "--io-trace")?;
        }
    }
    if let Some((p, g)) = &cfg.compute_trace {
        preflight(p, g.flag())?;
    }
    Ok(())
}

/// Which model a command line runs: `-m`, or the built-in one. This step lives with loading
/// (not in `cli`) because making the built-in model can fail like a load does.
impl Cli {
    /// Resolves the flags into a run configuration; without `-m`, the built-in tiny model is
    /// used (synthesised into the cache folder on first use, said on `note`). Under `--auto`
    /// the settings it picks are measured and applied here (each said on `note`). Flags given
    /// with no effect on this run are warned about on `note`; whether stdout is a terminal is
    /// looked up here.
    ///
    /// # Errors
    /// A flag's value ([`EngineError::Flag`]), the built-in model's set-up, or under `--auto`
    /// the model file's headers.
    pub fn into_config(mut self, note: &mut dyn Write) -> Result<RunConfig, EngineError> {
        if self.model.model.is_none() {
            // the README's first command runs without -m: use the built-in tiny model
            let dir = default_model::cache_dir().ok_or(EngineError::NoModelCache)?;
            let (path, origin) = default_model::ensure_in(&dir)?;
            let how = match &origin {
                default_model::Origin::Cached => "cached".to_string(),
                default_model::Origin::Synthesised => "synthesised now".to_string(),
                default_model::Origin::Rebuilt(why) => {
                    format!("rebuilt now: the cached copy was corrupt — {why}")
                }
            };
            let _ = writeln!(
                note,
                "bmoe: no -m given — using the built-in tiny synthetic MoE model {} ({how})",
                path.display()
            );
            self.model.model = Some(path);
        }
        let mut cfg = self.resolve()?;
        if self.auto() {
            crate::auto::apply(&self.auto_given(), &mut cfg, note)?;
        }
        cfg.terminal = std::io::stdout().is_terminal();
        for w in self.inert_flags(cfg.stream.is_some()) {
            let _ = writeln!(note, "bmoe: warning: {w}");
        }
        Ok(cfg)
    }
}
