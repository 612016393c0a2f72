//! The `BMOE_<TAG> {json}` line protocol (`--progress` and `--session` stdout).
//!
//! # Reading
//!
//! [`parse_line`] classifies any stdout line as a typed [`Record`], a syntactically valid line
//! with a tag this crate does not know ([`LineKind::Unknown`]), a protocol line whose JSON is
//! broken ([`LineKind::Malformed`], with the reason) or plain text ([`LineKind::Text`]). It
//! never panics. Unknown JSON keys are ignored; a missing key reads as the default documented
//! on its field (chosen to match what the Android panel applies, so a replay behaves the same).
//!
//! # Writing
//!
//! [`Record::to_line`] (and `to_line` on each record type) emits the keys **in exactly the
//! order the seed lists them**, one line, no trailing newline. Strings use JSON escaping
//! (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other control characters as `\u00XX`;
//! non-ASCII is written as UTF-8).
//!
//! **Floats** are written as the *shortest decimal that parses back to the same `f64`*
//! (the ryu algorithm, as `serde_json` prints them): deterministic, exact on round trip, and
//! compact for the values an engine actually produces (`563.097`, `0.5`, `12.0`). A float
//! with no fractional part keeps a `.0` so the JSON type stays visibly float. Non-finite values
//! are written as `null` and read back as NaN — except in `BMOE_DECIDE.choice_logp`, where the
//! seed defines `null` as minus infinity. An engine that wants fewer digits on the wire rounds
//! before building the record (e.g. [`round_to`]).

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// The prefix every protocol line starts with.
pub const PREFIX: &str = "BMOE_";

/// Rounds `x` to `decimals` decimal places (half away from zero), for engines that want short
/// wire values such as the original CLI's one-decimal milliseconds. Non-finite values pass
/// through.
pub fn round_to(x: f64, decimals: u32) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(decimals as i32);
    let r = (x * scale).round() / scale;
    if r.is_finite() { r } else { x }
}

// ---------------------------------------------------------------------------------------------
// serde helpers

/// Reads a JSON number or `null` (→ NaN) as `f64`.
fn de_f64_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Reads `reset`: present means a snapshot line; `1`, `true` or any non-zero number count.
fn de_reset<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(match v {
        serde_json::Value::Bool(b) => b,
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        serde_json::Value::Null => false,
        other => {
            return Err(de::Error::custom(format!(
                "`reset` must be 1 or absent, found {other}"
            )));
        }
    })
}

fn ser_reset<S: Serializer>(_: &bool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u8(1)
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `choice_logp`: `null` is minus infinity both ways.
fn de_logp<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v = Vec::<Option<f64>>::deserialize(d)?;
    Ok(v.into_iter()
        .map(|x| x.unwrap_or(f64::NEG_INFINITY))
        .collect())
}

fn ser_logp<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for x in v {
        if x.is_finite() {
            seq.serialize_element(x)?;
        } else {
            seq.serialize_element(&Option::<f64>::None)?;
        }
    }
    seq.end()
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Serialising these plain structs cannot fail (no maps, no non-string keys, non-finite
    // floats become null); the fallback only keeps the signature honest.
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// records

/// `BMOE_LOAD {"mb":<float>,"ms":<float>}` — emitted before a `BMOE_PROGRESS` only on tokens
/// that read experts from flash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Load {
    /// Flash bytes read this token, in MiB (bytes / 1024²). Missing → 0.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub mb: f64,
    /// Read time this token, milliseconds. Missing → 0.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub ms: f64,
}

impl Default for Load {
    fn default() -> Self {
        Load { mb: 0.0, ms: 0.0 }
    }
}

