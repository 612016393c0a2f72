//! Executes a [`Plan`]: devices in parallel, each device's runs in plan order; binaries and
//! models staged once per remote device; every run's artifacts committed atomically.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::os::unix::process::CommandExt as _;

use anyhow::{Context, Result};
use bmoe_telemetry::metrics::MetricsReader;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::Hinted;
use super::cgroup::{self, CgroupStats};
use super::device::{Device, run_command_line, shell_quote};
use super::expand::{Cell, ModelSource, Plan, PlannedRun};
use super::progress::Progress;
use super::results::{ResultsDir, RunRecord, sha256_file, write_atomic};
use super::session;
use super::state::{DeviceState, PROBE};

/// Runner options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Results directory.
    pub out: PathBuf,
    /// Skip completed runs.
    pub resume: bool,
    /// Accept a changed manifest.
    pub force: bool,
}

/// What a sweep did.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Runs executed this time, by status.
    pub by_status: BTreeMap<String, usize>,
    /// Runs skipped because they were complete.
    pub resumed: usize,
    /// Devices that dropped out.
    pub lost_devices: Vec<String>,
    /// Runs stopped by a signal (Ctrl-C, SIGTERM, SIGHUP) and not recorded.
    pub interrupted: usize,
}

/// Resolves a binary: a path (must exist), or a bare name looked up in `$BMOE_CLI` (for the
/// default `bmoe-cli`), next to this executable, then on `PATH`.
///
/// # Errors
/// Not found, with a hint on how to build it.
pub fn resolve_binary(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        if p.is_file() {
            // Runs execute in their own directory: the path must not depend on ours.
            return Ok(p.canonicalize().unwrap_or(p));
        }
        return Err(Hinted::new(
            format!("engine binary {} does not exist", p.display()),
            "build it (`cargo build --release -p bmoe-engine --bin bmoe-cli`) or fix `binary` in the manifest",
        )
        .into());
    }
    if name == "bmoe-cli"
        && let Some(p) = std::env::var_os("BMOE_CLI")
    {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join(name));
        if let Some(up) = dir.parent() {
            candidates.push(up.join(name));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(name)));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        Hinted::new(
            format!("engine binary `{name}` not found next to bmoe-bench or on PATH"),
            "build it with `cargo build --release -p bmoe-engine --bin bmoe-cli`, set BMOE_CLI=/path/to/bmoe-cli, or set `binary` in the manifest",
        )
        .into()
    })
}

/// Where synthetic models are cached: `$BMOE_CACHE_DIR`, `$XDG_CACHE_HOME/bmoe`, `~/.cache/bmoe`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BMOE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("bmoe");
    }
    std::env::var_os("HOME").map_or_else(
        || std::env::temp_dir().join("bmoe-cache"),
        |h| PathBuf::from(h).join(".cache/bmoe"),
    )
}

/// Builds a preset model on first use (atomically) and returns its path.
///
/// # Errors
/// The synthesiser failed.
pub fn ensure_preset(
    preset: &str,
    expert_type: Option<&str>,
    seed: Option<u64>,
) -> Result<PathBuf> {
    use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
    let p = Preset::from_name(preset).with_context(|| format!("unknown preset `{preset}`"))?;
    let mut opts = SynthOptions::preset(p);
    let mut name = format!("synth-{preset}");
    if let Some(t) = expert_type {
        opts.expert_type = bmoe_gguf::GgmlType::from_name(t)
            .with_context(|| format!("unknown expert type `{t}`"))?;
        name.push_str(&format!("-{}", t.to_ascii_lowercase()));
    }
    if let Some(s) = seed {
        opts.seed = s;
        name.push_str(&format!("-s{s}"));
    }
    let dir = cache_dir();
    let path = dir.join(format!("{name}.gguf"));
    if path.is_file() {
        return Ok(path);
    }
    fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the model cache {}", dir.display()))?;
    eprintln!("building synthetic model `{preset}` -> {}", path.display());
    let tmp = dir.join(format!(".{name}.{}.gguf", std::process::id()));
    write_model(&opts, &tmp).with_context(|| format!("cannot build preset `{preset}`"))?;
    fs::rename(&tmp, &path)
        .with_context(|| format!("cannot move the model to {}", path.display()))?;
    Ok(path)
}

