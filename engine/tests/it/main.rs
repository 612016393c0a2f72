//! bmoe-engine's integration tests, in one binary (one link of llama.cpp instead of one per
//! file). Each module is one topic; run one with `cargo test -p bmoe-engine --test it gates::`.

mod arch_checks;
mod architecture;
mod auto;
mod cgroup;
mod chat_templates;
mod cli_flags;
mod cli_usage;
mod decide;
mod dense_split;
mod devices;
mod digest;
mod first_load;
mod full_disk;
mod gates;
mod hostile_model;
mod mtp;
mod overlap;
mod predict;
mod prefetch;
#[cfg(feature = "prefill-device")]
mod prefill_device;
mod reasoning;
mod routing;
mod row_stream;
mod session;
mod signals;
mod speculation;
mod telemetry;
mod tiny;
mod traces;
