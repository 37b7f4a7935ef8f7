//! The Details tab of the bottom panel: it shows the selected span, its
//! call path, and figures over every call of the same function (count,
//! total, min/avg/max), with the histogram of their durations
//! ([`crate::tabs::histogram`]). Brushing a range of durations lists those
//! calls, slowest first, and outlines them on the timeline; "Compare with
//! typical" sets a call beside the median one, by call path
//! (`ptscope_model::compare_calls`, as `ptscope compare` prints it).
//!
//! [`Details::new`] gathers all of it when the selection changes (or a
//! newer model arrives), because the figures scan every span of the model;
//! [`details_ui`] then draws from that copy each frame. Its buttons step to
//! the next or previous call of the function in time order across threads
//! ([`step_call`]) and zoom to the span or to the slowest call. They return
//! a [`DetailsAction`] rather than act, since only the view can move the
//! timeline. (Source lines come from the decoder's fine pass,
//! `ptscope_model::Segment`, which [`crate::timeline::line_detail`] drives.)

use std::sync::Arc;

use parking_lot::Mutex;

use ptscope_model::flag;
use ptscope_model::DetailSource;
use ptscope_model::Distribution;
use ptscope_model::FuncId;
use ptscope_model::Model;
use ptscope_model::{calls_unordered, Call, Pick};
use ptscope_model::{compare_calls, Comparison, Side};
use ptscope_model::{Difference, LineComparison, LineRow};

use crate::spans::{call_path, merged_label, self_time, PseudoIndex, SpanRef};
use crate::timeline::SpanGroup;

/// The most spans of a merged run [`group_ui`] lists.
pub(crate) const MAX_LISTED: usize = 1000;

/// The most brushed calls the timeline outlines: a brush over a common
/// duration can take millions, which outlines would only cover.
pub(crate) const MAX_OUTLINED: usize = 50_000;

/// Figures over every call of one function, or over every span of one
/// pseudo-function (`[untraced]`, `[decode error: …]`, …), whose spans
/// are not calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncCalls {
    pub func: FuncId,
    /// Whether its spans are calls (not pseudo-spans).
    pub is_call: bool,
    /// Its spans: calls when `is_call`.
    pub calls: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// The call that took `max_ns` (the first one, if several).
    pub slowest: Option<SpanRef>,
    /// Every call, slowest first (then in time order): a brush is a range
    /// of it.
    pub by_duration: Vec<Call>,
    /// How their durations are spread.
    pub dist: Distribution,
}

impl FuncCalls {
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.calls).unwrap_or(0)
    }

    /// "2 calls", or for pseudo-spans "2 spans (not calls)".
    pub fn count_label(&self) -> String {
        if self.is_call {
            format!("{} calls", self.calls)
        } else {
            match self.calls {
                1 => "1 span (not a call)".to_string(),
                n => format!("{n} spans (not calls)"),
            }
        }
    }
}

/// Scans every span of `model` for calls of `func`. One sort, by
/// duration, serves the figures, the histogram and every brush (a hot
/// function of a big trace has millions of calls).
pub(crate) fn func_calls(model: &Model, func: FuncId) -> FuncCalls {
    let mut by = calls_unordered(model, &[func]);
    by.sort_unstable_by_key(|c| (std::cmp::Reverse(c.duration), c.start, c.span));
    FuncCalls {
        func,
        is_call: model.funcs.is_call(func),
        calls: by.len() as u64,
        total_ns: by.iter().map(|c| c.duration).sum(),
        min_ns: by.last().map_or(0, |c| c.duration),
        max_ns: by.first().map_or(0, |c| c.duration),
        slowest: by.first().map(|c| c.span),
        // Descending already: the distribution's sort is one pass.
        dist: Distribution::of(by.iter().map(|c| c.duration)),
        by_duration: by,
    }
}

