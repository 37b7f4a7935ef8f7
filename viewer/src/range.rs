//! Range selection: per-function figures and a flame graph of what ran
//! inside `[from, to)`.
//!
//! Spans overlapping the range count as calls, with their times clipped to
//! it, so "self" over all functions adds up to the time the threads spent
//! in the range. A recursive function's total counts every level.

use std::collections::HashMap;

use ptscope_decoder::event::FuncId;
use ptscope_decoder::model::Model;

/// One row of the range table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeRow {
    pub func: FuncId,
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
pub enum SortBy {
    Name,
    Calls,
    Total,
    #[default]
    SelfTime,
    Avg,
}

/// A node of the range's flame graph: one call path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlameNode {
    pub func: FuncId,
    /// Parent node; the root (index 0) is its own parent.
    pub parent: u32,
    pub depth: u32,
    pub total_ns: u64,
    pub calls: u64,
    pub children: Vec<u32>,
}

/// What a range selection computes, once, when the range is set.
#[derive(Clone, Debug, Default)]
pub struct RangeStats {
    pub from: u64,
    pub to: u64,
    pub rows: Vec<RangeRow>,
    /// Node 0 is the root (all threads); its children are depth-0 calls.
    pub flame: Vec<FlameNode>,
}

impl RangeStats {
    /// Computes the table and the flame graph of `[from, to)`.
    pub fn compute(model: &Model, from: u64, to: u64) -> RangeStats {
        let mut per_func: HashMap<FuncId, (u64, u64, i64)> = HashMap::new();
        let mut flame = vec![FlameNode {
            func: FuncId::MAX,
            parent: 0,
            depth: 0,
            total_ns: 0,
            calls: 0,
            children: Vec::new(),
        }];
        let mut child_index: HashMap<(u32, FuncId), u32> = HashMap::new();
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
                    let node = *child_index.entry((parent_node, f)).or_insert_with(|| {
                        let id = flame.len() as u32;
                        flame.push(FlameNode {
                            func: f,
                            parent: parent_node,
                            depth: d as u32 + 1,
                            total_ns: 0,
                            calls: 0,
                            children: Vec::new(),
                        });
                        flame[parent_node as usize].children.push(id);
                        id
                    });
                    flame[node as usize].total_ns += clipped;
                    flame[node as usize].calls += 1;
                    cur_nodes.push(node);
                    let e = per_func.entry(f).or_default();
                    e.0 += 1;
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
        flame[0].total_ns = flame[0]
            .children
            .iter()
            .map(|&c| flame[c as usize].total_ns)
            .sum();
        // Siblings in name order, as flame graphs usually are.
        let names: Vec<&str> = flame
            .iter()
            .map(|n| {
                if n.func == FuncId::MAX {
                    ""
                } else {
                    model.funcs.name(n.func)
                }
            })
            .collect();
        let mut kids: Vec<Vec<u32>> = flame.iter().map(|n| n.children.clone()).collect();
        for k in &mut kids {
            k.sort_by(|a, b| names[*a as usize].cmp(names[*b as usize]));
        }
        for (n, k) in flame.iter_mut().zip(kids) {
            n.children = k;
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
            flame,
        };
        r.sort(SortBy::default(), model);
        r
    }

