//! `think_ctl`, the rendered prompts and the reasoning/answer split on the **real** chat
//! templates of the model families bmoe runs, kept byte for byte under
//! `engine/tests/fixtures/chat-templates/` (its README names each file's source). The synthetic
//! templates elsewhere test the rules; these test that the rules land where the seed says on
//! what models actually ship — and that those templates render at all (Python string methods,
//! `strftime_now`, `{% generation %}`, namespaces, `tojson`).

use super::jinja::Clock;
use super::reasoning::ReasoningSplitter;
use super::template::{ChatTemplate, Message, ThinkCtl};

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/chat-templates/",
            $name
        ))
    };
}

/// Qwen3-30B-A3B (the Qwen3 hybrid-thinking template, as llama.cpp keeps it for Qwen3-0.6B).
const QWEN3: &str = fixture!("qwen3.jinja");
/// Qwen3.6-35B-A3B (qwen35moe), as its GGUF carries it.
const QWEN36: &str = fixture!("qwen3.6.jinja");
/// Gemma 4.
const GEMMA4: &str = fixture!("gemma4.jinja");
/// gpt-oss (harmony).
const GPT_OSS: &str = fixture!("gpt-oss.jinja");
/// LFM2.5-8B-A1B: reasons, in a `<think>` span of its own, on every turn.
const LFM25: &str = fixture!("lfm2.5-8b-a1b.jinja");
/// LFM2 (LFM2-8B-A1B): does not reason.
const LFM2: &str = fixture!("lfm2.jinja");

/// 2023-11-14 22:13:20 UTC: what `strftime_now` says in these tests.
const CLOCK: Clock = Clock(1_700_000_000);

fn load(src: &str, bos: &str) -> ChatTemplate {
    ChatTemplate::with_clock(src, bos, bos, CLOCK).expect("the real template renders")
}

