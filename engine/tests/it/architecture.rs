//! The engine's house rules, checked on its own source so that CI keeps them (docs/architecture.md
//! draws the map they protect):
//! - no source file over 800 lines and no function over 120 lines in `engine/src`;
//! - no `Result<_, String>`: every error is a typed one that says what failed;
//! - `unsafe` only in the `ffi` and `vm` modules;
//! - at most 8 public items in `lib.rs`;
//! - no import circle, neither between files nor between the subsystem folders, and the graph
//!   never depends on the sinks (sinks receive finished rows). A folder's `pub use child::X`
//!   re-export is its facade, not a use of the child.
//!
//! The checks read the source as text (comments stripped); rustfmt's layout makes that reliable
//! enough for rules meant to fail loudly when broken, which the negative cases below show.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 800;
const MAX_FN_LINES: usize = 120;
const MAX_PUBLIC_ITEMS: usize = 8;

/// One source file as a module: `turn::decode` for `src/turn/decode.rs`, `turn` for
/// `src/turn/mod.rs`.
struct Source {
    module: String,
    path: PathBuf,
    text: String,
    /// The text without comments and without the `#[cfg(test)] mod tests` block.
    code: String,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    assert!(
        out.len() > 20,
        "found only {} files under {}",
        out.len(),
        root.display()
    );
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .expect("under src")
            .with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        let module = parts.join("::");
        let text = std::fs::read_to_string(&path).expect("read source");
        let code = strip_tests(&strip_comments(&text));
        out.push(Source {
            module,
            path,
            text,
            code,
        });
    }
}

/// The text with `//` comments removed (string literals keep their `//`).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = '\0';
        let mut cut = line.len();
        for (i, c) in line.char_indices() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            }
            if !in_str && c == '/' && prev == '/' {
                cut = i - 1;
                break;
            }
            prev = c;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// The text up to its unit-test module (rustfmt puts it last).
fn strip_tests(code: &str) -> String {
    match code.find("#[cfg(test)]\nmod tests") {
        Some(i) => code[..i].to_string(),
        None => code.to_string(),
    }
}

/// Every function's name, first line and length in lines (signature to closing brace).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let Some(name) = fn_name(trimmed) else {
            continue;
        };
        // a declaration without a body (trait method) ends in `;` before any `{`
        let Some(open) =
            (i..lines.len()).find(|&j| lines[j].contains('{') || lines[j].ends_with(';'))
        else {
            continue;
        };
        if !lines[open].contains('{') {
            continue;
        }
        if lines[open].trim_end().ends_with('}') && open == i {
            out.push((name, i + 1, 1));
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) {
            out.push((name, i + 1, end - i + 1));
        }
    }
    out
}

/// The function name when `line` (trimmed) starts a function item.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|s| s.text.lines().count() > MAX_FILE_LINES)
        .map(|s| format!("{} ({} lines)", s.path.display(), s.text.lines().count()))
        .collect();
    assert!(long.is_empty(), "split by concern: {long:?}");
}

