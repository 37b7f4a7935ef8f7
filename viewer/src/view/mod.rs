//! This module holds [`TraceView`], the whole viewer of one decoded
//! snapshot, and draws a frame of it: the toolbar with the search box, the
//! overview strip, the time axis and tracks, and the bottom panel's
//! Details, Range, Flame graph and Source tabs.
//!
//! The app owns one view per open snapshot and calls [`TraceView::ui`]
//! every frame. Background decoding hands over newer models with
//! [`TraceView::set_model`], which keeps the view, the selection, the
//! search and the range, so a file can be explored while it decodes. The
//! view owns what the widgets share (the selection, the range, the search
//! and the colors) and turns the timeline's events into changes of it.
//! Zoomed in far enough, it asks for line detail ([`crate::timeline::line_detail`]) and
//! shows a clicked line in the Source tab ([`crate::tabs::source_tab`]). Its public
//! methods do what the mouse and keys do, so the app and the tests can
//! drive it.
//!
//! The toolbar, the search and the keyboard shortcuts live in
//! `toolbar.rs`, the bottom panel and its tabs in `bottom_panel.rs`; this
//! file holds the view's state, its public API and the frame's layout.

use std::path::PathBuf;
use std::sync::Arc;

use egui::{Rect, Ui};
use ptscope_model::DetailSource;
use ptscope_model::Model;
use ptscope_model::Segment;

use crate::color::{extend_styles, FuncStyle};
use crate::search::Search;
use crate::spans::{calls_of, spans_per_func, PseudoIndex, SpanRef};
use crate::tabs::details_panel::Details;
use crate::tabs::range::{RangeRow, RangeStats, SortBy};
use crate::tabs::source_tab::{SourceMode, SourcePane, SourceTarget, MAX_HEAT_SEGMENTS};
use crate::timeline::frame_mesh::FrameBuf;
use crate::timeline::line_detail::{
    line_of_insn, Disasm, InsnRef, LineDetail, LineFrame, LineRef, LineRequest,
};
use crate::timeline::time_window::TimeWindow;
use crate::timeline::{RowKind, SpanGroup, Timeline, TimelineEvent, TimelineInput};

mod bottom_panel;
mod toolbar;

pub use toolbar::{PTWRITE_VIEW_NS, UNTIMED_LABEL};

/// Which tab the bottom panel shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanelTab {
    Details,
    Range,
    FlameGraph,
    /// The selected line's source file, or its disassembly.
    Source,
}

/// A line span or instruction on screen last frame (tests and tools).
#[derive(Clone, Debug, PartialEq)]
pub struct VisibleLine {
    pub rect: Rect,
    /// The line span, when the box is one line span (not a merged run,
    /// not an instruction).
    pub line: Option<LineRef>,
    /// Line spans or instructions in the box.
    pub count: u32,
    /// Whether it is on the instruction row.
    pub insn: bool,
    /// Frame of a lone line span: function, file, line, inlined.
    pub function: Option<Arc<str>>,
    pub file: Option<Arc<str>>,
    pub number: u32,
    pub inlined: bool,
}

/// The viewer of one model, with all its UI state.
pub struct TraceView {
    model: Arc<Model>,
    /// What the capture said about itself (trigger, registers), if known.
    capture_info: Option<String>,
    styles: Vec<FuncStyle>,
    calls: Vec<u64>,
    /// Spans per function, pseudo-spans included: what search steps through.
    spans: Vec<u64>,
    /// Matching pseudo-spans (`[untraced]`, …), which are no calls.
    matched_other: u64,
    /// PTWRITEs whose value matches the search: (thread, time).
    ptwrite_hits: Vec<(u32, u64)>,
    /// Which spans are not calls, for merged boxes' counts.
    pseudo: PseudoIndex,
    /// Per thread, why it decoded to almost nothing, if it did.
    diagnoses: Vec<Option<String>>,
    /// A clicked merged run that no zoom takes apart, listed in Details.
    group: Option<SpanGroup>,
    search: Search,
    matched_calls: u64,
    timeline: Timeline,
    overview_buf: FrameBuf,
    selected: Option<SpanRef>,
    details: Option<Details>,
    range: Option<RangeStats>,
    sort: SortBy,
    tab: PanelTab,
    show_help: bool,
    focus_search: bool,
    lines: LineDetail,
    disasm: Disasm,
    source: SourcePane,
    /// The clicked line span, with its segment (kept while the cache
    /// may drop it).
    selected_line: Option<(LineRef, Arc<Segment>)>,
}

