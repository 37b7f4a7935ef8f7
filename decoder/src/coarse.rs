//! The coarse pass: one thread's PT through libipt's block decoder into
//! branch events, timed, and on into the stack builder.
//!
//! Blocks end at every call, return and jump, so each block end is a
//! candidate event; its target is the next block's start. Only jumps that
//! leave the current function become events, which a cached address range
//! makes cheap. A checkpoint is kept at every PSB: trace offset, time, IP
//! and the call stack there, so later passes can re-decode any window
//! without starting over.

use crate::clock::{Clock, Stamp};
use crate::event::{EndReason, Event, EventKind, FuncId, FuncTable, UNKNOWN};
use crate::ffi::{Block, BlockDecoder, BlockEnd, BlockItem, DecoderConfig, Image, PtError};
use crate::stack::{StackBuilder, StackStats};
use crate::store::ThreadSpans;

/// The function an address is in, and the address range that shares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub func: FuncId,
    pub lo: u64,
    pub hi: u64,
    /// Entry address, 0 if unknown.
    pub entry: u64,
}

/// Maps addresses to functions; implemented per process over its mappings.
pub trait Resolve {
    fn resolve(&mut self, addr: u64, funcs: &mut FuncTable) -> Resolved;
    /// `addr` is a call target: a function starts there even if no symbol
    /// says so. Returns true if that is news (cached ranges are stale).
    fn learn_entry(&mut self, addr: u64, funcs: &mut FuncTable) -> bool {
        let _ = (addr, funcs);
        false
    }
    /// The label of a decode error at `ip` (e.g. a missing binary there).
    fn error_func(&mut self, ip: Option<u64>, error: PtError, funcs: &mut FuncTable) -> FuncId {
        let _ = ip;
        funcs.decode_error(&error.message())
    }
}

/// Where re-decoding can start: one per PSB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Offset of the PSB in the thread's trace.
    pub offset: u64,
    /// perf time in ns.
    pub time: u64,
    /// The first instruction decoded after it.
    pub ip: u64,
    /// Instructions retired before it, in this thread's trace.
    pub insn: u64,
    /// The open frames there: `stacks[stack_start..stack_start+stack_len]`.
    pub stack_start: u32,
    pub stack_len: u32,
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

enum Held {
    Event(Event),
    Checkpoint { offset: u64, ip: u64, insn: u64 },
}

struct Walker<'r, R: Resolve> {
    resolver: &'r mut R,
    funcs: &'r mut FuncTable,
    to_ns: &'r dyn Fn(u64) -> u64,
    clock: Clock<Held>,
    builder: StackBuilder,
    checkpoints: Vec<Checkpoint>,
    stacks: Vec<(FuncId, u64)>,
    figures: WalkFigures,
    /// Instructions retired so far.
    pos: u64,
    /// A branch whose target the next block or event will tell.
    branch: Option<(BlockEnd, u64)>,
    /// The next block starts a run of trace (after a sync or an error).
    need_begin: bool,
    cur: Resolved,
    psbs: &'r [u64],
    next_psb: usize,
}

/// Runs the coarse pass over one thread's trace. `psbs` are the trace's
/// PSB offsets (for checkpoints); `to_ns` converts TSC to perf time.
#[allow(clippy::too_many_arguments)]
pub fn decode_thread<R: Resolve>(
    trace: &[u8],
    cfg: &DecoderConfig,
    image: &Image<'_>,
    resolver: &mut R,
    funcs: &mut FuncTable,
    to_ns: &dyn Fn(u64) -> u64,
    psbs: &[u64],
    thread: (i32, i32, String),
) -> Result<ThreadDecode, PtError> {
    let mut dec = BlockDecoder::new(trace, cfg)?;
    dec.set_image(image)?;
    let mut w = Walker {
        resolver,
        funcs,
        to_ns,
        clock: Clock::default(),
        builder: StackBuilder::new(thread.0, thread.1, thread.2),
        checkpoints: Vec::new(),
        stacks: Vec::new(),
        figures: WalkFigures::default(),
        pos: 0,
        branch: None,
        need_begin: true,
        cur: Resolved {
            func: UNKNOWN,
            lo: 1,
            hi: 0,
            entry: 0,
        },
        psbs,
        next_psb: 0,
    };
    dec.walk(|dec, item| {
        w.item(dec, item);
        true
    });
    w.flush_branch(None);
    let Walker {
        mut clock,
        mut builder,
        funcs,
        to_ns,
        mut checkpoints,
        mut stacks,
        figures,
        ..
    } = w;
    clock.finish(|s, h| {
        release(
            &mut builder,
            funcs,
            to_ns,
            &mut checkpoints,
            &mut stacks,
            s,
            h,
        )
    });
    let (spans, stack) = builder.finish();
    Ok(ThreadDecode {
        spans,
        stack,
        walk: figures,
        checkpoints,
        stacks,
    })
}

