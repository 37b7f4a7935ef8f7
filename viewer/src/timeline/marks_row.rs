//! A thread's marks row, under its header: what its trace says besides
//! calls ([`ptscope_model::Marks`]). The core's frequency is a band
//! whose height follows the CBR ratio, sleeps (C-state stays) are grey
//! boxes, and each PTWRITE is a diamond whose hover shows its value. The
//! row only exists for a thread whose trace holds marks.

use egui::{pos2, Align2, Color32, FontId, Painter, Rect, Shape, Stroke};
use ptscope_model::{wake_reason, Mark, MarkKind, Marks};

use crate::timeline::time_window::TimeWindow;

/// Height of a marks row.
pub(crate) const MARKS_H: f32 = 16.0;
/// How close (px) the pointer must be to a point mark to hover it.
const HIT_PX: f32 = 4.0;

const FREQ: Color32 = Color32::from_rgba_premultiplied(40, 110, 120, 200);
const SLEEP: Color32 = Color32::from_rgb(90, 90, 100);
const PTWRITE: Color32 = Color32::from_rgb(255, 170, 40);
const EVENT: Color32 = Color32::from_rgb(200, 200, 210);

/// Where a row is drawn and what its x axis is.
pub(crate) struct RowGeom<'a> {
    pub window: &'a TimeWindow,
    pub px_per_ns: f64,
    pub left: f32,
    pub right: f32,
    pub y0: f32,
    pub y1: f32,
}

impl RowGeom<'_> {
    fn x(&self, t: u64) -> f32 {
        self.left + self.window.x(t, self.px_per_ns) as f32
    }

    fn visible(&self) -> (u64, u64) {
        (self.window.start, self.window.end())
    }
}

/// Draws `marks`, whose track ends at `end`; `mhz` turns a ratio into
/// MHz (0: unknown, the ratio is shown instead).
pub(crate) fn draw(painter: &Painter, marks: &Marks, end: u64, mhz: f64, g: &RowGeom) {
    let (from, to) = g.visible();
    let h = g.y1 - g.y0;
    let font = FontId::proportional(10.0);
    // Frequency: a step band, its height the ratio over the highest one
    // (the steps are the ratio's changes: a few in any real trace).
    let all = marks.frequency();
    let top = all.iter().map(|s| s.1).max().unwrap_or(1).max(1) as f32;
    let steps = marks.frequency_between(from, to);
    for (i, &(t, ratio)) in steps.iter().enumerate() {
        let next = steps.get(i + 1).map(|n| n.0).or_else(|| {
            let at = all.partition_point(|s| s.0 <= t);
            all.get(at).map(|n| n.0)
        });
        let until = next.unwrap_or(end.max(t));
        if until < from || t > to {
            continue;
        }
        let (x0, x1) = (g.x(t).max(g.left), g.x(until).min(g.right));
        if x1 <= x0 {
            continue;
        }
        let bh = (ratio as f32 / top * h).max(2.0);
        let r = Rect::from_min_max(pos2(x0, g.y1 - bh), pos2(x1, g.y1));
        painter.rect_filled(r, 0.0, FREQ);
        if x1 - x0 > 70.0 {
            painter.text(
                pos2(x0 + 3.0, g.y0 + h / 2.0),
                Align2::LEFT_CENTER,
                freq_label(ratio, mhz),
                font.clone(),
                Color32::WHITE,
            );
        }
    }
    for s in marks.sleeps_between(from, to) {
        let (x0, x1) = (g.x(s.start).max(g.left), g.x(s.end).min(g.right));
        let r = Rect::from_min_max(pos2(x0, g.y0 + 2.0), pos2(x1.max(x0 + 1.0), g.y1 - 2.0));
        painter.rect_filled(r, 2.0, SLEEP);
        if r.width() > 24.0 {
            painter.text(
                r.center(),
                Align2::CENTER_CENTER,
                format!("C{}", s.cstate),
                font.clone(),
                Color32::WHITE,
            );
        }
    }
    // Point marks, one per pixel: after drawing one, the rest of its
    // pixel is stepped over by binary search, so a frame's cost follows
    // the row's width, not the marks in view.
    let cy = g.y0 + h / 2.0;
    let visible = marks.between(from, to);
    let mut i = 0;
    while let Some(m) = visible.get(i) {
        let x = g.x(m.time);
        i += 1;
        if matches!(m.kind, MarkKind::Cbr { .. }) {
            continue;
        }
        let next = g
            .window
            .time_at_px((x + 1.0 - g.left) as f64, g.px_per_ns)
            .max(m.time + 1);
        i += visible[i..].partition_point(|k| k.time < next);
        match m.kind {
            MarkKind::PtWrite { .. } => {
                let r = (h / 2.0 - 2.0).max(2.0);
                painter.add(Shape::convex_polygon(
                    vec![
                        pos2(x, cy - r),
                        pos2(x + r, cy),
                        pos2(x, cy + r),
                        pos2(x - r, cy),
                    ],
                    PTWRITE,
                    Stroke::new(1.0, Color32::BLACK),
                ));
            }
            MarkKind::Cbr { .. } => {}
            _ => {
                painter.vline(x, (g.y0 + 2.0)..=(g.y1 - 2.0), Stroke::new(1.0, EVENT));
            }
        }
    }
}

fn freq_label(ratio: u8, mhz: f64) -> String {
    if mhz > 0.0 {
        format!("{:.0} MHz", ratio as f64 * mhz)
    } else {
        format!("ratio {ratio}")
    }
}

/// What the hover over `x` in the row says: the point mark under it, else
/// the sleep, and the frequency there.
pub(crate) fn hover(marks: &Marks, end: u64, mhz: f64, g: &RowGeom, x: f32) -> Vec<String> {
    let mut out = Vec::new();
    let at = g
        .window
        .time_at_px((x - g.left) as f64, g.px_per_ns)
        .min(end);
    let slack = (HIT_PX as f64 / g.px_per_ns) as u64;
    let near: Option<&Mark> = marks
        .between(at.saturating_sub(slack), at.saturating_add(slack))
        .iter()
        .filter(|m| !matches!(m.kind, MarkKind::Cbr { .. }))
        .min_by_key(|m| m.time.abs_diff(at));
    if let Some(m) = near {
        out.push(m.describe(mhz));
        if let Some(ip) = m.ip {
            out.push(format!("at {ip:#x}"));
        }
    } else if let Some(s) = marks
        .sleeps_between(at, at)
        .iter()
        .find(|s| s.start <= at && at < s.end)
    {
        out.push(format!(
            "asleep in C{} for {} (deepest C{}), woken by {}",
            s.cstate,
            crate::timeline::axis::format_duration(s.end.saturating_sub(s.start)),
            s.deepest,
            wake_reason(s.wake)
        ));
    }
    if let Some(&(_, ratio)) = marks.frequency_between(at, at).first() {
        out.push(format!("core at {}", freq_label(ratio, mhz)));
    }
    out
}
