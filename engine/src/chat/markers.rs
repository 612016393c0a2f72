//! Think markers (`<think>` … `</think>` and the other pairs templates use) and the split of a
//! generation into reasoning and answer by them.

/// A think-span marker pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkTags {
    /// Opening marker, e.g. `<think>`.
    pub open: &'static str,
    /// Closing marker, e.g. `</think>`.
    pub close: &'static str,
}

/// Marker pairs a template can declare by using them.
pub(super) const KNOWN_TAGS: &[ThinkTags] = &[
    ThinkTags {
        open: "<think>",
        close: "</think>",
    },
    ThinkTags {
        open: "<thinking>",
        close: "</thinking>",
    },
    ThinkTags {
        open: "<|START_THINKING|>",
        close: "<|END_THINKING|>",
    },
    // Gemma 4: the reasoning is a `thought` channel, `<|channel>thought\n…<channel|>`; the
    // channel's name is part of the opening marker so it stays out of the reasoning text
    ThinkTags {
        open: "<|channel>thought",
        close: "<channel|>",
    },
];

/// Splits the generation so far into `(reasoning, answer)`.
///
/// - Starting with the opening marker (after whitespace), or `starts_in_reasoning`: everything
///   up to the closing marker is reasoning (all of it while the marker has not come yet).
/// - Otherwise a closing marker with no opening one reclassifies everything before it as
///   reasoning (the late-closing-tag case).
/// - No markers (or `tags` is `None`): all answer.
///
/// Whitespace between the closing marker and the answer is dropped.
pub fn split_reasoning(
    full: &str,
    tags: Option<ThinkTags>,
    starts_in_reasoning: bool,
) -> (String, String) {
    let Some(t) = tags else {
        return (String::new(), full.to_string());
    };
    let trimmed = full.trim_start();
    let body = if let Some(rest) = trimmed.strip_prefix(t.open) {
        rest
    } else if starts_in_reasoning || full.contains(t.close) {
        full
    } else {
        return (String::new(), full.to_string());
    };
    match body.find(t.close) {
        Some(c) => (
            body[..c].trim_start().to_string(),
            body[c + t.close.len()..].trim_start().to_string(),
        ),
        None => (body.trim_start().to_string(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::template::ChatTemplate;
    use bmoe_gguf::synth::tokenizer::CHAT_TEMPLATE;

    fn tmpl() -> ChatTemplate {
        ChatTemplate::new(CHAT_TEMPLATE, "<|endoftext|>", "<|endoftext|>").unwrap()
    }

    #[test]
    fn split_follows_the_markers() {
        let tags = tmpl().think_tags();
        assert_eq!(
            split_reasoning("<think>\nhmm</think>\n\nParis", tags, false),
            ("hmm".into(), "Paris".into())
        );
        assert_eq!(
            split_reasoning("<think>still thinking", tags, false),
            ("still thinking".into(), String::new())
        );
        // late closing tag: what looked like answer becomes reasoning
        assert_eq!(
            split_reasoning("so the answer", tags, false),
            (String::new(), "so the answer".into())
        );
        assert_eq!(
            split_reasoning("so the answer</think>Tokyo", tags, false),
            ("so the answer".into(), "Tokyo".into())
        );
        assert_eq!(
            split_reasoning("pondering", tags, true),
            ("pondering".into(), String::new())
        );
        assert_eq!(
            split_reasoning("a</think>b", None, false),
            (String::new(), "a</think>b".into())
        );
    }

    #[test]
    fn late_close_resets_on_the_wire() {
        use bmoe_telemetry::deltas::DeltaEncoder;
        let tags = tmpl().think_tags();
        let mut enc = DeltaEncoder::new();
        let (r, a) = split_reasoning("so the", tags, false);
        let d1 = enc.encode(&r, &a);
        assert!(!d1.reset);
        let (r, a) = split_reasoning("so the</think>Tokyo", tags, false);
        let d2 = enc.encode(&r, &a);
        assert!(d2.reset, "reclassified answer must be a reset");
        assert_eq!(
            (d2.reasoning.as_str(), d2.text.as_str()),
            ("so the", "Tokyo")
        );
    }
}
