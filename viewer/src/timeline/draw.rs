//! Drawing a frame: the mesh of span and line boxes, their labels, the
//! selection and the range, the marks and CPU rows, the thread headers, the
//! axis and the hover tooltips. These read the window and the rows laid out
//! this frame, and write only the frame's buffers and the hover caches,
//! apart from a click on a header, which folds its thread.

use egui::{
    pos2, vec2, Align2, Color32, FontId, Painter, Rect, Response, Sense, Shape, Stroke, StrokeKind,
    Ui, WidgetInfo,
};
use ptscope_model::flag;
use ptscope_model::Model;

use super::input::Drag;
use super::{RowKind, Timeline, TimelineInput, HEADER_H};
use crate::color::{text_on, MERGED};
use crate::spans::{merged_label, self_time, SpanRef};
use crate::timeline::axis::{self, format_duration, format_duration_in};
use crate::timeline::cpu_lanes;
use crate::timeline::frame_mesh::{self, LaneGeom, Paint};
use crate::timeline::line_detail::{self as lines, Disasm, MERGED_LINES};
use crate::timeline::marks_row;

/// Boxes narrower than this get no label.
const LABEL_MIN_PX: f32 = 18.0;

impl Timeline {
    pub(super) fn layout_spans(&mut self, input: &TimelineInput, tracks: Rect) {
        self.buf.clear();
        self.row_boxes.clear();
        self.line_boxes.clear();
        self.row_line_boxes.clear();
        let paint = Paint {
            styles: input.styles,
            search: input.search,
        };
        for (ri, row) in self.rows.iter().enumerate() {
            if matches!(row.kind, RowKind::Marks | RowKind::Cpu) {
                let none = self.buf.boxes.len()..self.buf.boxes.len();
                self.row_boxes.push(none);
                let none = self.line_boxes.len()..self.line_boxes.len();
                self.row_line_boxes.push(none);
                continue;
            }
            let t = &input.model.threads[row.thread as usize].spans;
            let geom = LaneGeom {
                left: tracks.left(),
                width: tracks.width(),
                y0: row.y0,
                y1: row.y1,
                row: ri as u32,
            };
            let r = match row.kind {
                RowKind::Lane => frame_mesh::layout_lane(
                    &mut self.buf,
                    t,
                    row.depth as usize,
                    &self.window,
                    &geom,
                    &paint,
                ),
                RowKind::Insns | RowKind::Marks | RowKind::Cpu => {
                    self.buf.boxes.len()..self.buf.boxes.len()
                }
            };
            self.row_boxes.push(r);
            let segs = input
                .lines
                .and_then(|l| l.segs.get(row.thread as usize))
                .map_or(&[][..], |s| s.as_slice());
            let mesh = &mut self.buf.mesh;
            let r = match row.kind {
                RowKind::Lane => lines::layout_line_lane(
                    mesh,
                    &mut self.line_boxes,
                    segs,
                    row.depth,
                    &self.window,
                    &geom,
                ),
                RowKind::Insns => {
                    lines::layout_insn_row(mesh, &mut self.line_boxes, segs, &self.window, &geom)
                }
                RowKind::Marks | RowKind::Cpu => continue,
            };
            self.row_line_boxes.push(r);
        }
    }

    pub(super) fn draw_labels(&self, painter: &Painter, input: &TimelineInput) {
        let font = FontId::monospace(11.0);
        let char_w = painter.fonts_mut(|f| f.glyph_width(&font, 'x')).max(1.0);
        let clip = painter.clip_rect();
        let mut text = String::new();
        for b in &self.buf.boxes {
            let x0 = b.x0.max(clip.left());
            let x1 = b.x1.min(clip.right());
            let w = x1 - x0;
            if w < LABEL_MIN_PX {
                continue;
            }
            let row = &self.rows[b.row as usize];
            let fits = ((w - 6.0) / char_w).floor().max(0.0) as usize;
            if fits < 2 {
                continue;
            }
            text.clear();
            let bg = if b.count > 1 {
                let (calls, pseudo) = input.pseudo.split(row.thread, row.depth, b.first, b.count);
                text.push_str(&merged_label(calls, pseudo));
                MERGED
            } else {
                let t = &input.model.threads[row.thread as usize].spans;
                let f = t.lane(row.depth as usize)[b.first as usize].func();
                text.push_str(input.model.funcs.name(f));
                let st = &input.styles[f as usize];
                if input.search.is_some_and(|m| !m[f as usize]) {
                    st.dimmed
                } else {
                    st.fill
                }
            };
            let n = text.chars().count();
            if n > fits {
                // Cut at a char boundary and mark the cut.
                let cut = text
                    .char_indices()
                    .nth(fits - 1)
                    .map_or(text.len(), |(i, _)| i);
                text.truncate(cut);
                text.push('…');
            }
            painter.text(
                pos2(x0 + 3.0, (row.y0 + row.y1) / 2.0),
                Align2::LEFT_CENTER,
                &text,
                font.clone(),
                text_on(bg),
            );
        }
    }

