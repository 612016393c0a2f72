//! Routing edits (lossy): `--drop-cold-experts` with `--drop-no-renorm` / `--drop-in-prefill`,
//! `--expert-substitute`, and `--route-replay` with `--route-replay-end`.

use super::error::ConfigError;
use super::streaming::StreamConfig;
use crate::graph::edit::EditConfig;
use crate::graph::replay::ReplayEnd;
use clap::Args;
use std::path::PathBuf;

/// Routing-edit flags.
#[derive(Debug, Clone, Args)]
pub struct RoutingArgs {
    /// Lossy: in decode, skip a routed expert the cache misses when its weight is below
    /// F / top-k (never the token's best); its weight becomes 0 (0 = off, up to 1; needs a cache)
    #[arg(long = "drop-cold-experts", default_value_t = 0.0, value_name = "F")]
    pub drop_cold_experts: f32,
    /// With --drop-cold-experts: leave the surviving weights as they are instead of scaling them
    /// back to the routing's total
    #[arg(long = "drop-no-renorm")]
    pub drop_no_renorm: bool,
    /// With --drop-cold-experts: drop in the prompt's batches too (decode only otherwise)
    #[arg(long = "drop-in-prefill")]
    pub drop_in_prefill: bool,
    /// Lossy: in decode, move a routed slot the cache misses to the best-ranked resident expert
    /// outside the token's top-k whose router score is at least (1 − λ) of the slot's
    /// (0 = off, up to 1; needs a cache)
    #[arg(
        long = "expert-substitute",
        default_value_t = 0.0,
        value_name = "LAMBDA"
    )]
    pub expert_substitute: f32,
    /// Route every decode step as a recorded route trace did (a model of the trace's n_layer,
    /// n_expert and n_expert_used; needs --moe-stream): benchmarks on real routing
    #[arg(long = "route-replay", value_name = "TRACE")]
    pub route_replay: Option<PathBuf>,
    /// With --route-replay: at the trace's end, stop the run (stop) or start the trace over
    /// (cycle) [default: stop]
    #[arg(long = "route-replay-end", value_name = "stop|cycle")]
    pub route_replay_end: Option<String>,
}

/// The routing edits as resolved.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoutingConfig {
    /// Drop and substitution.
    pub edits: EditConfig,
    /// `--route-replay`: the trace and what happens at its end.
    pub replay: Option<(PathBuf, ReplayEnd)>,
}

impl RoutingConfig {
    /// Whether the run changes any routing (lossy or replayed).
    pub fn any(&self) -> bool {
        self.edits.drop_frac > 0.0 || self.edits.substitute_lambda > 0.0 || self.replay.is_some()
    }
}

/// `v` must be a number in [0, 1] (a negated range, so NaN fails).
fn fraction(flag: &'static str, v: f32, hint: &str) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(ConfigError::new(
            flag,
            format!("{flag} must be in [0, 1] (got {v})"),
            hint,
        ))
    }
}

/// A lossy edit that reads the cache's residency needs streaming and a cache.
fn needs_cache(flag: &'static str, stream: Option<&StreamConfig>) -> Result<(), ConfigError> {
    match stream {
        None => Err(ConfigError::new(
            flag,
            format!("{flag} requires --moe-stream"),
            "it edits the streamed routing; add --moe-stream --cache-mb N",
        )),
        Some(s) if s.cache_mb == 0 && s.auto.is_none() => Err(ConfigError::new(
            flag,
            format!("{flag} needs an expert cache (--cache-mb N or --cache-mb auto)"),
            "it acts on what the cache holds; with the cache off every expert misses",
        )),
        Some(_) => Ok(()),
    }
}

impl RoutingArgs {
    /// Checks the flags against each other and the streaming configuration.
    pub(super) fn resolve(
        &self,
        stream: Option<&StreamConfig>,
    ) -> Result<RoutingConfig, ConfigError> {
        fraction(
            "--drop-cold-experts",
            self.drop_cold_experts,
            "a fraction of the uniform weight 1/top-k, e.g. 0.5",
        )?;
        fraction(
            "--expert-substitute",
            self.expert_substitute,
            "the share of a slot's router score a substitute may lose, e.g. 0.3",
        )?;
        if self.drop_cold_experts > 0.0 {
            needs_cache("--drop-cold-experts", stream)?;
        }
        if self.expert_substitute > 0.0 {
            needs_cache("--expert-substitute", stream)?;
        }
        let end = match self.route_replay_end.as_deref() {
            None | Some("stop") => ReplayEnd::Stop,
            Some("cycle") => ReplayEnd::Cycle,
            Some(other) => {
                return Err(ConfigError::new(
                    "--route-replay-end",
                    format!("--route-replay-end expects stop|cycle, got '{other}'"),
                    "stop ends the run with the trace; cycle starts the trace over",
                ));
            }
        };
        if self.route_replay_end.is_some() && self.route_replay.is_none() {
            return Err(ConfigError::new(
                "--route-replay-end",
                "--route-replay-end requires --route-replay",
                "add --route-replay TRACE, or drop --route-replay-end",
            ));
        }
        if self.route_replay.is_some() {
            if stream.is_none() {
                return Err(ConfigError::new(
                    "--route-replay",
                    "--route-replay requires --moe-stream",
                    "the replayed routing is what the streamer loads; add --moe-stream",
                ));
            }
            if self.expert_substitute > 0.0 {
                return Err(ConfigError::new(
                    "--expert-substitute",
                    "--expert-substitute and --route-replay both choose the experts; use one",
                    "replay a trace recorded with --expert-substitute instead",
                ));
            }
        }
        Ok(RoutingConfig {
            edits: EditConfig {
                drop_frac: self.drop_cold_experts,
                renorm: !self.drop_no_renorm,
                drop_prefill: self.drop_in_prefill,
                substitute_lambda: self.expert_substitute,
            },
            replay: self.route_replay.clone().map(|p| (p, end)),
        })
    }

    /// The drop modifiers given without a drop.
    pub(super) fn inert(&self, given: &dyn Fn(&str) -> bool) -> Vec<String> {
        if self.drop_cold_experts > 0.0 {
            return Vec::new();
        }
        [
            ("drop_no_renorm", "--drop-no-renorm"),
            ("drop_in_prefill", "--drop-in-prefill"),
        ]
        .into_iter()
        .filter(|(id, _)| given(id))
        .map(|(_, flag)| {
            format!(
                "{flag} has no effect without --drop-cold-experts F (> 0) — add it, or drop {flag}"
            )
        })
        .collect()
    }
}
