//! `--auto`'s rule over many machines and models (no model file needed), and the merge with
//! the flags the command line gave.

use super::*;
use crate::cli::Cli;

const GIB: u64 = 1 << 30;
const MIB_: u64 = 1 << 20;

/// The 17 GB Qwen3-30B-A3B shape on a machine with `avail` MemAvailable and no cgroup.
fn qwen3(avail: u64) -> Facts {
    Facts {
        mem_available: avail,
        cgroup_headroom: None,
        model_bytes: 17_300 * MIB_,
        dense_bytes: 971 * MIB_,
        expert_bytes: 15_552 * MIB_,
        cache_cycle_bytes: 972 * MIB_,
        layer_load_bytes: 20 * MIB_,
        streamable: Ok(()),
        uffd: Ok(()),
        probe: Ok(LaneProbe {
            read_bytes: 864 * 1024,
            rates: rates(&[(1, 500.0), (2, 900.0), (4, 1000.0), (8, 1010.0)]),
        }),
        cores: 2,
        busy_cores: Some(0.1),
    }
}

fn rates(r: &[(usize, f64)]) -> Vec<LaneRate> {
    r.iter()
        .map(|&(lanes, mib_s)| LaneRate { lanes, mib_s })
        .collect()
}

fn note(c: &Choice, s: Setting) -> &Note {
    let mut it = c.notes.iter().filter(|n| n.setting == s);
    let n = it.next().expect("a note for every setting");
    assert!(it.next().is_none(), "one note per setting");
    n
}

#[test]
fn streams_exactly_when_the_model_exceeds_the_usable_memory() {
    let big = decide(&qwen3(8 * GIB));
    assert!(big.stream);
    let n = note(&big, Setting::Streaming);
    assert_eq!(n.source, Source::Measured);
    assert!(
        n.text.contains("larger than") && n.text.contains("MemAvailable"),
        "{}",
        n.text
    );
    let fits = decide(&qwen3(32 * GIB));
    assert!(!fits.stream);
    assert!(note(&fits, Setting::Streaming).text.contains("fits"));
    // a tighter cgroup decides, and is named
    let cg = decide(&Facts {
        cgroup_headroom: Some(8 * GIB),
        ..qwen3(32 * GIB)
    });
    assert!(cg.stream);
    assert!(note(&cg, Setting::Streaming).text.contains("cgroup"));
    // a looser cgroup changes nothing
    assert!(
        !decide(&Facts {
            cgroup_headroom: Some(64 * GIB),
            ..qwen3(32 * GIB)
        })
        .stream
    );
    // the boundary: equal fits, one byte more streams
    let f = qwen3(17_300 * MIB_);
    assert!(!decide(&f).stream);
    assert!(
        decide(&Facts {
            model_bytes: f.model_bytes + 1,
            ..f
        })
        .stream
    );
}

#[test]
fn unknown_memory_or_an_unstreamable_model_stays_plain() {
    let unknown = decide(&qwen3(0));
    assert!(!unknown.stream);
    assert_eq!(note(&unknown, Setting::Streaming).source, Source::Assumed);
    assert_eq!(note(&unknown, Setting::Cache).source, Source::Assumed);
    assert_eq!(unknown.dense, DenseWeights::Mmap);
    let no_recipe = decide(&Facts {
        streamable: Err(Unavailable::Architecture("llama".into())),
        ..qwen3(GIB)
    });
    assert!(!no_recipe.stream, "oversize but not streamable");
    assert!(
        note(&no_recipe, Setting::Streaming)
            .text
            .contains("'llama'")
    );
}

#[test]
fn dense_weights_are_pinned_under_pressure_only_when_they_fit() {
    assert_eq!(decide(&qwen3(8 * GIB)).dense, DenseWeights::Anon);
    assert_eq!(
        decide(&qwen3(32 * GIB)).dense,
        DenseWeights::Mmap,
        "no pressure"
    );
    // 1.5 GiB: 971 MiB dense + a 972 MiB cycle do not fit
    let tight = decide(&qwen3(1536 * MIB_));
    assert!(tight.stream);
    assert_eq!(tight.dense, DenseWeights::Mmap);
    assert!(note(&tight, Setting::Dense).text.contains("would not fit"));
}

