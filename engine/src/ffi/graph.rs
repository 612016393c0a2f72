//! The eval callback (`cb_eval`): a safe view of graph nodes for the hook.

use llama_cpp_sys_2 as ll;
use std::ffi::{CStr, c_void};

/// What the engine does at graph nodes. llama.cpp calls [`EvalHook::wants`] for every node before
/// computing it; a `true` answer isolates the node and [`EvalHook::observe`] runs right after it
/// was computed, on the thread that called `llama_decode`, while the compute threads wait.
pub trait EvalHook {
    /// Whether to observe `node` once computed.
    fn wants(&mut self, node: &Node<'_>) -> bool;
    /// Called after a wanted node was computed.
    fn observe(&mut self, node: &Node<'_>);
    /// Called after each `llama_decode` returns (successful or not), on the same thread.
    fn after_decode(&mut self) {}
}

/// A graph node (or one of its sources) during the callback.
pub struct Node<'a> {
    t: &'a ll::ggml_tensor,
}

impl<'a> Node<'a> {
    /// The node's name (`ffn_moe_topk-3`, `blk.3.ffn_up_exps.weight`, …).
    pub fn name(&self) -> &'a str {
        // SAFETY: ggml keeps `name` NUL-terminated within its 64-byte array.
        let c = unsafe { CStr::from_ptr(self.t.name.as_ptr()) };
        c.to_str().unwrap_or("")
    }

    /// Whether this is a leaf (no op: a weight or an input).
    pub fn is_leaf(&self) -> bool {
        self.t.op == ll::GGML_OP_NONE
    }

    /// Element counts per dimension.
    pub fn ne(&self) -> [i64; 4] {
        self.t.ne
    }

    /// Byte strides per dimension.
    pub fn nb(&self) -> [usize; 4] {
        self.t.nb
    }

    /// The node's sources.
    pub fn sources(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        self.t.src.iter().filter(|p| !p.is_null()).map(|&p| {
            // SAFETY: non-null sources of a live node are live tensors of the same graph.
            Node { t: unsafe { &*p } }
        })
    }

    /// The nearest tensor named `name` among this node's sources, their sources, and so on
    /// (`depth` levels at most): how a weight-chain node finds its layer's routing node.
    pub fn find_source(&self, name: &str, depth: usize) -> Option<Node<'a>> {
        for src in self.sources() {
            if src.name() == name {
                return Some(src);
            }
        }
        if depth <= 1 {
            return None;
        }
        self.sources().find_map(|s| s.find_source(name, depth - 1))
    }

    /// A reference to this tensor's memory, for weight tensors with data.
    pub fn weight_ref(&self) -> Option<WeightRef> {
        if self.t.data.is_null() || !self.is_leaf() {
            return None;
        }
        let ne = self.t.ne;
        let nb = self.t.nb;
        // the byte size of a (possibly quantized) contiguous tensor is nb[3] * ne[3]
        let bytes = nb[3].checked_mul(usize::try_from(ne[3]).ok()?)?;
        Some(WeightRef {
            name: self.name().to_string(),
            addr: self.t.data as usize,
            bytes,
            n_expert: usize::try_from(ne[2]).ok()?,
            expert_stride: nb[2],
        })
    }

    /// The expert ids of a `ffn_moe_topk-<il>` node, token-major (`ne[0]` ids per token, `ne[1]`
    /// tokens), read with the node's strides (it is a view of the full argsort, so rows are
    /// `nb[1]` bytes apart, not `ne[0]*4`). `None` if the node is not a 2-D I32 tensor.
    pub fn expert_ids(&self) -> Option<Vec<i32>> {
        let t = self.t;
        if t.type_ != ll::GGML_TYPE_I32 || t.data.is_null() || t.ne[2] != 1 || t.ne[3] != 1 {
            return None;
        }
        let (k, n) = (
            usize::try_from(t.ne[0]).ok()?,
            usize::try_from(t.ne[1]).ok()?,
        );
        let mut out = Vec::with_capacity(k * n);
        with_host_bytes(t, |base| {
            for j in 0..n {
                for i in 0..k {
                    // SAFETY: base holds the node's computed extent (see with_host_bytes); (i,
                    // j) is within ne, so the strided offset is inside the (view) extent.
                    let v = unsafe {
                        base.add(i * t.nb[0] + j * t.nb[1])
                            .cast::<i32>()
                            .read_unaligned()
                    };
                    out.push(v);
                }
            }
        });
        Some(out)
    }
}

