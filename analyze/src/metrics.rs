//! Metrics CSVs (v0/v1/v2, read by column name through `bmoe-telemetry`): bench-analyze's
//! throughput / device-pressure / cache-sizing tables for a session directory, and per-run
//! statistics with bootstrap confidence intervals (design.md "Statistics").

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bmoe_stats::{
    BootstrapCi, bootstrap_mean_ci, bootstrap_ratio_of_means_ci, median, percentile_linear,
};
use bmoe_telemetry::kv::{KvMap, read_sidecar};
use bmoe_telemetry::metrics::{Instrumentation, MetricsFile, describe_instrumentation};

use crate::pyfmt::f;
use crate::{AnalyzeError, Result};

/// Resamples of every bootstrap (design.md).
pub const RESAMPLES: usize = 2000;
/// Fixed seed of every bootstrap, so reports are reproducible.
pub const SEED: u64 = 0x626d_6f65; // "bmoe"

const DASH: &str = "\u{2014}";

/// bench-analyze's configuration keys, in table order, with their labels.
const CONFIGS: [(&str, &str); 15] = [
    ("mmap", "solo mmap (no streaming)"),
    ("stream", "streaming O_DIRECT, cache 0, lane 4"),
    ("c2000_l2", "streaming + cache 2000 MiB, lane 2"),
    ("c2000_l4", "streaming + cache 2000 MiB, lane 4"),
    ("c4000_l2", "streaming + cache 4000 MiB, lane 2"),
    ("c4000_l4", "streaming + cache 4000 MiB, lane 4"),
    ("stream_ov", "streaming O_DIRECT + overlap, cache 0, lane 4"),
    ("c2000_l4_ov", "streaming + cache 2000 MiB, lane 4, overlap"),
    ("c4000_l4_ov", "streaming + cache 4000 MiB, lane 4, overlap"),
    (
        "c4000_l4_pf1",
        "streaming + cache 4000 MiB, lane 4, prefetch 1",
    ),
    (
        "c4000_l4_pf2",
        "streaming + cache 4000 MiB, lane 4, prefetch 2",
    ),
    (
        "c4000_l4_pf4",
        "streaming + cache 4000 MiB, lane 4, prefetch 4",
    ),
    ("base_ov", "fixed cache + overlap (reference)"),
    ("auto_ov", "auto-sized cache (--cache-mb auto) + overlap"),
    ("autocap_ov", "auto-sized cache, capped + overlap"),
];

const MODELS: [(&str, &str); 2] = [
    (
        "qwen",
        "Qwen3-30B-A3B-Q4_K_M (18.5 GB, 128 experts, top-8, 48 layers)",
    ),
    (
        "gemma",
        "Gemma-4-26B-A4B-it-Q4_K_M (17.0 GB, fused gate+up experts)",
    ),
];

