//! The walker: one queue's blocks into branch events. Each block end is a
//! candidate event whose target is the next block's start; only jumps that
//! leave the current function become events, which a cache of recently
//! resolved address ranges makes cheap. A disable that names an IP is a
//! branch out of the IP filter's ranges, which becomes the branch and an
//! `[untraced]` gap (see `leave_filter`). It keeps the clock, the
//! checkpoint at every PSB and the counters of the walk.

use super::digest::{Digests, Op};
use super::{
    release, scheduled, seam, Blocks, Built, Held, Item, Observe, QueueWalk, Recording, Schedule,
    Sink, WalkFigures,
};
use crate::names::resolve::{Resolve, Resolved};
use crate::passes::event::{EndReason, Event, EventKind, FuncId, FuncTable, UNKNOWN};
use crate::passes::stack::{Guessed, Stitch};
use crate::progress::DecodeProgress;
use crate::pt::block::{Block, BlockEnd, BlockItem, MemoEntry, PtError};
use crate::pt::timing::{Clock, ToNs};
use ptscope_model::Checkpoint;

/// Slots of the walker's direct-mapped caches.
const RECENT: usize = 1024;

const NO_RANGE: Resolved = Resolved {
    func: UNKNOWN,
    lo: 1,
    hi: 0,
    entry: 0,
    provisional: false,
};

/// The walker's cache of resolved ranges, which a walker of chunks keeps
/// from one chunk to its next.
pub(crate) type Recent = [Resolved; RECENT];

/// What a chunk walk is given besides the queue: where it stops, what it
/// records into, whether it builds its stacks (with `stitch`, a builder
/// used before if there is one), and what its walker keeps from one chunk
/// to the next.
pub(crate) struct ChunkWalk<'a> {
    pub end_at: u64,
    pub rec: Recording,
    pub speculate: bool,
    pub stitch: Option<Stitch>,
    pub kept: &'a mut Kept,
}

/// What a walker of chunks keeps from one to the next, given back at each
/// chunk's end (`None`: none yet): its cache of resolved ranges and its
/// digests of memo entries, and the clock of a chunk that builds its
/// stacks, whose buffer stays warm.
#[derive(Default)]
pub(crate) struct Kept {
    recent: Option<Box<Recent>>,
    digests: Option<Box<Digests>>,
    clock: Option<Clock<Held>>,
}

fn recent_slot(addr: u64) -> usize {
    // Fibonacci hashing: call sites are spread, low bits alone collide.
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % RECENT
}

struct Walker<'r, 'i, R: Resolve, D: Blocks<'i>, O: Observe, S: Sink + ?Sized> {
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
    to_ns: &'r ToNs,
    clock: Clock<Held>,
    sink: &'r mut S,
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
    /// What memo entries' blocks made (`digest`), and the position the
    /// entry whose digest is being made starts at.
    digests: Box<Digests>,
    digest_at: u64,
    /// Scratch for an entry's blocks.
    entry_blocks: Vec<(Block, bool)>,
    psbs: &'r [u64],
    next_psb: usize,
    /// `psbs[next_psb]`, or never.
    next_psb_at: u64,
    /// A chunk walk records the clock's input here instead of timing it,
    /// and stops at the PSB at offset `end_at` (where the next chunk
    /// starts): see [`crate::passes::coarse::chunks`].
    record: Option<Recording>,
    end_at: u64,
    /// The trace-begin being emitted is the one a block after a sync makes.
    sync_begin: bool,
    /// A chunk walk still owes the trace-begin its first sync asks for.
    from_sync: bool,
    /// A chunk walk that builds its own stacks past its first anchor.
    spec: Option<Box<Speculation>>,
    /// PSB segments a chunk walk has checkpointed, for the progress: told
    /// once the chunk is walked, since one that gives up on its stacks is
    /// walked again.
    segments: u64,
}

