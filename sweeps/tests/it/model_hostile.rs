//! Hostile GGUF files against the real programs: cases generated at test time from the tiny
//! synthetic model (seeded byte flips in the header, metadata and tensor-info regions; targeted
//! edits of the hyperparameters llama.cpp asserts on; shape, offset and split-set lies), each run
//! through `bmoe-bench model inspect` and the real `bmoe-cli` (plain, `--moe-stream`, and
//! `--session` for some). Every case must end in a successful run or a clear error naming the
//! file with a `hint:` line — never an abort (llama.cpp's `GGML_ASSERT` is exit 134) — and
//! `inspect` must refuse whatever the engine refuses before loading.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bmoe_gguf::edit::write_edited;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_gguf::{GgufModel, MetaArray, MetaValue, TensorSpec, ValueType, parse_header};

use crate::sweep_common::bmoe_cli;

/// Address-space cap for every child: a hostile count that makes a program allocate per layer
/// or per expert fails here (an abort the test counts) instead of exhausting a shared machine.
const VMEM_KIB: u64 = 3 << 20;
const TIMEOUT: Duration = Duration::from_secs(60);

/// One generated file (or the first shard of a generated split set).
struct Case {
    name: String,
    path: PathBuf,
    session: bool,
}

struct Gen {
    dir: PathBuf,
    base: PathBuf,
    bytes: Vec<u8>,
    cases: Vec<Case>,
}

impl Gen {
    fn next_path(&self, name: &str) -> (String, PathBuf) {
        let name = format!("c{:03}-{name}", self.cases.len());
        let p = self.dir.join(format!("{name}.gguf"));
        (name, p)
    }

    fn push(&mut self, name: String, path: PathBuf, session: bool) {
        self.cases.push(Case {
            name,
            path,
            session,
        });
    }

    /// A copy of the base model with its metadata and tensor specs edited, rewritten by the
    /// real writer (so only the edited fact is wrong).
    fn edit(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut Vec<(String, MetaValue)>, &mut Vec<TensorSpec>),
    ) {
        let model = GgufModel::open(&self.base).unwrap();
        let (name, path) = self.next_path(name);
        write_edited(&model, &path, f).unwrap();
        self.push(name, path, true);
    }

    fn set(&mut self, name: &str, key: &str, v: Option<MetaValue>) {
        let key = key.to_string();
        self.edit(name, move |md, _| {
            let at = md.iter().position(|(k, _)| *k == key);
            match (at, v) {
                (Some(i), Some(v)) => md[i].1 = v,
                (None, Some(v)) => md.push((key, v)),
                (Some(i), None) => {
                    md.remove(i);
                }
                (None, None) => {}
            }
        });
    }

    fn raw(&mut self, name: &str, session: bool, bytes: Vec<u8>) {
        let (name, path) = self.next_path(name);
        std::fs::write(&path, bytes).unwrap();
        self.push(name, path, session);
    }

    /// Byte offset of tensor `name`'s info record (just after its name).
    fn tensor_info_at(&self, name: &str) -> usize {
        let mut pat = (name.len() as u64).to_le_bytes().to_vec();
        pat.extend_from_slice(name.as_bytes());
        find(&self.bytes, &pat).unwrap() + pat.len()
    }

    fn patch_dims(&mut self, case: &str, tensor: &str, dims: &[u64]) {
        let at = self.tensor_info_at(tensor);
        let n = u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap()) as usize;
        assert_eq!(n, dims.len(), "{tensor}");
        let mut b = self.bytes.clone();
        for (i, d) in dims.iter().enumerate() {
            b[at + 4 + 8 * i..at + 12 + 8 * i].copy_from_slice(&d.to_le_bytes());
        }
        self.raw(case, true, b);
    }

    fn rel_offset_at(&self, tensor: &str) -> usize {
        let at = self.tensor_info_at(tensor);
        let n = u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap()) as usize;
        at + 4 + 8 * n + 4
    }

    fn patch_offset(&mut self, case: &str, tensor: &str, rel: u64) {
        let at = self.rel_offset_at(tensor);
        let mut b = self.bytes.clone();
        b[at..at + 8].copy_from_slice(&rel.to_le_bytes());
        self.raw(case, true, b);
    }

    fn rel_offset(&self, tensor: &str) -> u64 {
        let at = self.rel_offset_at(tensor);
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().unwrap())
    }
}

