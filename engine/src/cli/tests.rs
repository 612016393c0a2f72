//! Flag resolution: defaults, the spec order of errors, seeds, help text.

use super::model::{DEFAULT_PROMPT, default_threads};
use super::session::DEFAULT_DECIDE_STATE_MAX_MIB;
use super::streaming::CacheAuto;
use super::*;
use std::path::PathBuf;

fn parse(args: &[&str]) -> Result<RunConfig, ConfigError> {
    let mut v = vec!["bmoe-cli"];
    v.extend_from_slice(args);
    cli(&v[1..]).resolve()
}

fn cli(args: &[&str]) -> Cli {
    let mut v = vec!["bmoe-cli"];
    v.extend_from_slice(args);
    Cli::parse_args(v).expect("clap parse")
}

#[test]
fn defaults_resolve() {
    let c = parse(&["-m", "x.gguf"]).unwrap();
    assert_eq!(c.n_predict, 128);
    assert_eq!(c.threads as i64, default_threads());
    assert!((1..=4).contains(&c.threads));
    assert_eq!((c.n_ctx, c.n_batch, c.n_ubatch), (2048, 2048, 2048));
    assert_eq!(c.sampling, Sampling::Greedy);
    assert_eq!(c.stream, None);
    assert_eq!(c.prompt, DEFAULT_PROMPT);
    let s = parse(&[
        "-m",
        "x.gguf",
        "--moe-stream",
        "--cache-mb",
        "2",
        "--io-threads",
        "1",
        "--no-odirect",
        "--ubatch",
        "64",
    ])
    .unwrap();
    assert_eq!(
        s.stream,
        Some(StreamConfig {
            cache_mb: 2,
            auto: None,
            load_all: false,
            io_threads: 1,
            o_direct: false,
            overlap: None,
            prefetch: 0,
            prefetch_sync: false,
        })
    );
    assert_eq!(s.n_ubatch, 64);
}

#[test]
fn errors_name_the_flag_in_spec_order() {
    let e = |a: &[&str]| parse(a).unwrap_err().message;
    assert!(e(&[]).contains("-m/--model"));
    assert!(e(&["-m", "x", "-n", "0", "-t", "0"]).contains("-n/--n-predict"));
    assert!(e(&["-m", "x", "-t", "-1"]).contains("-t/--threads"));
    assert!(e(&["-m", "x", "-c", "0"]).contains("-c/--ctx-size"));
    assert!(e(&["-m", "x", "--ubatch", "-1"]).contains("--ubatch"));
    assert_eq!(
        e(&["-m", "x", "-c", "64", "--ubatch", "65"]),
        "--ubatch=65 exceeds -c/--ctx-size=64"
    );
    assert!(e(&["-m", "x", "--n-expert-used", "-2"]).contains("--n-expert-used"));
    assert!(e(&["-m", "x", "--temp", "0.5", "--top-k", "-1"]).contains("--top-k"));
    assert!(e(&["-m", "x", "--temp", "0.5", "--top-p", "0"]).contains("--top-p"));
    assert!(e(&["-m", "x", "--temp", "0.5", "--top-p", "1.5"]).contains("--top-p"));
    assert!(e(&["-m", "x", "--moe-stream", "--io-threads", "9"]).contains("--io-threads"));
    assert!(e(&["-m", "x", "--moe-stream", "--io-threads", "0"]).contains("--io-threads"));
    assert!(e(&["-m", "x", "--moe-stream", "--cache-mb", "-1"]).contains("--cache-mb"));
    assert!(e(&["-m", "x", "--test-poison", "routed"]).contains("--moe-stream"));
    assert!(e(&["-m", "x", "--moe-stream", "--cache-mb", "lots"]).contains("'auto'"));
    assert!(
        e(&[
            "-m",
            "x",
            "--moe-stream",
            "--cache-mb",
            "auto",
            "--cache-floor-mb",
            "-1"
        ])
        .contains("--cache-floor-mb")
    );
    assert!(e(&["-m", "x", "--dense-weights", "ahwb"]).contains("Android only"));
    assert!(e(&["-m", "x", "--dense-weights", "zram"]).contains("mmap|warm|anon|ahwb"));
    assert!(e(&["-m", "x", "--load-all"]).contains("--moe-stream"));
    assert!(e(&["-m", "x", "--no-think"]).contains("--chatml"));
    assert!(e(&["-m", "x", "--decide"]).contains("--session"));
    assert!(e(&["-m", "x", "--decide-state-max-mib", "4"]).contains("--decide"));
    assert!(e(&["-m", "x", "--session", "--decide-state-max-mib", "4"]).contains("--decide"));
}