/// `BMOE_PROGRESS {...}` — one per generated token, in order.
///
/// Field semantics are the seed's (`docs/telemetry.md`); the short version is on each field.
/// Defaults for missing keys follow the app panel: `step`/`steps` 0, `wall_ms`/`compute_ms`
/// NaN, the other times and counters 0 ("unmeasured"), `cache_hit_pct` and
/// `dense_resident_frac` −1 ("not sampled"), deltas empty, `reset` false.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Progress {
    /// 1-based index of this token.
    pub step: u64,
    /// Target token count of the generation.
    pub steps: u64,
    /// Total token time (brackets `llama_decode` only), ms.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub wall_ms: f64,
    /// Flash read time, ms: wall time blocked on reads in serial mode; summed per-lane busy
    /// time under overlap (may exceed `wall_ms`).
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub io_ms: f64,
    /// The compute **residual** (clamped at 0), never a measurement: see
    /// [`crate::attribution::compute_residual_ms`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub compute_ms: f64,
    /// Cache-management time this token (commit, eviction, LRU bookkeeping), ms.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub mgmt_ms: f64,
    /// Union of stalled intervals under overlap (0 in serial mode), ms.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub stall_ms: f64,
    /// Flash bytes read this token, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub read_mb: f64,
    /// Cumulative cache hit rate in percent, −1 when no cache is used.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub cache_hit_pct: f64,
    /// Major page faults served inside this token's decode (0 = unmeasured).
    pub majflt: u64,
    /// Process CPU time summed across threads this token, ms (0 = unmeasured).
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub cpu_ms: f64,
    /// Sampled fraction of dense weights still resident, −1 when unmeasured.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub dense_resident_frac: f64,
    /// When true (`"reset":1` on the wire) the deltas on this line are full snapshots that
    /// **replace** the accumulated text instead of extending it. Written only when true.
    #[serde(
        skip_serializing_if = "is_false",
        serialize_with = "ser_reset",
        deserialize_with = "de_reset"
    )]
    pub reset: bool,
    /// New reasoning (thinking-span) text since the previous line.
    pub delta_reasoning: String,
    /// New answer text since the previous line, reasoning stripped.
    pub delta_text: String,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            step: 0,
            steps: 0,
            wall_ms: f64::NAN,
            io_ms: 0.0,
            compute_ms: f64::NAN,
            mgmt_ms: 0.0,
            stall_ms: 0.0,
            read_mb: 0.0,
            cache_hit_pct: -1.0,
            majflt: 0,
            cpu_ms: 0.0,
            dense_resident_frac: -1.0,
            reset: false,
            delta_reasoning: String::new(),
            delta_text: String::new(),
        }
    }
}

/// How a `"think":false` request can be honoured on the loaded model (`BMOE_READY.think_ctl`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ThinkCtl {
    /// Passing the flag is all there is to do (Qwen3, Gemma 4, non-reasoning models).
    Template,
    /// The turn is started past a structural reasoning section (harmony / gpt-oss).
    Prefill,
    /// The model always reasons and cannot be asked not to (LFM2.5): show the control disabled.
    None,
    /// A value this version of the contract does not know, kept verbatim.
    Other(String),
}

impl ThinkCtl {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ThinkCtl::Template => "template",
            ThinkCtl::Prefill => "prefill",
            ThinkCtl::None => "none",
            ThinkCtl::Other(s) => s,
        }
    }

    /// Parses the wire spelling; unknown spellings become [`ThinkCtl::Other`].
    pub fn from_wire(s: &str) -> Self {
        match s {
            "template" => ThinkCtl::Template,
            "prefill" => ThinkCtl::Prefill,
            "none" => ThinkCtl::None,
            other => ThinkCtl::Other(other.to_string()),
        }
    }
}

impl Serialize for ThinkCtl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ThinkCtl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ThinkCtl::from_wire(&String::deserialize(d)?))
    }
}

/// `BMOE_READY {...}` — once per session, after the model loads.
///
/// Missing keys: `load_s` NaN, `arch` empty, `n_ctx`/`n_expert_used` 0, `think_ctl`
/// `template`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Ready {
    /// Model load time, seconds.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub load_s: f64,
    /// `general.architecture` of the loaded model.
    pub arch: String,
    /// Context size in tokens.
    pub n_ctx: u64,
    /// How a `think:false` request can be honoured.
    pub think_ctl: ThinkCtl,
    /// Effective routing width after any override (0 on a non-MoE model).
    pub n_expert_used: u64,
}

impl Default for Ready {
    fn default() -> Self {
        Ready {
            load_s: f64::NAN,
            arch: String::new(),
            n_ctx: 0,
            think_ctl: ThinkCtl::Template,
            n_expert_used: 0,
        }
    }
}

/// `BMOE_BEGIN {"id":<int>}` — a generation (or decision) started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Begin {
    /// The request id.
    pub id: i64,
}

