//! The decoder: from trace to model. It turns the PT bytes of a snapshot
//! (or a perf.data, `perf script` text, or a raw PT dump) into the model
//! the viewer draws (the `ptscope-model` crate: per thread, every function
//! call as a span with its start and end times), and on demand, the
//! instructions and source lines that ran under any span.
//!
//! The way in is [`open::open`], which tells the kinds of input apart and
//! returns a [`decoded::Decoded`]: the model, and beside it the fine pass
//! that re-decodes it. The stages, one folder each, in pipeline order:
//! - [`pt`], reading PT: the packet parser, the CPU errata and IP filter,
//!   timing, and the two engines that turn trace and code into blocks
//!   (`flow`, ours, several times faster than libipt's block decoder and
//!   agreeing with it block for block; `ffi`, libipt itself, the
//!   reference);
//! - [`names`]: the process image from MMAP2 sideband, ELF/DWARF symbols,
//!   which function an address is in, and where debug files and binaries
//!   not at their paths are looked for;
//! - [`passes`]: the coarse pass (PT into timed branch events, one walk or
//!   in chunks on every core), stack reconstruction into the model's span
//!   store, the marks scan, and the fine pass down to source lines;
//! - [`inputs`]: `perf script` text, and models kept on disk by the model
//!   cache;
//! - [`decode`]: the driver that runs the stages over an input, with
//!   [`progress`], what a background decode shares with the window.
//!
//! The model's modules ([`model`], [`store`], [`calls`], [`marks`],
//! [`cpus`]) and the stages' are re-exported under the names the
//! decoder's users know.
//!
//! Peer check: magic-trace's replay cases (`tests/peer_cases.rs`) give the
//! same span tree in 5 of the 8 in-scope cases; the other 3 differ only where
//! ptscope deliberately does better (a jump back into a frame keeps it; a
//! fall-through names the function that ran; a tail call that begins the
//! trace keeps its source).

pub mod decode;
pub mod decoded;
pub mod inputs;
pub mod names;
pub mod open;
pub mod passes;
pub mod progress;
pub mod pt;
#[cfg(test)]
mod testing;

// The stages' modules under the names the decoder's users know, so that a
// path outside the crate does not depend on the folder a module sits in.
pub use inputs::{cache, perf_script};
pub use names::{image, resolve, symbols};
pub use passes::{coarse, event, fine, mark_scan, stack};
#[cfg(feature = "libipt")]
pub use pt::ffi;
pub use pt::{block, errata, flow, ip_filter, memory, packet, timing};
