//! Line-level zoom in the timeline: this module shows the source lines each
//! call ran, in the lanes under its function spans, and at the deepest zoom
//! one box per instruction.
//!
//! The decoder's fine pass runs in the background behind a
//! [`DetailSource`], which the app hands the view beside its model. Each
//! frame, while the window is at most [`LineDetail::threshold_ns`] wide,
//! [`LineDetail::update`] asks for the PSB segments covering it and gathers
//! those that are ready into a [`LineFrame`]. The timeline draws whatever
//! is ready, and the coarse view never waits for the rest, so zooming stays
//! smooth while lines arrive.
//!
//! Line boxes are laid out as function spans are ([`crate::timeline::frame_mesh`]):
//! a binary search finds the visible part of each segment's lane, runs of
//! sub-pixel spans merge by galloping search, and the boxes go into the
//! frame's one mesh. The labels, tooltips and disassembly cache that the
//! timeline and the Source tab share live here too.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use egui::epaint::Mesh;
use egui::{Color32, Ui};
use ptscope_model::Model;
use ptscope_model::{DetailSource, SegmentKey};
use ptscope_model::{Insn, LineSpan, Segment};

use crate::color::{call_color, name_hash, MERGED};
use crate::timeline::axis::{format_duration, format_time, TimeMode};
use crate::timeline::frame_mesh::{gallop, rect, LaneGeom, MERGE_GAP_PX, MERGE_PX, MIN_BOX_PX};
use crate::timeline::time_window::TimeWindow;

/// Default width of window below which line detail is decoded.
pub(crate) const DEFAULT_THRESHOLD_NS: f64 = 100_000.0;
/// The instruction row shows when an average instruction is this wide.
pub(crate) const INSN_ROW_PX: f64 = 4.0;
/// Merged runs of line spans and instructions.
pub(crate) const MERGED_LINES: Color32 = Color32::from_rgb(0xa4, 0xac, 0xb8);
/// Instructions whose start a timing packet gave.
pub(crate) const INSN_EXACT: Color32 = Color32::from_rgb(0x4c, 0x9c, 0x8c);
/// Instructions whose time is spread between timing packets.
pub(crate) const INSN_ESTIMATED: Color32 = Color32::from_rgb(0x9c, 0xa8, 0xb4);
/// Boxes at least this wide get a 1 px gap on the right.
const GAP_MIN_PX: f64 = 6.0;
/// Disassembly strings kept before the cache starts over.
const DISASM_MAX: usize = 200_000;

/// A line span of a decoded segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LineRef {
    /// Thread index in the model.
    pub thread: u32,
    pub key: SegmentKey,
    pub depth: u32,
    /// Index in the segment's `lines_at(depth)`.
    pub index: u32,
}

impl LineRef {
    pub fn span<'s>(&self, seg: &'s Segment) -> Option<&'s LineSpan> {
        seg.lines_at(self.depth).get(self.index as usize)
    }
}

/// An instruction of a decoded segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InsnRef {
    pub thread: u32,
    pub key: SegmentKey,
    /// Index in the segment's `insns`.
    pub index: u32,
}

/// A segment ready to draw.
#[derive(Clone, Debug)]
pub struct ReadySeg {
    pub key: SegmentKey,
    pub seg: Arc<Segment>,
}

/// What line detail the timeline draws this frame.
#[derive(Default)]
pub struct LineFrame {
    /// Whether the window is narrow enough for line detail.
    pub active: bool,
    /// Ready segments of each thread (by model index), in time order.
    pub segs: Vec<Vec<ReadySeg>>,
    /// Lanes each thread's line spans need (deepest line depth + 1).
    pub lanes: Vec<u32>,
    /// Whether each thread shows its instruction row.
    pub insn_row: Vec<bool>,
    /// Wanted segments not decoded yet, and those that failed.
    pub pending: usize,
    pub failed: usize,
    /// Why the first failed segment failed.
    pub error: Option<String>,
    /// Ready segments cut short at the fine pass's instruction limit.
    pub cut: usize,
}

impl LineFrame {
    /// The ready segment `key` of thread `thread`.
    pub fn seg(&self, thread: u32, key: SegmentKey) -> Option<&Arc<Segment>> {
        self.segs
            .get(thread as usize)?
            .iter()
            .find(|r| r.key == key)
            .map(|r| &r.seg)
    }

