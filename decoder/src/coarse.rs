//! The coarse pass: one thread's PT through libipt's block decoder into
//! branch events, timed, and on into the stack builder.
//!
//! Blocks end at every call, return and jump, so each block end is a
//! candidate event; its target is the next block's start. Only jumps that
//! leave the current function become events, which a cached address range
//! makes cheap. A checkpoint is kept at every PSB: trace offset, time, IP
//! and the call stack there, so later passes can re-decode any window
//! without starting over.

use crate::block::{Block, BlockEnd, BlockItem, PtError};
use crate::clock::{Clock, Stamp};
use crate::event::{EndReason, Event, EventKind, FuncId, FuncTable, UNKNOWN};
use crate::ffi::{BlockDecoder, Image};
use crate::flow::FlowDecoder;
use crate::memory::Memory;
use crate::progress::DecodeProgress;
use crate::resolve::{Resolve, Resolved};
use crate::stack::{StackBuilder, StackStats};
use crate::store::ThreadSpans;

/// A block walk over one AUX queue: libipt's block decoder, or our own
/// flow decoder that agrees with it ([`crate::flow`]).
pub trait Blocks<'i> {
    /// What the process's code is read from.
    type Image: 'i;
    /// Decodes against `image` from now on (e.g. after a context switch).
    fn set_image(&mut self, image: &'i Self::Image) -> Result<(), PtError>;
    /// How far into the trace decoding has got.
    fn offset(&self) -> u64;
    /// While PSB+ status is reported: an offset past that PSB.
    fn status_offset(&self) -> u64 {
        self.offset()
    }
    /// PSBs at or before this offset are behind the blocks reported from
    /// now on. libipt reads a PSB+ with the packet before it, so its
    /// offset is all it can tell.
    fn psbs_behind(&self) -> u64 {
        self.offset()
    }
    /// The PSB whose PSB+ was read last, if the decoder tells.
    fn psb_entered(&self) -> Option<u64> {
        None
    }
    /// Walks the whole buffer; `on_item` returns false to stop.
    fn walk(&mut self, on_item: impl FnMut(&mut Self, BlockItem) -> bool);
}

impl<'i> Blocks<'i> for BlockDecoder<'i> {
    type Image = Image<'i>;
    fn set_image(&mut self, image: &'i Image<'i>) -> Result<(), PtError> {
        BlockDecoder::set_image(self, image)
    }
    fn offset(&self) -> u64 {
        BlockDecoder::offset(self)
    }
    fn walk(&mut self, on_item: impl FnMut(&mut Self, BlockItem) -> bool) {
        BlockDecoder::walk(self, on_item)
    }
}

impl<'i> Blocks<'i> for FlowDecoder<'i> {
    type Image = Memory;
    fn set_image(&mut self, image: &'i Memory) -> Result<(), PtError> {
        FlowDecoder::set_image(self, image)
    }
    fn offset(&self) -> u64 {
        FlowDecoder::offset(self)
    }
    fn status_offset(&self) -> u64 {
        FlowDecoder::status_offset(self)
    }
    fn psbs_behind(&self) -> u64 {
        // Not a PSB that starts right where the trace is consumed to (a
        // TIP just before it ended the block): it is still ahead.
        FlowDecoder::offset(self).saturating_sub(1)
    }
    fn psb_entered(&self) -> Option<u64> {
        FlowDecoder::psb_entered(self)
    }
    fn walk(&mut self, on_item: impl FnMut(&mut Self, BlockItem) -> bool) {
        FlowDecoder::walk(self, on_item)
    }
}

/// What a fine pass watches of a walk besides its timed output: every
/// block and event at its instruction position, and every timing anchor.
/// The coarse pass watches nothing (`()`), at no cost.
pub trait Observe {
    /// A block of `slot`'s thread, its first instruction at `pos`.
    fn block(&mut self, slot: usize, pos: u64, b: &Block) {
        let _ = (slot, pos, b);
    }
    /// An event as emitted, before it is timed.
    fn event(&mut self, slot: usize, pos: u64, ev: &Event) {
        let _ = (slot, pos, ev);
    }
    /// Time is `tsc` at instruction position `pos`.
    fn anchor(&mut self, pos: u64, tsc: u64) {
        let _ = (pos, tsc);
    }
    /// Whether it has seen all it can keep: the walk stops.
    fn full(&self) -> bool {
        false
    }
}

impl Observe for () {}

/// Where re-decoding can start: one per PSB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    pub stacks: Vec<(FuncId, u64)>,
}

/// A thread whose code appears in a queue's trace.
pub struct QueueThread {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Index of its process in the `procs` given to [`decode_queue`].
    pub proc: usize,
}

/// Who runs on a per-CPU queue: from each `(time, slot)` on, the thread
/// `threads[slot]` does, until the next entry. Sorted by time (perf ns).
pub type Schedule = [(u64, usize)];

/// The thread `schedule` puts on the CPU at `time`; before its first
/// entry, the one that entry names (tracing starts with a switch-in).
pub fn scheduled(schedule: &Schedule, time: u64) -> Option<usize> {
    let i = schedule.partition_point(|&(t, _)| t <= time);
    schedule.get(i.saturating_sub(1)).map(|&(_, slot)| slot)
}

/// What the clock holds until it knows the time: an event of a thread
/// slot, or a checkpoint.
#[derive(Clone, Debug)]
pub(crate) enum Held {
    Event(Event, usize),
    Checkpoint {
        offset: u64,
        ip: u64,
        insn: u64,
        slot: usize,
        begins: bool,
    },
}

