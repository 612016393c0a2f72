//! Per-run statistics from a metrics CSV and per-cell aggregation across repetitions.
//!
//! Definitions (design.md "Statistics"): a run's tok/s = tokens / Σ decode `wall_ms` after the
//! warm-up trim ([`bmoe_stats::RunStats`], a row without `wall_ms` counting as a 0 ms token);
//! its within-run interval is the percentile bootstrap of the mean `wall_ms` (bmoe-stats, fixed
//! seed) turned into tok/s (`1000 / mean`, endpoints swapped). Across repetitions: the mean of
//! per-run tok/s (llama-bench's `avg_ts`) ± a Student-t interval ([`bmoe_stats::t_quantile`]).
//! A cell's within-run interval is for that same mean: each resample redraws every run's tokens
//! and averages the runs' tok/s (see [`within_runs_ci`]).

use std::path::Path;

use anyhow::{Context, Result};
use bmoe_stats::{
    RunStats, SplitMix64, bootstrap_ratio_of_means_ci, mean, percentile_linear, t_quantile,
};
use bmoe_telemetry::metrics::{MetricsReader, TokenRow};
use serde::Serialize;

/// Bootstrap settings.
#[derive(Debug, Clone, Copy)]
pub struct Boot {
    /// Resamples.
    pub resamples: usize,
    /// Confidence level.
    pub level: f64,
    /// Seed.
    pub seed: u64,
}

/// One run's numbers: its decode statistics and what the report adds from the same rows.
#[derive(Debug, Clone, Default)]
pub struct RunFigures {
    /// Token rows used after the trim (rows without `wall_ms` count as 0 ms tokens), the rows
    /// trimmed, tok/s.
    pub decode: RunStats,
    /// Flash MiB per token.
    pub flash_mib_tok: f64,
    /// Cache hit %, from the trailer (else the last row); `None` = no cache.
    pub hit_pct: Option<f64>,
    /// Mean compute s/token.
    pub compute_s_tok: f64,
    /// Mean io s/token.
    pub io_s_tok: f64,
    /// Mean stall s/token.
    pub stall_s_tok: f64,
    /// Mean cache-management s/token.
    pub mgmt_s_tok: f64,
    /// Why the run is not a benchmark run (traced, probed, stochastic).
    pub flag: Option<String>,
    /// Comparability class (plain, lossy, replayed, instrumented, speculated): a cell
    /// averages only runs of one class.
    pub class: bmoe_telemetry::class::RunClass,
    /// Engine version from the preamble.
    pub engine: Option<String>,
    /// Compute threads from the preamble.
    pub threads: Option<u64>,
    /// Session runs: the figures of each turn (by the CSV's `turn` value), when there are
    /// several.
    pub turns: Vec<TurnFigures>,
}

/// One turn of a session run.
#[derive(Debug, Clone, Default)]
pub struct TurnFigures {
    /// The CSV's `turn` value.
    pub turn: u64,
    /// Its figures (untrimmed).
    pub stats: RunFigures,
}

