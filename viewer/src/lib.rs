//! The egui widgets of ptscope: this crate draws the timeline of a decoded
//! snapshot and the panels around it.
//!
//! [`TraceView`] is the entry point. It owns an `Arc` of a
//! [`Model`](ptscope_model::model::Model) plus all UI state, and the app
//! calls [`TraceView::ui`] every frame. The crate depends on the model
//! crate and egui alone, so the widgets cannot decode: they read models
//! the decoder built, and ask for line detail through a
//! [`DetailSource`](ptscope_model::detail::DetailSource) the app supplies
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
//! - [`timeline`] draws the axis and the thread tracks, and handles the mouse.
//! - [`frame_mesh`] builds the frame's one mesh of span boxes, merged per pixel.
//! - [`marks_row`] draws a thread's marks: PTWRITE values, the core's
//!   frequency and its sleeps; [`cpu_lanes`] draws a per-CPU trace's
//!   lanes, which thread ran on each CPU when.
//! - [`time_window`] holds the visible time window, exact deep into a trace.
//! - [`axis`] picks the axis's ticks and formats times and durations.
//! - [`overview`] draws the strip showing the whole snapshot.
//! - [`color`] gives each function a stable color and pseudo-spans a hatch.
//! - [`line_detail`] shows source lines and instructions when zoomed in.
//! - [`search`] finds functions by name for the toolbar's search box.
//! - [`fuzzy`] is the one fuzzy matcher, for the search and the app's pickers.
//! - [`details_panel`] draws the Details tab: the selected span and its calls,
//!   with [`histogram`], the duration histogram a range of calls is brushed on.
//! - [`range`] computes a range selection and draws its table (Range tab).
//! - [`flame_graph`] builds and draws the range's flame graph.
//! - [`source_tab`] draws the Source tab: a line's file with heat, or disassembly.
//! - [`help`] draws the keyboard help window.
//! - [`spans`] names a span ([`SpanRef`]), walks the call tree, and tells
//!   calls from pseudo-spans (`[untraced]`, `[decode error: …]`), which no
//!   count of calls includes.
//! - [`synth`] builds synthetic models for the benchmarks.

pub mod axis;
#[doc(hidden)]
pub mod bench;
pub mod color;
pub mod cpu_lanes;
pub mod details_panel;
pub mod flame_graph;
pub mod frame_mesh;
pub mod fuzzy;
pub mod help;
pub mod histogram;
pub mod line_detail;
pub mod marks_row;
pub mod overview;
pub mod range;
pub mod search;
pub mod source_tab;
pub mod spans;
pub mod synth;
pub mod time_window;
pub mod timeline;
pub mod view;

pub use spans::SpanRef;
pub use time_window::TimeWindow;
pub use view::{PanelTab, TraceView, VisibleLine};
