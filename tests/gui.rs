//! End to end through the window: egui_kittest drives the real application
//! state (tabs, background loads, the timeline) by its AccessKit labels,
//! and the real binary runs under Xvfb to take the README's screenshots.
//! No native dialog ever opens: files are handed to the app directly.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::demo_snapshot as demo_path;
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use ptscope::gui::App;

/// Held by tests that start processes or capture: a capture
/// single-stepping under a heavy test misses its deadlines.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn harness_with(files: &[&Path]) -> Harness<'static, App> {
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.show(ui), App::new(None));
    // Captures run the real program, not this test binary.
    h.state_mut().capture.exe = env!("CARGO_BIN_EXE_ptscope").into();
    let ctx = h.ctx.clone();
    for f in files {
        h.state_mut().open(f, &ctx);
        h.state_mut().active_tab_mut().unwrap().wait();
    }
    h.run_steps(3);
    h
}

fn demo_harness() -> Harness<'static, App> {
    harness_with(&[&demo_path()])
}

fn view<'h>(h: &'h Harness<'_, App>) -> &'h ptscope_viewer::TraceView {
    h.state().active_tab().unwrap().view().expect("a view")
}

/// A point inside the timeline at `frac` of its width, on `span`'s row.
fn timeline_point(h: &Harness<'_, App>, frac: f32) -> egui::Pos2 {
    let r = h.get_by_label("Timeline tracks").rect();
    egui::pos2(r.left() + r.width() * frac, r.top() + 30.0)
}

#[test]
fn opens_the_demo_and_shows_its_thread() {
    let h = demo_harness();
    let tab = h.state().active_tab().unwrap();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    let model = view(&h).model().clone();
    assert_eq!(model.threads.len(), 1);
    let t = &model.threads[0].spans;
    // The track header names the thread by tid and comm.
    h.get_by_label_contains(&format!("{} {}", t.tid, t.comm));
    h.get_by_label("Timeline tracks");
    h.get_by_label("Overview");
    h.get_by_label("Search functions");
}

#[test]
fn zooms_in_and_out_from_the_keyboard_and_wheel() {
    let mut h = demo_harness();
    let (a0, b0) = view(&h).view_range();
    let p = timeline_point(&h, 0.5);
    h.hover_at(p);
    h.run_steps(2);
    for _ in 0..3 {
        h.key_press(egui::Key::W);
        h.run_steps(2);
    }
    let (a1, b1) = view(&h).view_range();
    assert!(
        b1 - a1 < (b0 - a0) / 2,
        "W zooms in: {}..{} -> {}..{}",
        a0,
        b0,
        a1,
        b1
    );
    // The time under the cursor stays put (within a pixel's worth).
    let mid0 = a0 + (b0 - a0) / 2;
    let mid1 = a1 + (b1 - a1) / 2;
    assert!(mid0.abs_diff(mid1) < (b0 - a0) / 100, "{mid0} vs {mid1}");
    for _ in 0..3 {
        h.key_press(egui::Key::S);
        h.run_steps(2);
    }
    let (a2, b2) = view(&h).view_range();
    assert!(
        (b2 - a2) as f64 > (b1 - a1) as f64 * 1.5,
        "S zooms out: {a1}..{b1} -> {a2}..{b2}"
    );
    // Ctrl+wheel zooms too.
    h.event_modifiers(
        egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Line,
            delta: egui::vec2(0.0, 5.0),
            modifiers: egui::Modifiers::CTRL,
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Wheel,
        },
        egui::Modifiers::CTRL,
    );
    h.run_steps(3);
    let (a3, b3) = view(&h).view_range();
    assert!(
        b3 - a3 < b2 - a2,
        "ctrl+wheel zooms in: {a2}..{b2} -> {a3}..{b3}"
    );
}

#[test]
fn clicking_a_span_shows_its_details() {
    let mut h = demo_harness();
    // Fit the slow request's span, then click it.
    let r = view(&h)
        .find_span("slow_path")
        .expect("slow_path is in the demo");
    h.state_mut()
        .active_tab_mut()
        .unwrap()
        .view_mut()
        .unwrap()
        .show_span(r);
    h.run_steps(3);
    let rect = view(&h).span_rect(r).expect("on screen");
    h.hover_at(rect.center());
    h.run_steps(1);
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos: rect.center(),
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    h.run_steps(3);
    assert_eq!(view(&h).selected(), Some(r));
    let d = view(&h).details().expect("details");
    assert_eq!(d.name, "slow_path");
    assert_eq!(d.calls.calls, 1, "the demo stops at its first slow request");
    let src = d.source.as_deref().unwrap_or("");
    assert!(src.contains("demo.c:"), "source of slow_path: {src:?}");
    // The panel says it: the name and the call path through `handle`.
    h.get_by_label("Selected span");
    h.get_by_label("Call path");
    assert!(h.get_all_by_label_contains("slow_path").count() >= 1);
    assert!(h.get_all_by_label_contains("handle").count() >= 1);
}

