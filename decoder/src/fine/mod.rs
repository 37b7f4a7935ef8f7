//! The fine pass: one PSB segment of a thread re-decoded down to every
//! instruction and the source lines they ran, on demand.
//!
//! A whole snapshot at line level is too much data, so the coarse pass
//! keeps a [`Checkpoint`] at every PSB instead: the trace offset, the open
//! call stack and the depth it has in the span store. A *segment* is the
//! trace from one PSB to the next. Re-walking it with the coarse pass's own
//! walker (stopping where the coarse pass put the next checkpoint) gives
//! every instruction its position, its time (spread between timing
//! anchors exactly as the coarse pass spreads its events) and, through a
//! stack builder seeded with the checkpoint's frames, the depth of the
//! function span it ran in. Line spans then merge consecutive instructions
//! on the same (function, file, line) at each inline level, from DWARF.
//!
//! The walk is our flow decoder, which agrees block for block with
//! libipt's; the tests hold every segment's instructions to libipt's
//! instruction decoder and to perf's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};

use crate::coarse::{walk_queue, Checkpoint, NoSink, Observe, QueueWalk};
use crate::event::{Event, EventKind, FuncId, FuncTable};
use crate::ffi::{Block, DecoderConfig};
use crate::flow::FlowDecoder;
use crate::memory::Memory;
use crate::model::{ProcessSymbols, ThreadModel};
use crate::progress::DecodeProgress;
use crate::stack::StackBuilder;

/// Why a segment could not be re-decoded.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FineError {
    #[error("thread {tid} has no checkpoint {index}")]
    NoCheckpoint { tid: i32, index: usize },
    #[error("thread {tid}: AUX queue {queue} of its checkpoint is not in the trace")]
    NoQueue { tid: i32, queue: u32 },
    #[error("thread {tid}: the code of process {pid} is not loaded")]
    NoProcess { tid: i32, pid: i32 },
    #[error("thread {tid}: cannot start decoding its code: {error}")]
    Image { tid: i32, error: String },
    #[error("re-decoding was cancelled")]
    Cancelled,
}

/// One frame of an instruction's source position: a function and the line
/// running in it (for an outer frame, the line of the inlined call).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LineFrame {
    pub function: Arc<str>,
    pub file: Arc<str>,
    /// 0 when the line table does not say.
    pub line: u32,
}

/// An instruction's frames, outermost (the real function) first.
pub type Chain = Arc<[LineFrame]>;

/// An instruction without line info.
pub const NO_CHAIN: u32 = u32::MAX;

/// One retired instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub ip: u64,
    /// perf time in ns: when it started, and when the next one did.
    pub start: u64,
    pub end: u64,
    /// Store depth of the function span it ran in.
    pub depth: u32,
    /// Index into [`Segment::chains`], or [`NO_CHAIN`].
    pub chain: u32,
    /// A timing packet gave its start (CYC-exact in a trace with CYC);
    /// otherwise the time is spread between two that did.
    pub exact: bool,
}

/// Consecutive instructions on one source line, at one inline level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineSpan {
    pub start: u64,
    pub end: u64,
    /// Store depth: one below the function span, plus the inline level.
    pub depth: u32,
    /// Its frame is `chains[chain][level]`.
    pub chain: u32,
    /// 0: the real function's line; more: an inlined function's.
    pub level: u32,
    /// Its instructions are `insns[first..first + count]`.
    pub first: u32,
    pub count: u32,
}

impl LineSpan {
    pub fn inlined(&self) -> bool {
        self.level > 0
    }
}

/// One PSB segment of one thread, down to instructions and lines.
#[derive(Debug, Default)]
pub struct Segment {
    /// Which checkpoint of its thread it starts at.
    pub checkpoint: usize,
    pub pid: i32,
    pub tid: i32,
    /// In retirement order.
    pub insns: Vec<Insn>,
    /// Sorted by (depth, start): each depth's spans are a contiguous run.
    pub lines: Vec<LineSpan>,
    /// Where each depth's run starts in `lines`: (depth, start index).
    depth_runs: Vec<(u32, u32)>,
    pub chains: Vec<Chain>,
    /// Decode errors: trace offset (from the segment's PSB) and message.
    pub errors: Vec<(u64, String)>,
    /// Cut at [`MAX_SEGMENT_INSNS`]: the rest of it is not here.
    pub cut: bool,
}

