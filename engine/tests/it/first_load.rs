//! The streamed first load reads the dense bytes, not the file (issue #18, item 2): measured
//! with the kernel's own `read_bytes` of the bmoe-cli process, on a model dropped from the
//! page cache (that one file only), whose experts are most of its size so a load that reads
//! them cannot pass.

use bmoe_gguf::GgufModel;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tiny preset with `n_expert` wide experts, `top_k` of them routed: experts ≥ 2/3 of the
/// file.
fn expert_heavy_model(dir: &Path, n_expert: u32, top_k: u32) -> PathBuf {
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.n_expert = n_expert;
    o.n_expert_used = top_k;
    o.n_ff_exp = 512 * 128 / u64::from(n_expert);
    // a real-sized dense part (embedding + output), so the fixed reads of any load (header,
    // readahead granules) weigh as they do on a real model
    o.vocab_extra = 16000;
    write_model(&o, &dir.join("first-load.gguf"))
        .expect("synthesise model")
        .paths[0]
        .clone()
}

/// (dense bytes, file bytes).
fn sizes(path: &Path) -> (u64, u64) {
    let model = GgufModel::open(path).expect("open model");
    let dense = model
        .tensors()
        .iter()
        .filter(|t| !t.info.name.contains("_exps."))
        .map(|t| t.info.n_bytes)
        .sum();
    let file = std::fs::metadata(path).expect("stat model").len();
    (dense, file)
}

/// Drops this one file from the page cache (never the whole system): GNU dd's `nocache`
/// flushes it (`fdatasync`; dirty pages would stay) and advises `POSIX_FADV_DONTNEED` over it.
fn drop_cached(path: &Path) {
    let of = format!("of={}", path.display());
    let ifl = format!("if={}", path.display());
    for args in [
        vec![
            of.as_str(),
            "oflag=nocache",
            "conv=notrunc,fdatasync",
            "count=0",
        ],
        vec![ifl.as_str(), "iflag=nocache", "count=0"],
    ] {
        let st = Command::new("dd")
            .args(&args)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run dd");
        assert!(st.success(), "dd {args:?}");
    }
}

/// The streamer's own reads (prefill + decode, O_DIRECT) from the CSV trailer, in bytes, and
/// `--row-stream`'s row reads.
fn streamer_bytes(csv: &Path) -> u64 {
    let text = std::fs::read_to_string(csv).expect("read CSV");
    let summary = text
        .lines()
        .rev()
        .find(|l| l.starts_with("# summary"))
        .expect("CSV summary line");
    let val = |key: &str| -> f64 {
        summary
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {summary}"))
    };
    ((val("read_MiB=") + val("prefill_read_mib=") + val("row_read_MiB=")) * 1024.0 * 1024.0) as u64
}

