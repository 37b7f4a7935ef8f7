//! The track rows: which rows each thread has (its marks row, a lane per
//! call or line depth, its instruction row), how tall they are, and where
//! they fall on screen once scrolled. The rows are laid out afresh each
//! frame from the model and the folded threads, and only those on screen
//! are kept, since drawing and hit tests walk nothing else.

use egui::Rect;

use super::{Row, RowKind, Timeline, TimelineInput, HEADER_H, LANE_H};
use crate::timeline::marks_row::{RowGeom, MARKS_H};

impl Timeline {
    /// Lanes of thread `ti` (with those its line spans need) and whether
    /// it shows an instruction row; none when folded.
    fn track(&self, input: &TimelineInput, ti: usize) -> (usize, bool) {
        let t = &input.model.threads[ti].spans;
        if self.collapsed.contains(&t.tid) {
            return (0, false);
        }
        let lines = input.lines;
        let lanes = t.depth().max(lines.map_or(0, |l| l.lanes(ti) as usize));
        (lanes, lines.is_some_and(|l| l.has_insn_row(ti)))
    }

    /// Whether thread `ti` shows a marks row: its trace holds marks and
    /// it is not folded.
    fn marks_row(&self, input: &TimelineInput, ti: usize) -> bool {
        let t = &input.model.threads[ti];
        !t.marks.is_empty() && !self.collapsed.contains(&t.spans.tid)
    }

    pub(super) fn track_height(&self, input: &TimelineInput, ti: usize) -> f32 {
        let (lanes, insns) = self.track(input, ti);
        let marks = if self.marks_row(input, ti) {
            MARKS_H
        } else {
            0.0
        };
        (lanes + insns as usize) as f32 * LANE_H + marks
    }

    /// Height of the CPU lanes above the threads.
    pub(super) fn cpus_height(input: &TimelineInput) -> f32 {
        input.model.cpus.len() as f32 * LANE_H
    }

    pub(super) fn content_height(&self, input: &TimelineInput) -> f32 {
        Self::cpus_height(input)
            + (0..input.model.threads.len())
                .map(|ti| HEADER_H + self.track_height(input, ti))
                .sum::<f32>()
    }

    /// The rows that intersect `tracks` vertically.
    pub(super) fn build_rows(&mut self, input: &TimelineInput, tracks: Rect) {
        self.rows.clear();
        let mut y = tracks.top() - self.scroll_y;
        for ci in 0..input.model.cpus.len() {
            let (y0, y1) = (y, y + LANE_H);
            y = y1;
            if y1 >= tracks.top() && y0 <= tracks.bottom() {
                self.rows.push(Row {
                    thread: ci as u32,
                    depth: 0,
                    kind: RowKind::Cpu,
                    y0,
                    y1: y1 - 1.0,
                });
            }
        }
        for ti in 0..input.model.threads.len() {
            y += HEADER_H;
            if self.marks_row(input, ti) {
                let (y0, y1) = (y, y + MARKS_H);
                y = y1;
                if y1 >= tracks.top() && y0 <= tracks.bottom() {
                    self.rows.push(Row {
                        thread: ti as u32,
                        depth: 0,
                        kind: RowKind::Marks,
                        y0,
                        y1: y1 - 1.0,
                    });
                }
            }
            let (lanes, insns) = self.track(input, ti);
            let kinds = (0..lanes)
                .map(|d| (d, RowKind::Lane))
                .chain(insns.then_some((lanes, RowKind::Insns)));
            for (d, kind) in kinds {
                let (y0, y1) = (y, y + LANE_H);
                y = y1;
                if y1 < tracks.top() || y0 > tracks.bottom() {
                    continue;
                }
                self.rows.push(Row {
                    thread: ti as u32,
                    depth: d as u32,
                    kind,
                    y0,
                    y1: y1 - 1.0,
                });
            }
            if y > tracks.bottom() {
                break;
            }
        }
    }

    /// Where row `row` is drawn, for the marks and CPU rows.
    pub(super) fn row_geom(&self, row: &Row) -> RowGeom<'_> {
        RowGeom {
            window: &self.window,
            px_per_ns: self.window.px_per_ns(self.width_px),
            left: self.tracks_rect.left(),
            right: self.tracks_rect.right(),
            y0: row.y0,
            y1: row.y1,
        }
    }
}

#[cfg(test)]
mod tests {
    use egui::pos2;
    use ptscope_model::CpuTrack;
    use ptscope_model::ThreadSpans;
    use ptscope_model::{Mark, MarkKind, Marks};
    use ptscope_model::{Model, ThreadModel};

    use super::*;
    use crate::spans::PseudoIndex;
    use crate::timeline::line_detail::LineFrame;

    /// Thread `tid` with a span in each of `depth` lanes, and a mark if
    /// `marks`.
    fn thread(tid: i32, depth: usize, marks: bool) -> ThreadModel {
        let mut spans = ThreadSpans::new(1, tid, format!("t{tid}"));
        for d in 0..depth {
            spans.push(d, 100, 200, 0, 0);
        }
        let mut t = ThreadModel::from_spans(spans);
        if marks {
            t.marks = Marks::new(vec![Mark {
                time: 150,
                ip: None,
                kind: MarkKind::Exstop,
            }]);
        }
        t
    }

    /// Two CPUs over thread 10 (marks and three lanes) and thread 20 (two
    /// lanes).
    fn model() -> Model {
        Model {
            threads: vec![thread(10, 3, true), thread(20, 2, false)],
            cpus: vec![CpuTrack::default(), CpuTrack::default()],
            ..Default::default()
        }
    }

