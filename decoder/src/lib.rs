//! The decoder: from trace to model. It turns the PT bytes of a snapshot
//! (or a perf.data, `perf script` text, or a raw PT dump) into what the
//! viewer draws: per thread, every function call as a span with its start
//! and end times, and on demand, the instructions and source lines that
//! ran under any span.
//!
//! The way in is [`open::open`], which tells the kinds of input apart.
//! Then, in pipeline order:
//! - [`packet`]: our bounds-checked PT packet parser;
//! - [`flow`] over [`memory`]: our own PT flow decoder, which agrees with
//!   libipt's block decoder block for block and is several times faster;
//! - [`ffi`]: libipt through `libipt-sys` directly, the reference decoder
//!   (its block decoder is the other engine; its instruction decoder judges
//!   ours in the tests);
//! - [`block`]: what both engines report ([`block::BlockItem`]), their
//!   configuration and libipt's error codes;
//! - [`errata`]: the CPU errata that affect decoding, worked around as
//!   libipt does, and [`ip_filter`]: the IP filter a trace was written
//!   under, which one of them needs;
//! - [`timing`]: timing packets to times, and times spread over the
//!   branches between them (or, for a trace without TSC, instruction
//!   counts as times: the model's [`model::TimeUnit`]);
//! - [`image`], [`symbols`] and [`resolve`]: the process image from MMAP2
//!   sideband and the bundled binaries, ELF/DWARF symbols, and which
//!   function an address is in, with [`names`]: where a stripped
//!   binary's separate debug file (and a binary not at its path) is
//!   looked for;
//! - [`coarse`]: the coarse pass, PT into timed branch [`event`]s, one walk
//!   or in chunks on every core with the same result;
//! - [`perf_script`]: the same events from `perf script` text;
//! - [`marks`]: what a trace says besides the flow, read by a scan of its
//!   packets: PTWRITE values, the core's frequency (CBR) and its power
//!   states (MWAIT, PWRE, EXSTOP, PWRX); and [`cpus`]: a per-CPU trace's
//!   lanes, which thread ran on each CPU and when;
//! - [`stack`]: call-stack reconstruction, the heart of it: events in,
//!   nested spans out;
//! - [`store`]: the span store the viewer draws from, flat per-depth lanes
//!   (built in memory, or mapped from a model cache entry);
//! - [`decode`]: the driver that runs all of it over a snapshot, and
//!   [`model`]: what it returns, which the viewer reads;
//! - [`fine`]: the fine pass, which re-decodes one PSB segment down to
//!   instructions and source lines (with inlined frames) when the viewer
//!   zooms in, with a background worker behind a bounded cache;
//! - [`calls`]: one function's calls, for the outlier hunt: their
//!   duration distribution, and two calls compared by call path and, with
//!   the fine pass, line by line;
//! - [`progress`]: what a background decode shares with the window;
//! - [`cache`]: decoded models kept on disk, so that opening a file again
//!   reads its model instead of decoding it: its lanes are read in place;
//! - `parallel`: independent pieces of work spread over cores.
//!
//! Peer check: magic-trace's replay cases (`tests/peer_cases.rs`) give the
//! same span tree in 5 of the 8 in-scope cases; the other 3 differ only where
//! ptscope deliberately does better (a jump back into a frame keeps it; a
//! fall-through names the function that ran; a tail call that begins the
//! trace keeps its source).

pub mod block;
pub mod cache;
pub mod calls;
pub mod coarse;
pub mod cpus;
pub mod decode;
pub mod errata;
pub mod event;
// The FFI to libipt: each unsafe block says why it is sound.
#[allow(unsafe_code)]
pub mod ffi;
pub mod fine;
pub mod flow;
pub mod image;
pub mod ip_filter;
pub mod marks;
// Maps binaries: its one unsafe block says why it is sound.
#[allow(unsafe_code)]
pub mod memory;
pub mod model;
pub mod names;
pub mod open;
pub mod packet;
mod parallel;
pub mod perf_script;
pub mod progress;
pub mod resolve;
pub mod stack;
pub mod store;
pub mod symbols;
pub mod timing;
