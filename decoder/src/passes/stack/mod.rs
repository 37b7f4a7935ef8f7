//! Call-stack reconstruction: branch events in, nested spans out.
//!
//! PT tells us where control went, never what the stack is, so the stack
//! is rebuilt from calls and returns. Real programs break the naive rules
//! (push on call, pop on return) all the time: traces start mid-call, tail
//! calls replace frames, longjmp and exceptions unwind many frames at once,
//! PLT stubs jump into the real function, signal handlers appear from
//! nowhere, and decode errors lose an unknown stretch of execution. Each
//! rule below exists so that none of these makes a staircase, loses a
//! frame, or invents recursion.
//!
//! - A return pops the top frame. If the stack is then empty, the caller
//!   was entered before the trace began: it is synthesized *below* every
//!   span so far, back-dated to the start of the trace (or of the segment
//!   after a decode error) and flagged [`flag::INFERRED_START`]. If the
//!   target is deeper in the stack, frames are popped down to it. If it is
//!   nowhere, the target becomes a new frame where the returning one was
//!   (a `ret` used as a jump, a signal trampoline).
//! - A jump to the entry of another function is a tail call: it replaces
//!   the top frame. A jump into the middle of a function lower on the stack
//!   is a non-local exit (longjmp, unwinding, an OCaml raise): frames are
//!   popped down to it. Any other jump across functions replaces the top;
//!   if it lands in the middle of a function that is not on the stack
//!   (exception cleanup code, PLT0), the new frame is flagged
//!   [`flag::MID_ENTRY`], not [`flag::INFERRED_START`]: it begins at the
//!   jump, inside the trace, so its start is exact, but no call entered it.
//! - An event whose source is not in the top frame's function means
//!   control moved without an event (a fall-through or a conditional tail
//!   call): the same jump rules repair the top. A frame made by the repair
//!   was entered at some unseen moment before the event, so it is flagged
//!   [`flag::INFERRED_START`], as are frames that a `ret` used as a jump or
//!   a resume from untraced code lands in mid-function.
//! - A return with no target (0) went back into code the trace does not
//!   show, as one that leaves the IP filter's ranges does: it pops the
//!   returning frame, and the frame below, if any, is its caller. Without
//!   this, every return out of a filter would make an `[unknown]` frame.
//! - Trace disable pushes `[untraced]` (or `[syscall]`), enable pops it.
//!   A second enable or disable is counted and otherwise ignored; only a
//!   thread's first enable opens it.
//! - A return from the kernel (`iret`, `sysret`) to user space pops the
//!   kernel's frames, which are always the top of the stack since kernel
//!   code never calls user code, and lands as a resume does: in the
//!   interrupted frame, or nested under it (a signal handler). If that
//!   leaves no frame, the kernel was entered before the segment began (the
//!   trace, or the resume after an overflow, started inside it): the target
//!   is synthesized below, as a return's caller is, so the kernel's spans
//!   nest under the code they interrupted.
//! - A stack deeper than [`MAX_DEPTH`] frames is runaway recursion or a
//!   damaged trace looping through a call: the segment is closed there and
//!   a new one begins, counted in [`StackStats::depth_resets`]. Deeper
//!   lanes would cost memory per frame and show nothing anyone can read.
//! - A decode error becomes `[decode error: …]`. When decoding resumes
//!   inside a function that is still on the stack, and the error did not
//!   lose trace (overflow, lost data), the stack is kept and the error span
//!   nests on top of it. Otherwise the stack is closed at the error and a
//!   new segment begins; segments never nest under each other.
//!
//! A chunk of the trace walked on another core builds its stacks before
//! the stack it starts on is known, guessing the frames below, and is
//! stitched onto the real builder if every guess holds: `speculate`.

use crate::passes::event::{
    is_kernel_addr, EndReason, Event, EventKind, FuncId, FuncTable, SpanKind, SYSCALL, UNKNOWN,
    UNTRACED,
};
use ptscope_model::{flag, Span, ThreadSpans};
pub(crate) use ptscope_model::{OpenFrame, StackStats};

mod speculate;
#[cfg(test)]
mod test_events;
pub(crate) use speculate::{Guessed, Remap, Stitch};

/// The deepest call stack kept. Far beyond real code (a stack overflow at
/// 8 MiB is some 100k frames, and 16k rows are already unreadable), and
/// it bounds the lanes of a thread and the cost of searching the stack.
pub(crate) const MAX_DEPTH: usize = 1 << 14;

/// `Frame::call_site` of a frame entered by a syscall or interrupt.
const KERNEL_ENTRY: u64 = u64::MAX;

#[derive(Clone, Copy, Debug)]
struct Frame {
    func: FuncId,
    start: u64,
    flags: u32,
    /// Address of the call that made this frame, 0 if not made by a call.
    call_site: u64,
    /// Kernel code: an `iret`/`sysret` to user space leaves it.
    kernel: bool,
    /// Entered by a jump into its middle from this function (a compiler's
    /// cold part, `F.cold`): a jump back into that function goes on at
    /// this level. [`UNKNOWN`] otherwise.
    mid_from: FuncId,
}

/// The closed spans of the current segment, by level, until its final
/// base says which depth each level is: `lanes[i]` holds level `low + i`
/// in start order, as the store will. A segment usually is the whole
/// trace, so its lanes become the store's as they are, not copied.
///
/// A deque: a deep stack unwinding (returns, or a segment closed) files
/// each span one level below the last, and lanes added at the front of a
/// vector moved all the others each time, quadratic in the depth (a
/// fuzzed trace recursing 16,384 deep spent 1 s there).
#[derive(Clone, Debug, Default)]
struct Segment {
    lanes: std::collections::VecDeque<Vec<Span>>,
    low: i32,
    /// Durations of its spans too long for a span: (level, index, ns).
    long: Vec<(i32, u32, u64)>,
    /// Zero-length spans at the instant their parent began, which the
    /// store cannot always place from times alone: (level, index, parent),
    /// the parent as an index into the level below.
    ties: Vec<(i32, u32, u32)>,
    spans: usize,
    /// Emptied lanes to fill again (a chunk's builder, used once per
    /// chunk, keeps them).
    spare: Vec<Vec<Span>>,
    /// Its lanes are a thread's, which become the store's: grown past the
    /// heap's sizes at once (see [`Segment::room`]). A chunk's builder,
    /// whose lanes are few thousand spans and reused, grows them as any
    /// vector.
    mapped_growth: bool,
}

/// Spans a thread's lane holds before it grows to [`MAPPED_LANE`].
const HEAP_LANE: usize = 4096;

/// A MiB of spans: the size from which the app's allocator maps a block
/// on its own (`app/src/allocator.rs`), so that growing it moves no bytes
/// and freeing it returns its memory.
const MAPPED_LANE: usize = (1 << 20) / std::mem::size_of::<Span>();

impl Segment {
    /// Makes `lane` room for `want` spans, growing it to powers of two, as
    /// span by span (batches grown to just what they need, then doubled,
    /// overshot python3's peak by 2.4 MB). A thread's lane past
    /// [`HEAP_LANE`] goes straight to [`MAPPED_LANE`]: grown by doubling
    /// through the heap's sizes, each block it outgrew stayed behind as a
    /// hole, resident, and python3's lanes left some 5 MB of them, a tenth
    /// of its two-core peak. Its pages are resident only as spans fill
    /// them.
    #[inline(always)]
    fn room(lane: &mut Vec<Span>, want: usize, mapped_growth: bool) {
        if want > lane.capacity() {
            Self::grow(lane, want, mapped_growth);
        }
    }

    #[cold]
    fn grow(lane: &mut Vec<Span>, want: usize, mapped_growth: bool) {
        let mut to = want.next_power_of_two().max(4);
        if mapped_growth && to > HEAP_LANE {
            to = to.max(MAPPED_LANE);
        }
        lane.reserve_exact(to - lane.len());
    }

    /// The lane of `level`, made (with those between) if it is new.
    #[inline(always)]
    fn lane(&mut self, level: i32) -> &mut Vec<Span> {
        if self.lanes.is_empty() {
            self.low = level;
        } else if level < self.low {
            for _ in level..self.low {
                let lane = self.spare.pop().unwrap_or_default();
                self.lanes.push_front(lane);
            }
            self.low = level;
        }
        let i = (level - self.low) as usize;
        while self.lanes.len() <= i {
            let lane = self.spare.pop().unwrap_or_default();
            self.lanes.push_back(lane);
        }
        &mut self.lanes[i]
    }

    /// Files a closed span at `level`; its index there.
    #[inline(always)]
    fn push(&mut self, level: i32, start: u64, end: u64, func: FuncId, flags: u32) -> u32 {
        let mapped_growth = self.mapped_growth;
        let lane = self.lane(level);
        Self::room(lane, lane.len() + 1, mapped_growth);
        let index = lane.len() as u32;
        let (span, long) = Span::closed(start, end, func, flags);
        lane.push(span);
        if let Some(ns) = long {
            self.long.push((level, index, ns));
        }
        self.spans += 1;
        index
    }
}

