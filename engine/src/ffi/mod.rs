//! Safe wrappers over the llama.cpp C API (llama-cpp-sys-2). Every `unsafe` block of the engine
//! that talks to llama.cpp lives in this module.

mod devices;
pub mod firstload;
mod graph;
mod mtp;
mod state;
#[cfg(feature = "prefill-device")]
mod vulkan;

pub use devices::{BackendDevice, backend_devices, devices_listing};
use graph::HookSlot;
pub use graph::{EvalHook, Node, WeightRef};
pub use mtp::MtpHead;
pub use state::SeqState;

use llama_cpp_sys_2 as ll;
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A llama.cpp token id.
pub type Token = i32;

/// What llama.cpp refused or could not do (its own reason is on its log lines).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlamaError {
    /// The model path cannot be passed to C.
    #[error("path contains a NUL byte: {}", .0.display())]
    NulInPath(std::path::PathBuf),
    /// `llama_model_load_from_file` returned null.
    #[error("failed to load model: {}", .0.display())]
    ModelLoad(std::path::PathBuf),
    /// No ggml backend device has this name.
    #[error("no ggml backend device named {0}")]
    NoDevice(String),
    /// `llama_init_from_model` returned null.
    #[error("failed to create context")]
    Context,
    /// `ggml_threadpool_new` returned null.
    #[error("failed to create the ggml threadpool")]
    Threadpool,
    /// The text is longer than llama.cpp's token counts can say.
    #[error("prompt too long")]
    PromptTooLong,
    /// `llama_tokenize` failed twice.
    #[error("tokenization failed")]
    Tokenize,
    /// `llama_state_seq_get_size` returned 0.
    #[error("llama.cpp could not size the state of sequence {seq}")]
    StateSize {
        /// The sequence.
        seq: i32,
    },
    /// `llama_state_seq_get_data` wrote fewer bytes than it sized.
    #[error("llama.cpp wrote {written} of the {size} bytes of sequence {seq}'s state")]
    StateShort {
        /// The sequence.
        seq: i32,
        /// Bytes written.
        written: usize,
        /// Bytes sized.
        size: usize,
    },
    /// `llama_state_seq_set_data` refused the bytes.
    #[error("llama.cpp refused to restore a {bytes}-byte state into sequence {seq}")]
    StateRestore {
        /// The sequence.
        seq: i32,
        /// The state's size.
        bytes: usize,
    },
}

static BACKEND: Once = Once::new();

/// [`keep_decodes_on_host`]'s rows per token, read when the backend starts.
static OFFLOAD_ROWS: AtomicU64 = AtomicU64::new(0);

/// Before the backend starts (a `--prefill-device` run): `rows` is the most rows per token that
/// an op on a host weight computes in this model (a per-head norm's multiply: the head count).
/// ggml-vulkan offloads such an op once its row count reaches its batch threshold (32), so on a
/// model with 32 or more heads a one-token decode would run its norms on the device, one round
/// trip per layer and token; the threshold is raised past `rows` so decodes stay on the CPU.
/// No effect once the backend has started, or when the user set `GGML_OP_OFFLOAD_MIN_BATCH`.
pub fn keep_decodes_on_host(rows: u64) {
    OFFLOAD_ROWS.store(rows, Ordering::Relaxed);
}

/// Initialises llama.cpp's backends once per process and routes its log: warnings and errors
/// reach stderr, the chatty info lines only when `BMOE_LLAMA_LOG=1`.
pub fn init_backend() {
    BACKEND.call_once(|| {
        #[cfg(feature = "prefill-device")]
        {
            vulkan::expose_cpu_devices();
            vulkan::raise_offload_threshold(OFFLOAD_ROWS.load(Ordering::Relaxed));
        }
        let verbose = std::env::var("BMOE_LLAMA_LOG").is_ok_and(|v| v == "1");
        // SAFETY: the callback is a plain function valid for the whole process; the user-data
        // pointer is unused. llama_backend_init has no preconditions and runs once (Once).
        unsafe {
            if !verbose {
                ll::llama_log_set(Some(quiet_log), std::ptr::null_mut());
            }
            ll::llama_backend_init();
        }
    });
}

