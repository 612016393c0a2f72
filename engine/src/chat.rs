//! `--chatml`: renders the model's own chat template (`tokenizer.chat_template`, Jinja, through
//! `minijinja`) around the prompt, and splits generated text into reasoning and answer using the
//! think markers the template declares (`--no-think` passes `enable_thinking=false`).
//!
//! The split works on the whole generation so far, so a late closing tag that turns text already
//! shown as answer into reasoning is expressed by the wire's `reset:1` snapshot
//! (`bmoe_telemetry::deltas::DeltaEncoder` decides that), not by this module.

use minijinja::{Environment, Error as JinjaError, ErrorKind, context};

/// A think-span marker pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkTags {
    /// Opening marker, e.g. `<think>`.
    pub open: &'static str,
    /// Closing marker, e.g. `</think>`.
    pub close: &'static str,
}

/// Marker pairs a template can declare by using them.
const KNOWN_TAGS: &[ThinkTags] = &[
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
];

/// A chat-template failure.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The model has no `tokenizer.chat_template`.
    #[error("--chatml: the model has no tokenizer.chat_template")]
    NoTemplate,
    /// The template does not parse or fails to render.
    #[error("--chatml: the model's chat template failed: {0}")]
    Template(String),
}

/// How a `think=false` request can be honoured on this template (the seed's `think_ctl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkCtl {
    /// Passing the flag is all there is to do (the template reads it, or nothing to suppress).
    Template,
    /// The model owns its think span and cannot be asked not to reason.
    None,
}

impl ThinkCtl {
    /// The protocol spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ThinkCtl::Template => "template",
            ThinkCtl::None => "none",
        }
    }
}

/// A model's chat template, checked to parse.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos: String,
    eos: String,
    tags: Option<ThinkTags>,
}

fn raise_exception(msg: String) -> Result<String, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

fn template_error(e: &JinjaError) -> ChatError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    ChatError::Template(msg)
}

impl ChatTemplate {
    /// Wraps `source` (the GGUF's `tokenizer.chat_template`); `bos`/`eos` are the vocabulary's
    /// token texts, which templates may reference as `bos_token`/`eos_token`.
    ///
    /// # Errors
    /// [`ChatError::Template`] when the template does not parse.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self, ChatError> {
        let t = Self {
            source: source.to_string(),
            bos: bos.to_string(),
            eos: eos.to_string(),
            tags: KNOWN_TAGS
                .iter()
                .copied()
                .find(|t| source.contains(t.open) && source.contains(t.close)),
        };
        t.env()
            .template_from_str(&t.source)
            .map_err(|e| template_error(&e))?;
        Ok(t)
    }

    fn env(&self) -> Environment<'_> {
        let mut env = Environment::new();
        env.add_function("raise_exception", raise_exception);
        env
    }

    /// The think markers the template declares (uses), if any.
    pub fn think_tags(&self) -> Option<ThinkTags> {
        self.tags
    }

    /// Renders a one-user-message conversation with the generation prompt.
    ///
    /// # Errors
    /// [`ChatError::Template`] when rendering fails (e.g. the template raises).
    pub fn render(&self, user: &str, think: bool) -> Result<String, ChatError> {
        let env = self.env();
        let tmpl = env
            .template_from_str(&self.source)
            .map_err(|e| template_error(&e))?;
        tmpl.render(context! {
            messages => vec![context! { role => "user", content => user }],
            add_generation_prompt => true,
            enable_thinking => think,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        })
        .map_err(|e| template_error(&e))
    }

    /// Whether a generation after `prompt` starts inside an open think span (the prompt opened
    /// one and did not close it).
    pub fn opens_in_reasoning(&self, prompt: &str) -> bool {
        self.tags.is_some_and(|t| match prompt.rfind(t.open) {
            Some(o) => prompt.rfind(t.close).is_none_or(|c| c < o),
            None => false,
        })
    }

    /// The seed's `think_ctl` probe (engine spec §4.3), without the prefill-continuation case:
    /// `template` when `enable_thinking` changes the render, `none` when it does not and the
    /// template owns a think span, else `template`.
    pub fn think_ctl(&self) -> ThinkCtl {
        match (self.render("hi", false), self.render("hi", true)) {
            (Ok(off), Ok(on)) if off != on => ThinkCtl::Template,
            (Ok(_), Ok(_)) if self.tags.is_some() => ThinkCtl::None,
            _ => ThinkCtl::Template,
        }
    }
}

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
    use bmoe_gguf::synth::tokenizer::CHAT_TEMPLATE;

    fn tmpl() -> ChatTemplate {
        ChatTemplate::new(CHAT_TEMPLATE, "<|endoftext|>", "<|endoftext|>").unwrap()
    }

    #[test]
    fn renders_the_synthetic_chatml_template() {
        let t = tmpl();
        assert_eq!(
            t.render("hello", true).unwrap(),
            "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
        );
        let off = t.render("hello", false).unwrap();
        assert!(off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!t.opens_in_reasoning(&off));
        assert!(t.opens_in_reasoning("x<think>\n"));
        assert_eq!(t.think_tags().map(|t| t.open), Some("<think>"));
        assert_eq!(t.think_ctl(), ThinkCtl::Template);
    }

    #[test]
    fn broken_templates_are_errors_not_panics() {
        let e = ChatTemplate::new("{% for %}", "", "").unwrap_err();
        assert!(e.to_string().contains("chat template failed"));
        let raising = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        assert!(
            raising
                .render("x", true)
                .unwrap_err()
                .to_string()
                .contains("no system role")
        );
        let plain = ChatTemplate::new("{{ messages[0].content }}", "", "").unwrap();
        assert_eq!(plain.think_tags(), None);
        assert_eq!(plain.think_ctl(), ThinkCtl::Template);
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
