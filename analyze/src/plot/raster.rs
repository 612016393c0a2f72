//! PNG output: an RGB pixel canvas plotters draws on, with text from a font built into the
//! binary, so a plot renders the same on a machine without any system fonts.
//!
//! Shapes use plotters' own pixel rasterizers (the trait's default methods over
//! [`Canvas::draw_pixel`]); only text is drawn here, with `ab_glyph`, placed by the same anchor
//! rules the SVG backend writes (`dy` of 0.76 em for top-anchored text, ±0.5 ex for centre and
//! bottom; the SVG `font-size` is the plotters size ÷ 1.24), so the PNG and SVG of a chart line
//! up. The font is a subset of DejaVu Sans (licence: `analyze/assets/LICENSE-DejaVu.txt`).

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::prelude::{DrawingBackend, FontTransform};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};

/// DejaVu Sans reduced to the characters plots print (see `analyze/assets/LICENSE-DejaVu.txt`).
static FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");

/// plotters' text size → SVG `font-size` (the em square, in pixels).
const SIZE_TO_EM: f64 = 1.0 / 1.24;
/// Baseline below a top-anchored text's anchor, in em (the SVG backend's `dy="0.76em"`).
const TOP_BASELINE_EM: f32 = 0.76;
/// Half an ex, in em (DejaVu Sans' x-height is 0.55 em; SVG renderers use the font's).
const HALF_EX_EM: f32 = 0.273;

/// The built-in font, parsed.
///
/// # Errors
/// Only if the bytes compiled into the binary are not a font (a build defect).
pub fn font() -> Result<FontRef<'static>, String> {
    FontRef::try_from_slice(FONT_BYTES).map_err(|e| format!("built-in font unreadable: {e}"))
}

/// The error type of [`Canvas`]: drawing into memory cannot fail.
pub type CanvasError = std::convert::Infallible;

/// An RGB8 canvas (row-major, 3 bytes per pixel) borrowed from the caller.
pub struct Canvas<'a> {
    pixels: &'a mut [u8],
    width: u32,
    height: u32,
    font: FontRef<'static>,
}

impl<'a> Canvas<'a> {
    /// A canvas over `pixels`, which must hold `width × height × 3` bytes.
    ///
    /// # Errors
    /// When the buffer has the wrong length.
    pub fn new(
        pixels: &'a mut [u8],
        (width, height): (u32, u32),
        font: FontRef<'static>,
    ) -> Result<Self, String> {
        let need = width as usize * height as usize * 3;
        if pixels.len() != need {
            return Err(format!(
                "canvas buffer holds {} bytes, {width}x{height} RGB needs {need}",
                pixels.len()
            ));
        }
        Ok(Self {
            pixels,
            width,
            height,
            font,
        })
    }

    fn scale(&self, size: f64) -> (PxScale, f32) {
        let em = (size * SIZE_TO_EM) as f32;
        // ab_glyph scales so that ascent − descent spans the given pixels; the SVG size is the em.
        let upem = self.font.units_per_em().unwrap_or(2048.0);
        (PxScale::from(em * self.font.height_unscaled() / upem), em)
    }

    fn advance(&self, text: &str, scale: PxScale) -> f32 {
        let f = self.font.as_scaled(scale);
        let mut x = 0.0;
        let mut prev = None;
        for c in text.chars() {
            let id = f.glyph_id(c);
            if let Some(p) = prev {
                x += f.kern(p, id);
            }
            x += f.h_advance(id);
            prev = Some(id);
        }
        x
    }

    fn blend(&mut self, (x, y): BackendCoord, c: BackendColor) {
        if x < 0 || y < 0 || x >= self.width as i32 || y >= self.height as i32 {
            return;
        }
        let a = c.alpha.clamp(0.0, 1.0);
        if a <= 0.0 {
            return;
        }
        let i = (y as usize * self.width as usize + x as usize) * 3;
        let src = [c.rgb.0, c.rgb.1, c.rgb.2];
        for (k, s) in src.into_iter().enumerate() {
            let d = f64::from(self.pixels[i + k]);
            self.pixels[i + k] = (f64::from(s) * a + d * (1.0 - a)).round() as u8;
        }
    }
}

