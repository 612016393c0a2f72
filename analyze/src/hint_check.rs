//! Every `hint:` of the crate must be a command that works: each flag a hint names must exist
//! on the subcommand the hint is printed by (or on the subcommand it spells out, as in
//! `` `bmoe-analyze route T --phase all` ``), and a value it gives an enumerated flag must be
//! one of that flag's values. The hints are read from the sources, so a hint added later is
//! checked too; the flags come from the clap definition itself.
//!
//! Which subcommands can print a file's hints is the table [`SUBCOMMANDS_OF`]; a file missing
//! from it whose hints name a flag fails the test, so a new module has to be placed there.

use std::path::{Path, PathBuf};

use clap::CommandFactory as _;

/// Source file (relative to `src/`, longest prefix wins) → the subcommands its hints reach.
/// `*` = every subcommand; `plot` = those with `--plot`; `format` = those with `--format`.
const SUBCOMMANDS_OF: &[(&str, &[&str])] = &[
    ("main.rs", &["*"]),
    ("lib.rs", &["*"]),
    ("error.rs", &["*"]),
    ("table.rs", &["format"]),
    ("pyfmt.rs", &["*"]),
    ("mt19937.rs", &["replay"]),
    ("cli/mod.rs", &["format"]),
    ("cli/compute.rs", &["compute"]),
    ("cli/convert.rs", &["convert"]),
    ("cli/drop.rs", &["drop"]),
    ("cli/io.rs", &["io"]),
    ("cli/metrics.rs", &["metrics"]),
    ("cli/replay.rs", &["replay"]),
    ("cli/route.rs", &["route"]),
    ("convert", &["convert"]),
    ("decode.rs", &["compute", "io"]),
    ("drop.rs", &["drop"]),
    ("metrics", &["metrics"]),
    ("replay.rs", &["replay"]),
    // The trace reader serves every route-trace command; the views only `route`.
    ("route/trace.rs", &["route", "replay", "drop"]),
    ("route", &["route"]),
    ("plot/mod.rs", &["plot"]),
    ("plot/raster.rs", &["plot"]),
    ("plot/compare.rs", &["metrics"]),
    ("plot/decode.rs", &["compute", "io"]),
    ("plot/drop.rs", &["drop"]),
    ("plot/replay.rs", &["replay"]),
    ("plot/route.rs", &["route"]),
    ("plot/timing.rs", &["metrics"]),
];

/// Programs other than bmoe-analyze a hint may quote (their flags are not checked here).
const OTHER_PROGRAMS: &[&str] = &["bmoe-cli", "bmoe-bench", "bmoe-top", "cargo", "python3"];

/// A hint literal, where it was found.
struct Hint {
    file: String,
    line: usize,
    text: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(char),
}

