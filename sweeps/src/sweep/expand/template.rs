//! Values as text and `{name}` placeholders: how axis values, `vars` entries, tags and fixed
//! flags become the strings of a cell.

use std::collections::BTreeMap;

/// Renders a scalar TOML value as text (`0.5`, `4000`, `auto`, `true`).
pub fn render_value(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Replaces `{name}` placeholders from `vars`; `Err(name)` for the first unknown one.
pub fn substitute(template: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let name = &after[..close];
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => return Err(name.to_string()),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::tag::sanitize_tag;
    use super::*;

    #[test]
    fn substitute_works() {
        let mut v = BTreeMap::new();
        v.insert("a".to_string(), "1".to_string());
        assert_eq!(substitute("x{a}y{a}", &v), Ok("x1y1".to_string()));
        assert_eq!(substitute("{b}", &v), Err("b".to_string()));
        assert_eq!(sanitize_tag("a b/c"), "a-b-c");
    }
}
