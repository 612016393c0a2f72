//! The command line: `bmoe-cli`'s flags, grouped by concern, and their validation and
//! resolution into a [`RunConfig`] (engine spec §1.5: the first failure wins, in its order).
//!
//! A new flag goes into the group of its concern (one file each here) and, if the rest of the
//! engine needs its value, into [`RunConfig`].

mod auto;
mod config;
mod device;
mod error;
mod habits;
mod memory;
mod model;
mod outputs;
mod predict;
mod routing;
mod sampling;
mod session;
mod spec;
mod streaming;
mod testing;
#[cfg(test)]
mod tests;

pub use crate::memory::dense::DenseWeights;
pub(crate) use auto::Given;
pub use config::RunConfig;
pub use error::ConfigError;
pub use sampling::Sampling;
pub use spec::{NGRAM_MAX_MATCH, Spec};
pub use streaming::StreamConfig;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;

/// `bmoe-cli` flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bmoe-cli",
    version,
    about = "Run a GGUF model on llama.cpp; with --moe-stream, read only the routed experts from flash",
    allow_negative_numbers = true
)]
pub struct Cli {
    #[command(flatten)]
    pub(crate) model: model::ModelArgs,
    #[command(flatten)]
    sampling: sampling::SamplingArgs,
    #[command(flatten)]
    spec: spec::SpecArgs,
    #[command(flatten, next_help_heading = "Expert streaming")]
    stream: streaming::StreamArgs,
    #[command(flatten, next_help_heading = "Expert streaming")]
    predict: predict::PredictArgs,
    #[command(flatten, next_help_heading = "Routing edits (lossy or replayed)")]
    routing: routing::RoutingArgs,
    #[command(flatten, next_help_heading = "Memory")]
    memory: memory::MemoryArgs,
    #[command(flatten, next_help_heading = "Outputs")]
    outputs: outputs::OutputArgs,
    #[command(flatten, next_help_heading = "Chat and session")]
    session: session::SessionArgs,
    #[command(flatten)]
    testing: testing::TestArgs,
    #[command(flatten)]
    auto: auto::AutoArgs,
    /// List the MoE architectures --moe-stream supports and exit
    #[arg(long = "list-archs")]
    list_archs: bool,
    /// List the ggml backend devices this build and machine offer (name, type, memory,
    /// description) and exit
    #[arg(long = "list-devices")]
    list_devices: bool,
    /// Run the prompt's graph on this ggml backend device (a name from --list-devices; needs
    /// a build with the prefill-device feature)
    #[arg(long = "prefill-device", value_name = "NAME")]
    prefill_device: Option<String>,
    /// With --prefill-device and --moe-stream: read each layer's experts at its routing node
    /// only, instead of filling the arena ahead from a prediction of what the prompt routes
    #[arg(long = "no-prefill-routed")]
    no_prefill_routed: bool,
    /// The ids of the flags the command line gave (not left to their defaults).
    #[arg(skip)]
    given: Vec<String>,
}

impl Cli {
    /// The first flag of llama.cpp's that bmoe-cli does not take (`-ngl`, `-fa`, `-b`, `-cnv`,
    /// `--no-mmap`, …) in `args` (the program name first), with what to do instead. Checked
    /// before [`Cli::parse_args`], which would read `-ngl 0` as `-n gl`.
    pub fn llama_cpp_habit(args: &[OsString]) -> Option<ConfigError> {
        let words: Vec<String> = args
            .iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        habits::llama_cpp_habit(&words)
    }