fn find(hay: &[u8], pat: &[u8]) -> Option<usize> {
    hay.windows(pat.len()).position(|w| w == pat)
}

fn u32v(x: u32) -> Option<MetaValue> {
    Some(MetaValue::U32(x))
}

fn f32v(x: f32) -> Option<MetaValue> {
    Some(MetaValue::F32(x))
}

/// SplitMix64, seeded: the same cases on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn targeted(g: &mut Gen) {
    let k = |s: &str| format!("qwen3moe.{s}");
    for v in [0, 1, 8, 9, 100, u32::MAX] {
        g.set(&format!("used-{v}"), &k("expert_used_count"), u32v(v));
    }
    g.set(
        "used-i32-neg",
        &k("expert_used_count"),
        Some(MetaValue::I32(-1)),
    );
    g.set(
        "used-array-ok",
        &k("expert_used_count"),
        Some(MetaValue::Array(MetaArray {
            elem_type: ValueType::U32,
            values: vec![MetaValue::U32(2), MetaValue::U32(2)],
        })),
    );
    g.set(
        "used-array-9",
        &k("expert_used_count"),
        Some(MetaValue::Array(MetaArray {
            elem_type: ValueType::U32,
            values: vec![MetaValue::U32(2), MetaValue::U32(9)],
        })),
    );
    g.set("used-missing", &k("expert_used_count"), None);
    for v in [0, 1, 2, 7, 9, 16, 1024, 1025, u32::MAX] {
        g.set(&format!("experts-{v}"), &k("expert_count"), u32v(v));
    }
    g.set("experts-missing", &k("expert_count"), None);
    for v in [0, 1, 3, 512, 513, 1000, 2_000_000, u32::MAX] {
        g.set(&format!("blocks-{v}"), &k("block_count"), u32v(v));
    }
    g.set("blocks-missing", &k("block_count"), None);
    g.set(
        "blocks-string",
        &k("block_count"),
        Some(MetaValue::String("2".into())),
    );
    g.set("blocks-u64", &k("block_count"), Some(MetaValue::U64(2)));
    let eps = k("attention.layer_norm_rms_epsilon");
    for (n, v) in [
        ("nan", f32::NAN),
        ("neg1", -1.0),
        ("zero", 0.0),
        ("inf", f32::INFINITY),
        ("neginf", f32::NEG_INFINITY),
        ("negtiny", -1e-30),
    ] {
        g.set(&format!("rms-eps-{n}"), &eps, f32v(v));
    }
    g.set("rms-eps-missing", &eps, None);
    g.set("rms-eps-u32", &eps, u32v(1));
    for v in [0, 128, 512, u32::MAX] {
        g.set(&format!("embd-{v}"), &k("embedding_length"), u32v(v));
    }
    for v in [0, 128, 512] {
        g.set(
            &format!("expert-ff-{v}"),
            &k("expert_feed_forward_length"),
            u32v(v),
        );
    }
    for v in [0, 2, 3, 8] {
        g.set(&format!("heads-{v}"), &k("attention.head_count"), u32v(v));
    }
    for v in [0, 3, 4, 8] {
        g.set(
            &format!("kv-heads-{v}"),
            &k("attention.head_count_kv"),
            u32v(v),
        );
    }
    for v in [0, 32, 63, 128] {
        g.set(&format!("key-len-{v}"), &k("attention.key_length"), u32v(v));
        g.set(
            &format!("rope-dims-{v}"),
            &k("rope.dimension_count"),
            u32v(v),
        );
    }
    g.set("value-len-32", &k("attention.value_length"), u32v(32));
    for v in [0, 1, u32::MAX] {
        g.set(&format!("ctx-{v}"), &k("context_length"), u32v(v));
    }
    for v in [1, 2, 8, 9] {
        g.set(
            &format!("expert-groups-{v}"),
            &k("expert_group_count"),
            u32v(v),
        );
    }
    g.set("nextn-3", &k("nextn_predict_layers"), u32v(3));
    g.set(
        "rope-scaling-bogus",
        &k("rope.scaling.type"),
        Some(MetaValue::String("bogus".into())),
    );
    g.set("rope-base-nan", &k("rope.freq_base"), f32v(f32::NAN));
    g.set("rope-base-zero", &k("rope.freq_base"), f32v(0.0));
    for (n, v) in [
        ("nul", "qwen3moe\0\0\u{1b}[31m"),
        ("llama", "llama"),
        ("empty", ""),
        ("qwen2moe", "qwen2moe"),
        ("gpt-oss", "gpt-oss"),
    ] {
        g.set(
            &format!("arch-{n}"),
            "general.architecture",
            Some(MetaValue::String(v.into())),
        );
    }
    g.set("arch-missing", "general.architecture", None);
    g.set(
        "name-ctl",
        "general.name",
        Some(MetaValue::String("x\0y\u{7}\u{1b}[2J".into())),
    );
    for (n, v) in [("bos-huge", 1_000_000u32), ("eos-huge", u32::MAX)] {
        let key = if n.starts_with("bos") {
            "tokenizer.ggml.bos_token_id"
        } else {
            "tokenizer.ggml.eos_token_id"
        };
        g.set(n, key, u32v(v));
    }
    g.set(
        "tokenizer-bogus",
        "tokenizer.ggml.model",
        Some(MetaValue::String("bogus".into())),
    );
    // Fewer tokens than token_embd's rows.
    g.edit("vocab-short", |md, _| {
        for (key, v) in md.iter_mut() {
            if key == "tokenizer.ggml.tokens"
                && let MetaValue::Array(a) = v
            {
                a.values.truncate(200);
            }
        }
    });
    // Shape edits through the writer (consistent sizes, wrong facts).
    g.edit("exps-dim-4", |_, specs| {
        for s in specs.iter_mut() {
            if s.name == "blk.0.ffn_up_exps.weight" {
                s.dims = vec![256, 512, 4];
            }
        }
    });
    g.edit("exps-dim-16", |_, specs| {
        for s in specs.iter_mut() {
            if s.name == "blk.1.ffn_down_exps.weight" {
                s.dims = vec![256, 128, 16];
            }
        }
    });
    g.edit("exps-2d", |_, specs| {
        for s in specs.iter_mut() {
            if s.name == "blk.0.ffn_gate_exps.weight" {
                s.dims = vec![256, 2048];
            }
        }
    });
    g.edit("gate-inp-shape", |_, specs| {
        for s in specs.iter_mut() {
            if s.name == "blk.0.ffn_gate_inp.weight" {
                s.dims = vec![512, 4];
            }
        }
    });
    g.edit("embd-transposed", |_, specs| {
        for s in specs.iter_mut() {
            if s.name == "token_embd.weight" {
                let d = s.dims.clone();
                s.dims = vec![d[1], d[0]];
            }
        }
    });
    g.edit("attn-norm-short", |_, specs| {
        for s in specs.iter_mut() {
            if s.name == "blk.1.attn_norm.weight" {
                s.dims = vec![128];
            }
        }
    });
    g.edit("drop-layer-1-up", |_, specs| {
        specs.retain(|s| s.name != "blk.1.ffn_up_exps.weight");
    });
    g.edit("extra-layer-tensor", |_, specs| {
        specs.push(TensorSpec::new(
            "blk.7.attn_norm.weight",
            bmoe_gguf::GgmlType::F32,
            &[256],
        ));
    });
}

