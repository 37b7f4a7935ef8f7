//! The walk itself: the state machine that follows runs from one event to
//! the next, takes TNT bits and TIPs at the branches that need them,
//! builds and reports blocks, and resumes after an error. Reading the
//! events and stepping to where they bind is `binding`'s; this is what
//! happens between them.

use super::binding::{Ev, Reader};
use super::run_cache::{decode_run, Class, Run};
use super::FlowDecoder;
use crate::pt::block::{Block, BlockItem, PtError};

/// A direct call pushes its return address, unless it calls the next
/// instruction: `call $+5` reads the IP in position-independent code and
/// never returns, and the hardware does not push it for return compression
/// (nor does libipt).
#[inline]
pub(super) fn push_call(dec: &mut FlowDecoder<'_>, next: u64, target: u64) {
    if target != next {
        dec.push_ret(next);
    }
}

/// Why a walk stopped before the end.
pub(super) enum Halt {
    /// The caller asked to stop.
    Stop,
    /// The trace ended.
    End,
    Fail {
        offset: u64,
        error: PtError,
        ip: Option<u64>,
        /// The packets are sound, only the flow is lost (code that cannot
        /// be read, or trace that disagrees with it): the walk may resume
        /// at the next packet that says where the flow is.
        resumable: bool,
    },
}

/// The block being built.
#[derive(Clone, Copy, Default)]
pub(super) struct Acc {
    pub(super) ip: u64,
    pub(super) ninsn: u32,
    pub(super) last: u64,
    pub(super) end: Option<Class>,
    /// The mode its instructions were decoded in.
    pub(super) bitness: u8,
}

/// Consecutive runs without trace before we call it an endless loop: real
/// code needs a TNT or TIP long before (a loop without one never ends).
/// Each such stretch ends in a resync at the next PSB, so a damaged trace
/// can cost this much per PSB (16 bytes): small enough that a crafted
/// file of thousands of PSBs still decodes in seconds.
pub(super) const MAX_IDLE_RUNS: u32 = 1 << 16;

