//! What the panel knows: a timeline of events, a cursor into it, and the run state folded from
//! the events before the cursor. Live sources append and keep the cursor at the end unless
//! paused; a replay loads everything and moves the cursor on a clock. Stepping back refolds
//! from the start, which is cheap (a few float additions per token).

use std::time::Duration;

use crate::clean::clean;
use crate::figures::{self, Bars};
use bmoe_telemetry::deltas::TextAccumulator;
use bmoe_telemetry::protocol::Done;

use crate::model::{Event, Memory, PerToken, RunConfig, RunSummary, TextDelta, TokenSample};
use crate::session::{Composer, SessionEvent, SessionLog, Submitted};
use bmoe_telemetry::protocol::Request;

/// Lines of engine stderr kept for the log pane.
pub const LOG_KEEP: usize = 500;

/// Sums over the timed rows of the current generation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    /// Tokens (rows), including speculative followers.
    pub tokens: u64,
    /// Rows that carry timings (not speculative followers).
    pub timed: u64,
    /// Σ wall_ms.
    pub wall_ms: f64,
    /// Σ io_ms.
    pub io_ms: f64,
    /// Σ stall_ms.
    pub stall_ms: f64,
    /// Σ mgmt_ms.
    pub mgmt_ms: f64,
    /// Σ cpu_ms.
    pub cpu_ms: f64,
    /// Σ read MiB.
    pub read_mib: f64,
    /// Σ majflt.
    pub majflt: u64,
    /// Σ loop_overhead_ms over rows that carry it.
    pub loop_overhead_ms: f64,
    /// Rows that carried loop_overhead_ms.
    pub overhead_rows: u64,
}

/// How a run fact was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// The run said so (preamble, argv, `mode:` line, flags).
    Stated,
    /// Read off the numbers (stall > 0 or io > wall only happen under overlap).
    Inferred,
}

/// Everything folded from the events before the cursor.
#[derive(Debug, Clone, Default)]
pub struct RunState {
    /// Run facts: flags to `bmoe-top`, the spawned argv, the CSV preamble, the `mode:` line.
    pub config: RunConfig,
    /// Last token row that carries timings.
    pub last: Option<TokenSample>,
    /// Last step / steps seen.
    pub step: u64,
    /// Target tokens of the generation.
    pub steps: u64,
    /// Sums for run averages.
    pub totals: Totals,
    /// Wall ms per timed row over the whole source (sparkline).
    pub wall_hist: Vec<f64>,
    /// Flash MiB per timed row over the whole source (sparkline).
    pub read_hist: Vec<f64>,
    /// The last timed row said batch 1: followers after it are a live group's (the line
    /// protocol carries no `mtp_batch`), so they grow [`Self::last`]'s batch.
    live_group: bool,
    /// The generation's answer and thinking span as the engine sent them (raw; [`Self::answer`]
    /// and [`Self::reasoning`] give them cleaned for drawing).
    pub text: TextAccumulator,
    /// Session mode: the conversation.
    pub session: SessionLog,
    /// End-of-generation summary, once it arrived: the panel switches to run averages.
    pub summary: Option<RunSummary>,
    /// Lines ignored as malformed.
    pub malformed: u64,
    /// The latest of them: line number and reason.
    pub last_malformed: Option<(u64, String)>,
    /// Engine stderr tail.
    pub log: Vec<String>,
    /// Why the source ended, once it did.
    pub ended: Option<String>,
    /// `BMOE_LOAD` lines seen and the last one (MiB, ms).
    pub loads: u64,
    /// Last `BMOE_LOAD`.
    pub last_load: Option<(f64, f64)>,
    /// Generations begun.
    pub generations: u64,
    /// Whether a stall or io > wall was seen (overlap evidence).
    pub overlap_evidence: bool,
    /// Latest memory picture.
    pub memory: Option<Memory>,
    /// Whether any row ever carried text deltas.
    pub streams_text: bool,
}

impl RunState {
    /// Starts from the facts known before any event.
    pub fn new(config: RunConfig) -> Self {
        RunState {
            config,
            ..RunState::default()
        }
    }

