//! [`Engine::generate`]: a turn's prefill, then the token loop — one single-token decode per
//! generated token, its cost measured into a row (the CSV, `BMOE_PROGRESS`), its text streamed
//! (raw, or split into reasoning and answer) — and the turn's summary and trailer.

use super::outputs::Outputs;
use super::pick::{argmax_except, logits_hash};
use super::prefill::Prefilled;
use super::{Engine, Generation, Turn};
use crate::chat::reasoning::ReasoningSplitter;
use crate::chat::text::Utf8Stream;
use crate::error::EngineError;
use crate::ffi::{DecodeError, Token};
use crate::graph::edit::EditCounters;
use crate::graph::hook::MoeHook;
use crate::graph::span::DecodeSpan;
use crate::memory::picture::{MemorySnapshot, cgroup_memory};
use crate::sinks::csv::{RowContext, TrailerContext, token_row, trailer};
use crate::sinks::report::{
    PrefetchSummary, RoutingSummary, RunSummary, SpecSummary, StreamSummary, TokenStats, load_line,
    progress_line, progress_line_deltas,
};
use crate::stream::StreamStats;
use crate::vm::{process_sample, system_page_size};
use bmoe_telemetry::deltas::DeltaEncoder;
use std::io::Write;
use std::time::Instant;

/// What the token loop carries from one token to the next.
pub(super) struct TokenLoop {
    encoder: DeltaEncoder,
    text: Utf8Stream,
    splitter: Option<ReasoningSplitter>,
    /// Streaming counters at the turn's first token and after the latest one.
    base: Option<StreamStats>,
    pub(super) prev: Option<StreamStats>,
    pub(super) hashes: Vec<u64>,
    /// The MTP head's catch-up after the latest decode, s: part of the next group's drafting.
    pub(super) catch_up_s: f64,
    /// Bytes the MTP head streamed since the latest decode (they land in the next row).
    pub(super) head_bytes: u64,
    /// When the previous decode's bracket ended (the loop overhead's start).
    last_end: Instant,
    summary: RunSummary,
    trailer: TrailerContext,
    /// The routing edits' counts before the turn's prefill.
    edits_base: Option<EditCounters>,
}

impl TokenLoop {
    /// The speculation ledger (`None` without `--ngram`).
    pub(super) fn spec_mut(&mut self) -> Option<&mut SpecSummary> {
        self.summary.spec.as_mut()
    }
}

/// One generated token's decode, measured.
#[derive(Clone)]
pub(super) struct Decoded {
    pub(super) row: TokenStats,
    drain_ms: f64,
    /// Route-ahead: the loads' adoption waits (`adopt_ms`), issuing the early reads
    /// (`ra_issue_ms`) and the watchdog's GEMV (`ra_wd_ms`), ms.
    route_ahead_ms: [f64; 3],
    wall_s: f64,
    loop_overhead_ms: f64,
    probe_ms: f64,
    /// Tokens this row's decode confirmed (`mtp_batch`): 1 plain, a group's size on its first
    /// row, 0 on the group's other rows.
    pub(super) batch: u64,
    /// Drafting time of the group, ms (a slice of `loop_overhead_ms`).
    pub(super) draft_ms: f64,
}

impl Decoded {
    /// A row of a verify group after its first: the group's cost sits on the first row, so
    /// this one carries zeros (and the same cumulative hit rate and residency sample).
    pub(super) fn follower(&self, step: usize) -> Decoded {
        Decoded {
            row: TokenStats {
                step,
                wall_ms: 0.0,
                io_ms: 0.0,
                compute_ms: 0.0,
                mgmt_ms: 0.0,
                stall_ms: 0.0,
                read_bytes: 0,
                majflt: 0,
                cpu_ms: 0.0,
                ..self.row
            },
            drain_ms: 0.0,
            route_ahead_ms: [0.0; 3],
            wall_s: 0.0,
            loop_overhead_ms: 0.0,
            probe_ms: 0.0,
            batch: 0,
            draft_ms: 0.0,
        }
    }
}