#[test]
fn overlap_uses_userfaultfd_when_it_opens_and_the_cache_holds_a_cycle() {
    let c = decide(&qwen3(8 * GIB));
    assert!(!c.overlap_staged);
    let refused = decide(&Facts {
        uffd: Err(Unavailable::Userfault(
            "userfaultfd is not available (EPERM)".into(),
        )),
        ..qwen3(8 * GIB)
    });
    assert!(refused.overlap_staged);
    assert!(note(&refused, Setting::Overlap).text.contains("EPERM"));
    // 2 GiB: the budget stays below one 972 MiB cycle
    let small = decide(&qwen3(2 * GIB));
    assert!(small.cache.below_cycle, "{:?}", small.cache);
    assert!(small.overlap_staged);
}

#[test]
fn lanes_stay_at_the_default_unless_the_probe_clearly_beats_it() {
    let with = |r: &[(usize, f64)]| {
        decide(&Facts {
            probe: Ok(LaneProbe {
                read_bytes: 4096,
                rates: rates(r),
            }),
            ..qwen3(8 * GIB)
        })
    };
    // 4 lanes reach 1000 ≥ 0.75 × 1010
    assert_eq!(qwen3_lanes(), 4);
    // the probe of the quiet-machine A/B whose 1-lane pick decoded 1.21× slower than 4 lanes
    assert_eq!(
        with(&[(1, 1437.0), (2, 1433.0), (4, 1253.0), (8, 1193.0)]).io_threads,
        4
    );
    // a near tie keeps the default
    assert_eq!(
        with(&[(1, 300.0), (2, 300.0), (4, 290.0), (8, 280.0)]).io_threads,
        4
    );
    // a clearly slower default gives way to the fewest near the best
    assert_eq!(
        with(&[(1, 300.0), (2, 310.0), (4, 200.0), (8, 280.0)]).io_threads,
        1
    );
    assert_eq!(
        with(&[(8, 2000.0), (1, 100.0), (2, 200.0), (4, 1400.0)]).io_threads,
        8
    );
    let c = with(&[(1, 100.0), (2, 195.0)]);
    assert_eq!(c.io_threads, 2);
    assert_eq!(note(&c, Setting::Lanes).source, Source::Measured);
    let none = with(&[(1, 0.0), (2, 0.0)]);
    assert_eq!(
        (none.io_threads, note(&none, Setting::Lanes).source),
        (DEFAULT_LANES, Source::Assumed)
    );
    let refused = decide(&Facts {
        probe: Err(Unavailable::DirectOpen {
            path: "m.gguf".into(),
            reason: "Invalid argument (os error 22)".into(),
        }),
        ..qwen3(8 * GIB)
    });
    assert_eq!(refused.io_threads, DEFAULT_LANES);
    assert!(
        note(&refused, Setting::Lanes)
            .text
            .contains("O_DIRECT open refused")
    );
}

fn qwen3_lanes() -> usize {
    decide(&qwen3(8 * GIB)).io_threads
}

#[test]
fn threads_take_every_core_and_adapt_when_others_use_some() {
    let t = |cores, busy| {
        let c = decide(&Facts {
            cores,
            busy_cores: busy,
            ..qwen3(8 * GIB)
        });
        (
            c.threads,
            c.adaptive_threads,
            note(&c, Setting::Threads).source,
        )
    };
    assert_eq!(t(2, Some(0.1)), (2, false, Source::Measured));
    assert_eq!(t(2, Some(1.2)), (2, true, Source::Measured));
    assert_eq!(t(8, Some(8.0)), (8, true, Source::Measured));
    assert_eq!(t(4, None), (4, false, Source::Assumed));
    assert_eq!(t(0, Some(0.0)).0, 1);
}

