//! [`TraceView`]: the whole viewer for one decoded snapshot — toolbar with
//! search, overview strip, time axis and tracks, and a bottom panel with
//! the selection's details, the range table and the range flame graph.
//!
//! The app owns one per open snapshot and calls [`TraceView::ui`] every
//! frame; background decoding hands over newer models with
//! [`TraceView::set_model`], which keeps the view and the selection.

use std::sync::Arc;

use egui::{Key, KeyboardShortcut, Modifiers, Ui, WidgetInfo};
use ptscope_decoder::event::FuncId;
use ptscope_decoder::model::Model;

use crate::axis::{format_duration_f, TimeMode};
use crate::color::{extend_styles, FuncStyle};
use crate::details::{details_ui, step_call, Details, DetailsAction};
use crate::layout::FrameBuf;
use crate::range::{flame_ui, table_ui, RangeRow, RangeStats, SortBy};
use crate::search::{MatchMode, Search};
use crate::spans::{calls_per_func, SpanRef};
use crate::timeline::{Timeline, TimelineEvent, TimelineInput};
use crate::window::TimeWindow;

/// Which tab the bottom panel shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanelTab {
    Details,
    Range,
    FlameGraph,
}

/// The viewer of one model, with all its UI state.
pub struct TraceView {
    model: Arc<Model>,
    styles: Vec<FuncStyle>,
    calls: Vec<u64>,
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
}

impl TraceView {
    pub fn new(model: Arc<Model>) -> TraceView {
        let mut v = TraceView {
            model: Arc::new(empty_model()),
            styles: Vec::new(),
            calls: Vec::new(),
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
        };
        v.set_model(model);
        v
    }

