//! The `findings.md` skeleton: the shape of the archive's findings files (verdict, setup,
//! results, run order with device state, caveats, open items, files), with everything the
//! results know filled in and the judgement left as TODOs.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::Report;
use super::render::{markdown, num};
use super::stats::MIN_RUNS_FOR_CI;

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("—".into(), |v| format!("{v:.digits$}"))
}

/// Renders the skeleton.
pub fn skeleton(r: &Report) -> String {
    let mut s = String::new();
    let first = r
        .records
        .iter()
        .map(|x| x.started_unix)
        .filter(|t| *t > 0.0)
        .fold(f64::INFINITY, f64::min);
    let _ = writeln!(
        s,
        "# {} — TODO: verdict (POSITIVE / NEGATIVE / INCONCLUSIVE)\n",
        r.campaign
    );
    let _ = writeln!(
        s,
        "**TODO verdict:** the effect size with its interval, whether the intervals are disjoint, and the mechanism in one sentence.\n"
    );
    if first.is_finite() {
        let _ = writeln!(
            s,
            "Runs started at Unix time {first:.0}; results in `{}`.\n",
            r.root.display()
        );
    }

    let _ = writeln!(s, "## Setup\n");
    let devices: BTreeSet<String> = r
        .records
        .iter()
        .map(|x| format!("`{}` ({} {})", x.device, x.device_kind, x.address))
        .collect();
    let models: BTreeSet<String> = r
        .records
        .iter()
        .map(|x| format!("`{}` ({})", x.model, x.model_path))
        .collect();
    let binaries: BTreeSet<String> = r
        .records
        .iter()
        .map(|x| {
            format!(
                "`{}` sha256 {}",
                x.binary,
                x.binary_sha256
                    .as_deref()
                    .map_or("?", |h| &h[..12.min(h.len())])
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "- devices: {}",
        devices.into_iter().collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(
        s,
        "- models: {}",
        models.into_iter().collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(
        s,
        "- binaries: {}",
        binaries.into_iter().collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(s, "- what varies: {}", what_varies(r));
    let counted = r.records.iter().filter(|x| !x.warmup).count();
    let warm = r.records.len() - counted;
    let reps = r.records.iter().map(|x| x.pass).max().unwrap_or(0);
    let _ = writeln!(
        s,
        "- runs: {counted} counted ({reps} repetition(s) per cell), {warm} warm-up run(s) not counted"
    );
    if let Some(a) = r.records.iter().find(|x| !x.argv.is_empty()) {
        let _ = writeln!(
            s,
            "- first command: `{}`",
            crate::sweep::device::shell_join(&a.argv)
        );
    }
    let _ = writeln!(
        s,
        "- the CSV preambles (`metrics.csv` of each run) record the resolved configuration of every run.\n"
    );

    let _ = writeln!(s, "## Results\n");
    let table = markdown(r);
    // Drop the report's own title line.
    s.push_str(
        table
            .split_once('\n')
            .map_or(table.as_str(), |(_, rest)| rest)
            .trim_start(),
    );
    s.push('\n');

    let _ = writeln!(s, "## Run order and device state\n");
    let _ = writeln!(
        s,
        "| # | device | cell | run | status | tok/s | cooldown s | gate | MemAvailable MiB before → after | load1 before | CPU °C before → after | mem cap MiB / peak MiB |"
    );
    let _ = writeln!(s, "|--:|---|---|---|---|--:|--:|---|--:|--:|--:|--:|");
    for (i, x) in r.records.iter().enumerate() {
        let b = x.state_before.as_ref();
        let a = x.state_after.as_ref();
        let cg = x.cgroup.as_ref().map_or("—".into(), |c| {
            format!(
                "{} / {}",
                c.limit_bytes >> 20,
                c.peak_bytes.map_or("?".into(), |p| (p >> 20).to_string())
            )
        });
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}{} | {} | {} | {:.1} | {} | {} → {} | {} | {} → {} | {cg} |",
            i + 1,
            x.device,
            x.cell,
            x.rep,
            if x.warmup { " (warm-up)" } else { "" },
            x.status,
            r.run_stats[i]
                .as_ref()
                .map_or("—".into(), |st| num(st.decode.tok_s)),
            x.cooldown_waited_s,
            x.gate_met.map_or("—".into(), |g| if g {
                "met".into()
            } else {
                format!("gave up: {}", x.gate_unmet.join(", "))
            }),
            opt(b.and_then(|s| s.mem_available_mib), 0),
            opt(a.and_then(|s| s.mem_available_mib), 0),
            opt(b.and_then(|s| s.load.map(|l| l[0])), 2),
            opt(b.and_then(|s| s.cpu_temp_c), 1),
            opt(a.and_then(|s| s.cpu_temp_c), 1),
        );
    }
    let _ = writeln!(
        s,
        "\nTODO: argue the result is not drift (order interleaved/reversed/shuffled? fastest cells first and last? dose–response?).\n"
    );

    let _ = writeln!(s, "## Caveats\n");
    let mut any = false;
    if let Some(c) = &r.incomplete {
        let _ = writeln!(
            s,
            "- **Incomplete:** {} of {} planned runs recorded; short cells: {}.",
            c.recorded,
            c.planned,
            c.short
                .iter()
                .map(|x| format!("`{}` ({})", x.cell, x.runs_text()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        any = true;
    }
    for k in &r.skipped {
        let _ = writeln!(s, "- **Skipped input:** {k}.");
        any = true;
    }
    for w in &r.warnings {
        let _ = writeln!(s, "- **Warning:** {w}.");
        any = true;
    }
    for (i, x) in r.records.iter().enumerate() {
        if let Some(f) = r.run_stats[i].as_ref().and_then(|st| st.flag.clone()) {
            let _ = writeln!(
                s,
                "- `{}` {}: **{f}** — not a benchmark run, excluded from every average.",
                x.cell, x.rep
            );
            any = true;
        }
        if x.status != "ok" {
            let _ = writeln!(
                s,
                "- `{}` {}: {}{}",
                x.cell,
                x.rep,
                x.status,
                x.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" — {e}"))
            );
            any = true;
        }
        for t in x
            .turns
            .iter()
            .filter(|t| matches!(t.status.as_str(), "error" | "cancelled"))
        {
            let _ = writeln!(
                s,
                "- `{}` {}: session turn {} (request {}) {}{}; its tokens, if any, are in the cell's figures.",
                x.cell,
                x.rep,
                t.turn,
                t.id,
                if t.status == "error" {
                    "was refused by the engine"
                } else {
                    "was cancelled"
                },
                t.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" — {e}"))
            );
            any = true;
        }
        if x.gate_met == Some(false) {
            let _ = writeln!(
                s,
                "- `{}` {}: the cooldown gate gave up after {:.0} s ({}); the run started from a warmer/fuller device.",
                x.cell,
                x.rep,
                x.cooldown_waited_s,
                x.gate_unmet.join(", ")
            );
            any = true;
        }
        if let Some(oom) = x.oom_text() {
            // Failed runs already say so in their status line above.
            if x.status == "ok" || !x.error.as_deref().is_some_and(|e| e.starts_with("OOM")) {
                let _ = writeln!(s, "- `{}` {}: {oom}.", x.cell, x.rep);
                any = true;
            }
        } else if x
            .cgroup
            .as_ref()
            .and_then(|c| c.oom_kill)
            .is_some_and(|k| k > 0)
        {
            let _ = writeln!(
                s,
                "- `{}` {}: OOM kills inside the memory cgroup.",
                x.cell, x.rep
            );
            any = true;
        }
    }
    let flagged: Vec<String> = r
        .rows
        .iter()
        .filter_map(|row| {
            let why = row.stats.reps_ci_note.as_ref()?;
            Some(format!("`{}` ({why})", row.cell))
        })
        .collect();
    if !flagged.is_empty() {
        let few = r
            .rows
            .iter()
            .any(|row| row.stats.reps_ci_note.is_some() && row.stats.runs < MIN_RUNS_FOR_CI);
        let spread = r
            .rows
            .iter()
            .any(|row| row.stats.reps_ci_note.is_some() && row.stats.runs >= MIN_RUNS_FOR_CI);
        let mut advice = Vec::new();
        if few {
            advice.push(format!("Run at least {MIN_RUNS_FOR_CI} repetitions."));
        }
        if spread {
            advice.push(format!(
                "{} disagree too much for a Student-t interval: look for the outlier in the run order and device state below, and add repetitions.",
                if few {
                    format!("Where there were {MIN_RUNS_FOR_CI} or more runs, they")
                } else {
                    "The runs".to_string()
                }
            ));
        }
        let _ = writeln!(
            s,
            "- across-run intervals not reported as results: {}. {}",
            flagged.join(", "),
            advice.join(" ")
        );
        any = true;
    }
    if r.rows.iter().any(|row| row.stats.runs == 1) {
        let _ = writeln!(
            s,
            "- cells with one run have no across-run interval; their within-run CI is over autocorrelated tokens and too narrow."
        );
        any = true;
    }
    if !any {
        let _ = writeln!(s, "- no run was flagged, failed or gated.");
    }
    let _ = writeln!(
        s,
        "- TODO: one device, one model? quality not measured? which counters not to read?\n"
    );

    let _ = writeln!(
        s,
        "## Open / owed\n\n- TODO: a reversed-order pass, a cold re-run, more repetitions.\n"
    );
    let _ = writeln!(s, "## Files\n");
    for x in &r.records {
        let _ = writeln!(s, "- `{}` {} → `{}/`", x.cell, x.rep, x.dir);
    }
    s
}

/// Axis values in a readable order: numbers numerically (`0, 2, 16`), before any text.
fn cmp_values(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.total_cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

/// The setup's "what varies" line: every axis that takes more than one value across the cells
/// (an axis a cell does not set counts as `(not set)`, as in explicit cell lists), then the
/// cells themselves when there are several.
fn what_varies(r: &Report) -> String {
    const UNSET: &str = "(not set)";
    let mut cells: Vec<(&str, &str)> = Vec::new();
    let mut axes: indexmap::IndexMap<&str, Vec<&str>> = indexmap::IndexMap::new();
    for rec in &r.records {
        if !cells.contains(&(rec.sweep.as_str(), rec.cell.as_str())) {
            cells.push((&rec.sweep, &rec.cell));
        }
        for k in rec.axes.keys() {
            axes.entry(k).or_default();
        }
    }
    for rec in &r.records {
        for (k, vals) in &mut axes {
            let v = rec.axes.get(*k).map_or(UNSET, String::as_str);
            if !vals.contains(&v) {
                vals.push(v);
            }
        }
    }
    let varying: Vec<String> = axes
        .iter_mut()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, v)| {
            v.sort_by(|a, b| match (*a == UNSET, *b == UNSET) {
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ => cmp_values(a, b),
            });
            format!("`{k}` ∈ {{{}}}", v.join(", "))
        })
        .collect();
    if cells.len() <= 1 {
        return "nothing (single cell)".into();
    }
    let names: Vec<String> = cells.iter().map(|(_, c)| format!("`{c}`")).collect();
    let list = format!("{} cells: {}", cells.len(), names.join(", "));
    if varying.is_empty() {
        list
    } else {
        format!("{} ({list})", varying.join("; "))
    }
}
