//! What can end a run, what to do about it, and the exit status it becomes.
//!
//! Every subsystem has its own typed error (a flag, the model file, an output file, a read, the
//! chat template, llama.cpp); [`EngineError`] says which step of the run failed and carries that
//! error, so the message names what failed and [`EngineError::hint`] says what to do.

use crate::chat::ChatError;
use crate::cli::ConfigError;
use crate::decide::DecideError;
use crate::ffi::{DecodeError, LlamaError};
use crate::graph::replay::ReplayError;
use crate::memory::dense::DenseError;
use crate::model::default_model::DefaultModelError;
use crate::model::facts::ModelError;
use crate::sinks::SinkError;
use crate::stream::SetupError;
use crate::stream::io::ReadError;
use crate::stream::layout::BindError;
use crate::stream::rows::{RowFetchError, RowSetupError};
use crate::vm::sigbus::TestHookError;
use std::process::ExitCode;

/// Why a run (or a session) ended in failure.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A flag's value is wrong (exit status 2).
    #[error(transparent)]
    Flag(#[from] ConfigError),
    /// No `-m`, and no folder to keep the built-in model in (exit status 2).
    #[error("no model given (-m/--model) and no cache folder for the built-in one")]
    NoModelCache,
    /// The built-in model could not be made.
    #[error(transparent)]
    DefaultModel(#[from] DefaultModelError),
    /// `-m` is not a model file bmoe can read.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// `--moe-stream` on an architecture without a streaming recipe.
    #[error(
        "{}: no MoE recipe for architecture '{}' — --moe-stream cannot find its experts",
        model.display(), bmoe_gguf::escape(arch)
    )]
    NoRecipe {
        /// The model file.
        model: std::path::PathBuf,
        /// `general.architecture` (as read; escaped when shown).
        arch: String,
    },
    /// `--n-expert-used` on a dense model.
    #[error(
        "--n-expert-used was set but the model is not MoE (no {}.expert_count)",
        bmoe_gguf::escape(arch)
    )]
    NotMoe {
        /// `general.architecture`.
        arch: String,
    },
    /// `--mtp` on a model this build cannot draft from with an MTP head.
    #[error(
        "--mtp needs a model with a trained MTP head, but this '{}' model has none ({}.nextn_predict_layers is absent or 0)",
        bmoe_gguf::escape(arch),
        bmoe_gguf::escape(arch)
    )]
    NoMtpHead {
        /// `general.architecture`.
        arch: String,
    },
    /// `--mtp` on a model whose head llama.cpp will not run as an MTP draft context.
    #[error(
        "--mtp: this '{}' model declares an MTP head ({layers} nextn layer(s)), but llama.cpp refused to build an MTP draft context over it (this build has no MTP graph for the architecture, or the head is incomplete)",
        bmoe_gguf::escape(arch)
    )]
    MtpDraftingUnavailable {
        /// `general.architecture`.
        arch: String,
        /// `<arch>.nextn_predict_layers`.
        layers: i64,
    },
    /// `--n-expert-used` above the model's expert count.
    #[error("--n-expert-used={k} exceeds the model's expert count ({n})")]
    TooManyExpertsUsed {
        /// The flag's value.
        k: u32,
        /// The model's expert count.
        n: i64,
    },
    /// An output file could not be created or written.
    #[error(transparent)]
    Output(#[from] SinkError),
    /// llama.cpp refused to load the model.
    #[error(transparent)]
    Load(LlamaError),
    /// llama.cpp could not make the context.
    #[error(transparent)]
    Context(LlamaError),
    /// The capture decode (which finds the expert tensors) failed.
    #[error("capture warm-up decode failed ({0:?})")]
    Capture(DecodeError),
    /// The captured expert tensors do not fit the architecture's recipe.
    #[error(transparent)]
    Recipe(#[from] BindError),
    /// Streaming could not start (files, remap, refill).
    #[error(transparent)]
    StreamSetup(#[from] SetupError),
    /// `--dense-weights anon` could not copy the dense weights.
    #[error(transparent)]
    DenseAnon(#[from] DenseError),
    /// The model file could not be read for the route trace's preamble.
    #[error(transparent)]
    RouteTraceModel(bmoe_gguf::GgufError),
    /// `--route-replay`'s trace cannot be replayed on this model.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The chat template is missing or failed.
    #[error(transparent)]
    Template(#[from] ChatError),
    /// The prompt could not be tokenized.
    #[error(transparent)]
    Tokenize(LlamaError),
    /// `--test-force-text` could not be tokenized.
    #[error("--test-force-text: {0}")]
    ForceText(LlamaError),
    /// The prompt has no tokens.
    #[error("empty prompt after tokenization")]
    EmptyPrompt,
    /// The prompt and the tokens to generate do not fit the context.
    #[error("prompt ({n_prompt} tokens) + -n {n_predict} exceeds -c/--ctx-size {n_ctx}")]
    PromptTooLong {
        /// Prompt tokens.
        n_prompt: usize,
        /// `-n`.
        n_predict: usize,
        /// `-c`.
        n_ctx: u32,
    },
    /// An expert read failed and aborted a decode.
    #[error("{source}; the {what} was aborted")]
    ReadFailed {
        /// Which decode (`prefill decode`, `generation decode`).
        what: &'static str,
        /// The read.
        source: ReadError,
    },
    /// `--row-stream` could not take its table over.
    #[error(transparent)]
    RowSetup(#[from] RowSetupError),
    /// `--row-stream` failed to fetch rows a batch gathers: the table holds unwritten rows.
    #[error(transparent)]
    RowFetch(#[from] RowFetchError),
    /// A decode was aborted with no read error (a cancel outside a session turn).
    #[error("{what} aborted")]
    Aborted {
        /// Which decode.
        what: &'static str,
    },
    /// `llama_decode` failed.
    #[error("{what} failed (llama_decode returned {rc})")]
    DecodeFailed {
        /// Which decode.
        what: &'static str,
        /// Its return code.
        rc: i32,
    },
    /// A session's `decide` left the session in an unknown state.
    #[error(transparent)]
    Decide(DecideError),
    /// The SIGINT handler could not be installed.
    #[error("cannot install the SIGINT (Ctrl-C) handler: {0}")]
    Signal(#[source] std::io::Error),
    /// The session's stdin reader could not start.
    #[error("cannot start the stdin reader thread: {0}")]
    StdinThread(#[source] std::io::Error),
    /// A test hook failed.
    #[error(transparent)]
    TestHook(#[from] TestHookError),
    /// A broken invariant of the engine itself.
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl EngineError {
    /// The error of a failed decode: the streamer's read error when that is what stopped it.
    pub fn decode(what: &'static str, e: DecodeError, read_error: Option<ReadError>) -> Self {
        match (read_error, e) {
            (Some(source), _) => EngineError::ReadFailed { what, source },
            (None, DecodeError::Aborted) => EngineError::Aborted { what },
            (None, DecodeError::Failed(rc)) => EngineError::DecodeFailed { what, rc },
        }
    }

    /// What to do about it (printed after `hint:`).
    pub fn hint(&self) -> String {
        use EngineError as E;
        match self {
            E::Flag(e) => e.hint.clone(),
            E::NoModelCache => "pass -m model.gguf, or set BMOE_CACHE_DIR".into(),
            E::DefaultModel(_) => {
                "pass -m model.gguf, or point BMOE_CACHE_DIR at a writable folder".into()
            }
            E::Model(e) => e.hint().into(),
            E::NoRecipe { .. } => "run without --moe-stream (plain llama.cpp), or see --list-archs for the architectures this build streams".into(),
            E::NotMoe { .. } => "drop --n-expert-used for dense models".into(),
            E::NoMtpHead { .. } => "use --ngram (prompt-lookup drafts need no head), or run without --mtp".into(),
            E::MtpDraftingUnavailable { .. } => "use --ngram (same verify loop, drafts by prompt lookup), or run without --mtp (BMOE_LLAMA_LOG=1 shows llama.cpp's reason)".into(),
            E::TooManyExpertsUsed { n, .. } => format!("use a value in 1..={n}"),
            E::Output(e) => e.hint(),
            E::Load(_) | E::Capture(_) => llama_reason_hint().into(),
            E::Context(_) => "try a smaller -c/--ctx-size".into(),
            E::Recipe(_) => "this GGUF does not match the architecture's recipe; run without --moe-stream".into(),
            E::StreamSetup(_) => "check the model file and its permissions".into(),
            E::DenseAnon(_) => "check the model file, or keep the dense weights mapped with --dense-weights mmap".into(),
            E::RouteTraceModel(_) => "run without --route-trace, or check the model file".into(),
            E::Replay(e) => e.hint(),
            E::Template(_) => "run without --chatml to pass the prompt as raw text".into(),
            E::Tokenize(_) => "check the prompt text".into(),
            E::ForceText(_) => "a test-only flag".into(),
            E::EmptyPrompt => "pass a non-empty -p/--prompt".into(),
            E::PromptTooLong { .. } => "raise -c/--ctx-size or lower -n/--n-predict".into(),
            E::ReadFailed { .. } => "the model file changed or the storage failed while streaming: no further output was produced; check the file and the disk (dmesg)".into(),
            E::RowSetup(_) => "check the model file, or run without --row-stream".into(),
            E::RowFetch(_) => "the model file changed or the storage failed: the generated text is not trustworthy; check the file and the disk (dmesg)".into(),
            E::Aborted { .. } => "the decode was cancelled".into(),
            E::DecodeFailed { .. } => "try a smaller -c/--ctx-size or --ubatch; set BMOE_LLAMA_LOG=1 for llama.cpp's own log".into(),
            E::Decide(e) => e.hint(),
            E::Signal(_) => "report a bug: signal handlers are installed on every Linux".into(),
            E::StdinThread(_) => "the system is out of threads or memory".into(),
            E::TestHook(_) => "test hook".into(),
            E::Internal(_) => "report a bug".into(),
        }
    }

    /// The exit status this error ends the process with.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            EngineError::Flag(_) | EngineError::NoModelCache => ExitStatus::Usage,
            _ => ExitStatus::Failure,
        }
    }
}

/// The hint after llama.cpp refused something: its warnings and errors always reach stderr (as
/// `llama.cpp: …` lines; `BMOE_LLAMA_LOG=1` adds the info lines), so its reason is already shown.
fn llama_reason_hint() -> &'static str {
    if std::env::var("BMOE_LLAMA_LOG").is_ok_and(|v| v == "1") {
        "llama.cpp's reason is in its log above"
    } else {
        "llama.cpp's reason is on the 'llama.cpp:' lines above; BMOE_LLAMA_LOG=1 shows its whole log"
    }
}

/// How `bmoe-cli` exits (uv's pattern: one place maps outcomes to codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// The run (or session) completed.
    Success,
    /// The run failed after its flags were accepted (model, files, reads, llama.cpp).
    Failure,
    /// The command line was wrong: nothing was run.
    Usage,
    /// A SIGINT (Ctrl-C) stopped the run early; what ran was reported.
    Interrupted,
}

impl ExitStatus {
    /// The process exit code.
    pub const fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            // 128 + SIGINT: what a shell reports for a process the signal killed
            ExitStatus::Interrupted => 130,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> Self {
        ExitCode::from(s.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_errors_are_usage_the_rest_failures() {
        let flag = EngineError::Flag(ConfigError::new("-n", "-n/--n-predict must be > 0", "x"));
        assert_eq!(flag.exit_status(), ExitStatus::Usage);
        assert_eq!(flag.hint(), "x");
        assert_eq!(EngineError::NoModelCache.exit_status(), ExitStatus::Usage);
        let e = EngineError::decode("prefill decode", DecodeError::Failed(3), None);
        assert_eq!(e.exit_status(), ExitStatus::Failure);
        assert_eq!(
            e.to_string(),
            "prefill decode failed (llama_decode returned 3)"
        );
        assert!(!EngineError::Internal("x").hint().is_empty());
    }

    #[test]
    fn a_read_error_wins_over_the_abort_it_caused() {
        let read = ReadError {
            path: "m.gguf".into(),
            offset: 4096,
            len: 10,
            got: 0,
            errno: Some(5),
        };
        let e = EngineError::decode("generation decode", DecodeError::Aborted, Some(read));
        assert!(e.to_string().contains("m.gguf at offset 4096"), "{e}");
        assert!(e.to_string().ends_with("the generation decode was aborted"));
    }
}
