//! Streamed GGUF v3 writer, optionally split into shards (llama.cpp `gguf-split` convention).
//!
//! Tensor data is produced chunk by chunk by a [`TensorFill`] on the calling thread and written by
//! a second thread through a `BufWriter`, so memory stays at a few chunk buffers whatever the
//! model size, and generation overlaps disk writes.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use crate::error::{GgufError, Result};
use crate::ggml_type::GgmlType;
use crate::parse::{DEFAULT_ALIGNMENT, MAGIC, VERSION, pad_to};
use crate::reader::{KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, split_path};
use crate::sink::Sink;
use crate::value::MetaValue;

/// Bytes handed from the generator to the writer thread at a time.
const CHUNK: usize = 8 << 20;

/// A tensor to be written: name, type and ggml-order dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Dimensions, ggml order (`dims[0]` contiguous).
    pub dims: Vec<u64>,
}

impl TensorSpec {
    /// A tensor spec.
    pub fn new(name: impl Into<String>, ggml_type: GgmlType, dims: &[u64]) -> Self {
        Self {
            name: name.into(),
            ggml_type,
            dims: dims.to_vec(),
        }
    }

    /// Data bytes, or an error naming the tensor when the shape is impossible.
    pub fn n_bytes(&self) -> Result<u64> {
        self.ggml_type.tensor_bytes(&self.dims).ok_or_else(|| {
            GgufError::Invalid(format!(
                "tensor {}: dims {:?} are not a whole number of {} blocks ({} elements) or overflow",
                self.name,
                self.dims,
                self.ggml_type,
                self.ggml_type.block_size()
            ))
        })
    }
}

/// Produces tensor bytes. Called with increasing `offset` for each tensor, in file order; `out`
/// must be filled completely. The bytes at a given (tensor, offset) must not depend on how the
/// writer chunks the stream (so split and unsplit files hold identical tensors).
pub trait TensorFill {
    /// Fill `out` with bytes `offset..offset + out.len()` of tensor `tensor` (index into the
    /// writer's tensor list).
    fn fill(&mut self, tensor: usize, offset: u64, out: &mut [u8]);
}

/// The layout of one file about to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLayout {
    /// Where the file goes.
    pub path: PathBuf,
    /// Indices (into the full tensor list) of the tensors in this file.
    pub tensors: Range<usize>,
    /// Encoded header including padding up to the data section.
    header: Vec<u8>,
    /// Absolute offset of each tensor's data in this file.
    pub tensor_offsets: Vec<u64>,
    /// Total file length.
    pub file_len: u64,
}

impl FileLayout {
    /// Offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.header.len() as u64
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Array(a) => {
            out.extend_from_slice(&a.elem_type.id().to_le_bytes());
            out.extend_from_slice(&(a.values.len() as u64).to_le_bytes());
            for e in &a.values {
                put_value(out, e);
            }
        }
    }
}

fn check_array(key: &str, v: &MetaValue) -> Result<()> {
    if let MetaValue::Array(a) = v {
        for e in &a.values {
            if e.value_type() != a.elem_type {
                return Err(GgufError::Invalid(format!(
                    "metadata {key}: array of {:?} holds a {:?}",
                    a.elem_type,
                    e.value_type()
                )));
            }
            check_array(key, e)?;
        }
    }
    Ok(())
}

