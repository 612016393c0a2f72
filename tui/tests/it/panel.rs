//! Snapshot tests of the whole panel on ratatui's `TestBackend`. Input is produced with the
//! `bmoe-telemetry` writers (protocol lines, metrics CSV) and read back through the same
//! decoders the binary uses, so a snapshot covers parsing, folding and drawing together.

#![allow(clippy::unwrap_used)] // test helpers: a failed write is a failed test

use crate::common::{render, render_with};

use bmoe_telemetry::metrics::{MetricsWriter, RunInfo, SummaryTrailer, TokenRow};
use bmoe_telemetry::protocol::{Done, Load, Progress};
use bmoe_top::decode::LineDecoder;
use bmoe_top::model::{Event, RunConfig};
use bmoe_top::state::{App, SourceKind};
use bmoe_top::theme::ColorLevel;
use bmoe_top::{argv, replay, ui};
use ratatui::style::Color;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// A live panel fed protocol lines, as `bmoe-top -- <cmd>` would be.
fn live(cmd: &str, lines: &[String]) -> App {
    let argv = words(cmd);
    let mut app = App::new(SourceKind::Spawn, cmd, argv::facts(&argv));
    let mut d = LineDecoder::new();
    for l in lines {
        for e in d.feed(l) {
            app.push(e);
        }
    }
    for e in d.finish() {
        app.push(e);
    }
    app
}

#[allow(clippy::too_many_arguments)]
fn progress(
    step: u64,
    steps: u64,
    wall: f64,
    io: f64,
    stall: f64,
    mgmt: f64,
    cpu: f64,
    read_mb: f64,
    hit: f64,
    text: &str,
    reasoning: &str,
) -> Progress {
    Progress {
        step,
        steps,
        wall_ms: wall,
        io_ms: io,
        compute_ms: 0.0,
        mgmt_ms: mgmt,
        stall_ms: stall,
        read_mb,
        cache_hit_pct: hit,
        majflt: step % 3,
        cpu_ms: cpu,
        dense_resident_frac: 0.95,
        reset: false,
        delta_reasoning: reasoning.into(),
        delta_text: text.into(),
    }
}

fn serial_lines() -> Vec<String> {
    let mut v = Vec::new();
    let reasoning = ["The user ", "asks about ", "experts."];
    let answer = [
        "", "", "", "Experts ", "are ", "chosen ", "by a ", "router ", "per ", "token.",
    ];
    for i in 1..=10u64 {
        let wall = 400.0 + 10.0 * i as f64;
        v.push(
            Load {
                mb: 100.0 + i as f64,
                ms: 150.0,
            }
            .to_line(),
        );
        let r = if i <= 3 {
            reasoning[i as usize - 1]
        } else {
            ""
        };
        v.push(
            progress(
                i,
                32,
                wall,
                150.0,
                0.0,
                20.0,
                1200.0,
                100.0 + i as f64,
                40.0 + i as f64,
                answer[i as usize - 1],
                r,
            )
            .to_line(),
        );
    }
    v
}

const SERIAL_CMD: &str = "bmoe-cli -m /models/Qwen3-30B-A3B-Q4_K_M.gguf -t 4 --io-threads 4 --moe-stream --cache-mb 3000 --progress -p hi";

#[test]
fn serial_run_80x24() {
    let app = live(SERIAL_CMD, &serial_lines());
    // hand-worked: token 10 wall 500, cpu 1200/4 = 300 compute, io 150 flash, mgmt 20, 30 off-CPU
    let b = app.run.live_bars().unwrap();
    assert_eq!(
        (b.compute_ms, b.flash_ms, b.mgmt_ms, b.unattributed_ms),
        (Some(300.0), 150.0, 20.0, Some(30.0))
    );
    insta::assert_snapshot!("serial_80x24", render(&app, 80, 24));
}

fn overlap_lines() -> Vec<String> {
    (1..=12u64)
        .map(|i| {
            // lanes read 1600 ms of busy time in a 500 ms token: only the 380 ms stall is wall time
            progress(
                i, 64, 500.0, 1600.0, 380.0, 10.0, 2400.0, 1050.75, -1.0, "tok ", "",
            )
            .to_line()
        })
        .collect()
}