impl Node<'_> {
    /// Overwrites the expert ids of a `ffn_moe_topk-<il>` node, token-major as
    /// [`Node::expert_ids`] reads them, through the node's strides (it is a view of the argsort:
    /// a flat write would land in the wrong rows). Everything downstream — the weight chain's
    /// `get_rows` when done at the routing node, the expert matmuls — then reads the new ids.
    /// `false` (nothing written) when the node is not a 2-D I32 tensor of `ids.len()` entries.
    pub fn write_expert_ids(&self, ids: &[i32]) -> bool {
        let t = self.t;
        if t.type_ != ll::GGML_TYPE_I32 || t.data.is_null() || t.ne[2] != 1 || t.ne[3] != 1 {
            return false;
        }
        let (Ok(k), Ok(n)) = (usize::try_from(t.ne[0]), usize::try_from(t.ne[1])) else {
            return false;
        };
        if k * n != ids.len() {
            return false;
        }
        with_host_bytes_mut(t, |base| {
            for j in 0..n {
                for i in 0..k {
                    // SAFETY: base holds the node's computed extent (see with_host_bytes_mut),
                    // read by no other thread while the eval callback runs; (i, j) is within
                    // ne, so the strided offset is inside the tensor's (view) extent.
                    unsafe {
                        base.add(i * t.nb[0] + j * t.nb[1])
                            .cast::<i32>()
                            .write_unaligned(ids[j * k + i]);
                    }
                }
            }
        });
        true
    }

    /// The full ranking behind a `ffn_moe_topk-<il>` node: its view source is the argsort of
    /// every expert's score, so each token's row holds all `n_expert` ids best first. Returns
    /// `(n_expert, ids token-major)`; `None` when the node is not such a view.
    pub fn ranking(&self) -> Option<(usize, Vec<i32>)> {
        let t = self.t;
        if t.view_src.is_null() {
            return None;
        }
        // SAFETY: a live node's view source is a live tensor of the same graph.
        let src = unsafe { &*t.view_src };
        if src.type_ != ll::GGML_TYPE_I32 || src.data.is_null() || src.ne[2] != 1 {
            return None;
        }
        let (e, n) = (
            usize::try_from(src.ne[0]).ok()?,
            usize::try_from(src.ne[1]).ok()?,
        );
        let mut out = Vec::with_capacity(e * n);
        with_host_bytes(src, |base| {
            for j in 0..n {
                for i in 0..e {
                    // SAFETY: the argsort was computed before its view and base holds its
                    // extent (see with_host_bytes); (i, j) is within its ne.
                    let v = unsafe {
                        base.add(i * src.nb[0] + j * src.nb[1])
                            .cast::<i32>()
                            .read_unaligned()
                    };
                    out.push(v);
                }
            }
        });
        Some((e, out))
    }

    /// The scores the ranking of a `ffn_moe_topk-<il>` node sorted (the argsort's input: the
    /// router's probabilities, biased where the architecture biases selection), token-major,
    /// `n_expert` per token. `None` when the graph is not shaped so.
    pub fn ranking_scores(&self) -> Option<Vec<f32>> {
        let t = self.t;
        if t.view_src.is_null() {
            return None;
        }
        // SAFETY: a live node's view source is a live tensor of the same graph.
        let argsort = unsafe { &*t.view_src };
        let p = argsort.src[0];
        if p.is_null() {
            return None;
        }
        // SAFETY: a live node's sources are live tensors of the same graph.
        Node { t: unsafe { &*p } }.f32_values()
    }

    /// Overwrites the values of a node [`Node::f32_values`] can read, token-major, through the
    /// node's strides. `false` (nothing written) for other shapes or a length mismatch.
    pub fn write_f32_values(&self, v: &[f32]) -> bool {
        let t = self.t;
        let Some((k, n, sk, sn)) = f32_layout(t) else {
            return false;
        };
        if k * n != v.len() {
            return false;
        }
        with_host_bytes_mut(t, |base| {
            for j in 0..n {
                for i in 0..k {
                    // SAFETY: base holds the node's computed extent (see with_host_bytes_mut)
                    // and its consumers have not run yet; (i, j) is within ne, so the strided
                    // offset is inside the tensor's extent.
                    unsafe {
                        base.add(i * sk + j * sn)
                            .cast::<f32>()
                            .write_unaligned(v[j * k + i]);
                    }
                }
            }
        });
        true
    }

    /// ggml's name for the node's operation (`MUL_MAT`, `RMS_NORM`, unary ops by their own name).
    pub fn op_name(&self) -> &str {
        // SAFETY: ggml_op_desc returns a pointer to a static NUL-terminated string.
        let c = unsafe { CStr::from_ptr(ll::ggml_op_desc(self.t)) };
        c.to_str().unwrap_or("?")
    }

    /// The values of a 2-D or 3-D F32 node whose rows are the routing's slots
    /// (`[k, n_tokens]`, or `[1, k, n_tokens]` as `ffn_moe_weights-<il>` is), token-major,
    /// read with the node's strides. `None` for other shapes or types.
    pub fn f32_values(&self) -> Option<Vec<f32>> {
        let t = self.t;
        let (k, n, sk, sn) = f32_layout(t)?;
        let mut out = Vec::with_capacity(k * n);
        with_host_bytes(t, |base| {
            for j in 0..n {
                for i in 0..k {
                    // SAFETY: base holds the node's computed extent (see with_host_bytes); (i,
                    // j) is within ne, so the strided offset is inside the tensor's extent.
                    let v = unsafe { base.add(i * sk + j * sn).cast::<f32>().read_unaligned() };
                    out.push(v);
                }
            }
        });
        Some(out)
    }
}

