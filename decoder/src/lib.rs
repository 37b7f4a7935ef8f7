//! From snapshot to model.
//!
//! The decoder turns the PT bytes of a snapshot into what the viewer draws.
//! This crate holds the packet parser used for listings and PSB indexing,
//! the process image built from sideband, and the libipt instruction walk
//! (through `libipt-sys` directly, to avoid the Rust wrapper's known panics
//! and dropped instructions), and the symbolizer that names the functions
//! the walk passes through.

pub mod event;
pub mod ffi;
pub mod image;
pub mod insn;
pub mod packet;
pub mod symbols;
