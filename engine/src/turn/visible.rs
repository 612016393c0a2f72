//! What a one-shot run prints when stdout is a terminal: a model can generate any byte, and a
//! control byte written to a terminal acts — ESC starts an escape sequence (colours, cursor
//! moves, clearing the screen, retitling the window), BEL rings, SUB and DEL are eaten. So each
//! control becomes its visible Unicode "control picture" (`␛` for ESC, `␡` for DEL), as
//! bmoe-top draws them: nothing is hidden and nothing acts. Piped output is left alone (the
//! byte-identity gates compare it), so only a terminal sees the pictures.

use std::io::{self, Write};

/// The UTF-8 lead byte of U+0080..=U+00BF, the range holding the C1 controls U+0080..=U+009F
/// (which terminals in UTF-8 mode may obey too: U+009B is CSI).
const C1_LEAD: u8 = 0xC2;

/// A writer that shows control characters instead of sending them: C0 controls except `\n` and
/// `\t` become U+2400 + code (`␛`, `␇`, `␍`, …), DEL becomes `␡`, and C1 controls become U+FFFD.
/// Everything else passes byte for byte.
pub(super) struct Visible<'a> {
    inner: &'a mut dyn Write,
    /// A C1 lead byte that ended the last write: what it is depends on the next byte.
    held: bool,
}

impl<'a> Visible<'a> {
    /// Shows the controls of everything written through it on `inner`.
    pub fn new(inner: &'a mut dyn Write) -> Self {
        Self { inner, held: false }
    }
}

/// `bytes` with their controls made visible; `held` carries a C1 lead byte across calls.
fn show(bytes: &[u8], held: &mut bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 8);
    for &b in bytes {
        if std::mem::take(held) {
            if (0x80..=0x9F).contains(&b) {
                out.extend_from_slice("\u{fffd}".as_bytes());
                continue;
            }
            out.push(C1_LEAD);
        }
        match b {
            b'\n' | b'\t' => out.push(b),
            0x00..=0x1F => {
                let picture = char::from_u32(0x2400 + u32::from(b)).unwrap_or('\u{fffd}');
                out.extend_from_slice(picture.encode_utf8(&mut [0; 4]).as_bytes());
            }
            0x7F => out.extend_from_slice("\u{2421}".as_bytes()),
            C1_LEAD => *held = true,
            _ => out.push(b),
        }
    }
    out
}

impl Write for Visible<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let shown = show(buf, &mut self.held);
        self.inner.write_all(&shown)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Drop for Visible<'_> {
    fn drop(&mut self) {
        // a lead byte nothing followed is not a control: it goes out as it came
        if self.held {
            let _ = self.inner.write_all(&[C1_LEAD]);
            let _ = self.inner.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(pieces: &[&[u8]]) -> String {
        let mut out = Vec::new();
        {
            let mut v = Visible::new(&mut out);
            for p in pieces {
                v.write_all(p).expect("write");
            }
        }
        String::from_utf8(out).expect("still UTF-8")
    }

    #[test]
    fn controls_become_pictures_and_text_passes() {
        assert_eq!(through(&[b"plain text\n\tok"]), "plain text\n\tok");
        assert_eq!(
            through(&[b"\x1b[2Jred\x07\x1a\x7f\r\x00"]),
            "\u{241b}[2Jred\u{2407}\u{241a}\u{2421}\u{240d}\u{2400}"
        );
        // UTF-8 text, C1 controls (U+009B is CSI), and a C1 split across two writes
        assert_eq!(through(&["é ü ±".as_bytes()]), "é ü ±");
        assert_eq!(
            through(&["a\u{9b}b\u{85}".as_bytes()]),
            "a\u{fffd}b\u{fffd}"
        );
        assert_eq!(through(&[b"x\xc2", b"\x9by\xc2", b"\xb1"]), "x\u{fffd}y±");
        let all: Vec<u8> = (0u8..0x80).collect();
        let shown = through(&[&all]);
        assert!(
            shown
                .chars()
                .all(|c| c == '\n' || c == '\t' || !c.is_control()),
            "{shown:?}"
        );
    }
}
