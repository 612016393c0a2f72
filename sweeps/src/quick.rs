//! `bmoe-bench run`: llama-bench's command line on the sweep machinery. Comma-separated lists
//! (`-m a.gguf,b.gguf -n 64,128 --set cache-mb=0,512`) are crossed into a product, written as
//! a one-sweep manifest, run into a results directory exactly like `bmoe-bench sweep` (every
//! artifact kept, `--resume`-able, reportable again), and the report is printed.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use crate::report::{self, Format};
use crate::sweep::{self, Hinted, expand, manifest, runner};

/// Options of `bmoe-bench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Models, comma-separated: GGUF files, or `preset:NAME` for a synthetic one (e.g.
    /// `preset:tiny`).
    #[arg(
        short,
        long,
        value_delimiter = ',',
        required = true,
        value_name = "MODEL,..."
    )]
    pub model: Vec<String>,
    /// Tokens to generate, comma-separated.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128",
        value_name = "N,..."
    )]
    pub n_gen: Vec<u32>,
    /// Compute threads, comma-separated [default: the engine's].
    #[arg(short, long, value_delimiter = ',', value_name = "N,...")]
    pub threads: Vec<u32>,
    /// An engine flag swept over values, `FLAG=V1,V2` (`cache-mb=0,512`); the values `off`/`on`
    /// leave a switch out or pass it (`moe-stream=off,on`). Repeat for a product.
    #[arg(long = "set", value_name = "FLAG=V1,V2")]
    pub set: Vec<String>,
    /// Prompt text [default: the engine's].
    #[arg(short, long)]
    pub prompt: Option<String>,
    /// Counted runs per cell (llama-bench's default).
    #[arg(short, long, default_value_t = 5)]
    pub repetitions: u32,
    /// Untimed runs before each cell's first counted one.
    #[arg(short, long, default_value_t = 1)]
    pub warmup: u32,
    /// Output format of the report.
    #[arg(short, long, value_enum, default_value = "md")]
    pub format: Format,
    /// Results directory [default: results/run-<unix seconds>].
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Engine binary [default: bmoe-cli, found as by `sweep`].
    #[arg(long)]
    pub binary: Option<String>,
    /// Refuse lists that cross into more runs than this (warm-ups included), counted before
    /// anything is expanded.
    #[arg(long, value_name = "N", default_value_t = expand::DEFAULT_MAX_RUNS)]
    pub max_runs: u64,
    /// Fixed engine flags for every run, after `--` (`-- --moe-stream --ignore-eos`).
    #[arg(last = true, value_name = "ENGINE FLAGS")]
    pub flags: Vec<String>,
}

fn usage(msg: String, hint: &str) -> anyhow::Error {
    Hinted::new(msg, hint).into()
}

/// One `--set` axis: its name, the flag and whether it is a switch, and its values.
struct SetAxis {
    name: String,
    flag: String,
    switch: bool,
    values: Vec<String>,
}

fn parse_set(spec: &str) -> Result<SetAxis> {
    const HINT: &str =
        "write --set FLAG=V1,V2, e.g. --set cache-mb=0,512 or --set moe-stream=off,on";
    let (flag, list) = spec
        .split_once('=')
        .ok_or_else(|| usage(format!("--set `{spec}` has no `=`"), HINT))?;
    let bare = flag.trim_start_matches('-');
    let values: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect();
    if bare.is_empty() || values.is_empty() {
        return Err(usage(
            format!("--set `{spec}` needs a flag and at least one value"),
            HINT,
        ));
    }
    let switch = values.iter().all(|v| v == "on" || v == "off");
    let dashes = if bare.len() == 1 { "-" } else { "--" };
    Ok(SetAxis {
        name: bare.replace('-', "_"),
        flag: format!("{dashes}{bare}"),
        switch,
        values,
    })
}

/// A model id for `path`: its file stem, made unique among `taken`.
fn model_id(stem: &str, taken: &[String]) -> String {
    let base = expand::sanitize_tag(stem);
    let mut id = base.clone();
    let mut k = 2;
    while taken.contains(&id) {
        id = format!("{base}-{k}");
        k += 1;
    }
    id
}