    /// Folds one event.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Config(c) => self.config.merge(c),
            Event::Begin => self.begin(),
            Event::Load { mb, ms } => {
                self.loads += 1;
                self.last_load = Some((*mb, *ms));
            }
            Event::Token(sample, delta) => self.token(sample, delta.as_ref()),
            Event::FinalText { text, reasoning } => {
                // DONE carries both final texts; the one-shot answer block only the answer.
                let reasoning = match reasoning {
                    Some(r) => r.clone(),
                    None if text.is_empty() => return,
                    None => self.text.reasoning().to_string(),
                };
                self.text.finish(&Done {
                    text: text.clone(),
                    reasoning,
                    ..Done::default()
                });
            }
            Event::Session(e) => {
                self.session
                    .apply(e, self.text.text(), self.text.reasoning());
            }
            Event::Summary(s) => {
                if let Some(t) = s.threads
                    && self.config.threads().is_none()
                {
                    self.config.set("threads", t.to_string());
                }
                self.summary = Some((**s).clone());
            }
            Event::Malformed { line, reason } => {
                self.malformed += 1;
                self.last_malformed = Some((*line, clean(reason, false)));
            }
            Event::Log(line) => {
                if self.log.len() >= LOG_KEEP {
                    self.log.remove(0);
                }
                self.log.push(clean(line, false));
            }
            Event::Ended(why) => self.ended = Some(clean(why, false)),
        }
    }

    fn begin(&mut self) {
        self.generations += 1;
        self.text.clear();
        self.summary = None;
        self.totals = Totals::default();
        self.last = None;
        self.step = 0;
    }

    fn token(&mut self, s: &TokenSample, delta: Option<&TextDelta>) {
        // A new CSV turn after a summary starts a new generation view.
        if self.summary.is_some() {
            self.begin();
        }
        self.step = s.step;
        self.steps = s.steps;
        self.totals.tokens += 1;
        if let Some(m) = s.memory {
            self.memory = Some(m);
        }
        if let Some(d) = delta {
            self.streams_text = true;
            self.text.apply(&d.to_progress());
        }
        if s.is_follower() {
            // A recorded group's first row carries its size (mtp_batch); the line protocol has
            // no such field, so live rows all read as batch 1 and each follower grows the group
            // it trails, whose per-token figures are then divided again.
            if self.live_group
                && let Some(first) = self.last.as_mut()
            {
                first.mtp_batch += 1;
                let per = first.per_token();
                if let (Some(w), Some(r)) = (self.wall_hist.last_mut(), self.read_hist.last_mut()) {
                    (*w, *r) = (per.wall_ms, per.read_mib);
                }
            }
            return;
        }
        let t = &mut self.totals;
        t.timed += 1;
        t.wall_ms += fin(s.wall_ms);
        t.io_ms += fin(s.io_ms);
        t.stall_ms += fin(s.stall_ms);
        t.mgmt_ms += fin(s.mgmt_ms);
        t.cpu_ms += fin(s.cpu_ms);
        t.read_mib += fin(s.read_mib);
        t.majflt += s.majflt;
        if let Some(o) = s.loop_overhead_ms {
            t.loop_overhead_ms += fin(o);
            t.overhead_rows += 1;
        }
        if s.stall_ms > 0.0 || (s.wall_ms > 0.0 && s.io_ms > s.wall_ms * 1.05) {
            self.overlap_evidence = true;
        }
        self.live_group = s.mtp_batch == 1;
        let per = s.per_token();
        self.wall_hist.push(per.wall_ms);
        self.read_hist.push(per.read_mib);
        self.last = Some(s.clone());
    }

    /// The answer so far, cleaned for drawing.
    pub fn answer(&self) -> String {
        clean(self.text.text(), true)
    }

    /// The thinking span so far, cleaned for drawing.
    pub fn reasoning(&self) -> String {
        clean(self.text.reasoning(), true)
    }

    /// Whether reads overlap compute, and how that is known. The stated fact wins; without one
    /// a stall or io > wall is evidence of overlap; otherwise serial is assumed (inferred).
    pub fn overlap(&self) -> (bool, Known) {
        match self.config.overlap() {
            Some(o) => (o, Known::Stated),
            None => (self.overlap_evidence, Known::Inferred),
        }
    }

    /// Bars of the last token, per token of its group.
    pub fn live_bars(&self) -> Option<Bars> {
        let s = self.live()?;
        Some(Bars::new(
            s.wall_ms,
            s.cpu_ms,
            self.config.threads(),
            s.io_ms,
            s.stall_ms,
            s.mgmt_ms,
            self.overlap().0,
        ))
    }

    /// The last timed row's figures per token of its speculative group (the contract's
    /// `÷ mtp_batch`): what every "live" figure of the panel reads.
    pub fn live(&self) -> Option<PerToken> {
        self.last.as_ref().map(TokenSample::per_token)
    }

    /// Run-average bars: from the summary's per-token means when it has them, else from the row
    /// sums (per token).
    pub fn avg_bars(&self) -> Option<Bars> {
        let overlap = self.overlap().0;
        let threads = self.config.threads();
        let t = &self.totals;
        let n = t.tokens.max(1) as f64;
        let row = |sum: f64| sum / n;
        if let Some(s) = &self.summary {
            let wall_s = s
                .s_tok
                .or_else(|| s.tok_s.filter(|r| *r > 0.0).map(|r| 1.0 / r))?;
            let ms = |v: Option<f64>, fallback: f64| v.map(|x| x * 1000.0).unwrap_or(fallback);
            return Some(Bars::new(
                wall_s * 1000.0,
                ms(s.cpu_s_tok, row(t.cpu_ms)),
                threads,
                ms(s.io_s_tok, row(t.io_ms)),
                ms(s.stall_s_tok, row(t.stall_ms)),
                ms(s.mgmt_s_tok, row(t.mgmt_ms)),
                overlap,
            ));
        }
        (t.tokens > 0).then(|| {
            Bars::new(
                row(t.wall_ms),
                row(t.cpu_ms),
                threads,
                row(t.io_ms),
                row(t.stall_ms),
                row(t.mgmt_ms),
                overlap,
            )
        })
    }

    /// Busy threads for the CPU diagnostic.
    pub fn busy_threads(&self) -> Option<u32> {
        figures::busy_threads(
            self.config.threads(),
            self.config.io_threads(),
            self.overlap().0,
        )
    }

    /// Live decode rate of the last token.
    pub fn live_tok_s(&self) -> Option<f64> {
        let s = self.last.as_ref()?;
        figures::tok_s(s.wall_ms, s.mtp_batch)
    }

    /// Run-average decode rate: the summary's when present, else from the rows.
    pub fn avg_tok_s(&self) -> Option<f64> {
        if let Some(r) = self.summary.as_ref().and_then(|s| s.tok_s) {
            return Some(r);
        }
        figures::run_tok_s(self.totals.tokens, self.totals.wall_ms)
    }

    /// Whether the cache hit rate must be read with the drop caveat: the run dropped experts
    /// (summary), or set a drop threshold (preamble).
    pub fn drops_reported(&self) -> Option<String> {
        let from_summary = self.summary.as_ref().and_then(|s| {
            let d = s.experts_dropped?;
            (d > 0).then(|| match s.experts_routed {
                Some(r) if r > 0 => format!("{d}/{r} dropped"),
                _ => format!("{d} dropped"),
            })
        });
        from_summary.or_else(|| {
            self.config
                .drop_cold_frac()
                .map(|f| format!("threshold {f}"))
        })
    }

    /// Whether the run streams experts: stated, or evident from reads / a cache.
    pub fn streaming(&self) -> bool {
        self.config.streaming().unwrap_or_else(|| {
            self.totals.read_mib > 0.0
                || self
                    .last
                    .as_ref()
                    .is_some_and(|s| s.cache_hit_pct.is_some())
                || self.loads > 0
        })
    }
}

