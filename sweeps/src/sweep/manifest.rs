//! The sweep manifest: a TOML file declaring devices, models, axes and sweep blocks.
//!
//! Parsing is strict (`deny_unknown_fields` everywhere) and every error names the manifest's
//! line and column, from TOML spans, so a typo in a 200-line campaign is found in one read.
//! The schema is documented in `docs/sweeps.md`; [`super::expand`] turns a parsed manifest into
//! cells and runs.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::Deserialize;
use toml::Spanned;

/// The schema identifier a manifest may declare in `schema = "..."`.
pub const SCHEMA: &str = "bmoe-bench/1";

/// A manifest error with its position in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The manifest file.
    pub path: PathBuf,
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(
                f,
                "{}:{}:{}: {}",
                self.path.display(),
                self.line,
                self.column,
                self.message
            )
        } else {
            write!(f, "{}: {}", self.path.display(), self.message)
        }
    }
}

impl std::error::Error for ManifestError {}

/// Turns byte offsets into line/column and builds [`ManifestError`]s.
#[derive(Debug, Clone)]
pub struct Source {
    /// The manifest file.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

impl Source {
    /// 1-based (line, column) of a byte offset.
    pub fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text.as_bytes()[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let column = self.text[line_start..offset].chars().count() + 1;
        (line, column)
    }

    /// An error located at `span` (`None` = no position).
    pub fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ManifestError {
        let (line, column) = span.map_or((0, 0), |s| self.position(s.start));
        ManifestError {
            path: self.path.clone(),
            line,
            column,
            message: message.into(),
            hint: None,
        }
    }

    /// Like [`Self::error`] with a `hint:` line.
    pub fn error_hint(
        &self,
        span: Option<Range<usize>>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> ManifestError {
        let mut e = self.error(span, message);
        e.hint = Some(hint.into());
        e
    }
}

/// A whole manifest (a campaign).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `"bmoe-bench/1"` (optional).
    pub schema: Option<Spanned<String>>,
    /// Campaign name: the default results directory is `results/<name>`.
    pub name: Spanned<String>,
    /// Free text, copied into `findings.md`.
    pub description: Option<String>,
    /// Default engine binary for every device (a local path, or a name looked up next to
    /// `bmoe-bench` and on `PATH`). Default `bmoe-cli`.
    pub binary: Option<Spanned<String>>,
    /// Run settings every sweep inherits.
    #[serde(default)]
    pub defaults: Settings,
    /// Devices (`[[device]]`); none declared = one `local` device with id `local`.
    #[serde(default, rename = "device")]
    pub devices: Vec<Spanned<DeviceDef>>,
    /// Models (`[[model]]`).
    #[serde(default, rename = "model")]
    pub models: Vec<Spanned<ModelDef>>,
    /// How each axis renders into argv (`[axes.<name>]`).
    #[serde(default)]
    pub axes: IndexMap<String, Spanned<AxisDef>>,
    /// Sweep blocks (`[[sweep]]`), run in file order.
    #[serde(rename = "sweep")]
    pub sweeps: Vec<Spanned<SweepDef>>,
    /// Report settings.
    #[serde(default)]
    pub analysis: Option<Spanned<AnalysisDef>>,
}

impl Manifest {
    /// The `[analysis]` settings (defaults when the table is absent).
    pub fn analysis(&self) -> AnalysisDef {
        self.analysis
            .as_ref()
            .map(|a| a.get_ref().clone())
            .unwrap_or_default()
    }
}

/// Where a device is and how to reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// This machine.
    Local,
    /// A host reached with the system `ssh`/`scp`.
    Ssh,
    /// An Android device reached with `adb`.
    Adb,
}

