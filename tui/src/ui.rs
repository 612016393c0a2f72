//! Drawing: a pure function of [`App`] and [`Theme`] onto a ratatui frame.
//!
//! Narrow terminals (under 120 columns) stack telemetry over one bottom pane that `t` switches
//! between the answer and the run details; wide ones put the answer on the right.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Sparkline, Wrap};

use crate::clean::clean;
use crate::figures::{self, Bars, FlashTerm};
use crate::session::TurnState;
use crate::state::{App, Focus, Known, RunState, SourceKind, Speed};
use crate::theme::Theme;

/// Smallest terminal the panel draws into; below it a one-line notice is shown.
pub const MIN_SIZE: (u16, u16) = (60, 16);
/// Width from which the answer moves to its own column.
pub const WIDE: u16 = 120;

const LABEL_W: usize = 15;
const VALUE_W: usize = 24;

/// Draws the whole panel.
pub fn draw(f: &mut Frame, app: &App, theme: &Theme) {
    let area = f.area();
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        let msg = format!(
            "terminal {}×{} is too small: bmoe-top needs {}×{} (q quits)",
            area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
        );
        f.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let session = app.kind == SourceKind::Session;
    let [header, body, prompt, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(u16::from(session)),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(header_line(app, theme, header.width), header);
    f.render_widget(status_line(app, theme), status);
    if session {
        f.render_widget(prompt_line(app, theme, prompt.width), prompt);
    }

    let wide = area.width >= WIDE;
    let left_w = if wide {
        (area.width * 52 / 100).clamp(84, 110)
    } else {
        area.width
    };
    let summary = summary_lines(&app.run, theme, left_w);
    let summary_h = summary.len() as u16;
    if wide {
        let [left, right] =
            Layout::horizontal([Constraint::Length(left_w), Constraint::Min(30)]).areas(body);
        let [tele, summ, details] = Layout::vertical([
            Constraint::Length(TELEMETRY_H),
            Constraint::Length(summary_h),
            Constraint::Min(3),
        ])
        .areas(left);
        telemetry(f, app, theme, tele);
        f.render_widget(Paragraph::new(summary), summ);
        details_pane(f, app, theme, details);
        answer_pane(f, app, theme, right);
    } else {
        let [tele, summ, bottom] = Layout::vertical([
            Constraint::Length(TELEMETRY_H),
            Constraint::Length(summary_h),
            Constraint::Min(3),
        ])
        .areas(body);
        telemetry(f, app, theme, tele);
        f.render_widget(Paragraph::new(summary), summ);
        match app.focus {
            Focus::Answer => answer_pane(f, app, theme, bottom),
            Focus::Telemetry => details_pane(f, app, theme, bottom),
        }
    }
    if app.help {
        help_popup(f, theme, area, session);
    }
}

/// Session mode: the prompt being typed, the next request's settings, and the key hints (or why
/// the last Enter / Esc did nothing).
fn prompt_line(app: &App, theme: &Theme, width: u16) -> Paragraph<'static> {
    let c = &app.composer;
    let mut flags = vec![if c.new_chat { "new chat" } else { "continue" }.to_string()];
    if !c.think {
        flags.push("think off".into());
    }
    if let Some(n) = c.n_predict {
        flags.push(format!("n {n}"));
    }
    let mode = format!("[{}]", flags.join(", "));
    let typed_w = c.input.chars().count() + 4;
    let right = match &c.notice {
        Some(n) => format!(" ⚠ {n} "),
        None => {
            // Hints give way to a long prompt; the mode tag stays.
            let full = format!(" {mode} Enter send · Esc cancel · F1 help ");
            if typed_w + full.chars().count() <= width as usize {
                full
            } else {
                format!(" {mode} ")
            }
        }
    };
    let right_w = right.chars().count();
    let room = (width as usize).saturating_sub(right_w + 4).max(8);
    // The tail of a long prompt stays visible, as in any line editor.
    let typed = clean(&c.input, false);
    let n = typed.chars().count();
    let shown: String = if n > room {
        let tail: String = typed.chars().skip(n - room + 1).collect();
        format!("…{tail}")
    } else {
        typed
    };
    let used = 3 + shown.chars().count() + 1;
    let pad = (width as usize).saturating_sub(used + right_w);
    Paragraph::new(Line::from(vec![
        Span::styled(" › ", theme.headline()),
        Span::raw(shown),
        Span::styled("█", theme.dim()),
        Span::raw(" ".repeat(pad)),
        Span::styled(
            right,
            if c.notice.is_some() {
                theme.warn()
            } else {
                theme.dim()
            },
        ),
    ]))
}

