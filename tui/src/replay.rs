//! A recorded metrics CSV as a timeline of events, read with `bmoe-telemetry`'s metrics reader
//! (by column name, so v0, v1 and v2 files all replay).

use std::path::Path;

use anyhow::{Result, anyhow};
use bmoe_telemetry::detect::{FileKind, detect_format};
use bmoe_telemetry::metrics::{MetricsReader, SummaryTrailer, TokenRow};

use crate::model::{Event, Memory, RunConfig, RunSummary, TokenSample};

const MIB: f64 = 1024.0 * 1024.0;

/// One CSV row as a token sample.
pub fn row_to_token(r: &TokenRow) -> TokenSample {
    let memory = (r.rss_mib.is_some() || r.rss_anon_mib.is_some() || r.mem_available_mib.is_some())
        .then(|| Memory {
            rss_mib: r.rss_mib.unwrap_or(0.0),
            rss_anon_mib: r.rss_anon_mib.unwrap_or(0.0),
            rss_file_mib: r.rss_file_mib.unwrap_or(0.0),
            swap_mib: r.swap_mib.unwrap_or(0.0),
            mem_available_mib: r.mem_available_mib.unwrap_or(0.0),
            mem_free_mib: r.mem_free_mib.unwrap_or(0.0),
            swap_free_mib: r.swap_free_mib.unwrap_or(0.0),
            majflt_mib: r.majflt_mib.unwrap_or(0.0),
            cache_budget_mib: r.cache_budget_mib.unwrap_or(0.0),
        });
    TokenSample {
        step: r.step.unwrap_or(0),
        steps: r.steps.unwrap_or(0),
        wall_ms: r.wall_ms.unwrap_or(0.0),
        io_ms: r.io_ms.unwrap_or(0.0),
        mgmt_ms: r.mgmt_ms.unwrap_or(0.0),
        stall_ms: r.stall_ms.unwrap_or(0.0),
        read_mib: r.read_bytes.map_or(0.0, |b| b as f64 / MIB),
        cache_hit_pct: r.cache_hit_pct.filter(|h| *h >= 0.0),
        majflt: r.majflt.unwrap_or(0),
        cpu_ms: r.cpu_ms.unwrap_or(0.0),
        dense_resident_frac: r.dense_resident_frac.filter(|d| *d >= 0.0),
        loop_overhead_ms: r.loop_overhead_ms,
        mtp_batch: r.mtp_batch.unwrap_or(1).max(1),
        turn: r.turn.unwrap_or(0),
        memory,
    }
}

/// A `# summary` trailer as a run summary (the trailer's spelling of the `BMOE_DONE` keys).
pub fn trailer_to_summary(t: &SummaryTrailer) -> RunSummary {
    let f = |k: &str| t.get_f64(k).filter(|v| v.is_finite());
    let u = |k: &str| t.get_u64(k);
    let line: Vec<String> = t.pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    RunSummary {
        origin: "# summary".into(),
        tokens: u("tokens"),
        tok_s: f("tok/s").filter(|r| *r > 0.0),
        s_tok: f("s/tok").filter(|s| *s > 0.0),
        io_s_tok: f("io_s/tok"),
        stall_s_tok: f("stall_s/tok"),
        mgmt_s_tok: f("mgmt_s/tok"),
        cpu_s_tok: f("cpu_s/tok").filter(|c| *c > 0.0),
        compute_s_tok: f("compute_s/tok"),
        majflt_tok: f("majflt/tok"),
        read_mib: f("read_MiB"),
        read_mib_tok: f("read_MiB")
            .zip(u("tokens").filter(|n| *n > 0))
            .map(|(r, n)| r / n as f64),
        mib_s: f("read_MiB")
            .zip(f("io_s").filter(|s| *s > 0.0))
            .map(|(r, s)| r / s),
        cache_hit_pct: f("cache_hit_pct").filter(|h| *h >= 0.0),
        cache_resident_mib: f("cache_resident_MiB"),
        cache_budget_mib: f("cache_budget_MiB"),
        prefill_s: f("prefill_s"),
        prefill_tps: f("prefill_tps"),
        load_s: f("load_s"),
        n_prompt: u("n_prompt"),
        loop_overhead_s_tok: f("loop_overhead_s/tok"),
        experts_routed: u("experts_routed"),
        experts_dropped: u("experts_dropped"),
        experts_reranked: u("experts_reranked"),
        experts_substituted: u("experts_substituted"),
        mtp_drafted: u("mtp_drafted"),
        mtp_accepted: u("mtp_accepted"),
        mtp_decodes: u("mtp_decodes"),
        mtp_draft_s_tok: f("mtp_draft_s/tok"),
        cancelled: false,
        threads: None,
        lines: vec![format!("# summary {}", line.join(" "))],
    }
}

