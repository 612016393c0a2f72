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

/// Where the tokens a layer routes sit on the context axis (the route and io traces' `step`).
///
/// llama.cpp runs a decode as ubatches of `n_ubatch` tokens, in order, and each ubatch routes
/// every MoE layer once, in layer order — so a routing of a layer not above the previous one
/// starts the next ubatch. A layer may route fewer tokens than its ubatch holds: before the last
/// layer llama.cpp keeps only the tokens whose logits were asked for, which are the ubatch's last.
#[derive(Debug, Clone, Default)]
pub struct TokenAxis {
    n_ubatch: usize,
    span: Option<DecodeSpan>,
    ubatch: usize,
    last_layer: Option<usize>,
}

impl TokenAxis {
    /// An axis for a context whose physical batch is `n_ubatch` tokens (0 = the whole batch).
    pub fn new(n_ubatch: usize) -> Self {
        Self {
            n_ubatch,
            ..Self::default()
        }
    }

    /// Starts a decode.
    pub fn begin(&mut self, span: DecodeSpan) {
        self.span = Some(span);
        self.ubatch = 0;
        self.last_layer = None;
    }

    /// Ends the decode: nothing is placed until the next [`Self::begin`].
    pub fn end(&mut self) {
        self.span = None;
    }

    /// The decode being placed.
    pub fn span(&self) -> Option<DecodeSpan> {
        self.span
    }

    /// The context position of the first of the `rows` tokens `layer` routes now; `None`
    /// outside a decode.
    pub fn place(&mut self, layer: usize, rows: usize) -> Option<i64> {
        let span = self.span?;
        if self.last_layer.is_some_and(|l| layer <= l) {
            self.ubatch += 1;
        }
        self.last_layer = Some(layer);
        let size = if self.n_ubatch == 0 {
            span.n_tokens
        } else {
            self.n_ubatch
        };
        let start = (self.ubatch * size).min(span.n_tokens);
        let len = size.min(span.n_tokens - start);
        Some(span.pos0 + (start + len.saturating_sub(rows)) as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(pos0: i64, n_tokens: usize) -> DecodeSpan {
        DecodeSpan {
            turn: 0,
            prefill: true,
            pos0,
            n_tokens,
        }
    }

    #[test]
    fn layers_place_their_tokens_per_ubatch() {
        // one ubatch: layers 0 and 1 route all 5 tokens, the last layer only the output token
        let mut a = TokenAxis::new(0);
        a.begin(span(10, 5));
        assert_eq!(a.place(0, 5), Some(10));
        assert_eq!(a.place(1, 5), Some(10));
        assert_eq!(a.place(2, 1), Some(14));
        // ubatches of 2 over 5 tokens: [10,11] [12,13] [14]; only the last one has an output
        let mut a = TokenAxis::new(2);
        a.begin(span(10, 5));
        assert_eq!((a.place(0, 2), a.place(2, 0)), (Some(10), Some(12)));
        assert_eq!((a.place(0, 2), a.place(2, 0)), (Some(12), Some(14)));
        assert_eq!((a.place(0, 1), a.place(2, 1)), (Some(14), Some(14)));
        // a model with one MoE layer: every routing is a new ubatch
        let mut a = TokenAxis::new(2);
        a.begin(span(0, 4));
        assert_eq!((a.place(3, 2), a.place(3, 2)), (Some(0), Some(2)));
        a.end();
        assert_eq!(a.place(0, 1), None);
        // a new decode starts over
        a.begin(span(4, 1));
        assert_eq!(a.place(3, 1), Some(4));
    }
}