/// Session mode: where the conversation stands, for the status line.
pub fn session_state(run: &RunState) -> String {
    let s = &run.session;
    if let Some((true, msg)) = &s.orphan_error {
        return format!("fatal: {}", truncate(&clean(msg, false), 40));
    }
    let ready = match &s.ready {
        None => return "loading the model".into(),
        Some(r) => r,
    };
    match s.turns.last() {
        None => format!("ready ({:.1} s load)", ready.load_s),
        Some(t) => match &t.state {
            TurnState::Sent => format!("#{} sent", t.id),
            TurnState::Generating if s.cancel_pending => format!("#{} cancel sent", t.id),
            TurnState::Generating => format!("#{} generating", t.id),
            TurnState::Done {
                cancelled: true,
                tokens,
                ..
            } => format!("#{} cancelled after {tokens} tokens · ready", t.id),
            TurnState::Done { tokens, .. } => format!("#{} done, {tokens} tokens · ready", t.id),
            TurnState::Error(msg) => {
                format!(
                    "#{} error: {} · ready",
                    t.id,
                    truncate(&clean(msg, false), 40)
                )
            }
        },
    }
}

/// Session mode: the conversation, one turn after another, with the turn in flight streaming.
pub fn conversation_text(run: &RunState, theme: &Theme) -> Text<'static> {
    let s = &run.session;
    let mut lines: Vec<Line> = Vec::new();
    if let Some(r) = &s.ready {
        lines.push(Line::styled(
            format!(
                "ready: {} · n_ctx {} · top-{} · think {} · loaded in {:.2} s",
                clean(&r.arch, false),
                r.n_ctx,
                r.n_expert_used,
                clean(&r.think_ctl, false),
                r.load_s
            ),
            theme.dim(),
        ));
        lines.push(Line::raw(""));
    }
    for (i, t) in s.turns.iter().enumerate() {
        if t.clear_kv && i > 0 {
            lines.push(Line::styled("── new chat ──", theme.dim()));
        }
        lines.push(Line::styled(
            format!("› {}", clean(&t.prompt, true)),
            theme.headline().add_modifier(Modifier::BOLD),
        ));
        match &t.state {
            TurnState::Sent => lines.push(Line::styled("  (sent)", theme.dim())),
            TurnState::Generating => {
                let before = lines.len();
                push_generation(&mut lines, &run.reasoning(), &run.answer(), theme);
                if lines.len() == before {
                    lines.push(Line::styled("  (prefilling the prompt)", theme.dim()));
                }
            }
            TurnState::Done {
                cancelled,
                tokens,
                tok_s,
            } => {
                push_generation(
                    &mut lines,
                    &clean(&t.reasoning, true),
                    &clean(&t.text, true),
                    theme,
                );
                if *cancelled {
                    lines.push(Line::styled(
                        format!("⏹ cancelled after {tokens} tokens"),
                        theme.warn(),
                    ));
                } else {
                    lines.push(Line::styled(
                        format!("✓ {tokens} tokens · {tok_s:.2} tok/s"),
                        theme.ok(),
                    ));
                }
            }
            TurnState::Error(msg) => lines.push(Line::styled(
                format!("✗ error: {}", clean(msg, true)),
                theme.warn(),
            )),
        }
        lines.push(Line::raw(""));
    }
    if let Some((fatal, msg)) = &s.orphan_error {
        lines.push(Line::styled(
            format!(
                "✗ engine error{}: {}",
                if *fatal { " (fatal)" } else { "" },
                clean(msg, true)
            ),
            theme.warn(),
        ));
    }
    if s.turns.is_empty() && s.orphan_error.is_none() {
        lines.push(Line::styled(
            if s.ready.is_some() {
                "(type a prompt below and press Enter)"
            } else {
                "(loading the model; you can type the first prompt already)"
            },
            theme.dim(),
        ));
    }
    Text::from(lines)
}

/// Rows of the telemetry block.
pub const TELEMETRY_H: u16 = 11;

