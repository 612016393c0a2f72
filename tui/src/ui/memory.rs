//! The memory row: resident set split into anonymous and file pages, swap, and what is left.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use crate::figures;
use crate::state::RunState;
use crate::theme::Theme;

/// RSS (anon holds the expert cache, file the mapped model), swap (warned when used), and the
/// available memory with and without the process's own file pages, which the kernel counts as
/// available but the run is using. The live protocol carries no memory figures: a live run's
/// row says where they are recorded instead.
pub(super) struct MemoryLine<'a> {
    run: &'a RunState,
    theme: &'a Theme,
}

impl<'a> MemoryLine<'a> {
    /// Rows it draws.
    pub(super) const HEIGHT: u16 = 1;

    /// The memory row of `run`.
    pub(super) fn new(run: &'a RunState, theme: &'a Theme) -> Self {
        MemoryLine { run, theme }
    }
}

impl Widget for MemoryLine<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        Paragraph::new(memory_line(self.run, self.theme)).render(area, buf);
    }
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
