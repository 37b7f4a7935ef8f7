//! The bottom panel of [`TraceView`]: its tab bar, and each tab (Details,
//! Range, Flame graph, Source) handed to the widget of [`crate::tabs`] that
//! draws it. It is apart from `mod.rs` because it only turns the view's
//! state into the tabs' inputs and their actions back into selections.

use egui::{Ui, WidgetInfo};

use crate::tabs::details_panel::{details_ui, group_ui, step_call, DetailsAction};
use crate::tabs::flame_graph::flame_ui;
use crate::tabs::range::table_ui;
use crate::tabs::source_tab::SourceEnv;

use super::{PanelTab, TraceView};

impl TraceView {
    pub(super) fn bottom_panel(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            for (tab, label) in [
                (PanelTab::Details, "Details"),
                (PanelTab::Range, "Range"),
                (PanelTab::FlameGraph, "Flame graph"),
                (PanelTab::Source, "Source"),
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
                let listed = self
                    .group
                    .and_then(|g| group_ui(ui, &model, &self.pseudo, &g, self.selected));
                let Some(d) = &mut self.details else {
                    if let Some(DetailsAction::Select(r)) = listed {
                        self.select(Some(r));
                    } else if self.group.is_none() {
                        ui.label("Click a span to see its details.");
                    }
                    return;
                };
                let action = egui::ScrollArea::vertical()
                    .id_salt("ptscope-details")
                    .show(ui, |ui| details_ui(ui, &model, self.lines.detail(), d))
                    .inner
                    .or(listed);
                let (func, from) = (d.func, d.span);
                match action {
                    Some(DetailsAction::Select(r)) => self.select(Some(r)),
                    Some(DetailsAction::Show(r)) => {
                        self.select(Some(r));
                        self.zoom_to_selection();
                    }
                    Some(DetailsAction::Step(fwd)) => {
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
            PanelTab::Source => {
                let threads = self.open_threads();
                let (scope, is_range) = self.heat_scope();
                let env = SourceEnv {
                    detail: self.lines.detail(),
                    source: self.lines.detail(),
                    disasm: &mut self.disasm,
                    threads: &threads,
                    scope,
                    is_range,
                };
                self.source.ui(ui, env);
            }
        }
    }

    /// Thread indices whose tracks are open.
    fn open_threads(&self) -> Vec<usize> {
        (0..self.model.threads.len())
            .filter(|&ti| !self.timeline.is_collapsed(self.model.threads[ti].spans.tid))
            .collect()
    }
}
