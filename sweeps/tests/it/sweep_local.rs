//! `bmoe-bench sweep` on the `local` device with real subprocesses: the results layout, the
//! run order, resume after SIGKILL, a changed manifest, memory cgroups, manifest errors, and
//! the real `bmoe-cli` on the tiny synthetic model.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::sweep_common::*;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

const GRID: &str = r#"
name = "grid"
binary = "./fake-cli"
[defaults]
n_predict = 6
prompt = "hello there"
repetitions = 2
[[model]]
id = "tiny"
preset = "tiny"
[axes.cache]
flag = "--cache-mb"
[axes.overlap]
switch = "--overlap"
[[sweep]]
name = "grid"
flags = ["--moe-stream"]
axes = { cache = [0, 4], overlap = [false, true] }
tag = "c{cache}_ov{overlap}"
order = { mode = "reverse-passes" }
warmup = { runs = 1, discard_tokens = 1 }
"#;

#[test]
fn local_grid_writes_every_artifact_in_order() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 0.0);
    write(t.path(), "grid.toml", GRID);
    let o = run(t.path(), &["sweep", "grid.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let res = t.path().join("res");
    let recs = records(&res);
    // 4 cells × 2 repetitions + 4 warm-ups.
    assert_eq!(recs.len(), 12, "{}", text(&o));
    assert!(recs.iter().all(|r| r["status"] == "ok"));
    let order: Vec<String> = recs
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r["cell"].as_str().unwrap_or(""),
                r["rep"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        order[..4],
        [
            "c0_ovfalse/w1",
            "c0_ovfalse/r1",
            "c0_ovtrue/w1",
            "c0_ovtrue/r1"
        ]
    );
    // The second pass runs in reverse.
    assert_eq!(
        order[8..],
        [
            "c4_ovtrue/r2",
            "c4_ovfalse/r2",
            "c0_ovtrue/r2",
            "c0_ovfalse/r2"
        ]
    );
    let r = &recs[3];
    let argv: Vec<&str> = r["argv"]
        .as_array()
        .expect("argv")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(argv[0].ends_with("/fake-cli"));
    assert_eq!(argv[1], "-m");
    assert!(
        argv[2].ends_with("synth-tiny.gguf") && Path::new(argv[2]).is_file(),
        "preset built on first use: {argv:?}"
    );
    assert_eq!(
        argv[3..10],
        [
            "--moe-stream",
            "--cache-mb",
            "0",
            "--overlap",
            "-n",
            "6",
            "-p"
        ]
    );
    for f in [
        "metrics.csv",
        "stdout.txt",
        "stderr.txt",
        "argv.json",
        "state.json",
        "run.json",
    ] {
        assert!(
            res.join("grid/c0_ovtrue/r1").join(f).is_file(),
            "{f} missing"
        );
    }
    let stdout = std::fs::read_to_string(res.join("grid/c0_ovtrue/r1/stdout.txt")).expect("stdout");
    assert!(stdout.contains("arg: hello there"), "{stdout}");
    assert!(
        r["state_before"]["mem_available_mib"]
            .as_f64()
            .is_some_and(|m| m > 0.0)
    );
    assert_eq!(r["tokens"], 6);
    // No temporary directories survive.
    let leftovers: Vec<_> = walk(&res)
        .into_iter()
        .filter(|p| {
            p.strip_prefix(&res)
                .is_ok_and(|r| r.to_string_lossy().contains(".tmp"))
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The report reads it back: 4 cells, 2 runs each, warm-ups not averaged, trim 1 token.
    let o = run(t.path(), &["report", "res", "-f", "csv"]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = String::from_utf8_lossy(&o.stdout).into_owned();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 4, "{csv}");
    // After trimming token 1, walls are 102..106 ms: tok/s = 5 / 0.52.
    let avg: f64 = rows[0]
        .split(',')
        .nth(6)
        .and_then(|v| v.parse().ok())
        .expect("avg_ts");
    assert!((avg - 5.0 / 0.520).abs() < 1e-9, "{avg}");
    let md = run(
        t.path(),
        &[
            "report",
            "res",
            "--baseline",
            "c0_ovfalse",
            "--plots",
            "plots",
            "--x",
            "cache",
            "--findings",
        ],
    );
    assert!(md.status.success(), "{}", text(&md));
    let md_text = String::from_utf8_lossy(&md.stdout);
    assert!(md_text.contains("| c4_ovtrue | 2 |"), "{md_text}");
    assert!(
        md_text.contains("1.000× (CI uninformative"),
        "identical runs give ratio 1, and 2 runs a side give no interval: {md_text}"
    );
    assert!(
        md_text
            .contains("uninformative: 2 runs on a side (< 3); the bootstrap gives [1.000, 1.000]"),
        "{md_text}"
    );
    assert!(t.path().join("plots/tok_s-grid-tiny.svg").is_file());
    assert!(
        t.path()
            .join("plots/tok_s-vs-cache-grid-tiny.svg")
            .is_file()
    );
    let findings = std::fs::read_to_string(res.join("findings.md")).expect("findings");
    assert!(
        findings.contains("## Run order and device state") && findings.contains("c4_ovtrue"),
        "{findings}"
    );
}

fn walk(p: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            out.push(e.path());
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            }
        }
    }
    out
}

