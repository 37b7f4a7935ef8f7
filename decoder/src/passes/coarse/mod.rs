//! The coarse pass: one AUX queue's PT into timed branch events, and on
//! into each thread's stack builder. It walks the trace with either engine
//! (our flow decoder or libipt's block decoder), and keeps a checkpoint at
//! every PSB (trace offset, time, IP and the call stack there) so that the
//! fine pass can re-decode any window without starting over.
//!
//! - [`engines`](Blocks): the two engines behind one trait;
//! - `walker`: blocks into events, with the clock and the checkpoints;
//! - `digest`: what the walker made of a memo entry's blocks, made again
//!   without them the next time;
//! - `sink`: where timed events go ([`ThreadBuilders`], [`TimedItems`]);
//! - `chunk_log`: what a chunk walk records for the replay, and the
//!   stacks it built itself;
//! - [`chunks`]: the pass on every core, the same result as one walk:
//!   chunks walked at once, each building its own stacks where it can,
//!   replayed and stitched in order into the stack builders.

use crate::names::resolve::Resolve;
use crate::passes::event::{Event, FuncTable};
use crate::progress::DecodeProgress;
use crate::pt::block::{Block, PtError};
use crate::pt::timing::ToNs;
use ptscope_model::TimeUnit;

mod chunk_log;
pub(crate) mod chunks;
mod digest;
mod engines;
mod sink;
mod walker;

pub(crate) use chunk_log::{read_back, seam, Built, Item, Rec, Recording, Tag};
pub(crate) use engines::Blocks;
pub(crate) use sink::{release, Held, NoSink};
pub(crate) use sink::{Sink, ThreadBuilders, TimedItems};
use walker::run;
pub(crate) use walker::{ChunkWalk, Kept};

/// What a fine pass watches of a walk besides its timed output: every
/// block and event at its instruction position, and every timing anchor.
/// The coarse pass watches nothing (`()`), at no cost.
pub(crate) trait Observe {
    /// Whether it watches blocks and events one by one: a walk for one
    /// that does not takes a memo entry's blocks whole, as it made them
    /// before (`digest`).
    const SEES_BLOCKS: bool = true;

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

impl Observe for () {
    const SEES_BLOCKS: bool = false;
}

pub(crate) use ptscope_model::{Checkpoint, ThreadDecode, WalkFigures};

/// A thread whose code appears in a queue's trace.
pub(crate) struct QueueThread {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Index of its process in the `procs` given to [`decode_queue`].
    pub proc: usize,
}

/// Who runs on a per-CPU queue: from each `(time, slot)` on, the thread
/// `threads[slot]` does, until the next entry. Sorted by time (perf ns).
pub(crate) type Schedule = [(u64, usize)];

/// The thread `schedule` puts on the CPU at `time`; before its first
/// entry, the one that entry names (tracing starts with a switch-in).
pub(crate) fn scheduled(schedule: &Schedule, time: u64) -> Option<usize> {
    let i = schedule.partition_point(|&(t, _)| t <= time);
    schedule.get(i.saturating_sub(1)).map(|&(_, slot)| slot)
}

/// Runs the coarse pass over one thread's trace (AUX queue `queue`).
/// `psbs` are the trace's PSB offsets (for checkpoints); `to_ns` converts
/// TSC to perf time, or the times count instructions (`unit`).
#[allow(clippy::too_many_arguments)]
pub fn decode_thread<'i, D: Blocks<'i>, R: Resolve>(
    dec: D,
    queue: u32,
    image: &'i D::Image,
    resolver: R,
    funcs: &mut FuncTable,
    (to_ns, unit): (&ToNs, TimeUnit),
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
        (to_ns, unit),
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
pub(crate) fn decode_queue<'i, D: Blocks<'i>, R: Resolve, S: Sink + ?Sized>(
    dec: D,
    queue: u32,
    images: &[&'i D::Image],
    procs: &mut [R],
    thread_procs: &[usize],
    schedule: &Schedule,
    funcs: &mut FuncTable,
    (to_ns, unit): (&ToNs, TimeUnit),
    psbs: &[u64],
    sink: &mut S,
    progress: Option<&DecodeProgress>,
) -> Result<Vec<WalkFigures>, PtError> {
    let queue_walk = QueueWalk {
        queue,
        images,
        thread_procs,
        schedule,
        to_ns,
        unit,
        psbs,
        stop_at_psb: false,
        progress,
    };
    walk_queue(dec, queue_walk, procs, funcs, sink, &mut ())
}

/// What [`walk_queue`] walks, and how far.
pub(crate) struct QueueWalk<'a, 'i, I> {
    pub queue: u32,
    pub images: &'a [&'i I],
    pub thread_procs: &'a [usize],
    pub schedule: &'a Schedule,
    pub to_ns: &'a ToNs,
    /// What times count: with [`TimeUnit::Insns`] the clocks count
    /// instructions, and `to_ns` is the identity.
    pub unit: TimeUnit,
    /// Checkpoint offsets; or, with `stop_at_psb`, where to stop.
    pub psbs: &'a [u64],
    pub stop_at_psb: bool,
    pub progress: Option<&'a DecodeProgress>,
}

/// [`decode_queue`] with an observer: the fine pass re-walks one PSB
/// segment this way (`stop_at_psb`, `psbs` holding the segment's end)
/// and sees every block and event at its instruction position.
pub(crate) fn walk_queue<'i, D: Blocks<'i>, R: Resolve, O: Observe, S: Sink + ?Sized>(
    mut dec: D,
    q: QueueWalk<'_, 'i, D::Image>,
    procs: &mut [R],
    funcs: &mut FuncTable,
    sink: &mut S,
    obs: &mut O,
) -> Result<Vec<WalkFigures>, PtError> {
    run(&mut dec, q, procs, funcs, sink, obs, None).map(|(figures, _)| figures)
}

/// A chunk of a queue walked on its own (see [`ChunkWalk`]), for
/// [`crate::passes::coarse::chunks`] to replay, with its walk counters and
/// recording. It stops at the PSB at `end_at` (relative to its trace),
/// where the next chunk starts.
pub(crate) fn walk_chunk<'i, D: Blocks<'i>, R: Resolve>(
    dec: &mut D,
    q: QueueWalk<'_, 'i, D::Image>,
    chunk: ChunkWalk<'_>,
    procs: &mut [R],
    funcs: &mut FuncTable,
) -> Result<(Vec<WalkFigures>, Recording), PtError> {
    let mut none = ();
    let (figures, rec) = run(dec, q, procs, funcs, &mut NoSink, &mut none, Some(chunk))?;
    Ok((figures, rec.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::sink::Timed;
    use super::*;
    use crate::passes::event::{EventKind, UNKNOWN};

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
        let f = funcs.intern("f", "m", 0x10, crate::passes::event::SpanKind::Call);
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
