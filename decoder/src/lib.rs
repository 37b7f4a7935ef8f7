//! The decoder: from trace to model. It turns the PT bytes of a snapshot
//! (or a perf.data, `perf script` text, or a raw PT dump) into the model
//! the viewer draws (the `ptscope-model` crate: per thread, every function
//! call as a span with its start and end times), and on demand, the
//! instructions and source lines that ran under any span.
//!
//! The way in is [`open()`], which tells the kinds of input apart and
//! returns a [`Decoded`]: the model, and beside it the fine pass that
//! re-decodes it. The modules are private; what a user of the crate needs
//! is exported here, in one list, grouped by stage (libipt's binding alone
//! stays a namespace, [`libipt`], with the `libipt` feature: its `Image`
//! and `BlockDecoder` are libipt's, not ours). The stages, one folder
//! each, in pipeline order:
//! - `pt`, reading PT: the packet parser, the CPU errata and IP filter,
//!   timing, and the two engines that turn trace and code into blocks
//!   (`flow`, ours, several times faster than libipt's block decoder and
//!   agreeing with it block for block; `ffi`, libipt itself, the
//!   reference);
//! - `names`: the process image from MMAP2 sideband, ELF/DWARF symbols,
//!   which function an address is in, and where debug files and binaries
//!   not at their paths are looked for;
//! - `passes`: the coarse pass (PT into timed branch events, one walk or
//!   in chunks on every core), stack reconstruction into the model's span
//!   store, the marks scan, and the fine pass down to source lines;
//! - `inputs`: `perf script` text, and models kept on disk by the model
//!   cache;
//! - `decode`: the driver that runs the stages over an input, with
//!   `progress`, what a background decode shares with the window
//!   ([`DecodeProgress`]).
//!
//! The model it writes is the `ptscope-model` crate's, which its users
//! depend on directly.
//!
//! Peer check: magic-trace's replay cases (`tests/peer_cases.rs`) give the
//! same span tree in 5 of the 8 in-scope cases; the other 3 differ only where
//! ptscope deliberately does better (a jump back into a frame keeps it; a
//! fall-through names the function that ran; a tail call that begins the
//! trace keeps its source).

// What is `pub` is exported below; everything else says `pub(crate)`.
#![warn(unreachable_pub)]

mod decode;
mod decoded;
mod inputs;
mod names;
mod open;
mod passes;
mod progress;
mod pt;
#[cfg(test)]
mod testing;

// The way in, and what it gives.
pub use decode::{
    decode_raw, decode_snapshot, decode_trace, from_script, has_timing, time_unit, DecodeError,
    DecodeOptions, Engine,
};
pub use decoded::Decoded;
pub use open::{
    input_kind, open, open_snapshot, read_raw, InputKind, OpenOptions, RAW_NEEDS_IMAGES,
};
pub use progress::{ChunkFigures, DecodeProgress, Rate};

// Reading PT: the decoder's configuration, the CPU's errata, the IP
// filter, and the engines (ours over its memory image, and libipt's).
pub use pt::block::{
    decoder_config, Block, BlockEnd, BlockItem, Cpu, DecoderConfig, MemoEntry, PtError,
};
pub use pt::errata::{of as errata_of, Errata};
#[cfg(feature = "libipt")]
pub use pt::ffi as libipt;
pub use pt::flow::{FlowDecoder, MemoFigures};
pub use pt::ip_filter::{IpFilter, IpFilterError, IpRange};
pub use pt::memory::{FileCache, Memory};
pub use pt::timing::ToNs;

// Names: the process image, symbols, and where files are looked for.
pub use names::image::{sections, sections_with, Section};
pub use names::resolve::{ProcessSymbols, Resolve, Resolved, SymbolCache};
pub use names::symbols::kallsyms::{for_trace as kernel_symbols_for, KernelSymbols};
pub use names::symbols::{ModuleSymbols, SymbolError};
pub use names::{find_binary, DebugFile, FileLookup, Lookup, NameOptions};

// The passes: the coarse pass on every core, its events, the marks scan,
// and the fine pass with the worker that serves the viewer.
pub use passes::coarse::chunks::Parallel;
pub use passes::coarse::decode_thread;
pub use passes::event::{EndReason, Event, EventKind};
pub use passes::fine::worker::{SegmentWorker, DEFAULT_BUDGET as DEFAULT_SEGMENT_BUDGET};
pub use passes::fine::LineSource;
#[doc(hidden)]
pub use passes::mark_scan::scan_full as scan_marks_full;
pub use passes::mark_scan::{scan as scan_marks, Scan as MarkScan};

// Inputs that are not a trace to walk: `perf script` text, and the model
// cache.
pub use inputs::cache::{
    frame as frame_cache_entry, read_model as read_cache_entry, CacheError, ModelCache,
    DEFAULT_MAX_BYTES as DEFAULT_CACHE_BYTES,
};
pub use inputs::perf_script::{
    import as import_perf_script, parse_line as parse_script_line, ScriptError, ScriptRecord,
};