/// A small Rust lexer: identifiers, string literals (escapes kept as written, which is what a
/// reader of the hint sees for everything this test looks at) and punctuation; comments,
/// char literals, lifetimes and numbers dropped. Each token carries its line.
fn lex(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            i += 2;
        } else if ch == 'r' && matches!(c.get(i + 1), Some('"' | '#')) {
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push((Tok::Ident("r".into()), line));
                i += 1;
                continue;
            }
            let start_line = line;
            let mut s = String::new();
            j += 1;
            while j < c.len() {
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                line += usize::from(c[j] == '\n');
                s.push(c[j]);
                j += 1;
            }
            out.push((Tok::Str(s), start_line));
            i = j;
        } else if ch == '"' {
            let start_line = line;
            let mut s = String::new();
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' && i + 1 < c.len() {
                    if c[i + 1] == '\n' {
                        // A line continuation: the next line's indentation is not in the text.
                        i += 2;
                        line += 1;
                        while i < c.len() && c[i].is_whitespace() {
                            line += usize::from(c[i] == '\n');
                            i += 1;
                        }
                        continue;
                    }
                    s.push(c[i]);
                    s.push(c[i + 1]);
                    i += 2;
                    continue;
                }
                line += usize::from(c[i] == '\n');
                s.push(c[i]);
                i += 1;
            }
            i += 1;
            out.push((Tok::Str(s), start_line));
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\'') or a lifetime ('a): skip either.
            if c.get(i + 1) == Some(&'\\') {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let mut s = String::new();
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                s.push(c[i]);
                i += 1;
            }
            if !s.starts_with(|d: char| d.is_ascii_digit()) {
                out.push((Tok::Ident(s), line));
            }
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The hints of one file's non-test code: the string literals of every `hint: <expr>` field
/// (up to the `,` or closing bracket that ends the expression) and of every `fn hint` body.
/// A `hint: <expr>` without a literal, or a shorthand `hint` field, is a problem: the test
/// could not see that hint's text.
fn hints_of(file: &str, src: &str, problems: &mut Vec<String>) -> Vec<Hint> {
    let code = src.split("#[cfg(test)]").next().unwrap_or(src);
    let toks = lex(code);
    let mut out = Vec::new();
    let ident = |k: usize, name: &str| matches!(toks.get(k), Some((Tok::Ident(s), _)) if s == name);
    let punct = |k: usize, p: char| matches!(toks.get(k), Some((Tok::Punct(q), _)) if *q == p);
    for k in 0..toks.len() {
        if !ident(k, "hint") {
            continue;
        }
        let line = toks[k].1;
        if punct(k + 1, ':') && !punct(k + 2, ':') && !(k > 0 && punct(k - 1, ':')) {
            // `hint: <expr>`: a field initialiser or a declaration.
            let mut depth = 0i32;
            let mut lits = Vec::new();
            let mut idents = Vec::new();
            let mut j = k + 2;
            while let Some((t, l)) = toks.get(j) {
                match t {
                    Tok::Punct('(' | '[' | '{') => depth += 1,
                    Tok::Punct(')' | ']' | '}') if depth == 0 => break,
                    Tok::Punct(')' | ']' | '}') => depth -= 1,
                    Tok::Punct(',' | ';') if depth == 0 => break,
                    Tok::Str(s) => lits.push((s.clone(), *l)),
                    Tok::Ident(s) => idents.push(s.clone()),
                    Tok::Punct(_) => {}
                }
                j += 1;
            }
            let forwarded = idents.first().is_some_and(|s| s == "hint");
            let declared = idents == ["String"];
            if lits.is_empty() && !forwarded && !declared {
                problems.push(format!(
                    "{file}:{line}: `hint:` is not a string literal (write the text after `hint:` so this test can check it)"
                ));
            }
            out.extend(lits.into_iter().map(|(text, line)| Hint {
                file: file.to_string(),
                line,
                text,
            }));
        } else if k > 0 && ident(k - 1, "fn") {
            // `fn hint(..) { .. }`: every literal of its body.
            let Some(open) = (k..toks.len()).find(|&j| punct(j, '{')) else {
                continue;
            };
            let mut depth = 0;
            for (t, l) in &toks[open..] {
                match t {
                    Tok::Punct('{') => depth += 1,
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Str(s) => out.push(Hint {
                        file: file.to_string(),
                        line: *l,
                        text: s.clone(),
                    }),
                    _ => {}
                }
            }
        } else if k > 0
            && (punct(k - 1, ',') || punct(k - 1, '{'))
            && (punct(k + 1, ',') || punct(k + 1, '}'))
            && !is_pattern(&toks, k)
        {
            problems.push(format!(
                "{file}:{line}: shorthand `hint` field hides the hint text from this test; write `hint: \"…\"`"
            ));
        }
    }
    out
}

/// Whether the braces around token `k` are a pattern (`{ hint, .. }`), not a struct literal.
fn is_pattern(toks: &[(Tok, usize)], k: usize) -> bool {
    let mut depth = 0i32;
    for w in toks[k..].windows(2) {
        match (&w[0].0, &w[1].0) {
            (Tok::Punct('(' | '[' | '{'), _) => depth += 1,
            (Tok::Punct(')' | ']' | '}'), _) if depth == 0 => return false,
            (Tok::Punct(')' | ']' | '}'), _) => depth -= 1,
            (Tok::Punct('.'), Tok::Punct('.')) if depth == 0 => return true,
            _ => {}
        }
    }
    false
}

/// The subcommands a file's hints reach, by [`SUBCOMMANDS_OF`] (longest prefix).
fn context(cmd: &clap::Command, file: &str) -> Option<Vec<String>> {
    let (_, subs) = SUBCOMMANDS_OF
        .iter()
        .filter(|(prefix, _)| file.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())?;
    let mut out = Vec::new();
    for &s in *subs {
        // A group is the subcommands with that flag (`*`: every one but clap's `help`).
        let with = |flag: Option<&str>| -> Vec<String> {
            cmd.get_subcommands()
                .filter(|sub| sub.get_name() != "help")
                .filter(|sub| {
                    flag.is_none_or(|f| sub.get_arguments().any(|a| a.get_long() == Some(f)))
                })
                .map(|sub| sub.get_name().to_string())
                .collect()
        };
        match s {
            "*" => out.extend(with(None)),
            "plot" | "format" => out.extend(with(Some(s))),
            name => out.push(name.to_string()),
        }
    }
    Some(out)
}

/// A word of a hint with the punctuation around it taken off.
fn bare(word: &str) -> &str {
    word.trim_start_matches(['(', '[', '"', '\''])
        .trim_end_matches([',', '.', ';', ':', ')', ']', '"', '\''])
}

/// The flags of one word: `--phase`, `--phase/--turn`, `-o`.
fn flags_in(word: &str) -> Vec<&str> {
    bare(word)
        .split('/')
        .filter(|p| {
            let b = p.as_bytes();
            (p.starts_with("--") && b.get(2).is_some_and(u8::is_ascii_lowercase))
                || (b.len() == 2 && b[0] == b'-' && b[1].is_ascii_alphabetic())
        })
        .collect()
}

/// What is wrong with one hint of a file whose hints reach `subs` (empty: nothing).
fn check(cmd: &clap::Command, subs: Option<&[String]>, file: &str, hint: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let names: Vec<&str> = cmd.get_subcommands().map(clap::Command::get_name).collect();
    // Backticks alternate: outside, inside, outside, …
    for (n, segment) in hint.split('`').enumerate() {
        let words: Vec<&str> = segment.split_whitespace().collect();
        let mut targets: Option<Vec<String>> = subs.map(<[String]>::to_vec);
        let mut start = 0;
        if n % 2 == 1 {
            match words.first().copied() {
                Some("bmoe-analyze") => {
                    start = 2;
                    match words.get(1) {
                        Some(s) if names.contains(s) => targets = Some(vec![(*s).to_string()]),
                        Some(s) if s.starts_with('{') => targets = None,
                        other => {
                            problems.push(format!(
                                "`bmoe-analyze {}`: no such subcommand",
                                other.unwrap_or(&"")
                            ));
                            continue;
                        }
                    }
                }
                Some(w) if names.contains(&w) => {
                    start = 1;
                    targets = Some(vec![w.to_string()]);
                }
                Some(w) if OTHER_PROGRAMS.contains(&w) => continue,
                _ => {}
            }
        }
        for (i, word) in words.iter().enumerate().skip(start) {
            for flag in flags_in(word) {
                let Some(targets) = &targets else {
                    problems.push(format!(
                        "{flag}: the hint names no subcommand this test can check it against ({file} is not in SUBCOMMANDS_OF, or the subcommand is a placeholder)"
                    ));
                    continue;
                };
                for t in targets {
                    let Some(sub) = cmd.find_subcommand(t) else {
                        problems.push(format!("no subcommand {t}"));
                        continue;
                    };
                    let arg = sub.get_arguments().find(|a| {
                        if let Some(long) = flag.strip_prefix("--") {
                            a.get_long() == Some(long)
                        } else {
                            a.get_short() == flag.chars().nth(1)
                        }
                    });
                    let Some(arg) = arg else {
                        problems.push(format!("`{t}` has no {flag}"));
                        continue;
                    };
                    // An enumerated value right after the flag must be one of its values.
                    let values: Vec<String> = arg
                        .get_possible_values()
                        .iter()
                        .map(|v| v.get_name().to_string())
                        .collect();
                    let takes = arg.get_num_args().is_some_and(|r| r.min_values() > 0);
                    if let (true, false, Some(next)) = (takes, values.is_empty(), words.get(i + 1))
                    {
                        let next = bare(next);
                        if !next.is_empty()
                            && next
                                .chars()
                                .all(|ch| ch.is_ascii_lowercase() || ch == '/' || ch == '|')
                        {
                            for v in next.split(['/', '|']) {
                                if !values.iter().any(|x| x == v) {
                                    problems.push(format!(
                                        "`{t} {flag} {v}`: {v} is not one of {}",
                                        values.join(", ")
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    problems
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn cli() -> clap::Command {
    let mut cmd = super::Cli::command();
    cmd.build();
    cmd
}

#[test]
fn every_flag_a_hint_names_exists_on_its_subcommand() {
    let cmd = cli();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut problems = Vec::new();
    let (mut hints, mut with_flags) = (0, 0);
    for path in files {
        let rel = path
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "hint_check.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        let subs = context(&cmd, &rel);
        for h in hints_of(&rel, &text, &mut problems) {
            hints += 1;
            with_flags += usize::from(h.text.split_whitespace().any(|w| !flags_in(w).is_empty()));
            for p in check(&cmd, subs.as_deref(), &h.file, &h.text) {
                problems.push(format!("{}:{}: hint {:?}: {p}", h.file, h.line, h.text));
            }
        }
    }
    // The scan must have found the hints it is meant to check (not an empty pass).
    assert!(hints >= 30, "only {hints} hints found in src/");
    assert!(with_flags >= 15, "only {with_flags} hints name a flag");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_rejects_the_hints_of_issue_20() {
    let cmd = cli();
    let compute = context(&cmd, "decode.rs");
    // `compute` has no --phase (the old generic "no rows" hint).
    let old = "check the file and the --phase/--turn filters (try --phase all)";
    let p = check(&cmd, compute.as_deref(), "decode.rs", old);
    assert!(p.iter().any(|p| p == "`compute` has no --phase"), "{p:?}");
    assert!(p.iter().any(|p| p == "`io` has no --turn"), "{p:?}");
    // A flag of the right subcommand with a value it does not take.
    let route = context(&cmd, "route/mod.rs");
    let p = check(
        &cmd,
        route.as_deref(),
        "route/mod.rs",
        "try `--phase every`",
    );
    assert_eq!(
        p,
        ["`route --phase every`: every is not one of decode, prefill, all"]
    );
    // A spelled-out command is checked against its own subcommand, not the file's.
    let p = check(
        &cmd,
        route.as_deref(),
        "route/mod.rs",
        "run `bmoe-analyze replay T --view hot`",
    );
    assert_eq!(p, ["`replay` has no --view"]);
    let p = check(
        &cmd,
        route.as_deref(),
        "route/mod.rs",
        "run `bmoe-analyze plots T`",
    );
    assert_eq!(p, ["`bmoe-analyze plots`: no such subcommand"]);
    // Correct hints pass; another program's flags are not bmoe-analyze's.
    for ok in [
        "choose --steps and --layers within the rows' ranges (without --steps, a --max-steps above 0)",
        "use --plot with --view hot, --view reuse or --view matrix",
        "record one with `bmoe-cli --route-trace FILE`",
        "add `--phase all` to keep prefill and decode rows",
    ] {
        assert_eq!(
            check(&cmd, route.as_deref(), "route/mod.rs", ok),
            Vec::<String>::new(),
            "{ok}"
        );
    }
    // A file no table entry covers cannot have its flags checked.
    assert!(context(&cmd, "newthing.rs").is_none());
    assert!(!check(&cmd, None, "newthing.rs", "pass --phase all").is_empty());
}

#[test]
fn hints_are_read_from_field_inits_and_fn_hint_bodies_only() {
    let src = r#"
        fn f() -> E {
            // hint: "--nope in a comment"
            let s = "hint: --nope in a string";
            E::Invalid { message: format!("x {}", 1), hint: format!("use --a {}", "--b") }
        }
        fn hint(&self) -> String { match self { A => "use --c".into(), B => x.clone() } }
        fn g() -> E { E::Invalid { message, hint } }
        #[cfg(test)]
        mod tests { fn t() { E::Invalid { message: m, hint: "--test-only".into() }; } }
    "#;
    let mut problems = Vec::new();
    let texts: Vec<String> = hints_of("x.rs", src, &mut problems)
        .into_iter()
        .map(|h| h.text)
        .collect();
    assert_eq!(texts, ["use --a {}", "--b", "use --c"]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("shorthand `hint`"), "{problems:?}");
}