/// A model's local file (for staging), or its fixed path on a device.
fn local_model(src: &ModelSource) -> Result<Option<PathBuf>> {
    Ok(match src {
        ModelSource::File(p) => {
            if !p.is_file() {
                return Err(Hinted::new(
                    format!("model file {} does not exist", p.display()),
                    "fix `path`, or use preset = \"tiny\" for a synthetic model",
                )
                .into());
            }
            Some(p.canonicalize().unwrap_or_else(|_| p.clone()))
        }
        ModelSource::PerDevice(_) => None,
        ModelSource::Preset {
            preset,
            expert_type,
            seed,
        } => Some(ensure_preset(preset, expert_type.as_deref(), *seed)?),
    })
}

struct Shared<'a> {
    plan: &'a Plan,
    results: &'a ResultsDir,
    binaries: BTreeMap<String, (PathBuf, String)>,
    models: BTreeMap<String, Option<PathBuf>>,
    progress: &'a Progress,
    stop: &'a AtomicBool,
}

/// Runs the plan into `opts.out`.
///
/// # Errors
/// Setup failures (results directory, binaries, models). Failures of single runs and lost
/// devices are recorded, not returned.
pub fn run(
    plan: &Plan,
    manifest_text: &str,
    opts: &RunOptions,
    stop: &AtomicBool,
) -> Result<Outcome> {
    let results = ResultsDir::open(&opts.out, manifest_text, opts.resume, opts.force)?;
    write_atomic(
        &opts.out.join("plan.json"),
        serde_json::to_string_pretty(plan)?.as_bytes(),
    )?;

    // Resolve every binary and model before the first run: a typo fails now, not in hour 3.
    let mut binaries = BTreeMap::new();
    for c in &plan.cells {
        if !binaries.contains_key(&c.binary) {
            let p = resolve_binary(&c.binary)?;
            let sha = sha256_file(&p)?;
            binaries.insert(c.binary.clone(), (p, sha));
        }
    }
    let mut models = BTreeMap::new();
    for c in &plan.cells {
        if !models.contains_key(&c.model) {
            let src = plan
                .models
                .get(&c.model)
                .with_context(|| format!("model `{}` missing from the plan", c.model))?;
            models.insert(c.model.clone(), local_model(src)?);
        }
    }

    let progress = Progress::new(plan);
    let shared = Shared {
        plan,
        results: &results,
        binaries,
        models,
        progress: &progress,
        stop,
    };
    let mut outcome = Outcome::default();
    let per_device: Vec<(usize, Vec<(usize, &PlannedRun)>)> = plan
        .devices
        .iter()
        .enumerate()
        .map(|(di, d)| {
            let runs = plan
                .runs
                .iter()
                .enumerate()
                .filter(|(_, r)| plan.cells[r.cell].device == d.id)
                .collect();
            (di, runs)
        })
        .filter(|(_, runs): &(usize, Vec<_>)| !runs.is_empty())
        .collect();
    let results_per_device: Vec<DeviceOutcome> = std::thread::scope(|s| {
        let handles: Vec<_> = per_device
            .iter()
            .map(|(di, runs)| {
                let shared = &shared;
                s.spawn(move || run_device(shared, *di, runs))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| DeviceOutcome::panicked()))
            .collect()
    });
    progress.finish();
    for d in results_per_device {
        for (k, v) in d.by_status {
            *outcome.by_status.entry(k).or_default() += v;
        }
        outcome.resumed += d.resumed;
        outcome.interrupted += d.interrupted;
        if let Some(lost) = d.lost {
            outcome.lost_devices.push(lost);
        }
    }
    Ok(outcome)
}

