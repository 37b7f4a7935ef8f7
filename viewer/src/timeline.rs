//! The timeline widget: it draws the time axis and one collapsible track
//! per thread, with a lane per call depth, and handles navigation (zoom,
//! pan, fit), hover, selection and range drags.
//!
//! A frame's span boxes are built by [`crate::frame_mesh`] into one mesh,
//! and only the boxes wide enough for a label get a text shape. Line detail
//! ([`crate::line_detail`]) goes into the same mesh: line spans in the lanes
//! under their function spans, instructions in a row under the track. The
//! Above the threads, a per-CPU trace gets a lane per CPU
//! ([`crate::cpu_lanes`]); under a thread's header, its marks (PTWRITE,
//! frequency, sleeps) get a row ([`crate::marks_row`]). The
//! widget reports what the user did as [`TimelineEvent`]s and leaves acting
//! on them to the view ([`crate::view`]), which owns the selection and the
//! panels.

use std::collections::HashSet;
use std::ops::Range;

use egui::{
    pos2, vec2, Align2, Color32, CursorIcon, FontId, Key, Painter, PointerButton, Rect, Response,
    Sense, Shape, Stroke, StrokeKind, Ui, WidgetInfo,
};
use ptscope_decoder::fine::LineSource;
use ptscope_decoder::model::Model;
use ptscope_decoder::store::flag;

use crate::axis::{self, format_duration, format_duration_in, TimeMode, TimeUnit};
use crate::color::{text_on, FuncStyle, MERGED};
use crate::cpu_lanes;
use crate::frame_mesh::{self, DrawnBox, FrameBuf, LaneGeom, Paint};
use crate::line_detail::{
    self as lines, Disasm, InsnRef, LineBox, LineFrame, LineRef, MERGED_LINES,
};
use crate::marks_row::{self, RowGeom, MARKS_H};
use crate::spans::{merged_label, self_time, PseudoIndex, SpanRef};
use crate::time_window::{max_width_for, TimeWindow, MIN_WIDTH_NS};

/// Height of the time axis.
pub const AXIS_H: f32 = 22.0;
/// Height of a thread's header row.
pub const HEADER_H: f32 = 20.0;
/// Height of one depth lane.
pub const LANE_H: f32 = 18.0;
/// Boxes narrower than this get no label.
const LABEL_MIN_PX: f32 = 18.0;
/// Zoom speed of W/S, per second held.
const KEY_ZOOM_PER_S: f64 = 4.0;
/// Pan speed of A/D, in window widths per second held.
const KEY_PAN_PER_S: f64 = 0.8;

/// What a row on screen shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// The spans (and line spans) of one depth.
    Lane,
    /// The thread's instructions, under its deepest lane.
    Insns,
    /// The thread's marks ([`crate::marks_row`]), under its header.
    Marks,
    /// A CPU's lane ([`crate::cpu_lanes`]), above the threads: `thread`
    /// is its index in the model's CPUs.
    Cpu,
}

/// One lane on screen this frame.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub thread: u32,
    pub depth: u32,
    pub kind: RowKind,
    pub y0: f32,
    pub y1: f32,
}

/// What the user did in the timeline this frame.
#[derive(Clone, Debug, PartialEq)]
pub enum TimelineEvent {
    /// A span was clicked (`None`: empty space).
    Select(Option<SpanRef>),
    /// A shift-drag finished over `[from, to)`.
    Range(u64, u64),
    /// A line span was clicked.
    SelectLine(LineRef),
    /// An instruction was clicked.
    SelectInsn(InsnRef),
    /// A merged run of spans that no zoom can take apart (zero-length
    /// spans, or at the zoom floor) was clicked: list its spans.
    SelectGroup(SpanGroup),
}

/// A run of spans of one lane that the timeline draws as one box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanGroup {
    pub thread: u32,
    pub depth: u32,
    /// Index of its first span in the lane, and how many it holds.
    pub first: u32,
    pub count: u32,
}