impl Segment {
    /// First start and last end of its instructions.
    pub fn time_range(&self) -> Option<(u64, u64)> {
        Some((self.insns.first()?.start, self.insns.last()?.end))
    }

    /// The line spans at store depth `depth`, by start.
    pub fn lines_at(&self, depth: u32) -> &[LineSpan] {
        let i = self.depth_runs.partition_point(|&(d, _)| d < depth);
        match self.depth_runs.get(i) {
            Some(&(d, from)) if d == depth => {
                let to = self
                    .depth_runs
                    .get(i + 1)
                    .map_or(self.lines.len(), |&(_, s)| s as usize);
                &self.lines[from as usize..to]
            }
            _ => &[],
        }
    }

    /// The deepest line span's depth, if any.
    pub fn max_depth(&self) -> Option<u32> {
        self.depth_runs.last().map(|&(d, _)| d)
    }

    /// The frame a line span shows.
    pub fn frame(&self, l: &LineSpan) -> Option<&LineFrame> {
        self.chains.get(l.chain as usize)?.get(l.level as usize)
    }

    /// The instructions that ran in `[from, to)`.
    pub fn insns_in(&self, from: u64, to: u64) -> &[Insn] {
        let a = self
            .insns
            .partition_point(|i| i.end <= from && i.start < from);
        let b = self.insns.partition_point(|i| i.start < to);
        &self.insns[a.min(b)..b]
    }

    /// Bytes it holds, for the cache's bound.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Segment>()
            + self.insns.capacity() * std::mem::size_of::<Insn>()
            + self.lines.capacity() * std::mem::size_of::<LineSpan>()
            + self.depth_runs.capacity() * 8
            + self.chains.capacity() * std::mem::size_of::<Chain>()
            + self.errors.iter().map(|e| e.1.len() + 24).sum::<usize>()
    }
}

/// An AUX queue as the fine pass needs it.
struct Queue {
    idx: u32,
    tid: Option<i32>,
    data: Vec<u8>,
    /// Its PSB offsets, ascending.
    psbs: Vec<u64>,
    /// Per-CPU queues: who runs when, as (perf ns, slot).
    schedule: Vec<(u64, usize)>,
}

/// Everything a per-CPU walk needs to divide a queue among threads.
#[derive(Default)]
pub(crate) struct CpuSlots {
    /// Thread id → slot.
    pub slot_of: HashMap<i32, usize>,
    /// Slot → index into the processes.
    pub thread_procs: Vec<usize>,
}

/// Resolvers and the function table a walk interns into; line frames by
/// address, looked up once.
struct State {
    funcs: FuncTable,
    resolvers: Vec<ProcessSymbols>,
    frames: HashMap<(usize, u64), Option<Chain>>,
    strings: HashMap<Arc<str>, ()>,
}

/// What the fine pass re-decodes from: the trace, the code and the symbols
/// of a decoded snapshot, kept by the [`Model`](crate::model::Model).
pub struct LineSource {
    cfg: DecoderConfig,
    /// TSC to perf time.
    to_ns: Box<dyn Fn(u64) -> u64 + Send + Sync>,
    queues: Vec<Queue>,
    /// Processes by index: pid and code.
    pids: Vec<i32>,
    memories: Vec<Memory>,
    cpu: CpuSlots,
    state: Mutex<State>,
}

impl std::fmt::Debug for LineSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineSource")
            .field("queues", &self.queues.len())
            .field("pids", &self.pids)
            .finish_non_exhaustive()
    }
}

/// One AUX queue handed to [`LineSource::new`].
pub(crate) struct QueueParts {
    pub idx: u32,
    pub tid: Option<i32>,
    pub data: Vec<u8>,
    pub psbs: Vec<u64>,
    pub schedule: Vec<(u64, usize)>,
}