/// `[[device]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceDef {
    /// Name used by sweeps and in results.
    pub id: String,
    /// Transport.
    pub kind: DeviceKind,
    /// ssh: host name or address.
    pub host: Option<String>,
    /// ssh: user.
    pub user: Option<String>,
    /// ssh: port.
    pub port: Option<u16>,
    /// ssh: private key file.
    pub identity_file: Option<PathBuf>,
    /// ssh: extra `-o` options, e.g. `["StrictHostKeyChecking=no"]`.
    #[serde(default)]
    pub ssh_options: Vec<String>,
    /// adb: serial (`adb -s`).
    pub serial: Option<String>,
    /// Remote working directory (staged files and run directories live under it).
    pub workdir: Option<String>,
    /// Engine binary for this device (local path; staged to remote devices).
    pub binary: Option<String>,
    /// Environment for every run on this device.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// A model path: one local file, or a path per device (already on that device).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ModelPath {
    /// A local file, staged to remote devices.
    One(String),
    /// `{device_id = "path on that device"}`.
    PerDevice(BTreeMap<String, String>),
}

/// `[[model]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDef {
    /// Short id used in tags and results.
    pub id: String,
    /// A GGUF file (or per-device paths).
    pub path: Option<ModelPath>,
    /// A synthetic preset (`tiny`, `qwen2moe-tiny`, ...) built on first use.
    pub preset: Option<String>,
    /// Preset override: expert weight type (`F32`, `Q8_0`, `Q4_K`, ...).
    pub expert_type: Option<String>,
    /// Preset override: PRNG seed.
    pub seed: Option<u64>,
    /// Flags always added for this model.
    #[serde(default)]
    pub flags: Vec<String>,
}

/// What an axis selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AxisKind {
    /// Rendered into argv (or env).
    #[default]
    Flag,
    /// Selects the engine binary (`map` = value -> path).
    Binary,
    /// Selects the model (`map` = value -> model id).
    Model,
    /// Sets the cell's memory cap (values are sizes like `"8GiB"`).
    MemLimit,
}

/// `[axes.<name>]`: how one axis's values become argv.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisDef {
    /// What the axis selects (default `flag`).
    #[serde(default)]
    pub kind: AxisKind,
    /// Valued flag: `--io-threads <v>`.
    pub flag: Option<String>,
    /// Boolean switch: present when the value is `true`.
    pub switch: Option<String>,
    /// The value at which the flag is omitted (e.g. `0` for `--prefetch`).
    pub off: Option<toml::Value>,
    /// Explicit value -> argv fragment (flag), path (binary) or model id (model).
    pub map: Option<IndexMap<String, toml::Value>>,
    /// Set this environment variable to the value instead of a flag.
    pub env: Option<String>,
}

/// How runs are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderMode {
    /// Cells in the order written (models outer), each cell's repetitions back to back.
    #[default]
    AsWritten,
    /// One pass over every cell per repetition: A B A B.
    Interleaved,
    /// Interleaved, every second pass reversed: A B, B A.
    ReversePasses,
    /// Every run (cell × repetition) in a seeded random order.
    Shuffle,
    /// Passes follow `sequence` (cell tags).
    Explicit,
}

/// `order = {...}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderDef {
    /// The mode.
    #[serde(default)]
    pub mode: OrderMode,
    /// Shuffle seed (default 1).
    pub seed: Option<u64>,
    /// Explicit pass order (cell tags).
    pub sequence: Option<Spanned<Vec<String>>>,
}

/// `warmup = {...}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupDef {
    /// Untimed runs per cell before its first counted run.
    #[serde(default)]
    pub runs: u32,
    /// Tokens trimmed from the start of each run by the report.
    #[serde(default)]
    pub discard_tokens: u32,
}

/// Cooldown modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CooldownMode {
    /// No wait.
    #[default]
    None,
    /// Sleep `fixed_s`.
    Fixed,
    /// Poll `until` every `poll_s` for at most `max_wait_s`.
    Condition,
}

/// What to do when a condition gate times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnTimeout {
    /// Run anyway and flag the run (`gate_met = false`).
    #[default]
    RunAndFlag,
    /// Record the run as skipped.
    Skip,
    /// Stop the device's remaining runs.
    Abort,
}

