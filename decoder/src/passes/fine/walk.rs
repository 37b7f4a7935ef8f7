//! The re-decode walk's observer: it records what the coarse pass's walker
//! does for one thread in one segment, then replays it into instructions,
//! each with its time (on the coarse pass's clock) and the store depth of
//! the function span it ran in. It is kept apart from [`LineSource`] so the
//! timing and depth rules that must match the coarse pass sit together.
//! Each block's instruction addresses are decoded once per segment and
//! remembered by its start (a loop's body is not decoded again on every
//! trip), so decoding instructions costs little beside the walk; what a
//! segment costs besides is per instruction (its time, depth, line and
//! place in a line span): some 3.5 times the walk in all (`--bench
//! lines`). Instructions are timed as runs of consecutive positions, by
//! the coarse pass's clock ([`Stamps::each`]), without a division each.
//!
//! [`LineSource`]: super::LineSource

use crate::pt::timing::{Clock, Stamps, ToNs};
use iced_x86::{Decoder, DecoderOptions, Instruction};
use rustc_hash::FxHashMap;

use crate::passes::coarse::{Checkpoint, Observe};
use crate::passes::event::{Event, EventKind, FuncTable};
use crate::passes::stack::{OpenFrame, StackBuilder};
use crate::pt::block::Block;
use crate::pt::memory::Memory;

use super::{Insn, Segment, NO_CHAIN};

/// Timed output the fine pass does not need: it times instructions itself.
/// What the walk did, in order, for the watched thread.
#[derive(Clone, Copy, Debug)]
enum Step {
    Block(u64, Block),
    Anchor(u64, u64),
}

use ptscope_model::MAX_SEGMENT_INSNS;

/// The observer: records the watched thread's blocks and events, and every
/// anchor, to be replayed once the walk is done.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) slot: usize,
    /// Instructions in `steps`; past [`MAX_SEGMENT_INSNS`] the walk stops.
    insns: u64,
    steps: Vec<Step>,
    events: Vec<(u64, Event)>,
    /// The last anchor: a disable at its position ends there, exactly.
    last_anchor: Option<(u64, u64)>,
    /// Trace stops at these positions (with the time, if an anchor says).
    breaks: Vec<(u64, Option<u64>)>,
}

impl Observe for Recorder {
    fn block(&mut self, slot: usize, pos: u64, b: &Block) {
        if slot != self.slot || self.full() {
            return;
        }
        let n = u64::from(b.ninsn);
        if self.insns + n > MAX_SEGMENT_INSNS {
            // It does not fit: the segment ends before it.
            self.insns = MAX_SEGMENT_INSNS;
            return;
        }
        self.insns += n;
        self.steps.push(Step::Block(pos, *b));
    }

    fn full(&self) -> bool {
        self.insns >= MAX_SEGMENT_INSNS
    }

    fn event(&mut self, slot: usize, pos: u64, ev: &Event) {
        if slot != self.slot {
            return;
        }
        if matches!(ev.kind, EventKind::TraceEnd(_) | EventKind::Error) {
            let at = self.last_anchor.filter(|a| a.0 == pos).map(|a| a.1);
            self.breaks.push((pos, at));
        }
        self.events.push((pos, *ev));
    }

    fn anchor(&mut self, pos: u64, tsc: u64) {
        self.last_anchor = Some((pos, tsc));
        self.steps.push(Step::Anchor(pos, tsc));
    }
}

/// How many blocks a fresh sync may replay from before the checkpoint: the
/// coarse pass read the PSB while in the middle of a block.
const HEAD_BLOCKS: usize = 4;

/// The fine pass's memo: the instruction addresses of every block a
/// segment runs, decoded once per block start and mode, so that a loop's
/// body is decoded once rather than once per iteration. A block that ran
/// further than before from the same start decodes it again, whole.
#[derive(Default)]
struct Boundaries {
    /// Per (start, mode): where its addresses are in `ips`, and how many.
    by_start: FxHashMap<(u64, u8), (u32, u32)>,
    ips: Vec<u64>,
}