#[test]
fn no_function_is_over_120_lines() {
    let mut long = Vec::new();
    for s in sources() {
        for (name, line, n) in functions(&s.text) {
            if n > MAX_FN_LINES {
                long.push(format!("{}:{line} fn {name} ({n} lines)", s.path.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these: {long:?}");
}

#[test]
fn the_function_measure_sees_long_functions() {
    let body = "    let x = 1;\n".repeat(130);
    let text =
        format!("impl A {{\n    pub fn long(&self) {{\n{body}    }}\n\n    fn short() {{}}\n}}\n");
    let fns = functions(&text);
    assert_eq!(fns.len(), 2, "{fns:?}");
    assert_eq!((fns[0].0.as_str(), fns[0].2), ("long", 132));
    assert_eq!((fns[1].0.as_str(), fns[1].2), ("short", 1));
}

/// The `T, E` of every `Result<T, E>` in `code`, split at the top-level comma.
fn result_error_types(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("Result<") {
        let start = at + i + "Result<".len();
        let mut depth = 1;
        let mut comma = None;
        let mut end = start;
        for (j, c) in code[start..].char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 1 => comma = Some(start + j),
                _ => {}
            }
            if depth == 0 {
                end = start + j;
                break;
            }
        }
        if let Some(c) = comma {
            out.push(code[c + 1..end].trim().to_string());
        }
        at = start;
    }
    out
}

#[test]
fn no_error_is_a_bare_string() {
    let mut found = Vec::new();
    for s in sources() {
        if result_error_types(&s.code).iter().any(|e| e == "String") {
            found.push(s.path.display().to_string());
        }
    }
    assert!(
        found.is_empty(),
        "use a typed error (thiserror) in {found:?}"
    );
    assert_eq!(
        result_error_types("fn f() -> Result<Vec<(u8, u8)>, String> {}"),
        ["String"]
    );
}

#[test]
fn unsafe_lives_only_in_ffi_and_vm() {
    let mut found = Vec::new();
    for s in sources() {
        let top = s.module.split("::").next().unwrap_or("");
        if top == "ffi" || top == "vm" || s.module.is_empty() {
            continue;
        }
        if s.code.contains("unsafe ") || s.code.contains("unsafe{") {
            found.push(s.path.display().to_string());
        }
    }
    assert!(found.is_empty(), "unsafe outside ffi/ and vm/: {found:?}");
}

#[test]
fn lib_rs_exports_at_most_eight_items() {
    let lib = sources()
        .into_iter()
        .find(|s| s.module == "lib")
        .expect("lib.rs");
    let mut items = Vec::new();
    for line in lib.code.lines().filter(|l| l.starts_with("pub ")) {
        let rest = &line["pub ".len()..];
        if let Some(list) = rest.strip_prefix("use ") {
            // `pub use a::{B, C};` exports B and C; `pub use a::B;` exports B
            let names = match (list.find('{'), list.rfind('}')) {
                (Some(a), Some(b)) => list[a + 1..b].to_string(),
                _ => list.rsplit("::").next().unwrap_or("").to_string(),
            };
            items.extend(
                names
                    .split(',')
                    .map(|n| n.trim().trim_end_matches(';').to_string())
                    .filter(|n| !n.is_empty()),
            );
        } else {
            items.push(rest.to_string());
        }
    }
    assert!(
        items.len() <= MAX_PUBLIC_ITEMS,
        "lib.rs exports {} items: {items:?}",
        items.len()
    );
}

/// Which module each module's code refers to (by `crate::`, `super::` and child `use` paths).
fn dependencies(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeMap<&str, &Source> = sources.iter().map(|s| (s.module.as_str(), s)).collect();
    let mut deps = BTreeMap::new();
    for s in sources.iter().filter(|s| s.module != "lib") {
        let mut to = BTreeSet::new();
        let here: Vec<&str> = s.module.split("::").collect();
        let parent = &here[..here.len() - 1];
        for path in paths_after(&s.code, "crate::") {
            to.extend(resolve(&modules, &path));
        }
        for path in paths_after(&s.code, "super::") {
            let full: Vec<String> = parent.iter().map(|p| p.to_string()).chain(path).collect();
            to.extend(resolve(&modules, &full));
        }
        // `use child::…` in a folder's mod.rs; a `pub use child::…` re-export is the folder's
        // facade, not a use of the child
        let private_uses: String = s
            .code
            .lines()
            .filter(|l| !l.trim_start().starts_with("pub"))
            .collect::<Vec<_>>()
            .join("\n");
        for path in paths_after(&private_uses, "use ") {
            if let Some(first) = path.first() {
                let child = format!("{}::{first}", s.module);
                if modules.contains_key(child.as_str()) {
                    to.insert(child);
                }
            }
        }
        to.remove(&s.module);
        to.remove("lib");
        deps.insert(s.module.clone(), to);
    }
    deps
}

/// Every path after `prefix` in `code`, braces expanded (`a::{b, c::D}` → `a::b`, `a::c::D`).
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find(prefix) {
        let start = at + i;
        let boundary = start == 0
            || !code[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        at = start + prefix.len();
        if boundary {
            expand(&code[at..], Vec::new(), &mut out);
        }
    }
    out
}

fn expand(rest: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = base;
    let mut s = rest;
    loop {
        let ident: String = s
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            if let Some(inner) = s.strip_prefix('{') {
                let close = matching_brace(inner);
                for item in split_top(&inner[..close]) {
                    expand(item.trim(), path.clone(), out);
                }
                return;
            }
            break;
        }
        s = &s[ident.len()..];
        if ident != "self" {
            path.push(ident);
        }
        match s.strip_prefix("::") {
            Some(r) => s = r,
            None => break,
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

fn matching_brace(s: &str) -> usize {
    let mut depth = 1;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    s.len()
}

fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[from..]);
    parts
}

/// The module a path names: its longest module prefix, or — when the item after it is only
/// re-exported there — the child module that defines it.
fn resolve(modules: &BTreeMap<&str, &Source>, path: &[String]) -> Option<String> {
    for n in (1..=path.len()).rev() {
        let name = path[..n].join("::");
        let Some(src) = modules.get(name.as_str()) else {
            continue;
        };
        if let Some(item) = path.get(n)
            && !defines(&src.code, item)
            && let Some(child) = reexporting_child(modules, &name, &src.code, item)
        {
            return Some(child);
        }
        return Some(name);
    }
    None
}

fn defines(code: &str, item: &str) -> bool {
    [
        "struct", "enum", "fn", "trait", "type", "const", "static", "mod",
    ]
    .iter()
    .any(|kw| {
        let pat = format!("{kw} {item}");
        code.match_indices(&pat).any(|(i, _)| {
            code[i + pat.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
    })
}

fn reexporting_child(
    modules: &BTreeMap<&str, &Source>,
    module: &str,
    code: &str,
    item: &str,
) -> Option<String> {
    for line in code
        .lines()
        .filter(|l| l.trim_start().starts_with("pub use "))
    {
        for path in paths_after(line, "pub use ") {
            if path.last().is_some_and(|l| l == item) {
                let child = format!("{module}::{}", path[0]);
                if modules.contains_key(child.as_str()) {
                    return Some(child);
                }
            }
        }
    }
    None
}

/// The strongly connected components with more than one member (Tarjan).
fn cycles(deps: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        deps: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a str) {
        st.index.insert(v, st.next);
        st.low.insert(v, st.next);
        st.next += 1;
        st.stack.push(v);
        st.on.insert(v);
        let deps = st.deps;
        for w in deps.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                let lv = st.low[v];
                st.low.insert(v, lv.min(lw));
            } else if st.on.contains(w) {
                let iw = st.index[w];
                let lv = st.low[v];
                st.low.insert(v, lv.min(iw));
            }
        }
        if st.low[v] == st.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = st.stack.pop() {
                st.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                st.found.push(comp);
            }
        }
    }
    let mut st = State {
        deps,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in deps.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.found
}

/// The dependencies between top-level folders (`turn::decode → sinks::csv` is `turn → sinks`).
fn subsystem_dependencies(
    deps: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in deps {
        for to in tos {
            if top(from) != top(to) {
                out.entry(top(from)).or_default().insert(top(to));
            }
        }
    }
    out
}

#[test]
fn no_import_circle_between_files() {
    let deps = dependencies(&sources());
    assert!(
        deps.get("turn::decode")
            .is_some_and(|d| d.contains("sinks::csv")),
        "the dependency scan lost track: {:?}",
        deps.get("turn::decode")
    );
    let found = cycles(&deps);
    assert!(found.is_empty(), "import circles: {found:?}");
}

#[test]
fn no_import_circle_between_subsystems_and_the_graph_never_reaches_the_sinks() {
    let subs = subsystem_dependencies(&dependencies(&sources()));
    let found = cycles(&subs);
    assert!(found.is_empty(), "circles between folders: {found:?}");
    let graph = subs.get("graph").cloned().unwrap_or_default();
    assert!(!graph.contains("sinks"), "graph → sinks: {graph:?}");
    for leaf in ["ffi", "chat"] {
        let d = subs.get(leaf).cloned().unwrap_or_default();
        assert!(
            d.is_empty(),
            "{leaf} must depend on no other subsystem: {d:?}"
        );
    }
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let edge = |d: &mut BTreeMap<String, BTreeSet<String>>, a: &str, b: &str| {
        d.entry(a.into()).or_default().insert(b.into());
    };
    edge(&mut deps, "a", "b");
    edge(&mut deps, "b", "c");
    edge(&mut deps, "c", "a");
    edge(&mut deps, "c", "d");
    assert_eq!(cycles(&deps), vec![vec!["a", "b", "c"]]);
    let paths = paths_after("use crate::a::{b, c::{D, E}};", "crate::");
    assert_eq!(
        paths,
        vec![
            vec!["a".to_string(), "b".into()],
            vec!["a".into(), "c".into(), "D".into()],
            vec!["a".into(), "c".into(), "E".into()],
        ]
    );
}
