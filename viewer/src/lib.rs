//! The egui widgets of ptscope: the timeline viewer of a decoded snapshot.
//!
//! [`TraceView`] is the entry point: it owns an `Arc` of the decoder's
//! [`Model`](ptscope_decoder::model::Model) plus all UI state, and draws
//! the toolbar, overview strip, time axis, thread tracks and the details,
//! range and flame-graph panels. Widgets here only read models built by
//! the decoder; they never decode: line detail comes from the decoder's
//! background fine pass ([`ptscope_decoder::detail::Detail`]), which the
//! view drives ([`lines`]) and the Source pane reads ([`source`]).
//!
//! Frame building is designed for tens of millions of spans: each lane is
//! scanned by binary search, tiny spans merge per pixel ([`frame_mesh`]), and
//! all boxes go into one mesh. `benches/frame.rs` prints the figures.

pub mod axis;
pub mod color;
pub mod details_panel;
pub mod flame_graph;
pub mod frame_mesh;
pub mod fuzzy;
pub mod help;
pub mod lines;
pub mod overview;
pub mod range;
pub mod search;
pub mod source;
pub mod spans;
pub mod synth;
pub mod time_window;
pub mod timeline;
pub mod view;

pub use spans::SpanRef;
pub use time_window::TimeWindow;
pub use view::{PanelTab, TraceView, VisibleLine};
