//! The conversation: the model's chat template and thinking switch, and session mode with its
//! `decide` requests.

use clap::Args;

/// `--decide-state-max-mib` when not given: a prefix state of a few thousand tokens of a 30B
/// MoE's KV fits, one that would take a real share of a phone's memory does not.
pub const DEFAULT_DECIDE_STATE_MAX_MIB: u64 = 512;

/// Chat and session flags.
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// Render the prompt with the model's own chat template (tokenizer.chat_template)
    #[arg(long = "chatml")]
    pub chatml: bool,
    /// With --chatml: ask the template not to think (enable_thinking=false)
    #[arg(long = "no-think")]
    pub no_think: bool,
    /// Keep the model loaded and serve JSON requests from stdin, one per line (generate,
    /// decide, cancel, close); -p is ignored. See docs/session.md
    #[arg(long = "session")]
    pub session: bool,
    /// With --session: accept `decide` requests (score choices by first-token log-probability)
    #[arg(long = "decide")]
    pub decide: bool,
    /// With --decide: the largest kept prefix state in MiB; a larger one is not kept and the next
    /// decide prefills in full (0 = never keep one) [default: 512]
    #[arg(long = "decide-state-max-mib", value_name = "MIB")]
    pub decide_state_max_mib: Option<u64>,
}
