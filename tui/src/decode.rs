//! From `bmoe-telemetry`'s parsed records to the panel's events.
//!
//! This module holds no grammar of its own: protocol lines go through
//! [`bmoe_telemetry::protocol::parse_line`], end-of-run lines through
//! [`bmoe_telemetry::summary::parse_summary_line`]. It only keeps the little state a stream
//! needs (inside the `=== answer ===` block or not, the summary gathered so far).

use bmoe_telemetry::protocol::{Done, LineKind, Progress, Record, parse_line};
use bmoe_telemetry::summary::{Mode, SummaryLine, parse_summary_line};

use crate::model::{Event, RunConfig, RunSummary, TextDelta, TokenSample};
use crate::session::{ReadyFacts, SessionEvent};

/// `Some(x)` for a finite `x`, else `None` (the parser's NaN = "missing").
fn fin(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// `Some(x)` for a finite, non-negative `x` (`-1` = "not sampled").
fn sampled(x: f64) -> Option<f64> {
    fin(x).filter(|v| *v >= 0.0)
}

/// A `BMOE_PROGRESS` record as a token sample and its text delta (none when it carries none).
pub fn progress_to_token(p: &Progress) -> (TokenSample, Option<TextDelta>) {
    let sample = TokenSample {
        step: p.step,
        steps: p.steps,
        wall_ms: fin(p.wall_ms).unwrap_or(0.0),
        io_ms: fin(p.io_ms).unwrap_or(0.0),
        mgmt_ms: fin(p.mgmt_ms).unwrap_or(0.0),
        stall_ms: fin(p.stall_ms).unwrap_or(0.0),
        read_mib: fin(p.read_mb).unwrap_or(0.0),
        cache_hit_pct: sampled(p.cache_hit_pct),
        majflt: p.majflt,
        cpu_ms: fin(p.cpu_ms).unwrap_or(0.0),
        dense_resident_frac: sampled(p.dense_resident_frac),
        ..TokenSample::default()
    };
    let delta =
        (p.reset || !p.delta_text.is_empty() || !p.delta_reasoning.is_empty()).then(|| TextDelta {
            reasoning: p.delta_reasoning.clone(),
            text: p.delta_text.clone(),
            reset: p.reset,
        });
    (sample, delta)
}

/// A `BMOE_DONE` record as a run summary.
pub fn done_to_summary(d: &Done) -> RunSummary {
    RunSummary {
        origin: "BMOE_DONE".into(),
        tokens: Some(d.tokens),
        tok_s: fin(d.tok_s).filter(|r| *r > 0.0),
        s_tok: fin(d.tok_s).filter(|r| *r > 0.0).map(|r| 1.0 / r),
        io_s_tok: fin(d.io_s_tok),
        stall_s_tok: fin(d.stall_s_tok),
        mgmt_s_tok: fin(d.mgmt_s_tok),
        cpu_s_tok: sampled(d.cpu_s_tok).filter(|c| *c > 0.0),
        compute_s_tok: fin(d.compute_s_tok),
        majflt_tok: sampled(d.majflt_tok),
        read_mib: sampled(d.read_mib),
        cache_hit_pct: sampled(d.cache_hit_pct),
        cache_resident_mib: sampled(d.cache_resident_mib),
        cache_budget_mib: sampled(d.cache_budget_mib),
        prefill_s: sampled(d.prefill_s),
        prefill_tps: sampled(d.prefill_tps),
        load_s: sampled(d.load_s),
        n_prompt: Some(d.n_prompt),
        loop_overhead_s_tok: sampled(d.loop_overhead_s_tok),
        mtp_drafted: Some(d.mtp_drafted),
        mtp_accepted: Some(d.mtp_accepted),
        mtp_decodes: Some(d.mtp_decodes),
        mtp_draft_s_tok: sampled(d.mtp_draft_s_tok),
        cancelled: d.cancelled,
        ..RunSummary::default()
    }
}

/// Run facts a `mode:` line states.
pub fn mode_facts(m: &Mode) -> RunConfig {
    let mut c = RunConfig::default();
    match m {
        Mode::Streaming {
            cache,
            dense,
            overlap,
            ..
        } => {
            c.set("moe_stream", "1");
            c.set("cache", cache.to_string());
            c.set("dense_weights", dense.as_str());
            c.set("overlap", if overlap.is_some() { "1" } else { "0" });
        }
        Mode::NotStreaming(_) => c.set("moe_stream", "0"),
    }
    c
}

/// What the engine's stderr says the start of its streaming statement is: `bmoe: expert
/// streaming ON  n_expert=… o_direct=… io_threads=… cache=… MiB …[ overlap=<kind>]`.
const STREAMING_ON: &str = "bmoe: expert streaming ON";

/// Run facts the engine states on stderr before the first token: its streaming line gives the
/// I/O lanes it really runs (`io_threads=`, whatever the argv asked or left to the default),
/// `o_direct=`, and `overlap=<kind>` only when reads overlap compute. The `key=value` words are
/// read with bmoe-telemetry's tokenizer ([`parse_kv_line`]); `None` for any other line.
///
/// [`parse_kv_line`]: bmoe_telemetry::kv::parse_kv_line
pub fn stderr_facts(line: &str) -> Option<RunConfig> {
    let rest = line.trim().strip_prefix(STREAMING_ON)?;
    let kv = bmoe_telemetry::kv::parse_kv_line(rest);
    let mut c = RunConfig::default();
    c.set("moe_stream", "1");
    if let Some(l) = kv
        .pairs
        .get("io_threads")
        .filter(|v| v.parse::<u32>().is_ok())
    {
        c.set("io_threads", l);
    }
    if let Some(d) = kv.pairs.get("o_direct").filter(|v| matches!(*v, "0" | "1")) {
        c.set("o_direct", d);
    }
    c.set(
        "overlap",
        if kv.pairs.contains_key("overlap") {
            "1"
        } else {
            "0"
        },
    );
    Some(c)
}

/// Folds one end-of-run line into a summary.
pub fn fold_summary_line(s: &mut RunSummary, line: &SummaryLine) {
    match line {
        SummaryLine::Generation(g) => {
            s.tokens = Some(g.tokens);
            s.s_tok = fin(g.s_per_token);
            s.tok_s = fin(g.tok_s);
        }
        SummaryLine::Compute(c) => {
            s.cpu_s_tok = fin(c.cpu_s_per_token).filter(|x| *x > 0.0);
            s.majflt_tok = fin(c.major_faults_per_token);
            s.threads = u32::try_from(c.threads).ok().filter(|t| *t > 0);
        }
        SummaryLine::Prefill(p) => {
            s.prefill_s = fin(p.seconds);
            s.prefill_tps = fin(p.tok_s);
            s.load_s = fin(p.load_s);
            s.n_prompt = Some(p.tokens);
        }
        SummaryLine::MoeStream(m) => {
            s.read_mib = fin(m.read_mib);
            s.read_mib_tok = fin(m.mib_per_token);
            // The engine prints 0 MiB/s when no read time was measured: unknown, not zero.
            s.mib_s = fin(m.mib_per_s).filter(|b| *b > 0.0);
            s.io_s_tok = fin(m.io_s);
            s.compute_s_tok = fin(m.compute_s);
            if let Some(mg) = m.mgmt_s {
                s.mgmt_s_tok = fin(mg);
            }
            if let Some(st) = m.stall_s_per_token {
                s.stall_s_tok = fin(st);
            }
        }
        SummaryLine::MoeCache(c) => {
            s.cache_hit_pct = fin(c.hit_pct);
            s.cache_resident_mib = fin(c.resident_mib);
            s.cache_budget_mib = c.budget_mib.and_then(fin);
        }
        SummaryLine::MoeOverlap(o) => s.stall_s_tok = fin(o.stall_s_per_token),
        SummaryLine::MoeDrop(d) => {
            s.experts_dropped = Some(d.dropped);
            s.experts_routed = Some(d.routed);
        }
        _ => {}
    }
}

/// Turns a live stdout stream into events, one line at a time.
#[derive(Debug, Default)]
pub struct LineDecoder {
    line_no: u64,
    in_answer: bool,
    answer: Vec<String>,
    summary: Option<RunSummary>,
}

impl LineDecoder {
    /// A decoder at line 0.
    pub fn new() -> Self {
        LineDecoder::default()
    }

    /// Decodes one stdout line (without its newline).
    pub fn feed(&mut self, raw: &str) -> Vec<Event> {
        self.line_no += 1;
        let line_no = self.line_no;
        if self.in_answer {
            let trimmed = raw.trim_start_matches('\u{feff}').trim_end();
            if trimmed == bmoe_telemetry::summary::PERF_BANNER {
                self.in_answer = false;
                return vec![Event::FinalText {
                    text: std::mem::take(&mut self.answer).join("\n"),
                    reasoning: None,
                }];
            }
            self.answer.push(raw.trim_end_matches('\r').to_string());
            return Vec::new();
        }
        match parse_line(raw) {
            LineKind::Record(rec) => self.record(rec),
            LineKind::Unknown { tag, .. } => {
                vec![Event::Log(format!(
                    "line {line_no}: unknown record BMOE_{tag} (newer engine?)"
                ))]
            }
            LineKind::Malformed { tag, reason } => vec![Event::Malformed {
                line: line_no,
                reason: format!("BMOE_{tag}: {reason}"),
            }],
            LineKind::Text(text) => self.text(line_no, text),
        }
    }

    fn record(&mut self, rec: Record) -> Vec<Event> {
        match rec {
            Record::Load(l) => vec![Event::Load {
                mb: fin(l.mb).unwrap_or(0.0),
                ms: fin(l.ms).unwrap_or(0.0),
            }],
            Record::Progress(p) => {
                let (s, d) = progress_to_token(&p);
                vec![Event::Token(Box::new(s), d)]
            }
            Record::Ready(r) => {
                let mut c = RunConfig::default();
                c.set("arch", r.arch.clone());
                c.set("n_ctx", r.n_ctx.to_string());
                c.set("n_expert_used", r.n_expert_used.to_string());
                c.set("think_ctl", r.think_ctl.as_str());
                vec![
                    Event::Config(c),
                    Event::Session(SessionEvent::Ready(ReadyFacts {
                        load_s: fin(r.load_s).unwrap_or(0.0),
                        arch: r.arch.clone(),
                        n_ctx: r.n_ctx,
                        think_ctl: r.think_ctl.as_str().to_string(),
                        n_expert_used: r.n_expert_used,
                    })),
                ]
            }
            Record::Begin(b) => {
                self.summary = None;
                vec![Event::Begin, Event::Session(SessionEvent::Begin(b.id))]
            }
            Record::Done(d) => {
                let mut out = Vec::new();
                // A DONE without text (a baseline, a turn cancelled before its first token)
                // leaves whatever streamed.
                if !d.text.is_empty() || !d.reasoning.is_empty() {
                    out.push(Event::FinalText {
                        text: d.text.clone(),
                        reasoning: Some(d.reasoning.clone()),
                    });
                }
                out.push(Event::Summary(Box::new(done_to_summary(&d))));
                out.push(Event::Session(SessionEvent::Done {
                    id: d.id,
                    cancelled: d.cancelled,
                    tokens: d.tokens,
                    tok_s: fin(d.tok_s).unwrap_or(0.0),
                    n_past: d.n_past,
                }));
                out
            }
            Record::Decide(_) => vec![Event::Log("BMOE_DECIDE received".into())],
            Record::Error(e) => vec![
                Event::Log(format!(
                    "engine error{}: {}",
                    if e.fatal { " (fatal)" } else { "" },
                    e.msg
                )),
                Event::Session(SessionEvent::Error {
                    id: e.id,
                    fatal: e.fatal,
                    msg: e.msg.clone(),
                }),
            ],
        }
    }

    fn text(&mut self, line_no: u64, text: &str) -> Vec<Event> {
        match parse_summary_line(text) {
            Ok(Some(SummaryLine::AnswerBanner)) => {
                self.in_answer = true;
                self.answer.clear();
                Vec::new()
            }
            Ok(Some(SummaryLine::PerfBanner)) => Vec::new(),
            Ok(Some(line)) => {
                let mut out = Vec::new();
                if let SummaryLine::Mode(m) = &line {
                    out.push(Event::Config(mode_facts(m)));
                }
                let s = self.summary.get_or_insert_with(|| RunSummary {
                    origin: "end-of-run lines".into(),
                    ..RunSummary::default()
                });
                fold_summary_line(s, &line);
                s.lines.push(line.to_string());
                out.push(Event::Summary(Box::new(s.clone())));
                out
            }
            Ok(None) if text.is_empty() => Vec::new(),
            Ok(None) => vec![Event::Log(format!("stdout: {text}"))],
            Err(e) => vec![Event::Malformed {
                line: line_no,
                reason: format!("`{}:` line does not match its template", e.name),
            }],
        }
    }

    /// Call at the end of the stream: an unterminated answer block still shows.
    pub fn finish(&mut self) -> Vec<Event> {
        if self.in_answer && !self.answer.is_empty() {
            self.in_answer = false;
            return vec![Event::FinalText {
                text: std::mem::take(&mut self.answer).join("\n"),
                reasoning: None,
            }];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(lines: &[&str]) -> Vec<Event> {
        let mut d = LineDecoder::new();
        let mut out: Vec<Event> = lines.iter().flat_map(|l| d.feed(l)).collect();
        out.extend(d.finish());
        out
    }

    #[test]
    fn progress_maps_minus_one_to_unsampled_and_keeps_deltas() {
        let ev = feed_all(&[
            r#"BMOE_PROGRESS {"step":3,"steps":8,"wall_ms":250.0,"io_ms":100.0,"compute_ms":140.0,"mgmt_ms":10.0,"stall_ms":0.0,"read_mb":12.50,"cache_hit_pct":-1.0,"majflt":2,"cpu_ms":900.0,"dense_resident_frac":-1.000,"reset":1,"delta_reasoning":"why","delta_text":"Hi"}"#,
        ]);
        let Event::Token(s, Some(d)) = &ev[0] else {
            panic!("{ev:?}")
        };
        assert_eq!((s.step, s.steps, s.majflt), (3, 8, 2));
        assert_eq!(s.cache_hit_pct, None);
        assert_eq!(s.dense_resident_frac, None);
        assert_eq!(s.read_mib, 12.5);
        assert!(d.reset);
        assert_eq!((d.reasoning.as_str(), d.text.as_str()), ("why", "Hi"));
    }

    #[test]
    fn malformed_and_noise_never_panic() {
        let ev = feed_all(&[
            "BMOE_PROGRESS {oops",
            "BMOE_PROGRESS",
            r#"BMOE_PROGRESS {"step":"three"}"#,
            "generation: lots of tokens",
            "\u{0}\u{1}garbage",
            "",
        ]);
        let malformed: Vec<u64> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Malformed { line, .. } => Some(*line),
                _ => None,
            })
            .collect();
        assert_eq!(malformed, vec![1, 2, 3, 4]);
    }

    #[test]
    fn end_of_run_block_gives_text_summary_and_mode() {
        let ev = feed_all(&[
            "=== answer ===",
            "The answer: 42",
            "second line",
            "=== perf ===",
            "generation: 4 tokens, 0.250 s/token (4.000 tok/s)",
            "compute: 60.0% CPU occupancy (0.6000 cpu-s/token over 4 threads), 1.50 major faults/token",
            "mode: expert streaming, cache 4000 MiB, dense anon, overlap",
            "moe-stream: read 400.0 MiB (100.00 MiB/token), decode 0.250 s/token (compute 0.100 + cache mgmt 0.010 + flash I/O 0.500 s/token, 200 MiB/s) stall_s/tok=0.020",
            "moe-drop: 12/480 routed experts dropped (2.5%), threshold 0.75 x uniform",
        ]);
        assert!(ev.iter().any(
            |e| matches!(e, Event::FinalText { text, .. } if text == "The answer: 42\nsecond line")
        ));
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::Config(c) if c.overlap() == Some(true)))
        );
        let Some(Event::Summary(s)) = ev.iter().rev().find(|e| matches!(e, Event::Summary(_)))
        else {
            panic!("no summary")
        };
        assert_eq!(s.tokens, Some(4));
        assert_eq!(s.threads, Some(4));
        assert_eq!(s.cpu_s_tok, Some(0.6));
        assert_eq!(s.io_s_tok, Some(0.5));
        assert_eq!(s.mgmt_s_tok, Some(0.01));
        assert_eq!(s.stall_s_tok, Some(0.02));
        assert_eq!((s.experts_dropped, s.experts_routed), (Some(12), Some(480)));
        assert_eq!(s.lines.len(), 5);
    }

    #[test]
    fn the_engine_stderr_states_lanes_and_overlap() {
        // As the engine's streaming setup writes it (engine/src/turn/streaming.rs).
        let c = stderr_facts(
            "bmoe: expert streaming ON  n_expert=8 o_direct=1 io_threads=4 cache=2 MiB shards=1 cache_cycle=1.5 MiB",
        )
        .expect("the streaming line");
        assert_eq!(c.io_threads(), Some(4));
        assert_eq!(c.overlap(), Some(false));
        assert_eq!(c.streaming(), Some(true));
        assert_eq!(c.get("o_direct"), Some("1"));
        let c = stderr_facts(
            "bmoe: expert streaming ON  n_expert=128 o_direct=0 io_threads=6 cache=3000 MiB shards=2 cache_cycle=40.0 MiB overlap=uffd",
        )
        .expect("the streaming line");
        assert_eq!((c.io_threads(), c.overlap()), (Some(6), Some(true)));
        assert!(stderr_facts("bmoe: warning: io_threads=9 is too many").is_none());
        assert!(stderr_facts("llama_model_loader: io_threads=3").is_none());
    }

    #[test]
    fn the_moe_stream_line_keeps_the_engines_per_token_read_and_bandwidth() {
        // A small model: 8 tokens read 1.9 MiB in 5.2 ms; per token the read time rounds to
        // 0.001 s, which divided into the total would read as 1900 MiB/s.
        let ev = feed_all(&[
            "generation: 8 tokens, 0.020 s/token (50.000 tok/s)",
            "moe-stream: read 1.9 MiB (0.24 MiB/token), decode 0.020 s/token (compute 0.019 + cache mgmt 0.000 + flash I/O 0.001 s/token, 362 MiB/s)",
        ]);
        let Some(Event::Summary(s)) = ev.iter().rev().find(|e| matches!(e, Event::Summary(_)))
        else {
            panic!("no summary")
        };
        assert_eq!(s.read_mib_tok, Some(0.24));
        assert_eq!(s.mib_s, Some(362.0));
        assert_eq!(s.tokens, Some(8));
    }

    #[test]
    fn done_maps_to_summary() {
        let ev = feed_all(&[
            r#"BMOE_DONE {"id":1,"cancelled":false,"tokens":40,"tok_s":8.0,"cache_hit_pct":-1,"cpu_s_tok":0.5,"io_s_tok":0.1,"stall_s_tok":0.02,"mgmt_s_tok":0.01,"text":"done.","reasoning":""}"#,
        ]);
        assert!(matches!(&ev[0], Event::FinalText { text, .. } if text == "done."));
        let Event::Summary(s) = &ev[1] else { panic!() };
        assert_eq!(s.tok_s, Some(8.0));
        assert_eq!(s.s_tok, Some(0.125));
        assert_eq!(s.cache_hit_pct, None);
        assert_eq!(s.origin, "BMOE_DONE");
    }
}