/// `BMOE_DONE {...}` — end of a generation in session mode (every key of the seed, in order).
///
/// Missing keys read as 0 / `false` / empty, except `cache_hit_pct` (−1, "no cache") and
/// `tok_s` (0, which a UI reads as "no average").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Done {
    /// The request id.
    pub id: i64,
    /// Whether the generation was interrupted by `cancel`.
    pub cancelled: bool,
    /// Tokens generated.
    pub tokens: u64,
    /// Decode rate, tokens/s (decode time only; excludes drafting and loop overhead).
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub tok_s: f64,
    /// Prompt prefill time, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_s: f64,
    /// Prompt prefill rate, tokens/s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_tps: f64,
    /// Model load time, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub load_s: f64,
    /// Cumulative cache hit rate, percent (−1 = no cache).
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub cache_hit_pct: f64,
    /// Tokens prefilled this turn (after any reused KV prefix).
    pub n_prompt: u64,
    /// Context length after the turn.
    pub n_past: u64,
    /// Mean compute residual per token, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub compute_s_tok: f64,
    /// Mean flash read time per token, s (lane-busy sum under overlap).
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub io_s_tok: f64,
    /// Expert cache resident size, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub cache_resident_mib: f64,
    /// Expert cache budget, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub cache_budget_mib: f64,
    /// Total flash streamed this generation, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub read_mib: f64,
    /// Mean overlap stall per token, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub stall_s_tok: f64,
    /// Mean cache-management time per token, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub mgmt_s_tok: f64,
    /// Mean major faults per token.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub majflt_tok: f64,
    /// Mean process CPU seconds per token.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub cpu_s_tok: f64,
    /// Process CPU over the prefill window, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_cpu_s: f64,
    /// Flash read during prefill, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_read_mib: f64,
    /// Read time during prefill (lane-busy sum under overlap), s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_io_s: f64,
    /// Stalled wall time during prefill, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_stall_s: f64,
    /// Cache management during prefill, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_mgmt_s: f64,
    /// Prompt tokens whose graph ran on the prefill device.
    pub prefill_dev_tokens: u64,
    /// Graph nodes the prefill device actually computed.
    pub prefill_dev_nodes: u64,
    /// Expert bytes the prefill device's arena read, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_dev_read_mib: f64,
    /// Wall time the device graph waited for its arena, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_dev_stall_s: f64,
    /// Expert bytes one token routes, measured, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub token_demand_mib: f64,
    /// Drafted tokens (self-speculation).
    pub mtp_drafted: u64,
    /// Accepted drafted tokens.
    pub mtp_accepted: u64,
    /// Verify decodes the turn cost.
    pub mtp_decodes: u64,
    /// Drafting cost per token, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub mtp_draft_s_tok: f64,
    /// Passes that drafted at all.
    pub drafted_steps: u64,
    /// Mean between-decode gap per token, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub loop_overhead_s_tok: f64,
    /// Final thinking span (empty unless the model reasoned).
    pub reasoning: String,
    /// Final answer text.
    pub text: String,
}

impl Default for Done {
    fn default() -> Self {
        Done {
            id: 0,
            cancelled: false,
            tokens: 0,
            tok_s: 0.0,
            prefill_s: 0.0,
            prefill_tps: 0.0,
            load_s: 0.0,
            cache_hit_pct: -1.0,
            n_prompt: 0,
            n_past: 0,
            compute_s_tok: 0.0,
            io_s_tok: 0.0,
            cache_resident_mib: 0.0,
            cache_budget_mib: 0.0,
            read_mib: 0.0,
            stall_s_tok: 0.0,
            mgmt_s_tok: 0.0,
            majflt_tok: 0.0,
            cpu_s_tok: 0.0,
            prefill_cpu_s: 0.0,
            prefill_read_mib: 0.0,
            prefill_io_s: 0.0,
            prefill_stall_s: 0.0,
            prefill_mgmt_s: 0.0,
            prefill_dev_tokens: 0,
            prefill_dev_nodes: 0,
            prefill_dev_read_mib: 0.0,
            prefill_dev_stall_s: 0.0,
            token_demand_mib: 0.0,
            mtp_drafted: 0,
            mtp_accepted: 0,
            mtp_decodes: 0,
            mtp_draft_s_tok: 0.0,
            drafted_steps: 0,
            loop_overhead_s_tok: 0.0,
            reasoning: String::new(),
            text: String::new(),
        }
    }
}

