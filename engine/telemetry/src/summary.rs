//! End-of-run summary lines (`generation:`, `compute:`, `mode:`, `moe-stream:`, …) and the
//! `=== answer ===` / `=== perf ===` banners of one-shot mode.
//!
//! Every typed line implements [`std::fmt::Display`] producing the seed's template with the
//! engine's fixed decimals (e.g. `generation: %d tokens, %.3f s/token (%.3f tok/s)`), and
//! [`parse_summary_line`] reads them back — including the older variants found in archived
//! logs (a `moe-stream:` line without `cache mgmt`, a `moe-cache:` line with a `budget`
//! suffix). Lines with a `name:` prefix this crate does not type (e.g. `mtp:`, `moe-rows:`,
//! `moe-predict:`) are kept verbatim as [`SummaryLine::Other`].
//!
//! Numbers are printed with fixed decimals, so a parsed value equals the printed one, not the
//! engine's internal one: `parse(display(x))` is `x` rounded to the template's decimals.

use std::fmt;

/// The banner that precedes the full answer text in `--progress` mode.
pub const ANSWER_BANNER: &str = "=== answer ===";
/// The banner that precedes the summary lines in `--progress` mode.
pub const PERF_BANNER: &str = "=== perf ===";

/// `generation: <n> tokens, <s> s/token (<t> tok/s)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Generation {
    /// Tokens generated.
    pub tokens: u64,
    /// Mean decode seconds per token (3 decimals).
    pub s_per_token: f64,
    /// Decode rate (3 decimals).
    pub tok_s: f64,
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "generation: {} tokens, {:.3} s/token ({:.3} tok/s)",
            self.tokens, self.s_per_token, self.tok_s
        )
    }
}

/// `compute: <pct>% CPU occupancy (<c> cpu-s/token over <n> threads), <f> major faults/token`.
///
/// The CLI's occupancy divides by compute threads only (`cpu_s_tok / (s_tok × threads)`);
/// the panel's CPU-busy diagnostic is a different quantity, see
/// [`crate::attribution::cpu_busy_pct`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compute {
    /// CPU occupancy, percent (1 decimal).
    pub occupancy_pct: f64,
    /// CPU seconds per token (4 decimals).
    pub cpu_s_per_token: f64,
    /// Compute threads.
    pub threads: u64,
    /// Major faults per token (2 decimals).
    pub major_faults_per_token: f64,
}

impl fmt::Display for Compute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compute: {:.1}% CPU occupancy ({:.4} cpu-s/token over {} threads), {:.2} major faults/token",
            self.occupancy_pct, self.cpu_s_per_token, self.threads, self.major_faults_per_token
        )
    }
}

/// The cache setting of a `mode:` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheSetting {
    /// `cache auto`.
    Auto,
    /// `cache <n> MiB`.
    Mib(u64),
    /// `cache off`.
    Off,
}

impl fmt::Display for CacheSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheSetting::Auto => f.write_str("auto"),
            CacheSetting::Mib(n) => write!(f, "{n} MiB"),
            CacheSetting::Off => f.write_str("off"),
        }
    }
}

/// How dense (non-expert) weights are held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenseWeights {
    /// The model's mmap.
    Mmap,
    /// mmap, pre-faulted.
    Warm,
    /// Copied into anonymous memory.
    Anon,
    /// Android hardware buffers.
    Ahwb,
    /// A value this version does not know, verbatim.
    Other(String),
}

impl DenseWeights {
    /// The spelling used in `mode:` lines and the CSV preamble (`dense_weights=`).
    pub fn as_str(&self) -> &str {
        match self {
            DenseWeights::Mmap => "mmap",
            DenseWeights::Warm => "warm",
            DenseWeights::Anon => "anon",
            DenseWeights::Ahwb => "ahwb",
            DenseWeights::Other(s) => s,
        }
    }

    /// Parses a spelling; unknown ones become [`DenseWeights::Other`].
    pub fn from_name(s: &str) -> Self {
        match s {
            "mmap" => DenseWeights::Mmap,
            "warm" => DenseWeights::Warm,
            "anon" => DenseWeights::Anon,
            "ahwb" => DenseWeights::Ahwb,
            other => DenseWeights::Other(other.to_string()),
        }
    }
}

/// `mode: …` — printed on every run, the first line to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `mode: expert streaming, cache <auto|<n> MiB|off>, dense <kind>[, overlap[ (<kind>)]][, <extra>…]`.
    Streaming {
        /// The expert cache.
        cache: CacheSetting,
        /// Dense weight placement.
        dense: DenseWeights,
        /// `Some("")` for a plain `overlap` part, `Some(kind)` for `overlap (<kind>)` (e.g. which
        /// overlap mechanism ran), `None` in serial mode.
        overlap: Option<String>,
        /// Further comma-separated parts a newer engine appended, verbatim.
        extra: Vec<String>,
    },
    /// Any other `mode:` text (plain llama.cpp on mmap: the text names the flag or says the
    /// architecture is not streamed), verbatim after `mode: `.
    NotStreaming(String),
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Streaming {
                cache,
                dense,
                overlap,
                extra,
            } => {
                write!(
                    f,
                    "mode: expert streaming, cache {cache}, dense {}",
                    dense.as_str()
                )?;
                match overlap.as_deref() {
                    None => {}
                    Some("") => f.write_str(", overlap")?,
                    Some(kind) => write!(f, ", overlap ({kind})")?,
                }
                for e in extra {
                    write!(f, ", {e}")?;
                }
                Ok(())
            }
            Mode::NotStreaming(text) => write!(f, "mode: {text}"),
        }
    }
}

