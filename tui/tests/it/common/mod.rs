//! Helpers shared by the TestBackend tests.

#![allow(clippy::unwrap_used)] // a failed draw is a failed test

use bmoe_top::state::App;
use bmoe_top::theme::{ColorLevel, Theme};
use bmoe_top::ui;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// Draws `app` into a `w`×`h` test terminal: the screen as text (trailing blanks trimmed per row)
/// and the buffer with its styles.
pub fn render_with(
    app: &App,
    w: u16,
    h: u16,
    level: ColorLevel,
) -> (String, ratatui::buffer::Buffer) {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| ui::draw(f, app, &Theme::new(level))).unwrap();
    let buf = t.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..h {
        let mut line = String::new();
        for x in 0..w {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    (out, buf)
}

/// The screen as text, in full colour.
pub fn render(app: &App, w: u16, h: u16) -> String {
    render_with(app, w, h, ColorLevel::Full).0
}