impl LineSource {
    pub(crate) fn new(
        cfg: DecoderConfig,
        to_ns: Box<dyn Fn(u64) -> u64 + Send + Sync>,
        queues: Vec<QueueParts>,
        procs: Vec<(i32, Memory, ProcessSymbols)>,
        cpu: CpuSlots,
        funcs: FuncTable,
    ) -> LineSource {
        let mut pids = Vec::new();
        let mut memories = Vec::new();
        let mut resolvers = Vec::new();
        for (pid, mem, res) in procs {
            pids.push(pid);
            memories.push(mem);
            resolvers.push(res);
        }
        LineSource {
            cfg,
            to_ns,
            queues: queues
                .into_iter()
                .map(|q| Queue {
                    idx: q.idx,
                    tid: q.tid,
                    data: q.data,
                    psbs: q.psbs,
                    schedule: q.schedule,
                })
                .collect(),
            pids,
            memories,
            cpu,
            state: Mutex::new(State {
                funcs,
                resolvers,
                frames: HashMap::new(),
                strings: HashMap::new(),
            }),
        }
    }

    fn proc_of(&self, pid: i32) -> Option<usize> {
        self.pids.iter().position(|&p| p == pid)
    }

    /// The segments of `thread` that cover `[from, to]` (perf ns), as
    /// checkpoint indices. A segment runs from its checkpoint's time to
    /// the next one's.
    pub fn segments_in(thread: &ThreadModel, from: u64, to: u64) -> std::ops::Range<usize> {
        let cps = &thread.checkpoints;
        // The last segment starting before `from`; equal times (a segment
        // with no timing of its own) count from the first.
        let first = cps.partition_point(|c| c.time < from).saturating_sub(1);
        let end = cps.partition_point(|c| c.time <= to);
        first..end.max(first)
    }

    /// Re-decodes the segment of `thread` that starts at its checkpoint
    /// `index`. `cancel` stops it early.
    pub fn decode_segment(
        &self,
        thread: &ThreadModel,
        index: usize,
        cancel: Option<&DecodeProgress>,
    ) -> Result<Segment, FineError> {
        let (pid, tid) = (thread.spans.pid, thread.spans.tid);
        let cp = *thread
            .checkpoints
            .get(index)
            .ok_or(FineError::NoCheckpoint { tid, index })?;
        let queue = self
            .queues
            .iter()
            .find(|q| q.idx == cp.queue)
            .ok_or(FineError::NoQueue {
                tid,
                queue: cp.queue,
            })?;
        let proc = self.proc_of(pid).ok_or(FineError::NoProcess { tid, pid })?;
        let start = (cp.offset as usize).min(queue.data.len());
        let stop: Vec<u64> = queue
            .psbs
            .iter()
            .find(|&&o| o > cp.offset)
            .map(|&o| o - cp.offset)
            .into_iter()
            .collect();
        let frames_at = {
            let s = cp.stack_start as usize;
            let e = s + cp.stack_len as usize;
            thread.checkpoint_frames.get(s..e).unwrap_or(&[])
        };
        let to_ns = |tsc: u64| (self.to_ns)(tsc);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let State {
            funcs, resolvers, ..
        } = &mut *state;
        let mut rec = Recorder::default();
        let dec = FlowDecoder::new(&queue.data[start..], &self.cfg);
        let per_thread = queue.tid.is_some();
        let (slot, images, procs, thread_procs): (usize, Vec<&Memory>, &mut [ProcessSymbols], _) =
            if per_thread {
                (
                    0,
                    vec![&self.memories[proc]],
                    &mut resolvers[proc..proc + 1],
                    vec![0],
                )
            } else {
                (
                    self.cpu.slot_of.get(&tid).copied().unwrap_or(usize::MAX),
                    self.memories.iter().collect(),
                    &mut resolvers[..],
                    self.cpu.thread_procs.clone(),
                )
            };
        rec.slot = slot;
        let walk = QueueWalk {
            queue: cp.queue,
            images: &images,
            thread_procs: &thread_procs,
            schedule: &queue.schedule,
            to_ns: &to_ns,
            psbs: &stop,
            stop_at_psb: true,
            progress: cancel,
        };
        let figures = walk_queue(dec, walk, procs, funcs, &mut NoSink, &mut rec).map_err(|e| {
            FineError::Image {
                tid,
                error: e.message(),
            }
        })?;
        if cancel.is_some_and(|c| c.is_cancelled()) {
            return Err(FineError::Cancelled);
        }
        let mut errors = figures
            .get(if per_thread { 0 } else { slot })
            .map(|f| f.errors.clone())
            .unwrap_or_default();
        let cut = rec.full();
        if cut {
            // Offsets are from the segment's PSB: this is about all of it.
            errors.push((
                0,
                format!(
                    "more than {MAX_SEGMENT_INSNS} instructions in this segment: only the first are shown"
                ),
            ));
        }
        // Where the coarse pass's clock put this checkpoint and the next:
        // the segment's times line up with its neighbours' (unless it was
        // cut short of the next). Checked, as a model from a damaged file
        // may hold a thread's checkpoints out of trace order.
        let next = thread.checkpoints.get(index + 1).filter(|n| {
            !cut && n.queue == cp.queue
                && n.offset
                    .checked_sub(cp.offset)
                    .is_some_and(|d| stop.first() == Some(&d))
        });
        let ends = (
            (0, cp.tsc),
            next.and_then(|n| Some((n.insn.checked_sub(cp.insn)?, n.tsc))),
        );
        let mut seg = rec.finish(
            &cp,
            ends,
            frames_at,
            funcs,
            &self.memories[proc],
            &to_ns,
            (pid, tid),
        );
        seg.checkpoint = index;
        seg.errors = errors;
        seg.cut = cut;
        self.attach_lines(&mut state, proc, &mut seg);
        build_lines(&mut seg);
        Ok(seg)
    }

