//! Tracks that decoded to almost nothing say why in their header: here
//! the demo with every PSB of its trace overwritten, decoded for real and
//! drawn in the window.

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use ptscope::gui::App;

#[test]
fn a_track_without_a_psb_says_so_in_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let file = crate::support::malformed::without_psbs(dir.path());
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.show(ui), App::new(None));
    let ctx = h.ctx.clone();
    h.state_mut().open(&file, &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let tab = h.state().active_tab().unwrap();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    let view = tab.view().expect("a view");
    let why = "0 calls: its trace holds no PSB to synchronize on";
    assert_eq!(view.thread_diagnosis(0), Some(why));
    h.get_by_label(why);

    // The intact demo says nothing of the kind.
    let demo = crate::support::demo_snapshot();
    h.state_mut().open(&demo, &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let view = h.state().active_tab().unwrap().view().expect("a view");
    assert_eq!(view.thread_diagnosis(0), None);
    assert!(h.query_by_label(why).is_none());
}
