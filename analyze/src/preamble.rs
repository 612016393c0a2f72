//! `# key=value` preamble tokens.
//!
//! Private adapter until `bmoe-telemetry` exposes its preamble parser; same rule as the reference
//! `trace_io.kv_tokens`: strip every leading `#`, split on whitespace, keep tokens containing `=`,
//! split at the first `=`.

/// The `key=value` tokens of one `#` line, in line order (later duplicates win when collected).
#[must_use]
pub fn kv_tokens(line: &str) -> Vec<(&str, &str)> {
    line.trim_start_matches('#')
        .split_whitespace()
        .filter_map(|tok| tok.split_once('='))
        .collect()
}

/// Value of `key` in `tokens` (the last occurrence wins, as in a dict).
#[must_use]
pub fn get<'a>(tokens: &[(&'a str, &'a str)], key: &str) -> Option<&'a str> {
    tokens
        .iter()
        .rev()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_follow_the_reference_rule() {
        let t = kv_tokens("## route_trace v1 model=/a b=c=d =x e= ");
        assert_eq!(t, vec![("model", "/a"), ("b", "c=d"), ("", "x"), ("e", "")]);
        assert_eq!(get(&kv_tokens("# a=1 a=2"), "a"), Some("2"));
        assert_eq!(get(&t, "zz"), None);
    }
}
