//! egui_kittest tests: drive a `TraceView` over a small synthetic model
//! through the AccessKit tree and pointer/key events, headless.

use std::sync::Arc;

use egui::{Event, Key, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use ptscope_model::FuncTable;
use ptscope_model::SpanKind;
use ptscope_model::{flag, ThreadSpans};
use ptscope_model::{Model, ThreadModel, TimeUnit};
use ptscope_viewer::{PanelTab, TraceView};

mod common;
use common::{click, harness_of};

/// Two threads, times deep in a perf clock: main calls compute twice and
/// a parser; a worker runs a loop with a syscall gap.
fn model() -> Model {
    let base = 1_700_000_000_000_000u64;
    let mut funcs = FuncTable::default();
    let main = funcs.intern("main", "/bin/demo", 0x1000, SpanKind::Call);
    let compute = funcs.intern("compute", "/bin/demo", 0x1100, SpanKind::Call);
    let parse = funcs.intern("parse_input", "/bin/demo", 0x1200, SpanKind::Call);
    let work = funcs.intern("worker_loop", "/bin/demo", 0x1300, SpanKind::Call);
    let mut a = ThreadSpans::new(100, 100, "demo".into());
    a.push(0, base, base + 10_000, main, 0);
    a.push(1, base + 500, base + 4_000, compute, 0);
    a.push(1, base + 5_000, base + 6_000, compute, flag::END_ESTIMATED);
    // Entered by a jump into its middle: exact times, not a call.
    a.push(1, base + 7_000, base + 9_000, parse, flag::MID_ENTRY);
    let mut b = ThreadSpans::new(100, 101, "worker".into());
    b.push(0, base + 1_000, base + 4_000, work, 0);
    b.push(0, base + 4_000, base + 5_000, ptscope_model::SYSCALL, 0);
    b.push(0, base + 5_000, base + 9_500, work, 0);
    Model::of(funcs, [a, b])
}

fn harness() -> Harness<'static, TraceView> {
    harness_on(model())
}

#[test]
fn thread_tracks_are_labelled_and_collapse() {
    let mut h = harness();
    h.get_by_label("100 demo");
    h.get_by_label("101 worker");
    h.get_by_label("Search functions");
    h.get_by_label("Overview");
    h.get_by_label("Timeline tracks");
    assert!(!h.state().is_thread_collapsed(101));
    h.get_by_label("101 worker").click();
    h.run();
    assert!(h.state().is_thread_collapsed(101));
}

/// A trace without timing: the toolbar says its axis counts instructions,
/// and the view's width reads in them; a timed one says neither.
#[test]
fn a_trace_without_timing_says_its_axis_counts_instructions() {
    let mut h = harness();
    assert!(h.query_by_label(ptscope_viewer::UNTIMED_LABEL).is_none());
    assert!(h.query_by_label_contains("insns").is_none());
    let untimed = Model {
        unit: TimeUnit::Insns,
        ..model()
    };
    h.state_mut().set_model(Arc::new(untimed));
    h.run();
    h.get_by_label(ptscope_viewer::UNTIMED_LABEL);
    // The view's width, about 10 µs in ns, reads as k instructions.
    h.get_by_label_contains("k insns");
}

#[test]
fn zoom_in_and_out() {
    let mut h = harness();
    let (a0, b0) = h.state().view_range();
    h.key_press(Key::W);
    h.run();
    let (a1, b1) = h.state().view_range();
    assert!(b1 - a1 < b0 - a0, "W zooms in: {a0}..{b0} -> {a1}..{b1}");
    // Ctrl+wheel / pinch arrive as a zoom factor, around the pointer.
    let tracks = h.get_by_label("Timeline tracks").rect();
    h.hover_at(tracks.center());
    h.event(Event::Zoom(0.5));
    h.run();
    let (a2, b2) = h.state().view_range();
    assert!(b2 - a2 > b1 - a1, "zoom out: {a1}..{b1} -> {a2}..{b2}");
    h.key_press(Key::S);
    h.run();
    let (a3, b3) = h.state().view_range();
    assert!(b3 - a3 >= b2 - a2);
    // Zooming in far keeps nanosecond precision at 1.7e15 ns.
    h.state_mut().zoom(1e6);
    h.run();
    let w = h.state().window();
    assert!(w.width <= 20.0, "{w:?}");
}

