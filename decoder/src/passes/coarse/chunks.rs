//! The coarse pass on every core: a queue is cut at PSBs into chunks that
//! are walked at once, each recording its clock's input instead of timing
//! it (`coarse::chunk_log`), then replayed in order through one clock into
//! one sink, mending the seams. The result is the same on any number of
//! cores; `docs/parallel-coarse-pass.md` explains why, and the two
//! differences that remain on damaged traces.

use std::sync::mpsc;

use parking_lot::{Condvar, Mutex};

use crate::names::resolve::Resolve;
use crate::passes::coarse::{
    release, seam, walk_chunk, Entry, Held, Item, NoSink, QueueWalk, Recording, Sink,
};
use crate::passes::coarse::{walk_queue, WalkFigures};
use crate::passes::event::{Event, EventKind, FuncId, FuncTable, UNKNOWN};
use crate::pt::block::{DecoderConfig, PtError};
use crate::pt::flow::FlowDecoder;
use crate::pt::memory::Memory;
use crate::pt::timing::{Clock, Stamp};

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
    /// Time every chunk in the replay instead of taking the times each
    /// chunk gave itself (the same, barring a TSC that runs backwards at
    /// a seam): for tests of that path.
    #[doc(hidden)]
    pub retime: bool,
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
            // Small enough that a chunk's record stays in cache.
            chunk_bytes: 128 << 10,
            first_chunk_bytes: 128 << 10,
            retime: false,
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

/// A walked chunk: its counters, clock input and function table.
type Walked = (Vec<WalkFigures>, Recording, FuncTable);