/// Reads one run's CSV.
///
/// # Errors
/// The CSV cannot be read or has a malformed row.
pub fn run_stats(csv: &Path, trim: usize) -> Result<RunFigures> {
    let mut r =
        MetricsReader::open(csv).with_context(|| format!("cannot read {}", csv.display()))?;
    let mut rows = Vec::new();
    for row in r.by_ref() {
        rows.push(row.with_context(|| format!("malformed row in {}", csv.display()))?);
    }
    // A duration that is not one (NaN, inf, negative) would make the run's tok/s — and its
    // cell's mean — a wrong number: the run is rejected, saying where.
    for (i, row) in rows.iter().enumerate() {
        if let Some(w) = row.wall_ms
            && !(w.is_finite() && w >= 0.0)
        {
            anyhow::bail!(
                "{}: token row {} (step {}): wall_ms = {w} is not a duration",
                csv.display(),
                i + 1,
                row.step.map_or_else(|| "?".to_string(), |s| s.to_string())
            );
        }
    }
    let info = r.run_info().clone();
    let trailer_hit = r
        .summaries()
        .last()
        .and_then(|s| s.get_f64("cache_hit_pct"));
    let mut flags = Vec::new();
    let instrumented_by = info.instrumented_by();
    if !instrumented_by.is_empty() {
        flags.push(bmoe_telemetry::metrics::describe_instrumentation(
            &instrumented_by,
        ));
    }
    if info.is_stochastic() {
        flags.push("stochastic (temp>0)".to_string());
    }
    // Speculated runs are a class of their own (grouped apart, never averaged with plain
    // ones, nor mtp with ngram), not excluded: see `class` below.
    let flag = (!flags.is_empty()).then(|| flags.join(", "));
    let mut stats = stats_of(&rows, trim, trailer_hit);
    // A session CSV spans every turn (the `turn` column): each turn also gets its own figures,
    // untrimmed, with the hit rate of its last row.
    let mut turns: Vec<(u64, Vec<TokenRow>)> = Vec::new();
    for row in &rows {
        let t = row.turn.unwrap_or(0);
        match turns.last_mut() {
            Some((k, v)) if *k == t => v.push(*row),
            _ => turns.push((t, vec![*row])),
        }
    }
    if turns.len() > 1 {
        stats.turns = turns
            .iter()
            .map(|(k, v)| TurnFigures {
                turn: *k,
                stats: stats_of(v, 0, None),
            })
            .collect();
    }
    stats.flag = flag;
    stats.class = info.class(r.summaries());
    stats.engine = info.engine.clone();
    stats.threads = info.threads;
    Ok(stats)
}

/// The figures of a run (or of one turn of it) from its token rows, after trimming `trim`.
fn stats_of(rows: &[TokenRow], trim: usize, trailer_hit: Option<f64>) -> RunFigures {
    let decode = RunStats::zero_filling_missing(rows.iter().map(|x| x.wall_ms), trim);
    // One wall per row, so the trim of the walls is the trim of the rows.
    let used = &rows[decode.trimmed..];
    let n = used.len();
    let per = |f: fn(&TokenRow) -> Option<f64>| {
        if n == 0 {
            0.0
        } else {
            used.iter().map(|x| f(x).unwrap_or(0.0)).sum::<f64>() / n as f64 / 1000.0
        }
    };
    let read: f64 = used.iter().map(|x| x.read_bytes.unwrap_or(0) as f64).sum();
    let hit = trailer_hit
        .or_else(|| rows.last().and_then(|x| x.cache_hit_pct))
        .filter(|h| *h >= 0.0);
    RunFigures {
        decode,
        flash_mib_tok: if n == 0 {
            0.0
        } else {
            read / n as f64 / (1024.0 * 1024.0)
        },
        hit_pct: hit,
        compute_s_tok: per(|x| x.compute_ms),
        io_s_tok: per(|x| x.io_ms),
        stall_s_tok: per(|x| x.stall_ms),
        mgmt_s_tok: per(|x| x.mgmt_ms),
        flag: None,
        class: Default::default(),
        engine: None,
        threads: None,
        turns: Vec::new(),
    }
}

/// Percentile bootstrap interval of the cell's point estimate, the mean of per-run tok/s,
/// from token-level noise only: each resample redraws every run's `wall_ms` with replacement
/// (stratified by run, so a fast run and a slow run keep their weight of one run each),
/// recomputes each run's tok/s and averages them. Pooling the tokens of all runs instead would
/// give an interval for `1000 / mean wall`, which is a different number from the point and
/// can exclude it. `None` without tokens or resamples.
pub fn within_runs_ci(runs: &[&RunFigures], boot: Boot) -> Option<(f64, f64)> {
    if boot.resamples == 0 || runs.iter().all(|r| r.decode.wall_ms.is_empty()) {
        return None;
    }
    let mut rng = SplitMix64::new(boot.seed);
    let mut means = Vec::with_capacity(boot.resamples);
    for _ in 0..boot.resamples {
        let mut sum = 0.0;
        for r in runs.iter().map(|r| &r.decode) {
            let n = r.wall_ms.len();
            sum += if n == 0 {
                r.tok_s
            } else {
                let total: f64 = (0..n).map(|_| r.wall_ms[rng.below(n)]).sum();
                if total > 0.0 {
                    n as f64 * 1000.0 / total
                } else {
                    0.0
                }
            };
        }
        means.push(sum / runs.len() as f64);
    }
    means.sort_by(f64::total_cmp);
    let alpha = (1.0 - boot.level) / 2.0;
    Some((
        percentile_linear(&means, alpha),
        percentile_linear(&means, 1.0 - alpha),
    ))
}

