//! Keyboard and mouse help, one key away (`?` or F1).

use egui::{Context, Grid, Window};

/// Every binding the viewer knows, as (keys, what they do).
pub const BINDINGS: &[(&str, &str)] = &[
    ("W / S", "zoom in / out around the pointer"),
    ("Ctrl + wheel, pinch", "zoom around the pointer"),
    ("A / D", "pan left / right"),
    ("Drag", "pan (and scroll the tracks)"),
    ("Wheel", "scroll the tracks; pans when they all fit"),
    ("Shift + wheel, trackpad sideways", "pan"),
    ("Shift + drag", "select a range: table and flame graph"),
    ("Click", "select a span; on a merged box, zoom into it"),
    ("Double-click", "fit the span"),
    ("Z", "zoom to the selected span or range"),
    ("0 / Home", "show the whole snapshot"),
    ("Ctrl + F", "search functions"),
    (
        "Enter / Shift + Enter",
        "next / previous match (in the search box)",
    ),
    ("Esc", "clear the selection"),
    ("? / F1", "this help"),
];

/// Shows the help window while `open` is true.
pub fn show(ctx: &Context, open: &mut bool) {
    Window::new("Keyboard help")
        .open(open)
        .collapsible(false)
        .resizable(false)
        .show(ctx, |ui| {
            Grid::new("ptscope-help")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    for (keys, what) in BINDINGS {
                        ui.strong(*keys);
                        ui.label(*what);
                        ui.end_row();
                    }
                });
        });
}