impl Done {
    /// The rate a user actually experiences: `1 / (1/tok_s + loop_overhead_s_tok)` (the seed's
    /// formula). `None` when `tok_s` is not positive.
    pub fn effective_tok_s(&self) -> Option<f64> {
        if self.tok_s > 0.0 && self.tok_s.is_finite() {
            Some(1.0 / (1.0 / self.tok_s + self.loop_overhead_s_tok.max(0.0)))
        } else {
            None
        }
    }
}

/// `BMOE_DECIDE {...}` — the answer to a `decide` request (no per-token lines precede it).
///
/// Missing keys read as 0 / `false` / empty; `best` −1 when missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Decide {
    /// The request id.
    pub id: i64,
    /// Whether the decision was interrupted by `cancel`.
    pub cancelled: bool,
    /// Index of the highest `choice_logp`.
    pub best: i64,
    /// Log-probability of each choice's first token, in request order; `f64::NEG_INFINITY`
    /// where the wire says `null` (and any non-finite value is written as `null`).
    #[serde(serialize_with = "ser_logp", deserialize_with = "de_logp")]
    pub choice_logp: Vec<f64>,
    /// Tokens in the rendered prompt.
    pub n_tokens: u64,
    /// Tokens restored from the kept prefix state.
    pub n_reused: u64,
    /// Tokens prefilled.
    pub n_prefilled: u64,
    /// Time restoring the prefix state, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub restore_s: f64,
    /// Time storing the prefix state, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub store_s: f64,
    /// Prefill time, s.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_s: f64,
    /// As [`Done::prefill_cpu_s`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_cpu_s: f64,
    /// As [`Done::prefill_read_mib`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_read_mib: f64,
    /// As [`Done::prefill_io_s`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_io_s: f64,
    /// As [`Done::prefill_stall_s`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_stall_s: f64,
    /// As [`Done::prefill_mgmt_s`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_mgmt_s: f64,
    /// As [`Done::prefill_dev_tokens`].
    pub prefill_dev_tokens: u64,
    /// As [`Done::prefill_dev_read_mib`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_dev_read_mib: f64,
    /// As [`Done::prefill_dev_stall_s`].
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefill_dev_stall_s: f64,
    /// (layer, expert) pairs the device prefill routed to (routed mode).
    pub prefill_dev_routed: u64,
    /// Of those, the ones the prediction missed and the arena read at the routing node.
    pub prefill_dev_demand: u64,
    /// Memory the kept prefix state holds after the call, MiB.
    #[serde(deserialize_with = "de_f64_or_nan")]
    pub prefix_state_mib: f64,
}

impl Default for Decide {
    fn default() -> Self {
        Decide {
            id: 0,
            cancelled: false,
            best: -1,
            choice_logp: Vec::new(),
            n_tokens: 0,
            n_reused: 0,
            n_prefilled: 0,
            restore_s: 0.0,
            store_s: 0.0,
            prefill_s: 0.0,
            prefill_cpu_s: 0.0,
            prefill_read_mib: 0.0,
            prefill_io_s: 0.0,
            prefill_stall_s: 0.0,
            prefill_mgmt_s: 0.0,
            prefill_dev_tokens: 0,
            prefill_dev_read_mib: 0.0,
            prefill_dev_stall_s: 0.0,
            prefill_dev_routed: 0,
            prefill_dev_demand: 0,
            prefix_state_mib: 0.0,
        }
    }
}

/// `BMOE_ERROR {"id":<int>,"fatal":<bool>,"msg":"<string>"}`.
///
/// `fatal:false` is a rejected request (the session stays usable); `fatal:true` means the
/// process is ending. A missing `fatal` reads as **true** (the safe reading, as the panel does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorRecord {
    /// The request id (0 when no request is concerned, e.g. a load failure).
    pub id: i64,
    /// Whether the process is ending.
    pub fatal: bool,
    /// Human-readable message.
    pub msg: String,
}

impl Default for ErrorRecord {
    fn default() -> Self {
        ErrorRecord {
            id: 0,
            fatal: true,
            msg: String::new(),
        }
    }
}

