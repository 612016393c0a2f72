//! The readouts under the bars: CPU busy, cache hits, flash traffic.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::format::ms;
use crate::figures;
use crate::state::RunState;
use crate::theme::Theme;

/// Three rows: CPU busy (its own denominator: compute threads plus the lanes under overlap) with
/// major faults, the cumulative cache hit rate with the dense-weight residency, and flash MiB per
/// token with bandwidth and wait. The last token's figures, or per-token run averages (`avg`).
pub(super) struct Readouts<'a> {
    run: &'a RunState,
    theme: &'a Theme,
    avg: bool,
}

impl<'a> Readouts<'a> {
    /// Rows it draws.
    pub(super) const HEIGHT: u16 = 3;

    /// The readouts of `run`; run averages when `avg`.
    pub(super) fn new(run: &'a RunState, theme: &'a Theme, avg: bool) -> Self {
        Readouts { run, theme, avg }
    }
}

impl Widget for Readouts<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let (run, theme, avg) = (self.run, self.theme, self.avg);
        let lines = vec![
            diag_line(run, theme, avg),
            cache_line(run, theme, avg),
            flash_line(run, theme, avg),
        ];
        Paragraph::new(lines).render(area, buf);
    }
}

fn diag_line(run: &RunState, theme: &Theme, avg: bool) -> Line<'static> {
    let mut spans = vec![Span::raw(" ")];
    let busy = run.busy_threads();
    let (cpu, wall, faults) = if avg {
        let t = &run.totals;
        let s = run.summary.as_ref();
        let n = t.tokens.max(1) as f64;
        let wall = s
            .and_then(|s| s.s_tok.map(|x| x * 1000.0))
            .or_else(|| {
                s.and_then(|s| s.tok_s)
                    .filter(|r| *r > 0.0)
                    .map(|r| 1000.0 / r)
            })
            .unwrap_or(t.wall_ms / n);
        let cpu = s
            .and_then(|s| s.cpu_s_tok.map(|x| x * 1000.0))
            .unwrap_or(t.cpu_ms / n);
        let faults = s.and_then(|s| s.majflt_tok).unwrap_or(t.majflt as f64 / n);
        (cpu, wall, Some(faults))
    } else {
        match run.live() {
            Some(l) => (l.cpu_ms, l.wall_ms, Some(l.majflt)),
            None => (0.0, 0.0, None),
        }
    };
    // The platforms that cannot count faults cannot time CPU either: both read 0 there.
    let faults = faults.filter(|_| cpu > 0.0);
    match (figures::cpu_busy_pct(cpu, wall, busy), busy) {
        (Some(p), Some(b)) => spans.push(Span::raw(format!("CPU {p:.0}% busy of {b} thr"))),
        (None, None) if cpu > 0.0 => spans.push(Span::styled("CPU busy: threads ?", theme.dim())),
        _ => spans.push(Span::styled("CPU busy —", theme.dim())),
    }
    if faults.is_none() {
        spans.push(Span::styled(" · majflt —", theme.dim()));
    }
    if let Some(fl) = faults {
        spans.push(Span::raw(format!(
            " · majflt {}",
            if avg {
                format!("{fl:.1}/tok")
            } else if fl.fract() == 0.0 {
                format!("{fl:.0}")
            } else {
                // A speculative group's count split over its tokens need not be whole.
                format!("{fl:.1}")
            }
        )));
    }
    Line::from(spans)
}

fn cache_line(run: &RunState, theme: &Theme, avg: bool) -> Line<'static> {
    let mut spans = vec![Span::raw(" ")];
    let hit = if avg {
        run.summary
            .as_ref()
            .and_then(|s| s.cache_hit_pct)
            .filter(|h| *h >= 0.0)
            .or_else(|| run.last.as_ref().and_then(|l| l.cache_hit_pct))
    } else {
        run.last.as_ref().and_then(|l| l.cache_hit_pct)
    };
    spans.push(Span::raw(match hit {
        Some(h) => format!("cache hit {h:.1}% cumulative"),
        None => "cache hit —".to_string(),
    }));
    if hit.is_some()
        && let Some(d) = run.drops_reported()
    {
        spans.push(Span::styled(
            format!(" ⚠ drops inflate it: {d}"),
            theme.warn(),
        ));
    }
    let dense = run.last.as_ref().and_then(|l| l.dense_resident_frac);
    spans.push(Span::raw(match dense {
        Some(d) => format!(" · dense {:.1}%", d * 100.0),
        None => " · dense —".to_string(),
    }));
    Line::from(spans)
}

fn flash_line(run: &RunState, theme: &Theme, avg: bool) -> Line<'static> {
    if !run.streaming() {
        return Line::styled(
            " baseline (no --moe-stream): flash I/O, stall and cache hits are not observable",
            theme.dim(),
        );
    }
    let (read, bw, io, stall) = if avg {
        avg_flash(run)
    } else {
        match run.live() {
            Some(l) => (
                Some(l.read_mib),
                figures::flash_mib_s(l.read_mib, l.io_ms),
                l.io_ms,
                l.stall_ms,
            ),
            None => (None, None, 0.0, 0.0),
        }
    };
    let read = read.map_or_else(|| "—".into(), mib);
    let bw = bw.map_or_else(|| "—".into(), |b| format!("{b:.0}"));
    let (overlap, _) = run.overlap();
    let mut s = format!(" flash {read} MiB/tok · {bw} MiB/s");
    if overlap {
        s.push_str(&format!(" · stall {}", ms(stall)));
        s.push_str(&format!(" · lanes busy {}", ms(io)));
    } else {
        s.push_str(&format!(" · read wait {}", ms(io)));
    }
    Line::from(s)
}

/// MiB with two decimals below 1 (a small model reads a fraction of a MiB per token, and the
/// engine's `moe-stream:` line prints two), one above.
fn mib(v: f64) -> String {
    if v.abs() < 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// Run-average flash figures: MiB per token, MiB/s, read time and stall per token (ms).
///
/// The engine's own per-token read and bandwidth win (its `moe-stream:` line divides by the
/// tokens it generated and by the exact read time); otherwise the summary's total read is
/// divided by the summary's token count, and only without a summary by the rows seen. A total
/// with no token count to divide it by is unknown (`None`), never a total shown per token.
fn avg_flash(run: &RunState) -> (Option<f64>, Option<f64>, f64, f64) {
    let t = &run.totals;
    let rows = (t.tokens > 0).then_some(t.tokens as f64);
    let n = t.tokens.max(1) as f64;
    let Some(s) = run.summary.as_ref() else {
        let read = rows.map(|r| t.read_mib / r);
        let (io, stall) = (t.io_ms / n, t.stall_ms / n);
        return (
            read,
            read.and_then(|r| figures::flash_mib_s(r, io)),
            io,
            stall,
        );
    };
    let tokens = s.tokens.filter(|n| *n > 0).map(|n| n as f64).or(rows);
    let read = s.read_mib_tok.or_else(|| match s.read_mib {
        Some(r) => tokens.map(|n| r / n),
        None => rows.map(|r| t.read_mib / r),
    });
    let io = s.io_s_tok.map_or(t.io_ms / n, |x| x * 1000.0);
    let stall = s.stall_s_tok.map_or(t.stall_ms / n, |x| x * 1000.0);
    let bw = s
        .mib_s
        .or_else(|| read.and_then(|r| figures::flash_mib_s(r, io)));
    (read, bw, io, stall)
}
