//! The MTP (NextN) head's draft step, as llama.cpp 0.1.161 runs it: the target context keeps
//! every position's pre-norm hidden state (`h_nextn`), and a second context of type
//! `LLAMA_CONTEXT_TYPE_MTP` over the same model (loaded with `load_mtp`) runs the head on
//! (token, hidden state) pairs — the token at position p with the target's state of p − 1 — and
//! yields logits for p + 1 and the head's own state, which seeds the next draft step.
//!
//! The decode loop drives it through the head its [`Context`] owns ([`Context::attach_mtp`]):
//! that head shares the target's eval hook, threadpool and abort flag, so under `--moe-stream`
//! the head block's routed experts load through the same cache as the trunk's.

use super::{Context, DecodeError, EvalHook, LlamaError, Model, Token, graph, ll};
use std::ffi::c_void;
use std::ptr::NonNull;

// llama.cpp 0.1.161 declares these two in src/llama-ext.h without `extern "C"`, so they have
// C++ linkage and are not in the crate's bindings: they are reached by their Itanium-mangled
// names (the ABI of a free function taking a pointer, bools and an int is the C one).
unsafe extern "C" {
    #[link_name = "_Z26llama_set_embeddings_nextnP13llama_contextbb"]
    fn llama_set_embeddings_nextn(ctx: *mut ll::llama_context, value: bool, masked: bool);
    #[link_name = "_Z30llama_get_embeddings_nextn_ithP13llama_contexti"]
    fn llama_get_embeddings_nextn_ith(ctx: *mut ll::llama_context, i: i32) -> *mut f32;
}

/// n_embd floats at `p`, or `None` for a null row.
///
/// # Safety
/// A non-null `p` must point at `n` floats that stay valid while the returned slice lives.
unsafe fn row<'a>(p: *const f32, n: usize) -> Option<&'a [f32]> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the caller guarantees n valid floats at p.
        Some(unsafe { std::slice::from_raw_parts(p, n) })
    }
}

impl<H: EvalHook> Context<'_, H> {
    /// Makes every later decode keep the hidden state of **every** position (not only the
    /// positions with logits): the MTP head's catch-up needs each one.
    pub fn keep_nextn_states(&mut self) {
        // SAFETY: the context pointer is live; the call only flips two context parameters.
        unsafe { llama_set_embeddings_nextn(self.raw.as_ptr(), true, false) }
    }

    /// The hidden state of batch position `i` of the last decode (n_embd floats), `None`
    /// without [`Context::keep_nextn_states`] or out of range.
    pub fn nextn_state(&self, i: i32) -> Option<&[f32]> {
        let n = self.model.n_embd();
        // SAFETY: llama.cpp range-checks i and returns null on failure; a row holds n_embd
        // floats in the context's output buffer until the next decode (which needs &mut self).
        unsafe { row(llama_get_embeddings_nextn_ith(self.raw.as_ptr(), i), n) }
    }
}

/// An MTP draft context: the head's own KV (its one attention block) over a model loaded with
/// `load_mtp`.
pub struct MtpHead<'m> {
    raw: NonNull<ll::llama_context>,
    batch: NonNull<ll::llama_batch_ext>,
    model: &'m Model,
    /// The target context's hook and its end-of-decode step, when the head shares it: called
    /// after every head decode as the target's own decodes call it.
    after: Option<(NonNull<c_void>, AfterDecode)>,
}

/// A hook's end-of-decode step, reached through its type-erased pointer.
type AfterDecode = unsafe fn(NonNull<c_void>);

/// What the eval hooks of a head's context are: the target's hook slot, its `cb_eval`
/// trampoline and end-of-decode step, and the abort flag's callback data.
struct Shared {
    hook: Option<NonNull<c_void>>,
    eval: ll::ggml_backend_sched_eval_callback,
    after: AfterDecode,
    abort: *mut c_void,
    pool: NonNull<ll::ggml_threadpool>,
}