fn view_mut<'h>(h: &'h mut Harness<'_, App>) -> &'h mut ptscope_viewer::TraceView {
    h.state_mut()
        .active_tab_mut()
        .unwrap()
        .view_mut()
        .expect("a view")
}

/// Line-level zoom through the window: zoomed into the slow request, the
/// loop of `slow_path` (demo.c line 30) shows as line spans; clicking one
/// opens the Source pane on demo.c at line 30, whose heat says it ran 300
/// times, the loop's trip count.
#[test]
fn zooming_into_slow_path_shows_the_loop_line_and_its_trip_count() {
    let mut h = demo_harness();
    let r = view(&h).find_span("slow_path").expect("slow_path");
    let (s, e) = r.times(view(&h).model()).unwrap();
    view_mut(&mut h).zoom_to(s, e);
    h.run_steps(1);
    view(&h).wait_for_lines();
    h.run_steps(2);
    let lines = view(&h).visible_lines();
    let loop_lines: Vec<_> = lines
        .iter()
        .filter(|l| l.number == 30 && l.function.as_deref() == Some("slow_path"))
        .collect();
    assert!(
        loop_lines.len() >= 100,
        "line spans of demo.c:30 on screen: {} (of {} line boxes)",
        loop_lines.len(),
        lines.len()
    );
    let target = loop_lines[loop_lines.len() / 3];
    let at = target.rect.center();
    h.hover_at(at);
    h.run_steps(1);
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos: at,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    h.run_steps(3);
    assert_eq!(view(&h).selected_line(), target.line);
    assert_eq!(view(&h).tab(), ptscope_viewer::PanelTab::Source);
    let t = view(&h)
        .source_pane()
        .target()
        .expect("the Source pane's file")
        .clone();
    assert!(t.file.ends_with("/demo.c"), "{}", t.file);
    assert_eq!(t.line, 30);
    // Read from disk: at its DWARF path, or next to the snapshot when the
    // tree was built elsewhere.
    let loaded = view_mut(&mut h).source_pane_mut().file(&t.file);
    match &*loaded {
        ptscope_viewer::Loaded::Text { path, lines } => {
            assert!(path.ends_with("assets/demo/demo.c"), "{}", path.display());
            assert!(lines[29].contains("for (int i = 0; i < 300; i++)"));
        }
        other => panic!("demo.c not found: {other:?}"),
    }
    let heat = view_mut(&mut h)
        .source_pane_mut()
        .heat_at(30)
        .expect("line 30 ran");
    assert_eq!(heat.count, 300, "{heat:?}");
    // What the pane shows: line 30 highlighted in view with its count.
    h.get_by_label_contains("demo.c:30: ran 300×");
    h.get_by_role_and_label(egui::accesskit::Role::Tab, "Source");
}

/// An inlined call (tests/programs/inline.c: `mix`, always inlined into
/// `churn`'s loop at line 14) shows as its own line spans, marked inlined,
/// in the lane under churn's line 14; clicking one opens mix's source, and
/// the Disassembly view lists churn's instructions under mix's lines.
#[test]
fn inlined_code_shows_as_marked_line_spans() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::support::build(dir.path(), "inline.c");
    let (snap, _) = crate::support::record(dir.path(), "inline", &[], &[exe.to_str().unwrap()]);
    let mut h = harness_with(&[&snap]);
    let r = view(&h).find_span("churn").expect("churn");
    let (s, e) = r.times(view(&h).model()).unwrap();
    view_mut(&mut h).zoom_to(s, e);
    h.run_steps(1);
    view(&h).wait_for_lines();
    h.run_steps(2);
    let lines = view(&h).visible_lines();
    let named = |f: &str| -> Vec<&ptscope_viewer::VisibleLine> {
        lines
            .iter()
            .filter(|l| l.function.as_deref() == Some(f))
            .collect()
    };
    let mix = named("mix");
    assert!(
        mix.len() >= 20,
        "{} mix spans of {} boxes",
        mix.len(),
        lines.len()
    );
    assert!(mix.iter().all(|l| l.inlined && (6..=7).contains(&l.number)));
    let call_line = named("churn")
        .into_iter()
        .find(|l| l.number == 14 && !l.inlined)
        .expect("churn's line 14");
    // One lane below the line that calls it.
    assert!(mix[0].rect.top() > call_line.rect.bottom() - 1.0);
    assert!(mix[0].rect.top() < call_line.rect.bottom() + 20.0);

    let target = mix[mix.len() / 2];
    let at = target.rect.center();
    h.hover_at(at);
    h.run_steps(4);
    h.get_by_label("inlined into churn");
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos: at,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    h.run_steps(3);
    let t = view(&h).source_pane().target().expect("a target").clone();
    assert_eq!((&*t.function, &*t.outer), ("mix", "churn"));
    assert!(t.file.ends_with("/inline.c"), "{}", t.file);
    h.get_by_label_contains(&format!("inline.c:{}: ran 40×", t.line));
    h.get_by_role_and_label(egui::accesskit::Role::RadioButton, "Disassembly")
        .click();
    h.run_steps(3);
    // mix's lines, each over the instructions of churn compiled from it.
    h.get_by_label_contains("inline.c:6: ran 40×");
    h.get_by_label_contains("inline.c:7: ran 40×");
    assert!(h.get_all_by_label_contains("ran 40×").count() >= 4);
}