/// Where a walk's timed events and checkpoints go, per thread slot.
pub trait Sink {
    fn event(&mut self, slot: usize, ev: &Event, funcs: &FuncTable);
    fn checkpoint(&mut self, slot: usize, at: Checkpoint);
}

/// One thread's stack builder and checkpoints.
#[derive(Clone)]
struct Out {
    builder: StackBuilder,
    checkpoints: Vec<Checkpoint>,
    /// The builder's (segment, base) at each checkpoint.
    marks: Vec<(usize, i32)>,
    stacks: Vec<(FuncId, u64)>,
    figures: WalkFigures,
}

/// The sink that builds each thread's stacks as its events arrive in time
/// order.
pub struct ThreadBuilders {
    outs: Vec<Out>,
}

impl ThreadBuilders {
    pub fn new(threads: &[QueueThread]) -> ThreadBuilders {
        ThreadBuilders {
            outs: threads
                .iter()
                .map(|t| Out {
                    builder: StackBuilder::new(t.pid, t.tid, t.comm.clone()),
                    checkpoints: Vec::new(),
                    marks: Vec::new(),
                    stacks: Vec::new(),
                    figures: WalkFigures::default(),
                })
                .collect(),
        }
    }

    /// Adds a walk's counters to its threads'.
    pub fn add_figures(&mut self, figures: Vec<WalkFigures>) {
        for (o, f) in self.outs.iter_mut().zip(figures) {
            let of = &mut o.figures;
            of.blocks += f.blocks;
            of.instructions += f.instructions;
            of.ticks += f.ticks;
            of.overflows += f.overflows;
            of.errors.extend(f.errors);
        }
    }

    /// Spans built so far, over all threads.
    pub fn span_count(&self) -> usize {
        self.outs.iter().map(|o| o.builder.span_count()).sum()
    }

    /// What [`finish`](Self::finish) would give now, frames still open
    /// closed at their thread's last event: a partial model's threads.
    pub fn snapshot(&self) -> Vec<ThreadDecode> {
        ThreadBuilders {
            outs: self.outs.clone(),
        }
        .finish()
    }

    pub fn finish(self) -> Vec<ThreadDecode> {
        self.outs
            .into_iter()
            .map(|mut o| {
                let (spans, stack, bases) = o.builder.finish_with_bases();
                for (c, &(seg, base)) in o.checkpoints.iter_mut().zip(&o.marks) {
                    let last = bases.get(seg).copied().unwrap_or(base);
                    c.depth = (base - last).max(0) as u32;
                }
                ThreadDecode {
                    spans,
                    stack,
                    walk: o.figures,
                    checkpoints: o.checkpoints,
                    stacks: o.stacks,
                }
            })
            .collect()
    }
}

impl Sink for ThreadBuilders {
    fn event(&mut self, slot: usize, ev: &Event, funcs: &FuncTable) {
        self.outs[slot].builder.event(ev, funcs);
    }

    fn checkpoint(&mut self, slot: usize, mut at: Checkpoint) {
        let o = &mut self.outs[slot];
        at.stack_start = o.stacks.len() as u32;
        o.stacks.extend(o.builder.frames());
        at.stack_len = o.stacks.len() as u32 - at.stack_start;
        o.marks.push(o.builder.mark());
        o.checkpoints.push(at);
    }
}

/// A timed item of a per-CPU queue, kept so that queues can be merged in
/// time order: a thread that migrates between CPUs has one stack.
#[derive(Clone, Debug)]
pub enum Timed {
    Event(Event),
    Checkpoint(Checkpoint),
}

/// The sink that keeps a queue's items, by thread slot, in time order.
#[derive(Default)]
pub struct TimedItems {
    pub items: Vec<(usize, Timed)>,
}

impl TimedItems {
    fn time(t: &Timed) -> u64 {
        match t {
            Timed::Event(e) => e.time,
            Timed::Checkpoint(c) => c.time,
        }
    }

    /// Merges queues into `sink` in time order (queue order breaks ties),
    /// each queue's items in its own trace order. Times within a queue can
    /// go back (a damaged TSC, or a conversion that wraps, as perf's
    /// does): such an item sorts at the latest time before it, so a CPU's
    /// calls, returns and checkpoints never swap.
    pub fn merge_into(queues: Vec<TimedItems>, sink: &mut dyn Sink, funcs: &FuncTable) {
        let mut all = Vec::with_capacity(queues.iter().map(|q| q.items.len()).sum());
        for q in queues {
            let mut latest = 0;
            all.extend(q.items.into_iter().map(|(slot, t)| {
                latest = latest.max(Self::time(&t));
                (latest, slot, t)
            }));
        }
        // Stable, and each queue's keys never fall: its order is kept.
        all.sort_by_key(|&(key, ..)| key);
        for (_, slot, t) in all {
            match t {
                Timed::Event(e) => sink.event(slot, &e, funcs),
                Timed::Checkpoint(c) => sink.checkpoint(slot, c),
            }
        }
    }
}

impl Sink for TimedItems {
    fn event(&mut self, slot: usize, ev: &Event, _funcs: &FuncTable) {
        self.items.push((slot, Timed::Event(*ev)));
    }

    fn checkpoint(&mut self, slot: usize, at: Checkpoint) {
        self.items.push((slot, Timed::Checkpoint(at)));
    }
}

/// Slots of the walker's direct-mapped caches.
const RECENT: usize = 1024;

