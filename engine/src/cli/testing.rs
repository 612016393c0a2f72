//! Hidden flags only tests use: poisoning expert memory, prefilling in a session's batches,
//! forcing the generated text.

use super::error::ConfigError;
use crate::stream::Poison;
use clap::Args;

/// Test-only flags (hidden from `--help`).
#[derive(Debug, Clone, Args)]
pub struct TestArgs {
    /// Test only: poison expert slices after each load (routed|unrouted)
    #[arg(long = "test-poison", hide = true, value_name = "WHICH")]
    pub test_poison: Option<String>,
    /// Test only: prefill the prompt in several decodes, split at these positions (comma list),
    /// to reproduce the batches a session's KV was built from
    #[arg(
        long = "test-prefill-split",
        hide = true,
        value_name = "POS,...",
        value_delimiter = ','
    )]
    pub test_prefill_split: Vec<usize>,
    /// Test only: every turn generates the tokens of this text first (special tokens parsed), in
    /// place of the picked ones — the decodes still run — to drive the chat parsers with a known
    /// sequence
    #[arg(long = "test-force-text", hide = true, value_name = "TEXT")]
    pub test_force_text: Option<String>,
}

impl TestArgs {
    /// `--test-poison`.
    pub(super) fn poison(&self) -> Result<Option<Poison>, ConfigError> {
        match self.test_poison.as_deref() {
            None => Ok(None),
            Some("routed") => Ok(Some(Poison::Routed)),
            Some("unrouted") => Ok(Some(Poison::Unrouted)),
            Some(other) => Err(ConfigError::new(
                "--test-poison",
                format!("--test-poison expects routed|unrouted, got '{other}'"),
                "a test-only flag",
            )),
        }
    }
}
