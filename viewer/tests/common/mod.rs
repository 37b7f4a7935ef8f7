//! Shared helpers of the viewer's integration tests: a headless
//! egui_kittest harness around a `TraceView`, and a pointer click on it.

use egui::{Event, Modifiers, PointerButton, Pos2};
use egui_kittest::Harness;
use ptscope_viewer::TraceView;

/// A headless window of `size` showing `view`, not yet run: the caller
/// runs it (`run` for a view that settles, `run_steps` for one whose
/// background work keeps asking for frames).
pub fn harness_of(view: TraceView, size: egui::Vec2) -> Harness<'static, TraceView> {
    Harness::builder()
        .with_size(size)
        .build_ui_state(|ui, view: &mut TraceView| view.ui(ui), view)
}

/// A primary-button click at `pos` with `modifiers` held: the pointer
/// hovers there for a frame first (as a real pointer arrives before it
/// presses), and two frames after the release show what the click did.
pub fn click(h: &mut Harness<'_, TraceView>, pos: Pos2, modifiers: Modifiers) {
    h.hover_at(pos);
    h.run_steps(1);
    for pressed in [true, false] {
        h.event(Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers,
        });
    }
    h.run_steps(2);
}
