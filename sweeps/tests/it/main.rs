//! `bmoe-bench`'s integration tests as one binary, linked once instead of once per file:
//! `model synth|inspect` (`model_cli`) and on hostile GGUF files (`model_hostile`), `report` statistics (`report_stats`) and on
//! interrupted or few-run results (`report_partial`), `run` (`run_cli`), sweeps on the local
//! device (`sweep_local`) and over ssh (`sweep_ssh`), against the real engine's flags and
//! errors (`sweep_engine`), with progress bars in a real terminal (`sweep_tty`), and the helpers
//! the sweep tests share (`sweep_common`).

mod hostile;
mod model_cli;
mod model_hostile;
mod report_class;
mod report_export;
mod report_partial;
mod report_stats;
mod run_cli;
mod sweep_common;
mod sweep_engine;
mod sweep_local;
mod sweep_orphan;
mod sweep_ssh;
mod sweep_tty;