impl TraceView {
    pub fn new(model: Arc<Model>) -> TraceView {
        let mut v = TraceView {
            model: Arc::new(Model::default()),
            capture_info: None,
            styles: Vec::new(),
            calls: Vec::new(),
            spans: Vec::new(),
            matched_other: 0,
            ptwrite_hits: Vec::new(),
            pseudo: PseudoIndex::default(),
            diagnoses: Vec::new(),
            group: None,
            search: Search::default(),
            matched_calls: 0,
            timeline: Timeline::default(),
            overview_buf: FrameBuf::default(),
            selected: None,
            details: None,
            range: None,
            sort: SortBy::default(),
            tab: PanelTab::Details,
            show_help: false,
            focus_search: false,
            lines: LineDetail::default(),
            disasm: Disasm::default(),
            source: SourcePane::default(),
            selected_line: None,
        };
        v.set_model(model);
        v
    }

    /// Replaces the model (e.g. as decoding produces more spans), keeping
    /// the view, selection, search and range. A selection that no longer
    /// exists is dropped.
    pub fn set_model(&mut self, model: Arc<Model>) {
        if !Arc::ptr_eq(&self.model, &model) {
            // Line detail belongs to one model; segment keys may differ.
            self.selected_line = None;
            self.disasm.clear();
        }
        self.lines.set_model(&model);
        self.model = model;
        extend_styles(&mut self.styles, &self.model.funcs);
        self.spans = spans_per_func(&self.model);
        self.calls = calls_of(&self.model, &self.spans);
        self.pseudo = PseudoIndex::new(&self.model);
        self.diagnoses = self
            .model
            .threads
            .iter()
            .map(|t| t.diagnosis(&self.model.funcs))
            .collect();
        // A listed run whose spans are gone is dropped.
        if self.group.is_some_and(|g| {
            self.model
                .threads
                .get(g.thread as usize)
                .is_none_or(|t| t.spans.lane(g.depth as usize).len() < (g.first + g.count) as usize)
        }) {
            self.group = None;
        }
        self.timeline.unit = self.model.unit;
        self.timeline.set_bounds(self.model.time_range());
        self.refresh_search(true);
        // A newer model of the same trace: the brush carries over (the
        // comparison named spans of the old one).
        let brush = self.details.as_ref().and_then(|d| d.brush);
        self.details = self.selected.and_then(|r| Details::new(&self.model, r));
        if let Some(d) = &mut self.details {
            d.set_brush(brush);
        }
        if self.details.is_none() {
            self.selected = None;
        }
        if let Some(r) = &self.range {
            let (a, b) = (r.from, r.to);
            self.set_range(Some((a, b)));
        }
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    // ---- Navigation ----

    /// The visible window.
    pub fn window(&self) -> TimeWindow {
        self.timeline.window
    }

    /// The visible time range `[start, end)` in perf ns.
    pub fn view_range(&self) -> (u64, u64) {
        (self.timeline.window.start, self.timeline.window.end())
    }

    /// The trace's `[first start, last end]`, if it has spans.
    pub fn bounds(&self) -> Option<(u64, u64)> {
        self.timeline.bounds
    }

    pub fn set_window(&mut self, w: TimeWindow) {
        self.timeline.window = w;
    }

    /// Zooms by `factor` (> 1: in) around the middle of the view.
    pub fn zoom(&mut self, factor: f64) {
        self.timeline.zoom(factor, 0.5);
    }

    /// Zooms around `anchor` (0: left edge, 1: right edge).
    pub fn zoom_at(&mut self, factor: f64, anchor: f64) {
        self.timeline.zoom(factor, anchor);
    }

    /// Pans by `ns` (positive: later).
    pub fn pan_ns(&mut self, ns: f64) {
        self.timeline.pan_ns(ns);
    }

    /// Shows `[from, to)`.
    pub fn zoom_to(&mut self, from: u64, to: u64) {
        self.timeline.fit(from, to);
    }

    /// Shows the whole trace.
    pub fn fit_all(&mut self) {
        self.timeline.fit_all();
    }

    /// Fits the selected span or line, else the range selection.
    pub fn zoom_to_selection(&mut self) {
        if let Some((s, e)) = self.selected.and_then(|r| r.times(&self.model)) {
            self.timeline.fit(s, e);
        } else if let Some((s, e)) = self.selected_line_times() {
            self.timeline.fit(s, e);
        } else if let Some(r) = &self.range {
            self.timeline.fit(r.from, r.to);
        }
    }

    pub fn is_thread_collapsed(&self, tid: i32) -> bool {
        self.timeline.is_collapsed(tid)
    }

    // ---- Selection ----

    /// Selects a span (or clears the selection) and shows its details.
    pub fn select(&mut self, r: Option<SpanRef>) {
        // Another call of the same function keeps the brush and figures.
        let prev = self.details.take();
        self.details = r.and_then(|r| Details::after(&self.model, r, prev));
        self.selected = self.details.as_ref().map(|d| d.span);
        self.selected_line = None;
        if self.selected.is_some() {
            self.tab = PanelTab::Details;
        }
    }

    /// The segment `key` of thread `thread`, if decoded.
    fn segment(&self, thread: u32, key: ptscope_model::SegmentKey) -> Option<Arc<Segment>> {
        self.lines
            .frame()
            .seg(thread, key)
            .cloned()
            .or_else(|| self.lines.detail()?.get(key))
    }

    /// Selects a line span and opens its source in the Source pane.
    /// False if its segment is not decoded (or the reference is stale).
    pub fn select_line(&mut self, l: LineRef) -> bool {
        let Some(seg) = self.segment(l.thread, l.key) else {
            return false;
        };
        let Some(span) = l.span(&seg) else {
            return false;
        };
        let Some(f) = seg.frame(span) else {
            return false;
        };
        let outer = seg
            .chains
            .get(span.chain as usize)
            .and_then(|c| c.first())
            .map_or_else(|| f.function.clone(), |o| o.function.clone());
        self.source.open(SourceTarget {
            file: f.file.clone(),
            line: f.line,
            function: f.function.clone(),
            outer,
            pid: seg.pid,
            ip: None,
        });
        self.select(None);
        self.selected_line = Some((l, seg));
        self.tab = PanelTab::Source;
        true
    }

    /// Selects the innermost line of an instruction and shows it in the
    /// Disassembly view.
    pub fn select_insn(&mut self, r: InsnRef) -> bool {
        let Some(seg) = self.segment(r.thread, r.key) else {
            return false;
        };
        let Some((depth, index)) = line_of_insn(&seg, r.index as usize) else {
            return false;
        };
        let ip = seg.insns[r.index as usize].ip;
        let l = LineRef {
            thread: r.thread,
            key: r.key,
            depth,
            index,
        };
        if !self.select_line(l) {
            return false;
        }
        if let Some(t) = self.source.target().cloned() {
            self.source.open(SourceTarget { ip: Some(ip), ..t });
        }
        self.source.mode = SourceMode::Disassembly;
        true
    }

    pub fn selected_line(&self) -> Option<LineRef> {
        self.selected_line.as_ref().map(|s| s.0)
    }

    fn selected_line_times(&self) -> Option<(u64, u64)> {
        let (l, seg) = self.selected_line.as_ref()?;
        let span = l.span(seg)?;
        Some((span.start, span.end))
    }

    // ---- Line detail ----

    /// Windows at most this wide (ns) get source lines and instructions.
    pub fn line_threshold(&self) -> f64 {
        self.lines.threshold_ns
    }

    pub fn set_line_threshold(&mut self, ns: f64) {
        if ns.is_finite() && ns > 0.0 {
            self.lines.threshold_ns = ns;
        }
    }

    /// The background fine pass of the model, if the app supplied one.
    pub fn line_detail(&self) -> Option<&dyn DetailSource> {
        self.lines.detail()
    }

    /// Takes the fine pass of the current model, which the app runs: the
    /// view asks it for segments, disassembly and line comparisons, and
    /// never decodes itself. Refused (false) if it serves another model;
    /// a new model drops the old one's.
    pub fn set_detail(&mut self, detail: Arc<dyn DetailSource>) -> bool {
        self.lines.set_detail(&self.model, detail)
    }

    /// The line detail of the last frame.
    pub fn line_frame(&self) -> &LineFrame {
        self.lines.frame()
    }

    /// Blocks until the line detail wanted last frame is decoded (tests).
    pub fn wait_for_lines(&self) {
        if let Some(d) = self.lines.detail() {
            d.wait();
        }
    }

    /// Line spans and instructions drawn last frame.
    pub fn visible_lines(&self) -> Vec<VisibleLine> {
        let frame = self.lines.frame();
        self.timeline
            .line_boxes()
            .map(|(row, b)| {
                let rect = Rect::from_x_y_ranges(b.x0..=b.x1, row.y0..=row.y1);
                let insn = row.kind == RowKind::Insns;
                let mut v = VisibleLine {
                    rect,
                    line: None,
                    count: b.count,
                    insn,
                    function: None,
                    file: None,
                    number: 0,
                    inlined: false,
                };
                if b.count == 1 && !insn {
                    let l = LineRef {
                        thread: row.thread,
                        key: b.key,
                        depth: row.depth,
                        index: b.first,
                    };
                    let seg = frame.seg(row.thread, b.key);
                    if let Some((span, f)) =
                        seg.and_then(|s| l.span(s).and_then(|sp| Some((sp, s.frame(sp)?))))
                    {
                        v.function = Some(f.function.clone());
                        v.file = Some(f.file.clone());
                        v.number = f.line;
                        v.inlined = span.inlined();
                    }
                    v.line = Some(l);
                }
                v
            })
            .collect()
    }

    /// The Source pane.
    pub fn source_pane(&self) -> &SourcePane {
        &self.source
    }

    pub fn source_pane_mut(&mut self) -> &mut SourcePane {
        &mut self.source
    }

    /// `--source-map` remappings (FROM, TO) for source files.
    pub fn set_source_maps(&mut self, maps: Vec<(String, String)>) {
        self.source.set_base_maps(maps);
    }

    /// A line about how the trace was captured (its trigger, why it
    /// stopped, the registers at the trigger), shown above the toolbar.
    pub fn set_capture_info(&mut self, info: Option<String>) {
        self.capture_info = info;
    }

    pub fn capture_info(&self) -> Option<&str> {
        self.capture_info.as_deref()
    }

    /// Where the snapshot is: source files are also looked for there.
    pub fn set_source_dir(&mut self, dir: Option<PathBuf>) {
        self.source.set_near(dir);
    }

    pub fn selected(&self) -> Option<SpanRef> {
        self.selected
    }

    pub fn details(&self) -> Option<&Details> {
        self.details.as_ref()
    }

    /// The merged run listed in the Details tab, if one was clicked.
    pub fn span_group(&self) -> Option<SpanGroup> {
        self.group
    }

    /// Lists the spans of `g` in the Details tab (what a click on a
    /// merged run that no zoom takes apart does), or stops listing.
    pub fn select_group(&mut self, g: Option<SpanGroup>) {
        self.group = g;
        self.select(None);
        if g.is_some() {
            self.tab = PanelTab::Details;
        }
    }

    /// Why thread `ti` decoded to almost nothing, as its track header says.
    pub fn thread_diagnosis(&self, ti: usize) -> Option<&str> {
        self.diagnoses.get(ti).and_then(|d| d.as_deref())
    }

    /// The first span (in time order of each thread's lanes, lowest depth
    /// first) of the function named `name`: a handle for tests and links.
    pub fn find_span(&self, name: &str) -> Option<SpanRef> {
        for (ti, t) in self.model.threads.iter().enumerate() {
            for (d, lane) in t.spans.lanes() {
                if let Some(i) = lane
                    .iter()
                    .position(|s| self.model.funcs.name(s.func()) == name)
                {
                    return Some(SpanRef::new(ti, d, i));
                }
            }
        }
        None
    }

    /// Opens the outlier hunt on function `name`: its slowest call selected
    /// and fitted, set beside a typical call in the Details tab, and the
    /// calls from p99 up brushed on its histogram. False if no call of
    /// that name ran.
    pub fn explain(&mut self, name: &str) -> bool {
        let funcs = ptscope_model::funcs_named(&self.model.funcs, name);
        let calls = ptscope_model::calls_of(&self.model, &funcs);
        let Some(slow) = ptscope_model::Pick::Slowest.of(&calls, None) else {
            return false;
        };
        self.select(Some(calls[slow].span));
        self.zoom_to_selection();
        let model = self.model.clone();
        if let Some(d) = &mut self.details {
            let (p99, max) = (d.calls.dist.p99, d.calls.dist.max);
            d.set_brush(Some((p99, max)));
            d.compare_with_typical(&model, true);
        }
        true
    }

    /// Selects and fits the call of function `name` on thread `tid` that
    /// ran from `start` to `end` (a trigger's call, as the capture timed
    /// it): of that thread's calls of the function, the one whose times
    /// are nearest. False if the thread ran no such call.
    /// The name is the trigger's as the user typed it, which may not be
    /// the name the model shows (mangled, or without its namespace): when
    /// no call has that name, the call of any function on that thread
    /// whose times are nearest is taken.
    pub fn show_call(&mut self, tid: i32, name: &str, start: u64, end: u64) -> bool {
        use ptscope_model::{calls_unordered, funcs_named, nearest};
        let m = &self.model;
        let on_thread = |ids: &[_]| {
            let calls = calls_unordered(m, ids);
            nearest(m, &calls, tid, start, end).map(|i| calls[i].span)
        };
        let every = || -> Vec<_> {
            m.funcs
                .iter()
                .filter(|(id, _)| m.funcs.is_call(*id))
                .map(|(id, _)| id)
                .collect()
        };
        let Some(r) = on_thread(&funcs_named(&m.funcs, name)).or_else(|| on_thread(&every()))
        else {
            return false;
        };
        self.select(Some(r));
        self.zoom_to_selection();
        true
    }

    /// Where span `r` was drawn last frame, if it was on screen.
    pub fn span_rect(&self, r: SpanRef) -> Option<egui::Rect> {
        self.timeline.span_rect(&self.model, r)
    }

    /// Screen x of time `t` in the tracks, as of last frame.
    pub fn screen_x(&self, t: u64) -> f32 {
        self.timeline.screen_x(t)
    }

    /// Selects `r` and brings it into view (fitting it if it is larger
    /// than the view, centering it otherwise).
    pub fn show_span(&mut self, r: SpanRef) {
        self.select(Some(r));
        if let Some((s, e)) = r.times(&self.model) {
            let w = self.timeline.window;
            if (e - s) as f64 > w.width || s >= w.end() || e <= w.start {
                let len = (e - s).max(1) as f64;
                if len > w.width {
                    self.timeline.fit(s, e);
                } else {
                    let mid = s + (e - s) / 2;
                    let mut nw = TimeWindow::new(mid, w.width);
                    nw.shift(-w.width / 2.0);
                    self.timeline.window = nw;
                }
            }
        }
    }

    // ---- Range ----

    /// Sets (or clears) the range selection and computes its table and
    /// flame graph.
    pub fn set_range(&mut self, range: Option<(u64, u64)>) {
        self.range = range
            .filter(|(a, b)| b > a)
            .map(|(a, b)| RangeStats::compute(&self.model, a, b));
        if let Some(r) = &mut self.range {
            r.sort(self.sort, &self.model);
        }
    }

    pub fn range(&self) -> Option<(u64, u64)> {
        self.range.as_ref().map(|r| (r.from, r.to))
    }

    /// The range table's rows in display order, with function names.
    pub fn range_rows(&self) -> Vec<(String, RangeRow)> {
        self.range.as_ref().map_or_else(Vec::new, |r| {
            r.rows
                .iter()
                .map(|row| (self.model.funcs.name(row.func).to_string(), row.clone()))
                .collect()
        })
    }

    pub fn tab(&self) -> PanelTab {
        self.tab
    }

    pub fn set_tab(&mut self, tab: PanelTab) {
        self.tab = tab;
    }

    pub fn show_help(&mut self, open: bool) {
        self.show_help = open;
    }

    pub fn help_open(&self) -> bool {
        self.show_help
    }

    // ---- Drawing ----

    /// What the Source pane's heat covers: the range, else the view.
    fn heat_scope(&self) -> ((u64, u64), bool) {
        match self.range() {
            Some(r) => (r, true),
            None => (self.view_range(), false),
        }
    }

    /// Says which segments are wanted this frame and takes in those ready.
    fn update_lines(&mut self) {
        let model = self.model.clone();
        let heat = (self.tab == PanelTab::Source && self.source.target().is_some())
            .then(|| self.heat_scope().0);
        let timeline = &self.timeline;
        let collapsed = |ti: usize| {
            model
                .threads
                .get(ti)
                .is_some_and(|t| timeline.is_collapsed(t.spans.tid))
        };
        let req = LineRequest {
            window: self.timeline.window,
            width_px: self.timeline.width_px(),
            collapsed: &collapsed,
            extra: heat,
            max_extra: MAX_HEAT_SEGMENTS,
        };
        self.lines.update(&model, &req);
    }

    /// Draws the whole viewer into `ui`.
    pub fn ui(&mut self, ui: &mut Ui) {
        self.global_keys(ui);
        self.update_lines();
        egui::Panel::top("ptscope-toolbar").show(ui, |ui| {
            if let Some(info) = &self.capture_info {
                let r = ui.label(egui::RichText::new(format!("Capture: {info}")).small());
                ui.ctx()
                    .accesskit_node_builder(r.id, |b| b.set_label(format!("Capture: {info}")));
            }
            self.toolbar(ui);
        });
        egui::Panel::bottom("ptscope-panel")
            .resizable(true)
            .min_size(200.0)
            .default_size(260.0)
            .show(ui, |ui| self.bottom_panel(ui));
        egui::CentralPanel::default().show(ui, |ui| {
            let model = self.model.clone();
            if model.span_count() == 0 {
                ui.label("No spans yet.");
            }
            let bounds = self.timeline.bounds;
            crate::timeline::overview::ui(
                ui,
                &model,
                &self.styles,
                bounds,
                &mut self.timeline.window,
                &mut self.overview_buf,
            );
            let frame = self.lines.frame();
            let selected_line = self
                .selected_line
                .as_ref()
                .and_then(|(l, seg)| l.span(seg).map(|s| (*l, s.start, s.end)));
            let input = TimelineInput {
                model: &model,
                styles: &self.styles,
                search: self.search.mask(),
                selected: self.selected,
                range: self.range.as_ref().map(|r| (r.from, r.to)),
                lines: frame.active.then_some(frame),
                selected_line,
                source: self.lines.detail(),
                pseudo: &self.pseudo,
                diagnoses: &self.diagnoses,
                brushed: self.details.as_ref().map_or(&[], |d| &d.outlined),
            };
            let events = self.timeline.ui(ui, &input, &mut self.disasm);
            for e in events {
                match e {
                    TimelineEvent::Select(r) => {
                        self.group = None;
                        self.select(r);
                    }
                    TimelineEvent::SelectGroup(g) => self.select_group(Some(g)),
                    TimelineEvent::Range(a, b) => {
                        self.set_range(Some((a, b)));
                        self.tab = PanelTab::Range;
                    }
                    TimelineEvent::SelectLine(l) => {
                        self.select_line(l);
                    }
                    TimelineEvent::SelectInsn(r) => {
                        self.select_insn(r);
                    }
                }
            }
        });
        let mut open = self.show_help;
        crate::help::show(ui.ctx(), &mut open, self.lines.threshold_ns);
        self.show_help = open;
    }
}