/// Everything bench-analyze derives from one metrics CSV and its sidecar.
#[derive(Debug, Clone)]
pub struct RunStats {
    /// The CSV.
    pub path: PathBuf,
    /// Per-token wall times (ms) after the trim, zero-wall follower rows included
    /// ([`bmoe_stats::RunStats::skipping_missing`]: rows without a wall time are not tokens).
    pub walls: Vec<f64>,
    /// Aggregate decode tok/s = n / Σwall ([`bmoe_stats::RunStats::tok_s`]).
    pub mean_tps: f64,
    /// Per-token tok/s (1000/w for w > 0), ascending.
    pub tps: Vec<f64>,
    /// `cache_hit_pct` from the summary, as written.
    pub cache_hit: Option<String>,
    /// Flash read MiB per token.
    pub read_mib_tok: f64,
    /// Mean `stall_ms` when the column exists.
    pub stall_ms: Option<f64>,
    /// Summary `prefill_tps`.
    pub prefill_tps: f64,
    /// `load_s + prefill_s`.
    pub ttft_s: f64,
    /// Summary `cache_budget_MiB`.
    pub cache_budget_mib: f64,
    /// Summary `cache_resident_MiB`.
    pub cache_resident_mib: f64,
    /// Speculative read MiB per token.
    pub spec_read_mib_tok: f64,
    /// Useful share of speculative experts (%).
    pub spec_useful_pct: f64,
    /// Sidecar peak RSS (GiB).
    pub peak_rss_gb: f64,
    /// Sidecar free-RAM floor (GiB).
    pub ram_floor_gb: f64,
    /// Sidecar CPU temperature at start (°C).
    pub cpu_start_c: f64,
    /// Sidecar CPU temperature max (°C).
    pub cpu_max_c: f64,
    /// Sidecar battery temperature max (°C).
    pub batt_max_c: f64,
    /// Run was traced/probed (any of [`bmoe_telemetry::metrics::INSTRUMENTED_KEYS`]): not a
    /// benchmark.
    pub instrumented: bool,
    /// The preamble keys that made it instrumented, with their kind (empty when it was not).
    pub instrumented_by: Vec<(&'static str, Instrumentation)>,
    /// Sampling was stochastic (`temp>0`).
    pub stochastic: bool,
    /// Comparability class (plain, lossy, replayed, instrumented, speculated): runs of
    /// different classes are never averaged or tabled together.
    pub class: bmoe_telemetry::class::RunClass,
}

fn num(map_get: Option<&str>) -> f64 {
    map_get
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .unwrap_or(0.0)
}

/// The sidecar of `x.csv` is `x.metrics` (only the extension is replaced; the reference
/// replaced every `.csv` in the path).
#[must_use]
pub fn sidecar_path(csv: &Path) -> PathBuf {
    csv.with_extension("metrics")
}

impl RunStats {
    /// Read a metrics CSV and its sidecar. `Ok(None)` when the file has no `wall_ms` value.
    pub fn read(path: &Path, trim: usize) -> Result<Option<Self>> {
        let file = MetricsFile::read(path).map_err(|e| AnalyzeError::from_telemetry(path, e))?;
        // Every metrics view reads its runs here once, so the cut is noted once per file.
        crate::decode::note_cut(path, file.truncated.as_ref());
        let decode =
            bmoe_stats::RunStats::skipping_missing(file.rows.iter().map(|r| r.wall_ms), trim);
        if decode.wall_ms.is_empty() {
            return Ok(None);
        }
        let summ = |key: &str| file.summaries.iter().rev().find_map(|s| s.get(key));
        let n = decode.tokens() as f64;
        let tps = decode.token_rates();
        let stalls: Vec<f64> = file.rows.iter().filter_map(|r| r.stall_ms).collect();
        let side: KvMap = {
            let sp = sidecar_path(path);
            if sp.is_file() {
                read_sidecar(&sp).map_err(|e| AnalyzeError::from_telemetry(&sp, e))?
            } else {
                KvMap::new()
            }
        };
        let spec_experts = num(summ("spec_experts"));
        Ok(Some(Self {
            path: path.to_path_buf(),
            mean_tps: decode.tok_s,
            tps,
            cache_hit: summ("cache_hit_pct").map(str::to_string),
            read_mib_tok: num(summ("read_MiB")) / n,
            stall_ms: if stalls.is_empty() {
                None
            } else {
                Some(stalls.iter().fold(0.0, |a, b| a + b) / stalls.len() as f64)
            },
            prefill_tps: num(summ("prefill_tps")),
            ttft_s: num(summ("load_s")) + num(summ("prefill_s")),
            cache_budget_mib: num(summ("cache_budget_MiB")),
            cache_resident_mib: num(summ("cache_resident_MiB")),
            spec_read_mib_tok: num(summ("spec_read_MiB")) / n,
            spec_useful_pct: if spec_experts > 0.0 {
                100.0 * num(summ("spec_useful")) / spec_experts
            } else {
                0.0
            },
            peak_rss_gb: num(side.get("peak_rss_kb")) / 1_048_576.0,
            ram_floor_gb: num(side.get("mem_avail_floor_kb")) / 1_048_576.0,
            cpu_start_c: num(side.get("cpu_temp_before_mC")) / 1000.0,
            cpu_max_c: num(side.get("cpu_temp_max_mC")) / 1000.0,
            batt_max_c: num(side.get("batt_temp_max_dC")) / 10.0,
            instrumented: file.info.is_instrumented(),
            instrumented_by: file.info.instrumented_by(),
            stochastic: file.info.is_stochastic(),
            class: file.info.class(&file.summaries),
            walls: decode.wall_ms,
        }))
    }