fn fin(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// Which pane scroll keys and the mouse wheel move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// The streamed answer.
    Answer,
    /// The telemetry side: run facts, end-of-run lines, engine log.
    Telemetry,
}

/// Replay pace: a multiple of recorded time, or as fast as possible.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// Recorded time ÷ this factor.
    Times(f64),
    /// No waiting.
    Max,
}

const LADDER: [f64; 9] = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];

impl Speed {
    /// Parses `1`, `10`, `0.5`, `max`.
    pub fn parse(s: &str) -> Result<Speed, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("max") {
            return Ok(Speed::Max);
        }
        let t = t.strip_suffix(['x', '×']).unwrap_or(t);
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(Speed::Times(v)),
            _ => Err(format!(
                "invalid speed `{s}`: expected a positive number or `max`"
            )),
        }
    }

    /// Next step up the ladder (`+`).
    pub fn faster(self) -> Speed {
        match self {
            Speed::Max => Speed::Max,
            Speed::Times(v) => LADDER
                .iter()
                .find(|l| **l > v + 1e-9)
                .map_or(Speed::Max, |l| Speed::Times(*l)),
        }
    }

    /// Next step down the ladder (`-`).
    pub fn slower(self) -> Speed {
        match self {
            Speed::Max => Speed::Times(LADDER[LADDER.len() - 1]),
            Speed::Times(v) => Speed::Times(
                LADDER
                    .iter()
                    .rev()
                    .find(|l| **l < v - 1e-9)
                    .copied()
                    .unwrap_or(LADDER[0]),
            ),
        }
    }

    /// How long a recorded token takes to replay: `(wall_ms + loop_overhead_ms) ÷ speed`.
    pub fn delay(self, s: &TokenSample) -> Duration {
        match self {
            Speed::Max => Duration::ZERO,
            Speed::Times(v) => {
                let ms = fin(s.wall_ms).max(0.0) + fin(s.loop_overhead_ms.unwrap_or(0.0)).max(0.0);
                Duration::from_secs_f64(ms / 1000.0 / v)
            }
        }
    }

    /// `1×`, `0.5×`, `max`.
    pub fn label(self) -> String {
        match self {
            Speed::Max => "max".to_string(),
            Speed::Times(v) => format!("{v}×"),
        }
    }
}

