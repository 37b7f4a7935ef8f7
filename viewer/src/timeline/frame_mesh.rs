//! Frame building: this module turns the visible spans of a lane into the
//! boxes of one mesh. It is the hot path of every frame.
//!
//! The timeline and the overview strip call [`layout_lane`] once per lane
//! on screen. A zoomed-out lane can hold millions of spans, so the work is
//! pure CPU with no egui widgets, no allocation per span and no shape per
//! span: every box is four vertices appended to one [`Mesh`] that egui
//! paints in one go, and a list of [`DrawnBox`]es records what went where,
//! for labels and for hit testing ([`hit`]).
//!
//! Runs of spans narrower than [`MERGE_PX`] merge, Tracy-style, into one
//! box carrying their count. Finding the end of a run does not walk the
//! spans in it: it steps over the store's blocks whose spans all merge,
//! and otherwise searches for the first span that starts more than
//! [`MERGE_GAP_PX`] past the run, so a lane costs about one search per
//! pixel column however many spans it holds. Line detail
//! ([`crate::timeline::line_detail`]) and the flame graph build their boxes with the same
//! primitives.

use std::ops::Range;

use egui::epaint::{Mesh, Vertex, WHITE_UV};
use egui::{pos2, Color32, Pos2};
use ptscope_model::{Block, Span, ThreadSpans, BLOCK};

use crate::color::{FuncStyle, HATCH, MERGED, MERGED_DIMMED};
use crate::timeline::time_window::TimeWindow;

/// Spans narrower than this (px) merge with their neighbours.
pub(crate) const MERGE_PX: f64 = 3.0;
/// A run of narrow spans absorbs spans starting within this many px of
/// its end. Each step of a run moves about this far, so a lane costs
/// about `width / MERGE_GAP_PX` searches however many spans it holds.
pub(crate) const MERGE_GAP_PX: f64 = 3.0;
/// Narrow spans are drawn at least this wide so they stay visible.
pub(crate) const MIN_BOX_PX: f64 = 1.0;
/// Boxes at least this wide get a 1 px gap on the right, so neighbours
/// with the same color stay apart.
const GAP_MIN_PX: f64 = 6.0;
/// Distance between hatch stripes.
const HATCH_PX: f32 = 8.0;

/// One box drawn this frame: a span (`count == 1`) or a merged run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DrawnBox {
    /// Screen x of the box's edges (clamped to just past the lane).
    pub x0: f32,
    pub x1: f32,
    /// The caller's row number (which thread and depth).
    pub row: u32,
    /// Index of the first span in the lane.
    pub first: u32,
    /// Spans in the box.
    pub count: u32,
}

/// How spans are colored this frame.
#[derive(Clone, Copy)]
pub struct Paint<'a> {
    /// Style per `FuncId`.
    pub styles: &'a [FuncStyle],
    /// Search mask per `FuncId`, when a search is active.
    pub search: Option<&'a [bool]>,
}

/// Where a lane goes on screen.
#[derive(Clone, Copy, Debug)]
pub struct LaneGeom {
    /// Screen x of the window's left edge.
    pub left: f32,
    /// Lane width in px.
    pub width: f32,
    /// Top and bottom of the boxes.
    pub y0: f32,
    pub y1: f32,
    /// Row number stored in the boxes.
    pub row: u32,
}

/// The output of frame building, reused from frame to frame.
#[derive(Default)]
pub struct FrameBuf {
    pub mesh: Mesh,
    pub boxes: Vec<DrawnBox>,
}

impl FrameBuf {
    /// Empties the buffers, keeping their capacity.
    pub fn clear(&mut self) {
        self.mesh.clear();
        self.boxes.clear();
    }

    /// Hands the mesh over for painting; the next frame starts a new one
    /// with the same capacity.
    pub fn take_mesh(&mut self) -> Mesh {
        let (v, i) = (self.mesh.vertices.len(), self.mesh.indices.len());
        let mut next = Mesh::default();
        next.vertices.reserve(v);
        next.indices.reserve(i);
        std::mem::replace(&mut self.mesh, next)
    }
}

#[inline]
fn quad(mesh: &mut Mesh, p: [Pos2; 4], color: Color32) {
    let idx = mesh.vertices.len() as u32;
    mesh.indices
        .extend_from_slice(&[idx, idx + 1, idx + 2, idx + 2, idx + 1, idx + 3]);
    for pos in p {
        mesh.vertices.push(Vertex {
            pos,
            uv: WHITE_UV,
            color,
        });
    }
}

