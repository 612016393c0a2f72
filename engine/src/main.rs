//! `bmoe-cli`: run a GGUF model; with `--moe-stream`, stream the routed experts from flash.

use bmoe_engine::config::Cli;
use bmoe_engine::registry::list_archs_text;
use bmoe_engine::run::run;
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.version {
        println!("{}", bmoe_engine::VERSION);
        return ExitCode::SUCCESS;
    }
    if cli.list_archs {
        print!("{}", list_archs_text());
        return ExitCode::SUCCESS;
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
    match run(&cfg, &mut out, &mut err) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            eprintln!("\nerror: {}\nhint: {}", e.message, e.hint);
            ExitCode::from(1)
        }
    }
}
