//! Devices: how to run a shell command, start a run, and move files, on `local`, `ssh` and
//! `adb` targets.
//!
//! Every operation is a shell command line executed on the device (`sh -c` locally, the
//! remote shell through the system `ssh` client or `adb shell`), so the run wrapper, the
//! cgroup setup and the state probe are one text each, identical on every transport. The
//! argv builders are pure functions so they are unit-tested without the transports.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::manifest::{DeviceDef, DeviceKind};

/// Quotes `s` for a POSIX shell (single quotes, `'\''` for embedded quotes).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Joins words into a shell command line.
pub fn shell_join<S: AsRef<str>>(words: &[S]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&shell_quote(w.as_ref()));
    }
    out
}

/// A device and its transport.
#[derive(Debug, Clone)]
pub struct Device {
    /// The manifest entry.
    pub def: DeviceDef,
}

/// The `sh -c` wrapper that moves the shell into a cgroup, records the membership and execs the
/// command: `$0` is the cgroup directory, `$@` the command.
pub const CGROUP_WRAPPER: &str =
    r#"echo $$ > "$0/cgroup.procs" && cat /proc/self/cgroup > cgroup.txt && exec "$@""#;

impl Device {
    /// Wraps a manifest entry.
    pub fn new(def: DeviceDef) -> Device {
        Device { def }
    }

    /// Whether files must be staged (the device does not share this machine's filesystem).
    pub fn is_remote(&self) -> bool {
        self.def.kind != DeviceKind::Local
    }

    /// Remote working directory.
    pub fn workdir(&self) -> String {
        self.def
            .workdir
            .clone()
            .unwrap_or_else(|| match self.def.kind {
                DeviceKind::Adb => "/data/local/tmp/bmoe-bench".into(),
                _ => "/tmp/bmoe-bench".into(),
            })
    }

    fn ssh_target(&self) -> String {
        let host = self.def.host.clone().unwrap_or_default();
        match &self.def.user {
            Some(u) => format!("{u}@{host}"),
            None => host,
        }
    }

