//! Fuzz-style tests: truncated, corrupted and hostile inputs give errors, never panics or huge
//! allocations.
#![allow(clippy::unwrap_used)]

use bmoe_gguf::writer::{TensorFill, write_gguf};
use bmoe_gguf::{
    GgmlType, GgufFile, GgufModel, MetaArray, MetaValue, TensorSpec, ValueType, parse_header,
};

struct Pattern;
impl TensorFill for Pattern {
    fn fill(&mut self, tensor: usize, offset: u64, out: &mut [u8]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = (tensor as u64 * 31 + offset + i as u64) as u8;
        }
    }
}

fn every_type_metadata() -> Vec<(String, MetaValue)> {
    vec![
        (
            "general.architecture".into(),
            MetaValue::String("test".into()),
        ),
        ("t.u8".into(), MetaValue::U8(200)),
        ("t.i8".into(), MetaValue::I8(-5)),
        ("t.u16".into(), MetaValue::U16(65000)),
        ("t.i16".into(), MetaValue::I16(-300)),
        ("t.u32".into(), MetaValue::U32(4_000_000_000)),
        ("t.i32".into(), MetaValue::I32(-70_000)),
        ("t.f32".into(), MetaValue::F32(1.5)),
        ("t.bool".into(), MetaValue::Bool(true)),
        ("t.string".into(), MetaValue::String("héllo".into())),
        ("t.u64".into(), MetaValue::U64(u64::MAX)),
        ("t.i64".into(), MetaValue::I64(i64::MIN)),
        ("t.f64".into(), MetaValue::F64(-2.25)),
        (
            "t.strings".into(),
            MetaValue::string_array(["a", "", "ccc"]),
        ),
        (
            "t.nested".into(),
            MetaValue::Array(MetaArray {
                elem_type: ValueType::Array,
                values: vec![
                    MetaValue::i32_array([1, 2, 3]),
                    MetaValue::i32_array([]),
                    MetaValue::Array(MetaArray {
                        elem_type: ValueType::F64,
                        values: vec![MetaValue::F64(0.5)],
                    }),
                ],
            }),
        ),
        ("t.empty".into(), MetaValue::bool_array([])),
    ]
}

/// A small valid file (~1.2 KB with alignment 32).
fn small_file(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>) {
    let specs = vec![
        TensorSpec::new("a", GgmlType::F32, &[7, 3]),
        TensorSpec::new("b", GgmlType::Q8_0, &[64, 2]),
        TensorSpec::new("c", GgmlType::Q4_K, &[256, 1, 2]),
    ];
    let path = dir.join("small.gguf");
    write_gguf(&path, &every_type_metadata(), &specs, 32, 1, &mut Pattern).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

#[test]
fn every_metadata_type_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = small_file(dir.path());
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.header().metadata, every_type_metadata());
    assert_eq!(f.header().alignment, 32);
    let c = f.header().tensor("c").unwrap();
    assert_eq!(c.dims, [256, 1, 2]);
    assert_eq!(c.n_bytes, 2 * 144);
    assert_eq!(c.outer_stride(), 144);
    assert_eq!(c.file_offset % 32, 0);
    assert_eq!(c.strides(), [144, 144, 144]);
    let data = f.tensor_data(c);
    assert_eq!(data[0], (2 * 31) as u8);
    assert_eq!(bytes.len() as u64, f.header().file_len);
}

#[test]
fn every_truncation_is_an_error_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = small_file(dir.path());
    let h = parse_header(&bytes).unwrap();
    let data_end = h
        .tensors
        .iter()
        .map(|t| t.file_offset + t.n_bytes)
        .max()
        .unwrap();
    for len in 0..bytes.len() {
        let r = parse_header(&bytes[..len]);
        if (len as u64) < data_end {
            let e = r.expect_err(&format!("prefix of {len} bytes parsed"));
            assert!(e.offset <= len as u64, "{e}");
        } else {
            r.unwrap();
        }
    }
    // Through the file API (mmap), including an empty file.
    for len in [0usize, 3, 24, 100, bytes.len() - 1] {
        let p = dir.path().join(format!("t{len}.gguf"));
        std::fs::write(&p, &bytes[..len]).unwrap();
        let e = GgufFile::open(&p).unwrap_err().to_string();
        assert!(e.contains(&format!("t{len}.gguf")), "{e}");
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = small_file(dir.path());
    let header_len = parse_header(&bytes).unwrap().data_offset as usize;
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut errors = 0;
    for _ in 0..5000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % header_len as u64) as usize;
            b[at] ^= 1 << (next() % 8);
        }
        match parse_header(&b) {
            Ok(h) => {
                for t in &h.tensors {
                    assert!(t.file_offset + t.n_bytes <= b.len() as u64);
                }
            }
            Err(_) => errors += 1,
        }
    }
    assert!(
        errors > 1000,
        "only {errors} of 5000 corruptions were detected"
    );
}

fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend_from_slice(&3u32.to_le_bytes());
    v.extend_from_slice(&n_tensors.to_le_bytes());
    v.extend_from_slice(&n_kv.to_le_bytes());
    v
}

fn kv_header(key: &str, ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = header(0, 1);
    v.extend_from_slice(&(key.len() as u64).to_le_bytes());
    v.extend_from_slice(key.as_bytes());
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(payload);
    v.extend_from_slice(&[0u8; 64]);
    v
}

fn tensor_header(dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut v = header(1, 0);
    v.extend_from_slice(&1u64.to_le_bytes());
    v.push(b'x');
    v.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    v.extend_from_slice(&[0u8; 96]);
    v
}

fn err_of(b: &[u8]) -> String {
    parse_header(b).unwrap_err().to_string()
}

#[test]
fn hostile_counts_and_sizes_are_rejected_without_allocating() {
    assert!(err_of(b"GGUX\x03\0\0\0").contains("bad magic"));
    assert!(err_of(&header(0, 0)[..6]).contains("truncated"));
    let mut v2 = header(0, 0);
    v2[4] = 2;
    assert!(err_of(&v2).contains("version 2"));
    assert!(err_of(&header(u64::MAX, 0)).contains("cannot fit"));
    assert!(err_of(&header(0, 1 << 60)).contains("cannot fit"));

    // A string claiming 2^63 bytes.
    let mut p = (1u64 << 63).to_le_bytes().to_vec();
    p.extend_from_slice(b"abc");
    assert!(err_of(&kv_header("k", 8, &p)).contains("string length"));
    // An array claiming u64::MAX u32 elements, and one of 2^40 strings.
    let mut p = 4u32.to_le_bytes().to_vec();
    p.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(err_of(&kv_header("k", 9, &p)).contains("cannot fit"));
    let mut p = 8u32.to_le_bytes().to_vec();
    p.extend_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(err_of(&kv_header("k", 9, &p)).contains("cannot fit"));
    // Arrays nested 100 deep.
    let mut p = Vec::new();
    for _ in 0..100 {
        p.extend_from_slice(&9u32.to_le_bytes());
        p.extend_from_slice(&1u64.to_le_bytes());
    }
    assert!(err_of(&kv_header("k", 9, &p)).contains("nested"));
    // Unknown value type, bad bool, bad alignment.
    assert!(err_of(&kv_header("k", 77, &[])).contains("unknown metadata value type 77"));
    assert!(err_of(&kv_header("k", 7, &[2])).contains("bool"));
    assert!(
        err_of(&kv_header("general.alignment", 4, &48u32.to_le_bytes())).contains("power-of-two")
    );
    assert!(
        err_of(&kv_header("general.alignment", 4, &0u32.to_le_bytes())).contains("power-of-two")
    );

    // Tensors: too many dims, overflowing size, unknown type, partial block, offsets past the end.
    assert!(err_of(&tensor_header(&[1, 1, 1, 1, 1], 0, 0)).contains("dimensions"));
    assert!(err_of(&tensor_header(&[1 << 40, 1 << 40], 0, 0)).contains("overflows"));
    assert!(err_of(&tensor_header(&[u64::MAX], 0, 0)).contains("out of range"));
    assert!(err_of(&tensor_header(&[4], 99, 0)).contains("unknown ggml type 99"));
    assert!(err_of(&tensor_header(&[33], 8, 0)).contains("whole number of blocks"));
    assert!(err_of(&tensor_header(&[4], 0, 1 << 50)).contains("past the end"));
    assert!(err_of(&tensor_header(&[4], 0, u64::MAX - 31)).contains("past the end"));
    assert!(err_of(&tensor_header(&[4], 0, 3)).contains("alignment"));
    assert!(err_of(&tensor_header(&[1 << 20], 0, 0)).contains("past the end"));
    // The same tiny tensor fits.
    parse_header(&tensor_header(&[4], 0, 0)).unwrap();
}

#[test]
fn a_lone_shard_without_the_split_naming_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let specs = vec![TensorSpec::new("a", GgmlType::F32, &[8])];
    let md = vec![
        (
            "general.architecture".into(),
            MetaValue::String("test".into()),
        ),
        ("split.no".into(), MetaValue::U16(0)),
        ("split.count".into(), MetaValue::U16(2)),
    ];
    let p = dir.path().join("odd.gguf");
    write_gguf(&p, &md, &specs, 32, 1, &mut Pattern).unwrap();
    let e = GgufModel::open(&p).unwrap_err().to_string();
    assert!(e.contains("odd.gguf") && e.contains("of-00002"), "{e}");
}