/// `--source-map` pairs reach each tab's Source pane, ahead of the
/// snapshot's directory.
#[test]
fn source_maps_reach_the_viewer() {
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.show(ui), App::new(None));
    // Captures run the real program, not this test binary.
    h.state_mut().capture.exe = env!("CARGO_BIN_EXE_ptscope").into();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("demo.c"), "// elsewhere\n").unwrap();
    let from = demo_path()
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap()
        .display()
        .to_string();
    let to = dir.path().display().to_string();
    h.state_mut().source_maps = vec![(from.clone(), to.clone())];
    let ctx = h.ctx.clone();
    h.state_mut().open(&demo_path(), &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(2);
    assert_eq!(view(&h).source_pane().maps(), vec![(from.clone(), to)]);
    let dwarf: std::sync::Arc<str> = format!("{from}/demo.c").into();
    match &*view_mut(&mut h).source_pane_mut().file(&dwarf) {
        ptscope_viewer::Loaded::Text { path, lines } => {
            assert_eq!(path, &dir.path().join("demo.c"));
            assert_eq!(lines[0], "// elsewhere");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn search_counts_matches() {
    let mut h = demo_harness();
    h.get_by_label("Search functions").click();
    h.run_steps(2);
    h.get_by_label("Search functions").type_text("hash_key");
    h.run_steps(3);
    let n = view(&h).match_count();
    // Every request hashes its key once; the slow one 300 times more.
    let requests = view(&h)
        .model()
        .threads
        .iter()
        .map(|t| count_calls(t, &view(&h).model().funcs, "handle"))
        .sum::<u64>();
    assert!(requests > 100, "{requests}");
    assert!(n >= requests + 300, "{n} matches for {requests} requests");
    h.get_by_label_contains(&format!("{n} matches"));
}

fn count_calls(
    t: &ptscope_model::ThreadModel,
    funcs: &ptscope_model::FuncTable,
    name: &str,
) -> u64 {
    t.spans
        .lanes()
        .flat_map(|(_, lane)| lane.iter())
        .filter(|s| funcs.name(s.func()) == name)
        .count() as u64
}

#[test]
fn shift_drag_selects_a_range_and_fills_the_table() {
    let mut h = demo_harness();
    let from = timeline_point(&h, 0.2);
    let to = timeline_point(&h, 0.8);
    h.hover_at(from);
    h.run_steps(1);
    let shift = egui::Modifiers::SHIFT;
    h.event_modifiers(
        egui::Event::PointerButton {
            pos: from,
            button: egui::PointerButton::Primary,
            pressed: true,
            modifiers: shift,
        },
        shift,
    );
    h.run_steps(1);
    for i in 1..=10 {
        let x = from.x + (to.x - from.x) * i as f32 / 10.0;
        h.event_modifiers(egui::Event::PointerMoved(egui::pos2(x, from.y)), shift);
        h.run_steps(1);
    }
    h.event_modifiers(
        egui::Event::PointerButton {
            pos: to,
            button: egui::PointerButton::Primary,
            pressed: false,
            modifiers: shift,
        },
        shift,
    );
    h.run_steps(3);
    let (a, b) = view(&h).range().expect("a range");
    assert!(b > a);
    let rows = view(&h).range_rows();
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"handle"), "{names:?}");
    assert!(names.contains(&"parse"), "{names:?}");
    h.get_by_role_and_label(egui::accesskit::Role::Tab, "Range")
        .click();
    h.run_steps(3);
    h.get_by_label("Calls");
    // The table's first row (by total time) is on screen.
    let first = &rows[0].0;
    assert!(
        h.get_all_by_label_contains(first).count() >= 1,
        "{first} is not shown"
    );
}

/// A file dropped on the window opens in a tab of its own, and joins the
/// recent files; File > Open recent opens it again, with no dialog.
#[test]
fn a_dropped_file_opens_and_open_recent_opens_it_again() {
    let mut h = harness_with(&[]);
    assert!(h.state().active_tab().is_none());
    let demo = demo_path();
    /// A file dropped from outside, as the windowing integration hands it.
    #[derive(Debug)]
    struct Dropped(PathBuf);
    impl egui::DroppedFile for Dropped {
        fn path(&self) -> &Path {
            &self.0
        }
        fn bytes(&self) -> Result<Vec<u8>, String> {
            std::fs::read(&self.0).map_err(|e| e.to_string())
        }
    }
    h.input_mut()
        .dropped_files
        .push(std::sync::Arc::new(Dropped(demo.clone())));
    h.run_steps(2);
    h.state_mut().active_tab_mut().expect("a tab").wait();
    h.run_steps(3);
    assert_eq!(h.state().active_tab().unwrap().path, demo);
    assert!(h.state().active_tab().unwrap().view().is_some());
    assert_eq!(h.state().recent.first(), Some(&demo));
    // Closed, then opened from the recent files.
    h.state_mut().close(0);
    h.run_steps(2);
    assert!(h.state().active_tab().is_none());
    h.get_by_label("File").click();
    h.run_steps(2);
    h.get_by_label("Open recent").hover();
    h.run_steps(2);
    h.get_by_label("Open recent").click();
    h.run_steps(2);
    h.get_by_label(&demo.display().to_string()).click();
    h.run_steps(2);
    h.state_mut().active_tab_mut().expect("a tab again").wait();
    h.run_steps(3);
    assert_eq!(h.state().active_tab().unwrap().path, demo);
    assert!(h.state().active_tab().unwrap().view().is_some());
}

/// Cancel on a decode in progress stops it: the tab says the decoding
/// was cancelled, and the app goes on (another file opens).
#[test]
fn cancelling_a_decode_stops_it_and_the_app_stays_usable() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    // Big enough to take seconds: a grown copy of the benchmarks' capture.
    let big = dir.path().join("big.ptscope");
    ptscope::scale::grow(&crate::support::bench_snapshot(), &big, 96 << 20).unwrap();
    let mut h = harness_with(&[]);
    let ctx = h.ctx.clone();
    h.state_mut().open(&big, &ctx);
    h.run_steps(2);
    assert!(h.state().active_tab().unwrap().is_loading());
    h.get_by_label("Cancel").click();
    h.run_steps(2);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let tab = h.state().active_tab().unwrap();
    assert!(!tab.is_loading());
    let e = tab.error().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("decoding was cancelled"), "{e}");
    h.state_mut().open(&demo_path(), &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    assert!(h.state().active_tab().unwrap().view().is_some());
}

