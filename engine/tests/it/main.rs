//! bmoe-engine's integration tests, in one binary (one link of llama.cpp instead of one per
//! file). Each module is one topic; run one with `cargo test -p bmoe-engine --test it gates::`.

mod architecture;
mod cli_flags;
mod cli_usage;
mod decide;
mod dense_split;
mod gates;
mod overlap;
mod reasoning;
mod routing;
mod session;
mod telemetry;
mod traces;
