//! `--plot OUT.svg|OUT.png`: pictures of the analyses (plotters).
//!
//! Every chart is a [`Figure`] drawn once per output: SVG through plotters' SVG backend, PNG
//! through [`raster::Canvas`], an in-memory RGB canvas whose text comes from a font compiled into
//! the binary (no system fonts, no fontconfig). Charts are rendered into memory first and
//! written in one go through a temporary file renamed into place, so a failed write never leaves
//! half a file behind that looks complete.
//!
//! | chart | command | module |
//! |---|---|---|
//! | hit rate vs budget per policy (with Belady) | `replay` | [`replay`] |
//! | layer × expert heat, reuse-distance histogram, step × layer grid | `route --view hot\|reuse\|matrix` | [`route`] |
//! | per-token stacked time breakdown | `metrics FILE` | [`timing`] |
//! | compute share by op, io latency CDF | `compute`, `io` | [`decode`] |
//! | flash saved vs weight mass lost, threshold vs static top-k | `drop` | [`drop`] |
//! | two runs' per-token wall time and its ECDF, with the A/B ratio | `metrics --compare` | [`compare`] |

pub mod axis;
pub mod compare;
pub mod decode;
pub mod drop;
pub mod raster;
pub mod replay;
pub mod route;
pub mod timing;

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{AnalyzeError, Result};

pub use compare::compare_runs;
pub use decode::{compute_share, io_latency_cdf};
pub use drop::drop_tradeoff;
pub use replay::replay_curve;
pub use route::{hot, matrix, reuse};
pub use timing::token_breakdown;

/// Picture size in pixels, both formats.
pub const SIZE: (u32, u32) = (1000, 640);

/// The output formats `--plot` writes, chosen by the file name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotFormat {
    /// Scalable vector graphics (`.svg`).
    Svg,
    /// An RGB bitmap (`.png`), text drawn with the built-in font.
    Png,
}

/// The format of `path` (`.svg` or `.png`, any case); anything else is rejected before any
/// work is done.
///
/// # Errors
/// [`AnalyzeError::Invalid`] naming the flag and path, with a hint.
pub fn check_path(path: &Path) -> Result<PlotFormat> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(PlotFormat::Svg),
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(PlotFormat::Png),
        _ => Err(AnalyzeError::Invalid {
            message: format!(
                "--plot {}: unknown plot format (the file name must end in .svg or .png)",
                path.display()
            ),
            hint: "name the output like `--plot out.svg` (vector) or `--plot out.png` (bitmap)"
                .into(),
        }),
    }
}

/// What a chart's drawing code returns: plotters' errors as text.
pub(crate) type DrawResult = std::result::Result<(), String>;

/// A chart that can draw itself on any plotters backend.
pub(crate) trait Figure {
    /// Draw onto `root` (already filled white).
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult;
}

/// `.msg()?` turns plotters' backend-specific errors into [`DrawResult`]'s text.
pub(crate) trait OrMsg<T> {
    fn msg(self) -> std::result::Result<T, String>;
}

impl<T, E: std::fmt::Display> OrMsg<T> for std::result::Result<T, E> {
    fn msg(self) -> std::result::Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

fn draw_err(path: &Path, e: impl std::fmt::Display) -> AnalyzeError {
    AnalyzeError::Invalid {
        message: format!("--plot {}: drawing failed: {e}", path.display()),
        hint: "report a bug with the command line".into(),
    }
}

fn paint<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, fig: &impl Figure) -> DrawResult {
    root.fill(&WHITE).msg()?;
    fig.draw(root)?;
    root.present().msg()
}

/// Draw `fig` in the format `path` names and write it in one go.
pub(crate) fn render(path: &Path, fig: &impl Figure) -> Result<()> {
    let bytes = match check_path(path)? {
        PlotFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
                paint(&root, fig).map_err(|e| draw_err(path, e))?;
            }
            svg.into_bytes()
        }
        PlotFormat::Png => {
            let mut px = vec![255u8; SIZE.0 as usize * SIZE.1 as usize * 3];
            {
                let font = raster::font().map_err(|e| draw_err(path, e))?;
                let canvas =
                    raster::Canvas::new(&mut px, SIZE, font).map_err(|e| draw_err(path, e))?;
                paint(&canvas.into_drawing_area(), fig).map_err(|e| draw_err(path, e))?;
            }
            raster::encode_png(&px, SIZE).map_err(|e| draw_err(path, e))?
        }
    };
    write_whole(path, &bytes).map_err(|e| AnalyzeError::Invalid {
        message: format!("--plot {}: cannot write the plot: {e}", path.display()),
        hint: "check that the directory exists and is writable, or pick another --plot path".into(),
    })
}

/// Write `bytes` to a temporary file beside `path`, then rename it over `path`: a full disk or
/// a killed process leaves the old file (or none), never a truncated picture.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "plot".into(), |n| n.to_string_lossy().into_owned());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(dir)
        // tempfile's message names its random file; say which directory failed instead.
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot create a file in {}: {}", dir.display(), e.kind()),
            )
        })?;
    tmp.write_all(bytes)?;
    tmp.flush()?;
    // The temporary file is created 0600; the picture is an ordinary data file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Light (0) to dark blue (1).
pub(crate) fn shade(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let c = |hi: f64, lo: f64| (hi + (lo - hi) * v).round() as u8;
    RGBColor(c(247.0, 8.0), c(251.0, 48.0), c(255.0, 107.0))
}

/// A saturated colour of hue `h` (0 red … 0.33 green … 0.85 violet).
pub(crate) fn hsl(h: f64) -> RGBColor {
    let RGBAColor(r, g, b, _) = HSLColor(h, 0.8, 0.5).to_rgba();
    RGBColor(r, g, b)
}

/// The file name of a model path (titles stay short).
pub(crate) fn base(model: &str) -> String {
    Path::new(model)
        .file_name()
        .map_or_else(|| model.to_string(), |s| s.to_string_lossy().into_owned())
}

/// The chart frame every plot shares: title, margins, label areas.
pub(crate) fn frame<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    y_label_area: u32,
) -> ChartBuilder<'a, 'a, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(y_label_area);
    b
}

/// Draw the series legend in the given corner.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .msg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(check_path(Path::new("a/b.SVG")).ok(), Some(PlotFormat::Svg));
        assert_eq!(check_path(Path::new("b.png")).ok(), Some(PlotFormat::Png));
        let e = check_path(Path::new("b.jpg")).expect_err("jpg rejected");
        assert!(e.to_string().contains("--plot b.jpg: unknown plot format"));
        assert!(check_path(Path::new("noext")).is_err());
    }
}