#[test]
fn sampling_seed_is_resolved_never_left_to_llama_cpp() {
    let seed = |extra: &[&str]| {
        let mut a = vec!["-m", "x", "--temp", "0.8"];
        a.extend_from_slice(extra);
        match parse(&a).unwrap().sampling {
            Sampling::Sample { seed, .. } => seed,
            Sampling::Greedy => panic!("--temp 0.8 samples"),
        }
    };
    assert_eq!(seed(&["--seed", "42"]), 42);
    assert_eq!(seed(&["--seed", "0"]), 0);
    // no --seed: a concrete seed is drawn (never llama.cpp's "random" sentinel), and two
    // draws differ (a fixed fallback would make every "random" run the same)
    let draws: Vec<u32> = (0..4).map(|_| seed(&[])).collect();
    assert!(draws.iter().all(|&s| s != u32::MAX), "{draws:?}");
    assert!(draws.windows(2).any(|w| w[0] != w[1]), "{draws:?}");
    // llama.cpp's "random" value is refused at the flag
    let e = Cli::parse_args(["bmoe-cli", "-m", "x", "--seed", "4294967295"]).unwrap_err();
    assert!(e.to_string().contains("0..=4294967294"), "{e}");
}

#[test]
fn help_states_one_default_per_flag() {
    use clap::CommandFactory;
    let help = Cli::command().render_long_help().to_string();
    for flag in ["--seed <N>", "--threads <N>"] {
        let at = help.find(flag).expect("flag in --help");
        let end = help[at..].find("\n\n").map_or(help.len(), |e| at + e);
        let text = &help[at..end];
        assert_eq!(text.matches("default").count(), 1, "{text}");
    }
}

#[test]
fn decide_state_cap_resolves() {
    let d = |extra: &[&str]| {
        let mut a = vec!["-m", "x", "--session", "--decide"];
        a.extend_from_slice(extra);
        parse(&a).unwrap().decide_state_max_mib
    };
    assert_eq!(d(&[]), DEFAULT_DECIDE_STATE_MAX_MIB);
    assert_eq!(d(&["--decide-state-max-mib", "0"]), 0);
    assert_eq!(d(&["--decide-state-max-mib", "64"]), 64);
}

#[test]
fn memory_policy_flags_resolve() {
    let c = parse(&[
        "-m",
        "x",
        "--moe-stream",
        "--cache-mb",
        "auto",
        "--cache-floor-mb",
        "64",
        "--cache-ceil-mb",
        "512",
        "--dense-weights",
        "anon",
        "--load-all",
        "--csv",
        "m.csv",
        "--chatml",
        "--no-think",
    ])
    .unwrap();
    let s = c.stream.unwrap();
    assert_eq!(
        s.auto,
        Some(CacheAuto {
            floor_mb: Some(64),
            ceil_mb: 512
        })
    );
    assert!(s.load_all);
    assert_eq!(c.dense_weights, DenseWeights::Anon);
    assert_eq!(c.csv, Some(PathBuf::from("m.csv")));
    assert!(c.chatml && !c.think);
}

