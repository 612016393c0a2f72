//! Hostile input through the real binary (issue #21): real files from `shared/realdata`, mutated
//! at test time by a seeded generator — cut at a random byte, a time, weight or byte-count cell
//! replaced by NaN / ±inf / a negative / a huge value, garbage lines, empty and header-only
//! files — and
//! every view of `bmoe-analyze` run on each. Every run must end in one of two ways:
//!
//! * exit 0, and when the mutation changed what the view reads, a `note:`/`warning:` on stderr
//!   naming the file (the stated exclusion), or
//! * exit 1 with an `error:` line naming the file;
//!
//! never a panic, never a hang (each run is killed after [`TIMEOUT`]), never an accepted bad
//! value with nothing said (a "silent" result). The counts are printed, then asserted.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bmoe_stats::SplitMix64;

use crate::common::shared_path;

/// A run that takes longer is a hang.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Values no time column can hold: not finite, negative, or beyond any token's duration.
const BAD_TIMES: [&str; 8] = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "-1",
    "-0.001",
    "1e308",
    "18446744073709551615",
];
/// Values no routing weight can hold (`nan` is the contract's "unknown", so not here).
const BAD_WEIGHTS: [&str; 6] = ["inf", "-inf", "-1", "-0.25", "1e308", "1e30"];
/// Values no byte or fault count of one row can hold.
const BAD_COUNTS: [&str; 5] = [
    "18446744073709551615",
    "1099511627777",
    "-1",
    "nan",
    "1e308",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Route,
    Compute,
    Io,
    Metrics,
}

/// What a mutation did, which decides what an exit 0 must say.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mutation {
    /// Cut at a byte offset; `torn` when the cut is inside a line (no final newline).
    Cut { torn: bool },
    /// A bad value in a time / weight cell.
    BadValue,
    /// A line of garbage among the rows.
    Garbage,
    /// Nothing but a preamble and header (or nothing at all).
    Empty,
}

struct Case {
    kind: Kind,
    mutation: Mutation,
    text: Vec<u8>,
    what: String,
}

/// Preamble, header and data lines of a file.
struct Source {
    kind: Kind,
    head: Vec<String>,
    header: Vec<String>,
    rows: Vec<String>,
}

impl Source {
    fn read(kind: Kind, path: &Path, keep: impl Fn(usize) -> bool) -> Source {
        let text = std::fs::read_to_string(path).expect("read real file");
        let mut head = Vec::new();
        let mut header = Vec::new();
        let mut rows = Vec::new();
        let mut data = 0;
        for line in text.lines() {
            if header.is_empty() {
                head.push(line.to_string());
                if !line.starts_with('#') {
                    header = line.split(',').map(str::to_string).collect();
                }
            } else if line.starts_with('#') {
                // Trailers stay at the end.
                rows.push(line.to_string());
            } else {
                if keep(data) {
                    rows.push(line.to_string());
                }
                data += 1;
            }
        }
        Source {
            kind,
            head,
            header,
            rows,
        }
    }

    fn text(&self, rows: &[String]) -> Vec<u8> {
        let mut s = self.head.join("\n");
        s.push('\n');
        for r in rows {
            s.push_str(r);
            s.push('\n');
        }
        s.into_bytes()
    }

    /// The byte and fault count columns a bad count goes into (none in metrics CSVs here).
    fn count_columns(&self) -> Vec<usize> {
        let names: &[&str] = match self.kind {
            Kind::Route => &["expert_bytes"],
            Kind::Compute => &["majflt"],
            Kind::Io => &["req_bytes", "read_bytes"],
            Kind::Metrics => &[],
        };
        names
            .iter()
            .filter_map(|n| self.header.iter().position(|h| h == n))
            .collect()
    }

    /// The columns whose values a bad value goes into.
    fn target_columns(&self) -> Vec<usize> {
        let names: &[&str] = match self.kind {
            Kind::Route => &["weight"],
            Kind::Compute => &["wall_ns"],
            Kind::Io => &["latency_ns"],
            Kind::Metrics => &[
                "wall_ms",
                "io_ms",
                "compute_ms",
                "stall_ms",
                "mgmt_ms",
                "cpu_ms",
            ],
        };
        names
            .iter()
            .filter_map(|n| self.header.iter().position(|h| h == n))
            .collect()
    }