    /// Parses `args` (the program name first) as clap does, and remembers which flags were
    /// given, for the warnings about flags that have no effect.
    ///
    /// # Errors
    /// clap's: an unknown flag, a malformed value, `--help` and `--version` (which clap prints).
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cmd = Cli::command();
        let m = cmd.clone().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&m).map_err(|e| e.format(&mut Cli::command()))?;
        cli.given = cmd
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| m.value_source(id) == Some(ValueSource::CommandLine))
            .map(str::to_string)
            .collect();
        Ok(cli)
    }

    /// Whether the command line gave the flag whose clap id (its field name) is `id`.
    fn given(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }

    /// `--list-archs`: the architectures `--moe-stream` supports, as printed.
    pub fn archs_listing(&self) -> Option<String> {
        self.list_archs
            .then(crate::model::registry::list_archs_text)
    }

    /// `--list-devices`: the ggml backend devices, as printed.
    pub fn devices_listing(&self) -> Option<String> {
        self.list_devices
            .then(|| crate::ffi::devices_listing(&crate::ffi::backend_devices()))
    }

    /// Validates the flags (first failure wins, in the order of engine spec §1.5) and resolves
    /// them into a [`RunConfig`].
    ///
    /// # Errors
    /// The first flag whose value cannot be used.
    pub fn resolve(&self) -> Result<RunConfig, ConfigError> {
        let shape = self.model.resolve()?;
        let prompt = self.model.prompt()?;
        let sampling = self.sampling.resolve()?;
        let spec = self.spec.resolve(&sampling, self.sampling.feed_random)?;
        // under --auto the streaming settings are resolved as if streaming, and the cache as if
        // `auto` was typed (unless given): whether to stream is decided with the model's facts
        let stream = self
            .stream
            .resolve(self.auto(), self.auto() && !self.given("cache_mb"))?;
        let routing = self.routing.resolve(stream.as_ref())?;
        let predict = self
            .predict
            .resolve(stream.as_ref(), spec.name() != "off")?;
        let poison = self.testing.poison()?;
        let dense_weights = self.memory.resolve()?;
        let row_stream = self.memory.row_stream(stream.is_some())?;
        if row_stream.is_some() && self.session.decide {
            // a decide request runs its own decodes, which do not fetch the rows yet
            return Err(ConfigError::new(
                "--row-stream",
                "--row-stream cannot be combined with --decide yet",
                "drop --row-stream for a session that answers decide requests",
            ));
        }
        self.check_prerequisites(stream.is_some(), poison.is_some())?;
        if let Some(name) = &self.prefill_device {
            // before the device list starts ggml's backends, which read the threshold then
            crate::ffi::keep_decodes_on_host(device::per_token_rows(&shape.model));
            device::check(name)?;
            if self.auto() {
                // --auto arms --overlap, which the device split does not support yet
                return Err(ConfigError::new(
                    "--prefill-device",
                    "--prefill-device cannot be combined with --auto yet",
                    "give the streaming flags by hand (--moe-stream --cache-mb auto) with \
                     --prefill-device",
                ));
            }
        }
        let s = &self.session;
        let cfg = RunConfig {
            model: shape.model,
            prompt,
            n_predict: shape.n_predict,
            threads: shape.threads,
            adaptive_threads: self.model.adaptive_threads,
            n_ctx: shape.n_ctx,
            n_batch: shape.n_ctx,
            n_ubatch: shape.n_ubatch,
            n_expert_used: shape.n_expert_used,
            sampling,
            spec,
            progress: self.outputs.progress,
            stream,
            routing,
            predict,
            feed_random: self.sampling.feed_random,
            ignore_eos: self.sampling.ignore_eos,
            dump_logits_hash: self.outputs.dump_logits_hash,
            poison,
            csv: self.outputs.csv.clone(),
            route_trace: self.outputs.route_trace.clone(),
            io_trace: self.outputs.io_trace.clone(),
            compute_trace: self.outputs.compute_trace(),
            chatml: s.chatml,
            think: !s.no_think,
            dense_weights,
            row_stream,
            session: s.session,
            decide: s.decide,
            prefill_split: self.testing.test_prefill_split.clone(),
            force_text: self.testing.test_force_text.clone(),
            decide_state_max_mib: s
                .decide_state_max_mib
                .unwrap_or(session::DEFAULT_DECIDE_STATE_MAX_MIB),
            terminal: false,
            prefill_device: self.prefill_device.clone(),
            prefill_routed: self.prefill_device.is_some() && !self.no_prefill_routed,
        };
        if cfg.prefill_device.is_some() {
            device::check_combination(&cfg)?;
        }
        Ok(cfg)
    }

    /// Flags the command line gave whose (valid) values have no effect in this run, one warning
    /// each: the run goes ahead, but a user who typed them should know they did nothing.
    pub(crate) fn inert_flags(&self, streaming: bool) -> Vec<String> {
        let given = |id: &str| self.given(id);
        let mut warnings = self.sampling.inert(&given);
        let auto_cache = self.auto() && !self.given("cache_mb");
        warnings.extend(self.stream.inert(&given, streaming, auto_cache));
        warnings.extend(self.predict.inert(&given));
        warnings.extend(self.routing.inert(&given));
        if self.no_prefill_routed && self.prefill_device.is_some() && !streaming {
            warnings.push(
                "--no-prefill-routed has no effect without --moe-stream (a resident run's experts are all in memory: there is no arena to fill) — add --moe-stream to stream them".to_string(),
            );
        }
        if self.session.session {
            for (id, flag) in [("prompt", "-p/--prompt"), ("file", "-f/--file")] {
                if given(id) {
                    warnings.push(format!(
                        "{flag} has no effect with --session — each generate request on stdin carries its own prompt"
                    ));
                }
            }
        }
        warnings
    }

    /// The flags that only make sense with another one.
    fn check_prerequisites(&self, streaming: bool, poisoned: bool) -> Result<(), ConfigError> {
        let s = &self.session;
        let missing = [
            (
                self.stream.load_all && !self.stream.moe_stream && !self.auto(),
                "--load-all",
                "--load-all requires --moe-stream",
                "--load-all reads every expert through the streamer; add --moe-stream",
            ),
            (
                s.no_think && !s.chatml,
                "--no-think",
                "--no-think requires --chatml",
                "thinking is a chat-template switch; add --chatml",
            ),
            (
                s.decide && !s.session,
                "--decide",
                "--decide requires --session",
                "decide requests arrive on stdin in session mode; add --session",
            ),
            (
                s.decide_state_max_mib.is_some() && !s.decide,
                "--decide-state-max-mib",
                "--decide-state-max-mib requires --decide",
                "it caps the prefix state decide requests keep; add --session --decide",
            ),
            (
                self.no_prefill_routed && self.prefill_device.is_none(),
                "--no-prefill-routed",
                "--no-prefill-routed requires --prefill-device",
                "it turns off the device prefill's predicted arena; add --prefill-device NAME \
                 (a name from --list-devices), or drop it",
            ),
            (
                poisoned && !streaming,
                "--test-poison",
                "--test-poison requires --moe-stream",
                "poisoning acts on streamed expert memory",
            ),
        ];
        match missing.into_iter().find(|m| m.0) {
            Some((_, flag, message, hint)) => Err(ConfigError::new(flag, message, hint)),
            None => Ok(()),
        }
    }
}