#[test]
fn resume_after_sigkill_loses_at_most_the_run_in_flight() {
    let t = tempfile::tempdir().expect("tmp");
    // 1 s a run: the kill lands in the third run even if this thread stalls a second
    fake_engine(t.path(), 1.0);
    let manifest = r#"
name = "slow"
binary = "./fake-cli"
[defaults]
n_predict = 4
repetitions = 3
[[model]]
id = "tiny"
preset = "tiny"
[axes.cache]
flag = "--cache-mb"
[[sweep]]
name = "s"
axes = { cache = [1, 2] }
"#;
    write(t.path(), "slow.toml", manifest);
    // killed mid-way through the third run
    let res = sweep_killed_after(t.path(), "slow.toml", 2, Duration::from_millis(150));
    let done_before = records(&res).len();
    assert!((2..6).contains(&done_before), "{done_before}");
    let calls_before = calls(t.path());

    let o = run(t.path(), &["sweep", "slow.toml", "-o", "res"]);
    assert!(
        !o.status.success(),
        "refuses without --resume: {}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("hint: pass --resume"),
        "{}",
        text(&o)
    );

    let o = run(t.path(), &["sweep", "slow.toml", "-o", "res", "--resume"]);
    assert!(o.status.success(), "{}", text(&o));
    let recs = records(&res);
    assert_eq!(recs.len(), 6, "every run exactly once");
    let mut keys: Vec<String> = recs
        .iter()
        .map(|r| format!("{}{}", r["cell"], r["rep"]))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 6);
    // Only the missing runs ran again (the killed one included).
    assert_eq!(calls(t.path()) - calls_before, 6 - done_before);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("({done_before} already complete)")),
        "{}",
        text(&o)
    );

    // A changed manifest is refused unless --force.
    write(
        t.path(),
        "slow.toml",
        &manifest.replace("n_predict = 4", "n_predict = 5"),
    );
    let o = run(t.path(), &["sweep", "slow.toml", "-o", "res", "--resume"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("manifest changed"),
        "{}",
        text(&o)
    );
    let o = run(
        t.path(),
        &["sweep", "slow.toml", "-o", "res", "--resume", "--force"],
    );
    assert!(o.status.success(), "{}", text(&o));
}

