//! `bmoe-cli`: run a GGUF model; with `--moe-stream`, stream the routed experts from flash.

use bmoe_engine::{Cli, EngineError, ExitStatus, RunConfig};
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(e) = Cli::llama_cpp_habit(&args) {
        let e = EngineError::from(e);
        eprintln!("error: {e}\nhint: {}", e.hint());
        return e.exit_status().into();
    }
    let cli = match Cli::parse_args(args) {
        Ok(cli) => cli,
        // --help and --version print as clap writes them (stdout, exit 0)
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("{}", usage_error(&e.render().to_string()));
            return ExitStatus::Usage.into();
        }
    };
    if let Some(listing) = cli.archs_listing() {
        print!("{listing}");
        return ExitStatus::Success.into();
    }
    if let Some(listing) = cli.devices_listing() {
        print!("{listing}");
        return ExitStatus::Success.into();
    }
    let mut err = std::io::stderr();
    let cfg = match cli.into_config(&mut err) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}\nhint: {}", e.hint());
            return e.exit_status().into();
        }
    };
    match execute(&cfg, &mut err) {
        Ok(status) => status.into(),
        Err(e) => {
            // the answer or the protocol lines may have stopped mid-line: start a new one
            eprintln!("\nerror: {e}\nhint: {}", e.hint());
            e.exit_status().into()
        }
    }
}

/// A one-shot run, or a session serving stdin requests: how it ended (completed, or
/// interrupted by a SIGINT).
fn execute(cfg: &RunConfig, err: &mut dyn Write) -> Result<ExitStatus, EngineError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = if cfg.session {
        bmoe_engine::serve(cfg, &mut out, err)
    } else {
        bmoe_engine::run(cfg, &mut out, err)
    };
    let _ = out.flush();
    result
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