/// Runs bmoe-cli under a shell that prints its own `/proc/<pid>/io` after reaping it: a reaped
/// child's I/O counts are added to its parent's, so `read_bytes` there is bmoe-cli's (the
/// shell itself reads nothing from the disk). Returns (read_bytes, stderr).
fn load_read_bytes(model: &Path, extra: &[&str]) -> (u64, String) {
    let dir = model.parent().expect("model dir");
    let err = dir.join("stderr.txt");
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" "$@" >/dev/null 2>"$ERR" || exit 9; cat /proc/$$/io"#)
        .arg(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(model)
        .args([
            "-p",
            "first load",
            "-n",
            "1",
            "-t",
            "1",
            "-c",
            "64",
            "--csv",
        ])
        .arg(dir.join("run.csv"))
        .args(extra)
        .env("ERR", &err)
        .output()
        .expect("run sh");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(out.status.success(), "{extra:?} failed:\n{stderr}");
    let io = String::from_utf8_lossy(&out.stdout);
    let read = io
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no read_bytes in:\n{io}"));
    (read, stderr)
}

/// A `--moe-stream` run (plus `extra`) on the model just dropped from the page cache: (the
/// process's read_bytes, the streamer's and row streamer's own reads, stderr). The token's
/// routed experts are the streamer's (O_DIRECT, counted in read_bytes too): what is left of
/// read_bytes is the load's.
fn cold_streamed(model: &Path, extra: &[&str]) -> (u64, u64, String) {
    drop_cached(model);
    let mut flags = vec!["--moe-stream"];
    flags.extend_from_slice(extra);
    let (read, stderr) = load_read_bytes(model, &flags);
    (
        read,
        streamer_bytes(&model.with_file_name("run.csv")),
        stderr,
    )
}

#[test]
fn streamed_cold_load_reads_only_the_dense_bytes() {
    cold_load_reads_only_the_dense_bytes(128, 2);
}

/// Half the experts routed per token: the capture decode that finds the expert tensors would
/// read a whole token cycle (here ≈ the dense bytes again) if it computed on the mapped
/// experts — the gap once measured on a mid-size model (≈ 85 MiB read for 44.5 MiB dense).
#[test]
fn streamed_cold_load_does_not_read_the_capture_decodes_experts() {
    cold_load_reads_only_the_dense_bytes(16, 8);
}

fn cold_load_reads_only_the_dense_bytes(n_expert: u32, top_k: u32) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk");
    let model = expert_heavy_model(dir.path(), n_expert, top_k);
    let (dense, file) = sizes(&model);
    assert!(
        dense * 3 < file,
        "experts must dominate: {dense} dense of {file}"
    );

    drop_cached(&model);
    let (plain, _) = load_read_bytes(&model, &[]);
    let (streamed, experts, stderr) = cold_streamed(&model, &["--cache-mb", "0"]);
    let load = streamed.saturating_sub(experts);
    eprintln!(
        "file {file} dense {dense} plain read {plain} streamed read {streamed} (experts {experts}, load {load})"
    );

    assert!(
        stderr.contains("bmoe: first load — experts left on flash"),
        "the wrap engaged:\n{stderr}"
    );
    assert!(
        plain >= file * 9 / 10,
        "plain mode keeps llama.cpp's populate: read {plain} of {file}"
    );
    assert!(
        load <= dense + dense / 10,
        "streamed load read {load} (of {streamed}; {experts} by the streamer), dense {dense} + 10 %"
    );
}

/// `--row-stream` takes the token embedding over after the capture decode, so the load must not
/// read the table whole first (on the 17 GB preset with a 151936-row vocabulary it did: a
/// 2377 MiB dense read for a 1187 MiB table). The table here is most of the dense bytes, so a
/// load that reads it cannot pass.
#[test]
fn a_row_streamed_cold_load_does_not_read_the_table() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk");
    let mut o = SynthOptions::preset(Preset::Tiny);
    o.n_expert = 128;
    o.n_expert_used = 2;
    o.n_ff_exp = 512;
    o.set_vocab(16384).expect("vocab size");
    o.tied_output = false;
    let model = write_model(&o, &dir.path().join("rows.gguf"))
        .expect("synthesise model")
        .paths[0]
        .clone();
    let (dense, file) = sizes(&model);
    let table = GgufModel::open(&model)
        .expect("open model")
        .tensors()
        .iter()
        .find(|t| t.info.name == "token_embd.weight")
        .map(|t| t.info.n_bytes)
        .expect("token_embd.weight");
    let rest = dense - table;
    assert!(
        table > rest / 5,
        "the table must weigh: {table} of {dense} dense"
    );

    let (streamed, own, stderr) = cold_streamed(
        &model,
        &["--cache-mb", "0", "--row-stream", "--row-cache-mb", "0"],
    );
    let load = streamed.saturating_sub(own);
    eprintln!(
        "file {file} dense {dense} table {table} streamed read {streamed} (streamer and rows {own}, load {load})"
    );
    assert!(
        stderr.contains("bound to reserved address space"),
        "the table qualified:\n{stderr}"
    );
    assert!(
        load <= rest + table / 10,
        "row-streamed load read {load}: the dense bytes without the table are {rest} (table {table})"
    );
}
