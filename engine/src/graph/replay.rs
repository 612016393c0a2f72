//! `--route-replay TRACE`: the decode routings of a recorded route trace, served one decode step
//! at a time so a model of the same shape routes as the recorded one did.
//!
//! Only decode steps (`phase=1`) are replayed: a prefill routes the run's own prompt. Steps are
//! taken in file order (a session trace's turns one after the other); a cell the trace does not
//! hold completely is left to the run's own router.

use bmoe_telemetry::trace::{PHASE_DECODE, RouteTraceReader};
use std::path::{Path, PathBuf};

/// What to do when the run outlives the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayEnd {
    /// The run stops after the trace's last decode step.
    Stop,
    /// The trace starts over from its first decode step.
    Cycle,
}

impl ReplayEnd {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayEnd::Stop => "stop",
            ReplayEnd::Cycle => "cycle",
        }
    }
}

/// One layer of one replayed step: the expert of every slot, and the recorded weights when the
/// trace has all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayCell {
    /// Expert ids, slot order.
    pub ids: Vec<i32>,
    /// The applied weights, slot order (`None` when any was `nan`).
    pub weights: Option<Vec<f32>>,
}

/// Why a trace cannot be replayed on this model.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file is not a readable route trace.
    #[error("--route-replay: {0}")]
    Read(#[from] bmoe_telemetry::Error),
    /// The preamble lacks a shape key.
    #[error("--route-replay {path}: the trace's preamble has no {key}")]
    MissingKey {
        /// The trace.
        path: PathBuf,
        /// `n_layer`, `n_expert` or `n_expert_used`.
        key: &'static str,
    },
    /// The trace was routed by a model of another shape.
    #[error(
        "--route-replay {path}: the trace's {key}={trace} differs from the model's {key}={model}"
    )]
    Mismatch {
        /// The trace.
        path: PathBuf,
        /// Which fact differs.
        key: &'static str,
        /// The trace's value.
        trace: u64,
        /// The model's value.
        model: u64,
    },
    /// A row names a layer, slot or expert outside the shape its own preamble states.
    #[error(
        "--route-replay {path}: decode row {row} (step {step}, layer {layer}) has {what} outside the preamble's shape"
    )]
    OutOfShape {
        /// The trace.
        path: PathBuf,
        /// 1-based row number (after the header).
        row: u64,
        /// The row's step.
        step: i64,
        /// The row's layer.
        layer: u32,
        /// `layer`, `slot` or `expert`.
        what: &'static str,
    },
    /// No decode rows at all.
    #[error("--route-replay {path}: the trace has no decode rows (phase=1) to replay")]
    NoDecodeSteps {
        /// The trace.
        path: PathBuf,
    },
}

impl ReplayError {
    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            ReplayError::Read(_) => {
                "give a route trace written by bmoe-cli --route-trace (`# route_trace v1`)".into()
            }
            ReplayError::MissingKey { .. } => {
                "the preamble's model line must carry n_layer, n_expert and n_expert_used".into()
            }
            ReplayError::Mismatch { key, trace, .. } => match *key {
                "n_expert_used" => {
                    format!("pass --n-expert-used {trace} to route as the trace did")
                }
                _ => format!(
                    "replay on a model of the trace's shape (bmoe-bench model synth --layers/--experts/--top-k; {key}={trace})"
                ),
            },
            ReplayError::OutOfShape { .. } => "the trace is damaged; record it again".into(),
            ReplayError::NoDecodeSteps { .. } => {
                "record the trace with -n above 0 (prefill rows are not replayed)".into()
            }
        }
    }
}

/// The model shape a trace must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayShape {
    /// Block count.
    pub n_layer: u64,
    /// Experts per MoE layer.
    pub n_expert: u64,
    /// Effective top-k.
    pub n_expert_used: u64,
}

/// The decode steps of a trace, and where the run is in them.
#[derive(Debug, Clone)]
pub struct RouteReplay {
    path: PathBuf,
    steps: Vec<Vec<Option<ReplayCell>>>,
    end: ReplayEnd,
    /// Decode steps served so far (past the end under `Cycle`).
    served: usize,
    /// The step the current decode routes by (`None` in prefill, or once a `Stop` trace ran out).
    current: Option<usize>,
}

