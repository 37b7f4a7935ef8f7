//! The decoded snapshot: what the viewer draws. A [`Model`] holds every
//! thread's spans, the checkpoints the fine pass restarts from, the
//! function table and what the user should know about the input. It is
//! data only: the decoder builds it and names its functions, and keeps the
//! engine that re-decodes a segment beside it, never in it.

use crate::checkpoint::{Checkpoint, OpenFrame, StackStats, ThreadDecode, WalkFigures};
use crate::cpus::CpuTrack;
use crate::funcs::{FuncId, FuncTable, SpanKind};
use crate::marks::Marks;
use crate::store::{Span, ThreadSpans};

/// One thread's decoded trace.
#[derive(Clone)]
pub struct ThreadModel {
    pub spans: ThreadSpans,
    pub stack: StackStats,
    pub walk: WalkFigures,
    pub checkpoints: Vec<Checkpoint>,
    pub checkpoint_frames: Vec<OpenFrame>,
    /// Index of the AUX stream it came from, if any.
    pub stream: Option<u32>,
    /// Its PTWRITE values, frequency and power states.
    pub marks: Marks,
}

impl ThreadModel {
    /// The segments of this thread that cover `[from, to]` (perf ns), as
    /// checkpoint indices. A segment runs from its checkpoint's time to
    /// the next one's.
    pub fn segments_in(&self, from: u64, to: u64) -> std::ops::Range<usize> {
        let cps = &self.checkpoints;
        // The last segment starting before `from`; equal times (a segment
        // with no timing of its own) count from the first.
        let before = cps.partition_point(|c| c.time < from);
        let mut first = before.saturating_sub(1);
        // A thread of a per-CPU trace runs in several CPUs' buffers: the
        // last segment of each that starts before `from` may run on into
        // the window (the thread came back to that CPU since).
        let mut queues: Vec<u32> = Vec::new();
        for (i, c) in cps[..before].iter().enumerate().rev() {
            if !queues.contains(&c.queue) {
                queues.push(c.queue);
                first = i;
            }
        }
        let end = cps.partition_point(|c| c.time <= to);
        first..end.max(first)
    }

    /// A thread as the coarse pass decoded it, from AUX stream `stream`.
    pub fn new(d: ThreadDecode, stream: Option<u32>) -> ThreadModel {
        ThreadModel {
            spans: d.spans,
            stack: d.stack,
            walk: d.walk,
            checkpoints: d.checkpoints,
            checkpoint_frames: d.stacks,
            stream,
            marks: Marks::default(),
        }
    }

    /// A thread of `spans` alone: no stack figures, walk figures,
    /// checkpoints or stream. What synthetic models and tests hold; the
    /// fine pass has nothing to restart from in it.
    pub fn from_spans(spans: ThreadSpans) -> ThreadModel {
        ThreadModel {
            spans,
            stack: StackStats::default(),
            walk: WalkFigures::default(),
            checkpoints: Vec::new(),
            checkpoint_frames: Vec::new(),
            stream: None,
            marks: Marks::default(),
        }
    }
}

/// A thread with fewer calls than this decoded to almost nothing, and
/// [`ThreadModel::diagnosis`] says why.
pub const ALMOST_EMPTY_CALLS: usize = 8;

