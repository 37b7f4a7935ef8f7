//! The Flame graph tab: this module builds the flame graph of a range
//! selection, with the calls of each call path merged into one node, and
//! draws it as an icicle (callers on top, callees below).
//!
//! The graph is built in the same pass over the range's spans as the range
//! table ([`RangeStats::compute`] feeds a `FlameBuilder`), so it costs no
//! second walk. Siblings sort by name, as flame graphs usually do, so the
//! picture does not depend on the order of the calls. Drawing puts every
//! box into one mesh, as the timeline does ([`crate::timeline::frame_mesh::rect`]),
//! and labels only the boxes wide enough to read.

use std::collections::HashMap;

use ptscope_model::FuncId;
use ptscope_model::Model;

use crate::tabs::range::RangeStats;

/// A node of the range's flame graph: one call path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FlameNode {
    pub func: FuncId,
    /// Parent node; the root (index 0) is its own parent.
    pub parent: u32,
    pub depth: u32,
    pub total_ns: u64,
    /// Calls on this path; 0 for a pseudo-function's node, whose spans
    /// are not calls.
    pub calls: u64,
    pub children: Vec<u32>,
}

/// Builds the flame graph while the range's spans are walked, one call at a
/// time, outermost calls first.
pub(crate) struct FlameBuilder {
    nodes: Vec<FlameNode>,
    /// The node of each (parent node, function): calls on one path merge.
    child_index: HashMap<(u32, FuncId), u32>,
}

impl FlameBuilder {
    /// A graph holding only its root (all threads, node 0).
    pub(crate) fn new() -> FlameBuilder {
        FlameBuilder {
            nodes: vec![FlameNode {
                func: FuncId::MAX,
                parent: 0,
                depth: 0,
                total_ns: 0,
                calls: 0,
                children: Vec::new(),
            }],
            child_index: HashMap::new(),
        }
    }

    /// Counts a span of `func` at `depth` (0 for a thread's outermost
    /// calls) under the node `parent`, `ns` of it inside the range, and
    /// returns its node, for its own calls to be filed under. `call`
    /// tells a call from a pseudo-span, which adds time but no call.
    pub(crate) fn add(
        &mut self,
        parent: u32,
        func: FuncId,
        call: bool,
        depth: usize,
        ns: u64,
    ) -> u32 {
        let nodes = &mut self.nodes;
        let node = *self.child_index.entry((parent, func)).or_insert_with(|| {
            let id = nodes.len() as u32;
            nodes.push(FlameNode {
                func,
                parent,
                depth: depth as u32 + 1,
                total_ns: 0,
                calls: 0,
                children: Vec::new(),
            });
            nodes[parent as usize].children.push(id);
            id
        });
        nodes[node as usize].total_ns += ns;
        nodes[node as usize].calls += call as u64;
        node
    }

    /// The finished graph: the root's total set, siblings in name order.
    pub(crate) fn finish(self, model: &Model) -> Vec<FlameNode> {
        let mut flame = self.nodes;
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
        flame
    }
}

/// Self time of the node `node` of `flame`: its total less its children's.
pub(crate) fn node_self_ns(flame: &[FlameNode], node: u32) -> u64 {
    let n = &flame[node as usize];
    let kids: u64 = n.children.iter().map(|&c| flame[c as usize].total_ns).sum();
    n.total_ns.saturating_sub(kids)
}

/// Draws the flame graph of the range (icicle: callers on top).
pub(crate) fn flame_ui(
    ui: &mut egui::Ui,
    model: &Model,
    stats: &RangeStats,
    styles: &[crate::color::FuncStyle],
) {
    use crate::timeline::axis::format_duration;
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
                crate::timeline::frame_mesh::rect(
                    &mut mesh,
                    r.left(),
                    r.right(),
                    r.top(),
                    r.bottom(),
                    fill,
                );
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
                    if model.funcs.is_call(node.func) {
                        ui.label(format!("{} calls", node.calls));
                    }
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
        use ptscope_model::ThreadSpans;
        use ptscope_model::{FuncTable, SpanKind};
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
        m.threads = vec![ptscope_model::ThreadModel::from_spans(t)];
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
