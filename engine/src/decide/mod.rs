//! `decide`: score a fixed set of answers by the log-probability the model gives the first token
//! of each, after a prompt, without generating anything (session mode, `--decide`).
//!
//! The prompt is the user message `prefix + suffix` rendered with the model's chat template,
//! reasoning off, generation prompt on. Only that prompt is prefilled; the logits of its last
//! position give `log softmax` over the whole vocabulary, read at each choice's first token.
//!
//! **First token of a choice**: the choice's text tokenized on its own, with no BOS and with
//! special-token texts kept as plain text, and its first token taken. Two choices with the same
//! first token cannot be told apart, so such a request is rejected.
//!
//! **Prefix state**: the prefill is split at the end of `prefix` (the template's head plus the
//! prefix text). With `reuse_prefix` the KV of that part is saved after it is prefilled
//! ([`PrefixState`], `llama_state_seq_get_data`), and a later call whose prefix part tokenizes
//! to exactly the same tokens restores it instead of prefilling them again. The prefill runs the
//! same decodes with and without reuse (the same split, the same chunks), and a restored state
//! is the saved KV bit for bit, so both return identical log-probabilities — by construction.
//!
//! **The conversation is left alone**: a session's chat lives in sequence 0's KV. Decide saves
//! that sequence, clears the cache, works in the empty cache, and puts the conversation back into
//! a cleared cache at the end (also after a cancel or a rejected prefill), so a following
//! `generate` continues exactly as if no decide had run.

use crate::chat::{ChatError, ChatTemplate, Message, ThinkCtl};
use crate::ffi::{Context, DecodeError, LlamaError, Model, SeqState, Token};
use crate::graph::device_share::{DecodeMark, PrefillDevice};
use crate::graph::hook::MoeHook;
use crate::stream::io::ReadError;
use crate::stream::{StreamStats, Streamer};
use crate::vm::process_sample;
use bmoe_telemetry::protocol::{Decide, DecideRequest, round_to};
use std::time::Instant;

/// The KV sequence every single-sequence decode (`llama_batch_get_one`) uses.
const SEQ: i32 = 0;

const MIB: f64 = 1024.0 * 1024.0;

/// How the session renders and prefills a decide.
#[derive(Debug, Clone, Copy)]
pub struct DecideSetup<'a> {
    /// The model's chat template (`--chatml`); `None` scores `prefix + suffix` as raw text.
    pub template: Option<&'a ChatTemplate>,
    /// How the template turns reasoning off (`ChatTemplate::think_ctl`).
    pub think_ctl: ThinkCtl,
    /// The most tokens one decode may take when the expert cache cannot hold a whole layer
    /// (the engine's prefill split); `None` = no limit beyond the context's `n_batch`.
    pub prefill_chunk: Option<usize>,
}

/// The prompt-prefix KV state kept between decide calls of one session, up to a size cap
/// (`--decide-state-max-mib`).
#[derive(Debug)]
pub struct PrefixState {
    tokens: Vec<Token>,
    state: Option<SeqState>,
    /// The largest state kept, in bytes.
    cap_bytes: usize,
    /// A state went over the cap and no note has said so yet.
    over_cap: Option<usize>,
    /// The note was taken: it is said once per session.
    noted: bool,
}

impl Default for PrefixState {
    fn default() -> Self {
        Self::with_cap(u64::MAX)
    }
}

impl PrefixState {
    /// An empty state (nothing kept yet), without a size cap.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state that keeps no state larger than `cap_bytes` (0: never keeps one).
    pub fn with_cap(cap_bytes: u64) -> Self {
        Self {
            tokens: Vec::new(),
            state: None,
            cap_bytes: usize::try_from(cap_bytes).unwrap_or(usize::MAX),
            over_cap: None,
            noted: false,
        }
    }

    /// Keeps `state` for `tokens` if it fits the cap; otherwise keeps nothing (the old state is
    /// dropped as well: it no longer matches what the caller is working on) and remembers to
    /// say so once. Returns whether it was kept.
    fn keep(&mut self, tokens: &[Token], state: SeqState) -> bool {
        self.clear();
        if state.size_bytes() > self.cap_bytes {
            if !self.noted {
                self.over_cap = Some(state.size_bytes());
            }
            return false;
        }
        self.tokens = tokens.to_vec();
        self.state = Some(state);
        true
    }

