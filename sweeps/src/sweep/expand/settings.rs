//! What every cell of a sweep block shares, from the block's settings (inherited from
//! `[defaults]`): the memory cap, the prompt, a session cell's requests, the cooldown, the
//! fixed flags.

use std::ops::Range;
use std::path::Path;

use bmoe_telemetry::protocol::{GenerateRequest, Request};

use super::{Cooldown, Ctx, Res};
use toml::Spanned;

use crate::sweep::manifest::{CooldownDef, Prompts, SessionDef, Settings, parse_size};

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
    check_settings(cx, settings, sweep, span)?;
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
                cx.err_hint(
                    pf.span(),
                    format!("cannot read prompt_file {}: {e}", p.display()),
                    "the path is relative to the manifest's directory; fix it or use `prompt = \"...\"`",
                )
            })?)
        }
        None => settings.prompt.clone(),
    };
    let stdin = match &settings.session {
        Some(sd) => Some(session_input(cx, sd, settings.n_predict.as_ref())?),
        None => None,
    };
    Ok(Shared {
        mem_limit: mem_limit_default,
        prompt,
        stdin,
        discard_tokens: settings.warmup.clone().unwrap_or_default().discard_tokens,
        cooldown: Cooldown::from_def(settings.cooldown.as_ref().map(|c| c.get_ref())),
        base_flags: settings.flags.clone().unwrap_or_default(),
    })
}

/// Refuses run settings that would run nothing, hang or never time out: `repetitions = 0`,
/// `n_predict = 0` (also a session's), a `timeout_s` that is not a positive number of seconds,
/// and cooldown waits that are negative, NaN or infinite (a poll interval must also be above 0;
/// an `until` bound must be a number). Each error names the setting's line.
fn check_settings(cx: &Ctx<'_>, settings: &Settings, sweep: &str, span: &Range<usize>) -> Res<()> {
    if settings.repetitions == Some(0) {
        return Err(cx.err_hint(
            span.clone(),
            format!("sweep `{sweep}`: repetitions must be at least 1"),
            "write repetitions = 3 (or more: 3 is the fewest with an across-run interval), or leave it out for 1",
        ));
    }
    let n_predicts = settings
        .n_predict
        .iter()
        .chain(settings.session.as_ref().and_then(|s| s.n_predict.as_ref()));
    for n in n_predicts {
        if *n.get_ref() == 0 {
            return Err(cx.err_hint(
                n.span(),
                format!(
                    "sweep `{sweep}`: n_predict = 0 generates no token, so a run measures nothing"
                ),
                "write n_predict = 32 (or more), or leave it out for the engine's default",
            ));
        }
    }
    if let Some(t) = &settings.timeout_s {
        let v = *t.get_ref();
        if !(v.is_finite() && v > 0.0) {
            return Err(cx.err_hint(
                t.span(),
                format!("sweep `{sweep}`: timeout_s = {v} is not a timeout: it must be a number of seconds above 0"),
                "write e.g. timeout_s = 600, or leave it out for no timeout",
            ));
        }
    }
    if let Some(c) = &settings.cooldown {
        check_cooldown(cx, c.get_ref(), sweep, c.span())?;
    }
    Ok(())
}

/// The waits of a cooldown: finite and not negative; the poll interval above 0.
fn check_cooldown(cx: &Ctx<'_>, c: &CooldownDef, sweep: &str, span: Range<usize>) -> Res<()> {
    let waits = [
        ("fixed_s", c.fixed_s, false),
        ("max_wait_s", c.max_wait_s, false),
        ("poll_s", c.poll_s, true),
    ];
    for (key, v, positive) in waits {
        let Some(v) = v else { continue };
        let bad = !v.is_finite() || v < 0.0 || (positive && v == 0.0);
        if bad {
            let need = if positive { "above 0" } else { "0 or more" };
            return Err(cx.err_hint(
                span,
                format!("sweep `{sweep}`: cooldown {key} = {v} is not a wait: it must be a finite number of seconds, {need}"),
                format!("write e.g. {key} = 5; docs/sweeps.md describes the cooldown modes"),
            ));
        }
    }
    if let Some(u) = &c.until {
        let b = u.get_ref();
        let bounds = [
            ("cpu_temp_c_max", b.cpu_temp_c_max),
            ("battery_temp_c_max", b.battery_temp_c_max),
            ("mem_available_mib_min", b.mem_available_mib_min),
            ("load1_max", b.load1_max),
        ];
        for (key, v) in bounds {
            if let Some(v) = v
                && !v.is_finite()
            {
                return Err(cx.err_hint(
                    u.span(),
                    format!(
                        "sweep `{sweep}`: cooldown until.{key} = {v} can never be met or always is"
                    ),
                    format!("write a finite bound, e.g. {key} = 2"),
                ));
            }
        }
    }
    Ok(())
}

/// The stdin of a session cell: one `generate` request per prompt (ids 1, 2, …), or the lines
/// of a `.jsonl` request file, each checked now so a typo fails before any run.
fn session_input(cx: &Ctx<'_>, sd: &SessionDef, n_predict: Option<&Spanned<u32>>) -> Res<String> {
    let span = sd.prompts.span();
    let generate = |i: usize, prompt: &str| {
        Request::Generate(GenerateRequest {
            id: i as i64 + 1,
            prompt: prompt.to_string(),
            n_predict: sd
                .n_predict
                .as_ref()
                .or(n_predict)
                .map(|n| u64::from(*n.get_ref())),
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
                cx.err_hint(
                    span.clone(),
                    format!("cannot read session prompts {}: {e}", p.display()),
                    "the path is relative to the manifest's directory; or give the turns inline: prompts = [\"first\", \"second\"]",
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
