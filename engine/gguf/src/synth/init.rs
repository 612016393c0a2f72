//! How each synthetic tensor's bytes are generated, page by page.
//!
//! A tensor is cut into fixed pages (a whole number of quant blocks, ~64 KiB); page `k` is
//! generated from its own seed `derive(seed, name, k)`. Any byte is therefore a pure function of
//! (seed, tensor name, offset): chunking and sharding never change the data, and pages could be
//! generated in parallel.
//!
//! Quant tensors are random bytes (every bit pattern of a quant payload is a valid value) with
//! the block scales patched from a 16-entry table of finite f16 values chosen so the weights
//! have the requested standard deviation. The table entry is picked by a random payload byte, so
//! there is no per-element float math on the bulk path.

use std::sync::Arc;

use half::f16;

use super::rng::{WyRand, derive};
use crate::ggml_type::GgmlType;

/// Bytes per generation page (rounded down to whole blocks).
const PAGE_TARGET: u64 = 64 << 10;

/// How a tensor's values are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    /// Every element 1.0 (norm weights).
    Ones,
    /// Every element 0.0.
    Zeros,
    /// Every element the given value (F32 only).
    Const(f32),
    /// Zero-mean values with standard deviation `std` (uniform for float types; uniform payload
    /// with scaled blocks for quant types).
    Random {
        /// Target standard deviation of the decoded values.
        std: f32,
    },
    /// Like `Random` but row `r` (of `dims[0]` elements) is multiplied by `gains[r]`
    /// (router skew). F32 only.
    RowGain {
        /// Base standard deviation.
        std: f32,
        /// Per-row gain.
        gains: Arc<Vec<f32>>,
    },
    /// Expert ids (I32), `per_row` distinct ids in `0..n_expert` per row of `per_row` elements:
    /// row `r` holds a seeded start `s` and then `s+1, s+2, …` (mod `n_expert`). deepseek4's
    /// hash-routing table (`ffn_gate_tid2eid`, one row per token id).
    ExpertIds {
        /// Experts of the layer (ids are below it).
        n_expert: u32,
        /// Ids per row (the layer's top-k); at most `n_expert`, so a row never repeats an id.
        per_row: u32,
    },
}

/// Supported generation types.
pub fn supports(t: GgmlType) -> bool {
    matches!(
        t,
        GgmlType::F32 | GgmlType::F16 | GgmlType::Q8_0 | GgmlType::Q4_K | GgmlType::MXFP4
    )
}

/// The id in slot `slot` of row `row` of an [`Init::ExpertIds`] table.
pub fn expert_id(seed: u64, name: &str, row: u64, slot: u32, n_expert: u32) -> i32 {
    let n = u64::from(n_expert.max(1));
    let start = derive(seed, name, row) % n;
    ((start + u64::from(slot)) % n) as i32
}

/// Page size in bytes for a type.
pub fn page_bytes(t: GgmlType) -> u64 {
    let ts = t.type_size();
    (PAGE_TARGET / ts).max(1) * ts
}

/// Mean |kvalue|² of the MXFP4 grid `{0,1,2,3,4,6,8,12}` (doubled E2M1, signs symmetric).
const MXFP4_RMS: f32 = 5.852; // sqrt(274/8)

fn scale_table(std: f32, payload_std: f32) -> [u16; 16] {
    let mut t = [0u16; 16];
    for (j, slot) in t.iter_mut().enumerate() {
        // Jitter 0.5..1.5 so blocks differ in magnitude, mean gain 1.
        let jitter = 0.5 + j as f32 / 15.0;
        let v = (std / payload_std * jitter).clamp(1e-7, 60000.0);
        *slot = f16::from_f32(v).to_bits();
    }
    t
}

/// Generate page `page` of a tensor into `out` (`out.len()` ≤ page size; a short last page is
/// the prefix of the full page).
pub fn generate_page(
    init: &Init,
    t: GgmlType,
    row_len: u64,
    seed: u64,
    name: &str,
    page: u64,
    out: &mut [u8],
) {
    let mut rng = WyRand::new(derive(seed, name, page));
    let first_elem = page * page_bytes(t) / t.type_size() * t.block_size();
    match (init, t) {
        (Init::Zeros, _) => out.fill(0),
        (Init::Ones, GgmlType::F32) => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&1.0f32.to_le_bytes());
            }
        }
        (Init::Const(v), GgmlType::F32) => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        (Init::Ones, GgmlType::F16) => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&f16::ONE.to_le_bytes());
            }
        }
        (Init::Random { std }, GgmlType::F32) => {
            let a = std * 3f32.sqrt();
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&(rng.next_signed_unit() * a).to_le_bytes());
            }
        }
        (Init::Random { std }, GgmlType::F16) => {
            let a = std * 3f32.sqrt();
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&f16::from_f32(rng.next_signed_unit() * a).to_le_bytes());
            }
        }
        (Init::RowGain { std, gains }, GgmlType::F32) => {
            let a = std * 3f32.sqrt();
            for (i, c) in out.chunks_exact_mut(4).enumerate() {
                let row = (first_elem + i as u64) / row_len.max(1);
                let g = gains.get(row as usize).copied().unwrap_or(1.0);
                c.copy_from_slice(&(rng.next_signed_unit() * a * g).to_le_bytes());
            }
        }
        (Init::ExpertIds { n_expert, per_row }, GgmlType::I32) => {
            let k = u64::from((*per_row).max(1));
            for (i, c) in out.chunks_exact_mut(4).enumerate() {
                let e = first_elem + i as u64;
                let id = expert_id(seed, name, e / k, (e % k) as u32, *n_expert);
                c.copy_from_slice(&id.to_le_bytes());
            }
        }
        (Init::Random { std }, GgmlType::Q8_0) => {
            rng.fill_bytes(out);
            // int8 uniform payload: std ≈ 73.9.
            let table = scale_table(*std, 73.9);
            for b in out.chunks_exact_mut(34) {
                let d = table[(b[2] & 15) as usize];
                b[0..2].copy_from_slice(&d.to_le_bytes());
            }
        }
        (Init::Random { std }, GgmlType::Q4_K) => {
            rng.fill_bytes(out);
            // w = d·sc·q − dmin·m with sc, m uniform 6-bit and q uniform 4-bit: with
            // dmin = 7.5·d the mean is ~0 and the std ~250·d.
            let table = scale_table(*std, 250.0);
            for b in out.chunks_exact_mut(144) {
                let dv = f16::from_bits(table[(b[16] & 15) as usize]);
                let dmin = f16::from_f32(dv.to_f32() * 7.5);
                b[0..2].copy_from_slice(&dv.to_le_bytes());
                b[2..4].copy_from_slice(&dmin.to_le_bytes());
            }
        }
        (Init::Random { std }, GgmlType::MXFP4) => {
            rng.fill_bytes(out);
            // value = kvalue · 2^(e − 128) (ggml_e8m0_to_fp32_half).
            let e0 = (128.0 + (std / MXFP4_RMS).log2()).round().clamp(2.0, 250.0) as i32;
            for b in out.chunks_exact_mut(17) {
                let e = e0 + [-1, 0, 0, 1][(b[1] & 3) as usize];
                b[0] = e as u8;
            }
        }
        // Unsupported combinations are rejected when the plan is built; zeros keep the file valid.
        _ => out.fill(0),
    }
}

/// Decode an f16 from little-endian bytes.
pub fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}