/// Where events come from, for labels and for what keys mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// A child process spawned by `bmoe-top -- cmd`.
    Spawn,
    /// Protocol lines on stdin.
    Stdin,
    /// A recorded metrics CSV.
    Replay,
    /// An engine session driven from the prompt line (`--session`).
    Session,
}

/// The whole panel state: source, timeline, cursor, folded run, and view state.
#[derive(Debug, Clone)]
pub struct App {
    /// Where the events come from.
    pub kind: SourceKind,
    /// Human label of the source (command, file).
    pub label: String,
    base: RunConfig,
    /// Folded state at the cursor.
    pub run: RunState,
    /// Every event so far.
    pub timeline: Vec<Event>,
    /// Events applied.
    pub cursor: usize,
    token_at: Vec<usize>,
    /// Tokens applied (index into the token positions).
    pub tokens_applied: usize,
    /// Display frozen (live) or playback stopped (replay).
    pub paused: bool,
    /// Help popup open.
    pub help: bool,
    /// Pane focus.
    pub focus: Focus,
    /// Answer lines scrolled back from the tail (0 = follow).
    pub answer_scroll: u16,
    /// Telemetry detail lines scrolled down from the top.
    pub detail_scroll: u16,
    /// Replay pace.
    pub speed: Speed,
    /// Quit requested.
    pub quit: bool,
    /// Something visible changed since the last draw.
    pub dirty: bool,
    /// A child is still running (spawn source).
    pub child_alive: bool,
    /// An interrupt was forwarded to the child.
    pub interrupted: bool,
    /// Session mode: the prompt line and the next request's settings.
    pub composer: Composer,
}

impl App {
    /// A panel for `kind` with the facts known up front.
    pub fn new(kind: SourceKind, label: impl Into<String>, base: RunConfig) -> Self {
        App {
            kind,
            label: clean(&label.into(), false),
            run: RunState::new(base.clone()),
            base,
            timeline: Vec::new(),
            cursor: 0,
            token_at: Vec::new(),
            tokens_applied: 0,
            paused: false,
            help: false,
            focus: Focus::Answer,
            answer_scroll: 0,
            detail_scroll: 0,
            speed: Speed::Times(1.0),
            quit: false,
            dirty: true,
            child_alive: false,
            interrupted: false,
            composer: Composer::default(),
        }
    }

    /// Enter on the prompt line: the `generate` request to write to the engine, recorded on the
    /// timeline; `None` (with the reason in the composer's notice) when it cannot be sent now.
    pub fn submit(&mut self) -> Option<Request> {
        self.dirty = true;
        let ended = self.run.ended.is_some() || !self.child_alive;
        match self.composer.enter(&self.run.session, ended) {
            Ok(Submitted::Request(req, ev)) => {
                // A new request means following the conversation again.
                self.answer_scroll = 0;
                self.push(Event::Session(ev));
                Some(req)
            }
            Ok(Submitted::Setting(what)) => {
                self.composer.notice = Some(what);
                None
            }
            Err(why) => {
                self.composer.notice = Some(why.to_string());
                None
            }
        }
    }