/// Runs the coarse pass over one queue with our flow decoder, on
/// `par.workers` threads. Timed events go to `sink` in the order one walk
/// would give them; `on_chunk` sees the sink after each chunk (for partial
/// models). Returns each thread slot's walk counters.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_queue_chunked<S: Sink, R: Resolve + Clone + Send + Sync>(
    data: &[u8],
    cfg: &DecoderConfig,
    q: QueueWalk<'_, '_, Memory>,
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
    let pool: Mutex<Vec<Vec<Entry>>> = Mutex::new(Vec::new());
    let base_procs: Vec<R> = procs.to_vec();
    let base_procs: &[R] = &base_procs;
    let walk_one = |i: usize| -> Result<Walked, PtError> {
        let (start, end) = bounds[i];
        let from = q.psbs.partition_point(|&p| (p as usize) < start);
        let to = q.psbs.partition_point(|&p| (p as usize) < end);
        let psbs: Vec<u64> = q.psbs[from..to].iter().map(|&p| p - start as u64).collect();
        let end_at = if i + 1 < bounds.len() {
            (end - start) as u64
        } else {
            u64::MAX
        };
        let mut procs = base_procs.to_vec();
        let mut funcs = base.clone();
        let walk = QueueWalk {
            psbs: &psbs,
            stop_at_psb: false,
            ..q
        };
        let dec = FlowDecoder::new(&data[start..], cfg);
        let body = pool.lock().pop().unwrap_or_default();
        let rec = Recording::with_body(body);
        let (figures, rec) = walk_chunk(dec, walk, (end_at, rec), &mut procs, &mut funcs)?;
        Ok((figures, rec, funcs))
    };

    // Workers run at most `window` chunks ahead of the replay, which bounds
    // the memory of recorded chunks.
    let window = par.workers + 1;
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
        for _ in 0..workers.min(bounds.len()) {
            let tx = tx.clone();
            let (gate, walk_one, claim, set_gate) = (&gate, &walk_one, &claim, &set_gate);
            s.spawn(move || {
                // A worker that panics stops everyone: nobody waits for the
                // chunk it held (the panic surfaces when the scope ends).
                let _stop = OnDrop(|| set_gate(&|g| g.2 = true));
                while let Some(i) = claim(gate) {
                    if tx.send((i, walk_one(i))).is_err() {
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
            retime: par.retime,
        };
        let mut ready: Vec<Option<Result<Walked, PtError>>> =
            (0..bounds.len()).map(|_| None).collect();
        let result = (|| {
            for (i, &(start, _)) in bounds.iter().enumerate() {
                if par.in_order {
                    ready[i] = Some(walk_one(i));
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
                        ready[j] = Some(walk_one(j));
                        continue;
                    }
                    match rx.recv() {
                        Ok((j, r)) => ready[j] = Some(r),
                        // Every worker stopped early: cancelled, or one
                        // panicked (the scope says so).
                        Err(_) => return Ok(false),
                    }
                }
                let walked = ready[i].take().expect("received above")?;
                let body = replay.chunk(
                    i,
                    (start as u64, base.len()),
                    walked,
                    &q,
                    (&mut *procs, &mut *funcs),
                    &mut *sink,
                );
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
    /// Time every chunk's body here rather than take the chunk's times.
    retime: bool,
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

    /// Replays one chunk into `sink`; gives back its body's buffer.
    fn chunk<R: Resolve>(
        &mut self,
        index: usize,
        (start, shared): (u64, usize),
        (figures, rec, local): Walked,
        q: &QueueWalk<'_, '_, Memory>,
        (procs, funcs): (&mut [R], &mut FuncTable),
        sink: &mut dyn Sink,
    ) -> Vec<Entry> {
        let base = self.pos;
        let mut fix = Fix {
            map: vec![None; local.len().saturating_sub(shared)],
            local,
            shared,
            // A whole walk reached this PSB with tracing on: no trace-begin.
            mend: index > 0 && self.tracing,
            start,
            base,
            orphans: std::mem::take(&mut self.orphans),
            extra: Vec::new(),
        };
        let Recording {
            head,
            first_anchor,
            mut body,
            tail,
            end_anchor,
            end_rate,
            end_pos,
            end_need_begin,
            orphans: orphans_next,
            ..
        } = rec;
        // The chunk timed its body from its first anchor on, as one walk
        // would, unless time ran backwards across the seam (one walk keeps
        // it still there) or we are told to check.
        let own_times = !self.retime
            && match (first_anchor, self.clock.state().0) {
                (Some((_, t)), Some((_, t0))) => t >= t0,
                (Some(_), None) => true,
                (None, _) => false,
            };
        let (queue, to_ns) = (q.queue, q.to_ns);
        for e in head {
            let item = fix.apply(e, q, procs, funcs);
            for (pos, _, held) in fix.extra.drain(..).chain(item) {
                self.clock.push(pos, held);
            }
        }
        if let Some((p, tsc)) = first_anchor {
            self.clock.anchor(p + base, tsc, |st, h| {
                release(sink, queue, funcs, to_ns, st, h)
            });
        }
        let put = |clock: &mut Clock<Held>,
                   sink: &mut dyn Sink,
                   funcs: &FuncTable,
                   (pos, stamp, held): (u64, Stamp, Held)| {
            if own_times {
                release(sink, queue, funcs, to_ns, stamp, held);
            } else {
                clock.push(pos, held);
            }
        };
        for e in body.drain(..) {
            match e.item {
                Item::Anchor(tsc) => {
                    if !own_times {
                        self.clock.anchor(e.pos + base, tsc, |st, h| {
                            release(sink, queue, funcs, to_ns, st, h)
                        });
                    }
                }
                // Nearly every item: an event away from the seam, which
                // only needs its function ids mapped. Moved once, not
                // through the general path's tuples.
                Item::Held(Held::Event(mut ev, slot)) if e.seam == 0 => {
                    ev.from_fn = fix.remap(ev.from_fn, funcs);
                    ev.to_fn = fix.remap(ev.to_fn, funcs);
                    put(
                        &mut self.clock,
                        sink,
                        funcs,
                        (e.pos + base, e.stamp, Held::Event(ev, slot)),
                    );
                }
                _ => {
                    let item = fix.apply(e, q, procs, funcs);
                    for x in fix.extra.drain(..) {
                        put(&mut self.clock, sink, funcs, x);
                    }
                    if let Some(x) = item {
                        put(&mut self.clock, sink, funcs, x);
                    }
                }
            }
        }
        if own_times {
            if let Some((p, tsc)) = end_anchor {
                self.clock.restore((p + base, tsc), end_rate);
            }
        }
        for e in tail {
            let item = fix.apply(e, q, procs, funcs);
            for (pos, _, held) in fix.extra.drain(..).chain(item) {
                self.clock.push(pos, held);
            }
        }
        // Any not taken (no checkpoint in this chunk) still wait.
        self.orphans = std::mem::take(&mut fix.orphans);
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
        body
    }
}

/// What turns a chunk's recorded items into the caller's: function ids,
/// offsets and positions, the seam's mends, deferred resolution.
struct Fix {
    /// The chunk's own table; its ids from `shared` on are mapped into the
    /// caller's table when first used.
    local: FuncTable,
    map: Vec<Option<FuncId>>,
    shared: usize,
    mend: bool,
    start: u64,
    base: u64,
    /// Earlier chunks' PSBs still to checkpoint, at this chunk's first.
    orphans: Vec<u64>,
    /// Items one walk held just before the one [`Fix::apply`] returns.
    extra: Vec<(u64, Stamp, Held)>,
}

impl Fix {
    fn remap(&mut self, id: FuncId, funcs: &mut FuncTable) -> FuncId {
        let Some(i) = (id as usize).checked_sub(self.shared) else {
            return id;
        };
        if let Some(Some(g)) = self.map.get(i) {
            return *g;
        }
        let g = funcs.adopt(self.local.get(id));
        if let Some(slot) = self.map.get_mut(i) {
            *slot = Some(g);
        }
        g
    }

    /// The item as one walk would have held it, at its position; `None` if
    /// one walk never made it. A first checkpoint also puts the waiting
    /// PSBs' checkpoints, the same but for their offsets, in `extra`.
    fn apply<R: Resolve>(
        &mut self,
        e: Entry,
        q: &QueueWalk<'_, '_, Memory>,
        procs: &mut [R],
        funcs: &mut FuncTable,
    ) -> Option<(u64, Stamp, Held)> {
        if self.mend && e.seam & seam::SYNC_BEGIN != 0 {
            return None;
        }
        let pos = e.pos + self.base;
        let held = match e.item {
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
                let first = e.seam & seam::FIRST_CHECKPOINT != 0;
                let at = |offset| Held::Checkpoint {
                    offset,
                    ip,
                    insn: insn + self.base,
                    slot,
                    begins: begins && !(self.mend && e.seam & seam::SYNC_CHECKPOINT != 0),
                };
                if first && !self.orphans.is_empty() {
                    for o in std::mem::take(&mut self.orphans) {
                        if let Some(p) = q.progress {
                            p.segment_done();
                        }
                        self.extra.push((pos, e.stamp, at(o)));
                    }
                }
                at(offset + self.start)
            }
            Item::Raw(mut ev, slot) => {
                let proc = q.thread_procs.get(slot).copied().unwrap_or(0);
                let r = procs.get_mut(proc)?;
                if !resolve_raw(r, &mut ev, funcs) {
                    return None;
                }
                Held::Event(ev, slot)
            }
            Item::Anchor(_) => return None,
        };
        Some((pos, e.stamp, held))
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
            retime: false,
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
