//! bmoe-telemetry's table of `bmoe-cli` flags (what bmoe-top reads off a spawned engine's argv)
//! against the flags bmoe-cli really defines: a renamed flag, or one that changed between a
//! switch and a flag with a value, fails here instead of silently going unread.

use bmoe_engine::Cli;
use bmoe_telemetry::cli_flags::CLI_FLAGS;
use clap::CommandFactory;

#[test]
fn every_listed_flag_is_a_bmoe_cli_flag_of_the_same_kind() {
    let cmd = Cli::command();
    for f in CLI_FLAGS.iter().filter(|f| !f.planned) {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(f.long))
            .unwrap_or_else(|| panic!("--{} is in CLI_FLAGS but not a bmoe-cli flag", f.long));
        assert_eq!(
            arg.get_short(),
            f.short,
            "--{}: short spelling differs",
            f.long
        );
        assert_eq!(
            arg.get_action().takes_values(),
            f.takes_value,
            "--{}: takes a value in one and not the other",
            f.long
        );
    }
}

#[test]
fn planned_flags_are_not_bmoe_cli_flags_yet() {
    // a flag that lands in bmoe-cli must lose its `planned` mark, so the check above covers it
    let cmd = Cli::command();
    for f in CLI_FLAGS.iter().filter(|f| f.planned) {
        assert!(
            cmd.get_arguments().all(|a| a.get_long() != Some(f.long)),
            "--{} exists in bmoe-cli now: set planned: false in bmoe-telemetry's CLI_FLAGS",
            f.long
        );
    }
}