impl SpanGroup {
    /// Its spans, in lane order.
    pub fn spans(&self) -> impl Iterator<Item = SpanRef> + '_ {
        (self.first..self.first + self.count).map(|i| SpanRef {
            thread: self.thread,
            depth: self.depth,
            index: i,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Drag {
    None,
    Pan,
    /// Range selection from this time.
    Range(u64),
}

/// What the timeline draws with this frame.
pub struct TimelineInput<'a> {
    pub model: &'a Model,
    pub styles: &'a [FuncStyle],
    pub search: Option<&'a [bool]>,
    pub selected: Option<SpanRef>,
    pub range: Option<(u64, u64)>,
    /// Line detail ready this frame, if the window is narrow enough.
    pub lines: Option<&'a LineFrame>,
    /// The selected line span and its times.
    pub selected_line: Option<(LineRef, u64, u64)>,
    /// Where instructions are disassembled from.
    pub source: Option<&'a LineSource>,
    /// Which spans are pseudo-spans, to count the calls of merged boxes.
    pub pseudo: &'a PseudoIndex,
    /// Per thread, why it decoded to almost nothing, if it did
    /// ([`ptscope_decoder::model::ThreadModel::diagnosis`]).
    pub diagnoses: &'a [Option<String>],
    /// Calls brushed on the Details panel's histogram, in time order:
    /// outlined.
    pub brushed: &'a [ptscope_decoder::calls::Call],
}

/// Navigation state and per-frame buffers of the timeline.
pub struct Timeline {
    pub window: TimeWindow,
    pub mode: TimeMode,
    /// What times count: ns, or instructions for a trace without timing.
    pub unit: TimeUnit,
    /// Trace bounds, `[first start, last end]`.
    pub bounds: Option<(u64, u64)>,
    /// Collapsed threads, by tid (stable across model updates).
    collapsed: HashSet<i32>,
    scroll_y: f32,
    buf: FrameBuf,
    rows: Vec<Row>,
    /// Boxes of each row in `buf.boxes`.
    row_boxes: Vec<Range<usize>>,
    /// Line spans and instructions drawn this frame, and each row's.
    line_boxes: Vec<LineBox>,
    row_line_boxes: Vec<Range<usize>>,
    drag: Drag,
    /// Range being dragged out, for drawing.
    dragging_range: Option<(u64, u64)>,
    /// Width of the tracks last frame, for programmatic zooms.
    width_px: f32,
    /// Screen rect of the tracks last frame.
    tracks_rect: Rect,
    /// Self time of the hovered span, computed once per span.
    hover_self: Option<(SpanRef, u64)>,
    /// Where the pointer is in time, for the axis readout.
    hover_time: Option<u64>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            window: TimeWindow::new(0, 1_000_000.0),
            mode: TimeMode::Relative,
            unit: TimeUnit::Ns,
            bounds: None,
            collapsed: HashSet::new(),
            scroll_y: 0.0,
            buf: FrameBuf::default(),
            rows: Vec::new(),
            row_boxes: Vec::new(),
            line_boxes: Vec::new(),
            row_line_boxes: Vec::new(),
            drag: Drag::None,
            dragging_range: None,
            width_px: 1000.0,
            tracks_rect: Rect::NOTHING,
            hover_self: None,
            hover_time: None,
        }
    }
}

impl Timeline {
    /// Sets the trace bounds; the first time, shows all of it.
    pub fn set_bounds(&mut self, bounds: Option<(u64, u64)>) {
        let first = self.bounds.is_none();
        self.bounds = bounds;
        if let Some((lo, hi)) = bounds {
            if first {
                self.window = TimeWindow::fit(lo, hi);
            }
        }
    }

    fn max_width(&self) -> f64 {
        self.bounds
            .map_or(f64::MAX, |(lo, hi)| max_width_for(lo, hi))
    }

    fn clamp(&mut self) {
        if let Some((lo, hi)) = self.bounds {
            self.window.clamp_to(lo, hi);
        }
    }

