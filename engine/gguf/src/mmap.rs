//! The crate's only `unsafe`: mapping a GGUF file read-only.

use std::fs::File;

/// Map `file` read-only.
///
/// The map is only sound while no one truncates or rewrites the file; GGUF models are written once
/// and then only read, which is the contract this crate documents for its readers.
#[allow(unsafe_code)]
pub(crate) fn map_readonly(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the map is read-only and private to this process; memmap2 keeps the file handle
    // alive. Concurrent truncation by another process would raise SIGBUS on access, which the
    // crate documents as unsupported (models are immutable once written).
    unsafe { memmap2::Mmap::map(file) }
}