    fn min(&self) -> f64 {
        self.tps.first().copied().unwrap_or(0.0)
    }
    fn max(&self) -> f64 {
        self.tps.last().copied().unwrap_or(0.0)
    }
    fn median(&self) -> f64 {
        median(&self.tps)
    }
    fn p95(&self) -> f64 {
        percentile_linear(&self.tps, 0.95)
    }
    fn hit(&self) -> String {
        match self.cache_hit.as_deref().map(str::trim) {
            None | Some("-") => DASH.to_string(),
            Some(s) => match s.parse::<f64>() {
                Ok(v) if v >= 0.0 => format!("{}%", f(v, 0)),
                _ => DASH.to_string(),
            },
        }
    }
    fn stall(&self) -> String {
        self.stall_ms.map_or_else(|| DASH.to_string(), |s| f(s, 1))
    }

    /// The throughput figures as both layouts print them: decode tok/s mean, min, max, median
    /// and p95, prefill tok/s, TTFT s, cache hit, flash MiB/token, stall ms/token.
    fn throughput_cells(&self) -> [String; 10] {
        [
            f(self.mean_tps, 2),
            f(self.min(), 2),
            f(self.max(), 2),
            f(self.median(), 2),
            f(self.p95(), 2),
            f(self.prefill_tps, 2),
            f(self.ttft_s, 1),
            self.hit(),
            f(self.read_mib_tok, 0),
            self.stall(),
        ]
    }

    /// The device-pressure figures: peak RSS and free-RAM floor (GB), CPU temperature at start
    /// and at most, battery temperature at most (°C).
    fn pressure_cells(&self) -> [String; 5] {
        [
            f(self.peak_rss_gb, 2),
            f(self.ram_floor_gb, 2),
            f(self.cpu_start_c, 1),
            f(self.cpu_max_c, 1),
            f(self.batt_max_c, 1),
        ]
    }
    fn sizing(&self) -> bool {
        self.cache_budget_mib > 0.0 || self.spec_read_mib_tok > 0.0
    }