/// What a chunk walk that builds its own stacks (see
/// `passes::stack::speculate`) holds: from its first anchor on, its items
/// are timed by its own clock and go to its own stack builder, not to the
/// recording. The items after its last anchor are recorded again at its
/// end, since their times need the next chunk's first.
struct Speculation {
    clock: Clock<Held>,
    built: Built,
    started: bool,
    failed: bool,
}

/// The sink of a chunk's own stack builder (one thread).
struct ChunkStacks<'a> {
    stitch: &'a mut Stitch,
    checkpoints: &'a mut Vec<Guessed<Checkpoint>>,
}

impl Sink for ChunkStacks<'_> {
    #[inline(always)]
    fn event(&mut self, _: usize, ev: &Event, funcs: &FuncTable) {
        self.stitch.event(ev, funcs);
    }

    fn checkpoint(&mut self, _: usize, at: Checkpoint) {
        let cp = self.stitch.checkpoint(at);
        self.checkpoints.push(cp);
    }
}

pub(super) fn run<'i, D: Blocks<'i>, R: Resolve, O: Observe, S: Sink + ?Sized>(
    dec: &mut D,
    q: QueueWalk<'_, 'i, D::Image>,
    procs: &mut [R],
    funcs: &mut FuncTable,
    sink: &mut S,
    obs: &mut O,
    chunk: Option<ChunkWalk<'_>>,
) -> Result<(Vec<WalkFigures>, Option<Recording>), PtError> {
    let (end_at, record, speculate, stitch, mut kept) = match chunk {
        Some(c) => (c.end_at, Some(c.rec), c.speculate, c.stitch, Some(c.kept)),
        None => (u64::MAX, None, false, None, None),
    };
    let QueueWalk {
        queue,
        images,
        thread_procs,
        schedule,
        to_ns,
        unit,
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
    // An address resolves alike in every chunk of one process's trace
    // (chunks do not learn functions): the ranges the last chunk resolved
    // still hold.
    let one_process = thread_procs.len() <= 1 && schedule.is_empty();
    let recent = match kept.as_deref_mut().and_then(|k| k.recent.take()) {
        Some(r) if one_process => r,
        _ => Box::new([NO_RANGE; RECENT]),
    };
    // Made of those ranges' lookups: kept alike.
    let digests = match kept.as_deref_mut().and_then(|k| k.digests.take()) {
        Some(d) if one_process => d,
        _ => Box::default(),
    };
    dec.report_entries(!O::SEES_BLOCKS);
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
        clock: Clock::for_unit(unit),
        sink,
        queue,
        figures: vec![WalkFigures::default(); thread_procs.len().max(1)],
        progress,
        pos: 0,
        branch: None,
        need_begin: true,
        cur: NO_RANGE,
        recent,
        learned: Box::new([0; RECENT]),
        digests,
        digest_at: 0,
        entry_blocks: Vec::new(),
        psbs,
        next_psb: 0,
        next_psb_at: psbs.first().copied().unwrap_or(u64::MAX),
        record,
        end_at,
        sync_begin: false,
        // A chunk walk starts at a sync and owes the trace-begin that sync
        // asks for; so does the last chunk, though nothing ends it.
        from_sync: chunk,
        // Only a thread's own trace: a CPU's moves between threads, whose
        // builders would each need guessing.
        spec: (speculate && one_process).then(|| {
            let clock = kept.as_deref_mut().and_then(|k| k.clock.take());
            Box::new(Speculation {
                clock: clock.unwrap_or_else(|| Clock::for_unit(unit)),
                built: Built {
                    stitch: stitch.unwrap_or_else(Stitch::new),
                    checkpoints: Vec::new(),
                    first: (0, 0),
                    clock: Default::default(),
                },
                started: false,
                failed: false,
            })
        }),
        segments: 0,
    };
    // A cancelled walk stops here; the caller sees the flag.
    dec.walk(|dec, item| {
        w.item(dec, item);
        !w.stopped && !w.obs.full() && !w.progress.is_some_and(|p| p.is_cancelled())
    });
    if !w.stopped {
        w.flush_branch(None);
    }
    if let Some(p) = w.progress {
        p.add_memo(&dec.memo_figures());
    }
    if let Some(rec) = &mut w.record {
        // A chunk that still owes only its sync's trace-begin has not told
        // whether one walk owes one: as the chunk before left it.
        rec.finish(w.pos, (!w.from_sync).then_some(w.need_begin));
        if let Some(mut s) = w.spec.take() {
            if s.started && !s.failed {
                // What its clock still holds is timed by the next chunk.
                for (pos, held) in s.clock.take_pending() {
                    rec.push(pos, Item::Held(held), 0);
                }
                s.built.clock = s.clock.state();
                rec.built = Some(Box::new(s.built));
            }
            rec.gave_up = s.failed;
            if let Some(k) = kept.as_deref_mut() {
                s.clock.reset();
                k.clock = Some(s.clock);
            }
        }
        rec.segments = w.segments;
    }
    let Walker {
        mut clock,
        funcs,
        to_ns,
        sink,
        queue,
        figures,
        record,
        recent,
        digests,
        ..
    } = w;
    if let Some(kept) = kept {
        kept.recent = Some(recent);
        kept.digests = Some(digests);
    }
    clock.finish(|s, h| release(sink, queue, funcs, to_ns, s, h));
    Ok((figures, record))
}