    /// Gives every instruction its chain of source frames.
    fn attach_lines(&self, state: &mut State, proc: usize, seg: &mut Segment) {
        let State {
            resolvers,
            frames,
            strings,
            ..
        } = state;
        let resolver = &resolvers[proc];
        let mut by_ip: HashMap<u64, u32> = HashMap::new();
        let mut intern = |s: &str| -> Arc<str> {
            if let Some((k, _)) = strings.get_key_value(s) {
                return k.clone();
            }
            let k: Arc<str> = Arc::from(s);
            strings.insert(k.clone(), ());
            k
        };
        for insn in &mut seg.insns {
            if let Some(&c) = by_ip.get(&insn.ip) {
                insn.chain = c;
                continue;
            }
            let chain = frames
                .entry((proc, insn.ip))
                .or_insert_with(|| {
                    let (md, svma) = resolver.module_at(insn.ip)?;
                    let raw = md.source_frames(svma);
                    if raw.is_empty() {
                        return None;
                    }
                    let outer = md.function(svma).map(|f| f.name.to_string());
                    let chain: Vec<LineFrame> = raw
                        .into_iter()
                        .rev()
                        .enumerate()
                        .map(|(k, f)| {
                            let function = f
                                .function
                                .or_else(|| (k == 0).then(|| outer.clone()).flatten())
                                .unwrap_or_else(|| "??".to_string());
                            LineFrame {
                                function: intern(&function),
                                file: intern(f.file.as_deref().unwrap_or("??")),
                                line: f.line.unwrap_or(0),
                            }
                        })
                        .collect();
                    Some(Chain::from(chain))
                })
                .clone();
            let c = match chain {
                Some(chain) => {
                    seg.chains.push(chain);
                    (seg.chains.len() - 1) as u32
                }
                None => NO_CHAIN,
            };
            by_ip.insert(insn.ip, c);
            insn.chain = c;
        }
    }

    /// Intel-syntax disassembly of the instruction at `ip` in process
    /// `pid`'s code.
    pub fn disassemble(&self, pid: i32, ip: u64) -> Option<String> {
        let mem = &self.memories[self.proc_of(pid)?];
        let bytes = mem.bytes_at(ip)?;
        let mut dec = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        let insn = dec.decode();
        if insn.is_invalid() {
            return None;
        }
        let mut out = String::new();
        IntelFormatter::new().format(&insn, &mut out);
        Some(out)
    }
}

/// Timed output the fine pass does not need: it times instructions itself.
/// What the walk did, in order, for the watched thread.
#[derive(Clone, Copy, Debug)]
enum Step {
    Block(u64, Block),
    Anchor(u64, u64),
}

