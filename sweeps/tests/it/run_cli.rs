//! `bmoe-bench run` with the real `bmoe-cli` (`$BMOE_CLI`): comma lists crossed into cells, the
//! runs kept as a results directory the other commands read, the report printed; a misspelt
//! flag refused before anything runs.

use crate::sweep_common::*;

#[test]
fn run_crosses_comma_lists_and_prints_the_report() {
    let Some(cli) = real_cli_or_skip("run_crosses_comma_lists_and_prints_the_report", "--csv")
    else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    let bin = cli.display().to_string();
    let o = run(
        t.path(),
        &[
            "run",
            "-m",
            "preset:tiny",
            "-n",
            "4,6",
            "-r",
            "2",
            "-w",
            "1",
            "--set",
            "cache-mb=0,8",
            "--set",
            "moe-stream=on",
            "--binary",
            &bin,
            "-o",
            "res",
            "-f",
            "jsonl",
            "--",
            "-t",
            "2",
            "--ignore-eos",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // One jsonl object per cell: the product of the lists that vary (cache × n).
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .collect();
    let cells: Vec<&str> = rows.iter().filter_map(|r| r["cell"].as_str()).collect();
    assert_eq!(
        cells,
        [
            "tiny_cache_mb0_n4",
            "tiny_cache_mb0_n6",
            "tiny_cache_mb8_n4",
            "tiny_cache_mb8_n6"
        ],
        "{}",
        text(&o)
    );
    for r in &rows {
        assert_eq!(r["runs"], 2, "{r}");
    }
    // Every run kept like a sweep's: warm-up plus counted, each with the argv asked for.
    let recs = records(&t.path().join("res"));
    assert_eq!(recs.len(), 12);
    for r in &recs {
        assert_eq!(r["status"], "ok", "{r}");
        let argv: Vec<&str> = r["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        let n: u64 = if r["cell"].as_str().is_some_and(|c| c.ends_with("n4")) {
            4
        } else {
            6
        };
        assert_eq!(r["tokens"], n, "{r}");
        for w in ["--moe-stream", "--ignore-eos", "--cache-mb"] {
            assert!(argv.contains(&w), "{w} missing: {argv:?}");
        }
    }
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("results in res"),
        "{}",
        text(&o)
    );
    // The kept manifest is a sweep manifest, and the results report again.
    let o = run(t.path(), &["sweep", "res/manifest.toml", "--check"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(t.path(), &["report", "res"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("| tiny_cache_mb8_n6 | 2 |"),
        "{}",
        text(&o)
    );
}

#[test]
fn run_refuses_a_misspelt_flag_and_a_bad_set() {
    let Some(cli) = real_cli_or_skip("run_refuses_a_misspelt_flag_and_a_bad_set", "--csv") else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    let bin = cli.display().to_string();
    let o = run(
        t.path(),
        &[
            "run",
            "-m",
            "preset:tiny",
            "--set",
            "cache-mbb=0,8",
            "--binary",
            &bin,
            "-o",
            "res",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`--cache-mbb` from axis `cache_mbb`")
            && err.contains("did you mean `--cache-mb`?"),
        "{err}"
    );
    assert!(!t.path().join("res").exists(), "nothing ran");

    let o = run(
        t.path(),
        &[
            "run",
            "-m",
            "preset:tiny",
            "--set",
            "cache-mb",
            "--binary",
            &bin,
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error: --set `cache-mb` has no `=`"), "{err}");
    assert!(err.contains("hint: write --set FLAG=V1,V2"), "{err}");
}
