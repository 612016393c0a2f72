//! The run's files: the metrics CSV and the three traces. The graph's recorders collect a
//! decode's route and compute rows; after each decode they are handed to the sinks here, with
//! the streamer's reads for the io trace. A write error stops that file: a warning on stderr,
//! the file cut back to its last complete write, and the error kept — the run is then not a
//! good one, whatever else happens (one-shot: exit 1 at the end; session: a `BMOE_ERROR`).

use crate::cli::RunConfig;
use crate::error::EngineError;
use crate::ffi::Context;
use crate::graph::hook::MoeHook;
use crate::graph::read_steps::ReadSteps;
use crate::graph::routes::RouteRecorder;
use crate::graph::span::DecodeSpan;
use crate::graph::timing::NodeTimer;
use crate::sinks::SinkError;
use crate::sinks::compute_trace::ComputeTraceWriter;
use crate::sinks::csv::{CsvSink, ResolvedRun, run_info};
use crate::sinks::io_trace::IoTraceWriter;
use crate::sinks::route_trace::{RouteTraceWriter, trace_info};
use bmoe_gguf::GgufModel;
use bmoe_gguf::info::ModelInfo;
use bmoe_telemetry::metrics::{SummaryTrailer, TokenRow};
use bmoe_telemetry::trace::{DecodeTraceInfo, RouteTraceInfo};
use std::io::Write;
use std::time::Instant;

/// The files a run writes.
#[derive(Default)]
pub(super) struct Outputs {
    /// `--csv`.
    pub csv: Option<CsvSink>,
    routes: Option<RouteTraceWriter>,
    nodes: Option<ComputeTraceWriter>,
    io: Option<IoTraceWriter>,
    /// The write errors that stopped a file, in the order they happened.
    failed: Vec<SinkError>,
}

impl Outputs {
    /// Creates every file the run writes (their preambles name the resolved configuration) and
    /// arms the hook's recorders for the traces.
    pub fn open(
        cfg: &RunConfig,
        resolved: &ResolvedRun,
        streaming: bool,
        ctx: &mut Context<'_, MoeHook>,
    ) -> Result<Self, EngineError> {
        let mut out = Outputs::default();
        if let (Some(path), true) = (&cfg.route_trace, streaming) {
            let info = route_trace_info(cfg, resolved.n_expert_used)?;
            out.routes = Some(RouteTraceWriter::create(path, &info)?);
            if let Some(h) = ctx.hook_mut() {
                h.record_routes(RouteRecorder::new(
                    resolved.n_expert_used as usize,
                    cfg.n_ubatch as usize,
                ));
            }
        }
        if let Some(path) = &cfg.csv {
            out.csv = Some(CsvSink::create(path, &run_info(cfg, resolved))?);
        }
        let info = DecodeTraceInfo {
            model: Some(cfg.model.display().to_string()),
            arch: Some(resolved.arch.clone()),
            n_layer: Some(resolved.n_layer),
            n_threads: Some(cfg.threads as u64),
            io_threads: Some(resolved.io_threads),
            o_direct: Some(resolved.o_direct),
            overlap: Some(resolved.overlap.is_some()),
            ..Default::default()
        };
        if let (Some(path), true) = (&cfg.io_trace, streaming) {
            out.io = Some(IoTraceWriter::create(path, &info)?);
            if let Some(h) = ctx.hook_mut() {
                h.record_read_steps(ReadSteps::new(
                    resolved.n_expert_used as usize,
                    cfg.n_ubatch as usize,
                ));
            }
            if let Some(s) = ctx.hook_mut().and_then(MoeHook::streamer_mut) {
                s.log_io();
            }
        }
        if let Some((path, granularity)) = &cfg.compute_trace {
            out.nodes = Some(ComputeTraceWriter::create(path, &info, *granularity)?);
            if let Some(h) = ctx.hook_mut() {
                h.time_nodes(NodeTimer::new(*granularity));
            }
        }
        Ok(out)
    }

    /// Appends a row to the CSV (when it is still written).
    pub fn csv_row(&mut self, row: &TokenRow, note: &mut dyn Write) {
        if let Some(sink) = self.csv.as_mut()
            && let Err(e) = sink.write_row(row)
        {
            self.stop_csv(e, note);
        }
    }