/// The parent of a span whose times place it.
const NO_TIE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct PendingError {
    time: u64,
    func: FuncId,
    estimated: bool,
}

/// Rebuilds the spans of one thread from its events.
#[derive(Clone, Debug)]
pub(crate) struct StackBuilder {
    out: ThreadSpans,
    stack: Vec<Frame>,
    /// Level of `stack[0]`; drops when a caller is synthesized below.
    base: i32,
    /// The highest level a frame of this segment has had (-1: none yet).
    seg_top: i32,
    /// Closed spans of the current segment.
    segment: Segment,
    /// Spans closed at each level of this segment so far, by stack index
    /// (level - base).
    closed: Vec<u32>,
    /// Scratch for `close_segment`: per lane, its length before the
    /// segment.
    lane_starts: Vec<usize>,
    seg_start: u64,
    opened: bool,
    tracing: bool,
    error: Option<PendingError>,
    last_time: u64,
    /// The final base of every closed segment, in order.
    closed_bases: Vec<i32>,
    pub stats: StackStats,
    /// A builder of one chunk whose stack below is not known yet: what it
    /// guessed of it (see [`speculate`]).
    guess: Option<Box<speculate::Guesses>>,
}

impl StackBuilder {
    pub(crate) fn new(pid: i32, tid: i32, comm: String) -> StackBuilder {
        StackBuilder {
            out: ThreadSpans::new(pid, tid, comm),
            stack: Vec::new(),
            base: 0,
            seg_top: -1,
            segment: Segment {
                mapped_growth: true,
                ..Segment::default()
            },
            closed: Vec::new(),
            lane_starts: Vec::new(),
            seg_start: 0,
            opened: false,
            tracing: true,
            error: None,
            last_time: 0,
            closed_bases: Vec::new(),
            stats: StackStats::default(),
            guess: None,
        }
    }

    /// Spans closed so far.
    pub(crate) fn span_count(&self) -> usize {
        self.out.span_count() + self.segment.spans
    }

