//! The fine pass: one PSB segment of a thread re-decoded down to every
//! instruction and the source lines they ran, on demand.
//!
//! A whole snapshot at line level is too much data, so the coarse pass
//! keeps a [`Checkpoint`] at every PSB instead: the trace offset, the open
//! call stack and the depth it has in the span store. A *segment* is the
//! trace from one PSB to the next. Re-walking it with the coarse pass's own
//! walker (stopping where the coarse pass put the next checkpoint) gives
//! every instruction its position, its time (spread between timing
//! anchors exactly as the coarse pass spreads its events) and, through a
//! stack builder seeded with the checkpoint's frames, the depth of the
//! function span it ran in. Line spans then merge consecutive instructions
//! on the same (function, file, line) at each inline level, from DWARF.
//!
//! The walk is our flow decoder, which agrees block for block with
//! libipt's; the tests hold every segment's instructions to libipt's
//! instruction decoder and to perf's.
//!
//! The parts, one file each:
//! - the types of a decoded segment ([`Segment`], [`Insn`], [`LineSpan`],
//!   [`LineFrame`]) and [`FineError`] are data, in the model crate
//!   (`ptscope_model`'s segments), re-exported here;
//! - `line_source`: the [`LineSource`] engine, which keeps the trace, code and
//!   symbols and re-decodes a segment on request;
//! - `walk`: the observer of the re-decode walk and its replay into timed
//!   instructions at their store depths;
//! - `attribution`: source frames for each instruction and their merging into
//!   line spans per inline level;
//! - the line comparison of two calls ([`LineSource::compare_lines`]), which re-decodes
//!   both;
//! - [`worker`]: the fine pass on background threads (one per core)
//!   behind a bounded cache, which the viewer asks for the segments it
//!   wants to draw; idle, they prepare the line lookups of the modules
//!   the model's functions are named from, so that a zoom made once they
//!   are done waits for no DWARF index.
//!
//! [`Checkpoint`]: crate::passes::coarse::Checkpoint

mod attribution;
mod line_source;
mod walk;
pub(crate) mod worker;

pub(crate) use self::line_source::FineRecipe;
pub use self::line_source::LineSource;
pub(crate) use self::line_source::{CpuSlots, QueueParts};
pub(crate) use ptscope_model::{
    Chain, FineError, Insn, LineFrame, LineSpan, Segment, MAX_SEGMENT_INSNS, NO_CHAIN,
};
