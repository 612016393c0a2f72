//! The router-arithmetic predictors (issue #15): `--predict-log` (a diagnostic that scores
//! them) and `--predict-prefetch` with its `--predict-spec-max` cap (reads the stale gate's
//! guess ahead).

use super::error::ConfigError;
use super::streaming::StreamConfig;
use clap::Args;

/// Predictor flags.
#[derive(Debug, Clone, Args)]
pub struct PredictArgs {
    /// Diagnostic: score three expert predictors against the router's routing — the stale gate
    /// (layer il+2's router on layer il's MoE input), the previous token's routing, and a
    /// fresh-gate control — printed as `moe-predict:` lines and a per-layer table (needs
    /// --moe-stream; marks the run instrumented)
    #[arg(long = "predict-log")]
    pub predict_log: bool,
    /// Read ahead the stale gate's guess at layer il+2's routing right after layer il+1's load
    /// (lossless; needs --moe-stream and a cache; under --overlap the reads go to the lanes'
    /// low-priority queue)
    #[arg(long = "predict-prefetch")]
    pub predict_prefetch: bool,
    /// --predict-prefetch: the most guessed misses read ahead per layer (0-8)
    #[arg(long = "predict-spec-max", default_value_t = 2, value_name = "N")]
    pub predict_spec_max: i64,
    /// Lossy: commit layer il+N's routing from layer il's input (its router on a stale input)
    /// and read it early; the `moe-route-ahead:` line says how often it agreed with the router
    /// (0-8, 0 = off; needs --moe-stream; under --overlap the early reads go to the lanes)
    #[arg(long = "route-ahead", default_value_t = 0, value_name = "N")]
    pub route_ahead: i64,
}

/// The predictors as resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PredictConfig {
    /// `--predict-log`.
    pub log: bool,
    /// `--predict-prefetch`.
    pub prefetch: bool,
    /// `--predict-spec-max`.
    pub spec_max: usize,
    /// `--route-ahead N` (0 = off).
    pub route_ahead: usize,
}

impl PredictConfig {
    /// Whether any predictor runs.
    pub fn any(&self) -> bool {
        self.log || self.prefetch || self.route_ahead > 0
    }
}

impl PredictArgs {
    /// Checks the flags against the streaming settings (`None` without `--moe-stream`) and
    /// whether self-speculation (`--mtp`/`--ngram`) is on.
    pub(super) fn resolve(
        &self,
        stream: Option<&StreamConfig>,
        spec_on: bool,
    ) -> Result<PredictConfig, ConfigError> {
        if !(0..=8).contains(&self.predict_spec_max) {
            return Err(ConfigError::new(
                "--predict-spec-max",
                format!(
                    "--predict-spec-max must be in 0..=8 (got {})",
                    self.predict_spec_max
                ),
                "it caps the guessed misses read ahead per layer; 2 is the default",
            ));
        }
        for (on, flag) in [
            (self.predict_log, "--predict-log"),
            (self.predict_prefetch, "--predict-prefetch"),
        ] {
            if on && stream.is_none() {
                return Err(ConfigError::new(
                    flag,
                    format!("{flag} requires --moe-stream"),
                    "the predictors run in the streaming hook; add --moe-stream",
                ));
            }
        }
        if let (true, Some(s)) = (self.predict_prefetch, stream) {
            check_prefetch(s)?;
        }
        self.check_route_ahead(stream, spec_on)?;
        Ok(PredictConfig {
            log: self.predict_log,
            prefetch: self.predict_prefetch,
            spec_max: self.predict_spec_max as usize,
            route_ahead: self.route_ahead as usize,
        })
    }

    /// `--predict-spec-max` given without `--predict-prefetch` does nothing: say so.
    pub(super) fn inert(&self, given: &dyn Fn(&str) -> bool) -> Vec<String> {
        if given("predict_spec_max") && !self.predict_prefetch {
            return vec![
                "--predict-spec-max has no effect without --predict-prefetch — add --predict-prefetch to read the stale gate's guesses ahead".to_string(),
            ];
        }
        Vec::new()
    }

    /// `--route-ahead N`: in range, streaming, and alone — it rewrites the
    /// routing the predictors score and the prefetchers guess at.
    fn check_route_ahead(
        &self,
        stream: Option<&StreamConfig>,
        spec_on: bool,
    ) -> Result<(), ConfigError> {
        if !(0..=8).contains(&self.route_ahead) {
            return Err(ConfigError::new(
                "--route-ahead",
                format!("--route-ahead must be in 0..=8 (got {})", self.route_ahead),
                "N is how many layers early the routing is committed; 1 is typical, 0 turns it off",
            ));
        }
        if self.route_ahead == 0 {
            return Ok(());
        }
        let Some(s) = stream else {
            return Err(ConfigError::new(
                "--route-ahead",
                "--route-ahead requires --moe-stream",
                "route-ahead commits the streamed experts' routing early; add --moe-stream",
            ));
        };
        let others = [
            (self.predict_log, "--predict-log"),
            (self.predict_prefetch, "--predict-prefetch"),
            (s.prefetch > 0, "--prefetch"),
            (spec_on, "--mtp/--ngram"),
        ];
        if let Some((_, other)) = others.into_iter().find(|(on, _)| *on) {
            return Err(ConfigError::new(
                "--route-ahead",
                format!("--route-ahead and {other} cannot be combined"),
                format!("route-ahead rewrites the routing {other} relies on; keep one of them"),
            ));
        }
        Ok(())
    }
}

/// `--predict-prefetch` against the streaming settings: a cache for the guesses, not with the
/// temporal prefetcher.
fn check_prefetch(s: &StreamConfig) -> Result<(), ConfigError> {
    if s.cache_mb == 0 && s.auto.is_none() {
        return Err(ConfigError::new(
            "--predict-prefetch",
            "--predict-prefetch requires an expert cache (--cache-mb > 0 or auto)",
            "a read-ahead expert waits in the cache for its routing; add --cache-mb 256",
        ));
    }
    if s.prefetch > 0 {
        return Err(ConfigError::new(
            "--predict-prefetch",
            "--predict-prefetch and --prefetch cannot be combined",
            "both read ahead into the same cache; keep one of --predict-prefetch or --prefetch K",
        ));
    }
    Ok(())
}
