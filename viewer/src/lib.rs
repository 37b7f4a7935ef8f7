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
//! threads. The view says which segments it wants (`line_detail`) and
//! the Source tab reads them (`source_tab`); no widget spawns a thread.
//!
//! Drawing is designed for tens of millions of spans: each lane is scanned
//! by binary search, tiny spans merge per pixel, and all boxes go into one
//! mesh (`frame_mesh`). `benches/frame.rs` prints the figures.
//!
//! The modules are private; what the app, the tests and the benchmarks
//! use is exported here, in one list. Starting where a frame is drawn:
//!
//! - `view/` draws a whole frame: toolbar, overview, timeline, bottom tabs.
//! - `timeline/` draws the axis and the thread tracks, and handles the
//!   mouse; under it, what the timeline is made of: `frame_mesh` (the
//!   frame's one mesh of span boxes, merged per pixel), `marks_row` (a
//!   thread's PTWRITE values, frequency and sleeps), `cpu_lanes` (which
//!   thread ran on each CPU when), `time_window` (the visible window,
//!   exact deep into a trace), `axis` (ticks, times and durations),
//!   `overview` (the strip showing the whole snapshot) and `line_detail`
//!   (source lines and instructions when zoomed in).
//! - `tabs/`: the bottom panel's tabs: `details_panel` (the selected span
//!   and its calls) with `histogram` (the calls' durations, brushed),
//!   `range` (a range's table) with `flame_graph`, and `source_tab` (a
//!   line's file with heat, or disassembly).
//! - `color` gives each function a stable color and pseudo-spans a hatch.
//! - `search` finds functions by name for the toolbar's search box.
//! - `fuzzy` is the one fuzzy matcher ([`fuzzy_filter`]), for the search
//!   and the app's pickers.
//! - `help` draws the keyboard help window.
//! - `spans` names a span ([`SpanRef`]), walks the call tree, and tells
//!   calls from pseudo-spans (`[untraced]`, `[decode error: …]`), which no
//!   count of calls includes.
//! - `synth` builds synthetic models for the benchmarks; [`bench`] (hidden
//!   from the docs) is what the benchmarks reach inside for.

// What is `pub` is exported; everything else says `pub(crate)`.
#![warn(unreachable_pub)]

#[doc(hidden)]
pub mod bench;
mod color;
mod fuzzy;
mod help;
mod search;
mod spans;
mod synth;
mod tabs;
mod timeline;
mod view;

pub use fuzzy::filter as fuzzy_filter;
pub use spans::SpanRef;
pub use synth::{synthetic_model, SynthSpec};
pub use tabs::source_tab::{
    parse_map as parse_source_map, Loaded, SourceEnv, SourceMode, SourcePane, SourceTarget,
};
pub use timeline::axis::format_duration;
pub use timeline::line_detail::Disasm;
pub use timeline::time_window::TimeWindow;
pub use view::{PanelTab, TraceView, VisibleLine, PTWRITE_VIEW_NS, UNTIMED_LABEL};