/// `until = {...}`: conditions on the device state, all must hold.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UntilDef {
    /// CPU temperature at or below (°C).
    pub cpu_temp_c_max: Option<f64>,
    /// Battery temperature at or below (°C).
    pub battery_temp_c_max: Option<f64>,
    /// `MemAvailable` at or above (MiB).
    pub mem_available_mib_min: Option<f64>,
    /// 1-minute load average at or below.
    pub load1_max: Option<f64>,
}

/// `cooldown = {...}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CooldownDef {
    /// The mode.
    #[serde(default)]
    pub mode: CooldownMode,
    /// Fixed wait (fixed mode), or minimum wait (condition mode), seconds.
    pub fixed_s: Option<f64>,
    /// Poll interval, seconds (default 5).
    pub poll_s: Option<f64>,
    /// Give up after this many seconds (default 300).
    pub max_wait_s: Option<f64>,
    /// What to do when the gate gives up.
    #[serde(default)]
    pub on_timeout: OnTimeout,
    /// The conditions.
    pub until: Option<Spanned<UntilDef>>,
}

/// `session = {...}`: session-mode cells (`--session`, requests on stdin, one turn at a time).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionDef {
    /// The turns: a list of prompts, a JSONL request file, or a text file with one prompt per
    /// line.
    pub prompts: Spanned<Prompts>,
    /// `clear_kv` for generated requests (default true: every turn a new chat; false: the turns
    /// are one conversation).
    pub clear_kv: Option<bool>,
    /// `n_predict` for generated requests.
    pub n_predict: Option<Spanned<u32>>,
}

/// `prompts = ...` of a session: inline turns or a file.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompts {
    /// `prompts = ["first turn", "second turn"]`.
    Turns(Vec<String>),
    /// `prompts = "turns.txt"` (one prompt per non-empty line) or `"requests.jsonl"` (one
    /// request per line, as the engine reads them), relative to the manifest.
    File(String),
}