/// Appends a filled rectangle.
#[inline]
pub fn rect(mesh: &mut Mesh, x0: f32, x1: f32, y0: f32, y1: f32, color: Color32) {
    quad(
        mesh,
        [pos2(x0, y0), pos2(x1, y0), pos2(x0, y1), pos2(x1, y1)],
        color,
    );
}

/// Diagonal stripes over `[x0, x1] × [y0, y1]`, clipped to it.
fn hatch(mesh: &mut Mesh, x0: f32, x1: f32, y0: f32, y1: f32) {
    let h = y1 - y0;
    // Stripes are aligned to absolute x so they do not crawl when panning.
    let mut x = (x0 / HATCH_PX).floor() * HATCH_PX - h;
    while x < x1 {
        let c = |v: f32| v.clamp(x0, x1);
        quad(
            mesh,
            [
                pos2(c(x + h), y0),
                pos2(c(x + h + 2.5), y0),
                pos2(c(x), y1),
                pos2(c(x + 2.5), y1),
            ],
            HATCH,
        );
        x += HATCH_PX;
    }
}

/// The first index in `i..hi` whose span starts after `reach` (or `hi`).
/// The answer is usually a few spans past `i`, so this gallops outward
/// from `i` before bisecting: the probes stay near `i` in memory, where a
/// plain binary search over the whole lane would miss the cache at
/// nearly every step.
/// Generic over what is searched (`start` reads an item's start): call
/// spans here, line spans and instructions in [`crate::timeline::line_detail`].
#[inline]
pub(crate) fn gallop<T>(
    items: &[T],
    i: usize,
    hi: usize,
    reach: u64,
    start: impl Fn(&T) -> u64,
) -> usize {
    let mut lo = i;
    let mut probe = i;
    let mut step = 1;
    while probe < hi && start(&items[probe]) <= reach {
        lo = probe + 1;
        probe = i + step;
        step *= 2;
    }
    let end = probe.min(hi);
    lo + items[lo..end].partition_point(|s| start(s) <= reach)
}

fn span_start(s: &Span) -> u64 {
    s.start
}

/// Lays out lane `depth` of `spans` for window `win`, appending boxes to
/// `out`. Returns the range of `out.boxes` it added (sorted by x).
pub fn layout_lane(
    out: &mut FrameBuf,
    spans: &ThreadSpans,
    depth: usize,
    win: &TimeWindow,
    geom: &LaneGeom,
    paint: &Paint,
) -> Range<usize> {
    layout_lane_with(out, spans, depth, (win, geom), paint, true)
}

/// Decisions this close to a threshold (px) are never taken a block at a
/// time, so stepping over blocks merges exactly what span by span would.
const BLOCK_SLACK_PX: f64 = 0.01;