/// `moe-stream: read <mib> MiB (<mib/tok> MiB/token), decode <s> s/token (compute <c> + cache
/// mgmt <m> + flash I/O <i> s/token, <bw> MiB/s)[ stall_s/tok=<s>]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeStream {
    /// Total flash read, MiB (1 decimal).
    pub read_mib: f64,
    /// Flash read per token, MiB (2 decimals).
    pub mib_per_token: f64,
    /// Decode seconds per token (3 decimals).
    pub decode_s_per_token: f64,
    /// Compute residual per token, s (3 decimals).
    pub compute_s: f64,
    /// Cache management per token, s (3 decimals); `None` in logs older than the term.
    pub mgmt_s: Option<f64>,
    /// Flash I/O per token, s (3 decimals).
    pub io_s: f64,
    /// Read bandwidth, MiB/s (0 decimals).
    pub mib_per_s: f64,
    /// Under `--overlap`: mean stall per token, s (3 decimals), written as a trailing
    /// ` stall_s/tok=<s>`.
    pub stall_s_per_token: Option<f64>,
}

impl fmt::Display for MoeStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-stream: read {:.1} MiB ({:.2} MiB/token), decode {:.3} s/token (compute {:.3} + ",
            self.read_mib, self.mib_per_token, self.decode_s_per_token, self.compute_s
        )?;
        if let Some(m) = self.mgmt_s {
            write!(f, "cache mgmt {m:.3} + ")?;
        }
        write!(
            f,
            "flash I/O {:.3} s/token, {:.0} MiB/s)",
            self.io_s, self.mib_per_s
        )?;
        if let Some(s) = self.stall_s_per_token {
            write!(f, " stall_s/tok={s:.3}")?;
        }
        Ok(())
    }
}

/// `moe-cache: <pct>% hit, resident <mib> MiB[, budget <n> MiB[ (<note>)]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeCache {
    /// Cumulative hit rate, percent (1 decimal).
    pub hit_pct: f64,
    /// Resident cache size, MiB (1 decimal).
    pub resident_mib: f64,
    /// Budget, MiB (0 decimals), printed when the cache was sized automatically.
    pub budget_mib: Option<f64>,
    /// The parenthesised note after the budget, e.g. `auto` or `auto, resized 0×`.
    pub budget_note: Option<String>,
}

impl fmt::Display for MoeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-cache: {:.1}% hit, resident {:.1} MiB",
            self.hit_pct, self.resident_mib
        )?;
        if let Some(b) = self.budget_mib {
            write!(f, ", budget {b:.0} MiB")?;
            if let Some(n) = &self.budget_note {
                write!(f, " ({n})")?;
            }
        }
        Ok(())
    }
}

/// `moe-overlap: stall <s> s/token (flash reads overlapped with FFN compute)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeOverlap {
    /// Mean stall per token, s (3 decimals).
    pub stall_s_per_token: f64,
}

impl fmt::Display for MoeOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-overlap: stall {:.3} s/token (flash reads overlapped with FFN compute)",
            self.stall_s_per_token
        )
    }
}

/// `moe-prefetch: <mib> MiB speculative, <useful>/<prefetched> experts useful (<pct>%)[ [tag]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MoePrefetch {
    /// Speculative flash read, MiB (1 decimal).
    pub mib: f64,
    /// Prefetched experts a later routing hit.
    pub useful: u64,
    /// Experts fully read ahead.
    pub prefetched: u64,
    /// `useful / prefetched`, percent (0 decimals).
    pub pct: f64,
    /// `stale-gate` or `route-ahead` (printed in brackets), `None` for plain `--prefetch`.
    pub tag: Option<String>,
}

impl fmt::Display for MoePrefetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-prefetch: {:.1} MiB speculative, {}/{} experts useful ({:.0}%)",
            self.mib, self.useful, self.prefetched, self.pct
        )?;
        if let Some(t) = &self.tag {
            write!(f, " [{t}]")?;
        }
        Ok(())
    }
}

/// `moe-drop: <dropped>/<routed> routed experts dropped (<pct>%), threshold <F> x uniform`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeDrop {
    /// Routings discarded.
    pub dropped: u64,
    /// Routings examined.
    pub routed: u64,
    /// `dropped / routed`, percent (1 decimal).
    pub pct: f64,
    /// The `--drop-cold-experts` threshold (2 decimals).
    pub threshold: f64,
}

impl fmt::Display for MoeDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-drop: {}/{} routed experts dropped ({:.1}%), threshold {:.2} x uniform",
            self.dropped, self.routed, self.pct, self.threshold
        )
    }
}

/// `prefill: <n> tokens, <s> s (<t> tok/s) | model load <s> s | TTFT <s> s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prefill {
    /// Prompt tokens prefilled.
    pub tokens: u64,
    /// Prefill time, s (3 decimals).
    pub seconds: f64,
    /// Prefill rate (1 decimal).
    pub tok_s: f64,
    /// Model load time, s (3 decimals).
    pub load_s: f64,
    /// Time to first token (load + prefill), s (3 decimals).
    pub ttft_s: f64,
}

impl fmt::Display for Prefill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "prefill: {} tokens, {:.3} s ({:.1} tok/s) | model load {:.3} s | TTFT {:.3} s",
            self.tokens, self.seconds, self.tok_s, self.load_s, self.ttft_s
        )
    }
}