impl ThreadModel {
    /// Why this thread decoded to almost nothing (fewer than
    /// [`ALMOST_EMPTY_CALLS`] calls), for its track header: its trace held
    /// no PSB to synchronize on, binaries it ran are missing, the walk
    /// hit decode errors, or tracing was off most of the time. `None` when
    /// it has calls enough, or when nothing went wrong (a thread that
    /// really made few calls).
    pub fn diagnosis(&self, funcs: &FuncTable) -> Option<String> {
        let mut calls = 0usize;
        let mut missing: Vec<&str> = Vec::new();
        // Decode errors as the spans show them: the walk's own count also
        // has every retry, and errors the spans name otherwise (a missing
        // binary, the kernel).
        let (mut errors, mut first_error): (u64, Option<&str>) = (0, None);
        let (mut off_ns, mut all_ns) = (0u64, 0u64);
        for (d, lane) in self.spans.lanes() {
            for (i, s) in lane.iter().enumerate() {
                let f = funcs.get(s.func());
                let dur = self.spans.duration(d, i);
                if d == 0 {
                    all_ns += dur;
                }
                match f.kind {
                    k if k.is_call() => {
                        calls += 1;
                        if calls >= ALMOST_EMPTY_CALLS {
                            return None;
                        }
                    }
                    SpanKind::NoBinary if !missing.contains(&f.module.as_str()) => {
                        missing.push(&f.module);
                    }
                    SpanKind::Untraced | SpanKind::Syscall if d == 0 => off_ns += dur,
                    SpanKind::DecodeError => {
                        errors += 1;
                        first_error.get_or_insert(&f.name);
                    }
                    _ => {}
                }
            }
        }
        let mut why = Vec::new();
        // A thread's own trace with no checkpoint and no instruction: the
        // walk never synchronized, for want of a PSB.
        if self.stream.is_some() && self.checkpoints.is_empty() && self.walk.instructions == 0 {
            why.push("its trace holds no PSB to synchronize on".to_string());
        }
        match missing.len() {
            0 => {}
            1 => why.push(format!("binary missing: {}", missing[0])),
            n => why.push(format!("{n} binaries missing: {}", missing.join(", "))),
        }
        if errors > 0 {
            let first = first_error
                .map(|n| {
                    n.trim_start_matches("[decode error: ")
                        .trim_end_matches(']')
                })
                .map(|m| format!(" (first: {m})"))
                .unwrap_or_default();
            why.push(format!(
                "{errors} decode error{}{first}",
                if errors == 1 { "" } else { "s" }
            ));
        }
        if all_ns > 0 && off_ns * 2 > all_ns {
            why.push("tracing was off most of the time".into());
        }
        if why.is_empty() {
            return None;
        }
        Some(format!(
            "{calls} call{}: {}",
            if calls == 1 { "" } else { "s" },
            why.join("; ")
        ))
    }
}

/// What a model's times count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// The decoded snapshot: what the viewer draws. Its default is the empty
/// model (no threads, nothing missing, times in nanoseconds); synthetic
/// and test models fill in `funcs` and `threads` over it.
#[derive(Clone, Default)]
pub struct Model {
    pub funcs: FuncTable,
    pub threads: Vec<ThreadModel>,
    /// Mapped binaries that were not in the snapshot or on this machine.
    pub missing_binaries: Vec<String>,
    /// What the user should know about the input that no span shows: trace
    /// that could not be decoded at all, data the kernel lost.
    pub warnings: Vec<String>,
    /// What every time of the model (span starts and ends, checkpoints,
    /// the fine pass's instructions) counts.
    pub unit: TimeUnit,
    /// A per-CPU trace's CPUs: who ran on each, and its marks.
    pub cpus: Vec<CpuTrack>,
    /// MHz per unit of CBR ratio (the bus clock: TSC frequency over the
    /// maximum non-turbo ratio, as perf takes it); 0 when unknown.
    pub cbr_mhz: f64,
}

impl Model {
    /// A model of hand-built threads over `funcs`, nothing else known:
    /// what synthetic models and tests start from.
    pub fn of(funcs: FuncTable, threads: impl IntoIterator<Item = ThreadSpans>) -> Model {
        Model {
            funcs,
            threads: threads.into_iter().map(ThreadModel::from_spans).collect(),
            ..Model::default()
        }
    }

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
                    .map(|f| format!("{}:{}", name(f.func), f.start))
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

/// One span of a model: thread index, depth, index in its lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanRef {
    pub thread: u32,
    pub depth: u32,
    pub index: u32,
}

impl SpanRef {
    pub fn new(thread: usize, depth: usize, index: usize) -> SpanRef {
        SpanRef {
            thread: thread as u32,
            depth: depth as u32,
            index: index as u32,
        }
    }

