//! `--chatml`: renders the model's own chat template (`tokenizer.chat_template`, Jinja, through
//! `minijinja`) around the prompt, and splits generated text into reasoning and answer using the
//! think markers the template declares, or by channel when the template is a channel format
//! (harmony; [`crate::chat::reasoning`]). `--no-think` passes `enable_thinking=false`.
//!
//! The split works on the whole generation so far, so a late closing tag that turns text already
//! shown as answer into reasoning is expressed by the wire's `reset:1` snapshot
//! (`bmoe_telemetry::deltas::DeltaEncoder` decides that), not by this module.

#[cfg(test)]
mod fixtures;
pub mod jinja;
pub mod markers;
pub mod reasoning;
pub mod template;
pub mod text;

pub use template::{ChatError, ChatTemplate, Message, PREFILLED_REASONING, ThinkCtl};
