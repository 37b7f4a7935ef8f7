//! What the coarse pass keeps of a thread besides its spans: the
//! checkpoints the fine pass restarts from (one per PSB, with the call
//! stack open there), and the figures of the walk and of the stack rules,
//! for the decoder's report.

use crate::funcs::FuncId;
use crate::store::ThreadSpans;

/// Where re-decoding can start: one per PSB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// Offset of the PSB in the thread's trace.
    pub offset: u64,
    /// perf time in ns, and the TSC it came from.
    pub time: u64,
    pub tsc: u64,
    /// The first instruction decoded after it.
    pub ip: u64,
    /// Instructions retired before it, in this thread's trace.
    pub insn: u64,
    /// The open frames there: `stacks[stack_start..stack_start+stack_len]`.
    pub stack_start: u32,
    pub stack_len: u32,
    /// The AUX queue (thread or CPU) `offset` is in.
    pub queue: u32,
    /// Tracing (re)starts here: a trace-begin event follows, which a walk
    /// from this PSB must keep; otherwise the one its sync makes is moot.
    pub begins: bool,
    /// The store depth of the bottom open frame (of the frame a call would
    /// open, if none is): later callers synthesized below shift it.
    pub depth: u32,
}

/// Counters from one thread's walk.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WalkFigures {
    pub blocks: u64,
    pub instructions: u64,
    pub ticks: u64,
    /// Decode errors: trace offset and message.
    pub errors: Vec<(u64, String)>,
    pub overflows: u64,
}

/// Everything the coarse pass learned about one thread.
pub struct ThreadDecode {
    pub spans: ThreadSpans,
    pub stack: StackStats,
    pub walk: WalkFigures,
    pub checkpoints: Vec<Checkpoint>,
    /// Frames of all checkpoints: function and start time (ns).
    pub stacks: Vec<OpenFrame>,
}

/// An open frame as a checkpoint keeps it, to seed a later walk with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenFrame {
    pub func: FuncId,
    /// When it opened, on the walk's clock.
    pub start: u64,
    /// Address of the call that made it, 0 if not made by a call. A walk
    /// seeded with it needs this to see a return to just after that call
    /// under another name (`_start` going on as `_dl_start_user`) as the
    /// same frame, as the walk that kept it did.
    pub call_site: u64,
    /// Kernel code: it ends when user code runs again.
    pub kernel: bool,
    /// Entered by a jump into its middle from this function (its cold
    /// part), [`UNKNOWN`](crate::funcs::UNKNOWN) otherwise.
    pub mid_from: FuncId,
}

/// Anomalies the rules absorbed, for the decoder's report.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StackStats {
    pub events: u64,
    pub calls: u64,
    pub returns: u64,
    pub tail_calls: u64,
    /// Frames popped by jumps or returns that skipped frames.
    pub nonlocal_pops: u64,
    /// Frames synthesized because a return went below the trace's start.
    pub inferred_frames: u64,
    /// Events whose source was not in the top frame.
    pub repaired: u64,
    pub double_enable: u64,
    pub double_disable: u64,
    pub errors: u64,
    /// Errors after which the stack could not be kept.
    pub stack_resets: u64,
    /// Times the stack outgrew the decoder's deepest stack and started over.
    pub depth_resets: u64,
    pub max_depth: usize,
}