/// Orders spans by start time, then thread, depth and index, so "next
/// call" is well defined across threads.
fn key(model: &Model, r: SpanRef) -> Option<(u64, SpanRef)> {
    Some((r.span(model)?.start, r))
}

/// The next (or previous) call of `func` after (before) `from` in time
/// order, over every thread. `func` need not be `from`'s function.
pub(crate) fn step_call(
    model: &Model,
    func: FuncId,
    from: SpanRef,
    forward: bool,
) -> Option<SpanRef> {
    let here = key(model, from)?;
    let mut best: Option<(u64, SpanRef)> = None;
    for (ti, t) in model.threads.iter().enumerate() {
        let t = &t.spans;
        for (d, lane) in t.lanes() {
            let p = lane.partition_point(|s| s.start < here.0);
            let found = if forward {
                // Same-start spans may still come after `from` by key.
                lane[p..].iter().enumerate().find_map(|(k, s)| {
                    let r = SpanRef::new(ti, d, p + k);
                    (s.func() == func && (s.start, r) > here).then_some((s.start, r))
                })
            } else {
                let q = lane.partition_point(|s| s.start <= here.0);
                lane[..q].iter().enumerate().rev().find_map(|(k, s)| {
                    let r = SpanRef::new(ti, d, k);
                    (s.func() == func && (s.start, r) < here).then_some((s.start, r))
                })
            };
            if let Some(f) = found {
                let better = match best {
                    None => true,
                    Some(b) if forward => f < b,
                    Some(b) => f > b,
                };
                if better {
                    best = Some(f);
                }
            }
        }
    }
    best.map(|b| b.1)
}

/// Everything the details panel shows about the selected span.
#[derive(Clone, Debug)]
pub struct Details {
    pub span: SpanRef,
    pub func: FuncId,
    pub name: String,
    pub module: String,
    /// `file:line` of the function, when known.
    pub source: Option<String>,
    pub entry: u64,
    pub start: u64,
    pub dur_ns: u64,
    pub self_ns: u64,
    pub flags: u32,
    /// Outermost first; the span itself last.
    pub path: Vec<(SpanRef, FuncId)>,
    pub calls: FuncCalls,
    /// The durations brushed on the histogram, `[lo, hi]`, and the calls
    /// that took them: a range of `calls.by_duration`, slowest first.
    pub brush: Option<(u64, u64)>,
    brushed: std::ops::Range<usize>,
    /// The brushed calls the timeline outlines, in time order: none when
    /// there are more than [`MAX_OUTLINED`].
    pub outlined: Vec<Call>,
    /// A call beside a typical one, when asked for.
    pub comparison: Option<Comparison>,
    /// The same two calls line by line, re-decoded in the background.
    pub line_job: Option<LineJob>,
}

/// The line-level comparison of two calls, which the fine pass re-decodes
/// in the background (a call can cover millions of instructions): empty
/// until it is done.
#[derive(Clone, Debug, Default)]
pub struct LineJob {
    slot: Arc<Mutex<Option<Result<LineComparison, String>>>>,
}

impl LineJob {
    /// Asks `detail` to re-decode calls `a` and `b`; `done` runs when it
    /// is over (to wake the window).
    pub fn start(
        detail: &dyn DetailSource,
        a: Call,
        b: Call,
        done: impl FnOnce() + Send + 'static,
    ) -> LineJob {
        let job = LineJob::default();
        let slot = job.slot.clone();
        detail.compare_lines(
            a,
            b,
            Box::new(move |result| {
                *slot.lock() = Some(result.map_err(|e| e.to_string()));
                done();
            }),
        );
        job
    }

    /// The comparison, once the re-decode is over.
    pub fn result(&self) -> Option<Result<LineComparison, String>> {
        self.slot.lock().clone()
    }
}

impl Details {
    /// Gathers the details of `r`, or `None` if `model` has no such span.
    pub fn new(model: &Model, r: SpanRef) -> Option<Details> {
        let mut d = Details::new_without_calls(model, r)?;
        d.calls = func_calls(model, d.func);
        Some(d)
    }