impl RouteReplay {
    /// Reads `path` and checks it against the model's `shape`.
    ///
    /// # Errors
    /// A file that is no route trace, a shape that differs (naming which), rows outside the
    /// shape, or no decode rows.
    pub fn open(path: &Path, shape: ReplayShape, end: ReplayEnd) -> Result<Self, ReplayError> {
        let reader = RouteTraceReader::open(path)?;
        let info = reader.info().clone();
        let owned = path.to_path_buf();
        for (key, trace, model) in [
            ("n_layer", info.n_layer, shape.n_layer),
            ("n_expert", info.n_expert, shape.n_expert),
            ("n_expert_used", info.n_expert_used, shape.n_expert_used),
        ] {
            let trace = trace.ok_or_else(|| ReplayError::MissingKey {
                path: owned.clone(),
                key,
            })?;
            if trace != model {
                return Err(ReplayError::Mismatch {
                    path: owned,
                    key,
                    trace,
                    model,
                });
            }
        }
        let steps = read_steps(reader, &owned, shape)?;
        if steps.is_empty() {
            return Err(ReplayError::NoDecodeSteps { path: owned });
        }
        Ok(Self {
            path: owned,
            steps,
            end,
            served: 0,
            current: None,
        })
    }

    /// The trace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Decode steps in the trace.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Never true: a trace without decode steps is refused at [`Self::open`].
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// What happens at the trace's end.
    pub fn end(&self) -> ReplayEnd {
        self.end
    }

    /// Starts a decode: a generation decode takes the next step, a prefill none.
    pub fn begin_decode(&mut self, prefill: bool) {
        if prefill {
            self.current = None;
            return;
        }
        self.current = match self.end {
            ReplayEnd::Cycle => Some(self.served % self.steps.len()),
            ReplayEnd::Stop => (self.served < self.steps.len()).then_some(self.served),
        };
        self.served += 1;
    }

    /// Whether a `Stop` replay has served its last step (the run should end).
    pub fn exhausted(&self) -> bool {
        self.end == ReplayEnd::Stop && self.served >= self.steps.len()
    }

    /// The current decode's cell for `layer`, if the trace holds it.
    pub fn cell(&self, layer: usize) -> Option<&ReplayCell> {
        let step = self.steps.get(self.current?)?;
        step.get(layer)?.as_ref()
    }
}

/// A cell as read: per slot, (expert, weight) once seen.
type RawCell = Vec<Option<(i32, f64)>>;

/// The decode steps of `reader`, in file order, one cell per layer.
fn read_steps(
    reader: RouteTraceReader,
    path: &Path,
    shape: ReplayShape,
) -> Result<Vec<Vec<Option<ReplayCell>>>, ReplayError> {
    let (n_layer, k) = (shape.n_layer as usize, shape.n_expert_used as usize);
    // per step: per layer, the slots seen (expert, weight)
    let mut raw: Vec<Vec<RawCell>> = Vec::new();
    let mut last: Option<(u32, i64)> = None;
    for (i, row) in reader.enumerate() {
        let r = row?;
        if r.phase != PHASE_DECODE {
            continue;
        }
        let out = |what| ReplayError::OutOfShape {
            path: path.to_path_buf(),
            row: i as u64 + 1,
            step: r.step,
            layer: r.layer,
            what,
        };
        let (layer, slot) = (r.layer as usize, r.slot as usize);
        if layer >= n_layer {
            return Err(out("layer"));
        }
        if slot >= k {
            return Err(out("slot"));
        }
        let expert = i32::try_from(r.expert)
            .ok()
            .filter(|_| u64::from(r.expert) < shape.n_expert)
            .ok_or_else(|| out("expert"))?;
        if last != Some((r.turn, r.step)) {
            raw.push(vec![vec![None; k]; n_layer]);
            last = Some((r.turn, r.step));
        }
        if let Some(step) = raw.last_mut() {
            step[layer][slot] = Some((expert, r.weight));
        }
    }
    Ok(raw
        .into_iter()
        .map(|step| step.into_iter().map(cell_of).collect())
        .collect())
}

