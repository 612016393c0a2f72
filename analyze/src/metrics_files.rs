//! Which files `bmoe-analyze metrics` reads: directories expanded to their metrics CSVs, traces
//! of another kind pointed to the command that reads them, and a run that gives no token times
//! explained (empty file, no `wall_ms`, no token rows, or everything trimmed).
//!
//! Notes (a file skipped, a directory reported run by run) go to a caller-supplied `note`
//! callback as they arise, so the caller decides where they are printed and in what order
//! relative to its own output.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use bmoe_telemetry::metrics::{MetricsFile, MetricsReader};

use crate::metrics::{self, RunStats};
use crate::{AnalyzeError, Result};

/// Reads one run's token statistics, dropping `trim` leading token rows; a file that gives no
/// token time fails with the reason.
pub fn read_run(path: &Path, trim: usize) -> Result<RunStats> {
    check_kind(path)?;
    match RunStats::read(path, trim)? {
        Some(run) => Ok(run),
        None => Err(no_walls(path, trim)),
    }
}

/// Refuses a route, compute or io trace given where a metrics CSV is expected, naming the
/// command that reads it (the metrics reader alone would only say the magic line is wrong).
pub fn check_kind(path: &Path) -> Result<()> {
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| AnalyzeError::io(path, e))?;
    let head = String::from_utf8_lossy(&head[..n]);
    for (magic, kind, cmd, also) in [
        (
            "# route_trace",
            "a route trace",
            "route",
            " (or `replay` / `drop`)",
        ),
        ("# compute_trace", "a compute trace", "compute", ""),
        ("# io_trace", "an io trace", "io", ""),
    ] {
        if head.starts_with(magic) {
            return Err(AnalyzeError::Invalid {
                message: format!("{}: this is {kind}, not a metrics CSV", path.display()),
                hint: format!("read it with `bmoe-analyze {cmd} {}`{also}", path.display()),
            });
        }
    }
    Ok(())
}

/// Whether `path` opens as a metrics CSV (its magic line and header); bad rows are found later.
#[must_use]
pub fn is_metrics_csv(path: &Path) -> bool {
    check_kind(path).is_ok() && MetricsReader::open(path).is_ok()
}

/// Why a metrics CSV gave no token times: empty file, no `wall_ms` column, no token rows, or
/// every row dropped by `--trim`.
fn no_walls(path: &Path, trim: usize) -> AnalyzeError {
    let shown = path.display();
    let file = match MetricsFile::read(path) {
        Ok(file) => file,
        Err(e) => return AnalyzeError::from_telemetry(path, e),
    };
    // Each branch spells its hint out after `hint:`, where the hint-flag test reads it.
    if file.header.is_empty() {
        return AnalyzeError::Invalid {
            message: format!("{shown}: no header and no token rows (an empty file?)"),
            hint: "pass the metrics CSV of a run that generated tokens (`bmoe-cli --csv FILE`)"
                .into(),
        };
    }
    if !file.header.iter().any(|c| c == "wall_ms") {
        return AnalyzeError::Invalid {
            message: format!(
                "{shown}: the header has no `wall_ms` column; metrics needs each token's wall time (columns: {})",
                file.header.join(",")
            ),
            hint: "pass a bmoe metrics CSV (v0/v1/v2 all have wall_ms); the format is in docs/telemetry.md".into(),
        };
    }
    let rows = file.rows.iter().filter(|r| r.wall_ms.is_some()).count();
    if rows == 0 {
        return AnalyzeError::Invalid {
            message: format!("{shown}: no token rows (the run stopped before its first token?)"),
            hint: "pass the metrics CSV of a run that generated tokens".into(),
        };
    }
    AnalyzeError::Invalid {
        message: format!("{shown}: --trim {trim} drops all {rows} token rows"),
        hint: format!("use a --trim below {rows}"),
    }
}

/// The `*.csv` files directly in `dir`, sorted so that runs are reported in a stable order.
pub fn csv_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut inside: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| AnalyzeError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|q| q.is_file() && q.extension().is_some_and(|x| x == "csv"))
        .collect();
    inside.sort();
    Ok(inside)
}