    /// The span's own details; its function's calls left empty.
    fn new_without_calls(model: &Model, r: SpanRef) -> Option<Details> {
        let s = r.span(model)?;
        let t = r.thread(model)?;
        let (d, i) = (r.depth as usize, r.index as usize);
        let f = model.funcs.get(s.func());
        let path = call_path(model, r)
            .into_iter()
            .filter_map(|p| Some((p, p.span(model)?.func())))
            .collect();
        Some(Details {
            span: r,
            func: s.func(),
            name: f.name.clone(),
            module: f.module.clone(),
            source: f.source.clone(),
            entry: f.entry,
            start: s.start,
            dur_ns: t.duration(d, i),
            self_ns: self_time(t, d, i),
            flags: s.flags(),
            path,
            calls: FuncCalls::default(),
            brush: None,
            brushed: 0..0,
            outlined: Vec::new(),
            comparison: None,
            line_job: None,
        })
    }

    /// The details of `r` after `prev`: when `r` is a call of the same
    /// function (stepping through its calls, or picking a brushed one),
    /// the figures, brush and comparison carry over, not scanned again.
    pub fn after(model: &Model, r: SpanRef, prev: Option<Details>) -> Option<Details> {
        let s = r.span(model)?;
        match prev {
            Some(p) if p.func == s.func() => {
                let mut d = Details::new_without_calls(model, r)?;
                d.calls = p.calls;
                d.brush = p.brush;
                d.brushed = p.brushed;
                d.outlined = p.outlined;
                // A comparison stays only while one of its calls is the
                // one selected: it says "this call".
                if p.comparison
                    .as_ref()
                    .is_some_and(|c| c.a.span == r || c.b.span == r)
                {
                    d.comparison = p.comparison;
                    d.line_job = p.line_job;
                }
                Some(d)
            }
            _ => Details::new(model, r),
        }
    }

    /// Brushes the calls that took `[lo, hi]` (or clears the brush): two
    /// binary searches, cheap enough for every frame of a drag.
    pub fn set_brush(&mut self, brush: Option<(u64, u64)>) {
        self.brush = brush;
        let by = &self.calls.by_duration;
        self.brushed = match brush {
            Some((lo, hi)) => {
                let first = by.partition_point(|c| c.duration > hi);
                first..by.partition_point(|c| c.duration >= lo).max(first)
            }
            None => 0..0,
        };
        let brushed = &by[self.brushed.clone()];
        self.outlined.clear();
        if brushed.len() <= MAX_OUTLINED {
            self.outlined.extend_from_slice(brushed);
            self.outlined.sort_unstable_by_key(|c| (c.start, c.span));
        }
    }

    /// The brushed calls, slowest first.
    pub fn brushed(&self) -> &[Call] {
        self.calls
            .by_duration
            .get(self.brushed.clone())
            .unwrap_or(&[])
    }

    /// Sets the selected call (if it is the slowest, or `slowest` asks
    /// for that) beside the call nearest the median.
    pub fn compare_with_typical(&mut self, model: &Model, slowest: bool) {
        let list = &self.calls.by_duration;
        let a = if slowest {
            Pick::Slowest.of(list, None)
        } else {
            list.iter().position(|c| c.span == self.span)
        };
        let Some(a) = a else { return };
        let Some(b) = Pick::Median.of(list, Some(a)) else {
            return;
        };
        self.comparison = Some(compare_calls(model, &list[a], &list[b]));
        self.line_job = None;
    }
}

/// What the user asked for in the details panel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DetailsAction {
    Select(SpanRef),
    /// Select and fit this span.
    Show(SpanRef),
    /// Next (true) or previous call of the selected function.
    Step(bool),
}