    /// Whether a state of any size could be kept (the cap is not 0).
    fn may_keep(&self) -> bool {
        self.cap_bytes > 0
    }

    /// The one-time note after a state went over the cap: `Some` exactly once per session.
    pub fn take_cap_note(&mut self) -> Option<String> {
        let size = self.over_cap.take()?;
        self.noted = true;
        let mib = |b: usize| b as f64 / MIB;
        Some(if self.cap_bytes == 0 {
            "bmoe: note: decide prefix states are not kept (--decide-state-max-mib 0): every decide prefills its whole prompt".to_string()
        } else {
            format!(
                "bmoe: note: a decide prefix state of {:.1} MiB is over --decide-state-max-mib {:.0}: not kept, so the next decide prefills in full (said once)\nhint: raise --decide-state-max-mib to keep states this large",
                mib(size),
                mib(self.cap_bytes)
            )
        })
    }

    /// The tokens whose KV is kept.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// Bytes the kept state holds.
    pub fn size_bytes(&self) -> usize {
        self.state.as_ref().map_or(0, SeqState::size_bytes)
    }

    /// Drops the kept state (e.g. when the session ends or memory is needed).
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.state = None;
    }
}

/// Why a decide request failed. [`DecideError::is_fatal`] says whether the session can go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// `choices` is empty.
    #[error("decide: no choices to score")]
    NoChoices,
    /// A choice has no tokens (empty text).
    #[error("decide: choice {index} is empty")]
    EmptyChoice {
        /// Index of the choice in the request.
        index: usize,
    },
    /// Two choices start with the same token, so their scores would be the same number.
    #[error(
        "decide: choices {first} ({first_text:?}) and {second} ({second_text:?}) share their first token {token} ({piece:?})"
    )]
    CollidingChoices {
        /// Index of the earlier choice.
        first: usize,
        /// Its text.
        first_text: String,
        /// Index of the later choice.
        second: usize,
        /// Its text.
        second_text: String,
        /// The shared token id.
        token: Token,
        /// The shared token's text.
        piece: String,
    },
    /// The chat template failed to render the prompt.
    #[error("decide: {0}")]
    Template(#[source] ChatError),
    /// Tokenization failed.
    #[error("decide: tokenizing the {what} failed: {source}")]
    Tokenize {
        /// What was being tokenized.
        what: &'static str,
        /// llama.cpp's reason.
        source: LlamaError,
    },
    /// The rendered prompt has no tokens.
    #[error("decide: the rendered prompt has no tokens")]
    EmptyPrompt,
    /// The prompt does not fit the context.
    #[error("decide: prompt ({n_tokens} tokens) exceeds the session n_ctx ({n_ctx})")]
    TooLong {
        /// Tokens in the rendered prompt.
        n_tokens: usize,
        /// The context size.
        n_ctx: usize,
    },
    /// An expert read failed and aborted the prefill.
    #[error("decide: {0}; the decide prefill was aborted")]
    PrefillRead(#[source] ReadError),
    /// llama.cpp refused the prefill batch.
    #[error("decide: prefill failed (llama_decode returned {0})")]
    PrefillFailed(i32),
    /// The prefill ran but llama.cpp kept no logits for the last position.
    #[error("decide: llama.cpp returned no logits for the last prompt position")]
    NoLogits,
    /// Saving or restoring a KV sequence failed: the session's KV can no longer be trusted.
    #[error("decide: {what}: {source}")]
    State {
        /// What was being saved or restored.
        what: &'static str,
        /// llama.cpp's refusal.
        source: LlamaError,
    },
}

impl DecideError {
    /// Whether the session must end: the KV or the expert stream is in an unknown state.
    /// Everything else rejects this request only (`BMOE_ERROR` with `fatal:false`).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            DecideError::PrefillRead(_)
                | DecideError::PrefillFailed(_)
                | DecideError::NoLogits
                | DecideError::State { .. }
        )
    }

    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            DecideError::NoChoices => "send at least one string in \"choices\"".into(),
            DecideError::EmptyChoice { .. } => "every choice needs some text".into(),
            DecideError::CollidingChoices { .. } => {
                "only the first token of each choice is scored: reword the choices so each starts with a different token".into()
            }
            DecideError::Template(_) => {
                "the model's chat template rejected the message; check prefix and suffix".into()
            }
            DecideError::Tokenize { .. } => "check the request text".into(),
            DecideError::EmptyPrompt => "send a non-empty prefix or suffix".into(),
            DecideError::TooLong { .. } => {
                "shorten prefix/suffix, or open the session with a larger -c/--ctx-size".into()
            }
            DecideError::PrefillRead(_) => "the model file changed or the storage failed while streaming; check the file and the disk (dmesg)".into(),
            DecideError::PrefillFailed(_) => "try a smaller -c/--ctx-size or --ubatch; set BMOE_LLAMA_LOG=1 for llama.cpp's own log".into(),
            DecideError::NoLogits => "set BMOE_LLAMA_LOG=1 for llama.cpp's own log".into(),
            DecideError::State { .. } => {
                "restart the session; set BMOE_LLAMA_LOG=1 to see llama.cpp's reason".into()
            }
        }
    }
}