    fn ssh_common(&self, port_flag: &str) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "ConnectTimeout=10".into(),
            "-o".into(),
            "ServerAliveInterval=15".into(),
        ];
        if let Some(p) = self.def.port {
            v.push(port_flag.into());
            v.push(p.to_string());
        }
        if let Some(k) = &self.def.identity_file {
            v.push("-i".into());
            v.push(k.to_string_lossy().into_owned());
        }
        for o in &self.def.ssh_options {
            v.push("-o".into());
            v.push(o.clone());
        }
        v
    }

    /// argv that runs the shell command line `cmd` on the device.
    pub fn exec_argv(&self, cmd: &str) -> Vec<String> {
        match self.def.kind {
            DeviceKind::Local => vec!["sh".into(), "-c".into(), cmd.into()],
            DeviceKind::Ssh => {
                let mut v = vec!["ssh".to_string()];
                v.extend(self.ssh_common("-p"));
                v.push(self.ssh_target());
                // The remote login shell may not be POSIX: hand the line to sh explicitly.
                v.push(shell_join(&["sh", "-c", cmd]));
                v
            }
            DeviceKind::Adb => {
                let mut v = self.adb_base();
                v.push("shell".into());
                v.push(cmd.into());
                v
            }
        }
    }

    fn adb_base(&self) -> Vec<String> {
        vec![
            "adb".into(),
            "-s".into(),
            self.def.serial.clone().unwrap_or_default(),
        ]
    }

    /// argv that copies a local file to `remote` on the device.
    pub fn push_argv(&self, local: &Path, remote: &str) -> Vec<String> {
        let l = local.to_string_lossy().into_owned();
        match self.def.kind {
            DeviceKind::Local => vec!["cp".into(), l, remote.into()],
            DeviceKind::Ssh => {
                let mut v = vec!["scp".to_string(), "-q".into()];
                v.extend(self.ssh_common("-P"));
                v.push(l);
                v.push(format!("{}:{}", self.ssh_target(), remote));
                v
            }
            DeviceKind::Adb => {
                let mut v = self.adb_base();
                v.extend(["push".into(), l, remote.into()]);
                v
            }
        }
    }

    /// argv that copies `remote` on the device to a local file.
    pub fn pull_argv(&self, remote: &str, local: &Path) -> Vec<String> {
        let l = local.to_string_lossy().into_owned();
        match self.def.kind {
            DeviceKind::Local => vec!["cp".into(), remote.into(), l],
            DeviceKind::Ssh => {
                let mut v = vec!["scp".to_string(), "-q".into()];
                v.extend(self.ssh_common("-P"));
                v.push(format!("{}:{}", self.ssh_target(), remote));
                v.push(l);
                v
            }
            DeviceKind::Adb => {
                let mut v = self.adb_base();
                v.extend(["pull".into(), remote.into(), l]);
                v
            }
        }
    }

    /// Runs `cmd` on the device and captures its output.
    ///
    /// # Errors
    /// The transport program could not be started (e.g. `ssh` missing).
    pub fn exec(&self, cmd: &str) -> std::io::Result<Output> {
        let argv = self.exec_argv(cmd);
        super::lock::output(Command::new(&argv[0]).args(&argv[1..]).stdin(Stdio::null()))
    }

    /// Runs `cmd`; `Err` with its stderr unless it exits 0.
    ///
    /// # Errors
    /// Text describing the failure (exit status and stderr).
    pub fn exec_ok(&self, cmd: &str) -> Result<String, String> {
        let out = self
            .exec(cmd)
            .map_err(|e| format!("cannot start the {} transport: {e}", self.kind_name()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "exit status {}: {}",
                out.status.code().map_or("signal".into(), |c| c.to_string()),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Copies a local file to the device.
    ///
    /// # Errors
    /// Text describing the failure.
    pub fn push(&self, local: &Path, remote: &str) -> Result<(), String> {
        run_argv(&self.push_argv(local, remote))
    }

    /// Copies a file from the device.
    ///
    /// # Errors
    /// Text describing the failure.
    pub fn pull(&self, remote: &str, local: &Path) -> Result<(), String> {
        run_argv(&self.pull_argv(remote, local))
    }

    /// Whether the device still answers.
    pub fn alive(&self) -> bool {
        self.exec("true").is_ok_and(|o| o.status.success())
    }

    /// `local`, `ssh` or `adb`.
    pub fn kind_name(&self) -> &'static str {
        match self.def.kind {
            DeviceKind::Local => "local",
            DeviceKind::Ssh => "ssh",
            DeviceKind::Adb => "adb",
        }
    }

    /// Host or serial, for records.
    pub fn address(&self) -> String {
        match self.def.kind {
            DeviceKind::Local => "localhost".into(),
            DeviceKind::Ssh => self.ssh_target(),
            DeviceKind::Adb => self.def.serial.clone().unwrap_or_default(),
        }
    }

    /// Whether a failed exec means the transport itself failed (not the command).
    pub fn transport_failed(&self, code: Option<i32>) -> bool {
        match self.def.kind {
            DeviceKind::Local => false,
            DeviceKind::Ssh => code == Some(255),
            DeviceKind::Adb => code.is_none(),
        }
    }
}

fn run_argv(argv: &[String]) -> Result<(), String> {
    let out = super::lock::output(Command::new(&argv[0]).args(&argv[1..]).stdin(Stdio::null()))
        .map_err(|e| format!("cannot start `{}`: {e}", argv[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed: {}",
            shell_join(argv),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The command line of one run, executed in `dir` on the device.
///
/// `cgroup` = the cgroup directory to join first; `timeout_s` is enforced on the device with
/// `timeout` for remote devices (a dropped connection must not leave the engine running).
pub fn run_command_line(
    dir: &str,
    env: &[(String, String)],
    cgroup: Option<&str>,
    timeout_s: Option<f64>,
    program: &str,
    args: &[String],
) -> String {
    let mut s = String::new();
    let _ = write!(s, "cd {} && exec", shell_quote(dir));
    if !env.is_empty() {
        s.push_str(" env");
        for (k, v) in env {
            let _ = write!(s, " {}", shell_quote(&format!("{k}={v}")));
        }
    }
    if let Some(t) = timeout_s {
        let _ = write!(s, " timeout -s KILL {}", t.ceil().max(1.0) as u64);
    }
    if let Some(cg) = cgroup {
        let _ = write!(
            s,
            " sh -c {} {}",
            shell_quote(CGROUP_WRAPPER),
            shell_quote(cg)
        );
    }
    let _ = write!(s, " {}", shell_quote(program));
    for a in args {
        s.push(' ');
        s.push_str(&shell_quote(a));
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn dev(kind: DeviceKind) -> Device {
        Device::new(DeviceDef {
            id: "d".into(),
            kind,
            host: Some("10.0.0.2".into()),
            user: Some("bench".into()),
            port: Some(2222),
            identity_file: Some("/k/id".into()),
            ssh_options: vec!["StrictHostKeyChecking=no".into()],
            serial: Some("a1b2".into()),
            workdir: None,
            binary: None,
            env: BTreeMap::new(),
        })
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("abc-1.2/x"), "abc-1.2/x");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn adb_argv() {
        let d = dev(DeviceKind::Adb);
        assert_eq!(
            d.exec_argv("cat /proc/meminfo"),
            ["adb", "-s", "a1b2", "shell", "cat /proc/meminfo"]
        );
        assert_eq!(
            d.push_argv(Path::new("/l/bmoe-cli"), "/data/local/tmp/x"),
            [
                "adb",
                "-s",
                "a1b2",
                "push",
                "/l/bmoe-cli",
                "/data/local/tmp/x"
            ]
        );
        assert_eq!(
            d.pull_argv("/data/local/tmp/m.csv", Path::new("/r/m.csv")),
            [
                "adb",
                "-s",
                "a1b2",
                "pull",
                "/data/local/tmp/m.csv",
                "/r/m.csv"
            ]
        );
        assert_eq!(d.workdir(), "/data/local/tmp/bmoe-bench");
        assert!(d.transport_failed(None));
    }

    #[test]
    fn ssh_argv() {
        let d = dev(DeviceKind::Ssh);
        let v = d.exec_argv("echo 'x'");
        assert_eq!(&v[..1], ["ssh"]);
        assert!(v.windows(2).any(|w| w == ["-p", "2222"]), "{v:?}");
        assert!(v.windows(2).any(|w| w == ["-i", "/k/id"]), "{v:?}");
        assert!(
            v.windows(2)
                .any(|w| w == ["-o", "StrictHostKeyChecking=no"]),
            "{v:?}"
        );
        assert_eq!(v[v.len() - 2], "bench@10.0.0.2");
        assert_eq!(v[v.len() - 1], r"sh -c 'echo '\''x'\'''");
        let p = d.push_argv(Path::new("/a b"), "/tmp/x");
        assert!(p.windows(2).any(|w| w == ["-P", "2222"]), "{p:?}");
        assert_eq!(&p[p.len() - 2..], ["/a b", "bench@10.0.0.2:/tmp/x"]);
        assert!(d.transport_failed(Some(255)));
        assert!(!d.transport_failed(Some(1)));
    }

    #[test]
    fn run_line_runs_in_sh() {
        let line = run_command_line(
            "/tmp/r 1",
            &[("A".into(), "x y".into())],
            Some("/sys/fs/cgroup/memory/b"),
            Some(2.5),
            "/bin/echo",
            &["hi there".into()],
        );
        assert!(
            line.starts_with("cd '/tmp/r 1' && exec env 'A=x y' timeout -s KILL 3 sh -c "),
            "{line}"
        );
        let out = Command::new("sh")
            .arg("-c")
            .arg(run_command_line(
                "/",
                &[("A".into(), "x y".into())],
                None,
                None,
                "sh",
                &["-c".into(), "echo \"$A\" $0".into()],
            ))
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "x y sh\n");
    }
}
