//! The coarse pass on every core: a queue is cut at PSBs into chunks that
//! are walked at once, each recording its clock's input instead of timing
//! it (`coarse::chunk_log`), or, between its first anchor and its last,
//! timing it and building its stacks itself (`stack::speculate`), then
//! replayed in order through one clock into one sink, mending the seams
//! and stitching the stacks. The result is the same on any number of
//! cores; `docs/parallel-coarse-pass.md` explains why, and the two
//! differences that remain on damaged traces.

use std::sync::mpsc;

use parking_lot::{Condvar, Mutex};

use crate::names::resolve::Resolve;
use crate::passes::coarse::{
    read_back, release, seam, walk_chunk, Built, ChunkWalk, Held, Item, Kept, NoSink, QueueWalk,
    Rec, Recording, Sink, Tag,
};
use crate::passes::coarse::{walk_queue, WalkFigures};
use crate::passes::event::{Event, EventKind, Func, FuncId, FuncTable, UNKNOWN};
use crate::passes::stack::{Remap, Stitch};
use crate::progress::ChunkFate;
use crate::pt::block::{DecoderConfig, PtError};
use crate::pt::flow::FlowDecoder;
use crate::pt::memory::Memory;
use crate::pt::timing::Clock;

/// How the coarse pass spreads over cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallel {
    /// Walking threads; 1 walks the queue in one go, as before.
    pub workers: usize,
    /// PT bytes per chunk (cut at the first PSB past it).
    pub chunk_bytes: usize,
    /// The first chunk's size (at most `chunk_bytes`): what the first
    /// partial model waits for.
    pub first_chunk_bytes: usize,
    /// With `workers` above 1, walk the chunks one after another on the
    /// calling thread: the same result with no scheduling in it, for
    /// fuzzing (whose coverage would otherwise count thread timing as
    /// paths).
    #[doc(hidden)]
    pub in_order: bool,
}

