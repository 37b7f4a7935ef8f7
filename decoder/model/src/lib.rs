//! The model: what the decoder writes and the viewer reads. It is data,
//! and carries no engine: every type here can be built, stored and drawn
//! without the trace, the code or a decoder.
//!
//! Like rerun's store crates under its viewer, this crate sits at the
//! bottom of the pipeline: the decoder (`ptscope-decoder`) depends on it
//! and fills it in; the viewer (`ptscope-viewer`) depends on it and nothing
//! else of ptscope, so the widgets cannot decode by construction.
//!
//! - [`model`]: a decoded snapshot ([`model::Model`]): per thread its
//!   spans, checkpoints and marks, the function table, CPU lanes, what
//!   the user should know, and the unit every time counts in;
//! - [`store`]: the span store the viewer draws from, flat per-depth lanes
//!   (built in memory, or read in place from [`backing`] bytes, a model
//!   cache entry's map);
//! - [`funcs`]: the function table spans name, pseudo-functions included;
//! - [`checkpoint`]: where the fine pass restarts (one per PSB, with its
//!   open stack) and the walk's and stack rules' figures;
//! - [`marks`] and [`cpus`]: PTWRITE values, frequency and power states,
//!   and which thread ran on each CPU;
//! - [`calls`]: one function's calls, their distribution, and two calls
//!   compared by call path and, given segments, line by line;
//! - [`segment`]: the fine pass's output, a PSB segment down to
//!   instructions and source lines, with the views' queries over it;
//! - [`detail`]: the [`detail::DetailSource`] trait, how the viewer asks
//!   the decoder for line detail without depending on it.

pub mod backing;
pub mod calls;
pub mod checkpoint;
pub mod cpus;
pub mod detail;
pub mod funcs;
pub mod marks;
pub mod model;
mod parallel;
pub mod segment;
pub mod store;