impl<'i, R: Resolve, D: Blocks<'i>, O: Observe, S: Sink + ?Sized> Walker<'_, 'i, R, D, O, S> {
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
        let Some(slot) = scheduled(self.schedule, self.to_ns.at(tsc)) else {
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
        self.digests.clear();
    }

    fn emit(&mut self, kind: EventKind, from: u64, to: u64) {
        if self.record.is_some() {
            // Each end once: looked up again, under another function's
            // range, an address falls to the cache of recent ranges, which
            // a program with much code thrashes (python3's missed 4.5
            // times as often).
            let from_r = (from != 0).then(|| self.resolve(from));
            let to_r = (to != 0).then(|| self.resolve(to));
            if from_r.is_some_and(|r| r.provisional) || to_r.is_some_and(|r| r.provisional) {
                let ev = Event {
                    from,
                    to,
                    ..Event::new(0, kind)
                };
                self.obs.event(self.slot, self.pos, &ev);
                if self.speculating() {
                    // Resolved by the replay, which learns from it.
                    return self.give_up();
                }
                // Resolved by the replay each time.
                self.digests.spoil();
                let item = Item::Raw(ev, self.slot);
                self.record_item(item);
                return;
            }
            // Learning only ever splits provisional ranges.
            return self.push_resolved(kind, (from, from_r), (to, to_r));
        }
        self.emit_resolved(kind, from, to)
    }

    /// Emits an event whose ends are resolved (`None`: address 0).
    #[inline(always)]
    fn push_resolved(
        &mut self,
        kind: EventKind,
        (from, from_r): (u64, Option<Resolved>),
        (to, to_r): (u64, Option<Resolved>),
    ) {
        let (to_fn, to_is_entry) = to_r.map_or((UNKNOWN, false), |r| (r.func, r.entry == to));
        self.push_event(Event {
            time: 0,
            kind,
            from,
            to,
            from_fn: from_r.map_or(UNKNOWN, |r| r.func),
            to_fn,
            to_is_entry,
            estimated: true,
        });
    }

    /// Emits an event, learning that a call's target is a function's
    /// entry before resolving it.
    #[inline(always)]
    fn emit_resolved(&mut self, kind: EventKind, from: u64, to: u64) {
        let from_r = (from != 0).then(|| self.resolve(from));
        if kind == EventKind::Call && to != 0 {
            let slot = recent_slot(to);
            if self.learned[slot] != to {
                if self.procs[self.proc].learn_entry(to, self.funcs) {
                    self.forget_ranges();
                }
                self.learned[slot] = to;
            }
        }
        let to_r = (to != 0).then(|| self.resolve(to));
        self.push_resolved(kind, (from, from_r), (to, to_r));
    }