impl DrawingBackend for Canvas<'_> {
    type ErrorType = CanvasError;

    fn get_size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<CanvasError>> {
        Ok(())
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<CanvasError>> {
        Ok(())
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<CanvasError>> {
        self.blend(point, color);
        Ok(())
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<CanvasError>> {
        let (scale, em) = self.scale(style.size());
        Ok((self.advance(text, scale).ceil() as u32, em.ceil() as u32))
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<CanvasError>> {
        let color = style.color();
        if color.alpha <= 0.0 {
            return Ok(());
        }
        let (scale, em) = self.scale(style.size());
        let width = self.advance(text, scale);
        let anchor = style.anchor();
        let x0 = match anchor.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let baseline = match anchor.v_pos {
            VPos::Top => TOP_BASELINE_EM * em,
            VPos::Center => HALF_EX_EM * em,
            VPos::Bottom => -HALF_EX_EM * em,
        };
        let transform = style.transform();
        // Rasterise in text-local coordinates (anchor at the origin), then rotate and place.
        let mut coverage: Vec<(i32, i32, f32)> = Vec::new();
        let scaled = self.font.as_scaled(scale);
        let mut pen = x0;
        let mut prev = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                pen += scaled.kern(p, id);
            }
            let glyph = id.with_scale_and_position(scale, point(pen, baseline));
            if let Some(outline) = self.font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                outline.draw(|gx, gy, v| {
                    coverage.push((b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32, v));
                });
            }
            pen += scaled.h_advance(id);
            prev = Some(id);
        }
        for (lx, ly, v) in coverage {
            let (dx, dy) = rotate(&transform, lx, ly);
            let mut c = color;
            c.alpha *= f64::from(v.clamp(0.0, 1.0));
            self.blend((pos.0 + dx, pos.1 + dy), c);
        }
        Ok(())
    }
}

/// plotters' rotations (clockwise; `Rotate270` is the y-axis label reading upwards).
fn rotate(t: &FontTransform, x: i32, y: i32) -> (i32, i32) {
    match t {
        FontTransform::None => (x, y),
        FontTransform::Rotate90 => (-y, x),
        FontTransform::Rotate180 => (-x, -y),
        FontTransform::Rotate270 => (y, -x),
    }
}

/// Encode an RGB8 buffer as PNG.
///
/// # Errors
/// When the encoder rejects the buffer (wrong size).
pub fn encode_png(pixels: &[u8], (width, height): (u32, u32)) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(|e| e.to_string())?;
        w.write_image_data(pixels).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::prelude::*;

    #[test]
    fn text_is_drawn_dark_on_white_inside_its_estimated_box() {
        let (w, h) = (200u32, 60u32);
        let mut px = vec![255u8; (w * h * 3) as usize];
        let (tw, th);
        {
            let canvas = Canvas::new(&mut px, (w, h), font().expect("font")).expect("canvas");
            let style = ("sans-serif", 24).into_font().color(&BLACK);
            (tw, th) = canvas
                .estimate_text_size("Hello", &style)
                .expect("estimate");
            let root = canvas.into_drawing_area();
            root.draw(&Text::new("Hello", (10, 10), style))
                .expect("draw text");
        }
        assert!(tw > 40 && tw < 100, "width {tw}");
        assert!((18..=20).contains(&th), "height {th}");
        let dark: Vec<(u32, u32)> = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .filter(|&(x, y)| px[((y * w + x) * 3) as usize] < 100)
            .collect();
        assert!(dark.len() > 100, "{} dark pixels", dark.len());
        // Left/top anchored at (10, 10): ink stays right of and below the anchor, within the box.
        assert!(
            dark.iter()
                .all(|&(x, y)| (10..=12 + tw).contains(&x) && (10..34).contains(&y))
        );
    }

    #[test]
    fn png_round_trips() {
        let px: Vec<u8> = (0..4 * 3 * 3).map(|i| (i * 7) as u8).collect();
        let bytes = encode_png(&px, (4, 3)).expect("encode");
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .expect("decode header");
        let mut out = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut out).expect("decode");
        assert_eq!((info.width, info.height), (4, 3));
        assert_eq!(&out[..px.len()], &px[..]);
    }
}