fn header_line(app: &App, theme: &Theme, width: u16) -> Paragraph<'static> {
    let mut spans = vec![
        Span::styled(" bmoe-top ", theme.title()),
        Span::styled("│ ", theme.dim()),
        Span::raw(app.label.clone()),
    ];
    let why = app.run.config.not_benchmark_reasons();
    let tag = (!why.is_empty()).then(|| format!(" NOT A BENCHMARK: {} ", why.join(", ")));
    let label = run_label(&app.run);
    if !label.is_empty() {
        spans.push(Span::styled(" │ ", theme.dim()));
        let used: usize = spans
            .iter()
            .map(|s| s.content.chars().count())
            .sum::<usize>()
            + tag.as_ref().map_or(0, |t| t.chars().count());
        let room = (width as usize).saturating_sub(used);
        spans.push(Span::raw(truncate(&label, room)));
    }
    if let Some(t) = tag {
        spans.push(Span::styled(t, theme.warn()));
    }
    Paragraph::new(Line::from(spans))
}

/// One line naming the run: model, top-k, cache, lanes, overlap, dense, threads (preamble or
/// `mode:` facts).
pub fn run_label(run: &RunState) -> String {
    let c = &run.config;
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = c.get("model") {
        parts.push(
            m.rsplit(['/', '\\'])
                .next()
                .unwrap_or(m)
                .trim_end_matches(".gguf")
                .to_string(),
        );
    }
    if let Some(k) = c.get("n_expert_used") {
        parts.push(format!("top-{k}"));
    }
    match c.streaming() {
        Some(false) => parts.push("mmap baseline".into()),
        _ => {
            if let Some(mb) = c.get("cache_mb") {
                if c.get("cache_auto") == Some("1") {
                    parts.push(format!("cache auto({mb})"));
                } else {
                    parts.push(format!("cache {mb}"));
                }
            } else if let Some(m) = c.get("cache") {
                parts.push(format!("cache {m}"));
            }
            if let Some(l) = c.io_threads() {
                parts.push(format!("{l} lanes"));
            }
        }
    }
    if c.overlap() == Some(true) {
        parts.push("overlap".into());
    }
    if let Some(d) = c.get("dense_weights").or_else(|| c.get("dense")) {
        parts.push(format!("dense {d}"));
    }
    if let Some(p) = c.get("prefetch").filter(|p| *p != "0") {
        parts.push(format!("prefetch {p}"));
    }
    if let Some(f) = c.drop_cold_frac() {
        parts.push(format!("drop {f}"));
    }
    if let Some(t) = c.threads() {
        parts.push(format!("{t} threads"));
    }
    parts.join(" · ")
}

fn truncate(s: &str, room: usize) -> String {
    if s.chars().count() <= room {
        return s.to_string();
    }
    if room == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(room.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn telemetry(f: &mut Frame, app: &App, theme: &Theme, area: Rect) {
    let run = &app.run;
    let avg = run.summary.is_some();
    let mut lines: Vec<Line> = Vec::with_capacity(TELEMETRY_H as usize);
    // Before the first token of a replay, the steps of the run to come.
    let steps = if run.steps == 0 {
        app.next_token().map_or(0, |t| t.steps)
    } else {
        run.steps
    };
    lines.push(headline(run, steps, theme, area.width, avg));
    let bars = if avg { run.avg_bars() } else { run.live_bars() };
    lines.extend(bar_lines(run, bars, theme, area.width, avg));
    lines.push(diag_line(run, theme, avg));
    lines.push(cache_line(run, theme, avg));
    lines.push(flash_line(run, theme, avg));
    lines.push(memory_line(run, theme));
    let text_h = lines.len() as u16;
    let [text_area, spark_area] =
        Layout::vertical([Constraint::Length(text_h), Constraint::Length(2)]).areas(area);
    f.render_widget(Paragraph::new(lines), text_area);
    sparklines(f, run, theme, spark_area);
}

fn headline(run: &RunState, steps: u64, theme: &Theme, width: u16, avg: bool) -> Line<'static> {
    let mut spans = Vec::new();
    if avg {
        let n = run
            .summary
            .as_ref()
            .and_then(|s| s.tokens)
            .unwrap_or(run.totals.tokens);
        spans.push(Span::styled(
            format!(" {} tok/s", num2(run.avg_tok_s())),
            theme.headline(),
        ));
        let wall = run
            .avg_bars()
            .map(|b| format!(" ({}/tok)", ms(b.wall_ms)))
            .unwrap_or_default();
        spans.push(Span::styled(
            format!("{wall} avg · {n} tokens"),
            theme.dim(),
        ));
        if let Some(e) = experienced(run) {
            spans.push(Span::styled(format!(" · {e:.2} incl. loop"), theme.dim()));
        }
    } else {
        spans.push(Span::styled(
            format!(" {} tok/s", num2(run.live_tok_s())),
            theme.headline(),
        ));
        let wall = run
            .live_bars()
            .map(|b| format!(" ({})", ms(b.wall_ms)))
            .unwrap_or_default();
        spans.push(Span::styled(
            format!("{wall} live · {} avg", num2(run.avg_tok_s())),
            theme.dim(),
        ));
    }
    let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    let progress = format!("  token {}/{steps} ", run.step);
    let pct = figures::progress(run.step, steps);
    let pct_txt = format!(" {:>3.0}%", pct * 100.0);
    let bar_w = (width as usize)
        .saturating_sub(used + progress.chars().count() + pct_txt.len() + 1)
        .min(30);
    spans.push(Span::raw(progress));
    if bar_w >= 4 {
        let filled = (pct * bar_w as f64).round() as usize;
        spans.push(Span::styled("█".repeat(filled), theme.ok()));
        spans.push(Span::styled("░".repeat(bar_w - filled), theme.dim()));
        spans.push(Span::raw(pct_txt));
    }
    Line::from(spans)
}

fn experienced(run: &RunState) -> Option<f64> {
    if let Some(s) = &run.summary
        && let (Some(r), Some(o)) = (s.tok_s, s.loop_overhead_s_tok)
        && r > 0.0
        && o > 0.0
    {
        return Some(1.0 / (1.0 / r + o));
    }
    let t = &run.totals;
    (t.overhead_rows > 0 && t.loop_overhead_ms > 0.0)
        .then(|| figures::experienced_tok_s(t.tokens, t.wall_ms, t.loop_overhead_ms))
        .flatten()
}

fn num2(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.2}"))
}

