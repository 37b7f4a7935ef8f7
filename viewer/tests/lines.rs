//! Line-level zoom over the bundled demo, headless: line spans appear
//! under `slow_path` once the fine pass is done, a click opens the Source
//! pane on the loop's line with its trip count, and at the deepest zoom
//! the instruction row shows and opens the disassembly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use egui::Modifiers;
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use ptscope_decoder::DEFAULT_SEGMENT_BUDGET;
use ptscope_model::DetailSource;
use ptscope_model::Model;
use ptscope_viewer::Disasm;
use ptscope_viewer::{PanelTab, TraceView, VisibleLine};
use ptscope_viewer::{SourceEnv, SourceMode, SourcePane, SourceTarget};

mod common;
use common::{click, harness_of};

fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo")
}

/// The demo's model and the decoder's fine pass over it, which the view
/// asks for line detail as the app's would.
fn demo() -> (Arc<Model>, Arc<dyn DetailSource>) {
    let snap = ptscope_formats::snapshot::Snapshot::open(&demo_dir().join("demo.ptscope")).unwrap();
    let decoded = ptscope_decoder::decode_snapshot(&snap, &Default::default()).unwrap();
    let (model, worker) = decoded.into_parts(DEFAULT_SEGMENT_BUDGET, || {});
    (
        model,
        Arc::new(worker.expect("the demo has an instruction trace")),
    )
}

fn harness() -> Harness<'static, TraceView> {
    let (model, detail) = demo();
    let mut view = TraceView::new(model);
    assert!(view.set_detail(detail));
    view.set_source_dir(Some(demo_dir()));
    let mut h = harness_of(view, egui::vec2(1280.0, 800.0));
    h.run_steps(2);
    h
}

/// Shows `slow_path` and waits for its line detail.
fn zoom_to_slow_path(h: &mut Harness<'_, TraceView>) -> (u64, u64) {
    let r = h.state().find_span("slow_path").unwrap();
    let times = r.times(h.state().model()).unwrap();
    h.state_mut().zoom_to(times.0, times.1);
    h.run_steps(1);
    // The coarse view stays while the lines decode.
    assert!(h.state().span_rect(r).is_some());
    h.state().wait_for_lines();
    h.run_steps(2);
    times
}

fn line_30(v: &[VisibleLine]) -> Vec<&VisibleLine> {
    v.iter()
        .filter(|l| {
            l.number == 30 && l.line.is_some() && l.function.as_deref() == Some("slow_path")
        })
        .collect()
}

#[test]
fn zoomed_out_there_is_no_line_detail() {
    let h = harness();
    assert!(h.state().window().width > h.state().line_threshold());
    assert!(h.state().visible_lines().is_empty());
    assert!(!h.state().line_frame().active);
}

#[test]
fn line_spans_appear_under_slow_path_and_a_click_opens_the_loop() {
    let mut h = harness();
    let r = h.state().find_span("slow_path").unwrap();
    let (s, e) = r.times(h.state().model()).unwrap();
    h.state_mut().zoom_to(s, e);
    h.run_steps(1);
    // While the segment decodes, the calls stay and a note says why the
    // lines are not there yet. The decode runs beside this thread and can
    // win the race on a loaded machine: then the lines are there already.
    assert!(h.state().span_rect(r).is_some());
    if h.query_by_label("decoding lines…").is_none() {
        assert!(
            !h.state().visible_lines().is_empty(),
            "neither the lines nor a note saying they are on their way"
        );
    }
    h.state().wait_for_lines();
    h.run_steps(2);
    assert!(h.query_by_label("decoding lines…").is_none());
    let lines = h.state().visible_lines();
    assert!(lines.len() > 100, "{} line boxes", lines.len());
    let loop_lines = line_30(&lines);
    // One piece of line 30 between each two hash_key calls.
    assert!(
        loop_lines.len() > 100,
        "{} boxes of line 30",
        loop_lines.len()
    );
    assert!(loop_lines.iter().all(|l| !l.inlined && !l.insn));
    assert!(loop_lines[0].file.as_deref().unwrap().ends_with("demo.c"));
    // hash_key's own lines sit in the lane below its span.
    assert!(lines
        .iter()
        .any(|l| l.function.as_deref() == Some("hash_key")));
    // Too wide an average instruction for the instruction row.
    assert!(!lines.iter().any(|l| l.insn));

    let target = loop_lines[loop_lines.len() / 2];
    click(&mut h, target.rect.center(), Modifiers::NONE);
    assert_eq!(h.state().selected_line(), target.line);
    assert_eq!(h.state().tab(), PanelTab::Source);
    let t = h.state().source_pane().target().expect("a source target");
    assert!(t.file.ends_with("demo.c"), "{}", t.file);
    assert_eq!((t.line, &*t.function), (30, "slow_path"));
    // The heat column: line 30 ran once per loop trip.
    let heat = h
        .state_mut()
        .source_pane_mut()
        .heat_at(30)
        .expect("line 30 ran");
    assert_eq!(heat.count, 300, "{heat:?}");
    // On screen: the row of line 30 with its count and source text, and
    // the lines around it.
    h.get_by_label_contains("demo.c:30: ran 300×");
    h.get_by_label_contains("acc += hash_key(r->key) >> (i & 7);");
    h.get_by_label_contains("demo.c:28: ran 1×");
    h.get_by_label_contains("demo.c:33: did not run");
    // The clicked line is outlined in the timeline; Esc clears it.
    h.key_press(egui::Key::Escape);
    h.run_steps(1);
    assert_eq!(h.state().selected_line(), None);
}