    /// Esc: the `cancel` request for the generation in flight, recorded on the timeline; `None`
    /// (with the reason in the composer's notice) when there is nothing to cancel.
    pub fn cancel(&mut self) -> Option<Request> {
        self.dirty = true;
        let s = &self.run.session;
        if s.in_flight().is_none() {
            self.composer.notice = Some("nothing is generating".into());
            return None;
        }
        if s.cancel_pending {
            self.composer.notice = Some("cancel already sent: waiting for DONE".into());
            return None;
        }
        self.composer.notice = None;
        self.push(Event::Session(SessionEvent::CancelSent));
        Some(Request::Cancel)
    }

    /// Appends an event; a live, unpaused panel applies it at once.
    pub fn push(&mut self, event: Event) {
        if matches!(event, Event::Token(..)) {
            self.token_at.push(self.timeline.len());
        }
        self.timeline.push(event);
        if self.kind != SourceKind::Replay && !self.paused {
            self.apply_to(self.timeline.len());
        }
    }

    /// Tokens in the whole timeline.
    pub fn tokens_total(&self) -> usize {
        self.token_at.len()
    }

    /// Applies events up to (excluding) index `end`, refolding from the start when that is
    /// behind the cursor.
    pub fn apply_to(&mut self, end: usize) {
        let end = end.min(self.timeline.len());
        if end < self.cursor {
            self.run = RunState::new(self.base.clone());
            self.cursor = 0;
            self.tokens_applied = 0;
        }
        for ev in &self.timeline[self.cursor..end] {
            self.run.apply(ev);
            if matches!(ev, Event::Token(..)) {
                self.tokens_applied += 1;
            }
        }
        if end != self.cursor {
            self.dirty = true;
        }
        self.cursor = end;
    }

    /// Shows the state right after token number `n` (1-based; 0 = before the first token).
    /// Events between tokens ride with the token before them, so the end of the timeline
    /// (summary, end of source) is part of the last token's view.
    pub fn seek_tokens(&mut self, n: usize) {
        let n = n.min(self.token_at.len());
        let end = if n == self.token_at.len() {
            self.timeline.len()
        } else {
            // up to the events before token n+1, except a `Begin` there: that opens the next
            // generation and rides with its first token, so a turn's summary stays in view.
            let floor = if n == 0 { 0 } else { self.token_at[n - 1] + 1 };
            let mut end = self.token_at[n];
            while end > floor && matches!(self.timeline[end - 1], Event::Begin) {
                end -= 1;
            }
            end
        };
        self.apply_to(end);
    }

    /// One token forward (`→`).
    pub fn step_forward(&mut self) {
        self.seek_tokens(self.tokens_applied + 1);
    }

    /// One token back (`←`).
    pub fn step_back(&mut self) {
        self.seek_tokens(self.tokens_applied.saturating_sub(1));
    }

    /// Moves by a tenth of the run (`[` / `]`).
    pub fn seek_fraction(&mut self, forward: bool) {
        let jump = (self.token_at.len() / 10).max(1);
        let n = if forward {
            self.tokens_applied + jump
        } else {
            self.tokens_applied.saturating_sub(jump)
        };
        self.seek_tokens(n);
    }

    /// The next token a replay would show, if any.
    pub fn next_token(&self) -> Option<&TokenSample> {
        let idx = *self.token_at.get(self.tokens_applied)?;
        match &self.timeline[idx] {
            Event::Token(s, _) => Some(s),
            _ => None,
        }
    }

    /// Pause or resume; resuming a live panel catches up with what arrived meanwhile.
    pub fn toggle_pause(&mut self) {
        self.paused = !self.paused;
        if !self.paused && self.kind != SourceKind::Replay {
            self.apply_to(self.timeline.len());
        }
        self.dirty = true;
    }