/// Sample standard deviation (n − 1).
pub fn stddev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Fewest runs for which a Student-t interval is reported as a result. With 2 runs the
/// quantile is 12.7 and the interval is essentially the range of two numbers stretched ninefold:
/// it routinely reaches below 0 for a rate, which no reader should take as a finding.
pub const MIN_RUNS_FOR_CI: usize = 3;

/// Why an across-run interval over `n` runs of a positive quantity is uninformative, or `None`
/// when it can be presented as a result: fewer than [`MIN_RUNS_FOR_CI`] runs, or a lower bound
/// below 0 (the quantity cannot be negative, so the normal approximation has broken down).
pub fn interval_caveat(n: usize, (low, _high): (f64, f64)) -> Option<String> {
    let mut why = Vec::new();
    if n < MIN_RUNS_FOR_CI {
        why.push(format!("{n} runs (< {MIN_RUNS_FOR_CI})"));
    }
    if low < 0.0 {
        why.push("lower bound below 0 for a positive rate".to_string());
    }
    (!why.is_empty()).then(|| format!("uninformative: {}", why.join(", ")))
}

/// A cell's aggregate over its (benchmark) runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CellStats {
    /// Runs aggregated.
    pub runs: usize,
    /// Per-run tok/s (the samples).
    pub samples_ts: Vec<f64>,
    /// Mean of per-run tok/s.
    pub tok_s: f64,
    /// Sample standard deviation of per-run tok/s.
    pub tok_s_sd: f64,
    /// 95 % Student-t interval across repetitions, only when it is informative (see
    /// [`interval_caveat`]); `None` otherwise.
    pub reps_ci: Option<(f64, f64)>,
    /// The Student-t interval as computed (≥ 2 runs), informative or not.
    pub reps_ci_raw: Option<(f64, f64)>,
    /// Why the across-run interval is not a result (too few runs, a negative lower bound);
    /// `None` when it is one, or when there is no interval at all (one run).
    pub reps_ci_note: Option<String>,
    /// Within-run interval of `tok_s` (the mean of per-run tok/s): a bootstrap of each run's
    /// tokens, see [`within_runs_ci`].
    pub within_ci: Option<(f64, f64)>,
    /// Mean flash MiB/token.
    pub flash_mib_tok: f64,
    /// Mean cache hit %.
    pub hit_pct: Option<f64>,
    /// Mean compute s/token.
    pub compute_s_tok: f64,
    /// Mean io s/token.
    pub io_s_tok: f64,
    /// Mean stall s/token.
    pub stall_s_tok: f64,
    /// Mean management s/token.
    pub mgmt_s_tok: f64,
    /// Tokens per run (mean, after trim).
    pub tokens: f64,
}