    pub fn lanes(&self, thread: usize) -> u32 {
        self.lanes.get(thread).copied().unwrap_or(0)
    }

    pub fn has_insn_row(&self, thread: usize) -> bool {
        self.insn_row.get(thread).copied().unwrap_or(false)
    }
}

/// The line-detail state of one view: the background fine pass, the
/// threshold and this frame's ready segments.
pub(crate) struct LineDetail {
    /// The fine pass of the view's model, as the app supplied it.
    detail: Option<Arc<dyn DetailSource>>,
    /// Line detail is decoded when the window is at most this wide.
    pub threshold_ns: f64,
    keys: Vec<SegmentKey>,
    frame: LineFrame,
    /// Lanes only grow while zoomed in, so tracks do not jump as
    /// segments come and go.
    sticky_lanes: Vec<u32>,
}

impl Default for LineDetail {
    fn default() -> Self {
        LineDetail {
            detail: None,
            threshold_ns: DEFAULT_THRESHOLD_NS,
            keys: Vec::new(),
            frame: LineFrame::default(),
            sticky_lanes: Vec::new(),
        }
    }
}

/// What [`LineDetail::update`] needs to know about the view.
pub(crate) struct LineRequest<'a> {
    pub window: TimeWindow,
    /// Width of the tracks in px.
    pub width_px: f32,
    /// Collapsed state per thread (by model index).
    pub collapsed: &'a dyn Fn(usize) -> bool,
    /// A further span of time to decode (the source pane's heat), wanted
    /// after the window's segments; ignored if it covers more than
    /// `max_extra` segments.
    pub extra: Option<(u64, u64)>,
    pub max_extra: usize,
}

impl LineDetail {
    /// Forgets the detail of the old model if `model` is another one.
    pub(crate) fn set_model(&mut self, model: &Arc<Model>) {
        let same = self
            .detail
            .as_ref()
            .is_some_and(|d| Arc::ptr_eq(d.model(), model));
        if !same {
            self.detail = None;
            self.frame = LineFrame::default();
            self.sticky_lanes.clear();
        }
    }

    pub(crate) fn detail(&self) -> Option<&dyn DetailSource> {
        self.detail.as_deref()
    }

    /// Takes the fine pass of the view's model (`model`); one for another
    /// model is refused.
    pub(crate) fn set_detail(&mut self, model: &Arc<Model>, detail: Arc<dyn DetailSource>) -> bool {
        let ours = Arc::ptr_eq(detail.model(), model);
        if ours {
            self.detail = Some(detail);
        }
        ours
    }

    pub(crate) fn frame(&self) -> &LineFrame {
        &self.frame
    }

    /// Whether a window `width` ns wide gets line detail.
    pub(crate) fn is_active(&self, width: f64) -> bool {
        width <= self.threshold_ns
    }

    /// Says what is wanted now and gathers the ready segments.
    pub(crate) fn update(&mut self, model: &Arc<Model>, req: &LineRequest) {
        let active = self.is_active(req.window.width);
        let n = model.threads.len();
        let f = &mut self.frame;
        f.active = active;
        f.segs.resize_with(n, Vec::new);
        f.lanes.resize(n, 0);
        f.insn_row.resize(n, false);
        f.pending = 0;
        f.failed = 0;
        f.cut = 0;
        f.error = None;
        for v in &mut f.segs {
            v.clear();
        }
        let Some(detail) = &self.detail else {
            return;
        };
        self.keys.clear();
        let (from, to) = (req.window.start, req.window.end());
        if active {
            for ti in (0..n).filter(|&t| !(req.collapsed)(t)) {
                self.keys.extend(detail.keys(ti, from, to));
            }
        }
        let visible = self.keys.len();
        if let Some((a, b)) = req.extra {
            let before = self.keys.len();
            for ti in (0..n).filter(|&t| !(req.collapsed)(t)) {
                for k in detail.keys(ti, a, b) {
                    if !self.keys[..visible].contains(&k) {
                        self.keys.push(k);
                    }
                }
            }
            if self.keys.len() - before > req.max_extra {
                self.keys.truncate(before);
            }
        }
        detail.want(&self.keys);
        if !active {
            self.sticky_lanes.clear();
            f.lanes.iter_mut().for_each(|l| *l = 0);
            f.insn_row.iter_mut().for_each(|r| *r = false);
            return;
        }
        self.sticky_lanes.resize(n, 0);
        let ppn = req.window.px_per_ns(req.width_px);
        for &key in &self.keys[..visible] {
            let ti = key.0 as usize;
            match detail.get(key) {
                Some(seg) => {
                    f.cut += usize::from(seg.cut);
                    let lanes = seg.max_depth().map_or(0, |d| d + 1);
                    self.sticky_lanes[ti] = self.sticky_lanes[ti].max(lanes);
                    f.segs[ti].push(ReadySeg { key, seg });
                }
                None => match detail.error(key) {
                    Some(e) => {
                        f.failed += 1;
                        if f.error.is_none() {
                            f.error = Some(e.to_string());
                        }
                    }
                    None => f.pending += 1,
                },
            }
        }
        for ti in 0..n {
            f.lanes[ti] = self.sticky_lanes[ti];
            f.insn_row[ti] = avg_insn_ns(&f.segs[ti]).is_some_and(|ns| ns * ppn >= INSN_ROW_PX);
        }
    }
}