impl Default for Parallel {
    /// On every core.
    fn default() -> Self {
        Parallel::on(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

impl Parallel {
    /// On `workers` cores: one walk on one, chunks on more.
    pub fn on(workers: usize) -> Parallel {
        Parallel {
            workers,
            // Small enough that a chunk's records (some 300-600 KB for
            // 16 KiB of trace) stay in the core's cache on their way to the
            // replay, and that the chunks in flight hold little memory: at
            // 128 KiB they held 6-8 B per span of the two-core peak, and
            // decoded no faster (BENCHMARKS.md, issue 41's fifth part).
            chunk_bytes: 16 << 10,
            first_chunk_bytes: 16 << 10,
            in_order: false,
        }
    }

    /// One walk on the calling thread.
    pub fn sequential() -> Parallel {
        Parallel::on(1)
    }

    /// Chunk bounds over a trace of `len` bytes with PSBs at `psbs`:
    /// `[start, end)`, each but the first starting at a PSB.
    fn bounds(&self, len: usize, psbs: &[u64]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = 0usize;
        let mut want = self.first_chunk_bytes.max(1);
        for &p in psbs {
            let p = p as usize;
            if p > start && p - start >= want && p < len {
                out.push((start, p));
                start = p;
                want = self.chunk_bytes.max(1);
            }
        }
        out.push((start, len));
        out
    }
}

/// A walked chunk: its counters, its clock input, and the functions its
/// walker met first in it (after those it sent with its earlier chunks).
type Walked = (Vec<WalkFigures>, Recording, NewFuncs);

/// Functions a walker added to its table, which the replay adopts into
/// the caller's when an event first names them.
struct NewFuncs {
    /// Which walker's table (0: the replay's own).
    walker: usize,
    funcs: Vec<Func>,
}

/// What a walking thread keeps from one chunk to its next: the flow
/// decoder's caches of the code, and the resolvers with the function table
/// their lookups interned into. None of it depends on where the chunk
/// lies: chunks do not learn functions (what needs learning is resolved by
/// the replay), so an address resolves alike in every chunk.
struct Warm<'a, R> {
    dec: Option<FlowDecoder<'a>>,
    /// What its chunk walks keep from one to the next.
    kept: Kept,
    procs: Vec<R>,
    funcs: FuncTable,
    /// Functions of `funcs` already sent with a chunk.
    sent: usize,
    walker: usize,
}

impl<'a, R: Clone> Warm<'a, R> {
    fn new(walker: usize, procs: &[R], funcs: &FuncTable) -> Warm<'a, R> {
        Warm {
            dec: None,
            kept: Kept::default(),
            procs: procs.to_vec(),
            funcs: funcs.clone(),
            sent: funcs.len(),
            walker,
        }
    }
}

/// Per walker, the functions it sent (after the shared ones) and what each
/// became in the caller's table, once an event named it.
#[derive(Default)]
struct Adopted {
    funcs: Vec<Func>,
    ids: Vec<Option<FuncId>>,
}

/// Runs the coarse pass over one queue with our flow decoder, on
/// `par.workers` threads. Timed events go to `sink` in the order one walk
/// would give them; `on_chunk` sees the sink after each chunk (for partial
/// models). Returns each thread slot's walk counters.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_queue_chunked<'d, S: Sink, R: Resolve + Clone + Send + Sync>(
    data: &'d [u8],
    cfg: &DecoderConfig,
    q: QueueWalk<'_, 'd, Memory>,
    procs: &mut [R],
    funcs: &mut FuncTable,
    sink: &mut S,
    par: &Parallel,
    mut on_chunk: impl FnMut(&S, &FuncTable),
) -> Result<Vec<WalkFigures>, PtError> {
    let bounds = par.bounds(data.len(), q.psbs);
    if par.workers <= 1 || bounds.len() <= 1 {
        let figures = walk_queue(FlowDecoder::new(data, cfg), q, procs, funcs, sink, &mut ())?;
        on_chunk(sink, funcs);
        return Ok(figures);
    }
    let base: &FuncTable = &funcs.clone();
    // Replayed chunks hand their buffers back: no fresh pages per chunk.
    let pool: Mutex<Vec<Vec<Rec>>> = Mutex::new(Vec::new());
    // So do the stack builders of chunks that built their own.
    let stitches_pool: Mutex<Vec<Stitch>> = Mutex::new(Vec::new());
    let base_procs: Vec<R> = procs.to_vec();
    let base_procs: &[R] = &base_procs;
    // Walkers build their chunks' stacks when the sink can take them (one
    // thread's), past the first chunk (whose stack below is known: none).
    let stitches = sink.can_stitch();
    let walk_one = |i: usize, warm: &mut Warm<'d, R>, speculate: bool| -> Result<Walked, PtError> {
        let (start, end) = bounds[i];
        let from = q.psbs.partition_point(|&p| (p as usize) < start);
        let to = q.psbs.partition_point(|&p| (p as usize) < end);
        let psbs: Vec<u64> = q.psbs[from..to].iter().map(|&p| p - start as u64).collect();
        let end_at = if i + 1 < bounds.len() {
            (end - start) as u64
        } else {
            u64::MAX
        };
        let trace = &data[start..];
        let mut speculate = speculate && stitches && i > 0;
        let (figures, rec) = loop {
            let mut dec = match warm.dec.take() {
                Some(dec) => dec.recycle(trace),
                None => FlowDecoder::new(trace, cfg),
            };
            let body = pool.lock().pop().unwrap_or_default();
            let rec = Recording::with_body(body);
            let walk = QueueWalk {
                psbs: &psbs,
                stop_at_psb: false,
                ..q
            };
            let stitch = speculate.then(|| stitches_pool.lock().pop()).flatten();
            let chunk = ChunkWalk {
                end_at,
                rec,
                speculate,
                stitch,
                kept: &mut warm.kept,
            };
            let walked = walk_chunk(&mut dec, walk, chunk, &mut warm.procs, &mut warm.funcs);
            warm.dec = Some(dec);
            let (figures, rec) = walked?;
            if !rec.gave_up {
                break (figures, rec);
            }
            // Its stacks needed what came before: walked again, recorded.
            if let Some(p) = q.progress {
                p.chunk(ChunkFate::GaveUp);
            }
            pool.lock().push(rec.body);
            speculate = false;
        };
        let new = (warm.sent..warm.funcs.len())
            .map(|id| warm.funcs.get(id as FuncId).clone())
            .collect();
        warm.sent = warm.funcs.len();
        let new = NewFuncs {
            walker: warm.walker,
            funcs: new,
        };
        Ok((figures, rec, new))
    };

    // Workers run at most `window` chunks ahead of the replay, which bounds
    // the memory of recorded chunks. Two chunks more than there are
    // walkers: a walker that finishes while the replay is still on the
    // chunk before its own goes on with the next, instead of waiting
    // (on two cores, one more than the walkers left the walker idle for
    // a fifth of the decode).
    let window = par.workers + 3;
    let gate = (Mutex::new((0usize, 0usize, false)), Condvar::new());
    let claim = |gate: &(Mutex<(usize, usize, bool)>, Condvar)| -> Option<usize> {
        let (lock, cv) = gate;
        let mut g = lock.lock();
        loop {
            let (next, replayed, stop) = *g;
            if stop || next >= bounds.len() {
                return None;
            }
            if next < replayed + window {
                g.0 += 1;
                return Some(next);
            }
            cv.wait(&mut g);
        }
    };
    // The replay's own claim: never waits (only the replay makes room).
    let try_claim = |gate: &(Mutex<(usize, usize, bool)>, Condvar)| -> Option<usize> {
        let mut g = gate.0.lock();
        let (next, replayed, stop) = *g;
        if stop || next >= bounds.len() || next >= replayed + window {
            return None;
        }
        g.0 += 1;
        Some(next)
    };
    let set_gate = |f: &dyn Fn(&mut (usize, usize, bool))| {
        let (lock, cv) = &gate;
        f(&mut lock.lock());
        cv.notify_all();
    };

    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, Result<Walked, PtError>)>();
        // In order, no workers: the replay walks each chunk itself.
        // Otherwise one thread fewer than asked: the replay walks chunks
        // too while the next one it needs is being walked, so that as
        // many threads run as there are cores. A walker more would share
        // a core with the replay, which then falls behind: it is the one
        // part that runs in order.
        let workers = if par.in_order { 0 } else { par.workers - 1 };
        for walker in 1..=workers.min(bounds.len()) {
            let tx = tx.clone();
            let (gate, walk_one, claim, set_gate) = (&gate, &walk_one, &claim, &set_gate);
            s.spawn(move || {
                // A worker that panics stops everyone: nobody waits for the
                // chunk it held (the panic surfaces when the scope ends).
                let _stop = OnDrop(|| set_gate(&|g| g.2 = true));
                let mut warm = Warm::new(walker, base_procs, base);
                while let Some(i) = claim(gate) {
                    if tx.send((i, walk_one(i, &mut warm, true))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);

        // The replay times and mends each chunk straight into the stack
        // builders, on this thread. Handing its items to builders on yet
        // another thread moved every event across cores twice more, which
        // cost as much as the builders' own work.
        //
        // If the replay panics, no worker stays parked.
        let _stop = OnDrop(|| set_gate(&|g| g.2 = true));
        let mut replay = Replay {
            clock: Clock::for_unit(q.unit),
            pos: 0,
            tracing: false,
            orphans: Vec::new(),
            figures: Vec::new(),
        };
        let mut ready: Vec<Option<Result<Walked, PtError>>> =
            (0..bounds.len()).map(|_| None).collect();
        // The replay's own walker is walker 0.
        let mut warm = Warm::new(0, base_procs, base);
        // Chunks whose stacks did not fit are walked again by a walker of
        // their own: walker 0's table may have grown with chunks ahead
        // whose functions the replay has not adopted yet.
        let mut again = Warm::new(workers + 1, base_procs, base);
        let mut adopted: Vec<Adopted> = (0..=workers + 1).map(|_| Adopted::default()).collect();
        let result = (|| {
            for (i, &(start, _)) in bounds.iter().enumerate() {
                if par.in_order {
                    ready[i] = Some(walk_one(i, &mut warm, true));
                }
                while ready[i].is_none() {
                    // What the workers finished, first.
                    while let Ok((j, r)) = rx.try_recv() {
                        ready[j] = Some(r);
                    }
                    if ready[i].is_some() {
                        break;
                    }
                    // Then a chunk no one has claimed (this one, if no
                    // worker took it yet); else wait for a worker's.
                    if let Some(j) = try_claim(&gate) {
                        ready[j] = Some(walk_one(j, &mut warm, true));
                        continue;
                    }
                    match rx.recv() {
                        Ok((j, r)) => ready[j] = Some(r),
                        // Every worker stopped early: cancelled, or one
                        // panicked (the scope says so).
                        Err(_) => return Ok(false),
                    }
                }
                let (figures, rec, new) = ready[i].take().expect("received above")?;
                let walker = &mut adopted[new.walker];
                walker.funcs.extend(new.funcs);
                walker.ids.resize(walker.funcs.len(), None);
                let body = match replay.chunk(
                    i,
                    (start as u64, base.len(), 0),
                    (figures, rec, walker),
                    &q,
                    (&mut *procs, &mut *funcs),
                    (&mut *sink, &stitches_pool),
                ) {
                    Ok(body) => body,
                    Err((body, head)) => {
                        // Its stacks did not fit the stack before it: the
                        // chunk is walked again and replayed past its head.
                        pool.lock().push(body);
                        let walked = walk_one(i, &mut again, false);
                        // Its decoder's caches go: chunks are seldom walked
                        // again, and they would hold megabytes to the end.
                        again.dec = None;
                        let (figures, rec, new) = walked?;
                        let walker = &mut adopted[new.walker];
                        walker.funcs.extend(new.funcs);
                        walker.ids.resize(walker.funcs.len(), None);
                        let replayed = replay.chunk(
                            i,
                            (start as u64, base.len(), head),
                            (figures, rec, walker),
                            &q,
                            (&mut *procs, &mut *funcs),
                            (&mut *sink, &stitches_pool),
                        );
                        replayed.unwrap_or_else(|(body, _)| body)
                    }
                };
                pool.lock().push(body);
                set_gate(&|g| g.1 = i + 1);
                on_chunk(sink, funcs);
                if q.progress.is_some_and(|p| p.is_cancelled()) {
                    return Ok(false);
                }
            }
            Ok(true)
        })();
        set_gate(&|g| g.2 = true);
        let whole = result?;
        // A walk cut short gives its counters, but no more spans.
        let figures = if whole {
            let figures = replay.finish(&mut *sink, &q, funcs);
            on_chunk(sink, funcs);
            figures
        } else {
            replay.finish(&mut NoSink, &q, funcs)
        };
        Ok(figures)
    })
}

/// Runs its closure when dropped, also while unwinding.
struct OnDrop<F: Fn()>(F);

impl<F: Fn()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// The consumer's state between chunks.
struct Replay {
    clock: Clock<Held>,
    /// Instructions of the chunks replayed so far.
    pos: u64,
    /// Where the last chunk ended, a whole walk had tracing on and owed no
    /// trace-begin (it has none to make at the next PSB).
    tracing: bool,
    /// The last chunk's PSBs that take the next chunk's first checkpoint.
    orphans: Vec<u64>,
    figures: Vec<WalkFigures>,
}

impl Replay {
    /// Releases what the clock still holds; the walk counters of all.
    fn finish(
        self,
        sink: &mut dyn Sink,
        q: &QueueWalk<'_, '_, Memory>,
        funcs: &mut FuncTable,
    ) -> Vec<WalkFigures> {
        let Replay {
            mut clock, figures, ..
        } = self;
        clock.finish(|st, h| release(sink, q.queue, funcs, q.to_ns, st, h));
        figures
    }

    /// Replays one chunk into `sink` from its `skip`th record; gives back
    /// its body's buffer. If the stacks its walker built do not fit, it
    /// stops there: `Err` with the buffer and the records replayed, for
    /// a walk of the chunk without them to go on from.
    fn chunk<R: Resolve>(
        &mut self,
        index: usize,
        (start, shared, skip): (u64, usize, usize),
        (figures, rec, adopted): (Vec<WalkFigures>, Recording, &mut Adopted),
        q: &QueueWalk<'_, '_, Memory>,
        (procs, funcs): (&mut [R], &mut FuncTable),
        (sink, stitches): (&mut dyn Sink, &Mutex<Vec<Stitch>>),
    ) -> Result<Vec<Rec>, (Vec<Rec>, usize)> {
        let base = self.pos;
        let mut fix = Fix {
            adopted,
            shared,
            // A whole walk reached this PSB with tracing on: no trace-begin.
            mend: index > 0 && self.tracing,
            start,
            base,
            orphans: std::mem::take(&mut self.orphans),
            extra: Vec::new(),
        };
        let Recording {
            mut body,
            mut others,
            end_pos,
            end_need_begin,
            orphans: orphans_next,
            mut built,
            built_at,
            segments,
            ..
        } = rec;
        let (queue, to_ns) = (q.queue, q.to_ns);
        let mut stitched = true;
        for (at, rec) in read_back(&mut body, skip) {
            let pos = at + base;
            match rec.tag() {
                Tag::Anchor => self.clock.anchor(pos, rec.value(), |st, h| {
                    release(sink, queue, funcs, to_ns, st, h)
                }),
                // Nearly every item: an event away from the seam, which
                // only needs its function ids mapped.
                Tag::Event if rec.seam() == 0 => {
                    let (mut ev, slot) = rec.event();
                    ev.from_fn = fix.remap(ev.from_fn, funcs);
                    ev.to_fn = fix.remap(ev.to_fn, funcs);
                    self.clock.push(pos, Held::Event(ev, slot));
                }
                _ => {
                    let Some(item) = rec.item(&mut others) else {
                        continue;
                    };
                    if let Item::Built = item {
                        let Some(built) = built.take() else {
                            continue;
                        };
                        let mut built = *built;
                        stitched = self.stitch(&mut built, &mut fix, funcs, sink);
                        built.stitch.reset();
                        stitches.lock().push(built.stitch);
                        if let Some(p) = q.progress {
                            let fate = match stitched {
                                true => ChunkFate::Stitched,
                                false => ChunkFate::Refused,
                            };
                            p.chunk(fate);
                        }
                        if !stitched {
                            break;
                        }
                        continue;
                    }
                    let item = fix.apply((at, item, rec.seam()), q, procs, funcs);
                    for (pos, held) in fix.extra.drain(..).chain(item) {
                        self.clock.push(pos, held);
                    }
                }
            }
        }
        // Any not taken (no checkpoint in this chunk) still wait.
        self.orphans = std::mem::take(&mut fix.orphans);
        if !stitched {
            body.clear();
            return Err((body, built_at));
        }
        if let Some(p) = q.progress {
            p.segments_walked(segments);
        }
        self.orphans
            .extend(orphans_next.into_iter().map(|o| o + start));
        self.pos += end_pos;
        if let Some(need_begin) = end_need_begin {
            self.tracing = !need_begin;
        }
        if self.figures.len() < figures.len() {
            self.figures.resize(figures.len(), WalkFigures::default());
        }
        for (into, f) in self.figures.iter_mut().zip(figures) {
            into.blocks += f.blocks;
            into.instructions += f.instructions;
            into.ticks += f.ticks;
            into.overflows += f.overflows;
            into.errors
                .extend(f.errors.into_iter().map(|(o, e)| (o + start, e)));
        }
        Ok(body)
    }

    /// Files the stacks a chunk's walker built, if they fit: the clock took
    /// its first anchor as the chunk's own clock did, and the sink's stack
    /// what its builder guessed. The clock then goes on from its last.
    fn stitch(
        &mut self,
        built: &mut Built,
        fix: &mut Fix<'_>,
        funcs: &mut FuncTable,
        sink: &mut dyn Sink,
    ) -> bool {
        let Built {
            stitch,
            checkpoints,
            first: (pos, tsc),
            clock,
        } = built;
        let (pos, tsc, clock) = (*pos, *tsc, *clock);
        let checkpoints = std::mem::take(checkpoints);
        let base = fix.base;
        if self.clock.state().anchor != Some((pos + base, tsc)) {
            // One walk's clock held it back to an earlier anchor's time.
            return false;
        }
        let (start, shared) = (fix.start, fix.shared as FuncId);
        let Adopted { funcs: theirs, ids } = &mut *fix.adopted;
        let mut adopt = |i: usize| funcs.adopt(&theirs[i]);
        let remap = Remap {
            shared,
            ids,
            adopt: &mut adopt,
        };
        if !sink.stitch(stitch, checkpoints, remap, (start, base)) {
            return false;
        }
        self.clock.resume(clock.shifted(base));
        true
    }
}

/// What turns a chunk's recorded items into the caller's: function ids,
/// offsets and positions, the seam's mends, deferred resolution.
struct Fix<'w> {
    /// The functions of the walker's own table from `shared` on, mapped
    /// into the caller's table when first used.
    adopted: &'w mut Adopted,
    shared: usize,
    mend: bool,
    start: u64,
    base: u64,
    /// Earlier chunks' PSBs still to checkpoint, at this chunk's first.
    orphans: Vec<u64>,
    /// Items one walk held just before the one [`Fix::apply`] returns.
    extra: Vec<(u64, Held)>,
}

