//! The decoder: from trace to model. It turns the PT bytes of a snapshot
//! (or a perf.data, `perf script` text, or a raw PT dump) into the model
//! the viewer draws (the `ptscope-model` crate: per thread, every function
//! call as a span with its start and end times), and on demand, the
//! instructions and source lines that ran under any span.
//!
//! The way in is [`open::open`], which tells the kinds of input apart and
//! returns a [`decoded::Decoded`]: the model, and beside it the fine pass
//! that re-decodes it. The stages, in pipeline order:
//! - reading PT: [`packet`], our bounds-checked packet parser; [`errata`],
//!   the CPU errata that affect decoding (libipt's table, ported), and
//!   [`ip_filter`], the IP filter a trace was written under; [`timing`],
//!   timing packets to times, spread over the branches between them (or,
//!   for a trace without TSC, instruction counts as times);
//! - the engines: [`flow`] over [`memory`], our own PT flow decoder, which
//!   agrees with libipt's block decoder block for block and is several
//!   times faster; [`ffi`], libipt through `libipt-sys` directly, the
//!   reference (its block decoder is the other engine; its instruction
//!   decoder judges ours in the tests); [`block`], what both report
//!   ([`block::BlockItem`]), their configuration and libipt's error codes;
//! - names: [`image`], [`symbols`] and [`resolve`]: the process image from
//!   MMAP2 sideband and the bundled binaries, ELF/DWARF symbols, and which
//!   function an address is in, with [`names`]: where a stripped binary's
//!   separate debug file (and a binary not at its path) is looked for;
//! - the coarse pass: [`coarse`], PT into timed branch [`event`]s, one walk
//!   or in chunks on every core with the same result; [`perf_script`], the
//!   same events from `perf script` text; [`stack`], call-stack
//!   reconstruction, the heart of it: events in, nested spans out (into
//!   the model's [`store`]);
//! - besides the flow: [`mark_scan`], PTWRITE values, the core's frequency
//!   (CBR) and its power states, read by a scan of the packets;
//! - the driver: [`decode`], which runs all of it over a snapshot, and
//!   [`progress`], what a background decode shares with the window;
//! - [`fine`]: the fine pass, which re-decodes one PSB segment down to
//!   instructions and source lines (with inlined frames) when the viewer
//!   zooms in; its worker is the model's `DetailSource` the app runs;
//! - [`cache`]: decoded models kept on disk, so that opening a file again
//!   reads its model instead of decoding it: its lanes are read in place.
//!
//! The model's modules ([`model`], [`store`], [`calls`], [`marks`],
//! [`cpus`]) are re-exported under the names the decoder's users know.
//!
//! Peer check: magic-trace's replay cases (`tests/peer_cases.rs`) give the
//! same span tree in 5 of the 8 in-scope cases; the other 3 differ only where
//! ptscope deliberately does better (a jump back into a frame keeps it; a
//! fall-through names the function that ran; a tail call that begins the
//! trace keeps its source).

// The model is data, in its own crate at the bottom of the pipeline; its
// modules are re-exported here under the names the decoder's users know.
pub use ptscope_model::{calls, cpus, marks, model, store};

pub mod block;
pub mod cache;
pub mod coarse;
pub mod decode;
pub mod decoded;
pub mod errata;
pub mod event;
// The FFI to libipt: each unsafe block says why it is sound.
#[allow(unsafe_code)]
pub mod ffi;
pub mod fine;
pub mod flow;
pub mod image;
pub mod ip_filter;
pub mod mark_scan;
// Maps binaries: its one unsafe block says why it is sound.
#[allow(unsafe_code)]
pub mod memory;
pub mod names;
pub mod open;
pub mod packet;
pub mod perf_script;
pub mod progress;
pub mod resolve;
pub mod stack;
pub mod symbols;
pub mod timing;
