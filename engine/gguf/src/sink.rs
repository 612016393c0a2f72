//! Where the writer thread puts bytes: O_DIRECT with an aligned staging buffer for big files
//! (sequential-write speed without filling the page cache), buffered otherwise, and buffered as a
//! fallback wherever the filesystem refuses O_DIRECT.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// O_DIRECT needs buffer addresses, offsets and lengths aligned to the logical block size;
/// 4096 covers every common device.
const DIRECT_ALIGN: usize = 4096;

enum Mode {
    Direct {
        file: File,
        staging: Vec<u8>,
        start: usize,
        fill: usize,
    },
    Buffered(BufWriter<File>),
}

/// A sequential output file.
pub(crate) struct Sink {
    path: PathBuf,
    mode: Mode,
    /// Bytes already on disk (direct mode) — where a fallback resumes.
    written: u64,
}

fn open_buffered(path: &Path, truncate: bool) -> io::Result<BufWriter<File>> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_: &Path) -> io::Result<File> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "O_DIRECT is Linux-only here",
    ))
}

impl Sink {
    /// Create `path` (truncating it). `direct` asks for O_DIRECT; silently buffered when the
    /// filesystem refuses it.
    pub(crate) fn create(path: &Path, direct: bool, chunk: usize) -> io::Result<Self> {
        let mode = match direct.then(|| open_direct(path)) {
            Some(Ok(file)) => {
                let staging = vec![0u8; chunk + DIRECT_ALIGN];
                // Reading an address is safe; the Vec is never grown, so it never moves.
                let start =
                    (DIRECT_ALIGN - staging.as_ptr() as usize % DIRECT_ALIGN) % DIRECT_ALIGN;
                Mode::Direct {
                    file,
                    staging,
                    start,
                    fill: 0,
                }
            }
            _ => Mode::Buffered(open_buffered(path, true)?),
        };
        Ok(Self {
            path: path.to_path_buf(),
            mode,
            written: 0,
        })
    }

    /// Append bytes.
    pub(crate) fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match &mut self.mode {
                Mode::Buffered(w) => return w.write_all(data),
                Mode::Direct {
                    staging,
                    start,
                    fill,
                    ..
                } => {
                    let cap = staging.len() - DIRECT_ALIGN;
                    let n = (cap - *fill).min(data.len());
                    staging[*start + *fill..*start + *fill + n].copy_from_slice(&data[..n]);
                    *fill += n;
                    data = &data[n..];
                    if *fill == cap {
                        self.flush_direct(cap)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Write the first `len` staged bytes (a multiple of DIRECT_ALIGN) with O_DIRECT; on EINVAL
    /// switch to buffered mode and write them there.
    fn flush_direct(&mut self, len: usize) -> io::Result<()> {
        let Mode::Direct {
            file,
            staging,
            start,
            fill,
        } = &mut self.mode
        else {
            return Ok(());
        };
        let mut done = 0usize;
        let mut failure = None;
        while done < len {
            match file.write(&staging[*start + done..*start + len]) {
                Ok(0) => {
                    failure = Some(io::Error::new(io::ErrorKind::WriteZero, "disk full?"));
                    break;
                }
                Ok(n) if n % DIRECT_ALIGN == 0 || done + n == len => done += n,
                Ok(n) => {
                    // A misaligned short write: the rest cannot go through O_DIRECT.
                    done += n;
                    failure = Some(io::Error::from(io::ErrorKind::InvalidInput));
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        self.written += done as u64;
        let rest: Vec<u8> = staging[*start + done..*start + *fill].to_vec();
        *fill = 0;
        match failure {
            None => Ok(()),
            Some(e) if e.kind() == io::ErrorKind::InvalidInput => {
                let mut w = open_buffered(&self.path, false)?;
                w.seek(SeekFrom::Start(self.written))?;
                w.write_all(&rest)?;
                self.mode = Mode::Buffered(w);
                Ok(())
            }
            Some(e) => Err(e),
        }
    }

    /// Flush everything, trim the file to `file_len`, and fsync.
    pub(crate) fn finish(mut self, file_len: u64) -> io::Result<()> {
        if let Mode::Direct {
            staging,
            start,
            fill,
            ..
        } = &mut self.mode
            && *fill > 0
        {
            // Pad the tail to the alignment, write it, then cut the file back.
            let padded = fill.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
            staging[*start + *fill..*start + padded].fill(0);
            *fill = padded;
            self.flush_direct(padded)?;
        }
        let file = match self.mode {
            Mode::Direct { file, .. } => file,
            Mode::Buffered(w) => w.into_inner().map_err(|e| e.into_error())?,
        };
        file.set_len(file_len)?;
        file.sync_all()
    }
}