/// `moe-cache: <n> evictions, <n> re-reads (<r>/token) — bytes the cache had already paid for
/// once` (printed when either counter is non-zero).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeChurn {
    /// Cache evictions.
    pub evictions: u64,
    /// Reads of entries the cache had held before.
    pub rereads: u64,
    /// Re-reads per token (1 decimal).
    pub rereads_per_token: f64,
}

impl fmt::Display for MoeChurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-cache: {} evictions, {} re-reads ({:.1}/token) — bytes the cache had already paid for once",
            self.evictions, self.rereads, self.rereads_per_token
        )
    }
}

/// `moe-waits: drain <s> s/token (inside compute), adopt <s> s/token (inside mgmt)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeWaits {
    /// Overlap drain wait per token, s (3 decimals); part of compute.
    pub drain_s_per_token: f64,
    /// Route-ahead adoption wait per token, s (3 decimals); part of mgmt.
    pub adopt_s_per_token: f64,
}

impl fmt::Display for MoeWaits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-waits: drain {:.3} s/token (inside compute), adopt {:.3} s/token (inside mgmt)",
            self.drain_s_per_token, self.adopt_s_per_token
        )
    }
}

/// `moe-route-ahead: <N> layers early — <c> routings committed, <p> passed through; committed
/// selection agreed with the router on <pct>% of slots`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeRouteAhead {
    /// How many layers early the selection was predicted.
    pub layers: u64,
    /// Routings whose selection was replaced by the prediction.
    pub committed: u64,
    /// Eligible routings that kept the router's choice.
    pub passed: u64,
    /// Slots where the committed selection agreed with the router, percent (1 decimal).
    pub agree_pct: f64,
}

impl fmt::Display for MoeRouteAhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "moe-route-ahead: {} layers early — {} routings committed, {} passed through; committed selection agreed with the router on {:.1}% of slots",
            self.layers, self.committed, self.passed, self.agree_pct
        )
    }
}

/// `mtp:   <a>/<d> drafts accepted (<pct>%), <t> tokens per verify decode (<n> decodes for
/// <k> tokens)` — the name padded so `mtp:` and `ngram:` lines align, as the seed shows.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecAcceptance {
    /// The drafting source, `mtp` or `ngram`.
    pub source: String,
    /// Drafts accepted.
    pub accepted: u64,
    /// Drafts proposed.
    pub drafted: u64,
    /// `accepted / drafted`, percent (1 decimal).
    pub pct: f64,
    /// Tokens per verify decode (2 decimals).
    pub tokens_per_decode: f64,
    /// Verify decodes.
    pub decodes: u64,
    /// Tokens generated.
    pub tokens: u64,
}

impl fmt::Display for SpecAcceptance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<6} {}/{} drafts accepted ({:.1}%), {:.2} tokens per verify decode ({} decodes for {} tokens)",
            format!("{}:", self.source),
            self.accepted,
            self.drafted,
            self.pct,
            self.tokens_per_decode,
            self.decodes,
            self.tokens
        )
    }
}

/// `<source>: drafting costs <s> s/token on top of decode → <t> tok/s effective (vs <t>
/// reported)` — read this before believing a speculated run is faster.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecCost {
    /// The drafting source, `mtp` or `ngram`.
    pub source: String,
    /// Drafting seconds per token (4 decimals).
    pub draft_s_per_token: f64,
    /// The rate including drafting (2 decimals).
    pub effective_tok_s: f64,
    /// The headline decode-only rate (2 decimals).
    pub reported_tok_s: f64,
}

impl fmt::Display for SpecCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: drafting costs {:.4} s/token on top of decode → {:.2} tok/s effective (vs {:.2} reported)",
            self.source, self.draft_s_per_token, self.effective_tok_s, self.reported_tok_s
        )
    }
}

/// `ngram: drafted on <d> of <n> steps (<pct>%); the rest decoded plainly`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NgramCoverage {
    /// Steps that drafted.
    pub drafted: u64,
    /// All steps.
    pub steps: u64,
    /// `drafted / steps`, percent (1 decimal).
    pub pct: f64,
}

impl fmt::Display for NgramCoverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ngram: drafted on {} of {} steps ({:.1}%); the rest decoded plainly",
            self.drafted, self.steps, self.pct
        )
    }
}

/// One summary line.
#[derive(Debug, Clone, PartialEq)]
pub enum SummaryLine {
    /// `=== answer ===`.
    AnswerBanner,
    /// `=== perf ===`.
    PerfBanner,
    /// `generation:`.
    Generation(Generation),
    /// `compute:`.
    Compute(Compute),
    /// `mode:`.
    Mode(Mode),
    /// `prefill:`.
    Prefill(Prefill),
    /// `moe-stream:`.
    MoeStream(MoeStream),
    /// `moe-cache:` with a hit rate (the evictions variant is [`SummaryLine::Other`]).
    MoeCache(MoeCache),
    /// `moe-overlap:`.
    MoeOverlap(MoeOverlap),
    /// `moe-prefetch:`.
    MoePrefetch(MoePrefetch),
    /// `moe-drop:`.
    MoeDrop(MoeDrop),
    /// `moe-cache:` evictions / re-reads form.
    MoeChurn(MoeChurn),
    /// `moe-waits:`.
    MoeWaits(MoeWaits),
    /// `moe-route-ahead:` (the first, agreement line).
    MoeRouteAhead(MoeRouteAhead),
    /// `mtp:` / `ngram:` acceptance line.
    SpecAcceptance(SpecAcceptance),
    /// `mtp:` / `ngram:` drafting-cost line.
    SpecCost(SpecCost),
    /// `ngram:` coverage line.
    NgramCoverage(NgramCoverage),
    /// Any other `<name>: <text>` line whose name is a known summary prefix not typed here
    /// (`mtp`, `ngram`, `moe-rows`, `moe-route-ahead`, `moe-predict`, `moe-waits`, `moe-cache`
    /// evictions…), verbatim.
    Other {
        /// The name before the colon.
        name: String,
        /// The text after `: `.
        text: String,
    },
}

