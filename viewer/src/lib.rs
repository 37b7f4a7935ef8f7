//! The egui widgets of ptscope: timeline, tracks and panels.
//!
//! Widgets here only read models built by the decoder; they never decode.

pub mod summary;