/// Draws the details of the selection.
pub(crate) fn details_ui(
    ui: &mut egui::Ui,
    model: &Arc<Model>,
    detail: Option<&dyn DetailSource>,
    d: &mut Details,
) -> Option<DetailsAction> {
    let mut action = None;
    // Side by side: the span, its function's calls, and how their
    // durations are spread, so the buttons stay visible in a short bottom
    // panel.
    ui.columns(3, |cols| {
        span_column(&mut cols[0], model, d, &mut action);
        calls_column(&mut cols[1], model, detail, d, &mut action);
        distribution_column(&mut cols[2], model, d, &mut action);
    });
    action
}

/// The histogram of the function's call durations, and the calls brushed
/// on it, slowest first.
fn distribution_column(
    ui: &mut egui::Ui,
    model: &Model,
    d: &mut Details,
    action: &mut Option<DetailsAction>,
) {
    use crate::timeline::axis::format_duration;
    if !d.calls.is_call || d.calls.calls < 2 {
        return;
    }
    ui.horizontal(|ui| {
        ui.heading("Durations");
        if ui.button("Compare with typical").clicked() {
            d.compare_with_typical(model, false);
        }
        if ui.button("Slowest vs typical").clicked() {
            d.compare_with_typical(model, true);
        }
    });
    let dist = &d.calls.dist;
    ui.label(format!(
        "median {}  p90 {}  p99 {}  max {}",
        format_duration(dist.p50),
        format_duration(dist.p90),
        format_duration(dist.p99),
        format_duration(dist.max)
    ));
    let mut brush = d.brush;
    if crate::tabs::histogram::histogram_ui(ui, dist, &mut brush) {
        d.set_brush(brush);
    }
    let Some((lo, hi)) = d.brush else {
        ui.weak("Drag across the histogram (or click a bar) to list those calls.");
        return;
    };
    ui.horizontal(|ui| {
        ui.label(format!(
            "{} calls of {} to {}, slowest first",
            d.brushed().len(),
            format_duration(lo),
            format_duration(hi)
        ));
        if ui.small_button("Clear").clicked() {
            d.set_brush(None);
        }
    });
    let base = model.time_range().map_or(0, |r| r.0);
    egui::ScrollArea::vertical()
        .id_salt("ptscope-brushed")
        .max_height(120.0)
        .show(ui, |ui| {
            for c in d.brushed().iter().take(MAX_LISTED) {
                let tid = model.threads[c.span.thread as usize].spans.tid;
                let text = format!(
                    "{}  at {}  (thread {tid})",
                    format_duration(c.duration),
                    format_duration(c.start - base)
                );
                if ui.selectable_label(c.span == d.span, text).clicked() {
                    *action = Some(DetailsAction::Show(c.span));
                }
            }
            if d.brushed().len() > MAX_LISTED {
                ui.weak(format!("and {} more", d.brushed().len() - MAX_LISTED));
            }
        });
}

/// The comparison of a call with a typical one, by call path.
fn comparison_ui(ui: &mut egui::Ui, model: &Model, c: &Comparison) {
    use crate::timeline::axis::format_duration;
    let signed = |v: i128| {
        let text = format_duration(v.unsigned_abs().min(u64::MAX as u128) as u64);
        if v < 0 {
            format!("-{text}")
        } else {
            format!("+{text}")
        }
    };
    ui.label(format!(
        "{} against {}: {}",
        format_duration(c.a.duration),
        format_duration(c.b.duration),
        signed(c.diff())
    ));
    egui::Grid::new("ptscope-compare")
        .num_columns(4)
        .striped(true)
        .show(ui, |ui| {
            ui.strong("share");
            ui.strong("this call");
            ui.strong("typical");
            ui.strong("path");
            ui.end_row();
            for n in c.nodes.iter().take(8) {
                let side = |f: &ptscope_model::PathFigures| {
                    if f.count == 0 {
                        "-".to_string()
                    } else {
                        format!("{} × {}", f.count, format_duration(f.total))
                    }
                };
                ui.label(format!("{:.0}%", c.share(n) * 100.0));
                ui.label(side(&n.a));
                ui.label(side(&n.b));
                let path: Vec<&str> = n.path.iter().map(|&f| model.funcs.name(f)).collect();
                let text = path.join(" > ");
                match n.only_in() {
                    Some(Side::A) => ui.colored_label(
                        egui::Color32::from_rgb(0xff, 0x90, 0x60),
                        format!("{text}  (only here)"),
                    ),
                    Some(Side::B) => ui.colored_label(
                        egui::Color32::from_rgb(0x80, 0xc0, 0xff),
                        format!("{text}  (only typical)"),
                    ),
                    None => ui.label(text),
                };
                ui.end_row();
            }
        });
}

