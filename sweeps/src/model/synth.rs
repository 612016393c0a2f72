//! `bmoe-bench model synth`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, bail};
use bmoe_gguf::synth::{Arch, Preset, SynthOptions, plan_model, write_plan_cancellable};
use bmoe_gguf::writer::{DirectIo, partials_in};
use bmoe_gguf::{GgmlType, GgufError};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::human_bytes;

/// Options of `model synth`. Every dimension defaults to the preset's value.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Starting point: tiny, qwen3-30b-a3b, qwen2moe-tiny, gpt-oss-tiny, gemma4-tiny,
    /// lfm2moe-tiny, lfm2-8b-a1b, qwen35moe-tiny, qwen3.6-35b-a3b, deepseek4-tiny,
    /// deepseek-v4-flash, bailingmoe3-tiny, ling-mini-3.0.
    #[arg(long, default_value = "tiny", value_parser = parse_preset)]
    pub preset: Preset,
    /// Output file (the first shard's name is derived from it with --split).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Architecture: qwen3moe, qwen2moe, gpt-oss, gemma4, lfm2moe, qwen35moe, deepseek4,
    /// bailingmoe3.
    #[arg(long, value_parser = parse_arch)]
    pub arch: Option<Arch>,
    /// Transformer layers.
    #[arg(long)]
    pub layers: Option<u32>,
    /// Routed experts per layer.
    #[arg(long)]
    pub experts: Option<u32>,
    /// Experts used per token.
    #[arg(long)]
    pub top_k: Option<u32>,
    /// Hidden size (n_embd).
    #[arg(long)]
    pub embd: Option<u64>,
    /// Routed expert FFN width.
    #[arg(long)]
    pub ff: Option<u64>,
    /// Shared expert FFN width (qwen2moe, qwen35moe, deepseek4, bailingmoe3) / dense MLP
    /// width (gemma4, lfm2moe).
    #[arg(long)]
    pub ff_shared: Option<u64>,
    /// Query heads.
    #[arg(long)]
    pub heads: Option<u64>,
    /// Key/value heads.
    #[arg(long)]
    pub kv_heads: Option<u64>,
    /// Head dimension.
    #[arg(long)]
    pub head_dim: Option<u64>,
    /// Training context length (metadata).
    #[arg(long)]
    pub ctx: Option<u32>,
    /// Extra filler tokens appended to the byte-level vocabulary.
    #[arg(long, conflicts_with = "vocab")]
    pub vocab_extra: Option<u32>,
    /// Total vocabulary size (e.g. 151936 for Qwen3): filler tokens pad the byte-level one, so
    /// the embedding and output tables have their real size
    #[arg(long, value_name = "N")]
    pub vocab: Option<u64>,
    /// Leave out output.weight: llama.cpp then reuses token_embd.weight as the output head
    #[arg(long)]
    pub tied_output: bool,
    /// Expert weight type: F32, F16, Q8_0, Q4_K, MXFP4.
    #[arg(long, value_parser = parse_type)]
    pub expert_quant: Option<GgmlType>,
    /// Attention / shared-expert weight type: F32, F16, Q8_0, Q4_K.
    #[arg(long, value_parser = parse_type)]
    pub dense_quant: Option<GgmlType>,
    /// PRNG seed (same seed + options = identical bytes).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Router skew s ≥ 0: per-expert router gain ∝ (rank+1)^-s, Zipf-like popularity.
    #[arg(long)]
    pub router_skew: Option<f32>,
    /// MTP (NextN) head blocks after the trunk, for `--mtp` drafting (qwen35moe presets; 0 or 1).
    #[arg(long)]
    pub mtp_layers: Option<u32>,
    /// Split into N shards (<name>-00001-of-0000N.gguf …).
    #[arg(long)]
    pub split: Option<u32>,
    /// Tensor data alignment in bytes (power of two).
    #[arg(long)]
    pub alignment: Option<u64>,
    /// Print the layout and sizes without writing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn parse_preset(s: &str) -> Result<Preset, String> {
    Preset::from_name(s).ok_or_else(|| {
        let names: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
        format!("unknown preset {s:?}; choose one of {}", names.join(", "))
    })
}

fn parse_arch(s: &str) -> Result<Arch, String> {
    Arch::from_name(s)
        .ok_or_else(|| format!(
            "unknown arch {s:?}; choose qwen3moe, qwen2moe, gpt-oss, gemma4, lfm2moe, qwen35moe, deepseek4 or bailingmoe3"
        ))
}

fn parse_type(s: &str) -> Result<GgmlType, String> {
    GgmlType::from_name(s)
        .ok_or_else(|| format!("unknown ggml type {s:?}; e.g. F32, Q8_0, Q4_K, MXFP4"))
}

