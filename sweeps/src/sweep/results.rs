//! The results directory: layout, atomic writes, the `results.jsonl` log and resume.
//!
//! ```text
//! <out>/manifest.toml        copy of the manifest the results were started with
//! <out>/manifest.sha256      its digest (a changed manifest is refused unless --force)
//! <out>/plan.json            every cell's resolved command
//! <out>/results.jsonl        one line per run, appended as each run ends
//! <out>/.bmoe-bench.lock     flock'd while the sweep or an engine it started lives (lock.rs)
//! <out>/<sweep>/<cell>/<rep>/{metrics.csv,stdout.txt,stderr.txt,argv.json,state.json,run.json}
//! ```
//!
//! A run is written into `<cell>/.<rep>.tmp/` and renamed to `<cell>/<rep>/` once `run.json`
//! is in it, so a directory named like a run is always complete: `kill -9` loses at most the
//! run in flight, whose temporary directory the next `--resume` removes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Hinted;
use super::cgroup::CgroupStats;
use super::state::DeviceState;

/// One run's record: a `results.jsonl` line and the run's `run.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunRecord {
    /// Campaign (manifest `name`).
    pub campaign: String,
    /// Sweep block.
    pub sweep: String,
    /// Cell tag.
    pub cell: String,
    /// `r1`, `r2`, ... or `w1`, ... for warm-ups.
    pub rep: String,
    /// Untimed warm-up (never averaged).
    pub warmup: bool,
    /// Repetition pass (0 for warm-ups).
    pub pass: u32,
    /// Position in the campaign's run order (0-based).
    pub position: usize,
    /// Device id.
    pub device: String,
    /// `local`, `ssh`, `adb`.
    pub device_kind: String,
    /// Host or serial.
    pub address: String,
    /// Model id.
    pub model: String,
    /// Model path on the device.
    pub model_path: String,
    /// Engine binary (local path).
    pub binary: String,
    /// SHA-256 of the binary.
    pub binary_sha256: Option<String>,
    /// The resolved argv as executed on the device.
    pub argv: Vec<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Axis -> value.
    pub axes: IndexMap<String, String>,
    /// `ok`, `failed` (non-zero exit), `timeout`, `skipped` (cooldown gate), `device-lost`.
    pub status: String,
    /// Exit code (`None` = killed by a signal or never started).
    pub exit_code: Option<i32>,
    /// The signal that killed a local engine (9 = SIGKILL, also what the OOM killer sends).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Killed by the per-run timeout.
    pub timed_out: bool,
    /// Why the run failed, when it did.
    pub error: Option<String>,
    /// Start, seconds since the Unix epoch.
    pub started_unix: f64,
    /// Wall time of the engine process, seconds.
    pub duration_s: f64,
    /// Wall time spent by bmoe-bench around the engine (state probes, cgroup, copies), seconds.
    pub overhead_s: f64,
    /// Cooldown waited before the run, seconds.
    pub cooldown_waited_s: f64,
    /// Whether the condition gate opened (`None` = no gate).
    pub gate_met: Option<bool>,
    /// Conditions still unmet when the gate gave up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_unmet: Vec<String>,
    /// Device state before the run.
    pub state_before: Option<DeviceState>,
    /// Device state after the run.
    pub state_after: Option<DeviceState>,
    /// Memory cgroup of a capped run.
    pub cgroup: Option<CgroupStats>,
    /// Tokens the report trims from the start.
    pub discard_tokens: u32,
    /// Session-mode run.
    pub session: bool,
    /// Token rows in the CSV.
    pub tokens: Option<u64>,
    /// Decode tok/s over the CSV rows (tokens / Σ wall), for the progress line; the report
    /// recomputes everything from the CSV.
    pub tok_s: Option<f64>,
    /// Session runs: one record per request, in the order sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<super::session::TurnRecord>,
    /// Run directory relative to the results root.
    pub dir: String,
}

