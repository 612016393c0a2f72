//! The diagnostic traces `bmoe-cli` writes (`--route-trace`, `--io-trace`, `--compute-trace`,
//! `--compute-trace-layers`) are read by `bmoe-analyze route|io|compute` with figures that agree
//! with the files themselves.

use bmoe_e2e::workspace_bin;
use bmoe_gguf::synth::{Preset, SynthOptions, write_model};
use bmoe_telemetry::trace::{ComputeTraceReader, IoTraceReader, PHASE_DECODE};
use std::path::{Path, PathBuf};
use std::process::Command;

const TOKENS: usize = 6;

fn analyze(bin: &Path, kind: &str, file: &Path) -> String {
    let out = Command::new(bin)
        .arg(kind)
        .arg(file)
        .env("NO_COLOR", "1")
        .output()
        .expect("run bmoe-analyze");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bmoe-analyze {kind} {} failed:\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn cli_run(cli: &Path, model: &Path, extra: &[&std::ffi::OsStr]) {
    let out = Command::new(cli)
        .arg("-m")
        .arg(model)
        .args(["-t", "2", "-c", "256", "-p", "The quick brown fox"])
        .args(["-n", &TOKENS.to_string(), "--ignore-eos"])
        .args(extra)
        .output()
        .expect("run bmoe-cli");
    assert!(
        out.status.success(),
        "bmoe-cli failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn engine_traces_feed_the_analyzer() {
    let (cli, analyzer) = match (workspace_bin("bmoe-cli"), workspace_bin("bmoe-analyze")) {
        (Ok(c), Ok(a)) => (c, a),
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("SKIP engine_traces_feed_the_analyzer: {why}");
            return;
        }
    };
    // under the target dir, not /tmp: tmpfs refuses O_DIRECT
    let base: PathBuf = bmoe_e2e::bin_dir().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base).unwrap_or_else(|_| tempfile::tempdir().expect("tmp"));
    let model = dir.path().join("tiny.gguf");
    let s = write_model(&SynthOptions::preset(Preset::Tiny), &model).expect("synthesise");
    let k = s.info.n_expert_used;
    let p = |n: &str| dir.path().join(n);
    let (route, io, ct, ctl) = (p("route.csv"), p("io.csv"), p("ct.csv"), p("ctl.csv"));
    let streamed = ["--moe-stream", "--cache-mb", "1", "--route-trace"];
    let mut args: Vec<&std::ffi::OsStr> = streamed.iter().map(|a| a.as_ref()).collect();
    args.extend([route.as_os_str(), "--io-trace".as_ref(), io.as_os_str()]);
    args.extend(["--compute-trace-layers".as_ref(), ctl.as_os_str()]);
    cli_run(&cli, &s.paths[0], &args);
    cli_run(
        &cli,
        &s.paths[0],
        &["--compute-trace".as_ref(), ct.as_os_str()],
    );

    let r = analyze(&analyzer, "route", &route);
    assert!(r.contains(&format!("n_expert_used {k}")), "{r}");
    assert!(r.contains(&format!("over {TOKENS} steps")), "{r}");
    assert!(
        r.lines().any(|l| l.starts_with(&format!("cells not k={k}"))
            && l.split_whitespace().nth(3) == Some("0")),
        "every cell has k rows:\n{r}"
    );

    let reads = IoTraceReader::open(&io)
        .expect("io trace")
        .map(|x| x.expect("row"))
        .filter(|x| x.phase == PHASE_DECODE)
        .count();
    let i = analyze(&analyzer, "io", &io);
    assert!(i.contains(&format!("decode steps={TOKENS}")), "{i}");
    assert!(i.contains(&format!("reads={reads} ")), "{i}");

    let nodes = ComputeTraceReader::open(&ct)
        .expect("compute trace")
        .map(|x| x.expect("row"))
        .filter(|x| x.phase == PHASE_DECODE)
        .count();
    let c = analyze(&analyzer, "compute", &ct);
    assert!(c.contains(&format!("decode steps={TOKENS}")), "{c}");
    assert!(c.contains(&format!("nodes/step={}", nodes / TOKENS)), "{c}");
    let l = analyze(&analyzer, "compute", &ctl);
    assert!(l.contains("layer granularity"), "{l}");
    for seg in ["pre", "blk.0", "post"] {
        assert!(l.lines().any(|x| x.starts_with(seg)), "no {seg} row:\n{l}");
    }
}