    /// Labels of line spans and instructions that fit.
    pub(super) fn draw_line_labels(
        &self,
        painter: &Painter,
        input: &TimelineInput,
        disasm: &mut Disasm,
    ) {
        let Some(frame) = input.lines else {
            return;
        };
        let font = FontId::monospace(11.0);
        let char_w = painter.fonts_mut(|f| f.glyph_width(&font, 'x')).max(1.0);
        let clip = painter.clip_rect();
        let mut cands = [String::new(), String::new(), String::new()];
        for b in &self.line_boxes {
            let x0 = b.x0.max(clip.left());
            let x1 = b.x1.min(clip.right());
            let w = x1 - x0;
            if w < LABEL_MIN_PX {
                continue;
            }
            let fits = ((w - 6.0) / char_w).floor().max(0.0) as usize;
            if fits < 2 {
                continue;
            }
            let row = &self.rows[b.row as usize];
            let Some(seg) = frame.seg(row.thread, b.key) else {
                continue;
            };
            let mut italic = false;
            let bg;
            if b.count > 1 {
                let what = match row.kind {
                    RowKind::Lane => "lines",
                    _ => "instructions",
                };
                cands[0] = format!("{} {what}", b.count);
                cands[1] = b.count.to_string();
                cands[2].clear();
                bg = if row.kind == RowKind::Lane {
                    MERGED_LINES
                } else {
                    MERGED
                };
            } else if row.kind == RowKind::Lane {
                let Some(l) = seg.lines_at(row.depth).get(b.first as usize) else {
                    continue;
                };
                lines::line_labels(seg, l, &mut cands);
                let name = seg.frame(l).map_or("??", |f| &f.function);
                bg = lines::line_color(name, l.inlined());
                italic = l.inlined();
            } else {
                let Some(insn) = seg.insns.get(b.first as usize) else {
                    continue;
                };
                let dis = input
                    .source
                    .and_then(|s| disasm.get(s, seg.pid, insn.ip, insn.bitness));
                cands.iter_mut().for_each(String::clear);
                match &dis {
                    Some(d) => {
                        cands[0] = format!("{:x} {d}", insn.ip);
                        cands[1].push_str(d);
                        cands[2].push_str(d.split(' ').next().unwrap_or(d));
                    }
                    None => cands[0] = format!("{:x}", insn.ip),
                }
                bg = if insn.exact {
                    lines::INSN_EXACT
                } else {
                    lines::INSN_ESTIMATED
                };
            }
            let Some(text) = lines::pick_label(&mut cands, fits) else {
                continue;
            };
            let pos = pos2(x0 + 3.0, (row.y0 + 2.0 + row.y1) / 2.0);
            if italic {
                let mut job = egui::text::LayoutJob::default();
                job.append(
                    text,
                    0.0,
                    egui::TextFormat {
                        font_id: font.clone(),
                        color: text_on(bg),
                        italics: true,
                        ..Default::default()
                    },
                );
                let galley = painter.layout_job(job);
                let at = pos2(pos.x, pos.y - galley.size().y / 2.0);
                painter.galley(at, galley, text_on(bg));
            } else {
                painter.text(pos, Align2::LEFT_CENTER, text, font.clone(), text_on(bg));
            }
        }
    }

