//! Merging `--auto`'s [`Choice`] into the run's configuration: a setting the command line gave
//! keeps its value (stderr says so, with what `--auto` would have picked); every other setting
//! takes `--auto`'s. Then the flags that reproduce the run without `--auto` are printed.

use super::{Choice, Setting, decide, measure};
use crate::cli::{Given, RunConfig};
use crate::error::EngineError;
use crate::model::facts::read_facts;
use crate::stream::OverlapRequest;
use std::io::Write;

/// Measures the facts of `cfg`'s model and machine, picks the settings and applies those the
/// command line did not give (`given`), printing each choice with why on `note`.
///
/// # Errors
/// The model file's headers cannot be read.
pub fn apply(given: &Given, cfg: &mut RunConfig, note: &mut dyn Write) -> Result<(), EngineError> {
    let model = read_facts(&cfg.model)?;
    let facts = measure::facts(&model, cfg.n_expert_used);
    for line in merge(&decide(&facts), given, cfg) {
        let _ = writeln!(note, "bmoe: auto: {line}");
    }
    Ok(())
}

/// Applies `choice` to `cfg` except where `given`; the lines to print (pure).
pub(super) fn merge(choice: &Choice, given: &Given, cfg: &mut RunConfig) -> Vec<String> {
    let stream = choice.stream || given.stream.is_some();
    let mut lines = Vec::new();
    for n in &choice.notes {
        let flag = match n.setting {
            Setting::Streaming => given.stream.filter(|_| !choice.stream),
            Setting::Cache => given.cache,
            Setting::Dense => given.dense,
            Setting::Overlap => given.overlap,
            Setting::Lanes => given.lanes,
            Setting::Threads => given.threads,
        };
        if !stream && n.setting != Setting::Streaming && n.setting != Setting::Threads {
            // the streaming settings of a plain run would have no effect
            continue;
        }
        lines.push(match flag {
            Some(f) => format!(
                "{f} given on the command line: kept (--auto alone: {} {})",
                n.text,
                n.source.tag()
            ),
            None => format!("{} {}", n.text, n.source.tag()),
        });
    }
    if given.dense.is_none() && stream {
        cfg.dense_weights = choice.dense;
    }
    if given.threads.is_none() {
        cfg.threads = choice.threads;
        cfg.adaptive_threads = choice.adaptive_threads;
    }
    match cfg.stream.as_mut().filter(|_| stream) {
        Some(sc) => {
            if given.overlap.is_none() {
                sc.overlap = Some(OverlapRequest {
                    force_staged: choice.overlap_staged,
                });
            }
            if given.lanes.is_none() {
                sc.io_threads = choice.io_threads;
            }
        }
        None => cfg.stream = None,
    }
    lines.push(format!("the same run without --auto: {}", flags(cfg)));
    lines
}

/// The flags that set what `--auto` decides to `cfg`'s values.
fn flags(cfg: &RunConfig) -> String {
    let mut f = Vec::new();
    if let Some(sc) = &cfg.stream {
        f.push("--moe-stream".to_string());
        f.push(match sc.auto {
            Some(_) => "--cache-mb auto".to_string(),
            None => format!("--cache-mb {}", sc.cache_mb),
        });
        f.push(format!("--dense-weights {}", cfg.dense_weights.as_str()));
        if let Some(o) = sc.overlap {
            f.push("--overlap".to_string());
            if o.force_staged {
                f.push("--overlap-kind staged".to_string());
            }
        }
        f.push(format!("--io-threads {}", sc.io_threads));
    }
    f.push(format!("-t {}", cfg.threads));
    if cfg.adaptive_threads {
        f.push("--adaptive-threads".to_string());
    }
    f.join(" ")
}