/// Average duration of an instruction over whole segments: stable while
/// panning within them.
fn avg_insn_ns(segs: &[ReadySeg]) -> Option<f64> {
    let (mut ns, mut n) = (0u64, 0usize);
    for r in segs {
        if let Some((a, b)) = r.seg.time_range() {
            ns += b.saturating_sub(a);
            n += r.seg.insns.len();
        }
    }
    (n > 0).then(|| ns as f64 / n as f64)
}

/// A run of items laid out on one row: one item, or several merged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Run {
    /// Offsets from the window's left edge, px.
    pub x0: f64,
    pub x1: f64,
    pub first: usize,
    pub count: usize,
}

/// Something with a `[start, end)` in perf ns; sorted and not overlapping
/// within a row.
pub trait Timed {
    fn start(&self) -> u64;
    fn end(&self) -> u64;
}

impl Timed for LineSpan {
    #[inline]
    fn start(&self) -> u64 {
        self.start
    }
    #[inline]
    fn end(&self) -> u64 {
        self.end
    }
}

impl Timed for Insn {
    #[inline]
    fn start(&self) -> u64 {
        self.start
    }
    #[inline]
    fn end(&self) -> u64 {
        self.end.max(self.start)
    }
}

/// The runs of `items` visible in `win` over `width` px: items at least
/// `MERGE_PX` px wide alone, narrower neighbours merged as in
/// the frame mesh. Costs about one search per visible
/// run, however many items a run holds.
pub fn runs<T: Timed>(items: &[T], win: &TimeWindow, width: f32, mut emit: impl FnMut(Run)) {
    if items.is_empty() || width <= 0.0 {
        return;
    }
    let ppn = win.px_per_ns(width);
    let (from, to) = (win.time_at_rel(0.0), win.end());
    let lo = items.partition_point(|s| s.end() <= from && s.start() < from);
    let hi = lo + items[lo..].partition_point(|s| s.start() < to);
    let mut i = lo;
    while i < hi {
        let s = &items[i];
        let x0 = win.x(s.start(), ppn);
        let x1 = x0 + (s.end() - s.start()) as f64 * ppn;
        if x1 - x0 >= MERGE_PX {
            emit(Run {
                x0,
                x1,
                first: i,
                count: 1,
            });
            i += 1;
            continue;
        }
        let first = i;
        let mut run_end = x1;
        i += 1;
        while i < hi {
            let reach = win.time_at_px(run_end + MERGE_GAP_PX, ppn);
            let j = gallop(items, i, hi, reach, T::start);
            if j == i {
                break;
            }
            let last = j - 1;
            let l = &items[last];
            let lx0 = win.x(l.start(), ppn);
            let lx1 = lx0 + (l.end() - l.start()) as f64 * ppn;
            if lx1 - lx0 >= MERGE_PX {
                if last > i {
                    run_end = run_end.max(lx0.min(run_end + 1.0));
                }
                i = last;
                break;
            }
            run_end = run_end.max(lx1);
            i = j;
        }
        emit(Run {
            x0,
            x1: run_end.max(x0 + MIN_BOX_PX),
            first,
            count: i - first,
        });
    }
}