    /// Appends a `# summary` trailer to the CSV (when it is still written).
    pub fn csv_summary(&mut self, t: &SummaryTrailer, note: &mut dyn Write) {
        if let Some(sink) = self.csv.as_mut()
            && let Err(e) = sink.write_summary(t)
        {
            self.stop_csv(e, note);
        }
    }

    fn stop_csv(&mut self, e: SinkError, note: &mut dyn Write) {
        warn(note, &e, "the metrics stop here");
        if let Some(sink) = self.csv.take() {
            sink.abandon();
        }
        self.failed.push(e);
    }

    /// The write errors that stopped a file so far.
    pub fn failures(&self) -> &[SinkError] {
        &self.failed
    }

    /// The first write error that stopped a file, taken (what the run ends with).
    pub fn take_failure(&mut self) -> Option<SinkError> {
        (!self.failed.is_empty()).then(|| self.failed.remove(0))
    }

    /// Tells the recorders which decode the next routings and nodes belong to; `start` opens
    /// the decode's bracket (the compute trace's first row starts there).
    pub fn begin_decode(ctx: &mut Context<'_, MoeHook>, span: DecodeSpan, start: Instant) {
        if let Some(hook) = ctx.hook_mut() {
            hook.begin_decode(span, start);
        }
    }

    /// Writes what the decode just done recorded (its route and compute rows, its reads — each
    /// stamped with the position of the token whose routing asked for it) and flushes each
    /// trace; a write error stops that trace with a warning. `end` closed the decode's bracket
    /// (the compute trace's last row ends there, not at this later call).
    pub fn end_decode(
        &mut self,
        ctx: &mut Context<'_, MoeHook>,
        span: DecodeSpan,
        end: Instant,
        note: &mut dyn Write,
    ) {
        let Some(hook) = ctx.hook_mut() else { return };
        let records = hook.end_decode(end);
        if let Some(w) = self.routes.as_mut()
            && let Err(e) = w.write_decode(&records.routes)
        {
            warn(note, &e, "the route trace stops here");
            if let Some(w) = self.routes.take() {
                w.abandon();
            }
            self.failed.push(e);
            hook.stop_routes();
        }
        if let Some(w) = self.nodes.as_mut()
            && let Err(e) = w.write_decode(&records.nodes)
        {
            warn(note, &e, "the compute trace stops here");
            if let Some(w) = self.nodes.take() {
                w.abandon();
            }
            self.failed.push(e);
            hook.stop_timing();
        }
        let Some(w) = self.io.as_mut() else { return };
        let Some(s) = hook.streamer_mut() else { return };
        let reads = s.take_io_log();
        let phase = if span.prefill {
            bmoe_telemetry::trace::PHASE_PREFILL
        } else {
            bmoe_telemetry::trace::PHASE_DECODE
        };
        let steps = match &records.reads {
            Some(stamps) => stamps.steps(&reads),
            None => vec![span.last_pos(); reads.len()],
        };
        if let Err(e) = w.write_decode(span.turn, phase, &steps, &reads) {
            warn(note, &e, "the io trace stops here");
            if let Some(w) = self.io.take() {
                w.abandon();
            }
            self.failed.push(e);
        }
    }
}

fn warn(note: &mut dyn Write, e: &SinkError, what: &str) {
    let _ = writeln!(note, "bmoe: warning: {e} — {what}");
}

/// The route trace preamble from the model file.
fn route_trace_info(cfg: &RunConfig, n_expert_used: u64) -> Result<RouteTraceInfo, EngineError> {
    let model = GgufModel::open(&cfg.model).map_err(EngineError::RouteTraceModel)?;
    let info = ModelInfo::from_model(&model).map_err(EngineError::RouteTraceModel)?;
    let mut t = trace_info(&cfg.model.display().to_string(), &info, n_expert_used);
    // a replayed run's routing is the replayed trace's, not this model's
    if let Some((path, _)) = &cfg.routing.replay {
        t.extra.insert("route_replay", path.display().to_string());
    }
    Ok(t)
}