impl Engine<'_> {
    /// Runs one turn: prefills `turn.tokens[turn.n_reused..]` (the KV must hold exactly the
    /// first `n_reused`), then generates up to `turn.n_predict` tokens, writing per-token output
    /// to `out`, rows to the CSV and a `# summary` trailer at the end. `cancelled` is polled
    /// between tokens and after an aborted decode: when it says so the turn stops early and
    /// returns with [`Generation::cancelled`] set (the KV then holds a partial turn).
    ///
    /// # Errors
    /// A failed decode (with the streamer's read error when that is what stopped it).
    pub fn generate(
        &mut self,
        turn: &Turn<'_>,
        out: &mut dyn Write,
        note: &mut dyn Write,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Generation, EngineError> {
        let Some(fresh) = turn.tokens.get(turn.n_reused..).filter(|t| !t.is_empty()) else {
            return Err(EngineError::Internal(
                "a turn must prefill at least one token",
            ));
        };
        let n_prompt = fresh.len();
        let edits_base = self.edit_counters();
        let (prefill_s, trailer) = match self.prefill(turn, note, cancelled)? {
            Prefilled::Done { prefill_s, trailer } => (prefill_s, trailer),
            Prefilled::Cancelled => return Ok(self.cancelled_in_prefill(note)),
        };
        self.forced_at = 0;
        let base = self.stream_stats();
        let mut lp = TokenLoop {
            encoder: DeltaEncoder::new(),
            text: Utf8Stream::default(),
            splitter: turn.split.map(ReasoningSplitter::new),
            base,
            prev: base,
            hashes: Vec::new(),
            catch_up_s: 0.0,
            head_bytes: 0,
            last_end: Instant::now(),
            summary: RunSummary {
                threads: self.cfg.threads,
                n_prompt,
                prefill_s,
                load_s: self.load_s,
                spec: self.spec_on().then(|| SpecSummary {
                    source: self.cfg.spec.name(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            trailer,
            edits_base,
        };
        let mut g = Generation::default();
        let mut tok = self.pick(&mut lp.hashes);
        let mut step = 1;
        while step <= turn.n_predict {
            if self.replay_exhausted() {
                let _ = writeln!(
                    note,
                    "bmoe: route-replay: the trace's decode steps are all replayed — generation stops after {} tokens",
                    step - 1
                );
                lp.hashes.pop();
                break;
            }
            if self.ctx.model().is_eog(tok) || self.forced_over() {
                lp.hashes.pop();
                break;
            }
            if cancelled() {
                g.cancelled = true;
                lp.hashes.pop();
                break;
            }
            if self.cfg.dump_logits_hash
                && let Some(h) = lp.hashes.last()
            {
                let _ = writeln!(note, "logits-hash step={step} token={tok} hash={h:016x}");
            }
            g.tokens.push(tok);
            let pos = (turn.tokens.len() + step - 1) as i64;
            let (drafts, draft_ms) = self.draft(turn, &g.tokens, (step, pos), &mut lp)?;
            if !drafts.is_empty() {
                let Some(v) =
                    self.verify(turn, step, tok, &drafts, pos, &mut lp, note, cancelled)?
                else {
                    g.tokens.pop();
                    lp.hashes.pop();
                    g.cancelled = true;
                    break;
                };
                let (n, next) = (v.1.len() + 1, v.2);
                let confirmed: Vec<Token> =
                    std::iter::once(tok).chain(v.1.iter().copied()).collect();
                self.catch_up_after(&confirmed, pos, &mut lp)?;
                self.confirm_group(turn, step, (tok, v), draft_ms, (&mut g, &mut lp), note, out);
                step += n;
                tok = next;
                continue;
            }
            let Some(mut d) =
                self.decode_token(turn, step, &[tok], pos, &mut lp, note, cancelled)?
            else {
                // the token was never decoded: it is not part of the turn
                g.tokens.pop();
                lp.hashes.pop();
                g.cancelled = true;
                break;
            };
            d.draft_ms = draft_ms;
            if let Some(sp) = lp.spec_mut() {
                sp.decodes += 1;
            }
            self.catch_up_after(&[tok], pos, &mut lp)?;
            self.record_token(turn, &d, &mut lp, note);
            let next = self.pick(&mut lp.hashes);
            let last =
                step == turn.n_predict || self.ctx.model().is_eog(next) || self.forced_over();
            self.emit_token(turn, tok, &d.row, last, &mut lp, out);
            g.rows.push(d.row);
            tok = next;
            step += 1;
        }
        if self.spec_on() && !g.cancelled {
            self.trim_turn((turn.tokens.len() + g.tokens.len()) as i64)?;
        }
        Ok(self.finish_turn(g, lp, note, out))
    }

    /// The trailer and result of a turn cancelled before its first token: the turn took a turn
    /// number, so its trailer says it ended before any token.
    fn cancelled_in_prefill(&mut self, note: &mut dyn Write) -> Generation {
        let g = Generation {
            cancelled: true,
            summary: RunSummary {
                threads: self.cfg.threads,
                load_s: self.load_s,
                ..Default::default()
            },
            trailer: TrailerContext {
                cache_budget_mib: self.cache_budget_mib(),
                cancelled: true,
                interrupted: self.interrupted(),
                ..Default::default()
            },
            ..Default::default()
        };
        self.outputs
            .csv_summary(&trailer(&g.summary, &g.trailer), note);
        g
    }

    /// Decodes `tokens` at `pos..` and measures it; `None` when a cancel aborted the decode.
    /// One token is a plain decode (logits for it only); more are a verify decode with logits
    /// for every position.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode_token(
        &mut self,
        turn: &Turn<'_>,
        step: usize,
        tokens: &[Token],
        pos: i64,
        lp: &mut TokenLoop,
        note: &mut dyn Write,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Decoded>, EngineError> {
        if let Some(gov) = self.governor.as_mut() {
            let n = gov.next_threads();
            // prefill (batched decodes) keeps the full count
            self.ctx.set_threads(n as i32, self.cfg.threads as i32);
        }
        let ra0 = self.route_ahead_tally().unwrap_or_default();
        let p0 = process_sample();
        let t0 = Instant::now();
        let loop_overhead_ms = (t0 - lp.last_end).as_secs_f64() * 1e3;
        // the row fetch is part of this token's cost: inside its wall, not its loop overhead
        self.fetch_rows(tokens, note)?;
        let span = DecodeSpan {
            turn: turn.turn,
            prefill: false,
            pos0: pos,
            n_tokens: tokens.len(),
        };
        Outputs::begin_decode(&mut self.ctx, span, t0);
        let r = match tokens {
            [tok] => self.ctx.decode(&mut [*tok]),
            _ => i32::try_from(pos).map_or(Err(DecodeError::Failed(-1)), |p| {
                self.ctx.decode_all_logits(tokens, p)
            }),
        };
        // the throttled dense-residency probe is this token's cache management (the seed's
        // mgmt_ms): timed inside the token's bracket, so the wall − io − mgmt residual stays
        // the compute and the next token's loop_overhead_ms does not carry it
        let (dense_resident_frac, probe_ms) = self.probe.sample(step);
        let ended = Instant::now();
        let wall = ended - t0;
        lp.last_end = ended;
        let p1 = process_sample();
        // trace writing lands in the next token's loop_overhead_ms, not in this decode; the
        // compute trace's rows end at `ended`, so they sum to `wall` exactly
        self.outputs.end_decode(&mut self.ctx, span, ended, note);
        if let Err(e) = r {
            let read_err = self.ctx.hook_mut().and_then(MoeHook::take_error);
            if read_err.is_none() && e == DecodeError::Aborted && cancelled() {
                return Ok(None);
            }
            return Err(EngineError::decode("generation decode", e, read_err));
        }
        lp.head_bytes = 0;
        let now = self.stream_stats();
        let d = match (now, lp.prev) {
            (Some(n), Some(p)) => StreamStats {
                read_bytes: n.read_bytes - p.read_bytes,
                io_ns: n.io_ns - p.io_ns,
                mgmt_ns: n.mgmt_ns - p.mgmt_ns,
                stall_ns: n.stall_ns - p.stall_ns,
                drain_ns: n.drain_ns - p.drain_ns,
                adopt_ns: n.adopt_ns - p.adopt_ns,
                ..n
            },
            _ => StreamStats::default(),
        };
        lp.prev = now;
        let hit = match now {
            Some(n) if self.cache_on() && n.lookups > 0 => 100.0 * n.hits as f64 / n.lookups as f64,
            _ => -1.0,
        };
        let row = TokenStats {
            step,
            steps: turn.n_predict,
            wall_ms: wall.as_secs_f64() * 1e3,
            io_ms: d.io_ns as f64 / 1e6,
            mgmt_ms: d.mgmt_ns as f64 / 1e6 + probe_ms,
            stall_ms: d.stall_ns as f64 / 1e6,
            read_bytes: d.read_bytes,
            cache_hit_pct: hit,
            majflt: p1.majflt.saturating_sub(p0.majflt),
            cpu_ms: p1.cpu_ns.saturating_sub(p0.cpu_ns) as f64 / 1e6,
            dense_resident_frac,
            compute_ms: 0.0,
        }
        .with_residual(self.overlap().is_some());
        if let Some(gov) = self.governor.as_mut() {
            // flash reads and cache work do not depend on the compute threads: judge the
            // count by the rest of the token
            gov.record(row.compute_ms);
        }
        let ra = self.route_ahead_tally().unwrap_or_default();
        Ok(Some(Decoded {
            drain_ms: d.drain_ns as f64 / 1e6,
            route_ahead_ms: [
                d.adopt_ns as f64 / 1e6,
                ra.issue_ns.saturating_sub(ra0.issue_ns) as f64 / 1e6,
                ra.wd_ns.saturating_sub(ra0.wd_ns) as f64 / 1e6,
            ],
            row,
            wall_s: wall.as_secs_f64(),
            loop_overhead_ms,
            probe_ms,
            batch: tokens.len() as u64,
            draft_ms: 0.0,
        }))
    }

    /// Adds a decoded token to the CSV and the turn's summary.
    pub(super) fn record_token(
        &mut self,
        turn: &Turn<'_>,
        d: &Decoded,
        lp: &mut TokenLoop,
        note: &mut dyn Write,
    ) {
        lp.trailer.loop_overhead_s += d.loop_overhead_ms / 1e3;
        if self.outputs.csv.is_some() {
            let rctx = RowContext {
                turn: u64::from(turn.turn),
                memory: MemorySnapshot::sample(),
                cache_budget_mib: self.cache_budget_mib(),
                loop_overhead_ms: d.loop_overhead_ms,
                page_size: system_page_size() as u64,
                drain_ms: d.drain_ms,
                route_ahead_ms: d.route_ahead_ms,
                mtp_batch: d.batch,
                mtp_draft_ms: d.draft_ms,
            };
            self.outputs.csv_row(&token_row(&d.row, &rctx), note);
        }
        let s = &mut lp.summary;
        s.n_gen += 1;
        s.decode_s += d.wall_s;
        s.cpu_s += d.row.cpu_ms / 1e3;
        s.probe_s += d.probe_ms / 1e3;
        s.majflt += d.row.majflt;
    }

    /// Records and emits a verify group `[tok, accepted…]`: the decode's whole cost on the
    /// first row (`mtp_batch` = the group's size), zeros on the rest.
    #[allow(clippy::too_many_arguments)]
    fn confirm_group(
        &mut self,
        turn: &Turn<'_>,
        step: usize,
        (tok, (mut d, accepted, next)): (Token, (Decoded, Vec<Token>, Token)),
        draft_ms: f64,
        (g, lp): (&mut Generation, &mut TokenLoop),
        note: &mut dyn Write,
        out: &mut dyn Write,
    ) {
        d.draft_ms = draft_ms;
        let group: Vec<Token> = std::iter::once(tok)
            .chain(accepted.iter().copied())
            .collect();
        // hashes end with the rows that picked group[1..] and then the next token
        let base = lp.hashes.len().saturating_sub(group.len());
        for (i, &t) in group.iter().enumerate() {
            let row = if i == 0 {
                d.clone()
            } else {
                d.follower(step + i)
            };
            if i > 0 {
                g.tokens.push(t);
                if self.cfg.dump_logits_hash
                    && let Some(h) = lp.hashes.get(base + i - 1)
                {
                    let _ = writeln!(
                        note,
                        "logits-hash step={} token={t} hash={h:016x}",
                        step + i
                    );
                }
            }
            self.record_token(turn, &row, lp, note);
            let last = i + 1 == group.len()
                && (step + i == turn.n_predict
                    || self.ctx.model().is_eog(next)
                    || self.forced_over());
            self.emit_token(turn, t, &row.row, last, lp, out);
            g.rows.push(row.row);
        }
    }

    /// Writes a token's text (raw) or its protocol lines (`--progress`, sessions). The next token
    /// is picked before this one's line goes out, so the turn's `last` line is known as such and
    /// releases everything held back (an incomplete character, a possible marker): the deltas then
    /// add up to the final texts exactly.
    fn emit_token(
        &self,
        turn: &Turn<'_>,
        tok: Token,
        row: &TokenStats,
        last: bool,
        lp: &mut TokenLoop,
        out: &mut dyn Write,
    ) {
        let mut delta = lp.text.push(&self.ctx.model().token_piece(tok));
        if last {
            delta.push_str(&lp.text.finish());
        }
        if let Some(s) = lp.splitter.as_mut() {
            s.push(&delta);
            if last {
                s.finish();
            }
        }
        if turn.progress {
            if let Some(l) = load_line(row) {
                let _ = writeln!(out, "{l}");
            }
            let line = match lp.splitter.as_ref() {
                Some(s) => {
                    let (reasoning, answer) = s.split();
                    progress_line_deltas(row, &lp.encoder.encode(&reasoning, &answer))
                }
                None => progress_line(row, &delta),
            };
            let _ = writeln!(out, "{line}");
        } else {
            let _ = write!(out, "{delta}");
        }
        let _ = out.flush();
    }

    /// The turn's summary, the CSV trailer, and the texts.
    fn finish_turn(
        &mut self,
        mut g: Generation,
        mut lp: TokenLoop,
        note: &mut dyn Write,
        out: &mut dyn Write,
    ) -> Generation {
        lp.trailer.loop_overhead_s += lp.last_end.elapsed().as_secs_f64();
        if let Some(gov) = self.governor.as_ref() {
            let _ = writeln!(note, "bmoe: {}", gov.summary());
        }
        g.tail = lp.text.finish();
        lp.summary.rows = self.row_stats();
        if self.streaming
            && let (Some(n), Some(b)) = (self.stream_stats(), lp.base)
        {
            lp.summary.stream = Some(StreamSummary {
                read_bytes: n.read_bytes - b.read_bytes,
                io_s: (n.io_ns - b.io_ns) as f64 / 1e9,
                mgmt_s: (n.mgmt_ns - b.mgmt_ns) as f64 / 1e9,
                cache_hit_pct: if self.cache_on() && n.lookups > 0 {
                    100.0 * n.hits as f64 / n.lookups as f64
                } else {
                    -1.0
                },
                resident_bytes: n.resident_bytes,
                evictions: n.evictions,
                rereads: n.rereads,
                auto_budget_mib: self.auto_budget,
                token_demand_bytes: n.token_demand_bytes,
                layer_demand_bytes: n.layer_demand_bytes,
                stall_s: self
                    .overlap()
                    .is_some()
                    .then(|| (n.stall_ns - b.stall_ns) as f64 / 1e9),
                drain_s: (n.drain_ns - b.drain_ns) as f64 / 1e9,
                adopt_s: (n.adopt_ns - b.adopt_ns) as f64 / 1e9,
                lookups: n.lookups,
                hits: n.hits,
                experts_read: n.experts_read,
                expert_bytes: self.expert_bytes(),
                spec: self.prefetch_on().then(|| PrefetchSummary {
                    read_bytes: n.spec_read_bytes - b.spec_read_bytes,
                    experts: n.spec_experts - b.spec_experts,
                    useful: n.spec_useful - b.spec_useful,
                    tag: self.prefetch_tag(),
                }),
            });
        }
        lp.summary.predict = self.predict_tally();
        lp.summary.route_ahead = self.route_ahead_tally();
        if self.streaming {
            let now = self.edit_counters().unwrap_or_default();
            let d = now.since(&lp.edits_base.unwrap_or_default());
            lp.summary.routing = Some(RoutingSummary {
                routed: d.routed,
                dropped: d.dropped,
                reranked: d.reranked,
                substituted: d.substituted,
                drop_frac: as_f64(self.cfg.routing.edits.drop_frac),
            });
        }
        lp.trailer.cgroup_usage_bytes = cgroup_memory()
            .filter(|c| c.limit.is_some())
            .map(|c| c.usage);
        lp.trailer.cancelled = g.cancelled;
        lp.trailer.interrupted = g.cancelled && self.interrupted();
        self.outputs
            .csv_summary(&trailer(&lp.summary, &lp.trailer), note);
        let _ = out.flush();
        g.text = lp.text.text().to_string();
        (g.reasoning, g.answer) = match lp.splitter.as_mut() {
            Some(s) => {
                // a cancelled turn ends with what its lines carried; a finished one has
                // released everything already (finish is idempotent)
                if !g.cancelled {
                    s.push(&g.tail);
                    s.finish();
                }
                s.split()
            }
            None => (String::new(), g.text.clone()),
        };
        g.logits_hashes = lp.hashes;
        g.summary = lp.summary;
        g.trailer = lp.trailer;
        g
    }
}

impl Engine<'_> {
    /// The next token after the last decode: the sampler's (or argmax) pick, the benchmark
    /// feed's, or (`--test-force-text`) the next forced one. Records the logits' hash.
    pub(super) fn pick(&mut self, hashes: &mut Vec<u64>) -> Token {
        let model = self.ctx.model();
        let logits = self.ctx.last_logits();
        hashes.push(logits_hash(logits));
        let chosen = match self.sampler.as_mut() {
            Some(s) => self.ctx.sample(s),
            None => argmax_except(logits, &self.banned),
        };
        if !self.forced.is_empty() {
            self.forced_at += 1;
            // past the end the pick is never decoded: the turn ends (`forced_over`)
            return self
                .forced
                .get(self.forced_at - 1)
                .copied()
                .unwrap_or(chosen);
        }
        match self.feed.as_mut() {
            Some(f) => f.next_token(model.n_vocab(), |t| model.is_eog(t)),
            None => chosen,
        }
    }

    /// `--test-force-text`: the forced tokens are all out, so the turn ends as at an
    /// end-of-generation token.
    pub(super) fn forced_over(&self) -> bool {
        !self.forced.is_empty() && self.forced_at > self.forced.len()
    }
}

/// `x` as the f64 of its shortest decimal form (`0.5`, not `0.5000000…` of the f32).
fn as_f64(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}
