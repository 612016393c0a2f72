//! `key=value` lines: the `#` preambles, the `# summary` trailer and the `.metrics` sidecar.
//!
//! # The tokenising rule (values with spaces)
//!
//! A preamble line is read as follows:
//!
//! 1. leading `#` characters are stripped, then the rest is split on runs of ASCII whitespace
//!    into *words*;
//! 2. a word containing `=` starts a pair: the key is the text before the **first** `=`, the
//!    value everything after it (which may be empty or contain further `=`);
//! 3. a word **without** `=` that follows a pair on the same line continues that pair's value,
//!    joined by one space — so `model=/sd card/My Model.gguf arch=qwen3moe` reads
//!    `model` = `/sd card/My Model.gguf`;
//! 4. a word without `=` before any pair on the line (`bmoe_metrics`, `v2`, `summary`,
//!    `route_trace`) is a *bare word*, kept separately and never a key;
//! 5. a key seen twice keeps its **last** value (the order of first appearance is kept).
//!
//! Consequences, all deliberate: whitespace inside a value is normalised to single spaces, and
//! a value whose second or later word contains `=` cannot be represented — [`format_pair`]
//! refuses it instead of writing a line that would read back differently. Readers that split
//! on whitespace only (the original Python `kv_tokens`) see the first word of such a value,
//! which is what they always did.

use crate::error::{Error, Result};

/// An insertion-ordered `key → value` map where a repeated key keeps its last value.
///
/// Small by nature (tens of keys), so a vector with linear lookup beats a hash map and keeps
/// the file order for writing back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvMap {
    pairs: Vec<(String, String)>,
}

impl KvMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` to `value`: replaces the value in place when the key exists (so order of
    /// first appearance is kept), appends otherwise.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.pairs.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.pairs.push((key, value)),
        }
    }

    /// Removes `key` and returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.pairs.iter().position(|(k, _)| k == key)?;
        Some(self.pairs.remove(at).1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Iterates `(key, value)` in order of first appearance.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether the map holds no key.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Merges `other` into `self` (other's values win).
    pub fn extend(&mut self, other: &KvMap) {
        for (k, v) in other.iter() {
            self.insert(k, v);
        }
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for KvMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = KvMap::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

/// One tokenised `#` line: its bare words and its pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvLine {
    /// Words without `=` that came before the first pair (e.g. `["bmoe_metrics", "v2"]`).
    pub words: Vec<String>,
    /// The `key=value` pairs, see the [module rules](self).
    pub pairs: KvMap,
}

/// Tokenises one preamble / trailer line by the [module rules](self). Never fails.
///
/// ```
/// let l = bmoe_telemetry::kv::parse_kv_line("# model=/a b/x.gguf arch=qwen3moe");
/// assert_eq!(l.pairs.get("model"), Some("/a b/x.gguf"));
/// assert_eq!(l.pairs.get("arch"), Some("qwen3moe"));
/// ```
pub fn parse_kv_line(line: &str) -> KvLine {
    let body = line.trim_start_matches('#');
    let mut out = KvLine::default();
    // The pair currently open for continuation words, kept outside the map so a duplicate key
    // on the same line still ends with its last value.
    let mut open: Option<(String, String)> = None;
    for word in body.split_ascii_whitespace() {
        match word.split_once('=') {
            Some((k, v)) => {
                if let Some((k0, v0)) = open.take() {
                    out.pairs.insert(k0, v0);
                }
                open = Some((k.to_string(), v.to_string()));
            }
            None => match open.as_mut() {
                Some((_, v)) => {
                    v.push(' ');
                    v.push_str(word);
                }
                None => out.words.push(word.to_string()),
            },
        }
    }
    if let Some((k, v)) = open {
        out.pairs.insert(k, v);
    }
    out
}