impl Fix<'_> {
    fn remap(&mut self, id: FuncId, funcs: &mut FuncTable) -> FuncId {
        let Some(i) = (id as usize).checked_sub(self.shared) else {
            return id;
        };
        let a = &mut *self.adopted;
        if let Some(Some(g)) = a.ids.get(i) {
            return *g;
        }
        let Some(f) = a.funcs.get(i) else {
            return id;
        };
        let g = funcs.adopt(f);
        a.ids[i] = Some(g);
        g
    }

    /// The item as one walk would have held it, at its position; `None` if
    /// one walk never made it. A first checkpoint also puts the waiting
    /// PSBs' checkpoints, the same but for their offsets, in `extra`.
    fn apply<R: Resolve>(
        &mut self,
        (pos, item, marks): (u64, Item, u8),
        q: &QueueWalk<'_, '_, Memory>,
        procs: &mut [R],
        funcs: &mut FuncTable,
    ) -> Option<(u64, Held)> {
        if self.mend && marks & seam::SYNC_BEGIN != 0 {
            return None;
        }
        let pos = pos + self.base;
        let held = match item {
            Item::Held(Held::Event(mut ev, slot)) => {
                ev.from_fn = self.remap(ev.from_fn, funcs);
                ev.to_fn = self.remap(ev.to_fn, funcs);
                Held::Event(ev, slot)
            }
            Item::Held(Held::Checkpoint {
                offset,
                ip,
                insn,
                slot,
                begins,
            }) => {
                let first = marks & seam::FIRST_CHECKPOINT != 0;
                let at = |offset| Held::Checkpoint {
                    offset,
                    ip,
                    insn: insn + self.base,
                    slot,
                    begins: begins && !(self.mend && marks & seam::SYNC_CHECKPOINT != 0),
                };
                if first && !self.orphans.is_empty() {
                    for o in std::mem::take(&mut self.orphans) {
                        if let Some(p) = q.progress {
                            p.segment_done();
                        }
                        self.extra.push((pos, at(o)));
                    }
                }
                at(offset + self.start)
            }
            // Taken by the replay before it comes here.
            Item::Built => return None,
            Item::Raw(mut ev, slot) => {
                let proc = q.thread_procs.get(slot).copied().unwrap_or(0);
                let r = procs.get_mut(proc)?;
                if !resolve_raw(r, &mut ev, funcs) {
                    return None;
                }
                Held::Event(ev, slot)
            }
        };
        Some((pos, held))
    }
}

