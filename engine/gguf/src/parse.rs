//! Parsing the GGUF v3 header (magic, version, metadata, tensor infos) from bytes.
//!
//! Every length and count read from the input is checked against the bytes that remain before
//! anything is allocated, so hostile input costs at most O(file size) memory and never panics.

use crate::error::ParseError;
use crate::ggml_type::GgmlType;
use crate::value::{MetaArray, MetaValue, ValueType, escape};

/// The GGUF magic bytes.
pub const MAGIC: &[u8; 4] = b"GGUF";
/// The only version this crate reads and writes.
pub const VERSION: u32 = 3;
/// Alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's maximum tensor rank.
pub const MAX_DIMS: usize = 4;
/// Arrays nested deeper than this are rejected (bounds recursion on hostile input).
const MAX_ARRAY_DEPTH: u32 = 8;

/// One tensor info record, with offsets resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.ffn_up_exps.weight`.
    pub name: String,
    /// Dimensions in ggml order (`dims[0]` is contiguous).
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset relative to the start of the data section (as stored).
    pub rel_offset: u64,
    /// Absolute offset of the first byte in the file.
    pub file_offset: u64,
    /// Size of the tensor data in bytes (without padding).
    pub n_bytes: u64,
    /// Offset of this tensor's info record (its dims) in the header, for messages; 0 for a
    /// planned tensor not read from a file.
    pub info_offset: u64,
}

impl TensorInfo {
    /// Byte strides `nb[0..n_dims]` as ggml computes them.
    pub fn strides(&self) -> Vec<u64> {
        let mut nb = Vec::with_capacity(self.dims.len());
        let mut acc = self.ggml_type.type_size();
        for (i, &d) in self.dims.iter().enumerate() {
            nb.push(acc);
            acc = if i == 0 {
                (d / self.ggml_type.block_size()).saturating_mul(self.ggml_type.type_size())
            } else {
                acc.saturating_mul(d)
            };
        }
        nb
    }

    /// Stride of the outermost dimension (for a 3-D expert tensor: one expert's bytes, `nb[2]`).
    pub fn outer_stride(&self) -> u64 {
        match self.dims.last() {
            Some(&d) if d > 0 => self.n_bytes / d,
            _ => self.n_bytes,
        }
    }
}

/// The parsed header of one GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// Format version (always 3).
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, MetaValue)>,
    /// Byte offset of each metadata value's type tag (same order as `metadata`), for messages.
    pub kv_offsets: Vec<u64>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Data alignment (`general.alignment` or 32).
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Length of the input the header was parsed from.
    pub file_len: u64,
}

impl GgufHeader {
    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The byte offset of metadata key `key`'s value (its type tag), if the key is present.
    pub fn kv_offset(&self, key: &str) -> Option<u64> {
        let i = self.metadata.iter().position(|(k, _)| k == key)?;
        self.kv_offsets.get(i).copied()
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            offset: self.pos as u64,
            message: message.into(),
        }
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], ParseError> {
        if n > self.remaining() {
            return Err(self.err(format!(
                "file truncated: {what} needs {n} bytes but only {} remain",
                self.remaining()
            )));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ParseError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8, ParseError> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, ParseError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32, ParseError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, ParseError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, ParseError> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(ParseError {
                offset: at as u64,
                message: format!(
                    "{what}: string length {len} exceeds the {} bytes left in the file",
                    self.remaining()
                ),
            });
        }
        let bytes = self.take(len, what)?;
        // Lossy: some real vocabularies carry invalid UTF-8; the reader must not reject them.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: u32) -> Result<MetaValue, ParseError> {
        Ok(match ty {
            ValueType::U8 => MetaValue::U8(self.u8(key)?),
            ValueType::I8 => MetaValue::I8(self.u8(key)? as i8),
            ValueType::U16 => MetaValue::U16(self.u16(key)?),
            ValueType::I16 => MetaValue::I16(self.u16(key)? as i16),
            ValueType::U32 => MetaValue::U32(self.u32(key)?),
            ValueType::I32 => MetaValue::I32(self.u32(key)? as i32),
            ValueType::F32 => MetaValue::F32(f32::from_bits(self.u32(key)?)),
            ValueType::U64 => MetaValue::U64(self.u64(key)?),
            ValueType::I64 => MetaValue::I64(self.u64(key)? as i64),
            ValueType::F64 => MetaValue::F64(f64::from_bits(self.u64(key)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.u8(key)? {
                    0 => MetaValue::Bool(false),
                    1 => MetaValue::Bool(true),
                    b => {
                        return Err(ParseError {
                            offset: at as u64,
                            message: format!("{key}: bool value {b} is neither 0 nor 1"),
                        });
                    }
                }
            }
            ValueType::String => MetaValue::String(self.string(key)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.err(format!(
                        "{key}: arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
                    )));
                }
                let at = self.pos;
                let tid = self.u32(key)?;
                let elem_type = ValueType::from_id(tid).ok_or_else(|| ParseError {
                    offset: at as u64,
                    message: format!("{key}: unknown array element type {tid}"),
                })?;
                let at = self.pos;
                let n = self.u64(key)?;
                let need = n.checked_mul(elem_type.min_encoded_len());
                if need.is_none_or(|need| need > self.remaining()) {
                    return Err(ParseError {
                        offset: at as u64,
                        message: format!(
                            "{key}: array of {n} {elem_type:?} elements cannot fit in the {} bytes left in the file",
                            self.remaining()
                        ),
                    });
                }
                let mut values = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    values.push(self.value(elem_type, key, depth + 1)?);
                }
                MetaValue::Array(MetaArray { elem_type, values })
            }
        })
    }
}