/// Compute the layout of one GGUF file holding `specs[range]` with `metadata`.
pub fn layout_file(
    path: &Path,
    metadata: &[(String, MetaValue)],
    specs: &[TensorSpec],
    range: Range<usize>,
    alignment: u64,
) -> Result<FileLayout> {
    if alignment == 0 || !alignment.is_power_of_two() || alignment > u64::from(u32::MAX) {
        return Err(GgufError::Invalid(format!(
            "alignment {alignment} is not a power of two that fits in u32"
        )));
    }
    let mut md: Vec<(String, MetaValue)> = metadata
        .iter()
        .filter(|(k, _)| k != "general.alignment")
        .cloned()
        .collect();
    if alignment != DEFAULT_ALIGNMENT {
        md.insert(
            md.iter()
                .position(|(k, _)| k == "general.architecture")
                .map_or(0, |p| p + 1),
            ("general.alignment".into(), MetaValue::U32(alignment as u32)),
        );
    }
    let mut h = Vec::new();
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&(range.len() as u64).to_le_bytes());
    h.extend_from_slice(&(md.len() as u64).to_le_bytes());
    for (k, v) in &md {
        check_array(k, v)?;
        put_str(&mut h, k);
        h.extend_from_slice(&v.value_type().id().to_le_bytes());
        put_value(&mut h, v);
    }
    let mut rel = 0u64;
    let mut rels = Vec::with_capacity(range.len());
    for s in &specs[range.clone()] {
        if s.dims.is_empty() || s.dims.len() > crate::parse::MAX_DIMS {
            return Err(GgufError::Invalid(format!(
                "tensor {}: {} dims (1..=4 allowed)",
                s.name,
                s.dims.len()
            )));
        }
        put_str(&mut h, &s.name);
        h.extend_from_slice(&(s.dims.len() as u32).to_le_bytes());
        for d in &s.dims {
            h.extend_from_slice(&d.to_le_bytes());
        }
        h.extend_from_slice(&s.ggml_type.id().to_le_bytes());
        h.extend_from_slice(&rel.to_le_bytes());
        rels.push(rel);
        rel = rel
            .checked_add(s.n_bytes()?)
            .and_then(|end| pad_to(end, alignment))
            .ok_or_else(|| GgufError::Invalid("model size overflows u64".into()))?;
    }
    let data_offset = pad_to(h.len() as u64, alignment).unwrap_or(u64::MAX);
    h.resize(data_offset as usize, 0);
    Ok(FileLayout {
        path: path.to_path_buf(),
        tensors: range,
        header: h,
        tensor_offsets: rels.iter().map(|r| r + data_offset).collect(),
        file_len: data_offset + rel,
    })
}

/// Compute the layouts of the file(s) for `specs`: one file at `path` when `n_split <= 1`, else
/// `n_split` shards named `<path without .gguf>-0000i-of-0000N.gguf`, tensors distributed in
/// order so shards hold about equal bytes. Shard 1 carries all metadata; every shard carries
/// `split.no` (u16), `split.count` (u16) and `split.tensors.count` (i32) as llama.cpp requires.
pub fn layout_model(
    path: &Path,
    metadata: &[(String, MetaValue)],
    specs: &[TensorSpec],
    alignment: u64,
    n_split: u32,
) -> Result<Vec<FileLayout>> {
    if n_split <= 1 {
        return Ok(vec![layout_file(
            path,
            metadata,
            specs,
            0..specs.len(),
            alignment,
        )?]);
    }
    let n = n_split as usize;
    if n > specs.len() || n_split > u32::from(u16::MAX) {
        return Err(GgufError::Invalid(format!(
            "cannot split {} tensors into {n} shards",
            specs.len()
        )));
    }
    let sizes: Vec<u64> = specs
        .iter()
        .map(TensorSpec::n_bytes)
        .collect::<Result<_>>()?;
    let total: u64 = sizes.iter().sum();
    // Cut before the tensor that would push a shard past its equal share, keeping every shard
    // non-empty.
    let mut cuts = vec![0usize];
    let mut acc = 0u64;
    for (i, s) in sizes.iter().enumerate() {
        let shard = cuts.len();
        let remaining_tensors = specs.len() - i;
        let remaining_shards = n - shard + 1;
        if shard < n
            && i > *cuts.last().unwrap_or(&0)
            && (acc as u128 * n as u128 >= total as u128 * shard as u128
                || remaining_tensors < remaining_shards)
        {
            cuts.push(i);
        }
        acc += s;
    }
    while cuts.len() < n {
        // Degenerate sizes (e.g. all zero): fill the tail with one tensor per shard.
        let last = specs.len() - (n - cuts.len());
        cuts.push(last);
    }
    cuts.push(specs.len());
    let path_str = path.to_str().ok_or_else(|| {
        GgufError::Invalid(format!("{}: path is not valid UTF-8", path.display()))
    })?;
    let prefix = path_str.strip_suffix(".gguf").unwrap_or(path_str);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut md: Vec<(String, MetaValue)> = if i == 0 {
            metadata.to_vec()
        } else {
            metadata
                .iter()
                .filter(|(k, _)| k == "general.architecture")
                .cloned()
                .collect()
        };
        md.retain(|(k, _)| !k.starts_with("split."));
        md.push((KEY_SPLIT_NO.into(), MetaValue::U16(i as u16)));
        md.push((KEY_SPLIT_COUNT.into(), MetaValue::U16(n as u16)));
        md.push((
            KEY_SPLIT_TENSORS_COUNT.into(),
            MetaValue::I32(specs.len() as i32),
        ));
        out.push(layout_file(
            &split_path(prefix, i as u64, n as u64),
            &md,
            specs,
            cuts[i]..cuts[i + 1],
            alignment,
        )?);
    }
    Ok(out)
}