fn ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else if v < 10.0 {
        // Sub-10 ms terms (mgmt, a tiny model's tokens) would all read "0 ms" otherwise.
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

fn bar_lines(
    run: &RunState,
    bars: Option<Bars>,
    theme: &Theme,
    width: u16,
    avg: bool,
) -> Vec<Line<'static>> {
    let suffix = if avg { " avg" } else { "" };
    let bar_w = (width as usize)
        .saturating_sub(LABEL_W + VALUE_W + 2)
        .max(4);
    let (overlap, known) = run.overlap();
    let q = if known == Known::Inferred { "?" } else { "" };
    let Some(b) = bars else {
        return ["compute", "flash wait", "cache mgmt", "unattrib."]
            .iter()
            .map(|l| {
                bar(
                    &format!("{l}{suffix}"),
                    0.0,
                    "—".into(),
                    String::new(),
                    theme.dim(),
                    theme,
                    bar_w,
                )
            })
            .collect();
    };
    let threads = run.config.threads();
    let (c_fill, c_val, c_note) = match (b.compute_ms, threads) {
        (Some(c), Some(t)) => (b.fill(c), ms(c), format!("cpu÷{t} (≤)")),
        (None, None) => (0.0, "—".into(), "threads ?".into()),
        (None, Some(_)) => (0.0, "—".into(), "cpu unmeasured".into()),
        (Some(c), None) => (b.fill(c), ms(c), String::new()),
    };
    let streaming = run.streaming();
    let (f_val, f_note) = if streaming {
        let term = match b.flash_term {
            FlashTerm::Io => "io, serial",
            FlashTerm::Stall => "stall, overlap",
        };
        (ms(b.flash_ms), format!("{term}{q}"))
    } else {
        ("—".into(), "no streaming".into())
    };
    let _ = overlap;
    let (u_fill, u_val, u_note) = match b.unattributed_ms {
        None => (0.0, "—".to_string(), "needs compute".to_string()),
        Some(u) if b.overlapping() => (b.fill(u), ms(u), "clamped at 0".to_string()),
        Some(u) => (b.fill(u), ms(u), "off-CPU".to_string()),
    };
    vec![
        bar(
            &format!("compute{suffix}"),
            c_fill,
            c_val,
            c_note,
            theme.compute(),
            theme,
            bar_w,
        ),
        bar(
            &format!("flash wait{suffix}"),
            if streaming { b.fill(b.flash_ms) } else { 0.0 },
            f_val,
            f_note,
            theme.flash(),
            theme,
            bar_w,
        ),
        bar(
            &format!("cache mgmt{suffix}"),
            b.fill(b.mgmt_ms),
            ms(b.mgmt_ms),
            String::new(),
            theme.mgmt(),
            theme,
            bar_w,
        ),
        bar(
            &format!("unattrib.{suffix}"),
            u_fill,
            u_val,
            u_note,
            theme.unattributed(),
            theme,
            bar_w,
        ),
    ]
}