    /// Bootstrap 95 % CI of the mean token time (ms).
    #[must_use]
    pub fn token_ms_ci(&self) -> Option<BootstrapCi> {
        bootstrap_mean_ci(&self.walls, RESAMPLES, 0.95, SEED)
    }
}

/// One run of a bench-analyze session directory: `<model>_<config>.csv`.
#[derive(Debug, Clone)]
pub struct BenchRun {
    /// Model key (`qwen`, `gemma`).
    pub model: &'static str,
    /// Configuration key (`mmap`, `c2000_l4`, …).
    pub config: &'static str,
    /// The configuration's label in the tables.
    pub label: &'static str,
    /// The run's figures.
    pub run: RunStats,
}

/// bench-analyze over a session directory.
#[derive(Debug, Clone)]
pub struct BenchDir {
    /// The stdout tables (throughput, device pressure, cache-sizing title), per model.
    pub text: String,
    /// The markdown summary (`--markdown`).
    pub markdown: String,
    /// The runs found, in table order (model, then configuration).
    pub runs: Vec<BenchRun>,
}

/// `Some(v)` when `v` is a measured (non-negative, finite) cache hit rate.
fn hit_pct(raw: Option<&str>) -> Option<f64> {
    raw.and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
}

impl BenchDir {
    /// The figures of the text and markdown tables, unrounded, as `--format json|csv` prints
    /// them: `throughput` and `pressure` (one row per run, the stdout tables), `sizing` (the
    /// markdown's cache-sizing rows); `null` where the text prints a dash.
    #[must_use]
    pub fn tables(&self) -> Vec<crate::table::Table> {
        use crate::table::{Table, num};
        use serde_json::{Value, json};
        let opt = |v: Option<f64>| v.map_or(Value::Null, num);
        let mut throughput = Table::new(
            "throughput",
            &[
                "model",
                "config",
                "label",
                "path",
                "decode_tps_mean",
                "decode_tps_min",
                "decode_tps_max",
                "decode_tps_median",
                "decode_tps_p95",
                "prefill_tps",
                "ttft_s",
                "cache_hit_pct",
                "read_mib_per_token",
                "stall_ms_per_token",
            ],
        );
        let mut pressure = Table::new(
            "pressure",
            &[
                "model",
                "config",
                "label",
                "peak_rss_gb",
                "ram_floor_gb",
                "cpu_start_c",
                "cpu_max_c",
                "batt_max_c",
            ],
        );
        let mut sizing = Table::new(
            "sizing",
            &[
                "model",
                "config",
                "label",
                "cache_budget_mib",
                "cache_resident_mib",
                "prefetch_useful_pct",
                "prefetch_read_mib_per_token",
            ],
        );
        for b in &self.runs {
            let r = &b.run;
            let key = [json!(b.model), json!(b.config), json!(b.label)];
            let mut row = key.to_vec();
            row.extend([
                json!(r.path.display().to_string()),
                num(r.mean_tps),
                num(r.min()),
                num(r.max()),
                num(r.median()),
                num(r.p95()),
                num(r.prefill_tps),
                num(r.ttft_s),
                opt(hit_pct(r.cache_hit.as_deref())),
                num(r.read_mib_tok),
                opt(r.stall_ms),
            ]);
            throughput.push(row);
            let mut row = key.to_vec();
            row.extend([
                num(r.peak_rss_gb),
                num(r.ram_floor_gb),
                num(r.cpu_start_c),
                num(r.cpu_max_c),
                num(r.batt_max_c),
            ]);
            pressure.push(row);
            if r.sizing() {
                let spec = r.spec_read_mib_tok > 0.0;
                let mut row = key.to_vec();
                row.extend([
                    opt((r.cache_budget_mib > 0.0).then_some(r.cache_budget_mib)),
                    num(r.cache_resident_mib),
                    opt(spec.then_some(r.spec_useful_pct)),
                    opt(spec.then_some(r.spec_read_mib_tok)),
                ]);
                sizing.push(row);
            }
        }
        vec![throughput, pressure, sizing]
    }
}

/// bench-analyze over a session directory: stdout tables, the markdown summary and the runs.
pub fn bench_dir(dir: &Path) -> Result<BenchDir> {
    if !dir.is_dir() {
        return Err(AnalyzeError::Invalid {
            message: format!("{}: not a directory", dir.display()),
            hint:
                "pass a session directory holding <model>_<config>.csv files, or metrics CSV files"
                    .into(),
        });
    }
    let mut out = String::new();
    let mut md = String::new();
    let mut all = Vec::new();
    for (model, title) in MODELS {
        let mut runs: Vec<(&str, Option<RunStats>)> = Vec::new();
        let mut keys: Vec<&'static str> = Vec::new();
        for (key, label) in CONFIGS {
            let path = dir.join(format!("{model}_{key}.csv"));
            let run = if path.is_file() {
                RunStats::read(&path, 0)?
            } else {
                None
            };
            runs.push((label, run));
            keys.push(key);
        }
        let upper = model.to_uppercase();
        let _ = writeln!(out, "\n===== {upper} {DASH} throughput =====");
        let _ = writeln!(
            out,
            "{:<36} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>6} {:>7}",
            "config", "mean", "min", "max", "med", "p95", "pref", "TTFT", "hit", "MiB/t", "stall"
        );
        for (label, r) in &runs {
            let Some(r) = r else { continue };
            let [mean, min, max, med, p95, pref, ttft, hit, mib, stall] = r.throughput_cells();
            let _ = writeln!(
                out,
                "{label:<36} {mean:>6} {min:>6} {max:>6} {med:>6} {p95:>6} {pref:>6} {ttft:>6} {hit:>5} {mib:>5}M {stall:>7}",
            );
        }
        let _ = writeln!(out, "\n===== {upper} {DASH} device pressure =====");
        let _ = writeln!(
            out,
            "{:<36} {:>8} {:>9} {:>6} {:>7} {:>8}",
            "config", "peakRSS", "RAMfloor", "CPU0", "CPUmax", "battMax"
        );
        for (label, r) in &runs {
            let Some(r) = r else { continue };
            let [rss, floor, cpu0, cpu_max, batt_max] = r.pressure_cells();
            let _ = writeln!(
                out,
                "{label:<36} {rss:>6}GB {floor:>7}GB {cpu0:>5}C {cpu_max:>6}C {batt_max:>7}C",
            );
        }
        let sizing = runs
            .iter()
            .any(|(_, r)| r.as_ref().is_some_and(RunStats::sizing));
        if sizing {
            let _ = writeln!(
                out,
                "\n===== {upper} {DASH} cache sizing / temporal prefetch ====="
            );
        }
        // Markdown.
        let _ = writeln!(md, "\n### {title}\n");
        md.push_str(
            "**Throughput** (tok/s; mean = aggregate decode, prefill = prompt-processing):\n\n",
        );
        md.push_str("| Config | decode mean | min | max | median | p95 | prefill tok/s | TTFT (s) | cache hit | flash read/token | stall ms/tok |\n");
        md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (label, r) in &runs {
            match r {
                None => {
                    let _ = writeln!(md, "| {label} |{}", format!(" {DASH} |").repeat(10));
                }
                Some(r) => {
                    let [mean, min, max, med, p95, pref, ttft, hit, mib, stall] =
                        r.throughput_cells();
                    let _ = writeln!(
                        md,
                        "| {label} | **{mean}** | {min} | {max} | {med} | {p95} | {pref} | {ttft} | {hit} | {mib} MiB | {stall} |",
                    );
                }
            }
        }
        md.push_str("\n**Device pressure** (peak process RSS, free-RAM floor, SoC/battery temperature):\n\n");
        md.push_str("| Config | peak RSS | free-RAM floor | CPU start | CPU max | battery max |\n");
        md.push_str("|---|---:|---:|---:|---:|---:|\n");
        for (label, r) in &runs {
            match r {
                None => {
                    let _ = writeln!(md, "| {label} |{}", format!(" {DASH} |").repeat(5));
                }
                Some(r) => {
                    let [rss, floor, cpu0, cpu_max, batt_max] = r.pressure_cells();
                    let _ = writeln!(
                        md,
                        "| {label} | {rss} GB | {floor} GB | {cpu0} \u{b0}C | {cpu_max} \u{b0}C | {batt_max} \u{b0}C |",
                    );
                }
            }
        }
        if sizing {
            md.push_str("\n**Cache sizing & temporal prefetch** (the budget `--cache-mb auto` chose at init and what stayed resident under it; speculative read volume and useful-hit rate under `--prefetch`):\n\n");
            md.push_str(
                "| Config | cache budget | resident | prefetch useful | prefetch read/token |\n",
            );
            md.push_str("|---|---:|---:|---:|---:|\n");
            for (label, r) in &runs {
                let Some(r) = r.as_ref().filter(|r| r.sizing()) else {
                    continue;
                };
                let budget = if r.cache_budget_mib > 0.0 {
                    format!("{} MiB", f(r.cache_budget_mib, 0))
                } else {
                    DASH.to_string()
                };
                let (useful, read) = if r.spec_read_mib_tok > 0.0 {
                    (
                        format!("{}%", f(r.spec_useful_pct, 0)),
                        format!("{} MiB", f(r.spec_read_mib_tok, 0)),
                    )
                } else {
                    (DASH.to_string(), DASH.to_string())
                };
                let _ = writeln!(
                    md,
                    "| {label} | {budget} | {} MiB | {useful} | {read} |",
                    f(r.cache_resident_mib, 0)
                );
            }
        }
        all.extend(
            runs.into_iter()
                .zip(keys)
                .filter_map(|((label, r), config)| {
                    r.map(|run| BenchRun {
                        model,
                        config,
                        label,
                        run,
                    })
                }),
        );
    }
    Ok(BenchDir {
        text: out,
        markdown: md,
        runs: all,
    })
}

fn run_label(r: &RunStats) -> String {
    let mut s = r.path.display().to_string();
    if r.instrumented {
        let _ = write!(s, " [{}]", describe_instrumentation(&r.instrumented_by));
    }
    if r.stochastic {
        s.push_str(" [stochastic]");
    }
    if !r.class.is_plain() {
        let _ = write!(s, " [{}]", r.class.describe());
    }
    s
}

/// The runs split by comparability class, in order of each class's first run; one group
/// (the input, unchanged) when every run shares a class.
#[must_use]
pub fn class_groups(runs: &[RunStats]) -> Vec<(String, Vec<RunStats>)> {
    let mut groups: Vec<(String, Vec<RunStats>)> = Vec::new();
    for r in runs {
        let key = r.class.key();
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(r.clone()),
            None => groups.push((key, vec![r.clone()])),
        }
    }
    groups
}