/// One box of line detail drawn this frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LineBox {
    pub x0: f32,
    pub x1: f32,
    /// The timeline's row number.
    pub row: u32,
    /// The segment: boxes outlive the frame's list (hit tests run on
    /// last frame's boxes), so not an index into it.
    pub key: SegmentKey,
    /// First line span (in `lines_at(depth)`) or instruction (in `insns`).
    pub first: u32,
    pub count: u32,
}

impl LineBox {
    /// The box drawn for `run` from screen x `x0` to `x1`.
    fn of(run: &Run, x0: f32, x1: f32, row: u32, key: SegmentKey) -> LineBox {
        LineBox {
            x0,
            x1,
            row,
            key,
            first: run.first as u32,
            count: run.count as u32,
        }
    }
}

/// The box of `boxes` (one row's, sorted by x) under screen x `x`.
pub(crate) fn hit(boxes: &[LineBox], x: f32) -> Option<usize> {
    let i = boxes.partition_point(|b| b.x1 < x - 1.0);
    let b = boxes.get(i)?;
    (b.x0 <= x + 1.0).then_some(i)
}

/// Mixes `c` towards `to` by `t` (0..1).
pub(crate) fn mix(c: Color32, to: Color32, t: f32) -> Color32 {
    let m = |a: u8, b: u8| (a as f32 + (b as f32 - a as f32) * t).round() as u8;
    Color32::from_rgb(m(c.r(), to.r()), m(c.g(), to.g()), m(c.b(), to.b()))
}

/// The fill of a line span of `function`: a light tint of the function's
/// own color, so a line reads as part of its call; inlined code a less
/// washed-out tint, under a band of full color.
pub(crate) fn line_color(function: &str, inlined: bool) -> Color32 {
    let c = call_color(name_hash(function));
    if inlined {
        mix(c, Color32::WHITE, 0.3)
    } else {
        mix(c, Color32::WHITE, 0.55)
    }
}

/// Height of the band that marks inlined code.
const INLINE_BAND_PX: f32 = 3.0;

fn clamp_x(x: f64, width: f32) -> f32 {
    x.clamp(-2.0, width as f64 + 2.0) as f32
}

/// Lays out the line spans at store depth `depth` of `segs` into `mesh`
/// and `boxes`. Returns the range of `boxes` it added.
pub(crate) fn layout_line_lane(
    mesh: &mut Mesh,
    boxes: &mut Vec<LineBox>,
    segs: &[ReadySeg],
    depth: u32,
    win: &TimeWindow,
    geom: &LaneGeom,
) -> Range<usize> {
    let first_box = boxes.len();
    let (y0, y1) = (geom.y0 + 2.0, geom.y1);
    for r in segs {
        let seg = &r.seg;
        let lines = seg.lines_at(depth);
        runs(lines, win, geom.width, |run| {
            let bx0 = geom.left + clamp_x(run.x0, geom.width);
            let gap = if run.count == 1 && run.x1 - run.x0 >= GAP_MIN_PX {
                1.0
            } else {
                0.0
            };
            let bx1 = geom.left + clamp_x(run.x1 - gap, geom.width);
            if run.count == 1 {
                let l = &lines[run.first];
                let name = seg.frame(l).map_or("??", |f| &f.function);
                rect(mesh, bx0, bx1, y0, y1, line_color(name, l.inlined()));
                if l.inlined() {
                    let band = call_color(name_hash(name));
                    rect(mesh, bx0, bx1, y0, y0 + INLINE_BAND_PX, band);
                }
            } else {
                rect(mesh, bx0, bx1, y0, y1, MERGED_LINES);
            }
            boxes.push(LineBox::of(&run, bx0, bx1, geom.row, r.key));
        });
    }
    first_box..boxes.len()
}