fn raw_cases(g: &mut Gen) {
    // Dims patched in place (same bytes or fewer: the data still lies inside the file).
    g.patch_dims(
        "raw-exps-dim-7",
        "blk.0.ffn_gate_exps.weight",
        &[256, 256, 7],
    );
    g.patch_dims("raw-exps-dim-9", "blk.1.ffn_up_exps.weight", &[256, 256, 9]);
    g.patch_dims(
        "raw-exps-swap",
        "blk.0.ffn_down_exps.weight",
        &[256, 512, 4],
    );
    g.patch_dims("raw-gate-inp-7", "blk.1.ffn_gate_inp.weight", &[256, 7]);
    // Overlapping tensor data.
    let gate = g.rel_offset("blk.0.ffn_gate_exps.weight");
    g.patch_offset("overlap-same", "blk.0.ffn_up_exps.weight", gate);
    g.patch_offset("overlap-partial", "blk.0.ffn_up_exps.weight", gate + 4096);
    let embd = g.rel_offset("token_embd.weight");
    g.patch_offset("overlap-embd", "blk.1.attn_q.weight", embd);
    // Data beyond the file.
    g.patch_offset("offset-huge", "blk.1.ffn_down_exps.weight", 1 << 40);
    let len = g.bytes.len();
    let data_offset = parse_header(&g.bytes).unwrap().data_offset as usize;
    for (n, cut) in [
        ("cut-header", data_offset - 4096),
        ("cut-data", data_offset + 4096),
        ("cut-last", len - 1),
    ] {
        let b = g.bytes[..cut].to_vec();
        g.raw(n, true, b);
    }
}

