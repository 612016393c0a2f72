//! The per-token metrics CSV (`--csv`): `# bmoe_metrics v2` preamble, header, one row per
//! token, a `# summary key=value ...` trailer per generation.
//!
//! # Reading
//!
//! [`MetricsReader`] streams rows **by column name**: every one of the 29 columns is optional,
//! so v0 files (no preamble, 8/9/11 columns) and v1 files (22 columns) read as well as v2 ones;
//! a column the header lacks reads as `None` on every row, an empty cell as `None` on that row.
//! Columns this crate does not know are ignored (read them through [`crate::table`]). The
//! preamble becomes a typed [`RunInfo`] (unknown keys kept in [`RunInfo::extra`]); `# summary`
//! lines become [`SummaryTrailer`]s, collected as they are met (one per turn).
//!
//! # Writing
//!
//! [`MetricsWriter`] writes the preamble once, the header in the seed's column order
//! ([`TOKEN_COLUMNS`]), and **flushes every row as it is written**, so a killed run keeps
//! every completed token. Floats use the archived engine's fixed decimals per column
//! ([`TOKEN_DECIMALS`]: 3 for milliseconds, 2 for `cache_hit_pct` and `majflt_mib`, 3 for
//! `dense_resident_frac`, 1 for the other MiB columns); `None` is an empty cell.
//!
//! ```
//! use bmoe_telemetry::metrics::{MetricsReader, MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
//! let info = RunInfo { engine: Some("0.1.0".into()), model: Some("m.gguf".into()), ..RunInfo::default() };
//! let mut w = MetricsWriter::new(Vec::new(), &info)?;
//! w.write_row(&TokenRow { step: Some(1), steps: Some(1), wall_ms: Some(12.5), ..TokenRow::default() })?;
//! let mut t = SummaryTrailer::new();
//! t.push("tokens", "1");
//! w.write_summary(&t)?;
//! let bytes = w.into_inner()?;
//! let mut r = MetricsReader::new(bytes.as_slice(), "mem")?;
//! let rows: Vec<TokenRow> = r.by_ref().collect::<Result<_, _>>()?;
//! assert_eq!(rows[0].wall_ms, Some(12.5));
//! assert_eq!(r.run_info().engine.as_deref(), Some("0.1.0"));
//! assert_eq!(r.summaries()[0].get_u64("tokens"), Some(1));
//! # Ok::<(), bmoe_telemetry::Error>(())
//! ```

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::cell::{Cell, SHORTEST};
use crate::error::{Error, Result};
use crate::kv::{KvMap, format_pair, format_set_pairs, parse_kv_line};
use crate::table::{
    Line, Preamble, RowCursor, TableReader, Truncated, cut_line, ensure_complete, ensure_width,
    open_buffered, opt_cell,
};

/// The magic first line of a v2 file.
pub const MAGIC_V2: &str = "# bmoe_metrics v2";

