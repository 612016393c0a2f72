//! Self-speculative decoding (`--ngram`, `--mtp`): which source drafts, how many tokens a step
//! may draft, and how long a suffix match the n-gram source needs.

use super::error::ConfigError;
use super::sampling::Sampling;
use clap::Args;

/// The speculation flags.
#[derive(Debug, Clone, Args)]
pub struct SpecArgs {
    /// Self-speculation by prompt lookup: draft the tokens that followed the most recent
    /// longest match of the current suffix in the prompt and the generated text, verify them
    /// in one decode (greedy only)
    #[arg(long = "ngram", conflicts_with = "mtp")]
    pub ngram: bool,
    /// Self-speculation with the model's own MTP (NextN) head: it drafts, one decode verifies
    /// (greedy only; the model needs `<arch>.nextn_predict_layers` and a graph llama.cpp runs)
    #[arg(long = "mtp")]
    pub mtp: bool,
    /// Most tokens one speculation step drafts
    #[arg(long = "draft", default_value_t = 3, value_name = "N")]
    pub draft: u32,
    /// `--mtp`: stop a draft at the first token whose head probability (among the head's ten
    /// best candidates, as llama.cpp's MTP driver measures it) is below P (0..=1; 0 drafts the
    /// full --draft N)
    #[arg(long = "mtp-p-min", default_value_t = 0.0, value_name = "P")]
    pub mtp_p_min: f32,
    /// `--ngram`: the shortest suffix match that drafts (1..=12)
    #[arg(long = "ngram-min-match", default_value_t = 2, value_name = "M")]
    pub ngram_min_match: u32,
}

/// Speculation as resolved.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Spec {
    /// One decode per token.
    #[default]
    Off,
    /// Prompt-lookup drafts.
    Ngram {
        /// Most drafted tokens per step.
        draft: u32,
        /// Shortest suffix match that drafts.
        min_match: u32,
    },
    /// MTP-head drafts (accepted by the flags; the engine refuses a model without a head).
    Mtp {
        /// Most drafted tokens per step.
        draft: u32,
        /// Draft-token probability floor (`--mtp-p-min`).
        p_min: f32,
    },
}

impl Spec {
    /// The preamble's `spec=` value.
    pub fn name(&self) -> &'static str {
        match self {
            Spec::Off => "off",
            Spec::Ngram { .. } => "ngram",
            Spec::Mtp { .. } => "mtp",
        }
    }

    /// The preamble's `spec_draft_max=` (0 when off).
    pub fn draft_max(&self) -> u32 {
        match *self {
            Spec::Off => 0,
            Spec::Ngram { draft, .. } | Spec::Mtp { draft, .. } => draft,
        }
    }

    /// The preamble's `mtp_p_min=` (0 unless `--mtp`).
    pub fn p_min(&self) -> f32 {
        match *self {
            Spec::Mtp { p_min, .. } => p_min,
            _ => 0.0,
        }
    }

    /// The preamble's `ngram_min_match=` (0 unless `--ngram`).
    pub fn min_match(&self) -> u32 {
        match *self {
            Spec::Ngram { min_match, .. } => min_match,
            _ => 0,
        }
    }
}

/// The longest suffix the n-gram source tries to match (the seed's max 12).
pub const NGRAM_MAX_MATCH: u32 = 12;

impl SpecArgs {
    /// The source and its limits; speculation verifies against the argmax, so it refuses a
    /// sampled run rather than silently verifying against something else.
    /// `--feed-random` feeds tokens that are not the argmax, which no draft could be verified
    /// against, so the pair is refused instead of speculation silently turning itself off.
    pub(super) fn resolve(
        &self,
        sampling: &Sampling,
        feed_random: Option<u64>,
    ) -> Result<Spec, ConfigError> {
        if !self.ngram && !self.mtp {
            if self.mtp_p_min != 0.0 {
                return Err(ConfigError::new(
                    "--mtp-p-min",
                    format!("--mtp-p-min {} is set without --mtp", self.mtp_p_min),
                    "add --mtp, or drop --mtp-p-min",
                ));
            }
            return Ok(Spec::Off);
        }
        let flag = if self.ngram { "--ngram" } else { "--mtp" };
        if feed_random.is_some() {
            return Err(ConfigError::new(
                flag,
                format!(
                    "{flag} and --feed-random cannot be combined: --feed-random feeds seeded random tokens, not the argmax a draft is verified against"
                ),
                format!(
                    "drop --feed-random (a repetitive prompt gives {flag} real verify decodes), or drop {flag}"
                ),
            ));
        }
        if let Sampling::Sample { temp, .. } = sampling {
            return Err(ConfigError::new(
                flag,
                format!("{flag} is greedy only, but --temp is {temp}"),
                "drop --temp (or use --temp 0): a draft is accepted when it equals the argmax",
            ));
        }
        if !(1..=64).contains(&self.draft) {
            return Err(ConfigError::new(
                "--draft",
                format!("--draft must be in 1..=64 (got {})", self.draft),
                "a few tokens, e.g. --draft 3",
            ));
        }
        if self.mtp {
            // written so that NaN fails too
            if !(0.0..=1.0).contains(&self.mtp_p_min) {
                return Err(ConfigError::new(
                    "--mtp-p-min",
                    format!("--mtp-p-min must be in [0, 1] (got {})", self.mtp_p_min),
                    "a probability, e.g. --mtp-p-min 0.5 (0 drafts the full --draft N)",
                ));
            }
            return Ok(Spec::Mtp {
                draft: self.draft,
                p_min: self.mtp_p_min,
            });
        }
        if self.mtp_p_min != 0.0 {
            return Err(ConfigError::new(
                "--mtp-p-min",
                format!(
                    "--mtp-p-min {} applies to --mtp only, not --ngram",
                    self.mtp_p_min
                ),
                "drop --mtp-p-min (--ngram drafts have no probability)",
            ));
        }
        if !(1..=NGRAM_MAX_MATCH).contains(&self.ngram_min_match) {
            return Err(ConfigError::new(
                "--ngram-min-match",
                format!(
                    "--ngram-min-match must be in 1..={NGRAM_MAX_MATCH} (got {})",
                    self.ngram_min_match
                ),
                "the shortest suffix that drafts, e.g. --ngram-min-match 2",
            ));
        }
        Ok(Spec::Ngram {
            draft: self.draft,
            min_match: self.ngram_min_match,
        })
    }
}
