//! An `ssh` device against a real `sshd` on 127.0.0.1 (temporary host key, authorized key and
//! port): staging with checksums, results pulled back, staging skipped when present, and a
//! device that drops out mid-sweep.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::sweep_common::*;

struct Sshd {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Sshd {
    /// Kills the listener and every session process it forked, by pid (descendants first
    /// collected, so a reparented grandchild cannot escape).
    fn stop(&mut self) {
        let root = self.child.id();
        let mut family = vec![root];
        loop {
            let before = family.len();
            for (pid, ppid) in processes() {
                if family.contains(&ppid) && !family.contains(&pid) {
                    family.push(pid);
                }
            }
            if family.len() == before {
                break;
            }
        }
        for pid in family.iter().skip(1) {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn processes() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok())
            {
                out.push((pid, ppid));
            }
        }
    }
    out
}

fn start_sshd(dir: &Path) -> Result<Sshd, String> {
    let sshd = Path::new("/usr/sbin/sshd");
    if !sshd.is_file() {
        return Err(
            "/usr/sbin/sshd is not installed (scripts/install-deps.sh installs openssh-server)"
                .into(),
        );
    }
    for tool in ["ssh", "scp", "ssh-keygen"] {
        if Command::new(tool)
            .arg("-V")
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_err()
            && Command::new("which")
                .arg(tool)
                .output()
                .map_or(true, |o| !o.status.success())
        {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    if !Path::new("/run/sshd").is_dir() && std::fs::create_dir_all("/run/sshd").is_err() {
        return Err("sshd needs /run/sshd (privilege separation) and it cannot be created".into());
    }
    for (key, kind) in [("host_key", "ed25519"), ("id", "ed25519")] {
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", kind, "-N", "", "-f"])
            .arg(dir.join(key))
            .status()
            .map_err(|e| e.to_string())?;
        if !st.success() {
            return Err("ssh-keygen failed".into());
        }
    }
    std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys")).map_err(|e| e.to_string())?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let cfg = dir.join("sshd_config");
    std::fs::write(
        &cfg,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\nLogLevel ERROR\nSubsystem sftp {sftp}\n",
            d = dir.display(),
            sftp = ["/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/lib/ssh/sftp-server"]
                .into_iter()
                .find(|p| Path::new(p).is_file())
                .unwrap_or("internal-sftp"),
        ),
    )
    .map_err(|e| e.to_string())?;
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("sshd.log")).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("cannot start sshd: {e}"))?;
    let mut s = Sshd {
        child,
        port,
        dir: dir.to_path_buf(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline || s.child.try_wait().ok().flatten().is_some() {
            let log = std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
            s.stop();
            return Err(format!("sshd did not start: {log}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(s)
}

fn user() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "root".into())
}

fn manifest(s: &Sshd, reps: u32) -> String {
    format!(
        r#"
name = "remote"
binary = "./fake-cli"
[[device]]
id = "box"
kind = "ssh"
host = "127.0.0.1"
port = {port}
user = "{user}"
identity_file = "{d}/id"
ssh_options = ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR"]
workdir = "{d}/remote"
[defaults]
n_predict = 5
repetitions = {reps}
[[model]]
id = "tiny"
preset = "tiny"
[axes.cache]
flag = "--cache-mb"
[[sweep]]
name = "s"
axes = {{ cache = [1, 2] }}
"#,
        port = s.port,
        user = user(),
        d = s.dir.display()
    )
}

#[test]
fn ssh_device_stages_runs_and_pulls_back() {
    let t = tempfile::tempdir().expect("tmp");
    let sshd = match start_sshd(t.path()) {
        Ok(s) => s,
        Err(why) => {
            eprintln!("SKIP ssh_device_stages_runs_and_pulls_back: {why}");
            return;
        }
    };
    fake_engine(t.path(), 0.0);
    std::fs::write(t.path().join("r.toml"), manifest(&sshd, 1)).expect("write");
    let o = run(t.path(), &["sweep", "r.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let recs = records(&t.path().join("res"));
    assert_eq!(recs.len(), 2);
    let remote = t.path().join("remote");
    for r in &recs {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["device_kind"], "ssh");
        assert_eq!(r["tokens"], 5, "CSV pulled back: {r}");
        let argv0 = r["argv"][0].as_str().expect("argv0");
        assert!(
            argv0.starts_with(&format!("{}/bin/", remote.display())),
            "{argv0}"
        );
        let sha = r["binary_sha256"].as_str().expect("sha");
        assert!(
            argv0.ends_with(&format!("{}-fake-cli", &sha[..12])),
            "{argv0}"
        );
        assert!(
            r["model_path"]
                .as_str()
                .expect("model")
                .starts_with(&format!("{}/models/", remote.display()))
        );
        assert!(
            r["state_before"]["mem_total_mib"].as_f64().is_some(),
            "state read over ssh"
        );
    }
    let csv =
        std::fs::read_to_string(t.path().join("res/s/tiny_cache1/r1/metrics.csv")).expect("csv");
    assert!(csv.starts_with("# bmoe_metrics v2"));
    let stdout =
        std::fs::read_to_string(t.path().join("res/s/tiny_cache1/r1/stdout.txt")).expect("stdout");
    assert!(
        stdout.contains("arg: --cache-mb"),
        "stdout streamed back: {stdout}"
    );
    // Remote run directories are removed once pulled.
    assert!(
        std::fs::read_dir(remote.join("runs/remote/s/tiny_cache1"))
            .map_or(true, |mut d| d.next().is_none())
    );

    // Staging is skipped when the checksum matches: the staged files are not rewritten.
    let staged: Vec<PathBuf> = std::fs::read_dir(remote.join("bin"))
        .expect("bin")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(staged.len(), 1, "{staged:?}");
    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let before = mtime(&staged[0]);
    std::thread::sleep(Duration::from_millis(1100));
    let o = run(t.path(), &["sweep", "r.toml", "-o", "res2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        mtime(&staged[0]),
        before,
        "binary re-staged although present"
    );

    // A corrupted staged copy is detected by its checksum and replaced.
    std::fs::write(&staged[0], "broken").expect("corrupt");
    let o = run(t.path(), &["sweep", "r.toml", "-o", "res3"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_ne!(std::fs::read_to_string(&staged[0]).expect("read"), "broken");

    // A session cell over ssh: requests go through the ssh pipe one turn at a time and the
    // answers come back on its stdout.
    let session = manifest(&sshd, 1).replace(
        "axes = { cache = [1, 2] }",
        "session = { prompts = [\"one\", \"two\"], n_predict = 2 }",
    );
    std::fs::write(t.path().join("sess.toml"), session).expect("write");
    let o = run(t.path(), &["sweep", "sess.toml", "-o", "res4"]);
    assert!(o.status.success(), "{}", text(&o));
    let recs = records(&t.path().join("res4"));
    assert_eq!(recs.len(), 1);
    let turns = recs[0]["turns"].as_array().expect("turns");
    let states: Vec<&str> = turns
        .iter()
        .map(|t| t["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["done", "done"], "{}", recs[0]);
    assert_eq!(
        recs[0]["tokens"], 4,
        "CSV of both turns pulled back: {}",
        recs[0]
    );
}

#[test]
fn a_device_that_drops_out_marks_its_runs_failed() {
    let t = tempfile::tempdir().expect("tmp");
    let mut sshd = match start_sshd(t.path()) {
        Ok(s) => s,
        Err(why) => {
            eprintln!("SKIP a_device_that_drops_out_marks_its_runs_failed: {why}");
            return;
        }
    };
    // 1 s a run: sshd stops before a second run ends even if this thread stalls a while
    fake_engine(t.path(), 1.0);
    std::fs::write(t.path().join("r.toml"), manifest(&sshd, 3)).expect("write");
    let child = bench()
        .current_dir(t.path())
        .env("BMOE_CACHE_DIR", t.path().join("cache"))
        .args(["sweep", "r.toml", "-o", "res"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let res = t.path().join("res");
    let deadline = Instant::now() + Duration::from_secs(60);
    while records(&res).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    sshd.stop();
    let o = child.wait_with_output().expect("wait");
    assert!(!o.status.success(), "{}", text(&o));
    let recs = records(&res);
    assert_eq!(recs.len(), 6, "every run accounted for: {}", text(&o));
    assert_eq!(recs[0]["status"], "ok");
    let lost = recs.iter().filter(|r| r["status"] == "device-lost").count();
    assert!(lost >= 4, "{recs:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("device `box` dropped out"),
        "{}",
        text(&o)
    );
}
