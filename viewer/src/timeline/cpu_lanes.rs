//! CPU lanes, above the thread tracks for a per-CPU trace: a lane per
//! CPU with a slice for each stay of a thread on it, colored by thread,
//! as a "time chart by CPU" draws them. A click on a slice takes the view
//! to that thread at that time.

use egui::{pos2, Align2, Color32, FontId, Painter, Rect, Stroke};
use ptscope_model::Model;
use ptscope_model::{CpuSlice, CpuTrack};

use crate::color::{call_color, name_hash, text_on};
use crate::timeline::marks_row::RowGeom;

/// The color of thread `tid`'s slices.
fn thread_color(tid: i32) -> Color32 {
    call_color(name_hash(&tid.to_string()))
}

/// `tid`'s name as its track header gives it.
fn thread_name(model: &Model, tid: i32) -> String {
    model
        .threads
        .iter()
        .find(|t| t.spans.tid == tid)
        .map_or_else(|| tid.to_string(), |t| format!("{tid} {}", t.spans.comm))
}

/// Draws `cpu`'s lane: its slices in the window, one per pixel at most,
/// labelled where they are wide enough, and the CPU's name at the left.
pub(crate) fn draw(painter: &Painter, model: &Model, cpu: &CpuTrack, g: &RowGeom) {
    let (from, to) = (g.window.start, g.window.end());
    let font = FontId::proportional(11.0);
    let mut last_x = f32::NEG_INFINITY;
    let visible = cpu.slices_between(from, to);
    let mut i = 0;
    while let Some(s) = visible.get(i) {
        i += 1;
        let x0 = (g.left + g.window.x(s.start, g.px_per_ns) as f32).max(g.left);
        let x1 = (g.left + g.window.x(s.end, g.px_per_ns) as f32).min(g.right);
        let x0 = x0.max(last_x);
        last_x = x1.max(x0 + 1.0);
        // Slices that end within the pixel just drawn are stepped over by
        // binary search: a frame's cost follows the lane's width.
        let next = g.window.time_at_px((last_x - g.left) as f64, g.px_per_ns);
        i += visible[i..].partition_point(|n| n.end <= next);
        let r = Rect::from_min_max(pos2(x0, g.y0), pos2(last_x, g.y1));
        let c = thread_color(s.tid);
        painter.rect_filled(r, 0.0, c);
        if r.width() > 40.0 {
            painter.with_clip_rect(r).text(
                pos2(r.left() + 3.0, r.center().y),
                Align2::LEFT_CENTER,
                thread_name(model, s.tid),
                font.clone(),
                text_on(c),
            );
        }
    }
    painter.text(
        pos2(g.left + 2.0, g.y0 + 1.0),
        Align2::LEFT_TOP,
        format!("CPU {}", cpu.cpu),
        FontId::proportional(9.0),
        Color32::from_gray(220),
    );
    painter.hline(
        g.left..=g.right,
        g.y1,
        Stroke::new(1.0, Color32::from_gray(40)),
    );
}

/// The slice of `cpu` under `x`, if any.
pub(crate) fn hit<'c>(cpu: &'c CpuTrack, g: &RowGeom, x: f32) -> Option<&'c CpuSlice> {
    let at = g.window.time_at_px((x - g.left) as f64, g.px_per_ns);
    let slack = (1.0 / g.px_per_ns) as u64;
    cpu.slices_between(at.saturating_sub(slack), at.saturating_add(slack))
        .iter()
        .min_by_key(|s| {
            if s.start <= at && at < s.end {
                0
            } else {
                s.start.abs_diff(at).min(s.end.abs_diff(at))
            }
        })
}

/// The hover of a slice.
pub(crate) fn describe(model: &Model, cpu: &CpuTrack, s: &CpuSlice) -> String {
    format!(
        "CPU {}: thread {} (pid {}) for {}\nClick to go to the thread",
        cpu.cpu,
        thread_name(model, s.tid),
        s.pid,
        crate::timeline::axis::format_duration(s.end.saturating_sub(s.start))
    )
}