#[test]
fn knobs_are_checked_where_they_have_no_effect() {
    // wrong values are refused with or without --moe-stream / --temp
    let e = |a: &[&str]| parse(a).unwrap_err();
    assert_eq!(e(&["-m", "x", "--cache-mb", "lots"]).flag, "--cache-mb");
    assert_eq!(e(&["-m", "x", "--cache-mb", "-5"]).flag, "--cache-mb");
    assert_eq!(e(&["-m", "x", "--io-threads", "99"]).flag, "--io-threads");
    assert_eq!(
        e(&["-m", "x", "--cache-ceil-mb", "-1"]).flag,
        "--cache-ceil-mb"
    );
    assert_eq!(e(&["-m", "x", "--top-p", "2"]).flag, "--top-p");
    assert_eq!(e(&["-m", "x", "--top-k", "-3"]).flag, "--top-k");
    assert!(!e(&["-m", "x", "--top-p", "2"]).hint.is_empty());
}

#[test]
fn valid_knobs_without_effect_are_warned_about() {
    let w = |a: &[&str]| {
        let mut v = vec!["-m", "x"];
        v.extend_from_slice(a);
        let c = cli(&v);
        let r = c.resolve().expect("valid");
        c.inert_flags(r.stream.is_some())
    };
    assert!(w(&[]).is_empty());
    // the defaults are not "given": nothing to warn about
    assert!(w(&["--moe-stream", "--temp", "0.7"]).is_empty());
    let plain = w(&["--cache-mb", "64", "--io-threads", "2", "--no-odirect"]);
    assert_eq!(plain.len(), 3, "{plain:?}");
    assert!(plain[0].starts_with("--cache-mb has no effect without --moe-stream"));
    assert!(plain[1].starts_with("--io-threads") && plain[2].starts_with("--no-odirect"));
    // given equal to the default still says so: the user asked for something
    assert_eq!(w(&["--cache-mb", "0"]).len(), 1);
    let greedy = w(&["--top-k", "5", "--top-p", "0.5", "--seed", "1"]);
    assert_eq!(greedy.len(), 3, "{greedy:?}");
    assert!(greedy.iter().all(|g| g.contains("--temp")), "{greedy:?}");
    assert!(w(&["--temp", "0.5", "--top-k", "5", "--seed", "1"]).is_empty());
    let bounds = w(&["--moe-stream", "--cache-mb", "64", "--cache-ceil-mb", "128"]);
    assert_eq!(bounds.len(), 1, "{bounds:?}");
    assert!(bounds[0].starts_with("--cache-ceil-mb has no effect without --cache-mb auto"));
    assert!(
        w(&[
            "--moe-stream",
            "--cache-mb",
            "auto",
            "--cache-ceil-mb",
            "128"
        ])
        .is_empty()
    );
    let session = w(&["--session", "-p", "hi"]);
    assert!(
        session.len() == 1 && session[0].starts_with("-p/--prompt"),
        "{session:?}"
    );
}

#[test]
fn prompt_file_is_read_and_its_errors_name_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("prompt.txt");
    std::fs::write(&p, "line one\nline two\n").expect("write");
    let path = p.to_str().expect("utf-8 path");
    assert_eq!(
        parse(&["-m", "x", "-f", path]).unwrap().prompt,
        "line one\nline two"
    );
    std::fs::write(&p, "crlf\r\n\n").expect("write");
    assert_eq!(
        parse(&["-m", "x", "--file", path]).unwrap().prompt,
        "crlf\r\n"
    );
    std::fs::write(&p, [0x66, 0xff, 0x0a]).expect("write");
    let e = parse(&["-m", "x", "-f", path]).unwrap_err();
    assert!(
        e.message.contains(path) && e.message.contains("not UTF-8"),
        "{}",
        e.message
    );
    let missing = dir.path().join("nope.txt");
    let missing = missing.to_str().expect("utf-8 path");
    let e = parse(&["-m", "x", "-f", missing]).unwrap_err();
    assert_eq!(e.flag, "-f/--file");
    assert!(e.message.contains(missing), "{}", e.message);
    assert!(e.hint.contains("-p"), "{}", e.hint);
    // -f and -p together are a usage error
    assert!(Cli::parse_args(["bmoe-cli", "-f", path, "-p", "x"]).is_err());
}

#[test]
fn every_error_has_a_hint() {
    for args in [
        &["-m", "x", "-n", "0"][..],
        &["-m", "x", "--moe-stream", "--io-threads", "9"],
    ] {
        assert!(!parse(args).unwrap_err().hint.is_empty());
    }
}

