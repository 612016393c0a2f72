//! Axis ticks and colour scales the charts share: readable log-axis labels, regularly thinned
//! category labels, a colour-blind-safe sequential scale, and a legend panel beside the data.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{DrawResult, OrMsg};

/// Labelled ticks a log axis should show at least (when the range allows any).
const MIN_LOG_TICKS: usize = 4;
/// Labelled ticks a log axis shows at most (more decades are thinned to every k-th).
const MAX_LOG_TICKS: usize = 12;

/// Mantissas per decade, sparsest first: 1; 1-2-5; 1-2-3-5-7; every integer (with 1.5).
const LOG_MANTISSAS: [&[f64]; 4] = [
    &[1.0],
    &[1.0, 2.0, 5.0],
    &[1.0, 2.0, 3.0, 5.0, 7.0],
    &[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
];

/// Ticks for a log axis over `lo..=hi` (both > 0) a reader can read values off: 1-2-5 per
/// decade; one per decade (every k-th decade over many) when that gives more than twelve;
/// 1-2-3-5-7 or every integer mantissa when 1-2-5 gives fewer than four; and evenly spaced
/// round values (1, 2 or 5 × 10^k apart) when the range is too narrow even for those (inside
/// one decade, e.g. 196–260). Empty for an empty or non-positive range.
#[must_use]
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > lo) {
        return Vec::new();
    }
    let (d0, d1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let with = |mantissas: &[f64], every: i32| -> Vec<f64> {
        (d0..=d1)
            .filter(|d| (d - d0) % every == 0)
            .flat_map(|d| mantissas.iter().map(move |m| round_sig(m * pow10(d))))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let one_two_five = with(LOG_MANTISSAS[1], 1);
    if one_two_five.len() > MAX_LOG_TICKS {
        let max = MAX_LOG_TICKS as i32;
        let every = ((d1 - d0 + max - 1) / max).max(1);
        return with(LOG_MANTISSAS[0], every);
    }
    if one_two_five.len() >= MIN_LOG_TICKS {
        return one_two_five;
    }
    for mantissas in &LOG_MANTISSAS[2..] {
        let ticks = with(mantissas, 1);
        if ticks.len() >= MIN_LOG_TICKS {
            return ticks;
        }
    }
    linear_ticks(lo, hi, MIN_LOG_TICKS + 1)
}

/// Round values `step` apart inside `lo..=hi`, `step` the 1-2-5 number giving about `target`.
#[must_use]
pub fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) || target == 0 {
        return Vec::new();
    }
    let raw = (hi - lo) / target as f64;
    let mag = pow10(raw.log10().floor() as i32);
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| round_sig(i as f64 * step)).collect()
}

fn pow10(d: i32) -> f64 {
    10f64.powi(d)
}

/// Drops the binary noise of `m × 10^d` (0.30000000000000004 → 0.3).
fn round_sig(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let d = 12 - v.abs().log10().ceil() as i32;
    let scale = pow10(d);
    (v * scale).round() / scale
}