impl FlowDecoder<'_> {
    /// After a flow error (the packets are sound: code that cannot be read,
    /// say, a binary or the kernel missing): resumes where the trace next
    /// says where the flow is, as perf's decoder does, rather than at the
    /// next PSB, which may be far. A TIP gives the flow's IP (tracing is on
    /// there: [`BlockItem::Enabled`]); a FUP and the TIP after it, an
    /// asynchronous branch (or disable) from the FUP's IP; a FUP bound to a
    /// status event (a PTWRITE, a MODE.Exec) gives the IP where it binds;
    /// TIP.PGE and OVF resume as they always do; a TIP.PGD says tracing is off. TNT bits
    /// mean nothing without the flow and are skipped. This is what libipt
    /// 2.2's resync (`ptxed --resync-on-error`) does too. The trace's last
    /// IP is sound, so a TIP whose IP is compressed against it is as good
    /// as a full one. Whole walks
    /// and chunks resume alike, since what happens depends only on the
    /// packets since the last PSB. False at a PSB: the walk syncs there.
    pub(super) fn resume<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<bool, Halt> {
        // The hardware's calls since the lost flow are unknown.
        self.ret_len = 0;
        self.acc = Acc::default();
        self.tick = None;
        self.idle = 0;
        // A bound FUP read with the current event came after the flow was
        // lost: the flow is there first.
        if let Some((ip, _)) = self.rd.bound_ip.take() {
            return self.resume_at(ip, f);
        }
        self.rd.resuming = true;
        let resumed = self.resume_at_next(f);
        self.rd.resuming = false;
        resumed
    }

    /// The flow is found again at `ip`, tracing on: said so.
    fn resume_at<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        ip: u64,
        f: &mut F,
    ) -> Result<bool, Halt> {
        self.enabled = true;
        self.ip = ip;
        let item = BlockItem::Enabled {
            ip,
            status_update: false,
            tsc: self.ev_time(),
        };
        self.emit(f, item)?;
        Ok(true)
    }

    fn resume_at_next<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<bool, Halt> {
        loop {
            let tsc = self.ev_time();
            match self.ev {
                Ev::Psb(_) => return Ok(false),
                Ev::Eos | Ev::Cr3 { .. } => return Err(Halt::End),
                // The event binds here: the walk takes it next.
                Ev::Bound { ip, .. } => return self.resume_at(ip, f),
                Ev::Tip(Some(ip)) => {
                    self.resume_at(ip, f)?;
                    self.consume()?;
                    return Ok(true);
                }
                // The flow is at the FUP's IP: the event reports next.
                Ev::AsyncBranch { from: at, .. } | Ev::AsyncDisabled { at } => {
                    return self.resume_at(at, f)
                }
                Ev::Pge(_) | Ev::Overflow(_) => {
                    self.enabled = false;
                    return Ok(true);
                }
                // Tracing goes off: said, as libipt says it, and the walk
                // goes on with tracing off.
                Ev::Pgd(ip) => {
                    self.enabled = false;
                    let item = BlockItem::Disabled {
                        ip,
                        tsc,
                        status_update: false,
                    };
                    self.emit(f, item)?;
                    self.consume()?;
                    return Ok(true);
                }
                Ev::Tnt { .. } | Ev::Tip(None) => {
                    self.enabled = false;
                    self.consume()?;
                }
            }
        }
    }

    pub(super) fn reset(&mut self, at: usize) {
        self.rd = Reader::at(at);
        self.consumed = at;
        self.psb_at = at;
        self.ev = Ev::Eos;
        self.ev_tsc = None;
        self.told_tsc = None;
        self.enabled = false;
        self.ip = 0;
        self.ret_len = 0;
        self.acc = Acc::default();
        self.tick = None;
        self.idle = 0;
    }

    /// A failure of the flow, not of the packets: it is where the trace
    /// was consumed, not where the reader has read ahead to. The event
    /// read ahead may be a PSB+, which the walk resyncs at, as a chunk
    /// that ends there and one that starts there do.
    pub(super) fn fail_flow(&self, error: PtError, ip: Option<u64>) -> Halt {
        Halt::Fail {
            offset: self.consumed as u64,
            error,
            ip,
            resumable: true,
        }
    }

    // ---- the flow ----

    pub(super) fn emit<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
        item: BlockItem,
    ) -> Result<(), Halt> {
        if f(self, item) {
            Ok(())
        } else {
            Err(Halt::Stop)
        }
    }

    /// Reports the block built so far, then a pending tick.
    pub(super) fn end_block<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<(), Halt> {
        let a = std::mem::take(&mut self.acc);
        if a.ninsn > 0 {
            let end = a.end.unwrap_or(Class::Other);
            self.after_branch = !matches!(end, Class::Other | Class::MovCr3);
            self.emit(
                f,
                BlockItem::Block(Block {
                    ip: a.ip,
                    end_ip: a.last,
                    ninsn: a.ninsn,
                    end: end.block_end(),
                    bitness: a.bitness,
                }),
            )?;
        }
        if let Some((ip, tsc)) = self.tick.take() {
            self.emit(f, BlockItem::Tick { ip: Some(ip), tsc })?;
        }
        Ok(())
    }

    pub(super) fn add(&mut self, start: u64, ninsn: u32, last: u64, class: Class) {
        if self.acc.ninsn == 0 {
            self.acc.ip = start;
            self.acc.bitness = self.rd.bitness as u8;
        }
        self.acc.ninsn += ninsn;
        self.acc.last = last;
        self.acc.end = Some(class);
    }

    /// Drops the last instruction added (it needed trace that never came).
    fn unadd(&mut self) {
        self.acc.ninsn -= 1;
        self.acc.end = None;
    }

    pub(super) fn push_ret(&mut self, ip: u64) {
        self.ret[self.ret_top] = ip;
        self.ret_top = (self.ret_top + 1) % self.ret.len();
        self.ret_len = (self.ret_len + 1).min(self.ret.len());
    }

    /// At a PSB, when the flow gets there: the hardware compresses only
    /// returns from calls made since the last PSB (as perf's decoder also
    /// assumes), so a walk that arrives here decodes on as one that syncs
    /// here (on a damaged trace, unless direct calls lie between the flow
    /// and the PSB's FUP address). Not when the reader reads the PSB: that
    /// happens as the TNT before it runs out, and its last bit may be a
    /// return still to be popped.
    fn forget_calls(&mut self) {
        self.ret_len = 0;
    }

    pub(super) fn pop_ret(&mut self) -> Option<u64> {
        if self.ret_len == 0 {
            return None;
        }
        self.ret_len -= 1;
        self.ret_top = (self.ret_top + self.ret.len() - 1) % self.ret.len();
        Some(self.ret[self.ret_top])
    }

    #[inline]
    fn run_at(&mut self, ip: u64) -> Result<Run, Halt> {
        if self.cache.bitness != self.rd.bitness {
            self.cache.switch_mode(self.rd.bitness);
        }
        if let Some(r) = self.cache.get(ip) {
            return Ok(r);
        }
        self.decode_run_at(ip)
    }

    #[cold]
    fn decode_run_at(&mut self, ip: u64) -> Result<Run, Halt> {
        let Some(cur) = self.cur else {
            return Err(self.fail_flow(PtError::NOMAP, Some(ip)));
        };
        match decode_run(self.images[cur], ip, self.rd.bitness) {
            Ok(r) => {
                self.cache.insert(ip, r);
                Ok(r)
            }
            Err(e) => Err(self.fail_flow(e, Some(ip))),
        }
    }

    pub(super) fn ev_time(&self) -> Option<u64> {
        self.ev_tsc
    }

    pub(super) fn run<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<(), Halt> {
        loop {
            if !self.enabled {
                self.step_disabled(f)?;
                continue;
            }
            match self.ev {
                Ev::AsyncBranch { from, .. } => self.proceed_to(from, f)?,
                Ev::AsyncDisabled { at } => self.proceed_to(at, f)?,
                Ev::Pgd(Some(ip)) => self.proceed_to(ip, f)?,
                Ev::Bound { ip, .. } => self.proceed_to(ip, f)?,
                Ev::Cr3 { pips } => return self.proceed_through_cr3(pips, f),
                Ev::Psb(ip) => {
                    if let Some(ip) = ip {
                        self.proceed_to_psb(ip, f)?;
                    }
                    self.end_block(f)?;
                    self.forget_calls();
                    if let Some(ip) = ip {
                        let tsc = self.ev_time();
                        self.emit(
                            f,
                            BlockItem::Enabled {
                                ip,
                                status_update: true,
                                tsc,
                            },
                        )?;
                    } else {
                        // Tracing is off after all (a disable we missed).
                        self.enabled = false;
                        let tsc = self.ev_time();
                        self.emit(
                            f,
                            BlockItem::Disabled {
                                ip: None,
                                tsc,
                                status_update: true,
                            },
                        )?;
                    }
                    self.consume()?;
                }
                Ev::Overflow(ip) => self.overflow_event(ip, f)?,
                Ev::Pge(ip) => {
                    self.end_block(f)?;
                    let tsc = self.ev_time();
                    self.emit(
                        f,
                        BlockItem::Enabled {
                            ip,
                            status_update: false,
                            tsc,
                        },
                    )?;
                    self.ip = ip;
                    self.consume()?;
                }
                Ev::Tnt { .. } | Ev::Tip(_) | Ev::Pgd(None) => {
                    // An entry that consumed its packet leaves the event
                    // after it to this loop.
                    if self.memo && self.replay(f)? {
                        continue;
                    }
                    self.proceed(f)?
                }
                // The trace is used up: the walk stops here, as libipt's
                // decoders do (they report the end of the trace as soon as
                // the last packet is consumed), not at the next instruction
                // that needs trace, which may lie past code that is not
                // there (the flow went on, but the trace did not say where).
                Ev::Eos => return Err(Halt::End),
            }
        }
    }

    fn overflow_event<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        ip: Option<u64>,
        f: &mut F,
    ) -> Result<(), Halt> {
        self.end_block(f)?;
        // The hardware's return stack is gone with the lost trace.
        self.ret_len = 0;
        let tsc = self.ev_time();
        self.emit(f, BlockItem::Overflow { ip, tsc })?;
        self.enabled = ip.is_some();
        self.ip = ip.unwrap_or(0);
        self.consume()
    }

    fn step_disabled<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<(), Halt> {
        let tsc = self.ev_time();
        match self.ev {
            Ev::Pge(ip) => {
                self.emit(
                    f,
                    BlockItem::Enabled {
                        ip,
                        status_update: false,
                        tsc,
                    },
                )?;
                self.enabled = true;
                self.ip = ip;
                self.consume()
            }
            Ev::Psb(Some(ip)) => {
                self.forget_calls();
                self.enabled = true;
                self.ip = ip;
                self.emit(
                    f,
                    BlockItem::Enabled {
                        ip,
                        status_update: true,
                        tsc,
                    },
                )?;
                self.consume()
            }
            Ev::Psb(None) => {
                self.forget_calls();
                self.emit(
                    f,
                    BlockItem::Disabled {
                        ip: None,
                        tsc,
                        status_update: true,
                    },
                )?;
                self.consume()
            }
            Ev::Overflow(ip) => self.overflow_event(ip, f),
            // A TIP.PGD while tracing is already off: reported, as libipt
            // reports it, but it changes nothing the flow believed.
            Ev::Pgd(ip) => {
                self.emit(
                    f,
                    BlockItem::Disabled {
                        ip,
                        tsc,
                        status_update: false,
                    },
                )?;
                self.consume()
            }
            Ev::AsyncDisabled { at } => {
                self.emit(f, BlockItem::AsyncDisabled { at, tsc })?;
                self.consume()
            }
            // With tracing off, there is no flow to take there.
            Ev::Eos | Ev::Bound { .. } | Ev::Cr3 { .. } => Err(Halt::End),
            Ev::Tnt { .. } | Ev::Tip(_) | Ev::AsyncBranch { .. } => {
                Err(self.fail_flow(PtError::BAD_CONTEXT, None))
            }
        }
    }

    /// Takes the next TNT bit. A tick is due when this TNT came after a
    /// timing packet (its first bit), or when the TNT that follows it did
    /// (its last bit): either way it binds to this branch, as in libipt.
    pub(super) fn take_bit(&mut self) -> Result<bool, Halt> {
        let Ev::Tnt { bits, count } = self.ev else {
            unreachable!("checked by the caller")
        };
        let bit = (bits >> (count - 1)) & 1 != 0;
        let ticked = self.tick_if_new();
        if count == 1 {
            self.consume()?;
            if !ticked && matches!(self.ev, Ev::Tnt { .. }) {
                self.tick_if_new();
            }
        } else {
            self.ev = Ev::Tnt {
                bits,
                count: count - 1,
            };
            self.idle = 0;
        }
        Ok(bit)
    }

    /// A tick at the last instruction if the current event's time is news.
    fn tick_if_new(&mut self) -> bool {
        match self.ev_tsc {
            Some(tsc) if self.ev_tsc != self.told_tsc => {
                self.tick = Some((self.acc.last, tsc));
                self.told_tsc = self.ev_tsc;
                true
            }
            _ => false,
        }
    }

    /// Takes a TIP's target; also a TIP that hides behind a TNT with bits
    /// left (deferred TIP).
    fn take_tip(&mut self) -> Result<Option<u64>, Halt> {
        match self.ev {
            Ev::Tip(Some(to)) => {
                self.tick_if_new();
                self.consume()?;
                Ok(Some(to))
            }
            Ev::Tip(None) => Err(self.fail_flow(PtError::BAD_PACKET, None)),
            Ev::Tnt { .. } => {
                let saved = self.rd;
                match self.fetch() {
                    Ok(Ev::Tip(Some(to))) => {
                        self.idle = 0;
                        Ok(Some(to))
                    }
                    _ => {
                        self.rd = saved;
                        Ok(None)
                    }
                }
            }
            _ => Ok(None),
        }
    }

    /// Follows runs to the end of a block: a taken branch, or a tick.
    fn proceed<F: FnMut(&mut Self, BlockItem) -> bool>(&mut self, f: &mut F) -> Result<(), Halt> {
        loop {
            let start = self.ip;
            let r = self.run_at(start)?;
            self.add(start, r.ninsn, r.last, r.class);
            self.idle += 1;
            if self.idle > MAX_IDLE_RUNS {
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            match r.class {
                Class::Other => self.ip = r.next,
                Class::MovCr3 => {
                    if matches!(self.ev, Ev::Pgd(None)) {
                        return self.bind_disable(f);
                    }
                    self.ip = r.next;
                }
                Class::Call => {
                    push_call(self, r.next, r.target);
                    self.ip = r.target;
                    if self.skl014_binds(r.target) {
                        return self.bind_disable_at(Some(r.target), f);
                    }
                    return self.end_block(f);
                }
                Class::Jump => {
                    self.ip = r.target;
                    if self.skl014_binds(r.target) {
                        return self.bind_disable_at(Some(r.target), f);
                    }
                    return self.end_block(f);
                }
                Class::CondJump => match self.ev {
                    Ev::Tnt { .. } => {
                        if self.take_bit()? {
                            self.ip = r.target;
                            return self.end_block(f);
                        }
                        self.ip = r.next;
                        // Another kind of event reports at this boundary.
                        let more = matches!(self.ev, Ev::Tnt { .. } | Ev::Tip(_) | Ev::Pgd(None));
                        if self.tick.is_some() || !more {
                            return self.end_block(f);
                        }
                    }
                    Ev::Pgd(None) => return self.bind_disable(f),
                    Ev::Eos => {
                        self.unadd();
                        return Err(Halt::End);
                    }
                    _ => return Err(self.fail_flow(PtError::BAD_QUERY, None)),
                },
                Class::Return => match self.ev {
                    Ev::Tnt { .. } => {
                        if !self.take_bit()? {
                            return Err(self.fail_flow(PtError::BAD_RETCOMP, None));
                        }
                        match self.pop_ret() {
                            Some(to) => self.ip = to,
                            None => return Err(self.fail_flow(PtError::BAD_RETCOMP, None)),
                        }
                        return self.end_block(f);
                    }
                    Ev::Tip(_) => {
                        let to = self.take_tip()?.expect("a TIP is current");
                        self.ip = to;
                        return self.end_block(f);
                    }
                    Ev::Pgd(None) => return self.bind_disable(f),
                    Ev::Eos => {
                        self.unadd();
                        return Err(Halt::End);
                    }
                    _ => return Err(self.fail_flow(PtError::BAD_QUERY, None)),
                },
                Class::IndirectCall
                | Class::IndirectJump
                | Class::FarCall
                | Class::FarReturn
                | Class::FarJump => {
                    if let Some(to) = self.take_tip()? {
                        if r.class == Class::IndirectCall {
                            self.push_ret(r.next);
                        }
                        self.ip = to;
                        return self.end_block(f);
                    }
                    match self.ev {
                        Ev::Pgd(None) => return self.bind_disable(f),
                        Ev::Eos => {
                            self.unadd();
                            return Err(Halt::End);
                        }
                        _ => return Err(self.fail_flow(PtError::BAD_QUERY, None)),
                    }
                }
            }
        }
    }
}