    fn mutate(&self, rng: &mut SplitMix64) -> Case {
        // Data rows; a value goes only into a row without quotes, where splitting at commas
        // finds the columns (a quoted compute node name may hold a comma).
        let data: Vec<usize> = (0..self.rows.len())
            .filter(|&i| !self.rows[i].starts_with('#') && !self.rows[i].contains('"'))
            .collect();
        let pick = rng.below(10);
        let (mutation, text, what) = match pick {
            0..=2 => {
                let full = self.text(&self.rows);
                // Mostly inside the rows, sometimes in the preamble.
                let start = if rng.below(5) == 0 {
                    0
                } else {
                    self.text(&[]).len()
                };
                let at = start + rng.below(full.len() - start);
                let cut = full[..at].to_vec();
                let torn = cut.last().is_some_and(|&b| b != b'\n');
                (Mutation::Cut { torn }, cut, format!("cut at byte {at}"))
            }
            3..=6 => {
                let counts = self.count_columns();
                let (cols, bad): (Vec<usize>, &[&str]) = if !counts.is_empty() && rng.below(3) == 0
                {
                    (counts, &BAD_COUNTS)
                } else if self.kind == Kind::Route {
                    (self.target_columns(), &BAD_WEIGHTS)
                } else {
                    (self.target_columns(), &BAD_TIMES)
                };
                let col = cols[rng.below(cols.len())];
                let value = bad[rng.below(bad.len())];
                let mut rows = self.rows.clone();
                // The first data row, the last one, or any.
                let i = match rng.below(3) {
                    0 => data[0],
                    1 => data[data.len() - 1],
                    _ => data[rng.below(data.len())],
                };
                let mut f: Vec<&str> = rows[i].split(',').collect();
                f[col] = value;
                rows[i] = f.join(",");
                (
                    Mutation::BadValue,
                    self.text(&rows),
                    format!("{}={value} on data row {i}", self.header[col]),
                )
            }
            7 | 8 => {
                let mut rows = self.rows.clone();
                let garbage = match rng.below(4) {
                    0 => "garbage".to_string(),
                    1 => "x,y,z,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28"
                        .to_string(),
                    2 => format!("{},oops", self.rows[data[0]]),
                    _ => "\u{1}\u{2}\u{7f},\u{fffd},,".to_string(),
                };
                let at = rng.below(data.len() + 1);
                rows.insert(at.min(rows.len()), garbage.clone());
                (
                    Mutation::Garbage,
                    self.text(&rows),
                    format!("garbage line {garbage:?} before data row {at}"),
                )
            }
            _ => match rng.below(3) {
                0 => (Mutation::Empty, Vec::new(), "empty file".to_string()),
                1 => (Mutation::Empty, self.text(&[]), "header only".to_string()),
                _ => {
                    let pre: Vec<String> = self
                        .head
                        .iter()
                        .filter(|l| l.starts_with('#'))
                        .cloned()
                        .collect();
                    let mut t = pre.join("\n").into_bytes();
                    if !t.is_empty() {
                        t.push(b'\n');
                    }
                    (Mutation::Empty, t, "preamble only".to_string())
                }
            },
        };
        Case {
            kind: self.kind,
            mutation,
            text,
            what,
        }
    }
}

/// Every view of a file kind; `F` is the mutated file, `G` an intact real file of the same
/// kind, `D` a directory holding only `F` (as `qwen_stream.csv`), `P` a plot path.
fn views(kind: Kind) -> &'static [&'static [&'static str]] {
    match kind {
        Kind::Route => &[
            &["route", "F"],
            &["route", "F", "--phase", "all", "--view", "all"],
            &[
                "route", "F", "--phase", "all", "--view", "matrix", "--cells", "hit",
            ],
            &["route", "F", "--view", "matrix", "--cells", "weights"],
            &["route", "F", "--phase", "all", "--format", "json"],
            &["route", "F", "--view", "hot", "--plot", "P.svg"],
            &["route", "F", "--view", "reuse", "--plot", "P.svg"],
            &[
                "route", "F", "--phase", "all", "--view", "matrix", "--cells", "hit", "--plot",
                "P.svg",
            ],
            &["replay", "F", "--budgets", "100,1000"],
            &["replay", "F", "--budgets", "100,1000", "--plot", "P.svg"],
            &["drop", "F"],
            &["drop", "F", "--plot", "P.svg"],
        ],
        Kind::Compute => &[
            &["compute", "F"],
            &["compute", "F", "--layers"],
            &["compute", "F", "--format", "json"],
            &["compute", "F", "--plot", "P.svg"],
        ],
        Kind::Io => &[
            &["io", "F"],
            &["io", "F", "--adjacent"],
            &["io", "F", "--format", "json"],
            &["io", "F", "--plot", "P.svg"],
        ],
        Kind::Metrics => &[
            &["metrics", "F"],
            &["metrics", "F", "--format", "json"],
            &["metrics", "F", "--plot", "P.svg"],
            &["metrics", "--compare", "F", "G"],
            &["metrics", "--compare", "F", "G", "--plot", "P.svg"],
            &["metrics", "D"],
        ],
    }
}