fn split_cases(g: &mut Gen) {
    let mut opts = SynthOptions::preset(Preset::Tiny);
    opts.n_split = 3;
    // One split set per lie; each lie patched in one shard.
    let lies: [(&str, usize, &str, Vec<u8>); 5] = [
        (
            "split-count-5-in-2",
            1,
            "split.count",
            5u16.to_le_bytes().to_vec(),
        ),
        (
            "split-count-5-in-1",
            0,
            "split.count",
            5u16.to_le_bytes().to_vec(),
        ),
        (
            "split-count-2-in-3",
            2,
            "split.count",
            2u16.to_le_bytes().to_vec(),
        ),
        (
            "split-no-1-in-3",
            2,
            "split.no",
            1u16.to_le_bytes().to_vec(),
        ),
        (
            "split-tensors-lie",
            0,
            "split.tensors.count",
            7i32.to_le_bytes().to_vec(),
        ),
    ];
    for (name, shard, key, value) in lies {
        let (name, _) = g.next_path(name);
        let summary = write_model(&opts, &g.dir.join(format!("{name}.gguf"))).unwrap();
        let p = &summary.paths[shard];
        let mut b = std::fs::read(p).unwrap();
        let mut pat = (key.len() as u64).to_le_bytes().to_vec();
        pat.extend_from_slice(key.as_bytes());
        let at = find(&b, &pat).unwrap() + pat.len() + 4;
        b[at..at + value.len()].copy_from_slice(&value);
        std::fs::write(p, b).unwrap();
        g.push(name, summary.paths[0].clone(), true);
    }
    let (name, _) = g.next_path("split-missing-2");
    let summary = write_model(&opts, &g.dir.join(format!("{name}.gguf"))).unwrap();
    std::fs::remove_file(&summary.paths[1]).unwrap();
    g.push(name, summary.paths[0].clone(), true);
}

fn flips(g: &mut Gen, n: usize) {
    let h = parse_header(&g.bytes).unwrap();
    let tokens = find(&g.bytes, b"tokenizer.ggml.tokens").unwrap();
    let first = &h.tensors[0].name;
    let tensors = g.tensor_info_at(first) - first.len() - 8;
    let end = g.bytes[..h.data_offset as usize]
        .iter()
        .rposition(|&b| b != 0)
        .unwrap()
        + 1;
    // Where the numbers live (the KVs before the vocabulary, and the tensor infos) gets most
    // flips; the vocabulary and template strings the rest.
    let regions = [(24, tokens), (tensors, end), (tokens, tensors)];
    let mut rng = Rng(0x6767_7566_2131);
    for i in 0..n {
        let (lo, hi) = regions[[0, 0, 1, 1, 2][i % 5]];
        let mut b = g.bytes.clone();
        let at = lo + rng.below((hi - lo) as u64) as usize;
        let flips = 1 + rng.below(3);
        for j in 0..flips {
            let pos = (at + 8 * j as usize).min(hi - 1);
            b[pos] ^= 1 << rng.below(8);
        }
        g.raw(&format!("flip-{at}"), i % 4 == 0, b);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Ok,
    Failed,
    Abort,
    Hang,
}

struct Run {
    end: End,
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

fn run(dir: &Path, tag: &str, program: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let out = dir.join(format!("{tag}.out"));
    let err = dir.join(format!("{tag}.err"));
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -v {VMEM_KIB}; exec \"$0\" \"$@\""))
        .arg(program)
        .args(args)
        .env("NO_COLOR", "1")
        .env("BMOE_CACHE_DIR", dir.join("cache"))
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    match stdin {
        Some(s) => {
            let p = dir.join(format!("{tag}.in"));
            std::fs::write(&p, s).unwrap();
            c.stdin(std::fs::File::open(p).unwrap());
        }
        None => {
            c.stdin(Stdio::null());
        }
    }
    let mut child = c.spawn().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = std::fs::read(&out).unwrap_or_default();
    let stderr = String::from_utf8_lossy(&std::fs::read(&err).unwrap_or_default()).into_owned();
    use std::os::unix::process::ExitStatusExt;
    let (end, code) = match status {
        None => (End::Hang, None),
        Some(st) if st.signal().is_some() => (End::Abort, None),
        Some(st) => match st.code() {
            Some(0) => (End::Ok, Some(0)),
            Some(c @ (134 | 139)) => (End::Abort, Some(c)),
            c => (End::Failed, c),
        },
    };
    Run {
        end,
        code,
        stdout,
        stderr,
    }
}

