//! Span colors: this module gives each function a color that never changes
//! and gives pseudo-spans looks of their own.
//!
//! A function's color comes from a hash of its name (FNV-1a, because
//! `DefaultHasher` may change between Rust versions), so a function has the
//! same color in every snapshot and every run, and a user learns to spot
//! it. Pseudo-spans (`[untraced]`, `[syscall]`, decode errors, missing
//! binaries) get fixed grey or red tones and a hatch, so they never read as
//! real calls; interrupts get a fixed orange. Every style also carries a
//! dimmed fill, which the timeline uses for the calls a search leaves out.

use egui::Color32;
use ptscope_model::{FuncTable, SpanKind};

/// How a function's boxes look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncStyle {
    pub fill: Color32,
    /// Fill when a search is active and this function does not match.
    pub dimmed: Color32,
    /// Draw diagonal stripes over the box (pseudo-spans).
    pub hatched: bool,
}

/// Color of merged runs of tiny spans.
pub(crate) const MERGED: Color32 = Color32::from_rgb(0x70, 0x78, 0x88);
/// Merged runs while a search is active.
pub(crate) const MERGED_DIMMED: Color32 = Color32::from_rgb(0x38, 0x3c, 0x44);
/// Stripe color of hatched boxes.
pub(crate) const HATCH: Color32 = Color32::from_rgba_premultiplied(0, 0, 0, 90);

/// FNV-1a: tiny, stable across platforms and Rust versions (unlike
/// `DefaultHasher`), which is the point of a stable color.
pub(crate) fn name_hash(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// A pleasant, readable color for a call, from a name hash.
pub(crate) fn call_color(hash: u32) -> Color32 {
    // Hue from the hash; saturation and lightness vary a little so that
    // neighbours with close hues still differ.
    let hue = (hash % 360) as f32 / 360.0;
    let sat = 0.45 + ((hash >> 9) % 20) as f32 / 100.0;
    let val = 0.72 + ((hash >> 17) % 18) as f32 / 100.0;
    let [r, g, b] = hsv_to_rgb(hue, sat, val);
    Color32::from_rgb(r, g, b)
}

fn hsv_to_rgb(h: f32, s: f32, v: f32) -> [u8; 3] {
    let i = (h * 6.0).floor();
    let f = h * 6.0 - i;
    let p = v * (1.0 - s);
    let q = v * (1.0 - f * s);
    let t = v * (1.0 - (1.0 - f) * s);
    let (r, g, b) = match i as i32 % 6 {
        0 => (v, t, p),
        1 => (q, v, p),
        2 => (p, v, t),
        3 => (p, q, v),
        4 => (t, p, v),
        _ => (v, p, q),
    };
    [(r * 255.0) as u8, (g * 255.0) as u8, (b * 255.0) as u8]
}

/// The style of one function.
pub(crate) fn func_style(name: &str, kind: SpanKind) -> FuncStyle {
    let (fill, hatched) = match kind {
        SpanKind::Call => (call_color(name_hash(name)), false),
        SpanKind::Untraced => (Color32::from_rgb(0x5a, 0x5a, 0x5a), true),
        SpanKind::Syscall => (Color32::from_rgb(0x6a, 0x74, 0x88), true),
        SpanKind::DecodeError => (Color32::from_rgb(0xd0, 0x30, 0x30), true),
        SpanKind::NoBinary => (Color32::from_rgb(0x7a, 0x5a, 0x6a), true),
        SpanKind::Interrupt => (Color32::from_rgb(0xc8, 0x8a, 0x30), false),
    };
    FuncStyle {
        fill,
        dimmed: dim(fill),
        hatched,
    }
}

/// A darkened, desaturated version of `c` for non-matching spans.
pub(crate) fn dim(c: Color32) -> Color32 {
    let grey = (c.r() as u32 + c.g() as u32 + c.b() as u32) / 3;
    let mix = |x: u8| ((x as u32 + grey) / 2 / 3 + 20) as u8;
    Color32::from_rgb(mix(c.r()), mix(c.g()), mix(c.b()))
}

/// Black or white, whichever reads better on `bg`.
pub(crate) fn text_on(bg: Color32) -> Color32 {
    let l = 0.299 * bg.r() as f32 + 0.587 * bg.g() as f32 + 0.114 * bg.b() as f32;
    if l > 140.0 {
        Color32::BLACK
    } else {
        Color32::WHITE
    }
}

/// Styles of every function of `funcs`, indexed by `FuncId`. Extends
/// `styles` in place: function tables only grow while decoding goes on.
pub fn extend_styles(styles: &mut Vec<FuncStyle>, funcs: &FuncTable) {
    if styles.len() > funcs.len() {
        styles.clear();
    }
    for id in styles.len()..funcs.len() {
        let f = funcs.get(id as u32);
        styles.push(func_style(&f.name, f.kind));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colors_are_stable_and_pseudo_spans_differ() {
        let a = func_style("main", SpanKind::Call);
        assert_eq!(a, func_style("main", SpanKind::Call));
        // Known FNV-1a values: the color must not depend on the platform.
        assert_eq!(name_hash(""), 0x811c_9dc5);
        assert_eq!(name_hash("a"), 0xe40c_292c);
        assert_ne!(a.fill, func_style("parse", SpanKind::Call).fill);
        let err = func_style("[decode error: x]", SpanKind::DecodeError);
        assert!(err.hatched && err.fill.r() > 0xc0 && err.fill.g() < 0x40);
        assert!(func_style("[untraced]", SpanKind::Untraced).hatched);
        assert!(!a.hatched);
    }

    #[test]
    fn styles_follow_the_table() {
        let mut t = FuncTable::default();
        let mut styles = Vec::new();
        extend_styles(&mut styles, &t);
        assert_eq!(styles.len(), t.len());
        t.intern("f", "", 0, SpanKind::Call);
        extend_styles(&mut styles, &t);
        assert_eq!(styles.len(), t.len());
        assert!(styles[0].hatched);
    }
}