/// The two calls line by line: the lines one ran and the other did not
/// (a branch taken), and the lines that ran a different number of times
/// (a loop's trips).
fn line_comparison_ui(ui: &mut egui::Ui, job: &LineJob) {
    use crate::timeline::axis::format_duration;
    let l = match job.result() {
        None => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("re-decoding both calls to source lines…");
            });
            return;
        }
        Some(Err(e)) => {
            ui.colored_label(egui::Color32::YELLOW, format!("cannot compare lines: {e}"));
            return;
        }
        Some(Ok(l)) => l,
    };
    for w in &l.warnings {
        ui.colored_label(egui::Color32::YELLOW, w);
    }
    let place = |r: &LineRow| {
        let file = r.file.rsplit('/').next().unwrap_or(&r.file);
        format!("{file}:{} {}", r.line, r.function)
    };
    let title = |d: Difference| match d {
        Difference::OnlyInA => "Lines only this call ran",
        Difference::OnlyInB => "Lines only the typical call ran",
        Difference::RunsDiffer => "Lines run a different number of times",
    };
    egui::Grid::new("ptscope-line-compare")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            for d in Difference::ALL {
                let rows: Vec<&LineRow> = l.rows.iter().filter(|r| d.holds(r)).take(5).collect();
                if rows.is_empty() {
                    continue;
                }
                ui.strong(title(d));
                ui.end_row();
                for r in rows {
                    ui.label(place(r));
                    ui.label(format!(
                        "{} × against {} ×, {} against {}",
                        r.a.count,
                        r.b.count,
                        format_duration(r.a.time_ns),
                        format_duration(r.b.time_ns)
                    ));
                    ui.end_row();
                }
            }
        });
}

fn span_column(ui: &mut egui::Ui, model: &Model, d: &Details, action: &mut Option<DetailsAction>) {
    use crate::timeline::axis::format_duration;
    ui.heading("Selected span");
    egui::Grid::new("ptscope-details")
        .num_columns(2)
        .show(ui, |ui| {
            ui.label("Function");
            ui.strong(&d.name);
            ui.end_row();
            ui.label("Duration");
            ui.label(format_duration(d.dur_ns));
            ui.end_row();
            ui.label("Self time");
            ui.label(format_duration(d.self_ns));
            ui.end_row();
            if let Some(src) = &d.source {
                ui.label("Source");
                ui.label(src);
                ui.end_row();
            }
            if !d.module.is_empty() {
                ui.label("Module");
                ui.label(&d.module);
                ui.end_row();
            }
            if d.entry != 0 {
                ui.label("Entry");
                ui.label(format!("{:#x}", d.entry));
                ui.end_row();
            }
            if d.flags & flag::ESTIMATES != 0 {
                ui.label("Times");
                ui.colored_label(
                    egui::Color32::YELLOW,
                    crate::timeline::estimate_note(d.flags),
                );
                ui.end_row();
            }
            if let Some(note) = crate::timeline::entry_note(d.flags) {
                ui.label("Entered");
                ui.label(note);
                ui.end_row();
            }
        });
    ui.heading("Call path");
    for (depth, (r, f)) in d.path.iter().enumerate() {
        let text = format!("{}{}", "  ".repeat(depth), model.funcs.name(*f));
        if ui.selectable_label(*r == d.span, text).clicked() {
            *action = Some(DetailsAction::Select(*r));
        }
    }
}