const NO_RANGE: Resolved = Resolved {
    func: UNKNOWN,
    lo: 1,
    hi: 0,
    entry: 0,
    provisional: false,
};

fn recent_slot(addr: u64) -> usize {
    // Fibonacci hashing: call sites are spread, low bits alone collide.
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % RECENT
}

struct Walker<'r, 'i, R: Resolve, D: Blocks<'i>, O: Observe> {
    obs: &'r mut O,
    /// At the next PSB, stop instead of checkpointing (a fine pass's end).
    stop_at_psb: bool,
    stopped: bool,
    /// A PSB found tracing off: checkpoint at the next block.
    psb_pending: bool,
    /// A per-CPU queue put another thread on the CPU: it may need a
    /// checkpoint of its own at the next block (see `switch_checkpoint`).
    switched: bool,
    /// Per thread slot, `next_psb` when it last got a checkpoint (0: never).
    checkpointed: Vec<usize>,
    procs: &'r mut [R],
    images: &'r [&'i D::Image],
    thread_proc: Vec<usize>,
    schedule: &'r Schedule,
    /// The thread on the CPU, and its process.
    slot: usize,
    proc: usize,
    /// The last time a timing packet gave (TSC), for scheduling.
    last_tsc: Option<u64>,
    funcs: &'r mut FuncTable,
    to_ns: &'r (dyn Fn(u64) -> u64 + Sync),
    clock: Clock<Held>,
    sink: &'r mut dyn Sink,
    queue: u32,
    figures: Vec<WalkFigures>,
    progress: Option<&'r DecodeProgress>,
    /// Instructions retired so far.
    pos: u64,
    /// A branch whose target the next block or event will tell.
    branch: Option<(BlockEnd, u64)>,
    /// The next block starts a run of trace (after a sync or an error).
    need_begin: bool,
    cur: Resolved,
    /// Recently resolved functions, by address: calls and returns bounce
    /// between a few functions, which one cached range keeps missing.
    recent: Box<[Resolved; RECENT]>,
    /// Call targets already offered to `learn_entry`, by address.
    learned: Box<[u64; RECENT]>,
    psbs: &'r [u64],
    next_psb: usize,
    /// `psbs[next_psb]`, or never.
    next_psb_at: u64,
    /// A chunk walk records the clock's input here instead of timing it,
    /// and stops at the PSB at offset `end_at` (where the next chunk
    /// starts): see [`crate::chunks`].
    record: Option<Recording>,
    end_at: u64,
    /// The trace-begin being emitted is the one a block after a sync makes.
    sync_begin: bool,
    /// A chunk walk still owes the trace-begin its first sync asks for.
    from_sync: bool,
}

/// What a chunk walk records in place of an event or checkpoint.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    Held(Held),
    /// An event (of a thread slot) that touches code no symbol covers:
    /// resolved, filtered and learned from by the replay, in order, as one
    /// walk would have (chunks do not learn).
    Raw(Event, usize),
    /// A timing anchor: TSC at the entry's position.
    Anchor(u64),
}

/// Marks on the items at a chunk's start that the replay mends.
pub(crate) mod seam {
    /// The trace-begin its initial sync made, if that was the first event.
    pub const SYNC_BEGIN: u8 = 1;
    /// Its first checkpoint (at the chunk's own PSB).
    pub const FIRST_CHECKPOINT: u8 = 2;
}

/// A recorded item at its instruction position, with the time the chunk's
/// own clock gave it (in `body` only).
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub pos: u64,
    pub stamp: Stamp,
    pub item: Item,
    pub seam: u8,
}

/// A chunk walk's output. The chunk times what lies between its first and
/// last timing anchors itself, exactly as one walk would; what comes
/// before the first (`head`) and after the last (`tail`) needs its
/// neighbours' anchors, and the replay times it.
#[derive(Default)]
pub(crate) struct Recording {
    pub head: Vec<Entry>,
    pub first_anchor: Option<(u64, u64)>,
    /// Timed items in order, with every anchor after the first (so the
    /// replay can time them itself instead).
    pub body: Vec<Entry>,
    pub tail: Vec<Entry>,
    /// The clock at the end: last anchor, and the rate before it.
    pub end_anchor: Option<(u64, u64)>,
    pub end_rate: Option<(u64, u64)>,
    /// At the end: instructions walked, and whether tracing was off.
    pub end_pos: u64,
    pub end_need_begin: bool,
    /// Its PSBs that wait for the next chunk's first checkpoint.
    pub orphans: Vec<u64>,
    any_checkpoint: bool,
    clock: Clock<(u64, Item, u8)>,
}

impl Recording {
    /// A recording that fills `body` (a recycled buffer).
    pub fn with_body(mut body: Vec<Entry>) -> Recording {
        body.clear();
        Recording {
            body,
            ..Recording::default()
        }
    }

    fn push(&mut self, pos: u64, item: Item, seam: u8) {
        if self.first_anchor.is_none() {
            self.head.push(Entry {
                pos,
                stamp: NO_STAMP,
                item,
                seam,
            });
        } else {
            self.clock.push(pos, (pos, item, seam));
        }
    }

    fn anchor(&mut self, pos: u64, tsc: u64) {
        if self.first_anchor.is_none() {
            self.first_anchor = Some((pos, tsc));
            self.clock.anchor(pos, tsc, |_, _| {});
            return;
        }
        let body = &mut self.body;
        self.clock.anchor(pos, tsc, |stamp, (pos, item, seam)| {
            body.push(Entry {
                pos,
                stamp,
                item,
                seam,
            })
        });
        body.push(Entry {
            pos,
            stamp: NO_STAMP,
            item: Item::Anchor(tsc),
            seam: 0,
        });
    }