fn bar(
    label: &str,
    fill: f64,
    value: String,
    note: String,
    style: Style,
    theme: &Theme,
    width: usize,
) -> Line<'static> {
    let filled = ((fill.clamp(0.0, 1.0)) * width as f64).round() as usize;
    let value_note = truncate(&format!("{value:>8} {note}"), VALUE_W);
    Line::from(vec![
        Span::raw(format!(" {label:<w$}", w = LABEL_W - 1)),
        Span::styled("█".repeat(filled), style),
        Span::styled("░".repeat(width - filled), theme.dim()),
        Span::raw(" "),
        Span::raw(format!("{value_note:<VALUE_W$}")),
    ])
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
    let t = &run.totals;
    let (read, io, stall) = if avg {
        let n = t.tokens.max(1) as f64;
        let s = run.summary.as_ref();
        let read = s.and_then(|s| s.read_mib).map_or(t.read_mib / n, |r| r / n);
        let io = s
            .and_then(|s| s.io_s_tok)
            .map_or(t.io_ms / n, |x| x * 1000.0);
        let stall = s
            .and_then(|s| s.stall_s_tok)
            .map_or(t.stall_ms / n, |x| x * 1000.0);
        (read, io, stall)
    } else {
        match run.live() {
            Some(l) => (l.read_mib, l.io_ms, l.stall_ms),
            None => (0.0, 0.0, 0.0),
        }
    };
    let bw = figures::flash_mib_s(read, io).map_or_else(|| "—".into(), |b| format!("{b:.0}"));
    let (overlap, _) = run.overlap();
    let mut s = format!(" flash {read:.1} MiB/tok · {bw} MiB/s");
    if overlap {
        s.push_str(&format!(" · stall {}", ms(stall)));
        s.push_str(&format!(" · lanes busy {}", ms(io)));
    } else {
        s.push_str(&format!(" · read wait {}", ms(io)));
    }
    Line::from(s)
}

fn memory_line(run: &RunState, theme: &Theme) -> Line<'static> {
    let Some(m) = run.memory else {
        return Line::styled(
            " memory: not in the live protocol (recorded in the --csv file)",
            theme.dim(),
        );
    };
    let head = figures::honest_headroom_mib(&m);
    Line::from(vec![
        Span::raw(format!(
            " mem RSS {:.0} anon {:.0} file {:.0} · ",
            m.rss_mib, m.rss_anon_mib, m.rss_file_mib
        )),
        Span::styled(
            format!("swap {:.0}", m.swap_mib),
            if m.swap_mib > 0.0 {
                theme.warn()
            } else {
                Style::default()
            },
        ),
        Span::raw(format!(
            " · avail {:.0} ({:.0} excl. own file)",
            m.mem_available_mib, head
        )),
    ])
}

fn sparklines(f: &mut Frame, run: &RunState, theme: &Theme, area: Rect) {
    let rows = Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).split(area);
    let specs = [
        ("token ms", &run.wall_hist, theme.compute()),
        ("flash MiB", &run.read_hist, theme.flash()),
    ];
    for ((label, hist, style), row) in specs.into_iter().zip(rows.iter()) {
        let last = hist.last().copied();
        let max = hist.iter().copied().fold(0.0_f64, f64::max);
        let tail = format!(
            " last {} max {}",
            last.map_or_else(|| "—".into(), |v| format!("{v:.0}")),
            if hist.is_empty() {
                "—".into()
            } else {
                format!("{max:.0}")
            }
        );
        let [l, s, r] = Layout::horizontal([
            Constraint::Length(LABEL_W as u16),
            Constraint::Min(4),
            Constraint::Length(tail.chars().count() as u16 + 1),
        ])
        .areas(*row);
        f.render_widget(Paragraph::new(format!(" {label}")), l);
        let n = s.width as usize;
        let start = hist.len().saturating_sub(n);
        let data: Vec<u64> = hist[start..]
            .iter()
            .map(|v| (v.max(0.0) * 100.0).round() as u64)
            .collect();
        f.render_widget(Sparkline::default().data(&data).style(style), s);
        f.render_widget(Paragraph::new(tail).style(theme.dim()), r);
    }
}

