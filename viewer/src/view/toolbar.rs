//! The toolbar of [`TraceView`]: the search box and the search it drives
//! (matches, stepping through them, PTWRITE hits), the keyboard shortcuts
//! and the line-detail controls. They live apart from `mod.rs` so that the
//! view's state and layout read without the widgets and input around them.

use egui::{Key, KeyboardShortcut, Modifiers, Ui};
use ptscope_model::FuncId;

use crate::search::MatchMode;
use crate::spans::SpanRef;
use crate::tabs::details_panel::step_call;
use crate::timeline::axis::{format_duration_in, TimeMode, TimeUnit};

use super::TraceView;

impl TraceView {
    pub(super) fn global_keys(&mut self, ui: &Ui) {
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

    pub(super) fn toolbar(&mut self, ui: &mut Ui) {
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
                let mut text = format!(
                    "{} matches in {} functions",
                    self.matched_calls, self.search.matched_funcs
                );
                if self.matched_other > 0 {
                    // Pseudo-spans match by name but are no calls.
                    text.push_str(&format!(", and {} other spans", self.matched_other));
                }
                if !self.ptwrite_hits.is_empty() {
                    text.push_str(&format!(", {} PTWRITE values", self.ptwrite_hits.len()));
                }
                ui.label(text);
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
                format_duration_in(self.timeline.unit, self.timeline.window.width)
            ));
            if self.timeline.unit == TimeUnit::Insns {
                ui.colored_label(ui.visuals().warn_fg_color, UNTIMED_LABEL)
                    .on_hover_text(UNTIMED_HOVER);
            }
            ui.separator();
            self.line_controls(ui);
            if !self.model.warnings.is_empty() {
                ui.separator();
                let n = self.model.warnings.len();
                ui.colored_label(
                    ui.visuals().warn_fg_color,
                    format!("{n} warning{}", if n == 1 { "" } else { "s" }),
                )
                .on_hover_text(self.model.warnings.join("\n"));
            }
            if ui.button("?").on_hover_text("Keyboard help (F1)").clicked() {
                self.show_help = !self.show_help;
            }
        });
    }

    /// The line-detail threshold and what the fine pass is doing.
    fn line_controls(&mut self, ui: &mut Ui) {
        ui.label("Lines below");
        let mut us = self.lines.threshold_ns / 1000.0;
        let r = ui
            .add(
                egui::DragValue::new(&mut us)
                    .range(0.1..=1_000_000.0)
                    .speed(1.0)
                    .suffix(" µs"),
            )
            .on_hover_text(
                "Source lines and instructions are decoded and drawn when the view is at most this wide",
            );
        ui.ctx()
            .accesskit_node_builder(r.id, |b| b.set_label("Line detail threshold"));
        if r.changed() {
            self.set_line_threshold(us * 1000.0);
        }
        let f = self.lines.frame();
        if f.pending > 0 {
            ui.spinner();
            ui.label("decoding lines…")
                .on_hover_text(format!("{} trace segments to go", f.pending));
        } else if f.failed > 0 {
            let err = f.error.clone().unwrap_or_default();
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!("lines: {} segments failed", f.failed),
            )
            .on_hover_text(err);
        } else if f.cut > 0 {
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!("lines: {} segments cut short", f.cut),
            )
            .on_hover_text(format!(
                "A segment holds more than {} instructions (a damaged trace going round a loop): only its first are shown",
                ptscope_model::MAX_SEGMENT_INSNS
            ));
        } else if f.active && self.lines.detail().is_none() && self.model.span_count() > 0 {
            ui.weak("no line detail for this input")
                .on_hover_text("Line detail re-decodes the instruction trace of a snapshot or perf.data file; perf script text has none.");
        }
    }

    // ---- Search ----

    pub(super) fn refresh_search(&mut self, force: bool) {
        if self.search.update(&self.model.funcs) || force {
            self.matched_calls = self.search.matched_calls(&self.calls);
            self.matched_other = self.search.matched_calls(&self.spans) - self.matched_calls;
            self.ptwrite_hits = crate::search::ptwrite_hits(&self.model, &self.search.text);
        }
    }

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
        if self.matched_calls + self.matched_other == 0 && !self.ptwrite_hits.is_empty() {
            self.step_ptwrite(forward);
            return;
        }
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
            if !*m || self.spans.get(f).copied().unwrap_or(0) == 0 {
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

    /// PTWRITEs whose value matches the search, as (thread, time).
    pub fn ptwrite_hits(&self) -> &[(u32, u64)] {
        &self.ptwrite_hits
    }

    /// Shows the next (or previous) PTWRITE that matches the search after
    /// the middle of the view: the view centers on it, at most
    /// [`PTWRITE_VIEW_NS`] wide.
    fn step_ptwrite(&mut self, forward: bool) {
        let w = self.timeline.window;
        let mid = w.start.saturating_add((w.width / 2.0) as u64);
        let hits = &self.ptwrite_hits;
        let next = if forward {
            hits.iter().find(|h| h.1 > mid)
        } else {
            hits.iter().rev().find(|h| h.1 < mid)
        };
        if let Some(&(_, t)) = next.or(if forward { hits.first() } else { hits.last() }) {
            // No wider than a few µs: the instructions around it are what
            // a PTWRITE marks.
            let half = (w.width.min(PTWRITE_VIEW_NS) / 2.0).max(1.0) as u64;
            self.timeline
                .fit(t.saturating_sub(half), t.saturating_add(half));
        }
    }
}

/// The widest view stepping to a PTWRITE shows, ns.
pub const PTWRITE_VIEW_NS: f64 = 2_000.0;

/// The toolbar's note for a trace without timing, and its explanation.
pub const UNTIMED_LABEL: &str = "no timing: axis in instructions";
const UNTIMED_HOVER: &str = "This trace has no timing packets (recorded with tsc=0), so \
    spans are placed by the instructions each thread (or CPU) retired, not by time.";
