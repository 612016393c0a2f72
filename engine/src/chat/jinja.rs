//! The Jinja dialect real chat templates are written in: Hugging Face's `transformers` renders
//! them with Python's Jinja2 plus a few extras, and models ship templates that lean on all of it.
//! `minijinja` covers the language; this module adds what templates call beyond it:
//!
//! - Python's string and dict methods (`.startswith`, `.split`, `.strip`, `.get`, `.items()` …,
//!   through `minijinja_contrib::pycompat`): Qwen3 and LFM2 templates call them on every render;
//! - `raise_exception(msg)`: templates reject conversations they cannot render;
//! - `strftime_now(fmt)`: gpt-oss and LFM2.5 put today's date in the system prompt. The clock is
//!   read once per template ([`Clock`]), so every render of a session agrees — the probe's
//!   renders must not differ because midnight passed between them, and a continued chat's
//!   history must re-render to the bytes the KV holds;
//! - the `{% generation %}` … `{% endgeneration %}` block (LFM2.5): `transformers` uses it to
//!   mark the assistant's tokens for training masks and renders its body unchanged, so it is
//!   rewritten into an always-true `if` before parsing.

use minijinja::{Environment, Error as JinjaError, ErrorKind};

/// A fixed instant, in seconds since the Unix epoch (UTC), that `strftime_now` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock(pub u64);

impl Clock {
    /// The current time.
    pub fn now() -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self(secs)
    }
}

/// A `minijinja` environment with everything [the module](self) lists, its `strftime_now`
/// reading `clock`.
pub fn environment(clock: Clock) -> Environment<'static> {
    let mut env = Environment::new();
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", move |fmt: String| {
        strftime(clock, &fmt)
            .map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))
    });
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env
}

fn raise_exception(msg: String) -> Result<String, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