/// `SIGKILL` for 9, ...; `signal N` for numbers without a portable name.
pub fn signal_name(n: i32) -> String {
    const NAMES: [&str; 15] = [
        "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE",
        "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM",
    ];
    usize::try_from(n)
        .ok()
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("signal {n}"), |s| (*s).to_string())
}

/// `64 MiB`, `1.5 GiB`: a cgroup limit as the manifest would write it.
pub fn human_bytes(b: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if b >= GIB {
        let g = b as f64 / GIB as f64;
        if b.is_multiple_of(GIB) {
            format!("{g:.0} GiB")
        } else {
            format!("{g:.2} GiB")
        }
    } else if b.is_multiple_of(MIB) {
        format!("{} MiB", b / MIB)
    } else {
        format!("{:.1} MiB", b as f64 / MIB as f64)
    }
}

impl RunRecord {
    /// `OOM-killed by the 64 MiB memory cgroup cap (SIGKILL)` when the run's memory cgroup
    /// counted an OOM kill and the engine did not exit normally.
    pub fn oom_text(&self) -> Option<String> {
        let c = self.cgroup.as_ref()?;
        if c.oom_kill.unwrap_or(0) == 0 || self.exit_code == Some(0) {
            return None;
        }
        let how = match (self.signal, self.exit_code) {
            (Some(sig), _) => signal_name(sig),
            (None, Some(code)) => format!("exit status {code}"),
            (None, None) => "killed".into(),
        };
        Some(format!(
            "OOM-killed by the {} memory cgroup cap ({how})",
            human_bytes(c.limit_bytes)
        ))
    }

    /// Why a non-zero exit failed, for `error`: the OOM kill or the signal named, else the
    /// exit status; then `stderr`, what stderr says (its `error:` line, else its last line).
    pub fn exit_text(&self, stderr: &str) -> String {
        let what = match (self.oom_text(), self.signal, self.exit_code) {
            (Some(oom), _, _) => oom,
            (None, Some(sig), _) => format!("killed by {}", signal_name(sig)),
            (None, None, Some(code)) => format!("exit status {code}"),
            (None, None, None) => "no exit status".into(),
        };
        format!("{what}; {stderr}")
    }

    /// The key that identifies a run across resumes.
    pub fn key(&self) -> (String, String, String) {
        (self.sweep.clone(), self.cell.clone(), self.rep.clone())
    }
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, then rename).
///
/// # Errors
/// I/O errors, with the path.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    {
        let mut f =
            File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.sync_all().ok();
    }
    fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

/// SHA-256 of a file as lowercase hex.
///
/// # Errors
/// I/O errors, with the path.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut f, &mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// SHA-256 of bytes as lowercase hex.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// An open results directory.
#[derive(Debug)]
pub struct ResultsDir {
    /// The root.
    pub root: PathBuf,
    /// Held while the sweep (or an engine it started) lives.
    pub lock: super::lock::DirLock,
    jsonl: Mutex<File>,
    done: BTreeSet<(String, String, String)>,
}