#[test]
fn prefetch_prerequisites_are_errors_naming_the_flag() {
    let e = |a: &[&str]| parse(a).unwrap_err();
    let cases: [(&[&str], &str, &str); 6] = [
        (
            &["-m", "x", "--prefetch", "1"],
            "--prefetch",
            "--moe-stream",
        ),
        (
            &["-m", "x", "--moe-stream", "--prefetch", "1"],
            "--prefetch",
            "cache",
        ),
        (
            &[
                "-m",
                "x",
                "--moe-stream",
                "--cache-mb",
                "0",
                "--prefetch",
                "2",
            ],
            "--prefetch",
            "cache",
        ),
        (
            &[
                "-m",
                "x",
                "--moe-stream",
                "--cache-mb",
                "8",
                "--prefetch",
                "-1",
            ],
            "--prefetch",
            "0..=64",
        ),
        (
            &["-m", "x", "--moe-stream", "--overlap", "--prefetch", "1"],
            "--prefetch",
            "cache",
        ),
        (
            &[
                "-m",
                "x",
                "--moe-stream",
                "--cache-mb",
                "8",
                "--prefetch-sync",
            ],
            "--prefetch-sync",
            "--prefetch K",
        ),
    ];
    for (args, flag, says) in cases {
        let err = e(args);
        assert_eq!(err.flag, flag, "{args:?}");
        assert!(err.message.contains(flag), "{args:?}: {}", err.message);
        assert!(err.message.contains(says), "{args:?}: {}", err.message);
        assert!(!err.hint.is_empty(), "{args:?}: no hint");
    }
    // the prerequisites met: accepted, and carried into the streaming config
    let ok = parse(&[
        "-m",
        "x",
        "--moe-stream",
        "--cache-mb",
        "auto",
        "--prefetch",
        "2",
        "--prefetch-sync",
    ])
    .unwrap();
    let sc = ok.stream.unwrap();
    assert_eq!((sc.prefetch, sc.prefetch_sync), (2, true));
}

#[test]
fn predictors_resolve_and_route_ahead_refuses_its_partners_by_name() {
    let c = parse(&[
        "-m",
        "x",
        "--moe-stream",
        "--cache-mb",
        "8",
        "--predict-prefetch",
    ])
    .unwrap();
    assert_eq!(
        c.predict,
        super::predict::PredictConfig {
            log: false,
            prefetch: true,
            spec_max: 2,
            route_ahead: 0
        }
    );
    let c = parse(&["-m", "x", "--moe-stream", "--route-ahead", "3"]).unwrap();
    assert_eq!(c.predict.route_ahead, 3);
    for (other, named) in [
        (&["--predict-log"][..], "--predict-log"),
        (
            &["--cache-mb", "8", "--predict-prefetch"][..],
            "--predict-prefetch",
        ),
        (&["--ngram"][..], "--mtp/--ngram"),
    ] {
        let mut args = vec!["-m", "x", "--moe-stream", "--route-ahead", "1"];
        args.extend_from_slice(other);
        let e = parse(&args).unwrap_err();
        assert_eq!(e.flag, "--route-ahead", "{e:?}");
        assert!(e.to_string().contains(named), "{e}");
    }
    let warned = cli(&["-m", "x", "--moe-stream", "--predict-spec-max", "4"]).inert_flags(true);
    assert!(
        warned
            .iter()
            .any(|w| w.starts_with("--predict-spec-max has no effect")),
        "{warned:?}"
    );
}

#[test]
fn no_prefill_routed_needs_the_prefill_device() {
    let e = parse(&["-m", "x", "--moe-stream", "--no-prefill-routed"]).unwrap_err();
    assert_eq!(e.flag, "--no-prefill-routed");
    assert!(
        e.message.contains("requires --prefill-device"),
        "{}",
        e.message
    );
    assert!(e.hint.contains("--prefill-device NAME"), "{}", e.hint);
    // without the device, routed mode is off whatever the flags
    assert!(!parse(&["-m", "x", "--moe-stream"]).unwrap().prefill_routed);
}