#[test]
fn heat_follows_the_range_selection() {
    let mut h = harness();
    let (s, e) = zoom_to_slow_path(&mut h);
    let l = line_30(&h.state().visible_lines())[0].line.unwrap();
    assert!(h.state_mut().select_line(l));
    h.run_steps(2);
    assert_eq!(
        h.state_mut().source_pane_mut().heat_at(30).unwrap().count,
        300
    );
    // The first half of the loop.
    let mid = s + (e - s) / 2;
    h.state_mut().set_range(Some((s, mid)));
    h.state_mut().set_tab(PanelTab::Source);
    h.run_steps(2);
    h.state().wait_for_lines();
    h.run_steps(2);
    assert_eq!(h.state().source_pane().heat_scope(), Some((s, mid)));
    let half = h.state_mut().source_pane_mut().heat_at(30).unwrap().count;
    assert!((130..=170).contains(&half), "{half} trips in half the call");
    h.get_by_label_contains("heat over the range");
}

#[test]
fn the_deepest_zoom_shows_instructions_and_a_click_disassembles() {
    let mut h = harness();
    let (s, _) = zoom_to_slow_path(&mut h);
    // A few loop trips.
    let at = s + 5_000;
    h.state_mut().zoom_to(at, at + 200);
    h.run_steps(2);
    h.state().wait_for_lines();
    h.run_steps(2);
    let lines = h.state().visible_lines();
    let insns: Vec<&VisibleLine> = lines.iter().filter(|l| l.insn && l.count == 1).collect();
    assert!(insns.len() > 50, "{} instruction boxes", insns.len());
    // Wide enough for labels: the loop's lines are single boxes now.
    assert!(line_30(&lines).iter().all(|l| l.rect.width() > 5.0));
    let hash = lines
        .iter()
        .find(|l| l.function.as_deref() == Some("hash_key") && l.rect.width() > 20.0)
        .expect("a wide hash_key line");
    h.hover_at(hash.rect.center());
    // Past the tooltip delay.
    h.run_steps(4);
    h.get_by_label_contains("in hash_key");
    h.get_by_label_contains("Instructions:");

    let i = insns[insns.len() / 2];
    click(&mut h, i.rect.center(), Modifiers::NONE);
    let t = h.state().source_pane().target().expect("a target").clone();
    assert!(t.ip.is_some());
    assert_eq!(h.state().source_pane().mode, SourceMode::Disassembly);
    h.get_by_label_contains(&format!("{:#x}: ran", t.ip.unwrap()));
    h.get_by_role_and_label(egui::accesskit::Role::RadioButton, "Disassembly");
}

#[test]
fn the_threshold_decides_when_lines_are_decoded() {
    let mut h = harness();
    h.state_mut().set_line_threshold(1_000.0);
    zoom_to_slow_path(&mut h);
    assert!(!h.state().line_frame().active);
    assert!(h.state().visible_lines().is_empty());
    h.state_mut().set_line_threshold(100_000.0);
    h.run_steps(1);
    h.state().wait_for_lines();
    h.run_steps(2);
    assert!(!h.state().visible_lines().is_empty());
    h.get_by_label("Line detail threshold");
    // The help says how far to zoom, as set now.
    h.key_press(egui::Key::F1);
    h.run_steps(1);
    h.get_by_label("Line-level zoom");
    h.get_by_label("Source lines show when the view is 100.0 µs wide or less.");
}

/// A source file that is nowhere: the pane says which paths it tried and
/// how to remap; a remapping typed in finds it.
#[test]
fn a_missing_source_file_says_where_it_looked() {
    let dir = std::env::temp_dir().join(format!("ptscope-missing-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/x.c"), "int a;\nint b;\nint c;\n").unwrap();
    let mut pane = SourcePane::default();
    pane.open(SourceTarget {
        file: "/build/elsewhere/src/x.c".into(),
        line: 2,
        function: "f".into(),
        outer: "f".into(),
        pid: 1,
        ip: None,
    });
    let state = (pane, Disasm::default());
    let mut h = Harness::builder()
        .with_size(egui::vec2(1000.0, 500.0))
        .build_ui_state(
            |ui, (pane, disasm): &mut (SourcePane, Disasm)| {
                let env = SourceEnv {
                    detail: None,
                    source: None,
                    disasm,
                    threads: &[],
                    scope: (0, 1000),
                    is_range: false,
                };
                pane.ui(ui, env);
            },
            state,
        );
    h.run_steps(2);
    h.get_by_label_contains("Source file not found: /build/elsewhere/src/x.c");
    h.get_by_label_contains("Tried: /build/elsewhere/src/x.c");
    h.get_by_label_contains("--source-map FROM=TO");
    h.get_by_label("Source path remapping").click();
    h.run_steps(1);
    h.get_by_label("Source path remapping")
        .type_text(&format!("/build/elsewhere={}", dir.display()));
    h.run_steps(1);
    h.get_by_label("Add").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("Source file not found").is_none());
    h.get_by_label_contains("x.c:2: did not run: int b;");
    std::fs::remove_dir_all(&dir).unwrap();
}