/// Any protocol record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// `BMOE_LOAD`.
    Load(Load),
    /// `BMOE_PROGRESS`.
    Progress(Progress),
    /// `BMOE_READY`.
    Ready(Ready),
    /// `BMOE_BEGIN`.
    Begin(Begin),
    /// `BMOE_DONE`.
    Done(Box<Done>),
    /// `BMOE_DECIDE`.
    Decide(Box<Decide>),
    /// `BMOE_ERROR`.
    Error(ErrorRecord),
}

macro_rules! record_impl {
    ($ty:ty, $tag:literal) => {
        impl $ty {
            /// The tag after `BMOE_` on the wire.
            pub const TAG: &'static str = $tag;

            /// The full protocol line (`BMOE_<TAG> {json}`), keys in the seed's order, no
            /// trailing newline.
            pub fn to_line(&self) -> String {
                format!("{}{} {}", PREFIX, $tag, to_json(self))
            }
        }
    };
}

record_impl!(Load, "LOAD");
record_impl!(Progress, "PROGRESS");
record_impl!(Ready, "READY");
record_impl!(Begin, "BEGIN");
record_impl!(Done, "DONE");
record_impl!(Decide, "DECIDE");
record_impl!(ErrorRecord, "ERROR");

impl Record {
    /// The tag after `BMOE_`.
    pub fn tag(&self) -> &'static str {
        match self {
            Record::Load(_) => Load::TAG,
            Record::Progress(_) => Progress::TAG,
            Record::Ready(_) => Ready::TAG,
            Record::Begin(_) => Begin::TAG,
            Record::Done(_) => Done::TAG,
            Record::Decide(_) => Decide::TAG,
            Record::Error(_) => ErrorRecord::TAG,
        }
    }

    /// The full protocol line, no trailing newline.
    pub fn to_line(&self) -> String {
        match self {
            Record::Load(r) => r.to_line(),
            Record::Progress(r) => r.to_line(),
            Record::Ready(r) => r.to_line(),
            Record::Begin(r) => r.to_line(),
            Record::Done(r) => r.to_line(),
            Record::Decide(r) => r.to_line(),
            Record::Error(r) => r.to_line(),
        }
    }
}

impl std::fmt::Display for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_line())
    }
}

/// What one stdout line is.
#[derive(Debug, Clone, PartialEq)]
pub enum LineKind<'a> {
    /// A protocol record this crate knows, parsed.
    Record(Record),
    /// `BMOE_<TAG> {json object}` with a tag this version does not know (a newer engine).
    Unknown {
        /// The tag after `BMOE_`.
        tag: &'a str,
        /// The JSON object text.
        json: &'a str,
    },
    /// Looks like a protocol line (`BMOE_<TAG>` then a space or the end) but the JSON is
    /// missing or does not fit the record.
    Malformed {
        /// The tag after `BMOE_`.
        tag: &'a str,
        /// What is wrong, from the JSON parser when it is a JSON problem.
        reason: String,
    },
    /// Anything else (answer text, summary lines, banners, logs), trimmed.
    Text(&'a str),
}

