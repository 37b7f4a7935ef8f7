//! Building one chunk's stacks before the stack it starts on is known, so
//! that every core builds stacks, not only the one that replays chunks in
//! order (`passes::coarse::chunks`).
//!
//! A chunk's builder starts on an empty stack, and the frames below it,
//! which the chunks before will have opened, are guessed as its events
//! reach them: a return to `main` on an empty stack guesses that `main` is
//! the frame below, as it nearly always is. Every guess, and every lookup
//! that found nothing below, is kept. Spans that closed within the chunk
//! are built as they will be; those of guessed frames, and the ties
//! (zero-length spans) that depend on a frame below, wait for the stack
//! they need. [`StackBuilder::stitch`] checks every guess against the real
//! stack and, if all hold, files the chunk's spans and frames as the
//! builder would have from its events. If one does not hold, it changes
//! nothing, and the chunk is replayed as it always was. Paths that need
//! more than the frames themselves (a decode error's resume, a caller
//! synthesized below an empty stack, a depth reset) give up at once.

use super::{Frame, Segment, StackBuilder, MAX_DEPTH, NO_TIE};
use crate::passes::event::{Event, EventKind, FuncId, FuncTable, UNKNOWN};
use ptscope_model::{OpenFrame, Span, StackStats};

/// Spans' room a chunk's builder keeps for the next chunk at least (64 KB).
const SPARE_SPANS: usize = 4096;

/// In a chunk's ties, the parent of a tie decided at the stitch.
const DEFERRED: u32 = NO_TIE - 1;

/// A frame of the real stack below a chunk's start, counted down from
/// its top (0), or a frame the chunk opened, by its start.
#[derive(Clone, Copy, Debug)]
enum Who {
    Below(usize),
    Local(u64),
}

/// A span whose start, or whose tie, needs the frames below the chunk.
#[derive(Clone, Copy, Debug)]
struct Fixup {
    level: i32,
    popped: Who,
    parent: Who,
    /// The parent's index in the chunk's lane below (0 if the parent is
    /// below the chunk's start).
    parent_at: u32,
    /// When it was popped (the span's end, at least its start).
    end: u64,
    end_flags: u32,
}

/// What a chunk's builder assumed of the stack below its start.
#[derive(Clone, Debug, Default)]
pub(super) struct Guesses {
    /// The functions of the frames below, guessed top first.
    guessed: Vec<FuncId>,
    /// Of those, how many are still on the stack (at its bottom).
    pub(super) on_stack: usize,
    /// Lookups that found nothing down to the guessed frames: the real
    /// frames below `.1` guessed ones do not run `.0` either.
    not_below: Vec<(FuncId, usize)>,
    fixups: Vec<Fixup>,
    /// A path it cannot take without knowing the stack: the chunk is
    /// replayed instead.
    pub(super) failed: bool,
    /// The deepest stack, less the guessed frames (the real depth then,
    /// less the real stack's at the start).
    max_rel: isize,
    pub(super) first_time: Option<u64>,
}

impl Guesses {
    pub(super) fn note_depth(&mut self, len: usize) {
        self.max_rel = self.max_rel.max(len as isize - self.guessed.len() as isize);
    }

    pub(super) fn not_below(&mut self, func: FuncId) {
        self.not_below.push((func, self.guessed.len()));
    }
}

/// How a chunk's function ids become the builder's: ids below `shared`
/// are the same in both, the others are `ids[id - shared]` once known, and
/// `adopt` learns them (by index past `shared`) the first time.
pub(crate) struct Remap<'a> {
    pub shared: FuncId,
    pub ids: &'a mut [Option<FuncId>],
    pub adopt: &'a mut dyn FnMut(usize) -> FuncId,
}

impl Remap<'_> {
    #[inline]
    fn get(&mut self, f: FuncId) -> FuncId {
        if f < self.shared {
            return f;
        }
        let i = (f - self.shared) as usize;
        match self.ids.get(i) {
            Some(Some(g)) => *g,
            Some(None) => {
                let g = (self.adopt)(i);
                self.ids[i] = Some(g);
                g
            }
            // Not one of the chunk's (`UNKNOWN`).
            None => f,
        }
    }
}

/// A checkpoint taken by a chunk's builder, its frames still to complete.
#[derive(Clone, Debug)]
pub(crate) struct Guessed<C> {
    at: C,
    /// Frames guessed, and those of them still on the stack, then.
    guessed: usize,
    on_stack: usize,
    /// The chunk's own frames then, at `frames[from..to]` of
    /// [`Stitch::frames`] (the guessed ones first).
    from: usize,
    to: usize,
}