/// # Safety
/// `slot` must be a live, unaliased `HookSlot<H>` (the target context's, between or inside its
/// decodes).
unsafe fn after_decode<H: EvalHook>(slot: NonNull<c_void>) {
    // SAFETY: the caller guarantees slot is a live HookSlot<H> no one else references during
    // the call.
    let slot = unsafe { &mut *slot.cast::<graph::HookSlot<H>>().as_ptr() };
    if let Some(h) = slot.hook.as_mut() {
        h.after_decode();
    }
}

impl<'m> MtpHead<'m> {
    /// Creates the draft context (`n_ctx` positions, `n_threads` compute threads).
    ///
    /// # Errors
    /// [`LlamaError::Context`] when llama.cpp refuses it (a model without a loaded head).
    pub fn new(model: &'m Model, n_ctx: u32, n_threads: i32) -> Result<Self, LlamaError> {
        Self::build(model, n_ctx, n_threads, None)
    }

    fn build(
        model: &'m Model,
        n_ctx: u32,
        n_threads: i32,
        shared: Option<Shared>,
    ) -> Result<Self, LlamaError> {
        // SAFETY: returns a plain struct of defaults.
        let mut cp = unsafe { ll::llama_context_default_params() };
        cp.n_ctx = n_ctx;
        cp.n_batch = n_ctx;
        cp.n_ubatch = n_ctx;
        cp.n_threads = n_threads;
        cp.n_threads_batch = n_threads;
        cp.no_perf = true;
        cp.ctx_type = ll::LLAMA_CONTEXT_TYPE_MTP;
        cp.op_offload = false;
        if let Some(sh) = &shared {
            if let Some(h) = sh.hook {
                cp.cb_eval = sh.eval;
                cp.cb_eval_user_data = h.as_ptr();
            }
            cp.abort_callback = Some(super::abort_trampoline);
            cp.abort_callback_data = sh.abort;
        }
        // SAFETY: the model outlives the head ('m); cp is fully initialised; a shared hook and
        // abort flag outlive the head (the owning Context drops the head first).
        let raw = unsafe { ll::llama_init_from_model(model.raw.as_ptr(), cp) };
        let raw = NonNull::new(raw).ok_or(LlamaError::Context)?;
        if let Some(sh) = &shared {
            // SAFETY: both are live; the pool outlives the head (freed after it in Context::drop).
            unsafe {
                ll::llama_attach_threadpool(raw.as_ptr(), sh.pool.as_ptr(), sh.pool.as_ptr())
            };
        }
        // SAFETY: raw is live; the draft steps read the head's state of their last position
        // (masked: only rows with logits).
        unsafe { llama_set_embeddings_nextn(raw.as_ptr(), true, true) };
        // SAFETY: raw is a live context; the batch is sized from it.
        let batch = unsafe { ll::llama_batch_ext_init(raw.as_ptr()) };
        let Some(batch) = NonNull::new(batch) else {
            // SAFETY: raw is live and used by nothing else.
            unsafe { ll::llama_free(raw.as_ptr()) };
            return Err(LlamaError::Context);
        };
        let after = shared.and_then(|sh| sh.hook.map(|h| (h, sh.after)));
        Ok(Self {
            raw,
            batch,
            model,
            after,
        })
    }

