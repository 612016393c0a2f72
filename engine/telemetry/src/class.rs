//! A run's **comparability class**: which runs may be averaged together.
//!
//! Derived from the facts a run writes about itself (metrics-CSV preamble and `# summary`
//! trailer keys, or any `key=value` view of them), so bmoe-analyze, bmoe-bench and bmoe-top
//! answer "is this a plain run?" the same way. The seed writes the keys of features that are
//! off (or not built yet) as zeros, so only a value above the off value marks a class:
//!
//! | class | keys (on when) |
//! |---|---|
//! | lossy | `drop_cold_frac>0`, `substitute_lambda>0`, `route_ahead>0`; trailer `experts_dropped>0`, `experts_substituted>0` |
//! | replayed | `route_replay=<file>` present and not empty |
//! | instrumented | `predict_log=1`, `prefetch_sync=1` |
//! | speculated | `spec=mtp` / `spec=ngram` (anything but `off`), `mtp=1` |
//!
//! Traces (`route_trace`, `compute_trace_layers`, ...) stay the business of
//! [`crate::metrics::instrumented_keys`]; this classification is about what the engine
//! *computed*, so two runs of one class produced comparable tokens.

use std::fmt;

/// The preamble/trailer keys that make a run lossy when above 0.
pub const LOSSY_KEYS: &[&str] = &[
    "drop_cold_frac",
    "substitute_lambda",
    "route_ahead",
    "experts_dropped",
    "experts_substituted",
];

/// The preamble keys that make a run instrumented (a probe changed what was measured).
pub const INSTRUMENTED_CLASS_KEYS: &[&str] = &["predict_log", "prefetch_sync"];

/// What a run did beyond plain routed decoding; `RunClass::default()` is plain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunClass {
    /// The [`LOSSY_KEYS`] set above 0, with their values, in that table's order.
    pub lossy: Vec<(&'static str, String)>,
    /// The `route_replay=` trace, when the routing came from a recorded run.
    pub replayed: Option<String>,
    /// The [`INSTRUMENTED_CLASS_KEYS`] set above 0, in that table's order.
    pub instrumented: Vec<&'static str>,
    /// The drafting source (`mtp`, `ngram`) when the run speculated.
    pub speculated: Option<String>,
}

fn above_zero(v: &str) -> bool {
    let v = v.trim();
    v.parse::<f64>().is_ok_and(|n| n > 0.0) || v == "true" || v == "on"
}

impl RunClass {
    /// Classifies a run from `value_of(key)` (preamble first, then trailer, as the caller
    /// looks them up). Unknown or unparsable values count as off: a class is claimed only
    /// on evidence.
    pub fn from_keys<V: AsRef<str>>(value_of: impl Fn(&str) -> Option<V>) -> RunClass {
        let get = |k: &str| value_of(k).map(|v| v.as_ref().trim().to_string());
        let mut lossy: Vec<(&'static str, String)> = Vec::new();
        for &k in LOSSY_KEYS {
            if let Some(v) = get(k).filter(|v| above_zero(v)) {
                lossy.push((k, v));
            }
        }
        let replayed = get("route_replay").filter(|v| !v.is_empty() && v != "0");
        let instrumented = INSTRUMENTED_CLASS_KEYS
            .iter()
            .copied()
            .filter(|k| get(k).is_some_and(|v| above_zero(&v)))
            .collect();
        let speculated = match get("spec") {
            Some(s) if !s.is_empty() && s != "off" => Some(s),
            _ => get("mtp")
                .filter(|v| above_zero(v))
                .map(|_| "mtp".to_string()),
        };
        RunClass {
            lossy,
            replayed,
            instrumented,
            speculated,
        }
    }

    /// Whether the run is plain: no lossy edit, no replay, no probe, no drafting.
    pub fn is_plain(&self) -> bool {
        self.key() == "plain"
    }

    /// The grouping key: runs with equal keys may be averaged together. Kinds joined with
    /// `+` (`lossy+replayed`), the drafting source spelled out (`speculated:ngram`) because
    /// two drafting sources are not comparable either; `plain` when none applies.
    pub fn key(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.lossy.is_empty() {
            parts.push("lossy".into());
        }
        if self.replayed.is_some() {
            parts.push("replayed".into());
        }
        if !self.instrumented.is_empty() {
            parts.push("instrumented".into());
        }
        if let Some(s) = &self.speculated {
            parts.push(format!("speculated:{s}"));
        }
        if parts.is_empty() {
            "plain".into()
        } else {
            parts.join("+")
        }
    }

    /// The key with the evidence, for a label:
    /// `lossy (drop_cold_frac=0.5) + replayed (route_replay=t.csv)`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.lossy.is_empty() {
            let kv: Vec<String> = self.lossy.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.push(format!("lossy ({})", kv.join(", ")));
        }
        if let Some(r) = &self.replayed {
            parts.push(format!("replayed (route_replay={r})"));
        }
        if !self.instrumented.is_empty() {
            let kv: Vec<String> = self.instrumented.iter().map(|k| format!("{k}=1")).collect();
            parts.push(format!("instrumented ({})", kv.join(", ")));
        }
        if let Some(s) = &self.speculated {
            parts.push(format!("speculated (spec={s})"));
        }
        if parts.is_empty() {
            "plain".into()
        } else {
            parts.join(" + ")
        }
    }
}

impl fmt::Display for RunClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(pairs: &[(&str, &str)]) -> RunClass {
        RunClass::from_keys(|k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v))
    }

    #[test]
    fn zeros_are_plain() {
        let c = class(&[
            ("drop_cold_frac", "0"),
            ("substitute_lambda", "0"),
            ("route_ahead", "0"),
            ("predict_log", "0"),
            ("prefetch_sync", "0"),
            ("spec", "off"),
            ("experts_dropped", "0"),
        ]);
        assert!(c.is_plain());
        assert_eq!(c.describe(), "plain");
        assert!(class(&[]).is_plain());
    }

    #[test]
    fn each_kind_and_combinations() {
        assert_eq!(class(&[("drop_cold_frac", "0.5")]).key(), "lossy");
        assert_eq!(class(&[("substitute_lambda", "0.1")]).key(), "lossy");
        assert_eq!(class(&[("route_ahead", "1")]).key(), "lossy");
        assert_eq!(class(&[("experts_dropped", "12")]).key(), "lossy");
        assert_eq!(class(&[("route_replay", "t.csv")]).key(), "replayed");
        assert_eq!(class(&[("predict_log", "1")]).key(), "instrumented");
        assert_eq!(class(&[("prefetch_sync", "1")]).key(), "instrumented");
        assert_eq!(class(&[("spec", "ngram")]).key(), "speculated:ngram");
        assert_ne!(
            class(&[("spec", "ngram")]).key(),
            class(&[("spec", "mtp")]).key()
        );
        let both = class(&[("drop_cold_frac", "0.75"), ("route_replay", "r.csv")]);
        assert_eq!(both.key(), "lossy+replayed");
        assert_eq!(
            both.describe(),
            "lossy (drop_cold_frac=0.75) + replayed (route_replay=r.csv)"
        );
    }

    #[test]
    fn garbage_is_not_evidence() {
        assert!(class(&[("drop_cold_frac", "abc"), ("route_replay", "")]).is_plain());
        assert!(class(&[("drop_cold_frac", "-1")]).is_plain());
    }
}
