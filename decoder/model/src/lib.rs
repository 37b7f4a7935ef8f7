//! The model: what the decoder writes and the viewer reads. It is data,
//! and carries no engine: every type here can be built, stored and drawn
//! without the trace, the code or a decoder.
//!
//! Like rerun's store crates under its viewer, this crate sits at the
//! bottom of the pipeline: the decoder (`ptscope-decoder`) depends on it
//! and fills it in; the viewer (`ptscope-viewer`) depends on it and nothing
//! else of ptscope, so the widgets cannot decode by construction.
//!
//! Its modules are private; what they hold is exported here, in one list.
//! One file per part:
//! - `model`: a decoded snapshot ([`Model`]): per thread its spans,
//!   checkpoints and marks, the function table, CPU lanes, what the user
//!   should know, and the unit every time counts in;
//! - `store`: the span store the viewer draws from ([`ThreadSpans`]), flat
//!   per-depth lanes, built in memory or read in place from `backing`
//!   bytes (a model cache entry's map), with the span [`flag`] bits;
//! - `funcs`: the function table spans name ([`FuncTable`]),
//!   pseudo-functions included;
//! - `checkpoint`: where the fine pass restarts ([`Checkpoint`], one per
//!   PSB, with its open stack) and the walk's and stack rules' figures;
//! - `marks` and `cpus`: PTWRITE values, frequency and power states
//!   ([`Marks`]), and which thread ran on each CPU ([`CpuTrack`]);
//! - `calls/`: one function's calls ([`calls_of`]), their
//!   [`Distribution`], and two calls compared by call path
//!   ([`compare_calls`]) and, given segments, line by line
//!   ([`compare_lines`]);
//! - `segment/`: the fine pass's output, a PSB [`Segment`] down to
//!   instructions and source lines, with the views' queries over it;
//! - `detail`: the [`DetailSource`] trait, how the viewer asks the decoder
//!   for line detail without depending on it.

// What is `pub` is exported below; everything else says `pub(crate)`.
#![warn(unreachable_pub)]

mod backing;
mod calls;
mod checkpoint;
mod cpus;
mod detail;
mod funcs;
mod marks;
mod model;
mod parallel;
mod segment;
mod store;

pub use backing::{Aligned, Backing, SharedSlice};
pub use calls::compare::{compare_calls, Comparison, Node, PathFigures, Side};
pub use calls::compare_lines::{compare_lines, DecodeSegment, Difference, LineComparison, LineRow};
pub use calls::distribution::{percentile, Bucket, Distribution, PER_DOUBLING};
pub use calls::{calls_of, calls_unordered, funcs_named, nearest, Call, Pick};
pub use checkpoint::{Checkpoint, OpenFrame, StackStats, ThreadDecode, WalkFigures};
pub use cpus::{slices, CpuSlice, CpuTrack};
pub use detail::{CompareDone, DetailSource, SegmentKey, WorkerFigures};
pub use funcs::{
    is_kernel_addr, Func, FuncId, FuncTable, SpanKind, KERNEL_START, SYSCALL, UNKNOWN, UNTRACED,
};
pub use marks::{c_state, wake_reason, Mark, MarkKind, Marks, Sleep};
pub use model::{Model, SpanRef, ThreadModel, TimeUnit, ALMOST_EMPTY_CALLS};
pub use segment::{
    insn_heat, line_heat, window_lines, Chain, FineError, Insn, InsnHeat, LineFrame, LineHeat,
    LineSpan, Segment, WindowLine, MAX_SEGMENT_INSNS, NO_CHAIN,
};
pub use store::{
    flag, function_stats, Block, FuncStats, LaneRef, Span, SpanParts, SpanPartsRef, ThreadSpans,
    BLOCK, MAX_FUNC,
};