/// Formats one `key=value` pair so that [`parse_kv_line`] reads it back: whitespace runs in
/// the value become one space and leading/trailing whitespace is dropped.
///
/// # Errors
/// [`Error::Unwritable`] when the key is empty or contains whitespace or `=`, or when a word
/// after the first in the value contains `=` (it would read back as a new key).
pub fn format_pair(key: &str, value: &str) -> Result<String> {
    if key.is_empty() || key.contains('=') || key.chars().any(|c| c.is_ascii_whitespace()) {
        return Err(Error::Unwritable {
            what: format!("key {key:?}"),
            message: "a key must be non-empty and contain neither `=` nor whitespace".into(),
        });
    }
    let mut out = String::with_capacity(key.len() + 1 + value.len());
    out.push_str(key);
    out.push('=');
    for (i, word) in value.split_ascii_whitespace().enumerate() {
        if i > 0 {
            if word.contains('=') {
                return Err(Error::Unwritable {
                    what: format!("value of `{key}`"),
                    message: format!(
                        "{value:?}: a word after a space contains `=`, so it would read back as a new key"
                    ),
                });
            }
            out.push(' ');
        }
        out.push_str(word);
    }
    Ok(out)
}

/// Formats a whole `# ...` line from pairs, e.g. `# model=x arch=y`.
///
/// # Errors
/// As [`format_pair`].
pub fn format_kv_line<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<String> {
    let mut out = String::from("#");
    for (k, v) in pairs {
        out.push(' ');
        out.push_str(&format_pair(k, v)?);
    }
    Ok(out)
}

/// Formats the `# k=v …` line of the keys that are set (`None` values are left out), followed by
/// `extra`; `None` when there is nothing to write. The writers' preamble lines are all this.
///
/// # Errors
/// As [`format_pair`].
pub(crate) fn format_set_pairs<'a>(
    keys: impl IntoIterator<Item = (&'a str, Option<String>)>,
    extra: &KvMap,
) -> Result<Option<String>> {
    let keys: Vec<(&str, String)> = keys
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
    let line = format_kv_line(
        keys.iter()
            .map(|(k, v)| (*k, v.as_str()))
            .chain(extra.iter()),
    )?;
    Ok((line.len() > 1).then_some(line))
}

/// Reads a `.metrics` sidecar (or any `key=value`-per-line text): every line containing `=`
/// is split at its first `=`, both sides trimmed; later keys overwrite earlier ones; lines
/// without `=` are ignored. A leading UTF-8 BOM is skipped.
///
/// Note: in some archived sessions a file named `*.metrics` is really a v0 metrics CSV; use
/// [`crate::detect::detect_format`] first when that matters.
pub fn parse_sidecar(text: &str) -> KvMap {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut map = KvMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            map.insert(k.trim(), v.trim());
        }
    }
    map
}

/// Reads a `.metrics` sidecar file; see [`parse_sidecar`].
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; invalid UTF-8 is replaced, not an error.
pub fn read_sidecar(path: impl AsRef<std::path::Path>) -> Result<KvMap> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    Ok(parse_sidecar(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_words_and_pairs() {
        let l = parse_kv_line("# bmoe_metrics v2");
        assert_eq!(l.words, vec!["bmoe_metrics", "v2"]);
        assert!(l.pairs.is_empty());
        let l = parse_kv_line("# summary tokens=40 s/tok=0.138 x=a=b e=");
        assert_eq!(l.words, vec!["summary"]);
        assert_eq!(l.pairs.get("s/tok"), Some("0.138"));
        assert_eq!(l.pairs.get("x"), Some("a=b"));
        assert_eq!(l.pairs.get("e"), Some(""));
    }

    #[test]
    fn duplicate_key_keeps_last_value_and_first_position() {
        let l = parse_kv_line("# a=1 b=2 a=3");
        assert_eq!(l.pairs.get("a"), Some("3"));
        assert_eq!(l.pairs.iter().next(), Some(("a", "3")));
    }

    #[test]
    fn format_refuses_ambiguous_values() {
        assert!(format_pair("model", "a b=c").is_err());
        assert!(format_pair("", "x").is_err());
        assert!(format_pair("a b", "x").is_err());
        assert_eq!(
            format_pair("model", "  a   b ").ok().as_deref(),
            Some("model=a b")
        );
    }

    #[test]
    fn sidecar_trims_and_overwrites() {
        let m = parse_sidecar("\u{feff}peak_rss_kb=1\n x = 2 \nnoise\nx=3\n");
        assert_eq!(m.get("peak_rss_kb"), Some("1"));
        assert_eq!(m.get("x"), Some("3"));
        assert_eq!(m.len(), 2);
    }
}