/// Classifies one stdout line; see [`LineKind`]. Never panics.
///
/// The line is trimmed first (whitespace, a trailing `\r`, a leading UTF-8 BOM). A protocol
/// line is `BMOE_` + a tag of `A-Z`, `0-9`, `_` + one or more spaces + a JSON object.
///
/// ```
/// use bmoe_telemetry::protocol::{parse_line, LineKind, Record};
/// let l = parse_line(r#"BMOE_BEGIN {"id":7}"#);
/// assert!(matches!(l, LineKind::Record(Record::Begin(b)) if b.id == 7));
/// assert!(matches!(parse_line("generation: 3 tokens"), LineKind::Text(_)));
/// assert!(matches!(parse_line("BMOE_DONE {oops"), LineKind::Malformed { .. }));
/// ```
pub fn parse_line(line: &str) -> LineKind<'_> {
    let line = line.trim_start_matches('\u{feff}').trim();
    let Some(rest) = line.strip_prefix(PREFIX) else {
        return LineKind::Text(line);
    };
    let tag_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
        .count();
    let (tag, after) = rest.split_at(tag_len);
    if tag.is_empty() || !(after.is_empty() || after.starts_with([' ', '\t'])) {
        return LineKind::Text(line);
    }
    let json = after.trim_start();
    if !json.starts_with('{') {
        let reason = if json.is_empty() {
            "no JSON object after the tag".to_string()
        } else {
            "expected a JSON object (`{...}`) after the tag".to_string()
        };
        return LineKind::Malformed { tag, reason };
    }
    fn typed<'a, T: serde::de::DeserializeOwned>(
        tag: &'a str,
        json: &str,
        wrap: impl FnOnce(T) -> Record,
    ) -> LineKind<'a> {
        match serde_json::from_str::<T>(json) {
            Ok(v) => LineKind::Record(wrap(v)),
            Err(e) => LineKind::Malformed {
                tag,
                reason: e.to_string(),
            },
        }
    }
    match tag {
        "LOAD" => typed(tag, json, Record::Load),
        "PROGRESS" => typed(tag, json, Record::Progress),
        "READY" => typed(tag, json, Record::Ready),
        "BEGIN" => typed(tag, json, Record::Begin),
        "DONE" => typed(tag, json, |d| Record::Done(Box::new(d))),
        "DECIDE" => typed(tag, json, |d| Record::Decide(Box::new(d))),
        "ERROR" => typed(tag, json, Record::Error),
        _ => match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json) {
            Ok(_) => LineKind::Unknown { tag, json },
            Err(e) => LineKind::Malformed {
                tag,
                reason: e.to_string(),
            },
        },
    }
}

// ---------------------------------------------------------------------------------------------
// session requests (stdin)

/// `{"cmd":"generate",...}`: generate a reply to `prompt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerateRequest {
    /// Request id, echoed in `BMOE_BEGIN` / `BMOE_DONE` / `BMOE_ERROR`.
    pub id: i64,
    /// The user message (JSON-escaped on the wire).
    pub prompt: String,
    /// Tokens to generate; `None` = the process's `-n` flag (see [`Self::n_predict_or`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_predict: Option<u64>,
    /// Whether the model may reason; `None` = `true` (see [`Self::think`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think: Option<bool>,
    /// `true` starts a new chat, `false` continues it; `None` = `true` (see
    /// [`Self::clear_kv`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_kv: Option<bool>,
}

impl GenerateRequest {
    /// `n_predict`, or the process default when the request omits it.
    pub fn n_predict_or(&self, process_default: u64) -> u64 {
        self.n_predict.unwrap_or(process_default)
    }

    /// `think`, default `true`.
    pub fn think(&self) -> bool {
        self.think.unwrap_or(true)
    }

    /// `clear_kv`, default `true` (a new chat).
    pub fn clear_kv(&self) -> bool {
        self.clear_kv.unwrap_or(true)
    }
}

/// `{"cmd":"decide",...}`: score `choices` as continuations of `prefix`…`suffix` (needs
/// `--decide`; always rendered with reasoning off).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideRequest {
    /// Request id.
    pub id: i64,
    /// Text before the choice.
    pub prefix: String,
    /// Text after the choice.
    #[serde(default)]
    pub suffix: String,
    /// The candidate continuations, in order.
    pub choices: Vec<String>,
    /// Whether to reuse the kept prefix state; `None` = `true` (see [`Self::reuse_prefix`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_prefix: Option<bool>,
}

impl DecideRequest {
    /// `reuse_prefix`, default `true`.
    pub fn reuse_prefix(&self) -> bool {
        self.reuse_prefix.unwrap_or(true)
    }
}

/// A session request, one JSON object per stdin line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    /// Generate a reply.
    Generate(GenerateRequest),
    /// Score choices.
    Decide(DecideRequest),
    /// Interrupt the in-flight generation; the session stays loaded.
    Cancel,
    /// End the session (EOF on stdin does the same).
    Close,
}

/// A request line that could not be understood.
#[derive(Debug, thiserror::Error)]
#[error("invalid request: {reason}")]
pub struct RequestError {
    /// What is wrong (from the JSON parser).
    pub reason: String,
}

impl Request {
    /// Parses one stdin line (surrounding whitespace ignored; unknown keys ignored).
    ///
    /// # Errors
    /// [`RequestError`] when the line is not a JSON object, `cmd` is missing or unknown, or a
    /// required key (`id`, `prompt`, `prefix`, `choices`) is missing or mistyped.
    pub fn parse(line: &str) -> Result<Request, RequestError> {
        serde_json::from_str(line.trim()).map_err(|e| RequestError {
            reason: e.to_string(),
        })
    }