    fn finish(&mut self, pos: u64, need_begin: bool) {
        self.tail = self
            .clock
            .take_pending()
            .into_iter()
            .map(|(_, (pos, item, seam))| Entry {
                pos,
                stamp: NO_STAMP,
                item,
                seam,
            })
            .collect();
        (self.end_anchor, self.end_rate) = self.clock.state();
        self.end_pos = pos;
        self.end_need_begin = need_begin;
    }
}

const NO_STAMP: Stamp = Stamp {
    tsc: 0,
    exact: false,
};

/// Runs the coarse pass over one thread's trace (AUX queue `queue`).
/// `psbs` are the trace's PSB offsets (for checkpoints); `to_ns` converts
/// TSC to perf time.
#[allow(clippy::too_many_arguments)]
pub fn decode_thread<'i, D: Blocks<'i>, R: Resolve>(
    dec: D,
    queue: u32,
    image: &'i D::Image,
    resolver: R,
    funcs: &mut FuncTable,
    to_ns: &(dyn Fn(u64) -> u64 + Sync),
    psbs: &[u64],
    thread: (i32, i32, String),
    progress: Option<&DecodeProgress>,
) -> Result<ThreadDecode, PtError> {
    let threads = [QueueThread {
        pid: thread.0,
        tid: thread.1,
        comm: thread.2,
        proc: 0,
    }];
    let mut procs = [resolver];
    let mut sink = ThreadBuilders::new(&threads);
    let figures = decode_queue(
        dec,
        queue,
        &[image],
        &mut procs,
        &[0],
        &[],
        funcs,
        to_ns,
        psbs,
        &mut sink,
        progress,
    )?;
    sink.add_figures(figures);
    Ok(sink.finish().pop().expect("one thread in, one out"))
}

/// Runs the coarse pass over one AUX queue: a thread's trace, or a CPU's
/// that `schedule` divides among `threads` (from context-switch
/// sideband). The thread is chosen again at every trace enable, since in
/// user-space tracing a context switch always passes through the kernel;
/// the decoder's image follows the thread's process (`images[proc]`,
/// resolved by `procs[proc]`; `thread_procs[slot]` is a thread's process).
/// Timed events go to `sink`; returns each thread's walk counters.
#[allow(clippy::too_many_arguments)]
pub fn decode_queue<'i, D: Blocks<'i>, R: Resolve>(
    dec: D,
    queue: u32,
    images: &[&'i D::Image],
    procs: &mut [R],
    thread_procs: &[usize],
    schedule: &Schedule,
    funcs: &mut FuncTable,
    to_ns: &(dyn Fn(u64) -> u64 + Sync),
    psbs: &[u64],
    sink: &mut dyn Sink,
    progress: Option<&DecodeProgress>,
) -> Result<Vec<WalkFigures>, PtError> {
    let queue_walk = QueueWalk {
        queue,
        images,
        thread_procs,
        schedule,
        to_ns,
        psbs,
        stop_at_psb: false,
        progress,
    };
    walk_queue(dec, queue_walk, procs, funcs, sink, &mut ())
}

/// What [`walk_queue`] walks, and how far.
pub struct QueueWalk<'a, 'i, I> {
    pub queue: u32,
    pub images: &'a [&'i I],
    pub thread_procs: &'a [usize],
    pub schedule: &'a Schedule,
    pub to_ns: &'a (dyn Fn(u64) -> u64 + Sync),
    /// Checkpoint offsets; or, with `stop_at_psb`, where to stop.
    pub psbs: &'a [u64],
    pub stop_at_psb: bool,
    pub progress: Option<&'a DecodeProgress>,
}

/// [`decode_queue`] with an observer: the fine pass re-walks one PSB
/// segment this way (`stop_at_psb`, `psbs` holding the segment's end)
/// and sees every block and event at its instruction position.
pub fn walk_queue<'i, D: Blocks<'i>, R: Resolve, O: Observe>(
    dec: D,
    q: QueueWalk<'_, 'i, D::Image>,
    procs: &mut [R],
    funcs: &mut FuncTable,
    sink: &mut dyn Sink,
    obs: &mut O,
) -> Result<Vec<WalkFigures>, PtError> {
    run(dec, q, procs, funcs, sink, obs, None).map(|(figures, _)| figures)
}

/// A chunk of a queue walked on its own into `rec`, for [`crate::chunks`]
/// to replay, with its walk counters. It stops at the PSB at `end_at`
/// (relative to its trace), where the next chunk starts.
pub(crate) fn walk_chunk<'i, D: Blocks<'i>, R: Resolve>(
    dec: D,
    q: QueueWalk<'_, 'i, D::Image>,
    (end_at, rec): (u64, Recording),
    procs: &mut [R],
    funcs: &mut FuncTable,
) -> Result<(Vec<WalkFigures>, Recording), PtError> {
    let mut none = ();
    let chunk = Some((end_at, rec));
    let (figures, rec) = run(dec, q, procs, funcs, &mut NoSink, &mut none, chunk)?;
    Ok((figures, rec.unwrap_or_default()))
}

/// A sink that drops what it is given: for walks that record (chunks) or
/// observe (the fine pass) instead.
pub(crate) struct NoSink;

