//! ggml tensor types as stored in GGUF files, with their block geometry.
//!
//! Ids, block sizes and block byte sizes follow `ggml/include/ggml.h` and `ggml/src/ggml.c` of the
//! llama.cpp vendored by `llama-cpp-sys-2` 0.1.161.

use std::fmt;

/// A ggml tensor element type (the `type` field of a GGUF tensor info).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[allow(non_camel_case_types, missing_docs)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// (type, id, elements per block, bytes per block, name)
const TABLE: &[(GgmlType, u32, u64, u64, &str)] = &[
    (GgmlType::F32, 0, 1, 4, "F32"),
    (GgmlType::F16, 1, 1, 2, "F16"),
    (GgmlType::Q4_0, 2, 32, 18, "Q4_0"),
    (GgmlType::Q4_1, 3, 32, 20, "Q4_1"),
    (GgmlType::Q5_0, 6, 32, 22, "Q5_0"),
    (GgmlType::Q5_1, 7, 32, 24, "Q5_1"),
    (GgmlType::Q8_0, 8, 32, 34, "Q8_0"),
    (GgmlType::Q8_1, 9, 32, 36, "Q8_1"),
    (GgmlType::Q2_K, 10, 256, 84, "Q2_K"),
    (GgmlType::Q3_K, 11, 256, 110, "Q3_K"),
    (GgmlType::Q4_K, 12, 256, 144, "Q4_K"),
    (GgmlType::Q5_K, 13, 256, 176, "Q5_K"),
    (GgmlType::Q6_K, 14, 256, 210, "Q6_K"),
    (GgmlType::Q8_K, 15, 256, 292, "Q8_K"),
    (GgmlType::IQ2_XXS, 16, 256, 66, "IQ2_XXS"),
    (GgmlType::IQ2_XS, 17, 256, 74, "IQ2_XS"),
    (GgmlType::IQ3_XXS, 18, 256, 98, "IQ3_XXS"),
    (GgmlType::IQ1_S, 19, 256, 50, "IQ1_S"),
    (GgmlType::IQ4_NL, 20, 32, 18, "IQ4_NL"),
    (GgmlType::IQ3_S, 21, 256, 110, "IQ3_S"),
    (GgmlType::IQ2_S, 22, 256, 82, "IQ2_S"),
    (GgmlType::IQ4_XS, 23, 256, 136, "IQ4_XS"),
    (GgmlType::I8, 24, 1, 1, "I8"),
    (GgmlType::I16, 25, 1, 2, "I16"),
    (GgmlType::I32, 26, 1, 4, "I32"),
    (GgmlType::I64, 27, 1, 8, "I64"),
    (GgmlType::F64, 28, 1, 8, "F64"),
    (GgmlType::IQ1_M, 29, 256, 56, "IQ1_M"),
    (GgmlType::BF16, 30, 1, 2, "BF16"),
    (GgmlType::TQ1_0, 34, 256, 54, "TQ1_0"),
    (GgmlType::TQ2_0, 35, 256, 66, "TQ2_0"),
    (GgmlType::MXFP4, 39, 32, 17, "MXFP4"),
    (GgmlType::NVFP4, 40, 64, 36, "NVFP4"),
    (GgmlType::Q1_0, 41, 128, 18, "Q1_0"),
    (GgmlType::Q2_0, 42, 64, 18, "Q2_0"),
];

impl GgmlType {
    fn row(self) -> &'static (GgmlType, u32, u64, u64, &'static str) {
        // Every variant has exactly one row; the fallback is unreachable by construction.
        TABLE.iter().find(|r| r.0 == self).unwrap_or(&TABLE[0])
    }

    /// The type for a GGUF type id, or `None` for ids this llama.cpp does not define.
    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// Parse a type name such as `Q4_K` or `f32` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|r| r.4.eq_ignore_ascii_case(name))
            .map(|r| r.0)
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> u64 {
        self.row().2
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.row().3
    }

    /// The canonical ggml name (`Q4_K`).
    pub fn name(self) -> &'static str {
        self.row().4
    }

    /// Bytes of one row of `ne0` elements, or `None` when `ne0` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, ne0: u64) -> Option<u64> {
        if !ne0.is_multiple_of(self.block_size()) {
            return None;
        }
        (ne0 / self.block_size()).checked_mul(self.type_size())
    }

    /// Bytes of a tensor with dims `ne` (ggml order: `ne[0]` is the contiguous row), or `None` on
    /// a partial block or overflow.
    pub fn tensor_bytes(self, ne: &[u64]) -> Option<u64> {
        let first = ne.first().copied().unwrap_or(1);
        ne.iter()
            .skip(1)
            .try_fold(self.row_bytes(first)?, |acc, &d| acc.checked_mul(d))
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sizes_match_ggml() {
        for r in TABLE {
            assert_eq!(GgmlType::from_id(r.1), Some(r.0));
            assert_eq!(GgmlType::from_name(r.4), Some(r.0));
        }
        assert_eq!(
            GgmlType::Q4_K.tensor_bytes(&[2048, 768, 128]),
            Some(768 * 8 * 144 * 128)
        );
        assert_eq!(GgmlType::Q8_0.row_bytes(33), None);
        assert_eq!(GgmlType::F32.tensor_bytes(&[u64::MAX, 2]), None);
        assert_eq!(GgmlType::from_id(4), None);
    }
}