#[test]
fn overlap_run_80x24() {
    let cmd = "bmoe-cli -m gemma.gguf -t 4 --io-threads 4 --moe-stream --overlap --progress";
    let app = live(cmd, &overlap_lines());
    let b = app.run.live_bars().unwrap();
    // cpu 2400/4 = 600 > wall: 600 + 380 + 10 exceeds 500, remainder clamps to 0
    assert_eq!(
        (b.compute_ms, b.flash_ms, b.unattributed_ms),
        (Some(600.0), 380.0, Some(0.0))
    );
    assert!(b.overlapping());
    // busy threads 4 + 4 lanes: 2400 / (500 x 8) = 60 %
    assert_eq!(app.run.busy_threads(), Some(8));
    let screen = render(&app, 80, 24);
    assert!(screen.contains("CPU 60% busy of 8 thr"), "{screen}");
    insta::assert_snapshot!("overlap_80x24", screen);
}

fn drops_csv(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("drops.csv");
    let info = RunInfo {
        version: Some(2),
        engine: Some("0.1.0".into()),
        model: Some("gpt-oss-120b-Q4_K_M.gguf".into()),
        arch: Some("gpt-oss".into()),
        n_expert_used: Some(4),
        threads: Some(4),
        moe_stream: Some(true),
        cache_mb: Some(2000),
        io_threads: Some(8),
        overlap: Some(true),
        dense_weights: Some("anon".into()),
        drop_cold_frac: Some(0.75),
        temp: Some(0.0),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(&path, &info).unwrap();
    for i in 1..=20u64 {
        w.write_row(&TokenRow {
            step: Some(i),
            steps: Some(20),
            wall_ms: Some(400.0 + (i % 5) as f64 * 20.0),
            io_ms: Some(1200.0),
            compute_ms: Some(100.0),
            read_bytes: Some(600 * 1024 * 1024),
            cache_hit_pct: Some(30.0 + i as f64),
            stall_ms: Some(200.0),
            mgmt_ms: Some(40.0),
            majflt: Some(5),
            cpu_ms: Some(1600.0),
            dense_resident_frac: Some(0.9),
            turn: Some(0),
            rss_mib: Some(3600.0),
            rss_anon_mib: Some(3000.0),
            rss_file_mib: Some(600.0),
            swap_mib: Some(0.0),
            mem_available_mib: Some(2000.0),
            mem_free_mib: Some(300.0),
            swap_free_mib: Some(4000.0),
            loop_overhead_ms: Some(5.0),
            mtp_batch: Some(1),
            ..TokenRow::default()
        })
        .unwrap();
    }
    let mut t = SummaryTrailer::new();
    for (k, v) in [
        ("tokens", "20"),
        ("s/tok", "0.440"),
        ("tok/s", "2.273"),
        ("read_MiB", "12000.0"),
        ("io_s/tok", "1.200"),
        ("stall_s/tok", "0.200"),
        ("mgmt_s/tok", "0.040"),
        ("cpu_s/tok", "1.6000"),
        ("compute_s/tok", "0.100"),
        ("cache_hit_pct", "50.0"),
        ("experts_routed", "2880"),
        ("experts_dropped", "288"),
        ("loop_overhead_s/tok", "0.0050"),
    ] {
        t.push(k, v);
    }
    w.write_summary(&t).unwrap();
    drop(w);
    path
}

#[test]
fn run_with_drops_shows_hit_caveat() {
    let dir = tempfile::tempdir().unwrap();
    let events = replay::load(&drops_csv(dir.path())).unwrap();
    let mut app = App::new(SourceKind::Replay, "replay drops.csv", RunConfig::default());
    for e in events {
        app.push(e);
    }
    app.seek_tokens(10);
    let mid = render(&app, 80, 24);
    assert!(mid.contains("drops inflate it: threshold 0.75"), "{mid}");
    insta::assert_snapshot!("drops_mid_80x24", mid);
    app.seek_tokens(usize::MAX);
    let end = render(&app, 80, 24);
    assert!(end.contains("288/2880 dropped"), "{end}");
    insta::assert_snapshot!("drops_end_80x24", end);
}

#[test]
fn baseline_run_without_streaming() {
    let mut lines: Vec<String> = (1..=6u64)
        .map(|i| progress(i, 16, 900.0, 0.0, 0.0, 0.0, 3000.0, 0.0, -1.0, "", "").to_line())
        .collect();
    lines.push("=== perf ===".into());
    lines.push("generation: 6 tokens, 0.900 s/token (1.111 tok/s)".into());
    lines.push("mode: plain llama.cpp on mmap (pass --moe-stream to stream experts)".into());
    let app = live("bmoe-cli -m qwen.gguf -t 4 --progress", &lines);
    assert!(!app.run.streaming());
    let screen = render(&app, 80, 24);
    assert!(screen.contains("baseline (no --moe-stream)"), "{screen}");
    assert!(screen.contains("this run streams no text"), "{screen}");
    insta::assert_snapshot!("baseline_80x24", screen);
}

fn end_of_run_lines() -> Vec<String> {
    let mut v = serial_lines();
    v.extend(
        [
            "=== answer ===",
            "Experts are chosen by a router per token.",
            "=== perf ===",
            "generation: 10 tokens, 0.455 s/token (2.198 tok/s)",
            "compute: 65.9% CPU occupancy (1.2000 cpu-s/token over 4 threads), 1.00 major faults/token",
            "mode: expert streaming, cache 3000 MiB, dense anon",
            "prefill: 12 tokens, 2.000 s (6.0 tok/s) | model load 10.000 s | TTFT 12.000 s",
            "moe-stream: read 1055.0 MiB (105.50 MiB/token), decode 0.455 s/token (compute 0.285 + cache mgmt 0.020 + flash I/O 0.150 s/token, 703 MiB/s)",
            "moe-cache: 50.0% hit, resident 2990.0 MiB",
        ]
        .map(String::from),
    );
    v
}

#[test]
fn end_of_run_summary_80x24() {
    let app = live(SERIAL_CMD, &end_of_run_lines());
    let s = app.run.summary.as_ref().unwrap();
    assert_eq!(s.tokens, Some(10));
    let b = app.run.avg_bars().unwrap();
    // avg: wall 455, compute 1200/4 = 300, flash io 150, mgmt 20 -> 455 - 470 < 0 -> 0
    assert!((b.wall_ms - 455.0).abs() < 1e-9);
    assert_eq!(b.compute_ms, Some(300.0));
    assert!((b.flash_ms - 150.0).abs() < 1e-9);
    assert_eq!(b.unattributed_ms, Some(0.0));
    let screen = render(&app, 80, 24);
    assert!(screen.contains("tok/s"));
    insta::assert_snapshot!("end_of_run_80x24", screen);
}

#[test]
fn end_of_run_lines_alone_show_the_engines_per_token_read_and_bandwidth() {
    // What a one-shot engine without --progress prints: its text, then the end-of-run lines,
    // and no per-token line (the figures of the report in issue #20). 8 tokens read 1.9 MiB;
    // per token the read time rounds to 0.001 s. Read as "the total over the rows seen (none,
    // so 1)" and "÷ the rounded per-token time", that was `flash 1.9 MiB/tok · 1900 MiB/s`.
    let lines: Vec<String> = [
        "hi there, the answer follows",
        "generation: 8 tokens, 0.012 s/token (83.333 tok/s)",
        "mode: expert streaming, cache 2 MiB, dense anon",
        "moe-stream: read 1.9 MiB (0.24 MiB/token), decode 0.012 s/token (compute 0.010 + cache mgmt 0.000 + flash I/O 0.001 s/token, 362 MiB/s)",
        "moe-cache: 60.0% hit, resident 2.0 MiB",
    ]
    .map(String::from)
    .to_vec();
    let app = live("bmoe-cli -p hi -n 8 --moe-stream --cache-mb 2", &lines);
    assert_eq!(app.run.totals.tokens, 0, "no per-token line was fed");
    let screen = render(&app, 100, 30);
    assert!(
        screen.contains("flash 0.24 MiB/tok · 362 MiB/s"),
        "{screen}"
    );
    assert!(!screen.contains("1.9 MiB/tok"), "{screen}");

    // A summary that states a total but no token count: per token is unknown, not the total.
    let mut app = live("sh engine.sh", &[]);
    app.push(Event::Summary(Box::new(bmoe_top::model::RunSummary {
        read_mib: Some(19.3),
        io_s_tok: Some(0.001),
        s_tok: Some(0.012),
        ..Default::default()
    })));
    app.push(Event::Config({
        let mut c = RunConfig::default();
        c.set("moe_stream", "1");
        c
    }));
    let screen = render(&app, 100, 30);
    assert!(screen.contains("flash — MiB/tok · — MiB/s"), "{screen}");
}

#[test]
fn a_csv_trailer_gives_the_bandwidth_from_the_total_read_time() {
    // io_s/tok rounds to 0.000 here, the total io_s does not: 4.0 MiB / 0.016 s = 250 MiB/s.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.csv");
    let info = RunInfo {
        version: Some(2),
        threads: Some(2),
        moe_stream: Some(true),
        io_threads: Some(4),
        overlap: Some(false),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(&path, &info).unwrap();
    for i in 1..=40u64 {
        w.write_row(&TokenRow {
            step: Some(i),
            steps: Some(40),
            wall_ms: Some(10.0),
            io_ms: Some(0.4),
            read_bytes: Some(100 * 1024),
            cpu_ms: Some(15.0),
            ..TokenRow::default()
        })
        .unwrap();
    }
    let mut t = SummaryTrailer::new();
    for (k, v) in [
        ("tokens", "40"),
        ("s/tok", "0.010"),
        ("tok/s", "100.000"),
        ("read_MiB", "4.0"),
        ("io_s", "0.016"),
        ("io_s/tok", "0.000"),
    ] {
        t.push(k, v);
    }
    w.write_summary(&t).unwrap();
    drop(w);
    let mut app = App::new(SourceKind::Replay, "replay small.csv", RunConfig::default());
    for e in replay::load(&path).unwrap() {
        app.push(e);
    }
    app.seek_tokens(usize::MAX);
    let screen = render(&app, 100, 30);
    assert!(
        screen.contains("flash 0.10 MiB/tok · 250 MiB/s"),
        "{screen}"
    );
}

#[test]
fn done_record_summary_200x60() {
    let mut lines = serial_lines();
    lines.push(
        Done {
            id: 1,
            tokens: 10,
            tok_s: 2.198,
            cache_hit_pct: 50.0,
            cpu_s_tok: 1.2,
            io_s_tok: 0.15,
            mgmt_s_tok: 0.02,
            compute_s_tok: 0.285,
            read_mib: 1055.0,
            prefill_s: 2.0,
            prefill_tps: 6.0,
            load_s: 10.0,
            text: "Experts are chosen by a router per token.".into(),
            reasoning: "The user asks about experts.".into(),
            ..Done::default()
        }
        .to_line(),
    );
    let app = live(SERIAL_CMD, &lines);
    insta::assert_snapshot!("done_200x60", render(&app, 200, 60));
}

#[test]
fn serial_run_200x60() {
    let app = live(SERIAL_CMD, &serial_lines());
    insta::assert_snapshot!("serial_200x60", render(&app, 200, 60));
}

#[test]
fn malformed_lines_are_counted_not_fatal() {
    let mut lines = serial_lines();
    lines.insert(3, "BMOE_PROGRESS {\"step\":oops".into());
    lines.insert(6, "BMOE_PROGRESS".into());
    lines.insert(9, "BMOE_LOAD {\"mb\":\"many\"}".into());
    lines.insert(12, "\u{1b}[31mgarbage\u{0}".into());
    lines.push("generation: lots".into());
    let app = live(SERIAL_CMD, &lines);
    assert_eq!(app.run.malformed, 4);
    assert_eq!(app.run.step, 10);
    let screen = render(&app, 80, 24);
    assert!(screen.contains("4 malformed ignored (line"), "{screen}");
    insta::assert_snapshot!("malformed_80x24", screen);
}

#[test]
fn reasoning_reset_is_drawn_apart() {
    let lines = vec![
        progress(
            1,
            4,
            100.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            -1.0,
            "<think>plan",
            "",
        )
        .to_line(),
        Progress {
            reset: true,
            ..progress(2, 4, 100.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, "", "plan it")
        }
        .to_line(),
        progress(3, 4, 100.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, "Answer.", "").to_line(),
    ];
    let app = live("sh", &lines);
    assert_eq!(app.run.reasoning(), "plan it");
    assert_eq!(app.run.answer(), "Answer.");
    let (screen, buf) = render_with(&app, 80, 24, ColorLevel::Full);
    assert!(screen.contains("│ plan it"), "{screen}");
    assert!(!screen.contains("<think>"), "{screen}");
    // the thinking span is italic, the answer is not
    let find = |needle: &str| -> (u16, u16) {
        for (y, l) in screen.lines().enumerate() {
            if let Some(x) = l.find(needle) {
                return (l[..x].chars().count() as u16, y as u16);
            }
        }
        panic!("{needle} not on screen");
    };
    let (x, y) = find("plan it");
    assert!(
        buf[(x, y)]
            .modifier
            .contains(ratatui::style::Modifier::ITALIC)
    );
    let (x, y) = find("Answer.");
    assert!(
        !buf[(x, y)]
            .modifier
            .contains(ratatui::style::Modifier::ITALIC)
    );
}

#[test]
fn colours_degrade() {
    let app = live(SERIAL_CMD, &end_of_run_lines());
    let (_, none) = render_with(&app, 80, 24, ColorLevel::None);
    assert!(
        none.content
            .iter()
            .all(|c| c.fg == Color::Reset && c.bg == Color::Reset)
    );
    let (_, basic) = render_with(&app, 80, 24, ColorLevel::Basic);
    assert!(
        basic
            .content
            .iter()
            .all(|c| !matches!(c.fg, Color::Indexed(_) | Color::Rgb(..)))
    );
    assert!(basic.content.iter().any(|c| c.fg == Color::Yellow));
    let (_, full) = render_with(&app, 80, 24, ColorLevel::Full);
    assert!(
        full.content
            .iter()
            .any(|c| matches!(c.fg, Color::Indexed(_)))
    );
}

#[test]
fn any_size_draws_without_panicking() {
    let app = live(SERIAL_CMD, &end_of_run_lines());
    for (w, h) in [
        (1, 1),
        (20, 5),
        (59, 30),
        (60, 16),
        (80, 24),
        (119, 40),
        (120, 30),
        (300, 100),
    ] {
        let screen = render(&app, w, h);
        if w < ui::MIN_SIZE.0 || h < ui::MIN_SIZE.1 {
            assert!(screen.contains("too") || w < 10, "{w}x{h}: {screen}");
        }
    }
}

#[test]
fn an_unreadable_csv_row_is_named_by_its_file_line() {
    // The drops file has a preamble of several `#` lines before its header: a row's number and
    // its file line differ, and the panel must name the file line (as bmoe-analyze does).
    let dir = tempfile::tempdir().unwrap();
    let path = drops_csv(dir.path());
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("step,")).unwrap();
    assert!(
        header >= 3,
        "the preamble must be long enough to matter: {text}"
    );
    // Row 15 becomes unreadable; it sits on file line header + 1 + 15 (1-based).
    let bad = header + 15;
    let broken = lines[bad].replacen(|c: char| c.is_ascii_digit(), "x", 1);
    lines[bad] = &broken;
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let want_line = (bad + 1) as u64;
    assert_ne!(want_line, 15);

    let events = replay::load(&path).unwrap();
    let malformed: Vec<(u64, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Malformed { line, reason } => Some((*line, reason.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(malformed.len(), 1, "{malformed:?}");
    assert_eq!(malformed[0].0, want_line, "{malformed:?}");
    assert!(
        malformed[0].1.starts_with("row unreadable"),
        "{malformed:?}"
    );
    let tokens = events
        .iter()
        .filter(|e| matches!(e, Event::Token(..)))
        .count();
    assert_eq!(tokens, 14, "the rows before the bad one still replay");

    let mut app = App::new(SourceKind::Replay, "replay drops.csv", RunConfig::default());
    for e in events {
        app.push(e);
    }
    app.seek_tokens(usize::MAX);
    let screen = render(&app, 100, 30);
    assert!(
        screen.contains(&format!(
            "1 malformed ignored (line {want_line}: row unreadable"
        )),
        "{screen}"
    );
}

#[test]
fn help_popup_and_focus() {
    let mut app = live(SERIAL_CMD, &end_of_run_lines());
    app.help = true;
    let screen = render(&app, 80, 24);
    assert!(screen.contains("pause / resume"), "{screen}");
    // The whole popup fits 80x24: its last line ends in full and its border closes below it.
    assert!(
        screen.contains("compute = cpu ÷ compute threads (an upper bound)"),
        "{screen}"
    );
    let last = screen
        .lines()
        .position(|l| l.contains("(an upper bound)"))
        .unwrap();
    assert!(
        screen.lines().nth(last + 1).unwrap().contains('└'),
        "{screen}"
    );
    insta::assert_snapshot!("help_80x24", screen);
    app.help = false;
    app.focus = bmoe_top::state::Focus::Telemetry;
    let screen = render(&app, 80, 24);
    assert!(screen.contains("reading as: serial (stated)"), "{screen}");
    assert!(screen.contains("generation: 10 tokens"), "{screen}");
}

#[test]
fn realdata_replays_when_present() {
    let shared = std::env::var_os("BMOE_SHARED")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let dir = shared.join("realdata");
    if !dir.is_dir() {
        eprintln!("skipping: {} is absent (set BMOE_SHARED)", dir.display());
        return;
    }
    let mut n = 0;
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "csv")
                && std::fs::read_to_string(&p).is_ok_and(|t| t.contains("step,steps,wall_ms"))
            {
                let events = replay::load(&p).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                let mut app = App::new(SourceKind::Replay, "r", RunConfig::default());
                for e in events {
                    app.push(e);
                }
                app.seek_tokens(usize::MAX);
                assert!(app.run.totals.tokens > 0, "{}", p.display());
                render(&app, 80, 24);
                n += 1;
            }
        }
    }
    assert!(n >= 10, "only {n} metrics CSVs found");
    let _ = Event::Begin;
}

#[test]
fn session_csv_turns_replay_in_order_with_their_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.csv");
    let info = RunInfo {
        version: Some(2),
        threads: Some(2),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(&path, &info).unwrap();
    for (turn, n, tok_s) in [(0u64, 3u64, "5.0"), (1, 2, "2.5")] {
        for i in 1..=n {
            w.write_row(&TokenRow {
                step: Some(i),
                steps: Some(n),
                wall_ms: Some(100.0 * (turn + 1) as f64),
                cpu_ms: Some(100.0),
                turn: Some(turn),
                ..TokenRow::default()
            })
            .unwrap();
        }
        let mut t = SummaryTrailer::new();
        t.push("tokens", n.to_string());
        t.push("tok/s", tok_s);
        w.write_summary(&t).unwrap();
    }
    drop(w);
    let events = replay::load(&path).unwrap();
    let shape: String = events
        .iter()
        .map(|e| match e {
            Event::Config(_) => 'C',
            Event::Begin => 'B',
            Event::Token(..) => 't',
            Event::Summary(_) => 'S',
            _ => '?',
        })
        .collect();
    assert_eq!(shape, "CBtttSBttS");
    let mut app = App::new(SourceKind::Replay, "r", RunConfig::default());
    for e in events {
        app.push(e);
    }
    app.seek_tokens(3);
    // end of turn 0: its summary is in view, averages from it
    assert_eq!(app.run.avg_tok_s(), Some(5.0));
    app.step_forward();
    // turn 1 started: live again, its own sums (one token of 200 ms -> 5 tok/s live)
    assert!(app.run.summary.is_none());
    assert_eq!(app.run.totals.tokens, 1);
    assert_eq!(app.run.live_tok_s(), Some(5.0));
    app.seek_tokens(usize::MAX);
    assert_eq!(app.run.avg_tok_s(), Some(2.5));
    // compute bar per token: cpu 100 / 2 threads = 50
    assert_eq!(app.run.live_bars().unwrap().compute_ms, Some(50.0));
}

#[test]
fn streamed_text_matches_the_engine_side_delta_encoder() {
    use bmoe_telemetry::deltas::DeltaEncoder;
    // Successive full (reasoning, answer) states of a reasoning model, including the
    // reclassification a closing think tag causes (answer text becoming reasoning).
    let states = [
        ("", "<think>Let me"),
        ("", "<think>Let me think"),
        ("Let me think", ""),
        ("Let me think", "The"),
        ("Let me think", "The answer"),
        ("Let me think", "The answer is 42.\nDone"),
    ];
    let mut enc = DeltaEncoder::new();
    let mut lines = Vec::new();
    for (i, (r, t)) in states.iter().enumerate() {
        let mut p = progress(i as u64 + 1, 6, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, "", "");
        enc.fill(&mut p, r, t);
        lines.push(p.to_line());
        let app = live("sh", &lines);
        assert_eq!(
            (app.run.reasoning().as_str(), app.run.answer().as_str()),
            (*r, *t),
            "after line {}",
            i + 1
        );
    }
}

#[test]
fn a_failed_engine_shows_its_last_words() {
    let mut app = App::new(SourceKind::Spawn, "bmoe-cli (pid 1)", RunConfig::default());
    app.push(Event::Log("error: no model given (-m/--model)".into()));
    app.push(Event::Log(
        "hint: pass a GGUF file: bmoe-cli -m model.gguf -p \"hello\"".into(),
    ));
    app.push(Event::Ended("engine exit status: 2".into()));
    let screen = render(&app, 80, 24);
    assert!(
        screen.contains("the engine ended before the first token (engine exit status: 2)"),
        "{screen}"
    );
    assert!(screen.contains("hint: pass a GGUF file"), "{screen}");
    assert!(screen.contains("■ ended"), "{screen}");
}

#[test]
fn instrumented_or_stochastic_runs_are_labelled_not_a_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spec.csv");
    let info = RunInfo {
        version: Some(2),
        model: Some("m.gguf".into()),
        threads: Some(4),
        temp: Some(0.7),
        spec: Some("mtp".into()),
        predict_log: Some(true),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(&path, &info).unwrap();
    w.write_row(&TokenRow {
        step: Some(1),
        steps: Some(1),
        wall_ms: Some(10.0),
        ..TokenRow::default()
    })
    .unwrap();
    drop(w);
    let mut app = App::new(SourceKind::Replay, "replay spec.csv", RunConfig::default());
    for e in replay::load(&path).unwrap() {
        app.push(e);
    }
    app.seek_tokens(usize::MAX);
    let screen = render(&app, 120, 30);
    assert!(
        screen.contains("NOT A BENCHMARK: probed, stochastic, speculated"),
        "{screen}"
    );
}

#[test]
fn speculated_group_figures_are_per_token_on_screen() {
    // A verify decode that confirmed 2 tokens charges the group's whole cost to its first row
    // (the second carries zeros); every figure the frame shows for it is that cost / 2.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mtp.csv");
    let info = RunInfo {
        version: Some(2),
        threads: Some(4),
        io_threads: Some(4),
        moe_stream: Some(true),
        overlap: Some(true),
        spec: Some("mtp".into()),
        ..RunInfo::default()
    };
    let mut w = MetricsWriter::create(&path, &info).unwrap();
    let row = |step: u64, scale: f64, batch: u64, majflt: u64| TokenRow {
        step: Some(step),
        steps: Some(8),
        wall_ms: Some(336.0 * scale),
        io_ms: Some(202.0 * scale),
        compute_ms: Some(100.0 * scale),
        read_bytes: Some((30.8 * scale * 1024.0 * 1024.0) as u64),
        cache_hit_pct: Some(70.0),
        stall_ms: Some(34.0 * scale),
        mgmt_ms: Some(16.8 * scale),
        majflt: Some(majflt),
        cpu_ms: Some(1008.0 * scale),
        dense_resident_frac: Some(0.9),
        turn: Some(0),
        mtp_batch: Some(batch),
        ..TokenRow::default()
    };
    w.write_row(&row(1, 0.5, 1, 5)).unwrap();
    w.write_row(&row(2, 1.0, 2, 10)).unwrap();
    w.write_row(&row(3, 0.0, 1, 0)).unwrap();
    drop(w);
    let mut app = App::new(SourceKind::Replay, "replay mtp.csv", RunConfig::default());
    for e in replay::load(&path).unwrap() {
        app.push(e);
    }
    // Token 1 is an unspeculated row with exactly the per-token cost of the group that follows:
    // the two frames must show the same per-token figures.
    app.seek_tokens(1);
    let single = render(&app, 100, 30);
    app.seek_tokens(2);
    let group = render(&app, 100, 30);
    for screen in [&single, &group] {
        assert!(screen.contains("flash 15.4 MiB/tok"), "{screen}");
        assert!(screen.contains("stall 17 ms"), "{screen}");
        assert!(screen.contains("lanes busy 101 ms"), "{screen}");
        assert!(screen.contains("majflt 5\n"), "{screen}");
        assert!(screen.contains("5.95 tok/s (168 ms) live"), "{screen}");
        assert!(screen.contains("last 168"), "{screen}");
        assert!(screen.contains("last 15"), "{screen}");
    }
    let bars = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| {
                ["compute", "flash wait", "cache mgmt", "unattrib."]
                    .iter()
                    .any(|b| l.contains(b))
            })
            .map(String::from)
            .collect()
    };
    assert_eq!(bars(&single), bars(&group));
}

