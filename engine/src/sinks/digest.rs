//! The end-of-run digest a person reads at a terminal: where a generated token's time went as
//! bmoe-top's four bars (`bmoe_telemetry::attribution`, drawn as text), what was streamed from
//! disk, and what the expert cache saved. The summary lines on stdout carry the same figures in
//! the contract's format for programs; this block is for a newcomer and goes to stderr, only
//! when stderr is a terminal, so nothing that parses the output sees it.

use super::report::RunSummary;
use bmoe_telemetry::attribution::{Threads, TokenTimes, bars};

const MIB: f64 = 1024.0 * 1024.0;

/// Cells of a full bar (100 % of the token's wall time).
const BAR_CELLS: usize = 20;

/// What the digest needs beyond the run's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DigestContext {
    /// I/O lanes (busy beside compute under `--overlap`).
    pub io_threads: u32,
    /// `--overlap` ran: the flash bar is the stall, not the lanes' busy time.
    pub overlap: bool,
    /// The cache budget, MiB (0 = off).
    pub cache_mb: u64,
    /// The prompt's expert reads, bytes.
    pub prefill_read_bytes: u64,
    /// A SIGINT stopped the generation before `-n`.
    pub interrupted: bool,
    /// The model is a synthetic one (random weights: its text means nothing).
    pub random_weights: bool,
}