/// A chunk's builder as the stitch takes it: the builder, and the frames
/// its checkpoints saw.
pub(crate) struct Stitch {
    builder: StackBuilder,
    frames: Vec<OpenFrame>,
}

impl Stitch {
    /// A builder for a chunk of a thread's trace: tracing on, its stack
    /// below unknown.
    pub(crate) fn new() -> Stitch {
        let mut builder = StackBuilder::new(0, 0, String::new());
        builder.opened = true;
        builder.guess = Some(Box::default());
        builder.segment.mapped_growth = false;
        Stitch {
            builder,
            frames: Vec::new(),
        }
    }

    /// Makes it a builder for another chunk, keeping its buffers.
    pub(crate) fn reset(&mut self) {
        let b = &mut self.builder;
        let mut segment = std::mem::take(&mut b.segment);
        let filled = segment.spans;
        let Segment {
            lanes,
            spare,
            long,
            ties,
            ..
        } = &mut segment;
        // Kept up to twice what this chunk filled, so that the next chunk
        // like it writes into memory it has touched (fresh pages for every
        // chunk cost the loop's two-core decode a tenth), but the builders
        // in the pool do not each come to hold the most any chunk ever
        // needed at every level (2 MB more at python3's peak).
        let kept: usize = spare.iter().map(Vec::capacity).sum();
        let room = SPARE_SPANS.max(2 * filled);
        let mut budget = room.saturating_sub(kept);
        spare.extend(lanes.drain(..).filter_map(|mut lane| {
            budget = budget.checked_sub(lane.capacity())?;
            lane.clear();
            Some(lane)
        }));
        long.clear();
        ties.clear();
        segment.spans = 0;
        segment.low = 0;
        fn cleared<T>(mut v: Vec<T>) -> Vec<T> {
            v.clear();
            v
        }
        let Guesses {
            guessed,
            not_below,
            fixups,
            ..
        } = *b.guess.take().unwrap_or_default();
        let guess = Guesses {
            guessed: cleared(guessed),
            not_below: cleared(not_below),
            fixups: cleared(fixups),
            ..Guesses::default()
        };
        *b = StackBuilder {
            segment,
            stack: cleared(std::mem::take(&mut b.stack)),
            closed: cleared(std::mem::take(&mut b.closed)),
            opened: true,
            guess: Some(Box::new(guess)),
            ..StackBuilder::new(0, 0, String::new())
        };
        self.frames.clear();
    }

    /// Takes the chunk's next event, unless it gave up.
    #[inline(always)]
    pub(crate) fn event(&mut self, ev: &Event, funcs: &FuncTable) {
        if self.takes(ev) {
            self.builder.event(ev, funcs);
        }
    }

    /// Whether the builder takes `ev`, or has failed.
    #[inline(always)]
    fn takes(&mut self, ev: &Event) -> bool {
        let Some(g) = self.builder.guess.as_deref_mut() else {
            return false;
        };
        if g.failed || ev.kind == EventKind::Error {
            // An error's resume can close the stack it cannot see.
            g.failed = true;
            return false;
        }
        g.first_time.get_or_insert(ev.time);
        true
    }

    /// Whether it gave up: the chunk must be replayed.
    pub(crate) fn failed(&self) -> bool {
        self.builder.guess.as_ref().is_none_or(|g| g.failed)
    }

    /// Notes a checkpoint `at` here.
    pub(crate) fn checkpoint<C>(&mut self, at: C) -> Guessed<C> {
        let g = self.builder.guess.as_deref().expect("a chunk's builder");
        let from = self.frames.len();
        self.frames.extend(self.builder.frames());
        Guessed {
            at,
            guessed: g.guessed.len(),
            on_stack: g.on_stack,
            from,
            to: self.frames.len(),
        }
    }
}

impl StackBuilder {
    /// Gives up on the chunk (see [`Guesses::failed`]).
    pub(super) fn fail(&mut self) {
        if let Some(g) = &mut self.guess {
            g.failed = true;
        }
    }

    /// Whether the top frame is one below the chunk's start (or not yet
    /// known): what it holds besides its function is not known.
    pub(super) fn guessing_top(&self) -> bool {
        self.guess
            .as_ref()
            .is_some_and(|g| self.stack.len() <= g.on_stack)
    }