    /// The request as one JSON line (`cmd` first, then the fields in the seed's order;
    /// omitted optional fields are not written). No trailing newline.
    pub fn to_line(&self) -> String {
        to_json(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_key_order_and_reset() {
        let p = Progress {
            step: 1,
            steps: 2,
            wall_ms: 1.5,
            io_ms: 0.25,
            compute_ms: 1.0,
            mgmt_ms: 0.0,
            stall_ms: 0.0,
            read_mb: 3.0,
            cache_hit_pct: -1.0,
            majflt: 4,
            cpu_ms: 2.0,
            dense_resident_frac: 0.5,
            reset: true,
            delta_reasoning: "a\"b".into(),
            delta_text: "x\ny".into(),
        };
        assert_eq!(
            p.to_line(),
            r#"BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":1.5,"io_ms":0.25,"compute_ms":1.0,"mgmt_ms":0.0,"stall_ms":0.0,"read_mb":3.0,"cache_hit_pct":-1.0,"majflt":4,"cpu_ms":2.0,"dense_resident_frac":0.5,"reset":1,"delta_reasoning":"a\"b","delta_text":"x\ny"}"#
        );
        let mut q = p.clone();
        q.reset = false;
        assert!(!q.to_line().contains("reset"));
    }

    #[test]
    fn missing_keys_take_panel_defaults() {
        let LineKind::Record(Record::Progress(p)) = parse_line(r#"BMOE_PROGRESS {"step":3}"#)
        else {
            panic!("not parsed")
        };
        assert_eq!(p.step, 3);
        assert!(p.wall_ms.is_nan());
        assert_eq!(p.cache_hit_pct, -1.0);
        assert_eq!(p.io_ms, 0.0);
    }

    #[test]
    fn logp_null_is_minus_infinity() {
        let LineKind::Record(Record::Decide(d)) =
            parse_line(r#"BMOE_DECIDE {"id":1,"best":1,"choice_logp":[null,-0.5],"x":9}"#)
        else {
            panic!("not parsed")
        };
        assert_eq!(d.choice_logp, vec![f64::NEG_INFINITY, -0.5]);
        assert!(d.to_line().contains(r#""choice_logp":[null,-0.5]"#));
    }

    #[test]
    fn classification() {
        assert!(matches!(parse_line("BMOE_"), LineKind::Text(_)));
        assert!(matches!(
            parse_line("BMOE_LOADX"),
            LineKind::Malformed { .. }
        ));
        assert!(matches!(parse_line("BMOE_load {}"), LineKind::Text(_)));
        assert!(matches!(
            parse_line("BMOE_NEWTHING {\"a\":1}"),
            LineKind::Unknown {
                tag: "NEWTHING",
                ..
            }
        ));
        assert!(matches!(
            parse_line("BMOE_LOAD [1]"),
            LineKind::Malformed { .. }
        ));
        assert!(matches!(
            parse_line("BMOE_LOAD {\"mb\":\"x\"}"),
            LineKind::Malformed { .. }
        ));
        assert!(matches!(
            parse_line("\u{feff}BMOE_BEGIN {\"id\":1}\r"),
            LineKind::Record(Record::Begin(Begin { id: 1 }))
        ));
    }

    #[test]
    fn request_defaults() {
        let r = Request::parse(r#"{"cmd":"generate","id":3,"prompt":"hi","extra":1}"#);
        let Ok(Request::Generate(g)) = r else {
            panic!("{r:?}")
        };
        assert!(g.think() && g.clear_kv());
        assert_eq!(g.n_predict_or(64), 64);
        assert_eq!(
            Request::Generate(g).to_line(),
            r#"{"cmd":"generate","id":3,"prompt":"hi"}"#
        );
        assert!(matches!(
            Request::parse(r#"{"cmd":"cancel"}"#),
            Ok(Request::Cancel)
        ));
        assert!(Request::parse(r#"{"cmd":"explode"}"#).is_err());
        assert!(Request::parse(r#"{"cmd":"generate","id":1}"#).is_err());
    }
}
