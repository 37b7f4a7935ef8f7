//! The visible time window: [`TimeWindow`] says where the timeline looks
//! and how wide, and converts between times and screen positions.
//!
//! Times are u64 perf nanoseconds and can be around 10^15 deep in a long
//! trace, beyond what an f32 (or, at sub-ns zoom, an f64) can hold
//! exactly. So the window keeps its start as an integer plus a fractional
//! ns offset, and everything on screen is computed relative to that start:
//! the f64 differences stay small whatever the absolute time. Zooming,
//! panning and clamping to the trace are done here too, so that callers
//! need no float arithmetic on absolute times.

/// The narrowest window: about 1 ns per 100 px on a 1920 px screen.
pub(crate) const MIN_WIDTH_NS: f64 = 16.0;

/// A window onto the time line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeWindow {
    /// Integer part of the left edge, perf ns.
    pub start: u64,
    /// Fractional part of the left edge, in `[0, 1)` ns.
    pub frac: f64,
    /// Width in ns.
    pub width: f64,
}

impl TimeWindow {
    pub fn new(start: u64, width: f64) -> TimeWindow {
        TimeWindow {
            start,
            frac: 0.0,
            width: width.max(MIN_WIDTH_NS),
        }
    }

    /// The window that shows `[from, to)` with a small margin each side.
    pub fn fit(from: u64, to: u64) -> TimeWindow {
        let len = to.saturating_sub(from).max(1) as f64;
        let width = (len * 1.1).max(MIN_WIDTH_NS);
        let mut w = TimeWindow::new(from, width);
        w.shift(-(width - len) / 2.0);
        w
    }

    /// Pixels per ns when the window spans `width_px` pixels.
    pub fn px_per_ns(&self, width_px: f32) -> f64 {
        width_px as f64 / self.width
    }

    /// Offset of `t` from the window's left edge, in ns (negative before it).
    #[inline]
    pub fn rel_ns(&self, t: u64) -> f64 {
        // Wrapping difference read as signed: exact for any |t - start| < 2^63.
        t.wrapping_sub(self.start) as i64 as f64 - self.frac
    }

    /// Screen offset of `t` from the left edge, in px.
    #[inline]
    pub fn x(&self, t: u64, px_per_ns: f64) -> f64 {
        self.rel_ns(t) * px_per_ns
    }

    /// The time at `rel` ns from the left edge, rounded down, saturating.
    #[inline]
    pub fn time_at_rel(&self, rel: f64) -> u64 {
        let r = (rel + self.frac).floor();
        if r >= 0.0 {
            self.start.saturating_add(r as u64)
        } else {
            self.start.saturating_sub((-r) as u64)
        }
    }

    /// The time at `dx` px from the left edge.
    #[inline]
    pub fn time_at_px(&self, dx: f64, px_per_ns: f64) -> u64 {
        self.time_at_rel(dx / px_per_ns)
    }

    /// The right edge, rounded up: spans starting at or after it are
    /// not visible.
    pub fn end(&self) -> u64 {
        self.start
            .saturating_add((self.frac + self.width).ceil() as u64)
    }

    /// Moves the left edge by `ns` (negative: to the left).
    pub fn shift(&mut self, ns: f64) {
        let r = self.frac + ns;
        let whole = r.floor();
        self.frac = r - whole;
        if whole >= 0.0 {
            self.start = self.start.saturating_add(whole as u64);
        } else {
            let back = (-whole) as u64;
            if back > self.start {
                self.frac = 0.0;
            }
            self.start = self.start.saturating_sub(back);
        }
    }

    /// Zooms by `factor` (> 1 zooms in) keeping the time at `anchor`
    /// (0 = left edge, 1 = right edge) in place.
    pub fn zoom(&mut self, factor: f64, anchor: f64, max_width: f64) {
        if !(factor.is_finite() && factor > 0.0) {
            return;
        }
        let new_width = (self.width / factor).clamp(MIN_WIDTH_NS, max_width.max(MIN_WIDTH_NS));
        let anchor = anchor.clamp(0.0, 1.0);
        self.shift(anchor * (self.width - new_width));
        self.width = new_width;
    }

    /// Keeps the window overlapping `[lo, hi]` and no wider than it allows.
    pub fn clamp_to(&mut self, lo: u64, hi: u64) {
        let len = hi.saturating_sub(lo).max(1) as f64;
        let max_width = max_width_for(lo, hi);
        if self.width > max_width {
            self.width = max_width;
        }
        // Allow half a window of slack past either end: `a` and `b` are
        // where the trace begins and ends, relative to the left edge.
        let slack = self.width / 2.0;
        let a = self.rel_ns(lo);
        let b = a + len;
        if b < slack {
            self.shift(b - slack);
        } else if a > self.width - slack {
            self.shift(a - (self.width - slack));
        }
    }
}

/// The widest useful window for a trace spanning `[lo, hi]`.
pub(crate) fn max_width_for(lo: u64, hi: u64) -> f64 {
    (hi.saturating_sub(lo).max(1) as f64 * 1.2).max(MIN_WIDTH_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_stay_exact_deep_into_a_trace() {
        let base = 1_000_000_000_000_000u64; // 10^15 ns
        let w = TimeWindow::new(base, 100.0);
        let ppn = w.px_per_ns(1000.0);
        assert_eq!(w.x(base + 1, ppn), 10.0);
        assert_eq!(w.x(base + 37, ppn), 370.0);
        assert_eq!(w.x(base - 2, ppn), -20.0);
        assert_eq!(w.time_at_px(375.0, ppn), base + 37);
    }

    #[test]
    fn zoom_keeps_the_anchor_in_place() {
        let base = 1_000_000_000_000_000u64;
        let mut w = TimeWindow::new(base, 1_000_000.0);
        let anchor_t = base + 250_000;
        w.zoom(1000.0, 0.25, 1e12);
        assert!((w.width - 1000.0).abs() < 1e-9);
        assert!((w.rel_ns(anchor_t) - 250.0).abs() < 1e-6);
        // Down to the floor and no further.
        w.zoom(1e9, 0.5, 1e12);
        assert_eq!(w.width, MIN_WIDTH_NS);
    }

    #[test]
    fn shift_handles_fractions_and_the_origin() {
        let mut w = TimeWindow::new(10, 100.0);
        w.shift(2.5);
        assert_eq!((w.start, w.frac), (12, 0.5));
        w.shift(-0.75);
        assert_eq!(w.start, 11);
        assert!((w.frac - 0.75).abs() < 1e-12);
        w.shift(-100.0);
        assert_eq!((w.start, w.frac), (0, 0.0));
    }

    #[test]
    fn clamp_keeps_the_trace_in_view() {
        let mut w = TimeWindow::new(5_000, 100.0);
        w.clamp_to(0, 1000);
        assert!(w.rel_ns(1000) >= 50.0 - 1e-9);
        let mut w = TimeWindow::new(0, 1e9);
        w.clamp_to(0, 1000);
        assert!(w.width <= 1200.0);
    }
}