/// Write the files described by `layouts` (from [`layout_model`]), pulling tensor bytes from
/// `fill`. `progress` is called with the number of bytes just written. Each file is flushed and
/// synced before the function returns; on error the partial file is removed.
pub fn write_files(
    layouts: &[FileLayout],
    specs: &[TensorSpec],
    fill: &mut dyn TensorFill,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    write_files_with(layouts, specs, fill, progress, DirectIo::Auto)
}

/// Whether the writer bypasses the page cache (O_DIRECT, Linux).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectIo {
    /// O_DIRECT for files of at least 64 MiB, where it reaches the disk's sequential speed and
    /// leaves the page cache cold (as a benchmark wants); buffered for smaller files.
    Auto,
    /// Always try O_DIRECT (falls back to buffered where the filesystem refuses it).
    Always,
    /// Never.
    Never,
}

/// [`write_files`] with an explicit O_DIRECT policy.
pub fn write_files_with(
    layouts: &[FileLayout],
    specs: &[TensorSpec],
    fill: &mut dyn TensorFill,
    progress: &mut dyn FnMut(u64),
    direct: DirectIo,
) -> Result<()> {
    write_files_cancellable(
        layouts,
        specs,
        fill,
        progress,
        direct,
        &AtomicBool::new(false),
    )
}

/// [`write_files_with`] that stops within one chunk once `cancel` is set (e.g. by a SIGINT
/// handler), removes every partial file it wrote and returns [`GgufError::Interrupted`].
pub fn write_files_cancellable(
    layouts: &[FileLayout],
    specs: &[TensorSpec],
    fill: &mut dyn TensorFill,
    progress: &mut dyn FnMut(u64),
    direct: DirectIo,
    cancel: &AtomicBool,
) -> Result<()> {
    let cancelled = || cancel.load(Ordering::SeqCst);
    // Each file is written under a temporary name and renamed once complete and synced (the
    // first shard last), so a killed run never leaves a complete-looking model behind.
    let mut partials: Vec<(PathBuf, &Path)> = Vec::with_capacity(layouts.len());
    let cleanup = |partials: &[(PathBuf, &Path)]| {
        for (tmp, _) in partials {
            let _ = std::fs::remove_file(tmp);
        }
    };
    for layout in layouts {
        let use_direct = match direct {
            DirectIo::Auto => layout.file_len >= 64 << 20,
            DirectIo::Always => true,
            DirectIo::Never => false,
        };
        let tmp = partial_path(&layout.path);
        partials.push((tmp.clone(), &layout.path));
        let written = write_one(layout, &tmp, specs, fill, progress, use_direct, cancel);
        if cancelled() {
            cleanup(&partials);
            return Err(GgufError::Interrupted {
                removed: partials.into_iter().map(|(t, _)| t).collect(),
            });
        }
        if let Err(e) = written {
            cleanup(&partials);
            return Err(e);
        }
    }
    for (i, (tmp, path)) in partials.iter().enumerate().rev() {
        if let Err(e) = std::fs::rename(tmp, path) {
            cleanup(&partials[..=i]);
            return Err(GgufError::io(*path, e));
        }
    }
    Ok(())
}