/// Resolves a deferred event against the process's resolver as a whole
/// walk does at that point (`from` first, then what the call teaches, then
/// `to`); false if it is a jump that stays inside its function after all.
fn resolve_raw<R: Resolve>(r: &mut R, ev: &mut Event, funcs: &mut FuncTable) -> bool {
    let from = (ev.from != 0).then(|| r.resolve(ev.from, funcs));
    if let (EventKind::Jump, Some(f)) = (ev.kind, from) {
        if ev.to >= f.lo && ev.to < f.hi {
            return false;
        }
    }
    if ev.kind == EventKind::Call && ev.to != 0 {
        r.learn_entry(ev.to, funcs);
    }
    ev.from_fn = from.map_or(UNKNOWN, |f| f.func);
    (ev.to_fn, ev.to_is_entry) = match ev.to {
        0 => (UNKNOWN, false),
        to => {
            let t = r.resolve(to, funcs);
            (t.func, t.entry == to)
        }
    };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_cut_at_psbs_past_their_size() {
        let par = Parallel {
            workers: 2,
            chunk_bytes: 100,
            first_chunk_bytes: 30,
            in_order: false,
        };
        let psbs = [0, 20, 40, 90, 150, 260, 300];
        assert_eq!(
            par.bounds(320, &psbs),
            vec![(0, 40), (40, 150), (150, 260), (260, 320)]
        );
        // Data before the first PSB belongs to the first chunk.
        assert_eq!(par.bounds(50, &[10]), vec![(0, 50)]);
        assert_eq!(par.bounds(0, &[]), vec![(0, 0)]);
    }
}