/// The slot/token layout of a 2-D `[k, n]` or 3-D `[1, k, n]` F32 node: (k, n, slot stride,
/// token stride) in bytes.
fn f32_layout(t: &ll::ggml_tensor) -> Option<(usize, usize, usize, usize)> {
    if t.type_ != ll::GGML_TYPE_F32 || t.data.is_null() || t.ne[3] != 1 {
        return None;
    }
    let (k, n, sk, sn) = if t.ne[0] == 1 {
        (t.ne[1], t.ne[2], t.nb[1], t.nb[2])
    } else if t.ne[2] == 1 {
        (t.ne[0], t.ne[1], t.nb[0], t.nb[1])
    } else {
        return None;
    };
    Some((usize::try_from(k).ok()?, usize::try_from(n).ok()?, sk, sn))
}

/// A weight tensor's location in process memory, captured from a live graph. Only this module
/// creates one, so an address in a `WeightRef` always points at llama.cpp-owned weight memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightRef {
    /// GGUF tensor name.
    pub name: String,
    /// Address of the tensor data.
    pub addr: usize,
    /// Total bytes.
    pub bytes: usize,
    /// `ne[2]`: the expert count for expert tensors.
    pub n_expert: usize,
    /// `nb[2]`: bytes per expert slice.
    pub expert_stride: usize,
}

