//! A sweep killed with SIGKILL leaves its running engine behind (an orphan, in a process group
//! of its own, still holding the results directory's lock): `--resume` refuses to run beside
//! it, naming its pid and how to stop it, and proceeds once it is gone. A sweep stopped with
//! SIGINT instead forwards it to the engine's group, leaves no process behind and records
//! nothing of the run it cut short.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::sweep_common::*;

/// Starts `bmoe-bench sweep MANIFEST -o res` in `dir` and waits until its engine runs.
fn sweep_with_engine_running(dir: &Path, manifest: &str) -> (Child, (u32, u32)) {
    let child = bench()
        .current_dir(dir)
        .env("BMOE_CACHE_DIR", dir.join("cache"))
        .args(["sweep", manifest, "-o", "res"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let res = dir.join("res");
    assert!(
        wait_for(120, || !engines_in(&res).is_empty()),
        "no engine started under {}",
        res.display()
    );
    (child, engines_in(&res)[0])
}

fn kill_group(pgid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, "--", &format!("-{pgid}")])
        .status();
}

#[test]
fn resume_refuses_to_run_beside_the_engine_a_killed_sweep_left() {
    let Some(cli) = real_cli_or_skip("resume_refuses_beside_an_orphan", "--ignore-eos") else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    // 2000 tokens take tens of seconds: the sweep is killed in the middle of its first run.
    let manifest = |n: u32| {
        format!(
            "name = \"orphan\"\nbinary = \"{}\"\n[defaults]\nn_predict = {n}\nprompt = \"hi\"\nflags = [\"--ignore-eos\"]\n[[model]]\nid = \"tiny\"\npreset = \"tiny\"\n[axes.cache]\nflag = \"--cache-mb\"\n[[sweep]]\nname = \"s\"\naxes = {{ cache = [0, 8] }}\n",
            cli.display()
        )
    };
    std::fs::write(t.path().join("o.toml"), manifest(2000)).expect("manifest");
    let res = t.path().join("res");
    let (mut sweep, (pid, pgid)) = sweep_with_engine_running(t.path(), "o.toml");
    sweep.kill().expect("SIGKILL the sweep");
    let _ = sweep.wait();

    // The engine lives on, in a process group of its own (not the sweep's, not ours).
    std::thread::sleep(Duration::from_millis(300));
    assert!(engines_in(&res).contains(&(pid, pgid)), "orphan gone early");
    assert_eq!(pid, pgid, "the engine leads its own process group");

    let o = run(t.path(), &["sweep", "o.toml", "-o", "res", "--resume"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let orphan_still_there = engines_in(&res);
    kill_group(pgid, "-KILL");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("is in use: 1 process(es) hold its lock"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "pid {pid} (process group {pgid}): {}",
            cli.display()
        )),
        "{err}"
    );
    assert!(err.contains(&format!("kill -- -{pgid}")), "{err}");
    assert_eq!(
        orphan_still_there,
        vec![(pid, pgid)],
        "resume started nothing beside the orphan"
    );
    assert!(records(&res).is_empty());

    // Once it is gone the directory is free again (a faster manifest, hence --force).
    assert!(
        wait_for(30, || engines_in(&res).is_empty()),
        "orphan survived SIGKILL"
    );
    std::fs::write(t.path().join("o.toml"), manifest(4)).expect("manifest");
    let o = run(
        t.path(),
        &["sweep", "o.toml", "-o", "res", "--resume", "--force"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let recs = records(&res);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|r| r["status"] == "ok"), "{recs:?}");
}

#[test]
fn sigint_stops_the_engine_group_and_records_nothing_of_the_cut_run() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 30.0);
    std::fs::write(
        t.path().join("s.toml"),
        "name = \"int\"\nbinary = \"./fake-cli\"\n[defaults]\nn_predict = 3\n[[model]]\nid = \"m\"\npreset = \"tiny\"\n[axes.cache]\nflag = \"--cache-mb\"\n[[sweep]]\nname = \"s\"\naxes = { cache = [0, 8] }\n",
    )
    .expect("manifest");
    let res = t.path().join("res");
    let child = bench()
        .current_dir(t.path())
        .env("BMOE_CACHE_DIR", t.path().join("cache"))
        .args(["sweep", "s.toml", "-o", "res"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(wait_for(60, || !engines_in(&res).is_empty()), "no engine");
    let (_, pgid) = engines_in(&res)[0];
    let t0 = Instant::now();
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let left = engines_in(&res);
    if !left.is_empty() {
        kill_group(pgid, "-KILL");
    }
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("interrupted by a signal: 1 run(s) in flight stopped and not recorded"),
        "{err}"
    );
    assert!(err.contains("--resume` runs what is missing"), "{err}");
    assert!(left.is_empty(), "engine group left running: {left:?}");
    assert!(records(&res).is_empty(), "the cut run is not recorded");
    assert!(!res.join("s/m_cache0/.r1.tmp").exists());
    assert_eq!(calls(t.path()), 1, "the second run never started");
}