/// The `*.csv` files in the subdirectories of `dir`, at any depth, sorted by path. Hidden
/// directories are skipped: `bmoe-bench` writes a run into `.<rep>.tmp/` and renames it once
/// complete, so a dot directory is a run in flight or one killed mid-way.
pub fn csv_files_below(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| AnalyzeError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|q| {
            q.is_dir()
                && !q
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    subdirs.sort();
    for sub in subdirs {
        out.extend(csv_files(&sub)?);
        out.extend(csv_files_below(&sub)?);
    }
    out.sort();
    Ok(out)
}

/// Whether `dir` is a `bmoe-bench sweep` results directory (its `results.jsonl` log).
fn is_bench_results(dir: &Path) -> bool {
    dir.join("results.jsonl").is_file()
}

/// What a directory without any CSV holds, for the error that says so: `2 subdirectories,
/// 3 other files (results.jsonl, plan.json, manifest.toml)`, or `nothing`.
fn describe_contents(dir: &Path) -> Result<String> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| AnalyzeError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let dirs = entries.iter().filter(|p| p.is_dir()).count();
    let files: Vec<String> = entries
        .iter()
        .filter(|p| !p.is_dir())
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    if dirs == 0 && files.is_empty() {
        return Ok("nothing (an empty directory)".into());
    }
    let mut parts = Vec::new();
    if dirs > 0 {
        parts.push(format!(
            "{dirs} subdirector{}",
            if dirs == 1 { "y" } else { "ies" }
        ));
    }
    if !files.is_empty() {
        let shown: Vec<&str> = files.iter().take(5).map(String::as_str).collect();
        let more = if files.len() > shown.len() {
            ", …"
        } else {
            ""
        };
        parts.push(format!(
            "{} other file{} ({}{more})",
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            shown.join(", ")
        ));
    }
    Ok(parts.join(", "))
}

/// The error for a directory with no `*.csv` file, neither in it nor below it.
fn no_csv_in(dir: &Path) -> Result<AnalyzeError> {
    let message = format!(
        "{}: no *.csv file in this directory or its subdirectories; it holds {}",
        dir.display(),
        describe_contents(dir)?
    );
    Ok(if is_bench_results(dir) {
        AnalyzeError::Invalid {
            message,
            hint: format!(
                "this is a bmoe-bench results directory without finished runs; once runs have written their metrics.csv, `bmoe-bench report {}` gives the per-cell table",
                dir.display()
            ),
        }
    } else {
        AnalyzeError::Invalid {
            message,
            hint: "pass a bench-analyze session directory (<model>_<config>.csv files), metrics CSV files, or a directory holding them".into(),
        }
    })
}

/// Whether directory `dir` is reported run by run rather than as a bench-analyze session.
///
/// A directory that holds CSVs but none of bench-analyze's `<model>_<config>.csv` matrix files
/// would give empty bench tables, so its runs are listed instead (said in a note); so are the
/// CSVs of its subdirectories when it has none of its own (a `bmoe-bench` results directory
/// keeps each run's `metrics.csv` three levels down). Asking for the bench markdown of such a
/// directory is an error, and so is a directory without any CSV (the reference printed empty
/// tables for it).
pub fn loose_runs(
    dir: &Path,
    markdown: Option<&Path>,
    note: &mut dyn FnMut(String),
) -> Result<bool> {
    let csvs = csv_files(dir)?;
    if csvs.is_empty() {
        let below = csv_files_below(dir)?;
        if below.is_empty() {
            return Err(no_csv_in(dir)?);
        }
        if let Some(md) = markdown {
            return Err(AnalyzeError::Invalid {
                message: format!(
                    "metrics {} --markdown {}: no bench matrix run (<model>_<config>.csv) in the directory itself, {} CSV file(s) in its subdirectories",
                    dir.display(),
                    md.display(),
                    below.len()
                ),
                hint: "leave out --markdown to get one row per run, or pass a bench-analyze session directory".into(),
            });
        }
        let also = if is_bench_results(dir) {
            format!(
                "; for per-cell means across repetitions (warm-ups left out) use `bmoe-bench report {}`",
                dir.display()
            )
        } else {
            String::new()
        };
        note(format!(
            "{}: no CSV file in the directory itself; reporting the {} CSV file(s) of its subdirectories run by run{also}",
            dir.display(),
            below.len()
        ));
        return Ok(true);
    }
    if !metrics::bench_dir(dir)?.runs.is_empty() {
        return Ok(false);
    }
    if let Some(md) = markdown {
        return Err(AnalyzeError::Invalid {
            message: format!(
                "metrics {} --markdown {}: the directory has {} CSV file(s) but no bench matrix run (<model>_<config>.csv, e.g. qwen_c4000_l4.csv)",
                dir.display(),
                md.display(),
                csvs.len()
            ),
            hint:
                "leave out --markdown to get one row per run, or pass a bench-analyze session directory"
                    .into(),
        });
    }
    note(format!(
        "{}: no bench matrix run (<model>_<config>.csv); reporting its metrics CSVs run by run ({} CSV files)",
        dir.display(),
        csvs.len()
    ));
    Ok(true)
}