#[test]
fn a_bad_file_shows_its_error_and_the_app_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("garbage.ptscope");
    std::fs::write(&bad, b"PERFILE2 this is not a perf.data file at all").unwrap();
    let mut h = harness_with(&[&bad]);
    let err = h
        .state()
        .active_tab()
        .unwrap()
        .error()
        .expect("an error")
        .to_string();
    assert!(err.contains("garbage.ptscope"), "names the file: {err}");
    h.get_by_label("Cannot open this file");
    assert!(h.get_all_by_label_contains("garbage.ptscope").count() >= 2);
    // Another file still opens, in its own tab.
    let ctx = h.ctx.clone();
    h.state_mut().open(&demo_path(), &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    assert_eq!(h.state().tabs.len(), 2);
    assert!(h.state().active_tab().unwrap().view().is_some());
    h.get_by_label("Timeline tracks");
}

/// Every file of the malformed-input corpus gets its own tab: an error
/// that names it, or (binaries missing, stripped or foreign) a timeline;
/// and the app stays usable throughout.
#[test]
fn every_malformed_input_is_explained_and_the_app_stays_usable() {
    let _serial = serial();
    use crate::support::malformed::{corpus, Expect};
    let dir = tempfile::tempdir().unwrap();
    let cases = corpus(dir.path());
    let mut h = harness_with(&[]);
    let ctx = h.ctx.clone();
    for c in &cases {
        let name = c.path.file_name().unwrap().to_str().unwrap();
        h.state_mut().open(&c.path, &ctx);
        h.state_mut().active_tab_mut().unwrap().wait();
        h.run_steps(2);
        let tab = h.state().active_tab().unwrap();
        match c.expect {
            Expect::Error(_) => {
                let err = tab.error().expect("an error").to_string();
                assert!(err.contains(name), "{name}: names the file: {err}");
                h.get_by_label("Cannot open this file");
            }
            Expect::Opens(_) => {
                assert!(tab.error().is_none(), "{name}: {:?}", tab.error());
                assert!(tab.view().is_some(), "{name}: a timeline");
                h.get_by_label("Timeline tracks");
            }
        }
    }
    assert_eq!(h.state().tabs.len(), cases.len());
    h.state_mut().open(&demo_path(), &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    assert!(h.state().active_tab().unwrap().view().is_some());
    h.get_by_label("Timeline tracks");
}

/// Long use: thousands of random zooms and pans over a 4 MiB snapshot
/// (the benchmarks' capture grown: more line-level detail than the cache
/// holds), down to line level and back, frame after frame. The line cache
/// stays within its budget, evicting, and memory stops growing once it is
/// full. Prints the figures (ROBUSTNESS.md has them).
///
/// It measures its process's memory, so it runs in a process of its own:
/// the other end-to-end tests share this one.
#[test]
fn long_random_exploring_keeps_memory_bounded() {
    let _serial = serial();
    crate::support::run_alone("gui::long_random_exploring_alone");
}

#[test]
#[ignore = "run alone by long_random_exploring_keeps_memory_bounded"]
fn long_random_exploring_alone() {
    if !crate::support::running_alone() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("grown.ptscope");
    ptscope::scale::grow(&crate::support::bench_snapshot(), &snap, 4 << 20).unwrap();
    let mut h = harness_with(&[&snap]);
    let (lo, hi) = view(&h).bounds().expect("spans");
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let mut rnd = move |n: u64| rng.u64(..n.max(1));
    // PTSCOPE_SOAK_STEPS for a longer soak. The run goes on past it until
    // the line cache has been full for two samples: when it fills depends
    // on the capture and on how small segments are (a third smaller since
    // chains are shared), up to a bound.
    let steps: usize = std::env::var("PTSCOPE_SOAK_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let bound = steps.max(15_000);
    let budget = ptscope_decoder::DEFAULT_SEGMENT_BUDGET;
    let mut rss_at: Vec<(u64, usize)> = Vec::new();
    let mut full: Option<usize> = None;
    let mut peak_cache = 0;
    let mut i = 0;
    while i < steps || (i < bound && full.is_none_or(|f| rss_at.len() < f + 3)) {
        let tab = h.state_mut().active_tab_mut().unwrap();
        let v = tab.view_mut().unwrap();
        match rnd(4) {
            // Jump somewhere, at any width from 100 ns to the whole trace.
            0 => {
                let width = 100u64 << rnd(28);
                let from = lo + rnd((hi - lo).saturating_sub(width).max(1));
                v.zoom_to(from, (from + width).min(hi));
            }
            1 => v.zoom_at(if rnd(2) == 0 { 0.5 } else { 2.0 }, rnd(100) as f64 / 100.0),
            2 => v.pan_ns((rnd(2000) as f64 - 1000.0) * 1e3),
            _ => v.fit_all(),
        }
        h.run_steps(1);
        // Let line-level windows finish decoding, as a user who stops to
        // look would; the rest are superseded and cancelled.
        let (a, b) = view(&h).view_range();
        if ((b - a) as f64) < view(&h).line_threshold() || i % 50 == 0 {
            if let Some(d) = view(&h).line_detail() {
                d.wait();
                peak_cache = peak_cache.max(d.figures().peak_bytes);
            }
            h.run_steps(1);
        }
        if i % 500 == 499 {
            let cached = view(&h)
                .line_detail()
                .map_or(0, |d| d.figures().cached_bytes);
            rss_at.push((ptscope_viewer::bench::rss_bytes(), cached));
            if full.is_none() && cached >= budget / 10 * 9 {
                full = Some(rss_at.len() - 1);
            }
        }
        i += 1;
    }
    let figures = view(&h).line_detail().map(|d| d.figures());
    println!(
        "{i} steps; line cache peak {} MiB of {} MiB; {:?}; RSS every 500 steps (MiB): {:?}",
        peak_cache >> 20,
        budget >> 20,
        figures,
        rss_at.iter().map(|r| r.0 >> 20).collect::<Vec<_>>()
    );
    assert!(peak_cache <= budget, "cache {peak_cache} over {budget}");
    let f = figures.expect("line-level detail");
    assert!(f.decoded > 100, "went down to lines: {f:?}");
    assert!(f.evicted > 0, "filled the cache: {f:?}");
    // Once the line cache is full, the rest of the run adds at most
    // 64 MiB; it is full two samples before the end.
    let full = full.expect("the line cache filled");
    assert!(full + 2 < rss_at.len(), "the cache filled too late: {full}");
    let (warm, last) = (rss_at[full].0, rss_at.last().unwrap().0);
    assert!(
        last <= warm + (64 << 20),
        "memory grows: {} MiB with the cache full, then {} MiB",
        warm >> 20,
        last >> 20
    );
}

#[test]
fn renders_with_wgpu_on_lavapipe() {
    let mut h = Harness::builder()
        .with_size([800.0, 500.0])
        .wgpu()
        .build_ui_state(|ui, app: &mut App| app.show(ui), App::new(None));
    // Captures run the real program, not this test binary.
    h.state_mut().capture.exe = env!("CARGO_BIN_EXE_ptscope").into();
    let ctx = h.ctx.clone();
    h.state_mut().open(&demo_path(), &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let img = h.render().expect("wgpu renders");
    let first = *img.get_pixel(0, 0);
    let differing = img.pixels().filter(|p| **p != first).count();
    assert!(
        differing > (img.width() * img.height() / 10) as usize,
        "the timeline drew something"
    );
}

/// The real binary in a real X server: it opens the demo, draws it, saves
/// a screenshot and exits 0. `PTSCOPE_SCREENSHOTS=DIR` keeps the images
/// (the README's come from here: `scripts/screenshots`).
#[test]
fn the_binary_runs_under_xvfb_and_takes_a_screenshot() {
    let _serial = serial();
    let xvfb = crate::support::Xvfb::start();
    let dir = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("PTSCOPE_SCREENSHOTS").map(PathBuf::from);
    let out_dir = keep.clone().unwrap_or_else(|| dir.path().to_path_buf());
    std::fs::create_dir_all(&out_dir).unwrap();
    // Two threads writing PTWRITE values, recorded per CPU: the CPU lanes
    // over the threads, and each thread's marks row.
    let exe = crate::support::build(dir.path(), "ptwrite_threads.c");
    let (marks, _) = crate::support::record(
        dir.path(),
        "marks",
        &["--backend", "emulated", "--per-cpu", "--cpus", "2"],
        &[exe.to_str().unwrap()],
    );
    let marks = marks.to_str().unwrap().to_string();
    // The demo as it opens, and zoomed to its slow request.
    let shots: [(&str, &[&str]); 6] = [
        ("demo.png", &[]),
        ("demo-slow-path.png", &["--select", "slow_path"]),
        // The outlier hunt: the slowest `handle` against a typical one,
        // its slowest calls brushed on the histogram of every call.
        ("demo-explain.png", &["--explain", "handle"]),
        // 80 ns: line spans and the instruction row.
        ("demo-lines.png", &["--select", "hash_key"]),
        // The Capture panel over the demo.
        ("demo-capture.png", &["--capture"]),
        // CPU lanes and marks rows.
        ("marks-cpus.png", &[marks.as_str(), "--select", "worker"]),
    ];
    let mut results = Vec::new();
    for (name, args) in shots {
        let shot = out_dir.join(name);
        let mut cmd = crate::support::ptscope();
        xvfb.display_for(&mut cmd, dir.path());
        cmd.arg("--screenshot").arg(&shot);
        cmd.args(args);
        results.push((shot, cmd.output().unwrap()));
    }
    drop(xvfb);
    for (shot, result) in results {
        assert!(
            result.status.success(),
            "ptscope under Xvfb failed: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        crate::support::check_png(&shot);
    }
}

/// The Capture panel end to end with the emulated backend: a test process
/// is found by fuzzy filter, its function by fuzzy search, the capture
/// runs, and the snapshot opens in a new tab whose last call is the
/// triggering one. The process keeps running.
#[test]
fn capture_panel_attaches_triggers_and_opens_the_snapshot() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let built = crate::support::build(dir.path(), "forever.c");
    let exe = dir.path().join("kittest_target");
    std::fs::rename(&built, &exe).unwrap();
    let child = Killed(
        Command::new(&exe)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    std::thread::sleep(std::time::Duration::from_millis(200));

    let mut h = harness_with(&[]);
    h.state_mut().capture.output_dir = dir.path().join("captures");
    h.get_by_label("Capture…").click();
    h.run_steps(3);
    // 1-2: the process list, filtered fuzzily.
    h.get_by_label("Process filter").click();
    h.run_steps(1);
    h.get_by_label("Process filter").type_text("kttarg");
    h.run_steps(3);
    h.get_by_label_contains(&format!("{pid} kittest_target"))
        .click();
    h.run_steps(3);
    assert_eq!(h.state().capture.pid, Some(pid as i32));
    // 3: its functions, searched fuzzily.
    h.get_by_label("Function filter").click();
    h.run_steps(1);
    h.get_by_label("Function filter").type_text("tck");
    h.run_steps(3);
    h.get_by_label_contains("tick  (kittest_target)").click();
    h.run_steps(3);
    assert_eq!(h.state().capture.symbol.as_deref(), Some("tick"));
    h.get_by_label_contains("auto chose emulated");
    // 4: capture.
    h.get_by_label("Start capture").click();
    h.run_steps(2);
    assert_one_snapshot(&mut h, 120);
    h.run_steps(3);
    // 5: the snapshot opened in a tab; its last call is tick's.
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let tab = h.state().active_tab().unwrap();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    assert!(tab.path.starts_with(dir.path().join("captures")));
    let model = view(&h).model().clone();
    let t = model
        .threads
        .iter()
        .find(|t| t.spans.tid == pid as i32)
        .unwrap();
    // Pseudo spans such as `[untraced]` (after the trigger) are not calls.
    // The last call in tree order: by start time alone, a call made just
    // after the attach can tie with the sleep the thread was attached in,
    // which began (as far as the trace knows) at the same first timestamp.
    let last = t
        .spans
        .tree_order()
        .into_iter()
        .rev()
        .map(|(d, i)| t.spans.lane(d)[i])
        .find(|s| !model.funcs.name(s.func()).starts_with('['))
        .unwrap();
    assert_eq!(model.funcs.name(last.func()), "tick");
    // The viewer says how it was captured, with tick's argument.
    let info = view(&h).capture_info().unwrap().to_string();
    assert!(info.contains("trigger symbol tick"), "{info}");
    assert!(info.contains("entered tick"), "{info}");
    assert!(info.contains("rdi=0x"), "{info}");
    h.get_by_label_contains("Capture: emulated capture, trigger symbol tick");
    // The snapshot can be saved elsewhere.
    let copy = dir.path().join("kept.ptscope");
    h.state().save_active_as(&copy).unwrap();
    assert_eq!(
        std::fs::metadata(&copy).unwrap().len(),
        std::fs::metadata(&tab.path).unwrap().len()
    );
    // The target runs on.
    let st = crate::support::process_state(pid as u32);
    drop(child);
    assert!(st == "S" || st == "R", "target state after capture: {st}");
}

/// A child process killed when the test ends, pass or fail.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to `secs` for the running capture to end, and checks it saved
/// one snapshot.
fn assert_one_snapshot(h: &mut Harness<'_, App>, secs: u64) {
    assert!(h
        .state_mut()
        .capture
        .wait(std::time::Duration::from_secs(secs)));
    let state = h.state().capture.state.clone();
    assert!(
        state.starts_with("done: 1 snapshot"),
        "{state}: {:?}",
        h.state().capture.log
    );
}

/// Polls the panel until its log holds `needle` (within 30 s); the log.
fn wait_for_log(h: &mut Harness<'_, App>, needle: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        h.state_mut().capture.poll();
        let log = h.state().capture.log.join("\n");
        if log.contains(needle) {
            return log;
        }
        assert!(std::time::Instant::now() < deadline, "no `{needle}`: {log}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A window whose Capture panel, shown, is set to run `exe` (from `dir`)
/// with `trigger`, writing under `dir`.
fn command_capture(
    dir: &Path,
    exe: &Path,
    trigger: ptscope::capture_panel::TriggerKind,
) -> Harness<'static, App> {
    let mut h = harness_with(&[]);
    {
        let p = &mut h.state_mut().capture;
        p.output_dir = dir.join("captures");
        p.target = ptscope::capture_panel::TargetKind::Command;
        p.program = exe.display().to_string();
        p.cwd = dir.display().to_string();
        p.trigger = trigger;
        p.open = true;
    }
    h.run_steps(2);
    h
}

/// Cancel stops tracing, saves nothing and leaves the target running.
#[test]
fn capture_panel_cancel_leaves_the_target_alone() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::support::build(dir.path(), "forever.c");
    let child = Killed(
        Command::new(&exe)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id() as i32;
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut h = harness_with(&[]);
    {
        let p = &mut h.state_mut().capture;
        p.output_dir = dir.path().join("captures");
        p.pid = Some(pid);
        p.trigger = ptscope::capture_panel::TriggerKind::Manual;
        p.open = true;
    }
    h.run_steps(2);
    h.get_by_label("Start capture").click();
    h.run_steps(2);
    std::thread::sleep(std::time::Duration::from_millis(300));
    h.get_by_label("Cancel capture").click();
    h.run_steps(2);
    let ended = h
        .state_mut()
        .capture
        .wait(std::time::Duration::from_secs(30));
    assert!(ended, "{}", h.state().capture.log.join("\n"));
    h.run_steps(2);
    assert!(h.state().tabs.is_empty(), "nothing opened");
    let log = h.state().capture.log.join("\n");
    assert!(
        log.contains("cancelled; the target was left running"),
        "{log}"
    );
    let st = crate::support::process_state(pid as u32);
    drop(child);
    assert!(st == "S" || st == "R", "target state after cancel: {st}");
}

/// A command run from the panel: captured at its trigger in a capture
/// process, opened in a tab, and its end (status 3, a second later) is
/// told in the log.
#[test]
fn capture_panel_runs_a_command_and_reports_its_end() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::support::build(dir.path(), "exits_soon.c");
    let mut h = command_capture(
        dir.path(),
        &exe,
        ptscope::capture_panel::TriggerKind::Function,
    );
    h.state_mut().capture.symbol = Some("tick".into());
    h.get_by_label("Start capture").click();
    h.run_steps(2);
    assert_one_snapshot(&mut h, 120);
    h.run_steps(3);
    let tab = h.state_mut().active_tab_mut().unwrap();
    tab.wait();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    // The command runs on for about a second after its snapshot.
    wait_for_log(&mut h, "the command exited with status 3");
}

/// A trace with nothing to decode says so in the window's toolbar.
#[test]
fn a_trace_without_a_psb_shows_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let file = crate::support::malformed::without_psbs(dir.path());
    let h = harness_with(&[&file]);
    let tab = h.state().active_tab().unwrap();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    h.get_by_label("1 warning");
}

/// A recorded command that writes junk (not UTF-8, no newline, even text
/// that looks like a report) neither confuses the panel nor loses its
/// output: Snapshot now takes the snapshot, and the command runs to its
/// own end with its output intact (it exits 9 on a broken pipe).
#[test]
fn capture_panel_is_not_confused_by_a_chatty_command() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::support::build(dir.path(), "chatty.c");
    let mut h = command_capture(
        dir.path(),
        &exe,
        ptscope::capture_panel::TriggerKind::Manual,
    );
    h.get_by_label("Start capture").click();
    h.run_steps(2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !["armed", "waiting"]
        .iter()
        .any(|s| h.state().capture.state.starts_with(s))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "never armed: {} {:?}",
            h.state().capture.state,
            h.state().capture.log
        );
        h.state_mut().capture.poll();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    h.get_by_label("Snapshot now").click();
    h.run_steps(2);
    assert_one_snapshot(&mut h, 60);
    let log = wait_for_log(&mut h, "the command exited with status");
    assert!(log.contains("status 0"), "{log}");
}

/// Three snapshots of slow calls, opened together, are one session: their
/// trigger calls listed slowest first, each opening its tab at that call.
#[test]
fn snapshots_of_slow_calls_open_as_one_session() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::support::build(dir.path(), "outlier.c");
    let out = dir.path().join("slow.ptscope");
    let run = crate::support::run_ok(
        crate::support::ptscope()
            .args(["record", "-o"])
            .arg(&out)
            .args([
                "--trigger",
                "handle",
                "--slower-than",
                "300ns",
                "--snapshots",
                "3",
            ])
            .arg("--")
            .arg(&exe)
            .arg("200"),
        "record --snapshots 3",
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("open them as one session"), "{err}");
    let files: Vec<PathBuf> = (1..=3)
        .map(|n| dir.path().join(format!("slow-{n}.ptscope")))
        .collect();
    let calls: Vec<ptscope_formats::snapshot::TriggerCall> = files
        .iter()
        .map(|f| {
            ptscope_formats::snapshot::Snapshot::read_metadata(f)
                .unwrap()
                .unwrap()
                .trigger_call
                .expect("each snapshot is a slow call")
        })
        .collect();
    let mut h = harness_with(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    h.get_by_label("Slow calls");
    // Listed slowest first.
    let worst = (0..3)
        .max_by_key(|&i| (calls[i].duration, std::cmp::Reverse(i)))
        .unwrap();
    let entries: Vec<String> = h
        .query_all_by_label_contains("handle  (thread")
        .map(|n| format!("{n:?}"))
        .collect();
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert!(
        entries[0].contains(&format!("slow-{}", worst + 1)),
        "{entries:?}"
    );
    // Another tab is active; the worst call's entry opens its tab at it.
    h.state_mut().active = (worst + 1) % 3;
    h.run_steps(2);
    h.query_all_by_label_contains("handle  (thread")
        .next()
        .unwrap()
        .click();
    h.run_steps(3);
    assert_eq!(h.state().active, worst);
    let v = view(&h);
    let r = v.selected().expect("the trigger call selected");
    let (s, e) = r.times(v.model()).unwrap();
    assert_eq!(
        v.model().funcs.name(r.span(v.model()).unwrap().func()),
        "handle"
    );
    let c = &calls[worst];
    assert!(
        s.abs_diff(c.start) + e.abs_diff(c.end) < c.duration / 10,
        "selected {s}..{e}, trigger call {}..{}",
        c.start,
        c.end
    );
    let (a, b) = v.view_range();
    assert!(b - a < 4 * c.duration, "zoomed to the call: {a}..{b}");
}

/// "By line" re-decodes the slowest call and a typical one in the
/// background: the lines only the slow one ran (the demo's slow path, and
/// its loop of 300 hashes) are listed.
#[test]
fn the_slowest_call_is_compared_with_a_typical_one_line_by_line() {
    let mut h = demo_harness();
    assert!(h
        .state_mut()
        .active_tab_mut()
        .unwrap()
        .view_mut()
        .unwrap()
        .explain("handle"));
    h.run_steps(3);
    h.get_by_label("Against a typical call");
    h.get_by_label("By line").click();
    let t = std::time::Instant::now();
    while h.query_by_label("Lines only this call ran").is_none() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "no line comparison after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        h.run_steps(1);
    }
    h.get_by_label_contains("demo.c:30 slow_path");
    // The slow path's loop ran 300 times in the slow call, never in the
    // typical one.
    assert!(
        h.query_all_by_label_contains("300 × against 0 ×").count()
            + h.query_all_by_label_contains("301 × against 0 ×").count()
            >= 1
    );
}

/// File > Export… > Perfetto writes the open trace, on a thread of its
/// own, and Perfetto's schema reads back every span of it.
#[test]
fn file_export_writes_a_perfetto_trace_of_the_open_file() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("from-the-window.pftrace");
    let mut h = demo_harness();
    let chosen = dest.clone();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    h.state_mut().pick_export = Box::new(move |format| {
        seen.lock().unwrap().push(format);
        Some(chosen.clone())
    });
    h.get_by_label("File").click();
    h.run();
    h.get_by_label("Export…").click();
    h.run();
    h.get_by_label("Perfetto trace (.pftrace)…").click();
    h.run();
    assert_eq!(
        *asked.lock().unwrap(),
        [ptscope::export::ExportFormat::Perfetto]
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while h.state().exporting() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        h.run_steps(1);
    }
    h.run_steps(1);
    let n = view(&h).model().span_count();
    let said = format!("exported {n} spans to {}", dest.display());
    assert!(
        h.state().capture.log.iter().any(|l| l == &said),
        "{:?}",
        h.state().capture.log
    );
    let out = std::process::Command::new(crate::support::python_readers())
        .arg("-c")
        .arg(
            "import sys\nfrom perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb\n\
             t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())\n\
             print(sum(1 for p in t.packet if p.HasField('track_event') and p.track_event.type == 1))",
        )
        .arg(&dest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), n.to_string());
}
