//! O_DIRECT read bandwidth at the engine's per-expert read size (a `cargo bench` target, not a
//! test): random aligned reads of one expert slice each, from a model file, on 1..N threads.
//!
//! usage: cargo bench -p bmoe-engine --bench odirect_bw -- FILE [BLOCK_BYTES] [READS] [THREADS,...]
//! Prints one line per thread count: `odirect block=<b> threads=<t> reads=<n> MiB/s=<x> us/read=<y>`.
//! Page cache is bypassed, so no cache drop is needed between runs.

use bmoe_engine::internals::AlignedBuf;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(path) = args.first() else {
        eprintln!(
            "error: no file given\nhint: cargo bench -p bmoe-engine --bench odirect_bw -- MODEL.gguf [BLOCK] [READS] [THREADS,..]"
        );
        std::process::exit(2);
    };
    let block: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(884_736);
    let reads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let threads: Vec<usize> = args
        .get(3)
        .map(|s| s.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8]);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot open {path} with O_DIRECT: {e}");
            std::process::exit(1);
        }
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let window = block.div_ceil(4096) * 4096; // slices of page-aligned layouts read exactly this
    if size < window as u64 * 2 {
        eprintln!("error: {path} is too small for {window}-byte reads");
        std::process::exit(1);
    }
    for &t in &threads {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for lane in 0..t {
                let file = &file;
                s.spawn(move || {
                    let mut buf = AlignedBuf::zeroed(window).expect("aligned buffer");
                    let mut x: u64 = 0x9e37_79b9_7f4a_7c15
                        ^ (lane as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    for _ in (lane..reads).step_by(t) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let off = (x % (size - window as u64)) / 4096 * 4096;
                        let _ = file.read_at(buf.as_mut_slice(), off);
                    }
                });
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        let mib = (reads * window) as f64 / (1024.0 * 1024.0);
        println!(
            "odirect block={block} window={window} threads={t} reads={reads} MiB/s={:.0} us/read={:.1}",
            mib / secs,
            secs * 1e6 / reads as f64 * t as f64
        );
    }
}