impl SynthArgs {
    /// The options these arguments select.
    ///
    /// # Errors
    /// `--vocab` below the tokenizer's own size.
    pub fn options(&self) -> anyhow::Result<SynthOptions> {
        let mut o = SynthOptions::preset(self.preset);
        macro_rules! set {
            ($($arg:ident => $field:ident),* $(,)?) => {
                $(if let Some(v) = self.$arg { o.$field = v; })*
            };
        }
        set!(
            arch => arch, layers => n_layer, experts => n_expert, top_k => n_expert_used,
            embd => n_embd, ff => n_ff_exp, ff_shared => n_ff_shexp, heads => n_head,
            kv_heads => n_head_kv, head_dim => head_dim, ctx => n_ctx, vocab_extra => vocab_extra,
            expert_quant => expert_type, dense_quant => dense_type, seed => seed,
            router_skew => router_skew, split => n_split, alignment => alignment,
            mtp_layers => n_mtp_layers,
        );
        if let Some(n) = self.vocab {
            o.set_vocab(n).map_err(|e| {
                anyhow::anyhow!("--vocab {n}: {e}\nhint: use --vocab {} or more", e.base)
            })?;
        }
        o.tied_output |= self.tied_output;
        Ok(o)
    }
}

/// Run `model synth`.
pub fn run(a: &SynthArgs) -> anyhow::Result<()> {
    let opts = a.options()?;
    let plan = plan_model(&opts, &a.output)
        .with_context(|| format!("cannot plan preset {} with these options", a.preset.name()))?;
    let total = plan.total_bytes();
    if a.dry_run {
        if a.json {
            println!("{}", serde_json::to_string_pretty(&plan.info)?);
        } else {
            println!(
                "dry run: would write {} ({total} bytes) in {} file(s), first {}",
                human_bytes(total),
                plan.layouts.len(),
                plan.layouts[0].path.display()
            );
        }
        return Ok(());
    }
    if let Some(dir) = a.output.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        bail!("output directory {} does not exist", dir.display());
    }
    let dir = a
        .output
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    sweep_stale_partials(dir);
    let cancel = cancel_on_signals()?;
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{wide_bar}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(format!("writing {}", a.preset.name()));
    bar.enable_steady_tick(Duration::from_millis(200));
    let written = write_plan_cancellable(
        &plan,
        opts.seed,
        &mut |done, _| bar.set_position(done),
        DirectIo::Auto,
        &cancel,
    );
    bar.finish_and_clear();
    if let Err(GgufError::Interrupted { removed }) = &written {
        for p in removed {
            eprintln!(
                "bmoe-bench: interrupted — removed the partial file {}",
                p.display()
            );
        }
        // the shell's convention for a run ended by a signal (128 + SIGINT)
        std::process::exit(130);
    }
    let summary = written.with_context(|| format!("writing {}", a.output.display()))?;
    let secs = summary.elapsed.as_secs_f64().max(1e-9);
    let mb_s = summary.bytes as f64 / 1e6 / secs;
    eprintln!(
        "wrote {} in {:.1} s ({mb_s:.0} MB/s)",
        human_bytes(summary.bytes),
        secs
    );
    if a.json {
        let v = serde_json::json!({
            "paths": summary.paths,
            "bytes": summary.bytes,
            "elapsed_s": secs,
            "write_mb_per_s": mb_s,
            "info": summary.info,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for p in &summary.paths {
            println!("{}", p.display());
        }
    }
    Ok(())
}

/// SIGINT/SIGTERM set a flag the writer checks every chunk, so it stops and removes its partial
/// files; a second signal ends the process at once (exit 130), as a user pressing Ctrl-C twice
/// expects — the partials it leaves are swept by the next synth into the same folder.
fn cancel_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        // registered first, so the first signal finds the flag still false and only sets it
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag))
            .context("cannot install the signal handler")?;
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .context("cannot install the signal handler")?;
    }
    Ok(flag)
}

/// Removes the `.NAME.partial-PID` files in `dir` whose writer is gone (a synth killed with
/// SIGKILL, or a machine that went down), saying so on stderr; a partial whose process still
/// runs (another synth in progress) is left alone.
fn sweep_stale_partials(dir: &Path) {
    let me = std::process::id();
    for (path, pid) in partials_in(dir) {
        if pid == me || process_alive(pid) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => eprintln!(
                "bmoe-bench: removed the stale partial file {} (its writer, PID {pid}, is gone)",
                path.display()
            ),
            Err(e) => eprintln!(
                "bmoe-bench: warning: cannot remove the stale partial file {}: {e}",
                path.display()
            ),
        }
    }
}

/// Whether process `pid` exists (signal 0: EPERM means it exists under another user).
fn process_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Err(nix::errno::Errno::ESRCH)
    )
}