/// Round `x` up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn pad_to(x: u64, align: u64) -> Option<u64> {
    x.checked_add(align - 1).map(|v| v / align * align)
}

/// Parse a complete GGUF v3 file held in `buf` (usually a memory map).
pub fn parse_header(buf: &[u8]) -> Result<GgufHeader, ParseError> {
    let mut c = Cursor { buf, pos: 0 };
    let magic = c.array::<4>("magic")?;
    if &magic != MAGIC {
        return Err(ParseError {
            offset: 0,
            message: format!("bad magic {magic:02x?}, expected \"GGUF\""),
        });
    }
    let version = c.u32("version")?;
    if version != VERSION {
        return Err(ParseError {
            offset: 4,
            message: format!("unsupported GGUF version {version} (only v3 is supported)"),
        });
    }
    let at = c.pos;
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;
    // Each KV needs at least a key length, a type tag and one byte; each tensor info at least 24.
    if n_kv.checked_mul(13).is_none_or(|b| b > c.remaining())
        || n_tensors.checked_mul(24).is_none_or(|b| b > c.remaining())
    {
        return Err(ParseError {
            offset: at as u64,
            message: format!(
                "{n_tensors} tensors and {n_kv} metadata entries cannot fit in a {}-byte file",
                buf.len()
            ),
        });
    }

    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut kv_offsets = Vec::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key = c.string(&format!("metadata key #{i}"))?;
        // keys reach messages: escaped, so a hostile file cannot put raw bytes on a terminal
        let shown = escape(&key);
        let at = c.pos;
        let tid = c.u32(&shown)?;
        let ty = ValueType::from_id(tid).ok_or_else(|| ParseError {
            offset: at as u64,
            message: format!("{shown}: unknown metadata value type {tid}"),
        })?;
        let value = c.value(ty, &shown, 0)?;
        if metadata.iter().any(|(k, _)| *k == key) {
            return Err(c.err(format!("duplicate metadata key {shown}")));
        }
        metadata.push((key, value));
        kv_offsets.push(at as u64);
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, MetaValue::U32(a))) if *a > 0 && a.is_power_of_two() => u64::from(*a),
        Some((_, v)) => {
            return Err(c.err(format!(
                "general.alignment must be a power-of-two u32, found {v}"
            )));
        }
    };

    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let raw_name = c.string(&format!("tensor #{i} name"))?;
        let name = escape(&raw_name);
        let info_offset = c.pos as u64;
        let at = c.pos;
        let n_dims = c.u32(&name)?;
        if n_dims as usize > MAX_DIMS {
            return Err(ParseError {
                offset: at as u64,
                message: format!(
                    "tensor {name}: {n_dims} dimensions (ggml allows at most {MAX_DIMS})"
                ),
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let at = c.pos;
            let d = c.u64(&name)?;
            if d > i64::MAX as u64 {
                return Err(ParseError {
                    offset: at as u64,
                    message: format!("tensor {name}: dimension {d} is out of range"),
                });
            }
            dims.push(d);
        }
        let at = c.pos;
        let tid = c.u32(&name)?;
        let ggml_type = GgmlType::from_id(tid).ok_or_else(|| ParseError {
            offset: at as u64,
            message: format!("tensor {name}: unknown ggml type {tid}"),
        })?;
        let n_bytes = ggml_type.tensor_bytes(&dims).ok_or_else(|| ParseError {
            offset: at as u64,
            message: format!(
                "tensor {name}: shape {dims:?} of {ggml_type} is not a whole number of blocks or its size overflows"
            ),
        })?;
        let at = c.pos;
        let rel_offset = c.u64(&name)?;
        if !rel_offset.is_multiple_of(alignment) {
            return Err(ParseError {
                offset: at as u64,
                message: format!(
                    "tensor {name}: data offset {rel_offset} is not a multiple of the alignment {alignment}"
                ),
            });
        }
        if tensors.iter().any(|t| t.name == raw_name) {
            return Err(c.err(format!("duplicate tensor name {name}")));
        }
        tensors.push(TensorInfo {
            name: raw_name,
            dims,
            ggml_type,
            rel_offset,
            file_offset: 0,
            n_bytes,
            info_offset,
        });
    }

    let file_len = buf.len() as u64;
    let data_offset = pad_to(c.pos as u64, alignment).ok_or_else(|| c.err("offset overflow"))?;
    if n_tensors > 0 && data_offset > file_len {
        return Err(c.err(format!(
            "file truncated: data section would start at {data_offset} but the file has {file_len} bytes"
        )));
    }
    for t in &mut tensors {
        let end = data_offset
            .checked_add(t.rel_offset)
            .and_then(|o| o.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_len => t.file_offset = data_offset + t.rel_offset,
            _ => {
                return Err(ParseError {
                    offset: data_offset,
                    message: format!(
                        "tensor {}: data [{} + {}, {} bytes) extends past the end of the {file_len}-byte file (truncated?)",
                        escape(&t.name),
                        data_offset,
                        t.rel_offset,
                        t.n_bytes
                    ),
                });
            }
        }
    }
    Ok(GgufHeader {
        version,
        metadata,
        kv_offsets,
        tensors,
        alignment,
        data_offset,
        file_len,
    })
}
