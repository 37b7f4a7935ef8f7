//! The Range tab: this module computes what each function did inside a
//! range selection `[from, to)` and draws it as a table sorted by any
//! column.
//!
//! Shift-dragging across the tracks selects a range. [`RangeStats::compute`]
//! then walks every span overlapping it once, for this table and for the
//! flame graph ([`crate::tabs::flame_graph`]), so switching between the two tabs
//! costs nothing. Spans overlapping the range count as calls, with their
//! times clipped to it, so "self" over all functions adds up to the time
//! the threads spent in the range. A recursive function's total counts
//! every level.

use std::collections::HashMap;

use ptscope_model::FuncId;
use ptscope_model::Model;

use crate::tabs::flame_graph::{FlameBuilder, FlameNode};

/// One row of the range table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeRow {
    pub func: FuncId,
    /// Calls in the range; 0 for a pseudo-function (`[untraced]`, …).
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
}

impl RangeRow {
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.calls).unwrap_or(0)
    }
}

/// A column to sort the table by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum SortBy {
    Name,
    Calls,
    Total,
    #[default]
    SelfTime,
    Avg,
}

/// What a range selection computes, once, when the range is set.
#[derive(Clone, Debug, Default)]
pub(crate) struct RangeStats {
    pub from: u64,
    pub to: u64,
    pub rows: Vec<RangeRow>,
    /// Node 0 is the root (all threads); its children are depth-0 calls.
    pub flame: Vec<FlameNode>,
}

impl RangeStats {
    /// Computes the table and the flame graph of `[from, to)`.
    pub(crate) fn compute(model: &Model, from: u64, to: u64) -> RangeStats {
        let mut per_func: HashMap<FuncId, (u64, u64, i64)> = HashMap::new();
        let mut flame = FlameBuilder::new();
        // Node of each overlapping span of the previous depth, and of this.
        let mut prev_nodes: Vec<u32> = Vec::new();
        let mut cur_nodes: Vec<u32> = Vec::new();
        for t in &model.threads {
            let t = &t.spans;
            let mut prev = 0..0;
            for d in 0..t.depth() {
                let lane = t.lane(d);
                let vis = t.visible(d, from, to);
                cur_nodes.clear();
                let up = if d > 0 { t.lane(d - 1) } else { &[][..] };
                for i in vis.clone() {
                    let s = lane[i];
                    let end = t.end(d, i);
                    let clipped = end.min(to).saturating_sub(s.start.max(from));
                    // The store's parent, if it overlaps the range too.
                    let (parent_node, parent_func) = match t.parent(d, i) {
                        Some(p) if prev.contains(&p) => {
                            (prev_nodes[p - prev.start], Some(up[p].func()))
                        }
                        _ => (0, None),
                    };
                    let f = s.func();
                    let call = model.funcs.is_call(f);
                    cur_nodes.push(flame.add(parent_node, f, call, d, clipped));
                    let e = per_func.entry(f).or_default();
                    // A pseudo-span adds time but is not a call.
                    e.0 += call as u64;
                    e.1 += clipped;
                    e.2 += clipped as i64;
                    // Self time: the parent loses what its children take.
                    if let Some(pf) = parent_func {
                        per_func.entry(pf).or_default().2 -= clipped as i64;
                    }
                }
                std::mem::swap(&mut prev_nodes, &mut cur_nodes);
                prev = vis;
            }
        }
        let rows = per_func
            .into_iter()
            .map(|(func, (calls, total_ns, self_ns))| RangeRow {
                func,
                calls,
                total_ns,
                self_ns: self_ns.max(0) as u64,
            })
            .collect();
        let mut r = RangeStats {
            from,
            to,
            rows,
            flame: flame.finish(model),
        };
        r.sort(SortBy::default(), model);
        r
    }

    /// Sorts the rows: numbers descending, names ascending.
    pub(crate) fn sort(&mut self, by: SortBy, model: &Model) {
        let name = |f: FuncId| model.funcs.name(f);
        match by {
            SortBy::Name => self.rows.sort_by(|a, b| name(a.func).cmp(name(b.func))),
            SortBy::Calls => self.rows.sort_by_key(|r| std::cmp::Reverse(r.calls)),
            SortBy::Total => self.rows.sort_by_key(|r| std::cmp::Reverse(r.total_ns)),
            SortBy::SelfTime => self.rows.sort_by_key(|r| std::cmp::Reverse(r.self_ns)),
            SortBy::Avg => self.rows.sort_by_key(|r| std::cmp::Reverse(r.avg_ns())),
        }
    }

    /// Self time of a flame node.
    pub(crate) fn node_self_ns(&self, node: u32) -> u64 {
        crate::tabs::flame_graph::node_self_ns(&self.flame, node)
    }
}

