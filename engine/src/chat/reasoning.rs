//! Splitting a generation into reasoning and answer **as it streams**.
//!
//! Two shapes of chat format exist:
//!
//! - **Think spans** (`<think>…</think>` and kin, Qwen3, LFM2.5): the split is a function of the
//!   whole text so far ([`crate::chat::split_reasoning`]). A late closing tag can reclassify text
//!   already shown as answer; the wire expresses that with `reset:1`.
//! - **Channels** (harmony, gpt-oss): every message opens with a header naming its channel,
//!   `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…<|return|>`.
//!   The `analysis` channel is reasoning, every other channel answer, and the markers and headers
//!   belong to neither. [`ChannelSplitter`] reads the text incrementally and never takes back what
//!   it released: a possible marker at the end of the text (`<|en`, which may become `<|end|>`) and
//!   a header in progress are *held back* until they are decided, so the deltas are append-only
//!   and need no `reset`.
//!
//! [`ReasoningSplitter`] runs whichever one the rendered turn asks for ([`SplitMode`]).

use super::markers::{ThinkTags, split_reasoning};

/// Opens a message: the role and header follow.
pub const START: &str = "<|start|>";
/// Opens a channel name in a header.
pub const CHANNEL: &str = "<|channel|>";
/// Ends a header: the message body follows.
pub const MESSAGE: &str = "<|message|>";
/// Ends a message.
pub const END: &str = "<|end|>";
/// Ends the assistant's turn.
pub const RETURN: &str = "<|return|>";
/// Ends a tool-call message.
pub const CALL: &str = "<|call|>";
/// Names the body's format inside a header (`<|constrain|>json`).
pub const CONSTRAIN: &str = "<|constrain|>";

/// Every structural marker of the channel format.
pub const MARKERS: [&str; 7] = [START, CHANNEL, MESSAGE, END, RETURN, CALL, CONSTRAIN];

/// The channel whose body is reasoning; every other channel is answer.
pub const REASONING_CHANNEL: &str = "analysis";

/// Longest header text (role, channel name, recipient, constraint) taken as a header: text that
/// runs past this, or has a character no header has, was not a header and is released as answer.
const MAX_HEADER: usize = 160;

/// Where a channel-format text stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelState {
    /// Outside any header and body: after the assistant's own header was rendered by the prompt,
    /// or after a message ended. Text here has no channel and is answer.
    Open,
    /// After `<|start|>`: reading a role and header (structural).
    Role,
    /// After `<|channel|>`: reading a channel name (structural).
    Header,
    /// Inside a message body.
    Body {
        /// The body belongs to the reasoning channel.
        reasoning: bool,
    },
}

/// The incremental channel splitter: push text as it is generated, read the reasoning and the
/// answer released so far.
#[derive(Debug, Clone)]
pub struct ChannelSplitter {
    state: ChannelState,
    /// Unread text: a tail that may still become a marker.
    pending: String,
    /// The header being read (role, channel name, …), held until `<|message|>` decides it.
    header: String,
    reasoning: String,
    answer: String,
}

impl ChannelSplitter {
    /// A splitter for a generation that starts in `state`.
    pub fn new(state: ChannelState) -> Self {
        Self {
            state,
            pending: String::new(),
            header: String::new(),
            reasoning: String::new(),
            answer: String::new(),
        }
    }

    /// The state a generation starts in after `prompt` (the rendered turn): the prompt is read
    /// with the same rules and its output discarded. A prompt that ends inside the assistant's
    /// header (`…<|start|>assistant`) leaves the header to the model: the next text is either a
    /// `<|channel|>` or, with no channel, answer ([`ChannelState::Open`]). A prompt that ends
    /// inside a body (`…<|channel|>final<|message|>`, reasoning turned off by prefilling) starts
    /// in that body.
    pub fn state_after(prompt: &str) -> ChannelState {
        let mut s = Self::new(ChannelState::Open);
        s.push(prompt);
        match s.state {
            ChannelState::Role => ChannelState::Open,
            other => other,
        }
    }

    #[cfg(test)]
    /// Where the text read so far stands.
    pub fn state(&self) -> ChannelState {
        self.state
    }