    pub(super) fn draw_selection(&self, painter: &Painter, input: &TimelineInput) {
        /// Outlines one frame draws: more would only cover each other.
        const MAX_OUTLINES: usize = 2000;
        // Brushed calls first, so the selection's outline stays on top.
        // They come in time order: those that start past the window end
        // the loop, and only those in it cost more than a comparison.
        let (from, to) = (self.window.start, self.window.end());
        let mut drawn = 0;
        for c in input.brushed {
            if c.start > to || drawn >= MAX_OUTLINES {
                break;
            }
            if c.start.saturating_add(c.duration) < from {
                continue;
            }
            drawn += 1;
            if let Some(r) = self.span_rect(input.model, c.span) {
                painter.rect_stroke(
                    r.expand(1.0),
                    0.0,
                    Stroke::new(1.5, Color32::from_rgb(0xff, 0x90, 0x60)),
                    StrokeKind::Outside,
                );
            }
        }
        if let Some(r) = input.selected.and_then(|s| self.span_rect(input.model, s)) {
            painter.rect_stroke(
                r.expand(1.0),
                0.0,
                Stroke::new(2.0, Color32::WHITE),
                StrokeKind::Outside,
            );
        }
        if let Some((l, s, e)) = input.selected_line {
            if let Some(r) = self.time_rect(l.thread, l.depth, s, e) {
                painter.rect_stroke(
                    r.expand(1.0),
                    0.0,
                    Stroke::new(2.0, Color32::from_rgb(0xff, 0xe0, 0x40)),
                    StrokeKind::Outside,
                );
            }
        }
    }

    pub(super) fn draw_range(&self, painter: &Painter, input: &TimelineInput, tracks: Rect) {
        let Some((a, b)) = self.dragging_range.or(input.range) else {
            return;
        };
        let x0 = self.screen_x(a).max(tracks.left() - 1.0);
        let x1 = self.screen_x(b).min(tracks.right() + 1.0);
        if x1 < tracks.left() || x0 > tracks.right() {
            return;
        }
        let r = Rect::from_x_y_ranges(x0..=x1.max(x0 + 1.0), tracks.y_range());
        painter.rect_filled(r, 0.0, Color32::from_rgba_unmultiplied(80, 140, 255, 40));
        painter.vline(x0, tracks.y_range(), Stroke::new(1.0, Color32::LIGHT_BLUE));
        painter.vline(x1, tracks.y_range(), Stroke::new(1.0, Color32::LIGHT_BLUE));
        painter.text(
            pos2((x0 + x1) / 2.0, tracks.top() + 2.0),
            Align2::CENTER_TOP,
            format_duration(b.saturating_sub(a)),
            FontId::proportional(12.0),
            Color32::LIGHT_BLUE,
        );
    }

    /// The marks rows of the threads and the CPU lanes on screen.
    pub(super) fn draw_marks_and_cpus(&self, painter: &Painter, input: &TimelineInput) {
        let model = input.model;
        for row in &self.rows {
            let g = self.row_geom(row);
            match row.kind {
                RowKind::Marks => {
                    let ti = row.thread as usize;
                    let end = Self::track_end(model, ti);
                    marks_row::draw(painter, &model.threads[ti].marks, end, model.cbr_mhz, &g);
                }
                RowKind::Cpu => {
                    cpu_lanes::draw(painter, model, &model.cpus[row.thread as usize], &g);
                }
                RowKind::Lane | RowKind::Insns => {}
            }
        }
    }

    /// The end of thread `ti`'s track: its last span's end, or its last
    /// mark.
    fn track_end(model: &Model, ti: usize) -> u64 {
        let t = &model.threads[ti];
        let last = t.marks.all().last().map_or(0, |m| m.time);
        t.spans.time_range().map_or(last, |r| r.1.max(last))
    }