unsafe extern "C" fn quiet_log(level: ll::ggml_log_level, text: *const c_char, _: *mut c_void) {
    if level >= ll::GGML_LOG_LEVEL_WARN && level != ll::GGML_LOG_LEVEL_CONT && !text.is_null() {
        // SAFETY: llama.cpp passes a NUL-terminated string valid for the duration of the call.
        let s = unsafe { CStr::from_ptr(text) };
        eprint!("llama.cpp: {}", s.to_string_lossy());
    }
}

fn c_path(path: &Path) -> Result<CString, LlamaError> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| LlamaError::NulInPath(path.to_path_buf()))
}

/// Model-load options (the parts of `llama_model_params` bmoe sets).
#[derive(Debug, Clone, Default)]
pub struct ModelOptions {
    /// Override of `<arch>.expert_used_count` (the routing top-k), if any.
    pub expert_used_override: Option<(String, i64)>,
    /// Load the MTP (NextN) head blocks too (`load_mtp`); off, llama.cpp skips their tensors.
    pub load_mtp: bool,
    /// `--prefill-device`: the ggml backend device (by name) the model's contexts may offload
    /// large batches to. Its weights stay in host memory either way.
    pub device: Option<String>,
}

/// A loaded model: mmap load mode, no lazy tensors, no repacked buffers, CPU only — so every
/// weight tensor's data sits at `mmap base + GGUF file offset`, which streaming relies on.
pub struct Model {
    raw: NonNull<ll::llama_model>,
    // kept alive while the model lives: llama.cpp reads overrides during load only, but keeping
    // them here costs nothing and rules out a dangling pointer.
    _overrides: Vec<ll::llama_model_kv_override>,
}

impl Model {
    /// Loads `path` (the first shard of a split model).
    pub fn load(path: &Path, opts: &ModelOptions) -> Result<Self, LlamaError> {
        init_backend();
        let cpath = c_path(path)?;
        let mut overrides = Vec::new();
        if let Some((key, val)) = &opts.expert_used_override {
            // SAFETY: llama_model_kv_override is a plain C struct; all-zero is a valid value
            // (tag INT = 0, empty key) and doubles as the list terminator.
            let mut ov: ll::llama_model_kv_override = unsafe { std::mem::zeroed() };
            ov.tag = ll::LLAMA_KV_OVERRIDE_TYPE_INT;
            for (dst, src) in ov.key.iter_mut().zip(key.bytes().take(127)) {
                *dst = src as c_char;
            }
            ov.__bindgen_anon_1.val_i64 = *val;
            overrides.push(ov);
            // SAFETY: as above, the zeroed entry terminates the list.
            overrides.push(unsafe { std::mem::zeroed() });
        }
        // SAFETY: returns a plain struct of defaults.
        let mut mp = unsafe { ll::llama_model_default_params() };
        mp.load_mode = ll::LLAMA_LOAD_MODE_MMAP;
        mp.lazy_mode = ll::LLAMA_LAZY_MODE_OFF;
        mp.use_extra_bufts = false;
        mp.n_gpu_layers = 0;
        // the model's devices are the prefill device or none: left NULL, llama.cpp would add
        // every GPU of a Vulkan build, and keep the weights in that device's pinned host buffer
        // instead of the file mapping streaming relies on (no_host keeps the plain CPU buffer)
        let mut devices = Vec::with_capacity(2);
        if let Some(name) = &opts.device {
            let cname =
                CString::new(name.as_str()).map_err(|_| LlamaError::NoDevice(name.clone()))?;
            // SAFETY: cname is a valid C string; the registry is initialised (init_backend).
            let dev = unsafe { ll::ggml_backend_dev_by_name(cname.as_ptr()) };
            if dev.is_null() {
                return Err(LlamaError::NoDevice(name.clone()));
            }
            devices.push(dev);
        }
        devices.push(std::ptr::null_mut());
        mp.devices = devices.as_mut_ptr();
        mp.no_host = true;
        mp.load_mtp = opts.load_mtp;
        if !overrides.is_empty() {
            mp.kv_overrides = overrides.as_ptr();
        }
        // SAFETY: cpath is a valid C string; mp is fully initialised; the override array (if
        // any) and the device list are terminated and outlive the call (llama.cpp copies both).
        let raw = unsafe { ll::llama_model_load_from_file(cpath.as_ptr(), mp) };
        let raw = NonNull::new(raw).ok_or_else(|| LlamaError::ModelLoad(path.to_path_buf()))?;
        Ok(Self {
            raw,
            _overrides: overrides,
        })
    }