impl Sink for NoSink {
    fn event(&mut self, _: usize, _: &Event, _: &FuncTable) {}
    fn checkpoint(&mut self, _: usize, _: Checkpoint) {}
}

fn run<'i, D: Blocks<'i>, R: Resolve, O: Observe>(
    mut dec: D,
    q: QueueWalk<'_, 'i, D::Image>,
    procs: &mut [R],
    funcs: &mut FuncTable,
    sink: &mut dyn Sink,
    obs: &mut O,
    chunk: Option<(u64, Recording)>,
) -> Result<(Vec<WalkFigures>, Option<Recording>), PtError> {
    let (end_at, record) = match chunk {
        Some((end, rec)) => (end, Some(rec)),
        None => (u64::MAX, None),
    };
    let QueueWalk {
        queue,
        images,
        thread_procs,
        schedule,
        to_ns,
        psbs,
        stop_at_psb,
        progress,
    } = q;
    let slot = schedule.first().map_or(0, |&(_, s)| s);
    let proc = thread_procs.get(slot).copied().unwrap_or(0);
    if let Some(image) = images.get(proc) {
        dec.set_image(image)?;
    }
    let chunk = record.is_some();
    let mut w = Walker {
        obs,
        stop_at_psb,
        stopped: false,
        psb_pending: false,
        switched: false,
        checkpointed: vec![0; thread_procs.len().max(1)],
        procs,
        images,
        thread_proc: thread_procs.to_vec(),
        schedule,
        slot,
        proc,
        last_tsc: None,
        funcs,
        to_ns,
        clock: Clock::default(),
        sink,
        queue,
        figures: vec![WalkFigures::default(); thread_procs.len().max(1)],
        progress,
        pos: 0,
        branch: None,
        need_begin: true,
        cur: NO_RANGE,
        recent: Box::new([NO_RANGE; RECENT]),
        learned: Box::new([0; RECENT]),
        psbs,
        next_psb: 0,
        next_psb_at: psbs.first().copied().unwrap_or(u64::MAX),
        record,
        end_at,
        sync_begin: false,
        // Every chunk's, the last one's too (it has no end).
        from_sync: chunk,
    };
    // A cancelled walk stops here; the caller sees the flag.
    dec.walk(|dec, item| {
        w.item(dec, item);
        !w.stopped && !w.obs.full() && !w.progress.is_some_and(|p| p.is_cancelled())
    });
    if !w.stopped {
        w.flush_branch(None);
    }
    if let Some(rec) = &mut w.record {
        rec.finish(w.pos, w.need_begin);
    }
    let Walker {
        mut clock,
        funcs,
        to_ns,
        sink,
        queue,
        figures,
        record,
        ..
    } = w;
    clock.finish(|s, h| release(sink, queue, funcs, to_ns, s, h));
    Ok((figures, record))
}

pub(crate) fn release(
    sink: &mut dyn Sink,
    queue: u32,
    funcs: &FuncTable,
    to_ns: &dyn Fn(u64) -> u64,
    stamp: Stamp,
    held: Held,
) {
    let time = to_ns(stamp.tsc);
    match held {
        Held::Event(mut ev, slot) => {
            ev.time = time;
            ev.estimated = !stamp.exact;
            sink.event(slot, &ev, funcs);
        }
        Held::Checkpoint {
            offset,
            ip,
            insn,
            slot,
            begins,
        } => {
            sink.checkpoint(
                slot,
                Checkpoint {
                    offset,
                    time,
                    tsc: stamp.tsc,
                    ip,
                    insn,
                    stack_start: 0,
                    stack_len: 0,
                    queue,
                    begins,
                    depth: 0,
                },
            );
        }
    }
}

impl<'i, R: Resolve, D: Blocks<'i>, O: Observe> Walker<'_, 'i, R, D, O> {
    fn figures(&mut self) -> &mut WalkFigures {
        &mut self.figures[self.slot]
    }

    /// Tracing (re)starts at TSC `tsc`: put the thread the schedule names
    /// on the CPU, with its process's image.
    fn reschedule(&mut self, dec: &mut D, tsc: Option<u64>) {
        if self.schedule.is_empty() {
            return;
        }
        let Some(tsc) = tsc.or(self.last_tsc) else {
            return;
        };
        let Some(slot) = scheduled(self.schedule, (self.to_ns)(tsc)) else {
            return;
        };
        if slot == self.slot || slot >= self.figures.len() {
            return;
        }
        self.slot = slot;
        self.switched = true;
        let proc = self.thread_proc[slot];
        if proc != self.proc {
            if let Some(image) = self.images.get(proc) {
                if let Err(e) = dec.set_image(image) {
                    let offset = dec.offset();
                    self.figures().errors.push((offset, e.message()));
                }
            }
            self.proc = proc;
            self.forget_ranges();
        }
    }

    fn resolve(&mut self, addr: u64) -> Resolved {
        if addr >= self.cur.lo && addr < self.cur.hi {
            return self.cur;
        }
        if addr == 0 {
            return Resolved {
                func: UNKNOWN,
                lo: 0,
                hi: 1,
                entry: 0,
                provisional: false,
            };
        }
        let slot = recent_slot(addr);
        let r = self.recent[slot];
        if addr >= r.lo && addr < r.hi {
            self.cur = r;
            return r;
        }
        self.cur = self.procs[self.proc].resolve(addr, self.funcs);
        self.recent[slot] = self.cur;
        self.cur
    }

    /// Cached ranges are stale: the process or its known functions changed.
    fn forget_ranges(&mut self) {
        self.cur = NO_RANGE;
        self.recent.fill(NO_RANGE);
        self.learned.fill(0);
    }