/// [`layout_lane`]; `use_blocks: false` reads every run span by span (the
/// reference the block summaries are tested against).
fn layout_lane_with(
    out: &mut FrameBuf,
    spans: &ThreadSpans,
    depth: usize,
    (win, geom): (&TimeWindow, &LaneGeom),
    paint: &Paint,
    use_blocks: bool,
) -> Range<usize> {
    let first_box = out.boxes.len();
    let blocks = if use_blocks { spans.blocks(depth) } else { &[] };
    let lane = spans.lane(depth);
    if lane.is_empty() || geom.width <= 0.0 {
        return first_box..first_box;
    }
    let ppn = win.px_per_ns(geom.width);
    let from = win.time_at_rel(0.0);
    let to = win.end();
    let vis = spans.visible(depth, from, to);
    let hi = vis.end;
    let mut i = vis.start;
    // Offscreen ends are clamped before going to f32, which cannot hold a
    // far-away x exactly (and need not).
    let lim_lo = -2.0;
    let lim_hi = geom.width as f64 + 2.0;
    let (y0, y1) = (geom.y0, geom.y1);
    while i < hi {
        let s = lane[i];
        let x0 = win.x(s.start, ppn);
        let x1 = x0 + spans.duration(depth, i) as f64 * ppn;
        if x1 - x0 >= MERGE_PX {
            let st = &paint.styles[s.func() as usize];
            let dimmed = paint
                .search
                .is_some_and(|m| !m.get(s.func() as usize).copied().unwrap_or(false));
            let color = if dimmed { st.dimmed } else { st.fill };
            let gap = if x1 - x0 >= GAP_MIN_PX { 1.0 } else { 0.0 };
            let bx0 = geom.left + x0.clamp(lim_lo, lim_hi) as f32;
            let bx1 = geom.left + (x1 - gap).clamp(lim_lo, lim_hi) as f32;
            rect(&mut out.mesh, bx0, bx1, y0, y1, color);
            if st.hatched {
                hatch(&mut out.mesh, bx0, bx1, y0, y1);
            }
            out.boxes.push(DrawnBox {
                x0: bx0,
                x1: bx1,
                row: geom.row,
                first: i as u32,
                count: 1,
            });
            i += 1;
            continue;
        }
        // A narrow span: extend a run over every span that starts within
        // a few pixels of its end, jumping by search, not walking.
        let first = i;
        let mut run_end = x1;
        i += 1;
        // Thresholds in ns for whole blocks: every span narrow, every gap
        // within reach of the span before.
        let narrow_ns = (MERGE_PX - BLOCK_SLACK_PX) / ppn;
        let close_ns = (MERGE_GAP_PX - BLOCK_SLACK_PX) / ppn;
        while i < hi {
            // Step over blocks that merge whole. A block's spans before `i`
            // only make its maxima larger: never a wrong step.
            let mut stepped = false;
            while let Some(b) = blocks.get(i / BLOCK) {
                let next = (i / BLOCK + 1) * BLOCK;
                let long = |ns: u32, limit: f64| ns == Block::MANY || ns as f64 >= limit;
                if next > hi || long(b.max_dur, narrow_ns) || long(b.max_gap, close_ns) {
                    break;
                }
                i = next;
                stepped = true;
            }
            if stepped {
                // Spans of a lane are disjoint: the last one ends last.
                let last = i - 1;
                let lx0 = win.x(lane[last].start, ppn);
                run_end = run_end.max(lx0 + spans.duration(depth, last) as f64 * ppn);
                if i >= hi {
                    break;
                }
            }
            let reach = win.time_at_px(run_end + MERGE_GAP_PX, ppn);
            let j = gallop(lane, i, hi, reach, span_start);
            if j == i {
                break;
            }
            // Spans i..j-1 start within reach; all but the last end
            // before the last starts, so only the last can be wide.
            let last = j - 1;
            let lx0 = win.x(lane[last].start, ppn);
            let lx1 = lx0 + spans.duration(depth, last) as f64 * ppn;
            if lx1 - lx0 >= MERGE_PX {
                if last > i {
                    // The run ends where the span before the wide one does.
                    let p = last - 1;
                    let px0 = win.x(lane[p].start, ppn);
                    run_end = run_end.max(px0 + spans.duration(depth, p) as f64 * ppn);
                }
                i = last;
                break;
            }
            run_end = run_end.max(lx1);
            i = j;
        }
        let count = i - first;
        let x1 = run_end.max(x0 + MIN_BOX_PX);
        let bx0 = geom.left + x0.clamp(lim_lo, lim_hi) as f32;
        let bx1 = geom.left + x1.clamp(lim_lo, lim_hi) as f32;
        let color = if count == 1 {
            let st = &paint.styles[s.func() as usize];
            let dimmed = paint
                .search
                .is_some_and(|m| !m.get(s.func() as usize).copied().unwrap_or(false));
            if dimmed {
                st.dimmed
            } else {
                st.fill
            }
        } else if paint.search.is_some() {
            MERGED_DIMMED
        } else {
            MERGED
        };
        rect(&mut out.mesh, bx0, bx1, y0, y1, color);
        out.boxes.push(DrawnBox {
            x0: bx0,
            x1: bx1,
            row: geom.row,
            first: first as u32,
            count: count as u32,
        });
    }
    first_box..out.boxes.len()
}

