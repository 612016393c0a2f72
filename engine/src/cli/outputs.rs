//! What the run writes: the per-token protocol lines, the metrics CSV and the traces.

use crate::graph::timing::Granularity;
use clap::Args;
use std::path::PathBuf;

/// Output flags.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Machine-readable per-token lines (BMOE_LOAD / BMOE_PROGRESS) on stdout
    #[arg(long = "progress")]
    pub progress: bool,
    /// Per-token metrics CSV (`# bmoe_metrics v2`), flushed per row
    #[arg(long = "csv", value_name = "PATH")]
    pub csv: Option<PathBuf>,
    /// Route trace (`# route_trace v1`): one row per routed expert, flushed per decode
    /// (a diagnostic: it slows the run; needs --moe-stream)
    #[arg(long = "route-trace", value_name = "PATH")]
    pub route_trace: Option<PathBuf>,
    /// Io trace (`# io_trace v1`): one row per expert read, flushed per decode (needs --moe-stream)
    #[arg(long = "io-trace", value_name = "PATH")]
    pub io_trace: Option<PathBuf>,
    /// Compute trace (`# compute_trace v1`): one row per graph node, each node isolated (a
    /// diagnostic: it serialises the graph; works without --moe-stream)
    #[arg(
        long = "compute-trace",
        value_name = "PATH",
        conflicts_with = "compute_trace_layers"
    )]
    pub compute_trace: Option<PathBuf>,
    /// Compute trace at layer granularity: one row per segment (pre, blk.<il>, post)
    #[arg(long = "compute-trace-layers", value_name = "PATH")]
    pub compute_trace_layers: Option<PathBuf>,
    /// Print a hash of every step's logits to stderr (identity gates)
    #[arg(long = "dump-logits-hash", hide = true)]
    pub dump_logits_hash: bool,
}

impl OutputArgs {
    /// The compute trace asked for: its file and granularity.
    pub(super) fn compute_trace(&self) -> Option<(PathBuf, Granularity)> {
        match (&self.compute_trace, &self.compute_trace_layers) {
            (Some(p), _) => Some((p.clone(), Granularity::Node)),
            (None, Some(p)) => Some((p.clone(), Granularity::Layer)),
            (None, None) => None,
        }
    }
}