/// `dir/name.gguf` → `dir/.name.gguf.partial-<pid>`.
pub fn partial_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// The partial files (`.NAME.partial-PID`, as [`partial_path`] names them) in `dir`, with the
/// PID of the process that was writing each.
pub fn partials_in(dir: &Path) -> Vec<(PathBuf, u32)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, u32)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let (stem, pid) = name.rsplit_once(".partial-")?;
            if !stem.starts_with('.') || stem.len() < 2 || !e.file_type().ok()?.is_file() {
                return None;
            }
            let pid: u32 = pid.parse().ok()?;
            Some((e.path(), pid))
        })
        .collect();
    out.sort();
    out
}

fn write_one(
    layout: &FileLayout,
    path: &Path,
    specs: &[TensorSpec],
    fill: &mut dyn TensorFill,
    progress: &mut dyn FnMut(u64),
    direct: bool,
    cancel: &AtomicBool,
) -> Result<()> {
    let mut sink = Sink::create(path, direct, CHUNK).map_err(|e| GgufError::io(&layout.path, e))?;
    let (to_writer, writer_rx) = mpsc::sync_channel::<Vec<u8>>(3);
    let (to_gen, free_rx) = mpsc::channel::<Vec<u8>>();
    for _ in 0..4 {
        let _ = to_gen.send(Vec::with_capacity(CHUNK));
    }
    let file_len = layout.file_len;
    std::thread::scope(|scope| -> Result<()> {
        let writer = scope.spawn(move || -> std::io::Result<()> {
            for buf in writer_rx {
                sink.write_all(&buf)?;
                // The generator may have finished; a closed return channel is fine.
                let _ = to_gen.send(buf);
            }
            sink.finish(file_len)
        });
        let mut produce = || -> std::result::Result<(), ()> {
            let mut buf = free_rx.recv().map_err(|_| ())?;
            buf.clear();
            buf.extend_from_slice(&layout.header);
            let mut pos = layout.data_offset();
            for (k, ti) in layout.tensors.clone().enumerate() {
                let start = layout.tensor_offsets[k];
                // Padding between tensors.
                buf.resize(buf.len() + (start - pos) as usize, 0);
                pos = start;
                let n = specs[ti].n_bytes().map_err(|_| ())?;
                let mut done = 0u64;
                while done < n {
                    if buf.len() >= CHUNK {
                        if cancel.load(Ordering::SeqCst) {
                            return Err(());
                        }
                        let len = buf.len() as u64;
                        to_writer.send(buf).map_err(|_| ())?;
                        progress(len);
                        buf = free_rx.recv().map_err(|_| ())?;
                        buf.clear();
                    }
                    let take = (n - done).min((CHUNK - buf.len()) as u64) as usize;
                    let old = buf.len();
                    buf.resize(old + take, 0);
                    fill.fill(ti, done, &mut buf[old..]);
                    done += take as u64;
                }
                pos += n;
            }
            buf.resize(buf.len() + (layout.file_len - pos) as usize, 0);
            let len = buf.len() as u64;
            to_writer.send(buf).map_err(|_| ())?;
            progress(len);
            Ok(())
        };
        let produced = produce();
        // `produce` owned the only sender clone through the closure; dropping it ends the writer.
        drop(to_writer);
        let written = writer.join().map_err(|_| {
            GgufError::Invalid(format!("{}: writer thread panicked", layout.path.display()))
        })?;
        written.map_err(|e| GgufError::io(&layout.path, e))?;
        if produced.is_err() {
            return Err(GgufError::Invalid(format!(
                "{}: tensor generation stopped early",
                layout.path.display()
            )));
        }
        Ok(())
    })
}

/// Write one complete GGUF file (or `n_split` shards) in one call.
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, MetaValue)],
    specs: &[TensorSpec],
    alignment: u64,
    n_split: u32,
    fill: &mut dyn TensorFill,
) -> Result<Vec<FileLayout>> {
    let layouts = layout_model(path, metadata, specs, alignment, n_split)?;
    write_files(&layouts, specs, fill, &mut |_| {})?;
    Ok(layouts)
}