/// The metrics CSVs named by `paths`: files as given, directories replaced by the metrics CSVs
/// in them. A session directory also holds other CSVs (replay curves, …); those are skipped
/// with a note rather than failing the whole listing.
pub fn expand(paths: &[PathBuf], note: &mut dyn FnMut(String)) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if !p.is_dir() {
            files.push(p.clone());
            continue;
        }
        let mut inside = csv_files(p)?;
        if inside.is_empty() {
            inside = csv_files_below(p)?;
        }
        if inside.is_empty() {
            return Err(no_csv_in(p)?);
        }
        for q in inside {
            if is_metrics_csv(&q) {
                files.push(q);
            } else {
                note(format!("skipping {}: not a metrics CSV", q.display()));
            }
        }
        // Deliberately every file so far, not only this directory's: a directory without a
        // metrics CSV after paths that gave some is skipped with its notes, not an error.
        if files.is_empty() {
            return Err(AnalyzeError::Invalid {
                message: format!("{}: none of its CSV files is a metrics CSV", p.display()),
                hint: "pass a directory of bmoe metrics CSVs (`bmoe-cli --csv FILE` writes one)"
                    .into(),
            });
        }
    }
    Ok(files)
}

/// Every run of `files` ([`read_run`]), stopping at the first that fails; no file at all is an
/// error too, since there would be nothing to report.
pub fn read_runs(files: &[PathBuf], trim: usize) -> Result<Vec<RunStats>> {
    let runs = files
        .iter()
        .map(|p| read_run(p, trim))
        .collect::<Result<Vec<_>>>()?;
    if runs.is_empty() {
        return Err(AnalyzeError::Invalid {
            message: "metrics: no metrics CSV given".into(),
            hint: "pass metrics CSV files, a directory of them, or `--compare A B`".into(),
        });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write test file");
        p
    }

    #[test]
    fn a_trace_is_pointed_to_the_command_that_reads_it() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = write(d.path(), "t.csv", "# compute_trace v1\nturn,phase\n");
        let err = check_kind(&p).expect_err("a compute trace is not a metrics CSV");
        assert!(
            err.to_string()
                .ends_with("this is a compute trace, not a metrics CSV")
        );
        assert!(
            err.hint()
                .starts_with("read it with `bmoe-analyze compute ")
        );
        assert!(!is_metrics_csv(&p));
    }

    #[test]
    fn a_file_without_token_times_says_why() {
        let d = tempfile::tempdir().expect("tempdir");
        let empty = write(d.path(), "empty.csv", "");
        let no_wall = write(d.path(), "nowall.csv", "step,steps\n1,1\n");
        let one = write(d.path(), "one.csv", "step,steps,wall_ms\n1,1,10.0\n");
        let msg = |p: &Path, trim| read_run(p, trim).expect_err("no token time").to_string();
        assert!(msg(&empty, 0).ends_with("no header and no token rows (an empty file?)"));
        assert!(msg(&no_wall, 0).contains("the header has no `wall_ms` column"));
        assert!(msg(&one, 1).ends_with("--trim 1 drops all 1 token rows"));
        assert_eq!(read_run(&one, 0).map(|r| r.walls.len()).ok(), Some(1));
    }

    #[test]
    fn directories_expand_to_their_metrics_csvs_with_a_note_per_other_csv() {
        let d = tempfile::tempdir().expect("tempdir");
        let other = write(d.path(), "curve.csv", "budget,hit\n1,2\n");
        let mut notes = Vec::new();
        let err = expand(&[d.path().to_path_buf()], &mut |n| notes.push(n))
            .expect_err("no metrics CSV in the directory");
        assert!(
            err.to_string()
                .ends_with("none of its CSV files is a metrics CSV")
        );
        assert_eq!(
            notes,
            [format!("skipping {}: not a metrics CSV", other.display())]
        );

        let run = write(d.path(), "run.csv", "step,steps,wall_ms\n1,1,10.0\n");
        let files = expand(&[d.path().to_path_buf()], &mut |_| {}).expect("one metrics CSV");
        assert_eq!(files, [run]);
        assert!(read_runs(&[], 0).is_err(), "nothing to report is an error");
    }
}
