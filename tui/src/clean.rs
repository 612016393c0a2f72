//! Text from the engine made safe to draw: a model can generate any character, and a control
//! character written to the terminal moves the cursor or clears the screen behind ratatui's back
//! (a tiny random model emits form feeds). Controls become their visible Unicode "control
//! picture" (`␌` for a form feed), so nothing is hidden and nothing acts.

/// Cleans `s` for drawing. `\n` is kept when `keep_newlines` (answer text), else shown as `␤`;
/// `\r` is dropped (CRLF line ends); a tab becomes a space; other C0 controls and DEL become
/// their control picture (U+2400 + code, U+2421); C1 controls become U+FFFD.
pub fn clean(s: &str, keep_newlines: bool) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' if keep_newlines => out.push('\n'),
            '\n' => out.push('\u{2424}'),
            '\r' => {}
            '\t' => out.push(' '),
            c if (c as u32) < 0x20 => {
                out.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'))
            }
            '\u{7f}' => out.push('\u{2421}'),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn controls_become_visible_and_inert() {
        assert_eq!(clean("plain text", true), "plain text");
        assert_eq!(clean("a\u{c}b\u{17}c", true), "a\u{240c}b\u{2417}c");
        assert_eq!(clean("line1\r\nline2", true), "line1\nline2");
        assert_eq!(clean("line1\nline2", false), "line1\u{2424}line2");
        assert_eq!(
            clean("\u{1b}[31mred\u{7f}\u{9b}", true),
            "\u{241b}[31mred\u{2421}\u{fffd}"
        );
        assert_eq!(clean("tab\there", true), "tab here");
        assert!(
            !clean("\u{0}\u{1}\u{1f}\u{85}", false)
                .chars()
                .any(char::is_control)
        );
    }
}