    /// Zooms by `factor` (> 1: in) around `anchor` (0 left .. 1 right).
    pub fn zoom(&mut self, factor: f64, anchor: f64) {
        let max = self.max_width();
        self.window.zoom(factor, anchor, max);
        self.clamp();
    }

    /// Pans by `ns` (positive: later).
    pub fn pan_ns(&mut self, ns: f64) {
        self.window.shift(ns);
        self.clamp();
    }

    /// Shows `[from, to)` with a margin.
    pub fn fit(&mut self, from: u64, to: u64) {
        self.window = TimeWindow::fit(from, to);
        self.clamp();
    }

    /// Shows the whole trace.
    pub fn fit_all(&mut self) {
        if let Some((lo, hi)) = self.bounds {
            self.fit(lo, hi);
        }
    }

    pub fn is_collapsed(&self, tid: i32) -> bool {
        self.collapsed.contains(&tid)
    }

    pub fn set_collapsed(&mut self, tid: i32, collapsed: bool) {
        if collapsed {
            self.collapsed.insert(tid);
        } else {
            self.collapsed.remove(&tid);
        }
    }

    /// The screen rect of span `r` as drawn last frame (its visible part),
    /// if its lane was on screen.
    pub fn span_rect(&self, model: &Model, r: SpanRef) -> Option<Rect> {
        let (s, e) = r.times(model)?;
        self.time_rect(r.thread, r.depth, s, e)
    }

    /// The screen rect of `[s, e)` in lane `depth` of thread `thread` as
    /// of last frame, if the lane was on screen.
    pub fn time_rect(&self, thread: u32, depth: u32, s: u64, e: u64) -> Option<Rect> {
        let row = self
            .rows
            .iter()
            .find(|w| w.thread == thread && w.depth == depth && w.kind == RowKind::Lane)?;
        let ppn = self.window.px_per_ns(self.width_px);
        let left = self.tracks_rect.left();
        let right = self.tracks_rect.right();
        let x0 = (self.window.x(s, ppn).max(0.0) as f32 + left).min(right - 1.0);
        let x1 = (self.window.x(e, ppn) as f32 + left)
            .min(right)
            .max(x0 + 1.0);
        Some(Rect::from_x_y_ranges(x0..=x1, row.y0..=row.y1))
    }

    /// The screen x of time `t` last frame.
    pub fn screen_x(&self, t: u64) -> f32 {
        let ppn = self.window.px_per_ns(self.width_px);
        self.tracks_rect.left() + self.window.x(t, ppn) as f32
    }