/// The box of `boxes` (one lane's, sorted by x) under screen x `x`, with
/// a little slack for boxes that are only a pixel wide.
pub(crate) fn hit(boxes: &[DrawnBox], x: f32) -> Option<usize> {
    let i = boxes.partition_point(|b| b.x1 < x - 1.0);
    let b = boxes.get(i)?;
    (b.x0 <= x + 1.0).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::color::func_style;
    use ptscope_model::SpanKind;

    fn styles(n: usize) -> Vec<FuncStyle> {
        (0..n)
            .map(|i| func_style(&format!("f{i}"), SpanKind::Call))
            .collect()
    }

    fn geom(width: f32) -> LaneGeom {
        LaneGeom {
            left: 0.0,
            width,
            y0: 0.0,
            y1: 10.0,
            row: 0,
        }
    }

    fn run(t: &ThreadSpans, depth: usize, win: &TimeWindow, width: f32) -> Vec<DrawnBox> {
        let st = styles(8);
        let mut buf = FrameBuf::default();
        let paint = Paint {
            styles: &st,
            search: None,
        };
        let r = layout_lane(&mut buf, t, depth, win, &geom(width), &paint);
        assert_eq!(r, 0..buf.boxes.len());
        // Four vertices and six indices per box, plus hatching (none here).
        assert_eq!(buf.mesh.vertices.len(), buf.boxes.len() * 4);
        buf.boxes
    }

    #[test]
    fn wide_spans_are_one_box_each() {
        let mut t = ThreadSpans::new(1, 1, "t".into());
        t.push(0, 0, 100, 3, 0);
        t.push(0, 200, 300, 4, 0);
        let b = run(&t, 0, &TimeWindow::new(0, 1000.0), 1000.0);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].x0, b[0].x1, b[0].count), (0.0, 99.0, 1));
        assert_eq!((b[1].x0, b[1].first), (200.0, 1));
    }

    #[test]
    fn narrow_spans_merge_with_a_count() {
        let mut t = ThreadSpans::new(1, 1, "t".into());
        // 10,000 spans of 1 ns every 2 ns, then a wide one.
        for i in 0..10_000u64 {
            t.push(0, i * 2, i * 2 + 1, 3, 0);
        }
        t.push(0, 30_000, 60_000, 4, 0);
        // 100 ns per px: every small span is 0.01 px.
        let b = run(&t, 0, &TimeWindow::new(0, 100_000.0), 1000.0);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!((b[0].first, b[0].count), (0, 10_000));
        assert!((b[0].x1 - 200.0).abs() <= 1.0, "{:?}", b[0]);
        assert_eq!((b[1].first, b[1].count), (10_000, 1));
        // Zoomed in, they separate again.
        let b = run(&t, 0, &TimeWindow::new(0, 100.0), 1000.0);
        assert_eq!(b.len(), 50);
        assert!(b.iter().all(|x| x.count == 1));
    }

    #[test]
    fn a_gap_of_a_few_pixels_ends_a_run() {
        let mut t = ThreadSpans::new(1, 1, "t".into());
        t.push(0, 0, 1, 3, 0);
        t.push(0, 2, 3, 3, 0);
        t.push(0, 500, 501, 3, 0);
        let b = run(&t, 0, &TimeWindow::new(0, 1000.0), 1000.0);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].count, b[1].count), (2, 1));
        assert_eq!(b[1].x0, 500.0);
        assert_eq!(b[1].x1, 501.0);
    }

    #[test]
    fn a_wide_span_ends_a_run_and_is_drawn_itself() {
        let mut t = ThreadSpans::new(1, 1, "t".into());
        t.push(0, 0, 1, 3, 0);
        t.push(0, 1, 2, 3, 0);
        t.push(0, 2, 900, 4, 0);
        let b = run(&t, 0, &TimeWindow::new(0, 1000.0), 1000.0);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!((b[0].first, b[0].count), (0, 2));
        assert_eq!((b[1].first, b[1].count), (2, 1));
    }

    #[test]
    fn precision_holds_at_large_times() {
        let base = 1_000_000_000_000_000u64; // 10^15 ns
        let mut t = ThreadSpans::new(1, 1, "t".into());
        t.push(0, base + 10, base + 20, 3, 0);
        t.push(0, base + 21, base + 31, 4, 0);
        // 10 px per ns.
        let b = run(&t, 0, &TimeWindow::new(base, 100.0), 1000.0);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].x0, b[0].x1), (100.0, 199.0));
        assert_eq!((b[1].x0, b[1].x1), (210.0, 309.0));
        // A fractional window start moves boxes by a fraction of a ns.
        let mut w = TimeWindow::new(base, 100.0);
        w.shift(0.5);
        let b = run(&t, 0, &w, 1000.0);
        assert_eq!(b[0].x0, 95.0);
    }

    #[test]
    fn visible_range_edges() {
        let mut t = ThreadSpans::new(1, 1, "t".into());
        t.push(0, 0, 100, 3, 0); // ends before the window
        t.push(0, 150, 250, 4, 0); // straddles the left edge
        t.push(0, 400, 600, 5, 0); // straddles the right edge
        t.push(0, 700, 800, 6, 0); // after
        let b = run(&t, 0, &TimeWindow::new(200, 300.0), 300.0);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(b[0].first, 1);
        assert_eq!(b[0].x0, -2.0); // clamped just off screen
        assert_eq!(b[1].first, 2);
        assert_eq!(b[1].x1, 302.0);
        // A window that ends exactly where a span starts does not show it.
        let b = run(&t, 0, &TimeWindow::new(600, 100.0), 100.0);
        assert_eq!(b.len(), 0, "{b:?}");
    }

    #[test]
    fn dense_lanes_cost_about_one_search_per_pixel() {
        // 2M spans of 1 ns every 2 ns into 1000 px: few boxes, fast.
        let mut t = ThreadSpans::new(1, 1, "t".into());
        for i in 0..2_000_000u64 {
            t.push(0, i * 2, i * 2 + 1, 3, 0);
        }
        let b = run(&t, 0, &TimeWindow::new(0, 4_000_000.0), 1000.0);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].count, 2_000_000);
    }

    #[test]
    fn search_dims_non_matching_spans() {
        let mut t = ThreadSpans::new(1, 1, "t".into());
        t.push(0, 0, 100, 3, 0);
        t.push(0, 200, 300, 4, 0);
        let st = styles(8);
        let mask = [false, false, false, true, false, false, false, false];
        let mut buf = FrameBuf::default();
        let paint = Paint {
            styles: &st,
            search: Some(&mask),
        };
        layout_lane(
            &mut buf,
            &t,
            0,
            &TimeWindow::new(0, 1000.0),
            &geom(1000.0),
            &paint,
        );
        assert_eq!(buf.mesh.vertices[0].color, st[3].fill);
        assert_eq!(buf.mesh.vertices[4].color, st[4].dimmed);
    }

    #[test]
    fn gallop_agrees_with_binary_search() {
        let mut t = ThreadSpans::new(1, 1, "t".into());
        for i in 0..1000u64 {
            t.push(0, i * 3, i * 3 + 1, 3, 0);
        }
        let lane = t.lane(0);
        for i in [0usize, 1, 17, 500, 999] {
            for reach in [0u64, 2, 3, 50, 1500, 2997, 5000] {
                let want = i + lane[i..].partition_point(|s| s.start <= reach);
                assert_eq!(
                    gallop(lane, i, lane.len(), reach, span_start),
                    want,
                    "{i} {reach}"
                );
            }
        }
        assert_eq!(gallop(lane, 10, 20, 5000, span_start), 20);
    }

    #[test]
    fn stepping_over_blocks_draws_what_span_by_span_does() {
        // Lanes of dense narrow spans with now and then a long gap or a
        // long span, over many blocks, seen at many zooms and offsets.
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let mut rnd = move |n: u64| rng.u64(..n);
        let mut t = ThreadSpans::new(1, 1, "t".into());
        for depth in 0..3 {
            let mut at = 1_000_000u64;
            for _ in 0..20_000 {
                let gap = match rnd(1000) {
                    0..=2 => 50_000 + rnd(200_000),
                    _ => rnd(40),
                };
                let dur = match rnd(2000) {
                    0 => 100_000 + rnd(1_000_000),
                    _ => 1 + rnd(60),
                };
                at += gap;
                t.push(depth, at, at + dur, rnd(8) as u32, 0);
                at += dur;
            }
        }
        let (lo, hi) = t.time_range().unwrap();
        let st = styles(8);
        let paint = Paint {
            styles: &st,
            search: None,
        };
        let mut stepped = 0;
        for width in [1e4, 1e5, 1e6, 1e7, (hi - lo) as f64] {
            for k in 0..7 {
                let mut win = TimeWindow::new(lo, width);
                win.shift((hi - lo) as f64 * k as f64 / 7.0);
                for depth in 0..3 {
                    let mut a = FrameBuf::default();
                    let mut b = FrameBuf::default();
                    let g = geom(1920.0);
                    layout_lane_with(&mut a, &t, depth, (&win, &g), &paint, true);
                    layout_lane_with(&mut b, &t, depth, (&win, &g), &paint, false);
                    assert_eq!(
                        a.boxes, b.boxes,
                        "width {width}, offset {k}/7, depth {depth}"
                    );
                    assert_eq!(a.mesh.vertices.len(), b.mesh.vertices.len());
                    stepped += a
                        .boxes
                        .iter()
                        .filter(|b| b.count as usize > 2 * BLOCK)
                        .count();
                }
            }
        }
        assert!(
            stepped > 10,
            "runs long enough to step over blocks: {stepped}"
        );
    }

    #[test]
    fn hit_finds_boxes() {
        let b = [
            DrawnBox {
                x0: 10.0,
                x1: 20.0,
                row: 0,
                first: 0,
                count: 1,
            },
            DrawnBox {
                x0: 30.0,
                x1: 31.0,
                row: 0,
                first: 1,
                count: 1,
            },
        ];
        assert_eq!(hit(&b, 15.0), Some(0));
        assert_eq!(hit(&b, 25.0), None);
        assert_eq!(hit(&b, 31.5), Some(1));
        assert_eq!(hit(&b, 40.0), None);
    }
}