    /// Whether the cursor is at the end of everything received.
    pub fn at_end(&self) -> bool {
        self.cursor >= self.timeline.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(step: u64, wall: f64, read: f64) -> Event {
        Event::Token(
            Box::new(TokenSample {
                step,
                steps: 4,
                wall_ms: wall,
                io_ms: wall / 2.0,
                read_mib: read,
                cpu_ms: wall * 2.0,
                ..TokenSample::default()
            }),
            Some(TextDelta {
                reasoning: String::new(),
                text: format!("t{step} "),
                reset: false,
            }),
        )
    }

    fn cfg(pairs: &[(&str, &str)]) -> RunConfig {
        let mut c = RunConfig::default();
        for (k, v) in pairs {
            c.set(k, *v);
        }
        c
    }

    #[test]
    fn run_averages_are_sums_over_tokens() {
        let mut r = RunState::new(cfg(&[("threads", "4")]));
        r.apply(&tok(1, 200.0, 10.0));
        r.apply(&tok(2, 300.0, 30.0));
        // 2 tokens / 0.5 s = 4 tok/s; live = 1000/300
        assert!((r.avg_tok_s().unwrap() - 4.0).abs() < 1e-9);
        assert!((r.live_tok_s().unwrap() - 1000.0 / 300.0).abs() < 1e-9);
        let b = r.avg_bars().unwrap();
        // mean wall 250, mean cpu 500 / 4 threads = 125, mean io 125 (serial), remainder 0
        assert!((b.wall_ms - 250.0).abs() < 1e-9);
        assert!((b.compute_ms.unwrap() - 125.0).abs() < 1e-9);
        assert!((b.flash_ms - 125.0).abs() < 1e-9);
        assert_eq!(r.answer(), "t1 t2 ");
        assert_eq!(r.wall_hist, vec![200.0, 300.0]);
    }

    #[test]
    fn reset_replaces_both_accumulators() {
        let mut r = RunState::default();
        r.apply(&Event::Token(
            Box::default(),
            Some(TextDelta {
                reasoning: String::new(),
                text: "<think>hmm".into(),
                reset: false,
            }),
        ));
        r.apply(&Event::Token(
            Box::default(),
            Some(TextDelta {
                reasoning: "hmm".into(),
                text: "Yes".into(),
                reset: true,
            }),
        ));
        assert_eq!(r.reasoning(), "hmm");
        assert_eq!(r.answer(), "Yes");
        r.apply(&Event::Token(
            Box::default(),
            Some(TextDelta {
                reasoning: String::new(),
                text: ".".into(),
                reset: false,
            }),
        ));
        assert_eq!(r.answer(), "Yes.");
    }

    #[test]
    fn summary_means_drive_avg_bars_with_overlap_stall() {
        let mut r = RunState::new(cfg(&[
            ("threads", "4"),
            ("io_threads", "4"),
            ("overlap", "1"),
        ]));
        r.apply(&tok(1, 100.0, 1.0));
        r.apply(&Event::Summary(Box::new(RunSummary {
            tok_s: Some(4.0),
            cpu_s_tok: Some(0.6),
            io_s_tok: Some(0.5),
            stall_s_tok: Some(0.02),
            mgmt_s_tok: Some(0.01),
            ..RunSummary::default()
        })));
        let b = r.avg_bars().unwrap();
        // wall 1000/4 = 250; compute 600/4 = 150; flash = stall 20 (not io 500); mgmt 10; rest 70
        assert!((b.wall_ms - 250.0).abs() < 1e-9);
        assert!((b.compute_ms.unwrap() - 150.0).abs() < 1e-9);
        assert!((b.flash_ms - 20.0).abs() < 1e-9);
        assert!((b.unattributed_ms.unwrap() - 70.0).abs() < 1e-9);
        // busy = 4 + 4 lanes
        assert_eq!(r.busy_threads(), Some(8));
    }

    #[test]
    fn speculative_followers_count_as_tokens_not_timings() {
        let mut r = RunState::new(cfg(&[("threads", "2")]));
        r.apply(&Event::Token(
            Box::new(TokenSample {
                wall_ms: 300.0,
                cpu_ms: 600.0,
                mtp_batch: 3,
                ..TokenSample::default()
            }),
            None,
        ));
        for _ in 0..2 {
            r.apply(&Event::Token(
                Box::new(TokenSample {
                    mtp_batch: 1,
                    ..TokenSample::default()
                }),
                None,
            ));
        }
        assert_eq!(r.totals.tokens, 3);
        assert_eq!(r.totals.timed, 1);
        // 3 tokens over 0.3 s = 10 tok/s, and live 3 x 1000 / 300 = 10
        assert!((r.avg_tok_s().unwrap() - 10.0).abs() < 1e-9);
        assert!((r.live_tok_s().unwrap() - 10.0).abs() < 1e-9);
        // live bars per token of the group: wall 100, compute 200/2 = 100
        let b = r.live_bars().unwrap();
        assert!((b.wall_ms - 100.0).abs() < 1e-9);
        assert!((b.compute_ms.unwrap() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn live_followers_grow_the_group_the_protocol_cannot_size() {
        // BMOE_PROGRESS has no mtp_batch: a live verify decode of 3 tokens arrives as one
        // timed line and two zero lines, each read as batch 1
        let mut r = RunState::new(cfg(&[("threads", "2")]));
        let first = TokenSample {
            wall_ms: 300.0,
            cpu_ms: 600.0,
            read_mib: 6.0,
            ..TokenSample::default()
        };
        r.apply(&Event::Token(Box::new(first.clone()), None));
        assert!((r.live_tok_s().unwrap() - 1000.0 / 300.0).abs() < 1e-9);
        for _ in 0..2 {
            r.apply(&Event::Token(Box::default(), None));
        }
        assert_eq!(r.last.as_ref().unwrap().mtp_batch, 3);
        assert!((r.live_tok_s().unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(r.wall_hist, vec![100.0]);
        assert_eq!(r.read_hist, vec![2.0]);
        assert!((r.avg_tok_s().unwrap() - 10.0).abs() < 1e-9);
        // the next plain line is a group of its own
        r.apply(&Event::Token(Box::new(first), None));
        assert_eq!(r.last.as_ref().unwrap().mtp_batch, 1);
    }

    #[test]
    fn every_live_figure_of_a_speculative_group_is_per_token() {
        // The synthetic file's row 20: a verify decode that confirmed 2 tokens carries the
        // group's whole cost; the contract's per-token cost is each figure / mtp_batch.
        let mut r = RunState::new(cfg(&[("threads", "4"), ("overlap", "1")]));
        let group = TokenSample {
            step: 20,
            steps: 40,
            wall_ms: 336.0,
            io_ms: 202.0,
            stall_ms: 34.0,
            mgmt_ms: 16.8,
            cpu_ms: 1008.0,
            read_mib: 30.8,
            majflt: 10,
            mtp_batch: 2,
            ..TokenSample::default()
        };
        r.apply(&Event::Token(Box::new(group), None));
        let l = r.live().unwrap();
        let want = PerToken {
            wall_ms: 168.0,
            io_ms: 101.0,
            stall_ms: 17.0,
            mgmt_ms: 8.4,
            cpu_ms: 504.0,
            read_mib: 15.4,
            majflt: 5.0,
        };
        for (got, want, what) in [
            (l.wall_ms, want.wall_ms, "wall"),
            (l.io_ms, want.io_ms, "io"),
            (l.stall_ms, want.stall_ms, "stall"),
            (l.mgmt_ms, want.mgmt_ms, "mgmt"),
            (l.cpu_ms, want.cpu_ms, "cpu"),
            (l.read_mib, want.read_mib, "read MiB"),
            (l.majflt, want.majflt, "majflt"),
        ] {
            assert!((got - want).abs() < 1e-9, "{what}: {got} != {want}");
        }
        // The sparklines and the bars read the same per-token figures.
        assert_eq!(r.wall_hist, vec![168.0]);
        assert!((r.read_hist[0] - 15.4).abs() < 1e-9);
        let b = r.live_bars().unwrap();
        assert!((b.flash_ms - 17.0).abs() < 1e-9);
        assert!((b.compute_ms.unwrap() - 126.0).abs() < 1e-9);
        // 2 tokens over 336 ms
        assert!((r.live_tok_s().unwrap() - 2000.0 / 336.0).abs() < 1e-9);
        // A group whose fault count does not divide evenly keeps the fraction.
        let odd = TokenSample {
            majflt: 17,
            wall_ms: 1.0,
            mtp_batch: 2,
            ..TokenSample::default()
        };
        assert!((odd.per_token().majflt - 8.5).abs() < 1e-9);
    }

    #[test]
    fn overlap_is_inferred_from_stall_when_not_stated() {
        let mut r = RunState::default();
        assert_eq!(r.overlap(), (false, Known::Inferred));
        r.apply(&Event::Token(
            Box::new(TokenSample {
                wall_ms: 500.0,
                io_ms: 1600.0,
                stall_ms: 380.0,
                ..TokenSample::default()
            }),
            None,
        ));
        assert_eq!(r.overlap(), (true, Known::Inferred));
        r.config.set("overlap", "0");
        assert_eq!(r.overlap(), (false, Known::Stated));
    }

    #[test]
    fn timeline_steps_and_seeks_by_token() {
        let mut app = App::new(SourceKind::Replay, "x", RunConfig::default());
        app.push(Event::Config(cfg(&[("threads", "4")])));
        for i in 1..=4 {
            app.push(tok(i, 100.0 * i as f64, 1.0));
        }
        app.push(Event::Summary(Box::default()));
        assert_eq!(app.cursor, 0);
        app.step_forward();
        assert_eq!(app.run.step, 1);
        assert_eq!(app.run.config.threads(), Some(4));
        app.step_forward();
        app.step_forward();
        assert_eq!(app.run.answer(), "t1 t2 t3 ");
        app.step_back();
        assert_eq!(app.run.step, 2);
        assert_eq!(app.run.answer(), "t1 t2 ");
        app.seek_tokens(usize::MAX);
        assert!(app.run.summary.is_some());
        assert!(app.at_end());
        app.seek_tokens(0);
        assert_eq!(app.run.step, 0);
        assert!(app.run.answer().is_empty());
    }

    #[test]
    fn live_pause_buffers_and_resume_catches_up() {
        let mut app = App::new(SourceKind::Stdin, "stdin", RunConfig::default());
        app.push(tok(1, 100.0, 1.0));
        app.toggle_pause();
        app.push(tok(2, 100.0, 1.0));
        assert_eq!(app.run.step, 1);
        app.step_forward();
        assert_eq!(app.run.step, 2);
        app.push(tok(3, 100.0, 1.0));
        app.toggle_pause();
        assert_eq!(app.run.step, 3);
    }

    #[test]
    fn speed_ladder_and_delay() {
        assert_eq!(Speed::parse("10").unwrap(), Speed::Times(10.0));
        assert_eq!(Speed::parse("MAX").unwrap(), Speed::Max);
        assert!(Speed::parse("0").is_err());
        assert!(Speed::parse("fast").is_err());
        assert_eq!(Speed::Times(1.0).faster(), Speed::Times(2.0));
        assert_eq!(Speed::Times(3.0).faster(), Speed::Times(5.0));
        assert_eq!(Speed::Times(100.0).faster(), Speed::Max);
        assert_eq!(Speed::Max.slower(), Speed::Times(100.0));
        assert_eq!(Speed::Times(0.25).slower(), Speed::Times(0.25));
        let s = TokenSample {
            wall_ms: 180.0,
            loop_overhead_ms: Some(20.0),
            ..TokenSample::default()
        };
        // (180 + 20) / 10 = 20 ms
        assert_eq!(Speed::Times(10.0).delay(&s), Duration::from_millis(20));
        assert_eq!(Speed::Max.delay(&s), Duration::ZERO);
    }

    #[test]
    fn drop_caveat_comes_from_summary_or_preamble() {
        let mut r = RunState::new(cfg(&[("drop_cold_frac", "0.75")]));
        assert_eq!(r.drops_reported().as_deref(), Some("threshold 0.75"));
        r.apply(&Event::Summary(Box::new(RunSummary {
            experts_routed: Some(15360),
            experts_dropped: Some(1200),
            ..RunSummary::default()
        })));
        assert_eq!(r.drops_reported().as_deref(), Some("1200/15360 dropped"));
        let r = RunState::new(cfg(&[("drop_cold_frac", "0")]));
        assert_eq!(r.drops_reported(), None);
    }

    #[test]
    fn not_a_benchmark_reasons() {
        let c = cfg(&[
            ("temp", "0.7"),
            ("spec", "mtp"),
            ("predict_log", "1"),
            ("compute_trace_layers", "1"),
        ]);
        assert_eq!(
            c.not_benchmark_reasons(),
            vec!["traced", "probed", "stochastic", "speculated"]
        );
        let c = cfg(&[("temp", "0"), ("spec", "off"), ("prefetch_sync", "0")]);
        assert!(c.not_benchmark_reasons().is_empty());
    }
}
