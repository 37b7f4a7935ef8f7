//! From snapshot to model.
//!
//! The decoder turns the PT bytes of a snapshot into what the viewer draws:
//! per thread, every function call as a span with its start and end times.
//!
//! The pipeline, one module each:
//! - [`packet`]: our own bounds-checked PT packet parser, for listings and
//!   PSB indexing;
//! - [`ffi`]: libipt through `libipt-sys` directly (the `libipt` crate
//!   panics on newer events and drops the instruction returned with an
//!   error), with its image section cache;
//! - [`image`] and [`symbols`]: the process image from MMAP2 sideband and
//!   bundled binaries, and ELF/DWARF symbols;
//! - [`flow`], [`memory`] and [`tsc`]: our own PT flow decoder, which
//!   agrees with libipt's block decoder and is several times faster, over
//!   the process's code and the trace's timing packets;
//! - [`coarse`] and [`clock`]: the block-walk pass (ours or libipt's) that
//!   turns PT into timed branch [`event`]s, and [`chunks`], which runs it
//!   on every core by PSB chunks with the same result;
//! - [`perf_script`]: the same events from `perf script` text;
//! - [`stack`]: call-stack reconstruction, the heart of it;
//! - [`store`]: the span store the viewer draws from;
//! - [`model`]: all of it put together for a snapshot;
//! - [`fine`]: the fine pass, which re-decodes one PSB segment down to
//!   instructions and source lines (with inlined frames) when the viewer
//!   zooms in, and [`detail`], which runs it in the background behind a
//!   bounded cache;
//! - [`progress`]: what a background decode shares with the GUI.
//!
//! Peer check: magic-trace's replay cases (`tests/peer_cases.rs`) give the
//! same span tree in 5 of the 8 in-scope cases; the other 3 differ only where
//! ptscope deliberately does better (a jump back into a frame keeps it; a
//! fall-through names the function that ran; a tail call that begins the
//! trace keeps its source).

pub mod block;
pub mod coarse;
pub mod decode;
pub mod event;
#[allow(unsafe_code)] // SAFETY comments on each block.
pub mod ffi;
pub mod fine;
pub mod flow;
pub mod image;
#[allow(unsafe_code)] // SAFETY comments on each block.
pub mod memory;
pub mod model;
pub mod open;
pub mod packet;
pub mod perf_script;
pub mod progress;
pub mod resolve;
pub mod stack;
pub mod store;
pub mod symbols;
pub mod timing;
