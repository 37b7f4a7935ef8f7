//! A segment of the fine pass: one PSB segment of one thread, down to every
//! instruction and the source lines it ran. The decoder's fine pass writes
//! it; the viewer and the line comparison read it. It is data: the engine
//! that makes one lives in the decoder, behind [`crate::detail::DetailSource`].
//!
//! - here: the types of a decoded segment ([`Segment`], [`Insn`],
//!   [`LineSpan`], [`LineFrame`]) and [`FineError`], why one could not be
//!   made;
//! - `queries`: the views' queries over segments ([`window_lines`],
//!   [`insn_heat`], [`line_heat`]).

use std::sync::Arc;

mod queries;

pub use self::queries::{insn_heat, line_heat, window_lines, InsnHeat, LineHeat, WindowLine};

/// Instructions one segment re-decodes at most (40 bytes each). A sound
/// segment (the trace between two PSBs, a few KiB) holds far fewer; a
/// damaged one can send the walk round a loop with no trace for millions.
pub const MAX_SEGMENT_INSNS: u64 = 4 << 20;

/// Why a segment could not be re-decoded.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FineError {
    #[error("thread {tid} has no checkpoint {index}")]
    NoCheckpoint { tid: i32, index: usize },
    #[error("thread {tid}: AUX queue {queue} of its checkpoint is not in the trace")]
    NoQueue { tid: i32, queue: u32 },
    #[error("thread {tid}: the code of process {pid} is not loaded")]
    NoProcess { tid: i32, pid: i32 },
    #[error("thread {tid}: cannot start decoding its code: {error}")]
    Image { tid: i32, error: String },
    #[error("re-decoding was cancelled")]
    Cancelled,
    #[error("no thread could be started to re-decode on: {0}")]
    NoThread(String),
    /// The code and symbols to re-decode from could not be read again
    /// (a model re-opened from the model cache builds them afresh).
    #[error("the code to re-decode could not be read: {0}")]
    Unavailable(String),
}

/// One frame of an instruction's source position: a function and the line
/// running in it (for an outer frame, the line of the inlined call).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LineFrame {
    pub function: Arc<str>,
    pub file: Arc<str>,
    /// 0 when the line table does not say.
    pub line: u32,
}

/// An instruction's frames, outermost (the real function) first.
pub type Chain = Arc<[LineFrame]>;

/// An instruction without line info.
pub const NO_CHAIN: u32 = u32::MAX;

/// One retired instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub ip: u64,
    /// perf time in ns: when it started, and when the next one did.
    pub start: u64,
    pub end: u64,
    /// Store depth of the function span it ran in.
    pub depth: u32,
    /// Index into [`Segment::chains`], or [`NO_CHAIN`].
    pub chain: u32,
    /// A timing packet gave its start (CYC-exact in a trace with CYC);
    /// otherwise the time is spread between two that did.
    pub exact: bool,
    /// The execution mode it ran in: 16, 32 or 64-bit.
    pub bitness: u8,
    /// Which of its segment's [`Segment::addrs`] its address is, so that
    /// sums per address need no hashing (it fits in what the struct pads).
    pub addr: u32,
}

/// Consecutive instructions on one source line, at one inline level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineSpan {
    pub start: u64,
    pub end: u64,
    /// Store depth: one below the function span, plus the inline level.
    pub depth: u32,
    /// Its frame is `chains[chain][level]`.
    pub chain: u32,
    /// 0: the real function's line; more: an inlined function's.
    pub level: u32,
    /// Its instructions are `insns[first..first + count]`.
    pub first: u32,
    pub count: u32,
}

impl LineSpan {
    pub fn inlined(&self) -> bool {
        self.level > 0
    }
}

/// One PSB segment of one thread, down to instructions and lines.
#[derive(Debug, Default)]
pub struct Segment {
    /// Which checkpoint of its thread it starts at.
    pub checkpoint: usize,
    pub pid: i32,
    pub tid: i32,
    /// In retirement order.
    pub insns: Vec<Insn>,
    /// Sorted by (depth, start): each depth's spans are a contiguous run.
    pub lines: Vec<LineSpan>,
    /// Where each depth's run starts in `lines`: (depth, start index).
    depth_runs: Vec<(u32, u32)>,
    pub chains: Vec<Chain>,
    /// Its instructions' distinct addresses, in the order first met
    /// ([`Insn::addr`] indexes it).
    pub addrs: Vec<u64>,
    /// Decode errors: trace offset (from the segment's PSB) and message.
    pub errors: Vec<(u64, String)>,
    /// Cut at [`MAX_SEGMENT_INSNS`]: the rest of it is not here.
    pub cut: bool,
}

impl Segment {
    /// Sets its line spans, which must be sorted by (depth, start), and
    /// indexes where each depth's run begins.
    pub fn set_lines(&mut self, lines: Vec<LineSpan>) {
        let mut runs = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            if runs.last().is_none_or(|&(d, _)| d != l.depth) {
                runs.push((l.depth, i as u32));
            }
        }
        self.lines = lines;
        self.depth_runs = runs;
    }

    /// First start and last end of its instructions.
    pub fn time_range(&self) -> Option<(u64, u64)> {
        Some((self.insns.first()?.start, self.insns.last()?.end))
    }

    /// The line spans at store depth `depth`, by start.
    pub fn lines_at(&self, depth: u32) -> &[LineSpan] {
        let i = self.depth_runs.partition_point(|&(d, _)| d < depth);
        match self.depth_runs.get(i) {
            Some(&(d, from)) if d == depth => {
                let to = self
                    .depth_runs
                    .get(i + 1)
                    .map_or(self.lines.len(), |&(_, s)| s as usize);
                &self.lines[from as usize..to]
            }
            _ => &[],
        }
    }

    /// The deepest line span's depth, if any.
    pub fn max_depth(&self) -> Option<u32> {
        self.depth_runs.last().map(|&(d, _)| d)
    }

    /// The frame a line span shows.
    pub fn frame(&self, l: &LineSpan) -> Option<&LineFrame> {
        self.chains.get(l.chain as usize)?.get(l.level as usize)
    }

    /// The instructions that ran in `[from, to)`.
    pub fn insns_in(&self, from: u64, to: u64) -> &[Insn] {
        let a = self
            .insns
            .partition_point(|i| i.end <= from && i.start < from);
        let b = self.insns.partition_point(|i| i.start < to);
        &self.insns[a.min(b)..b]
    }

    /// Bytes it holds, for the cache's bound.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Segment>()
            + self.insns.capacity() * std::mem::size_of::<Insn>()
            + self.lines.capacity() * std::mem::size_of::<LineSpan>()
            + self.depth_runs.capacity() * 8
            + self.chains.capacity() * std::mem::size_of::<Chain>()
            + self.errors.iter().map(|e| e.1.len() + 24).sum::<usize>()
    }
}
