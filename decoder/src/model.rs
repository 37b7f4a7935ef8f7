//! The decoded snapshot: what the viewer draws. A [`Model`] holds every
//! thread's spans, the checkpoints the fine pass restarts from, the
//! function table and what the user should know about the input. It is
//! data only: [`crate::decode`] builds it, and [`crate::resolve`] names
//! its functions.

use std::sync::Arc;

use crate::coarse::{Checkpoint, ThreadDecode, WalkFigures};
use crate::event::{FuncId, FuncTable};
use crate::fine::LineSource;
use crate::stack::StackStats;
use crate::store::ThreadSpans;

/// One thread's decoded trace.
#[derive(Clone)]
pub struct ThreadModel {
    pub spans: ThreadSpans,
    pub stack: StackStats,
    pub walk: WalkFigures,
    pub checkpoints: Vec<Checkpoint>,
    pub checkpoint_frames: Vec<(FuncId, u64)>,
    /// Index of the AUX stream it came from, if any.
    pub stream: Option<u32>,
}

impl ThreadModel {
    pub(crate) fn new(d: ThreadDecode, stream: Option<u32>) -> ThreadModel {
        ThreadModel {
            spans: d.spans,
            stack: d.stack,
            walk: d.walk,
            checkpoints: d.checkpoints,
            checkpoint_frames: d.stacks,
            stream,
        }
    }
}

/// What a model's times count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeUnit {
    /// Nanoseconds of perf time, from the trace's timing packets.
    #[default]
    Ns,
    /// Instructions retired since the trace (a thread's, or a CPU's)
    /// began: the trace has no timing packets (`tsc=0`, as fuzzers
    /// often record), so spans are placed by instruction count.
    Insns,
}

impl TimeUnit {
    /// The unit's short name, as JSON output and labels give it.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Insns => "insns",
        }
    }
}

/// The decoded snapshot: what the viewer draws.
pub struct Model {
    pub funcs: FuncTable,
    pub threads: Vec<ThreadModel>,
    /// Mapped binaries that were not in the snapshot or on this machine.
    pub missing_binaries: Vec<String>,
    /// What the user should know about the input that no span shows: trace
    /// that could not be decoded at all, data the kernel lost.
    pub warnings: Vec<String>,
    /// What the fine pass re-decodes from; `None` for inputs without an
    /// instruction trace (perf-script text) and for partial models.
    pub lines: Option<Arc<LineSource>>,
    /// What every time of the model (span starts and ends, checkpoints,
    /// the fine pass's instructions) counts.
    pub unit: TimeUnit,
}

impl Model {
    /// First start and last end over all threads.
    pub fn time_range(&self) -> Option<(u64, u64)> {
        self.threads
            .iter()
            .filter_map(|t| t.spans.time_range())
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
    }

    pub fn span_count(&self) -> usize {
        self.threads.iter().map(|t| t.spans.span_count()).sum()
    }

    /// The model as text, function ids replaced by names: every span with
    /// its times and flags, every checkpoint and its stack, the counters.
    /// Two decodes agree exactly when these lines do (tests and fuzzing
    /// compare them).
    pub fn canonical(&self) -> Vec<String> {
        let name = |f: FuncId| {
            let f = self.funcs.get(f);
            format!("{}@{:x}/{:?}", f.name, f.entry, f.kind)
        };
        let mut out = Vec::new();
        for t in &self.threads {
            let s = &t.spans;
            out.push(format!("thread {} {} {:?}", s.pid, s.tid, t.walk));
            for (depth, lane) in s.lanes() {
                for (i, sp) in lane.iter().enumerate() {
                    out.push(format!(
                        "{depth} {} {} {} {:x}",
                        name(sp.func()),
                        sp.start,
                        s.end(depth, i),
                        sp.flags()
                    ));
                }
            }
            for c in &t.checkpoints {
                let frames = &t.checkpoint_frames
                    [c.stack_start as usize..(c.stack_start + c.stack_len) as usize];
                let frames: Vec<String> = frames
                    .iter()
                    .map(|&(f, t)| format!("{}:{t}", name(f)))
                    .collect();
                out.push(format!(
                    "cp {} {} {} {:x} {} {} {} {} {frames:?}",
                    c.offset, c.time, c.tsc, c.ip, c.insn, c.queue, c.begins, c.depth
                ));
            }
        }
        out
    }
}