    fn vocab(&self) -> *const ll::llama_vocab {
        // SAFETY: the model pointer is valid for the lifetime of self.
        unsafe { ll::llama_model_get_vocab(self.raw.as_ptr()) }
    }

    /// A string metadata value (e.g. `general.architecture`), if present, whole however long
    /// (chat templates run to several KiB).
    pub fn meta_str(&self, key: &str) -> Option<String> {
        let ckey = CString::new(key).ok()?;
        let mut buf = vec![0u8; 512];
        for _ in 0..2 {
            // SAFETY: buf is writable for buf.len() bytes; llama.cpp NUL-terminates within it
            // and returns the value's full length (snprintf semantics).
            let n = unsafe {
                ll::llama_model_meta_val_str(
                    self.raw.as_ptr(),
                    ckey.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            let n = usize::try_from(n).ok()?;
            if n < buf.len() {
                buf.truncate(n);
                return Some(String::from_utf8_lossy(&buf).into_owned());
            }
            buf.resize(n + 1, 0);
        }
        None
    }

    /// Number of transformer layers (excluding MTP/nextn layers).
    pub fn n_layer(&self) -> usize {
        // SAFETY: valid model pointer.
        let n = unsafe { ll::llama_model_n_layer(self.raw.as_ptr()) };
        usize::try_from(n).unwrap_or(0)
    }

    /// Number of MTP (NextN) head blocks after the trunk (`<arch>.nextn_predict_layers`).
    pub fn n_layer_nextn(&self) -> usize {
        // SAFETY: valid model pointer.
        let n = unsafe { ll::llama_model_n_layer_nextn(self.raw.as_ptr()) };
        usize::try_from(n).unwrap_or(0)
    }

    /// Whether llama.cpp builds an MTP draft context (`ctx_type = LLAMA_CONTEXT_TYPE_MTP`) over
    /// this model, which needs the head loaded (`load_mtp`); the context is freed again at once.
    pub fn mtp_context_builds(&self, n_ctx: u32) -> bool {
        // SAFETY: returns a plain struct of defaults.
        let mut cp = unsafe { ll::llama_context_default_params() };
        cp.n_ctx = n_ctx;
        cp.n_batch = n_ctx;
        cp.n_ubatch = n_ctx;
        cp.n_threads = 1;
        cp.n_threads_batch = 1;
        cp.no_perf = true;
        cp.ctx_type = ll::LLAMA_CONTEXT_TYPE_MTP;
        // SAFETY: the model pointer is valid for the call; cp is fully initialised.
        let raw = unsafe { ll::llama_init_from_model(self.raw.as_ptr(), cp) };
        let Some(raw) = NonNull::new(raw) else {
            return false;
        };
        // SAFETY: raw is a live context created above and used by nothing else.
        unsafe { ll::llama_free(raw.as_ptr()) };
        true
    }

    /// Hidden size (`n_embd`).
    pub fn n_embd(&self) -> usize {
        // SAFETY: valid model pointer.
        let n = unsafe { ll::llama_model_n_embd(self.raw.as_ptr()) };
        usize::try_from(n).unwrap_or(0)
    }

    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        // SAFETY: valid vocab pointer owned by the model.
        let n = unsafe { ll::llama_vocab_n_tokens(self.vocab()) };
        usize::try_from(n).unwrap_or(0)
    }

    /// The BOS token, or token 0 when the vocabulary has none.
    pub fn bos(&self) -> Token {
        // SAFETY: valid vocab pointer.
        let b = unsafe { ll::llama_vocab_bos(self.vocab()) };
        if b < 0 { 0 } else { b }
    }

    /// Whether `tok` ends generation (EOS, EOT, …).
    pub fn is_eog(&self, tok: Token) -> bool {
        // SAFETY: valid vocab pointer; any token value is accepted.
        unsafe { ll::llama_vocab_is_eog(self.vocab(), tok) }
    }

    /// Tokenizes `text` (special tokens parsed, BOS added when the model wants one).
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>, LlamaError> {
        self.tokenize_with(text, true, true)
    }

    /// The text bytes of one token (special tokens rendered).
    pub fn token_piece(&self, tok: Token) -> Vec<u8> {
        let mut buf = vec![0u8; 64];
        for _ in 0..2 {
            let cap = i32::try_from(buf.len()).unwrap_or(i32::MAX);
            // SAFETY: buf is writable for cap bytes.
            let n = unsafe {
                ll::llama_token_to_piece(self.vocab(), tok, buf.as_mut_ptr().cast(), cap, 0, true)
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return buf;
            }
            buf.resize(n.unsigned_abs() as usize, 0);
        }
        Vec::new()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: the pointer came from llama_model_load_from_file and is freed once; every
        // Context borrowing this model has been dropped (Context holds &Model).
        unsafe { ll::llama_model_free(self.raw.as_ptr()) }
    }
}

/// What a prefill device computed (cumulative counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceTally {
    /// Graph nodes whose output landed in a device buffer (views and reshapes not counted).
    pub nodes: u64,
    /// Tokens of the ubatch graphs at least one such node belonged to.
    pub tokens: u64,
}