#[derive(Default)]
struct DeviceOutcome {
    /// Runs cut short by a signal (not recorded).
    interrupted: usize,
    by_status: BTreeMap<String, usize>,
    resumed: usize,
    lost: Option<String>,
}

impl DeviceOutcome {
    fn panicked() -> DeviceOutcome {
        let mut d = DeviceOutcome::default();
        d.by_status.insert("internal-error".into(), 1);
        d
    }
}

/// Remote paths of staged files, per local path.
struct Stager<'a> {
    dev: &'a Device,
    staged: BTreeMap<PathBuf, String>,
}

impl Stager<'_> {
    /// Copies `local` (digest `sha`) to the device once: skipped when a file with that digest
    /// is already there, verified after the copy.
    fn stage(&mut self, local: &Path, sha: &str, sub: &str, exec: bool) -> Result<String, String> {
        if let Some(r) = self.staged.get(local) {
            return Ok(r.clone());
        }
        let name = local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        let dir = format!("{}/{sub}", self.dev.workdir());
        let remote = format!("{dir}/{}-{name}", &sha[..12.min(sha.len())]);
        let q = shell_quote(&remote);
        let check = format!("sha256sum {q} 2>/dev/null | cut -d' ' -f1");
        let have = self.dev.exec_ok(&check).unwrap_or_default();
        if have.trim() != sha {
            self.dev
                .exec_ok(&format!("mkdir -p {}", shell_quote(&dir)))?;
            let tmp = format!("{remote}.part");
            self.dev.push(local, &tmp)?;
            let mode = if exec { "755" } else { "644" };
            self.dev.exec_ok(&format!(
                "chmod {mode} {t} && mv -f {t} {q}",
                t = shell_quote(&tmp)
            ))?;
            let after = self.dev.exec_ok(&check)?;
            if after.trim() != sha {
                return Err(format!(
                    "checksum mismatch after copying {} to {remote}",
                    local.display()
                ));
            }
        }
        self.staged.insert(local.to_path_buf(), remote.clone());
        Ok(remote)
    }
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn probe(dev: &Device) -> Option<DeviceState> {
    dev.exec(PROBE)
        .ok()
        .filter(|o| o.status.success())
        .map(|o| DeviceState::parse(&String::from_utf8_lossy(&o.stdout)))
}

fn run_device(sh: &Shared<'_>, di: usize, runs: &[(usize, &PlannedRun)]) -> DeviceOutcome {
    let plan = sh.plan;
    let dev = Device::new(plan.devices[di].clone());
    let mut out = DeviceOutcome::default();
    let mut stager = Stager {
        dev: &dev,
        staged: BTreeMap::new(),
    };
    let mut first = true;
    let mut lost: Option<String> = None;
    let total = runs.len();
    for (i, (position, run)) in runs.iter().enumerate() {
        let cell = &plan.cells[run.cell];
        if sh.results.is_done(&cell.sweep, &cell.tag, &run.rep) {
            out.resumed += 1;
            sh.progress.run_skipped(&dev.def.id);
            continue;
        }
        let mut rec = base_record(plan, cell, run, *position, &dev);
        if sh.stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(reason) = &lost {
            rec.status = "device-lost".into();
            rec.error = Some(reason.clone());
            let _ = sh.results.log(&rec);
            *out.by_status.entry(rec.status.clone()).or_default() += 1;
            sh.progress.run_done(&dev.def.id, &rec, i + 1 == total);
            continue;
        }
        sh.progress.run_started(&dev.def.id, cell, &run.rep);
        let result = execute(sh, &dev, &mut stager, cell, run, &mut rec, first);
        first = false;
        match result {
            Ok(Some(tmp)) => {
                if let Err(e) = sh.results.commit(&tmp, &rec) {
                    rec.status = "failed".into();
                    rec.error = Some(format!("{e:#}"));
                }
            }
            Ok(None) => {
                let _ = sh.results.log(&rec);
            }
            Err(_) if rec.status == "interrupted" => {
                let tmp = sh.results.root.join(&cell.sweep).join(&cell.tag);
                let _ = fs::remove_dir_all(tmp.join(format!(".{}.tmp", run.rep)));
                out.interrupted += 1;
                break;
            }
            Err(e) => {
                rec.error = Some(e.clone());
                if dev.is_remote() && !dev.alive() {
                    rec.status = "device-lost".into();
                    lost = Some(format!("device `{}` stopped answering: {e}", dev.def.id));
                    out.lost = Some(dev.def.id.clone());
                } else if rec.status.is_empty() || rec.status == "ok" {
                    rec.status = "failed".into();
                }
                let _ = sh.results.log(&rec);
            }
        }
        *out.by_status.entry(rec.status.clone()).or_default() += 1;
        sh.progress.run_done(&dev.def.id, &rec, i + 1 == total);
        if rec.status == "abort" {
            break;
        }
    }
    out
}

