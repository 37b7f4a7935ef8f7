//! The timeline widget: it draws the time axis and one collapsible track
//! per thread, with a lane per call depth, and handles navigation (zoom,
//! pan, fit), hover, selection and range drags.
//!
//! A frame's span boxes are built by [`frame_mesh`] into one mesh,
//! and only the boxes wide enough for a label get a text shape. Line detail
//! ([`line_detail`]) goes into the same mesh: line spans in the lanes
//! under their function spans, instructions in a row under the track.
//! Above the threads, a per-CPU trace gets a lane per CPU
//! ([`cpu_lanes`]); under a thread's header, its marks (PTWRITE,
//! frequency, sleeps) get a row ([`marks_row`]). The
//! widget reports what the user did as [`TimelineEvent`]s and leaves acting
//! on them to the view ([`crate::view`]), which owns the selection and the
//! panels.
//!
//! This file holds the public types and [`Timeline::ui`], which runs a
//! frame through the parts:
//!
//! - `state.rs` holds what the timeline knows apart from drawing: the
//!   window's zoom, pan and fit within the trace, the folded threads, and
//!   the hit tests that find last frame's row and box under a point.
//! - `rows.rs` lays out the rows, which a thread has and how tall they are,
//!   and places those on screen.
//! - `draw.rs` paints the frame: the mesh of boxes, labels, selection,
//!   thread headers, the axis and the tooltips.
//! - `input.rs` turns the mouse and the keys into navigation and
//!   [`TimelineEvent`]s.
//!
//! And, public, what the timeline is built from (the tabs and the overview
//! use some of it too): [`frame_mesh`], [`line_detail`], [`marks_row`],
//! [`cpu_lanes`], [`overview`], [`time_window`] and [`axis`].

use std::collections::HashSet;
use std::ops::Range;

use egui::{pos2, vec2, Rect, Sense, Shape, Ui, WidgetInfo};
use ptscope_model::DetailSource;
use ptscope_model::Model;

use crate::color::FuncStyle;
use crate::spans::{PseudoIndex, SpanRef};
use crate::timeline::axis::{TimeMode, TimeUnit};
use crate::timeline::frame_mesh::FrameBuf;
use crate::timeline::line_detail::{Disasm, InsnRef, LineBox, LineFrame, LineRef};
use crate::timeline::time_window::TimeWindow;

pub(crate) mod axis;
pub(crate) mod cpu_lanes;
mod draw;
pub(crate) mod frame_mesh;
mod input;
pub(crate) mod line_detail;
pub(crate) mod marks_row;
pub(crate) mod overview;
mod rows;
mod state;
pub(crate) mod time_window;

pub(crate) use draw::{entry_note, estimate_note};
use input::Drag;

/// Height of the time axis.
pub(crate) const AXIS_H: f32 = 22.0;
/// Height of a thread's header row.
pub(crate) const HEADER_H: f32 = 20.0;
/// Height of one depth lane.
pub const LANE_H: f32 = 18.0;

/// What a row on screen shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKind {
    /// The spans (and line spans) of one depth.
    Lane,
    /// The thread's instructions, under its deepest lane.
    Insns,
    /// The thread's marks ([`marks_row`]), under its header.
    Marks,
    /// A CPU's lane ([`cpu_lanes`]), above the threads: `thread`
    /// is its index in the model's CPUs.
    Cpu,
}

/// One lane on screen this frame.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Row {
    pub thread: u32,
    pub depth: u32,
    pub kind: RowKind,
    pub y0: f32,
    pub y1: f32,
}

/// What the user did in the timeline this frame.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TimelineEvent {
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

/// What the timeline draws with this frame.
pub(crate) struct TimelineInput<'a> {
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
    pub source: Option<&'a dyn DetailSource>,
    /// Which spans are pseudo-spans, to count the calls of merged boxes.
    pub pseudo: &'a PseudoIndex,
    /// Per thread, why it decoded to almost nothing, if it did
    /// ([`ptscope_model::ThreadModel::diagnosis`]).
    pub diagnoses: &'a [Option<String>],
    /// Calls brushed on the Details panel's histogram, in time order:
    /// outlined.
    pub brushed: &'a [ptscope_model::Call],
}

/// Navigation state and per-frame buffers of the timeline.
pub(crate) struct Timeline {
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
    /// Draws the axis and the tracks in the rest of `ui`.
    pub(crate) fn ui(
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
}