    fn emit(&mut self, kind: EventKind, from: u64, to: u64) {
        if self.record.is_some() {
            let provisional = |w: &mut Self, a: u64| a != 0 && w.resolve(a).provisional;
            if provisional(self, from) || provisional(self, to) {
                let ev = Event {
                    from,
                    to,
                    ..Event::new(0, kind)
                };
                self.obs.event(self.slot, self.pos, &ev);
                let item = Item::Raw(ev, self.slot);
                self.record_item(item);
                return;
            }
            // Learning only ever splits provisional ranges.
            return self.emit_resolved(kind, from, to, false);
        }
        self.emit_resolved(kind, from, to, true)
    }

    fn emit_resolved(&mut self, kind: EventKind, from: u64, to: u64, learn: bool) {
        let from_fn = if from == 0 {
            UNKNOWN
        } else {
            self.resolve(from).func
        };
        if learn && kind == EventKind::Call && to != 0 {
            let slot = recent_slot(to);
            if self.learned[slot] != to {
                if self.procs[self.proc].learn_entry(to, self.funcs) {
                    self.forget_ranges();
                }
                self.learned[slot] = to;
            }
        }
        let (to_fn, to_is_entry) = if to == 0 {
            (UNKNOWN, false)
        } else {
            let r = self.resolve(to);
            (r.func, r.entry == to)
        };
        self.push_event(Event {
            time: 0,
            kind,
            from,
            to,
            from_fn,
            to_fn,
            to_is_entry,
            estimated: true,
        });
    }

    fn push_event(&mut self, ev: Event) {
        self.obs.event(self.slot, self.pos, &ev);
        let held = Held::Event(ev, self.slot);
        match self.record {
            Some(_) => self.record_item(Item::Held(held)),
            None => self.clock.push(self.pos, held),
        }
    }

    /// Records an event of a chunk walk; the first, if it is the begin that
    /// the chunk's sync made, is marked for the replay.
    fn record_item(&mut self, item: Item) {
        let pos = self.pos;
        let sync = self.sync_begin;
        self.sync_begin = false;
        let Some(r) = &mut self.record else { return };
        let seam = if sync { seam::SYNC_BEGIN } else { 0 };
        r.push(pos, item, seam);
    }

    fn anchor(&mut self, tsc: u64) {
        self.last_tsc = Some(tsc);
        self.obs.anchor(self.pos, tsc);
        if let Some(r) = &mut self.record {
            r.anchor(self.pos, tsc);
            return;
        }
        let Walker {
            clock,
            sink,
            queue,
            funcs,
            to_ns,
            pos,
            ..
        } = self;
        clock.anchor(*pos, tsc, |s, h| {
            release(*sink, *queue, funcs, *to_ns, s, h)
        });
    }

    /// Emits the held branch now that its target is known (`None`: never).
    fn flush_branch(&mut self, to: Option<u64>) {
        let Some((end, from)) = self.branch.take() else {
            return;
        };
        let Some(to) = to else { return };
        match end {
            BlockEnd::Call => self.emit(EventKind::Call, from, to),
            BlockEnd::Return => self.emit(EventKind::Return, from, to),
            BlockEnd::Jump | BlockEnd::CondJump | BlockEnd::FarJump | BlockEnd::Indirect => {
                let f = self.resolve(from);
                // A chunk cannot tell yet where provisional code splits.
                let defer = f.provisional && self.record.is_some();
                if to < f.lo || to >= f.hi || defer {
                    self.emit(EventKind::Jump, from, to);
                }
            }
            BlockEnd::FarCall => self.emit(EventKind::Syscall, from, to),
            BlockEnd::FarReturn => self.emit(EventKind::KernelReturn, from, to),
            BlockEnd::Other => {}
        }
    }

    fn block(&mut self, dec: &D, b: Block) {
        let f = self.figures();
        f.blocks += 1;
        f.instructions += b.ninsn as u64;
        if self.need_begin {
            self.need_begin = false;
            self.branch = None;
            self.sync_begin = self.from_sync;
            self.from_sync = false;
            self.emit(EventKind::TraceBegin, 0, b.ip);
        } else {
            self.flush_branch(Some(b.ip));
        }
        // A PSB found tracing off: the state at the first block after it
        // is the state there.
        if self.psb_pending {
            self.psb_pending = false;
            self.checkpoints(dec.psbs_behind(), b.ip);
        }
        if self.switched {
            self.switch_checkpoint(b.ip);
        }
        self.obs.block(self.slot, self.pos, &b);
        self.pos += b.ninsn as u64;
        if b.end != BlockEnd::Other {
            self.branch = Some((b.end, b.end_ip));
        }
    }

    /// PSB+ told the trace's state (`ip`: tracing is on there). The
    /// decoder reads packets ahead of the blocks it reports, so the PSB's
    /// place among the instructions is here, not where its offset was
    /// first passed: checkpoints go here, and a fine pass stops here.
    fn psb_status(&mut self, dec: &D, ip: Option<u64>) {
        let off = dec.status_offset();
        if self.end_at <= off {
            // The next chunk's PSB: what a whole walk does before its
            // checkpoint is this chunk's; the checkpoint is the next's.
            if let Some(ip) = ip {
                self.flush_branch(Some(ip));
            }
            self.end_chunk();
            return;
        }
        if self.next_psb_at > off {
            return;
        }
        if self.stop_at_psb {
            self.stopped = true;
            return;
        }
        match ip {
            Some(ip) => {
                // The branch before the PSB lands at its IP: emit it now so
                // that the checkpoint's stack has it.
                self.flush_branch(Some(ip));
                self.checkpoints(off, ip)
            }
            None => self.psb_pending = true,
        }
    }