/// The stderr note when runs of several classes were given: which files were kept apart
/// and why. `None` when there is one class.
#[must_use]
pub fn class_note(groups: &[(String, Vec<RunStats>)]) -> Option<String> {
    if groups.len() < 2 {
        return None;
    }
    let mut s = format!(
        "note: {} comparability classes, kept apart (never averaged or tabled together):",
        groups.len()
    );
    for (key, runs) in groups {
        let files: Vec<String> = runs.iter().map(|r| r.path.display().to_string()).collect();
        let why = runs.first().map(|r| r.class.describe()).unwrap_or_default();
        let _ = write!(s, "\n  {key}: {} — {why}", files.join(", "));
    }
    Some(s)
}

/// [`runs_table`] per class: one table under a `== class: <key> ==` heading per class when
/// the runs span several, the plain table itself when they share one plain class.
#[must_use]
pub fn runs_table_by_class(groups: &[(String, Vec<RunStats>)]) -> String {
    match groups {
        [] => runs_table(&[]),
        [(k, runs)] if k == "plain" => runs_table(runs),
        _ => {
            let mut out = String::new();
            for (i, (key, runs)) in groups.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                let _ = writeln!(out, "== class: {key} ==");
                out.push_str(&runs_table(runs));
            }
            out
        }
    }
}