/// Renders the first turn of a chat (`hi`) with `think`, feeds `generated` to the splitter the
/// turn asks for, and returns `(prompt, reasoning, answer)`.
fn turn(t: &ChatTemplate, think: bool, generated: &str) -> (String, String, String) {
    let turn = t
        .render_turn(&[Message::user("hi")], think, t.think_ctl())
        .unwrap();
    let mut s = ReasoningSplitter::new(turn.split);
    // token-sized pieces: the channel splitter must get there however the text arrives
    let mut rest = generated;
    while !rest.is_empty() {
        let cut = rest.char_indices().nth(3).map_or(rest.len(), |(i, _)| i);
        s.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    s.finish();
    let (reasoning, answer) = s.split();
    (turn.text, reasoning, answer)
}

#[test]
fn qwen3_reads_enable_thinking() {
    let t = load(QWEN3, "<|endoftext|>");
    // `enable_thinking=false` appends an empty, closed think span to the generation prompt:
    // the two renders differ, so the flag is all it takes → template
    assert_eq!(t.think_ctl(), ThinkCtl::Template);
    assert!(!t.is_channel_format());
    let head = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    let (prompt, reasoning, answer) =
        turn(&t, true, "<think>\nThe user greets.\n</think>\n\nHello!");
    assert_eq!(prompt, head);
    assert_eq!(
        (reasoning.as_str(), answer.as_str()),
        ("The user greets.\n", "Hello!")
    );
    let (prompt, reasoning, answer) = turn(&t, false, "Hello!");
    assert_eq!(prompt, format!("{head}<think>\n\n</think>\n\n"));
    assert_eq!((reasoning.as_str(), answer.as_str()), ("", "Hello!"));
}

#[test]
fn qwen36_opens_the_think_span_itself() {
    let t = load(QWEN36, "<|endoftext|>");
    // thinking on opens `<think>\n` in the prompt, off closes it empty: the renders differ
    // → template
    assert_eq!(t.think_ctl(), ThinkCtl::Template);
    let head = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    // the generation starts inside the span the prompt opened: no opening tag comes
    let (prompt, reasoning, answer) = turn(&t, true, "The user greets.\n</think>\n\nHello!");
    assert_eq!(prompt, format!("{head}<think>\n"));
    assert_eq!(
        (reasoning.as_str(), answer.as_str()),
        ("The user greets.\n", "Hello!")
    );
    let (prompt, reasoning, answer) = turn(&t, false, "Hello!");
    assert_eq!(prompt, format!("{head}<think>\n\n</think>\n\n"));
    assert_eq!((reasoning.as_str(), answer.as_str()), ("", "Hello!"));
}

#[test]
fn gemma4_switches_thinking_in_the_system_turn() {
    let t = load(GEMMA4, "<bos>");
    // thinking on puts `<|think|>` in a system turn, off prefills an empty thought channel:
    // the renders differ → template
    assert_eq!(t.think_ctl(), ThinkCtl::Template);
    assert_eq!(t.think_tags().map(|g| g.open), Some("<|channel>thought"));
    let (prompt, reasoning, answer) = turn(
        &t,
        true,
        "<|channel>thought\nThe user greets.<channel|>Hello!",
    );
    assert_eq!(
        prompt,
        "<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n"
    );
    assert_eq!(
        (reasoning.as_str(), answer.as_str()),
        ("The user greets.", "Hello!")
    );
    let (prompt, reasoning, answer) = turn(&t, false, "Hello!");
    assert_eq!(
        prompt,
        "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    );
    assert!(!t.opens_in_reasoning(&prompt));
    assert_eq!((reasoning.as_str(), answer.as_str()), ("", "Hello!"));
}

#[test]
fn gpt_oss_is_started_past_its_analysis_channel() {
    let t = load(GPT_OSS, "<|startoftext|>");
    // the template never reads enable_thinking (the renders are equal); the continued assistant
    // message renders an analysis message and opens the final channel, and the template has no
    // think span of its own → prefill
    assert_eq!(t.think_ctl(), ThinkCtl::Prefill);
    assert!(t.is_channel_format());
    assert_eq!(t.think_tags(), None);
    let system = "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2023-11-14\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>";
    let user = "<|start|>user<|message|>hi<|end|>";
    let (prompt, reasoning, answer) = turn(
        &t,
        true,
        "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
    );
    assert_eq!(prompt, format!("{system}{user}<|start|>assistant"));
    assert_eq!(
        (reasoning.as_str(), answer.as_str()),
        ("The user greets.", "Hello!")
    );
    let (prompt, reasoning, answer) = turn(&t, false, "Hello!<|return|>");
    assert_eq!(
        prompt,
        format!(
            "{system}{user}<|start|>assistant<|channel|>analysis<|message|>\n\n<|end|><|start|>assistant<|channel|>final<|message|>"
        )
    );
    assert_eq!((reasoning.as_str(), answer.as_str()), ("", "Hello!"));
}

#[test]
fn lfm25_owns_its_think_span() {
    let t = load(LFM25, "<|startoftext|>");
    // enable_thinking is never read (equal renders); handed a closed, empty span the prompt
    // ends right after `</think>` with no answer section opened, and the template renders the
    // span itself → none: the model reasons whatever the request says
    assert_eq!(t.think_ctl(), ThinkCtl::None);
    let prefilled = t.render_prefilled(&[Message::user("hi")]).unwrap();
    assert!(
        prefilled.ends_with("<|im_start|>assistant\n<think>\n\n</think>"),
        "{prefilled:?}"
    );
    let prompt_on = t.render("hi", true).unwrap();
    assert_eq!(
        prompt_on,
        "<|startoftext|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let generated = "<think>The user greets.</think>Hello!";
    for think in [true, false] {
        // think=false renders the same prompt (nothing was prefilled) and the model reasons:
        // the split still finds it
        let (prompt, reasoning, answer) = turn(&t, think, generated);
        assert_eq!(prompt, prompt_on);
        assert_eq!(
            (reasoning.as_str(), answer.as_str()),
            ("The user greets.", "Hello!")
        );
    }
    // the `{% generation %}` block renders its body: the reasoning goes back into the history
    let history = [
        Message::user("hi"),
        Message::assistant("Hello!", "The user greets."),
    ];
    let text = t.render_messages(&history, true, false).unwrap();
    assert!(
        text.ends_with("<|im_start|>assistant\n<think>The user greets.</think>Hello!<|im_end|>\n"),
        "{text:?}"
    );
}

#[test]
fn lfm2_does_not_reason() {
    let t = load(LFM2, "<|startoftext|>");
    // no think span in the template (the family's parser publishes `<think>`, this template
    // never uses it), enable_thinking unread, and a continued message renders exactly the
    // generation prompt → template: nothing to suppress
    assert_eq!(t.think_ctl(), ThinkCtl::Template);
    assert_eq!(t.think_tags(), None);
    for think in [true, false] {
        let (prompt, reasoning, answer) = turn(&t, think, "Hello! <think> is a tag.");
        assert_eq!(
            prompt,
            "<|startoftext|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            (reasoning.as_str(), answer.as_str()),
            ("", "Hello! <think> is a tag.")
        );
    }
}

#[test]
fn every_real_template_renders_a_continued_chat() {
    // a second turn after a reasoned first one: history rendering, not just the first prompt
    for (name, src) in [
        ("qwen3", QWEN3),
        ("qwen3.6", QWEN36),
        ("gemma4", GEMMA4),
        ("gpt-oss", GPT_OSS),
        ("lfm2.5", LFM25),
        ("lfm2", LFM2),
    ] {
        let t = load(src, "<s>");
        let history = [
            Message::user("hi"),
            Message::assistant("Hello!", "The user greets."),
            Message::user("and?"),
        ];
        for think in [true, false] {
            let turn = t.render_turn(&history, think, t.think_ctl()).unwrap();
            assert!(turn.text.contains("Hello!"), "{name}: {:?}", turn.text);
            assert!(turn.text.contains("and?"), "{name}: {:?}", turn.text);
        }
    }
}