#[test]
fn clicking_a_span_shows_its_details() {
    let mut h = harness();
    let span = h.state().find_span("compute").expect("compute span");
    let rect = h.state().span_rect(span).expect("on screen");
    click(&mut h, rect.center(), Modifiers::NONE);
    assert_eq!(h.state().selected(), Some(span));
    let d = h.state().details().expect("details");
    assert_eq!(d.name, "compute");
    assert_eq!(d.calls.calls, 2);
    h.get_by_label("Selected span");
    h.get_by_label("All calls of this function");
    h.get_by_label("2 calls");
    assert!(h.query_all_by_label("compute").count() >= 1);
    // Next call of the same function.
    h.get_by_label("Next call >").click();
    h.run();
    let next = h.state().selected().unwrap();
    assert_ne!(next, span);
    assert_eq!(h.state().details().unwrap().name, "compute");
    // The estimated end shows.
    assert!(h.query_by_label_contains("end estimated").is_some());
}

#[test]
fn a_mid_entry_span_says_so_without_an_estimate() {
    let mut h = harness();
    let span = h.state().find_span("parse_input").unwrap();
    h.state_mut().select(Some(span));
    h.run();
    assert_eq!(h.state().details().unwrap().name, "parse_input");
    h.get_by_label("entered mid-function (jump)");
    assert!(h.query_by_label_contains("≈").is_none());
}

#[test]
fn clicking_a_thread_free_area_clears_selection() {
    let mut h = harness();
    let span = h.state().find_span("main").unwrap();
    h.state_mut().select(Some(span));
    h.run();
    h.key_press(Key::Escape);
    h.run();
    assert_eq!(h.state().selected(), None);
}

#[test]
fn search_counts_matches() {
    let mut h = harness();
    let search = h.get_by_label("Search functions");
    search.focus();
    h.run();
    h.get_by_label("Search functions").type_text("comp");
    h.run();
    assert_eq!(h.state().search_text(), "comp");
    assert_eq!(h.state().match_count(), 2);
    h.get_by_label("2 matches in 1 functions");
    // Fuzzy: "wl" finds worker_loop.
    h.state_mut().set_fuzzy(true);
    h.state_mut().set_search("wl");
    h.run();
    assert_eq!(h.state().match_count(), 2);
    assert_eq!(h.state().matched_functions(), 1);
}

#[test]
fn shift_drag_selects_a_range_with_table_rows() {
    let mut h = harness();
    let (lo, hi) = h.state().bounds().unwrap();
    let y = {
        let span = h.state().find_span("main").unwrap();
        h.state().span_rect(span).unwrap().center().y
    };
    let x0 = h.state().screen_x(lo + 400);
    let x1 = h.state().screen_x(hi - 400);
    let shift = Modifiers::SHIFT;
    h.event(Event::ModifiersChanged(shift));
    h.hover_at(Pos2::new(x0, y));
    h.event(Event::PointerButton {
        pos: Pos2::new(x0, y),
        button: PointerButton::Primary,
        pressed: true,
        modifiers: shift,
    });
    for k in 1..=10 {
        h.hover_at(Pos2::new(x0 + (x1 - x0) * k as f32 / 10.0, y));
    }
    h.event(Event::PointerButton {
        pos: Pos2::new(x1, y),
        button: PointerButton::Primary,
        pressed: false,
        modifiers: shift,
    });
    h.event(Event::ModifiersChanged(Modifiers::NONE));
    h.run();
    let (a, b) = h.state().range().expect("a range");
    assert!(a >= lo && b <= hi && b - a > 5_000, "{a}..{b}");
    assert_eq!(h.state().tab(), PanelTab::Range);
    let rows = h.state().range_rows();
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert!(
        names.contains(&"compute") && names.contains(&"worker_loop"),
        "{names:?}"
    );
    // The table shows them and sorts by a header click.
    h.get_by_label("worker_loop");
    h.get_by_label("Calls").click();
    h.run();
    let first = h.state().range_rows()[0].1.calls;
    assert!(h.state().range_rows().iter().all(|r| r.1.calls <= first));
    // The flame graph tab draws.
    h.get_by_label("Flame graph").click();
    h.run();
    assert_eq!(h.state().tab(), PanelTab::FlameGraph);
}

#[test]
fn help_is_one_key_away() {
    let mut h = harness();
    h.key_press(Key::F1);
    h.run();
    assert!(h.state().help_open());
    h.get_by_label("Keyboard help");
}

#[test]
fn a_growing_model_keeps_view_and_selection() {
    let mut h = harness();
    let span = h.state().find_span("parse_input").unwrap();
    h.state_mut().select(Some(span));
    h.state_mut().zoom(4.0);
    let w = h.state().window();
    h.state_mut().set_model(Arc::new(model()));
    h.run();
    assert_eq!(h.state().window(), w);
    assert_eq!(h.state().selected(), Some(span));
}