impl ResultsDir {
    /// Opens (or creates) `root` for the manifest `text`.
    ///
    /// Refuses a directory another sweep, or an engine a killed sweep left running, still holds
    /// (see [`super::lock`]), a directory holding results unless `resume`, and one started
    /// from a different manifest unless `force`. On resume: removes half-written run directories and re-appends
    /// `results.jsonl` lines lost between a run's rename and its log append.
    ///
    /// # Errors
    /// The refusals above (with a hint), and I/O errors.
    pub fn open(root: &Path, text: &str, resume: bool, force: bool) -> Result<ResultsDir> {
        fs::create_dir_all(root).with_context(|| format!("cannot create {}", root.display()))?;
        // Runs execute in their own directories: every path handed to them must be absolute.
        let root_abs = root
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", root.display()))?;
        let root = root_abs.as_path();
        // Before anything is read or removed: a live orphan writes into its .tmp directory.
        let lock = super::lock::DirLock::acquire(root)?;
        let digest = sha256_bytes(text.as_bytes());
        let digest_path = root.join("manifest.sha256");
        let jsonl_path = root.join("results.jsonl");
        let has_results = jsonl_path.metadata().is_ok_and(|m| m.len() > 0);
        if let Ok(old) = fs::read_to_string(&digest_path) {
            if old.trim() != digest && !force {
                return Err(Hinted::new(
                    format!("the manifest changed since the results in {} were started", root.display()),
                    "pass --force to continue these results with the new manifest, or -o DIR to start a new results directory",
                ).into());
            }
            if has_results && !resume && !force {
                return Err(Hinted::new(
                    format!("{} already holds results", root.display()),
                    "pass --resume to run only what is missing, or -o DIR for a fresh directory",
                )
                .into());
            }
        } else if has_results && !force {
            bail!(
                "{} holds results.jsonl but no manifest.sha256: not a bmoe-bench results directory",
                root.display()
            );
        }
        write_atomic(&root.join("manifest.toml"), text.as_bytes())?;
        write_atomic(&digest_path, format!("{digest}\n").as_bytes())?;

        // Existing log: keep well-formed lines, drop a torn last line.
        let mut logged: BTreeSet<(String, String, String)> = BTreeSet::new();
        let mut kept = String::new();
        let mut torn = false;
        if let Ok(f) = File::open(&jsonl_path) {
            for (no, line) in BufReader::new(f).split(b'\n').enumerate() {
                let line = line.with_context(|| format!("cannot read {}", jsonl_path.display()))?;
                let line = String::from_utf8_lossy(&line);
                match serde_json::from_str::<RunRecord>(&line) {
                    Ok(r) => {
                        logged.insert(r.key());
                        kept.push_str(&line);
                        kept.push('\n');
                    }
                    Err(e) => {
                        // The rewrite below drops it: say so rather than lose it silently.
                        eprintln!(
                            "warning: {}:{}: dropped from the log on resume: not a run record ({e})",
                            jsonl_path.display(),
                            no + 1
                        );
                        torn = true;
                    }
                }
            }
        }
        // Completed runs on disk; half-written ones removed.
        let mut done = BTreeSet::new();
        let mut missing = Vec::new();
        for sweep in read_dirs(root)? {
            for cell in read_dirs(&sweep)? {
                for rep in read_dirs_all(&cell)? {
                    let name = rep
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if name.starts_with('.') && name.ends_with(".tmp") {
                        fs::remove_dir_all(&rep).ok();
                        continue;
                    }
                    let Ok(text) = fs::read_to_string(rep.join("run.json")) else {
                        continue;
                    };
                    let Ok(rec) = serde_json::from_str::<RunRecord>(&text) else {
                        continue;
                    };
                    if !logged.contains(&rec.key()) {
                        missing.push(rec.clone());
                    }
                    done.insert(rec.key());
                }
            }
        }
        if torn || !missing.is_empty() {
            missing.sort_by_key(|r| r.position);
            for r in &missing {
                kept.push_str(&serde_json::to_string(r)?);
                kept.push('\n');
            }
            write_atomic(&jsonl_path, kept.as_bytes())?;
        }
        let jsonl = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&jsonl_path)
            .with_context(|| format!("cannot open {}", jsonl_path.display()))?;
        Ok(ResultsDir {
            lock,
            root: root.to_path_buf(),
            jsonl: Mutex::new(jsonl),
            done,
        })
    }

    /// Whether the run already completed (resume skips it).
    pub fn is_done(&self, sweep: &str, cell: &str, rep: &str) -> bool {
        self.done
            .contains(&(sweep.to_string(), cell.to_string(), rep.to_string()))
    }

    /// The final directory of a run.
    pub fn run_dir(&self, sweep: &str, cell: &str, rep: &str) -> PathBuf {
        self.root.join(sweep).join(cell).join(rep)
    }

    /// The temporary directory a run is written into (emptied first).
    ///
    /// # Errors
    /// I/O errors.
    pub fn fresh_tmp_dir(&self, sweep: &str, cell: &str, rep: &str) -> Result<PathBuf> {
        let d = self.root.join(sweep).join(cell).join(format!(".{rep}.tmp"));
        if d.exists() {
            fs::remove_dir_all(&d).with_context(|| format!("cannot clear {}", d.display()))?;
        }
        fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        Ok(d)
    }

    /// Finishes a run: writes `run.json` into `tmp`, renames it to the run's directory, then
    /// appends the log line.
    ///
    /// # Errors
    /// I/O errors.
    pub fn commit(&self, tmp: &Path, rec: &RunRecord) -> Result<()> {
        let json = serde_json::to_string_pretty(rec)?;
        write_atomic(&tmp.join("run.json"), json.as_bytes())?;
        let dest = self.run_dir(&rec.sweep, &rec.cell, &rec.rep);
        if dest.exists() {
            fs::remove_dir_all(&dest)
                .with_context(|| format!("cannot replace {}", dest.display()))?;
        }
        fs::rename(tmp, &dest)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), dest.display()))?;
        self.log(rec)
    }

    /// Appends a record to `results.jsonl` (one write, flushed).
    ///
    /// # Errors
    /// I/O errors.
    pub fn log(&self, rec: &RunRecord) -> Result<()> {
        let mut line = serde_json::to_string(rec)?;
        line.push('\n');
        let mut f = self
            .jsonl
            .lock()
            .map_err(|_| anyhow::anyhow!("results log lock poisoned"))?;
        f.write_all(line.as_bytes())
            .context("cannot append to results.jsonl")?;
        f.flush().context("cannot append to results.jsonl")?;
        Ok(())
    }
}

