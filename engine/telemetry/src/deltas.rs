//! The text-delta rule of `BMOE_PROGRESS`, both sides of the wire.
//!
//! Each progress line carries only what is new since the previous line of the generation
//! (`delta_reasoning`, `delta_text`), so a generation of n tokens costs O(n) on the wire. When
//! the chat parser reclassifies text already sent (a closing think tag turns "answer" into
//! reasoning), no append can express it: the line then carries `"reset":1` and **full
//! snapshots** of both, which replace what the reader holds.
//!
//! [`DeltaEncoder`] (engine side) turns the current full texts into the line's fields;
//! [`TextAccumulator`] (reader side) applies them. Together they are exact: after every line
//! the accumulator holds precisely the texts the encoder was given.
//!
//! ```
//! use bmoe_telemetry::deltas::{DeltaEncoder, TextAccumulator};
//! use bmoe_telemetry::protocol::Progress;
//! let (mut enc, mut acc) = (DeltaEncoder::new(), TextAccumulator::new());
//! for (reasoning, text) in [("", "<think>Hm"), ("", "<think>Hmm, yes"), ("Hmm, yes", "")] {
//!     let mut p = Progress::default();
//!     enc.fill(&mut p, reasoning, text);
//!     acc.apply(&p);
//!     assert_eq!((acc.reasoning(), acc.text()), (reasoning, text));
//! }
//! ```

use crate::protocol::{Done, Progress};

/// Engine side: remembers what was sent and produces the next line's delta fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeltaEncoder {
    reasoning: String,
    text: String,
}

/// The three delta fields of one `BMOE_PROGRESS` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deltas {
    /// Whether the strings are snapshots that replace the reader's state.
    pub reset: bool,
    /// Reasoning to append (or the full reasoning when `reset`).
    pub reasoning: String,
    /// Answer text to append (or the full answer when `reset`).
    pub text: String,
}

impl DeltaEncoder {
    /// A fresh encoder (start of a generation).
    pub fn new() -> Self {
        Self::default()
    }

    /// The fields for the next line, given the generation's full reasoning and answer so far.
    /// Appends when both extend what was sent; otherwise a reset with full snapshots.
    pub fn encode(&mut self, reasoning: &str, text: &str) -> Deltas {
        let out = match (
            reasoning.strip_prefix(self.reasoning.as_str()),
            text.strip_prefix(self.text.as_str()),
        ) {
            (Some(r), Some(t)) => Deltas {
                reset: false,
                reasoning: r.to_string(),
                text: t.to_string(),
            },
            _ => Deltas {
                reset: true,
                reasoning: reasoning.to_string(),
                text: text.to_string(),
            },
        };
        self.reasoning.clear();
        self.reasoning.push_str(reasoning);
        self.text.clear();
        self.text.push_str(text);
        out
    }

    /// [`Self::encode`] straight into a progress record's `reset` / `delta_*` fields.
    pub fn fill(&mut self, progress: &mut Progress, reasoning: &str, text: &str) {
        let d = self.encode(reasoning, text);
        progress.reset = d.reset;
        progress.delta_reasoning = d.reasoning;
        progress.delta_text = d.text;
    }

    /// Forgets what was sent (a new generation starts with plain appends).
    pub fn clear(&mut self) {
        self.reasoning.clear();
        self.text.clear();
    }
}

/// Reader side: the answer and reasoning of the generation in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextAccumulator {
    reasoning: String,
    text: String,
}

impl TextAccumulator {
    /// Empty (start of a generation, e.g. on `BMOE_BEGIN`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one progress line: on `reset` both texts are replaced by the line's snapshots,
    /// otherwise the deltas are appended.
    pub fn apply(&mut self, p: &Progress) {
        if p.reset {
            self.reasoning.clear();
            self.text.clear();
        }
        self.reasoning.push_str(&p.delta_reasoning);
        self.text.push_str(&p.delta_text);
    }

    /// Takes the final texts of a finished generation (`BMOE_DONE` carries them whole).
    pub fn finish(&mut self, done: &Done) {
        self.reasoning.clone_from(&done.reasoning);
        self.text.clone_from(&done.text);
    }

    /// The reasoning so far.
    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }

    /// The answer so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Empties both (a new generation).
    pub fn clear(&mut self) {
        self.reasoning.clear();
        self.text.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_then_reclassification_resets() {
        let mut e = DeltaEncoder::new();
        assert_eq!(
            e.encode("", "ab"),
            Deltas {
                reset: false,
                reasoning: String::new(),
                text: "ab".into()
            }
        );
        assert_eq!(e.encode("", "abc").text, "c");
        // "abc" was thinking after all: it moves from the answer to the reasoning.
        let d = e.encode("abc", "");
        assert!(d.reset);
        assert_eq!((d.reasoning.as_str(), d.text.as_str()), ("abc", ""));
        assert_eq!(e.encode("abc", "X").text, "X");
    }

    #[test]
    fn multibyte_prefixes_stay_on_char_boundaries() {
        let mut e = DeltaEncoder::new();
        e.encode("", "é");
        let d = e.encode("", "éà");
        assert_eq!((d.reset, d.text.as_str()), (false, "à"));
        // Same first byte, different character: not an extension.
        let d = e.encode("", "éá");
        assert!(d.reset);
    }
}