/// A message byte that is neither printable nor a newline/tab (raw NULs, escapes, bells).
fn has_raw_control(s: &str) -> bool {
    s.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r')
}

#[derive(Default, Debug)]
struct Tally {
    cases: usize,
    runs: usize,
    aborts: Vec<String>,
    hangs: Vec<String>,
    unclear: Vec<String>,
    raw_control: Vec<String>,
    /// `inspect` said fine but the engine refused the file (plain run failed).
    inspect_ok_engine_refused: Vec<String>,
    engine_ok: usize,
    inspect_ok: usize,
    /// Cases every mode ran to the end.
    ran: Vec<String>,
    inspect_bytes_max_ratio: f64,
}

fn judge(t: &mut Tally, case: &Case, what: &str, r: &Run) {
    t.runs += 1;
    let label = format!("{} [{what}] {:?}", case.name, r.code);
    let tail: String = r
        .stderr
        .lines()
        .rev()
        .take(3)
        .collect::<Vec<_>>()
        .join(" | ");
    match r.end {
        End::Ok => {}
        End::Abort => t.aborts.push(format!("{label}: {tail}")),
        End::Hang => t.hangs.push(label),
        End::Failed => {
            let names_file = r.stderr.contains(&case.name);
            let hint = r.stderr.contains("hint:");
            let session_ok = what != "session"
                || String::from_utf8_lossy(&r.stdout)
                    .lines()
                    .any(|l| l.starts_with("BMOE_ERROR") && l.contains("\"fatal\":true"));
            if !(names_file && hint && session_ok) {
                t.unclear.push(format!("{label}: {tail}"));
            }
            let msg: String = r
                .stderr
                .lines()
                .filter(|l| l.starts_with("error") || l.starts_with("hint"))
                .collect::<Vec<_>>()
                .join("\n");
            if has_raw_control(&msg) {
                t.raw_control.push(format!("{label}: {msg:?}"));
            }
        }
    }
}