impl fmt::Display for SummaryLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SummaryLine::AnswerBanner => f.write_str(ANSWER_BANNER),
            SummaryLine::PerfBanner => f.write_str(PERF_BANNER),
            SummaryLine::Generation(x) => x.fmt(f),
            SummaryLine::Compute(x) => x.fmt(f),
            SummaryLine::Mode(x) => x.fmt(f),
            SummaryLine::Prefill(x) => x.fmt(f),
            SummaryLine::MoeStream(x) => x.fmt(f),
            SummaryLine::MoeCache(x) => x.fmt(f),
            SummaryLine::MoeOverlap(x) => x.fmt(f),
            SummaryLine::MoePrefetch(x) => x.fmt(f),
            SummaryLine::MoeDrop(x) => x.fmt(f),
            SummaryLine::MoeChurn(x) => x.fmt(f),
            SummaryLine::MoeWaits(x) => x.fmt(f),
            SummaryLine::MoeRouteAhead(x) => x.fmt(f),
            SummaryLine::SpecAcceptance(x) => x.fmt(f),
            SummaryLine::SpecCost(x) => x.fmt(f),
            SummaryLine::NgramCoverage(x) => x.fmt(f),
            SummaryLine::Other { name, text } => write!(f, "{name}: {text}"),
        }
    }
}

/// A line with a typed summary prefix whose body does not match the template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}:` line does not match its template at {at:?}: {line:?}")]
pub struct SummaryParseError {
    /// The prefix name, e.g. `generation`.
    pub name: String,
    /// The unread remainder where matching stopped.
    pub at: String,
    /// The whole line.
    pub line: String,
}

/// Prefixes treated as summary lines but kept verbatim as [`SummaryLine::Other`].
pub const OTHER_PREFIXES: &[&str] = &[
    "mtp",
    "ngram",
    "moe-rows",
    "moe-route-ahead",
    "moe-predict",
    "moe-waits",
    "moe-cache",
    "moe-spec-gate",
];

/// A tiny template matcher: literal text and numbers, left to right.
struct Scan<'a> {
    s: &'a str,
}

impl<'a> Scan<'a> {
    fn lit(&mut self, l: &str) -> Option<()> {
        self.s = self.s.strip_prefix(l)?;
        Some(())
    }

    fn try_lit(&mut self, l: &str) -> bool {
        self.lit(l).is_some()
    }

    fn token(&mut self) -> &'a str {
        let n = self
            .s
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
            .unwrap_or(self.s.len());
        let (t, rest) = self.s.split_at(n);
        self.s = rest;
        t
    }

    fn f64(&mut self) -> Option<f64> {
        let save = self.s;
        let t = self.token();
        match t.parse::<f64>() {
            Ok(v) => Some(v),
            Err(_) => {
                self.s = save;
                None
            }
        }
    }

    fn u64(&mut self) -> Option<u64> {
        let save = self.s;
        let t = self.token();
        match t.parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => {
                self.s = save;
                None
            }
        }
    }

    fn until(&mut self, l: &str) -> Option<&'a str> {
        let at = self.s.find(l)?;
        let (t, rest) = self.s.split_at(at);
        self.s = &rest[l.len()..];
        Some(t)
    }

    fn end(&self) -> Option<()> {
        self.s.trim().is_empty().then_some(())
    }
}

fn generation(s: &mut Scan<'_>) -> Option<Generation> {
    let tokens = s.u64()?;
    s.lit(" tokens, ")?;
    let s_per_token = s.f64()?;
    s.lit(" s/token (")?;
    let tok_s = s.f64()?;
    s.lit(" tok/s)")?;
    s.end()?;
    Some(Generation {
        tokens,
        s_per_token,
        tok_s,
    })
}

fn compute(s: &mut Scan<'_>) -> Option<Compute> {
    let occupancy_pct = s.f64()?;
    s.lit("% CPU occupancy (")?;
    let cpu_s_per_token = s.f64()?;
    s.lit(" cpu-s/token over ")?;
    let threads = s.u64()?;
    s.lit(" threads), ")?;
    let major_faults_per_token = s.f64()?;
    s.lit(" major faults/token")?;
    s.end()?;
    Some(Compute {
        occupancy_pct,
        cpu_s_per_token,
        threads,
        major_faults_per_token,
    })
}