/// One thread: main, and under it a burst of zero-length spans at one
/// instant (eight calls of `tick` and a decode error), then five 2 ns
/// calls of `step` side by side.
fn burst_model() -> Model {
    let base = 1_700_000_000_000_000u64;
    let mut funcs = FuncTable::default();
    let main = funcs.intern("main", "/bin/demo", 0x1000, SpanKind::Call);
    let tick = funcs.intern("tick", "/bin/demo", 0x1100, SpanKind::Call);
    let step = funcs.intern("step", "/bin/demo", 0x1200, SpanKind::Call);
    let err = funcs.decode_error("Overflow packet");
    let mut a = ThreadSpans::new(100, 100, "demo".into());
    a.push(0, base, base + 10_000, main, 0);
    for i in 0..9 {
        a.push(
            1,
            base + 5_000,
            base + 5_000,
            if i == 4 { err } else { tick },
            0,
        );
    }
    for i in 0..5 {
        a.push(1, base + 8_000 + 2 * i, base + 8_002 + 2 * i, step, 0);
    }
    Model::of(funcs, [a])
}

fn harness_on(model: Model) -> Harness<'static, TraceView> {
    let mut h = harness_of(TraceView::new(Arc::new(model)), egui::vec2(1200.0, 800.0));
    h.run();
    h
}

#[test]
fn zero_length_spans_that_stay_merged_are_listed_when_clicked() {
    let mut h = harness_on(burst_model());
    let first = ptscope_viewer::SpanRef::new(0, 1, 0);
    let rect = h.state().span_rect(first).expect("on screen");
    click(&mut h, rect.center(), Modifiers::NONE);
    // No zoom can take zero-length spans apart: the click lists them,
    // and the view stays where it was.
    let g = h.state().span_group().expect("the run is listed");
    assert_eq!((g.thread, g.depth, g.first, g.count), (0, 1, 0, 9));
    assert_eq!(h.state().tab(), PanelTab::Details);
    h.get_by_label("Merged spans");
    // The decode error is no call.
    h.get_by_label_contains("8 calls, 1 other span merged");
    assert_eq!(h.query_all_by_label_contains("tick  0 ns").count(), 8);
    // Each listed span is selectable, and the list stays.
    h.get_by_label_contains("[decode error: Overflow packet]")
        .click();
    h.run();
    let sel = h.state().selected().expect("a listed span is selected");
    assert_eq!((sel.depth, sel.index), (1, 4));
    assert_eq!(
        h.state().details().unwrap().name,
        "[decode error: Overflow packet]"
    );
    h.get_by_label("1 span (not a call)");
    assert!(h.state().span_group().is_some());
    // Escape clears both.
    h.key_press(Key::Escape);
    h.run();
    assert!(h.state().span_group().is_none());
    assert!(h.state().selected().is_none());
}

#[test]
fn a_merged_run_that_zooming_separates_is_zoomed_into() {
    let mut h = harness_on(burst_model());
    let step = h.state().find_span("step").unwrap();
    let rect = h.state().span_rect(step).expect("on screen");
    let w0 = h.state().window().width;
    click(&mut h, rect.center(), Modifiers::NONE);
    assert!(h.state().span_group().is_none());
    assert!(
        h.state().window().width < w0 / 100.0,
        "{:?}",
        h.state().window()
    );
    // At the zoom floor, the same run is listed rather than zoomed.
    let base = 1_700_000_000_000_000u64;
    h.state_mut()
        .set_window(ptscope_viewer::TimeWindow::new(base + 4_990, 1.0));
    h.run();
    let tick = ptscope_viewer::SpanRef::new(0, 1, 0);
    let rect = h.state().span_rect(tick).expect("on screen");
    click(&mut h, rect.center(), Modifiers::NONE);
    assert_eq!(h.state().span_group().map(|g| g.count), Some(9));
}

#[test]
fn pseudo_spans_are_not_counted_as_calls() {
    let mut h = harness();
    // The worker's [syscall] span matches by name but is no call.
    h.state_mut().set_search("syscall");
    h.run();
    assert_eq!(h.state().match_count(), 0);
    h.get_by_label("0 matches in 1 functions, and 1 other spans");
    // Stepping through matches still finds it.
    let sys = h.state().find_span("[syscall]").unwrap();
    h.state_mut().step_match(true);
    assert_eq!(h.state().selected(), Some(sys));
    h.state_mut().select(Some(sys));
    h.run();
    h.get_by_label("1 span (not a call)");
    h.get_by_label("All spans of this kind");
    assert!(h.query_by_label("1 calls").is_none());
}

