//! The flags an engine binary takes, read from its own `--help`, so that `sweep --check` (and
//! `--dry-run`) can refuse a misspelt flag before hour 3 of a sweep instead of letting every
//! run of the cell fail with the engine's `unexpected argument`.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether a flag takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A switch (`--moe-stream`).
    Nothing,
    /// A value (`--cache-mb <MIB|auto>`): the next word is the flag's.
    Value,
    /// An optional value (`--x [<V>]`): the next word is the flag's unless it is a flag.
    Optional,
}

/// The flags of one engine, from its `--help`.
#[derive(Debug, Clone, Default)]
pub struct EngineFlags {
    flags: BTreeMap<String, Takes>,
    /// The usage line names positional arguments (then a bare word is not an error).
    positionals: bool,
}

/// A word of a cell's argv the engine would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// Index into the argv checked.
    pub index: usize,
    /// The word as written (`--cache-mbb`, `--cache-mbb=8`).
    pub word: String,
    /// The known flag closest to it, when one is close.
    pub similar: Option<String>,
}

/// How long `--help` may take; an engine that hangs on it is not checked.
const HELP_TIMEOUT: Duration = Duration::from_secs(10);

impl EngineFlags {
    /// Parses clap-style help: option lines start with at most 6 spaces and a `-`, and a flag
    /// that takes a value is followed by `<NAME>`. Description lines are indented further, so
    /// a continuation such as `    --csv preamble)` is not taken for an option.
    pub fn parse_help(text: &str) -> EngineFlags {
        let mut out = EngineFlags::default();
        for line in text.lines() {
            if let Some(rest) = line.trim_start().strip_prefix("Usage:") {
                out.positionals |= rest
                    .split_whitespace()
                    .skip(1)
                    .any(|w| !w.starts_with("[OPTIONS]") && !w.starts_with('-'));
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            let body = line.trim_start();
            if indent > 6 || !body.starts_with('-') {
                continue;
            }
            // The option spec ends where the description starts (two spaces).
            let spec = body.split("  ").next().unwrap_or(body);
            let takes = if spec.contains("[<") || spec.contains("[=") {
                Takes::Optional
            } else if spec.contains('<') {
                Takes::Value
            } else {
                Takes::Nothing
            };
            for word in spec.split([',', ' ']) {
                let name = word.split('=').next().unwrap_or(word);
                if name.starts_with('-') && name.len() > 1 {
                    out.flags.insert(name.to_string(), takes);
                }
            }
        }
        out
    }

    /// Runs `binary --help` (at most 10 s) and parses it. `Err` says why the flags cannot be
    /// known: the binary does not run here (built for another machine), hangs, or prints
    /// something that is not bmoe-cli's help.
    pub fn from_binary(binary: &Path) -> Result<EngineFlags, String> {
        let mut child = Command::new(binary)
            .arg("--help")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run `{} --help`: {e}", binary.display()))?;
        let mut stdout = child.stdout.take().ok_or("no stdout")?;
        // Read on a thread: a help longer than the pipe buffer must not block the wait.
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if start.elapsed() < HELP_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "`{} --help` did not finish within {} s",
                        binary.display(),
                        HELP_TIMEOUT.as_secs()
                    ));
                }
            }
        }
        let text = reader.join().unwrap_or_default();
        let flags = EngineFlags::parse_help(&text);
        // The runner always passes `-m`: a help without it is not an engine's.
        if !flags.flags.contains_key("--model") && !flags.flags.contains_key("-m") {
            return Err(format!(
                "`{} --help` lists no -m/--model flag (not a bmoe-cli help)",
                binary.display()
            ));
        }
        Ok(flags)
    }

    /// The words of `args` the engine would refuse: unknown flags, and bare words that are no
    /// flag's value when the engine takes no positional argument.
    pub fn unknown(&self, args: &[String]) -> Vec<Unknown> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let word = &args[i];
            i += 1;
            let takes = if word.starts_with("--") {
                let (name, inline) = match word.split_once('=') {
                    Some((n, _)) => (n, true),
                    None => (word.as_str(), false),
                };
                match self.flags.get(name) {
                    Some(t) if inline => {
                        // `--flag=value` on a switch is refused by clap too.
                        if *t == Takes::Nothing {
                            out.push(self.unknown_at(i - 1, word, name));
                        }
                        continue;
                    }
                    Some(t) => *t,
                    None => {
                        out.push(self.unknown_at(i - 1, word, name));
                        // Its value, if it had one, is not a second mistake.
                        if !inline && args.get(i).is_some_and(|n| !n.starts_with('-')) {
                            i += 1;
                        }
                        continue;
                    }
                }
            } else if word.starts_with('-') && word.len() > 1 && word.parse::<f64>().is_err() {
                match self.flags.get(word.as_str()) {
                    Some(t) => *t,
                    // `-c4096`: a short flag with its value attached.
                    None => match word.get(..2).and_then(|s| self.flags.get(s)) {
                        Some(Takes::Value | Takes::Optional) => continue,
                        _ => {
                            out.push(self.unknown_at(i - 1, word, word));
                            continue;
                        }
                    },
                }
            } else {
                if !self.positionals {
                    out.push(Unknown {
                        index: i - 1,
                        word: word.clone(),
                        similar: None,
                    });
                }
                continue;
            };
            match takes {
                Takes::Value => i += 1,
                Takes::Optional if args.get(i).is_some_and(|n| !n.starts_with('-')) => i += 1,
                _ => {}
            }
        }
        out
    }

    fn unknown_at(&self, index: usize, word: &str, name: &str) -> Unknown {
        Unknown {
            index,
            word: word.to_string(),
            similar: self.similar(name),
        }
    }

    /// The known long flag nearest to `name` (edit distance at most a third of its length).
    fn similar(&self, name: &str) -> Option<String> {
        self.flags
            .keys()
            .filter(|k| k.starts_with("--") == name.starts_with("--"))
            .map(|k| (edit_distance(k, name), k))
            .filter(|(d, _)| *d > 0 && *d <= (name.len() / 3).max(1))
            .min()
            .map(|(_, k)| k.clone())
    }
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP: &str = "Run a model\n\nUsage: bmoe-cli [OPTIONS]\n\nOptions:\n  -m, --model <PATH>        Model file\n  -n, --n-predict <N>       Tokens\n      --seed <N>            Seed (recorded in the\n                            --csv preamble)\n      --ignore-eos          Never end\n\nOutputs:\n      --csv <PATH>          CSV\n      --cache-mb <MIB|auto> Budget\n";

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn help_lines_give_flags_and_values() {
        let f = EngineFlags::parse_help(HELP);
        assert_eq!(f.flags.get("-m"), Some(&Takes::Value));
        assert_eq!(f.flags.get("--ignore-eos"), Some(&Takes::Nothing));
        assert_eq!(f.flags.get("--cache-mb"), Some(&Takes::Value));
        // The continuation line `--csv preamble)` must not make --csv a switch.
        assert_eq!(f.flags.get("--csv"), Some(&Takes::Value));
        assert!(!f.positionals);
    }

    #[test]
    fn unknown_words_are_found_with_a_suggestion() {
        let f = EngineFlags::parse_help(HELP);
        assert!(
            f.unknown(&words("-n 8 --cache-mb 16 --ignore-eos --seed=3 -n4"))
                .is_empty()
        );
        let bad = f.unknown(&words("-n 8 --cache-mbb 16 --prefetch"));
        let got: Vec<(usize, &str, Option<&str>)> = bad
            .iter()
            .map(|u| (u.index, u.word.as_str(), u.similar.as_deref()))
            .collect();
        // `16` is the unknown flag's value, not a second mistake.
        assert_eq!(
            got,
            vec![
                (2, "--cache-mbb", Some("--cache-mb")),
                (4, "--prefetch", None)
            ]
        );
        // A bare word where no flag takes it is refused by an engine without positionals.
        let stray = f.unknown(&words("--ignore-eos 16"));
        assert_eq!(stray.len(), 1);
        assert_eq!(stray[0].word, "16");
        assert_eq!(f.unknown(&words("--ignore-eos=1")).len(), 1);
        // A negative number is a value, not a flag; a value beginning with `-` is the flag's.
        assert!(f.unknown(&words("--seed -1")).is_empty());
    }
}