/// The `--csv PATH` (or `--csv=PATH`) of a spawned engine's argv: where a live run's trailer
/// lands, since the routing-edit ledger (`experts_reranked`, `experts_substituted`) has no
/// stdout line.
pub fn csv_of_argv(argv: &[String]) -> Option<std::path::PathBuf> {
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "--csv" {
            return it.next().map(std::path::PathBuf::from);
        }
        if let Some(p) = a.strip_prefix("--csv=") {
            return Some(p.into());
        }
    }
    None
}

/// Fills the routing-edit ledger of a live run's `summary` from the last `# summary` trailer
/// of its `--csv` file: the keys the end-of-run lines did not give (`moe-drop:` gives routed
/// and dropped; substitution has no line). `false` when the file has no readable trailer.
pub fn fold_csv_ledger(summary: &mut RunSummary, csv: &Path) -> bool {
    let Ok(mut r) = MetricsReader::open(csv) else {
        return false;
    };
    for _ in r.by_ref() {}
    let Some(t) = r.summaries().last() else {
        return false;
    };
    let u = |k: &str| t.get_u64(k);
    summary.experts_routed = summary.experts_routed.or_else(|| u("experts_routed"));
    summary.experts_dropped = summary.experts_dropped.or_else(|| u("experts_dropped"));
    summary.experts_reranked = summary.experts_reranked.or_else(|| u("experts_reranked"));
    summary.experts_substituted = summary
        .experts_substituted
        .or_else(|| u("experts_substituted"));
    true
}

/// Reads a metrics CSV into events: the preamble as [`Event::Config`], a [`Event::Begin`] per
/// turn, a token per row, each trailer after its turn's rows. A row that cannot be read ends the
/// replay there and is reported as [`Event::Malformed`] (the rows before it still replay).
///
/// # Errors
/// The file cannot be opened, it is not a metrics CSV (the reader's message names the line), or
/// it has no header row (an empty file): nothing to replay, and an empty timeline would look like
/// a run that read nothing.
pub fn load(path: &Path) -> Result<Vec<Event>> {
    let mut reader = MetricsReader::open(path).map_err(|e| open_error(path, &e))?;
    if reader.header().is_empty() {
        return Err(no_header_error(path, reader.truncated().map(|t| t.line)));
    }
    let mut events = Vec::new();
    let mut config = RunConfig::default();
    for (k, v) in reader.preamble().merged().iter() {
        config.set(k, v);
    }
    if let Some(v) = reader.run_info().version {
        config.set("bmoe_metrics", format!("v{v}"));
    }
    events.push(Event::Config(config));
    events.push(Event::Begin);
    let mut seen_summaries = 0;
    let mut turn: Option<u64> = None;
    // Rows read so far (not the file line: see the error arm).
    let mut row_no: u64 = 0;
    loop {
        let next = reader.next();
        let now = reader.summaries().len();
        for t in &reader.summaries()[seen_summaries..now] {
            events.push(Event::Summary(Box::new(trailer_to_summary(t))));
        }
        seen_summaries = now;
        match next {
            None => break,
            Some(Ok(row)) => {
                row_no += 1;
                let tok = row_to_token(&row);
                if turn.is_some_and(|t| t != tok.turn) {
                    events.push(Event::Begin);
                }
                turn = Some(tok.turn);
                events.push(Event::Token(Box::new(tok), None));
            }
            Some(Err(e)) => {
                // The file's own line number (preamble, header and trailers counted), as the
                // reader's error and bmoe-analyze name it; the row count is only a fallback.
                let line = error_line(&e).unwrap_or_else(|| {
                    reader.preamble().skip_rows
                        + 2
                        + row_no
                        + (reader.summaries().len() + reader.comments().len()) as u64
                });
                events.push(Event::Malformed {
                    line,
                    reason: format!("row unreadable, replay stops here: {e}"),
                });
                break;
            }
        }
    }
    if let Some(t) = reader.truncated() {
        events.push(Event::Malformed {
            line: t.line,
            reason: format!("last line cut short: {}", t.reason),
        });
    }
    Ok(events)
}