fn mode(text: &str) -> Mode {
    let fallback = || Mode::NotStreaming(text.to_string());
    let mut parts = text.split(", ");
    if parts.next() != Some("expert streaming") {
        return fallback();
    }
    let cache = match parts.next().and_then(|p| p.strip_prefix("cache ")) {
        Some("auto") => CacheSetting::Auto,
        Some("off") => CacheSetting::Off,
        Some(other) => match other
            .strip_suffix(" MiB")
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(n) => CacheSetting::Mib(n),
            None => return fallback(),
        },
        None => return fallback(),
    };
    let dense = match parts.next().and_then(|p| p.strip_prefix("dense ")) {
        Some(d) if !d.is_empty() => DenseWeights::from_name(d),
        _ => return fallback(),
    };
    let mut overlap = None;
    let mut extra = Vec::new();
    for p in parts {
        if overlap.is_none() && extra.is_empty() {
            if p == "overlap" {
                overlap = Some(String::new());
                continue;
            }
            if let Some(kind) = p
                .strip_prefix("overlap (")
                .and_then(|k| k.strip_suffix(')'))
            {
                overlap = Some(kind.to_string());
                continue;
            }
        }
        extra.push(p.to_string());
    }
    Mode::Streaming {
        cache,
        dense,
        overlap,
        extra,
    }
}

fn prefill(s: &mut Scan<'_>) -> Option<Prefill> {
    let tokens = s.u64()?;
    s.lit(" tokens, ")?;
    let seconds = s.f64()?;
    s.lit(" s (")?;
    let tok_s = s.f64()?;
    s.lit(" tok/s) | model load ")?;
    let load_s = s.f64()?;
    s.lit(" s | TTFT ")?;
    let ttft_s = s.f64()?;
    s.lit(" s")?;
    s.end()?;
    Some(Prefill {
        tokens,
        seconds,
        tok_s,
        load_s,
        ttft_s,
    })
}

fn moe_stream(s: &mut Scan<'_>) -> Option<MoeStream> {
    s.lit("read ")?;
    let read_mib = s.f64()?;
    s.lit(" MiB (")?;
    let mib_per_token = s.f64()?;
    s.lit(" MiB/token), decode ")?;
    let decode_s_per_token = s.f64()?;
    s.lit(" s/token (compute ")?;
    let compute_s = s.f64()?;
    s.lit(" + ")?;
    let mgmt_s = if s.try_lit("cache mgmt ") {
        let m = s.f64()?;
        s.lit(" + ")?;
        Some(m)
    } else {
        None
    };
    s.lit("flash I/O ")?;
    let io_s = s.f64()?;
    s.lit(" s/token, ")?;
    let mib_per_s = s.f64()?;
    s.lit(" MiB/s)")?;
    let stall_s_per_token = if s.try_lit(" stall_s/tok=") {
        Some(s.f64()?)
    } else {
        None
    };
    s.end()?;
    Some(MoeStream {
        read_mib,
        mib_per_token,
        decode_s_per_token,
        compute_s,
        mgmt_s,
        io_s,
        mib_per_s,
        stall_s_per_token,
    })
}

fn moe_cache(s: &mut Scan<'_>) -> Option<MoeCache> {
    let hit_pct = s.f64()?;
    s.lit("% hit, resident ")?;
    let resident_mib = s.f64()?;
    s.lit(" MiB")?;
    let (budget_mib, budget_note) = if s.try_lit(", budget ") {
        let b = s.f64()?;
        s.lit(" MiB")?;
        let note = if s.try_lit(" (") {
            let n = s.until(")")?;
            Some(n.to_string())
        } else {
            None
        };
        (Some(b), note)
    } else {
        (None, None)
    };
    s.end()?;
    Some(MoeCache {
        hit_pct,
        resident_mib,
        budget_mib,
        budget_note,
    })
}

fn moe_overlap(s: &mut Scan<'_>) -> Option<MoeOverlap> {
    s.lit("stall ")?;
    let stall_s_per_token = s.f64()?;
    s.lit(" s/token")?;
    Some(MoeOverlap { stall_s_per_token })
}

fn moe_prefetch(s: &mut Scan<'_>) -> Option<MoePrefetch> {
    let mib = s.f64()?;
    s.lit(" MiB speculative, ")?;
    let useful = s.u64()?;
    s.lit("/")?;
    let prefetched = s.u64()?;
    s.lit(" experts useful (")?;
    let pct = s.f64()?;
    s.lit("%)")?;
    let tag = if s.try_lit(" [") {
        Some(s.until("]")?.to_string())
    } else {
        None
    };
    s.end()?;
    Some(MoePrefetch {
        mib,
        useful,
        prefetched,
        pct,
        tag,
    })
}

fn moe_drop(s: &mut Scan<'_>) -> Option<MoeDrop> {
    let dropped = s.u64()?;
    s.lit("/")?;
    let routed = s.u64()?;
    s.lit(" routed experts dropped (")?;
    let pct = s.f64()?;
    s.lit("%), threshold ")?;
    let threshold = s.f64()?;
    s.lit(" x uniform")?;
    s.end()?;
    Some(MoeDrop {
        dropped,
        routed,
        pct,
        threshold,
    })
}

fn moe_churn(s: &mut Scan<'_>) -> Option<MoeChurn> {
    let evictions = s.u64()?;
    s.lit(" evictions, ")?;
    let rereads = s.u64()?;
    s.lit(" re-reads (")?;
    let rereads_per_token = s.f64()?;
    s.lit("/token)")?;
    Some(MoeChurn {
        evictions,
        rereads,
        rereads_per_token,
    })
}

fn moe_waits(s: &mut Scan<'_>) -> Option<MoeWaits> {
    s.lit("drain ")?;
    let drain_s_per_token = s.f64()?;
    s.lit(" s/token (inside compute), adopt ")?;
    let adopt_s_per_token = s.f64()?;
    s.lit(" s/token (inside mgmt)")?;
    s.end()?;
    Some(MoeWaits {
        drain_s_per_token,
        adopt_s_per_token,
    })
}