fn cgroup_writable() -> Result<(), String> {
    let base = if Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").is_file() {
        "/sys/fs/cgroup/memory"
    } else if Path::new("/sys/fs/cgroup/cgroup.controllers").is_file() {
        "/sys/fs/cgroup"
    } else {
        return Err("no memory cgroup hierarchy".into());
    };
    let probe = Path::new(base).join(format!("bmoe-bench-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| format!("{base} is not writable: {e}"))?;
    // v2 only offers memory.max where the parent delegates the memory controller.
    let has_limit =
        probe.join("memory.limit_in_bytes").is_file() || probe.join("memory.max").is_file();
    let _ = std::fs::remove_dir(&probe);
    if has_limit {
        Ok(())
    } else {
        Err(format!(
            "the memory controller is not enabled for children of {base}"
        ))
    }
}

#[test]
fn memory_capped_cell_runs_inside_a_cgroup() {
    if let Err(why) = cgroup_writable() {
        eprintln!("SKIP memory_capped_cell_runs_inside_a_cgroup: {why}");
        return;
    }
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 0.0);
    write(
        t.path(),
        "cap.toml",
        r#"
name = "cap"
binary = "./fake-cli"
[[model]]
id = "tiny"
preset = "tiny"
[axes.mem]
kind = "mem_limit"
[[sweep]]
name = "cap"
axes = { mem = ["300MiB", "off"] }
"#,
    );
    let o = run(t.path(), &["sweep", "cap.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let recs = records(&t.path().join("res"));
    assert_eq!(recs.len(), 2);
    let capped = &recs[0];
    assert_eq!(capped["cgroup"]["limit_bytes"], 300u64 << 20);
    let dir = capped["cgroup"]["dir"].as_str().expect("dir").to_string();
    let name = dir.rsplit('/').next().expect("name").to_string();
    // The engine's own /proc/self/cgroup names the cgroup.
    let stdout = std::fs::read_to_string(t.path().join("res/cap/tiny_mem300MiB/r1/stdout.txt"))
        .expect("stdout");
    assert!(
        stdout.lines().any(|l| l.ends_with(&format!("/{name}"))
            && (l.contains(":memory:") || l.starts_with("0::"))),
        "{stdout}"
    );
    assert!(
        capped["cgroup"]["peak_bytes"]
            .as_u64()
            .is_some_and(|p| p > 0)
    );
    assert!(!Path::new(&dir).exists(), "cgroup removed after the run");
    let free = std::fs::read_to_string(t.path().join("res/cap/tiny_memoff/r1/stdout.txt"))
        .expect("stdout");
    assert!(
        !free.contains("bmoe-bench-"),
        "uncapped cell stays outside: {free}"
    );
    assert!(recs[1]["cgroup"].is_null());
}

#[test]
fn manifest_errors_name_the_line() {
    let t = tempfile::tempdir().expect("tmp");
    let cases: [(&str, &str, usize, &str); 7] = [
        (
            "name = \"x\"\n[[sweep]]\nname = \"s\"\nrepetitons = 2\n",
            "unknown field `repetitons`",
            4,
            "hint: check the spelling",
        ),
        (
            "name = \"x\"\n[[model]]\nid = \"m\"\npreset = \"tiny\"\n[axes.cache]\nflag = \"--cache-mb\"\n[[sweep]]\nname = \"s\"\naxes = { cache = [] }\n",
            "axis `cache` in sweep `s` has no values",
            9,
            "hint: give it at least one value",
        ),
        (
            "name = \"x\"\n[[model]]\nid = \"m\"\npreset = \"tiny\"\n[[sweep]]\nname = \"s\"\n\ndevices = [\"local\", \"phone\"]\n",
            "uses device `phone`, which is not declared",
            8,
            "hint: declare it with [[device]]",
        ),
        (
            "name = \"x\"\n[[device]]\nid = \"p\"\nkind = \"ssh\"\n[[sweep]]\nname = \"s\"\n",
            "ssh device `p` has no host",
            2,
            "hint: add host",
        ),
        (
            "name = \"x\"\n[defaults]\ntimeout_s = \"ten\"\n",
            "invalid type: string \"ten\", expected f64",
            3,
            "hint: `timeout_s` takes a number: write e.g. `timeout_s = 10` (no quotes)",
        ),
        (
            "name = \"x\"\n[[sweep]]\nname = \"s\"\norder = { mode = \"sideways\" }\n",
            "unknown variant `sideways`",
            4,
            "hint: use one of the values listed above",
        ),
        (
            "This is not a manifest\nbut a README.\n",
            "expected",
            1,
            "hint: is this a manifest? a bmoe-bench manifest is TOML with `name = \"...\"` and [[sweep]] blocks",
        ),
    ];
    for (i, (manifest, msg, line, hint)) in cases.iter().enumerate() {
        let name = format!("bad{i}.toml");
        write(t.path(), &name, manifest);
        let o = run(t.path(), &["sweep", &name, "--check"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            err.contains(&format!("{name}:{line}:")),
            "case {i}: want line {line}: {err}"
        );
        assert!(err.contains(msg), "case {i}: {err}");
        assert!(err.contains(hint), "case {i}: {err}");
    }
    // And a good manifest checks clean (its engine must exist: --check refuses a missing one).
    write(t.path(), "good.toml", GRID);
    let o = run(t.path(), &["sweep", "good.toml", "--check"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("good.toml:3:10: engine binary ./fake-cli does not exist"),
        "{}",
        text(&o)
    );
    fake_engine(t.path(), 0.0);
    let o = run(t.path(), &["sweep", "good.toml", "--check"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("4 cell(s), 12 run(s) (4 warm-up)"),
        "{}",
        text(&o)
    );
}

#[test]
fn bmoe_cli_end_to_end_on_the_tiny_model() {
    let Some(cli) = real_cli_or_skip("bmoe_cli_end_to_end_on_the_tiny_model", "--csv") else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    write(
        t.path(),
        "e2e.toml",
        &format!(
            r#"
name = "e2e"
binary = "{}"
[defaults]
n_predict = 8
prompt = "The history of computing"
[[model]]
id = "tiny"
preset = "tiny"
[axes.cache]
flag = "--cache-mb"
[[sweep]]
name = "cache"
flags = ["--moe-stream", "-t", "2", "--ignore-eos"]
axes = {{ cache = [0, 8] }}
"#,
            cli.display()
        ),
    );
    let o = run(t.path(), &["sweep", "e2e.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let recs = records(&t.path().join("res"));
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["tokens"], 8, "{r}");
    }
    let o = run(t.path(), &["report", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("| tiny_cache0 | 1 |") && md.contains("| tiny_cache8 | 1 |"),
        "{md}"
    );
}

#[test]
fn shipped_examples_check_clean() {
    let dir = workspace_root().join("examples/sweeps");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("examples/sweeps").flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "toml") {
            let o = bench()
                .arg("sweep")
                .arg(&p)
                .arg("--check")
                .output()
                .expect("run");
            assert!(o.status.success(), "{}: {}", p.display(), text(&o));
            n += 1;
        }
    }
    assert!(n >= 3, "expected the shipped examples in {}", dir.display());
}

#[test]
fn a_run_past_its_timeout_is_killed_and_recorded() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 20.0);
    write(
        t.path(),
        "slow.toml",
        r#"
name = "timeout"
binary = "./fake-cli"
[defaults]
timeout_s = 0.5
[[model]]
id = "tiny"
preset = "tiny"
[[sweep]]
name = "s"
"#,
    );
    let start = Instant::now();
    let o = run(t.path(), &["sweep", "slow.toml", "-o", "res"]);
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "the 20 s engine was not killed"
    );
    assert!(!o.status.success(), "{}", text(&o));
    let recs = records(&t.path().join("res"));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["status"], "timeout", "{}", recs[0]);
    assert_eq!(recs[0]["timed_out"], true);
    assert!(
        recs[0]["duration_s"]
            .as_f64()
            .is_some_and(|d| (0.5..10.0).contains(&d)),
        "{}",
        recs[0]
    );
}