macro_rules! token_row {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $dec:expr ;)*) => {
        /// One token's row. Every column is optional (older files have fewer), `None` = the
        /// header lacks the column or the cell is empty.
        #[derive(Debug, Clone, Copy, Default, PartialEq)]
        pub struct TokenRow {
            $( $(#[doc = $doc])* pub $name: Option<$ty>, )*
        }

        /// The 29 per-token columns, in the seed's (and the writer's) order.
        pub const TOKEN_COLUMNS: [&str; 29] = [ $( stringify!($name), )* ];

        /// The value type of each of [`TOKEN_COLUMNS`] (for a polars schema).
        pub const TOKEN_COLUMN_TYPES: [crate::cell::ColumnType; 29] =
            [ $( <$ty as Cell>::TYPE, )* ];

        /// Decimals the writer uses per column of [`TOKEN_COLUMNS`] (0 for integers).
        pub const TOKEN_DECIMALS: [usize; 29] = [ $( $dec, )* ];

        impl TokenRow {
            #[allow(unused_assignments)]
            fn parse(
                map: &[Option<usize>; 29],
                f: &crate::table::Fields<'_>,
                path: &Path,
            ) -> Result<Self> {
                let mut i = 0;
                $(
                    let $name = opt_cell::<$ty>(map[i], f, path, stringify!($name))?;
                    i += 1;
                )*
                let row = TokenRow { $( $name, )* };
                row.check_durations(map, f, path)?;
                Ok(row)
            }

            /// The value of column `name` as a float (integers converted), `None` when the
            /// name is not one of [`TOKEN_COLUMNS`] or the cell is absent — for consumers that
            /// select columns by name (plots, replays).
            pub fn get_f64(&self, name: &str) -> Option<f64> {
                match name {
                    $( stringify!($name) => self.$name.map(|v| v as f64), )*
                    _ => None,
                }
            }

            /// All 29 values as floats, in [`TOKEN_COLUMNS`] order.
            pub fn to_f64_array(&self) -> [Option<f64>; 29] {
                [ $( self.$name.map(|v| v as f64), )* ]
            }

            /// Appends the row as CSV (no line end), all 29 columns.
            pub fn write_csv(&self, out: &mut String) {
                let mut first = true;
                $(
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    if let Some(v) = &self.$name {
                        Cell::write(v, out, $dec);
                    }
                )*
                let _ = first;
            }
        }
    };
}

token_row! {
    /// 1-based token index within the generation.
    step: u64 = 0;
    /// Target token count.
    steps: u64 = 0;
    /// Token wall time (brackets `llama_decode`), ms.
    wall_ms: f64 = 3;
    /// Flash read time, ms (lane-busy sum under overlap).
    io_ms: f64 = 3;
    /// Compute residual, ms (clamped at 0).
    compute_ms: f64 = 3;
    /// Flash bytes read this token.
    read_bytes: u64 = 0;
    /// Cumulative cache hit rate, percent; −1 = no cache.
    cache_hit_pct: f64 = 2;
    /// Union of stalled intervals under overlap, ms (0 serial).
    stall_ms: f64 = 3;
    /// Cache management (plus the throttled dense-residency probe), ms.
    mgmt_ms: f64 = 3;
    /// Major faults inside the decode (0 = unmeasured).
    majflt: u64 = 0;
    /// Process CPU time this token, ms (0 = unmeasured).
    cpu_ms: f64 = 3;
    /// Sampled dense-weight residency fraction; −1 = unmeasured.
    dense_resident_frac: f64 = 3;
    /// Which `generate()` of the session (0 for one-shot).
    turn: u64 = 0;
    /// What the faults moved: `majflt` × page size, MiB.
    majflt_mib: f64 = 2;
    /// Expert-cache budget in effect, MiB.
    cache_budget_mib: f64 = 1;
    /// `VmRSS`, MiB.
    rss_mib: f64 = 1;
    /// Resident anonymous memory (the expert cache lives here), MiB.
    rss_anon_mib: f64 = 1;
    /// Resident file-backed memory (the mmap'd model), MiB.
    rss_file_mib: f64 = 1;
    /// `VmSwap`, MiB.
    swap_mib: f64 = 1;
    /// `MemAvailable`, MiB.
    mem_available_mib: f64 = 1;
    /// `MemFree`, MiB.
    mem_free_mib: f64 = 1;
    /// `SwapFree`, MiB.
    swap_free_mib: f64 = 1;
    /// Wall time between the previous decode and this one, ms.
    loop_overhead_ms: f64 = 3;
    /// Tokens the decode that produced this row confirmed (1 without speculation).
    mtp_batch: u64 = 0;
    /// Drafting time of this group, ms (a slice of `loop_overhead_ms`).
    mtp_draft_ms: f64 = 3;
    /// Overlap: wait for the previous layer's read batch (part of `compute_ms`), ms.
    drain_ms: f64 = 3;
    /// Route-ahead: wait for adopted speculative reads (part of `mgmt_ms`), ms.
    adopt_ms: f64 = 3;
    /// Route-ahead: issuing the committed selection's reads (part of `compute_ms`), ms.
    ra_issue_ms: f64 = 3;
    /// Route-ahead: the watchdog GEMV (part of `compute_ms`), ms.
    ra_wd_ms: f64 = 3;
}

/// Largest value a duration column (`*_ms`) may hold: 10^9 ms, 11.6 days for one token. No
/// token takes that long (the slowest recorded one took 18.5 s), so a larger value is a
/// corrupted cell — and one such value would swamp every mean, or overflow a sum to `inf`.
pub const MAX_DURATION_MS: f64 = 1e9;

/// What a duration cell may hold.
const DURATION_MS_EXPECTED: &str =
    "expected a duration in ms: a finite number from 0 to 1e9 (11.6 days)";

/// Whether column `name` of [`TOKEN_COLUMNS`] is a duration in ms (the `*_ms` columns:
/// `wall_ms`, `io_ms`, `compute_ms`, `stall_ms`, `mgmt_ms`, `cpu_ms`, `loop_overhead_ms`, …).
#[must_use]
pub fn is_duration_column(name: &str) -> bool {
    name.ends_with("_ms")
}

impl TokenRow {
    /// The duration rule: every `*_ms` cell is finite and within `0..=MAX_DURATION_MS` (the
    /// writer never emits anything else: durations are measured, `0` when off). NaN, ±inf, a
    /// negative or a huge value is an error naming the line and column, so no reader averages
    /// it in.
    fn check_durations(
        &self,
        map: &[Option<usize>; 29],
        f: &crate::table::Fields<'_>,
        path: &Path,
    ) -> Result<()> {
        let values = self.to_f64_array();
        for (i, name) in TOKEN_COLUMNS.iter().enumerate() {
            let Some(v) = values[i] else { continue };
            if !is_duration_column(name) || (0.0..=MAX_DURATION_MS).contains(&v) {
                continue;
            }
            let raw = map[i].and_then(|c| f.get(c)).unwrap_or_default();
            return Err(Error::field(path, f.line, name, DURATION_MS_EXPECTED, raw));
        }
        Ok(())
    }

    /// The seed's header row, comma-joined.
    pub fn header() -> String {
        TOKEN_COLUMNS.join(",")
    }

    /// What this row reads back as after a write/read cycle (floats rounded to the column's
    /// decimals) — the round-trip property: `read(write(r)) == r.quantized()`.
    pub fn quantized(&self) -> TokenRow {
        let mut s = String::new();
        self.write_csv(&mut s);
        s.push('\n');
        let text = format!("{}\n{s}", TokenRow::header());
        MetricsReader::new(text.as_bytes(), "quantize")
            .ok()
            .and_then(|mut r| r.next())
            .and_then(|r| r.ok())
            .unwrap_or(*self)
    }
}

// ---------------------------------------------------------------------------------------------
// RunInfo

/// A preamble value type.
trait PreambleValue: Sized {
    fn parse_value(s: &str) -> Option<Self>;
    fn format_value(&self) -> String;
    const EXPECTED: &'static str;
}

impl PreambleValue for String {
    const EXPECTED: &'static str = "text";
    fn parse_value(s: &str) -> Option<Self> {
        Some(s.to_string())
    }
    fn format_value(&self) -> String {
        self.clone()
    }
}

impl PreambleValue for u64 {
    const EXPECTED: &'static str = "expected an unsigned integer";
    fn parse_value(s: &str) -> Option<Self> {
        <u64 as Cell>::parse(s.as_bytes())
    }
    fn format_value(&self) -> String {
        self.to_string()
    }
}

impl PreambleValue for bool {
    const EXPECTED: &'static str = "expected 0 or 1";
    fn parse_value(s: &str) -> Option<Self> {
        <bool as Cell>::parse(s.as_bytes())
    }
    fn format_value(&self) -> String {
        if *self { "1" } else { "0" }.to_string()
    }
}

impl PreambleValue for f64 {
    const EXPECTED: &'static str = "expected a number";
    fn parse_value(s: &str) -> Option<Self> {
        <f64 as Cell>::parse(s.as_bytes())
    }
    fn format_value(&self) -> String {
        let mut s = String::new();
        crate::cell::write_f64(*self, &mut s, SHORTEST);
        s
    }
}

macro_rules! run_info {
    ($( $group:ident => [ $( $(#[doc = $doc:literal])* $name:ident : $ty:ty ),* $(,)? ] )*) => {
        /// The run-parameter preamble of a metrics CSV: the **resolved** configuration.
        ///
        /// Every key is optional (v0 files have no preamble, v1 files fewer keys); keys this
        /// version does not know are kept in [`Self::extra`] in file order. Numbers are
        /// written in their shortest exact form (`0.95`, `0`), booleans as `0`/`1`.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct RunInfo {
            /// `N` of the `# bmoe_metrics vN` magic line; `None` for v0 files (no preamble).
            pub version: Option<u32>,
            $( $( $(#[doc = $doc])* pub $name: Option<$ty>, )* )*
            /// Keys this version does not know, in order, with their raw values.
            pub extra: KvMap,
        }

        impl RunInfo {
            /// The known keys, grouped by the line the writer puts them on.
            pub const KEY_LINES: &'static [&'static [&'static str]] = &[
                $( &[ $( stringify!($name), )* ], )*
            ];

            /// Sets a known key from its text. `None` when the key is not one of
            /// [`Self::KEY_LINES`]; `Some(Err(expected))` when the value does not parse.
            fn set(&mut self, key: &str, value: &str) -> Option<Result<(), &'static str>> {
                match key {
                    $( $(
                        stringify!($name) => Some(match <$ty as PreambleValue>::parse_value(value) {
                            Some(v) => { self.$name = Some(v); Ok(()) }
                            None => Err(<$ty as PreambleValue>::EXPECTED),
                        }),
                    )* )*
                    _ => None,
                }
            }

            /// The value of a known key, formatted as the writer writes it.
            fn get_formatted(&self, key: &str) -> Option<String> {
                match key {
                    $( $( stringify!($name) => self.$name.as_ref().map(PreambleValue::format_value), )* )*
                    _ => None,
                }
            }
        }
    };
}

run_info! {
    engine_line => [
        /// Version of the engine that wrote the rows (`unknown` if the build did not define it).
        engine: String,
    ]
    model_line => [
        /// Model file.
        model: String,
        /// `general.architecture`.
        arch: String,
        /// Layers.
        n_layer: u64,
        /// Experts per MoE layer.
        n_expert: u64,
        /// Effective top-k after any override.
        n_expert_used: u64,
        /// Compute threads.
        threads: u64,
        /// Context size.
        n_ctx: u64,
        /// Micro-batch (`0` = follows `n_batch`).
        n_ubatch: u64,
        /// Whether the ChatML/chat template was applied.
        chatml: bool,
    ]
    stream_line => [
        /// Expert streaming on.
        moe_stream: bool,
        /// Resolved cache budget, MiB.
        cache_mb: u64,
        /// Budget sized automatically.
        cache_auto: bool,
        /// Auto-sizing floor, MiB.
        cache_floor_mb: u64,
        /// Auto-sizing ceiling, MiB.
        cache_ceil_mb: u64,
        /// One token's worst-case routed bytes, MiB.
        cache_cycle_mb: u64,
        /// Cache forced on.
        force_cache: bool,
        /// Whole expert set read.
        load_all: bool,
        /// I/O lanes.
        io_threads: u64,
        /// O_DIRECT (or F_NOCACHE) **achieved**.
        o_direct: bool,
        /// Overlap mode.
        overlap: bool,
        /// Two-wave reads.
        io_two_wave: bool,
        /// `--prefetch K`.
        prefetch: u64,
        /// `--route-ahead N`.
        route_ahead: u64,
        /// Stale-gate prefetch.
        predict_prefetch: bool,
        /// Predictor probe (instrumented run).
        predict_log: bool,
        /// Speculation cap of the predictor.
        predict_spec_max: u64,
        /// Synchronous prefetch (instrumented run).
        prefetch_sync: bool,
        /// `mmap|warm|anon|ahwb`.
        dense_weights: String,
        /// `--drop-cold-experts` threshold.
        drop_cold_frac: f64,
        /// Renormalise after dropping.
        drop_renorm: bool,
        /// Drop during prefill too.
        drop_prefill: bool,
        /// `--expert-substitute` λ.
        substitute_lambda: f64,
    ]
    sampling_line => [
        /// Sampling temperature (`>0` = stochastic run).
        temp: f64,
        /// Top-k sampling.
        top_k: u64,
        /// Top-p sampling.
        top_p: f64,
        /// RNG seed.
        seed: u64,
        /// Layer-granularity compute trace (instrumented when `>0`).
        compute_trace_layers: u64,
        /// `off|mtp|ngram`.
        spec: String,
        /// Draft length cap.
        spec_draft_max: u64,
        /// MTP acceptance floor.
        mtp_p_min: f64,
        /// n-gram minimum match.
        ngram_min_match: u64,
    ]
}

/// How an instrumented run perturbed what it measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instrumentation {
    /// A trace was written (route, I/O or compute trace).
    Traced,
    /// The predictor was probed or prefetches made synchronous.
    Probed,
}

impl Instrumentation {
    /// `traced` or `probed`, as the tools print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Instrumentation::Traced => "traced",
            Instrumentation::Probed => "probed",
        }
    }
}

/// Every preamble key that marks an instrumented run — not a benchmark run — when its value is
/// above 0 (`1`), with what it means. bmoe-cli writes `route_trace`, `io_trace` and
/// `compute_trace` only when the trace is on; the others always, `0` when off.
pub const INSTRUMENTED_KEYS: &[(&str, Instrumentation)] = &[
    ("route_trace", Instrumentation::Traced),
    ("io_trace", Instrumentation::Traced),
    ("compute_trace", Instrumentation::Traced),
    ("compute_trace_layers", Instrumentation::Traced),
    ("predict_log", Instrumentation::Probed),
    ("prefetch_sync", Instrumentation::Probed),
];

/// The one instrumented-run check: the [`INSTRUMENTED_KEYS`] that `value_of` gives a value
/// above 0 (a positive number, `true` or `on`), in that table's order. Readers of typed
/// preambles ([`RunInfo::instrumented_by`]) and of raw `key=value` facts share it.
pub fn instrumented_keys<V: AsRef<str>>(
    value_of: impl Fn(&str) -> Option<V>,
) -> Vec<(&'static str, Instrumentation)> {
    let on = |v: &str| {
        let v = v.trim();
        v.parse::<f64>().is_ok_and(|n| n > 0.0) || v == "true" || v == "on"
    };
    INSTRUMENTED_KEYS
        .iter()
        .filter(|(k, _)| value_of(k).is_some_and(|v| on(v.as_ref())))
        .copied()
        .collect()
}

/// `traced (route_trace, io_trace), probed (predict_log)`: the kinds of [`instrumented_keys`]'
/// result with the keys that made them, for a label saying why a run is not a benchmark.
pub fn describe_instrumentation(keys: &[(&str, Instrumentation)]) -> String {
    let mut parts = Vec::new();
    for kind in [Instrumentation::Traced, Instrumentation::Probed] {
        let named: Vec<&str> = keys
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(n, _)| *n)
            .collect();
        if !named.is_empty() {
            parts.push(format!("{} ({})", kind.as_str(), named.join(", ")));
        }
    }
    parts.join(", ")
}

impl RunInfo {
    /// Builds the typed preamble from raw preamble lines (as [`Preamble`] holds them).
    ///
    /// # Errors
    /// [`Error::Field`] naming the line and key when a known key has a value of the wrong
    /// type (e.g. `n_layer=abc`).
    pub fn from_preamble(preamble: &Preamble, path: &Path) -> Result<RunInfo> {
        let mut info = RunInfo {
            version: preamble.version().filter(|_| {
                preamble
                    .magic()
                    .first()
                    .is_some_and(|w| w == "bmoe_metrics")
            }),
            ..RunInfo::default()
        };
        for (no, kv) in preamble.kv_lines() {
            for (k, v) in kv.pairs.iter() {
                match info.set(k, v) {
                    None => info.extra.insert(k, v),
                    Some(Ok(())) => {}
                    Some(Err(expected)) => {
                        return Err(Error::field(path, no, k, expected, v.as_bytes()));
                    }
                }
            }
        }
        Ok(info)
    }

    /// The preamble lines the writer emits (no line ends): the magic line, `# engine=` on its
    /// own line, then the model, streaming and sampling lines (each only if one of its keys is
    /// set), then one line of [`Self::extra`] keys if any.
    ///
    /// # Errors
    /// [`Error::Unwritable`] for a value [`crate::kv::format_pair`] refuses.
    pub fn to_lines(&self) -> Result<Vec<String>> {
        let mut out = vec![MAGIC_V2.to_string()];
        let no_extra = KvMap::new();
        for keys in Self::KEY_LINES {
            let set = keys.iter().map(|&k| (k, self.get_formatted(k)));
            out.extend(format_set_pairs(set, &no_extra)?);
        }
        out.extend(format_set_pairs([], &self.extra)?);
        Ok(out)
    }

    /// The keys of [`INSTRUMENTED_KEYS`] this preamble sets above 0 (typed or in
    /// [`Self::extra`]), in that table's order: why the run is not a benchmark run.
    pub fn instrumented_by(&self) -> Vec<(&'static str, Instrumentation)> {
        instrumented_keys(|k| {
            self.get_formatted(k)
                .or_else(|| self.extra.get(k).map(str::to_string))
        })
    }

    /// Whether the run was instrumented (traced or probed, see [`INSTRUMENTED_KEYS`]): not a
    /// benchmark run.
    pub fn is_instrumented(&self) -> bool {
        !self.instrumented_by().is_empty()
    }

    /// The run's comparability class ([`crate::class::RunClass`]) from this preamble and
    /// the run's trailers (the last one that has a key wins; trailers only add evidence the
    /// preamble lacks, e.g. `experts_dropped` in a file with no preamble).
    pub fn class(&self, summaries: &[SummaryTrailer]) -> crate::class::RunClass {
        crate::class::RunClass::from_keys(|k| {
            self.get_formatted(k)
                .or_else(|| self.extra.get(k).map(str::to_string))
                .filter(|v| {
                    // a preamble `0` still lets a trailer count that says otherwise
                    !(v.trim().parse::<f64>().is_ok_and(|n| n == 0.0))
                })
                .or_else(|| {
                    summaries
                        .iter()
                        .rev()
                        .find_map(|s| s.get(k).map(str::to_string))
                })
        })
    }

    /// Whether sampling was stochastic (`temp>0`).
    pub fn is_stochastic(&self) -> bool {
        self.temp.is_some_and(|t| t > 0.0)
    }
}

// ---------------------------------------------------------------------------------------------
// trailer

/// One `# summary key=value ...` trailer (one per generation). Keys are kept in file order,
/// unknown ones included; typed access by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryTrailer {
    /// The pairs in order.
    pub pairs: KvMap,
    /// 1-based line number it was read from (0 when built in memory).
    pub line: u64,
}

impl SummaryTrailer {
    /// An empty trailer to fill with [`Self::push`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a `# summary ...` line; `None` when the line is not one.
    pub fn parse(line: &str, line_no: u64) -> Option<SummaryTrailer> {
        let kv = parse_kv_line(line);
        (kv.words.first().map(String::as_str) == Some("summary")).then_some(SummaryTrailer {
            pairs: kv.pairs,
            line: line_no,
        })
    }

    /// Appends (or replaces) `key=value`; the value is written as given.
    pub fn push(&mut self, key: &str, value: impl Into<String>) {
        self.pairs.insert(key, value);
    }

    /// Appends a float with fixed `decimals` (e.g. 3 for `s/tok`).
    pub fn push_f64(&mut self, key: &str, value: f64, decimals: usize) {
        let mut s = String::new();
        crate::cell::write_f64(value, &mut s, decimals);
        self.pairs.insert(key, s);
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.get(key)
    }

    /// `key` as a float (`None` when absent or not a number).
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        <f64 as Cell>::parse(self.get(key)?.as_bytes())
    }

    /// `key` as an unsigned integer.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        <u64 as Cell>::parse(self.get(key)?.as_bytes())
    }

    /// `interrupted=`: `Some(true)` when a SIGINT (Ctrl-C) stopped the generation early, so
    /// the figures cover only the tokens before it; `Some(false)` on a run that was not
    /// interrupted; `None` when the trailer predates the key (or holds neither `0` nor `1`).
    pub fn interrupted(&self) -> Option<bool> {
        flag_value(self.get(trailer_keys::INTERRUPTED)?)
    }

    /// Sets `interrupted=0|1` (see [`Self::interrupted`]).
    pub fn set_interrupted(&mut self, interrupted: bool) {
        self.push(
            trailer_keys::INTERRUPTED,
            if interrupted { "1" } else { "0" },
        );
    }

    /// `cancelled=1`: the generation stopped early (a session `cancel`, or a SIGINT), so the
    /// figures cover a partial turn. The key is written only when it is 1: absent = `false`.
    pub fn cancelled(&self) -> bool {
        self.get(trailer_keys::CANCELLED)
            .and_then(flag_value)
            .unwrap_or(false)
    }

    /// The line, `# summary k=v ...`, no line end.
    ///
    /// # Errors
    /// [`Error::Unwritable`] for a pair [`crate::kv::format_pair`] refuses.
    pub fn to_line(&self) -> Result<String> {
        let mut line = String::from("# summary");
        for (k, v) in self.pairs.iter() {
            line.push(' ');
            line.push_str(&format_pair(k, v)?);
        }
        Ok(line)
    }
}

