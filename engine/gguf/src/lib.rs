//! `bmoe-gguf`: read and write GGUF v3 files, open split sets as one model, describe MoE expert
//! layout ([`ModelInfo`]), and synthesise MoE models llama.cpp can load ([`synth`]).
//!
//! Reading memory-maps the file(s); files must not be modified while open.

pub mod edit;
pub mod error;
pub mod ggml_type;
pub mod info;
mod mmap;
pub mod parse;
pub mod reader;
mod sink;
pub mod synth;
pub mod validate;
pub mod value;
pub mod writer;

pub use error::{GgufError, ParseError, Result};
pub use ggml_type::GgmlType;
pub use info::{ExpertTensor, LayerInfo, ModelInfo, ShardInfo};
pub use parse::{GgufHeader, TensorInfo, parse_header};
pub use reader::{GgufFile, GgufModel, ModelTensor};
pub use validate::{MOE_ARCHITECTURES, is_supported_arch, validate};
pub use value::{MetaArray, MetaValue, ValueType, escape};
pub use writer::{TensorFill, TensorSpec};
