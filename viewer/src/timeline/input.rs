//! Mouse and keyboard handling: wheel, pinch and key zoom, trackpad, drag
//! and key panning, range drags, and clicks that select or zoom into what
//! they hit. Navigation changes the timeline's state here and now, while
//! what the view must act on goes out as [`TimelineEvent`]s.

use egui::{CursorIcon, Key, PointerButton, Response, Ui};

use super::{RowKind, SpanGroup, Timeline, TimelineEvent, TimelineInput, HEADER_H};
use crate::spans::SpanRef;
use crate::timeline::cpu_lanes;
use crate::timeline::line_detail::{InsnRef, LineRef};

/// Zoom speed of W/S, per second held.
const KEY_ZOOM_PER_S: f64 = 4.0;
/// Pan speed of A/D, in window widths per second held.
const KEY_PAN_PER_S: f64 = 0.8;

/// What a drag with the primary button does, from its start to its end: the
/// state lives on the timeline because a drag spans many frames.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Drag {
    None,
    Pan,
    /// Range selection from this time.
    Range(u64),
}

impl Timeline {
    /// Zoom, pan, fit, clicks and range drags.
    pub(super) fn navigate(
        &mut self,
        ui: &Ui,
        resp: &Response,
        input: &TimelineInput,
        events: &mut Vec<TimelineEvent>,
    ) {
        let ctx = ui.ctx().clone();
        let tracks = self.tracks_rect;
        let ppn = self.window.px_per_ns(self.width_px);
        let anchor = |p: Option<egui::Pos2>| {
            p.map_or(0.5, |p| ((p.x - tracks.left()) / tracks.width()) as f64)
        };
        let hover = resp.hover_pos();

        // Wheel, pinch and trackpad.
        if hover.is_some() {
            let (zoom, scroll) = ctx.input(|i| (i.zoom_delta() as f64, i.smooth_scroll_delta()));
            if zoom != 1.0 {
                self.zoom(zoom, anchor(hover));
            }
            if scroll.x != 0.0 {
                self.pan_ns(-scroll.x as f64 / ppn);
            }
            if scroll.y != 0.0 {
                let content = self.content_height(input);
                if content > tracks.height() {
                    self.scroll_y -= scroll.y;
                } else {
                    self.pan_ns(-scroll.y as f64 / ppn);
                }
            }
        }

        // Keys, unless a text box has them.
        if !ctx.egui_wants_keyboard_input() {
            let (dt, zin, zout, left, right, fit_all, esc) = ctx.input(|i| {
                let held = |k: Key| i.key_down(k) || i.key_pressed(k);
                (
                    (i.stable_dt as f64).clamp(1.0 / 120.0, 0.1),
                    held(Key::W),
                    held(Key::S),
                    held(Key::A),
                    held(Key::D),
                    i.key_pressed(Key::Num0) || i.key_pressed(Key::Home),
                    i.key_pressed(Key::Escape),
                )
            });
            let at = anchor(hover);
            if zin {
                self.zoom((KEY_ZOOM_PER_S * dt).exp(), at);
            }
            if zout {
                self.zoom((-KEY_ZOOM_PER_S * dt).exp(), at);
            }
            if left {
                self.pan_ns(-self.window.width * KEY_PAN_PER_S * dt);
            }
            if right {
                self.pan_ns(self.window.width * KEY_PAN_PER_S * dt);
            }
            if fit_all {
                self.fit_all();
            }
            if esc {
                events.push(TimelineEvent::Select(None));
            }
            if zin || zout || left || right {
                ctx.request_repaint();
            }
        }

        // Drags: pan, or shift-drag a range.
        if resp.drag_started_by(PointerButton::Primary) {
            let shift = ctx.input(|i| i.modifiers.shift);
            self.drag = match (shift, resp.interact_pointer_pos()) {
                (true, Some(p)) => {
                    let t = self.window.time_at_px((p.x - tracks.left()) as f64, ppn);
                    Drag::Range(t)
                }
                _ => Drag::Pan,
            };
        }
        if resp.dragged_by(PointerButton::Primary) {
            match self.drag {
                Drag::Pan => {
                    let d = resp.drag_delta();
                    self.pan_ns(-d.x as f64 / ppn);
                    self.scroll_y -= d.y;
                    ctx.set_cursor_icon(CursorIcon::Grabbing);
                }
                Drag::Range(a) => {
                    if let Some(p) = resp.interact_pointer_pos() {
                        let b = self.window.time_at_px((p.x - tracks.left()) as f64, ppn);
                        self.dragging_range = Some((a.min(b), a.max(b)));
                    }
                }
                Drag::None => {}
            }
        }
        if resp.drag_stopped() {
            if let Some((a, b)) = self.dragging_range.take() {
                if b > a {
                    events.push(TimelineEvent::Range(a, b));
                }
            }
            self.drag = Drag::None;
        }

        // Clicks: select, zoom into merged boxes, fit on double-click.
        if resp.clicked() || resp.double_clicked() {
            let pos = resp.interact_pointer_pos();
            if self.click_cpu(pos, input) {
                return;
            }
            if let Some(ev) = self.click_line(pos, resp.double_clicked(), input) {
                events.extend(ev);
                return;
            }
            let hit = pos.and_then(|p| self.hovered_box(p));
            match hit {
                Some((row, b)) if b.count > 1 => {
                    let t = &input.model.threads[row.thread as usize].spans;
                    let d = row.depth as usize;
                    let first = b.first as usize;
                    let last = first + b.count as usize - 1;
                    let (s, e) = (t.lane(d)[first].start, t.end(d, last));
                    if self.zoom_separates(e - s) {
                        self.fit(s, e);
                    } else {
                        events.push(TimelineEvent::SelectGroup(SpanGroup {
                            thread: row.thread,
                            depth: row.depth,
                            first: b.first,
                            count: b.count,
                        }));
                    }
                }
                Some((row, b)) => {
                    let r = SpanRef::new(row.thread as usize, row.depth as usize, b.first as usize);
                    if resp.double_clicked() {
                        if let Some((s, e)) = r.times(input.model) {
                            self.fit(s, e);
                        }
                    }
                    events.push(TimelineEvent::Select(Some(r)));
                }
                None if resp.clicked() => events.push(TimelineEvent::Select(None)),
                None => {}
            }
        }
    }