#[test]
fn hostile_gguf_files_never_abort_and_fail_clearly() {
    let cli = match bmoe_cli() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIP: {why}");
            return;
        }
    };
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_bmoe-bench"));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    if std::env::var_os("BMOE_HOSTILE_KEEP").is_some() {
        eprintln!("keeping the cases in {}", tmp.keep().display());
    }
    let base = dir.join("base.gguf");
    write_model(&SynthOptions::preset(Preset::Tiny), &base).unwrap();
    let bytes = std::fs::read(&base).unwrap();
    let mut g = Gen {
        dir: dir.clone(),
        base,
        bytes,
        cases: Vec::new(),
    };
    let b = g.bytes.clone();
    g.raw("base", true, b);
    targeted(&mut g);
    raw_cases(&mut g);
    split_cases(&mut g);
    let n_flips: usize = std::env::var("BMOE_HOSTILE_FLIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    flips(&mut g, n_flips);

    let started = Instant::now();
    let cases = std::mem::take(&mut g.cases);
    let tally = std::sync::Mutex::new(Tally::default());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let request = "{\"cmd\":\"generate\",\"id\":1,\"prompt\":\"hi\",\"n_predict\":2}\n";
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(case) = cases.get(i) else { break };
                    let m = case.path.to_str().unwrap();
                    let tag = |w: &str| format!("{}.{w}", case.name);
                    let inspect = run(
                        &dir,
                        &tag("inspect"),
                        &bench,
                        &["model", "inspect", m],
                        None,
                    );
                    let plain = run(
                        &dir,
                        &tag("plain"),
                        &cli,
                        &["-m", m, "-n", "2", "-p", "hi"],
                        None,
                    );
                    let stream = run(
                        &dir,
                        &tag("stream"),
                        &cli,
                        &["-m", m, "-n", "2", "-p", "hi", "--moe-stream"],
                        None,
                    );
                    let session = case.session.then(|| {
                        run(
                            &dir,
                            &tag("session"),
                            &cli,
                            &["-m", m, "--session", "--moe-stream"],
                            Some(request),
                        )
                    });
                    let mut t = tally.lock().unwrap();
                    t.cases += 1;
                    judge(&mut t, case, "inspect", &inspect);
                    judge(&mut t, case, "plain", &plain);
                    judge(&mut t, case, "stream", &stream);
                    if let Some(r) = &session {
                        judge(&mut t, case, "session", r);
                    }
                    let file_len = std::fs::metadata(&case.path).map_or(1, |m| m.len().max(1));
                    let ratio = inspect.stdout.len() as f64 / file_len as f64;
                    t.inspect_bytes_max_ratio = t.inspect_bytes_max_ratio.max(ratio);
                    if has_raw_control(&String::from_utf8_lossy(&inspect.stdout)) {
                        t.raw_control
                            .push(format!("{} [inspect stdout]", case.name));
                    }
                    if inspect.end == End::Ok {
                        t.inspect_ok += 1;
                    }
                    if plain.end == End::Ok {
                        t.engine_ok += 1;
                    }
                    let all_ran = [&inspect, &plain, &stream]
                        .into_iter()
                        .chain(&session)
                        .all(|r| r.end == End::Ok);
                    if all_ran {
                        t.ran.push(case.name.clone());
                    }
                    if inspect.end == End::Ok && plain.end != End::Ok {
                        t.inspect_ok_engine_refused.push(case.name.clone());
                    }
                }
            });
        }
    });
    let t = tally.into_inner().unwrap();
    eprintln!(
        "hostile GGUF: {} cases, {} runs in {:.1} s: {} aborts, {} hangs, {} unclear errors, {} messages with raw control bytes, {} accepted by inspect but refused by the engine; engine ran {} / inspect accepted {}; inspect stdout ≤ {:.3}× the file",
        t.cases,
        t.runs,
        started.elapsed().as_secs_f64(),
        t.aborts.len(),
        t.hangs.len(),
        t.unclear.len(),
        t.raw_control.len(),
        t.inspect_ok_engine_refused.len(),
        t.engine_ok,
        t.inspect_ok,
        t.inspect_bytes_max_ratio,
    );
    for (what, v) in [
        ("abort", &t.aborts),
        ("hang", &t.hangs),
        ("unclear", &t.unclear),
        ("raw control", &t.raw_control),
        ("inspect ok, engine refused", &t.inspect_ok_engine_refused),
    ] {
        for l in v {
            eprintln!("  {what}: {l}");
        }
    }
    assert!(t.aborts.is_empty(), "{} aborts", t.aborts.len());
    assert!(t.hangs.is_empty(), "{} hangs", t.hangs.len());
    assert!(t.unclear.is_empty(), "{} unclear errors", t.unclear.len());
    assert!(
        t.raw_control.is_empty(),
        "{} raw control bytes",
        t.raw_control.len()
    );
    assert!(
        t.inspect_ok_engine_refused.is_empty(),
        "{} files inspect accepted and the engine refused",
        t.inspect_ok_engine_refused.len()
    );
    assert!(
        t.inspect_bytes_max_ratio < 1.0,
        "inspect printed {:.2}× the file",
        t.inspect_bytes_max_ratio
    );
    // The base model and the edits llama.cpp accepts still run in every mode: the checks are
    // not blanket refusals.
    for name in [
        "base",
        "used-1",
        "used-8",
        "used-array-ok",
        "name-ctl",
        "bos-huge",
        "ctx-1",
    ] {
        assert!(
            t.ran
                .iter()
                .any(|r| r.split_once('-').is_some_and(|(_, n)| n == name)),
            "{name} did not run in every mode; ran: {:?}",
            t.ran
        );
    }
}
