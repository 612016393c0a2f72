//! Typed CSV cells: byte-level parsing (no allocation) and deterministic formatting.
//!
//! Parsing trims ASCII whitespace first (Python's `int()`/`float()` do, and a stray `\r` must
//! not fail a row). Integers are plain decimal with an optional sign; floats accept what
//! [`str::parse::<f64>`] does (`1e-05`, `nan`, `-nan`, `inf`). Formatting uses fixed decimals
//! chosen per column (the archived engine's `printf` precisions) or, for decimals =
//! [`SHORTEST`], the shortest round-trip representation.

use std::fmt::Write as _;

/// Decimals value meaning "shortest representation that reads back exactly".
pub const SHORTEST: usize = usize::MAX;

/// The value type of a column, for declaring a schema to another CSV engine (e.g. polars).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// Unsigned integer (fits `u64`).
    UInt,
    /// Signed integer (fits `i64`).
    Int,
    /// Float; may be `nan` / `inf`.
    Float,
    /// `0` or `1`.
    Bool,
    /// Text (RFC 4180 quoted when it contains `,` or `"`).
    Text,
}

/// A value that can live in one CSV cell.
pub trait Cell: Sized + Copy {
    /// The column type this cell type is declared as.
    const TYPE: ColumnType;
    /// What the error message says was expected.
    const EXPECTED: &'static str;
    /// Parses trimmed bytes; `None` when they are not a valid value.
    fn parse(bytes: &[u8]) -> Option<Self>;
    /// Appends the value; `decimals` applies to floats only.
    fn write(&self, out: &mut String, decimals: usize);
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// Plain digits, at most 19 of them (so no overflow check is needed): the shape of nearly every
/// integer cell, parsed without trimming. `None` sends the cell to the general rule.
fn plain_digits(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    if let Some(v) = plain_digits(b) {
        return Some(v);
    }
    let b = trim(b);
    let b = b.strip_prefix(b"+").unwrap_or(b);
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

fn parse_i64(b: &[u8]) -> Option<i64> {
    if let Some(v) = plain_digits(b) {
        // At most 19 digits: may still exceed i64::MAX.
        return i64::try_from(v).ok();
    }
    let t = trim(b);
    match t.first() {
        Some(b'-') => {
            let m = parse_u64(&t[1..])?;
            if m <= i64::MAX as u64 {
                Some(-(m as i64))
            } else if m == i64::MAX as u64 + 1 {
                Some(i64::MIN)
            } else {
                None
            }
        }
        _ => i64::try_from(parse_u64(t)?).ok(),
    }
}

impl Cell for u64 {
    const TYPE: ColumnType = ColumnType::UInt;
    const EXPECTED: &'static str = "expected an unsigned integer";
    fn parse(b: &[u8]) -> Option<Self> {
        parse_u64(b)
    }
    fn write(&self, out: &mut String, _: usize) {
        let _ = write!(out, "{self}");
    }
}

impl Cell for u32 {
    const TYPE: ColumnType = ColumnType::UInt;
    const EXPECTED: &'static str = "expected an unsigned integer (at most 4294967295)";
    fn parse(b: &[u8]) -> Option<Self> {
        u32::try_from(parse_u64(b)?).ok()
    }
    fn write(&self, out: &mut String, _: usize) {
        let _ = write!(out, "{self}");
    }
}

impl Cell for u8 {
    const TYPE: ColumnType = ColumnType::UInt;
    const EXPECTED: &'static str = "expected a small unsigned integer (0-255)";
    fn parse(b: &[u8]) -> Option<Self> {
        u8::try_from(parse_u64(b)?).ok()
    }
    fn write(&self, out: &mut String, _: usize) {
        let _ = write!(out, "{self}");
    }
}

impl Cell for i64 {
    const TYPE: ColumnType = ColumnType::Int;
    const EXPECTED: &'static str = "expected an integer";
    fn parse(b: &[u8]) -> Option<Self> {
        parse_i64(b)
    }
    fn write(&self, out: &mut String, _: usize) {
        let _ = write!(out, "{self}");
    }
}

impl Cell for i32 {
    const TYPE: ColumnType = ColumnType::Int;
    const EXPECTED: &'static str = "expected an integer";
    fn parse(b: &[u8]) -> Option<Self> {
        i32::try_from(parse_i64(b)?).ok()
    }
    fn write(&self, out: &mut String, _: usize) {
        let _ = write!(out, "{self}");
    }
}

impl Cell for bool {
    const TYPE: ColumnType = ColumnType::Bool;
    const EXPECTED: &'static str = "expected 0 or 1";
    fn parse(b: &[u8]) -> Option<Self> {
        match trim(b) {
            b"0" => Some(false),
            b"1" => Some(true),
            _ => None,
        }
    }
    fn write(&self, out: &mut String, _: usize) {
        out.push(if *self { '1' } else { '0' });
    }
}

impl Cell for f64 {
    const TYPE: ColumnType = ColumnType::Float;
    const EXPECTED: &'static str = "expected a number";
    fn parse(b: &[u8]) -> Option<Self> {
        // Untrimmed first: cells rarely carry spaces.
        if let Some(v) = exact_decimal_f64(b) {
            return Some(v);
        }
        let b = trim(b);
        if let Some(v) = exact_decimal_f64(b) {
            return Some(v);
        }
        let t = std::str::from_utf8(b).ok()?;
        if t.is_empty() {
            return None;
        }
        t.parse::<f64>().ok()
    }
    fn write(&self, out: &mut String, decimals: usize) {
        write_f64(*self, out, decimals);
    }
}

/// Clinger's fast path for `[-]digits[.digits]` with at most 15 digits: both operands of the
/// division are exact, so one IEEE division is correctly rounded — the same result
/// `str::parse` gives, without its general machinery. `None` for anything else.
fn exact_decimal_f64(b: &[u8]) -> Option<f64> {
    let (m, k, neg) = simple_decimal(b, 15)?;
    let p = POW10_F64.get(k)?;
    let v = m as f64 / p;
    Some(if neg { -v } else { v })
}

impl Cell for f32 {
    const TYPE: ColumnType = ColumnType::Float;
    const EXPECTED: &'static str = "expected a number";
    fn parse(b: &[u8]) -> Option<Self> {
        let b = trim(b);
        if let Some((m, k, neg)) = simple_decimal(b, 7)
            && let Some(&p) = POW10_F32.get(k)
        {
            // As for f64: mantissa < 2^24 and 10^k ≤ 10^10 are exact in f32.
            let v = m as f32 / p;
            return Some(if neg { -v } else { v });
        }
        let t = std::str::from_utf8(b).ok()?;
        if t.is_empty() {
            return None;
        }
        t.parse::<f32>().ok()
    }
    /// `f32` cells (routing weights) are always written in their shortest exact `f32` form,
    /// whatever `decimals` says: at most 9 significant digits, exact on read-back.
    fn write(&self, out: &mut String, _: usize) {
        if self.is_nan() {
            out.push_str("nan");
        } else if self.is_infinite() {
            out.push_str(if *self > 0.0 { "inf" } else { "-inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

/// Exactly representable powers of ten for the fast paths.
const POW10_F64: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];
const POW10_F32: [f32; 8] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7];

/// Recognises `[-]digits[.digits]` with at most `max_digits` digits in all: returns the
/// digits as an integer, the number of fraction digits and the sign. Anything else (exponent,
/// `nan`, too many digits, `+`, empty parts) returns `None` and takes the general path.
fn simple_decimal(b: &[u8], max_digits: usize) -> Option<(u64, usize, bool)> {
    let (neg, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        _ => (false, b),
    };
    let mut m: u64 = 0;
    let mut n = 0;
    let mut frac: Option<usize> = None;
    for &c in digits {
        if c == b'.' {
            if frac.is_some() {
                return None;
            }
            frac = Some(0);
            continue;
        }
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n += 1;
        if n > max_digits {
            return None;
        }
        m = m * 10 + u64::from(d);
        if let Some(f) = frac.as_mut() {
            *f += 1;
        }
    }
    // "1." / "." / "-" are left to the general parser (which accepts or rejects them).
    if n == 0 || frac == Some(0) || digits.first() == Some(&b'.') {
        return None;
    }
    Some((m, frac.unwrap_or(0), neg))
}

/// Writes a float: `nan`, `inf`, `-inf` for non-finite values (as C's printf does, and what
/// readers here and in Python accept), fixed `decimals` otherwise, or the shortest exact form
/// for [`SHORTEST`].
pub fn write_f64(x: f64, out: &mut String, decimals: usize) {
    if x.is_nan() {
        out.push_str("nan");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "inf" } else { "-inf" });
    } else if decimals == SHORTEST {
        let _ = write!(out, "{x}");
    } else {
        let _ = write!(out, "{x:.decimals$}");
    }
}

/// Writes a float as C's `printf("%.<sig>g")` does: `sig` significant digits, fixed notation
/// for decimal exponents in `-4..sig`, scientific (`1.23457e-05`) otherwise, trailing zeros
/// removed; `nan`/`inf`/`-inf` for non-finite values. Routing weights use `%.6g` — the format
/// every recorded route trace has — so a trace written by bmoe reads like the phone traces.
pub fn write_g(x: f64, sig: usize, out: &mut String) {
    if !x.is_finite() {
        write_f64(x, out, SHORTEST);
        return;
    }
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0" } else { "0" });
        return;
    }
    let sig = sig.max(1);
    // `{:e}` rounds to `sig` significant digits correctly; its exponent decides the notation,
    // exactly as C decides it from the rounded value.
    let sci = format!("{:.*e}", sig - 1, x);
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    if exp < -4 || exp >= sig as i32 {
        out.push_str(trim_fraction_zeros(mantissa));
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    } else {
        let decimals = (sig as i32 - 1 - exp).max(0) as usize;
        let fixed = format!("{x:.decimals$}");
        out.push_str(trim_fraction_zeros(&fixed));
    }
}

/// `1.2300` → `1.23`, `2.000` → `2`; strings without a `.` are returned unchanged.
fn trim_fraction_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// What a float reads back as after being written with `decimals` — the identity for
/// [`SHORTEST`]. Useful to state round-trip properties.
pub fn quantize(x: f64, decimals: usize) -> f64 {
    let mut s = String::new();
    write_f64(x, &mut s, decimals);
    <f64 as Cell>::parse(s.as_bytes()).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints() {
        assert_eq!(<u64 as Cell>::parse(b" 42\r"), Some(42));
        assert_eq!(<u64 as Cell>::parse(b"-1"), None);
        assert_eq!(<u64 as Cell>::parse(b"18446744073709551616"), None);
        assert_eq!(
            <i64 as Cell>::parse(b"-9223372036854775808"),
            Some(i64::MIN)
        );
        assert_eq!(<i32 as Cell>::parse(b"-1"), Some(-1));
        assert_eq!(<u8 as Cell>::parse(b"256"), None);
        assert_eq!(<bool as Cell>::parse(b"2"), None);
    }

    #[test]
    fn fast_float_path_agrees_with_std() {
        // A deterministic sweep over the shapes the files hold: fixed decimals, negatives,
        // many digits, integers, and values around the fast path's limits.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = (x % 17) as usize + 1;
            let mut s = String::new();
            if x & 1 == 1 {
                s.push('-');
            }
            let body = format!("{:017}", x % 100_000_000_000_000_000);
            let body = &body[17 - digits..];
            let dot = (x >> 20) as usize % (digits + 1);
            if dot == 0 || i % 5 == 0 {
                s.push_str(body);
            } else {
                s.push_str(&body[..dot]);
                s.push('.');
                s.push_str(&body[dot..]);
            }
            let ours = <f64 as Cell>::parse(s.as_bytes()).map(f64::to_bits);
            let std = s.parse::<f64>().ok().map(f64::to_bits);
            assert_eq!(ours, std, "f64 {s:?}");
            let ours = <f32 as Cell>::parse(s.as_bytes()).map(f32::to_bits);
            let std = s.parse::<f32>().ok().map(f32::to_bits);
            assert_eq!(ours, std, "f32 {s:?}");
        }
        for s in [
            "1.", ".5", "-", "-.5", "1.2.3", "+1.5", "1e3", "0.0", "-0.0", "nan",
        ] {
            assert_eq!(
                <f64 as Cell>::parse(s.as_bytes()).map(f64::to_bits),
                s.parse::<f64>().ok().map(f64::to_bits),
                "{s:?}"
            );
        }
    }

    #[test]
    fn floats() {
        assert_eq!(<f64 as Cell>::parse(b"1.23457e-05"), Some(1.23457e-05));
        assert!(<f64 as Cell>::parse(b"nan").is_some_and(f64::is_nan));
        assert!(<f64 as Cell>::parse(b"-nan").is_some_and(f64::is_nan));
        assert_eq!(<f64 as Cell>::parse(b""), None);
        let mut s = String::new();
        write_f64(0.125, &mut s, 2);
        assert_eq!(s, "0.12"); // ties to even on the exact binary value, as printf
        assert_eq!(quantize(1.23456, 3), 1.235);
    }
}

#[cfg(test)]
mod g_format_tests {
    use super::write_g;

    fn g6(x: f64) -> String {
        let mut s = String::new();
        write_g(x, 6, &mut s);
        s
    }

    #[test]
    fn matches_c_printf_percent_6g() {
        // Expected strings are what glibc's printf("%.6g") prints for these doubles.
        let cases: &[(f64, &str)] = &[
            (0.221297, "0.221297"),
            (1.23457e-05, "1.23457e-05"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.5, "0.5"),
            (1.0, "1"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (-0.125, "-0.125"),
            (f64::from(0.1f32), "0.1"),
            (0.9999995, "1"),
            (99999.95, "99999.9"),
            (999999.5, "1e+06"),
            (0.0, "0"),
            (f64::NAN, "nan"),
        ];
        for (x, want) in cases {
            assert_eq!(g6(*x), *want, "{x:e}");
        }
    }
}