/// Declares the run settings once: [`Settings`] (what `[defaults]` holds and a sweep inherits)
/// and the same keys on [`SweepDef`] next to its own, with the copy and the inheritance between
/// them. A new run setting is one entry in the invocation below.
macro_rules! run_settings {
    (
        sweep { $($sweep_only:tt)* }
        settings { $( $(#[doc = $doc:literal])* $name:ident : $ty:ty ),* $(,)? }
    ) => {
        /// Settings a sweep inherits from `[defaults]` and may override.
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Settings {
            $( $(#[doc = $doc])* pub $name: Option<$ty>, )*
        }

        impl Settings {
            /// `self` with every unset field taken from `base`.
            pub fn or(&self, base: &Settings) -> Settings {
                Settings {
                    $( $name: self.$name.clone().or_else(|| base.$name.clone()), )*
                }
            }
        }

        /// `[[sweep]]`: one block of cells.
        #[derive(Debug, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct SweepDef {
            $($sweep_only)*
            $( $(#[doc = $doc])* pub $name: Option<$ty>, )*
        }

        impl SweepDef {
            /// The block's own settings (unset = inherited).
            pub fn settings(&self) -> Settings {
                Settings {
                    $( $name: self.$name.clone(), )*
                }
            }
        }
    };
}

run_settings! {
    sweep {
        /// Block name (a directory under the results).
        pub name: Spanned<String>,
        /// Devices to run on (default: every declared device).
        pub devices: Option<Vec<Spanned<String>>>,
        /// Models (default: every declared model).
        pub models: Option<Vec<Spanned<String>>>,
        /// `{axis = [values]}`: crossed (cartesian product) unless linked.
        #[serde(default)]
        pub axes: IndexMap<String, Spanned<Vec<toml::Value>>>,
        /// Groups of axes zipped together instead of crossed.
        #[serde(default)]
        pub link: Vec<Spanned<Vec<String>>>,
        /// Explicit cells: `{cell = "name", flags = [...], <axis> = value}`.
        #[serde(default)]
        pub cells: Vec<Spanned<toml::Table>>,
        /// Combinations removed: `{model = "x", <axis> = value}`.
        #[serde(default)]
        pub exclude: Vec<Spanned<toml::Table>>,
        /// Per-model axis values: `{model_id = {axis = [values]}}`.
        #[serde(default)]
        pub per_model: IndexMap<String, Spanned<IndexMap<String, Vec<toml::Value>>>>,
        /// Per-model template variables, used as `{var}` in cells and flags.
        #[serde(default)]
        pub vars: IndexMap<String, toml::Table>,
        /// Cell tag template, e.g. `"{model}_c{cache}"`.
        pub tag: Option<Spanned<String>>,
    }
    settings {
        /// `-n`.
        n_predict: Spanned<u32>,
        /// `-p`.
        prompt: String,
        /// Read the prompt from this file (relative to the manifest).
        prompt_file: Spanned<String>,
        /// Fixed flags (a sweep's list replaces the inherited one).
        flags: Vec<String>,
        /// Counted runs per cell.
        repetitions: u32,
        /// Per-run timeout, seconds.
        timeout_s: Spanned<f64>,
        /// Memory cap, e.g. `"8GiB"`: the run goes into a memory cgroup.
        mem_limit: Spanned<String>,
        /// Warm-up settings.
        warmup: WarmupDef,
        /// Cooldown before every run.
        cooldown: Spanned<CooldownDef>,
        /// Run order.
        order: OrderDef,
        /// Session mode.
        session: SessionDef,
        /// Extra environment.
        env: BTreeMap<String, String>,
    }
}

/// `[analysis]`: report defaults.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnalysisDef {
    /// Bootstrap resamples (default 2000).
    #[serde(default = "default_resamples")]
    pub resamples: usize,
    /// Confidence level (default 0.95).
    #[serde(default = "default_ci")]
    pub ci: f64,
    /// Bootstrap seed (default 1).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Baseline cell tag for ratios.
    pub baseline: Option<String>,
}

impl Default for AnalysisDef {
    fn default() -> Self {
        AnalysisDef {
            resamples: default_resamples(),
            ci: default_ci(),
            seed: default_seed(),
            baseline: None,
        }
    }
}

fn default_resamples() -> usize {
    2000
}
fn default_ci() -> f64 {
    0.95
}
fn default_seed() -> u64 {
    1
}

/// Parses manifest text. `path` is used in error messages and to resolve relative paths.
///
/// # Errors
/// A [`ManifestError`] naming the line and column of the first problem TOML or serde finds
/// (syntax, unknown key, wrong type, missing required key).
pub fn parse(path: &Path, text: &str) -> Result<(Manifest, Source), ManifestError> {
    let source = Source {
        path: path.to_path_buf(),
        text: text.to_string(),
    };
    match toml::from_str::<Manifest>(text) {
        Ok(m) => Ok((m, source)),
        Err(e) => {
            let message = e.message().trim().to_string();
            let hint = if message.starts_with("unknown field") {
                Some("check the spelling; docs/sweeps.md lists every key".to_string())
            } else if message.starts_with("missing field") {
                Some("add the key; docs/sweeps.md lists the required ones".to_string())
            } else {
                Some(other_hint(&message, e.span().map(|r| r.start), text))
            };
            let mut err = source.error(e.span(), message);
            err.hint = hint;
            Err(err)
        }
    }
}

/// The `hint:` for a TOML or serde error other than an unknown or missing key: the type a key
/// wants with an example, the allowed values, or, for text that does not look like a
/// manifest at all, a pointer to the docs.
fn other_hint(message: &str, at: Option<usize>, text: &str) -> String {
    // The key on the error's line (`timeout_s = "ten"` -> `timeout_s`), when there is one.
    let key = at
        .and_then(|i| text.get(..i))
        .map(|before| before.rsplit('\n').next().unwrap_or(""))
        .and_then(|line| line.split_once('=').map(|(k, _)| k))
        .or_else(|| {
            at.and_then(|i| text.get(i..))
                .and_then(|rest| rest.lines().next())
                .and_then(|line| line.split_once('=').map(|(k, _)| k))
        })
        .map(|k| k.trim().trim_start_matches('{').trim())
        .and_then(|k| k.rsplit([',', '{']).next())
        .map(|k| k.trim().to_string())
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        });
    if let Some(expected) = message
        .strip_prefix("invalid type: ")
        .and_then(|m| m.split_once(", expected "))
        .map(|(_, e)| e.trim())
    {
        let k = key.as_deref().unwrap_or("key");
        let is_int = expected.len() > 1
            && matches!(expected.get(..1), Some("u" | "i"))
            && expected.get(1..).is_some_and(|w| w.parse::<u32>().is_ok());
        let (what, example) = match expected {
            "f64" | "f32" => ("a number".to_string(), format!("`{k} = 10` (no quotes)")),
            _ if is_int => (
                "a whole number".to_string(),
                format!("`{k} = 3` (no quotes)"),
            ),
            "a boolean" => (expected.to_string(), format!("`{k} = true` (no quotes)")),
            "a string" => (expected.to_string(), format!("`{k} = \"...\"`")),
            "a sequence" => ("an array".to_string(), format!("`{k} = [\"a\", \"b\"]`")),
            e => (e.to_string(), format!("`{k} = <{e}>`")),
        };
        return format!(
            "`{k}` takes {what}: write e.g. {example}; docs/sweeps.md lists every key and its type"
        );
    }
    if let Some(expected) = message
        .strip_prefix("invalid value: ")
        .and_then(|m| m.split_once(", expected "))
        .map(|(_, e)| e.trim())
    {
        let k = key.as_deref().unwrap_or("key");
        let range = match expected {
            "u8" => "a whole number from 0 to 255",
            "u16" => "a whole number from 0 to 65535",
            "u32" => "a whole number from 0 to 4294967295",
            "u64" | "usize" => "a whole number of 0 or more",
            _ => "a value of another range",
        };
        return format!("`{k}` takes {range}; docs/sweeps.md lists every key and its type");
    }
    if message.starts_with("unknown variant") {
        return "use one of the values listed above; docs/sweeps.md describes each".to_string();
    }
    let manifest_like = text.lines().map(str::trim_start).any(|l| {
        l.starts_with("[[sweep]]")
            || l.starts_with("[[model]]")
            || (l.starts_with("schema") || l.starts_with("name")) && l.contains('=')
    });
    if manifest_like {
        "fix the TOML at this spot: strings need double quotes, arrays brackets, one `key = value` a line; docs/sweeps.md shows the schema".to_string()
    } else {
        "is this a manifest? a bmoe-bench manifest is TOML with `name = \"...\"` and [[sweep]] blocks; see docs/sweeps.md and examples/sweeps/*.toml".to_string()
    }
}

/// Parses a memory size: `8GiB`, `512MiB`, `8G`, `1.5GiB`, or a plain byte count.
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" | "kb" => 1024.0,
        "m" | "mib" | "mb" => 1024.0 * 1024.0,
        "g" | "gib" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" | "tb" => 1024.0_f64.powi(4),
        _ => return None,
    };
    let bytes = n * mult;
    (bytes.is_finite() && bytes >= 1.0).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8GiB"), Some(8 << 30));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("8 gib"), Some(8 << 30));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("0"), None);
    }

    #[test]
    fn unknown_key_names_its_line() {
        let text = "name = \"x\"\n[[sweep]]\nname = \"a\"\nrepetitons = 3\n";
        let err = parse(Path::new("m.toml"), text).expect_err("typo");
        assert_eq!((err.line, err.column), (4, 1), "{err}");
        assert!(err.message.contains("repetitons"), "{err}");
        assert!(
            err.to_string().starts_with("m.toml:4:1: unknown field"),
            "{err}"
        );
    }

    #[test]
    fn position_counts_lines_and_chars() {
        let s = Source {
            path: "m".into(),
            text: "ab\ncdé\nx".into(),
        };
        assert_eq!(s.position(0), (1, 1));
        assert_eq!(s.position(3), (2, 1));
        assert_eq!(s.position(8), (3, 1));
    }
}
