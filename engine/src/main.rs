//! `bmoe-cli`: run a GGUF model; with `--moe-stream`, stream the routed experts from flash.

use bmoe_engine::cli::Cli;
use bmoe_engine::model::default_model;
use bmoe_engine::model::registry::list_archs_text;
use bmoe_engine::turn::run;
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print as clap writes them (stdout, exit 0)
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("{}", usage_error(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    if cli.version {
        println!("{}", bmoe_engine::VERSION);
        return ExitCode::SUCCESS;
    }
    if cli.list_archs {
        print!("{}", list_archs_text());
        return ExitCode::SUCCESS;
    }
    if cli.model.is_none() {
        // the README's first command runs without -m: use the built-in tiny model
        let Some(dir) = default_model::cache_dir() else {
            eprintln!(
                "error: no model given (-m/--model) and no cache folder for the built-in one\nhint: pass -m model.gguf, or set BMOE_CACHE_DIR"
            );
            return ExitCode::from(2);
        };
        match default_model::ensure_in(&dir) {
            Ok((path, origin)) => {
                let how = match origin {
                    default_model::Origin::Cached => "cached",
                    default_model::Origin::Synthesised => "synthesised now",
                };
                eprintln!(
                    "bmoe: no -m given — using the built-in tiny synthetic MoE model {} ({how})",
                    path.display()
                );
                cli.model = Some(path);
            }
            Err(e) => {
                eprintln!(
                    "error: {e}\nhint: pass -m model.gguf, or point BMOE_CACHE_DIR at a writable folder"
                );
                return ExitCode::from(1);
            }
        }
    }
    let cfg = match cli.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}\nhint: {}", e.message, e.hint);
            return ExitCode::from(2);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut err = std::io::stderr();
    let result = if cfg.session {
        bmoe_engine::session::serve(&cfg, &mut out, &mut err)
    } else {
        run(&cfg, &mut out, &mut err).map(drop)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            eprintln!("\nerror: {}\nhint: {}", e.message, e.hint);
            ExitCode::from(1)
        }
    }
}

/// A clap usage error in the project's style: clap's message and usage line, then a `hint:` line
/// in place of clap's closing "For more information, try '--help'.".
fn usage_error(clap_text: &str) -> String {
    let text = clap_text.trim_end();
    let text = text
        .strip_suffix("For more information, try '--help'.")
        .unwrap_or(text)
        .trim_end();
    format!("{text}\nhint: bmoe-cli --help lists every flag")
}
