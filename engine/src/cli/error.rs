//! A flag error: which flag, what is wrong with it, and what to do.

/// A flag whose value cannot be used (exit status 2; nothing was run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The flag at fault (`-n/--n-predict`, `--cache-mb`, …).
    pub flag: &'static str,
    /// What is wrong, naming the flag.
    pub message: String,
    /// What to do.
    pub hint: String,
}

impl ConfigError {
    /// An error about `flag`.
    pub fn new(flag: &'static str, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            flag,
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// `v` must be > 0.
pub(super) fn positive(flag: &'static str, v: i64, hint: &str) -> Result<(), ConfigError> {
    if v > 0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            flag,
            format!("{flag} must be > 0 (got {v})"),
            hint,
        ))
    }
}