fn read_dirs_all(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return Ok(out);
    };
    for e in rd {
        let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

fn read_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(read_dirs_all(dir)?
        .into_iter()
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect())
}

/// Reads every record of a results directory: the last line per run wins.
///
/// # Errors
/// See [`read_records_noting`].
#[cfg(test)]
pub fn read_records(root: &Path) -> Result<Vec<RunRecord>> {
    read_records_noting(root).map(|(r, _)| r)
}

/// Why line `text` of `results.jsonl` is not a usable run record, or the record. `last` = the
/// file ends in this line without a newline (a torn append).
fn parse_record_line(text: &str, last_unterminated: bool) -> Result<RunRecord, String> {
    let clip: String = text.chars().take(60).collect();
    let clip = if clip.len() < text.len() {
        format!("{clip}…")
    } else {
        clip
    };
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) if last_unterminated => {
            return Err("torn last line (cut short without a newline: the sweep was killed while appending it?)".into());
        }
        Err(e) => return Err(format!("not JSON ({e}): {clip:?}")),
    };
    let key = |k: &str| {
        value
            .get(k)
            .and_then(serde_json::Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !(value.is_object() && key("sweep") && key("cell") && key("rep")) {
        return Err(format!(
            "not a run record (no `sweep`, `cell` and `rep`): {clip:?}"
        ));
    }
    let rec: RunRecord =
        serde_json::from_value(value).map_err(|e| format!("bad run record: {e}"))?;
    if let Some(t) = rec.tok_s
        && !(t.is_finite() && t >= 0.0)
    {
        return Err(format!("bad run record: tok_s = {t} is not a rate"));
    }
    let dir = Path::new(&rec.dir);
    if dir.is_absolute()
        || dir
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!(
            "bad run record: dir {:?} is not a directory inside the results",
            rec.dir
        ));
    }
    Ok(rec)
}

