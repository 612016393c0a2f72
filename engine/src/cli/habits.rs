//! llama.cpp's flags that bmoe-cli does not take, recognised before clap parses the command line.
//!
//! People come to bmoe-cli from `llama-cli` and type its flags. Left to clap, several of them
//! turn into baffling errors about other flags — `-ngl 0` parses as `-n gl` (`invalid value 'gl'
//! for '--n-predict'`), `-cnv` as `-c nv`, `-fa` as `-f a` (a prompt file named `a`) — so each is
//! recognised as a whole word first and answered with what bmoe-cli does instead.

use super::error::ConfigError;

/// One llama.cpp flag bmoe-cli does not take, and what to do instead.
struct Habit {
    /// Its spellings, as llama.cpp takes them.
    spellings: &'static [&'static str],
    /// What is wrong with it here.
    message: &'static str,
    /// What bmoe-cli does instead.
    hint: &'static str,
}

const HABITS: &[Habit] = &[
    Habit {
        spellings: &["-ngl", "--n-gpu-layers", "--gpu-layers"],
        message: "bmoe-cli runs on the CPU only and offloads no layers to a GPU",
        hint: "drop it; to run a model bigger than RAM, stream its experts from flash with --moe-stream (and --cache-mb N to keep some in memory)",
    },
    Habit {
        spellings: &["-fa", "--flash-attn"],
        message: "bmoe-cli leaves the attention kernel to llama.cpp's CPU default and has no switch for it",
        hint: "drop it (a prompt file is -f FILE, with a space)",
    },
    Habit {
        spellings: &["-b", "--batch-size"],
        message: "bmoe-cli prefills the prompt as one logical batch of up to -c/--ctx-size tokens",
        hint: "drop it; set the physical batch with --ubatch N",
    },
    Habit {
        spellings: &["-cnv", "--conversation"],
        message: "bmoe-cli has no interactive chat mode",
        hint: "for a conversation, run --session (one JSON request per stdin line, the model stays loaded; see docs/session.md), with --chatml for the model's chat template",
    },
    Habit {
        spellings: &["--no-mmap"],
        message: "bmoe-cli always maps the model file",
        hint: "to keep the dense weights out of the page cache, copy them into anonymous memory with --moe-stream --dense-weights anon (the experts are then streamed)",
    },
];

/// The first llama.cpp habit in `args` (without the program name), as a flag error; `None` when
/// there is none. Every word is looked at, as clap would: a word that starts with `-` is a flag
/// to clap even after a flag that takes a value (`-p -fa` is not a prompt), while an attached
/// value (`--prompt=-fa`) is not; nothing after `--` is. `-ngl=0` is recognised too.
pub(super) fn llama_cpp_habit(args: &[String]) -> Option<ConfigError> {
    for word in args.iter().take_while(|w| *w != "--") {
        let flag = word.split_once('=').map_or(word.as_str(), |(f, _)| f);
        if let Some(h) = HABITS.iter().find(|h| h.spellings.contains(&flag)) {
            return Some(ConfigError::new(
                h.spellings[0],
                format!("{flag} is a llama.cpp flag: {}", h.message),
                h.hint,
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn habit(args: &[&str]) -> Option<ConfigError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        llama_cpp_habit(&args)
    }

    #[test]
    fn each_habit_is_named_with_what_to_do_instead() {
        for (args, flag, hint) in [
            (&["-m", "x", "-ngl", "0"][..], "-ngl", "--moe-stream"),
            (&["--n-gpu-layers=99"], "--n-gpu-layers", "--moe-stream"),
            (&["-fa"], "-fa", "-f FILE"),
            (&["--flash-attn", "on"], "--flash-attn", "-f FILE"),
            (&["-b", "512"], "-b", "--ubatch"),
            (&["--batch-size", "512"], "--batch-size", "--ubatch"),
            (&["-cnv"], "-cnv", "--session"),
            (&["--conversation"], "--conversation", "--session"),
            (&["--no-mmap"], "--no-mmap", "--dense-weights anon"),
        ] {
            let e = habit(args).unwrap_or_else(|| panic!("{args:?} not recognised"));
            assert!(
                e.message
                    .starts_with(&format!("{flag} is a llama.cpp flag: ")),
                "{args:?}: {}",
                e.message
            );
            assert!(e.hint.contains(hint), "{args:?}: {}", e.hint);
        }
    }

    #[test]
    fn attached_values_and_words_after_double_dash_are_not_flags() {
        assert!(habit(&["--prompt=-ngl", "-p=-fa"]).is_none());
        assert!(habit(&["-p", "run -ngl 0 on a GPU"]).is_none());
        assert!(habit(&["--", "-ngl"]).is_none());
        assert!(habit(&["--prompt=x", "-cnv"]).is_some());
        // clap takes a word starting with '-' as a flag, even after -p: so does this check
        assert!(habit(&["-p", "-fa"]).is_some());
        // bmoe-cli's own spellings are left to clap
        assert!(habit(&["-n", "5", "-c", "64", "-f", "a", "--moe-stream", "-b1"]).is_none());
    }
}
