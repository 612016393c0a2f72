//! Link-time wrap of llama.cpp's `mmap` / `posix_madvise` in the engine binary only, so a
//! streamed first load can skip reading the experts (see `src/ffi/firstload.rs`). Library and
//! test binaries are linked unwrapped and keep libc's behaviour.

fn main() {
    println!("cargo:rustc-link-arg-bin=bmoe-cli=-Wl,--wrap=mmap");
    println!("cargo:rustc-link-arg-bin=bmoe-cli=-Wl,--wrap=posix_madvise");
    println!("cargo:rerun-if-changed=build.rs");
}
