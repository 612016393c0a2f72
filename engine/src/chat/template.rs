//! The model's own chat template (`tokenizer.chat_template`, Jinja, through `minijinja`):
//! rendering turns, deciding how `think=false` is honoured (`think_ctl`), and which think
//! markers or channels the template declares.

use super::jinja::{self, Clock};
use super::markers::{KNOWN_TAGS, ThinkTags};
use super::reasoning::{self, ChannelSplitter, SplitMode};
use minijinja::{Environment, Error as JinjaError, context};

/// A chat-template failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    /// The template ignores the flag, but reasoning is a structural section the turn can be
    /// started past (harmony channels): a `think=false` turn is rendered as a continuation of an
    /// assistant message whose reasoning is already closed and empty.
    Prefill,
    /// The model owns its think span and cannot be asked not to reason.
    None,
}

impl ThinkCtl {
    /// The protocol spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ThinkCtl::Template => "template",
            ThinkCtl::Prefill => "prefill",
            ThinkCtl::None => "none",
        }
    }

    /// The matching `bmoe_telemetry` value (for `BMOE_READY`).
    pub fn to_wire(self) -> bmoe_telemetry::protocol::ThinkCtl {
        bmoe_telemetry::protocol::ThinkCtl::from_wire(self.as_str())
    }
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user.
    User,
    /// The model.
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message of a conversation, as the template sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// The text (for the assistant: the answer, without the reasoning).
    pub content: String,
    /// The assistant's reasoning, empty when there was none. Passed to the template as both
    /// `reasoning_content` (Qwen3 style) and `thinking` (harmony style) when non-empty.
    pub reasoning: String,
}

impl Message {
    /// A user message.
    pub fn user(content: &str) -> Self {
        Self {
            role: Role::User,
            content: content.to_string(),
            reasoning: String::new(),
        }
    }

    /// An assistant message with its reasoning (may be empty).
    pub fn assistant(content: &str, reasoning: &str) -> Self {
        Self {
            role: Role::Assistant,
            content: content.to_string(),
            reasoning: reasoning.to_string(),
        }
    }

    fn to_value(&self) -> minijinja::Value {
        let mut fields = vec![
            ("role", minijinja::Value::from(self.role.as_str())),
            ("content", minijinja::Value::from(self.content.as_str())),
        ];
        if !self.reasoning.is_empty() {
            fields.push((
                "reasoning_content",
                minijinja::Value::from(self.reasoning.as_str()),
            ));
            fields.push(("thinking", minijinja::Value::from(self.reasoning.as_str())));
        }
        minijinja::Value::from_iter(fields)
    }
}

/// Marks where a continued assistant message's content would start: rendered as the content,
/// then cut off with everything after it (the template's end-of-turn markup). No template
/// emits this text of its own.
const CONTINUATION_MARK: &str = "\u{1}bmoe-continue\u{1}";

/// The reasoning of a turn started past its reasoning section (`think_ctl` prefill): closed and
/// empty but for the blank line templates put in an empty section. A continued chat gives the
/// turn this reasoning back in its history, so the re-render matches what the KV holds.
pub const PREFILLED_REASONING: &str = "\n\n";

/// A rendered turn: the prompt text and how its generation starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedTurn {
    /// The whole conversation, ready to tokenize.
    pub text: String,
    /// Whether the generation starts inside an open think span.
    pub starts_in_reasoning: bool,
    /// How the generation is split into reasoning and answer: by the template's think markers,
    /// or, on a channel format, by channel (starting where the prompt left off).
    pub split: SplitMode,
    /// The turn was started past a closed reasoning section ([`PREFILLED_REASONING`]).
    pub prefilled: bool,
}