fn moe_route_ahead(s: &mut Scan<'_>) -> Option<MoeRouteAhead> {
    let layers = s.u64()?;
    s.lit(" layers early — ")?;
    let committed = s.u64()?;
    s.lit(" routings committed, ")?;
    let passed = s.u64()?;
    s.lit(" passed through; committed selection agreed with the router on ")?;
    let agree_pct = s.f64()?;
    s.lit("% of slots")?;
    s.end()?;
    Some(MoeRouteAhead {
        layers,
        committed,
        passed,
        agree_pct,
    })
}

fn spec_acceptance(source: &str, s: &mut Scan<'_>) -> Option<SpecAcceptance> {
    let accepted = s.u64()?;
    s.lit("/")?;
    let drafted = s.u64()?;
    s.lit(" drafts accepted (")?;
    let pct = s.f64()?;
    s.lit("%), ")?;
    let tokens_per_decode = s.f64()?;
    s.lit(" tokens per verify decode (")?;
    let decodes = s.u64()?;
    s.lit(" decodes for ")?;
    let tokens = s.u64()?;
    s.lit(" tokens)")?;
    s.end()?;
    Some(SpecAcceptance {
        source: source.to_string(),
        accepted,
        drafted,
        pct,
        tokens_per_decode,
        decodes,
        tokens,
    })
}

fn spec_cost(source: &str, s: &mut Scan<'_>) -> Option<SpecCost> {
    s.lit("drafting costs ")?;
    let draft_s_per_token = s.f64()?;
    s.lit(" s/token on top of decode → ")?;
    let effective_tok_s = s.f64()?;
    s.lit(" tok/s effective (vs ")?;
    let reported_tok_s = s.f64()?;
    s.lit(" reported)")?;
    s.end()?;
    Some(SpecCost {
        source: source.to_string(),
        draft_s_per_token,
        effective_tok_s,
        reported_tok_s,
    })
}

fn ngram_coverage(s: &mut Scan<'_>) -> Option<NgramCoverage> {
    s.lit("drafted on ")?;
    let drafted = s.u64()?;
    s.lit(" of ")?;
    let steps = s.u64()?;
    s.lit(" steps (")?;
    let pct = s.f64()?;
    s.lit("%); the rest decoded plainly")?;
    s.end()?;
    Some(NgramCoverage {
        drafted,
        steps,
        pct,
    })
}

/// Reads one line of engine output as a summary line.
///
/// Returns `Ok(None)` for a line that is not a summary line at all (answer text, logs,
/// protocol lines), `Ok(Some(_))` for a recognised one, and `Err` for a line whose prefix is a
/// typed summary line (`generation:`, `compute:`, `prefill:`, `moe-stream:`, `moe-overlap:`,
/// `moe-prefetch:`, `moe-drop:`) but whose body does not match. A leading BOM and trailing
/// whitespace are ignored. `moe-cache:` lines that are not the hit-rate form (the evictions
/// line) come back as [`SummaryLine::Other`].
///
/// ```
/// use bmoe_telemetry::summary::{parse_summary_line, SummaryLine};
/// let l = parse_summary_line("generation: 256 tokens, 0.585 s/token (1.709 tok/s)");
/// assert!(matches!(l, Ok(Some(SummaryLine::Generation(g))) if g.tokens == 256));
/// ```
///
/// # Errors
/// [`SummaryParseError`] naming the prefix and where matching stopped.
pub fn parse_summary_line(line: &str) -> Result<Option<SummaryLine>, SummaryParseError> {
    let line = line.trim_start_matches('\u{feff}').trim_end();
    if line == ANSWER_BANNER {
        return Ok(Some(SummaryLine::AnswerBanner));
    }
    if line == PERF_BANNER {
        return Ok(Some(SummaryLine::PerfBanner));
    }
    let Some((name, rest)) = line.split_once(':') else {
        return Ok(None);
    };
    let text = rest.trim_start();
    let mut s = Scan { s: text };
    let err = |s: &Scan<'_>| SummaryParseError {
        name: name.to_string(),
        at: s.s.to_string(),
        line: line.to_string(),
    };
    let other = || SummaryLine::Other {
        name: name.to_string(),
        text: text.to_string(),
    };
    macro_rules! typed {
        ($f:ident, $variant:ident) => {
            match $f(&mut s) {
                Some(v) => Ok(Some(SummaryLine::$variant(v))),
                None => Err(err(&s)),
            }
        };
    }
    match name {
        "generation" => typed!(generation, Generation),
        "compute" => typed!(compute, Compute),
        "prefill" => typed!(prefill, Prefill),
        "moe-stream" => typed!(moe_stream, MoeStream),
        "moe-overlap" => typed!(moe_overlap, MoeOverlap),
        "moe-prefetch" => typed!(moe_prefetch, MoePrefetch),
        "moe-drop" => typed!(moe_drop, MoeDrop),
        "mode" => Ok(Some(SummaryLine::Mode(mode(text)))),
        "moe-cache" => {
            if let Some(v) = moe_cache(&mut s) {
                return Ok(Some(SummaryLine::MoeCache(v)));
            }
            let mut s = Scan { s: text };
            Ok(Some(match moe_churn(&mut s) {
                Some(v) => SummaryLine::MoeChurn(v),
                None => other(),
            }))
        }
        "moe-waits" => Ok(Some(
            moe_waits(&mut s).map_or_else(other, SummaryLine::MoeWaits),
        )),
        "moe-route-ahead" => Ok(Some(
            moe_route_ahead(&mut s).map_or_else(other, SummaryLine::MoeRouteAhead),
        )),
        "mtp" | "ngram" => {
            // Several line shapes share these names; the ones not typed here stay verbatim.
            if let Some(v) = spec_acceptance(name, &mut Scan { s: text }) {
                return Ok(Some(SummaryLine::SpecAcceptance(v)));
            }
            if let Some(v) = spec_cost(name, &mut Scan { s: text }) {
                return Ok(Some(SummaryLine::SpecCost(v)));
            }
            if name == "ngram"
                && let Some(v) = ngram_coverage(&mut Scan { s: text })
            {
                return Ok(Some(SummaryLine::NgramCoverage(v)));
            }
            Ok(Some(other()))
        }
        other if OTHER_PREFIXES.contains(&other) => Ok(Some(SummaryLine::Other {
            name: other.to_string(),
            text: text.to_string(),
        })),
        _ => Ok(None),
    }
}