#[test]
fn an_almost_empty_track_says_why() {
    let mut m = model();
    let mut empty = ThreadModel::from_spans(ThreadSpans::new(100, 102, "starved".into()));
    // Its own trace, but the walk never synchronized: no PSB.
    empty.stream = Some(2);
    m.threads.push(empty);
    let h = harness_on(m);
    assert_eq!(
        h.state().thread_diagnosis(2),
        Some("0 calls: its trace holds no PSB to synchronize on")
    );
    h.get_by_label("0 calls: its trace holds no PSB to synchronize on");
    // The healthy threads say nothing.
    assert_eq!(h.state().thread_diagnosis(0), None);
    assert_eq!(h.query_all_by_label_contains("calls:").count(), 1);
}

/// `handle` called 20 times: 18 fast calls of 40 to 57 ns, and two slow
/// ones of 1000 and 1200 ns that run `rebuild`.
fn requests_model() -> Model {
    let base = 1_000_000u64;
    let mut funcs = FuncTable::default();
    let main = funcs.intern("main", "/bin/app", 0x1000, SpanKind::Call);
    let handle = funcs.intern("handle", "/bin/app", 0x2000, SpanKind::Call);
    let rebuild = funcs.intern("rebuild", "/bin/app", 0x3000, SpanKind::Call);
    let mut t = ThreadSpans::new(1, 1, "app".into());
    t.push(0, base, base + 100_000, main, 0);
    for k in 0..20u64 {
        let at = base + 1_000 + k * 4_000;
        let len = match k {
            7 => 1000,
            15 => 1200,
            _ => 40 + k,
        };
        t.push(1, at, at + len, handle, 0);
        if len >= 1000 {
            t.push(2, at + 10, at + len - 10, rebuild, 0);
        }
    }
    Model::of(funcs, [t])
}

/// A press at `from`, moves to `to`, a release: a drag as a pointer makes
/// it.
fn drag(h: &mut Harness<'_, TraceView>, from: Pos2, to: Pos2) {
    h.hover_at(from);
    h.run_steps(1);
    h.event(Event::PointerButton {
        pos: from,
        button: PointerButton::Primary,
        pressed: true,
        modifiers: Modifiers::NONE,
    });
    h.run_steps(1);
    for k in 1..=8 {
        let p = from + (to - from) * (k as f32 / 8.0);
        h.event(Event::PointerMoved(p));
        h.run_steps(1);
    }
    h.event(Event::PointerButton {
        pos: to,
        button: PointerButton::Primary,
        pressed: false,
        modifiers: Modifiers::NONE,
    });
    h.run_steps(2);
}

#[test]
fn brushing_the_slow_mode_of_the_histogram_lists_exactly_the_slow_calls() {
    let mut h = harness_on(requests_model());
    let first = h.state().find_span("handle").unwrap();
    h.state_mut().select(Some(first));
    h.run();
    h.get_by_label("Durations");
    let marks = h.get_by_label_contains("median ").rect();
    // The plot lies under the percentiles, across the column: drag from
    // its middle to its right end, over the slow mode only (the fast one
    // sits in the left fifth on a log scale).
    let y = marks.bottom() + 40.0;
    let (left, right) = (marks.left(), 1200.0 - 12.0);
    let at = |f: f32| Pos2::new(left + (right - left) * f, y);
    drag(&mut h, at(0.55), at(0.97));
    let d = h.state().details().expect("details");
    let (lo, hi) = d.brush.expect("the drag brushed");
    assert!(lo > 60 && hi >= 1200, "{lo}..{hi}");
    let durations: Vec<u64> = d.brushed().iter().map(|c| c.duration).collect();
    assert_eq!(durations, [1200, 1000], "slowest first");
    h.get_by_label_contains("2 calls of");
    // Each listed call zooms to itself; the brush stays.
    let slowest = d.brushed()[0].span;
    assert_eq!(d.outlined.len(), 2, "outlined on the timeline");
    h.query_all_by_label_contains("(thread 1)")
        .next()
        .expect("the list of brushed calls")
        .click();
    h.run();
    assert_eq!(h.state().selected(), Some(slowest));
    assert_eq!(h.state().details().unwrap().brushed().len(), 2);
    let (a, b) = h.state().view_range();
    assert!(b - a < 10_000, "zoomed to the call: {a}..{b}");

    // Compared with a typical call, the slowest one's extra path comes
    // first, marked as its own.
    h.get_by_label("Slowest vs typical").click();
    h.run();
    let c = h
        .state()
        .details()
        .unwrap()
        .comparison
        .clone()
        .expect("compared");
    assert_eq!((c.a.duration, c.b.duration), (1200, 50));
    let m = requests_model();
    let names: Vec<&str> = c.nodes[1].path.iter().map(|&f| m.funcs.name(f)).collect();
    assert_eq!(names, ["handle", "rebuild"]);
    h.get_by_label("handle > rebuild  (only here)");

    // Clear drops the brush.
    h.get_by_label("Clear").click();
    h.run();
    assert!(h.state().details().unwrap().brush.is_none());
}