/// Well-known trailer keys (the CSV spelling; `BMOE_DONE` spells some differently, e.g.
/// `tok_s` for `tok/s`).
pub mod trailer_keys {
    /// Tokens generated.
    pub const TOKENS: &str = "tokens";
    /// Mean decode seconds per token.
    pub const S_PER_TOK: &str = "s/tok";
    /// Decode rate.
    pub const TOK_S: &str = "tok/s";
    /// Total flash read, MiB.
    pub const READ_MIB: &str = "read_MiB";
    /// Total read time, s.
    pub const IO_S: &str = "io_s";
    /// Mean compute residual, s/token.
    pub const COMPUTE_S_PER_TOK: &str = "compute_s/tok";
    /// Mean read time, s/token.
    pub const IO_S_PER_TOK: &str = "io_s/tok";
    /// Cumulative hit rate, percent.
    pub const CACHE_HIT_PCT: &str = "cache_hit_pct";
    /// Prompt tokens.
    pub const N_PROMPT: &str = "n_prompt";
    /// Load time, s.
    pub const LOAD_S: &str = "load_s";
    /// Prefill time, s.
    pub const PREFILL_S: &str = "prefill_s";
    /// Prefill rate.
    pub const PREFILL_TPS: &str = "prefill_tps";
    /// Mean overlap stall, s/token.
    pub const STALL_S_PER_TOK: &str = "stall_s/tok";
    /// Mean cache management, s/token.
    pub const MGMT_S_PER_TOK: &str = "mgmt_s/tok";
    /// Mean major faults per token.
    pub const MAJFLT_PER_TOK: &str = "majflt/tok";
    /// Mean CPU seconds per token.
    pub const CPU_S_PER_TOK: &str = "cpu_s/tok";
    /// Mean between-decode gap, s/token.
    pub const LOOP_OVERHEAD_S_PER_TOK: &str = "loop_overhead_s/tok";
    /// Resident cache, MiB.
    pub const CACHE_RESIDENT_MIB: &str = "cache_resident_MiB";
    /// Cache budget, MiB.
    pub const CACHE_BUDGET_MIB: &str = "cache_budget_MiB";
    /// `1` when the turn stopped early (a session `cancel` or a SIGINT); written only then.
    pub const CANCELLED: &str = "cancelled";
    /// `0`/`1`: whether a SIGINT (Ctrl-C) stopped the generation early; on every trailer of
    /// an engine that knows the key, absent from older files.
    pub const INTERRUPTED: &str = "interrupted";
}