    #[inline(always)]
    fn push_event(&mut self, ev: Event) {
        if self.digests.making() {
            let off = u32::try_from(self.pos - self.digest_at).ok();
            self.digests.keep(off.and_then(|off| Op::event(off, &ev)));
        }
        self.obs.event(self.slot, self.pos, &ev);
        let held = Held::Event(ev, self.slot);
        match self.record {
            Some(_) => match &mut self.spec {
                Some(s) if s.started => s.clock.push(self.pos, held),
                _ => self.record_item(Item::Held(held)),
            },
            None => self.clock.push(self.pos, held),
        }
    }

    /// Whether a chunk walk builds its stacks now.
    fn speculating(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| s.started)
    }

    /// A chunk walk cannot build its stacks: it stops, to be walked again.
    #[cold]
    fn give_up(&mut self) {
        if let Some(s) = &mut self.spec {
            s.failed = true;
        }
        self.digests.spoil();
        self.stopped = true;
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
        if self.clock.counts_instructions() {
            // Times count instructions: a stray timing packet in a trace
            // without TSC (as its config says) cannot time anything.
            return;
        }
        self.last_tsc = Some(tsc);
        self.obs.anchor(self.pos, tsc);
        if let Some(r) = &mut self.record {
            let Some(s) = self.spec.as_deref_mut() else {
                r.anchor(self.pos, tsc);
                return;
            };
            if s.started {
                let Speculation { clock, built, .. } = s;
                let mut sink = ChunkStacks {
                    stitch: &mut built.stitch,
                    checkpoints: &mut built.checkpoints,
                };
                let (queue, funcs, to_ns) = (self.queue, &*self.funcs, self.to_ns);
                clock.anchor(self.pos, tsc, |st, h| {
                    release(&mut sink, queue, funcs, to_ns, st, h)
                });
                if built.stitch.failed() {
                    self.give_up();
                }
                return;
            }
            r.anchor(self.pos, tsc);
            // Past the chunk's seam (its sync's begin and first
            // checkpoint, which the replay mends), at an anchor: from here
            // on its own clock times it, and its own builder builds.
            if !self.from_sync && r.any_checkpoint && !s.failed {
                s.started = true;
                s.built.first = (self.pos, tsc);
                s.clock.anchor(self.pos, tsc, |_, _| {});
                r.push(self.pos, Item::Built, 0);
                r.built_at = r.body.len() - 1;
            }
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
        clock.anchor(*pos, tsc, |s, h| release(*sink, *queue, funcs, to_ns, s, h));
    }

    /// Emits the held branch now that its target is known (`None`: never).
    #[inline(always)]
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

    #[inline(always)]
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

    fn tick(&mut self, tsc: u64) {
        self.figures().ticks += 1;
        self.anchor(tsc);
    }

    /// A memo entry replayed: its first block as any block (it settles the
    /// branch pending from before), the rest as they were made the last
    /// time, or made now and kept (see `digest`).
    fn entry(&mut self, dec: &D, e: MemoEntry) {
        self.block(dec, e.first);
        let tsc = e.tsc.unwrap_or(0);
        if e.first_ticks {
            self.tick(tsc);
        }
        if self.stopped {
            return;
        }
        let at = self.pos;
        if let Some(d) = self.digests.get(e.id) {
            for i in d.ops() {
                let op = self.digests.op(i);
                self.pos = at + op.off();
                match op.as_event() {
                    Some(ev) => self.push_event(ev),
                    None => self.tick(tsc),
                }
                if self.stopped {
                    return;
                }
            }
            self.pos = at + d.insns as u64;
            let f = self.figures();
            f.blocks += d.blocks as u64;
            f.instructions += d.insns as u64;
            self.branch = d.branch;
            return;
        }
        let mut blocks = std::mem::take(&mut self.entry_blocks);
        blocks.clear();
        dec.entry_blocks(&e, &mut blocks);
        self.digests.start();
        self.digest_at = at;
        for &(b, ticks) in &blocks {
            self.block(dec, b);
            if ticks {
                let off = u32::try_from(self.pos - at).ok();
                self.digests.keep(off.map(Op::tick));
                self.tick(tsc);
            }
            if self.stopped {
                break;
            }
        }
        if self.stopped {
            self.digests.spoil();
        }
        let insns = self.pos - at;
        self.digests
            .finish(e.id, blocks.len() as u32, insns, self.branch);
        self.entry_blocks = blocks;
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
            match (self.progress, &self.record) {
                (_, Some(_)) => self.segments += 1,
                (Some(p), None) => p.segment_done(),
                (None, None) => {}
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
        if let Some(s) = self.spec.as_deref_mut().filter(|s| s.started) {
            s.clock.push(self.pos, held);
            return;
        }
        match &mut self.record {
            Some(r) => {
                let mut seam = if r.any_checkpoint {
                    0
                } else {
                    seam::FIRST_CHECKPOINT
                };
                // Its trace-begin is the chunk's sync's, not one walk's:
                // every checkpoint taken before that begin is made (a PSB+
                // cut short by the next PSB checkpoints both at once).
                if self.from_sync && self.need_begin {
                    seam |= seam::SYNC_CHECKPOINT;
                }
                r.any_checkpoint = true;
                r.push(self.pos, Item::Held(held), seam);
            }
            None => self.clock.push(self.pos, held),
        }
    }

    fn item(&mut self, dec: &mut D, item: BlockItem) {
        // Before the chunk's end, nearly every item: told apart by the
        // decoder's offset and the item's kind, without working out the
        // offset an error or overflow stands at.
        let rare = matches!(item, BlockItem::Error { .. } | BlockItem::Overflow { .. });
        if self.end_at != u64::MAX && (rare || dec.offset() > self.end_at) {
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
            BlockItem::Entry(e) => self.entry(dec, e),
            BlockItem::Tick { tsc, .. } => self.tick(tsc),
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
                if let (Some(to), false) = (ip, status_update) {
                    return self.leave_filter(to);
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

    /// A disable that names the held branch's target `to`: the branch
    /// left the IP filter's ranges (a syscall's or a context switch's
    /// disable has no IP). A call is shown, its callee named by the target.
    /// A return is shown without its target (0): it goes back into code
    /// the trace does not show, under the frame below. A jump is shown
    /// only when it enters a named function at its entry (a PLT stub's jump
    /// into the library function it stands for): a jump elsewhere lands in
    /// code that is never traced, so it would only make a mid-function or
    /// nameless frame; the jump's own function stays the callee.
    /// The untraced gap then nests under whatever frame is on top, so the
    /// disable names no source.
    fn leave_filter(&mut self, to: u64) {
        match self.branch {
            Some((BlockEnd::Call, _)) => self.flush_branch(Some(to)),
            Some((BlockEnd::Return, from)) => self.emit(EventKind::Return, from, 0),
            Some((_, from)) => {
                let target = self.resolve(to);
                let source = self.resolve(from);
                let outside = to < source.lo || to >= source.hi;
                let named = !self.funcs.name(target.func).starts_with('[');
                if named && target.entry == to && outside {
                    self.flush_branch(Some(to));
                }
            }
            None => {}
        }
        self.branch = None;
        self.emit(EventKind::TraceEnd(EndReason::Other), 0, 0);
    }

    fn push_error(&mut self, func: FuncId) {
        let mut ev = Event::new(0, EventKind::Error);
        ev.to_fn = func;
        self.push_event(ev);
    }
}