/// Per-run statistics table with the bootstrap CI of the mean token time.
#[must_use]
pub fn runs_table(runs: &[RunStats]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7} {:>12} {:>23} {:>8} {:>8}  run",
        "tokens", "mean ms/tok", "95% CI (bootstrap)", "tok/s", "median"
    );
    for r in runs {
        let (mean, ci) = match r.token_ms_ci() {
            Some(c) => (
                f(c.estimate, 2),
                format!("[{}, {}]", f(c.low, 2), f(c.high, 2)),
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "{:>7} {mean:>12} {ci:>23} {:>8} {:>8}  {}",
            r.walls.len(),
            f(r.mean_tps, 2),
            f(r.median(), 2),
            run_label(r)
        );
    }
    out.push_str(
        "(mean ms/tok over every token row; CI: 2000 resamples, percentile interval, fixed seed)\n",
    );
    out
}

/// The ratio of mean token time A / B with its bootstrap 95 % CI (`None` when B's mean is 0);
/// the one computation behind `--compare`'s text, JSON, CSV and plot.
#[must_use]
pub fn ratio_ci(a: &RunStats, b: &RunStats) -> Option<BootstrapCi> {
    bootstrap_ratio_of_means_ci(&a.walls, &b.walls, RESAMPLES, 0.95, SEED)
}

