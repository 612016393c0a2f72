//! A byte-level BPE vocabulary (llama.cpp `gpt2` tokenizer model) and a ChatML chat template with
//! a Qwen3-style think span.

use crate::value::MetaValue;

/// Token type: normal.
const NORMAL: i32 = 1;
/// Token type: control (never rendered as text).
const CONTROL: i32 = 3;
/// Token type: user-defined (matched atomically, rendered as text).
const USER_DEFINED: i32 = 4;

/// The merges (byte-level BPE; `Ġ` is the space byte).
const MERGES: &[&str] = &["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "r e"];

/// Control tokens (ChatML).
pub const CONTROL_TOKENS: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// Think-span markers, user-defined so they render as text.
pub const THINK_TOKENS: &[&str] = &["<think>", "</think>"];

/// ChatML template with a think span; `enable_thinking=false` closes an empty span up front,
/// as Qwen3's template does.
pub const CHAT_TEMPLATE: &str = "{%- for message in messages %}\
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{%- endfor %}\
{%- if add_generation_prompt %}\
{{- '<|im_start|>assistant\\n' }}\
{%- if enable_thinking is defined and enable_thinking is false %}\
{{- '<think>\\n\\n</think>\\n\\n' }}\
{%- endif %}\
{%- endif %}";

/// GPT-2's byte → printable-unicode map.
fn byte_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        map[b as usize] = char::from_u32(c).unwrap_or('?');
    }
    map
}

/// The vocabulary: tokens, their types, merges, and special ids.
#[derive(Debug, Clone)]
pub struct Vocab {
    /// Token strings, id order.
    pub tokens: Vec<String>,
    /// Token types, id order.
    pub types: Vec<i32>,
    /// BPE merges.
    pub merges: Vec<String>,
    /// `<|endoftext|>`.
    pub bos: u32,
    /// `<|im_end|>`.
    pub eos: u32,
}

impl Vocab {
    /// Build the vocabulary with `extra` unreachable filler tokens appended (to reach a realistic
    /// vocabulary size for embedding/output bytes).
    pub fn new(extra: u32) -> Self {
        let b2u = byte_to_unicode();
        let mut tokens: Vec<String> = b2u.iter().map(|c| c.to_string()).collect();
        let mut types = vec![NORMAL; 256];
        for m in MERGES {
            tokens.push(m.replace(' ', ""));
            types.push(NORMAL);
        }
        for i in 0..extra {
            tokens.push(format!("extra{i}"));
            types.push(NORMAL);
        }
        let bos = tokens.len() as u32;
        for t in CONTROL_TOKENS {
            tokens.push((*t).to_string());
            types.push(CONTROL);
        }
        for t in THINK_TOKENS {
            tokens.push((*t).to_string());
            types.push(USER_DEFINED);
        }
        Self {
            tokens,
            types,
            merges: MERGES.iter().map(|m| (*m).to_string()).collect(),
            bos,
            eos: bos + 2,
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> u64 {
        self.tokens.len() as u64
    }

    /// Never empty (256 byte tokens at least).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokenizer metadata KVs.
    pub fn metadata(&self) -> Vec<(String, MetaValue)> {
        vec![
            (
                "tokenizer.ggml.model".into(),
                MetaValue::String("gpt2".into()),
            ),
            (
                "tokenizer.ggml.pre".into(),
                MetaValue::String("default".into()),
            ),
            (
                "tokenizer.ggml.tokens".into(),
                MetaValue::string_array(self.tokens.iter().cloned()),
            ),
            (
                "tokenizer.ggml.token_type".into(),
                MetaValue::i32_array(self.types.iter().copied()),
            ),
            (
                "tokenizer.ggml.merges".into(),
                MetaValue::string_array(self.merges.iter().cloned()),
            ),
            (
                "tokenizer.ggml.bos_token_id".into(),
                MetaValue::U32(self.bos),
            ),
            (
                "tokenizer.ggml.eos_token_id".into(),
                MetaValue::U32(self.eos),
            ),
            (
                "tokenizer.ggml.padding_token_id".into(),
                MetaValue::U32(self.bos),
            ),
            (
                "tokenizer.ggml.add_bos_token".into(),
                MetaValue::Bool(false),
            ),
            (
                "tokenizer.chat_template".into(),
                MetaValue::String(CHAT_TEMPLATE.into()),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_are_distinct_and_merges_resolve() {
        let v = Vocab::new(3);
        let set: std::collections::HashSet<_> = v.tokens.iter().collect();
        assert_eq!(set.len(), v.tokens.len());
        assert_eq!(v.tokens[b' ' as usize], "Ġ");
        assert_eq!(v.tokens[b'a' as usize], "a");
        for m in &v.merges {
            let (a, b) = m.split_once(' ').unwrap();
            assert!(set.contains(&a.to_string()) && set.contains(&b.to_string()));
            assert!(set.contains(&m.replace(' ', "")));
        }
        assert_eq!(v.tokens[v.bos as usize], "<|endoftext|>");
        assert_eq!(v.tokens[v.eos as usize], "<|im_end|>");
        assert!(CHAT_TEMPLATE.contains("enable_thinking"));
    }
}