/// The one-sweep manifest the options describe.
///
/// # Errors
/// A malformed `--set`, or an axis named twice.
pub fn manifest_text(args: &RunArgs, cwd: &Path) -> Result<String> {
    use toml::{Table, Value};
    let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
    let mut root = Table::new();
    root.insert("name".into(), "run".into());
    if let Some(b) = &args.binary {
        let b = if b.contains('/') {
            cwd.join(b).to_string_lossy().into_owned()
        } else {
            b.clone()
        };
        root.insert("binary".into(), b.into());
    }
    let mut defaults = Table::new();
    defaults.insert("repetitions".into(), i64::from(args.repetitions).into());
    if args.warmup > 0 {
        let mut w = Table::new();
        w.insert("runs".into(), i64::from(args.warmup).into());
        defaults.insert("warmup".into(), w.into());
    }
    if let Some(p) = &args.prompt {
        defaults.insert("prompt".into(), p.clone().into());
    }
    root.insert("defaults".into(), defaults.into());

    let mut models = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    for m in &args.model {
        let mut t = Table::new();
        let id = match m.strip_prefix("preset:") {
            Some(preset) => {
                t.insert("preset".into(), preset.to_string().into());
                model_id(preset, &ids)
            }
            None => {
                let p = cwd.join(m);
                t.insert("path".into(), p.to_string_lossy().into_owned().into());
                let stem = p
                    .file_stem()
                    .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
                model_id(stem.trim_end_matches(".gguf"), &ids)
            }
        };
        t.insert("id".into(), id.clone().into());
        ids.push(id);
        models.push(Value::Table(t));
    }
    root.insert("model".into(), Value::Array(models));

    let mut axes = Table::new();
    let mut swept = Table::new();
    // The tag names the model and the axes that vary, as llama-bench's table shows only the
    // columns that vary.
    let mut tag = String::from("{model}");
    let mut add = |name: String, def: Table, values: Value| -> Result<()> {
        if axes.contains_key(&name) {
            return Err(usage(
                format!("the axis `{name}` is given twice"),
                "give each flag once, with all its values: --set cache-mb=0,512",
            ));
        }
        if values.as_array().is_some_and(|v| v.len() > 1) {
            tag.push_str(&format!("_{name}{{{name}}}"));
        }
        axes.insert(name.clone(), def.into());
        swept.insert(name, values);
        Ok(())
    };
    for spec in &args.set {
        let a = parse_set(spec)?;
        let mut def = Table::new();
        let values = if a.switch {
            def.insert("switch".into(), a.flag.into());
            Value::Array(a.values.iter().map(|v| Value::Boolean(v == "on")).collect())
        } else {
            def.insert("flag".into(), a.flag.into());
            strings(&a.values)
        };
        add(a.name, def, values)?;
    }
    let numbers =
        |v: &[u32]| Value::Array(v.iter().map(|x| Value::Integer(i64::from(*x))).collect());
    if !args.threads.is_empty() {
        let mut def = Table::new();
        def.insert("flag".into(), "-t".into());
        add("t".into(), def, numbers(&args.threads))?;
    }
    let mut def = Table::new();
    def.insert("flag".into(), "-n".into());
    add("n".into(), def, numbers(&args.n_gen))?;
    root.insert("axes".into(), axes.into());

    let mut sw = Table::new();
    sw.insert("name".into(), "run".into());
    sw.insert("tag".into(), tag.into());
    if !args.flags.is_empty() {
        sw.insert("flags".into(), strings(&args.flags));
    }
    sw.insert("axes".into(), swept.into());
    root.insert("sweep".into(), Value::Array(vec![Value::Table(sw)]));
    Ok(toml::to_string(&root)?)
}

/// Refuses lists that would run nothing (`-n 0`, `-r 0`) or cross into more than `--max-runs`
/// runs, from the list lengths alone (before a manifest or a cell is built).
fn check_lists(args: &RunArgs) -> Result<()> {
    if args.n_gen.contains(&0) {
        return Err(usage(
            "-n 0 generates no token, so a run measures nothing".into(),
            "give -n the tokens to generate, e.g. -n 128 (comma-separated for several: -n 64,128)",
        ));
    }
    if args.repetitions == 0 {
        return Err(usage(
            "-r 0 runs nothing".into(),
            "give -r the counted runs per cell, e.g. -r 5",
        ));
    }
    let mut factors: Vec<(u128, String)> = vec![
        (args.model.len() as u128, "-m".into()),
        (args.n_gen.len() as u128, "-n".into()),
    ];
    if !args.threads.is_empty() {
        factors.push((args.threads.len() as u128, "-t".into()));
    }
    for spec in &args.set {
        let n = spec.split_once('=').map_or(1, |(_, l)| {
            l.split(',').filter(|v| !v.trim().is_empty()).count()
        });
        let flag = spec.split_once('=').map_or(spec.as_str(), |(f, _)| f);
        factors.push((n.max(1) as u128, format!("--set {flag}")));
    }
    let per_cell = u128::from(args.repetitions) + u128::from(args.warmup);
    let runs = factors
        .iter()
        .fold(per_cell, |acc, (n, _)| acc.saturating_mul(*n));
    if runs <= u128::from(args.max_runs) {
        return Ok(());
    }
    let product: Vec<String> = factors.iter().map(|(n, f)| format!("{n} {f}")).collect();
    Err(usage(
        format!(
            "the lists cross into {runs} runs = {} × ({} (-r) + {} (-w)), above the limit of {}",
            product.join(" × "),
            args.repetitions,
            args.warmup,
            args.max_runs
        ),
        &format!(
            "give fewer values or a smaller -r, or raise the limit with --max-runs {} if you mean it",
            runs.min(u128::from(u64::MAX))
        ),
    ))
}

/// Runs `bmoe-bench run`: the product as a sweep, then its report on stdout (also when some
/// runs failed: they are listed under the table).
///
/// # Errors
/// Bad options, setup failures, and failed runs (after the report).
pub fn run(args: &RunArgs) -> Result<()> {
    check_lists(args)?;
    let cwd = std::env::current_dir()?;
    let text = manifest_text(args, &cwd)?;
    // Relative paths in the manifest resolve against its directory: the current one.
    let path = cwd.join("bmoe-bench-run.toml");
    let (m, src) = manifest::parse(&path, &text)?;
    let plan = expand::expand_limited(&m, &src, args.max_runs)?;
    // A misspelt flag fails here, not in every run.
    sweep::check_engine_flags(Path::new("bmoe-bench run"), &plan)?;
    let out = args.out.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from("results").join(format!("run-{now}"))
    });
    let opts = runner::RunOptions {
        out: out.clone(),
        resume: false,
        force: false,
    };
    let ran = sweep::execute(&plan, &text, &opts);
    if out.join("results.jsonl").is_file() {
        let r = report::build(&out, None, None, None)?;
        sweep::emit(&report::render(&r, args.format)?)?;
        let d = out.display();
        eprintln!(
            "results in {d} (`bmoe-bench report {d}` prints this again; `bmoe-bench sweep {d}/manifest.toml -o {d} --resume` finishes an interrupted run)"
        );
    }
    ran
}
