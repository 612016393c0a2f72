//! What page recycling saves (a `cargo bench` target, not a test): one streamed layer's worth of
//! expert slices is evicted and another is read with O_DIRECT, either the old way (evicted pages
//! released with `MADV_DONTNEED`, the read faults fresh zero-filled pages) or the new way
//! (evicted pages moved under the slices about to be read, `mremap`). The two modes alternate
//! in blocks within one run, so they share the machine's state; the ratio is the figure.
//!
//! usage: cargo bench -p bmoe-engine --bench recycle -- FILE [SLICES] [SLICE_BYTES] [CYCLES]
//! Defaults: 24 slices of 884,736 B (top-8 × gate/up/down of the Qwen3-30B-A3B shape: one
//! layer), 192 cycles (4 tokens of 48 layers). FILE must live on a filesystem that takes
//! O_DIRECT (not tmpfs) and be at least 64 slices long.
//! Prints per mode: ms per cycle in the release step and in the read step, and per 48 cycles
//! (one token of that shape), then the recycle/drop ratios.

use bmoe_engine::internals::WeightRef;
use bmoe_engine::internals::{AlignedBuf, Arena, PAGE};
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

const SLOTS: usize = 128;
const BLOCK: usize = 8;

#[derive(Default)]
struct Tally {
    release: Duration,
    read: Duration,
    cycles: u32,
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(path) = args.first() else {
        eprintln!(
            "error: no file given\nhint: cargo bench -p bmoe-engine --bench recycle -- MODEL.gguf [SLICES] [SLICE_BYTES] [CYCLES]"
        );
        std::process::exit(2);
    };
    let slices: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(24);
    let slice: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(884_736);
    let cycles: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(192);
    if !slice.is_multiple_of(PAGE) || slices * 2 > SLOTS {
        eprintln!(
            "error: SLICE_BYTES must be a multiple of {PAGE} and SLICES at most {}\nhint: use the defaults",
            SLOTS / 2
        );
        std::process::exit(2);
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "error: cannot open {path} with O_DIRECT: {e}\nhint: a file on a disk filesystem"
            );
            std::process::exit(1);
        }
    };
    let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let file_slices = (file_len / slice as u64) as usize;
    if file_slices < 64 {
        eprintln!(
            "error: {path} holds {file_slices} slices of {slice} B, need 64\nhint: pass a model file"
        );
        std::process::exit(1);
    }
    let Some(mut backing) = AlignedBuf::zeroed(SLOTS * slice) else {
        eprintln!("error: cannot allocate {} MiB", (SLOTS * slice) >> 20);
        std::process::exit(1);
    };
    let base = backing.as_mut_slice().as_mut_ptr() as usize;
    let region = WeightRef {
        name: "bench".into(),
        addr: base,
        bytes: SLOTS * slice,
        n_expert: SLOTS,
        expert_stride: slice,
    };
    let arena = match Arena::take_over(&[region]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: cannot map the arena: {e}");
            std::process::exit(1);
        }
    };
    let addr = |slot: usize| base + slot * slice;
    // SplitMix64: distinct slots for the next layer, none of the current one's
    let mut seed = 42u64;
    let mut rnd = move || {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut pick = |avoid: &[usize]| -> Vec<usize> {
        let mut out = Vec::with_capacity(slices);
        while out.len() < slices {
            let s = (rnd() % SLOTS as u64) as usize;
            if !avoid.contains(&s) && !out.contains(&s) {
                out.push(s);
            }
        }
        out
    };
    let read_into = |slots: &[usize], n: &mut u64| -> Result<(), String> {
        for &s in slots {
            *n += 1;
            let off = (*n % file_slices as u64) * slice as u64;
            let got = arena
                .read_into(&file, addr(s), slice, off)
                .map_err(|e| format!("read at {off}: {e}"))?;
            if got != slice {
                return Err(format!("short read at {off}: {got} of {slice}"));
            }
        }
        Ok(())
    };
    let mut reads = 0u64;
    let mut current = pick(&[]);
    if let Err(e) = read_into(&current, &mut reads) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    let (mut drop, mut recycle) = (Tally::default(), Tally::default());
    for c in 0..cycles {
        let recycling = (c / BLOCK) % 2 == 1;
        let next = pick(&current);
        let t0 = Instant::now();
        for (&from, &to) in current.iter().zip(&next) {
            let r = if recycling {
                arena.move_pages(addr(from), addr(to), slice)
            } else {
                arena.drop_pages(addr(from), slice)
            };
            if let Err(e) = r {
                eprintln!(
                    "error: {} failed: {e}",
                    if recycling { "mremap" } else { "madvise" }
                );
                std::process::exit(1);
            }
        }
        let t1 = Instant::now();
        if let Err(e) = read_into(&next, &mut reads) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        let t = if recycling { &mut recycle } else { &mut drop };
        t.release += t1 - t0;
        t.read += t1.elapsed();
        t.cycles += 1;
        current = next;
    }
    let ms = |d: Duration, n: u32| d.as_secs_f64() * 1e3 / f64::from(n.max(1));
    for (name, t) in [("drop+fault", &drop), ("recycle", &recycle)] {
        let (rel, rd) = (ms(t.release, t.cycles), ms(t.read, t.cycles));
        println!(
            "recycle-bench mode={name} slices={slices} slice_bytes={slice} cycles={} release_ms/cycle={rel:.3} read_ms/cycle={rd:.3} release_s/48cycles={:.4} read_s/48cycles={:.4}",
            t.cycles,
            rel * 48.0 / 1e3,
            rd * 48.0 / 1e3
        );
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-12);
    println!(
        "recycle-bench ratio recycle/drop: release {:.3} read {:.3} total {:.3}",
        ratio(recycle.release, drop.release),
        ratio(recycle.read, drop.read),
        ratio(recycle.release + recycle.read, drop.release + drop.read)
    );
}