/// The end-of-generation block, packed into lines of `width`: empty until a summary arrived.
pub fn summary_lines(run: &RunState, theme: &Theme, width: u16) -> Vec<Line<'static>> {
    let Some(s) = &run.summary else {
        return Vec::new();
    };
    let mut segs: Vec<String> = vec![format!(
        "done ({}): {} tokens",
        s.origin,
        s.tokens.unwrap_or(run.totals.tokens)
    )];
    if let Some(r) = s.tok_s {
        segs.push(format!("{r:.2} tok/s"));
    }
    if let Some(st) = s.s_tok {
        segs.push(format!("{st:.3} s/tok"));
    }
    if s.cancelled {
        segs.push("cancelled".into());
    }
    if let Some(p) = s.prefill_s.filter(|p| *p > 0.0) {
        let mut seg = format!("prefill {p:.2} s");
        if let Some(r) = s.prefill_tps.filter(|r| *r > 0.0) {
            seg.push_str(&format!(" ({r:.1} tok/s)"));
        }
        segs.push(seg);
        // In a session the model was loaded before the prompt was typed: the wait for the
        // first token is the prefill alone.
        if let Some(l) = s.load_s.filter(|l| *l >= 0.0)
            && run.session.ready.is_none()
        {
            segs.push(format!("TTFT {:.2} s incl. load", l + p));
        }
    }
    if let (Some(past), Some(r)) = (run.session.n_past, &run.session.ready) {
        segs.push(format!("context {past}/{} tokens", r.n_ctx));
    }
    if let Some(r) = s.read_mib {
        segs.push(format!("read {r:.0} MiB"));
    }
    if let Some(h) = s.cache_hit_pct.filter(|h| *h >= 0.0) {
        segs.push(format!("hit {h:.1}%"));
    }
    if let (Some(res), Some(bud)) = (
        s.cache_resident_mib,
        s.cache_budget_mib.filter(|b| *b > 0.0),
    ) {
        segs.push(format!("cache {res:.0}/{bud:.0} MiB"));
    }
    if let (Some(d), Some(r)) = (s.experts_dropped, s.experts_routed)
        && d > 0
    {
        let p = figures::pct(d as f64, r as f64).unwrap_or(0.0);
        segs.push(format!("dropped {d}/{r} ({p:.1}%)"));
    }
    if let Some(c) = s.compute_s_tok {
        segs.push(format!("engine residual {c:.3} s/tok"));
    }
    if let (Some(dr), Some(acc)) = (s.mtp_drafted, s.mtp_accepted)
        && dr > 0
    {
        segs.push(format!(
            "speculation {acc}/{dr} accepted ({:.0}%)",
            figures::pct(acc as f64, dr as f64).unwrap_or(0.0)
        ));
        if let (Some(dec), Some(n)) = (s.mtp_decodes, s.tokens)
            && dec > 0
        {
            segs.push(format!("{:.2} tok/decode", n as f64 / dec as f64));
        }
        if let Some(c) = s.mtp_draft_s_tok.filter(|c| *c > 0.0) {
            segs.push(format!("drafting {:.1} ms/tok", c * 1000.0));
        }
    }
    let mut lines: Vec<String> = Vec::new();
    let room = (width as usize).saturating_sub(1).max(10);
    for seg in segs {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 3 + seg.chars().count() <= room => {
                l.push_str(" · ");
                l.push_str(&seg);
            }
            _ => lines.push(truncate(&seg, room)),
        }
    }
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let style = if i == 0 { theme.ok() } else { Style::default() };
            Line::styled(format!(" {l}"), style)
        })
        .collect()
}

fn pane_block(title: String, focused: bool, theme: &Theme) -> Block<'static> {
    Block::default()
        .borders(Borders::ALL)
        .border_style(if focused {
            theme.focus_border()
        } else {
            theme.border()
        })
        .title(Span::styled(title, theme.title()))
}

/// One generation's lines: the thinking span (italic, `│ ` gutter) then the answer.
fn push_generation(lines: &mut Vec<Line<'static>>, reasoning: &str, answer: &str, theme: &Theme) {
    if !reasoning.is_empty() {
        lines.push(Line::styled(
            "thinking",
            theme.reasoning().add_modifier(Modifier::BOLD),
        ));
        for l in reasoning.split('\n') {
            lines.push(Line::styled(format!("│ {l}"), theme.reasoning()));
        }
        lines.push(Line::raw(""));
    }
    if !answer.is_empty() {
        for l in answer.split('\n') {
            lines.push(Line::styled(l.to_string(), theme.answer()));
        }
    }
}