fn base_record(
    plan: &Plan,
    cell: &Cell,
    run: &PlannedRun,
    position: usize,
    dev: &Device,
) -> RunRecord {
    RunRecord {
        campaign: plan.name.clone(),
        sweep: cell.sweep.clone(),
        cell: cell.tag.clone(),
        rep: run.rep.clone(),
        warmup: run.warmup,
        pass: run.pass,
        position,
        device: dev.def.id.clone(),
        device_kind: dev.kind_name().into(),
        address: dev.address(),
        model: cell.model.clone(),
        binary: cell.binary.clone(),
        env: cell.env.clone(),
        axes: cell.axes.iter().cloned().collect(),
        discard_tokens: cell.discard_tokens,
        session: cell.session,
        dir: format!("{}/{}/{}", cell.sweep, cell.tag, run.rep),
        ..RunRecord::default()
    }
}

/// Cooldown before a run; `Err` = skip/abort the run.
fn cooldown(
    sh: &Shared<'_>,
    dev: &Device,
    cell: &Cell,
    rec: &mut RunRecord,
) -> Result<(), &'static str> {
    let c = &cell.cooldown;
    let start = Instant::now();
    match c.mode {
        "fixed" => sleep_unless_stopped(sh, c.fixed_s),
        "condition" => {
            sleep_unless_stopped(sh, c.fixed_s);
            loop {
                let st = probe(dev).unwrap_or_default();
                let unmet = st.unmet(&c.until);
                if unmet.is_empty() {
                    rec.gate_met = Some(true);
                    break;
                }
                if start.elapsed().as_secs_f64() >= c.max_wait_s || sh.stop.load(Ordering::Relaxed)
                {
                    rec.gate_met = Some(false);
                    rec.gate_unmet = unmet;
                    rec.cooldown_waited_s = start.elapsed().as_secs_f64();
                    return match c.on_timeout {
                        "skip" => Err("skipped"),
                        "abort" => Err("abort"),
                        _ => Ok(()),
                    };
                }
                sh.progress
                    .note(&dev.def.id, &format!("cooling down: {}", unmet.join(", ")));
                sleep_unless_stopped(
                    sh,
                    c.poll_s
                        .min(c.max_wait_s - start.elapsed().as_secs_f64())
                        .max(0.05),
                );
            }
        }
        _ => {}
    }
    rec.cooldown_waited_s = start.elapsed().as_secs_f64();
    Ok(())
}

fn sleep_unless_stopped(sh: &Shared<'_>, secs: f64) {
    let end = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    while Instant::now() < end && !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(200)));
    }
}