fn calls_column(
    ui: &mut egui::Ui,
    model: &Arc<Model>,
    detail: Option<&dyn DetailSource>,
    d: &mut Details,
    action: &mut Option<DetailsAction>,
) {
    use crate::timeline::axis::format_duration;
    let (heading, step) = if d.calls.is_call {
        ("All calls of this function", "call")
    } else {
        ("All spans of this kind", "span")
    };
    // A comparison asked for comes first: it is the answer.
    if d.comparison.is_some() {
        ui.horizontal(|ui| {
            ui.heading("Against a typical call");
            let lines = detail.is_some();
            let by_line = ui
                .add_enabled(
                    lines && d.line_job.is_none(),
                    egui::Button::new("By line").small(),
                )
                .on_disabled_hover_text(if lines {
                    "re-decoded below"
                } else {
                    "line detail needs an instruction trace"
                });
            if by_line.clicked() {
                if let (Some(c), Some(detail)) = (&d.comparison, detail) {
                    let ctx = ui.ctx().clone();
                    d.line_job = Some(LineJob::start(detail, c.a, c.b, move || {
                        ctx.request_repaint()
                    }));
                }
            }
            if ui.small_button("Close").clicked() {
                d.comparison = None;
                d.line_job = None;
            }
        });
        if let Some(cmp) = &d.comparison {
            comparison_ui(ui, model, cmp);
        }
        if let Some(job) = &d.line_job {
            line_comparison_ui(ui, job);
        }
        ui.separator();
    }
    let c = &d.calls;
    ui.heading(heading);
    ui.label(c.count_label());
    egui::Grid::new("ptscope-func-calls")
        .num_columns(2)
        .show(ui, |ui| {
            for (k, v) in [
                ("Total", c.total_ns),
                ("Min", c.min_ns),
                ("Avg", c.avg_ns()),
                ("Max", c.max_ns),
            ] {
                ui.label(k);
                ui.label(format_duration(v));
                ui.end_row();
            }
        });
    ui.horizontal_wrapped(|ui| {
        if ui.button(format!("< Previous {step}")).clicked() {
            *action = Some(DetailsAction::Step(false));
        }
        if ui.button(format!("Next {step} >")).clicked() {
            *action = Some(DetailsAction::Step(true));
        }
    });
    ui.horizontal_wrapped(|ui| {
        if ui.button("Zoom to span").clicked() {
            *action = Some(DetailsAction::Show(d.span));
        }
        if let Some(slow) = c.slowest {
            let label = if c.is_call {
                "Zoom to slowest call"
            } else {
                "Zoom to longest span"
            };
            if ui.button(label).clicked() {
                *action = Some(DetailsAction::Show(slow));
            }
        }
    });
}