/// Context options.
#[derive(Debug, Clone, Copy)]
pub struct ContextOptions {
    /// KV size in tokens.
    pub n_ctx: u32,
    /// Logical batch (tokens per `decode` call).
    pub n_batch: u32,
    /// Physical batch.
    pub n_ubatch: u32,
    /// Compute threads (attached ggml threadpool).
    pub n_threads: i32,
    /// Recurrent-state snapshots kept for rollback (`n_rs_seq`): a hybrid model's KV can drop
    /// that many trailing positions (a verify decode's rejected drafts); 0 = none.
    pub n_rs_seq: u32,
    /// `--prefill-device`: let ggml-backend-sched run large batches' ops on the model's device
    /// (`op_offload`) and count the nodes it computes there.
    pub device_offload: bool,
}

/// A handle that puts the context's compute threads to sleep until the next graph kicks them off.
///
/// ggml's workers spin (hybrid polling, up to ~10^8 pause instructions) after every graph split
/// before they sleep; while the eval thread waits in the routing callback for flash reads, that
/// spinning burns a core for nothing. `ggml_threadpool_pause` makes them sleep at once, and the
/// next split's kickoff resumes them.
#[derive(Debug, Clone, Copy)]
pub struct PoolPause {
    pool: NonNull<ll::ggml_threadpool>,
}

impl PoolPause {
    /// Puts the compute threads to sleep until the next graph split starts.
    pub fn pause(&self) {
        // SAFETY: the threadpool outlives every decode (Context frees it after llama_free, and
        // the hook holding this handle is only called inside a decode); pause takes the pool's
        // own mutex and is safe to call while workers poll.
        unsafe { ll::ggml_threadpool_pause(self.pool.as_ptr()) }
    }
}

/// Why a decode failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The abort callback stopped the graph (e.g. a failed expert read).
    Aborted,
    /// Any other non-zero status from `llama_decode`.
    Failed(i32),
}

/// A llama.cpp context with an attached threadpool and, optionally, an eval hook.
pub struct Context<'m, H: EvalHook> {
    raw: NonNull<ll::llama_context>,
    threadpool: NonNull<ll::ggml_threadpool>,
    slot: NonNull<HookSlot<H>>,
    abort: Arc<AtomicBool>,
    model: &'m Model,
    /// The MTP head ([`Context::attach_mtp`]): shares the hook, the pool and the abort flag, so
    /// it is dropped before them.
    mtp: Option<MtpHead<'m>>,
}