    /// Line spans and instructions drawn last frame, with their rows.
    pub fn line_boxes(&self) -> impl Iterator<Item = (Row, &LineBox)> + '_ {
        self.line_boxes
            .iter()
            .map(|b| (self.rows[b.row as usize], b))
    }

    /// Width of the tracks last frame, px.
    pub fn width_px(&self) -> f32 {
        self.width_px
    }

    /// Draws the axis and the tracks in the rest of `ui`.
    pub fn ui(
        &mut self,
        ui: &mut Ui,
        input: &TimelineInput,
        disasm: &mut Disasm,
    ) -> Vec<TimelineEvent> {
        let mut events = Vec::new();
        let full = ui.available_rect_before_wrap();
        ui.allocate_rect(full, Sense::hover());
        let axis_rect = Rect::from_min_size(full.min, vec2(full.width(), AXIS_H));
        let tracks = Rect::from_min_max(pos2(full.left(), axis_rect.bottom()), full.max);
        self.tracks_rect = tracks;
        self.width_px = tracks.width().max(1.0);

        let id = ui.scope_id().with("ptscope-tracks");
        let resp = ui.interact(tracks, id, Sense::click_and_drag());
        resp.widget_info(|| WidgetInfo::labeled(egui::Role::Canvas, true, "Timeline tracks"));
        self.navigate(ui, &resp, input, &mut events);

        // Layout of rows: headers and lanes, scrolled.
        let content_h = self.content_height(input);
        let max_scroll = (content_h - tracks.height()).max(0.0);
        self.scroll_y = self.scroll_y.clamp(0.0, max_scroll);

        let painter = ui.painter_at(tracks);
        painter.rect_filled(tracks, 0.0, ui.visuals().extreme_bg_color);
        self.build_rows(input, tracks);
        self.layout_spans(input, tracks);
        painter.add(Shape::mesh(self.buf.take_mesh()));
        self.draw_labels(&painter, input);
        self.draw_marks_and_cpus(&painter, input);
        self.draw_line_labels(&painter, input, disasm);
        self.draw_selection(&painter, input);
        self.draw_range(&painter, input, tracks);
        self.headers(ui, input, tracks);
        self.hover(&resp, input, disasm);
        self.draw_axis(ui, axis_rect);
        events
    }

    /// Lanes of thread `ti` (with those its line spans need) and whether
    /// it shows an instruction row; none when folded.
    fn track(&self, input: &TimelineInput, ti: usize) -> (usize, bool) {
        let t = &input.model.threads[ti].spans;
        if self.collapsed.contains(&t.tid) {
            return (0, false);
        }
        let lines = input.lines;
        let lanes = t.depth().max(lines.map_or(0, |l| l.lanes(ti) as usize));
        (lanes, lines.is_some_and(|l| l.has_insn_row(ti)))
    }

    /// Whether thread `ti` shows a marks row: its trace holds marks and
    /// it is not folded.
    fn marks_row(&self, input: &TimelineInput, ti: usize) -> bool {
        let t = &input.model.threads[ti];
        !t.marks.is_empty() && !self.collapsed.contains(&t.spans.tid)
    }

    fn track_height(&self, input: &TimelineInput, ti: usize) -> f32 {
        let (lanes, insns) = self.track(input, ti);
        let marks = if self.marks_row(input, ti) {
            MARKS_H
        } else {
            0.0
        };
        (lanes + insns as usize) as f32 * LANE_H + marks
    }

    /// Height of the CPU lanes above the threads.
    fn cpus_height(input: &TimelineInput) -> f32 {
        input.model.cpus.len() as f32 * LANE_H
    }

    fn content_height(&self, input: &TimelineInput) -> f32 {
        Self::cpus_height(input)
            + (0..input.model.threads.len())
                .map(|ti| HEADER_H + self.track_height(input, ti))
                .sum::<f32>()
    }

    /// The rows that intersect `tracks` vertically.
    fn build_rows(&mut self, input: &TimelineInput, tracks: Rect) {
        self.rows.clear();
        let mut y = tracks.top() - self.scroll_y;
        for ci in 0..input.model.cpus.len() {
            let (y0, y1) = (y, y + LANE_H);
            y = y1;
            if y1 >= tracks.top() && y0 <= tracks.bottom() {
                self.rows.push(Row {
                    thread: ci as u32,
                    depth: 0,
                    kind: RowKind::Cpu,
                    y0,
                    y1: y1 - 1.0,
                });
            }
        }
        for ti in 0..input.model.threads.len() {
            y += HEADER_H;
            if self.marks_row(input, ti) {
                let (y0, y1) = (y, y + MARKS_H);
                y = y1;
                if y1 >= tracks.top() && y0 <= tracks.bottom() {
                    self.rows.push(Row {
                        thread: ti as u32,
                        depth: 0,
                        kind: RowKind::Marks,
                        y0,
                        y1: y1 - 1.0,
                    });
                }
            }
            let (lanes, insns) = self.track(input, ti);
            let kinds = (0..lanes)
                .map(|d| (d, RowKind::Lane))
                .chain(insns.then_some((lanes, RowKind::Insns)));
            for (d, kind) in kinds {
                let (y0, y1) = (y, y + LANE_H);
                y = y1;
                if y1 < tracks.top() || y0 > tracks.bottom() {
                    continue;
                }
                self.rows.push(Row {
                    thread: ti as u32,
                    depth: d as u32,
                    kind,
                    y0,
                    y1: y1 - 1.0,
                });
            }
            if y > tracks.bottom() {
                break;
            }
        }
    }

    fn layout_spans(&mut self, input: &TimelineInput, tracks: Rect) {
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

    /// Labels of line spans and instructions that fit.
    fn draw_line_labels(&self, painter: &Painter, input: &TimelineInput, disasm: &mut Disasm) {
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

    fn draw_labels(&self, painter: &Painter, input: &TimelineInput) {
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

    fn draw_selection(&self, painter: &Painter, input: &TimelineInput) {
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

    fn draw_range(&self, painter: &Painter, input: &TimelineInput, tracks: Rect) {
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

    /// Where row `row` is drawn, for the marks and CPU rows.
    fn row_geom(&self, row: &Row) -> RowGeom<'_> {
        RowGeom {
            window: &self.window,
            px_per_ns: self.window.px_per_ns(self.width_px),
            left: self.tracks_rect.left(),
            right: self.tracks_rect.right(),
            y0: row.y0,
            y1: row.y1,
        }
    }

    /// The end of thread `ti`'s track: its last span's end, or its last
    /// mark.
    fn track_end(model: &Model, ti: usize) -> u64 {
        let t = &model.threads[ti];
        let last = t.marks.all().last().map_or(0, |m| m.time);
        t.spans.time_range().map_or(last, |r| r.1.max(last))
    }

    /// The marks rows of the threads and the CPU lanes on screen.
    fn draw_marks_and_cpus(&self, painter: &Painter, input: &TimelineInput) {
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

    /// The row under `pos`, if any.
    fn row_at(&self, pos: egui::Pos2) -> Option<Row> {
        self.rows
            .iter()
            .find(|r| pos.y >= r.y0 && pos.y <= r.y1 + 1.0)
            .copied()
    }

    /// A click on a CPU lane's slice: the view goes to that thread (its
    /// track scrolled to the top, unfolded) over the slice's time. False
    /// if the click was not on a slice.
    fn click_cpu(&mut self, pos: Option<egui::Pos2>, input: &TimelineInput) -> bool {
        let Some(row) = pos
            .and_then(|p| self.row_at(p))
            .filter(|r| r.kind == RowKind::Cpu)
        else {
            return false;
        };
        let model = input.model;
        let cpu = &model.cpus[row.thread as usize];
        let Some(slice) = cpu_lanes::hit(cpu, &self.row_geom(&row), pos.unwrap().x).copied() else {
            return true;
        };
        if let Some(ti) = model.threads.iter().position(|t| t.spans.tid == slice.tid) {
            self.set_collapsed(slice.tid, false);
            let above: f32 = (0..ti)
                .map(|i| HEADER_H + self.track_height(input, i))
                .sum();
            self.scroll_y = Self::cpus_height(input) + above;
        }
        self.fit(slice.start, slice.end);
        true
    }

    /// Thread headers: a clickable, labelled bar per thread that folds its
    /// lanes.
    fn headers(&mut self, ui: &mut Ui, input: &TimelineInput, tracks: Rect) {
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

    /// The line-detail box under the pointer, as (row, box).
    fn hovered_line_box(&self, pos: egui::Pos2) -> Option<(Row, LineBox)> {
        let ri = self
            .rows
            .iter()
            .position(|r| pos.y >= r.y0 && pos.y <= r.y1 + 1.0)?;
        let boxes = &self.line_boxes[self.row_line_boxes.get(ri)?.clone()];
        let bi = lines::hit(boxes, pos.x)?;
        Some((self.rows[ri], boxes[bi]))
    }

    /// Time covered by a line-detail box.
    fn line_box_times(frame: &LineFrame, row: &Row, b: &LineBox) -> Option<(u64, u64)> {
        let seg = frame.seg(row.thread, b.key)?;
        let (a, z) = (b.first as usize, (b.first + b.count) as usize - 1);
        match row.kind {
            RowKind::Lane => {
                let l = seg.lines_at(row.depth);
                Some((l.get(a)?.start, l.get(z)?.end))
            }
            RowKind::Insns => Some((seg.insns.get(a)?.start, seg.insns.get(z)?.end)),
            RowKind::Marks | RowKind::Cpu => None,
        }
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

    /// The box under the pointer, as (row, box).
    fn hovered_box(&self, pos: egui::Pos2) -> Option<(Row, DrawnBox)> {
        let ri = self
            .rows
            .iter()
            .position(|r| pos.y >= r.y0 && pos.y <= r.y1 + 1.0)?;
        let boxes = &self.buf.boxes[self.row_boxes.get(ri)?.clone()];
        let bi = frame_mesh::hit(boxes, pos.x)?;
        Some((self.rows[ri], boxes[bi]))
    }

    fn hover(&mut self, resp: &Response, input: &TimelineInput, disasm: &mut Disasm) {
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

    fn draw_axis(&self, ui: &mut Ui, rect: Rect) {
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

    /// A click on line detail: selects a line or instruction, or zooms
    /// into a merged run (`Some(None)`). `None` if it missed line detail.
    fn click_line(
        &mut self,
        pos: Option<egui::Pos2>,
        double: bool,
        input: &TimelineInput,
    ) -> Option<Option<TimelineEvent>> {
        let frame = input.lines?;
        let (row, b) = self.hovered_line_box(pos?)?;
        if b.count > 1 || double {
            if let Some((s, e)) = Self::line_box_times(frame, &row, &b) {
                self.fit(s, e);
            }
            if b.count > 1 {
                return Some(None);
            }
        }
        let key = b.key;
        Some(Some(match row.kind {
            RowKind::Lane => TimelineEvent::SelectLine(LineRef {
                thread: row.thread,
                key,
                depth: row.depth,
                index: b.first,
            }),
            RowKind::Insns => TimelineEvent::SelectInsn(InsnRef {
                thread: row.thread,
                key,
                index: b.first,
            }),
            RowKind::Marks | RowKind::Cpu => return None,
        }))
    }

    /// Whether zooming in can take apart a merged run covering
    /// `covered` ns: not when the view is at the zoom floor already, nor
    /// when the run is narrower than two merged boxes even there (spans
    /// of zero length, or all within a few ns).
    fn zoom_separates(&self, covered: u64) -> bool {
        let floor_ppn = self.width_px as f64 / MIN_WIDTH_NS;
        self.window.width > MIN_WIDTH_NS * 1.01
            && covered as f64 * floor_ppn >= 2.0 * frame_mesh::MERGE_PX
    }

    /// Zoom, pan, fit, clicks and range drags.
    fn navigate(
        &mut self,
        ui: &Ui,
        resp: &Response,
        input: &TimelineInput,
        events: &mut Vec<TimelineEvent>,
    ) {
        let ctx = ui.ctx().clone();
        let tracks = self.tracks_rect;
        let ppn = self.window.px_per_ns(self.width_px);
        let anchor = |p: Option<egui::Pos2>| {
            p.map_or(0.5, |p| ((p.x - tracks.left()) / tracks.width()) as f64)
        };
        let hover = resp.hover_pos();

        // Wheel, pinch and trackpad.
        if hover.is_some() {
            let (zoom, scroll) = ctx.input(|i| (i.zoom_delta() as f64, i.smooth_scroll_delta()));
            if zoom != 1.0 {
                self.zoom(zoom, anchor(hover));
            }
            if scroll.x != 0.0 {
                self.pan_ns(-scroll.x as f64 / ppn);
            }
            if scroll.y != 0.0 {
                let content = self.content_height(input);
                if content > tracks.height() {
                    self.scroll_y -= scroll.y;
                } else {
                    self.pan_ns(-scroll.y as f64 / ppn);
                }
            }
        }

        // Keys, unless a text box has them.
        if !ctx.egui_wants_keyboard_input() {
            let (dt, zin, zout, left, right, fit_all, esc) = ctx.input(|i| {
                let held = |k: Key| i.key_down(k) || i.key_pressed(k);
                (
                    (i.stable_dt as f64).clamp(1.0 / 120.0, 0.1),
                    held(Key::W),
                    held(Key::S),
                    held(Key::A),
                    held(Key::D),
                    i.key_pressed(Key::Num0) || i.key_pressed(Key::Home),
                    i.key_pressed(Key::Escape),
                )
            });
            let at = anchor(hover);
            if zin {
                self.zoom((KEY_ZOOM_PER_S * dt).exp(), at);
            }
            if zout {
                self.zoom((-KEY_ZOOM_PER_S * dt).exp(), at);
            }
            if left {
                self.pan_ns(-self.window.width * KEY_PAN_PER_S * dt);
            }
            if right {
                self.pan_ns(self.window.width * KEY_PAN_PER_S * dt);
            }
            if fit_all {
                self.fit_all();
            }
            if esc {
                events.push(TimelineEvent::Select(None));
            }
            if zin || zout || left || right {
                ctx.request_repaint();
            }
        }

        // Drags: pan, or shift-drag a range.
        if resp.drag_started_by(PointerButton::Primary) {
            let shift = ctx.input(|i| i.modifiers.shift);
            self.drag = match (shift, resp.interact_pointer_pos()) {
                (true, Some(p)) => {
                    let t = self.window.time_at_px((p.x - tracks.left()) as f64, ppn);
                    Drag::Range(t)
                }
                _ => Drag::Pan,
            };
        }
        if resp.dragged_by(PointerButton::Primary) {
            match self.drag {
                Drag::Pan => {
                    let d = resp.drag_delta();
                    self.pan_ns(-d.x as f64 / ppn);
                    self.scroll_y -= d.y;
                    ctx.set_cursor_icon(CursorIcon::Grabbing);
                }
                Drag::Range(a) => {
                    if let Some(p) = resp.interact_pointer_pos() {
                        let b = self.window.time_at_px((p.x - tracks.left()) as f64, ppn);
                        self.dragging_range = Some((a.min(b), a.max(b)));
                    }
                }
                Drag::None => {}
            }
        }
        if resp.drag_stopped() {
            if let Some((a, b)) = self.dragging_range.take() {
                if b > a {
                    events.push(TimelineEvent::Range(a, b));
                }
            }
            self.drag = Drag::None;
        }

        // Clicks: select, zoom into merged boxes, fit on double-click.
        if resp.clicked() || resp.double_clicked() {
            let pos = resp.interact_pointer_pos();
            if self.click_cpu(pos, input) {
                return;
            }
            if let Some(ev) = self.click_line(pos, resp.double_clicked(), input) {
                events.extend(ev);
                return;
            }
            let hit = pos.and_then(|p| self.hovered_box(p));
            match hit {
                Some((row, b)) if b.count > 1 => {
                    let t = &input.model.threads[row.thread as usize].spans;
                    let d = row.depth as usize;
                    let first = b.first as usize;
                    let last = first + b.count as usize - 1;
                    let (s, e) = (t.lane(d)[first].start, t.end(d, last));
                    if self.zoom_separates(e - s) {
                        self.fit(s, e);
                    } else {
                        events.push(TimelineEvent::SelectGroup(SpanGroup {
                            thread: row.thread,
                            depth: row.depth,
                            first: b.first,
                            count: b.count,
                        }));
                    }
                }
                Some((row, b)) => {
                    let r = SpanRef::new(row.thread as usize, row.depth as usize, b.first as usize);
                    if resp.double_clicked() {
                        if let Some((s, e)) = r.times(input.model) {
                            self.fit(s, e);
                        }
                    }
                    events.push(TimelineEvent::Select(Some(r)));
                }
                None if resp.clicked() => events.push(TimelineEvent::Select(None)),
                None => {}
            }
        }
    }
}

/// What the estimate flags of a span mean, for the tooltip.
pub fn estimate_note(flags: u32) -> String {
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
pub fn entry_note(flags: u32) -> Option<&'static str> {
    (flags & flag::MID_ENTRY != 0).then_some("entered mid-function (jump)")
}