/// Reads every record of a results directory (the last line per run wins) and says which
/// lines it skipped: `results.jsonl:N: why` for a torn last line, a line that is not JSON,
/// JSON that is not a run record, or a record with a field of the wrong type or a negative
/// `tok_s`. Blank lines are skipped silently.
///
/// # Errors
/// The directory has no `results.jsonl`, or one with lines but not one valid record.
pub fn read_records_noting(root: &Path) -> Result<(Vec<RunRecord>, Vec<String>)> {
    let path = root.join("results.jsonl");
    let bytes = fs::read(&path).map_err(|e| {
        anyhow::Error::from(Hinted::new(
            format!("cannot read {}: {e}", path.display()),
            "give the directory `bmoe-bench sweep` wrote (default results/<name>)",
        ))
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let unterminated = !text.is_empty() && !text.ends_with('\n');
    let lines: Vec<&str> = text.split('\n').collect();
    let n_lines = if text.ends_with('\n') {
        lines.len() - 1
    } else {
        lines.len()
    };
    let mut by_key: IndexMap<(String, String, String), RunRecord> = IndexMap::new();
    let mut skipped = Vec::new();
    for (i, line) in lines.iter().take(n_lines).enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_record_line(line, unterminated && i + 1 == n_lines) {
            Ok(r) => {
                by_key.shift_remove(&r.key());
                by_key.insert(r.key(), r);
            }
            Err(why) => skipped.push(format!("{}:{}: {why}", path.display(), i + 1)),
        }
    }
    if by_key.is_empty() && !skipped.is_empty() {
        return Err(Hinted::new(
            format!(
                "{} has no valid run record: {} line(s) skipped, the first {}",
                path.display(),
                skipped.len(),
                skipped[0]
            ),
            "is this a bmoe-bench results directory? results.jsonl holds one JSON record per run, appended by `bmoe-bench sweep`",
        )
        .into());
    }
    let mut v: Vec<RunRecord> = by_key.into_values().collect();
    v.sort_by_key(|r| r.position);
    Ok((v, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_resume_reconcile() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("res");
        let rd = ResultsDir::open(&root, "a", false, false).expect("fresh");
        let tmp = rd.fresh_tmp_dir("s", "c", "r1").expect("tmp");
        let rec = RunRecord {
            sweep: "s".into(),
            cell: "c".into(),
            rep: "r1".into(),
            status: "ok".into(),
            ..RunRecord::default()
        };
        rd.commit(&tmp, &rec).expect("commit");
        // A committed run whose log line was lost, and a half-written one.
        let tmp2 = rd.fresh_tmp_dir("s", "c", "r2").expect("tmp");
        let rec2 = RunRecord {
            rep: "r2".into(),
            position: 1,
            ..rec.clone()
        };
        write_atomic(
            &tmp2.join("run.json"),
            serde_json::to_string(&rec2).expect("json").as_bytes(),
        )
        .expect("w");
        fs::rename(&tmp2, rd.run_dir("s", "c", "r2")).expect("mv");
        rd.fresh_tmp_dir("s", "c", "r3").expect("tmp");
        // A torn last log line.
        let mut f = OpenOptions::new()
            .append(true)
            .open(root.join("results.jsonl"))
            .expect("open");
        f.write_all(b"{\"campaign\":\"x\",\"swe").expect("w");
        drop(f);
        drop(rd);

        let e = ResultsDir::open(&root, "a", false, false).expect_err("exists");
        assert!(e.to_string().contains("already holds results"), "{e}");
        let e = ResultsDir::open(&root, "b", true, false).expect_err("changed");
        assert!(e.to_string().contains("manifest changed"), "{e}");

        let rd = ResultsDir::open(&root, "a", true, false).expect("resume");
        assert!(rd.is_done("s", "c", "r1") && rd.is_done("s", "c", "r2"));
        assert!(!rd.is_done("s", "c", "r3"));
        assert!(!root.join("s/c/.r3.tmp").exists());
        let recs = read_records(&root).expect("read");
        assert_eq!(
            recs.iter().map(|r| r.rep.as_str()).collect::<Vec<_>>(),
            ["r1", "r2"]
        );
        let log = fs::read_to_string(root.join("results.jsonl")).expect("log");
        assert_eq!(log.lines().count(), 2, "torn line dropped: {log}");
        // One sweep per directory: a second open while the first lives is refused.
        let e = ResultsDir::open(&root, "a", true, false).expect_err("locked");
        assert!(e.to_string().contains("is in use"), "{e}");
        drop(rd);
        assert!(
            ResultsDir::open(&root, "b", true, true).is_ok(),
            "--force accepts a changed manifest"
        );
    }
}