    /// Thread headers: a clickable, labelled bar per thread that folds its
    /// lanes.
    pub(super) fn headers(&mut self, ui: &mut Ui, input: &TimelineInput, tracks: Rect) {
        let painter = ui.painter_at(tracks);
        let mut y = tracks.top() - self.scroll_y + Self::cpus_height(input);
        let mut toggle = None;
        for (ti, t) in input.model.threads.iter().enumerate() {
            let t = &t.spans;
            let r = Rect::from_min_size(pos2(tracks.left(), y), vec2(tracks.width(), HEADER_H));
            let collapsed = self.collapsed.contains(&t.tid);
            y += HEADER_H + self.track_height(input, ti);
            if r.bottom() < tracks.top() || r.top() > tracks.bottom() {
                continue;
            }
            let name = format!("{} {}", t.tid, t.comm);
            let resp = ui.interact(
                r.intersect(tracks),
                ui.scope_id().with(("ptscope-thread", t.tid)),
                Sense::click(),
            );
            resp.widget_info(|| WidgetInfo::selected(egui::Role::Button, true, !collapsed, &name));
            let bg = if resp.hovered() {
                ui.visuals().widgets.hovered.bg_fill
            } else {
                ui.visuals().faint_bg_color
            };
            painter.rect_filled(r, 0.0, bg);
            // A fold triangle, drawn (fonts may lack the arrow glyphs).
            let c = pos2(r.left() + 10.0, r.center().y);
            let tri = if collapsed {
                vec![
                    c + vec2(-3.0, -5.0),
                    c + vec2(4.0, 0.0),
                    c + vec2(-3.0, 5.0),
                ]
            } else {
                vec![
                    c + vec2(-5.0, -3.0),
                    c + vec2(5.0, -3.0),
                    c + vec2(0.0, 4.0),
                ]
            };
            let fg = ui.visuals().strong_text_color();
            painter.add(Shape::convex_polygon(tri, fg, Stroke::NONE));
            let title = painter.text(
                pos2(r.left() + 20.0, r.center().y),
                Align2::LEFT_CENTER,
                format!("{name}   ({} spans)", t.span_count()),
                FontId::proportional(13.0),
                fg,
            );
            // Why the track is (almost) empty, when the decoder knows.
            if let Some(why) = input.diagnoses.get(ti).and_then(|d| d.as_deref()) {
                let at = r
                    .intersect(tracks)
                    .with_min_x(title.right() + 16.0)
                    .intersect(r);
                if at.width() > 0.0 {
                    let color = ui.visuals().warn_fg_color;
                    let text = painter.with_clip_rect(at).text(
                        pos2(at.left(), r.center().y),
                        Align2::LEFT_CENTER,
                        why,
                        FontId::proportional(12.0),
                        color,
                    );
                    let note = ui
                        .interact(
                            text.intersect(at),
                            ui.scope_id().with(("ptscope-thread-why", t.tid)),
                            Sense::hover(),
                        )
                        .on_hover_text(why);
                    note.widget_info(|| WidgetInfo::labeled(egui::Role::Label, true, why));
                }
            }
            if resp.clicked() {
                toggle = Some((t.tid, !collapsed));
            }
        }
        if let Some((tid, c)) = toggle {
            self.set_collapsed(tid, c);
        }
    }

    pub(super) fn hover(&mut self, resp: &Response, input: &TimelineInput, disasm: &mut Disasm) {
        self.hover_time = None;
        let Some(pos) = resp.hover_pos() else {
            return;
        };
        let ppn = self.window.px_per_ns(self.width_px);
        self.hover_time = Some(
            self.window
                .time_at_px((pos.x - self.tracks_rect.left()) as f64, ppn),
        );
        if self.drag != Drag::None {
            return;
        }
        if self.hover_line(resp, input, pos, disasm) {
            return;
        }
        if self.hover_marks_or_cpu(resp, input, pos) {
            return;
        }
        let Some((row, b)) = self.hovered_box(pos) else {
            return;
        };
        let model = input.model;
        let t = &model.threads[row.thread as usize].spans;
        let d = row.depth as usize;
        let lane = t.lane(d);
        if b.count > 1 {
            let first = b.first as usize;
            let last = first + b.count as usize - 1;
            let covered = t.end(d, last) - lane[first].start;
            let (calls, pseudo) = input.pseudo.split(row.thread, row.depth, b.first, b.count);
            let list = !self.zoom_separates(covered);
            resp.clone().on_hover_ui_at_pointer(|ui| {
                ui.label(format!("{} merged", merged_label(calls, pseudo)));
                ui.label(format!("covering {}", format_duration(covered)));
                ui.weak(if list {
                    "Click to list them"
                } else {
                    "Click to zoom in"
                });
            });
            return;
        }
        let r = SpanRef::new(row.thread as usize, d, b.first as usize);
        let self_ns = match self.hover_self {
            Some((h, v)) if h == r => v,
            _ => {
                let v = self_time(t, d, b.first as usize);
                self.hover_self = Some((r, v));
                v
            }
        };
        let s = lane[b.first as usize];
        let f = model.funcs.get(s.func());
        let dur = t.duration(d, b.first as usize);
        resp.clone().on_hover_ui_at_pointer(|ui| {
            ui.strong(&f.name);
            let d = |v: u64| format_duration_in(self.unit, v as f64);
            ui.label(format!("Duration: {}", d(dur)));
            ui.label(format!("Self: {}", d(self_ns)));
            if !f.module.is_empty() {
                ui.label(format!("Module: {}", f.module));
            }
            if let Some(src) = &f.source {
                ui.label(format!("Source: {src}"));
            }
            if f.entry != 0 {
                ui.label(format!("Entry: {:#x}", f.entry));
            }
            if s.is_estimated() {
                ui.colored_label(Color32::YELLOW, estimate_note(s.flags()));
            }
            if let Some(note) = entry_note(s.flags()) {
                ui.label(note);
            }
        });
    }

