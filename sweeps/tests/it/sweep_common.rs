//! Helpers shared by the sweep integration tests: the `bmoe-bench` binary, a tiny stand-in
//! engine (a real shell script that writes a metrics CSV in the contract's v2 layout), and the
//! real `bmoe-cli` when it can be found or built.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The `bmoe-bench` binary under test.
pub fn bench() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bmoe-bench"));
    c.env("NO_COLOR", "1");
    c
}

/// Runs `bmoe-bench` with `args` in `dir`.
pub fn run(dir: &Path, args: &[&str]) -> Output {
    bench()
        .current_dir(dir)
        .env("BMOE_CACHE_DIR", dir.join("cache"))
        .args(args)
        .output()
        .expect("bmoe-bench runs")
}

/// Text of stdout + stderr, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes a stand-in engine: parses `-n` and `--csv`, sleeps `sleep_s`, writes `n` rows with
/// `wall_ms` = 100 + step, appends one line per invocation to `calls.log` next to itself and
/// prints its `/proc/self/cgroup` membership on stdout.
///
/// With `--session` it speaks the session protocol instead: `BMOE_READY`, then for every
/// request line (echoed as `req: ...`) `BMOE_BEGIN` and `BMOE_DONE` with the request's id, and
/// per turn k (1-based) `n` CSV rows with `turn` = k and `wall_ms` = 100·k + step. A prompt
/// containing `FAIL` is answered with a non-fatal `BMOE_ERROR`; one containing `DIE` makes it
/// exit 3 without answering.
pub fn fake_engine(dir: &Path, sleep_s: f64) -> PathBuf {
    let path = dir.join("fake-cli");
    let log = dir.join("calls.log");
    let script = format!(
        r##"#!/bin/sh
csv=""; n=8
for a in "$@"; do echo "arg: $a"; if [ "$a" = "--session" ]; then session=1; fi; done
while [ $# -gt 0 ]; do case "$1" in --csv) csv=$2; shift;; -n) n=$2; shift;; esac; shift; done
echo "call $$" >> '{log}'
sleep {sleep_s}
if [ -n "$session" ]; then
  {{ echo "# bmoe_metrics v2"; echo "# engine=fake-0"; echo "# model=m arch=qwen3moe n_layer=2"
    echo "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms,turn"; }} > "$csv"
  echo 'BMOE_READY {{"load_s":0.01,"arch":"qwen3moe","n_ctx":512,"think_ctl":"template","n_expert_used":2}}'
  turn=0
  while IFS= read -r line; do
    echo "req: $line"
    id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
    [ -z "$id" ] && continue
    case "$line" in *DIE*) exit 3;; esac
    case "$line" in *FAIL*) printf 'BMOE_ERROR {{"id":%s,"fatal":false,"msg":"refused"}}\n' "$id"; continue;; esac
    turn=$((turn+1))
    np=$(printf '%s' "$line" | sed -n 's/.*"n_predict":\([0-9]*\).*/\1/p'); [ -n "$np" ] && n=$np
    printf 'BMOE_BEGIN {{"id":%s}}\n' "$id"
    i=1; while [ $i -le $n ]; do echo "$i,$n,$((100 * turn + i)).000,10.000,80.000,2097152,50.00,0.000,1.000,$turn" >> "$csv"; i=$((i+1)); done
    printf 'BMOE_DONE {{"id":%s,"cancelled":false,"tokens":%s,"tok_s":9.5,"prefill_s":0.5,"n_prompt":%s,"n_past":%s,"cache_hit_pct":50.0,"text":"t%s","reasoning":""}}\n' "$id" "$n" "$((10 * turn))" "$((20 * turn))" "$turn"
  done
  echo "# summary tokens=$((n * turn)) cache_hit_pct=50.0" >> "$csv"
  exit 0
fi
{{ echo "# bmoe_metrics v2"; echo "# engine=fake-0"; echo "# model=m arch=qwen3moe n_layer=2"
  echo "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms"
  i=1; while [ $i -le $n ]; do echo "$i,$n,$((100 + i)).000,10.000,80.000,2097152,50.00,0.000,1.000"; i=$((i+1)); done
  echo "# summary tokens=$n cache_hit_pct=50.0"; }} > "$csv"
echo "cgroup:"; cat /proc/self/cgroup
"##,
        log = log.display()
    );
    std::fs::write(&path, script).expect("write fake engine");
    let _ = Command::new("chmod").arg("755").arg(&path).status();
    path
}

/// Invocations of the fake engine so far.
pub fn calls(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("calls.log")).map_or(0, |t| t.lines().count())
}

