//! The bottom panel's tabs, each drawing from the model and the view's
//! selection.
//!
//! - [`details_panel`]: the Details tab, the selected span and its
//!   function's calls, with [`histogram`], the duration histogram a range
//!   of calls is brushed on;
//! - [`range`]: a range selection and its table (the Range tab), with
//!   [`flame_graph`], the range's flame graph;
//! - [`source_tab`]: the Source tab, a line's file with heat, or the
//!   disassembly.

pub(crate) mod details_panel;
pub(crate) mod flame_graph;
pub(crate) mod histogram;
pub(crate) mod range;
pub(crate) mod source_tab;
