//! The header line: the source, what the run is, and whether it may be read as a benchmark.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::format::truncate;
use crate::state::{App, RunState};
use crate::theme::Theme;

/// The header: `bmoe-top`, the source's label, the run's label cut to fit, and the NOT A
/// BENCHMARK tag, which is never cut.
pub(super) struct Header<'a> {
    app: &'a App,
    theme: &'a Theme,
}

impl<'a> Header<'a> {
    /// The header of `app`.
    pub(super) fn new(app: &'a App, theme: &'a Theme) -> Self {
        Header { app, theme }
    }
}

impl Widget for Header<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        header_line(self.app, self.theme, area.width).render(area, buf);
    }
}

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
    if let Some(l) = c.substitute_lambda() {
        parts.push(format!("subst λ{l}"));
    }
    if let Some(t) = c.threads() {
        parts.push(format!("{t} threads"));
    }
    parts.join(" · ")
}