    #[cfg(test)]
    /// The reasoning released so far.
    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }

    #[cfg(test)]
    /// The answer released so far.
    pub fn answer(&self) -> &str {
        &self.answer
    }

    /// Reads more generated text.
    pub fn push(&mut self, text: &str) {
        self.pending.push_str(text);
        loop {
            match first_marker(&self.pending) {
                Some((at, marker)) => {
                    let before = self.pending[..at].to_string();
                    self.pending.drain(..at + marker.len());
                    self.text(&before);
                    self.marker(marker);
                }
                None => {
                    let keep = marker_prefix_len(&self.pending);
                    let release = self.pending.len() - keep;
                    let text: String = self.pending.drain(..release).collect();
                    self.text(&text);
                    return;
                }
            }
        }
    }

    /// The generation ended: a held tail that never became a marker is text after all. A header
    /// that was never closed by `<|message|>` is structural and is dropped.
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.pending);
        self.text(&rest);
        self.header.clear();
    }

    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.state {
            ChannelState::Open | ChannelState::Body { reasoning: false } => {
                self.answer.push_str(text);
            }
            ChannelState::Body { reasoning: true } => self.reasoning.push_str(text),
            ChannelState::Role | ChannelState::Header => {
                self.header.push_str(text);
                if !looks_like_header(&self.header) {
                    // not a header after all: what was held is answer text
                    self.answer.push_str(&self.header);
                    self.header.clear();
                    self.state = ChannelState::Body { reasoning: false };
                }
            }
        }
    }

    fn marker(&mut self, marker: &str) {
        match marker {
            START => {
                self.header.clear();
                self.state = ChannelState::Role;
            }
            CHANNEL => {
                self.header.clear();
                self.state = ChannelState::Header;
            }
            CONSTRAIN => {
                if matches!(self.state, ChannelState::Role | ChannelState::Header) {
                    self.header.push(' ');
                }
            }
            MESSAGE => match self.state {
                ChannelState::Header => {
                    let name = self.header.split_whitespace().next().unwrap_or("");
                    self.state = ChannelState::Body {
                        reasoning: name == REASONING_CHANNEL,
                    };
                    self.header.clear();
                }
                ChannelState::Role | ChannelState::Open => {
                    // a message without a channel is answer
                    self.state = ChannelState::Body { reasoning: false };
                    self.header.clear();
                }
                // a stray `<|message|>` inside a body changes nothing
                ChannelState::Body { .. } => {}
            },
            // END, RETURN, CALL
            _ => {
                self.header.clear();
                self.state = ChannelState::Open;
            }
        }
    }
}

/// The first marker in `text` and where it starts.
fn first_marker(text: &str) -> Option<(usize, &'static str)> {
    let mut from = 0;
    while let Some(i) = text[from..].find("<|") {
        let at = from + i;
        if let Some(m) = MARKERS.iter().find(|m| text[at..].starts_with(**m)) {
            return Some((at, m));
        }
        from = at + 1;
    }
    None
}

/// The length of the longest tail of `text` that is a proper prefix of a marker (0 if none).
fn marker_prefix_len(text: &str) -> usize {
    let Some(lt) = text.rfind('<') else {
        return 0;
    };
    // every marker starts with `<` and has no other `<`, so only the last one can start a prefix
    let tail = &text[lt..];
    if MARKERS
        .iter()
        .any(|m| m.len() > tail.len() && m.starts_with(tail))
    {
        tail.len()
    } else {
        0
    }
}

/// Whether `header` can still be a harmony header: a role, a channel name, ` to=recipient`, a
/// constraint — short, one line, no punctuation beyond what those use.
fn looks_like_header(header: &str) -> bool {
    header.len() <= MAX_HEADER
        && header.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.' | ':' | '=' | '/')
        })
}

/// How a rendered turn's generation is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitMode {
    /// Think-span markers (or none: all answer).
    Tags {
        /// The marker pair the template uses, if any.
        tags: Option<ThinkTags>,
        /// The prompt left a think span open.
        starts_in_reasoning: bool,
    },
    /// A channel format (harmony), starting in this state.
    Channels(ChannelState),
}