#[test]
fn session_cells_are_driven_one_turn_at_a_time() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 0.0);
    write(
        t.path(),
        "prompts.txt",
        "What is 17 times 23?\n\nName the capital of Australia.\n",
    );
    write(
        t.path(),
        "session.toml",
        r#"
name = "session"
binary = "./fake-cli"
[[model]]
id = "tiny"
preset = "tiny"
[[sweep]]
name = "q"
prompt = "ignored in session mode"
session = { prompts = "prompts.txt", n_predict = 3 }

[[sweep]]
name = "chat"
session = { prompts = ["Hello", "FAIL this one", "And again"], clear_kv = false, n_predict = 2 }

[[sweep]]
name = "dies"
session = { prompts = ["Hello", "DIE now", "never sent"] }
"#,
    );
    let o = run(t.path(), &["sweep", "session.toml", "-o", "res"]);
    // the `dies` run fails, the others do not
    assert!(!o.status.success(), "{}", text(&o));
    let stdout =
        std::fs::read_to_string(t.path().join("res/q/tiny/r1/stdout.txt")).expect("stdout");
    assert!(
        stdout.contains("arg: --session") && !stdout.contains("arg: -p"),
        "{stdout}"
    );
    let reqs: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("req: "))
        .map(|l| serde_json::from_str(l).expect("request"))
        .collect();
    assert_eq!(reqs.len(), 2, "{stdout}");
    assert_eq!(reqs[1]["cmd"], "generate");
    assert_eq!(reqs[1]["id"], 2);
    assert_eq!(reqs[1]["prompt"], "Name the capital of Australia.");
    assert_eq!(reqs[1]["n_predict"], 3);
    assert_eq!(reqs[1]["clear_kv"], true);
    // stdout.txt keeps the engine's whole output, answers included, in order
    let done1 = stdout.find("BMOE_DONE {\"id\":1").expect("DONE 1");
    let req2 = stdout
        .find("req: {\"cmd\":\"generate\",\"id\":2")
        .expect("req 2");
    assert!(done1 < req2, "{stdout}");

    let recs = records(&t.path().join("res"));
    let by = |sweep: &str| {
        recs.iter()
            .find(|r| r["sweep"] == sweep)
            .unwrap_or_else(|| panic!("no {sweep} record"))
    };
    let q = by("q");
    assert_eq!(q["session"], true);
    assert_eq!(q["status"], "ok", "{q}");
    let turns = q["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 2, "{q}");
    for (i, tr) in turns.iter().enumerate() {
        let k = i as u64 + 1;
        assert_eq!(tr["turn"], k);
        assert_eq!(tr["id"], k);
        assert_eq!(tr["status"], "done");
        assert_eq!(tr["tokens"], 3);
        assert_eq!(tr["n_prompt"], 10 * k);
        assert_eq!(tr["n_past"], 20 * k);
        assert!(tr["wall_s"].as_f64().is_some_and(|w| w > 0.0), "{tr}");
    }
    // 2 turns x 3 tokens in the CSV
    assert_eq!(q["tokens"], 6, "{q}");

    // One conversation (clear_kv false) with a refused turn in the middle: the run is fine,
    // the turn says what happened.
    let chat = by("chat");
    assert_eq!(chat["status"], "ok", "{chat}");
    let turns = chat["turns"].as_array().expect("turns");
    let states: Vec<&str> = turns
        .iter()
        .map(|t| t["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["done", "error", "done"], "{chat}");
    assert_eq!(turns[1]["error"], "refused");
    assert!(turns.iter().all(|t| t["clear_kv"] == false), "{chat}");

    // An engine that exits mid-session fails the run and names the turn left unanswered.
    let dies = by("dies");
    assert_eq!(dies["status"], "failed", "{dies}");
    let err = dies["error"].as_str().expect("error");
    assert!(err.contains("exit status 3"), "{err}");
    let turns = dies["turns"].as_array().expect("turns");
    let states: Vec<&str> = turns
        .iter()
        .map(|t| t["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["done", "missing", "missing"], "{dies}");

    // The report gives each turn its own row: turn k's rows have wall 100k + step ms.
    let o = run(t.path(), &["report", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    let t1 = 3.0 / 0.306;
    let t2 = 3.0 / 0.606;
    assert!(md.contains("Per turn (session cells):"), "{md}");
    assert!(
        md.contains(&format!("| tiny | 1 | 1 | {t1:.3} | — | 0.500 | 10 | 20 |")),
        "{md}"
    );
    assert!(
        md.contains(&format!("| tiny | 2 | 1 | {t2:.3} | — | 0.500 | 20 | 40 |")),
        "{md}"
    );
    let o = run(t.path(), &["report", "res", "-f", "csv"]);
    let csv = String::from_utf8_lossy(&o.stdout);
    let header: Vec<&str> = csv.lines().next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let q_rows: Vec<Vec<&str>> = csv
        .lines()
        .filter(|l| l.starts_with("q,"))
        .map(|l| l.split(',').collect())
        .collect();
    let turns: Vec<&str> = q_rows.iter().map(|r| r[col("turn")]).collect();
    assert_eq!(turns, ["", "1", "2"], "{csv}");
    let avg: f64 = q_rows[2][col("avg_ts")].parse().expect("avg_ts");
    assert!((avg - t2).abs() < 1e-9, "{csv}");
    assert_eq!(q_rows[2][col("n_prompt")], "20");
    // findings.md carries the per-turn table and names the refused turn among the caveats.
    let o = run(t.path(), &["report", "res", "--findings"]);
    assert!(o.status.success(), "{}", text(&o));
    let findings = std::fs::read_to_string(t.path().join("res/findings.md")).expect("findings");
    assert!(findings.contains("Per turn (session cells):"), "{findings}");
    assert!(
        findings.contains(
            "- `tiny` r1: session turn 2 (request 2) was refused by the engine — refused;"
        ),
        "{findings}"
    );
}

#[test]
fn a_session_jsonl_with_a_bad_line_is_refused_before_any_run() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 0.0);
    write(
        t.path(),
        "reqs.jsonl",
        "{\"cmd\":\"generate\",\"id\":1,\"prompt\":\"hi\"}\n{\"cmd\":\"generate\",\"prompt\":\"no id\"}\n",
    );
    write(
        t.path(),
        "bad.toml",
        r#"name = "bad"
binary = "./fake-cli"
[[model]]
id = "tiny"
preset = "tiny"
[[sweep]]
name = "s"
session = { prompts = "reqs.jsonl" }
"#,
    );
    let o = run(t.path(), &["sweep", "bad.toml", "-o", "res"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.toml:8:"), "{err}");
    assert!(
        err.contains("reqs.jsonl:2: invalid request: missing field `id`"),
        "{err}"
    );
    assert!(err.contains("hint: one request per line"), "{err}");
    assert_eq!(calls(t.path()), 0, "nothing ran");
}

#[test]
fn session_cells_drive_the_real_engine_turn_by_turn() {
    let Some(cli) = real_cli_or_skip(
        "session_cells_drive_the_real_engine_turn_by_turn",
        "--session",
    ) else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    write(
        t.path(),
        "chat.toml",
        &format!(
            r#"
name = "chat"
binary = "{}"
[[model]]
id = "tiny"
preset = "tiny"
[[sweep]]
name = "chat"
flags = ["--moe-stream", "--cache-mb", "16", "-t", "2", "--ignore-eos"]
session = {{ prompts = ["Tell me about computing.", "And then?"], clear_kv = false, n_predict = 5 }}
"#,
            cli.display()
        ),
    );
    let o = run(t.path(), &["sweep", "chat.toml", "-o", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    let recs = records(&t.path().join("res"));
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r["status"], "ok", "{r}");
    assert!(
        r["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .any(|a| a == "--session"),
        "{r}"
    );
    // Both turns answered by the engine's own BMOE_DONE: 5 tokens each, and the second turn
    // continues the conversation (the context only grows).
    let turns = r["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 2, "{r}");
    for tr in turns {
        assert_eq!(tr["status"], "done", "{tr}");
        assert_eq!(tr["tokens"], 5, "{tr}");
        // BMOE_DONE gives prefill_s to the millisecond: a continued turn's few new tokens on the
        // tiny model can prefill in less than that and read 0.0.
        assert!(tr["prefill_s"].as_f64().is_some_and(|p| p >= 0.0), "{tr}");
        assert!(tr["wall_s"].as_f64().is_some_and(|w| w > 0.0), "{tr}");
    }
    let past = |i: usize| turns[i]["n_past"].as_u64().expect("n_past");
    let prompt = |i: usize| turns[i]["n_prompt"].as_u64().expect("n_prompt");
    assert!(past(1) > past(0), "{r}");
    // The second turn reused the KV prefix: of the 39+ tokens of context before its answer it
    // prefilled only the new part.
    assert!(prompt(1) < past(1) - 5, "{r}");
    assert_eq!(past(0), prompt(0) + 5, "{r}");
    // The engine's CSV has 10 rows over two `turn` values; the report splits them per turn.
    assert_eq!(r["tokens"], 10, "{r}");
    let o = run(t.path(), &["report", "res", "-f", "csv"]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = String::from_utf8_lossy(&o.stdout);
    let header: Vec<&str> = csv.lines().next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let turn_of: Vec<&str> = rows.iter().map(|r| r[col("turn")]).collect();
    assert_eq!(turn_of, ["", "1", "2"], "{csv}");
    assert_eq!(rows[2][col("n_past")], past(1).to_string(), "{csv}");
    let stdout = std::fs::read_to_string(t.path().join(format!(
        "res/{}/stdout.txt",
        r["dir"].as_str().expect("dir")
    )))
    .expect("stdout.txt");
    assert!(stdout.starts_with("BMOE_READY "), "{stdout}");
    assert_eq!(stdout.matches("BMOE_DONE ").count(), 2, "{stdout}");
}

fn small(name: &str, binary: &str) -> String {
    format!(
        "name = \"{name}\"\nbinary = \"{binary}\"\n[defaults]\nn_predict = 3\nprompt = \"hi\"\n\
         [[model]]\nid = \"tiny\"\npreset = \"tiny\"\n[axes.cache]\nflag = \"--cache-mb\"\n\
         [[sweep]]\nname = \"s\"\naxes = {{ cache = [0, 4] }}\ntag = \"c{{cache}}\"\n"
    )
}

#[test]
fn several_manifests_run_one_after_another_and_a_failure_does_not_stop_the_rest() {
    let t = tempfile::tempdir().expect("tmp");
    fake_engine(t.path(), 0.0);
    write(t.path(), "a.toml", &small("a", "./fake-cli"));
    // A manifest that does not parse, and one whose engine fails every run.
    write(
        t.path(),
        "broken.toml",
        "name = \"x\"\n[[sweep]]\nnmae = 1\n",
    );
    write(t.path(), "fails.sh", "#!/bin/sh\necho boom >&2\nexit 7\n");
    let _ = std::process::Command::new("chmod")
        .args(["755", "fails.sh"])
        .current_dir(t.path())
        .status();
    write(t.path(), "c.toml", &small("c", "./fails.sh"));
    write(t.path(), "b.toml", &small("b", "./fake-cli"));
    let o = run(
        t.path(),
        &["sweep", "a.toml", "broken.toml", "c.toml", "b.toml"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // Each good manifest went into its own results/<name>, as a single one would.
    for name in ["a", "b"] {
        let recs = records(&t.path().join("results").join(name));
        assert_eq!(recs.len(), 2, "{name}: {}", text(&o));
        assert!(recs.iter().all(|r| r["status"] == "ok"), "{}", text(&o));
    }
    let recs = records(&t.path().join("results/c"));
    assert_eq!(recs.len(), 2, "{}", text(&o));
    assert!(recs.iter().all(|r| r["status"] != "ok"), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error: broken.toml:3:"), "{err}");
    assert!(err.contains("error: c.toml:"), "{err}");
    assert!(
        err.contains("2 of 4 manifest(s) failed: broken.toml, c.toml"),
        "{err}"
    );
    // b ran after c failed.
    assert!(
        err.find("[3/4] c.toml").unwrap_or(usize::MAX) < err.find("[4/4] b.toml").unwrap_or(0),
        "{err}"
    );

    // -o is the parent with several manifests; --resume applies to each one.
    let o = run(t.path(), &["sweep", "a.toml", "b.toml", "-o", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(records(&t.path().join("out/a")).len(), 2);
    assert_eq!(records(&t.path().join("out/b")).len(), 2);
    let before = calls(t.path());
    let o = run(
        t.path(),
        &["sweep", "a.toml", "b.toml", "-o", "out", "--resume"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(calls(t.path()), before, "resume reran finished runs");

    // Two manifests with one name would share a directory: refused before anything runs.
    write(t.path(), "a2.toml", &small("a", "./fake-cli"));
    let o = run(t.path(), &["sweep", "a.toml", "a2.toml", "-o", "dup"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!t.path().join("dup").exists());
    assert!(String::from_utf8_lossy(&o.stderr).contains("hint: give each manifest its own `name`"));
    // --check and --dry-run say so too: a set that checks clean must also run.
    for flag in ["--check", "--dry-run"] {
        let o = run(t.path(), &["sweep", "a.toml", "a2.toml", "-o", "dup", flag]);
        assert_eq!(o.status.code(), Some(1), "{flag}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("both have name = \"a\""), "{flag}: {err}");
        assert!(!t.path().join("dup").exists());
    }
}

/// A run killed by a signal names it; one killed by the memory cap's OOM killer says so, in the
/// progress line, `results.jsonl` and the report.
#[test]
fn a_killed_run_names_the_signal_and_the_oom_cap() {
    let t = tempfile::tempdir().expect("tmp");
    write(t.path(), "term.sh", "#!/bin/sh\nkill -TERM $$\nsleep 5\n");
    // Doubles a string until the 32 MiB cap's OOM killer stops it (exec: the engine itself).
    write(
        t.path(),
        "hog.sh",
        "#!/bin/sh\nexec awk 'BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) s = s s }'\n",
    );
    let _ = std::process::Command::new("chmod")
        .args(["755", "term.sh", "hog.sh"])
        .current_dir(t.path())
        .status();
    write(
        t.path(),
        "term.toml",
        "name = \"term\"\nbinary = \"./term.sh\"\n[[model]]\nid = \"tiny\"\npreset = \"tiny\"\n[[sweep]]\nname = \"s\"\n",
    );
    let o = run(t.path(), &["sweep", "term.toml"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("killed by SIGTERM; last stderr line: (empty)"),
        "{err}"
    );
    let recs = records(&t.path().join("results/term"));
    assert_eq!(recs[0]["signal"], 15, "{}", recs[0]);

    if let Err(why) = cgroup_writable() {
        eprintln!("SKIP a_killed_run_names_the_signal_and_the_oom_cap (OOM part): {why}");
        return;
    }
    write(
        t.path(),
        "oom.toml",
        "name = \"oom\"\nbinary = \"./hog.sh\"\n[defaults]\ntimeout_s = 60\n\
         [[model]]\nid = \"tiny\"\npreset = \"tiny\"\n[[sweep]]\nname = \"s\"\nmem_limit = \"32MiB\"\n",
    );
    let o = run(t.path(), &["sweep", "oom.toml"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("OOM-killed by the 32 MiB memory cgroup cap (SIGKILL)"),
        "{err}"
    );
    let recs = records(&t.path().join("results/oom"));
    assert_eq!(recs[0]["signal"], 9, "{}", recs[0]);
    assert!(
        recs[0]["cgroup"]["oom_kill"]
            .as_u64()
            .is_some_and(|k| k > 0)
    );
    let o = run(t.path(), &["report", "results/oom", "--findings"]);
    assert!(o.status.success(), "{}", text(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("failed — OOM-killed by the 32 MiB memory cgroup cap (SIGKILL)"),
        "{md}"
    );
    let findings =
        std::fs::read_to_string(t.path().join("results/oom/findings.md")).expect("findings");
    assert!(
        findings.contains("failed — OOM-killed by the 32 MiB memory cgroup cap (SIGKILL)"),
        "{findings}"
    );
}
