//! Sequence state and KV bookkeeping: what `decide` needs to keep a prompt prefix between calls
//! and to leave a session's conversation exactly as it found it.
//!
//! llama.cpp serialises one sequence's KV cells (positions and K/V data) with
//! `llama_state_seq_get_data`; `llama_state_seq_set_data` first drops the destination sequence,
//! then puts the cells back. Restoring into a cleared cache places them from cell 0, the layout a
//! fresh prefill of the same tokens has, so a restored state computes exactly like the original.

use super::{Context, EvalHook, LlamaError, Model, Token, ll};

/// The serialised KV state of one sequence (`llama_state_seq_get_data`), held in host memory.
#[derive(Clone, PartialEq, Eq)]
pub struct SeqState {
    bytes: Vec<u8>,
}

impl SeqState {
    /// Bytes the state occupies.
    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }
}

impl std::fmt::Debug for SeqState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqState")
            .field("size_bytes", &self.bytes.len())
            .finish()
    }
}

impl Model {
    /// Tokenizes `text`; `add_special` adds BOS (when the model wants one), `parse_special` turns
    /// control-token texts such as `<|im_start|>` into their ids instead of plain text.
    pub fn tokenize_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<Token>, LlamaError> {
        let len = i32::try_from(text.len()).map_err(|_| LlamaError::PromptTooLong)?;
        let mut toks = vec![0 as Token; text.len() + 8];
        for _ in 0..2 {
            let cap = i32::try_from(toks.len()).map_err(|_| LlamaError::PromptTooLong)?;
            // SAFETY: text is valid for len bytes; toks is writable for cap tokens; the vocab
            // pointer is owned by the live model.
            let n = unsafe {
                ll::llama_tokenize(
                    self.vocab(),
                    text.as_ptr().cast(),
                    len,
                    toks.as_mut_ptr(),
                    cap,
                    add_special,
                    parse_special,
                )
            };
            if n >= 0 {
                toks.truncate(n.unsigned_abs() as usize);
                return Ok(toks);
            }
            // a negative count is the size needed: retry once with exactly that
            toks.resize(n.unsigned_abs() as usize, 0);
        }
        Err(LlamaError::Tokenize)
    }
}

impl<H: EvalHook> Context<'_, H> {
    fn memory(&self) -> ll::llama_memory_t {
        // SAFETY: valid context; the memory handle is owned by it and lives as long.
        unsafe { ll::llama_get_memory(self.raw.as_ptr()) }
    }

    /// The context size in tokens (`llama_n_ctx`).
    pub fn n_ctx(&self) -> u32 {
        // SAFETY: valid context pointer.
        unsafe { ll::llama_n_ctx(self.raw.as_ptr()) }
    }

    /// The logical batch: the most tokens one [`Context::decode`] call may take.
    pub fn n_batch(&self) -> u32 {
        // SAFETY: valid context pointer.
        unsafe { ll::llama_n_batch(self.raw.as_ptr()) }
    }

    /// How many positions sequence `seq` holds (`pos_max + 1`; 0 when empty).
    pub fn seq_len(&self, seq: i32) -> usize {
        let mem = self.memory();
        if mem.is_null() {
            return 0;
        }
        // SAFETY: valid memory handle; any sequence id is accepted (-1 = empty).
        let p = unsafe { ll::llama_memory_seq_pos_max(mem, seq) };
        usize::try_from(p.saturating_add(1)).unwrap_or(0)
    }

    /// Removes sequence `seq`'s positions in `p0..p1` (`p1 < 0`: to the end; `p0 < 0`: from 0).
    /// `false` when the cache cannot remove a partial range (sliding-window or recurrent caches);
    /// the sequence is then unchanged. Removing a whole sequence never fails.
    pub fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> bool {
        let mem = self.memory();
        if mem.is_null() {
            return false;
        }
        // SAFETY: valid memory handle; llama.cpp checks the range itself.
        unsafe { ll::llama_memory_seq_rm(mem, seq, p0, p1) }
    }

    /// Serialises sequence `seq`'s KV cells.
    pub fn save_seq(&mut self, seq: i32) -> Result<SeqState, LlamaError> {
        // SAFETY: valid context; the call only measures.
        let size = unsafe { ll::llama_state_seq_get_size(self.raw.as_ptr(), seq) };
        if size == 0 {
            return Err(LlamaError::StateSize { seq });
        }
        let mut bytes = vec![0u8; size];
        // SAFETY: bytes is writable for `size` bytes, the exact size llama.cpp just reported for
        // this sequence; no decode runs in between (we hold &mut self).
        let n = unsafe {
            ll::llama_state_seq_get_data(self.raw.as_ptr(), bytes.as_mut_ptr(), size, seq)
        };
        if n != size {
            return Err(LlamaError::StateShort {
                seq,
                written: n,
                size,
            });
        }
        Ok(SeqState { bytes })
    }

    /// Puts `state` back as sequence `seq` (replacing whatever `seq` held).
    pub fn restore_seq(&mut self, seq: i32, state: &SeqState) -> Result<(), LlamaError> {
        // SAFETY: the source buffer is valid for its length; llama.cpp copies out of it and
        // validates the header, returning 0 on any mismatch (no C++ exception escapes this path).
        let n = unsafe {
            ll::llama_state_seq_set_data(
                self.raw.as_ptr(),
                state.bytes.as_ptr(),
                state.bytes.len(),
                seq,
            )
        };
        if n == 0 {
            return Err(LlamaError::StateRestore {
                seq,
                bytes: state.bytes.len(),
            });
        }
        Ok(())
    }
}
