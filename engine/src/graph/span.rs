//! Which decode the graph is running: the rows its routings and node timings become.

/// The decode being traced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeSpan {
    /// Session turn (0 one-shot).
    pub turn: u32,
    /// Prefill (a batch) or decode (one token).
    pub prefill: bool,
    /// Context position of the batch's first token.
    pub pos0: i64,
    /// Tokens in the batch.
    pub n_tokens: usize,
}

impl DecodeSpan {
    /// The context position of the batch's last token (the compute trace's `step`).
    pub fn last_pos(&self) -> i64 {
        self.pos0 + self.n_tokens as i64 - 1
    }
}