    /// A chunk walk has reached the next chunk's PSB. PSBs of its own not
    /// checkpointed yet (tracing was off, no block since) are checkpointed
    /// where the next chunk's first is, as one walk would.
    fn end_chunk(&mut self) {
        self.stopped = true;
        if let Some(r) = &mut self.record {
            r.orphans = self.psbs[self.next_psb.min(self.psbs.len())..].to_vec();
        }
    }

    /// A checkpoint for each PSB at or before `off`, at the instruction
    /// `ip`.
    #[cold]
    fn checkpoints(&mut self, off: u64, ip: u64) {
        while self.next_psb < self.psbs.len() && self.psbs[self.next_psb] <= off {
            let offset = self.psbs[self.next_psb];
            self.next_psb += 1;
            if let Some(p) = self.progress {
                p.segment_done();
            }
            let held = Held::Checkpoint {
                offset,
                ip,
                insn: self.pos,
                slot: self.slot,
                begins: self.need_begin,
            };
            if let Some(c) = self.checkpointed.get_mut(self.slot) {
                *c = self.next_psb;
            }
            self.hold_checkpoint(held);
        }
        self.next_psb_at = self.psbs.get(self.next_psb).copied().unwrap_or(u64::MAX);
    }

    /// A thread put on a per-CPU queue's CPU since its last PSB: a fine
    /// pass of its time there walks from that PSB, keeping its own blocks,
    /// so it gets a checkpoint there, with its state at its first block
    /// `ip` (the PSB's own went to the thread running then). Without it a
    /// thread that runs only between two PSBs could not be zoomed into.
    #[cold]
    fn switch_checkpoint(&mut self, ip: u64) {
        self.switched = false;
        let done = self.checkpointed.get(self.slot) == Some(&self.next_psb);
        let Some(&offset) = self.next_psb.checked_sub(1).and_then(|i| self.psbs.get(i)) else {
            return;
        };
        if done || self.slot >= self.checkpointed.len() {
            return;
        }
        self.checkpointed[self.slot] = self.next_psb;
        self.hold_checkpoint(Held::Checkpoint {
            offset,
            ip,
            insn: self.pos,
            slot: self.slot,
            begins: self.need_begin,
        });
    }

    /// Hands a checkpoint to the clock, or to a chunk's recording.
    fn hold_checkpoint(&mut self, held: Held) {
        match &mut self.record {
            Some(r) => {
                let seam = if r.any_checkpoint {
                    0
                } else {
                    seam::FIRST_CHECKPOINT
                };
                r.any_checkpoint = true;
                r.push(self.pos, Item::Held(held), seam);
            }
            None => self.clock.push(self.pos, held),
        }
    }

    fn item(&mut self, dec: &mut D, item: BlockItem) {
        if self.end_at != u64::MAX {
            // Past the next chunk's PSB without its status (PSB+ failed):
            // what follows is the next chunk's to report.
            let (off, ip) = match &item {
                BlockItem::Error { offset, ip, .. } => (*offset, *ip),
                // Inside the next chunk's PSB+, which reports it too.
                BlockItem::Overflow { .. } => {
                    let psb = dec.psb_entered().map_or(0, |p| p.saturating_add(1));
                    (dec.offset().max(psb), None)
                }
                _ => (dec.offset(), None),
            };
            if off > self.end_at {
                self.flush_branch(ip);
                self.end_chunk();
                return;
            }
        }
        match item {
            BlockItem::Sync { .. } => {
                // libipt's decoder time is not valid yet here; the PSB+
                // status events and ticks that follow carry it.
                self.branch = None;
                self.need_begin = true;
                // Synced at a PSB: its checkpoint is the first block's.
                self.psb_status(dec, None);
            }
            BlockItem::Block(b) => self.block(dec, b),
            BlockItem::Tick { tsc, .. } => {
                self.figures().ticks += 1;
                self.anchor(tsc);
            }
            BlockItem::Enabled {
                ip,
                status_update,
                tsc,
            } => {
                self.reschedule(dec, tsc);
                // PSB+ status updates do not bind to an instruction: their
                // time would pin the wrong one.
                if status_update {
                    self.psb_status(dec, Some(ip));
                    return;
                }
                if let Some(t) = tsc {
                    self.anchor(t);
                }
                self.branch = None;
                self.need_begin = false;
                self.from_sync = false;
                self.emit(EventKind::TraceBegin, 0, ip);
            }
            BlockItem::Disabled {
                status_update: true,
                ..
            } if self.need_begin => {
                // PSB+ at a sync point: tracing starts off. Nothing ended.
                self.psb_status(dec, None);
            }
            BlockItem::Disabled {
                ip,
                tsc,
                status_update,
            } => {
                if status_update {
                    self.psb_status(dec, None);
                }
                if let Some(t) = tsc {
                    self.anchor(t);
                }
                // Only a far transfer (syscall) disables user-only tracing
                // synchronously; the block cache reports it as indirect.
                let reason = match self.branch {
                    Some((BlockEnd::FarCall | BlockEnd::Indirect, _)) => EndReason::Syscall,
                    _ => EndReason::Other,
                };
                let from = match self.branch.take() {
                    Some((BlockEnd::FarCall | BlockEnd::Indirect, from)) => from,
                    Some((end, from)) => {
                        // A branch out of the traced region: show it.
                        self.branch = Some((end, from));
                        self.flush_branch(ip);
                        from
                    }
                    None => ip.unwrap_or(0),
                };
                self.emit(EventKind::TraceEnd(reason), from, 0);
            }
            BlockItem::AsyncDisabled { at, tsc } => {
                if let Some(t) = tsc {
                    self.anchor(t);
                }
                self.flush_branch(Some(at));
                self.emit(EventKind::TraceEnd(EndReason::Async), at, 0);
            }
            BlockItem::AsyncBranch { from, to, tsc } => {
                if let Some(t) = tsc {
                    self.anchor(t);
                }
                self.flush_branch(Some(from));
                self.emit(EventKind::Interrupt, from, to);
            }
            BlockItem::Overflow { ip, tsc } => {
                if let Some(t) = tsc {
                    self.anchor(t);
                }
                self.figures().overflows += 1;
                self.branch = None;
                self.from_sync = false;
                // Inside a PSB+, which now reports no status: the state at
                // the first block after is that PSB's, as where a walk
                // that syncs there checkpoints it.
                if dec.psb_entered().is_some_and(|p| p >= self.next_psb_at) {
                    self.psb_pending = true;
                }
                let f = self.funcs.decode_error("overflow");
                self.push_error(f);
                match ip {
                    Some(ip) => self.emit(EventKind::TraceBegin, 0, ip),
                    None => self.need_begin = true,
                }
            }
            BlockItem::Error { offset, error, ip } => {
                // The held branch's target is where decoding failed.
                self.flush_branch(ip);
                self.figures().errors.push((offset, error.message()));
                let f = self.procs[self.proc].error_func(ip, error, self.funcs);
                self.push_error(f);
                self.need_begin = true;
                self.from_sync = false;
            }
        }
    }