    fn input<'a>(
        model: &'a Model,
        pseudo: &'a PseudoIndex,
        lines: Option<&'a LineFrame>,
    ) -> TimelineInput<'a> {
        TimelineInput {
            model,
            styles: &[],
            search: None,
            selected: None,
            range: None,
            lines,
            selected_line: None,
            source: None,
            pseudo,
            diagnoses: &[],
            brushed: &[],
        }
    }

    /// Each row as (kind, thread, depth, top), checking on the way that
    /// it ends a pixel above where the next one starts.
    fn layout(t: &Timeline) -> Vec<(RowKind, u32, u32, f32)> {
        t.rows
            .iter()
            .map(|r| {
                let h = if r.kind == RowKind::Marks {
                    MARKS_H
                } else {
                    LANE_H
                };
                assert_eq!(r.y1, r.y0 + h - 1.0, "{r:?}");
                (r.kind, r.thread, r.depth, r.y0)
            })
            .collect()
    }

    #[test]
    fn heights_count_marks_lanes_and_folding() {
        let (m, p) = (model(), PseudoIndex::default());
        let inp = input(&m, &p, None);
        let mut t = Timeline::default();
        assert_eq!(Timeline::cpus_height(&inp), 2.0 * LANE_H);
        assert_eq!(t.track_height(&inp, 0), MARKS_H + 3.0 * LANE_H);
        assert_eq!(t.track_height(&inp, 1), 2.0 * LANE_H);
        assert_eq!(
            t.content_height(&inp),
            2.0 * LANE_H + (HEADER_H + MARKS_H + 3.0 * LANE_H) + (HEADER_H + 2.0 * LANE_H)
        );
        // A folded thread keeps its header only: no marks row, no lanes.
        t.set_collapsed(10, true);
        assert_eq!(t.track_height(&inp, 0), 0.0);
        assert_eq!(
            t.content_height(&inp),
            2.0 * LANE_H + HEADER_H + (HEADER_H + 2.0 * LANE_H)
        );
    }

    #[test]
    fn line_detail_adds_lanes_and_an_instruction_row() {
        let (m, p) = (model(), PseudoIndex::default());
        let lines = LineFrame {
            lanes: vec![0, 5],
            insn_row: vec![false, true],
            ..Default::default()
        };
        let inp = input(&m, &p, Some(&lines));
        let mut t = Timeline::default();
        // Thread 10's spans go deeper than its line spans; thread 20's line
        // spans need more lanes than its spans, and an instruction row.
        assert_eq!(t.track(&inp, 0), (3, false));
        assert_eq!(t.track(&inp, 1), (5, true));
        assert_eq!(t.track_height(&inp, 1), 6.0 * LANE_H);
        t.set_collapsed(20, true);
        assert_eq!(t.track(&inp, 1), (0, false));
    }

    #[test]
    fn rows_stack_cpus_then_each_threads_marks_lanes_and_instructions() {
        let (m, p) = (model(), PseudoIndex::default());
        let lines = LineFrame {
            lanes: vec![0, 0],
            insn_row: vec![false, true],
            ..Default::default()
        };
        let inp = input(&m, &p, Some(&lines));
        let mut t = Timeline::default();
        let top = 100.0;
        t.build_rows(
            &inp,
            Rect::from_min_max(pos2(0.0, top), pos2(800.0, 2_000.0)),
        );
        // Where each thread's first row starts, under its header.
        let t0 = top + 2.0 * LANE_H + HEADER_H;
        let t1 = t0 + MARKS_H + 3.0 * LANE_H + HEADER_H;
        assert_eq!(
            layout(&t),
            vec![
                (RowKind::Cpu, 0, 0, top),
                (RowKind::Cpu, 1, 0, top + LANE_H),
                (RowKind::Marks, 0, 0, t0),
                (RowKind::Lane, 0, 0, t0 + MARKS_H),
                (RowKind::Lane, 0, 1, t0 + MARKS_H + LANE_H),
                (RowKind::Lane, 0, 2, t0 + MARKS_H + 2.0 * LANE_H),
                (RowKind::Lane, 1, 0, t1),
                (RowKind::Lane, 1, 1, t1 + LANE_H),
                (RowKind::Insns, 1, 2, t1 + 2.0 * LANE_H),
            ]
        );
    }

    #[test]
    fn rows_scroll_and_only_those_on_screen_are_kept() {
        let (m, p) = (model(), PseudoIndex::default());
        let inp = input(&m, &p, None);
        // Scrolled a pixel past the CPU lanes, thread 10's header and its
        // marks row, onto tracks that end inside thread 10's last lane.
        let mut t = Timeline {
            scroll_y: 2.0 * LANE_H + HEADER_H + MARKS_H + 1.0,
            ..Timeline::default()
        };
        let top = 100.0;
        let bottom = top + 2.0 * LANE_H + 5.0;
        t.build_rows(
            &inp,
            Rect::from_min_max(pos2(0.0, top), pos2(800.0, bottom)),
        );
        assert_eq!(
            layout(&t),
            vec![
                (RowKind::Lane, 0, 0, top - 1.0),
                (RowKind::Lane, 0, 1, top - 1.0 + LANE_H),
                (RowKind::Lane, 0, 2, top - 1.0 + 2.0 * LANE_H),
            ]
        );
    }
}