impl Boundaries {
    /// The addresses of `b`'s instructions, decoded in the mode it ran in
    /// (MODE.Exec), as the coarse pass did; fewer where the code cannot be
    /// read.
    fn of(&mut self, memory: &Memory, b: &Block) -> &[u64] {
        let key = (b.ip, b.bitness);
        let n = b.ninsn as usize;
        if let Some(&(at, len)) = self.by_start.get(&key) {
            if len as usize >= n {
                return &self.ips[at as usize..at as usize + n];
            }
        }
        let at = self.ips.len();
        let bitness = u32::from(b.bitness);
        let mut ip = b.ip;
        let mut d: Option<Decoder> = None;
        let mut decoded = Instruction::default();
        for _ in 0..n {
            if d.as_ref().is_none_or(|d| !d.can_decode()) {
                d = memory
                    .bytes_at(ip)
                    .map(|bytes| Decoder::with_ip(bitness, bytes, ip, DecoderOptions::NONE));
            }
            let mut next = d.as_mut().and_then(|d| {
                d.decode_out(&mut decoded);
                (!decoded.is_invalid()).then(|| decoded.next_ip())
            });
            if next.is_none() {
                // iced stops at an image's end and at what it does not
                // know (APX's JMPABS): read it as the walk did.
                next = crate::pt::flow::next_ip(memory, ip, bitness);
                d = None;
            }
            let Some(next) = next else { break };
            self.ips.push(ip);
            ip = next;
        }
        let len = self.ips.len() - at;
        self.by_start.insert(key, (at as u32, len as u32));
        &self.ips[at..]
    }
}