/// Lines of `results.jsonl` as JSON values.
pub fn records(results: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(results.join("results.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid jsonl line"))
        .collect()
}

/// (pid, process group) of every process whose command line writes a CSV under `res`.
pub fn engines_in(res: &Path) -> Vec<(u32, u32)> {
    let needle = res.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !(cmd.contains("--csv") && cmd.contains(&needle)) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // A zombie waiting for its parent is not running anything.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().collect())
            .unwrap_or_default();
        if fields.first() == Some(&"Z") {
            continue;
        }
        if let Some(pgid) = fields.get(2).and_then(|v| v.parse().ok()) {
            out.push((pid, pgid));
        }
    }
    out
}

/// Waits up to `secs` for `f` to hold.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Starts `bmoe-bench sweep MANIFEST -o res` in `dir` in the background, waits (up to 60 s)
/// until `res/results.jsonl` holds at least `records_wanted` runs, then `extra` longer, and kills
/// it with SIGKILL: a sweep interrupted for real, partway. The engine run it leaves behind (an
/// orphan that keeps the results directory locked) is waited for, up to 60 s. Returns the
/// results directory.
pub fn sweep_killed_after(
    dir: &Path,
    manifest: &str,
    records_wanted: usize,
    extra: std::time::Duration,
) -> PathBuf {
    let mut child = bench()
        .current_dir(dir)
        .env("BMOE_CACHE_DIR", dir.join("cache"))
        .args(["sweep", manifest, "-o", "res"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let res = dir.join("res");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while records(&res).len() < records_wanted && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(extra);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(
        wait_for(60, || engines_in(&res).is_empty()),
        "the killed sweep's engine still runs after 60 s: {:?}",
        engines_in(&res)
    );
    res
}

/// The workspace root (`sweeps/..`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

/// The real engine: `$BMOE_CLI`, next to `bmoe-bench`, or built with cargo. `Err(reason)`
/// when it cannot be had or does not take `--csv` yet.
pub fn bmoe_cli() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("BMOE_CLI") {
        candidates.push(PathBuf::from(p));
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_bmoe-bench"));
    if let Some(d) = exe.parent() {
        candidates.push(d.join("bmoe-cli"));
    }
    let mut found = candidates.into_iter().find(|p| p.is_file());
    if found.is_none() {
        let root = workspace_root();
        if !root.join("engine/Cargo.toml").is_file() {
            return Err("the engine crate is not in this checkout".into());
        }
        eprintln!("building bmoe-cli (cargo build -p bmoe-engine --bin bmoe-cli) ...");
        let target = exe.parent().and_then(Path::parent).map(Path::to_path_buf);
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.current_dir(&root)
            .args(["build", "-p", "bmoe-engine", "--bin", "bmoe-cli"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(t) = &target {
            c.env("CARGO_TARGET_DIR", t);
        }
        let mut child = c.spawn().map_err(|e| format!("cannot run cargo: {e}"))?;
        // Under `cargo test` the target directory is usually locked by the outer cargo: a
        // nested build would wait forever, so give up as soon as cargo says it is blocked.
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("Blocking waiting for file lock") {
                    let _ = tx.send(());
                }
            }
        });
        loop {
            if rx.try_recv().is_ok() {
                let _ = child.kill();
                let _ = child.wait();
                return Err("bmoe-cli is not built and the target directory is locked by this cargo; run `cargo build -p bmoe-engine --bin bmoe-cli` first or set BMOE_CLI".into());
            }
            if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                if !st.success() {
                    return Err("`cargo build -p bmoe-engine --bin bmoe-cli` failed".into());
                }
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        found = target
            .map(|t| t.join("debug/bmoe-cli"))
            .filter(|p| p.is_file());
    }
    let cli = found.ok_or("bmoe-cli was not found after building")?;
    let help = Command::new(&cli)
        .arg("--help")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    if !String::from_utf8_lossy(&help.stdout).contains("--csv") {
        return Err(format!("{} does not take --csv yet", cli.display()));
    }
    Ok(cli)
}

/// The real engine for test `test` when it takes `flag`; otherwise prints why the test is
/// skipped and returns `None`.
pub fn real_cli_or_skip(test: &str, flag: &str) -> Option<PathBuf> {
    let cli = match bmoe_cli() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIP {test}: {why}");
            return None;
        }
    };
    let help = Command::new(&cli).arg("--help").output().ok()?;
    if !String::from_utf8_lossy(&help.stdout).contains(flag) {
        eprintln!("SKIP {test}: {} has no {flag}", cli.display());
        return None;
    }
    Some(cli)
}