/// Lays out the instructions of `segs` on one row.
pub(crate) fn layout_insn_row(
    mesh: &mut Mesh,
    boxes: &mut Vec<LineBox>,
    segs: &[ReadySeg],
    win: &TimeWindow,
    geom: &LaneGeom,
) -> Range<usize> {
    let first_box = boxes.len();
    let (y0, y1) = (geom.y0 + 1.0, geom.y1);
    for r in segs {
        let insns = &r.seg.insns;
        runs(insns, win, geom.width, |run| {
            let bx0 = geom.left + clamp_x(run.x0, geom.width);
            let wide = run.count == 1 && run.x1 - run.x0 >= GAP_MIN_PX;
            let bx1 = geom.left + clamp_x(run.x1 - if wide { 1.0 } else { 0.0 }, geom.width);
            let color = if run.count > 1 {
                MERGED
            } else if insns[run.first].exact {
                INSN_EXACT
            } else {
                INSN_ESTIMATED
            };
            rect(mesh, bx0, bx1, y0, y1, color);
            boxes.push(LineBox::of(&run, bx0, bx1, geom.row, r.key));
        });
    }
    first_box..boxes.len()
}

/// The last component of a path (DWARF paths are `/`-separated).
pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// Label candidates of a line span, longest first, into `out` (cleared):
/// `name demo.c:30`, `name:30`, `30` for inlined code; `demo.c:30`,
/// `line 30`, `30` for the function's own.
pub(crate) fn line_labels(seg: &Segment, l: &LineSpan, out: &mut [String; 3]) {
    use std::fmt::Write;
    out.iter_mut().for_each(String::clear);
    let Some(f) = seg.frame(l) else {
        out[0].push_str("??");
        return;
    };
    if l.inlined() {
        let _ = write!(out[0], "{} {}:{}", f.function, file_name(&f.file), f.line);
        let _ = write!(out[1], "{}:{}", f.function, f.line);
    } else {
        let _ = write!(out[0], "{}:{}", file_name(&f.file), f.line);
        let _ = write!(out[1], "line {}", f.line);
    }
    let _ = write!(out[2], "{}", f.line);
}

/// The first of `cands` (longest first; empty ones skipped) that fits
/// `fits` chars, else the last cut to fit with a `…`. `None` if nothing
/// readable fits.
pub(crate) fn pick_label(cands: &mut [String], fits: usize) -> Option<&str> {
    let n = cands.iter().rposition(|c| !c.is_empty())?;
    let i = (0..=n)
        .find(|&i| !cands[i].is_empty() && cands[i].chars().count() <= fits)
        .unwrap_or(n);
    let text = &mut cands[i];
    if text.chars().count() > fits {
        if fits < 2 {
            return None;
        }
        let cut = text
            .char_indices()
            .nth(fits - 1)
            .map_or(text.len(), |(i, _)| i);
        text.truncate(cut);
        text.push('…');
    }
    Some(text)
}

/// Disassembly by (pid, address), decoded once.
#[derive(Default)]
pub struct Disasm {
    map: HashMap<(i32, u64, u8), Option<Arc<str>>>,
}

