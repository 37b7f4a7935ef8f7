//! The timeline's state apart from drawing: zoom, pan and fit of the
//! window within the trace's bounds, the folded threads, and the hit tests
//! that map a point or a time to the rows and boxes drawn last frame. It is
//! plain arithmetic on the fields, kept apart so that it is tested without
//! a UI.

use egui::Rect;
use ptscope_model::Model;

use super::{Row, RowKind, Timeline};
use crate::spans::SpanRef;
use crate::timeline::frame_mesh::{self, DrawnBox};
use crate::timeline::line_detail::{self as lines, LineBox, LineFrame};
use crate::timeline::time_window::{max_width_for, TimeWindow, MIN_WIDTH_NS};

impl Timeline {
    /// Sets the trace bounds; the first time, shows all of it.
    pub(crate) fn set_bounds(&mut self, bounds: Option<(u64, u64)>) {
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
    pub(crate) fn zoom(&mut self, factor: f64, anchor: f64) {
        let max = self.max_width();
        self.window.zoom(factor, anchor, max);
        self.clamp();
    }

    /// Pans by `ns` (positive: later).
    pub(crate) fn pan_ns(&mut self, ns: f64) {
        self.window.shift(ns);
        self.clamp();
    }

    /// Shows `[from, to)` with a margin.
    pub(crate) fn fit(&mut self, from: u64, to: u64) {
        self.window = TimeWindow::fit(from, to);
        self.clamp();
    }

    /// Shows the whole trace.
    pub(crate) fn fit_all(&mut self) {
        if let Some((lo, hi)) = self.bounds {
            self.fit(lo, hi);
        }
    }

    pub(crate) fn is_collapsed(&self, tid: i32) -> bool {
        self.collapsed.contains(&tid)
    }

    pub(crate) fn set_collapsed(&mut self, tid: i32, collapsed: bool) {
        if collapsed {
            self.collapsed.insert(tid);
        } else {
            self.collapsed.remove(&tid);
        }
    }

    /// Whether zooming in can take apart a merged run covering
    /// `covered` ns: not when the view is at the zoom floor already, nor
    /// when the run is narrower than two merged boxes even there (spans
    /// of zero length, or all within a few ns).
    pub(super) fn zoom_separates(&self, covered: u64) -> bool {
        let floor_ppn = self.width_px as f64 / MIN_WIDTH_NS;
        self.window.width > MIN_WIDTH_NS * 1.01
            && covered as f64 * floor_ppn >= 2.0 * frame_mesh::MERGE_PX
    }

    /// The screen rect of span `r` as drawn last frame (its visible part),
    /// if its lane was on screen.
    pub(crate) fn span_rect(&self, model: &Model, r: SpanRef) -> Option<Rect> {
        let (s, e) = r.times(model)?;
        self.time_rect(r.thread, r.depth, s, e)
    }

    /// The screen rect of `[s, e)` in lane `depth` of thread `thread` as
    /// of last frame, if the lane was on screen.
    pub(crate) fn time_rect(&self, thread: u32, depth: u32, s: u64, e: u64) -> Option<Rect> {
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
    pub(crate) fn screen_x(&self, t: u64) -> f32 {
        let ppn = self.window.px_per_ns(self.width_px);
        self.tracks_rect.left() + self.window.x(t, ppn) as f32
    }

    /// Line spans and instructions drawn last frame, with their rows.
    pub(crate) fn line_boxes(&self) -> impl Iterator<Item = (Row, &LineBox)> + '_ {
        self.line_boxes
            .iter()
            .map(|b| (self.rows[b.row as usize], b))
    }

    /// Width of the tracks last frame, px.
    pub(crate) fn width_px(&self) -> f32 {
        self.width_px
    }

    /// The row under `pos`, if any.
    pub(super) fn row_at(&self, pos: egui::Pos2) -> Option<Row> {
        self.rows
            .iter()
            .find(|r| pos.y >= r.y0 && pos.y <= r.y1 + 1.0)
            .copied()
    }

    /// The box under the pointer, as (row, box).
    pub(super) fn hovered_box(&self, pos: egui::Pos2) -> Option<(Row, DrawnBox)> {
        let ri = self
            .rows
            .iter()
            .position(|r| pos.y >= r.y0 && pos.y <= r.y1 + 1.0)?;
        let boxes = &self.buf.boxes[self.row_boxes.get(ri)?.clone()];
        let bi = frame_mesh::hit(boxes, pos.x)?;
        Some((self.rows[ri], boxes[bi]))
    }

    /// The line-detail box under the pointer, as (row, box).
    pub(super) fn hovered_line_box(&self, pos: egui::Pos2) -> Option<(Row, LineBox)> {
        let ri = self
            .rows
            .iter()
            .position(|r| pos.y >= r.y0 && pos.y <= r.y1 + 1.0)?;
        let boxes = &self.line_boxes[self.row_line_boxes.get(ri)?.clone()];
        let bi = lines::hit(boxes, pos.x)?;
        Some((self.rows[ri], boxes[bi]))
    }

    /// Time covered by a line-detail box.
    pub(super) fn line_box_times(frame: &LineFrame, row: &Row, b: &LineBox) -> Option<(u64, u64)> {
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
}

#[cfg(test)]
mod tests {
    use egui::pos2;

    use super::*;

    /// A lane row of thread 0, 18 px tall from `y0`.
    fn lane(depth: u32, y0: f32) -> Row {
        Row {
            thread: 0,
            depth,
            kind: RowKind::Lane,
            y0,
            y1: y0 + 17.0,
        }
    }

    /// A timeline as a frame left it: 0.5 px per ns from time 1000 on,
    /// tracks from x = 100 to 600, and thread 0's marks row over its two
    /// lanes.
    fn drawn() -> Timeline {
        Timeline {
            window: TimeWindow::new(1_000, 1_000.0),
            width_px: 500.0,
            tracks_rect: Rect::from_min_max(pos2(100.0, 50.0), pos2(600.0, 400.0)),
            rows: vec![
                Row {
                    thread: 0,
                    depth: 0,
                    kind: RowKind::Marks,
                    y0: 50.0,
                    y1: 65.0,
                },
                lane(0, 66.0),
                lane(1, 84.0),
            ],
            ..Timeline::default()
        }
    }

    #[test]
    fn bounds_fit_the_window_the_first_time_only() {
        let mut t = Timeline::default();
        t.set_bounds(Some((1_000, 2_000)));
        assert_eq!(t.window, TimeWindow::fit(1_000, 2_000));
        // New bounds later (a reload) keep where the user is looking.
        t.zoom(2.0, 0.5);
        let seen = t.window;
        t.set_bounds(Some((1_000, 3_000)));
        assert_eq!(t.window, seen);
        assert_eq!(t.bounds, Some((1_000, 3_000)));
    }

    #[test]
    fn zoom_keeps_the_time_under_the_anchor() {
        let mut t = Timeline::default();
        t.set_bounds(Some((0, 1_000_000)));
        let at = |w: &TimeWindow| w.start as f64 + w.frac + 0.25 * w.width;
        let (before, width) = (at(&t.window), t.window.width);
        t.zoom(10.0, 0.25);
        assert!((at(&t.window) - before).abs() < 1e-6, "{:?}", t.window);
        assert!((t.window.width - width / 10.0).abs() < 1e-6);
    }

    #[test]
    fn zoom_out_stops_at_the_trace_and_is_free_without_one() {
        let mut t = Timeline::default();
        t.set_bounds(Some((0, 1_000_000)));
        t.zoom(1e-6, 0.5);
        assert_eq!(t.window.width, max_width_for(0, 1_000_000));
        // With no trace yet there is nothing to stop at.
        let mut t = Timeline::default();
        let width = t.window.width;
        t.zoom(0.5, 0.5);
        assert_eq!(t.window.width, width * 2.0);
    }

    #[test]
    fn panning_stops_with_the_trace_half_a_window_in() {
        let (lo, hi) = (10_000_000, 11_000_000);
        let mut t = Timeline::default();
        t.set_bounds(Some((lo, hi)));
        // Within the trace, a pan goes where it was told.
        let start = t.window.start;
        t.pan_ns(100.0);
        assert_eq!(t.window.start, start + 100);
        // Far past the end, the trace's end stops at the window's middle,
        let half = t.window.width / 2.0;
        t.pan_ns(1e9);
        assert!((t.window.rel_ns(hi) - half).abs() < 1e-3, "{:?}", t.window);
        // and far before the start, so does its start.
        t.pan_ns(-1e9);
        assert!((t.window.rel_ns(lo) - half).abs() < 1e-3, "{:?}", t.window);
    }

    #[test]
    fn fit_shows_a_range_and_fit_all_the_whole_trace() {
        let mut t = Timeline::default();
        let unset = t.window;
        t.fit_all();
        assert_eq!(t.window, unset);
        t.set_bounds(Some((0, 1_000_000)));
        t.fit(500_000, 500_100);
        assert_eq!(t.window, TimeWindow::fit(500_000, 500_100));
        t.fit_all();
        assert_eq!(t.window, TimeWindow::fit(0, 1_000_000));
    }

    #[test]
    fn folding_is_kept_by_tid() {
        let mut t = Timeline::default();
        t.set_collapsed(7, true);
        t.set_collapsed(7, true);
        assert!(t.is_collapsed(7));
        assert!(!t.is_collapsed(8));
        t.set_collapsed(7, false);
        assert!(!t.is_collapsed(7));
    }

    #[test]
    fn zoom_separates_a_run_only_above_the_floor() {
        let mut t = Timeline {
            width_px: 10.0,
            window: TimeWindow::new(0, 1e6),
            ..Timeline::default()
        };
        // At the floor the tracks show MIN_WIDTH_NS, and a run comes apart
        // only if it is two merged boxes wide there.
        let need = (2.0 * frame_mesh::MERGE_PX * MIN_WIDTH_NS / 10.0).ceil() as u64;
        assert!(need > 1);
        assert!(t.zoom_separates(need));
        assert!(!t.zoom_separates(need - 1));
        assert!(!t.zoom_separates(0));
        // At the floor already, nothing comes apart by zooming.
        t.window = TimeWindow::new(0, MIN_WIDTH_NS);
        assert!(!t.zoom_separates(1_000_000));
    }

    #[test]
    fn time_rect_maps_times_onto_the_lanes_row() {
        let t = drawn();
        assert_eq!(t.screen_x(1_200), 200.0);
        // The lane's row, not the marks row of the same thread and depth.
        assert_eq!(
            t.time_rect(0, 0, 1_200, 1_400),
            Some(Rect::from_x_y_ranges(200.0..=300.0, 66.0..=83.0))
        );
        assert_eq!(
            t.time_rect(0, 1, 1_200, 1_400),
            Some(Rect::from_x_y_ranges(200.0..=300.0, 84.0..=101.0))
        );
        // Clipped to the tracks, and never narrower than a pixel.
        assert_eq!(
            t.time_rect(0, 1, 0, 5_000),
            Some(Rect::from_x_y_ranges(100.0..=600.0, 84.0..=101.0))
        );
        assert_eq!(
            t.time_rect(0, 1, 1_200, 1_200),
            Some(Rect::from_x_y_ranges(200.0..=201.0, 84.0..=101.0))
        );
        // A lane that was not on screen has no rect.
        assert_eq!(t.time_rect(0, 2, 1_200, 1_400), None);
        assert_eq!(t.time_rect(1, 0, 1_200, 1_400), None);
    }

    #[test]
    fn hit_tests_find_the_row_and_the_box_under_a_point() {
        let mut t = Timeline {
            rows: vec![lane(0, 0.0), lane(1, 18.0)],
            ..Timeline::default()
        };
        let b = |x0: f32, x1: f32, row: u32, first: u32, count: u32| DrawnBox {
            x0,
            x1,
            row,
            first,
            count,
        };
        t.buf.boxes = vec![
            b(0.0, 10.0, 0, 0, 1),
            b(20.0, 30.0, 0, 1, 3),
            b(5.0, 50.0, 1, 0, 1),
        ];
        t.row_boxes = vec![0..2, 2..3];
        let (row, hit) = t.hovered_box(pos2(25.0, 5.0)).unwrap();
        assert_eq!((row.depth, hit.first, hit.count), (0, 1, 3));
        // The pixel between two rows belongs to the upper one.
        let (row, hit) = t.hovered_box(pos2(25.0, 17.5)).unwrap();
        assert_eq!((row.depth, hit.first), (0, 1));
        // The same x in the next row hits that row's box.
        let (row, hit) = t.hovered_box(pos2(25.0, 20.0)).unwrap();
        assert_eq!((row.depth, hit.first, hit.count), (1, 0, 1));
        // A gap between boxes, and the space below the rows, hit nothing.
        assert!(t.hovered_box(pos2(15.0, 5.0)).is_none());
        assert!(t.hovered_box(pos2(25.0, 100.0)).is_none());
        assert_eq!(t.row_at(pos2(0.0, 20.0)).map(|r| r.depth), Some(1));
        assert!(t.row_at(pos2(0.0, 100.0)).is_none());
    }

    #[test]
    fn line_boxes_are_hit_and_listed_with_their_rows() {
        let mut t = Timeline {
            rows: vec![
                lane(0, 0.0),
                Row {
                    thread: 0,
                    depth: 1,
                    kind: RowKind::Insns,
                    y0: 18.0,
                    y1: 35.0,
                },
            ],
            ..Timeline::default()
        };
        let b = |x0: f32, x1: f32, row: u32, first: u32, count: u32| LineBox {
            x0,
            x1,
            row,
            key: (0, 0),
            first,
            count,
        };
        t.line_boxes = vec![b(0.0, 40.0, 0, 0, 1), b(10.0, 20.0, 1, 4, 2)];
        t.row_line_boxes = vec![0..1, 1..2];
        let (row, hit) = t.hovered_line_box(pos2(15.0, 25.0)).unwrap();
        assert_eq!((row.kind, hit.first, hit.count), (RowKind::Insns, 4, 2));
        assert!(t.hovered_line_box(pos2(100.0, 5.0)).is_none());
        let listed: Vec<_> = t.line_boxes().map(|(r, b)| (r.kind, b.first)).collect();
        assert_eq!(listed, [(RowKind::Lane, 0), (RowKind::Insns, 4)]);
    }
}