    fn push_error(&mut self, func: FuncId) {
        let mut ev = Event::new(0, EventKind::Error);
        ev.to_fn = func;
        self.push_event(ev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_names_who_runs_at_a_time() {
        let s = [(100, 0), (200, 1), (300, 0)];
        // Before the first switch-in, the first thread (tracing starts
        // with it).
        assert_eq!(scheduled(&s, 50), Some(0));
        assert_eq!(scheduled(&s, 100), Some(0));
        assert_eq!(scheduled(&s, 199), Some(0));
        assert_eq!(scheduled(&s, 200), Some(1));
        assert_eq!(scheduled(&s, 10_000), Some(0));
        assert_eq!(scheduled(&[], 5), None);
    }

    #[test]
    fn queues_merge_in_time_order_into_one_stack_per_thread() {
        // A thread that migrates: its call on CPU 1 and return on CPU 0
        // must meet in one stack.
        let mut funcs = FuncTable::default();
        let f = funcs.intern("f", "m", 0x10, crate::event::SpanKind::Call);
        let threads = [QueueThread {
            pid: 1,
            tid: 1,
            comm: "t".into(),
            proc: 0,
        }];
        let ev = |time, kind, to_fn| {
            let mut e = Event::new(time, kind);
            e.to_fn = to_fn;
            e.to_is_entry = kind == EventKind::Call;
            e.estimated = false;
            e
        };
        let cpu0 = TimedItems {
            items: vec![(0, Timed::Event(ev(30, EventKind::Return, UNKNOWN)))],
        };
        let cpu1 = TimedItems {
            items: vec![
                (0, Timed::Event(ev(10, EventKind::TraceBegin, UNKNOWN))),
                (0, Timed::Event(ev(20, EventKind::Call, f))),
            ],
        };
        let mut b = ThreadBuilders::new(&threads);
        TimedItems::merge_into(vec![cpu0, cpu1], &mut b, &funcs);
        let d = b.finish().pop().unwrap();
        let calls: Vec<(u64, u64)> = (0..d.spans.depth())
            .flat_map(|depth| {
                let spans = &d.spans;
                spans
                    .lane(depth)
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.func() == f)
                    .map(move |(i, s)| (s.start, spans.end(depth, i)))
            })
            .collect();
        assert_eq!(calls, vec![(20, 30)]);
    }

    #[test]
    fn a_queue_whose_time_goes_back_keeps_its_own_order() {
        // A thread's checkpoints on one CPU are in trace order whatever
        // their times say; the fine pass relies on it.
        let threads = [QueueThread {
            pid: 1,
            tid: 1,
            comm: "t".into(),
            proc: 0,
        }];
        let at = |offset, time| {
            Timed::Checkpoint(Checkpoint {
                offset,
                time,
                tsc: time,
                ip: 0x1000,
                insn: offset,
                stack_start: 0,
                stack_len: 0,
                queue: 0,
                begins: false,
                depth: 0,
            })
        };
        let cpu0 = TimedItems {
            items: vec![(0, at(100, 50)), (0, at(200, 10)), (0, at(300, 60))],
        };
        let cpu1 = TimedItems {
            items: vec![(0, at(1000, 20)), (0, at(2000, 55))],
        };
        let mut b = ThreadBuilders::new(&threads);
        TimedItems::merge_into(vec![cpu0, cpu1], &mut b, &FuncTable::default());
        let d = b.finish().pop().unwrap();
        let offsets: Vec<u64> = d.checkpoints.iter().map(|c| c.offset).collect();
        assert_eq!(offsets, vec![1000, 100, 200, 2000, 300]);
    }
}