    /// The top frame's function. A chunk's builder whose own frames are
    /// all closed guesses the next one below: `hint`, the function its
    /// event expects there.
    #[inline]
    pub(super) fn reach(&mut self, hint: FuncId) -> Option<FuncId> {
        match self.stack.last() {
            Some(f) => Some(f.func),
            None => self.guess_below(hint),
        }
    }

    /// [`reach`](Self::reach) on an empty stack.
    #[cold]
    fn guess_below(&mut self, hint: FuncId) -> Option<FuncId> {
        let g = self.guess.as_mut()?;
        if g.failed {
            return None;
        }
        g.guessed.push(hint);
        g.on_stack += 1;
        self.base -= 1;
        if !self.closed.is_empty() {
            self.closed.insert(0, 0);
        }
        self.stack.push(Frame {
            func: hint,
            start: 0,
            flags: 0,
            call_site: 0,
            kernel: false,
            mid_from: UNKNOWN,
        });
        Some(hint)
    }

    /// [`pop`](Self::pop) in a chunk's builder: a span of a guessed frame,
    /// and a tie that depends on a frame below, wait for the stitch.
    #[inline(never)]
    pub(super) fn pop_guessing(&mut self, t: u64, end_flags: u32) {
        let Some(g) = self.guess.as_deref_mut() else {
            return;
        };
        let Some(f) = self.stack.pop() else {
            // Pops the real top, whatever it is.
            g.failed = true;
            return;
        };
        let index = self.stack.len();
        if self.closed.len() <= index {
            self.closed.resize(index + 1, 0);
        }
        let m = g.guessed.len();
        let guessed = index < g.on_stack;
        if guessed {
            g.on_stack -= 1;
        }
        let parent = if index == 0 || index - 1 < g.on_stack {
            Who::Below(m - index)
        } else {
            Who::Local(self.stack[index - 1].start)
        };
        let parent_at = index.checked_sub(1).map_or(0, |below| self.closed[below]);
        self.closed[index] += 1;
        let level = self.base + index as i32;
        let segment = &mut self.segment;
        if guessed {
            let at = segment.push(level, t, t, f.func, end_flags);
            g.fixups.push(Fixup {
                level,
                popped: Who::Below(m - 1 - index),
                parent,
                parent_at,
                end: t,
                end_flags,
            });
            segment.ties.push((level, at, DEFERRED));
            return;
        }
        let end = t.max(f.start);
        let at = segment.push(level, f.start, end, f.func, f.flags | end_flags);
        if f.start != end {
            return;
        }
        match parent {
            Who::Local(start) if start == end => segment.ties.push((level, at, parent_at)),
            Who::Local(_) => {}
            Who::Below(_) => {
                g.fixups.push(Fixup {
                    level,
                    popped: Who::Local(f.start),
                    parent,
                    parent_at,
                    end,
                    end_flags,
                });
                segment.ties.push((level, at, DEFERRED));
            }
        }
    }