impl<'m, H: EvalHook> Context<'m, H> {
    /// Creates a context. With a hook, llama.cpp calls it for every graph node (`cb_eval`).
    /// `abort` is polled by the CPU backend after each node: once set, the decode stops.
    pub fn new(
        model: &'m Model,
        opts: ContextOptions,
        hook: Option<H>,
        abort: Arc<AtomicBool>,
    ) -> Result<Self, LlamaError> {
        let with_callback = hook.is_some() || opts.device_offload;
        let slot = Box::new(HookSlot {
            hook,
            count_device: opts.device_offload,
            device_nodes: 0,
            device_tokens: 0,
            graph_tokens: None,
        });
        // SAFETY: Box::into_raw never returns null.
        let slot = unsafe { NonNull::new_unchecked(Box::into_raw(slot)) };
        // SAFETY: returns a plain struct of defaults.
        let mut cp = unsafe { ll::llama_context_default_params() };
        cp.n_ctx = opts.n_ctx;
        cp.n_batch = opts.n_batch;
        cp.n_ubatch = opts.n_ubatch;
        cp.n_threads = opts.n_threads;
        cp.n_threads_batch = opts.n_threads;
        cp.n_rs_seq = opts.n_rs_seq;
        cp.no_perf = true;
        // llama.cpp offloads large batches' ops on host weights to the model's devices (default
        // true): only `--prefill-device` asks for it (the model then has that one device).
        cp.op_offload = opts.device_offload;
        if with_callback {
            cp.cb_eval = Some(graph::eval_trampoline::<H>);
            cp.cb_eval_user_data = slot.as_ptr().cast();
        }
        cp.abort_callback = Some(abort_trampoline);
        cp.abort_callback_data = Arc::as_ptr(&abort).cast_mut().cast();
        // SAFETY: the model pointer is valid and outlives the context ('m); the hook and abort
        // pointers stay valid until Drop, which frees the context first.
        let raw = unsafe { ll::llama_init_from_model(model.raw.as_ptr(), cp) };
        let Some(raw) = NonNull::new(raw) else {
            // SAFETY: created by Box::into_raw above and not shared with llama.cpp.
            drop(unsafe { Box::from_raw(slot.as_ptr()) });
            return Err(LlamaError::Context);
        };
        // SAFETY: plain struct construction; n_threads > 0 is validated by the CLI.
        let mut tpp = unsafe { ll::ggml_threadpool_params_default(opts.n_threads) };
        // SAFETY: tpp is a valid, initialised parameter block.
        let tp = unsafe { ll::ggml_threadpool_new(&mut tpp) };
        let Some(threadpool) = NonNull::new(tp) else {
            // SAFETY: raw is a live context not yet used.
            unsafe { ll::llama_free(raw.as_ptr()) };
            // SAFETY: the context that referenced the slot is freed.
            drop(unsafe { Box::from_raw(slot.as_ptr()) });
            return Err(LlamaError::Threadpool);
        };
        // SAFETY: both pointers are live; the threadpool outlives the context (freed after it).
        unsafe {
            ll::llama_attach_threadpool(raw.as_ptr(), threadpool.as_ptr(), threadpool.as_ptr())
        };
        Ok(Self {
            raw,
            threadpool,
            slot,
            abort,
            model,
            mtp: None,
        })
    }

    /// A handle that pauses this context's compute threads (see [`PoolPause`]).
    pub fn pool_pause(&self) -> PoolPause {
        PoolPause {
            pool: self.threadpool,
        }
    }

    /// The model this context runs.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The hook, between decodes.
    pub fn hook_mut(&mut self) -> Option<&mut H> {
        // SAFETY: the hook is only touched by llama.cpp inside `decode`, which takes &mut self,
        // so no other reference exists while this one lives.
        unsafe { (*self.slot.as_ptr()).hook.as_mut() }
    }

    /// Whether the context offloads large batches to a prefill device.
    fn offloads(&self) -> bool {
        // SAFETY: as in device_tally.
        unsafe { (*self.slot.as_ptr()).count_device }
    }

    /// What a prefill device computed so far, over every decode of this context (zeros
    /// without `device_offload`).
    pub fn device_tally(&self) -> DeviceTally {
        // SAFETY: the slot is only touched by llama.cpp inside `decode`, which takes &mut self.
        let slot = unsafe { &*self.slot.as_ptr() };
        DeviceTally {
            nodes: slot.device_nodes,
            tokens: slot.device_tokens,
        }
    }

    /// Sets the compute threads of single-token decodes (`n_single`; at most the threadpool's
    /// size, the context's `n_threads`) for the decodes that follow; batched decodes (prefill)
    /// keep using `n_batch`. The attached threadpool stays: ggml runs a graph on its first
    /// `n` threads and the rest skip it.
    pub fn set_threads(&mut self, n_single: i32, n_batch: i32) {
        // SAFETY: raw is a live context; llama.cpp only stores the two counts for the next
        // decode, which needs &mut self as well.
        unsafe { ll::llama_set_n_threads(self.raw.as_ptr(), n_single, n_batch) };
    }