    /// The thread's spans, if the reference is valid in `model`.
    pub fn thread<'m>(&self, model: &'m Model) -> Option<&'m ThreadSpans> {
        let t = &model.threads.get(self.thread as usize)?.spans;
        ((self.index as usize) < t.lane(self.depth as usize).len()).then_some(t)
    }

    pub fn span(&self, model: &Model) -> Option<Span> {
        let t = self.thread(model)?;
        Some(t.lane(self.depth as usize)[self.index as usize])
    }

    /// (start, end) in ns.
    pub fn times(&self, model: &Model) -> Option<(u64, u64)> {
        let t = self.thread(model)?;
        let (d, i) = (self.depth as usize, self.index as usize);
        Some((t.lane(d)[i].start, t.end(d, i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::WalkFigures;
    use crate::funcs::UNTRACED;

    fn thread(spans: ThreadSpans, stream: Option<u32>, walk: WalkFigures) -> ThreadModel {
        ThreadModel {
            walk,
            stream,
            ..ThreadModel::from_spans(spans)
        }
    }

    #[test]
    fn an_almost_empty_thread_says_why() {
        let mut funcs = FuncTable::default();
        let f = funcs.intern("f", "/bin/prog", 0x1000, SpanKind::Call);
        let gone = funcs.no_binary("/lib/libgone.so");
        let err = funcs.decode_error("bad opcode");

        // Trace without a PSB: nothing decoded at all.
        let t = thread(
            ThreadSpans::new(1, 1, "a".into()),
            Some(0),
            Default::default(),
        );
        assert_eq!(
            t.diagnosis(&funcs).as_deref(),
            Some("0 calls: its trace holds no PSB to synchronize on")
        );

        // A missing binary and decode errors.
        let mut s = ThreadSpans::new(1, 2, "b".into());
        s.push(0, 0, 10, f, 0);
        s.push(0, 10, 50, gone, 0);
        s.push(0, 50, 60, err, 0);
        s.push(0, 60, 70, err, 0);
        // The walk met more errors than the spans show (its retries):
        // the diagnosis counts what the spans show.
        let walk = WalkFigures {
            instructions: 40,
            errors: vec![(100, "bad opcode".into()); 11828],
            ..Default::default()
        };
        let t = thread(s, Some(1), walk);
        assert_eq!(
            t.diagnosis(&funcs).as_deref(),
            Some("1 call: binary missing: /lib/libgone.so; 2 decode errors (first: bad opcode)")
        );
        // Errors the spans name as missing code are no decode errors.
        let mut s = ThreadSpans::new(1, 4, "d".into());
        s.push(0, 0, 10, f, 0);
        s.push(0, 10, 50, gone, 0);
        let walk = WalkFigures {
            instructions: 40,
            errors: vec![(100, "no memory mapped at this address".into()); 11828],
            ..Default::default()
        };
        let t = thread(s, Some(1), walk);
        assert_eq!(
            t.diagnosis(&funcs).as_deref(),
            Some("1 call: binary missing: /lib/libgone.so")
        );

        // Mostly untraced (a perf-script thread: no stream).
        let mut s = ThreadSpans::new(1, 3, "c".into());
        s.push(0, 0, 10, f, 0);
        s.push(0, 10, 1000, UNTRACED, 0);
        let t = thread(s, None, Default::default());
        assert_eq!(
            t.diagnosis(&funcs).as_deref(),
            Some("1 call: tracing was off most of the time")
        );

        // Few calls and nothing wrong: nothing to say.
        let mut s = ThreadSpans::new(1, 4, "d".into());
        s.push(0, 0, 10, f, 0);
        let walk = WalkFigures {
            instructions: 5,
            ..Default::default()
        };
        assert_eq!(thread(s, Some(0), walk).diagnosis(&funcs), None);

        // Calls enough: nothing to say, whatever went wrong.
        let mut s = ThreadSpans::new(1, 5, "e".into());
        for i in 0..ALMOST_EMPTY_CALLS as u64 {
            s.push(0, i * 10, i * 10 + 5, f, 0);
        }
        s.push(0, 1000, 2000, gone, 0);
        assert_eq!(
            thread(s, Some(0), Default::default()).diagnosis(&funcs),
            None
        );
    }
}