    /// Sorts the rows: numbers descending, names ascending.
    pub fn sort(&mut self, by: SortBy, model: &Model) {
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
    pub fn node_self_ns(&self, node: u32) -> u64 {
        let n = &self.flame[node as usize];
        let kids: u64 = n
            .children
            .iter()
            .map(|&c| self.flame[c as usize].total_ns)
            .sum();
        n.total_ns.saturating_sub(kids)
    }
}

/// Draws the range table; clicking a header sorts by that column.
pub fn table_ui(ui: &mut egui::Ui, model: &Model, stats: &mut RangeStats, sort: &mut SortBy) {
    use crate::axis::format_duration;
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
                    let cells = [
                        model.funcs.name(r.func).to_string(),
                        r.calls.to_string(),
                        format_duration(r.total_ns),
                        format_duration(r.self_ns),
                        format_duration(r.avg_ns()),
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

/// Draws the flame graph of the range (icicle: callers on top).
pub fn flame_ui(
    ui: &mut egui::Ui,
    model: &Model,
    stats: &RangeStats,
    styles: &[crate::color::FuncStyle],
) {
    use crate::axis::format_duration;
    use egui::{pos2, vec2, Align2, FontId, Rect, Sense};
    const ROW: f32 = 18.0;
    let max_depth = stats.flame.iter().map(|n| n.depth).max().unwrap_or(0) as f32;
    let avail = ui.available_rect_before_wrap();
    let h = (max_depth * ROW).max(avail.height());
    egui::ScrollArea::vertical()
        .id_salt("ptscope-flame")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            let (rect, resp) = ui.allocate_exact_size(vec2(avail.width(), h), Sense::hover());
            resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Canvas, true, "Flame graph"));
            let painter = ui.painter_at(rect);
            let root_total = stats.flame[0].total_ns.max(1) as f64;
            let px = rect.width() as f64 / root_total;
            let mut mesh = egui::epaint::Mesh::default();
            let mut labels = Vec::new();
            let mut hovered = None;
            let hover = resp.hover_pos();
            // (node, left x); children are laid out left to right, so a
            // node's left edge is its parent's plus its elder siblings'.
            let mut stack: Vec<(u32, f32)> = Vec::new();
            let mut x = rect.left() as f64;
            for &c in &stats.flame[0].children {
                stack.push((c, x as f32));
                x += stats.flame[c as usize].total_ns as f64 * px;
            }
            stack.reverse();
            while let Some((n, x0)) = stack.pop() {
                let node = &stats.flame[n as usize];
                let w = (node.total_ns as f64 * px) as f32;
                if w < 1.0 {
                    continue;
                }
                let y0 = rect.top() + (node.depth - 1) as f32 * ROW;
                let r = Rect::from_min_size(pos2(x0, y0), vec2((w - 1.0).max(1.0), ROW - 1.0));
                let fill = styles
                    .get(node.func as usize)
                    .map_or(crate::color::MERGED, |s| s.fill);
                crate::layout::rect(&mut mesh, r.left(), r.right(), r.top(), r.bottom(), fill);
                if w > 30.0 {
                    labels.push((r, node.func, fill));
                }
                if hover.is_some_and(|p| r.contains(p)) {
                    hovered = Some(n);
                }
                let mut cx = x0 as f64;
                let mut kids = Vec::with_capacity(node.children.len());
                for &c in &node.children {
                    kids.push((c, cx as f32));
                    cx += stats.flame[c as usize].total_ns as f64 * px;
                }
                stack.extend(kids.into_iter().rev());
            }
            painter.add(egui::Shape::mesh(mesh));
            for (r, f, fill) in labels {
                let name = model.funcs.name(f);
                painter.with_clip_rect(r).text(
                    pos2(r.left() + 3.0, r.center().y),
                    Align2::LEFT_CENTER,
                    name,
                    FontId::monospace(11.0),
                    crate::color::text_on(fill),
                );
            }
            if let Some(n) = hovered {
                let node = &stats.flame[n as usize];
                resp.on_hover_ui_at_pointer(|ui| {
                    ui.strong(model.funcs.name(node.func));
                    ui.label(format!("{} calls", node.calls));
                    ui.label(format!("Total: {}", format_duration(node.total_ns)));
                    ui.label(format!("Self: {}", format_duration(stats.node_self_ns(n))));
                    ui.label(format!(
                        "{:.1}% of the range",
                        node.total_ns as f64 * 100.0 / root_total
                    ));
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
    fn sorting_by_columns() {
        let m = small_model();
        let mut r = RangeStats::compute(&m, 0, 1000);
        r.sort(SortBy::Name, &m);
        let names: Vec<&str> = r.rows.iter().map(|x| m.funcs.name(x.func)).collect();
        assert_eq!(names, ["a", "b", "main"]);
        r.sort(SortBy::Calls, &m);
        assert_eq!(r.rows.last().unwrap().func, 5);
    }

    #[test]
    fn flame_merges_call_paths() {
        let m = small_model();
        let r = RangeStats::compute(&m, 0, 1000);
        // root -> main -> a -> b: four nodes, both `a` calls merged.
        assert_eq!(r.flame.len(), 4);
        assert_eq!(r.flame[0].total_ns, 200);
        let main = r.flame[0].children[0];
        assert_eq!(r.flame[main as usize].calls, 2);
        let a = r.flame[main as usize].children[0];
        assert_eq!(
            (r.flame[a as usize].calls, r.flame[a as usize].total_ns),
            (2, 40)
        );
        assert_eq!(r.node_self_ns(a), 30);
        assert_eq!(r.node_self_ns(main), 160);
    }

    #[test]
    fn flame_files_calls_at_a_tie_under_the_stores_parent() {
        use ptscope_decoder::event::{FuncTable, SpanKind};
        use ptscope_decoder::store::ThreadSpans;
        // a (10-20) makes the zero-length call `last` at 20 and tail-calls
        // b (20-30), which at once makes the zero-length call `first`:
        // both calls lie in a and in b; the builder filed `first` under b.
        let mut funcs = FuncTable::default();
        let f: Vec<FuncId> = ["a", "b", "last", "first"]
            .iter()
            .map(|n| funcs.intern(n, "/bin/prog", 0, SpanKind::Call))
            .collect();
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        t.push(0, 10, 20, f[0], 0);
        t.push(0, 20, 30, f[1], 0);
        t.push(1, 20, 20, f[2], 0);
        t.push(1, 20, 20, f[3], 0);
        t.file_under(1, 1, 1);
        let mut m = small_model();
        m.funcs = funcs;
        m.threads = vec![crate::spans::tests::thread_model(t)];
        let r = RangeStats::compute(&m, 0, 100);
        let path = |leaf: FuncId| {
            let mut n = r.flame.iter().position(|n| n.func == leaf).unwrap();
            let mut names = Vec::new();
            while n != 0 {
                names.push(m.funcs.name(r.flame[n].func).to_string());
                n = r.flame[n].parent as usize;
            }
            names
        };
        assert_eq!(path(f[2]), ["last", "a"]);
        assert_eq!(path(f[3]), ["first", "b"]);
    }
}