    /// The open frames, bottom first.
    pub(crate) fn frames(&self) -> impl Iterator<Item = OpenFrame> + '_ {
        self.stack.iter().map(|f| OpenFrame {
            func: f.func,
            start: f.start,
            call_site: f.call_site,
            kernel: f.kernel,
            mid_from: f.mid_from,
        })
    }

    /// Restores open frames, as at a checkpoint, before the first event;
    /// `tracing`: whether tracing was on there (if not, the next enable
    /// lands rather than being a second one).
    pub(crate) fn seed(&mut self, frames: &[OpenFrame], time: u64, tracing: bool) {
        self.begin(time);
        self.tracing = tracing;
        for f in frames {
            self.stack.push(Frame {
                func: f.func,
                start: f.start,
                flags: 0,
                call_site: f.call_site,
                kernel: f.kernel,
                mid_from: f.mid_from,
            });
        }
        self.seg_top = self.seg_top.max(self.top_level());
    }

    fn begin(&mut self, t: u64) {
        if !self.opened {
            self.opened = true;
            self.seg_start = t;
            self.last_time = t;
        }
    }

    #[inline(always)]
    pub(crate) fn event(&mut self, ev: &Event, funcs: &FuncTable) {
        if !self.step(ev) {
            self.event_in_full(ev, funcs);
        }
    }

    /// The events most of a trace is made of, a call or a return between
    /// user functions from the function the top frame runs, the return to
    /// the frame below, in a few steps: what [`event_in_full`]
    /// (Self::event_in_full) does with them, without the rules that cannot
    /// apply (kernel frames to leave, a pseudo-frame on top, a frame to
    /// repair or synthesize, an error to resume from). False, having done
    /// nothing, for any other event.
    #[inline(always)]
    fn step(&mut self, ev: &Event) -> bool {
        let n = self.stack.len();
        let Some(top) = self.stack.last() else {
            return false;
        };
        // Pseudo-functions (`[untraced]`, `[syscall]`) are the first ids.
        const { assert!(SYSCALL == 1 && UNTRACED == 0) };
        if !self.opened
            || self.error.is_some()
            || top.func != ev.from_fn
            || ev.from_fn <= SYSCALL
            || top.kernel
            || ev.from == 0
            || is_kernel_addr(ev.from)
            || ev.to == 0
            || is_kernel_addr(ev.to)
        {
            return false;
        }
        let t = ev.time.max(self.last_time);
        let est = if ev.estimated { u32::MAX } else { 0 };
        match ev.kind {
            EventKind::Call => {
                self.last_time = t;
                self.stats.events += 1;
                self.stats.calls += 1;
                self.push(ev.to_fn, ev.to, t, est & flag::START_ESTIMATED);
                if let Some(f) = self.stack.last_mut() {
                    f.call_site = ev.from;
                }
            }
            EventKind::Return if n >= 2 && self.stack[n - 2].func == ev.to_fn => {
                self.last_time = t;
                self.stats.events += 1;
                self.stats.returns += 1;
                self.pop(t, est & flag::END_ESTIMATED);
            }
            _ => return false,
        }
        self.note_depth();
        true
    }

    /// [`event`](Self::event) by every rule. Not inlined: the short path
    /// would pay for its frame.
    #[inline(never)]
    fn event_in_full(&mut self, ev: &Event, funcs: &FuncTable) {
        self.stats.events += 1;
        let first = !self.opened;
        self.begin(ev.time);
        // Events are in trace order; never let time run backwards.
        let t = ev.time.max(self.last_time);
        self.last_time = t;
        let est = if ev.estimated { u32::MAX } else { 0 };
        if let Some(err) = self.error.take() {
            self.resume(err, ev, t, funcs);
        }
        // Kernel code never calls user code: user code running again means
        // the kernel's frames on top are over, however the kernel was left
        // (a sysret or iret we saw, or one lost to a decode error, an
        // overflow or a context switch). A round trip into the kernel ends
        // where user code resumes, whether or not kernel code was decoded.
        let from_kernel = ev.from != 0 && is_kernel_addr(ev.from);
        if from_kernel
            && ev.to != 0
            && !is_kernel_addr(ev.to)
            && matches!(
                ev.kind,
                EventKind::Call | EventKind::Return | EventKind::Jump
            )
        {
            // Kernel code left for user code by a branch that was not seen
            // as the iret or sysret it is (kernel code decoded as a jump,
            // say): the same return to user space.
            self.leave_kernel(ev, t, est);
            self.note_depth();
            return;
        }
        // What the first thing to read the top expects it to be (for a
        // chunk's builder, what to guess is below it).
        let hint = match ev.kind {
            EventKind::TraceBegin => ev.to_fn,
            _ => ev.from_fn,
        };
        let left_kernel = match ev.kind {
            EventKind::Call | EventKind::Return | EventKind::TraceBegin | EventKind::Interrupt => {
                self.user_resumes(ev.to, t, est, hint)
            }
            EventKind::Jump if ev.from_fn != ev.to_fn => self.user_resumes(ev.to, t, est, hint),
            _ => false,
        };
        match ev.kind {
            EventKind::Call => {
                self.stats.calls += 1;
                self.sync_from(ev, t, funcs);
                self.push(ev.to_fn, ev.to, t, est & flag::START_ESTIMATED);
                if let Some(f) = self.stack.last_mut() {
                    f.call_site = ev.from;
                }
            }
            EventKind::Return => {
                self.stats.returns += 1;
                self.sync_from(ev, t, funcs);
                self.ret(ev, t, est);
            }
            EventKind::Jump => {
                if ev.from_fn == ev.to_fn {
                    return;
                }
                self.sync_from(ev, t, funcs);
                self.jump(ev, t, est);
            }
            EventKind::TraceEnd(reason) => {
                if !self.tracing && !first {
                    self.stats.double_disable += 1;
                    return;
                }
                self.sync_from(ev, t, funcs);
                let f = match reason {
                    EndReason::Syscall => crate::passes::event::SYSCALL,
                    EndReason::Other | EndReason::Async => crate::passes::event::UNTRACED,
                };
                self.push(f, 0, t, est & flag::START_ESTIMATED);
                self.tracing = false;
            }
            EventKind::TraceBegin => {
                if self.tracing && !first {
                    if self.guessing_top() {
                        // Its call site is not known.
                        self.fail();
                        return;
                    }
                    // Kernel code entered but not decoded (perf 5.x's `hw
                    // int`/`syscall` then `tr strt`): this enable is the
                    // return to user space, not a second enable.
                    if left_kernel
                        || self
                            .stack
                            .last()
                            .is_some_and(|f| f.call_site == KERNEL_ENTRY)
                    {
                        self.pop_pseudo(t, est, funcs, ev.to_fn);
                        self.land(ev, t, est);
                        return;
                    }
                    self.stats.double_enable += 1;
                    return;
                }
                self.tracing = true;
                self.pop_pseudo(t, est, funcs, ev.to_fn);
                self.land(ev, t, est);
            }
            EventKind::Syscall | EventKind::Interrupt => {
                self.sync_from(ev, t, funcs);
                self.push(ev.to_fn, ev.to, t, est & flag::START_ESTIMATED);
                if let Some(f) = self.stack.last_mut() {
                    f.call_site = KERNEL_ENTRY;
                }
            }
            EventKind::KernelReturn => {
                self.sync_from(ev, t, funcs);
                self.leave_kernel(ev, t, est);
            }
            EventKind::Error => {
                self.stats.errors += 1;
                self.error = Some(PendingError {
                    time: t,
                    func: ev.to_fn,
                    estimated: ev.estimated,
                });
                // Whatever comes next resumes tracing.
                self.tracing = false;
            }
        }
        self.note_depth();
    }

    /// Keeps the deepest stack seen.
    fn note_depth(&mut self) {
        self.stats.max_depth = self.stats.max_depth.max(self.stack.len());
        if let Some(g) = &mut self.guess {
            g.note_depth(self.stack.len());
        }
    }

    /// Where the builder is: (segment, level of `stack[0]`). With the bases
    /// [`finish_with_bases`](Self::finish_with_bases) returns, this tells
    /// the store depth a frame open now will get.
    pub(crate) fn mark(&self) -> (usize, i32) {
        (self.closed_bases.len(), self.base)
    }

    /// The level of the top frame (relative to the stack's bottom when the
    /// builder was seeded); -1 on an empty stack.
    pub(crate) fn top_level(&self) -> i32 {
        self.base + self.stack.len() as i32 - 1
    }

    /// Closes everything at the last event's time.
    pub(crate) fn finish(self) -> (ThreadSpans, StackStats) {
        let (spans, stats, _) = self.finish_with_bases(1);
        (spans, stats)
    }

    /// [`finish`](Self::finish), with each segment's final base (see
    /// [`mark`](Self::mark)), the last segment's spans summarized on up to
    /// `workers` threads (a decode on several cores ends with it, its
    /// other cores idle).
    pub(crate) fn finish_with_bases(
        mut self,
        workers: usize,
    ) -> (ThreadSpans, StackStats, Vec<i32>) {
        let t = self.last_time;
        if let Some(err) = self.error.take() {
            self.close_segment(err.time, flag::END_ESTIMATED);
            self.push_closed(err.func, err.time, t, 0);
            self.close_segment_on(t, 0, workers);
        } else {
            self.close_segment_on(t, flag::OPEN_END, workers);
        }
        self.out.shrink_to_fit();
        (self.out, self.stats, self.closed_bases)
    }

    fn level(&self, index: usize) -> i32 {
        self.base + index as i32
    }

    /// Opens a frame for `func`, whose code is at `addr` (0: unknown).
    #[inline(always)]
    fn push(&mut self, func: FuncId, addr: u64, t: u64, flags: u32) {
        let level = self.level(self.stack.len());
        if level > self.seg_top {
            if self.lanes() >= MAX_DEPTH {
                if self.guess.is_some() {
                    return self.fail();
                }
                self.restart_deep(t);
            }
            self.seg_top = self.level(self.stack.len());
        }
        self.stack.push(Frame {
            func,
            start: t,
            flags,
            call_site: 0,
            kernel: is_kernel_addr(addr),
            mid_from: UNKNOWN,
        });
    }

    #[inline(always)]
    fn pop(&mut self, t: u64, end_flags: u32) {
        // In a chunk's builder, a frame of the chunk's own (above the
        // guessed ones) that lasted closes as it would anywhere: its span
        // has no tie to wait for. That is nearly every pop of a chunk, and
        // the guessing rules stay out of its way.
        if let Some(g) = self.guess.as_deref() {
            let own_and_lasted =
                self.stack.len() > g.on_stack && self.stack.last().is_some_and(|f| t > f.start);
            if !own_and_lasted {
                return self.pop_guessing(t, end_flags);
            }
        }
        if let Some(f) = self.stack.pop() {
            let index = self.stack.len();
            if self.closed.len() <= index {
                self.closed.resize(index + 1, 0);
            }
            let end = t.max(f.start);
            // Only a zero-length call at the instant its caller began can
            // lie in an earlier span above too (one that ended then). The
            // caller closes next at its level; with none below, the caller
            // synthesized there later (from the segment's start) is the first.
            let tie = f.start == end
                && self
                    .stack
                    .last()
                    .map_or(end == self.seg_start, |p| p.start == end);
            let parent = match index.checked_sub(1) {
                _ if !tie => NO_TIE,
                Some(below) => self.closed[below],
                None => 0,
            };
            self.closed[index] += 1;
            let level = self.level(index);
            let at = self
                .segment
                .push(level, f.start, end, f.func, f.flags | end_flags);
            if parent != NO_TIE {
                self.segment.ties.push((level, at, parent));
            }
        }
    }

    /// A closed span on top of the open stack.
    fn push_closed(&mut self, func: FuncId, start: u64, end: u64, flags: u32) {
        self.push(func, 0, start, flags);
        self.pop(end, 0);
    }

    fn pop_to(&mut self, index: usize, t: u64, est: u32) {
        while self.stack.len() > index + 1 {
            self.stats.nonlocal_pops += 1;
            self.pop(t, est & flag::END_ESTIMATED);
        }
    }

    /// The nearest frame below the top that runs `func`.
    fn find_below(&mut self, func: FuncId) -> Option<usize> {
        let n = self.stack.len();
        let found = (0..n.saturating_sub(1))
            .rev()
            .find(|&i| self.stack[i].func == func);
        if let (None, Some(g)) = (found, &mut self.guess) {
            // Nor is it in the frames below the chunk's start.
            g.not_below(func);
        }
        found
    }

    /// Lanes the current segment spans.
    fn lanes(&self) -> usize {
        (self.seg_top - self.base + 1).max(0) as usize
    }

    /// The segment has as many lanes as it may: close it at `t`, and go on
    /// in a new one.
    fn restart_deep(&mut self, t: u64) {
        self.stats.depth_resets += 1;
        self.close_segment(t, flag::END_ESTIMATED);
        self.seg_start = t;
    }

    /// Synthesizes a caller below every frame and span of this segment.
    fn synthesize_below(&mut self, func: FuncId, addr: u64) {
        if self.guess.is_some() {
            // Only if the real stack is empty here, which a chunk's
            // builder cannot know.
            return self.fail();
        }
        if self.lanes() >= MAX_DEPTH {
            self.restart_deep(self.last_time);
        }
        if self.stack.is_empty() && self.seg_top < self.base {
            self.seg_top = self.base - 1;
        }
        self.stats.inferred_frames += 1;
        self.base -= 1;
        if !self.closed.is_empty() {
            self.closed.insert(0, 0);
        }
        self.stack.insert(
            0,
            Frame {
                func,
                start: self.seg_start,
                flags: flag::INFERRED_START,
                call_site: 0,
                kernel: is_kernel_addr(addr),
                mid_from: UNKNOWN,
            },
        );
    }

    fn top(&self) -> Option<FuncId> {
        self.stack.last().map(|f| f.func)
    }

    fn is_trace_pseudo(funcs: &FuncTable, f: FuncId) -> bool {
        matches!(funcs.kind(f), SpanKind::Untraced | SpanKind::Syscall)
    }

    fn pop_pseudo(&mut self, t: u64, est: u32, funcs: &FuncTable, hint: FuncId) {
        while self
            .reach(hint)
            .is_some_and(|f| Self::is_trace_pseudo(funcs, f))
        {
            self.pop(t, est & flag::END_ESTIMATED);
        }
    }

    /// Makes the top frame the function the event comes from.
    fn sync_from(&mut self, ev: &Event, t: u64, funcs: &FuncTable) {
        if ev.from == 0 && ev.from_fn == UNKNOWN {
            return;
        }
        let from = ev.from_fn;
        if self
            .reach(from)
            .is_some_and(|f| Self::is_trace_pseudo(funcs, f))
        {
            // A branch while we thought tracing was off: believe the branch.
            self.pop_pseudo(t, 0, funcs, from);
            self.tracing = true;
        }
        match self.reach(from) {
            None => self.synthesize_below(from, ev.from),
            Some(top) if top == from => {}
            Some(_) => {
                self.stats.repaired += 1;
                let est = if ev.estimated { u32::MAX } else { 0 };
                match self.find_below(from) {
                    Some(i) => self.pop_to(i, t, est),
                    None => {
                        self.pop(t, est & flag::END_ESTIMATED);
                        self.push(from, ev.from, t, flag::INFERRED_START);
                    }
                }
            }
        }
    }

    fn ret(&mut self, ev: &Event, t: u64, est: u32) {
        let to = ev.to_fn;
        // A chunk's builder does not know a call site below its start.
        let site_known = !self.guessing_top();
        let call_site = self.stack.last().map_or(0, |f| f.call_site);
        self.pop(t, est & flag::END_ESTIMATED);
        // A return the trace gives no target for went back into untraced
        // code (it left the IP filter's ranges): its caller is the frame
        // below, if any, and nothing is known to make another.
        if ev.to == 0 {
            return;
        }
        if to == UNKNOWN && self.stack.is_empty() {
            if self.guess.is_some() {
                // Whether the real stack is empty.
                self.fail();
            }
            return;
        }
        match self.reach(to) {
            None => self.synthesize_below(to, ev.to),
            Some(top) if top == to => {}
            Some(_) => match self.find_below(to) {
                Some(i) => self.pop_to(i, t, est),
                None if !site_known => self.fail(),
                // Back to just after the call, but under another name: the
                // caller continues past a label (`_start` into
                // `_dl_start_user`). Same frame, new name.
                None if call_site != 0 && ev.to > call_site && ev.to - call_site <= 15 => {
                    self.pop(t, est & flag::END_ESTIMATED);
                    self.push(to, ev.to, t, est & flag::START_ESTIMATED);
                }
                // A `ret` used as a jump, or a signal trampoline: the target
                // takes the returning frame's place.
                None => self.push(
                    to,
                    ev.to,
                    t,
                    (est & flag::START_ESTIMATED)
                        | if ev.to_is_entry {
                            0
                        } else {
                            flag::INFERRED_START
                        },
                ),
            },
        }
    }

    fn jump(&mut self, ev: &Event, t: u64, est: u32) {
        let to = ev.to_fn;
        let from = self.reach(ev.from_fn).unwrap_or(UNKNOWN);
        if !ev.to_is_entry {
            // Back from a function's cold part into the function: it goes
            // on at this level, not at an earlier call of it further down
            // (a recursive interpreter's, whose frames between would all
            // be lost).
            if to != UNKNOWN && self.stack.last().is_some_and(|f| f.mid_from == to) {
                self.pop(t, est & flag::END_ESTIMATED);
                self.push(
                    to,
                    ev.to,
                    t,
                    (est & flag::START_ESTIMATED) | flag::MID_ENTRY,
                );
                return;
            }
            // Code below on the stack: an unwind to it (longjmp, exception
            // cleanup), unless it is the cold part of the function jumping
            // now, open for an outer call of it (an import importing).
            if let Some(i) = self.find_below(to) {
                let own_cold = from != UNKNOWN && self.stack[i].mid_from == from;
                if !own_cold {
                    self.pop_to(i, t, est);
                    return;
                }
            }
        } else {
            self.stats.tail_calls += 1;
        }
        self.pop(t, est & flag::END_ESTIMATED);
        let mut flags = est & flag::START_ESTIMATED;
        if !ev.to_is_entry {
            // Entered at the jump, inside the trace: the start is exact, but
            // no call made this frame (exception cleanup, PLT0, a cold part).
            flags |= flag::MID_ENTRY;
        }
        self.push(to, ev.to, t, flags);
        if !ev.to_is_entry {
            if let Some(f) = self.stack.last_mut() {
                f.mid_from = from;
            }
        }
    }

    /// Control arrived at the event's target from somewhere untraced.
    fn land(&mut self, ev: &Event, t: u64, est: u32) {
        let to = ev.to_fn;
        if to == UNKNOWN {
            return;
        }
        let flags = if ev.to_is_entry {
            est & flag::START_ESTIMATED
        } else {
            flag::INFERRED_START
        };
        match self.reach(to) {
            None => self.push(to, ev.to, t, flags),
            Some(top) if top == to => {}
            Some(_) => match self.find_below(to) {
                Some(i) => self.pop_to(i, t, est),
                // A signal handler, or code we never saw called: it nests
                // under the interrupted frame.
                None => self.push(to, ev.to, t, flags),
            },
        }
    }

    /// User code runs at `to`: the kernel frames on top end at `t`.
    /// Whether there were any.
    fn user_resumes(&mut self, to: u64, t: u64, est: u32, hint: FuncId) -> bool {
        if to == 0 || is_kernel_addr(to) {
            return false;
        }
        let mut left = false;
        while self.reach(hint).is_some() && self.stack.last().is_some_and(|f| f.kernel) {
            self.pop(t, est & flag::END_ESTIMATED);
            left = true;
        }
        left
    }

    /// An `iret`/`sysret`: the kernel hands control back.
    fn leave_kernel(&mut self, ev: &Event, t: u64, est: u32) {
        if is_kernel_addr(ev.to) {
            // A nested interrupt returning into interrupted kernel code.
            self.land(ev, t, est);
            return;
        }
        // Kernel code never calls user code, so the kernel's frames are the
        // top of the stack, however the kernel was entered.
        let mut left = false;
        while self.reach(ev.to_fn).is_some() && self.stack.last().is_some_and(|f| f.kernel) {
            self.pop(t, est & flag::END_ESTIMATED);
            left = true;
        }
        if left && self.stack.is_empty() && ev.to_fn != UNKNOWN {
            // The kernel was entered before this segment began (the trace
            // or an overflow's resume started inside it): the code it
            // returns to was interrupted then, and the kernel's spans nest
            // under it like those of an interrupt we saw.
            self.synthesize_below(ev.to_fn, ev.to);
            return;
        }
        self.land(ev, t, est);
    }

    fn resume(&mut self, err: PendingError, ev: &Event, t: u64, funcs: &FuncTable) {
        let resume_fn = match ev.kind {
            EventKind::TraceBegin => ev.to_fn,
            _ => ev.from_fn,
        };
        let err_name = funcs.name(err.func);
        let lost = err_name.contains("verflow") || err_name.contains("ost trace");
        let keep = match funcs.kind(err.func) {
            SpanKind::NoBinary => !self.stack.is_empty(),
            _ => {
                !lost
                    && (self.top() == Some(resume_fn) || self.find_below(resume_fn).is_some())
                    && resume_fn != UNKNOWN
            }
        };
        let flags = if err.estimated {
            flag::START_ESTIMATED
        } else {
            0
        };
        if keep {
            // A missing binary's frame already labels the gap.
            if self.top() != Some(err.func) {
                self.push_closed(err.func, err.time, t, flags);
            }
        } else {
            self.stats.stack_resets += 1;
            self.close_segment(err.time, flag::END_ESTIMATED);
            self.push_closed(err.func, err.time, t, flags);
            self.close_segment(t, 0);
            self.seg_start = t;
        }
    }

    /// Closes all open frames at `t` and files the segment's spans into
    /// lanes, now that no caller can be synthesized below them any more.
    fn close_segment(&mut self, t: u64, end_flags: u32) {
        self.close_segment_on(t, end_flags, 1);
    }

    /// [`close_segment`](Self::close_segment), its lanes summarized on up
    /// to `workers` threads.
    fn close_segment_on(&mut self, t: u64, end_flags: u32, workers: usize) {
        if self.guess.is_some() {
            return self.fail();
        }
        while !self.stack.is_empty() {
            self.pop(t, end_flags);
        }
        let base = self.base;
        let Self {
            segment,
            out,
            lane_starts: starts,
            ..
        } = self;
        let low = segment.low;
        debug_assert!(segment.lanes.is_empty() || low >= base);
        let depth = |level: i32| (level - base) as usize;
        // Where this segment's spans begin in each lane it fills: only its
        // own levels, however deep below them the base lies (a trace that
        // returns out of many frames it never saw enter puts it deep, and
        // a damaged one does so at every segment).
        let first = depth(low);
        starts.clear();
        if !segment.lanes.is_empty() {
            let depths = depth(low + segment.lanes.len() as i32);
            starts.extend((first..depths).map(|d| out.lane(d).len()));
        }
        // Each lane's long spans, in one pass over them sorted by level.
        segment.long.sort_unstable_by_key(|&(level, ..)| level);
        let mut long = &segment.long[..];
        for (i, spans) in segment.lanes.drain(..).enumerate() {
            let level = low + i as i32;
            let n = long.iter().take_while(|&&(l, ..)| l <= level).count();
            let (here, rest) = long.split_at(n);
            long = rest;
            if spans.is_empty() {
                continue;
            }
            let here = here
                .iter()
                .filter(|&&(l, ..)| l == level)
                .map(|&(_, i, ns)| (i as usize, ns));
            out.append_lane_on(depth(level), spans, here, workers);
        }
        // Once the parents are in too, file the spans whose times do not
        // say which span above they were made in (a parent is a span of
        // this segment too, so its level is one of the segment's).
        for (level, i, parent) in segment.ties.drain(..) {
            let d = depth(level);
            if d > first {
                out.file_under(
                    d,
                    starts[d - first] + i as usize,
                    starts[d - 1 - first] + parent as usize,
                );
            }
        }
        segment.long.clear();
        segment.spans = 0;
        segment.low = 0;
        self.closed_bases.push(base);
        self.base = 0;
        self.seg_top = -1;
        self.closed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::event::{SpanKind, SYSCALL, UNTRACED};

    /// A thread's lane grows by doubling up to [`HEAP_LANE`] spans, then
    /// to a MiB at once, by span and by batch alike; a chunk's builder's
    /// lanes only ever double.
    #[test]
    fn a_threads_lane_leaves_the_heaps_sizes_at_once() {
        for mapped_growth in [true, false] {
            let mut seg = Segment {
                mapped_growth,
                ..Segment::default()
            };
            let mut caps = Vec::new();
            for i in 0..HEAP_LANE as u64 + 1 {
                seg.push(3, i, i + 1, 1, 0);
                caps.push(seg.lanes[0].capacity());
            }
            assert_eq!(caps[HEAP_LANE - 1], HEAP_LANE);
            let want = if mapped_growth {
                MAPPED_LANE
            } else {
                2 * HEAP_LANE
            };
            assert_eq!(caps[HEAP_LANE], want, "mapped growth: {mapped_growth}");
            let spans =
                (0..HEAP_LANE as u32 + 1).map(|i| Span::closed(i.into(), u64::from(i) + 1, 1, 0).0);
            seg.extend(2, spans);
            assert_eq!(
                seg.lanes[0].capacity(),
                want,
                "mapped growth: {mapped_growth}"
            );
        }
    }

    /// Builds events from a compact script: each step is
    /// (time, kind, from function, to function, to_is_entry).
    struct Script {
        funcs: FuncTable,
        b: StackBuilder,
        /// Functions whose addresses are in the kernel half.
        kernel: Vec<&'static str>,
    }

    impl Script {
        fn new() -> Script {
            Script {
                funcs: FuncTable::default(),
                b: StackBuilder::new(1, 1, "t".into()),
                kernel: Vec::new(),
            }
        }
        fn addr(&self, name: &str, a: u64) -> u64 {
            match () {
                _ if name.is_empty() => 0,
                _ if self.kernel.contains(&name) => 0xffff_ff00_0000_0000 + a,
                _ => a,
            }
        }
        fn f(&mut self, name: &str) -> FuncId {
            if name.is_empty() {
                return UNKNOWN;
            }
            if let Some(r) = name.strip_prefix("!err ") {
                return self.funcs.decode_error(r);
            }
            if let Some(r) = name.strip_prefix("!nobin ") {
                return self.funcs.no_binary(r);
            }
            self.funcs.intern(name, "m", 0, SpanKind::Call)
        }
        fn ev(&mut self, t: u64, kind: EventKind, from: &str, to: &str, entry: bool) {
            let from_fn = self.f(from);
            let to_fn = self.f(to);
            let ev = Event {
                time: t,
                kind,
                from: self.addr(from, 0x1000 + t * 16),
                to: self.addr(to, 0x9000_0000 + t),
                from_fn,
                to_fn,
                to_is_entry: entry,
                estimated: false,
            };
            self.b.event(&ev, &self.funcs);
        }
        fn call(&mut self, t: u64, from: &str, to: &str) {
            self.ev(t, EventKind::Call, from, to, true)
        }
        fn ret(&mut self, t: u64, from: &str, to: &str) {
            self.ev(t, EventKind::Return, from, to, false)
        }
        /// The tree as "depth name start-end" lines in start order.
        fn tree(self) -> Vec<String> {
            let funcs = self.funcs;
            let (spans, _) = self.b.finish();
            let mut rows = Vec::new();
            for (d, lane) in spans.lanes() {
                for (i, s) in lane.iter().enumerate() {
                    rows.push((
                        s.start,
                        d,
                        format!(
                            "{d} {} {}-{}{}",
                            funcs.name(s.func()),
                            s.start,
                            spans.end(d, i),
                            match (s.has(flag::INFERRED_START), s.has(flag::MID_ENTRY)) {
                                (true, false) => " inferred",
                                (false, true) => " mid",
                                (true, true) => " inferred mid",
                                (false, false) => "",
                            }
                        ),
                    ));
                }
            }
            rows.sort();
            rows.into_iter().map(|r| r.2).collect()
        }
    }

    /// Random streams, with decode errors among them, build the same
    /// spans, stack and counters with the common events' short path as by
    /// every rule; and the short path takes many of them. (A chunk's
    /// builder: `speculate`'s tests.)
    #[test]
    fn the_short_path_builds_what_every_rule_builds() {
        let (mut short, mut all) = (0, 0);
        for seed in 1..600u64 {
            let mut funcs = FuncTable::default();
            let error = funcs.decode_error("test");
            let mut evs = super::test_events::events(seed, 120, &mut funcs);
            for i in (seed as usize % 29..evs.len()).step_by(29).rev() {
                let mut e = Event::new(evs[i].time, EventKind::Error);
                e.to_fn = error;
                evs.insert(i, e);
            }
            let mut fast = StackBuilder::new(1, 1, "t".into());
            let mut full = StackBuilder::new(1, 1, "t".into());
            for (i, ev) in evs.iter().enumerate() {
                all += 1;
                if fast.step(ev) {
                    short += 1;
                } else {
                    fast.event_in_full(ev, &funcs);
                }
                full.event_in_full(ev, &funcs);
                assert_eq!(
                    fast.frames().collect::<Vec<_>>(),
                    full.frames().collect::<Vec<_>>(),
                    "seed {seed} at {i}"
                );
            }
            assert_eq!(
                format!("{:?}", fast.finish_with_bases(1)),
                format!("{:?}", full.finish_with_bases(1)),
                "seed {seed}"
            );
        }
        assert!(short * 3 > all, "the short path took {short} of {all}");
    }

    #[test]
    fn calls_and_returns_nest() {
        let mut s = Script::new();
        s.call(10, "main", "a");
        s.call(20, "a", "b");
        s.ret(30, "b", "a");
        s.ret(40, "a", "main");
        assert_eq!(
            s.tree(),
            ["0 main 10-40 inferred", "1 a 10-40", "2 b 20-30"]
        );
    }

    #[test]
    fn return_on_empty_stack_synthesizes_callers_without_staircase() {
        let mut s = Script::new();
        // The trace starts inside c, called by b, called by a.
        s.ret(100, "c", "b");
        s.call(110, "b", "d");
        s.ret(120, "d", "b");
        s.ret(130, "b", "a");
        s.call(140, "a", "e");
        assert_eq!(
            s.tree(),
            [
                "0 a 100-140 inferred",
                "1 b 100-130 inferred",
                "2 c 100-100 inferred",
                "2 d 110-120",
                "1 e 140-140",
            ]
        );
    }

    /// A recursive function jumps into its cold part and back: the inner
    /// call goes on at its level, and the calls below it stay open, rather
    /// than the jump back landing on the outer call (and every frame
    /// between ending, their callers later coming back as inferred).
    #[test]
    fn a_jump_back_from_a_cold_part_stays_in_the_recursive_call() {
        let mut s = Script::new();
        s.call(10, "main", "eval");
        s.call(20, "eval", "call");
        s.call(30, "call", "eval");
        s.ev(40, EventKind::Jump, "eval", "eval.cold", false);
        s.ev(50, EventKind::Jump, "eval.cold", "eval", false);
        s.ret(60, "eval", "call");
        s.ret(70, "call", "eval");
        s.ret(80, "eval", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-80 inferred",
                "1 eval 10-80",
                "2 call 20-70",
                "3 eval 30-40",
                "3 eval.cold 40-50 mid",
                "3 eval 50-60 mid",
            ]
        );
    }

    /// An outer call of a function is in its cold part when it calls,
    /// through another function, the same function again, which jumps
    /// into the cold part too (Python's import importing): the inner jump
    /// enters the inner call's own cold part, not the outer one's, and the
    /// frames between stay open.
    #[test]
    fn a_cold_part_open_below_is_not_where_a_recursive_call_jumps() {
        let mut s = Script::new();
        s.call(10, "main", "import");
        s.ev(20, EventKind::Jump, "import", "import.cold", false);
        s.call(30, "import.cold", "eval");
        s.call(40, "eval", "import");
        s.ev(50, EventKind::Jump, "import", "import.cold", false);
        s.ev(60, EventKind::Jump, "import.cold", "import", false);
        s.ret(70, "import", "eval");
        s.ret(80, "eval", "import.cold");
        s.ret(90, "import.cold", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-90 inferred",
                "1 import 10-20",
                "1 import.cold 20-90 mid",
                "2 eval 30-80",
                "3 import 40-50",
                "3 import.cold 50-60 mid",
                "3 import 60-70 mid",
            ]
        );
    }

    #[test]
    fn jump_into_the_middle_of_a_function_not_on_the_stack_is_a_mid_entry() {
        let mut s = Script::new();
        s.call(10, "main", "puts@plt");
        // puts@plt jumps into PLT0, which perf names `_init+0x20`.
        s.ev(11, EventKind::Jump, "puts@plt", "_init", false);
        s.ev(12, EventKind::Jump, "_init", "_dl_runtime_resolve", true);
        s.ret(20, "_dl_runtime_resolve", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-20 inferred",
                "1 puts@plt 10-11",
                "1 _init 11-12 mid",
                "1 _dl_runtime_resolve 12-20",
            ]
        );
    }

    #[test]
    fn a_mid_entry_on_an_empty_stack_only_infers_the_jumps_source() {
        let mut s = Script::new();
        // The trace starts in the unwinder, which jumps to cleanup code.
        s.ev(10, EventKind::Jump, "_Unwind_Resume", "cleanup", false);
        s.ret(20, "cleanup", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-20 inferred",
                "1 _Unwind_Resume 10-10 inferred",
                "1 cleanup 10-20 mid",
            ]
        );
    }

    #[test]
    fn return_on_an_empty_stack_is_still_an_inferred_start() {
        let mut s = Script::new();
        s.ret(10, "leaf", "work");
        s.ret(20, "work", "main");
        let tree = s.tree();
        assert_eq!(
            tree,
            [
                "0 main 10-20 inferred",
                "1 work 10-20 inferred",
                "2 leaf 10-10 inferred",
            ]
        );
        assert!(tree.iter().all(|r| !r.contains(" mid")));
    }

    #[test]
    fn tail_call_replaces_the_top_frame() {
        let mut s = Script::new();
        s.call(10, "main", "a");
        s.ev(20, EventKind::Jump, "a", "b", true);
        s.ret(30, "b", "main");
        assert_eq!(
            s.tree(),
            ["0 main 10-30 inferred", "1 a 10-20", "1 b 20-30"]
        );
    }

    /// Parent of every span as (child, parent) names, by the store's rule.
    fn parents(s: Script) -> Vec<(String, String)> {
        let funcs = s.funcs;
        let (spans, _) = s.b.finish();
        spans
            .tree_order()
            .into_iter()
            .map(|(d, i)| {
                let name = |d: usize, i: usize| funcs.name(spans.lane(d)[i].func()).to_string();
                let up = spans.parent(d, i).map_or("-".into(), |p| name(d - 1, p));
                (name(d, i), up)
            })
            .collect()
    }

    #[test]
    fn calls_within_one_nanosecond_keep_their_parents() {
        // perf stamps whole runs of branches with one time: a stub called
        // at 10 tail-calls `yield` at 10, which calls `check` and returns
        // from it at 10 too, and then `lock` at 12. `check` lies inside
        // both the stub's and `yield`'s spans; it is `yield`'s child.
        let mut s = Script::new();
        s.call(5, "main", "stub");
        s.ev(10, EventKind::Jump, "stub", "yield", true);
        s.call(10, "yield", "check");
        s.ret(10, "check", "yield");
        s.call(12, "yield", "lock");
        s.ret(13, "lock", "yield");
        s.ret(20, "yield", "main");
        let p = parents(s);
        let of = |n: &str| p.iter().find(|(c, _)| c == n).unwrap().1.clone();
        assert_eq!(of("check"), "yield");
        assert_eq!(of("lock"), "yield");
        assert_eq!(of("stub"), "main");

        // And a zero-length last call of a function that then tail-calls
        // stays with the function that made it.
        let mut s = Script::new();
        s.call(5, "main", "a");
        s.call(10, "a", "last");
        s.ret(10, "last", "a");
        s.ev(10, EventKind::Jump, "a", "b", true);
        s.call(10, "b", "first");
        s.ret(10, "first", "b");
        s.ret(20, "b", "main");
        let p = parents(s);
        let of = |n: &str| p.iter().find(|(c, _)| c == n).unwrap().1.clone();
        assert_eq!(of("last"), "a");
        assert_eq!(of("first"), "b");
    }

    #[test]
    fn zero_length_calls_in_a_loop_within_one_nanosecond_keep_their_callers() {
        // main calls f three times at 10, and each f calls g at once: the
        // three f and three g are all 10-10, so every f lies in the span
        // of every f above the g; each g is its own f's.
        let mut s = Script::new();
        s.call(5, "main", "pre");
        s.ret(10, "pre", "main");
        for f in ["f1", "f2", "f3"] {
            s.call(10, "main", f);
            s.call(10, f, "g");
            s.ret(10, "g", f);
            s.ret(10, f, "main");
        }
        s.call(20, "main", "post");
        let funcs = s.funcs.clone();
        let (spans, _) = s.b.finish();
        let name = |d: usize, i: usize| funcs.name(spans.lane(d)[i].func()).to_string();
        let order: Vec<String> = spans
            .tree_order()
            .into_iter()
            .map(|(d, i)| name(d, i))
            .collect();
        assert_eq!(
            order,
            ["main", "pre", "f1", "g", "f2", "g", "f3", "g", "post"]
        );
        for (d, i) in spans.tree_order().into_iter().filter(|&(d, _)| d == 2) {
            let f = spans.parent(d, i).unwrap();
            assert_eq!(spans.children(1, f), i..i + 1);
        }
    }

    #[test]
    fn a_zero_length_call_just_after_a_decode_error_is_not_the_errors() {
        // The error's span ends at 67 on the lane where the next segment's
        // bottom frame begins at 67; the call at 67 is that frame's.
        let mut s = Script::new();
        s.call(19, "add_order", "memmove");
        s.ev(21, EventKind::Error, "", "!err Overflow packet", false);
        s.ev(67, EventKind::TraceBegin, "", "memmove", false);
        s.ret(67, "memmove", "add_order");
        s.call(90, "add_order", "free");
        s.ret(91, "free", "add_order");
        let p = parents(s);
        assert!(
            p.iter().all(|(_, up)| !up.starts_with("[decode error")),
            "{p:?}"
        );
        assert_eq!(p.iter().filter(|(c, _)| c == "memmove").count(), 2);
    }

    #[test]
    fn plt_stub_jumping_to_the_real_function_does_not_staircase() {
        let mut s = Script::new();
        for i in 0..3u64 {
            let t = 100 * i;
            s.call(t + 10, "main", "puts@plt");
            s.ev(t + 11, EventKind::Jump, "puts@plt", "puts", true);
            s.ret(t + 20, "puts", "main");
        }
        let tree = s.tree();
        assert!(tree
            .iter()
            .all(|r| r.starts_with('0') || r.starts_with('1')));
        assert_eq!(tree.iter().filter(|r| r.contains(" puts ")).count(), 3);
        assert_eq!(tree.iter().filter(|r| r.contains("puts@plt")).count(), 3);
    }

    #[test]
    fn longjmp_pops_down_to_the_landing_function() {
        let mut s = Script::new();
        s.call(10, "main", "a");
        s.call(20, "a", "b");
        s.call(30, "b", "c");
        s.call(40, "c", "longjmp");
        // longjmp lands in the middle of a.
        s.ev(50, EventKind::Jump, "longjmp", "a", false);
        s.ret(60, "a", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-60 inferred",
                "1 a 10-60",
                "2 b 20-50",
                "3 c 30-50",
                "4 longjmp 40-50",
            ]
        );
    }

    #[test]
    fn unwinding_in_a_loop_never_grows_the_stack() {
        let mut s = Script::new();
        s.call(0, "main", "run");
        for i in 0..1000u64 {
            let t = 10 + i * 10;
            s.call(t, "run", "thrower");
            s.call(t + 1, "thrower", "_Unwind_RaiseException");
            // The landing pad is in the middle of run.
            s.ev(
                t + 5,
                EventKind::Jump,
                "_Unwind_RaiseException",
                "run",
                false,
            );
        }
        let (_, stats) = {
            let Script { b, .. } = s;
            b.finish()
        };
        assert!(stats.max_depth <= 4, "{}", stats.max_depth);
    }

    #[test]
    fn syscall_and_untraced_spans_nest_under_the_caller() {
        let mut s = Script::new();
        s.call(10, "main", "write");
        s.ev(
            20,
            EventKind::TraceEnd(EndReason::Syscall),
            "write",
            "",
            false,
        );
        s.ev(50, EventKind::TraceBegin, "", "write", false);
        s.ev(
            60,
            EventKind::TraceEnd(EndReason::Other),
            "write",
            "",
            false,
        );
        s.ev(70, EventKind::TraceBegin, "", "write", false);
        s.ret(80, "write", "main");
        let tree = s.tree();
        assert_eq!(
            tree,
            [
                "0 main 10-80 inferred",
                "1 write 10-80",
                "2 [syscall] 20-50",
                "2 [untraced] 60-70",
            ]
        );
        let _ = (SYSCALL, UNTRACED);
    }

    /// How the coarse pass reports a call through a PLT stub that leaves
    /// the IP filter's ranges and returns: the stub's jump into the named
    /// library function, a disable that names no source, and an enable at
    /// the return address. One span for the callee, the gap under it.
    #[test]
    fn a_call_that_leaves_the_filter_is_one_span_with_an_untraced_child() {
        let mut s = Script::new();
        s.call(10, "main", "memcpy@plt");
        s.ev(12, EventKind::Jump, "memcpy@plt", "memcpy", true);
        s.ev(13, EventKind::TraceEnd(EndReason::Other), "", "", false);
        s.ev(40, EventKind::TraceBegin, "", "main", false);
        s.call(50, "main", "memcpy@plt");
        s.ev(52, EventKind::Jump, "memcpy@plt", "memcpy", true);
        s.ev(53, EventKind::TraceEnd(EndReason::Other), "", "", false);
        s.ev(70, EventKind::TraceBegin, "", "main", false);
        assert_eq!(
            s.tree(),
            [
                "0 main 10-70 inferred",
                "1 memcpy@plt 10-12",
                "1 memcpy 12-40",
                "2 [untraced] 13-40",
                "1 memcpy@plt 50-52",
                "1 memcpy 52-70",
                "2 [untraced] 53-70",
            ]
        );
    }

    /// Code entered from untraced code (main called by libc, a callback
    /// called by qsort) returns out of the filter: the return names no
    /// target, and the frame below is its caller. Nothing is synthesized,
    /// no `[unknown]` frame takes the returning one's place.
    #[test]
    fn a_return_out_of_the_filter_pops_to_the_untraced_caller() {
        let mut s = Script::new();
        s.ev(0, EventKind::TraceBegin, "", "_start", true);
        s.call(5, "_start", "__libc_start_main");
        s.ev(6, EventKind::TraceEnd(EndReason::Other), "", "", false);
        s.ev(10, EventKind::TraceBegin, "", "main", true);
        s.call(20, "main", "qsort");
        s.ev(21, EventKind::TraceEnd(EndReason::Other), "", "", false);
        s.ev(30, EventKind::TraceBegin, "", "cmp", true);
        s.ret(35, "cmp", "");
        s.ev(35, EventKind::TraceEnd(EndReason::Other), "", "", false);
        s.ev(40, EventKind::TraceBegin, "", "main", false);
        s.ret(50, "main", "");
        s.ev(50, EventKind::TraceEnd(EndReason::Other), "", "", false);
        s.ev(60, EventKind::TraceBegin, "", "_fini", true);
        s.ret(65, "_fini", "");
        s.ev(65, EventKind::TraceEnd(EndReason::Other), "", "", false);
        assert_eq!(
            s.tree(),
            [
                "0 _start 0-65",
                "1 __libc_start_main 5-65",
                "2 [untraced] 6-10",
                "2 main 10-50",
                "3 qsort 20-40",
                "4 [untraced] 21-30",
                "4 cmp 30-35",
                "4 [untraced] 35-40",
                "2 [untraced] 50-60",
                "2 _fini 60-65",
                "2 [untraced] 65-65",
            ]
        );
    }

    #[test]
    fn double_enable_and_disable_are_counted_not_believed() {
        let mut s = Script::new();
        // The enable that opens the thread is believed.
        s.ev(5, EventKind::TraceBegin, "", "main", false);
        s.ev(6, EventKind::TraceBegin, "", "other", false);
        s.call(10, "main", "a");
        s.ev(20, EventKind::TraceEnd(EndReason::Other), "a", "", false);
        s.ev(21, EventKind::TraceEnd(EndReason::Other), "a", "", false);
        s.ev(30, EventKind::TraceBegin, "", "a", false);
        s.ret(40, "a", "main");
        let stats = s.b.stats.clone();
        assert_eq!(stats.double_enable, 1);
        assert_eq!(stats.double_disable, 1);
        assert_eq!(
            s.tree(),
            ["0 main 5-40 inferred", "1 a 10-40", "2 [untraced] 20-30"]
        );
    }

    #[test]
    fn an_enable_after_an_undecoded_kernel_entry_returns_to_user_space() {
        // perf 5.x with kernel tracing but no kernel branches: `hw int` into
        // the kernel, then `tr strt` back to user code.
        let mut s = Script::new();
        s.call(10, "main", "work");
        s.ev(20, EventKind::Interrupt, "work", "asm_exc_page_fault", true);
        s.ev(30, EventKind::TraceBegin, "", "work", false);
        s.ret(40, "work", "main");
        assert_eq!(s.b.stats.double_enable, 0);
        assert_eq!(
            s.tree(),
            [
                "0 main 10-40 inferred",
                "1 work 10-40",
                "2 asm_exc_page_fault 20-30"
            ]
        );
    }

    #[test]
    fn signal_handler_nests_under_the_interrupted_frame_and_returns_to_it() {
        let mut s = Script::new();
        s.call(10, "main", "work");
        s.ev(20, EventKind::TraceEnd(EndReason::Async), "work", "", false);
        // The kernel delivers the signal: tracing resumes at the handler.
        s.ev(30, EventKind::TraceBegin, "", "handler", true);
        s.call(35, "handler", "puts");
        s.ret(36, "puts", "handler");
        s.ret(40, "handler", "__restore_rt");
        s.ev(
            41,
            EventKind::TraceEnd(EndReason::Syscall),
            "__restore_rt",
            "",
            false,
        );
        s.ev(50, EventKind::TraceBegin, "", "work", false);
        s.ret(60, "work", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-60 inferred",
                "1 work 10-60",
                "2 [untraced] 20-30",
                "2 handler 30-40",
                "3 puts 35-36",
                "2 __restore_rt 40-50 inferred",
                "3 [syscall] 41-50",
            ]
        );
    }

    #[test]
    fn iret_to_user_space_with_no_user_frame_nests_the_kernel_under_its_target() {
        // The trace (or the resume after an overflow) starts in the page
        // fault handler; the iret shows which user frame it interrupted.
        let mut s = Script::new();
        s.kernel = vec![
            "asm_exc_page_fault",
            "exc_page_fault",
            "error_return",
            "native_iret",
        ];
        s.ev(10, EventKind::TraceBegin, "", "asm_exc_page_fault", true);
        s.call(12, "asm_exc_page_fault", "exc_page_fault");
        s.ret(20, "exc_page_fault", "asm_exc_page_fault");
        s.ev(
            22,
            EventKind::Jump,
            "asm_exc_page_fault",
            "error_return",
            true,
        );
        s.ev(24, EventKind::Jump, "error_return", "native_iret", true);
        s.ev(30, EventKind::KernelReturn, "native_iret", "work", false);
        s.ret(40, "work", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-40 inferred",
                "1 work 10-40 inferred",
                "2 asm_exc_page_fault 10-22",
                "3 exc_page_fault 12-20",
                "2 error_return 22-24",
                "2 native_iret 24-30",
            ]
        );
    }

    #[test]
    fn iret_into_a_signal_handler_nests_it_under_the_interrupted_frame() {
        let mut s = Script::new();
        s.kernel = vec![
            "asm_sysvec_apic_timer_interrupt",
            "native_iret",
            "entry_SYSCALL_64",
        ];
        s.call(10, "main", "work");
        s.ev(
            20,
            EventKind::Interrupt,
            "work",
            "asm_sysvec_apic_timer_interrupt",
            true,
        );
        s.ev(
            25,
            EventKind::Jump,
            "asm_sysvec_apic_timer_interrupt",
            "native_iret",
            true,
        );
        // The kernel delivers a signal: the iret goes to the handler.
        s.ev(30, EventKind::KernelReturn, "native_iret", "handler", true);
        s.ret(40, "handler", "__restore_rt");
        s.ev(
            41,
            EventKind::Syscall,
            "__restore_rt",
            "entry_SYSCALL_64",
            true,
        );
        s.ev(
            45,
            EventKind::KernelReturn,
            "entry_SYSCALL_64",
            "work",
            false,
        );
        s.ret(50, "work", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-50 inferred",
                "1 work 10-50",
                "2 asm_sysvec_apic_timer_interrupt 20-25",
                "2 native_iret 25-30",
                "2 handler 30-40",
                "2 __restore_rt 40-45 inferred",
                "3 entry_SYSCALL_64 41-45",
            ]
        );
    }

    /// A round trip into the kernel whose way back was not seen (kernel
    /// code without its binary, a decode error there) still ends where
    /// user code resumes: user code never runs under the kernel's frames.
    #[test]
    fn a_kernel_round_trip_ends_where_user_code_resumes_however_it_ended() {
        let mut s = Script::new();
        s.kernel = vec!["[kernel]", "schedule"];
        s.call(10, "main", "work");
        s.ev(20, EventKind::Interrupt, "work", "[kernel]", true);
        s.call(22, "[kernel]", "schedule");
        // The flow comes back in user code, at a function never seen
        // called, without an iret the walk could follow.
        s.ev(30, EventKind::Jump, "schedule", "other", false);
        s.ret(40, "other", "work");
        s.ret(50, "work", "main");
        let tree = s.tree();
        assert!(
            tree.contains(&"2 [kernel] 20-30".to_string())
                && tree.contains(&"3 schedule 22-30".to_string())
                && tree.contains(&"2 other 30-40 inferred".to_string()),
            "{tree:?}"
        );
    }

    /// Kernel frames seeded from a checkpoint (a chunk or a fine-pass
    /// segment that starts inside a system call) are kernel frames still.
    #[test]
    fn seeded_kernel_frames_end_when_user_code_runs() {
        let mut s = Script::new();
        s.kernel = vec!["entry_SYSCALL_64"];
        let main = s.f("main");
        let entry = s.f("entry_SYSCALL_64");
        s.b.seed(
            &[
                OpenFrame {
                    func: main,
                    start: 0,
                    call_site: 0,
                    kernel: false,
                    mid_from: UNKNOWN,
                },
                OpenFrame {
                    func: entry,
                    start: 5,
                    call_site: KERNEL_ENTRY,
                    kernel: true,
                    mid_from: UNKNOWN,
                },
            ],
            10,
            true,
        );
        s.call(20, "main", "work");
        s.ret(30, "work", "main");
        assert_eq!(
            s.tree(),
            ["0 main 0-30", "1 entry_SYSCALL_64 5-20", "1 work 20-30"]
        );
    }

    #[test]
    fn iret_into_interrupted_kernel_code_keeps_its_frames() {
        let mut s = Script::new();
        s.kernel = vec![
            "entry_SYSCALL_64",
            "do_syscall_64",
            "asm_sysvec_apic_timer_interrupt",
            "native_iret",
        ];
        s.call(10, "main", "read");
        s.ev(20, EventKind::Syscall, "read", "entry_SYSCALL_64", true);
        s.call(22, "entry_SYSCALL_64", "do_syscall_64");
        s.ev(
            25,
            EventKind::Interrupt,
            "do_syscall_64",
            "asm_sysvec_apic_timer_interrupt",
            true,
        );
        s.ev(
            28,
            EventKind::Jump,
            "asm_sysvec_apic_timer_interrupt",
            "native_iret",
            true,
        );
        s.ev(
            30,
            EventKind::KernelReturn,
            "native_iret",
            "do_syscall_64",
            false,
        );
        s.ret(35, "do_syscall_64", "entry_SYSCALL_64");
        s.ev(
            40,
            EventKind::KernelReturn,
            "entry_SYSCALL_64",
            "read",
            false,
        );
        s.ret(50, "read", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-50 inferred",
                "1 read 10-50",
                "2 entry_SYSCALL_64 20-40",
                "3 do_syscall_64 22-35",
                "4 asm_sysvec_apic_timer_interrupt 25-28",
                "4 native_iret 28-30",
            ]
        );
    }

    #[test]
    fn a_tail_call_as_the_first_event_keeps_its_source() {
        // Where the trace began is worth showing even with no time in it;
        // magic-trace drops the source (peer case 07).
        let mut s = Script::new();
        s.ev(10, EventKind::Jump, "call_destructors", "_fini", true);
        s.ret(20, "_fini", "_dl_catch_exception");
        assert_eq!(
            s.tree(),
            [
                "0 _dl_catch_exception 10-20 inferred",
                "1 _fini 10-20",
                "1 call_destructors 10-10 inferred",
            ]
        );
    }

    #[test]
    fn overflow_resets_the_stack_and_starts_a_segment() {
        let mut s = Script::new();
        s.call(19, "add_order", "memmove");
        s.ret(20, "memmove", "add_order");
        s.call(21, "add_order", "memmove");
        s.ev(21, EventKind::Error, "", "!err Overflow packet", false);
        s.ev(67, EventKind::TraceBegin, "", "memmove", false);
        s.ret(141, "memmove", "add_order");
        assert_eq!(
            s.tree(),
            [
                "0 add_order 19-21 inferred",
                "1 memmove 19-20",
                "0 [decode error: Overflow packet] 21-67",
                "1 memmove 21-21",
                "0 add_order 67-141 inferred",
                "1 memmove 67-141 inferred",
            ]
        );
    }

    #[test]
    fn decode_error_keeps_a_stack_it_can_trust() {
        let mut s = Script::new();
        s.call(10, "main", "a");
        s.call(20, "a", "b");
        s.ev(25, EventKind::Error, "", "!err bad opcode", false);
        // Decoding resumes in a, which is still on the stack.
        s.ev(40, EventKind::TraceBegin, "", "a", false);
        s.ret(50, "a", "main");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-50 inferred",
                "1 a 10-50",
                "2 b 20-40",
                "3 [decode error: bad opcode] 25-40",
            ]
        );
    }

    #[test]
    fn missing_binary_is_a_labelled_frame() {
        let mut s = Script::new();
        s.call(10, "main", "!nobin /lib/libfoo.so");
        s.ev(11, EventKind::Error, "", "!nobin /lib/libfoo.so", false);
        s.ev(30, EventKind::TraceBegin, "", "main", false);
        s.call(40, "main", "a");
        let tree = s.tree();
        assert_eq!(
            tree,
            [
                "0 main 10-40 inferred",
                "1 [no binary: /lib/libfoo.so] 10-30",
                "1 a 40-40",
            ]
        );
    }

    #[test]
    fn return_into_a_frame_lower_on_the_stack_pops_to_it() {
        let mut s = Script::new();
        s.call(10, "main", "a");
        s.call(20, "a", "b");
        // b's frame returns straight to main (a was tail-called away unseen).
        s.ret(30, "b", "main");
        s.call(40, "main", "c");
        assert_eq!(
            s.tree(),
            [
                "0 main 10-40 inferred",
                "1 a 10-30",
                "2 b 20-30",
                "1 c 40-40"
            ]
        );
    }

    #[test]
    fn return_past_a_label_renames_the_caller() {
        let mut s = Script::new();
        s.call(10, "_start", "_dl_start");
        // _dl_start returns right after the call, into _dl_start_user.
        let f = s.f("_dl_start");
        let to_fn = s.f("_dl_start_user");
        let ev = Event {
            time: 20,
            kind: EventKind::Return,
            from: 0x5000,
            to: 0x1000 + 10 * 16 + 5,
            from_fn: f,
            to_fn,
            to_is_entry: false,
            estimated: false,
        };
        s.b.event(&ev, &s.funcs);
        s.call(30, "_dl_start_user", "main");
        assert_eq!(
            s.tree(),
            [
                "0 _start 10-20 inferred",
                "1 _dl_start 10-20",
                "0 _dl_start_user 20-30",
                "1 main 30-30",
            ]
        );
    }

    #[test]
    fn a_walk_seeded_from_a_checkpoint_renames_past_a_label_too() {
        // The fine pass seeds its builder with a checkpoint's frames taken
        // inside _dl_start: its depths must follow the coarse pass's, which
        // renamed _start to _dl_start_user rather than nesting it.
        let mut coarse = Script::new();
        coarse.call(10, "_start", "_dl_start");
        let kept: Vec<OpenFrame> = coarse.b.frames().collect();
        assert_eq!(kept[1].call_site, 0x1000 + 10 * 16);
        let mut s = Script::new();
        s.funcs = coarse.funcs;
        s.b.seed(&kept, 15, true);
        let ev = Event {
            time: 20,
            kind: EventKind::Return,
            from: 0x5000,
            to: 0x1000 + 10 * 16 + 5,
            from_fn: s.f("_dl_start"),
            to_fn: s.f("_dl_start_user"),
            to_is_entry: false,
            estimated: false,
        };
        s.b.event(&ev, &s.funcs);
        assert_eq!(s.b.top_level(), 0);
        s.call(30, "_dl_start_user", "main");
        assert_eq!(s.b.top_level(), 1);
    }

    #[test]
    fn a_stack_deeper_than_max_depth_starts_over_and_keeps_every_call() {
        let mut s = Script::new();
        let n = 3 * MAX_DEPTH as u64 + 5;
        s.call(0, "main", "f");
        for i in 1..n {
            s.call(i, "f", "f");
        }
        for i in 0..n {
            s.ret(n + i, "f", if i + 1 == n { "main" } else { "f" });
        }
        let (spans, stats) = {
            let Script { b, .. } = s;
            b.finish()
        };
        assert!(stats.max_depth <= MAX_DEPTH, "{}", stats.max_depth);
        assert!(spans.depth() <= MAX_DEPTH, "{}", spans.depth());
        // Three on the way down the calls; three more on the way back up,
        // as the returns past the last restart synthesize their callers.
        assert_eq!(stats.depth_resets, 6);
        // Every call still has its span; the returns past a restart land
        // in callers synthesized below, as after any segment's start.
        assert!(spans.span_count() > n as usize, "{}", spans.span_count());
    }

    #[test]
    fn returns_below_the_start_are_bounded_by_max_depth_too() {
        let mut s = Script::new();
        let n = 2 * MAX_DEPTH as u64 + 1;
        for i in 0..n {
            s.ret(i, "f", "f");
        }
        let (spans, stats) = {
            let Script { b, .. } = s;
            b.finish()
        };
        assert!(spans.depth() <= MAX_DEPTH, "{}", spans.depth());
        assert_eq!(stats.depth_resets, 2);
        // The first return's own frame, then each one's caller.
        assert_eq!(stats.inferred_frames, n + 1);
    }
}