/// Draws the range table; clicking a header sorts by that column.
pub(crate) fn table_ui(
    ui: &mut egui::Ui,
    model: &Model,
    stats: &mut RangeStats,
    sort: &mut SortBy,
) {
    use crate::timeline::axis::format_duration;
    use egui::{Align, Layout};
    ui.heading("Range");
    ui.label(format!(
        "{} over {} functions",
        format_duration(stats.to - stats.from),
        stats.rows.len()
    ));
    const W: [f32; 5] = [0.0, 70.0, 90.0, 90.0, 90.0];
    let cols = [
        ("Function", SortBy::Name),
        ("Calls", SortBy::Calls),
        ("Total", SortBy::Total),
        ("Self", SortBy::SelfTime),
        ("Avg", SortBy::Avg),
    ];
    let name_w = (ui.available_width() - W[1..].iter().sum::<f32>() - 30.0).max(120.0);
    let mut resort = None;
    ui.horizontal(|ui| {
        for (i, (label, by)) in cols.iter().enumerate() {
            let w = if i == 0 { name_w } else { W[i] };
            // The sorted column is the highlighted one.
            let text = label.to_string();
            ui.allocate_ui_with_layout(
                egui::vec2(w, 18.0),
                Layout::left_to_right(Align::Center),
                |ui| {
                    if ui.selectable_label(*sort == *by, text).clicked() {
                        resort = Some(*by);
                    }
                },
            );
        }
    });
    if let Some(by) = resort {
        *sort = by;
        stats.sort(by, model);
    }
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 2.0;
    egui::ScrollArea::vertical()
        .id_salt("ptscope-range-table")
        .auto_shrink([false, false])
        .show_rows(ui, row_h, stats.rows.len(), |ui, range| {
            for r in &stats.rows[range] {
                ui.horizontal(|ui| {
                    // Pseudo-spans are not calls: no count, no average.
                    let call = model.funcs.is_call(r.func);
                    let cells = [
                        model.funcs.name(r.func).to_string(),
                        if call {
                            r.calls.to_string()
                        } else {
                            "-".into()
                        },
                        format_duration(r.total_ns),
                        format_duration(r.self_ns),
                        if call {
                            format_duration(r.avg_ns())
                        } else {
                            "-".into()
                        },
                    ];
                    for (i, c) in cells.into_iter().enumerate() {
                        let w = if i == 0 { name_w } else { W[i] };
                        ui.allocate_ui_with_layout(
                            egui::vec2(w, row_h),
                            Layout::left_to_right(Align::Center),
                            |ui| {
                                ui.add(egui::Label::new(c).truncate());
                            },
                        );
                    }
                });
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spans::tests::small_model;

    #[test]
    fn table_clips_to_the_range() {
        let m = small_model();
        // main(0-100) { a(10-40) { b(20-30) } a(50-60) }, main(200-300)
        let r = RangeStats::compute(&m, 0, 1000);
        let row = |f: FuncId| r.rows.iter().find(|x| x.func == f).unwrap().clone();
        assert_eq!(row(3).calls, 2);
        assert_eq!(row(3).total_ns, 200);
        assert_eq!(row(3).self_ns, 160);
        assert_eq!(row(4).total_ns, 40);
        assert_eq!(row(4).self_ns, 30);
        assert_eq!(row(4).avg_ns(), 20);
        assert_eq!(row(5).self_ns, 10);
        // Sorted by self time by default.
        assert_eq!(r.rows[0].func, 3);
        // A range inside `a`: main and a overlap it, clipped.
        let r = RangeStats::compute(&m, 25, 35);
        let row = |f: FuncId| r.rows.iter().find(|x| x.func == f).unwrap().clone();
        assert_eq!(r.rows.len(), 3);
        assert_eq!(row(3).total_ns, 10);
        assert_eq!(row(3).self_ns, 0);
        assert_eq!(row(4).self_ns, 5);
        assert_eq!(row(5).total_ns, 5);
    }

    #[test]
    fn pseudo_spans_add_time_but_no_calls() {
        use ptscope_model::{FuncTable, SpanKind, UNTRACED};

        use ptscope_model::ThreadSpans;
        let mut funcs = FuncTable::default();
        let main = funcs.intern("main", "/bin/prog", 0x1000, SpanKind::Call);
        let err = funcs.decode_error("Overflow packet");
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        t.push(0, 0, 100, main, 0);
        t.push(0, 100, 150, err, 0);
        t.push(1, 10, 20, UNTRACED, 0);
        t.push(1, 30, 40, UNTRACED, 0);
        let m = Model::of(funcs, [t]);
        let r = RangeStats::compute(&m, 0, 1000);
        let row = |f: FuncId| r.rows.iter().find(|x| x.func == f).unwrap().clone();
        assert_eq!((row(main).calls, row(main).self_ns), (1, 80));
        assert_eq!((row(UNTRACED).calls, row(UNTRACED).total_ns), (0, 20));
        assert_eq!((row(err).calls, row(err).total_ns), (0, 50));
        let node = |f: FuncId| r.flame.iter().find(|n| n.func == f).unwrap().clone();
        assert_eq!(node(main).calls, 1);
        assert_eq!((node(UNTRACED).calls, node(UNTRACED).total_ns), (0, 20));
        assert_eq!(node(err).calls, 0);
    }

    #[test]
    fn sorting_by_columns() {
        let m = small_model();
        let mut r = RangeStats::compute(&m, 0, 1000);
        r.sort(SortBy::Name, &m);
        let names: Vec<&str> = r.rows.iter().map(|x| m.funcs.name(x.func)).collect();
        assert_eq!(names, ["a", "b", "main"]);
        r.sort(SortBy::Calls, &m);
        assert_eq!(r.rows.last().unwrap().func, 5);
    }
}