/// The streamed answer with the thinking span set apart.
pub fn answer_text(run: &RunState, theme: &Theme, kind: &SourceKind) -> Text<'static> {
    let mut lines: Vec<Line> = Vec::new();
    push_generation(&mut lines, &run.reasoning(), &run.answer(), theme);
    // An engine that failed says why on stderr: show its last words where the answer would be.
    let failed = run.ended.as_deref().is_some_and(|e| {
        e.contains("exit status") && !e.ends_with("exit status: 0") || e.contains("signal")
    });
    if failed && run.totals.tokens == 0 {
        lines.push(Line::styled(
            format!(
                "the engine ended before the first token ({})",
                run.ended.as_deref().unwrap_or("")
            ),
            theme.warn(),
        ));
        for l in run.log.iter().rev().take(6).rev() {
            lines.push(Line::styled(l.clone(), theme.warn()));
        }
        return Text::from(lines);
    }
    if *kind == SourceKind::Session {
        return conversation_text(run, theme);
    }
    if lines.is_empty() {
        let why = match kind {
            SourceKind::Replay => "(a metrics CSV records no text)",
            _ if run.totals.tokens > 0 && !run.streams_text => {
                "(this run streams no text: baseline or an engine without deltas)"
            }
            _ if run.totals.tokens == 0 && run.ended.is_none() => {
                "(waiting for the first token: model load and prompt prefill)"
            }
            _ => "(waiting for text)",
        };
        lines.push(Line::styled(why, theme.dim()));
    }
    Text::from(lines)
}

fn answer_pane(f: &mut Frame, app: &App, theme: &Theme, area: Rect) {
    let focused = app.focus == Focus::Answer;
    let title = if app.kind == SourceKind::Session {
        " conversation ".to_string()
    } else if app.run.text.reasoning().is_empty() {
        " answer ".to_string()
    } else {
        " answer · thinking in italics ".to_string()
    };
    let block = pane_block(title, focused, theme);
    let inner = block.inner(area);
    let para = Paragraph::new(answer_text(&app.run, theme, &app.kind)).wrap(Wrap { trim: false });
    let total = para.line_count(inner.width) as u16;
    let tail = total.saturating_sub(inner.height);
    let scroll = tail.saturating_sub(app.answer_scroll.min(tail));
    f.render_widget(para.block(block).scroll((scroll, 0)), area);
}

/// Run facts, end-of-run lines, and the engine's stderr.
pub fn details_text(app: &App, theme: &Theme) -> Text<'static> {
    let run = &app.run;
    let mut lines: Vec<Line> = Vec::new();
    let (overlap, known) = run.overlap();
    let threads = run
        .config
        .threads()
        .map_or_else(|| "?".into(), |t| t.to_string());
    let lanes = run
        .config
        .io_threads()
        .map_or_else(|| "?".into(), |t| t.to_string());
    lines.push(Line::from(format!(
        "reading as: {} ({}), {threads} compute threads, {lanes} I/O lanes",
        if overlap { "overlap" } else { "serial" },
        match known {
            Known::Stated => "stated",
            Known::Inferred => "inferred from the numbers",
        }
    )));
    let why = run.config.not_benchmark_reasons();
    if !why.is_empty() {
        lines.push(Line::styled(
            format!("not a benchmark: {}", why.join(", ")),
            theme.warn(),
        ));
    }
    if !run.config.entries.is_empty() {
        lines.push(Line::styled("run configuration", theme.title()));
        let kv: Vec<String> = run
            .config
            .entries
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        lines.push(Line::from(kv.join("  ")));
    }
    if let Some(s) = &run.summary
        && !s.lines.is_empty()
    {
        lines.push(Line::styled("end of run", theme.title()));
        for l in &s.lines {
            lines.push(Line::from(l.clone()));
        }
    }
    if !run.log.is_empty() {
        lines.push(Line::styled("engine log", theme.title()));
        for l in &run.log {
            lines.push(Line::styled(l.clone(), theme.dim()));
        }
    }
    Text::from(lines)
}

fn details_pane(f: &mut Frame, app: &App, theme: &Theme, area: Rect) {
    let focused = app.focus == Focus::Telemetry;
    let block = pane_block(" run ".into(), focused, theme);
    let para = Paragraph::new(details_text(app, theme))
        .wrap(Wrap { trim: false })
        .block(block)
        .scroll((app.detail_scroll, 0));
    f.render_widget(para, area);
}

