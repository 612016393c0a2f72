//! What every cell of a sweep block shares, from the block's settings (inherited from
//! `[defaults]`): the memory cap, the prompt, a session cell's requests, the cooldown, the
//! fixed flags.

use std::ops::Range;
use std::path::Path;

use bmoe_telemetry::protocol::{GenerateRequest, Request};

use super::{Cooldown, Ctx, Res};
use crate::sweep::manifest::{Prompts, SessionDef, Settings, parse_size};

/// The block's settings, resolved and checked.
pub(super) struct Shared {
    /// Memory cap in bytes (a mem_limit axis may override it per cell).
    pub(super) mem_limit: Option<u64>,
    /// `-p`: the prompt, or the prompt file's text.
    pub(super) prompt: Option<String>,
    /// Session cells: the requests written to the engine's stdin, one per line.
    pub(super) stdin: Option<String>,
    /// Tokens the report trims from the start of each run.
    pub(super) discard_tokens: u32,
    /// Cooldown before each run.
    pub(super) cooldown: Cooldown,
    /// Fixed flags of every cell.
    pub(super) base_flags: Vec<String>,
}

/// Resolves the block's `settings`; an error names the setting's line (or the block's, `span`).
pub(super) fn shared(
    cx: &Ctx<'_>,
    settings: &Settings,
    sweep: &str,
    span: &Range<usize>,
) -> Res<Shared> {
    let repetitions = settings.repetitions.unwrap_or(1);
    if repetitions == 0 {
        return Err(cx.err(
            span.clone(),
            format!("sweep `{sweep}`: repetitions must be at least 1"),
        ));
    }
    let mem_limit_default = match &settings.mem_limit {
        Some(s) => Some(parse_size(s.get_ref()).ok_or_else(|| {
            cx.err_hint(
                s.span(),
                format!("mem_limit `{}` is not a size", s.get_ref()),
                "write e.g. \"8GiB\", \"512MiB\"",
            )
        })?),
        None => None,
    };
    let prompt = match &settings.prompt_file {
        Some(pf) => {
            let p = cx
                .src
                .path
                .parent()
                .unwrap_or(Path::new("."))
                .join(pf.get_ref());
            Some(std::fs::read_to_string(&p).map_err(|e| {
                cx.err(
                    pf.span(),
                    format!("cannot read prompt_file {}: {e}", p.display()),
                )
            })?)
        }
        None => settings.prompt.clone(),
    };
    let stdin = match &settings.session {
        Some(sd) => Some(session_input(cx, sd, settings.n_predict)?),
        None => None,
    };
    Ok(Shared {
        mem_limit: mem_limit_default,
        prompt,
        stdin,
        discard_tokens: settings.warmup.clone().unwrap_or_default().discard_tokens,
        cooldown: Cooldown::from_def(settings.cooldown.as_ref()),
        base_flags: settings.flags.clone().unwrap_or_default(),
    })
}

/// The stdin of a session cell: one `generate` request per prompt (ids 1, 2, …), or the lines
/// of a `.jsonl` request file, each checked now so a typo fails before any run.
fn session_input(cx: &Ctx<'_>, sd: &SessionDef, n_predict: Option<u32>) -> Res<String> {
    let span = sd.prompts.span();
    let generate = |i: usize, prompt: &str| {
        Request::Generate(GenerateRequest {
            id: i as i64 + 1,
            prompt: prompt.to_string(),
            n_predict: sd.n_predict.or(n_predict).map(u64::from),
            think: None,
            clear_kv: Some(sd.clear_kv.unwrap_or(true)),
        })
        .to_line()
    };
    let lines: Vec<String> = match sd.prompts.get_ref() {
        Prompts::Turns(turns) => {
            if turns.is_empty() {
                return Err(cx.err_hint(
                    span,
                    "session `prompts` is an empty list",
                    "give one prompt per turn: prompts = [\"first\", \"second\"]",
                ));
            }
            turns
                .iter()
                .enumerate()
                .map(|(i, p)| generate(i, p))
                .collect()
        }
        Prompts::File(file) => {
            let p = cx.src.path.parent().unwrap_or(Path::new(".")).join(file);
            let text = std::fs::read_to_string(&p).map_err(|e| {
                cx.err(
                    span.clone(),
                    format!("cannot read session prompts {}: {e}", p.display()),
                )
            })?;
            if p.extension().is_some_and(|e| e == "jsonl") {
                // Checked here, so a typo fails the sweep before any run instead of every run.
                let mut out = Vec::new();
                for (no, line) in text.lines().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    Request::parse(line).map_err(|e| {
                        cx.err_hint(
                            span.clone(),
                            format!("{}:{}: {e}", p.display(), no + 1),
                            "one request per line, e.g. {\"cmd\":\"generate\",\"id\":1,\"prompt\":\"hi\"}",
                        )
                    })?;
                    out.push(line.trim().to_string());
                }
                out
            } else {
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .enumerate()
                    .map(|(i, l)| generate(i, l))
                    .collect()
            }
        }
    };
    if lines.is_empty() {
        return Err(cx.err_hint(
            span,
            "the session prompts file has no requests",
            "put one prompt per line (or one JSON request per line in a .jsonl file)",
        ));
    }
    Ok(lines.iter().map(|l| format!("{l}\n")).collect())
}