/// One run: case index, arguments, exit code (`None`: killed), stderr, how it ended.
type RunResult = (usize, Vec<String>, Option<i32>, String, Outcome);

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Stated,
    Error,
    Panic,
    Hang,
    Silent,
    Unclear,
}

/// Runs the binary with a timeout; (exit code or `None` when killed, stdout, stderr).
fn run_timed(args: &[String]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bmoe-analyze"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bmoe-analyze");
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    // Drain both pipes beside the wait so a large report cannot block the child.
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut s);
        }
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if start.elapsed() > TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => break None,
        }
    };
    let out = out_t.join().unwrap_or_default();
    let err = err_t.join().unwrap_or_default();
    (code, out, err)
}

fn classify(case: &Case, name: &str, code: Option<i32>, err: &str) -> Outcome {
    let Some(code) = code else {
        return Outcome::Hang;
    };
    if code == 101 || err.contains("panicked") {
        return Outcome::Panic;
    }
    let names_file = err.contains(name);
    if code == 0 {
        let stated = names_file && (err.contains("note:") || err.contains("warning:"));
        let must_say = match case.mutation {
            Mutation::Cut { torn } => torn,
            Mutation::BadValue | Mutation::Garbage | Mutation::Empty => true,
        };
        return match (must_say, stated) {
            (_, true) => Outcome::Stated,
            (false, false) => Outcome::Ok,
            (true, false) => Outcome::Silent,
        };
    }
    if code == 1 && err.contains("error:") && names_file {
        Outcome::Error
    } else {
        Outcome::Unclear
    }
}

fn sources(shared: &Path) -> Vec<(Source, PathBuf)> {
    let real = |rel: &str| shared.join("realdata").join(rel);
    let route = real("2026-07-15-route-trace/qwen.route.csv");
    // Qwen's 7,902 prefill rows come first: keep 300 of them and the first ~4 decode steps.
    let route_src = Source::read(Kind::Route, &route, |i| {
        i < 300 || (7902..9054).contains(&i)
    });
    let lru = real("2026-07-20-cache-replay/qwen-lru_a.csv");
    vec![
        (route_src, route.clone()),
        (
            Source::read(
                Kind::Compute,
                &real("synthetic/synthetic.compute.csv"),
                |_| true,
            ),
            real("synthetic/synthetic.compute.csv"),
        ),
        (
            Source::read(
                Kind::Compute,
                &real("synthetic/synthetic.compute-layers.csv"),
                |_| true,
            ),
            real("synthetic/synthetic.compute-layers.csv"),
        ),
        (
            Source::read(Kind::Io, &real("synthetic/synthetic.io.csv"), |_| true),
            real("synthetic/synthetic.io.csv"),
        ),
        (
            Source::read(Kind::Metrics, &lru, |_| true),
            real("2026-07-20-cache-replay/qwen-lfu_a.csv"),
        ),
        (
            Source::read(
                Kind::Metrics,
                &real("synthetic/synthetic.metrics-v2.csv"),
                |_| true,
            ),
            lru.clone(),
        ),
        (
            Source::read(Kind::Metrics, &real("2026-07-12/qwen_stream.csv"), |_| true),
            lru,
        ),
    ]
}