/// Aggregates runs of one cell.
pub fn aggregate(runs: &[&RunFigures], boot: Boot) -> CellStats {
    let samples: Vec<f64> = runs.iter().map(|r| r.decode.tok_s).collect();
    let n = samples.len();
    let m = mean(&samples);
    let sd = stddev(&samples);
    let reps_ci_raw = (n >= 2).then(|| {
        // Always 95 %: [analysis] ci sets the level of the bootstrap intervals only.
        let h = t_quantile((n - 1) as f64, 0.975) * sd / (n as f64).sqrt();
        (m - h, m + h)
    });
    let reps_ci_note = reps_ci_raw.and_then(|ci| interval_caveat(n, ci));
    let reps_ci = reps_ci_raw.filter(|_| reps_ci_note.is_none());
    let within_ci = within_runs_ci(runs, boot);
    let avg = |f: fn(&RunFigures) -> f64| mean(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
    let hits: Vec<f64> = runs.iter().filter_map(|r| r.hit_pct).collect();
    CellStats {
        runs: n,
        samples_ts: samples,
        tok_s: m,
        tok_s_sd: sd,
        reps_ci,
        reps_ci_raw,
        reps_ci_note,
        within_ci,
        flash_mib_tok: avg(|r| r.flash_mib_tok),
        hit_pct: (!hits.is_empty()).then(|| mean(&hits)),
        compute_s_tok: avg(|r| r.compute_s_tok),
        io_s_tok: avg(|r| r.io_s_tok),
        stall_s_tok: avg(|r| r.stall_s_tok),
        mgmt_s_tok: avg(|r| r.mgmt_s_tok),
        tokens: avg(|r| r.decode.tokens() as f64),
    }
}

/// A ratio against the baseline with its interval and the method used.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// tok/s(cell) / tok/s(baseline).
    pub ratio: f64,
    /// Interval low.
    pub low: f64,
    /// Interval high.
    pub high: f64,
    /// `repetitions` (bootstrap over per-run tok/s), `tokens` (bootstrap over per-token wall)
    /// or `baseline` (the baseline cell itself: 1, no interval).
    pub method: &'static str,
    /// Why the interval is not a result (a bootstrap over fewer than [`MIN_RUNS_FOR_CI`] runs
    /// on a side can only draw a handful of distinct means); `None` when it is one.
    pub note: Option<String>,
}

impl Ratio {
    /// The baseline cell compared with itself: exactly 1, with no interval
    /// (`method` = `baseline`).
    pub fn baseline() -> Ratio {
        Ratio {
            ratio: 1.0,
            low: 1.0,
            high: 1.0,
            method: "baseline",
            note: None,
        }
    }
}

