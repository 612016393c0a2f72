//! The one-shot run (`bmoe-cli` without `--session`): load, open, render the prompt, generate
//! one turn, print the answer and the summary lines — also after a Ctrl-C, which stops the run
//! after the token in flight ([`super::interrupt`]) — and, on a terminal, the digest.

use super::load::load_model;
use super::visible::Visible;
use super::{Engine, Turn};
use crate::chat::Message;
use crate::cli::RunConfig;
use crate::error::{EngineError, ExitStatus};
use crate::sinks::digest::{DigestContext, digest_lines};
use crate::sinks::report::summary_lines;
use bmoe_telemetry::summary::{ANSWER_BANNER, PERF_BANNER};
use std::io::{IsTerminal, Write};

/// Runs `cfg` once: per-token output to `out` (stdout; with its control characters shown when
/// it is a terminal), notes and warnings to `note` (stderr).
///
/// Returns [`ExitStatus::Interrupted`] when a SIGINT stopped the run (what ran was reported).
///
/// # Errors
/// Whatever stopped the run: the model, a flag it cannot honour, an output file (also one that
/// failed mid-run: the run goes on and reports, then ends with the error), a decode.
pub fn run(
    cfg: &RunConfig,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<ExitStatus, EngineError> {
    let mut visible;
    let out: &mut dyn Write = if cfg.terminal {
        visible = Visible::new(out);
        &mut visible
    } else {
        out
    };
    let loaded = load_model(cfg)?;
    let mut engine = Engine::open(cfg, &loaded, note)?;
    // before this a SIGINT ends the process as always: nothing has run that a summary could tell
    let interrupt = engine.catch_sigint(false)?;
    let (prompt_text, split) = match engine.template() {
        Some(t) => {
            let turn =
                t.render_turn(&[Message::user(&cfg.prompt)], cfg.think, engine.think_ctl())?;
            (turn.text, Some(turn.split))
        }
        None => (cfg.prompt.clone(), None),
    };
    let tokens = engine.tokenize(&prompt_text)?;
    if tokens.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if tokens.len() + cfg.n_predict > cfg.n_ctx as usize {
        return Err(EngineError::PromptTooLong {
            n_prompt: tokens.len(),
            n_predict: cfg.n_predict,
            n_ctx: cfg.n_ctx,
        });
    }
    if !cfg.progress {
        let _ = write!(out, "{prompt_text}");
        let _ = out.flush();
    }
    let turn = Turn {
        turn: 0,
        tokens: &tokens,
        n_reused: 0,
        n_predict: cfg.n_predict,
        split,
        progress: cfg.progress,
    };
    let g = engine.generate(&turn, out, note, &|| interrupt.raised())?;
    if !cfg.progress {
        let _ = writeln!(out, "{}\n", g.tail);
    }
    let _ = out.flush();
    let interrupted = interrupt.raised();
    if interrupted && g.cancelled {
        let _ = writeln!(
            note,
            "bmoe: interrupted (Ctrl-C) after {} of {} token(s): the summary covers those{}",
            g.summary.n_gen,
            cfg.n_predict,
            if cfg.csv.is_some() {
                ", the CSV trailer says interrupted=1"
            } else {
                ""
            }
        );
    } else if interrupted {
        // it landed after the last token: the run is whole, but the caller asked it to stop
        let _ = writeln!(
            note,
            "bmoe: interrupted (Ctrl-C) as the run ended: all {} token(s) ran",
            g.summary.n_gen
        );
    }
    if cfg.progress {
        // the seed's "<full generated text>": reasoning and markers included, as generated (the
        // split answer is what BMOE_PROGRESS / BMOE_DONE carry)
        let _ = writeln!(out, "{ANSWER_BANNER}\n{}\n{PERF_BANNER}", g.text);
    }
    for line in summary_lines(&g.summary, &engine.mode_line()) {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    if std::io::stderr().is_terminal() {
        let c = DigestContext {
            io_threads: cfg
                .stream
                .map_or(0, |s| u32::try_from(s.io_threads).unwrap_or(u32::MAX)),
            overlap: engine.overlap().is_some(),
            cache_mb: engine.cache_budget_mib() as u64,
            prefill_read_bytes: g.trailer.prefill_read_bytes,
            interrupted: g.cancelled && interrupted,
            random_weights: engine.model().meta_str("bmoe.synth.seed").is_some(),
        };
        for line in digest_lines(&g.summary, &c) {
            let _ = writeln!(note, "{line}");
        }
    }
    if let Some(e) = engine.take_sink_failure() {
        return Err(e.into());
    }
    Ok(if interrupted {
        ExitStatus::Interrupted
    } else {
        ExitStatus::Success
    })
}