/// Instructions one segment re-decodes at most (40 bytes each). A sound
/// segment (the trace between two PSBs, a few KiB) holds far fewer; a
/// damaged one can send the walk round a loop with no trace for millions.
pub const MAX_SEGMENT_INSNS: u64 = 4 << 20;

/// The observer: records the watched thread's blocks and events, and every
/// anchor, to be replayed once the walk is done.
#[derive(Default)]
struct Recorder {
    slot: usize,
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

impl Recorder {
    /// `ends`: the time at the segment's first instruction and, when known,
    /// after its last (instruction count, TSC), from the coarse pass.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        self,
        cp: &Checkpoint,
        ends: ((u64, u64), Option<(u64, u64)>),
        frames: &[(FuncId, u64)],
        funcs: &FuncTable,
        memory: &Memory,
        to_ns: &dyn Fn(u64) -> u64,
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
        let seed: Vec<(FuncId, u64)> = frames.iter().map(|&(f, _)| (f, 0)).collect();
        builder.seed(&seed, 0, !cp.begins);
        let base = cp.depth as i32;
        // Past a restart of a stack deeper than `stack::MAX_DEPTH` this
        // builder and the coarse one no longer agree on depths (it knows
        // only the checkpoint's frames); such lines stay within the
        // thread's rows, at worst beside their spans.
        let deepest = crate::stack::MAX_DEPTH as i32 - 1;
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
        let mut insns: Vec<Insn> = Vec::new();
        let mut positions: Vec<u64> = Vec::new();
        let mut exact: Vec<(u64, u64)> = Vec::new();
        let mut clock: crate::clock::Clock<u32> = crate::clock::Clock::default();
        let mut times: Vec<u64> = Vec::new();
        let mut lvl = 0usize;
        let mut decoded = Instruction::default();
        clock.anchor(head + ends.0 .0, ends.0 .1, |_, _| {});
        for step in &self.steps {
            match *step {
                Step::Anchor(pos, tsc) => {
                    exact.push((pos, tsc));
                    clock.anchor(pos, tsc, |s, i| times[i as usize] = s.tsc);
                }
                Step::Block(pos, b) => {
                    if pos < head {
                        continue;
                    }
                    let Some(bytes) = memory.bytes_at(b.ip) else {
                        continue;
                    };
                    let mut d = Decoder::with_ip(64, bytes, b.ip, DecoderOptions::NONE);
                    for k in 0..b.ninsn as u64 {
                        if !d.can_decode() {
                            break;
                        }
                        let ip = d.ip();
                        d.decode_out(&mut decoded);
                        if decoded.is_invalid() {
                            break;
                        }
                        let p = pos + k;
                        while lvl + 1 < levels.len() && levels[lvl + 1].0 <= p {
                            lvl += 1;
                        }
                        clock.push(p, insns.len() as u32);
                        times.push(0);
                        insns.push(Insn {
                            ip,
                            start: 0,
                            end: 0,
                            depth: levels[lvl].1,
                            chain: NO_CHAIN,
                            exact: false,
                        });
                        positions.push(p);
                    }
                }
            }
        }
        if let Some((n, tsc)) = ends.1 {
            clock.anchor(head + n, tsc, |s, i| times[i as usize] = s.tsc);
        }
        clock.finish(|s, i| times[i as usize] = s.tsc);

        let mut e = 0;
        for (i, insn) in insns.iter_mut().enumerate() {
            insn.start = to_ns(times[i]);
            while e < exact.len() && exact[e].0 < positions[i] {
                e += 1;
            }
            insn.exact = exact.get(e).is_some_and(|a| a.0 == positions[i]);
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
                Some(&(_, Some(tsc))) => to_ns(tsc).max(start),
                Some(&(_, None)) => start.saturating_add(per_insn),
                None if i + 1 < n && positions[i + 1] == p + 1 => insns[i + 1].start.max(start),
                None => start.saturating_add(per_insn),
            };
        }
        Segment {
            pid,
            tid,
            insns,
            ..Segment::default()
        }
    }
}