fn release(
    builder: &mut StackBuilder,
    funcs: &FuncTable,
    to_ns: &dyn Fn(u64) -> u64,
    checkpoints: &mut Vec<Checkpoint>,
    stacks: &mut Vec<(FuncId, u64)>,
    stamp: Stamp,
    held: Held,
) {
    let time = to_ns(stamp.tsc);
    match held {
        Held::Event(mut ev) => {
            ev.time = time;
            ev.estimated = !stamp.exact;
            builder.event(&ev, funcs);
        }
        Held::Checkpoint { offset, ip, insn } => {
            let start = stacks.len() as u32;
            stacks.extend(builder.frames());
            checkpoints.push(Checkpoint {
                offset,
                time,
                ip,
                insn,
                stack_start: start,
                stack_len: stacks.len() as u32 - start,
            });
        }
    }
}

impl<R: Resolve> Walker<'_, R> {
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
            };
        }
        self.cur = self.resolver.resolve(addr, self.funcs);
        self.cur
    }

    fn emit(&mut self, kind: EventKind, from: u64, to: u64) {
        let from_fn = if from == 0 {
            UNKNOWN
        } else {
            self.resolve(from).func
        };
        if kind == EventKind::Call && to != 0 && self.resolver.learn_entry(to, self.funcs) {
            self.cur = Resolved {
                func: UNKNOWN,
                lo: 1,
                hi: 0,
                entry: 0,
            };
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
        self.clock.push(self.pos, Held::Event(ev));
    }

    fn anchor(&mut self, tsc: u64) {
        let Walker {
            clock,
            builder,
            funcs,
            to_ns,
            checkpoints,
            stacks,
            pos,
            ..
        } = self;
        clock.anchor(*pos, tsc, |s, h| {
            release(builder, funcs, *to_ns, checkpoints, stacks, s, h)
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
                if to < f.lo || to >= f.hi {
                    self.emit(EventKind::Jump, from, to);
                }
            }
            BlockEnd::FarCall => self.emit(EventKind::Syscall, from, to),
            BlockEnd::FarReturn => self.emit(EventKind::KernelReturn, from, to),
            BlockEnd::Other => {}
        }
    }

    fn block(&mut self, dec: &BlockDecoder<'_>, b: Block) {
        self.figures.blocks += 1;
        self.figures.instructions += b.ninsn as u64;
        if self.need_begin {
            self.need_begin = false;
            self.branch = None;
            self.emit(EventKind::TraceBegin, 0, b.ip);
        } else {
            self.flush_branch(Some(b.ip));
        }
        // PSBs the decoder has read past: the state at this block's start
        // is the state there.
        let off = dec.offset();
        while self.next_psb < self.psbs.len() && self.psbs[self.next_psb] <= off {
            let offset = self.psbs[self.next_psb];
            self.next_psb += 1;
            self.clock.push(
                self.pos,
                Held::Checkpoint {
                    offset,
                    ip: b.ip,
                    insn: self.pos,
                },
            );
        }
        self.pos += b.ninsn as u64;
        if b.end != BlockEnd::Other {
            self.branch = Some((b.end, b.end_ip));
        }
    }

    fn item(&mut self, dec: &mut BlockDecoder<'_>, item: BlockItem) {
        match item {
            BlockItem::Sync { .. } => {
                // libipt's decoder time is not valid yet here; the PSB+
                // status events and ticks that follow carry it.
                self.branch = None;
                self.need_begin = true;
            }
            BlockItem::Block(b) => self.block(dec, b),
            BlockItem::Tick { tsc, .. } => {
                self.figures.ticks += 1;
                self.anchor(tsc);
            }
            BlockItem::Enabled {
                ip,
                status_update,
                tsc,
            } => {
                // PSB+ status updates do not bind to an instruction: their
                // time would pin the wrong one.
                if status_update {
                    return;
                }
                if let Some(t) = tsc {
                    self.anchor(t);
                }
                self.branch = None;
                self.need_begin = false;
                self.emit(EventKind::TraceBegin, 0, ip);
            }
            BlockItem::Disabled { ip, tsc } => {
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
                self.figures.overflows += 1;
                self.branch = None;
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
                self.figures.errors.push((offset, error.message()));
                let f = self.resolver.error_func(ip, error, self.funcs);
                self.push_error(f);
                self.need_begin = true;
            }
        }
    }

    fn push_error(&mut self, func: FuncId) {
        let mut ev = Event::new(0, EventKind::Error);
        ev.to_fn = func;
        self.push_event(ev);
    }
}