/// [`ratio_ci`], or the error `--compare` reports when B's mean token time is 0.
///
/// # Errors
/// [`AnalyzeError::Invalid`] naming B.
pub fn require_ratio_ci(a: &RunStats, b: &RunStats) -> Result<BootstrapCi> {
    ratio_ci(a, b).ok_or_else(|| AnalyzeError::Invalid {
        message: format!(
            "cannot compare: {} has a zero mean token time",
            b.path.display()
        ),
        hint: "compare two runs with decode rows".into(),
    })
}

/// What a ratio's CI says about which run is faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The interval lies below 1.
    AFaster,
    /// The interval lies above 1.
    BFaster,
    /// The interval contains 1.
    NoDifference,
}

impl Verdict {
    /// The verdict of `ci`.
    #[must_use]
    pub fn of(ci: &BootstrapCi) -> Self {
        if ci.high < 1.0 {
            Self::AFaster
        } else if ci.low > 1.0 {
            Self::BFaster
        } else {
            Self::NoDifference
        }
    }

    /// Short form (plot titles).
    #[must_use]
    pub fn short(self) -> &'static str {
        match self {
            Self::AFaster => "A is faster",
            Self::BFaster => "B is faster",
            Self::NoDifference => "no significant difference",
        }
    }

    /// Why, as `--compare` prints it.
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::AFaster | Self::BFaster => "the interval excludes 1",
            Self::NoDifference => "the interval contains 1",
        }
    }
}

/// `--compare A B`: ratio of mean token time A / B with its bootstrap CI.
pub fn compare(a: &RunStats, b: &RunStats) -> Result<String> {
    let ci = require_ratio_ci(a, b)?;
    let mut out = String::new();
    let _ = writeln!(out, "A = {}", run_label(a));
    let _ = writeln!(out, "B = {}", run_label(b));
    let _ = writeln!(
        out,
        "mean token time A/B = {} (95% CI {} .. {}; {} vs {} ms/tok)",
        f(ci.estimate, 3),
        f(ci.low, 3),
        f(ci.high, 3),
        f(bmoe_stats::mean(&a.walls), 2),
        f(bmoe_stats::mean(&b.walls), 2)
    );
    let verdict = Verdict::of(&ci);
    let _ = writeln!(out, "{} ({})", verdict.short(), verdict.reason());
    if a.instrumented != b.instrumented || a.stochastic != b.stochastic {
        out.push_str("warning: one run is traced or stochastic and the other is not; the ratio mixes run kinds\n");
    }
    if a.class.key() != b.class.key() {
        let _ = writeln!(
            out,
            "warning: A is {} and B is {}: different comparability classes, the ratio is a trade, not a like-for-like speed-up",
            a.class.describe(),
            b.class.describe()
        );
    }
    Ok(out)
}

/// Machine-readable per-run statistics.
#[must_use]
pub fn runs_json(runs: &[RunStats]) -> serde_json::Value {
    serde_json::Value::Array(
        runs.iter()
            .map(|r| {
                let ci = r.token_ms_ci();
                let by: Vec<&str> = r.instrumented_by.iter().map(|(k, _)| *k).collect();
                let mut v = serde_json::json!({
                    "path": r.path.display().to_string(),
                    "tokens": r.walls.len(),
                    "mean_ms_per_token": ci.map(|c| c.estimate),
                    "ci95_low_ms": ci.map(|c| c.low),
                    "ci95_high_ms": ci.map(|c| c.high),
                    "tok_per_s": r.mean_tps,
                    "median_tok_per_s": r.median(),
                    "p95_tok_per_s": r.p95(),
                    "instrumented": r.instrumented,
                    "instrumented_by": by,
                    "stochastic": r.stochastic,
                });
                // Only a non-plain run carries its class, so plain output keeps its shape.
                if !r.class.is_plain()
                    && let Some(o) = v.as_object_mut()
                {
                    o.insert("class".into(), r.class.key().into());
                    o.insert("class_by".into(), r.class.describe().into());
                }
                v
            })
            .collect(),
    )
}
