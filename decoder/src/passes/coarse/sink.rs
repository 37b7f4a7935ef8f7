//! Where a walk's output goes once the clock has timed it: the stack
//! builders of each thread (a thread's own trace), or time-ordered items
//! kept per thread so that per-CPU queues can be merged (`perf record -a`).
//! What the clock holds until then ([`Held`]) is released into a sink here.

use super::{Checkpoint, QueueThread, ThreadDecode, WalkFigures};
use crate::passes::event::{Event, FuncTable};
use crate::passes::stack::{Guessed, OpenFrame, Remap, StackBuilder, Stitch};
use crate::pt::timing::{Stamp, ToNs};

/// What the clock holds until it knows the time: an event of a thread
/// slot, or a checkpoint.
#[derive(Clone, Copy, Debug)]
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
pub(crate) trait Sink {
    fn event(&mut self, slot: usize, ev: &Event, funcs: &FuncTable);
    fn checkpoint(&mut self, slot: usize, at: Checkpoint);

    /// Whether [`stitch`](Self::stitch) can take a chunk's own stacks.
    fn can_stitch(&self) -> bool {
        false
    }

    /// Takes the stacks a chunk's walker built (`stitch`, with its
    /// checkpoints' offsets and positions `by` the chunk's start), as if
    /// its events had come; `remap` maps its function ids. False, with
    /// nothing changed, if they do not fit what came before.
    fn stitch(
        &mut self,
        stitch: &mut Stitch,
        checkpoints: Vec<Guessed<Checkpoint>>,
        remap: Remap<'_>,
        by: (u64, u64),
    ) -> bool {
        let _ = (stitch, checkpoints, remap, by);
        false
    }
}

/// One thread's stack builder and checkpoints.
#[derive(Clone)]
struct Out {
    builder: StackBuilder,
    checkpoints: Vec<Checkpoint>,
    /// The builder's (segment, base) at each checkpoint.
    marks: Vec<(usize, i32)>,
    stacks: Vec<OpenFrame>,
    figures: WalkFigures,
}

/// The sink that builds each thread's stacks as its events arrive in time
/// order.
pub(crate) struct ThreadBuilders {
    outs: Vec<Out>,
}

impl ThreadBuilders {
    pub(crate) fn new(threads: &[QueueThread]) -> ThreadBuilders {
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
    pub(crate) fn add_figures(&mut self, figures: Vec<WalkFigures>) {
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
    pub(crate) fn span_count(&self) -> usize {
        self.outs.iter().map(|o| o.builder.span_count()).sum()
    }

    /// What [`finish`](Self::finish) would give now, frames still open
    /// closed at their thread's last event: a partial model's threads.
    pub(crate) fn snapshot(&self) -> Vec<ThreadDecode> {
        ThreadBuilders {
            outs: self.outs.clone(),
        }
        .finish()
    }

    pub(crate) fn finish(self) -> Vec<ThreadDecode> {
        self.finish_on(1)
    }

    /// [`finish`](Self::finish), the spans still open filed on up to
    /// `workers` threads.
    pub(crate) fn finish_on(self, workers: usize) -> Vec<ThreadDecode> {
        self.outs
            .into_iter()
            .map(|mut o| {
                let (spans, stack, bases) = o.builder.finish_with_bases(workers);
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
    #[inline(always)]
    fn event(&mut self, slot: usize, ev: &Event, funcs: &FuncTable) {
        self.outs[slot].builder.event(ev, funcs);
    }

    fn can_stitch(&self) -> bool {
        self.outs.len() == 1
    }

    fn stitch(
        &mut self,
        stitch: &mut Stitch,
        guessed: Vec<Guessed<Checkpoint>>,
        remap: Remap<'_>,
        (offset, insn): (u64, u64),
    ) -> bool {
        let [o] = &mut self.outs[..] else {
            return false;
        };
        let Out {
            builder,
            checkpoints,
            marks,
            stacks,
            ..
        } = o;
        builder.stitch(
            stitch,
            guessed,
            remap,
            |mut at: Checkpoint, frames, mark| {
                at.offset += offset;
                at.insn += insn;
                at.stack_start = stacks.len() as u32;
                stacks.extend_from_slice(frames);
                at.stack_len = stacks.len() as u32 - at.stack_start;
                marks.push(mark);
                checkpoints.push(at);
            },
        )
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
pub(crate) enum Timed {
    Event(Event),
    Checkpoint(Checkpoint),
}

/// The sink that keeps a queue's items, by thread slot, in time order.
#[derive(Default)]
pub(crate) struct TimedItems {
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
    pub(crate) fn merge_into(queues: Vec<TimedItems>, sink: &mut dyn Sink, funcs: &FuncTable) {
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

/// A sink that drops what it is given: for walks that record (chunks) or
/// observe (the fine pass) instead.
pub(crate) struct NoSink;

impl Sink for NoSink {
    fn event(&mut self, _: usize, _: &Event, _: &FuncTable) {}
    fn checkpoint(&mut self, _: usize, _: Checkpoint) {}
}

#[inline(always)]
pub(crate) fn release<S: Sink + ?Sized>(
    sink: &mut S,
    queue: u32,
    funcs: &FuncTable,
    to_ns: &ToNs,
    stamp: Stamp,
    held: &Held,
) {
    let time = to_ns.at(stamp.tsc);
    match *held {
        Held::Event(ev, slot) => {
            let ev = Event {
                time,
                estimated: !stamp.exact,
                ..ev
            };
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