    /// Runs the model on `tokens` at the next positions; logits only for the last token.
    pub fn decode(&mut self, tokens: &mut [Token]) -> Result<(), DecodeError> {
        let n = i32::try_from(tokens.len()).map_err(|_| DecodeError::Failed(-1))?;
        // SAFETY: tokens is valid for n entries during the call; llama_batch_get_one borrows
        // it without copying and the batch is consumed before we return.
        let rc = unsafe {
            let batch = ll::llama_batch_get_one(tokens.as_mut_ptr(), n);
            ll::llama_decode(self.raw.as_ptr(), batch)
        };
        self.decoded(rc)
    }

    /// Runs the model on `tokens` at positions `pos0..` of sequence 0 with logits for **every**
    /// position (a speculation verify decode): row `i` is [`Context::logits_ith`]`(i)`.
    pub fn decode_all_logits(&mut self, tokens: &[Token], pos0: i32) -> Result<(), DecodeError> {
        let n = i32::try_from(tokens.len()).map_err(|_| DecodeError::Failed(-1))?;
        let mut tok = tokens.to_vec();
        let mut pos: Vec<ll::llama_pos> = (0..n).map(|i| pos0 + i).collect();
        let mut n_seq: Vec<i32> = vec![1; tokens.len()];
        let mut seq0: ll::llama_seq_id = 0;
        let mut seq: Vec<*mut ll::llama_seq_id> = vec![&raw mut seq0; tokens.len()];
        let mut logits: Vec<i8> = vec![1; tokens.len()];
        let batch = ll::llama_batch {
            n_tokens: n,
            token: tok.as_mut_ptr(),
            embd: std::ptr::null_mut(),
            pos: pos.as_mut_ptr(),
            n_seq_id: n_seq.as_mut_ptr(),
            seq_id: seq.as_mut_ptr(),
            logits: logits.as_mut_ptr(),
        };
        // SAFETY: every array the batch points at has n entries and outlives the call; each
        // seq_id entry points at one live llama_seq_id; llama_decode copies what it keeps.
        let rc = unsafe { ll::llama_decode(self.raw.as_ptr(), batch) };
        self.decoded(rc)
    }

    /// A decode's return code as a result, after the hook's end-of-decode bookkeeping.
    fn decoded(&mut self, rc: i32) -> Result<(), DecodeError> {
        if let Some(h) = self.hook_mut() {
            h.after_decode();
        }
        match rc {
            // a device backend never polls the abort callback: a read that failed while it
            // computed leaves the flag raised on a decode that otherwise "succeeded"
            0 if self.offloads() && self.abort.load(Ordering::SeqCst) => Err(DecodeError::Aborted),
            0 => Ok(()),
            2 => Err(DecodeError::Aborted),
            _ if self.abort.load(Ordering::SeqCst) => Err(DecodeError::Aborted),
            other => Err(DecodeError::Failed(other)),
        }
    }

    /// The logits of output row `i` of the last decode (`[]` when llama.cpp has no such row).
    pub fn logits_ith(&self, i: i32) -> &[f32] {
        let n = self.model.n_vocab();
        // SAFETY: llama_get_logits_ith checks i against the last decode's outputs and returns
        // null when it has none; a non-null row holds n_vocab floats until the next decode.
        unsafe {
            let p = ll::llama_get_logits_ith(self.raw.as_ptr(), i);
            if p.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(p, n)
            }
        }
    }

    /// The logits of the last decoded token.
    pub fn last_logits(&self) -> &[f32] {
        let n = self.model.n_vocab();
        // SAFETY: after a successful decode llama.cpp owns an n_vocab-float buffer for the
        // last output row, valid until the next decode (which needs &mut self).
        unsafe {
            let p = ll::llama_get_logits_ith(self.raw.as_ptr(), -1);
            if p.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(p, n)
            }
        }
    }

    /// Clears the KV cache (drops every position).
    pub fn clear_memory(&mut self) {
        // SAFETY: valid context; the memory handle is owned by it.
        unsafe {
            let mem = ll::llama_get_memory(self.raw.as_ptr());
            if !mem.is_null() {
                ll::llama_memory_clear(mem, true);
            }
        }
    }

    /// Samples with a top-k → top-p → temperature → seeded distribution chain; the tokens in
    /// `banned` are never drawn (their logits are biased to minus infinity first).
    pub fn sampler(&self, s: SamplerParams, banned: &[Token]) -> Sampler {
        Sampler::new(s, self.model.n_vocab(), banned)
    }

    /// Samples the last logits with `sampler`.
    pub fn sample(&mut self, sampler: &mut Sampler) -> Token {
        // SAFETY: both pointers are live; idx -1 = last output row.
        unsafe { ll::llama_sampler_sample(sampler.raw.as_ptr(), self.raw.as_ptr(), -1) }
    }
}