/// A tick value as a label: whole numbers from 10 up, otherwise up to three significant
/// decimals with trailing zeros dropped (`0.3`, `1.5`, `2.25`, `196`).
#[must_use]
pub fn tick_label(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    if v.abs() >= 10.0 || v == 0.0 {
        return format!("{v:.0}");
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Every how many'th category label to print so that none overlaps its neighbour: labels of
/// `label_px` pixels (the widest one) on slots `slot_px` apart, with `gap_px` between them.
/// 1 when all fit; the kept labels are then the 0th, k-th, 2k-th … — regular, never ragged.
#[must_use]
pub fn label_stride(label_px: f64, slot_px: f64, gap_px: f64) -> usize {
    if slot_px.is_nan() || slot_px <= 0.0 || !label_px.is_finite() {
        return 1;
    }
    (((label_px + gap_px) / slot_px).ceil() as usize).max(1)
}

/// Approximate pixel width of `text` in the charts' sans-serif font at `size` px (a mean
/// advance of 0.6 em: generous for digits and dashes, which is what category labels hold).
#[must_use]
pub fn text_px(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * 0.6 * size
}

/// Viridis (van der Walt & Smith, matplotlib's default map) at `t` in 0..=1: dark purple →
/// blue → teal → green → yellow. Perceptually uniform, its lightness rises monotonically (it
/// reads in greyscale), and it stays distinguishable under red-green colour blindness.
#[must_use]
pub fn viridis(t: f64) -> RGBColor {
    // Eleven samples of the published table, linearly interpolated.
    const STOPS: [(u8, u8, u8); 11] = [
        (68, 1, 84),
        (72, 36, 117),
        (65, 68, 135),
        (53, 95, 141),
        (42, 120, 142),
        (33, 145, 140),
        (34, 168, 132),
        (68, 191, 112),
        (122, 209, 81),
        (189, 223, 38),
        (253, 231, 37),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = t * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let lerp = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(lerp(a.0, b.0), lerp(a.1, b.1), lerp(a.2, b.2))
}

/// Okabe & Ito's palette for categories (Color Universal Design): distinguishable under every
/// common colour-vision deficiency, no yellow too pale for white paper. Black first.
pub const OKABE_ITO: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(120, 120, 120),
];

/// Category colour `i` of [`OKABE_ITO`] (cycling).
#[must_use]
pub fn category(i: usize) -> RGBColor {
    OKABE_ITO[i % OKABE_ITO.len()]
}

/// Relative luminance (Rec. 709 weights, 0..255) of a colour.
#[must_use]
pub fn luminance(c: RGBColor) -> f64 {
    0.2126 * f64::from(c.0) + 0.7152 * f64::from(c.1) + 0.0722 * f64::from(c.2)
}

/// Width of the legend panel right of a heat map's data area, px.
pub const LEGEND_PANEL_PX: u32 = 250;

/// Draws legend `entries` (swatch colour, label) as a column in `area` — a panel beside the
/// chart, so the legend never covers data. `heading` goes above the swatches.
pub(crate) fn legend_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    heading: &str,
    entries: &[(String, RGBColor)],
) -> DrawResult {
    let font = ("sans-serif", 15).into_font();
    let (x0, mut y) = (12, 70);
    area.draw(&Text::new(heading.to_string(), (x0, y), font.clone()))
        .msg()?;
    y += 28;
    for (label, colour) in entries {
        area.draw(&Rectangle::new(
            [(x0, y), (x0 + 18, y + 14)],
            colour.filled(),
        ))
        .msg()?;
        area.draw(&Rectangle::new([(x0, y), (x0 + 18, y + 14)], BLACK))
            .msg()?;
        area.draw(&Text::new(label.clone(), (x0 + 26, y), font.clone()))
            .msg()?;
        y += 24;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(lo: f64, hi: f64) -> Vec<String> {
        log_ticks(lo, hi).into_iter().map(tick_label).collect()
    }

    #[test]
    fn a_log_axis_over_196_to_2441_ms_is_labelled_1_2_5() {
        assert_eq!(labels(196.0, 2441.0), ["200", "500", "1000", "2000"]);
        assert_eq!(
            labels(0.8, 9300.0),
            [
                "1", "2", "5", "10", "20", "50", "100", "200", "500", "1000", "2000", "5000"
            ]
        );
        assert_eq!(
            labels(3.0, 900.0),
            ["5", "10", "20", "50", "100", "200", "500"]
        );
    }

    #[test]
    fn a_range_inside_one_decade_still_gets_labels() {
        // 196-260 holds only 200 and 250 of the denser sets: evenly spaced round values.
        let t = labels(196.0, 260.0);
        assert!(t.len() >= 4, "{t:?}");
        assert_eq!(t, ["200", "220", "240", "260"]);
        let t = labels(1.21, 1.29);
        assert!(
            t.len() >= 4 && t.iter().all(|l| l.starts_with("1.2")),
            "{t:?}"
        );
        // 150-900: 1-2-5 gives two, 1-2-3-5-7 four.
        assert_eq!(labels(150.0, 900.0), ["200", "300", "500", "700"]);
    }

    #[test]
    fn many_decades_are_thinned_regularly_and_bad_ranges_give_nothing() {
        let t = log_ticks(1e-3, 1e30);
        assert!(
            t.len() <= MAX_LOG_TICKS + 1 && t.len() >= MIN_LOG_TICKS,
            "{t:?}"
        );
        let ratios: Vec<f64> = t
            .windows(2)
            .map(|w| (w[1] / w[0]).log10().round())
            .collect();
        assert!(ratios.windows(2).all(|r| r[0] == r[1]), "{ratios:?}");
        for (lo, hi) in [
            (0.0, 1.0),
            (-1.0, 1.0),
            (5.0, 5.0),
            (f64::NAN, 1.0),
            (1.0, f64::INFINITY),
        ] {
            assert!(log_ticks(lo, hi).is_empty(), "{lo}..{hi}");
        }
    }

    #[test]
    fn tick_labels_are_short_and_exact() {
        let got: Vec<String> = [0.3, 0.30000000000000004, 1.5, 2.25, 196.0, 1000.0, 0.001]
            .into_iter()
            .map(tick_label)
            .collect();
        assert_eq!(got, ["0.3", "0.3", "1.5", "2.25", "196", "1000", "0.001"]);
    }

    #[test]
    fn category_labels_are_thinned_only_when_they_would_overlap() {
        assert_eq!(label_stride(40.0, 60.0, 8.0), 1);
        assert_eq!(label_stride(63.0, 60.0, 8.0), 2);
        assert_eq!(label_stride(63.0, 20.0, 8.0), 4);
        assert_eq!(label_stride(10.0, 0.0, 8.0), 1);
    }

    #[test]
    fn the_sequential_scale_is_colour_blind_safe() {
        let red_ish = |c: RGBColor| c.0 > c.1.saturating_add(60) && c.0 > c.2.saturating_add(60);
        let green_ish = |c: RGBColor| c.1 > c.0.saturating_add(60) && c.1 > c.2.saturating_add(60);
        let samples: Vec<RGBColor> = (0..=20).map(|i| viridis(f64::from(i) / 20.0)).collect();
        assert!(!samples.iter().any(|&c| red_ish(c)), "no red in the scale");
        // Lightness rises with the value: the ends differ in greyscale too.
        let l: Vec<f64> = samples.iter().map(|&c| luminance(c)).collect();
        assert!(l.windows(2).all(|w| w[1] > w[0]), "{l:?}");
        assert!(l[20] - l[0] > 150.0);
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
        assert_eq!(viridis(f64::NAN), viridis(0.0));
        let _ = green_ish;
    }
}
