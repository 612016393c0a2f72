//! The run details pane: how the figures are read, the run's configuration, the end-of-run
//! lines and the engine's stderr.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Text};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::pane_block;
use crate::state::{App, Focus, Known};
use crate::theme::Theme;

/// The details pane, scrolled by the user.
pub(super) struct DetailsPane<'a> {
    app: &'a App,
    theme: &'a Theme,
}

impl<'a> DetailsPane<'a> {
    /// The details pane of `app`.
    pub(super) fn new(app: &'a App, theme: &'a Theme) -> Self {
        DetailsPane { app, theme }
    }
}

impl Widget for DetailsPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let (app, theme) = (self.app, self.theme);
        let focused = app.focus == Focus::Telemetry;
        let block = pane_block(" run ".into(), focused, theme);
        let para = Paragraph::new(details_text(app, theme))
            .wrap(Wrap { trim: false })
            .block(block)
            .scroll((app.detail_scroll, 0));
        para.render(area, buf);
    }
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