/// Lists the spans of a merged run that no zoom takes apart (spans of
/// zero length, or all within a few ns), each selectable, above the
/// details of the one selected.
pub(crate) fn group_ui(
    ui: &mut egui::Ui,
    model: &Model,
    pseudo: &PseudoIndex,
    g: &SpanGroup,
    selected: Option<SpanRef>,
) -> Option<DetailsAction> {
    use crate::timeline::axis::format_duration;
    let mut action = None;
    let (calls, others) = pseudo.split(g.thread, g.depth, g.first, g.count);
    let times = |r: SpanRef| r.times(model).unwrap_or((0, 0));
    let (start, _) = times(SpanRef::new(
        g.thread as usize,
        g.depth as usize,
        g.first as usize,
    ));
    let end = g.spans().map(|r| times(r).1).max().unwrap_or(start);
    ui.heading("Merged spans");
    ui.label(format!(
        "{} merged, covering {}: click one to see it",
        merged_label(calls, others),
        format_duration(end.saturating_sub(start))
    ));
    egui::ScrollArea::vertical()
        .id_salt("ptscope-group")
        .max_height(120.0)
        .show(ui, |ui| {
            for r in g.spans().take(MAX_LISTED) {
                let Some(s) = r.span(model) else { continue };
                let (a, b) = times(r);
                let text = format!(
                    "{}  {} at +{}",
                    model.funcs.name(s.func()),
                    format_duration(b - a),
                    format_duration(a - start)
                );
                if ui.selectable_label(selected == Some(r), text).clicked() {
                    action = Some(DetailsAction::Select(r));
                }
            }
            if g.count as usize > MAX_LISTED {
                ui.weak(format!("… and {} more", g.count as usize - MAX_LISTED));
            }
        });
    ui.separator();
    action
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spans::tests::small_model;

    #[test]
    fn stats_over_every_call() {
        let m = small_model();
        let c = func_calls(&m, 4); // a: 30 ns and 10 ns
        assert_eq!(
            (c.calls, c.total_ns, c.min_ns, c.max_ns, c.avg_ns()),
            (2, 40, 10, 30, 20)
        );
        assert_eq!(c.slowest, Some(SpanRef::new(0, 1, 0)));
        let none = func_calls(&m, 0);
        assert_eq!((none.calls, none.min_ns, none.slowest), (0, 0, None));
    }

    #[test]
    fn next_and_previous_calls() {
        let m = small_model();
        let a0 = SpanRef::new(0, 1, 0);
        let a1 = SpanRef::new(0, 1, 1);
        assert_eq!(step_call(&m, 4, a0, true), Some(a1));
        assert_eq!(step_call(&m, 4, a1, true), None);
        assert_eq!(step_call(&m, 4, a1, false), Some(a0));
        assert_eq!(step_call(&m, 4, a0, false), None);
        // The next `main` after `b`.
        assert_eq!(
            step_call(&m, 3, SpanRef::new(0, 2, 0), true),
            Some(SpanRef::new(0, 0, 1))
        );
    }

    #[test]
    fn details_of_a_nested_span() {
        let m = small_model();
        let d = Details::new(&m, SpanRef::new(0, 2, 0)).unwrap();
        assert_eq!(d.name, "b");
        assert_eq!((d.start, d.dur_ns, d.self_ns), (20, 10, 10));
        let names: Vec<&str> = d.path.iter().map(|p| m.funcs.name(p.1)).collect();
        assert_eq!(names, ["main", "a", "b"]);
        assert_eq!(d.calls.calls, 1);
        assert_eq!(d.calls.count_label(), "1 calls");
        assert!(Details::new(&m, SpanRef::new(0, 9, 0)).is_none());
    }

    #[test]
    fn pseudo_spans_are_counted_as_spans_not_calls() {
        use ptscope_model::{FuncTable, SpanKind, UNTRACED};

        use ptscope_model::ThreadSpans;
        let mut funcs = FuncTable::default();
        let f = funcs.intern("f", "/bin/prog", 0x1000, SpanKind::Call);
        let gone = funcs.no_binary("/lib/libgone.so");
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        t.push(0, 0, 10, f, 0);
        t.push(0, 10, 20, UNTRACED, 0);
        t.push(0, 20, 30, gone, 0);
        t.push(0, 30, 50, UNTRACED, 0);
        let m = Model::of(funcs, [t]);
        let c = func_calls(&m, UNTRACED);
        assert!(!c.is_call);
        assert_eq!(c.count_label(), "2 spans (not calls)");
        assert_eq!(func_calls(&m, gone).count_label(), "1 span (not a call)");
        assert_eq!(func_calls(&m, f).count_label(), "1 calls");
    }
}