    /// Files a chunk's builder `chunk` on top of this one, as if this one
    /// had taken the chunk's events, if every guess it made holds; `at`
    /// is given each of its checkpoints, in order, with the whole stack
    /// there and this builder's [`mark`](Self::mark). `remap` maps the
    /// chunk's function ids to this builder's. False, with nothing changed,
    /// if a guess does not hold (the chunk's builder is then only fit for
    /// [`Stitch::reset`]).
    pub(crate) fn stitch<C>(
        &mut self,
        chunk: &mut Stitch,
        checkpoints: Vec<Guessed<C>>,
        mut remap: Remap<'_>,
        mut at: impl FnMut(C, &[OpenFrame], (usize, i32)),
    ) -> bool {
        let Stitch {
            builder: c, frames, ..
        } = chunk;
        let Some(g) = c.guess.as_deref() else {
            return false;
        };
        let n = self.stack.len();
        let m = g.guessed.len();
        let below = |k: usize| n.checked_sub(k + 1).map(|i| &self.stack[i]);
        // Every guess, then what the chunk's builder took for granted.
        let holds = !g.failed
            && self.opened
            && self.error.is_none()
            && self.tracing
            && g.first_time.is_none_or(|t| self.last_time <= t)
            && m <= n
            && g.guessed.iter().enumerate().all(|(k, &f)| {
                below(k)
                    .is_some_and(|r| r.func == remap.get(f) && !r.kernel && r.mid_from == UNKNOWN)
            })
            && g.not_below.iter().all(|&(f, guessed)| {
                let f = remap.get(f);
                self.stack[..n - guessed].iter().all(|r| r.func != f)
            });
        if !holds {
            return false;
        }
        // The chunk's level 0 is the level of the real stack's top + 1.
        let off = self.base + n as i32;
        let top = c.seg_top + off;
        if top > self.seg_top && top - self.base >= MAX_DEPTH as i32 {
            // Deeper than a segment may go: the real builder starts over
            // somewhere in the chunk.
            return false;
        }

        // The checkpoints first: they need the stack as it was.
        for cp in checkpoints {
            let keep = n - cp.guessed + cp.on_stack;
            let mut all: Vec<OpenFrame> = self.frames().take(keep).collect();
            all.extend(
                frames[cp.from + cp.on_stack..cp.to]
                    .iter()
                    .map(|f| OpenFrame {
                        func: remap.get(f.func),
                        mid_from: remap.get(f.mid_from),
                        ..*f
                    }),
            );
            at(cp.at, &all, self.mark());
        }

        // Spans: each lane after the real one's, ids mapped. The chunk's
        // lanes are emptied, not dropped: its builder is used again.
        let Segment {
            lanes,
            low,
            long,
            ties,
            spans,
            ..
        } = &mut c.segment;
        let low = *low;
        let old: Vec<u32> = (0..lanes.len() + 1)
            .map(|i| self.segment.len_at(low - 1 + i as i32 + off))
            .collect();
        let old_at = |level: i32| old[(level - low + 1) as usize];
        for (i, lane) in lanes.iter_mut().enumerate() {
            let level = low + i as i32 + off;
            let shared = remap.shared;
            let remap = &mut remap;
            self.segment.extend(
                level,
                lane.drain(..).map(|s| match s.func() {
                    f if f < shared => s,
                    f => s.with_func(remap.get(f)),
                }),
            );
        }
        self.segment.spans += *spans;
        for &(level, i, ns) in long.iter() {
            self.segment.long.push((level + off, old_at(level) + i, ns));
        }
        let mut fixups = g.fixups.iter();
        for &(level, i, parent) in ties.iter() {
            let index = old_at(level) + i;
            if parent != DEFERRED {
                let parent = old_at(level - 1) + parent;
                self.segment.ties.push((level + off, index, parent));
                continue;
            }
            let fix = fixups.next().expect("a fixup for each deferred tie");
            let (start, end) = match fix.popped {
                Who::Local(start) => (start, fix.end),
                Who::Below(k) => {
                    let r = below(k).expect("checked above");
                    let end = fix.end.max(r.start);
                    let flags = r.flags | fix.end_flags;
                    let (span, long) = Span::closed(r.start, end, r.func, flags);
                    self.segment.set(level + off, index, span);
                    if let Some(ns) = long {
                        self.segment.long.push((level + off, index, ns));
                    }
                    (r.start, end)
                }
            };
            let (tie, parent) = match fix.parent {
                Who::Local(p) => (p == end, old_at(fix.level - 1) + fix.parent_at),
                Who::Below(k) => match below(k) {
                    Some(p) => (p.start == end, old_at(fix.level - 1) + fix.parent_at),
                    None => (end == self.seg_start, 0),
                },
            };
            if start == end && tie {
                self.segment.ties.push((level + off, index, parent));
            }
        }

        // The stack: the real frames left, the chunk's own on top.
        let keep = n - m + g.on_stack;
        debug_assert_eq!(c.base, -(m as i32));
        for (i, &count) in c.closed.iter().enumerate() {
            let real = n - m + i;
            if self.closed.len() <= real {
                self.closed.resize(real + 1, 0);
            }
            self.closed[real] += count;
        }
        self.stack.truncate(keep);
        self.stack
            .extend(c.stack[g.on_stack..].iter().map(|f| Frame {
                func: remap.get(f.func),
                mid_from: remap.get(f.mid_from),
                ..*f
            }));
        self.seg_top = self.seg_top.max(top);
        if g.first_time.is_some() {
            self.last_time = c.last_time;
        }
        self.tracing = c.tracing;
        add_stats(&mut self.stats, &c.stats, n as isize + g.max_rel);
        true
    }
}

/// Adds a chunk's counters to the real builder's; `depth`: the deepest
/// stack the chunk had.
fn add_stats(into: &mut StackStats, c: &StackStats, depth: isize) {
    macro_rules! add {
        ($($count:ident),*) => { $(into.$count += c.$count;)* };
    }
    add!(
        events,
        calls,
        returns,
        tail_calls,
        nonlocal_pops,
        inferred_frames,
        repaired,
        double_enable,
        double_disable,
        errors,
        stack_resets,
        depth_resets
    );
    into.max_depth = into.max_depth.max(depth.max(0) as usize);
}