/// Runs one cell once. `Ok(Some(tmp))` = artifacts ready to commit, `Ok(None)` = recorded
/// without artifacts (skipped), `Err` = failed before or around the engine.
fn execute(
    sh: &Shared<'_>,
    dev: &Device,
    stager: &mut Stager<'_>,
    cell: &Cell,
    run: &PlannedRun,
    rec: &mut RunRecord,
    first: bool,
) -> Result<Option<PathBuf>, String> {
    let cooled = if first {
        Ok(())
    } else {
        cooldown(sh, dev, cell, rec)
    };
    if sh.stop.load(Ordering::Relaxed) {
        rec.status = "interrupted".into();
        return Err("interrupted by a signal".into());
    }
    if let Err(what) = cooled {
        rec.status = what.into();
        rec.error = Some(format!(
            "cooldown gate gave up after {:.0} s: {}",
            rec.cooldown_waited_s,
            rec.gate_unmet.join(", ")
        ));
        return Ok(None);
    }
    let t0 = Instant::now();
    let tmp = sh
        .results
        .fresh_tmp_dir(&cell.sweep, &cell.tag, &run.rep)
        .map_err(|e| format!("{e:#}"))?;

    // Binary and model paths on the device.
    let (bin_local, bin_sha) = sh
        .binaries
        .get(&cell.binary)
        .cloned()
        .ok_or("binary not resolved")?;
    rec.binary = bin_local.to_string_lossy().into_owned();
    rec.binary_sha256 = Some(bin_sha.clone());
    let model_local = sh.models.get(&cell.model).cloned().flatten();
    let (bin_dev, model_dev) = if dev.is_remote() {
        let b = stager.stage(&bin_local, &bin_sha, "bin", true)?;
        let m = match (&model_local, sh.plan.models.get(&cell.model)) {
            (_, Some(ModelSource::PerDevice(map))) => {
                map.get(&dev.def.id).cloned().ok_or_else(|| {
                    format!(
                        "model `{}` has no path for device `{}`",
                        cell.model, dev.def.id
                    )
                })?
            }
            (Some(l), _) => {
                let sha = model_sha(l)?;
                stager.stage(l, &sha, "models", false)?
            }
            _ => return Err(format!("model `{}` has no file to stage", cell.model)),
        };
        (b, m)
    } else {
        let m = match (&model_local, sh.plan.models.get(&cell.model)) {
            (Some(l), _) => l.to_string_lossy().into_owned(),
            (None, Some(ModelSource::PerDevice(map))) => {
                map.get(&dev.def.id).cloned().ok_or_else(|| {
                    format!(
                        "model `{}` has no path for device `{}`",
                        cell.model, dev.def.id
                    )
                })?
            }
            _ => return Err(format!("model `{}` has no path", cell.model)),
        };
        (bin_local.to_string_lossy().into_owned(), m)
    };
    rec.model_path = model_dev.clone();

    // Where the run executes on the device.
    let run_dir_dev = if dev.is_remote() {
        let d = format!(
            "{}/runs/{}/{}/{}/{}",
            dev.workdir(),
            sh.plan.dir_name,
            cell.sweep,
            cell.tag,
            run.rep
        );
        dev.exec_ok(&format!("rm -rf {q} && mkdir -p {q}", q = shell_quote(&d)))?;
        d
    } else {
        tmp.to_string_lossy().into_owned()
    };
    let csv_dev = format!("{run_dir_dev}/metrics.csv");
    let mut args = vec!["-m".to_string(), model_dev.clone()];
    args.extend(cell.args.iter().cloned());
    args.push("--csv".into());
    args.push(csv_dev.clone());
    rec.argv = std::iter::once(bin_dev.clone())
        .chain(args.iter().cloned())
        .collect();

    // Memory cgroup.
    let mut cg: Option<CgroupStats> = None;
    if let Some(limit) = cell.mem_limit {
        let name = format!("bmoe-bench-{}-{}", std::process::id(), rec.position);
        let dir = dev
            .exec_ok(&cgroup::setup_script(&name, limit))
            .map_err(|e| {
                format!(
                    "cannot create a memory cgroup on `{}`: {e}\nhint: {}",
                    dev.def.id,
                    cgroup::HINT
                )
            })?;
        cg = Some(CgroupStats {
            dir: dir.trim().to_string(),
            limit_bytes: limit,
            ..CgroupStats::default()
        });
    }

    rec.state_before = probe(dev);
    let env: Vec<(String, String)> = cell
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remote_timeout = if dev.is_remote() {
        cell.timeout_s
    } else {
        None
    };
    let line = run_command_line(
        &run_dir_dev,
        &env,
        cg.as_ref().map(|c| c.dir.as_str()),
        remote_timeout,
        &bin_dev,
        &args,
    );
    let argv = dev.exec_argv(&line);
    let stdout = File::create(tmp.join("stdout.txt"))
        .map_err(|e| format!("cannot create stdout.txt: {e}"))?;
    let stderr = File::create(tmp.join("stderr.txt"))
        .map_err(|e| format!("cannot create stderr.txt: {e}"))?;
    let overhead_before = t0.elapsed();

    rec.started_unix = now_unix();
    let started = Instant::now();
    let session = cell.stdin.is_some();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(if session {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        // A session's stdout is read as it comes (its answers pace the requests) and copied
        // into stdout.txt by the driver.
        .stdout(if session {
            Stdio::piped()
        } else {
            Stdio::from(stdout.try_clone().map_err(|e| e.to_string())?)
        })
        .stderr(stderr)
        // A process group of its own: a timeout or Ctrl-C stops the engine and everything it
        // started as one, and an orphan of a killed sweep can be stopped by one `kill -- -PGID`
        // (the sweep forwards the terminal's SIGINT itself, see `wait`).
        .process_group(0);
    let mut child = {
        let _g = super::lock::spawn_guard();
        // The engine inherits the results lock: while it lives, even as an orphan of a killed
        // sweep, no other sweep (or --resume) runs in this directory.
        let _inherited = sh
            .results
            .lock
            .inheritable()
            .map_err(|e| format!("{e:#}"))?;
        cmd.spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", argv[0]))?
    };
    let driver = match (&cell.stdin, child.stdin.take(), child.stdout.take()) {
        (Some(text), Some(stdin), Some(out)) => Some(session::drive(stdin, out, stdout, text)),
        _ => None,
    };
    let live = if dev.is_remote() {
        tmp.join("stderr.txt")
    } else {
        tmp.join("metrics.csv")
    };
    let (status, ended) = wait(
        sh,
        &mut child,
        cell.timeout_s,
        &dev.def.id,
        &live,
        !dev.is_remote(),
    );
    let timed_out = ended == Ended::TimedOut;
    rec.duration_s = started.elapsed().as_secs_f64();
    if ended == Ended::Stopped {
        if let Some(d) = driver {
            d.finish();
        }
        // Not recorded: the run was cut short by the user, so --resume runs it again.
        rec.status = "interrupted".into();
        return Err("interrupted by a signal".into());
    }
    let t1 = Instant::now();
    if let Some(d) = driver {
        rec.turns = d.finish();
    }
    rec.exit_code = status.and_then(|s| s.code());
    rec.signal = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
    rec.timed_out = timed_out
        || (dev.is_remote()
            && cell.timeout_s.is_some_and(|t| rec.duration_s >= t)
            && rec.exit_code == Some(137));

    if dev.is_remote() {
        if dev.transport_failed(rec.exit_code) && !dev.alive() {
            return Err(format!(
                "lost the connection during the run (exit {:?})",
                rec.exit_code
            ));
        }
        let _ = dev.pull(&csv_dev, &tmp.join("metrics.csv"));
        if cg.is_some() {
            let _ = dev.pull(
                &format!("{run_dir_dev}/cgroup.txt"),
                &tmp.join("cgroup.txt"),
            );
        }
        let _ = dev.exec(&format!("rm -rf {}", shell_quote(&run_dir_dev)));
    }
    rec.state_after = probe(dev);
    if let Some(mut c) = cg {
        if let Ok(o) = dev.exec(&cgroup::cleanup_script(&c.dir)) {
            c.parse_cleanup(&String::from_utf8_lossy(&o.stdout));
        }
        c.membership = fs::read_to_string(tmp.join("cgroup.txt")).ok();
        rec.cgroup = Some(c);
    }
    let csv = tmp.join("metrics.csv");
    if let Some((n, tps)) = quick_rate(&csv) {
        rec.tokens = Some(n);
        rec.tok_s = tps;
    }
    let unanswered = rec
        .turns
        .iter()
        .find(|t| t.status == "missing" && matches!(t.cmd.as_str(), "generate" | "decide"));
    rec.status = if rec.timed_out {
        "timeout".into()
    } else if rec.exit_code == Some(0) {
        if csv.is_file() && unanswered.is_none() {
            "ok".into()
        } else {
            "failed".into()
        }
    } else {
        "failed".into()
    };
    if rec.status == "failed" {
        rec.error = Some(if rec.exit_code == Some(0) {
            match unanswered {
                Some(t) => format!(
                    "session turn {} (request id {}) got no answer{}",
                    t.turn,
                    t.id,
                    t.error.as_ref().map_or(String::new(), |e| format!(": {e}"))
                ),
                None => "the engine exited 0 but wrote no CSV".into(),
            }
        } else {
            rec.exit_text(&stderr_summary(&tmp.join("stderr.txt")))
        });
    }
    let state = serde_json::json!({"before": rec.state_before, "after": rec.state_after, "cooldown_waited_s": rec.cooldown_waited_s, "gate_met": rec.gate_met});
    fs::write(
        tmp.join("state.json"),
        serde_json::to_string_pretty(&state).unwrap_or_default(),
    )
    .map_err(|e| e.to_string())?;
    let mut device_command = argv;
    if !dev.is_remote() {
        // The CSV was written into the temporary directory that is about to become the run's:
        // argv.json and run.json both name the final one, where the files will be.
        let final_dir = sh.results.run_dir(&cell.sweep, &cell.tag, &run.rep);
        let (from, to) = (
            tmp.to_string_lossy().into_owned(),
            final_dir.to_string_lossy().into_owned(),
        );
        for a in rec.argv.iter_mut().chain(device_command.iter_mut()) {
            if a.contains(&from) {
                *a = a.replace(&from, &to);
            }
        }
    }
    let argv_json =
        serde_json::json!({"argv": rec.argv, "env": cell.env, "device_command": device_command});
    fs::write(
        tmp.join("argv.json"),
        serde_json::to_string_pretty(&argv_json).unwrap_or_default(),
    )
    .map_err(|e| format!("cannot write argv.json: {e}"))?;
    rec.overhead_s = (overhead_before + t1.elapsed()).as_secs_f64();
    Ok(Some(tmp))
}

fn model_sha(path: &Path) -> Result<String, String> {
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    if let Some(s) = cache.lock().ok().and_then(|c| c.get(path).cloned()) {
        return Ok(s);
    }
    let s = sha256_file(path).map_err(|e| format!("{e:#}"))?;
    if let Ok(mut c) = cache.lock() {
        c.insert(path.to_path_buf(), s.clone());
    }
    Ok(s)
}

/// What a failed run's stderr says, for its `error`: the last `error:` line with the `tip:` and
/// `hint:` lines after it (clap puts a usage block between them and the hint last, so the last
/// line alone is only the hint), else `last stderr line: ...`.
fn stderr_summary(path: &Path) -> String {
    let clip = |l: &str| -> String { l.chars().take(300).collect() };
    let text = fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if let Some(i) = lines.iter().rposition(|l| l.starts_with("error:")) {
        let mut parts = vec![clip(lines[i])];
        parts.extend(
            lines[i + 1..]
                .iter()
                .filter(|l| l.starts_with("tip:") || l.starts_with("hint:"))
                .map(|l| clip(l)),
        );
        return parts.join("; ");
    }
    format!(
        "last stderr line: {}",
        lines.last().map_or_else(|| "(empty)".into(), |l| clip(l))
    )
}

/// Token count and tok/s (tokens / Σ wall) of a CSV.
fn quick_rate(csv: &Path) -> Option<(u64, Option<f64>)> {
    let reader = MetricsReader::open(csv).ok()?;
    let (mut n, mut wall) = (0u64, 0.0f64);
    for row in reader.flatten() {
        n += 1;
        wall += row.wall_ms.unwrap_or(0.0);
    }
    Some((n, (wall > 0.0).then(|| n as f64 / (wall / 1000.0))))
}

/// Counts tokens in a growing file: CSV data rows (local) or `BMOE_PROGRESS` lines (remote).
struct Tail {
    path: PathBuf,
    offset: u64,
    tokens: u64,
    csv: bool,
    partial: Vec<u8>,
}

impl Tail {
    fn poll(&mut self) -> u64 {
        let Ok(mut f) = File::open(&self.path) else {
            return self.tokens;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return self.tokens;
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return self.tokens;
        }
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            let counted = if self.csv {
                line.first().is_some_and(u8::is_ascii_digit)
            } else {
                line.starts_with(b"BMOE_PROGRESS")
            };
            if counted {
                self.tokens += 1;
            }
        }
        self.tokens
    }
}

/// SIGKILLs `pid`'s descendants (found through `/proc`), so a timed-out engine cannot leave
/// helpers behind even if they left its process group; the caller kills the group.
fn kill_tree(pid: u32) {
    let mut family = vec![pid];
    loop {
        let before = family.len();
        for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u32>().ok());
            if ppid.is_some_and(|pp| family.contains(&pp)) && !family.contains(&p) {
                family.push(p);
            }
        }
        if family.len() == before {
            break;
        }
    }
    for p in family.iter().skip(1) {
        if let Ok(p) = i32::try_from(*p) {
            let _ = signal::kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

/// Sends `sig` to the process group of the engine `child` leads.
fn signal_group(child: &Child, sig: Signal) {
    if let Ok(p) = i32::try_from(child.id()) {
        let _ = signal::killpg(Pid::from_raw(p), sig);
    }
}

/// How a run's engine ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// By itself.
    Exited,
    /// Killed at the per-run timeout.
    TimedOut,
    /// Stopped because the sweep was (SIGINT, SIGTERM, SIGHUP).
    Stopped,
}

/// How long an engine gets to finish after the forwarded SIGINT (bmoe-cli ends the token in
/// flight and writes its CSV trailer) before its group is killed.
const GRACE: Duration = Duration::from_secs(5);

/// Waits for the child, enforcing the timeout and feeding the progress bar. When the sweep is
/// stopped, the engine's group gets the SIGINT the terminal would have sent it (it is not in
/// the terminal's foreground group) and [`GRACE`] to exit, then SIGKILL.
fn wait(
    sh: &Shared<'_>,
    child: &mut Child,
    timeout_s: Option<f64>,
    dev: &str,
    live: &Path,
    csv: bool,
) -> (Option<std::process::ExitStatus>, Ended) {
    let start = Instant::now();
    let mut tail = Tail {
        path: live.to_path_buf(),
        offset: 0,
        tokens: 0,
        csv,
        partial: Vec::new(),
    };
    let mut nap = Duration::from_millis(1);
    let mut last_poll = Instant::now();
    let mut stopping: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let how = if stopping.is_some() {
                    Ended::Stopped
                } else {
                    Ended::Exited
                };
                return (Some(st), how);
            }
            Ok(None) => {}
            Err(_) => return (None, Ended::Exited),
        }
        let elapsed = start.elapsed().as_secs_f64();
        let timed_out = timeout_s.is_some_and(|t| elapsed >= t);
        if stopping.is_none() && sh.stop.load(Ordering::Relaxed) && !timed_out {
            signal_group(child, Signal::SIGINT);
            stopping = Some(Instant::now());
        }
        if timed_out || stopping.is_some_and(|t| t.elapsed() >= GRACE) {
            kill_tree(child.id());
            signal_group(child, Signal::SIGKILL);
            let _ = child.kill();
            let st = child.wait().ok();
            let how = if stopping.is_some() {
                Ended::Stopped
            } else {
                Ended::TimedOut
            };
            return (st, how);
        }
        if last_poll.elapsed() >= Duration::from_millis(250) {
            sh.progress.tokens(dev, tail.poll());
            last_poll = Instant::now();
        }
        // Short naps first so a fast run is not padded; longer ones for long runs.
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(50));
    }
}
