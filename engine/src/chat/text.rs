//! Token pieces → text: byte-level tokens can split a UTF-8 character, so text is released only
//! up to the last complete character.

/// Accumulates token bytes and hands out complete UTF-8 text.
#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    pending: Vec<u8>,
    text: String,
}

impl Utf8Stream {
    /// Adds a token's bytes; returns the newly completed text (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            // an invalid sequence (not just an unfinished one) is replaced so it cannot block output
            Err(e) if e.error_len().is_some() => {
                let lossy = String::from_utf8_lossy(&self.pending).into_owned();
                self.pending.clear();
                self.text.push_str(&lossy);
                return lossy;
            }
            Err(e) => e.valid_up_to(),
        };
        let rest = self.pending.split_off(valid);
        let done =
            String::from_utf8(std::mem::replace(&mut self.pending, rest)).unwrap_or_default();
        self.text.push_str(&done);
        done
    }

    /// Flushes any incomplete tail (lossily) and returns it.
    pub fn finish(&mut self) -> String {
        let tail = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.text.push_str(&tail);
        tail
    }

    /// All text released so far.
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_split_characters() {
        let mut s = Utf8Stream::default();
        let e = "é".as_bytes();
        assert_eq!(s.push(b"a"), "a");
        assert_eq!(s.push(&e[..1]), "");
        assert_eq!(s.push(&e[1..]), "é");
        assert_eq!(s.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(s.push(&e[..1]), "");
        assert_eq!(s.finish(), "\u{fffd}");
        assert_eq!(s.text(), "aé\u{fffd}b\u{fffd}");
    }
}
