//! Number and text formatting shared by the panes.

/// `s` cut to `room` characters, the last one an ellipsis when anything was cut.
pub(super) fn truncate(s: &str, room: usize) -> String {
    if s.chars().count() <= room {
        return s.to_string();
    }
    if room == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(room.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A rate with two decimals, or a dash when unknown.
pub(super) fn num2(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.2}"))
}

/// Milliseconds as the bars print them: seconds from 10 s, one decimal under 10 ms.
pub(super) fn ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else if v < 10.0 {
        // Sub-10 ms terms (mgmt, a tiny model's tokens) would all read "0 ms" otherwise.
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}
