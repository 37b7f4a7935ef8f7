//! The overview strip above the tracks: it draws the whole snapshot, one
//! thin band per thread, and marks the part the timeline shows.
//!
//! Each band holds only the thread's outermost calls, laid out by the
//! timeline's own mesh builder ([`crate::timeline::frame_mesh`]), so the strip costs
//! one lane per thread however long the trace is. Clicking or dragging in
//! it centres the view there at the same zoom, which is the quickest way
//! across a long trace.

use egui::{vec2, Color32, Rect, Sense, Shape, Stroke, StrokeKind, Ui, WidgetInfo};
use ptscope_model::Model;

use crate::color::FuncStyle;
use crate::timeline::frame_mesh::{layout_lane, FrameBuf, LaneGeom, Paint};
use crate::timeline::time_window::TimeWindow;

/// Height of the strip.
pub(crate) const OVERVIEW_H: f32 = 36.0;

/// Draws the strip; moves `view` if the user clicks or drags in it.
/// Returns whether it did.
pub(crate) fn ui(
    ui: &mut Ui,
    model: &Model,
    styles: &[FuncStyle],
    bounds: Option<(u64, u64)>,
    view: &mut TimeWindow,
    buf: &mut FrameBuf,
) -> bool {
    let (rect, resp) = ui.allocate_exact_size(
        vec2(ui.available_width(), OVERVIEW_H),
        Sense::click_and_drag(),
    );
    resp.widget_info(|| WidgetInfo::labeled(egui::Role::Canvas, true, "Overview"));
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
    let Some((lo, hi)) = bounds else {
        return false;
    };
    let whole = TimeWindow::fit(lo, hi);
    let n = model.threads.len().max(1);
    let band = ((rect.height() - 2.0) / n as f32).max(1.0);
    buf.clear();
    let paint = Paint {
        styles,
        search: None,
    };
    for (i, t) in model.threads.iter().enumerate() {
        let y0 = rect.top() + 1.0 + i as f32 * band;
        if y0 >= rect.bottom() {
            break;
        }
        let geom = LaneGeom {
            left: rect.left(),
            width: rect.width(),
            y0,
            y1: (y0 + band - if band > 3.0 { 1.0 } else { 0.0 }).min(rect.bottom()),
            row: i as u32,
        };
        layout_lane(buf, &t.spans, 0, &whole, &geom, &paint);
    }
    painter.add(Shape::mesh(buf.take_mesh()));

    // The current view.
    let ppn = whole.px_per_ns(rect.width());
    let x0 = rect.left() + whole.x(view.start, ppn) as f32;
    let x1 = x0 + (view.width * ppn) as f32;
    let marked = Rect::from_x_y_ranges(
        x0.max(rect.left())..=x1.max(x0 + 2.0).min(rect.right()),
        rect.y_range(),
    );
    painter.rect_filled(
        marked,
        0.0,
        Color32::from_rgba_unmultiplied(255, 255, 255, 30),
    );
    painter.rect_stroke(
        marked,
        0.0,
        Stroke::new(1.5, Color32::WHITE),
        StrokeKind::Inside,
    );

    // Click or drag: center the view on the pointer, same zoom.
    if resp.clicked() || resp.dragged() {
        if let Some(p) = resp.interact_pointer_pos() {
            let t = whole.time_at_px((p.x - rect.left()) as f64, ppn);
            let width = view.width;
            *view = TimeWindow::new(t, width);
            view.shift(-width / 2.0);
            view.clamp_to(lo, hi);
            return true;
        }
    }
    false
}