impl Segment {
    /// Spans filed at `level` so far.
    fn len_at(&self, level: i32) -> u32 {
        let i = level - self.low;
        if self.lanes.is_empty() || i < 0 {
            return 0;
        }
        self.lanes.get(i as usize).map_or(0, |l| l.len() as u32)
    }

    /// Files closed spans at `level`, after those there.
    pub(super) fn extend(&mut self, level: i32, spans: impl ExactSizeIterator<Item = Span>) {
        let mapped_growth = self.mapped_growth;
        let lane = self.lane(level);
        Segment::room(lane, lane.len() + spans.len(), mapped_growth);
        lane.extend(spans);
    }

    /// Puts `span` in place of the one at `index` of `level`.
    fn set(&mut self, level: i32, index: u32, span: Span) {
        self.lanes[(level - self.low) as usize][index as usize] = span;
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_events::events;
    use super::*;
    use crate::passes::event::FuncTable;

    /// A chunk's builder takes random streams with the common events'
    /// short path as by every rule: the same spans, guesses, fixups and
    /// counters.
    #[test]
    fn a_chunks_short_path_builds_what_every_rule_builds() {
        for seed in 1..600u64 {
            let mut funcs = FuncTable::default();
            let evs = events(seed, 120, &mut funcs);
            let mut fast = Stitch::new();
            let mut full = Stitch::new();
            for (i, ev) in evs.iter().enumerate() {
                fast.event(ev, &funcs);
                if full.takes(ev) {
                    full.builder.event_in_full(ev, &funcs);
                }
                assert_eq!(
                    format!("{:?}", fast.builder),
                    format!("{:?}", full.builder),
                    "seed {seed} at {i}"
                );
            }
        }
    }

    fn finished(b: StackBuilder) -> String {
        format!("{:?}", b.finish_with_bases(1))
    }

    /// Split anywhere, a chunk's builder stitched onto the events before
    /// gives what one builder gives, or refuses and changes nothing; and
    /// it refuses seldom on ordinary code.
    #[test]
    fn a_stitched_chunk_builds_what_one_builder_does() {
        let (mut stitched, mut tried) = (0, 0);
        // One builder for every chunk, reset each time, as walkers reuse
        // theirs.
        let mut chunk = Stitch::new();
        for seed in 1..400u64 {
            let mut funcs = FuncTable::default();
            let evs = events(seed, 40, &mut funcs);
            let mut one = StackBuilder::new(1, 1, "t".into());
            let mut want_at = Vec::new();
            for (i, ev) in evs.iter().enumerate() {
                one.event(ev, &funcs);
                want_at.push((i, one.frames().collect::<Vec<_>>(), one.mark()));
            }
            let want = finished(one);
            for split in 1..evs.len() {
                let mut real = StackBuilder::new(1, 1, "t".into());
                for ev in &evs[..split] {
                    real.event(ev, &funcs);
                }
                chunk.reset();
                let mut cps = Vec::new();
                for (i, ev) in evs.iter().enumerate().skip(split) {
                    chunk.event(ev, &funcs);
                    if i % 3 == 0 {
                        cps.push(chunk.checkpoint(i));
                    }
                }
                tried += 1;
                let before = format!("{:?}", real.clone().finish_with_bases(1));
                let mut got_at = Vec::new();
                let remap = Remap {
                    shared: FuncId::MAX,
                    ids: &mut [],
                    adopt: &mut |_| unreachable!("no id is past the shared ones"),
                };
                let ok = real.stitch(&mut chunk, cps, remap, |i, frames, mark| {
                    got_at.push((i, frames.to_vec(), mark));
                });
                if !ok {
                    assert_eq!(
                        format!("{:?}", real.clone().finish_with_bases(1)),
                        before,
                        "seed {seed} split {split}: a refused stitch changed the builder"
                    );
                    for ev in &evs[split..] {
                        real.event(ev, &funcs);
                    }
                    assert_eq!(finished(real), want, "seed {seed} split {split}");
                    continue;
                }
                stitched += 1;
                for (i, frames, mark) in got_at {
                    let (_, f, m) = &want_at[i];
                    assert_eq!((&frames, mark), (f, *m), "seed {seed} split {split} at {i}");
                }
                assert_eq!(finished(real), want, "seed {seed} split {split}");
            }
        }
        // Random code unwinds and re-enters far more than real code does.
        assert!(stitched * 4 > tried, "stitched {stitched} of {tried}");
    }
}