/// Merges instructions into line spans, per inline level.
fn build_lines(seg: &mut Segment) {
    struct Open {
        chain: u32,
        start: u64,
        end: u64,
        first: u32,
        count: u32,
    }
    let mut lines: Vec<LineSpan> = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut depth = u32::MAX;
    let close = |open: &mut Vec<Open>, from: usize, depth: u32, lines: &mut Vec<LineSpan>| {
        while open.len() > from {
            let level = open.len() - 1;
            let o = open.pop().expect("len > from");
            lines.push(LineSpan {
                start: o.start,
                end: o.end,
                depth: depth + 1 + level as u32,
                chain: o.chain,
                level: level as u32,
                first: o.first,
                count: o.count,
            });
        }
    };
    let mut prev_end = None;
    for (i, insn) in seg.insns.iter().enumerate() {
        let contiguous = prev_end == Some(insn.start) || prev_end.is_some_and(|e| e >= insn.start);
        if insn.depth != depth || insn.chain == NO_CHAIN || !contiguous {
            close(&mut open, 0, depth, &mut lines);
            depth = insn.depth;
        }
        prev_end = Some(insn.end);
        if insn.chain == NO_CHAIN {
            continue;
        }
        let chain = &seg.chains[insn.chain as usize];
        // The levels whose frame is unchanged stay open.
        let mut same = 0;
        while same < open.len() && same < chain.len() {
            let o = &open[same];
            let of = &seg.chains[o.chain as usize][same];
            if of != &chain[same] {
                break;
            }
            same += 1;
        }
        close(&mut open, same, depth, &mut lines);
        for o in &mut open {
            o.end = insn.end;
            o.count += 1;
        }
        for _ in same..chain.len() {
            open.push(Open {
                chain: insn.chain,
                start: insn.start,
                end: insn.end,
                first: i as u32,
                count: 1,
            });
        }
    }
    close(&mut open, 0, depth, &mut lines);
    lines.sort_by_key(|l| (l.depth, l.start, l.first));
    let mut runs = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if runs.last().is_none_or(|&(d, _)| d != l.depth) {
            runs.push((l.depth, i as u32));
        }
    }
    seg.lines = lines;
    seg.depth_runs = runs;
}

/// A line span with its frame, from one or more segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowLine {
    pub start: u64,
    pub end: u64,
    pub depth: u32,
    pub frame: LineFrame,
    pub inlined: bool,
    pub insns: u32,
}

/// The line spans of consecutive segments that overlap `[from, to]`, by
/// start then depth. A line that runs across a segment boundary (a PSB)
/// is one span, not two.
pub fn window_lines(segs: &[&Segment], from: u64, to: u64) -> Vec<WindowLine> {
    let mut out: Vec<WindowLine> = Vec::new();
    // Per depth: the last span of the previous segment, if it ran to its
    // last instruction, as an index into `out`.
    let mut open_at_end: HashMap<u32, usize> = HashMap::new();
    for seg in segs {
        let n = seg.insns.len() as u32;
        let mut next_open = HashMap::new();
        for l in &seg.lines {
            let Some(frame) = seg.frame(l) else { continue };
            if l.first == 0 {
                if let Some(&i) = open_at_end.get(&l.depth) {
                    let o: &mut WindowLine = &mut out[i];
                    if o.frame == *frame {
                        o.end = l.end;
                        o.insns += l.count;
                        if l.first + l.count == n {
                            next_open.insert(l.depth, i);
                        }
                        continue;
                    }
                }
            }
            out.push(WindowLine {
                start: l.start,
                end: l.end,
                depth: l.depth,
                frame: frame.clone(),
                inlined: l.inlined(),
                insns: l.count,
            });
            if l.first + l.count == n {
                next_open.insert(l.depth, out.len() - 1);
            }
        }
        open_at_end = next_open;
    }
    out.retain(|l| l.end >= from && l.start <= to);
    out.sort_by_key(|l| (l.start, l.depth));
    out
}

/// Per-address totals: the disassembly view's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsnHeat {
    pub count: u64,
    pub time_ns: u64,
}