/// What `cb_eval`'s user data points at: the engine's hook (if any) and the prefill device's
/// node count, which needs the callback even on a run without a hook.
pub(super) struct HookSlot<H> {
    /// The engine's hook.
    pub(super) hook: Option<H>,
    /// Count nodes computed on a device (`--prefill-device`).
    pub(super) count_device: bool,
    /// Nodes whose output lay in a device buffer, cumulative over the context's decodes.
    pub(super) device_nodes: u64,
    /// Tokens of the graphs (ubatches) that had at least one such node, cumulative.
    pub(super) device_tokens: u64,
    /// The current graph's token count (its embedding lookup's `ne[1]`) while it is not
    /// counted yet.
    pub(super) graph_tokens: Option<u64>,
}

pub(super) unsafe extern "C" fn eval_trampoline<H: EvalHook>(
    t: *mut ll::ggml_tensor,
    ask: bool,
    ud: *mut c_void,
) -> bool {
    if t.is_null() || ud.is_null() {
        return false;
    }
    // SAFETY: ud is the Box<HookSlot<H>> pointer installed by Context::new, alive until
    // llama_free; the callback runs on the decoding thread while Context::decode holds &mut
    // Context, so this is the only reference to the slot. t is a live graph node for the call.
    let (slot, node) = unsafe { (&mut *(ud as *mut HookSlot<H>), Node { t: &*t }) };
    if ask {
        // ggml-backend-sched asks once for every node of a split right before the split's
        // backend computes it: a device node counted here is one the device ran
        if slot.count_device {
            // every token graph opens with the embedding lookup (`token_embd.weight` rows,
            // [n_embd, n_tokens]): the ubatch's token count
            if let Some(n) = node.embedding_rows() {
                slot.graph_tokens = Some(n);
            }
            if node.on_device() && node.computes() {
                slot.device_nodes += 1;
                slot.device_tokens += slot.graph_tokens.take().unwrap_or(0);
            }
        }
        slot.hook.as_mut().is_some_and(|h| h.wants(&node))
    } else {
        if let Some(h) = slot.hook.as_mut() {
            h.observe(&node);
        }
        // never cancel the rest of the split: a failure is reported through the abort flag,
        // which stops the graph instead of silently skipping nodes
        true
    }
}

/// Whether `t`'s memory lies in a device buffer (not host-addressable).
fn on_device(t: &ll::ggml_tensor) -> bool {
    // SAFETY: a live tensor's buffer, when set, is a live backend buffer.
    !t.buffer.is_null() && !unsafe { ll::ggml_backend_buffer_is_host(t.buffer) }
}

/// Runs `f` on a host address of `t`'s bytes: the tensor's own memory when it is host memory
/// (the CPU backend, a weight), a copy of its whole extent (`ggml_nbytes`, strides included)
/// when a prefill device computed it.
fn with_host_bytes<R>(t: &ll::ggml_tensor, f: impl FnOnce(*const u8) -> R) -> R {
    if !on_device(t) {
        return f(t.data as *const u8);
    }
    // SAFETY: t is a live, computed tensor; ggml_nbytes is its extent and the get copies
    // exactly that many bytes into the buffer sized for them (the backend synchronised before
    // the eval callback).
    let buf = unsafe {
        let n = ll::ggml_nbytes(t);
        let mut buf = vec![0u8; n];
        ll::ggml_backend_tensor_get(t, buf.as_mut_ptr().cast(), 0, n);
        buf
    };
    f(buf.as_ptr())
}

/// [`with_host_bytes`] for a write: on a device the edited copy is written back whole.
fn with_host_bytes_mut<R>(t: &ll::ggml_tensor, f: impl FnOnce(*mut u8) -> R) -> R {
    if !on_device(t) {
        return f(t.data.cast::<u8>());
    }
    let ptr = std::ptr::from_ref(t).cast_mut();
    // SAFETY: as in with_host_bytes; the set writes the same extent back into the tensor's
    // device memory (ggml only reads the tensor struct), before any consumer of the node runs.
    unsafe {
        let n = ll::ggml_nbytes(t);
        let mut buf = vec![0u8; n];
        ll::ggml_backend_tensor_get(t, buf.as_mut_ptr().cast(), 0, n);
        let r = f(buf.as_mut_ptr());
        ll::ggml_backend_tensor_set(ptr, buf.as_ptr().cast(), 0, n);
        r
    }
}

