//! The keyboard help window: it lists every key and mouse binding of the
//! viewer, and what line-level zoom shows, one key away (`?` or F1).
//!
//! The bindings are kept in one table here ([`BINDINGS`]) rather than next
//! to their handlers in the timeline and the view, so that the window can
//! show them all at once; a new binding belongs in this table too.

use egui::{Context, Grid, Window};

use crate::timeline::axis::format_duration_f;

/// Every binding the viewer knows, as (keys, what they do).
pub(crate) const BINDINGS: &[(&str, &str)] = &[
    ("W / S", "zoom in / out around the pointer"),
    ("Ctrl + wheel, pinch", "zoom around the pointer"),
    ("A / D", "pan left / right"),
    ("Drag", "pan (and scroll the tracks)"),
    ("Wheel", "scroll the tracks; pans when they all fit"),
    ("Shift + wheel, trackpad sideways", "pan"),
    ("Shift + drag", "select a range: table and flame graph"),
    ("Click", "select a span; on a merged box, zoom into it"),
    ("Double-click", "fit the span"),
    ("Z", "zoom to the selected span, line or range"),
    ("0 / Home", "show the whole snapshot"),
    ("Ctrl + F", "search functions"),
    (
        "Enter / Shift + Enter",
        "next / previous match (in the search box)",
    ),
    ("Esc", "clear the selection"),
    ("? / F1", "this help"),
];

/// Line-level zoom: what shows when zoomed in, and what clicks do there.
pub(crate) const LINE_ZOOM: &[(&str, &str)] = &[
    (
        "Lines below (toolbar)",
        "zoomed in at least this far, each call shows the source lines it ran, in the lane under it",
    ),
    (
        "Deepest zoom",
        "a row of instructions under the track (teal: time from a timing packet; grey: estimated)",
    ),
    (
        "Click a line",
        "open its source file at that line (Source tab), with how often each line ran and for how long",
    ),
    ("Click an instruction", "show it in the Disassembly view"),
    (
        "Source tab",
        "counts cover the range selection, else the view; Path remapping finds files built elsewhere",
    ),
];

/// Shows the help window while `open` is true; `line_threshold_ns` is
/// the current line-detail threshold.
pub(crate) fn show(ctx: &Context, open: &mut bool, line_threshold_ns: f64) {
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
            ui.add_space(6.0);
            ui.heading("Line-level zoom");
            ui.label(format!(
                "Source lines show when the view is {} wide or less.",
                format_duration_f(line_threshold_ns)
            ));
            Grid::new("ptscope-help-lines")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    for (what, does) in LINE_ZOOM {
                        ui.strong(*what);
                        ui.label(*does);
                        ui.end_row();
                    }
                });
        });
}