/// The first token of each choice (the rule in the module docs), checked for collisions.
///
/// # Errors
/// [`DecideError::NoChoices`], [`DecideError::EmptyChoice`], [`DecideError::CollidingChoices`],
/// [`DecideError::Tokenize`].
pub fn first_tokens(model: &Model, choices: &[String]) -> Result<Vec<Token>, DecideError> {
    if choices.is_empty() {
        return Err(DecideError::NoChoices);
    }
    let mut firsts: Vec<Token> = Vec::with_capacity(choices.len());
    for (index, choice) in choices.iter().enumerate() {
        let toks = model
            .tokenize_with(choice, false, false)
            .map_err(|source| DecideError::Tokenize {
                what: "choice",
                source,
            })?;
        let Some(&tok) = toks.first() else {
            return Err(DecideError::EmptyChoice { index });
        };
        if let Some(first) = firsts.iter().position(|&t| t == tok) {
            return Err(DecideError::CollidingChoices {
                first,
                first_text: choices[first].clone(),
                second: index,
                second_text: choice.clone(),
                token: tok,
                piece: String::from_utf8_lossy(&model.token_piece(tok)).into_owned(),
            });
        }
        firsts.push(tok);
    }
    Ok(firsts)
}

/// The decide prompt and where its prefix part ends, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidePrompt {
    /// The rendered prompt (reasoning off, generation prompt on).
    pub text: String,
    /// Byte length of the part that depends only on `prefix` (template head + prefix).
    pub prefix_len: usize,
}

