//! egui_kittest tests: drive a `TraceView` over a small synthetic model
//! through the AccessKit tree and pointer/key events, headless.

use std::sync::Arc;

use egui::{Event, Key, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use ptscope_decoder::event::{FuncTable, SpanKind};
use ptscope_decoder::model::{Model, ThreadModel, TimeUnit};
use ptscope_decoder::store::{flag, ThreadSpans};
use ptscope_viewer::{PanelTab, TraceView};

fn thread(spans: ThreadSpans) -> ThreadModel {
    ThreadModel {
        spans,
        stack: Default::default(),
        walk: Default::default(),
        checkpoints: Vec::new(),
        checkpoint_frames: Vec::new(),
        stream: None,
    }
}

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
    b.push(
        0,
        base + 4_000,
        base + 5_000,
        ptscope_decoder::event::SYSCALL,
        0,
    );
    b.push(0, base + 5_000, base + 9_500, work, 0);
    Model {
        funcs,
        threads: vec![thread(a), thread(b)],
        missing_binaries: Vec::new(),
        warnings: Vec::new(),
        lines: None,
        unit: TimeUnit::Ns,
    }
}

fn harness() -> Harness<'static, TraceView> {
    let view = TraceView::new(Arc::new(model()));
    let mut h = Harness::builder()
        .with_size(egui::vec2(1200.0, 800.0))
        .build_ui_state(|ui, view: &mut TraceView| view.ui(ui), view);
    h.run();
    h
}

fn click(h: &mut Harness<'_, TraceView>, pos: Pos2, modifiers: Modifiers) {
    h.hover_at(pos);
    for pressed in [true, false] {
        h.event(Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers,
        });
    }
    h.run();
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
    assert!(h
        .query_by_label(ptscope_viewer::view::UNTIMED_LABEL)
        .is_none());
    assert!(h.query_by_label_contains("insns").is_none());
    let untimed = Model {
        unit: TimeUnit::Insns,
        ..model()
    };
    h.state_mut().set_model(Arc::new(untimed));
    h.run();
    h.get_by_label(ptscope_viewer::view::UNTIMED_LABEL);
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