impl<H: EvalHook> Drop for Context<'_, H> {
    fn drop(&mut self) {
        // the head points at this context's hook, pool and abort flag
        drop(self.mtp.take());
        // SAFETY: the context is freed before the threadpool it uses and before the hook its
        // callback points to; each is freed exactly once.
        unsafe {
            ll::llama_free(self.raw.as_ptr());
            ll::ggml_threadpool_free(self.threadpool.as_ptr());
            drop(Box::from_raw(self.slot.as_ptr()));
        }
    }
}

unsafe extern "C" fn abort_trampoline(data: *mut c_void) -> bool {
    if data.is_null() {
        return false;
    }
    // SAFETY: data is the Arc<AtomicBool> pointer the Context keeps alive until llama_free.
    let flag = unsafe { &*(data as *const AtomicBool) };
    flag.load(Ordering::Relaxed)
}

/// Stochastic sampling parameters (greedy decoding does not use a sampler).
#[derive(Debug, Clone, Copy)]
pub struct SamplerParams {
    /// Temperature (> 0).
    pub temp: f32,
    /// Top-k (0 = off).
    pub top_k: i32,
    /// Top-p in (0, 1].
    pub top_p: f32,
    /// RNG seed.
    pub seed: u32,
}

/// A llama.cpp sampler chain.
pub struct Sampler {
    raw: NonNull<ll::llama_sampler>,
}

impl Sampler {
    fn new(s: SamplerParams, n_vocab: usize, banned: &[Token]) -> Self {
        let n_vocab = i32::try_from(n_vocab).unwrap_or(i32::MAX);
        let bias: Vec<ll::llama_logit_bias> = banned
            .iter()
            .map(|&token| ll::llama_logit_bias {
                token,
                bias: f32::NEG_INFINITY,
            })
            .collect();
        let n_bias = i32::try_from(bias.len()).unwrap_or(i32::MAX);
        // SAFETY: the chain takes ownership of each added sampler; init functions return fresh
        // objects (never null for valid parameters); logit_bias copies `bias` (n_bias entries).
        unsafe {
            let chain = ll::llama_sampler_chain_init(ll::llama_sampler_chain_default_params());
            if !bias.is_empty() {
                ll::llama_sampler_chain_add(
                    chain,
                    ll::llama_sampler_init_logit_bias(n_vocab, n_bias, bias.as_ptr()),
                );
            }
            ll::llama_sampler_chain_add(chain, ll::llama_sampler_init_top_k(s.top_k));
            ll::llama_sampler_chain_add(chain, ll::llama_sampler_init_top_p(s.top_p, 1));
            ll::llama_sampler_chain_add(chain, ll::llama_sampler_init_temp(s.temp));
            ll::llama_sampler_chain_add(chain, ll::llama_sampler_init_dist(s.seed));
            Self {
                raw: NonNull::new_unchecked(chain),
            }
        }
    }

    /// Puts the chain back in its initial state: the distribution sampler is reseeded with the
    /// seed it was created with, so a new chat samples as a fresh run would.
    pub fn reset(&mut self) {
        // SAFETY: the chain pointer is live (owned by self); reset touches only its own state.
        unsafe { ll::llama_sampler_reset(self.raw.as_ptr()) }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // SAFETY: created by llama_sampler_chain_init, freed once (frees the members too).
        unsafe { ll::llama_sampler_free(self.raw.as_ptr()) }
    }
}