/// The 1-based file line an error of the reader names, when it names one.
fn error_line(e: &bmoe_telemetry::Error) -> Option<u64> {
    use bmoe_telemetry::Error as E;
    match e {
        E::Field { line, .. } | E::Line { line, .. } | E::MissingColumn { line, .. } => {
            Some(*line).filter(|l| *l > 0)
        }
        _ => None,
    }
}

/// A file without a header row: empty (0 bytes), only `#` lines, or cut short inside the header
/// (`cut` = the line it was cut at).
fn no_header_error(path: &Path, cut: Option<u64>) -> anyhow::Error {
    let shown = path.display();
    let what = match (cut, std::fs::metadata(path).map(|m| m.len())) {
        (Some(line), _) => format!("its header row (line {line}) was cut short"),
        (None, Ok(0)) => "the file is empty (0 bytes)".to_string(),
        (None, _) => "it has no header row and no token rows".to_string(),
    };
    anyhow!(
        "cannot replay {shown}: {what}, so there is no run to show\n\
         hint: pass the metrics CSV of a run that generated tokens (`bmoe-cli … --csv run.csv`); \
         a run killed before its first token leaves an empty file"
    )
}

/// Why a file cannot be replayed, said once (the reader's I/O error already carries its cause,
/// so it is not chained again), with a hint a command-line user can act on: another bmoe file
/// kind is pointed at the `bmoe-analyze` subcommand that reads it.
fn open_error(path: &Path, e: &bmoe_telemetry::Error) -> anyhow::Error {
    const RECORD: &str = "bmoe-top replays the metrics CSV that `bmoe-cli … --csv run.csv` records \
                          (header starting `step,steps,wall_ms`)";
    let shown = path.display();
    if let bmoe_telemetry::Error::Io { source, .. } = e {
        let what = match source.kind() {
            std::io::ErrorKind::NotFound => "check the path",
            std::io::ErrorKind::IsADirectory => "pass a file, not a directory",
            _ => "check the file can be read",
        };
        return anyhow!("cannot replay {shown}: {source}\nhint: {what}; {RECORD}");
    }
    let analyze = match detect_format(path) {
        Ok(FileKind::RouteTrace) => Some(("a route trace", "route")),
        Ok(FileKind::ComputeTrace) => Some(("a compute trace", "compute")),
        Ok(FileKind::IoTrace) => Some(("an I/O trace", "io")),
        _ => None,
    };
    match analyze {
        Some((kind, sub)) => anyhow!(
            "cannot replay {shown}: it is {kind}, not a metrics CSV\n\
             hint: analyse it with `bmoe-analyze {sub} {shown}`"
        ),
        None => anyhow!("cannot replay {e}\nhint: {RECORD}"),
    }
}