/// [`model`] as a per-CPU trace: CPU 0 ran the demo thread then the
/// worker; the worker wrote two PTWRITE values and its core changed
/// frequency.
fn cpus_model() -> Model {
    use ptscope_model::{CpuSlice, CpuTrack};
    use ptscope_model::{Mark, MarkKind, Marks};
    let mut m = model();
    let base = m.time_range().unwrap().0;
    let mark = |time, kind| Mark {
        time,
        ip: Some(0x1300),
        kind,
    };
    m.threads[1].marks = Marks::new(vec![
        mark(base + 1_000, MarkKind::Cbr { ratio: 10 }),
        mark(
            base + 2_000,
            MarkKind::PtWrite {
                payload: 0x1005,
                bytes: 8,
            },
        ),
        mark(base + 5_000, MarkKind::Cbr { ratio: 24 }),
        mark(
            base + 6_000,
            MarkKind::PtWrite {
                payload: 0xbeef,
                bytes: 8,
            },
        ),
    ]);
    m.cbr_mhz = 100.0;
    let slice = |start, end, tid| CpuSlice {
        start: base + start,
        end: base + end,
        pid: 100,
        tid,
    };
    m.cpus = vec![CpuTrack {
        cpu: 0,
        slices: vec![slice(0, 3_000, 100), slice(3_000, 9_500, 101)],
        marks: Marks::default(),
    }];
    m
}

/// The screen x of time `t` in the view.
fn x_of(h: &Harness<'_, TraceView>, t: u64) -> f32 {
    let tracks = h.get_by_label("Timeline tracks").rect();
    let (a, b) = h.state().view_range();
    tracks.left() + ((t - a) as f64 / (b - a) as f64 * tracks.width() as f64) as f32
}

#[test]
fn clicking_a_cpu_slice_goes_to_its_thread_at_that_time() {
    let mut h = harness_on(cpus_model());
    let base = model().time_range().unwrap().0;
    h.get_by_label("101 worker").click();
    h.run();
    assert!(h.state().is_thread_collapsed(101));
    let (a0, b0) = h.state().view_range();
    // The CPU lane is the first row under the axis.
    let tracks = h.get_by_label("Timeline tracks").rect();
    let at = Pos2::new(x_of(&h, base + 6_000), tracks.top() + 9.0);
    click(&mut h, at, Modifiers::NONE);
    let (a, b) = h.state().view_range();
    assert!(a <= base + 3_000 && b >= base + 9_500, "{a}..{b}");
    assert!(
        b - a < b0 - a0,
        "zoomed to the slice: {a0}..{b0} -> {a}..{b}"
    );
    assert!(!h.state().is_thread_collapsed(101), "its track is unfolded");
}

#[test]
fn a_ptwrite_value_is_found_by_search_and_shown_on_hover() {
    let mut h = harness_on(cpus_model());
    let base = model().time_range().unwrap().0;
    h.state_mut().set_search("ptwrite = 0xbeef");
    h.run();
    assert_eq!(h.state().ptwrite_hits(), [(1, base + 6_000)]);
    h.get_by_label_contains("1 PTWRITE values");
    h.state_mut().step_match(true);
    h.run();
    let (a, b) = h.state().view_range();
    let mid = a + (b - a) / 2;
    assert!(mid.abs_diff(base + 6_000) <= 2, "centered on it: {a}..{b}");
    // The worker's marks row: under the CPU lane, the demo thread's
    // header and two lanes, and the worker's header.
    h.state_mut().fit_all();
    h.run();
    let tracks = h.get_by_label("Timeline tracks").rect();
    let y = tracks.top() + 18.0 + 20.0 + 2.0 * 18.0 + 20.0 + 8.0;
    h.hover_at(Pos2::new(x_of(&h, base + 2_000), y));
    h.run();
    h.get_by_label_contains("ptwrite = 0x1005");
    h.get_by_label_contains("core at 1000 MHz");
}