/// A complete cell (every slot seen); weights only when all are numbers.
fn cell_of(slots: RawCell) -> Option<ReplayCell> {
    let slots: Vec<(i32, f64)> = slots.into_iter().collect::<Option<_>>()?;
    let weights = slots
        .iter()
        .map(|&(_, w)| w.is_finite().then_some(w as f32))
        .collect::<Option<Vec<f32>>>();
    Some(ReplayCell {
        ids: slots.iter().map(|&(e, _)| e).collect(),
        weights,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "# route_trace v1\n\
# model=m.gguf arch=qwen3moe n_layer=2 n_expert=4 n_expert_used=2\n\
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n\
0,0,0,0,0,1,0.6,0,10\n0,0,0,0,1,2,0.4,0,10\n\
0,1,1,0,0,3,0.7,0,10\n0,1,1,0,1,0,0.3,0,10\n0,1,1,1,0,2,nan,0,10\n0,1,1,1,1,1,nan,0,10\n\
0,1,2,0,0,0,0.5,1,0\n0,1,2,0,1,1,0.5,1,0\n";

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("t.route.csv");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn shape(n_layer: u64, n_expert: u64, k: u64) -> ReplayShape {
        ReplayShape {
            n_layer,
            n_expert,
            n_expert_used: k,
        }
    }

    #[test]
    fn decode_steps_in_order_and_stop_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), TRACE);
        let mut r = RouteReplay::open(&p, shape(2, 4, 2), ReplayEnd::Stop).unwrap();
        assert_eq!(r.len(), 2);
        r.begin_decode(true);
        assert!(r.cell(0).is_none(), "prefill is not replayed");
        r.begin_decode(false);
        assert_eq!(r.cell(0).unwrap().ids, [3, 0]);
        assert_eq!(r.cell(0).unwrap().weights, Some(vec![0.7, 0.3]));
        assert_eq!(r.cell(1).unwrap().weights, None, "nan weights: ids only");
        r.begin_decode(false);
        assert_eq!(r.cell(0).unwrap().ids, [0, 1]);
        assert!(r.cell(1).is_none(), "the trace has no layer 1 at step 2");
        assert!(r.exhausted());
        r.begin_decode(false);
        assert!(r.cell(0).is_none());
    }

    #[test]
    fn cycle_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), TRACE);
        let mut r = RouteReplay::open(&p, shape(2, 4, 2), ReplayEnd::Cycle).unwrap();
        for _ in 0..2 {
            r.begin_decode(false);
        }
        r.begin_decode(false);
        assert_eq!(r.cell(0).unwrap().ids, [3, 0]);
        assert!(!r.exhausted());
    }

    #[test]
    fn a_shape_mismatch_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), TRACE);
        let e = RouteReplay::open(&p, shape(2, 4, 3), ReplayEnd::Stop).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("n_expert_used=2 differs from the model's n_expert_used=3"),
            "{msg}"
        );
        assert!(e.hint().contains("--n-expert-used 2"));
        let e = RouteReplay::open(&p, shape(3, 4, 2), ReplayEnd::Stop).unwrap_err();
        assert!(e.to_string().contains("n_layer=2"), "{e}");
    }

    #[test]
    fn rows_outside_the_shape_and_empty_traces_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bad = TRACE.replace("0,1,2,0,1,1,0.5", "0,1,2,0,1,9,0.5");
        let e = RouteReplay::open(&write(dir.path(), &bad), shape(2, 4, 2), ReplayEnd::Stop)
            .unwrap_err();
        assert!(e.to_string().contains("expert outside"), "{e}");
        let prefill_only: String = TRACE.lines().take(5).map(|l| format!("{l}\n")).collect();
        let e = RouteReplay::open(
            &write(dir.path(), &prefill_only),
            shape(2, 4, 2),
            ReplayEnd::Stop,
        )
        .unwrap_err();
        assert!(matches!(e, ReplayError::NoDecodeSteps { .. }), "{e}");
    }
}