/// A generation's reasoning/answer split, fed token text as it is produced.
#[derive(Debug, Clone)]
pub enum ReasoningSplitter {
    /// Think spans: the split is recomputed from the whole text.
    Tags {
        /// The marker pair.
        tags: Option<ThinkTags>,
        /// The prompt left a think span open.
        starts_in_reasoning: bool,
        /// The whole generation so far.
        full: String,
    },
    /// Channels: incremental.
    Channels(ChannelSplitter),
}

impl ReasoningSplitter {
    /// A splitter for a generation rendered with `mode`.
    pub fn new(mode: SplitMode) -> Self {
        match mode {
            SplitMode::Tags {
                tags,
                starts_in_reasoning,
            } => Self::Tags {
                tags,
                starts_in_reasoning,
                full: String::new(),
            },
            SplitMode::Channels(state) => Self::Channels(ChannelSplitter::new(state)),
        }
    }

    /// Reads more generated text.
    pub fn push(&mut self, text: &str) {
        match self {
            Self::Tags { full, .. } => full.push_str(text),
            Self::Channels(c) => c.push(text),
        }
    }

    /// The generation ended: release anything held back.
    pub fn finish(&mut self) {
        if let Self::Channels(c) = self {
            c.finish();
        }
    }

    /// `(reasoning, answer)` as released so far.
    pub fn split(&self) -> (String, String) {
        match self {
            Self::Tags {
                tags,
                starts_in_reasoning,
                full,
            } => split_reasoning(full, *tags, *starts_in_reasoning),
            Self::Channels(c) => (c.reasoning.clone(), c.answer.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HARMONY_OUT: &str = "<|channel|>analysis<|message|>User says hi. Reply <|politely|>.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>";

    fn whole(state: ChannelState, text: &str) -> (String, String) {
        let mut s = ChannelSplitter::new(state);
        s.push(text);
        s.finish();
        (s.reasoning, s.answer)
    }

    /// Feeds `text` in the pieces `cuts` makes, checking after every piece that what was
    /// released only grew; returns the final split.
    fn pieces(state: ChannelState, text: &str, cuts: &[usize]) -> (String, String) {
        let mut s = ChannelSplitter::new(state);
        let (mut r, mut a) = (String::new(), String::new());
        let mut from = 0;
        for &to in cuts.iter().chain(std::iter::once(&text.len())) {
            s.push(&text[from..to]);
            assert!(s.reasoning.starts_with(&r), "reasoning shrank at {to}");
            assert!(s.answer.starts_with(&a), "answer shrank at {to}");
            for m in MARKERS {
                assert!(
                    !s.reasoning.contains(m) && !s.answer.contains(m),
                    "{m} leaked"
                );
            }
            (r, a) = (s.reasoning.clone(), s.answer.clone());
            from = to;
        }
        s.finish();
        assert!(s.reasoning.starts_with(&r) && s.answer.starts_with(&a));
        (s.reasoning, s.answer)
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_answer() {
        assert_eq!(
            whole(ChannelState::Open, HARMONY_OUT),
            (
                "User says hi. Reply <|politely|>.".to_string(),
                "Hello! How can I help?".to_string()
            )
        );
    }

    #[test]
    fn every_single_cut_gives_the_same_split() {
        let expected = whole(ChannelState::Open, HARMONY_OUT);
        for cut in 1..HARMONY_OUT.len() {
            assert_eq!(
                pieces(ChannelState::Open, HARMONY_OUT, &[cut]),
                expected,
                "cut at {cut}"
            );
        }
    }

    /// A tool call: a recipient and a constraint in the header, ended by `<|call|>`.
    const TOOL_OUT: &str = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>";

    #[test]
    fn byte_by_byte_and_every_pair_of_cuts_give_the_same_split() {
        for text in [HARMONY_OUT, TOOL_OUT] {
            let expected = whole(ChannelState::Open, text);
            let all: Vec<usize> = (1..text.len()).collect();
            assert_eq!(pieces(ChannelState::Open, text, &all), expected);
            // every marker cut in three pieces, wherever the two cuts fall
            for a in 1..text.len() {
                for b in a + 1..text.len() {
                    assert_eq!(
                        pieces(ChannelState::Open, text, &[a, b]),
                        expected,
                        "cuts {a},{b}"
                    );
                }
            }
        }
        assert_eq!(
            whole(ChannelState::Open, TOOL_OUT),
            (
                "Need the weather.".to_string(),
                "{\"city\":\"Oslo\"}".to_string()
            )
        );
    }

    #[test]
    fn a_marker_split_is_held_back_until_decided() {
        let mut s = ChannelSplitter::new(ChannelState::Body { reasoning: true });
        s.push("thinking<|en");
        assert_eq!(s.reasoning(), "thinking");
        s.push("d|>");
        assert_eq!(s.state(), ChannelState::Open);
        // a would-be marker that turns out to be text is released as text
        let mut s = ChannelSplitter::new(ChannelState::Body { reasoning: false });
        s.push("a <|en");
        assert_eq!(s.answer(), "a ");
        s.push("try|> b");
        assert_eq!(s.answer(), "a <|entry|> b");
        // and at the end of the generation, a held tail is text
        let mut s = ChannelSplitter::new(ChannelState::Body { reasoning: false });
        s.push("x <|ret");
        assert_eq!(s.answer(), "x ");
        s.finish();
        assert_eq!(s.answer(), "x <|ret");
    }

    #[test]
    fn no_final_channel_leaves_the_answer_empty() {
        assert_eq!(
            whole(
                ChannelState::Open,
                "<|channel|>analysis<|message|>hmm<|end|>"
            ),
            ("hmm".to_string(), String::new())
        );
    }

    #[test]
    fn unterminated_analysis_is_all_reasoning() {
        let text = "<|channel|>analysis<|message|>still thinking about it";
        assert_eq!(
            whole(ChannelState::Open, text),
            ("still thinking about it".to_string(), String::new())
        );
        // and an unterminated header is structural, never text
        assert_eq!(
            whole(ChannelState::Open, "<|channel|>analy"),
            (String::new(), String::new())
        );
    }

    #[test]
    fn plain_text_without_channels_is_all_answer() {
        for text in [
            "Paris.",
            "The capital is Paris, of course.",
            "",
            "a < b | c > d",
        ] {
            assert_eq!(
                whole(ChannelState::Open, text),
                (String::new(), text.to_string())
            );
        }
        // released at once, not held: nothing in it can start a marker
        let mut s = ChannelSplitter::new(ChannelState::Open);
        s.push("Paris");
        assert_eq!(s.answer(), "Paris");
    }

    #[test]
    fn a_header_that_is_not_one_is_released_as_answer() {
        // random text after a marker: more than a header can be
        assert_eq!(
            whole(ChannelState::Open, "<|start|>hello, world"),
            (String::new(), "hello, world".to_string())
        );
        // a recipient and a constraint stay in the header
        assert_eq!(
            whole(
                ChannelState::Open,
                "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
            ),
            (String::new(), "{}".to_string())
        );
    }

    #[test]
    fn the_prompt_decides_the_starting_state() {
        assert_eq!(
            ChannelSplitter::state_after("<|start|>user<|message|>hi<|end|><|start|>assistant"),
            ChannelState::Open
        );
        let prefilled = "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>analysis<|message|>\n\n<|end|><|start|>assistant<|channel|>final<|message|>";
        assert_eq!(
            ChannelSplitter::state_after(prefilled),
            ChannelState::Body { reasoning: false }
        );
        assert_eq!(
            whole(ChannelSplitter::state_after(prefilled), "Hi<|return|>"),
            (String::new(), "Hi".to_string())
        );
    }

    #[test]
    fn the_reasoning_splitter_runs_either_mode() {
        let mut s = ReasoningSplitter::new(SplitMode::Channels(ChannelState::Open));
        s.push(
            "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>a",
        );
        s.finish();
        assert_eq!(s.split(), ("r".to_string(), "a".to_string()));
        let tags = Some(ThinkTags {
            open: "<think>",
            close: "</think>",
        });
        let mut s = ReasoningSplitter::new(SplitMode::Tags {
            tags,
            starts_in_reasoning: false,
        });
        s.push("<think>r</think>a");
        assert_eq!(s.split(), ("r".to_string(), "a".to_string()));
    }
}
