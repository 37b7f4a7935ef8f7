//! The egui widgets of ptscope: this crate draws the timeline of a decoded
//! snapshot and the panels around it.
//!
//! [`TraceView`] is the entry point. It owns an `Arc` of a
//! [`Model`](ptscope_model::Model) plus all UI state, and the app
//! calls [`TraceView::ui`] every frame. The crate depends on the model
//! crate and egui alone, so the widgets cannot decode: they read models
//! the decoder built, and ask for line detail through a
//! [`DetailSource`](ptscope_model::DetailSource) the app supplies
//! ([`TraceView::set_detail`]), which runs every request on its own
//! threads. The view says which segments it wants ([`line_detail`]) and
//! the Source tab reads them ([`source_tab`]); no widget spawns a thread.
//!
//! Drawing is designed for tens of millions of spans: each lane is scanned
//! by binary search, tiny spans merge per pixel, and all boxes go into one
//! mesh ([`frame_mesh`]). `benches/frame.rs` prints the figures.
//!
//! The modules, starting where a frame is drawn:
//!
//! - [`view`] draws a whole frame: toolbar, overview, timeline, bottom tabs.
//! - [`timeline`] draws the axis and the thread tracks, and handles the
//!   mouse; under it, what the timeline is made of: [`frame_mesh`] (the
//!   frame's one mesh of span boxes, merged per pixel), [`marks_row`] (a
//!   thread's PTWRITE values, frequency and sleeps), [`cpu_lanes`] (which
//!   thread ran on each CPU when), [`time_window`] (the visible window,
//!   exact deep into a trace), [`axis`] (ticks, times and durations),
//!   [`overview`] (the strip showing the whole snapshot) and
//!   [`line_detail`] (source lines and instructions when zoomed in).
//! - [`tabs`]: the bottom panel's tabs: [`details_panel`] (the selected
//!   span and its calls) with [`histogram`] (the calls' durations,
//!   brushed), [`range`] (a range's table) with [`flame_graph`], and
//!   [`source_tab`] (a line's file with heat, or disassembly).
//! - [`color`] gives each function a stable color and pseudo-spans a hatch.
//! - [`search`] finds functions by name for the toolbar's search box.
//! - [`fuzzy`] is the one fuzzy matcher, for the search and the app's pickers.
//! - [`help`] draws the keyboard help window.
//! - [`spans`] names a span ([`SpanRef`]), walks the call tree, and tells
//!   calls from pseudo-spans (`[untraced]`, `[decode error: …]`), which no
//!   count of calls includes.
//! - [`synth`] builds synthetic models for the benchmarks.

#[doc(hidden)]
pub mod bench;
pub mod color;
pub mod fuzzy;
pub mod help;
pub mod search;
pub mod spans;
pub mod synth;
pub mod tabs;
pub mod timeline;
pub mod view;

pub use spans::SpanRef;
pub use timeline::time_window::TimeWindow;

// The timeline's and the tabs' modules under the names the viewer's users
// know, so that a path outside the crate does not depend on the folder a
// module sits in.
pub use tabs::{details_panel, flame_graph, histogram, range, source_tab};
pub use timeline::{axis, cpu_lanes, frame_mesh, line_detail, marks_row, overview, time_window};
pub use view::{PanelTab, TraceView, VisibleLine};