/// A `0`/`1` trailer value.
fn flag_value(v: &str) -> Option<bool> {
    match v {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// reader

/// Streaming reader of a metrics CSV (any generation). An `Iterator` over rows; trailers and
/// the run info are available alongside.
pub struct MetricsReader<R> {
    table: TableReader<R>,
    // A copy of the table's label, so errors can name the file while a row borrows the table.
    path: PathBuf,
    info: RunInfo,
    map: [Option<usize>; 29],
    summaries: Vec<SummaryTrailer>,
    comments: Vec<(u64, String)>,
    cursor: RowCursor,
}

impl MetricsReader<BufReader<File>> {
    /// Opens a metrics CSV.
    ///
    /// # Errors
    /// As [`MetricsReader::new`], plus [`Error::Io`] when it cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        MetricsReader::new(open_buffered(path)?, path)
    }
}

impl<R: BufRead> MetricsReader<R> {
    /// Reads the preamble and header from `src`; `label` names it in errors.
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Line`] from the table layer; [`Error::Field`] for a mistyped
    /// preamble key; [`Error::MissingColumn`] when the header has none of the known columns
    /// (not a metrics CSV).
    pub fn new(src: R, label: impl AsRef<Path>) -> Result<Self> {
        let table = TableReader::new(src, label)?;
        let info = RunInfo::from_preamble(table.preamble(), table.path())?;
        let mut map = [None; 29];
        for (i, name) in TOKEN_COLUMNS.iter().enumerate() {
            map[i] = table.column(name);
        }
        let magic = table.preamble().magic();
        if let Some(kind) = magic.first().filter(|w| w.ends_with("_trace")) {
            return Err(Error::line(
                table.path(),
                1,
                format!(
                    "this is a `{kind}` file, not a metrics CSV; read it with bmoe_telemetry::trace"
                ),
            ));
        }
        if !table.header().is_empty() && map.iter().all(Option::is_none) {
            return Err(Error::MissingColumn {
                path: table.path().to_path_buf(),
                line: table.header_line(),
                column: "step".into(),
                format: "metrics CSV",
            });
        }
        let cut = table.header_truncated().cloned();
        Ok(MetricsReader {
            path: table.path().to_path_buf(),
            table,
            info,
            map,
            summaries: Vec::new(),
            comments: Vec::new(),
            cursor: RowCursor::new(cut),
        })
    }

    /// The typed preamble.
    pub fn run_info(&self) -> &RunInfo {
        &self.info
    }

    /// The raw preamble (lines, `skip_rows`).
    pub fn preamble(&self) -> &Preamble {
        self.table.preamble()
    }

    /// The header's column names, as in the file.
    pub fn header(&self) -> &[String] {
        self.table.header()
    }

    /// Whether the header has column `name`.
    pub fn has_column(&self, name: &str) -> bool {
        self.table.column(name).is_some()
    }

    /// The `# summary` trailers met so far, in file order.
    pub fn summaries(&self) -> &[SummaryTrailer] {
        &self.summaries
    }

    /// Other `#` lines met after the header, with their line numbers.
    pub fn comments(&self) -> &[(u64, String)] {
        &self.comments
    }

    /// Set when the file's last line was cut short (no newline, whether or not it parses):
    /// every row before it was returned; this one was not.
    pub fn truncated(&self) -> Option<&Truncated> {
        self.cursor.truncated.as_ref()
    }

    /// Rows returned so far.
    pub fn rows_read(&self) -> u64 {
        self.cursor.rows
    }

    /// The label errors use.
    pub fn path(&self) -> &Path {
        self.table.path()
    }

    fn next_row(&mut self) -> Result<Option<TokenRow>> {
        let width = self.table.header().len();
        loop {
            match self.table.next_line()? {
                None => return Ok(None),
                Some(Line::Comment {
                    text,
                    line,
                    complete,
                }) => {
                    if !complete {
                        // A trailer cut short would carry wrong totals (`tokens=25` → `2`):
                        // the torn-row rule applies to it as to a row.
                        return Err(cut_line(&self.path, line));
                    }
                    match SummaryTrailer::parse(text, line) {
                        Some(t) => self.summaries.push(t),
                        None => self.comments.push((line, text.to_string())),
                    }
                }
                Some(Line::Row(f)) => {
                    ensure_complete(&f, &self.path)?;
                    ensure_width(&f, width, &self.path)?;
                    return TokenRow::parse(&self.map, &f, &self.path).map(Some);
                }
            }
        }
    }
}

impl<R: BufRead> Iterator for MetricsReader<R> {
    type Item = Result<TokenRow>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.cursor.done() {
            return None;
        }
        let step = self.next_row();
        self.cursor.settle(step, &self.table)
    }
}

