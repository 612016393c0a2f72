//! `--ngram` self-speculation on a synthesised tiny model: greedy text token-identical to the
//! unspeculated run (resident, streamed serial, streamed under `--overlap`), drafts that are
//! really accepted, the seed's accounting (Σ mtp_batch = tokens, decodes = rows that decoded),
//! streamed drafts identical to resident ones, and the refusals (`--temp`, `--mtp`).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use crate::tiny::{Tiny, synth_tiny};
use bmoe_telemetry::metrics::MetricsFile;
use bmoe_telemetry::summary::PerfReport;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// A prompt this tiny model continues repetitively, so prompt lookup finds matches that the
/// target's argmax confirms.
const PROMPT: &str = "abcabcabcabcabcabcabcabcabcabcabc";
const N: &str = "48";

fn tiny() -> &'static Tiny {
    static T: OnceLock<Tiny> = OnceLock::new();
    T.get_or_init(synth_tiny)
}

fn run(model: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmoe-cli"))
        .arg("-m")
        .arg(model)
        .args([
            "-p",
            PROMPT,
            "-n",
            N,
            "-t",
            "2",
            "-c",
            "512",
            "--ignore-eos",
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// The generated text: stdout echoes the prompt, then the tokens, then a blank line and the
/// summary.
fn text(out: &Output) -> String {
    assert!(
        out.status.success(),
        "bmoe-cli failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    let body = s.split("\n\ngeneration:").next().unwrap();
    body.strip_prefix(PROMPT).unwrap().to_string()
}

const NGRAM: &[&str] = &["--ngram", "--draft", "3", "--ngram-min-match", "1"];

/// The runs the gate compares: each with and without `--ngram`.
const MODES: &[&[&str]] = &[
    &[],
    &["--moe-stream", "--cache-mb", "0"],
    &["--moe-stream", "--cache-mb", "1"],
    &["--moe-stream", "--overlap"],
];

#[test]
fn ngram_greedy_text_is_token_identical_resident_streamed_and_overlapped() {
    let m = &tiny().path;
    let reference = text(&run(m, &[]));
    assert!(!reference.is_empty());
    for mode in MODES {
        let args: Vec<&str> = mode.iter().chain(NGRAM).copied().collect();
        let out = run(m, &args);
        assert_eq!(
            text(&out),
            reference,
            "--ngram changed the text under {mode:?}"
        );
        let p = PerfReport::parse(&String::from_utf8_lossy(&out.stdout));
        let acc = p.spec_acceptance.clone().expect("ngram: acceptance line");
        assert_eq!(acc.source, "ngram");
        assert_eq!(acc.tokens, 48);
        assert!(
            acc.accepted > 0,
            "no draft accepted under {mode:?}: {acc:?}"
        );
        assert!(acc.accepted <= acc.drafted);
        // every verify decode confirms at most 1 + --draft tokens, and the plain ones 1
        assert!(acc.decodes < acc.tokens && acc.tokens_per_decode < 4.0);
        let cov = p.ngram_coverage.expect("ngram: coverage line");
        assert_eq!(cov.steps, acc.decodes);
        assert!(cov.drafted > 0 && cov.drafted <= cov.steps);
        let cost = p.spec_cost.expect("ngram: cost line");
        assert_eq!(cost.source, "ngram");
        assert!(cost.effective_tok_s <= cost.reported_tok_s);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
    }
    // a longer minimum match drafts on fewer steps, and still changes no token
    let out = run(
        m,
        &[
            "--ngram",
            "--ngram-min-match",
            "12",
            "--moe-stream",
            "--cache-mb",
            "0",
        ],
    );
    assert_eq!(text(&out), reference);
    let p = PerfReport::parse(&String::from_utf8_lossy(&out.stdout));
    let long = p.ngram_coverage.unwrap();
    let short = PerfReport::parse(&String::from_utf8_lossy(&run(m, NGRAM).stdout))
        .ngram_coverage
        .unwrap();
    assert!(long.drafted <= short.drafted, "{long:?} vs {short:?}");
    assert_eq!(p.spec_acceptance.unwrap().decodes, long.steps);
}

/// Per-row accounting from the CSV: the group sizes and the trailer's counters.
fn ledger(model: &Path, extra: &[&str], name: &str) -> (Vec<u64>, MetricsFile) {
    let csv = tiny().dir.path().join(name);
    let mut args: Vec<&str> = extra.to_vec();
    let c = csv.to_str().unwrap();
    args.extend(["--csv", c]);
    let out = run(model, &args);
    text(&out);
    let f = MetricsFile::read(&csv).unwrap();
    let batches = f.rows.iter().map(|r| r.mtp_batch.unwrap()).collect();
    (batches, f)
}

#[test]
fn the_csv_charges_each_group_to_its_first_row_and_streaming_drafts_the_same() {
    let m = &tiny().path;
    let (res, f) = ledger(m, NGRAM, "res.csv");
    assert_eq!(res.iter().sum::<u64>(), 48, "Σ mtp_batch = tokens");
    assert!(res.iter().any(|&b| b > 1), "no group: {res:?}");
    assert!(res.iter().all(|&b| b <= 4));
    let t = &f.summaries[0];
    let decodes = res.iter().filter(|&&b| b >= 1).count() as u64;
    assert_eq!(t.get_u64("mtp_decodes"), Some(decodes));
    assert_eq!(t.get_u64("tokens"), Some(48));
    let drafted = t.get_u64("mtp_drafted").unwrap();
    let accepted = t.get_u64("mtp_accepted").unwrap();
    assert_eq!(
        accepted,
        res.iter().map(|b| b.saturating_sub(1)).sum::<u64>()
    );
    assert!(accepted <= drafted && t.get_u64("drafted_steps").unwrap() <= decodes);
    assert!(t.get("mtp_draft_s/tok").is_some());
    followers_carry_zeros(&f);
    let info = &f.info;
    assert_eq!(info.spec.as_deref(), Some("ngram"));
    assert_eq!(info.spec_draft_max, Some(3));
    assert_eq!(info.ngram_min_match, Some(1));
    // streamed speculation drafts and accepts exactly what resident speculation does: a verify
    // decode is held to the prefill's wave (stream::prefill, 64 tokens below a whole layer),
    // wider than any draft here, so even a 1 MiB cache groups as resident
    let same: &[&[&str]] = &[
        &["--moe-stream", "--cache-mb", "0"],
        &["--moe-stream", "--cache-mb", "1"],
        &["--moe-stream", "--cache-mb", "64"],
        &["--moe-stream", "--overlap"],
    ];
    for (i, mode) in same.iter().enumerate() {
        let args: Vec<&str> = mode.iter().chain(NGRAM).copied().collect();
        let (streamed, _) = ledger(m, &args, &format!("s{i}.csv"));
        assert_eq!(streamed, res, "groups differ under {mode:?}");
    }
    // without speculation every row is one decode
    let (plain, f) = ledger(m, &[], "plain.csv");
    assert!(plain.iter().all(|&b| b == 1));
    assert_eq!(f.info.spec.as_deref(), Some("off"));
    assert_eq!(f.summaries[0].get_u64("mtp_decodes"), Some(0));
}

/// A group's followers carry zeros (its whole cost is on its first row), and drafting is a
/// slice of the loop overhead.
pub(crate) fn followers_carry_zeros(f: &MetricsFile) {
    for r in &f.rows {
        if r.mtp_batch == Some(0) {
            assert_eq!(r.wall_ms, Some(0.0));
            assert_eq!(r.read_bytes, Some(0));
            assert_eq!(r.loop_overhead_ms, Some(0.0));
        }
        assert!(r.mtp_draft_ms.unwrap() <= r.loop_overhead_ms.unwrap());
    }
}

#[test]
fn sampling_and_mtp_are_refused_with_the_reason() {
    let m = &tiny().path;
    let out = run(m, &["--ngram", "--temp", "0.7"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ngram") && err.contains("--temp"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    let out = run(m, &["--mtp"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--mtp") && err.contains("MTP head"), "{err}");
    assert!(err.contains("hint:") && err.contains("--ngram"), "{err}");
    let out = run(m, &["--ngram", "--ngram-min-match", "13"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ngram-min-match"));
}
