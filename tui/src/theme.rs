//! Colours that degrade: 256 colours when the terminal says so, the 16 ANSI colours otherwise,
//! and none at all with `NO_COLOR` (then bold/italic/reverse carry the distinctions).

use ratatui::style::{Color, Modifier, Style};

/// How many colours to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorLevel {
    /// No colour: modifiers only.
    None,
    /// The 16 ANSI colours.
    Basic,
    /// The 256-colour palette.
    Full,
}

impl ColorLevel {
    /// Decides from the environment: `NO_COLOR` (non-empty) → none; `TERM=dumb` → none;
    /// `COLORTERM=truecolor|24bit` or a `TERM` naming 256 colours → full; else basic.
    pub fn detect(no_color: Option<&str>, term: Option<&str>, colorterm: Option<&str>) -> Self {
        if no_color.is_some_and(|v| !v.is_empty()) {
            return ColorLevel::None;
        }
        let term = term.unwrap_or("");
        if term == "dumb" {
            return ColorLevel::None;
        }
        let ct = colorterm.unwrap_or("").to_ascii_lowercase();
        if ct == "truecolor" || ct == "24bit" || term.contains("256") || term.contains("direct") {
            ColorLevel::Full
        } else {
            ColorLevel::Basic
        }
    }

    /// From the process environment.
    pub fn from_env() -> Self {
        let get = |k: &str| std::env::var(k).ok();
        ColorLevel::detect(
            get("NO_COLOR").as_deref(),
            get("TERM").as_deref(),
            get("COLORTERM").as_deref(),
        )
    }
}

/// Named styles for every role the panel draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    /// The colour level in use.
    pub level: ColorLevel,
}

impl Theme {
    /// A theme at `level`.
    pub fn new(level: ColorLevel) -> Self {
        Theme { level }
    }

    fn pick(&self, full: u8, basic: Color) -> Style {
        match self.level {
            ColorLevel::None => Style::default(),
            ColorLevel::Basic => Style::default().fg(basic),
            ColorLevel::Full => Style::default().fg(Color::Indexed(full)),
        }
    }

    /// Compute bar.
    pub fn compute(&self) -> Style {
        self.pick(75, Color::Blue)
    }
    /// Flash-wait bar.
    pub fn flash(&self) -> Style {
        self.pick(214, Color::Yellow)
    }
    /// Cache-management bar.
    pub fn mgmt(&self) -> Style {
        self.pick(141, Color::Magenta)
    }
    /// Unattributed bar.
    pub fn unattributed(&self) -> Style {
        self.pick(246, Color::Gray)
    }
    /// Headline numbers.
    pub fn headline(&self) -> Style {
        self.pick(231, Color::White).add_modifier(Modifier::BOLD)
    }
    /// Labels and secondary text.
    pub fn dim(&self) -> Style {
        match self.level {
            ColorLevel::None => Style::default(),
            _ => self.pick(244, Color::DarkGray),
        }
    }
    /// The thinking span.
    pub fn reasoning(&self) -> Style {
        self.pick(109, Color::Cyan).add_modifier(Modifier::ITALIC)
    }
    /// The answer.
    pub fn answer(&self) -> Style {
        Style::default()
    }
    /// Warnings and caveats.
    pub fn warn(&self) -> Style {
        self.pick(203, Color::Red).add_modifier(Modifier::BOLD)
    }
    /// Good news (finished).
    pub fn ok(&self) -> Style {
        self.pick(114, Color::Green)
    }
    /// Pane titles.
    pub fn title(&self) -> Style {
        self.pick(153, Color::Cyan).add_modifier(Modifier::BOLD)
    }
    /// Border of the focused pane.
    pub fn focus_border(&self) -> Style {
        match self.level {
            ColorLevel::None => Style::default().add_modifier(Modifier::BOLD),
            _ => self.pick(153, Color::Cyan),
        }
    }
    /// Border of other panes.
    pub fn border(&self) -> Style {
        self.dim()
    }
    /// Status line.
    pub fn status(&self) -> Style {
        match self.level {
            ColorLevel::None => Style::default().add_modifier(Modifier::REVERSED),
            ColorLevel::Basic => Style::default().fg(Color::Black).bg(Color::Gray),
            ColorLevel::Full => Style::default()
                .fg(Color::Indexed(252))
                .bg(Color::Indexed(236)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_degrades() {
        let d = ColorLevel::detect;
        assert_eq!(d(Some("1"), Some("xterm-256color"), None), ColorLevel::None);
        // NO_COLOR set but empty does not disable colour (no-color.org).
        assert_eq!(d(Some(""), Some("xterm-256color"), None), ColorLevel::Full);
        assert_eq!(d(None, Some("xterm"), None), ColorLevel::Basic);
        assert_eq!(d(None, Some("screen"), Some("truecolor")), ColorLevel::Full);
        assert_eq!(d(None, Some("dumb"), None), ColorLevel::None);
        assert_eq!(d(None, None, None), ColorLevel::Basic);
    }

    #[test]
    fn no_color_theme_has_no_colours() {
        let t = Theme::new(ColorLevel::None);
        for s in [t.compute(), t.flash(), t.warn(), t.reasoning(), t.status()] {
            assert_eq!(s.fg, None);
            assert_eq!(s.bg, None);
        }
        let b = Theme::new(ColorLevel::Basic);
        assert_eq!(b.flash().fg, Some(Color::Yellow));
        assert!(matches!(
            Theme::new(ColorLevel::Full).flash().fg,
            Some(Color::Indexed(_))
        ));
    }
}