/// `source` with every `{% generation %}` / `{% endgeneration %}` tag turned into
/// `{% if true %}` / `{% endif %}`, whitespace control (`-`, `+`) kept as written.
pub fn normalise(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        let (before, tag) = rest.split_at(at);
        out.push_str(before);
        // `{%`, then an optional whitespace-control sign, then blanks, then the statement name
        let body = &tag[2..];
        let sign = body.starts_with(['-', '+']);
        let after_sign = &body[usize::from(sign)..];
        let name_at = after_sign.len() - after_sign.trim_start().len();
        let name_start = &after_sign[name_at..];
        let name_len = name_start
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(name_start.len());
        let replacement = match &name_start[..name_len] {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        let head_len = 2 + usize::from(sign) + name_at;
        out.push_str(&tag[..head_len]);
        match replacement {
            Some(r) => {
                out.push_str(r);
                rest = &tag[head_len + name_len..];
            }
            None => rest = &tag[head_len..],
        }
    }
    out.push_str(rest);
    out
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A UTC calendar date and time of day.
struct Civil {
    year: i64,
    /// 1..=12
    month: u32,
    /// 1..=31
    day: u32,
    /// 0 = Monday
    weekday: u32,
    /// 1..=366
    yday: u32,
    hour: u64,
    minute: u64,
    second: u64,
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn civil(clock: Clock) -> Civil {
    let days = clock.0 / 86_400;
    let secs = clock.0 % 86_400;
    // 1970-01-01 was a Thursday (3 with Monday = 0)
    let weekday = u32::try_from((days + 3) % 7).unwrap_or(0);
    let mut year = 1970_i64;
    let mut left = days;
    loop {
        let len = if is_leap(year) { 366 } else { 365 };
        if left < len {
            break;
        }
        left -= len;
        year += 1;
    }
    let yday = u32::try_from(left).unwrap_or(0) + 1;
    let feb = if is_leap(year) { 29 } else { 28 };
    let lengths = [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut month = 1;
    for len in lengths {
        if left < len {
            break;
        }
        left -= len;
        month += 1;
    }
    Civil {
        year,
        month,
        day: u32::try_from(left).unwrap_or(0) + 1,
        weekday,
        yday,
        hour: secs / 3600,
        minute: secs / 60 % 60,
        second: secs % 60,
    }
}

/// A `strftime_now` format this module cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrftimeError {
    /// The format ends with a `%` that starts no directive.
    #[error("strftime_now({fmt:?}): a lone % at the end")]
    LonePercent {
        /// The format.
        fmt: String,
    },
    /// A directive outside the supported set.
    #[error("strftime_now({fmt:?}): the directive %{directive} is not supported")]
    Unsupported {
        /// The format.
        fmt: String,
        /// The directive's letter.
        directive: char,
    },
}

/// Python's `time.strftime(fmt)` at `clock`, UTC, for the directives chat templates use
/// (`%Y %y %m %d %e %j %H %I %M %S %p %B %b %A %a %%`).
///
/// # Errors
/// [`StrftimeError`] for any other directive, or a trailing `%`.
pub fn strftime(clock: Clock, fmt: &str) -> Result<String, StrftimeError> {
    let c = civil(clock);
    let month = MONTHS[(c.month - 1) as usize];
    let weekday = WEEKDAYS[c.weekday as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let Some(d) = chars.next() else {
            return Err(StrftimeError::LonePercent { fmt: fmt.into() });
        };
        let hour12 = if c.hour.is_multiple_of(12) {
            12
        } else {
            c.hour % 12
        };
        let piece = match d {
            'Y' => c.year.to_string(),
            'y' => format!("{:02}", c.year.rem_euclid(100)),
            'm' => format!("{:02}", c.month),
            'd' => format!("{:02}", c.day),
            'e' => format!("{:>2}", c.day),
            'j' => format!("{:03}", c.yday),
            'H' => format!("{:02}", c.hour),
            'I' => format!("{hour12:02}"),
            'M' => format!("{:02}", c.minute),
            'S' => format!("{:02}", c.second),
            'p' => (if c.hour < 12 { "AM" } else { "PM" }).to_string(),
            'B' => month.to_string(),
            'b' => month[..3].to_string(),
            'A' => weekday.to_string(),
            'a' => weekday[..3].to_string(),
            '%' => "%".to_string(),
            directive => {
                return Err(StrftimeError::Unsupported {
                    fmt: fmt.into(),
                    directive,
                });
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::context;

    fn render(src: &str) -> Result<String, JinjaError> {
        let env = environment(Clock(1_700_000_000));
        let src = normalise(src);
        env.template_from_str(&src)?
            .render(context! { m => context! { a => "x" }, s => "ab\n" })
    }

    #[test]
    fn strftime_formats_utc_dates() {
        // 2023-11-14 22:13:20 UTC, a Tuesday
        let t = Clock(1_700_000_000);
        assert_eq!(strftime(t, "%Y-%m-%d").unwrap(), "2023-11-14");
        assert_eq!(
            strftime(t, "%d %b %Y %H:%M:%S %a %j %I%p %%").unwrap(),
            "14 Nov 2023 22:13:20 Tue 318 10PM %"
        );
        assert_eq!(
            strftime(t, "%A %B %e %y").unwrap(),
            "Tuesday November 14 23"
        );
        assert_eq!(
            strftime(Clock(0), "%Y-%m-%d %A").unwrap(),
            "1970-01-01 Thursday"
        );
        // a leap day
        assert_eq!(
            strftime(Clock(951_782_400), "%Y-%m-%d %j").unwrap(),
            "2000-02-29 060"
        );
        assert!(strftime(t, "%Q").unwrap_err().to_string().contains("%Q"));
        assert!(strftime(t, "100%").is_err());
    }

    #[test]
    fn the_environment_has_what_templates_call() {
        assert_eq!(render("{{ strftime_now('%Y') }}").unwrap(), "2023");
        assert_eq!(
            render("{{ s.startswith('a') }} {{ s.rstrip('\\n') }} {{ 'a,b'.split(',')[-1] }}")
                .unwrap(),
            // a Python method's bool prints as Python prints it
            "True ab b"
        );
        assert_eq!(
            render("{{ m.get('a') }}{{ m.get('b', 'd') }}{% for k, v in m.items() %}{{ k }}={{ v }}{% endfor %}")
                .unwrap(),
            "xda=x"
        );
        assert_eq!(
            render("{% set ns = namespace(n=1) %}{% set ns.n = 2 %}{{ ns.n }}{{ [1] | tojson }}")
                .unwrap(),
            "2[1]"
        );
        let e = render("{{ raise_exception('no system role') }}").unwrap_err();
        assert!(e.to_string().contains("no system role"), "{e}");
        let e = render("{{ strftime_now('%Q') }}").unwrap_err();
        assert!(e.to_string().contains("%Q"), "{e}");
    }

    #[test]
    fn generation_blocks_render_their_body() {
        assert_eq!(
            normalise("a{%- generation -%} b {%- endgeneration %}c{% if x %}{% endif %}"),
            "a{%- if true -%} b {%- endif %}c{% if x %}{% endif %}"
        );
        assert_eq!(normalise("{%+generation%}"), "{%+if true%}");
        // other statements, and names that only start like it, are left alone
        assert_eq!(normalise("{% generations %}{%"), "{% generations %}{%");
        assert_eq!(
            render("<{%- generation -%} x {%- endgeneration -%}>").unwrap(),
            "<x>"
        );
    }
}