#[test]
fn every_view_survives_mutated_real_files_and_says_what_it_left_out() {
    let Some(shared) = shared_path("realdata").and_then(|p| p.parent().map(Path::to_path_buf))
    else {
        return;
    };
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rng = SplitMix64::new(0x0021_4057_11e5);
    // Cases per source: the route trace has the most views, so fewer of its cases.
    let mut cases: Vec<(Case, PathBuf)> = Vec::new();
    for (src, other) in sources(&shared) {
        let n = match src.kind {
            Kind::Route => 80,
            Kind::Metrics => 60,
            Kind::Compute | Kind::Io => 60,
        };
        for _ in 0..n {
            cases.push((src.mutate(&mut rng), other.clone()));
        }
    }
    let jobs: Vec<(usize, Vec<String>, String)> = cases
        .iter()
        .enumerate()
        .flat_map(|(i, (case, other))| {
            let dir = tmp.path().join(format!("c{i}"));
            std::fs::create_dir_all(dir.join("d")).expect("case dir");
            let file = dir.join(format!("case{i}.csv"));
            std::fs::write(&file, &case.text).expect("write case");
            std::fs::write(dir.join("d/qwen_stream.csv"), &case.text).expect("write dir case");
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            views(case.kind)
                .iter()
                .map(|v| {
                    let args = v
                        .iter()
                        .map(|a| match *a {
                            "F" => file.display().to_string(),
                            "G" => other.display().to_string(),
                            "D" => dir.join("d").display().to_string(),
                            "P.svg" => dir.join("p.svg").display().to_string(),
                            a => a.to_string(),
                        })
                        .collect();
                    // A directory run names the file inside it.
                    let shown = if v.contains(&"D") {
                        "qwen_stream.csv".to_string()
                    } else {
                        name.clone()
                    };
                    (i, args, shown)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let results: Vec<RunResult> = {
        let chunks: Vec<_> = jobs.chunks(jobs.len().div_ceil(2)).collect();
        std::thread::scope(|s| {
            let hs: Vec<_> = chunks
                .into_iter()
                .map(|chunk| {
                    let cases = &cases;
                    s.spawn(move || {
                        chunk
                            .iter()
                            .map(|(i, args, name)| {
                                let (code, _out, err) = run_timed(args);
                                let o = classify(&cases[*i].0, name, code, &err);
                                (*i, args.clone(), code, err, o)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter()
                .flat_map(|h| h.join().expect("runner thread"))
                .collect()
        })
    };
    let count = |o: Outcome| results.iter().filter(|r| r.4 == o).count();
    let (panics, hangs, silent, unclear) = (
        count(Outcome::Panic),
        count(Outcome::Hang),
        count(Outcome::Silent),
        count(Outcome::Unclear),
    );
    let silent_cases = {
        let mut v: Vec<usize> = results
            .iter()
            .filter(|r| r.4 == Outcome::Silent)
            .map(|r| r.0)
            .collect();
        v.dedup();
        v.len()
    };
    eprintln!(
        "hostile: {} cases, {} runs in {:.1} s: {} ok, {} stated exclusions, {} clear errors, \
         {panics} panics, {hangs} hangs, {silent} silent results ({silent_cases} cases), {unclear} unclear errors",
        cases.len(),
        results.len(),
        started.elapsed().as_secs_f64(),
        count(Outcome::Ok),
        count(Outcome::Stated),
        count(Outcome::Error),
    );
    let mut shown = 0;
    let mut worst: Vec<_> = results.iter().collect();
    // Panics and hangs first, then the rest.
    worst.sort_by_key(|r| match r.4 {
        Outcome::Panic | Outcome::Hang => 0,
        Outcome::Unclear => 1,
        _ => 2,
    });
    for (i, args, code, err, o) in worst {
        if matches!(o, Outcome::Ok | Outcome::Stated | Outcome::Error) || shown >= 40 {
            continue;
        }
        shown += 1;
        let last: Vec<&str> = err.lines().rev().take(3).collect();
        eprintln!(
            "  {o:?}: case {i} ({:?}, {}): {} -> exit {code:?}, stderr tail {last:?}",
            cases[*i].0.kind,
            cases[*i].0.what,
            args[..2].join(" "),
        );
    }
    assert_eq!(
        (panics, hangs, silent, unclear),
        (0, 0, 0, 0),
        "panics, hangs, silent results, unclear errors (see above)"
    );
}