fn status_line(app: &App, theme: &Theme) -> Paragraph<'static> {
    let run = &app.run;
    let mut parts: Vec<String> = Vec::new();
    let state = if app.paused {
        "⏸ paused"
    } else if run.ended.is_some() && app.at_end() {
        "■ ended"
    } else if app.kind == SourceKind::Replay && app.at_end() {
        "■ end of file"
    } else {
        "▶"
    };
    parts.push(state.to_string());
    if app.kind == SourceKind::Session {
        parts.push(session_state(run));
    }
    if app.kind == SourceKind::Replay {
        parts.push(format!(
            "{} token {}/{}",
            match app.speed {
                Speed::Max => "max".to_string(),
                s => s.label(),
            },
            app.tokens_applied,
            app.tokens_total()
        ));
    } else if app.paused {
        parts.push(format!(
            "{} new behind",
            app.tokens_total().saturating_sub(app.tokens_applied)
        ));
    }
    match &run.last_malformed {
        Some((line, why)) => parts.push(format!(
            "{} malformed ignored (line {line}: {})",
            run.malformed,
            truncate(why, 28)
        )),
        None => parts.push("0 malformed".into()),
    }
    if let Some(e) = &run.ended {
        parts.push(e.clone());
    } else if app.interrupted {
        parts.push("interrupt sent".into());
    }
    parts.push(if app.kind == SourceKind::Session {
        "F1 help · ^D quit".into()
    } else {
        "? help · q quit".into()
    });
    Paragraph::new(format!(" {}", parts.join(" │ "))).style(theme.status())
}

fn help_popup(f: &mut Frame, theme: &Theme, area: Rect, session: bool) {
    let session_rows = [
        ("Enter", "send the prompt (generate)"),
        ("Esc", "cancel the generation in flight"),
        ("Ctrl-N", "next prompt starts a new chat (clear_kv)"),
        ("Ctrl-R", "reasoning on / off for the next prompt (think)"),
        ("Ctrl-U", "clear the prompt line"),
        ("/n N  /n", "n_predict N for the next prompts; back to -n"),
        ("Ctrl-C", "cancel a generation; quit when idle"),
        ("Ctrl-D", "quit (closes the session)"),
        ("Tab", "focus answer ↔ telemetry details"),
        (
            "↑ ↓ PgUp PgDn",
            "scroll the focused pane (mouse wheel: answer)",
        ),
        ("F1  Esc", "close this help"),
    ];
    let replay_rows = [
        ("q", "quit (Ctrl-C: interrupt a spawned engine first)"),
        ("space", "pause / resume"),
        ("← →", "one token back / forward while paused"),
        ("[ ]", "seek a tenth of the run back / forward"),
        ("Home End", "seek to start / end"),
        ("+ -", "replay speed up / down"),
        ("t", "focus answer ↔ telemetry details"),
        (
            "↑ ↓ PgUp PgDn",
            "scroll the focused pane (mouse wheel: answer)",
        ),
        ("?  Esc", "close this help"),
    ];
    let rows: &[(&str, &str)] = if session { &session_rows } else { &replay_rows };
    let mut keys = Vec::new();
    for (k, v) in rows.iter().copied() {
        keys.push(Line::from(vec![
            Span::styled(format!("{k:>14}  "), theme.headline()),
            Span::raw(v),
        ]));
    }
    // Short lines so the popup fits an 80x24 terminal without wrapping: the height below counts
    // wrapped rows, and anything past the frame would be cut off silently.
    let note = [
        Line::styled("bars: not rescaled to 100 %", theme.dim()),
        Line::styled(
            "compute = cpu ÷ compute threads (an upper bound)",
            theme.dim(),
        ),
    ];
    let w = 72.min(area.width.saturating_sub(2));
    let inner_w = usize::from(w.saturating_sub(2)).max(1);
    let rows_of = |lines: &[Line]| -> usize {
        lines
            .iter()
            .map(|l| l.width().max(1).div_ceil(inner_w))
            .sum()
    };
    let room = usize::from(area.height.saturating_sub(4));
    let mut lines = keys;
    lines.extend(note);
    // The title and the blank line before the note are the first to go on a short terminal.
    if rows_of(&lines) + 2 <= room {
        lines.insert(0, Line::styled("keys", theme.title()));
        let at = lines.len() - 2;
        lines.insert(at, Line::raw(""));
    }
    let h = (rows_of(&lines) as u16 + 2).min(area.height.saturating_sub(2));
    let popup = Rect {
        x: area.x + (area.width.saturating_sub(w)) / 2,
        y: area.y + (area.height.saturating_sub(h)) / 2,
        width: w,
        height: h,
    };
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(pane_block(" help ".into(), true, theme)),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_width() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate("abc", 0), "");
    }
}