/// tok/s ratio of `cell` over `base`: across repetitions when both have ≥ 2 runs, else over
/// tokens (mean wall of the baseline / mean wall of the cell).
pub fn ratio(cell: &[&RunFigures], base: &[&RunFigures], boot: Boot) -> Option<Ratio> {
    if cell.len() >= 2 && base.len() >= 2 {
        let a: Vec<f64> = cell.iter().map(|r| r.decode.tok_s).collect();
        let b: Vec<f64> = base.iter().map(|r| r.decode.tok_s).collect();
        let ci = bootstrap_ratio_of_means_ci(&a, &b, boot.resamples, boot.level, boot.seed)?;
        let fewest = cell.len().min(base.len());
        return Some(Ratio {
            ratio: ci.estimate,
            low: ci.low,
            high: ci.high,
            method: "repetitions",
            note: (fewest < MIN_RUNS_FOR_CI)
                .then(|| format!("uninformative: {fewest} runs on a side (< {MIN_RUNS_FOR_CI})")),
        });
    }
    let a: Vec<f64> = base
        .iter()
        .flat_map(|r| r.decode.wall_ms.iter().copied())
        .collect();
    let b: Vec<f64> = cell
        .iter()
        .flat_map(|r| r.decode.wall_ms.iter().copied())
        .collect();
    let ci = bootstrap_ratio_of_means_ci(&a, &b, boot.resamples, boot.level, boot.seed)?;
    Some(Ratio {
        ratio: ci.estimate,
        low: ci.low,
        high: ci.high,
        method: "tokens",
        note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_table_and_sd() {
        // The quantile of the across-run interval: the closed forms for 1 and 2 degrees of
        // freedom, the published 3-decimal table beyond (the table this report once carried).
        let t975 = |df: f64| t_quantile(df, 0.975);
        assert!((t975(1.0) - 12.706_204_736_174_693).abs() < 1e-9); // tan(0.475 π)
        assert!((t975(2.0) - 4.302_652_729_749_462).abs() < 1e-9); // 0.95 / √(2 · 0.975 · 0.025)
        assert_eq!(format!("{:.3}", t975(1.0)), "12.706");
        assert_eq!(format!("{:.3}", t975(30.0)), "2.042");
        assert!((t975(40.0) - 2.021).abs() < 5e-4);
        assert!((stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) - 2.138_089_935).abs() < 1e-6);
    }

    #[test]
    fn aggregate_two_runs() {
        let r1 = RunFigures {
            decode: RunStats {
                wall_ms: vec![100.0, 100.0],
                trimmed: 0,
                tok_s: 10.0,
            },
            ..RunFigures::default()
        };
        let r2 = RunFigures {
            decode: RunStats {
                wall_ms: vec![200.0, 200.0],
                trimmed: 0,
                tok_s: 5.0,
            },
            ..RunFigures::default()
        };
        let boot = Boot {
            resamples: 500,
            level: 0.95,
            seed: 1,
        };
        let c = aggregate(&[&r1, &r2], boot);
        assert_eq!(c.tok_s, 7.5);
        let h = t_quantile(1.0, 0.975) * c.tok_s_sd / 2f64.sqrt();
        // 7.5 ± 12.706 × 3.536 / √2 = 7.5 ± 31.8: computed, but not a result.
        assert_eq!(c.reps_ci_raw, Some((7.5 - h, 7.5 + h)));
        assert_eq!(c.reps_ci, None);
        assert_eq!(
            c.reps_ci_note.as_deref(),
            Some("uninformative: 2 runs (< 3), lower bound below 0 for a positive rate")
        );
        // Both runs have constant walls: token noise cannot move either run's tok/s, so the
        // interval of their mean is the mean itself (pooling the tokens gave 5–10 here).
        assert_eq!(c.within_ci, Some((7.5, 7.5)));
    }

    #[test]
    fn intervals_are_results_only_from_three_runs_with_a_positive_lower_bound() {
        assert_eq!(interval_caveat(3, (1.0, 2.0)), None);
        assert_eq!(
            interval_caveat(2, (1.0, 2.0)).as_deref(),
            Some("uninformative: 2 runs (< 3)")
        );
        assert_eq!(
            interval_caveat(5, (-0.1, 2.0)).as_deref(),
            Some("uninformative: lower bound below 0 for a positive rate")
        );
        let run = |tok_s: f64| RunFigures {
            decode: RunStats {
                wall_ms: vec![1000.0 / tok_s],
                trimmed: 0,
                tok_s,
            },
            ..RunFigures::default()
        };
        let boot = Boot {
            resamples: 200,
            level: 0.95,
            seed: 1,
        };
        // 9, 10, 11: sd 1, t(2) = 4.303, half-width 4.303 / √3 = 2.484.
        let (a, b, c) = (run(9.0), run(10.0), run(11.0));
        let s = aggregate(&[&a, &b, &c], boot);
        let h = t_quantile(2.0, 0.975) / 3f64.sqrt();
        assert_eq!(s.reps_ci, Some((10.0 - h, 10.0 + h)));
        assert_eq!(s.reps_ci_note, None);
        // 1, 10, 19: sd 9, half-width 22.4 > the mean: flagged although n = 3.
        let (a, b, c) = (run(1.0), run(10.0), run(19.0));
        let s = aggregate(&[&a, &b, &c], boot);
        assert_eq!(s.reps_ci, None);
        assert!(s.reps_ci_raw.is_some_and(|(lo, _)| lo < 0.0));
        // One run: no interval at all, and nothing to flag.
        let s = aggregate(&[&a], boot);
        assert_eq!(
            (s.reps_ci, s.reps_ci_raw, s.reps_ci_note),
            (None, None, None)
        );
    }
}