/// `v` (≥ 0, of `of`) as a bar of [`BAR_CELLS`] cells, rounded to the nearest cell.
fn bar(v: f64, of: f64) -> String {
    let frac = if of > 0.0 {
        (v / of).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let full = ((frac * BAR_CELLS as f64).round() as usize).min(BAR_CELLS);
    format!("{}{}", "█".repeat(full), "░".repeat(BAR_CELLS - full))
}

fn bar_line(name: &str, ms: Option<f64>, wall_ms: f64, what: &str) -> String {
    match ms {
        Some(v) => {
            let pct = if wall_ms > 0.0 {
                100.0 * v / wall_ms
            } else {
                0.0
            };
            format!(
                "  {name:<13}{v:>9.3} ms  {}  {pct:>3.0}%  {what}",
                bar(v, wall_ms)
            )
        }
        None => format!(
            "  {name:<13}{:>12}  {}     {what}",
            "—",
            " ".repeat(BAR_CELLS)
        ),
    }
}

/// The digest's lines (without line ends).
pub fn digest_lines(s: &RunSummary, c: &DigestContext) -> Vec<String> {
    let mut out = Vec::new();
    let stopped = if c.interrupted { " before Ctrl-C" } else { "" };
    if s.n_gen == 0 {
        out.push(format!(
            "bmoe: no token was generated{stopped}: nothing to break down"
        ));
        return out;
    }
    let n = s.n_gen as f64;
    let st = s.stream.unwrap_or_default();
    let t = TokenTimes {
        wall_ms: s.decode_s / n * 1e3,
        io_ms: st.io_s / n * 1e3,
        stall_ms: st.stall_s.unwrap_or(0.0) / n * 1e3,
        mgmt_ms: s.mgmt_s() / n * 1e3,
        cpu_ms: s.cpu_s / n * 1e3,
    };
    let threads = Threads {
        compute: u32::try_from(s.threads).unwrap_or(u32::MAX),
        io: c.io_threads,
    };
    let b = bars(&t, threads, c.overlap);
    out.push(format!(
        "bmoe: where the time of the {} generated token(s){stopped} went, per token (bmoe-top's bars: measured, so they need not add up to 100 %):",
        s.n_gen
    ));
    let flash_what = if c.overlap {
        "compute waiting for expert reads (they run beside it)"
    } else {
        "waiting for expert reads from disk"
    };
    out.push(bar_line(
        "compute",
        b.compute_ms,
        t.wall_ms,
        &format!("CPU time ÷ {} compute thread(s)", s.threads),
    ));
    out.push(bar_line(
        "flash wait",
        Some(b.flash_wait_ms),
        t.wall_ms,
        flash_what,
    ));
    out.push(bar_line(
        "cache mgmt",
        Some(b.mgmt_ms),
        t.wall_ms,
        "cache lookups and evictions",
    ));
    out.push(bar_line(
        "unattributed",
        b.unattributed_ms,
        t.wall_ms,
        "off the CPU: other processes, swap-in, throttling",
    ));
    let tok_s = if s.decode_s > 0.0 {
        n / s.decode_s
    } else {
        0.0
    };
    out.push(format!(
        "  {:<13}{:>9.3} ms  per token in all ({tok_s:.1} tok/s)",
        "wall", t.wall_ms
    ));
    match s.stream {
        None => out.push(
            "  streamed     nothing: plain llama.cpp keeps every expert mapped (add --moe-stream to read only the routed ones from disk)"
                .to_string(),
        ),
        Some(st) => {
            let mut line = format!(
                "  streamed     {:.1} MiB of experts read from disk while generating ({:.2} MiB/token)",
                st.read_bytes as f64 / MIB,
                st.read_bytes as f64 / MIB / n
            );
            if c.prefill_read_bytes > 0 {
                line.push_str(&format!(
                    ", {:.1} MiB for the {}-token prompt",
                    c.prefill_read_bytes as f64 / MIB,
                    s.n_prompt
                ));
            }
            if st.expert_bytes > 0 {
                line.push_str(&format!(
                    "; all the model's experts are {:.1} MiB",
                    st.expert_bytes as f64 / MIB
                ));
            }
            out.push(line);
            out.push(cache_line(&st, c));
        }
    }
    if c.random_weights {
        out.push(
            "  text         random: this synthetic model has random weights; the bytes read and the times are real"
                .to_string(),
        );
    }
    out
}

/// What the cache did over the run (prompt included, as the `moe-cache:` line counts).
fn cache_line(st: &super::report::StreamSummary, c: &DigestContext) -> String {
    if c.cache_mb == 0 || st.lookups == 0 {
        return "  cache        off: each layer's routed experts were read again at every token (--cache-mb N keeps recent ones)".to_string();
    }
    let hit_pct = 100.0 * st.hits as f64 / st.lookups as f64;
    // the mean read of a missed expert, times the lookups that did not read
    let read = (st.read_bytes + c.prefill_read_bytes) as f64;
    let saved = if st.experts_read > 0 {
        st.hits as f64 * read / st.experts_read as f64
    } else {
        0.0
    };
    format!(
        "  cache        {} MiB answered {hit_pct:.1}% of {} expert lookups (prompt included): ≈ {:.1} MiB not read again",
        c.cache_mb,
        st.lookups,
        saved / MIB
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::report::StreamSummary;

    fn streamed() -> RunSummary {
        RunSummary {
            n_gen: 4,
            decode_s: 0.004,
            cpu_s: 0.004,
            threads: 2,
            n_prompt: 3,
            stream: Some(StreamSummary {
                read_bytes: 2 << 20,
                io_s: 0.001,
                mgmt_s: 0.0002,
                lookups: 16,
                hits: 12,
                experts_read: 4,
                expert_bytes: 8 << 20,
                spec: None,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_four_bars_are_the_panels_figures() {
        let c = DigestContext {
            io_threads: 4,
            cache_mb: 2,
            prefill_read_bytes: 1 << 20,
            random_weights: true,
            ..Default::default()
        };
        let lines = digest_lines(&streamed(), &c);
        // wall 1 ms; compute = 1 ms cpu ÷ 2 threads; flash 0.25; mgmt 0.05; rest 0.2
        assert_eq!(
            lines[1],
            format!(
                "  compute          0.500 ms  {}{}   50%  CPU time ÷ 2 compute thread(s)",
                "█".repeat(10),
                "░".repeat(10)
            )
        );
        assert!(
            lines[2].starts_with("  flash wait       0.250 ms  █████░"),
            "{}",
            lines[2]
        );
        assert!(
            lines[2].contains(" 25%  waiting for expert reads"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("0.050 ms  █░"), "{}", lines[3]);
        assert!(
            lines[4].starts_with("  unattributed     0.200 ms  ████░"),
            "{}",
            lines[4]
        );
        assert!(
            lines[5].contains("1.000 ms  per token in all (1000.0 tok/s)"),
            "{}",
            lines[5]
        );
        assert_eq!(
            lines[6],
            "  streamed     2.0 MiB of experts read from disk while generating (0.50 MiB/token), 1.0 MiB for the 3-token prompt; all the model's experts are 8.0 MiB"
        );
        // 12 hits × ((2 + 1) MiB ÷ 4 reads)
        assert_eq!(
            lines[7],
            "  cache        2 MiB answered 75.0% of 16 expert lookups (prompt included): ≈ 9.0 MiB not read again"
        );
        assert!(lines[8].contains("random weights"));
        // every line is text a terminal shows as is
        assert!(lines.iter().all(|l| !l.chars().any(char::is_control)));
    }

    #[test]
    fn plain_uncached_interrupted_and_empty_runs_say_what_they_are() {
        let mut s = streamed();
        s.cpu_s = 0.0;
        let c = DigestContext {
            interrupted: true,
            ..Default::default()
        };
        let lines = digest_lines(&s, &c);
        assert!(
            lines[0].contains("4 generated token(s) before Ctrl-C"),
            "{}",
            lines[0]
        );
        // unmeasured CPU: no compute bar and no remainder, rather than a made-up figure
        assert!(
            lines[1].contains('—') && !lines[1].contains('█'),
            "{}",
            lines[1]
        );
        assert!(lines[4].contains('—'), "{}", lines[4]);
        assert!(lines[7].starts_with("  cache        off"), "{}", lines[7]);
        s.stream = None;
        let plain = digest_lines(&s, &DigestContext::default());
        assert!(plain.last().unwrap().contains("add --moe-stream"));
        let none = digest_lines(&RunSummary::default(), &c);
        assert_eq!(
            none,
            vec!["bmoe: no token was generated before Ctrl-C: nothing to break down"]
        );
    }
}