/// Renders `prefix + suffix` as one user message with `template` with reasoning off — the way
/// `think_ctl` says a `think=false` turn is honoured (a `prefill` template starts the turn past
/// an empty reasoning section) — or as raw text without a template. The prefix part is what
/// renders identically with and without `suffix`.
///
/// # Errors
/// [`DecideError::Template`] when the template fails.
pub fn render_prompt(
    template: Option<&ChatTemplate>,
    think_ctl: ThinkCtl,
    prefix: &str,
    suffix: &str,
) -> Result<DecidePrompt, DecideError> {
    let render = |user: &str| match template {
        Some(t) => t
            .render_turn(&[Message::user(user)], false, think_ctl)
            .map(|turn| turn.text)
            .map_err(DecideError::Template),
        None => Ok(user.to_string()),
    };
    let text = render(&format!("{prefix}{suffix}"))?;
    let alone = render(prefix)?;
    let mut prefix_len = text
        .bytes()
        .zip(alone.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    while !text.is_char_boundary(prefix_len) {
        prefix_len -= 1;
    }
    Ok(DecidePrompt { text, prefix_len })
}

/// `log softmax(logits)[t]` for each `t`, in f64; minus infinity for an out-of-range token.
pub fn log_probs(logits: &[f32], tokens: &[Token]) -> Vec<f64> {
    let max = logits
        .iter()
        .map(|&l| f64::from(l))
        .fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = logits.iter().map(|&l| (f64::from(l) - max).exp()).sum();
    let log_z = max + sum.ln();
    tokens
        .iter()
        .map(|&t| {
            usize::try_from(t)
                .ok()
                .and_then(|i| logits.get(i))
                .map_or(f64::NEG_INFINITY, |&l| f64::from(l) - log_z)
        })
        .collect()
}

/// Index of the highest value (the first on ties; 0 when all are minus infinity or NaN).
pub fn best_index(logp: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in logp.iter().enumerate() {
        if v > logp[best] || logp[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best
}

/// Longest common prefix of two token runs.
fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Prefill cost, accumulated over the prefill decodes only (restore and store are timed apart).
#[derive(Debug, Default)]
struct Meter {
    prefill_s: f64,
    cpu_ns: u64,
    /// The prefill device's share (zeros without `--prefill-device`: no decode then computes a
    /// node on a device).
    dev: PrefillDevice,
}

/// How a prefill ended when it did not finish.
enum Stop {
    Cancelled,
    Failed(DecideError),
}

fn stream_stats(ctx: &mut Context<'_, MoeHook>) -> Option<StreamStats> {
    ctx.hook_mut()
        .and_then(|h| h.streamer())
        .map(Streamer::stats)
}

/// Decodes `tokens` at the next positions of sequence 0, at most `chunk` (else `n_batch`) at a
/// time — the batches a resident run with `--ubatch chunk` forms from the same decode calls —
/// as prompt decodes for the prefill device's arena.
fn prefill(
    ctx: &mut Context<'_, MoeHook>,
    tokens: &[Token],
    chunk: Option<usize>,
    meter: &mut Meter,
) -> Result<(), Stop> {
    let n_batch = usize::try_from(ctx.n_batch()).unwrap_or(1);
    let chunk = chunk.unwrap_or(n_batch).min(n_batch).max(1);
    let arena_prefill = |ctx: &mut Context<'_, MoeHook>, on: bool| {
        if let Some(h) = ctx.hook_mut() {
            h.arena_prefill(on);
        }
    };
    arena_prefill(ctx, true);
    let r = prefill_parts(ctx, tokens, chunk, meter);
    arena_prefill(ctx, false);
    r
}

/// [`prefill`]'s decodes, `chunk` tokens each.
fn prefill_parts(
    ctx: &mut Context<'_, MoeHook>,
    tokens: &[Token],
    chunk: usize,
    meter: &mut Meter,
) -> Result<(), Stop> {
    for part in tokens.chunks(chunk) {
        let mut batch = part.to_vec();
        let p0 = process_sample();
        let mark = DecodeMark::take(ctx);
        let t0 = Instant::now();
        let r = ctx.decode(&mut batch);
        meter.prefill_s += t0.elapsed().as_secs_f64();
        meter.cpu_ns += process_sample().cpu_ns.saturating_sub(p0.cpu_ns);
        mark.charge(ctx, &mut meter.dev);
        if let Err(e) = r {
            let read_error = ctx.hook_mut().and_then(MoeHook::take_error);
            return Err(match (read_error, e) {
                (Some(err), _) => Stop::Failed(DecideError::PrefillRead(err)),
                (None, DecodeError::Aborted) => Stop::Cancelled,
                (None, DecodeError::Failed(rc)) => Stop::Failed(DecideError::PrefillFailed(rc)),
            });
        }
    }
    Ok(())
}

/// What the work inside the emptied cache produced.
#[derive(Debug, Default)]
struct Work {
    cancelled: bool,
    logp: Vec<f64>,
    n_reused: usize,
    restore_s: f64,
    store_s: f64,
}

/// Restores `kept` when it holds exactly `prefix` (this prompt's prefix part); returns whether
/// it did. A state covering a different prefix is not cut to the shared part: its positions were
/// computed in other batches than a cold prefill of this prompt forms, so the scores could
/// differ in rounding — the next store replaces it instead.
fn restore_kept(
    ctx: &mut Context<'_, MoeHook>,
    kept: &PrefixState,
    prefix: &[Token],
    work: &mut Work,
) -> Result<bool, DecideError> {
    let Some(state) = kept.state.as_ref() else {
        return Ok(false);
    };
    if prefix.is_empty() || kept.tokens != prefix {
        return Ok(false);
    }
    let t0 = Instant::now();
    ctx.restore_seq(SEQ, state)
        .map_err(|source| DecideError::State {
            what: "restoring the prefix state",
            source,
        })?;
    work.restore_s = t0.elapsed().as_secs_f64();
    Ok(true)
}

/// What one decide prefills and reads.
#[derive(Debug, Clone, Copy)]
struct Plan<'a> {
    /// The whole rendered prompt.
    tokens: &'a [Token],
    /// Where the prefix part ends (the kept state's length).
    n_keep: usize,
    /// Each choice's first token.
    firsts: &'a [Token],
    /// `reuse_prefix`.
    reuse: bool,
    /// The most tokens per decode, if limited.
    chunk: Option<usize>,
}

/// The decide proper, in a cache that starts empty.
fn score(
    ctx: &mut Context<'_, MoeHook>,
    plan: &Plan<'_>,
    kept: &mut PrefixState,
    meter: &mut Meter,
) -> Result<Work, DecideError> {
    let Plan {
        tokens,
        n_keep,
        firsts,
        reuse,
        chunk,
    } = *plan;
    let mut work = Work::default();
    let restored = reuse && restore_kept(ctx, kept, &tokens[..n_keep], &mut work)?;
    if restored {
        work.n_reused = n_keep;
    } else {
        match prefill(ctx, &tokens[..n_keep], chunk, meter) {
            Ok(()) => {}
            Err(Stop::Cancelled) => {
                work.cancelled = true;
                return Ok(work);
            }
            Err(Stop::Failed(e)) => return Err(e),
        }
        if reuse && n_keep > 0 {
            if kept.may_keep() {
                let t0 = Instant::now();
                let state = ctx.save_seq(SEQ).map_err(|source| DecideError::State {
                    what: "saving the prefix state",
                    source,
                })?;
                kept.keep(&tokens[..n_keep], state);
                work.store_s = t0.elapsed().as_secs_f64();
            } else {
                // a state of any size is over a cap of 0: nothing is saved
                kept.clear();
                if !kept.noted {
                    kept.over_cap = Some(0);
                }
            }
        }
    }
    match prefill(ctx, &tokens[n_keep..], chunk, meter) {
        Ok(()) => {}
        Err(Stop::Cancelled) => {
            work.cancelled = true;
            return Ok(work);
        }
        Err(Stop::Failed(e)) => return Err(e),
    }
    let logits = ctx.last_logits();
    if logits.is_empty() {
        return Err(DecideError::NoLogits);
    }
    work.logp = log_probs(logits, firsts);
    Ok(work)
}

/// Answers one decide request on `ctx` (see the module docs), keeping `kept` between calls.
///
/// Returns the complete `BMOE_DECIDE` record; `cancelled:true` (with no scores and `best` −1)
/// when the context's abort flag stopped the prefill. The abort flag is not cleared here: the
/// session owns it. Sequence 0's KV is the same after the call as before it, whatever the outcome,
/// unless a [`DecideError::State`] is returned.
///
/// # Errors
/// Request errors ([`DecideError::is_fatal`] false): no/empty/colliding choices, a template or
/// tokenization failure, an empty or too long prompt. Fatal: a prefill failure (expert read
/// error, llama.cpp refusing the batch) or a KV state that could not be saved or restored.
pub fn decide(
    ctx: &mut Context<'_, MoeHook>,
    setup: DecideSetup<'_>,
    req: &DecideRequest,
    kept: &mut PrefixState,
) -> Result<Decide, DecideError> {
    let model = ctx.model();
    let firsts = first_tokens(model, &req.choices)?;
    let prompt = render_prompt(setup.template, setup.think_ctl, &req.prefix, &req.suffix)?;
    let tokenize = |text: &str| {
        model
            .tokenize(text)
            .map_err(|source| DecideError::Tokenize {
                what: "prompt",
                source,
            })
    };
    let tokens = tokenize(&prompt.text)?;
    if tokens.is_empty() {
        return Err(DecideError::EmptyPrompt);
    }
    let n_ctx = ctx.n_ctx() as usize;
    if tokens.len() > n_ctx {
        return Err(DecideError::TooLong {
            n_tokens: tokens.len(),
            n_ctx,
        });
    }
    // where the prefill splits: the tokens the prefix part alone tokenizes to, as far as they
    // agree with the whole prompt's (a merge across the boundary belongs to the rest)
    let head = tokenize(&prompt.text[..prompt.prefix_len])?;
    let n_keep = common_prefix(&head, &tokens).min(tokens.len() - 1);
    let reuse = req.reuse_prefix();

    let conversation = if ctx.seq_len(SEQ) > 0 {
        Some(ctx.save_seq(SEQ).map_err(|source| DecideError::State {
            what: "saving the conversation",
            source,
        })?)
    } else {
        None
    };
    ctx.clear_memory();
    let stats0 = stream_stats(ctx);
    let mut meter = Meter::default();
    let plan = Plan {
        tokens: &tokens,
        n_keep,
        firsts: &firsts,
        reuse,
        chunk: setup.prefill_chunk,
    };
    let outcome = score(ctx, &plan, kept, &mut meter);
    let stats1 = stream_stats(ctx);
    ctx.clear_memory();
    if let Some(conv) = &conversation {
        ctx.restore_seq(SEQ, conv)
            .map_err(|source| DecideError::State {
                what: "restoring the conversation",
                source,
            })?;
    }
    let work = outcome?;

    // times to the microsecond and sizes to the KiB: readable lines, no false precision; the
    // scores keep every digit (they are compared across runs)
    let (s, mib) = (|x: f64| round_to(x, 6), |x: f64| round_to(x, 3));
    let mut d = Decide {
        id: req.id,
        cancelled: work.cancelled,
        n_tokens: tokens.len() as u64,
        n_reused: work.n_reused as u64,
        n_prefilled: (tokens.len() - work.n_reused) as u64,
        restore_s: s(work.restore_s),
        store_s: s(work.store_s),
        prefill_s: s(meter.prefill_s),
        prefill_cpu_s: s(meter.cpu_ns as f64 / 1e9),
        prefix_state_mib: mib(kept.size_bytes() as f64 / MIB),
        prefill_dev_tokens: meter.dev.tokens,
        prefill_dev_read_mib: mib(meter.dev.read_bytes as f64 / MIB),
        prefill_dev_stall_s: s(meter.dev.stall_s),
        prefill_dev_routed: meter.dev.routed,
        prefill_dev_demand: meter.dev.demand,
        ..Decide::default()
    };
    if let (Some(a), Some(b)) = (stats0, stats1) {
        d.prefill_read_mib = mib(b.read_bytes.saturating_sub(a.read_bytes) as f64 / MIB);
        d.prefill_io_s = s(b.io_ns.saturating_sub(a.io_ns) as f64 / 1e9);
        d.prefill_mgmt_s = s(b.mgmt_ns.saturating_sub(a.mgmt_ns) as f64 / 1e9);
        d.prefill_stall_s = s(b.stall_ns.saturating_sub(a.stall_ns) as f64 / 1e9);
    }
    if work.cancelled {
        d.best = -1;
        d.choice_logp = Vec::new();
    } else {
        d.best = best_index(&work.logp) as i64;
        d.choice_logp = work.logp;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probs_normalise_over_the_vocabulary() {
        let logits = [1.0f32, 2.0, 3.0, f32::NEG_INFINITY];
        let lp = log_probs(&logits, &[0, 1, 2, 3, 9, -1]);
        let z = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((lp[0] - (1.0 - z)).abs() < 1e-12);
        assert!((lp[2] - (3.0 - z)).abs() < 1e-12);
        let total: f64 = lp[..3].iter().map(|v| v.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert_eq!(lp[3], f64::NEG_INFINITY);
        assert_eq!(lp[4], f64::NEG_INFINITY, "out of range");
        assert_eq!(lp[5], f64::NEG_INFINITY, "negative id");
    }

    #[test]
    fn log_probs_survive_large_logits() {
        let lp = log_probs(&[1000.0, 1000.0], &[0, 1]);
        assert!((lp[0] - (0.5f64).ln()).abs() < 1e-12 && lp[0] == lp[1]);
    }

    #[test]
    fn best_is_the_first_maximum() {
        assert_eq!(best_index(&[-3.0, -1.0, -1.0, -2.0]), 1);
        assert_eq!(best_index(&[f64::NEG_INFINITY, -5.0]), 1);
        assert_eq!(best_index(&[f64::NEG_INFINITY, f64::NEG_INFINITY]), 0);
        assert_eq!(best_index(&[f64::NAN, -5.0]), 1);
    }

    #[test]
    fn prefix_part_is_what_the_suffix_does_not_change() {
        let p = render_prompt(None, ThinkCtl::Template, "Document: abc. ", "Question?").unwrap();
        assert_eq!(p.text, "Document: abc. Question?");
        assert_eq!(&p.text[..p.prefix_len], "Document: abc. ");
        let t = ChatTemplate::new(
            bmoe_gguf::synth::tokenizer::CHAT_TEMPLATE,
            "<|endoftext|>",
            "<|endoftext|>",
        )
        .unwrap();
        let p = render_prompt(Some(&t), ThinkCtl::Template, "Doc. ", "Is it?").unwrap();
        assert_eq!(
            p.text,
            "<|im_start|>user\nDoc. Is it?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        );
        assert_eq!(&p.text[..p.prefix_len], "<|im_start|>user\nDoc. ");
        // the template's tail and the suffix share a first byte (è = c3 a8, é = c3 a9): the
        // split backs off to the character boundary instead of cutting é
        let tail = ChatTemplate::new("{{ messages[0].content }}è", "", "").unwrap();
        let p = render_prompt(Some(&tail), ThinkCtl::Template, "a", "é").unwrap();
        assert_eq!(p.text, "aéè");
        assert_eq!(p.prefix_len, 1);
    }

    #[test]
    fn a_prefill_template_starts_the_answer_past_the_reasoning() {
        // harmony-style: reasoning is a channel the template cannot switch off by a flag
        let harmony = "{%- for message in messages -%}\
{%- if message.role == 'assistant' -%}\
{%- if message.thinking -%}<|start|>assistant<|channel|>analysis<|message|>{{ message.thinking }}<|end|>{%- endif -%}\
<|start|>assistant<|channel|>final<|message|>{{ message.content }}<|return|>\
{%- else -%}<|start|>{{ message.role }}<|message|>{{ message.content }}<|end|>{%- endif -%}\
{%- endfor -%}{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";
        let t = ChatTemplate::new(harmony, "", "").unwrap();
        assert_eq!(t.think_ctl(), ThinkCtl::Prefill);
        let p = render_prompt(Some(&t), t.think_ctl(), "Doc. ", "Q?").unwrap();
        assert!(
            p.text.ends_with("<|channel|>final<|message|>"),
            "the choice is scored as the final answer's first token: {:?}",
            p.text
        );
        assert_eq!(&p.text[..p.prefix_len], "<|start|>user<|message|>Doc. ");
    }

    #[test]
    fn request_errors_are_not_fatal() {
        let collide = DecideError::CollidingChoices {
            first: 0,
            first_text: "yes".into(),
            second: 1,
            second_text: "yellow".into(),
            token: 88,
            piece: "y".into(),
        };
        assert!(!collide.is_fatal());
        assert!(collide.to_string().contains("\"yes\"") && collide.hint().contains("first token"));
        assert!(!DecideError::NoChoices.is_fatal());
        assert!(
            !DecideError::TooLong {
                n_tokens: 9,
                n_ctx: 8
            }
            .is_fatal()
        );
        assert!(
            DecideError::State {
                what: "saving the conversation",
                source: LlamaError::StateSize { seq: 0 }
            }
            .is_fatal()
        );
        assert!(DecideError::PrefillFailed(1).is_fatal() && DecideError::NoLogits.is_fatal());
    }
}