#[test]
fn over_a_grid_of_machines_every_choice_stays_inside_the_usable_memory() {
    for avail_mb in (512..40_000).step_by(997) {
        for cg in [None, Some(3 * GIB), Some(8 * GIB)] {
            let f = Facts {
                cgroup_headroom: cg,
                ..qwen3(avail_mb * MIB_)
            };
            let usable = cg.map_or(f.mem_available, |c| c.min(f.mem_available));
            let c = decide(&f);
            assert_eq!(c.stream, f.model_bytes > usable, "{avail_mb} {cg:?}");
            assert!(c.cache.budget_mb * MIB_ <= usable, "{avail_mb} {cg:?}");
            if c.dense == DenseWeights::Anon {
                assert!(c.stream && f.dense_bytes + f.cache_cycle_bytes <= usable);
            }
            assert_eq!(c.notes.len(), 6, "one note per setting");
            assert!(c.notes.iter().all(|n| !n.text.is_empty()));
        }
    }
}

fn config(args: &[&str]) -> (Cli, crate::cli::RunConfig) {
    let mut v = vec!["bmoe-cli", "-m", "x.gguf", "--auto"];
    v.extend_from_slice(args);
    let cli = Cli::parse_args(v).expect("parse");
    let cfg = cli.resolve().expect("resolve");
    (cli, cfg)
}

#[test]
fn auto_alone_takes_every_choice() {
    let (cli, mut cfg) = config(&[]);
    let choice = decide(&Facts {
        busy_cores: Some(1.5),
        ..qwen3(8 * GIB)
    });
    let lines = apply::merge(&choice, &cli.auto_given(), &mut cfg);
    let sc = cfg.stream.expect("streaming");
    assert!(sc.auto.is_some(), "cache auto");
    assert_eq!(sc.overlap.map(|o| o.force_staged), Some(false));
    assert_eq!(sc.io_threads, 4);
    assert_eq!(cfg.dense_weights, DenseWeights::Anon);
    assert_eq!((cfg.threads, cfg.adaptive_threads), (2, true));
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert!(
        lines[..6].iter().all(|l| l.ends_with("[measured]")),
        "{lines:?}"
    );
    assert_eq!(
        lines[6],
        "the same run without --auto: --moe-stream --cache-mb auto --dense-weights anon --overlap --io-threads 4 -t 2 --adaptive-threads"
    );
}

#[test]
fn a_plain_choice_drops_streaming_and_says_nothing_of_its_settings() {
    let (cli, mut cfg) = config(&[]);
    let lines = apply::merge(&decide(&qwen3(32 * GIB)), &cli.auto_given(), &mut cfg);
    assert_eq!(cfg.stream, None);
    assert_eq!(lines.len(), 3, "streaming, threads, the flags: {lines:?}");
    assert!(lines[0].starts_with("streaming off"));
}

#[test]
fn flags_given_on_the_command_line_win_and_say_so() {
    let (cli, mut cfg) = config(&[
        "--cache-mb",
        "512",
        "--io-threads",
        "2",
        "--overlap-kind",
        "staged",
        "--overlap",
        "-t",
        "1",
        "--dense-weights",
        "warm",
    ]);
    let lines = apply::merge(&decide(&qwen3(8 * GIB)), &cli.auto_given(), &mut cfg);
    let sc = cfg.stream.expect("streaming");
    assert_eq!((sc.cache_mb, sc.auto), (512, None));
    assert_eq!(sc.io_threads, 2);
    assert_eq!(sc.overlap.map(|o| o.force_staged), Some(true));
    assert_eq!((cfg.threads, cfg.adaptive_threads), (1, false));
    assert_eq!(cfg.dense_weights, DenseWeights::Warm);
    for flag in [
        "--cache-mb",
        "--io-threads",
        "--overlap",
        "-t/--threads",
        "--dense-weights",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("{flag} given on the command line: kept"))),
            "{flag}: {lines:?}"
        );
    }
    // a flag that needs streaming turns it on where auto alone would not
    let (cli, mut cfg) = config(&["--row-stream"]);
    let lines = apply::merge(&decide(&qwen3(32 * GIB)), &cli.auto_given(), &mut cfg);
    assert!(cfg.stream.is_some() && cfg.row_stream.is_some());
    assert!(
        lines[0].starts_with("--row-stream given on the command line: kept"),
        "{lines:?}"
    );
    assert_eq!(cfg.dense_weights, DenseWeights::Mmap, "no pressure: mmap");
}
