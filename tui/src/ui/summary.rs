//! The end-of-generation block under the telemetry.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Widget};

use super::format::truncate;
use crate::figures;
use crate::state::RunState;
use crate::theme::Theme;

/// The summary's figures packed into as few lines as the width allows. Its height decides the
/// layout, so the lines are packed when it is built, for the width it will be drawn at.
pub(super) struct Summary {
    lines: Vec<Line<'static>>,
}

impl Summary {
    /// The summary of `run` packed for `width` columns.
    pub(super) fn new(run: &RunState, theme: &Theme, width: u16) -> Self {
        Summary {
            lines: summary_lines(run, theme, width),
        }
    }

    /// Rows it needs: none until a summary arrived.
    pub(super) fn height(&self) -> u16 {
        self.lines.len() as u16
    }
}

impl Widget for Summary {
    fn render(self, area: Rect, buf: &mut Buffer) {
        Paragraph::new(self.lines).render(area, buf);
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
    // A run that set a drop threshold says what it dropped, even nothing.
    if let (Some(d), Some(r)) = (s.experts_dropped, s.experts_routed)
        && (d > 0 || run.config.drop_cold_frac().is_some())
    {
        let p = figures::pct(d as f64, r as f64).unwrap_or(0.0);
        segs.push(format!("dropped {d}/{r} ({p:.1}%)"));
    }
    // The substituted share of routed slots: how much of the hit rate was steered toward
    // what was resident (the seed's reading of `experts_substituted`).
    if let (Some(sub), Some(r)) = (s.experts_substituted, s.experts_routed)
        && (sub > 0 || s.experts_reranked.is_some_and(|x| x > 0))
    {
        let p = figures::pct(sub as f64, r as f64).unwrap_or(0.0);
        let mut seg = format!("substituted {sub}/{r} ({p:.1}%)");
        if let Some(x) = s.experts_reranked {
            seg.push_str(&format!(", {x} examined"));
        }
        segs.push(seg);
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