/// A whole metrics file in memory (for small files; stream with [`MetricsReader`] otherwise).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsFile {
    /// The typed preamble.
    pub info: RunInfo,
    /// The raw preamble.
    pub preamble: Preamble,
    /// The header's column names.
    pub header: Vec<String>,
    /// All rows.
    pub rows: Vec<TokenRow>,
    /// All trailers.
    pub summaries: Vec<SummaryTrailer>,
    /// Set when the last line was cut short.
    pub truncated: Option<Truncated>,
}

impl MetricsFile {
    /// Reads a whole metrics CSV.
    ///
    /// # Errors
    /// As [`MetricsReader`].
    pub fn read(path: impl AsRef<Path>) -> Result<MetricsFile> {
        let mut r = MetricsReader::open(path)?;
        let rows = r.by_ref().collect::<Result<Vec<_>>>()?;
        Ok(MetricsFile {
            info: r.info.clone(),
            preamble: r.preamble().clone(),
            header: r.header().to_vec(),
            rows,
            summaries: r.summaries,
            truncated: r.cursor.truncated,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// writer

/// Writes a metrics CSV v2; every row and trailer is flushed as written.
pub struct MetricsWriter<W: Write> {
    out: BufWriter<W>,
    path: PathBuf,
    line: String,
}

impl MetricsWriter<File> {
    /// Creates (truncates) `path` and writes the preamble and header.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be created or written; [`Error::Unwritable`] for a
    /// preamble value that cannot be represented.
    pub fn create(path: impl AsRef<Path>, info: &RunInfo) -> Result<Self> {
        let path = path.as_ref();
        let f = File::create(path).map_err(|e| Error::io(path, e))?;
        let mut w = MetricsWriter::new(f, info)?;
        w.path = path.to_path_buf();
        Ok(w)
    }
}

impl<W: Write> MetricsWriter<W> {
    /// Writes the preamble and header to `out` and flushes.
    ///
    /// # Errors
    /// [`Error::Io`] on a write error; [`Error::Unwritable`] for a bad preamble value.
    pub fn new(out: W, info: &RunInfo) -> Result<Self> {
        let mut w = MetricsWriter {
            out: BufWriter::new(out),
            path: PathBuf::from("<metrics csv>"),
            line: String::with_capacity(512),
        };
        let mut head = info.to_lines()?.join("\n");
        head.push('\n');
        head.push_str(&TokenRow::header());
        head.push('\n');
        w.emit(&head)?;
        Ok(w)
    }

    fn emit(&mut self, text: &str) -> Result<()> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Writes one row and flushes it to the underlying writer.
    ///
    /// # Errors
    /// [`Error::Io`] on a write error.
    pub fn write_row(&mut self, row: &TokenRow) -> Result<()> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        row.write_csv(&mut line);
        line.push('\n');
        let r = self.emit(&line);
        self.line = line;
        r
    }

    /// Writes a `# summary` trailer and flushes.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Unwritable`] for a pair that cannot be represented.
    pub fn write_summary(&mut self, trailer: &SummaryTrailer) -> Result<()> {
        let mut line = trailer.to_line()?;
        line.push('\n');
        self.emit(&line)
    }

    /// Flushes and returns the underlying writer.
    ///
    /// # Errors
    /// [`Error::Io`] when the final flush fails.
    pub fn into_inner(self) -> Result<W> {
        let path = self.path;
        self.out
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v0_file_reads_by_name() {
        let text = "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n1,256,563.097,462.868,100.228,1101791232,-1.00,0.000\n# summary tokens=1 s/tok=0.585\n";
        let mut r = MetricsReader::new(text.as_bytes(), "v0").expect("open");
        let rows: Vec<_> = r.by_ref().collect::<Result<_>>().expect("rows");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].wall_ms, Some(563.097));
        assert_eq!(rows[0].mgmt_ms, None);
        assert_eq!(r.run_info().version, None);
        assert_eq!(r.summaries()[0].get_f64("s/tok"), Some(0.585));
    }

    #[test]
    fn interrupted_reads_from_new_trailers_and_is_unknown_in_old_ones() {
        let text = "step,steps,wall_ms\n1,2,3.0\n# summary tokens=1 s/tok=0.003\n2,2,4.0\n# summary tokens=1 interrupted=0\n# summary tokens=1 cancelled=1 interrupted=1\n# summary interrupted=yes\n";
        let mut r = MetricsReader::new(text.as_bytes(), "i.csv").expect("open");
        let rows: Vec<_> = r.by_ref().collect::<Result<_>>().expect("rows");
        assert_eq!(rows.len(), 2);
        let got: Vec<(Option<bool>, bool)> = r
            .summaries()
            .iter()
            .map(|t| (t.interrupted(), t.cancelled()))
            .collect();
        assert_eq!(
            got,
            vec![
                (None, false),
                (Some(false), false),
                (Some(true), true),
                (None, false)
            ]
        );
        let mut t = SummaryTrailer::new();
        t.push("tokens", "3");
        t.set_interrupted(true);
        assert_eq!(
            t.to_line().expect("line"),
            "# summary tokens=3 interrupted=1"
        );
        t.set_interrupted(false);
        assert_eq!(t.interrupted(), Some(false));
    }

    #[test]
    fn a_torn_last_row_is_left_out_even_when_it_parses() {
        // `305.5` cut to `30`: the row would parse, with a wrong wall time.
        let text = "step,steps,wall_ms\n1,2,3.0\n2,2,30";
        let mut r = MetricsReader::new(text.as_bytes(), "t").expect("open");
        let rows: Vec<_> = r.by_ref().collect::<Result<_>>().expect("rows");
        assert_eq!(rows.len(), 1);
        assert_eq!(r.truncated().map(|t| t.line), Some(3));
        // A cut trailer would carry wrong totals: left out the same way.
        let text = "step,steps,wall_ms\n1,1,3.0\n# summary tokens=1 s/tok=0.0";
        let mut r = MetricsReader::new(text.as_bytes(), "t").expect("open");
        assert_eq!(r.by_ref().count(), 1);
        assert!(r.summaries().is_empty());
        assert_eq!(r.truncated().map(|t| t.line), Some(3));
    }

    #[test]
    fn durations_must_be_finite_non_negative_and_bounded() {
        for column in ["wall_ms", "io_ms", "mgmt_ms", "cpu_ms"] {
            for bad in [
                "nan",
                "NaN",
                "inf",
                "-inf",
                "-1",
                "-0.001",
                "1e308",
                "1000000001",
            ] {
                let text = format!("step,{column}\n1,{bad}\n");
                let mut r = MetricsReader::new(text.as_bytes(), "t").expect("open");
                let e = r.next().expect("a row").expect_err(bad).to_string();
                assert!(
                    e.starts_with(&format!(
                        "t:2: column `{column}`: expected a duration in ms"
                    )),
                    "{column}={bad}: {e}"
                );
            }
            for good in ["0", "-0", "0.001", "18533.655", "1000000000"] {
                let text = format!("step,{column}\n1,{good}\n");
                let mut r = MetricsReader::new(text.as_bytes(), "t").expect("open");
                assert!(r.next().expect("a row").is_ok(), "{column}={good}");
            }
        }
        // A row wider than the header is a garbage or merged line, not a token.
        let mut r = MetricsReader::new("step,wall_ms\n1,2.0,oops\n".as_bytes(), "t").expect("open");
        let e = r.next().expect("a row").expect_err("wide").to_string();
        assert!(
            e.starts_with("t:2: 3 fields, but the header has 2 columns"),
            "{e}"
        );
        // Columns that are not durations keep their own conventions (-1 = no cache).
        let mut r =
            MetricsReader::new("step,cache_hit_pct\n1,-1.00\n".as_bytes(), "t").expect("open");
        assert_eq!(
            r.next().and_then(|x| x.ok()).and_then(|x| x.cache_hit_pct),
            Some(-1.0)
        );
        assert!(is_duration_column("loop_overhead_ms") && !is_duration_column("rss_mib"));
    }

    #[test]
    fn truncated_last_line_is_a_flag() {
        let text = "step,steps,wall_ms\n1,2,3.0\n2,2";
        let mut r = MetricsReader::new(text.as_bytes(), "t").expect("open");
        let rows: Vec<_> = r.by_ref().collect::<Result<_>>().expect("rows");
        assert_eq!(rows.len(), 1);
        assert_eq!(r.truncated().map(|t| t.line), Some(3));
    }

    #[test]
    fn bad_cell_names_line_and_column() {
        let text = "step,steps,wall_ms\n1,2,3.0\n2,2,abc\n3,2,1\n";
        let r = MetricsReader::new(text.as_bytes(), "f.csv").expect("open");
        let e = r
            .collect::<Result<Vec<_>>>()
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("f.csv:3") && e.contains("wall_ms"), "{e}");
    }

    #[test]
    fn mistyped_preamble_key() {
        let text = "# bmoe_metrics v2\n# model=x n_layer=abc\nstep\n";
        let e = MetricsReader::new(text.as_bytes(), "p.csv")
            .err()
            .expect("must fail")
            .to_string();
        assert!(e.contains("p.csv:2") && e.contains("n_layer"), "{e}");
    }

    fn info_of(preamble: &str) -> RunInfo {
        let text =
            format!("# bmoe_metrics v2\n# engine=t\n{preamble}\nstep,steps,wall_ms\n1,1,2.0\n");
        MetricsReader::new(text.as_bytes(), "i.csv")
            .expect("open")
            .run_info()
            .clone()
    }

    #[test]
    fn every_instrumented_key_marks_the_run_and_is_named() {
        // As bmoe-cli writes a plain run: the always-written keys at 0, the trace keys absent.
        let plain = "# model=m.gguf threads=4\n# moe_stream=1 predict_log=0 prefetch_sync=0\n# temp=0 compute_trace_layers=0";
        assert!(!info_of(plain).is_instrumented());
        assert!(info_of(plain).instrumented_by().is_empty());
        for (key, kind) in INSTRUMENTED_KEYS {
            let on = info_of(&format!("{plain}\n# {key}=1"));
            assert!(on.is_instrumented(), "{key}=1 must mark the run");
            assert_eq!(on.instrumented_by(), vec![(*key, *kind)], "{key}");
            let off = info_of(&format!("{plain}\n# {key}=0"));
            assert!(!off.is_instrumented(), "{key}=0 must not mark the run");
        }
        let traced = [
            "route_trace",
            "io_trace",
            "compute_trace",
            "compute_trace_layers",
        ];
        let probed = ["predict_log", "prefetch_sync"];
        for (key, kind) in INSTRUMENTED_KEYS {
            let want = if traced.contains(key) {
                Instrumentation::Traced
            } else {
                assert!(probed.contains(key), "{key}");
                Instrumentation::Probed
            };
            assert_eq!(*kind, want, "{key}");
        }
    }

    #[test]
    fn instrumentation_is_described_with_its_keys() {
        let info = info_of("# predict_log=1\n# route_trace=1 io_trace=1");
        assert_eq!(
            describe_instrumentation(&info.instrumented_by()),
            "traced (route_trace, io_trace), probed (predict_log)"
        );
        let raw = [("compute_trace", "on"), ("prefetch_sync", "0")];
        let keys = instrumented_keys(|k| raw.iter().find(|(n, _)| *n == k).map(|(_, v)| *v));
        assert_eq!(keys, vec![("compute_trace", Instrumentation::Traced)]);
        assert_eq!(describe_instrumentation(&keys), "traced (compute_trace)");
    }
}