impl Recorder {
    /// `ends`: the time at the segment's first instruction and, when known,
    /// after its last (instruction count, TSC), from the coarse pass.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish(
        self,
        cp: &Checkpoint,
        ends: ((u64, u64), Option<(u64, u64)>),
        frames: &[OpenFrame],
        funcs: &FuncTable,
        memory: &Memory,
        (to_ns, unit): (&ToNs, ptscope_model::TimeUnit),
        (pid, tid): (i32, i32),
    ) -> Segment {
        // Where the coarse pass's checkpoint is: the first block at its IP.
        let head = self
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Block(pos, b) => Some((*pos, b.ip)),
                Step::Anchor(..) => None,
            })
            .take(HEAD_BLOCKS)
            .find(|&(_, ip)| ip == cp.ip)
            .or_else(|| {
                self.steps.iter().find_map(|s| match s {
                    Step::Block(pos, b) => Some((*pos, b.ip)),
                    Step::Anchor(..) => None,
                })
            })
            .map_or(0, |(pos, _)| pos);

        // The depth of the running frame, from the events after the head.
        let mut builder = StackBuilder::new(pid, tid, String::new());
        // Only its levels are used. The events carry the walk's raw times,
        // not the store's nanoseconds, so the seed starts at zero too: the
        // spans it files on the way stay in order.
        let seed: Vec<OpenFrame> = frames
            .iter()
            .map(|&f| OpenFrame { start: 0, ..f })
            .collect();
        builder.seed(&seed, 0, !cp.begins);
        let base = cp.depth as i32;
        // Past a restart of a stack deeper than `stack::MAX_DEPTH` this
        // builder and the coarse one no longer agree on depths (it knows
        // only the checkpoint's frames); such lines stay within the
        // thread's rows, at worst beside their spans.
        let deepest = crate::passes::stack::MAX_DEPTH as i32 - 1;
        let depth_of = |level: i32| (level + base).clamp(0, deepest) as u32;
        let mut levels: Vec<(u64, u32)> = vec![(head, depth_of(builder.top_level()))];
        for (pos, ev) in &self.events {
            // The seed holds what came before; the sync's own trace-begin
            // is news only where the coarse pass's trace began too.
            let moot =
                *pos < head || (*pos == head && ev.kind == EventKind::TraceBegin && !cp.begins);
            if moot {
                continue;
            }
            builder.event(ev, funcs);
            levels.push((*pos, depth_of(builder.top_level())));
        }

        // Instructions, timed by the same clock as the coarse pass's events.
        // Sized for them at once: grown by doubling, they were copied and
        // their pages faulted in again and again.
        let count: usize = self
            .steps
            .iter()
            .map(|s| match s {
                Step::Block(pos, b) if *pos >= head => b.ninsn as usize,
                _ => 0,
            })
            .sum();
        let mut insns: Vec<Insn> = Vec::with_capacity(count);
        let mut positions: Vec<u64> = Vec::with_capacity(count);
        let mut exact: Vec<(u64, u64)> = Vec::new();
        // Instructions are held as runs of consecutive positions (a run's
        // first index and how many: a block's, grown by the blocks after
        // it up to the next anchor), timed by the same clock as the coarse
        // pass's events as that many items would be, and converted as they
        // are.
        let mut clock: Clock<(u32, u32)> = Clock::for_unit(unit);
        let time = |insns: &mut [Insn], stamps: &Stamps, p: u64, &(first, n): &(u32, u32)| {
            let run = &mut insns[first as usize..][..n as usize];
            stamps.each(p, n, |k, s| run[k as usize].start = to_ns.at(s.tsc));
        };
        let mut lvl = 0usize;
        let mut bounds = Boundaries::default();
        clock.anchor(head + ends.0 .0, ends.0 .1, |_, _| {});
        for step in &self.steps {
            match *step {
                Step::Anchor(pos, tsc) => {
                    exact.push((pos, tsc));
                    clock.anchor_with(pos, tsc, |s, p, run| time(&mut insns, s, p, run));
                }
                Step::Block(pos, b) => {
                    if pos < head {
                        continue;
                    }
                    let first = insns.len() as u32;
                    let ips = bounds.of(memory, &b);
                    let end = pos + ips.len() as u64;
                    for (k, &ip) in ips.iter().enumerate() {
                        let p = pos + k as u64;
                        while lvl + 1 < levels.len() && levels[lvl + 1].0 <= p {
                            lvl += 1;
                        }
                        insns.push(Insn {
                            ip,
                            start: 0,
                            end: 0,
                            depth: levels[lvl].1,
                            chain: NO_CHAIN,
                            exact: false,
                            bitness: b.bitness,
                            addr: 0,
                        });
                    }
                    positions.extend(pos..end);
                    let n = insns.len() as u32 - first;
                    match clock.last_held() {
                        // The block goes on from the run held before it,
                        // as one block goes on from the next: one run.
                        Some((at, (f, len)))
                            if *at + u64::from(*len) == pos && *f + *len == first =>
                        {
                            *len += n
                        }
                        _ => clock.push(pos, (first, n)),
                    }
                }
            }
        }
        if let Some((n, tsc)) = ends.1 {
            clock.anchor_with(head + n, tsc, |s, p, run| time(&mut insns, s, p, run));
        }
        clock.finish_with(|s, p, run| time(&mut insns, s, p, run));

        // An instruction at an anchor's very position was timed by it.
        // Both are in order: each anchor is looked for past the last.
        let mut from = 0;
        for &(a, _) in &exact {
            from += positions[from..].partition_point(|&p| p < a);
            match positions.get(from) {
                Some(&p) if p == a => insns[from].exact = true,
                Some(_) => {}
                None => break,
            }
        }
        // Each ends where the next starts, unless trace stopped between.
        let n = insns.len();
        let per_insn = match (insns.first(), insns.last()) {
            (Some(a), Some(b)) if n > 1 => (b.start - a.start.min(b.start)) / (n as u64 - 1),
            _ => 0,
        };
        let mut brk = 0;
        for i in 0..n {
            let p = positions[i];
            while brk < self.breaks.len() && self.breaks[brk].0 <= p {
                brk += 1;
            }
            let stop = self
                .breaks
                .get(brk)
                .filter(|b| i + 1 >= n || b.0 <= positions[i + 1]);
            let start = insns[i].start;
            insns[i].end = match stop {
                Some(&(_, Some(tsc))) => to_ns.at(tsc).max(start),
                Some(&(_, None)) => start.saturating_add(per_insn),
                None if i + 1 < n && positions[i + 1] == p + 1 => insns[i + 1].start.max(start),
                None => start.saturating_add(per_insn),
            };
        }
        let mut seg = Segment::default();
        seg.pid = pid;
        seg.tid = tid;
        seg.insns = insns;
        seg
    }
}