    /// A click on a CPU lane's slice: the view goes to that thread (its
    /// track scrolled to the top, unfolded) over the slice's time. False
    /// if the click was not on a slice.
    fn click_cpu(&mut self, pos: Option<egui::Pos2>, input: &TimelineInput) -> bool {
        let Some(row) = pos
            .and_then(|p| self.row_at(p))
            .filter(|r| r.kind == RowKind::Cpu)
        else {
            return false;
        };
        let model = input.model;
        let cpu = &model.cpus[row.thread as usize];
        let Some(slice) = cpu_lanes::hit(cpu, &self.row_geom(&row), pos.unwrap().x).copied() else {
            return true;
        };
        if let Some(ti) = model.threads.iter().position(|t| t.spans.tid == slice.tid) {
            self.set_collapsed(slice.tid, false);
            let above: f32 = (0..ti)
                .map(|i| HEADER_H + self.track_height(input, i))
                .sum();
            self.scroll_y = Self::cpus_height(input) + above;
        }
        self.fit(slice.start, slice.end);
        true
    }

    /// A click on line detail: selects a line or instruction, or zooms
    /// into a merged run (`Some(None)`). `None` if it missed line detail.
    fn click_line(
        &mut self,
        pos: Option<egui::Pos2>,
        double: bool,
        input: &TimelineInput,
    ) -> Option<Option<TimelineEvent>> {
        let frame = input.lines?;
        let (row, b) = self.hovered_line_box(pos?)?;
        if b.count > 1 || double {
            if let Some((s, e)) = Self::line_box_times(frame, &row, &b) {
                self.fit(s, e);
            }
            if b.count > 1 {
                return Some(None);
            }
        }
        let key = b.key;
        Some(Some(match row.kind {
            RowKind::Lane => TimelineEvent::SelectLine(LineRef {
                thread: row.thread,
                key,
                depth: row.depth,
                index: b.first,
            }),
            RowKind::Insns => TimelineEvent::SelectInsn(InsnRef {
                thread: row.thread,
                key,
                index: b.first,
            }),
            RowKind::Marks | RowKind::Cpu => return None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use egui::{pos2, Rect};
    use ptscope_model::ThreadSpans;
    use ptscope_model::{CpuSlice, CpuTrack};
    use ptscope_model::{Model, ThreadModel};

    use super::*;
    use crate::spans::PseudoIndex;
    use crate::timeline::time_window::TimeWindow;
    use crate::timeline::LANE_H;

    /// Thread `tid` with a span in each of `depth` lanes.
    fn thread(tid: i32, depth: usize) -> ThreadModel {
        let mut spans = ThreadSpans::new(1, tid, format!("t{tid}"));
        for d in 0..depth {
            spans.push(d, 100, 200, 0, 0);
        }
        ThreadModel::from_spans(spans)
    }

    #[test]
    fn a_click_on_a_cpu_slice_unfolds_its_thread_and_fits_the_slice() {
        let model = Model {
            threads: vec![thread(10, 3), thread(20, 2)],
            cpus: vec![CpuTrack {
                cpu: 0,
                slices: vec![CpuSlice {
                    start: 1_000,
                    end: 2_000,
                    pid: 1,
                    tid: 20,
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let pseudo = PseudoIndex::default();
        let input = TimelineInput {
            model: &model,
            styles: &[],
            search: None,
            selected: None,
            range: None,
            lines: None,
            selected_line: None,
            source: None,
            pseudo: &pseudo,
            diagnoses: &[],
            brushed: &[],
        };
        // 4 ns per px from time 0, the CPU lane on top at y = 100.
        let mut t = Timeline {
            window: TimeWindow::new(0, 4_000.0),
            width_px: 1_000.0,
            ..Timeline::default()
        };
        let tracks = Rect::from_min_max(pos2(0.0, 100.0), pos2(1_000.0, 1_000.0));
        t.tracks_rect = tracks;
        t.set_collapsed(20, true);
        t.build_rows(&input, tracks);
        assert_eq!(t.rows[0].kind, RowKind::Cpu);
        // A click on a span lane is left to the other clicks.
        assert!(!t.click_cpu(Some(pos2(375.0, 145.0)), &input));
        // On the CPU lane but off the slice: taken, and nothing moves.
        let before = t.window;
        assert!(t.click_cpu(Some(pos2(50.0, 105.0)), &input));
        assert_eq!(t.window, before);
        assert!(t.is_collapsed(20));
        // On the slice (x = 375 is time 1500): thread 20 unfolds, its
        // header is scrolled to the top (under the CPU lane and thread
        // 10's track), and the window shows the slice.
        assert!(t.click_cpu(Some(pos2(375.0, 105.0)), &input));
        assert!(!t.is_collapsed(20));
        assert_eq!(t.scroll_y, LANE_H + HEADER_H + t.track_height(&input, 0));
        assert_eq!(t.window, TimeWindow::fit(1_000, 2_000));
    }
}