impl Node<'_> {
    /// Whether the node's output lies in a device buffer: a prefill device computed it.
    pub fn on_device(&self) -> bool {
        on_device(self.t)
    }

    /// The token count of a graph's embedding lookup node (`GET_ROWS` on `token_embd.weight`).
    fn embedding_rows(&self) -> Option<u64> {
        if self.t.op != ll::GGML_OP_GET_ROWS
            || !self.sources().any(|s| s.name() == "token_embd.weight")
        {
            return None;
        }
        u64::try_from(self.t.ne[1]).ok()
    }

    /// Whether computing the node does any work (views, reshapes and permutes do none).
    fn computes(&self) -> bool {
        !matches!(
            self.t.op,
            ll::GGML_OP_NONE
                | ll::GGML_OP_VIEW
                | ll::GGML_OP_RESHAPE
                | ll::GGML_OP_PERMUTE
                | ll::GGML_OP_TRANSPOSE
        )
    }
}

impl Node<'_> {
    /// A 2-D F32 tensor (a router's `ffn_gate_inp` weight, `[n_embd, n_expert]`) as its `ne[1]`
    /// rows of `ne[0]` values each, row-major: `(ne[0], values)`. `None` for other types or
    /// shapes — the predictors then leave that layer unranked rather than guess.
    pub fn f32_matrix(&self) -> Option<(usize, Vec<f32>)> {
        let t = self.t;
        if t.type_ != ll::GGML_TYPE_F32 || t.data.is_null() || t.ne[2] != 1 || t.ne[3] != 1 {
            return None;
        }
        let (k, n) = (
            usize::try_from(t.ne[0]).ok()?,
            usize::try_from(t.ne[1]).ok()?,
        );
        let mut out = Vec::with_capacity(k * n);
        with_host_bytes(t, |base| {
            for j in 0..n {
                for i in 0..k {
                    // SAFETY: base holds the weight's (or computed node's) extent (see
                    // with_host_bytes); (i, j) is within ne, so the offset is inside it.
                    let v = unsafe {
                        base.add(i * t.nb[0] + j * t.nb[1])
                            .cast::<f32>()
                            .read_unaligned()
                    };
                    out.push(v);
                }
            }
        });
        Some((k, out))
    }

    /// Every column of a computed 2-D F32 node (`[n_embd, n_tokens]`: each token's activation
    /// row), token-major: `(ne[0], values)`. A device-resident node is copied once. `None` for
    /// other types or shapes. The same layout as [`Self::f32_matrix`]'s rows, read off a
    /// computed node instead of a weight.
    pub fn f32_columns(&self) -> Option<(usize, Vec<f32>)> {
        self.f32_matrix()
    }

    /// The last column of a computed 2-D F32 node (`[n_embd, n_tokens]`: the last token's
    /// activation row). `None` for other types or shapes.
    pub fn f32_last_column(&self) -> Option<Vec<f32>> {
        let t = self.t;
        if t.type_ != ll::GGML_TYPE_F32 || t.data.is_null() || t.ne[2] != 1 || t.ne[3] != 1 {
            return None;
        }
        let k = usize::try_from(t.ne[0]).ok()?;
        let j = usize::try_from(t.ne[1]).ok()?.checked_sub(1)?;
        let out = with_host_bytes(t, |base| {
            (0..k)
                .map(|i| {
                    // SAFETY: base holds the node's computed extent (see with_host_bytes); (i,
                    // j) is within ne, so the strided offset is inside it.
                    unsafe {
                        base.add(i * t.nb[0] + j * t.nb[1])
                            .cast::<f32>()
                            .read_unaligned()
                    }
                })
                .collect()
        });
        Some(out)
    }
}