/// Everything a one-shot run printed at its end, gathered from its stdout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerfReport {
    /// The text between `=== answer ===` and `=== perf ===` (newline-joined, without the
    /// final newline), when the banners were present.
    pub answer: Option<String>,
    /// `generation:`.
    pub generation: Option<Generation>,
    /// `compute:`.
    pub compute: Option<Compute>,
    /// `mode:`.
    pub mode: Option<Mode>,
    /// `prefill:`.
    pub prefill: Option<Prefill>,
    /// `moe-stream:`.
    pub moe_stream: Option<MoeStream>,
    /// `moe-cache:` (hit-rate form).
    pub moe_cache: Option<MoeCache>,
    /// `moe-overlap:`.
    pub moe_overlap: Option<MoeOverlap>,
    /// `moe-prefetch:`.
    pub moe_prefetch: Option<MoePrefetch>,
    /// `moe-drop:`.
    pub moe_drop: Option<MoeDrop>,
    /// `moe-cache:` evictions / re-reads.
    pub moe_churn: Option<MoeChurn>,
    /// `moe-waits:`.
    pub moe_waits: Option<MoeWaits>,
    /// `moe-route-ahead:` agreement line.
    pub moe_route_ahead: Option<MoeRouteAhead>,
    /// `mtp:` / `ngram:` acceptance.
    pub spec_acceptance: Option<SpecAcceptance>,
    /// `mtp:` / `ngram:` drafting cost.
    pub spec_cost: Option<SpecCost>,
    /// `ngram:` coverage.
    pub ngram_coverage: Option<NgramCoverage>,
    /// Other summary lines, in order.
    pub other: Vec<SummaryLine>,
    /// Lines with a typed prefix that did not match their template.
    pub errors: Vec<SummaryParseError>,
}