    /// Tooltip of the line-detail box under the pointer; false if none.
    fn hover_line(
        &mut self,
        resp: &Response,
        input: &TimelineInput,
        pos: egui::Pos2,
        disasm: &mut Disasm,
    ) -> bool {
        let Some(frame) = input.lines else {
            return false;
        };
        let Some((row, b)) = self.hovered_line_box(pos) else {
            return false;
        };
        let Some(seg) = frame.seg(row.thread, b.key) else {
            return false;
        };
        if b.count > 1 {
            let covered = Self::line_box_times(frame, &row, &b).map_or(0, |(s, e)| e - s);
            let what = match row.kind {
                RowKind::Lane => "lines",
                _ => "instructions",
            };
            resp.clone()
                .on_hover_ui_at_pointer(|ui| lines::merged_tooltip(ui, what, b.count, covered));
            return true;
        }
        match row.kind {
            RowKind::Lane => {
                let Some(l) = seg.lines_at(row.depth).get(b.first as usize) else {
                    return false;
                };
                // The frame an inlined line is inlined into.
                let parent = l
                    .inlined()
                    .then(|| seg.chains.get(l.chain as usize))
                    .flatten()
                    .and_then(|c| c.get(l.level as usize - 1))
                    .map(|f| f.function.clone());
                resp.clone().on_hover_ui_at_pointer(|ui| {
                    lines::line_tooltip(ui, seg, l, parent.as_deref());
                });
            }
            RowKind::Insns => {
                let Some(insn) = seg.insns.get(b.first as usize) else {
                    return false;
                };
                let dis = input
                    .source
                    .and_then(|s| disasm.get(s, seg.pid, insn.ip, insn.bitness));
                let origin = self.bounds.map_or(0, |b| b.0);
                let mode = self.mode;
                resp.clone().on_hover_ui_at_pointer(|ui| {
                    lines::insn_tooltip(ui, insn, dis.as_deref(), origin, mode);
                });
            }
            RowKind::Marks | RowKind::Cpu => return false,
        }
        true
    }

    /// The tooltip of a marks row or CPU lane under the pointer; false if
    /// the pointer is on neither.
    fn hover_marks_or_cpu(&self, resp: &Response, input: &TimelineInput, pos: egui::Pos2) -> bool {
        let Some(row) = self.row_at(pos) else {
            return false;
        };
        let g = self.row_geom(&row);
        let model = input.model;
        let text = match row.kind {
            RowKind::Marks => {
                let ti = row.thread as usize;
                let end = Self::track_end(model, ti);
                marks_row::hover(&model.threads[ti].marks, end, model.cbr_mhz, &g, pos.x)
            }
            RowKind::Cpu => {
                let cpu = &model.cpus[row.thread as usize];
                cpu_lanes::hit(cpu, &g, pos.x)
                    .map(|s| cpu_lanes::describe(model, cpu, s))
                    .into_iter()
                    .collect()
            }
            RowKind::Lane | RowKind::Insns => return false,
        };
        if !text.is_empty() {
            resp.clone().on_hover_ui_at_pointer(|ui| {
                for (i, l) in text.iter().enumerate() {
                    if i == 0 {
                        ui.strong(l);
                    } else {
                        ui.label(l);
                    }
                }
            });
        }
        true
    }

