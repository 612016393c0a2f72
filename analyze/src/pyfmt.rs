//! Python-compatible number formatting (`%.Nf` spells NaN `nan`, Rust spells it `NaN`).

/// `%.{prec}f` as Python prints it.
#[must_use]
pub fn f(x: f64, prec: usize) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        }
    } else {
        format!("{x:.prec$}")
    }
}

/// `%{width}.{prec}f`: right-aligned in `width`.
#[must_use]
pub fn fw(x: f64, width: usize, prec: usize) -> String {
    format!("{:>width$}", f(x, prec))
}

/// Python `round()` to an integer (half to even).
#[must_use]
pub fn round_half_even(x: f64) -> f64 {
    x.round_ties_even()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_percent_format() {
        assert_eq!(f(0.125, 2), "0.12");
        assert_eq!(f(2.5, 0), "2");
        assert_eq!(f(f64::NAN, 1), "nan");
        assert_eq!(fw(f64::INFINITY, 6, 1), "   inf");
        assert_eq!(fw(1.23456, 8, 2), "    1.23");
    }
}