#[test]
fn replay_shows_the_dropped_and_substituted_share_of_routed_slots() {
    let dir = tempfile::tempdir().unwrap();
    let path = drops_csv(dir.path());
    // the same run, as a substituting one: the preamble's λ and the trailer's ledger
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("drop_cold_frac=0.75"), "{text}");
    let text = text
        .replacen(
            "drop_cold_frac=0.75",
            "drop_cold_frac=0.75 substitute_lambda=0.5",
            1,
        )
        .replacen(
            "experts_dropped=288",
            "experts_dropped=288 experts_reranked=400 experts_substituted=96",
            1,
        );
    let sub = dir.path().join("subst.csv");
    std::fs::write(&sub, text).unwrap();
    let mut app = App::new(SourceKind::Replay, "replay subst.csv", RunConfig::default());
    for e in replay::load(&sub).unwrap() {
        app.push(e);
    }
    app.seek_tokens(usize::MAX);
    let s = app.run.summary.as_ref().unwrap();
    assert_eq!(
        (s.experts_reranked, s.experts_substituted),
        (Some(400), Some(96))
    );
    let end = render(&app, 200, 60);
    assert!(end.contains("dropped 288/2880 (10.0%)"), "{end}");
    assert!(
        end.contains("substituted 96/2880 (3.3%), 400 examined"),
        "{end}"
    );
    assert!(end.contains("subst λ0.5"), "{end}");
    // a run that substituted nothing says nothing about substitution
    let plain = render(
        &{
            let mut a = App::new(SourceKind::Replay, "replay drops.csv", RunConfig::default());
            for e in replay::load(&path).unwrap() {
                a.push(e);
            }
            a.seek_tokens(usize::MAX);
            a
        },
        200,
        60,
    );
    assert!(!plain.contains("substituted"), "{plain}");
}

#[test]
fn live_moe_drop_line_shows_the_dropped_share() {
    let mut lines = end_of_run_lines();
    lines.push(
        "moe-drop: 12/480 routed experts dropped (2.5%), threshold 0.75 x uniform".to_string(),
    );
    let app = live(SERIAL_CMD, &lines);
    let s = app.run.summary.as_ref().unwrap();
    assert_eq!((s.experts_dropped, s.experts_routed), (Some(12), Some(480)));
    let screen = render(&app, 200, 60);
    assert!(screen.contains("dropped 12/480 (2.5%)"), "{screen}");
}