    pub(super) fn draw_axis(&self, ui: &mut Ui, rect: Rect) {
        let painter = ui.painter_at(rect);
        painter.rect_filled(rect, 0.0, ui.visuals().faint_bg_color);
        let origin = self.bounds.map_or(0, |b| b.0);
        let stroke = Stroke::new(1.0, ui.visuals().weak_text_color());
        for t in axis::ticks_in(self.unit, &self.window, rect.width(), origin, self.mode) {
            let x = rect.left() + t.x;
            painter.vline(x, rect.bottom() - 6.0..=rect.bottom(), stroke);
            painter.text(
                pos2(x + 3.0, rect.top() + 2.0),
                Align2::LEFT_TOP,
                t.label,
                FontId::proportional(11.0),
                ui.visuals().text_color(),
            );
        }
        // Window width at the right edge.
        painter.text(
            pos2(rect.right() - 4.0, rect.top() + 2.0),
            Align2::RIGHT_TOP,
            format!("view {}", format_duration_in(self.unit, self.window.width)),
            FontId::proportional(11.0),
            ui.visuals().weak_text_color(),
        );
        if let Some(t) = self.hover_time {
            let x = self.screen_x(t);
            painter.vline(x, rect.y_range(), Stroke::new(1.0, Color32::YELLOW));
        }
    }
}

/// What the estimate flags of a span mean, for the tooltip.
pub(crate) fn estimate_note(flags: u32) -> String {
    let mut parts = Vec::new();
    if flags & flag::START_ESTIMATED != 0 {
        parts.push("start estimated");
    }
    if flags & flag::END_ESTIMATED != 0 {
        parts.push("end estimated");
    }
    if flags & flag::INFERRED_START != 0 {
        parts.push("began before the trace");
    }
    if flags & flag::OPEN_END != 0 {
        parts.push("still running at the end");
    }
    format!("≈ {}", parts.join(", "))
}

/// How a span was entered, when not by a call. Not an estimate: the start
/// is exact.
pub(crate) fn entry_note(flags: u32) -> Option<&'static str> {
    (flags & flag::MID_ENTRY != 0).then_some("entered mid-function (jump)")
}

#[cfg(test)]
mod tests {
    use ptscope_model::ThreadModel;
    use ptscope_model::ThreadSpans;
    use ptscope_model::{Mark, MarkKind, Marks};

    use super::*;

    #[test]
    fn notes_name_each_flag_in_order() {
        assert_eq!(
            estimate_note(flag::START_ESTIMATED | flag::OPEN_END),
            "≈ start estimated, still running at the end"
        );
        assert_eq!(
            estimate_note(flag::END_ESTIMATED | flag::INFERRED_START),
            "≈ end estimated, began before the trace"
        );
        assert_eq!(
            entry_note(flag::MID_ENTRY),
            Some("entered mid-function (jump)")
        );
        assert_eq!(entry_note(flag::ESTIMATES), None);
    }

    #[test]
    fn a_track_ends_at_its_last_span_or_mark() {
        let thread = |end: u64, mark: Option<u64>| {
            let mut spans = ThreadSpans::new(1, 1, "t".into());
            spans.push(0, 100, end, 0, 0);
            let mut t = ThreadModel::from_spans(spans);
            if let Some(time) = mark {
                t.marks = Marks::new(vec![Mark {
                    time,
                    ip: None,
                    kind: MarkKind::Exstop,
                }]);
            }
            t
        };
        let model = Model {
            threads: vec![
                thread(200, None),
                thread(200, Some(500)),
                thread(900, Some(500)),
            ],
            ..Default::default()
        };
        assert_eq!(Timeline::track_end(&model, 0), 200);
        assert_eq!(Timeline::track_end(&model, 1), 500);
        assert_eq!(Timeline::track_end(&model, 2), 900);
    }
}