    /// Runs the head on `tokens[k]` at position `pos0 + k`, each paired with `states[k]` (the
    /// n_embd-float hidden state of position `pos0 + k − 1`), with logits and a state for the
    /// last pair only.
    ///
    /// # Errors
    /// [`DecodeError::Failed`] for a refused batch (wrong state width, full batch) or decode.
    pub fn process(
        &mut self,
        tokens: &[Token],
        states: &[&[f32]],
        pos0: i32,
    ) -> Result<(), DecodeError> {
        let n_embd = self.model.n_embd();
        if tokens.is_empty() || tokens.len() != states.len() {
            return Err(DecodeError::Failed(-1));
        }
        let b = self.batch.as_ptr();
        // SAFETY: b is this head's live batch.
        unsafe { ll::llama_batch_ext_clear(b) };
        for (k, (&tok, h)) in tokens.iter().zip(states).enumerate() {
            if h.len() != n_embd {
                return Err(DecodeError::Failed(-1));
            }
            let pos = pos0 + k as i32;
            let embd = ll::llama_embd {
                data: h.as_ptr(),
                n_rows: 1,
                n_embd,
            };
            // SAFETY: b is live; the state rows outlive llama_process below (the batch keeps a
            // non-owning view); pos is read during the call.
            let ok = unsafe {
                let idx = ll::llama_batch_ext_add_token(b, 0, tok);
                idx >= 0
                    && ll::llama_batch_ext_set_pos(b, idx, &pos)
                    && ll::llama_batch_ext_set_embd_token(b, idx, embd)
                    && ll::llama_batch_ext_set_output_logits(b, idx, k + 1 == tokens.len())
            };
            if !ok {
                return Err(DecodeError::Failed(-1));
            }
        }
        // SAFETY: both pointers are live; every state row the batch views is borrowed for
        // the duration of this call.
        let rc = unsafe { ll::llama_process(self.raw.as_ptr(), ll::LLAMA_PROCESS_TYPE_DECODE, b) };
        if let Some((h, after)) = self.after {
            // SAFETY: the shared hook outlives the head, and no reference to it is live: the
            // head is reached through &mut of the Context that owns both.
            unsafe { after(h) };
        }
        match rc {
            0 => Ok(()),
            other => Err(DecodeError::Failed(other)),
        }
    }

    /// The head's logits for the position after the last processed pair.
    pub fn logits(&self) -> &[f32] {
        // SAFETY: null when there is no output row; otherwise n_vocab floats valid until the
        // next process (which needs &mut self).
        unsafe {
            row(
                ll::llama_get_logits_ith(self.raw.as_ptr(), -1),
                self.model.n_vocab(),
            )
            .unwrap_or(&[])
        }
    }

    /// The head's own hidden state at the last processed pair: the state the next draft step
    /// pairs with the token drafted from [`MtpHead::logits`].
    pub fn state(&self) -> Option<&[f32]> {
        // SAFETY: range-checked by llama.cpp (null on failure); a row holds n_embd floats until
        // the next process.
        unsafe {
            row(
                llama_get_embeddings_nextn_ith(self.raw.as_ptr(), -1),
                self.model.n_embd(),
            )
        }
    }

    /// Drops the head's KV from position `from` on (rejected drafts).
    pub fn seq_rm(&mut self, from: i32) -> bool {
        // SAFETY: the context is live; the memory handle belongs to it.
        let mem = unsafe { ll::llama_get_memory(self.raw.as_ptr()) };
        if mem.is_null() {
            return false;
        }
        // SAFETY: valid memory handle; llama.cpp checks the range itself.
        unsafe { ll::llama_memory_seq_rm(mem, 0, from, -1) }
    }
}

impl<'m, H: EvalHook> Context<'m, H> {
    /// Builds this context's MTP head over the same model (which must be loaded with
    /// `load_mtp`): `n_ctx` positions, this context's threadpool, abort flag and eval hook —
    /// so a head block's routed experts reach the hook exactly as a trunk layer's do.
    ///
    /// # Errors
    /// [`LlamaError::Context`] when llama.cpp refuses the MTP context (no head loaded).
    pub fn attach_mtp(&mut self, n_ctx: u32, n_threads: i32) -> Result<(), LlamaError> {
        let shared = Shared {
            // the trampoline reads the target's slot (its hook and device counters); a head
            // only needs the callback when there is a hook to feed
            hook: self.hook_mut().is_some().then(|| self.slot.cast()),
            eval: Some(graph::eval_trampoline::<H>),
            after: after_decode::<H>,
            abort: std::sync::Arc::as_ptr(&self.abort).cast_mut().cast(),
            pool: self.threadpool,
        };
        self.mtp = Some(MtpHead::build(self.model, n_ctx, n_threads, Some(shared))?);
        Ok(())
    }

    /// The head [`Context::attach_mtp`] built, if any.
    pub fn mtp_mut(&mut self) -> Option<&mut MtpHead<'m>> {
        self.mtp.as_mut()
    }
}

impl Drop for MtpHead<'_> {
    fn drop(&mut self) {
        // SAFETY: both were created in new() and are freed once, the batch first.
        unsafe {
            ll::llama_batch_ext_free(self.batch.as_ptr());
            ll::llama_free(self.raw.as_ptr());
        }
    }
}