/// Executions and time of every instruction address in `[from, to)`, with
/// its source frames.
pub fn insn_heat<'s>(
    segs: impl IntoIterator<Item = &'s Segment>,
    from: u64,
    to: u64,
) -> HashMap<u64, (InsnHeat, Option<Chain>)> {
    let mut out: HashMap<u64, (InsnHeat, Option<Chain>)> = HashMap::new();
    for seg in segs {
        for i in seg.insns_in(from, to) {
            let (h, _) = out.entry(i.ip).or_insert_with(|| {
                let c = seg.chains.get(i.chain as usize).cloned();
                (InsnHeat::default(), c)
            });
            h.count += 1;
            h.time_ns += i.end - i.start;
        }
    }
    out
}

/// Per-line totals: what the source pane's heat column shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineHeat {
    /// Times the line ran: the most any of its instructions ran, so a
    /// loop body's line counts the loop's trips.
    pub count: u64,
    /// Instructions retired on it, and the time they took (ns).
    pub insns: u64,
    pub time_ns: u64,
}

/// Heat of every (file, line) over the instructions of `segs` that ran in
/// `[from, to)`. An instruction counts for its line at every inline level:
/// an inlined call's line includes the inlined code.
pub fn line_heat<'s>(
    segs: impl IntoIterator<Item = &'s Segment>,
    from: u64,
    to: u64,
) -> HashMap<(Arc<str>, u32), LineHeat> {
    let mut out: HashMap<(Arc<str>, u32), LineHeat> = HashMap::new();
    for (_, (h, chain)) in insn_heat(segs, from, to) {
        let Some(chain) = chain else { continue };
        for (k, f) in chain.iter().enumerate() {
            // A recursive inline chain names a line once.
            if chain[..k]
                .iter()
                .any(|g| g.file == f.file && g.line == f.line)
            {
                continue;
            }
            let l = out.entry((f.file.clone(), f.line)).or_default();
            l.count = l.count.max(h.count);
            l.insns += h.count;
            l.time_ns += h.time_ns;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(f: &str, file: &str, line: u32) -> LineFrame {
        LineFrame {
            function: f.into(),
            file: file.into(),
            line,
        }
    }

    fn insn(ip: u64, t: u64, depth: u32, chain: u32) -> Insn {
        Insn {
            ip,
            start: t,
            end: t + 1,
            depth,
            chain,
            exact: false,
        }
    }

    #[test]
    fn consecutive_instructions_on_a_line_merge_per_inline_level() {
        let mut seg = Segment {
            chains: vec![
                Arc::from(vec![frame("loop", "a.c", 10)]),
                Arc::from(vec![frame("loop", "a.c", 11)]),
                Arc::from(vec![frame("loop", "a.c", 11), frame("push", "v.h", 3)]),
                Arc::from(vec![frame("loop", "a.c", 11), frame("push", "v.h", 4)]),
            ],
            insns: vec![
                insn(1, 0, 2, 0),
                insn(2, 1, 2, 0),
                insn(3, 2, 2, 1),
                insn(4, 3, 2, 2),
                insn(5, 4, 2, 3),
                insn(6, 5, 2, 3),
                insn(1, 6, 2, 0),
            ],
            ..Segment::default()
        };
        build_lines(&mut seg);
        let row = |d: u32| -> Vec<(u64, u64, u32, u32)> {
            seg.lines_at(d)
                .iter()
                .map(|l| (l.start, l.end, seg.frame(l).unwrap().line, l.count))
                .collect()
        };
        // Line 11 covers its own instruction and the inlined push.
        assert_eq!(row(3), vec![(0, 2, 10, 2), (2, 6, 11, 4), (6, 7, 10, 1)]);
        assert_eq!(row(4), vec![(3, 4, 3, 1), (4, 6, 4, 2)]);
        assert!(seg.lines_at(4).iter().all(|l| l.inlined()));
        assert_eq!(seg.max_depth(), Some(4));
        let heat = line_heat([&seg], 0, 100);
        // Address 1 ran twice: line 10 ran twice.
        assert_eq!(heat[&(Arc::from("a.c"), 10)].count, 2);
        assert_eq!(heat[&(Arc::from("a.c"), 10)].insns, 3);
        assert_eq!(heat[&(Arc::from("a.c"), 11)].insns, 4);
        assert_eq!(heat[&(Arc::from("v.h"), 4)].time_ns, 2);
    }

    fn demo() -> crate::model::Model {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo.ptscope");
        let snap = ptscope_formats::snapshot::Snapshot::open(&path).unwrap();
        crate::model::decode_snapshot(&snap, &Default::default()).unwrap()
    }

    #[test]
    fn segments_of_the_demo_hold_every_instruction_once_under_their_function_span() {
        let model = demo();
        let src = model.lines.clone().unwrap();
        for t in &model.threads {
            let mut total = 0u64;
            let mut checked = 0;
            for i in 0..t.checkpoints.len() {
                let seg = src.decode_segment(t, i, None).unwrap();
                assert!(seg.errors.is_empty(), "{:?}", seg.errors);
                // A fresh sync starts where the coarse pass's checkpoint is,
                // at the time the coarse pass gave it.
                assert_eq!(seg.insns.first().map(|x| x.ip), Some(t.checkpoints[i].ip));
                assert_eq!(seg.insns[0].start, t.checkpoints[i].time);
                if let Some(next) = t.checkpoints.get(i + 1) {
                    assert!(seg.insns.last().unwrap().end <= next.time);
                }
                total += seg.insns.len() as u64;
                // Each instruction runs in the span at its depth, named
                // after its outermost source frame.
                for insn in &seg.insns {
                    let Some(chain) = seg.chains.get(insn.chain as usize) else {
                        continue;
                    };
                    let lane = t.spans.lane(insn.depth as usize);
                    let k = lane.partition_point(|s| s.start <= insn.start);
                    assert!(k > 0, "no span at depth {} at {}", insn.depth, insn.start);
                    let span = &lane[k - 1];
                    assert!(t.spans.end(insn.depth as usize, k - 1) >= insn.start);
                    let name = &model.funcs.get(span.func()).name;
                    if name.as_str() != &*chain[0].function {
                        let near: Vec<_> = (insn.depth.saturating_sub(1)..insn.depth + 2)
                            .map(|d| {
                                let lane = t.spans.lane(d as usize);
                                let k = lane.partition_point(|s| s.start <= insn.start);
                                (
                                    d,
                                    lane[k.saturating_sub(2)..(k + 1).min(lane.len())]
                                        .iter()
                                        .map(|s| (model.funcs.get(s.func()).name.clone(), s.start))
                                        .collect::<Vec<_>>(),
                                )
                            })
                            .collect();
                        panic!(
                            "seg {i} insn {:#x} {:?} chain {} near {near:#?}",
                            insn.ip, insn, chain[0].function
                        );
                    }
                    checked += 1;
                }
            }
            assert!(checked > 50_000, "{checked}");
            // The trace starts at a PSB: the first segment starts with it.
            assert_eq!(t.checkpoints[0].insn, 0);
            let before = t.checkpoints.first().map_or(0, |c| c.insn);
            assert_eq!(total, t.walk.instructions - before, "tid {}", t.spans.tid);
        }
    }

    #[test]
    fn checkpoints_out_of_trace_order_still_decode() {
        // A damaged file's model can hold them so (round 11's perf_data
        // crash): each segment still decodes, just not lined up with the
        // next one.
        let model = demo();
        let src = model.lines.clone().unwrap();
        let mut t = model.threads[0].clone();
        t.checkpoints.reverse();
        for i in 0..t.checkpoints.len() {
            let seg = src.decode_segment(&t, i, None).unwrap();
            assert_eq!(seg.insns.first().map(|x| x.ip), Some(t.checkpoints[i].ip));
        }
    }

    #[test]
    fn a_new_function_or_a_gap_ends_a_line() {
        let mut seg = Segment {
            chains: vec![Arc::from(vec![frame("f", "a.c", 1)])],
            insns: vec![
                insn(1, 0, 0, 0),
                insn(2, 1, 1, 0),
                insn(3, 10, 1, 0),
                insn(4, 11, 1, NO_CHAIN),
                insn(5, 12, 1, 0),
            ],
            ..Segment::default()
        };
        build_lines(&mut seg);
        assert_eq!(seg.lines_at(1).len(), 1);
        let at2: Vec<(u64, u64)> = seg.lines_at(2).iter().map(|l| (l.start, l.end)).collect();
        assert_eq!(at2, vec![(1, 2), (10, 11), (12, 13)]);
        assert_eq!(seg.insns_in(10, 12).len(), 2);
    }
}