impl PerfReport {
    /// Collects the summary of a whole stdout (or `.log`) text. Lines that are not summary
    /// lines are skipped; a repeated line keeps its last occurrence. Never fails: template
    /// mismatches are collected in [`Self::errors`].
    pub fn parse(text: &str) -> PerfReport {
        let mut r = PerfReport::default();
        let mut answer: Option<Vec<&str>> = None;
        let mut in_answer = false;
        for raw in text.lines() {
            let line = raw.trim_start_matches('\u{feff}');
            if in_answer {
                if line.trim_end() == PERF_BANNER {
                    in_answer = false;
                } else {
                    if let Some(a) = answer.as_mut() {
                        a.push(line.strip_suffix('\r').unwrap_or(line));
                    }
                    continue;
                }
            }
            match parse_summary_line(line) {
                Ok(Some(SummaryLine::AnswerBanner)) => {
                    in_answer = true;
                    answer = Some(Vec::new());
                }
                Ok(Some(SummaryLine::PerfBanner)) | Ok(None) => {}
                Ok(Some(SummaryLine::Generation(x))) => r.generation = Some(x),
                Ok(Some(SummaryLine::Compute(x))) => r.compute = Some(x),
                Ok(Some(SummaryLine::Mode(x))) => r.mode = Some(x),
                Ok(Some(SummaryLine::Prefill(x))) => r.prefill = Some(x),
                Ok(Some(SummaryLine::MoeStream(x))) => r.moe_stream = Some(x),
                Ok(Some(SummaryLine::MoeCache(x))) => r.moe_cache = Some(x),
                Ok(Some(SummaryLine::MoeOverlap(x))) => r.moe_overlap = Some(x),
                Ok(Some(SummaryLine::MoePrefetch(x))) => r.moe_prefetch = Some(x),
                Ok(Some(SummaryLine::MoeDrop(x))) => r.moe_drop = Some(x),
                Ok(Some(SummaryLine::MoeChurn(x))) => r.moe_churn = Some(x),
                Ok(Some(SummaryLine::MoeWaits(x))) => r.moe_waits = Some(x),
                Ok(Some(SummaryLine::MoeRouteAhead(x))) => r.moe_route_ahead = Some(x),
                Ok(Some(SummaryLine::SpecAcceptance(x))) => r.spec_acceptance = Some(x),
                Ok(Some(SummaryLine::SpecCost(x))) => r.spec_cost = Some(x),
                Ok(Some(SummaryLine::NgramCoverage(x))) => r.ngram_coverage = Some(x),
                Ok(Some(other)) => r.other.push(other),
                Err(e) => r.errors.push(e),
            }
        }
        r.answer = answer.map(|a| a.join("\n"));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(line: &str) {
        let parsed = parse_summary_line(line);
        let Ok(Some(l)) = parsed else {
            panic!("{line:?} -> {parsed:?}")
        };
        assert_eq!(l.to_string(), line);
    }

    #[test]
    fn real_log_lines_round_trip() {
        for l in [
            "generation: 256 tokens, 0.585 s/token (1.709 tok/s)",
            "compute: 82.5% CPU occupancy (0.5831 cpu-s/token over 4 threads), 18.26 major faults/token",
            "prefill: 34 tokens, 5.351 s (6.4 tok/s) | model load 14.941 s | TTFT 20.292 s",
            "moe-stream: read 268992.0 MiB (1050.75 MiB/token), decode 0.585 s/token (compute 0.123 + flash I/O 0.462 s/token, 2272 MiB/s)",
            "moe-stream: read 98947.3 MiB (386.51 MiB/token), decode 0.334 s/token (compute 0.230 + cache mgmt 0.099 + flash I/O 0.464 s/token, 834 MiB/s)",
            "moe-cache: 88.1% hit, resident 3999.0 MiB",
            "moe-cache: 81.5% hit, resident 4675.3 MiB, budget 4675 MiB (auto, resized 0×)",
            "moe-overlap: stall 0.041 s/token (flash reads overlapped with FFN compute)",
            "moe-prefetch: 24173.4 MiB speculative, 3584/6169 experts useful (58%)",
            "moe-prefetch: 1.0 MiB speculative, 1/2 experts useful (50%) [stale-gate]",
            "moe-drop: 5146/81920 routed experts dropped (6.3%), threshold 0.75 x uniform",
            "mode: expert streaming, cache auto, dense anon, overlap",
            "mode: expert streaming, cache 4000 MiB, dense mmap",
            "mode: expert streaming, cache off, dense warm, overlap (staged), prefetch 1",
            "mode: plain llama.cpp on mmap (pass --moe-stream to stream experts)",
            "=== answer ===",
            "=== perf ===",
            "mtp:   22/30 drafts accepted (73.3%), 1.60 tokens per verify decode (25 decodes for 40 tokens)",
            "ngram: 22/30 drafts accepted (73.3%), 1.60 tokens per verify decode (25 decodes for 40 tokens)",
            "mtp: drafting costs 0.0020 s/token on top of decode → 7.16 tok/s effective (vs 7.27 reported)",
            "ngram: drafted on 25 of 40 steps (62.5%); the rest decoded plainly",
            "mtp: of 10.0 MiB streamed, 1.0 MiB (10.0%) was the head's own routing, 9.0 MiB the widened verify batch",
            "moe-cache: 1234 evictions, 56 re-reads (0.2/token) — bytes the cache had already paid for once",
            "moe-waits: drain 0.001 s/token (inside compute), adopt 0.000 s/token (inside mgmt)",
            "moe-route-ahead: 2 layers early — 3000 routings committed, 48 passed through; committed selection agreed with the router on 91.5% of slots",
            "moe-route-ahead: prediction 1.2 ms/token of worker CPU (96 GEMVs, 0.013 ms each) + 0.4 ms/token issuing the reads + 0.1 ms/token watchdog, both on the eval thread",
        ] {
            round_trip(l);
        }
    }

    #[test]
    fn speculation_and_churn_lines_are_typed() {
        let typed = |l: &str| match parse_summary_line(l) {
            Ok(Some(SummaryLine::Other { .. })) | Ok(None) | Err(_) => false,
            Ok(Some(_)) => true,
        };
        assert!(typed(
            "mtp:   22/30 drafts accepted (73.3%), 1.60 tokens per verify decode (25 decodes for 40 tokens)"
        ));
        assert!(typed(
            "ngram: drafted on 25 of 40 steps (62.5%); the rest decoded plainly"
        ));
        assert!(typed(
            "mtp: drafting costs 0.0020 s/token on top of decode → 7.16 tok/s effective (vs 7.27 reported)"
        ));
        assert!(typed(
            "moe-cache: 1234 evictions, 56 re-reads (0.2/token) — bytes the cache had already paid for once"
        ));
        assert!(!typed(
            "mtp: of 10.0 MiB streamed, 1.0 MiB (10.0%) was the head's own routing, 9.0 MiB the widened verify batch"
        ));
    }

    #[test]
    fn mismatch_is_an_error_and_text_is_none() {
        assert!(parse_summary_line("generation: lots of tokens").is_err());
        assert_eq!(parse_summary_line("hello world"), Ok(None));
        assert_eq!(parse_summary_line("peak_rss_kb=1"), Ok(None));
    }

    #[test]
    fn perf_report_collects() {
        let text = "\u{feff}BMOE_X\n=== answer ===\nline one\nline: two\n=== perf ===\ngeneration: 2 tokens, 0.500 s/token (2.000 tok/s)\nmoe-cache: 1.0% hit, resident 2.0 MiB\n";
        let r = PerfReport::parse(text);
        assert_eq!(r.answer.as_deref(), Some("line one\nline: two"));
        assert_eq!(r.generation.map(|g| g.tokens), Some(2));
        assert_eq!(r.moe_cache.map(|c| c.resident_mib), Some(2.0));
        assert!(r.errors.is_empty());
    }
}