    /// Replaces the model (e.g. as decoding produces more spans), keeping
    /// the view, selection, search and range. A selection that no longer
    /// exists is dropped.
    pub fn set_model(&mut self, model: Arc<Model>) {
        self.model = model;
        extend_styles(&mut self.styles, &self.model.funcs);
        self.calls = calls_per_func(&self.model);
        self.timeline.set_bounds(self.model.time_range());
        self.refresh_search(true);
        self.details = self.selected.and_then(|r| Details::new(&self.model, r));
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

    fn refresh_search(&mut self, force: bool) {
        if self.search.update(&self.model.funcs) || force {
            self.matched_calls = self.search.matched_calls(&self.calls);
        }
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

    /// Fits the selected span, else the range selection.
    pub fn zoom_to_selection(&mut self) {
        if let Some((s, e)) = self.selected.and_then(|r| r.times(&self.model)) {
            self.timeline.fit(s, e);
        } else if let Some(r) = &self.range {
            self.timeline.fit(r.from, r.to);
        }
    }

    pub fn time_mode(&self) -> TimeMode {
        self.timeline.mode
    }

    pub fn set_time_mode(&mut self, mode: TimeMode) {
        self.timeline.mode = mode;
    }

    pub fn set_thread_collapsed(&mut self, tid: i32, collapsed: bool) {
        self.timeline.set_collapsed(tid, collapsed);
    }

    pub fn is_thread_collapsed(&self, tid: i32) -> bool {
        self.timeline.is_collapsed(tid)
    }

    // ---- Selection ----

    /// Selects a span (or clears the selection) and shows its details.
    pub fn select(&mut self, r: Option<SpanRef>) {
        self.details = r.and_then(|r| Details::new(&self.model, r));
        self.selected = self.details.as_ref().map(|d| d.span);
        if self.selected.is_some() {
            self.tab = PanelTab::Details;
        }
    }

    pub fn selected(&self) -> Option<SpanRef> {
        self.selected
    }

    pub fn details(&self) -> Option<&Details> {
        self.details.as_ref()
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

    /// Where span `r` was drawn last frame, if it was on screen.
    pub fn span_rect(&self, r: SpanRef) -> Option<egui::Rect> {
        self.timeline.span_rect(&self.model, r)
    }

    /// Screen x of time `t` in the tracks, as of last frame.
    pub fn screen_x(&self, t: u64) -> f32 {
        self.timeline.screen_x(t)
    }

    // ---- Search ----

    pub fn set_search(&mut self, text: &str) {
        self.search.text = text.to_string();
        self.refresh_search(false);
    }

    pub fn search_text(&self) -> &str {
        &self.search.text
    }

    pub fn set_fuzzy(&mut self, fuzzy: bool) {
        self.search.mode = if fuzzy {
            MatchMode::Fuzzy
        } else {
            MatchMode::Substring
        };
        self.refresh_search(false);
    }

    /// Calls whose function matches the search (0 when none is active).
    pub fn match_count(&self) -> u64 {
        if self.search.active() {
            self.matched_calls
        } else {
            0
        }
    }

    /// Functions that match the search.
    pub fn matched_functions(&self) -> usize {
        self.search.matched_funcs
    }

    /// Selects and shows the next (or previous) matching call after the
    /// selection (or the view's left edge).
    pub fn step_match(&mut self, forward: bool) {
        let Some(mask) = self.search.mask() else {
            return;
        };
        let from = self.selected.or_else(|| {
            // A virtual starting point: the first span at the view start.
            let t0 = self.timeline.window.start;
            self.model.threads.iter().enumerate().find_map(|(ti, t)| {
                let lane = t.spans.lane(0);
                let i = lane.partition_point(|s| s.start < t0);
                (i < lane.len()).then(|| SpanRef::new(ti, 0, i))
            })
        });
        let Some(from) = from else {
            return;
        };
        let mut best: Option<(u64, SpanRef)> = None;
        for (f, m) in mask.iter().enumerate() {
            if !*m || self.calls.get(f).copied().unwrap_or(0) == 0 {
                continue;
            }
            if let Some(r) = step_call(&self.model, f as FuncId, from, forward) {
                let k = (r.span(&self.model).map_or(0, |s| s.start), r);
                let better = best.is_none_or(|b| if forward { k < b } else { k > b });
                if better {
                    best = Some(k);
                }
            }
        }
        if let Some((_, r)) = best {
            self.show_span(r);
        }
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

    pub fn range_stats(&self) -> Option<&RangeStats> {
        self.range.as_ref()
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

    pub fn sort_range_by(&mut self, by: SortBy) {
        self.sort = by;
        if let Some(r) = &mut self.range {
            r.sort(by, &self.model);
        }
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

    /// Draws the whole viewer into `ui`.
    pub fn ui(&mut self, ui: &mut Ui) {
        self.global_keys(ui);
        egui::Panel::top("ptscope-toolbar").show(ui, |ui| {
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
            crate::overview::ui(
                ui,
                &model,
                &self.styles,
                bounds,
                &mut self.timeline.window,
                &mut self.overview_buf,
            );
            let input = TimelineInput {
                model: &model,
                styles: &self.styles,
                search: self.search.mask(),
                selected: self.selected,
                range: self.range(),
            };
            let events = self.timeline.ui(ui, &input);
            for e in events {
                match e {
                    TimelineEvent::Select(r) => self.select(r),
                    TimelineEvent::Range(a, b) => {
                        self.set_range(Some((a, b)));
                        self.tab = PanelTab::Range;
                    }
                }
            }
        });
        let mut open = self.show_help;
        crate::help::show(ui.ctx(), &mut open);
        self.show_help = open;
    }

    fn global_keys(&mut self, ui: &Ui) {
        let ctx = ui.ctx();
        let find = KeyboardShortcut::new(Modifiers::COMMAND, Key::F);
        if ctx.input_mut(|i| i.consume_shortcut(&find)) {
            self.focus_search = true;
        }
        if ctx.egui_wants_keyboard_input() {
            return;
        }
        let (help, zoom_sel) = ctx.input(|i| {
            (
                i.key_pressed(Key::F1) || i.key_pressed(Key::Questionmark),
                i.key_pressed(Key::Z),
            )
        });
        if help {
            self.show_help = !self.show_help;
        }
        if zoom_sel {
            self.zoom_to_selection();
        }
    }

    fn toolbar(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            ui.label("Search:");
            let resp = ui.add(
                egui::TextEdit::singleline(&mut self.search.text)
                    .hint_text("function name")
                    .desired_width(220.0),
            );
            // The accessible name is what screen readers and kittest use.
            ui.ctx()
                .accesskit_node_builder(resp.id, |b| b.set_label("Search functions"));
            if self.focus_search {
                resp.request_focus();
                self.focus_search = false;
            }
            if resp.changed() {
                self.refresh_search(false);
            }
            if resp.lost_focus() && ui.input(|i| i.key_pressed(Key::Enter)) {
                let back = ui.input(|i| i.modifiers.shift);
                self.step_match(!back);
                resp.request_focus();
            }
            let mut fuzzy = self.search.mode == MatchMode::Fuzzy;
            if ui.checkbox(&mut fuzzy, "Fuzzy").changed() {
                self.set_fuzzy(fuzzy);
            }
            if self.search.active() {
                ui.label(format!(
                    "{} matches in {} functions",
                    self.matched_calls, self.search.matched_funcs
                ));
                if ui.button("<").on_hover_text("Previous match").clicked() {
                    self.step_match(false);
                }
                if ui.button(">").on_hover_text("Next match").clicked() {
                    self.step_match(true);
                }
            }
            ui.separator();
            if ui.button("Fit all").clicked() {
                self.fit_all();
            }
            let can_zoom = self.selected.is_some() || self.range.is_some();
            if ui
                .add_enabled(can_zoom, egui::Button::new("Zoom to selection"))
                .clicked()
            {
                self.zoom_to_selection();
            }
            let mut abs = self.timeline.mode == TimeMode::Absolute;
            if ui.checkbox(&mut abs, "Absolute time").changed() {
                self.timeline.mode = if abs {
                    TimeMode::Absolute
                } else {
                    TimeMode::Relative
                };
            }
            ui.label(format!(
                "view {}",
                format_duration_f(self.timeline.window.width)
            ));
            if ui.button("?").on_hover_text("Keyboard help (F1)").clicked() {
                self.show_help = !self.show_help;
            }
        });
    }

    fn bottom_panel(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            for (tab, label) in [
                (PanelTab::Details, "Details"),
                (PanelTab::Range, "Range"),
                (PanelTab::FlameGraph, "Flame graph"),
            ] {
                let r = ui.selectable_label(self.tab == tab, label);
                r.widget_info(|| {
                    WidgetInfo::selected(egui::Role::Tab, true, self.tab == tab, label)
                });
                if r.clicked() {
                    self.tab = tab;
                }
            }
        });
        ui.separator();
        let model = self.model.clone();
        match self.tab {
            PanelTab::Details => {
                let Some(d) = &self.details else {
                    ui.label("Click a span to see its details.");
                    return;
                };
                let action = egui::ScrollArea::vertical()
                    .id_salt("ptscope-details")
                    .show(ui, |ui| details_ui(ui, &model, d))
                    .inner;
                match action {
                    Some(DetailsAction::Select(r)) => self.select(Some(r)),
                    Some(DetailsAction::Show(r)) => {
                        self.select(Some(r));
                        self.zoom_to_selection();
                    }
                    Some(DetailsAction::Step(fwd)) => {
                        let func = d.func;
                        let from = d.span;
                        if let Some(r) = step_call(&model, func, from, fwd) {
                            self.show_span(r);
                        }
                    }
                    None => {}
                }
            }
            PanelTab::Range => match &mut self.range {
                None => {
                    ui.label("Shift-drag across the tracks to select a range.");
                }
                Some(r) => table_ui(ui, &model, r, &mut self.sort),
            },
            PanelTab::FlameGraph => match &self.range {
                None => {
                    ui.label("Shift-drag across the tracks to select a range.");
                }
                Some(r) => flame_ui(ui, &model, r, &self.styles),
            },
        }
    }
}

fn empty_model() -> Model {
    Model {
        funcs: Default::default(),
        threads: Vec::new(),
        missing_binaries: Vec::new(),
        lines: None,
    }
}