impl Disasm {
    /// The instruction at `ip` of process `pid`, run in `bitness`-bit mode.
    pub fn get(
        &mut self,
        src: &dyn DetailSource,
        pid: i32,
        ip: u64,
        bitness: u8,
    ) -> Option<Arc<str>> {
        if self.map.len() >= DISASM_MAX {
            self.map.clear();
        }
        self.map
            .entry((pid, ip, bitness))
            .or_insert_with(|| src.disassemble(pid, ip, bitness).map(Arc::from))
            .clone()
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}

/// Tooltip of a line span.
pub(crate) fn line_tooltip(ui: &mut Ui, seg: &Segment, l: &LineSpan, parent: Option<&str>) {
    let Some(f) = seg.frame(l) else {
        ui.label("no line information");
        return;
    };
    ui.strong(format!("{}:{}", f.file, f.line));
    ui.label(format!("in {}", f.function));
    if l.inlined() {
        ui.colored_label(
            Color32::from_rgb(0xc0, 0xa0, 0xf0),
            match parent {
                Some(p) => format!("inlined into {p}"),
                None => "inlined".to_string(),
            },
        );
    }
    ui.label(format!("Duration: {}", format_duration(l.end - l.start)));
    ui.label(format!("Instructions: {}", l.count));
    ui.weak("Click to open the source");
}

/// Tooltip of an instruction.
pub(crate) fn insn_tooltip(
    ui: &mut Ui,
    insn: &Insn,
    text: Option<&str>,
    origin: u64,
    mode: TimeMode,
) {
    ui.strong(format!("{:#x}", insn.ip));
    ui.monospace(text.unwrap_or("(cannot disassemble)"));
    ui.label(format!(
        "Start: {} ({})",
        format_time(insn.start, origin, mode),
        format_duration(insn.end.saturating_sub(insn.start))
    ));
    if insn.exact {
        ui.label("Time exact: a timing packet gave it");
    } else {
        ui.colored_label(
            Color32::YELLOW,
            "≈ time estimated: spread between timing packets",
        );
    }
    ui.weak("Click for the disassembly");
}

/// Tooltip of a merged run.
pub(crate) fn merged_tooltip(ui: &mut Ui, what: &str, count: u32, covered: u64) {
    ui.label(format!("{count} {what} merged"));
    ui.label(format!("covering {}", format_duration(covered)));
    ui.weak("Click to zoom in");
}

/// The innermost line span of `seg` that holds instruction `i`.
pub(crate) fn line_of_insn(seg: &Segment, i: usize) -> Option<(u32, u32)> {
    let insn = seg.insns.get(i)?;
    let top = seg.max_depth()?;
    let mut best = None;
    for d in insn.depth + 1..=top {
        let lines = seg.lines_at(d);
        let k = lines.partition_point(|l| (l.first as usize) <= i);
        if k == 0 {
            continue;
        }
        let l = &lines[k - 1];
        if i < (l.first + l.count) as usize {
            best = Some((d, (k - 1) as u32));
        } else {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u64, end: u64) -> LineSpan {
        LineSpan {
            start,
            end,
            depth: 1,
            chain: 0,
            level: 0,
            first: 0,
            count: 1,
        }
    }

    fn all_runs<T: Timed>(items: &[T], win: &TimeWindow, width: f32) -> Vec<Run> {
        let mut out = Vec::new();
        runs(items, win, width, |r| out.push(r));
        out
    }

    #[test]
    fn wide_lines_are_one_run_each_and_offscreen_ones_are_skipped() {
        let l = [span(0, 10), span(10, 30), span(40, 100), span(200, 300)];
        // 10 px per ns over [5, 105).
        let r = all_runs(&l, &TimeWindow::new(5, 100.0), 1000.0);
        let got: Vec<(f64, f64, usize)> = r.iter().map(|r| (r.x0, r.x1, r.first)).collect();
        assert_eq!(
            got,
            vec![(-50.0, 50.0, 0), (50.0, 250.0, 1), (350.0, 950.0, 2)]
        );
        assert!(r.iter().all(|r| r.count == 1));
    }

    #[test]
    fn narrow_lines_merge_by_search_and_a_gap_splits_them() {
        // 100,000 one-ns lines back to back, then a gap, then more.
        let mut l: Vec<LineSpan> = (0..100_000u64).map(|i| span(i, i + 1)).collect();
        l.extend((0..10u64).map(|i| span(500_000 + i, 500_001 + i)));
        // 1000 ns per px: each line is 0.001 px.
        let r = all_runs(&l, &TimeWindow::new(0, 1_000_000.0), 1000.0);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].first, r[0].count), (0, 100_000));
        assert!((r[0].x1 - 100.0).abs() < 1.0, "{:?}", r[0]);
        assert_eq!((r[1].first, r[1].count), (100_000, 10));
        assert!((r[1].x0 - 500.0).abs() < 1e-9);
        // A merged run is at least a pixel wide.
        assert!(r[1].x1 - r[1].x0 >= MIN_BOX_PX);
    }

    #[test]
    fn a_wide_line_after_narrow_ones_stands_alone() {
        let l = [span(0, 1), span(1, 2), span(2, 900)];
        let r = all_runs(&l, &TimeWindow::new(0, 1000.0), 1000.0);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].first, r[0].count), (0, 2));
        assert_eq!((r[1].first, r[1].count), (2, 1));
    }

    #[test]
    fn runs_hold_at_large_times_and_window_edges() {
        let base = 1_000_000_000_000_000u64;
        let l = [span(base + 10, base + 20), span(base + 21, base + 31)];
        let r = all_runs(&l, &TimeWindow::new(base, 100.0), 1000.0);
        assert_eq!((r[0].x0, r[0].x1), (100.0, 200.0));
        assert_eq!((r[1].x0, r[1].x1), (210.0, 310.0));
        // A window ending where a line starts does not show it, nor one
        // starting where the last ends.
        let r = all_runs(&l, &TimeWindow::new(base - 6, 16.0), 1000.0);
        assert_eq!(r.len(), 0, "{r:?}");
        let r = all_runs(&l, &TimeWindow::new(base + 31, 16.0), 1000.0);
        assert_eq!(r.len(), 0, "{r:?}");
        let r = all_runs(&l, &TimeWindow::new(base + 30, 16.0), 1000.0);
        assert_eq!(r.len(), 1, "{r:?}");
    }

    #[test]
    fn line_and_inline_colors_differ_and_stay_light() {
        let own = line_color("slow_path", false);
        let inl = line_color("slow_path", true);
        assert_ne!(own, inl);
        let base = call_color(name_hash("slow_path"));
        let light = |c: Color32| c.r() as u32 + c.g() as u32 + c.b() as u32;
        assert!(light(own) > light(inl) && light(inl) >= light(base));
        assert_eq!(mix(Color32::BLACK, Color32::WHITE, 0.5).r(), 128);
    }

    #[test]
    fn hit_and_file_names() {
        let b = |x0: f32, x1: f32| LineBox {
            x0,
            x1,
            row: 0,
            key: (0, 0),
            first: 0,
            count: 1,
        };
        let boxes = [b(0.0, 10.0), b(20.0, 21.0)];
        assert_eq!(hit(&boxes, 5.0), Some(0));
        assert_eq!(hit(&boxes, 15.0), None);
        assert_eq!(hit(&boxes, 21.5), Some(1));
        assert_eq!(file_name("/work/main/assets/demo/demo.c"), "demo.c");
        assert_eq!(file_name("demo.c"), "demo.c");
        assert_eq!(file_name("C:\\src\\a.c"), "a.c");
    }

    #[test]
    fn inlined_lines_are_labelled_with_their_function() {
        use ptscope_model::LineFrame;
        let f = |function: &str, file: &str, line| LineFrame {
            function: function.into(),
            file: file.into(),
            line,
        };
        // Private fields: fill the public ones of a default.
        let mut seg = Segment::default();
        seg.chains = vec![Arc::from(vec![
            f("loop", "/src/a.c", 11),
            f("push", "/src/v.h", 4),
        ])];
        let own = LineSpan {
            level: 0,
            ..span(0, 10)
        };
        let inl = LineSpan {
            level: 1,
            depth: 2,
            ..span(2, 6)
        };
        let mut c = [String::new(), String::new(), String::new()];
        line_labels(&seg, &own, &mut c);
        assert_eq!(c, ["a.c:11", "line 11", "11"]);
        line_labels(&seg, &inl, &mut c);
        assert_eq!(c, ["push v.h:4", "push:4", "4"]);
        let lost = LineSpan {
            chain: 7,
            ..span(0, 1)
        };
        line_labels(&seg, &lost, &mut c);
        assert_eq!(c[0], "??");
    }

    #[test]
    fn labels_shorten_to_fit() {
        let mut c = ["demo.c:30".to_string(), "line 30".into(), "30".into()];
        assert_eq!(pick_label(&mut c.clone(), 20), Some("demo.c:30"));
        assert_eq!(pick_label(&mut c.clone(), 8), Some("line 30"));
        assert_eq!(pick_label(&mut c.clone(), 3), Some("30"));
        assert_eq!(pick_label(&mut c, 1), None);
        let mut c = [
            "400f16 xor eax,edx".to_string(),
            "xor eax,edx".into(),
            "xor".into(),
        ];
        assert_eq!(pick_label(&mut c.clone(), 12), Some("xor eax,edx"));
        assert_eq!(pick_label(&mut c, 2), Some("x…"));
        let mut c = ["12 lines".to_string(), "12".into(), String::new()];
        assert_eq!(pick_label(&mut c, 2), Some("12"));
        assert_eq!(pick_label(&mut [String::new()], 5), None);
    }
}