/// A model's chat template, checked to parse and to render a one-message chat.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    /// The template as minijinja parses it ([`jinja::normalise`]d).
    source: String,
    bos: String,
    eos: String,
    tags: Option<ThinkTags>,
    channels: bool,
    /// What `strftime_now` formats: one instant for every render of this template.
    clock: Clock,
    ctl: ThinkCtl,
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
    /// token texts, which templates may reference as `bos_token`/`eos_token`. Decides
    /// [`Self::think_ctl`] on the spot, by rendering.
    ///
    /// # Errors
    /// [`ChatError::Template`] when the template does not parse, or cannot render the simplest
    /// chat there is (one user message, thinking on and off): then no turn could be rendered, and
    /// no `think_ctl` would mean anything.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self, ChatError> {
        Self::with_clock(source, bos, eos, Clock::now())
    }

    /// [`Self::new`], with `strftime_now` formatting `clock` rather than the time of the call.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_clock(source: &str, bos: &str, eos: &str, clock: Clock) -> Result<Self, ChatError> {
        let t = Self {
            source: jinja::normalise(source),
            bos: bos.to_string(),
            eos: eos.to_string(),
            tags: KNOWN_TAGS
                .iter()
                .copied()
                .find(|t| source.contains(t.open) && source.contains(t.close)),
            channels: false,
            clock,
            ctl: ThinkCtl::Template,
        };
        t.env()
            .template_from_str(&t.source)
            .map_err(|e| template_error(&e))?;
        let t = Self {
            channels: t.renders_channels(),
            ..t
        };
        let ctl = t.probe_think_ctl()?;
        Ok(Self { ctl, ..t })
    }

    /// Whether the template is a channel format (harmony): an assistant message's answer is
    /// rendered as the body of a `<|channel|>…<|message|>` header. Decided by rendering a probe
    /// conversation, never from the model's name.
    fn renders_channels(&self) -> bool {
        let probe = [
            Message::user("hi"),
            Message::assistant(CONTINUATION_MARK, "\u{1}bmoe-reasoning\u{1}"),
        ];
        let Ok(text) = self.render_messages(&probe, true, false) else {
            return false;
        };
        let Some(at) = text.rfind(CONTINUATION_MARK) else {
            return false;
        };
        let head = &text[..at];
        head.ends_with(reasoning::MESSAGE) && head.contains(reasoning::CHANNEL)
    }

    /// Whether the template is a channel format (harmony); then the reasoning/answer split goes
    /// by channel ([`super::reasoning::ChannelSplitter`]), not by think markers.
    pub fn is_channel_format(&self) -> bool {
        self.channels
    }

    fn env(&self) -> Environment<'static> {
        jinja::environment(self.clock)
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
        self.render_messages(&[Message::user(user)], think, true)
    }

    /// Renders `messages`; `add_generation_prompt` opens the assistant's turn after them.
    ///
    /// # Errors
    /// [`ChatError::Template`] when rendering fails (e.g. the template raises).
    pub fn render_messages(
        &self,
        messages: &[Message],
        think: bool,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let env = self.env();
        let tmpl = env
            .template_from_str(&self.source)
            .map_err(|e| template_error(&e))?;
        let messages: Vec<minijinja::Value> = messages.iter().map(Message::to_value).collect();
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            enable_thinking => think,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        })
        .map_err(|e| template_error(&e))
    }

    /// `messages` followed by an assistant message whose reasoning is already closed and empty,
    /// rendered so the generation continues that message's (empty) content — the `prefill`
    /// way of turning reasoning off.
    ///
    /// # Errors
    /// [`ChatError::Template`] when rendering fails, or when the template drops the message's
    /// content (then there is nothing to continue).
    pub fn render_prefilled(&self, messages: &[Message]) -> Result<String, ChatError> {
        let mut all = messages.to_vec();
        all.push(Message::assistant(CONTINUATION_MARK, PREFILLED_REASONING));
        let text = self.render_messages(&all, false, false)?;
        match text.rfind(CONTINUATION_MARK) {
            Some(at) => Ok(text[..at].to_string()),
            None => Err(ChatError::Template(
                "the template does not render the assistant's content, so a turn cannot be continued".into(),
            )),
        }
    }

    /// Renders the conversation `history` (ending with the new user message) for the next
    /// generation. `think=false` on a `prefill` template starts the turn past the reasoning.
    ///
    /// # Errors
    /// [`ChatError::Template`] when rendering fails.
    pub fn render_turn(
        &self,
        history: &[Message],
        think: bool,
        ctl: ThinkCtl,
    ) -> Result<RenderedTurn, ChatError> {
        let prefilled = !think && ctl == ThinkCtl::Prefill;
        let text = if prefilled {
            self.render_prefilled(history)?
        } else {
            self.render_messages(history, think, true)?
        };
        let starts_in_reasoning = self.opens_in_reasoning(&text);
        let split = if self.channels {
            SplitMode::Channels(ChannelSplitter::state_after(&text))
        } else {
            SplitMode::Tags {
                tags: self.tags,
                starts_in_reasoning,
            }
        };
        Ok(RenderedTurn {
            starts_in_reasoning,
            split,
            prefilled,
            text,
        })
    }

    /// Whether a generation after `prompt` starts inside an open think span (the prompt opened
    /// one and did not close it).
    pub fn opens_in_reasoning(&self, prompt: &str) -> bool {
        self.tags.is_some_and(|t| match prompt.rfind(t.open) {
            Some(o) => prompt.rfind(t.close).is_none_or(|c| c < o),
            None => false,
        })
    }

    /// How `think=false` is honoured on this template (decided by [`Self::new`]).
    pub fn think_ctl(&self) -> ThinkCtl {
        self.ctl
    }

    /// The seed's `think_ctl` probe (engine spec §4.3), decided from what the template renders:
    ///
    /// - `enable_thinking` changes the render → `template`;
    /// - otherwise render the turn as a continuation of an assistant message whose reasoning
    ///   is already closed (`render_prefilled`). A template that owns a think span (declares a
    ///   marker pair and uses it) gets `prefill` only if that changed the render *and* something
    ///   other than whitespace follows the last closing marker (the answer section is opened
    ///   structurally), else `none` — the model reasons past a span it owns. A template without
    ///   a span of its own gets `prefill` when the continuation differs (a channel-style
    ///   format), else `template` (nothing to suppress). A template that cannot render a
    ///   continued assistant message cannot be started past its reasoning: as if the
    ///   continuation changed nothing.
    ///
    /// # Errors
    /// The one-message render fails: that is the template's error, not a `think_ctl` (the seed
    /// says `template` here, which would promise a toggle on a template that renders nothing).
    fn probe_think_ctl(&self) -> Result<ThinkCtl, ChatError> {
        let probe_error = |e: ChatError| match e {
            ChatError::Template(m) => {
                ChatError::Template(format!("rendering a one-message chat (\"hi\") failed: {m}"))
            }
            other => other,
        };
        let off = self.render("hi", false).map_err(probe_error)?;
        let on = self.render("hi", true).map_err(probe_error)?;
        if off != on {
            return Ok(ThinkCtl::Template);
        }
        let prefilled = self.render_prefilled(&[Message::user("hi")]).ok();
        // trailing whitespace differs between a generation prompt and a continued message in
        // some templates without meaning anything
        let differs = prefilled
            .as_deref()
            .is_some_and(|p| p.trim_end() != off.trim_end());
        Ok(match (self.tags, prefilled) {
            (Some(t), Some(prefilled)) => {
                let after_close = prefilled
                    .rfind(t.close)
                    .map(|c| &prefilled[c + t.close.len()..]);
                if differs && after_close.is_some_and(|rest| !rest.trim().is_empty()) {
                    ThinkCtl::Prefill
                } else {
                    ThinkCtl::None
                }
            }
            (Some(_), None) => ThinkCtl::None,
            (None, _) if differs => ThinkCtl::Prefill,
            (None, _) => ThinkCtl::Template,
        })
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
    fn renders_a_conversation_for_continuation() {
        let t = tmpl();
        let history = [
            Message::user("a"),
            Message::assistant("b", "why"),
            Message::user("c"),
        ];
        let turn = t.render_turn(&history, true, ThinkCtl::Template).unwrap();
        assert_eq!(
            turn.text,
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(!turn.starts_in_reasoning);
        // the first turn's render is a prefix of the second's: the KV prefix can be reused
        let first = t
            .render_turn(&history[..1], true, ThinkCtl::Template)
            .unwrap();
        assert!(
            turn.text
                .starts_with(first.text.trim_end_matches("<|im_start|>assistant\n"))
        );
    }

    /// A harmony-style (gpt-oss) template: reasoning is a channel, `enable_thinking` is ignored.
    const HARMONY: &str = "{%- for message in messages -%}\
{%- if message.role == 'assistant' -%}\
{%- if message.thinking is defined and message.thinking -%}<|start|>assistant<|channel|>analysis<|message|>{{ message.thinking }}<|end|>{%- endif -%}\
<|start|>assistant<|channel|>final<|message|>{{ message.content }}<|return|>\
{%- else -%}<|start|>{{ message.role }}<|message|>{{ message.content }}<|end|>{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";

    /// An LFM2.5-style template: owns a `<think>` span and ignores `enable_thinking`.
    const OWNS_SPAN: &str = "{%- for message in messages -%}<|im_start|>{{ message.role }}\n\
{%- if message.role == 'assistant' and message.reasoning_content is defined -%}<think>{{ message.reasoning_content }}</think>{%- endif -%}\
{{ message.content }}<|im_end|>\n{%- endfor -%}\
{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}";

    /// A non-reasoning ChatML template (no span, no flag).
    const PLAIN_CHATML: &str = "{%- for message in messages -%}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endfor -%}\
{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}";

    #[test]
    fn think_ctl_follows_the_seed_table() {
        let t = |src: &str| ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(tmpl().think_ctl(), ThinkCtl::Template);
        assert_eq!(t(HARMONY).think_ctl(), ThinkCtl::Prefill);
        assert_eq!(t(OWNS_SPAN).think_ctl(), ThinkCtl::None);
        assert_eq!(t(PLAIN_CHATML).think_ctl(), ThinkCtl::Template);
        assert_eq!(ThinkCtl::Prefill.as_str(), "prefill");
        assert_eq!(ThinkCtl::None.to_wire().as_str(), "none");
    }

    #[test]
    fn prefill_turn_starts_past_the_reasoning() {
        let h = ChatTemplate::new(HARMONY, "", "").unwrap();
        let history = [Message::user("hi")];
        let off = h.render_turn(&history, false, ThinkCtl::Prefill).unwrap();
        assert_eq!(
            off.text,
            "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>analysis<|message|>\n\n<|end|><|start|>assistant<|channel|>final<|message|>"
        );
        let on = h.render_turn(&history, true, ThinkCtl::Prefill).unwrap();
        assert_eq!(
            on.text,
            "<|start|>user<|message|>hi<|end|><|start|>assistant"
        );
        // a template that drops the content cannot be continued: an error, not a wrong prompt
        let drops = ChatTemplate::new("{{ messages[0].content }}", "", "").unwrap();
        assert!(drops.render_prefilled(&history).is_err());
    }

    #[test]
    fn channel_formats_are_recognised_by_what_they_render() {
        let t = |src: &str| ChatTemplate::new(src, "", "").unwrap();
        assert!(t(HARMONY).is_channel_format());
        assert!(!tmpl().is_channel_format());
        assert!(!t(OWNS_SPAN).is_channel_format());
        assert!(!t(PLAIN_CHATML).is_channel_format());
        // a template that only mentions the markers in a comment renders none of them
        assert!(!t("{# <|channel|> <|message|> #}{{ messages[0].content }}").is_channel_format());
        let h = t(HARMONY);
        let history = [Message::user("hi")];
        assert_eq!(
            h.render_turn(&history, true, ThinkCtl::Prefill)
                .unwrap()
                .split,
            SplitMode::Channels(crate::chat::reasoning::ChannelState::Open)
        );
        assert_eq!(
            h.render_turn(&history, false, ThinkCtl::Prefill)
                .unwrap()
                .split,
            SplitMode::Channels(crate::chat::reasoning::ChannelState::Body { reasoning: false })
        );
        assert_eq!(
            tmpl()
                .render_turn(&history, false, ThinkCtl::Template)
                .unwrap()
                .split,
            SplitMode::Tags {
                tags: tmpl().think_tags(),
                starts_in_reasoning: false
            }
        );
    }

    #[test]
    fn a_harmony_turn_re_renders_as_it_was_generated() {
        // what a harmony model generates after the turn's prompt, split by channel, must come
        // back verbatim when the history is re-rendered: that is what lets a continued chat
        // reuse the KV of the whole previous turn
        let h = ChatTemplate::new(HARMONY, "", "").unwrap();
        let mut history = vec![Message::user("hi")];
        let turn = h.render_turn(&history, true, ThinkCtl::Prefill).unwrap();
        let generated = "<|channel|>analysis<|message|>Greet back.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>";
        let mut s = crate::chat::reasoning::ReasoningSplitter::new(turn.split);
        s.push(generated);
        s.finish();
        let (reasoning, answer) = s.split();
        assert_eq!(
            (reasoning.as_str(), answer.as_str()),
            ("Greet back.", "Hello!")
        );
        history.push(Message::assistant(&answer, &reasoning));
        history.push(Message::user("and?"));
        let next = h.render_turn(&history, true, ThinkCtl::Prefill).unwrap();
        assert!(
            next.text.starts_with(&format!("{}{generated}", turn.text)),
            "{}",
            next.text
        );
    }

    #[test]
    fn broken_templates_are_errors_not_panics() {
        let e = ChatTemplate::new("{% for %}", "", "").unwrap_err();
        assert!(e.to_string().contains("chat template failed"));
        // a template that cannot render one user message is refused when it is loaded, with
        // its own words, rather than given a think_ctl
        let raising = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "")
            .unwrap_err()
            .to_string();
        assert!(raising.contains("no system role"), "{raising}");
        assert!(raising.contains("one-message chat"), "{raising}");
        let unknown = ChatTemplate::new("{{ messages | frobnicate }}", "", "")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("frobnicate"), "{unknown}");
        // one that renders a user message but not a continued assistant one is still usable:
        // it just cannot be started past its reasoning
        let no_assistant = ChatTemplate::new(
            "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no') }}{% endif %}<{{ m.content }}>{% endfor %}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(no_assistant.think_ctl(), ThinkCtl::Template);
        let plain = ChatTemplate::new("{{ messages[0].content }}", "", "").unwrap();
        assert_eq!(plain.think_tags(), None);
        assert_eq!(plain.think_ctl(), ThinkCtl::Template);
    }
}
