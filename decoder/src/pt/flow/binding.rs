//! Trace events and where they bind: packets read into events (which FUP
//! belongs to the packet before it, which starts an asynchronous event
//! with the TIP after it; PSB+, OVF and the errata around them), and the
//! single-stepping that takes the flow to the instruction an event binds
//! to. They sit together because both halves are the SDM's binding rules,
//! as libipt implements them, and the reader's state (`Reader`) is what
//! carries a bound FUP from one half to the other.

use iced_x86::{Decoder, DecoderOptions, Mnemonic};

use super::run_cache::{decode_one, one, Class, Run};
use super::walk::{push_call, Halt};
use super::FlowDecoder;
use crate::pt::block::{BlockItem, PtError};
use crate::pt::packet::{self, IpKind, Packet, PacketError};
use crate::pt::timing::Time;

/// A decoded trace event, waiting for the instruction it binds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ev {
    Tnt {
        bits: u64,
        count: u8,
    },
    Tip(Option<u64>),
    Pge(u64),
    Pgd(Option<u64>),
    AsyncBranch {
        from: u64,
        to: u64,
    },
    AsyncDisabled {
        at: u64,
    },
    Overflow(Option<u64>),
    /// PSB+: the IP its FUP gave, if tracing is on.
    Psb(Option<u64>),
    /// The trace ends after a FUP bound to a status event (a TSX begin or
    /// commit, a PTWRITE, a MODE.Exec, …): the flow goes on to its IP,
    /// where libipt binds the event, and stops there; past it if `after`
    /// (a PTWRITE's FUP names the PTWRITE, which ran).
    Bound {
        ip: u64,
        after: bool,
    },
    /// The trace ends after `pips` PIPs read while tracing was on: each
    /// binds to the next MOV CR3 the flow runs, so the flow goes on
    /// through that many, as libipt's does, and stops after the last (or
    /// where the code runs out).
    Cr3 {
        pips: u32,
    },
    Eos,
}

/// Instructions single-stepped towards an asynchronous event's address:
/// counted one by one, so the limit is higher than for runs (a long
/// stretch of straight-line code may precede an interrupt).
const MAX_STEP_INSNS: u32 = 1 << 20;

/// Instructions stepped towards a PSB's address. A sound trace gets there
/// within a stretch of code without branches that need trace, which is
/// short; a damaged one may never, and may hold a PSB every 16 bytes.
const MAX_PSB_STEP_INSNS: u32 = 1 << 13;

// Event Trace's CFE types and EVD types (libipt's `pt_cfe_type`,
// `pt_evd_type`), and what an EVD expects of the CFE after it.
const CFE_INTR: u8 = 0x01;
const CFE_RSM: u8 = 0x04;
const CFE_SIPI: u8 = 0x05;
const CFE_VMEXIT: u8 = 0x08;
const CFE_VMEXIT_INTR: u8 = 0x09;
const EVD_CR2: u8 = 0;
const EVD_VMXQ: u8 = 1;
const EVD_VMXR: u8 = 2;
const CFE_DUE_INTR: u8 = 1;
const CFE_DUE_VMXQ: u8 = 2;
const CFE_DUE_VMXR: u8 = 4;

/// Packet-reading state that a look-ahead may have to undo.
#[derive(Clone, Copy)]
pub(super) struct Reader {
    pub(super) pos: usize,
    pub(super) last_ip: u64,
    pub(super) time: Time,
    /// The next FUP belongs to the packet before it (TSX, PTW, EXSTOP, CFE,
    /// TRIG).
    pub(super) fup_bound: bool,
    /// Whether the packets read so far leave tracing on (PacketEn, as the
    /// packets say it, ahead of the flow): a MODE.TSX binds the FUP after
    /// it only while tracing is on.
    pub(super) tracing: bool,
    /// A MODE.TSX abort was read: the next FUP is the abort's.
    pub(super) tsx_abort: bool,
    /// The last asynchronous event read is a TSX abort.
    pub(super) async_abort: bool,
    /// Event Trace: what the EVDs read so far expect of the CFE they
    /// precede (`CFE_DUE_*` bits).
    pub(super) cfe_due: u8,
    /// A MODE.Exec outside PSB+ waits for the packet it binds to: the next
    /// TIP, TIP.PGE or TIP.PGD, or a FUP (with Event Trace, an IF change's
    /// MODE.Exec comes with one), which is then no event of its own.
    pub(super) mode_bound: bool,
    /// The IP of the last FUP read that belongs to the packet before it,
    /// since the last event: where the flow is bound to go if the trace
    /// ends here, and whether the instruction there ran (PTWRITE).
    pub(super) bound_ip: Option<(u64, bool)>,
    /// The FUP bound next is a PTWRITE's.
    pub(super) ptw_bound: bool,
    /// PIPs read outside PSB+ with tracing on since the last event: the
    /// MOV CR3s they bind to ran ([`Ev::Cr3`]).
    pub(super) pips: u32,
    /// The flow is lost after an error: a bound FUP is an event of its own
    /// ([`Ev::Bound`]), where the flow resumes.
    pub(super) resuming: bool,
    pub(super) bitness: u32,
}

impl Reader {
    /// A reader at trace offset `pos` that knows nothing yet: no last IP,
    /// no time, tracing off, 64-bit code until a MODE.Exec says otherwise.
    pub(super) fn at(pos: usize) -> Reader {
        Reader {
            pos,
            last_ip: 0,
            time: Time::default(),
            fup_bound: false,
            mode_bound: false,
            tracing: false,
            tsx_abort: false,
            async_abort: false,
            cfe_due: 0,
            bound_ip: None,
            ptw_bound: false,
            pips: 0,
            resuming: false,
            bitness: 64,
        }
    }
}

impl FlowDecoder<'_> {
    // ---- packets to events ----

    fn fail(&self, error: PtError, ip: Option<u64>) -> Halt {
        Halt::Fail {
            offset: self.rd.pos as u64,
            error,
            ip,
            resumable: false,
        }
    }

    pub(super) fn fetch_first(&mut self) -> Result<(), Halt> {
        self.ev = self.fetch()?;
        self.ev_tsc = self.rd.time.tsc();
        self.ev_abort = matches!(self.ev, Ev::AsyncBranch { .. } | Ev::AsyncDisabled { .. })
            && self.rd.async_abort;
        match self.ev {
            Ev::Pge(_) => self.rd.tracing = true,
            Ev::Pgd(_) | Ev::AsyncDisabled { .. } => self.rd.tracing = false,
            Ev::Psb(ip) | Ev::Overflow(ip) => self.rd.tracing = ip.is_some(),
            _ => {}
        }
        Ok(())
    }

    /// The current event is used up: the next one becomes current.
    pub(super) fn consume(&mut self) -> Result<(), Halt> {
        self.told_tsc = self.ev_tsc;
        self.consumed = self.rd.pos;
        self.idle = 0;
        self.fetch_first()
    }

    fn read_ip(&mut self, ipb: u8, payload: u64) -> Option<u64> {
        let ip = packet::expand_ip(self.rd.last_ip, ipb, payload)?;
        self.rd.last_ip = ip;
        Some(ip)
    }

    /// Reads the next packet; `None` at the end of the trace.
    fn packet(&mut self) -> Result<Option<Packet>, Halt> {
        let Some(rest) = self.trace.get(self.rd.pos..).filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        match packet::parse_with(rest, &self.errata) {
            Ok((p, n)) => {
                self.rd.pos += n;
                Ok(Some(p))
            }
            // A packet cut off by the end of the buffer ends the trace.
            Err(PacketError::Truncated) => Ok(None),
            // SKD007 and SKZ84 corrupt bytes libipt skips.
            Err(PacketError::Erratum { skip, .. }) => {
                self.rd.pos += skip;
                self.packet()
            }
            Err(PacketError::Unknown(_)) => Err(self.fail(PtError::BAD_OPC, None)),
        }
    }

    /// Applies a packet that carries state but no event; false if it is
    /// not one of those.
    fn status(&mut self, p: &Packet) -> bool {
        let cfg = self.cfg;
        let t = &mut self.rd.time;
        match *p {
            Packet::Pad
            | Packet::PsbEnd
            | Packet::Pip { .. }
            | Packet::Vmcs(_)
            | Packet::Mnt(_)
            | Packet::Mwait { .. }
            | Packet::Pwre { .. }
            | Packet::Pwrx { .. }
            | Packet::Stop => {}
            Packet::Tsc(v) => t.on_tsc(v),
            Packet::Mtc(v) => t.on_mtc(v, &cfg),
            Packet::Tma { ctc, fc } => t.on_tma(ctc, fc, &cfg),
            Packet::Cyc(v) => t.on_cyc(v, &cfg),
            Packet::Cbr(v) => t.on_cbr(v),
            Packet::ModeExec { csl, csd, .. } => {
                self.rd.mode_bound = true;
                self.rd.bitness = if csl {
                    64
                } else if csd {
                    32
                } else {
                    16
                };
            }
            // A begin or commit binds the FUP after it (a TSX event at that
            // IP, no branch); an abort's FUP starts an asynchronous branch
            // to the abort handler, or a disable, like an interrupt's.
            // While tracing is off, MODE.TSX stands alone.
            Packet::ModeTsx { abort, .. } => {
                self.rd.fup_bound |= !abort && self.rd.tracing;
                self.rd.tsx_abort = abort && self.rd.tracing;
            }
            Packet::Exstop { ip } => self.rd.fup_bound |= ip,
            Packet::Ptw { ipb, .. } => {
                self.rd.fup_bound |= ipb != 0;
                self.rd.ptw_bound = ipb != 0;
            }
            Packet::Trig { ip, .. } => self.rd.fup_bound |= ip,
            _ => return false,
        }
        true
    }

    /// Event Trace's CFE and the EVDs before it, checked for the orders
    /// libipt accepts: a page fault's CR2 only for an interrupt, a VM
    /// exit's qualification and reason once each and only for a VM exit,
    /// and no EVD for any other CFE. A CFE with its IP bit binds the FUP
    /// after it.
    fn event_trace(&mut self, p: &Packet) -> Result<(), Halt> {
        let due = self.rd.cfe_due;
        match *p {
            Packet::Evd { kind, .. } => {
                self.rd.cfe_due = match kind {
                    EVD_CR2 if due == 0 => CFE_DUE_INTR,
                    EVD_VMXQ | EVD_VMXR => {
                        let bit = if kind == EVD_VMXQ {
                            CFE_DUE_VMXQ
                        } else {
                            CFE_DUE_VMXR
                        };
                        if due & !(CFE_DUE_VMXQ | CFE_DUE_VMXR) != 0 || due & bit != 0 {
                            return Err(self.fail(PtError::BAD_CONTEXT, None));
                        }
                        due | bit
                    }
                    // Unknown EVDs add what a decoder may ignore.
                    EVD_CR2 => return Err(self.fail(PtError::BAD_CONTEXT, None)),
                    _ => due,
                };
            }
            Packet::Cfe { ip, kind, .. } => {
                self.rd.cfe_due = 0;
                let fits = match kind {
                    CFE_INTR => due & !CFE_DUE_INTR == 0,
                    CFE_VMEXIT | CFE_VMEXIT_INTR => due & CFE_DUE_INTR == 0,
                    _ => due == 0,
                };
                if !fits {
                    return Err(self.fail(PtError::BAD_CONTEXT, None));
                }
                // RSM and SIPI have no IP to give.
                if ip && matches!(kind, CFE_RSM | CFE_SIPI) {
                    return Err(self.fail(PtError::BAD_PACKET, None));
                }
                self.rd.fup_bound |= ip;
            }
            _ => unreachable!("event_trace takes CFE and EVD"),
        }
        Ok(())
    }

    /// Reads packets up to the next event.
    pub(super) fn fetch(&mut self) -> Result<Ev, Halt> {
        self.rd.bound_ip = None;
        self.rd.pips = 0;
        loop {
            // The common packets first, without the general parser: short
            // TNT and CYC make up most of a trace.
            if let Some(&b0) = self.trace.get(self.rd.pos) {
                if b0 & 1 == 0 && b0 > 2 {
                    self.rd.pos += 1;
                    let payload = (b0 >> 1) as u64;
                    let count = 63 - payload.leading_zeros() as u8;
                    return Ok(Ev::Tnt {
                        bits: payload & ((1 << count) - 1),
                        count,
                    });
                }
                if b0 & 0x07 == 0x03 {
                    // A one-byte CYC.
                    self.rd.pos += 1;
                    let cfg = self.cfg;
                    self.rd.time.on_cyc((b0 >> 3) as u64, &cfg);
                    continue;
                }
            }
            let Some(p) = self.packet()? else {
                return Ok(match self.rd.bound_ip.take() {
                    Some((ip, after)) => Ev::Bound { ip, after },
                    None if self.rd.pips > 0 => Ev::Cr3 {
                        pips: std::mem::take(&mut self.rd.pips),
                    },
                    None => Ev::Eos,
                });
            };
            if let (Packet::Pip { .. }, true) = (&p, self.rd.tracing) {
                self.rd.pips += 1;
                continue;
            }
            if self.status(&p) {
                continue;
            }
            match p {
                Packet::Tnt { bits, count, .. } => {
                    if count > 0 {
                        return Ok(Ev::Tnt { bits, count });
                    }
                }
                Packet::Tip { kind, ipb, payload } => {
                    let ip = self.read_ip(ipb, payload);
                    let mode_bound = std::mem::take(&mut self.rd.mode_bound);
                    match kind {
                        IpKind::Tip => return Ok(Ev::Tip(ip)),
                        IpKind::TipPge => {
                            return ip.map(Ev::Pge).ok_or(self.fail(PtError::NOIP, None));
                        }
                        IpKind::TipPgd => return Ok(Ev::Pgd(ip)),
                        IpKind::Fup => {
                            if std::mem::take(&mut self.rd.fup_bound) | mode_bound {
                                let after = std::mem::take(&mut self.rd.ptw_bound);
                                if self.rd.tracing {
                                    self.rd.bound_ip = ip.map(|ip| (ip, after));
                                    if let (true, Some(ip)) = (self.rd.resuming, ip) {
                                        return Ok(Ev::Bound { ip, after });
                                    }
                                }
                                continue;
                            }
                            let from = ip.ok_or(self.fail(PtError::NOIP, None))?;
                            self.rd.async_abort = std::mem::take(&mut self.rd.tsx_abort);
                            return self.async_event(from);
                        }
                    }
                }
                Packet::Cfe { .. } | Packet::Evd { .. } => self.event_trace(&p)?,
                Packet::Ovf => return self.overflow(),
                Packet::Psb => return self.psb(),
                _ => return Err(self.fail(PtError::BAD_OPC, None)),
            }
        }
    }

    /// After a FUP at `from`: the TIP or TIP.PGD that completes it.
    fn async_event(&mut self, from: u64) -> Result<Ev, Halt> {
        loop {
            let Some(p) = self.packet()? else {
                return Ok(Ev::Eos);
            };
            if self.status(&p) {
                continue;
            }
            match p {
                Packet::Tip {
                    kind: IpKind::Tip,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    let to = self
                        .read_ip(ipb, payload)
                        .ok_or(self.fail(PtError::NOIP, None))?;
                    return Ok(Ev::AsyncBranch { from, to });
                }
                Packet::Tip {
                    kind: IpKind::TipPgd,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    self.read_ip(ipb, payload);
                    return Ok(Ev::AsyncDisabled { at: from });
                }
                Packet::Ovf => return self.overflow(),
                // The FUP's TIP never came (a damaged trace, or a FUP while
                // tracing was off): a PSB starts afresh, as a chunk cut
                // there does, so the FUP is dropped rather than failing the
                // PSB+ after it.
                Packet::Psb => return self.psb(),
                Packet::Cfe { .. } | Packet::Evd { .. } => self.event_trace(&p)?,
                _ => return Err(self.fail(PtError::BAD_CONTEXT, None)),
            }
        }
    }

    /// After OVF: tracing resumes at a FUP's address, or at a later enable.
    fn overflow(&mut self) -> Result<Ev, Halt> {
        loop {
            let before = self.rd;
            let Some(p) = self.packet()? else {
                return Ok(Ev::Overflow(None));
            };
            match p {
                Packet::Tip {
                    kind: IpKind::Fup,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    // APL12: a FUP although tracing is off after all.
                    if self.errata.apl12 && self.ovf_fup_is_spurious() {
                        return Ok(Ev::Overflow(None));
                    }
                    return Ok(Ev::Overflow(self.read_ip(ipb, payload)));
                }
                // APL11: a TIP.PGD after the OVF: tracing is off.
                Packet::Tip {
                    kind: IpKind::TipPgd,
                    ..
                } if self.errata.apl11 => return Ok(Ev::Overflow(None)),
                // Maintenance packets may come between OVF and its FUP.
                Packet::Mnt(_)
                | Packet::Tsc(_)
                | Packet::Mtc(_)
                | Packet::Tma { .. }
                | Packet::Cyc(_)
                | Packet::Cbr(_)
                | Packet::Pad
                | Packet::ModeExec { .. } => {
                    self.status(&p);
                }
                _ => {
                    // Not ours: leave it for the next fetch.
                    self.rd = before;
                    if self.errata.skd010 {
                        return self.skd010();
                    }
                    return Ok(Ev::Overflow(None));
                }
            }
        }
    }

    /// SKD010: the FUP after an OVF may be missing although tracing is on.
    /// What comes later tells: a TIP or a FUP (after a MODE.TSX, say), or a
    /// PSB+ with a FUP, gives the IP to resume at; a TIP.PGD says tracing
    /// went off (it is used up); a TIP.PGE, a TNT and the like that the
    /// erratum does not explain leave the overflow with tracing off, as
    /// without the erratum.
    fn skd010(&mut self) -> Result<Ev, Halt> {
        let before = self.rd;
        let mut tsx = false;
        let off = |dec: &mut Self| {
            dec.rd = before;
            Ok(Ev::Overflow(None))
        };
        loop {
            let Some(p) = self.packet()? else {
                return off(self);
            };
            match p {
                Packet::Tip {
                    kind: IpKind::TipPgd,
                    ipb,
                    payload,
                } => {
                    self.read_ip(ipb, payload);
                    self.rd.mode_bound = false;
                    return Ok(Ev::Overflow(None));
                }
                Packet::Tip {
                    kind: IpKind::Tip | IpKind::Fup,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    self.rd.fup_bound = false;
                    let ip = self.read_ip(ipb, payload);
                    return if ip.is_some() {
                        Ok(Ev::Overflow(ip))
                    } else {
                        off(self)
                    };
                }
                Packet::ModeTsx { .. } if !tsx => tsx = true,
                Packet::Psb => {
                    // Resume at the FUP of this PSB+, which is read next.
                    let psb = self.rd.pos - packet::PSB_BYTES.len();
                    let fup =
                        self.peek()
                            .take_while(|p| *p != Packet::PsbEnd)
                            .find_map(|p| match p {
                                Packet::Tip {
                                    kind: IpKind::Fup,
                                    ipb: ipb @ (3 | 6),
                                    payload,
                                } => packet::expand_ip(0, ipb, payload),
                                _ => None,
                            });
                    return match fup {
                        Some(ip) => {
                            self.rd.pos = psb;
                            Ok(Ev::Overflow(Some(ip)))
                        }
                        None => off(self),
                    };
                }
                Packet::PsbEnd => return Err(self.fail(PtError::BAD_CONTEXT, None)),
                Packet::Pip { .. }
                | Packet::Vmcs(_)
                | Packet::ModeExec { .. }
                | Packet::Pad
                | Packet::Mnt(_)
                | Packet::Pwre { .. }
                | Packet::Pwrx { .. }
                | Packet::Evd { .. }
                | Packet::Tsc(_)
                | Packet::Mtc(_)
                | Packet::Tma { .. }
                | Packet::Cyc(_)
                | Packet::Cbr(_) => {
                    self.status(&p);
                }
                _ => return off(self),
            }
        }
    }

    /// The packets from the reader on, without reading them: `None` at
    /// the end or at a packet that does not parse.
    fn peek(&self) -> impl Iterator<Item = Packet> + '_ {
        let mut pos = self.rd.pos;
        std::iter::from_fn(move || {
            let (p, n) = packet::parse(self.trace.get(pos..)?).ok()?;
            pos += n;
            Some(p)
        })
    }

    /// BDM70: whether a TIP.PGE comes next, but for status packets.
    fn pge_follows(&self) -> bool {
        for p in self.peek() {
            match p {
                Packet::Tip {
                    kind: IpKind::TipPge,
                    ..
                } => return true,
                Packet::Pad
                | Packet::Tsc(_)
                | Packet::Cbr(_)
                | Packet::PsbEnd
                | Packet::Pip { .. }
                | Packet::ModeExec { .. }
                | Packet::ModeTsx { .. }
                | Packet::Vmcs(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Mnt(_) => {}
                _ => return false,
            }
        }
        false
    }

    /// APL12: whether the FUP just read after an OVF is spurious: tracing
    /// is off, as a TIP.PGE, a STOP or a PSB+ without FUP says before any
    /// packet that needs it on.
    fn ovf_fup_is_spurious(&self) -> bool {
        let mut it = self.peek();
        while let Some(p) = it.next() {
            match p {
                Packet::Tnt { .. }
                | Packet::PsbEnd
                | Packet::Ovf
                | Packet::Tip {
                    kind: IpKind::Tip | IpKind::TipPgd,
                    ..
                } => return false,
                Packet::Stop
                | Packet::Tip {
                    kind: IpKind::TipPge,
                    ..
                } => return true,
                Packet::Psb => {
                    // Spurious if that PSB+ holds no FUP.
                    for p in it.by_ref() {
                        match p {
                            Packet::Tip {
                                kind: IpKind::Fup, ..
                            } => return false,
                            Packet::PsbEnd => return true,
                            _ => {}
                        }
                    }
                    return false;
                }
                _ => {}
            }
        }
        false
    }

    /// PSB+: status packets up to PSBEND.
    fn psb(&mut self) -> Result<Ev, Halt> {
        let mut ip = None;
        let mut restart = true;
        loop {
            if std::mem::take(&mut restart) {
                self.psb_at = self.rd.pos.saturating_sub(packet::PSB_BYTES.len());
                self.rd.last_ip = 0;
                self.rd.fup_bound = false;
                self.rd.mode_bound = false;
                self.rd.cfe_due = 0;
                // What PSB+ restates starts over, as where a decoder syncs.
                self.rd.time.on_psb();
                self.rd.bitness = 64;
                ip = None;
            }
            let Some(p) = self.packet()? else {
                return Ok(Ev::Eos);
            };
            match p {
                Packet::PsbEnd => {
                    // PSB+'s MODE.Exec is status: it binds nothing after.
                    self.rd.mode_bound = false;
                    // BDM70: a FUP in PSB+ that a TIP.PGE follows.
                    if ip.is_some() && self.errata.bdm70 && self.pge_follows() {
                        ip = None;
                    }
                    return Ok(Ev::Psb(ip));
                }
                // A PSB+ cut short by another PSB (damaged): the new one
                // starts afresh, as a decoder that syncs there does.
                Packet::Psb => restart = true,
                Packet::Tip {
                    kind: IpKind::Fup,
                    ipb,
                    payload,
                } => ip = self.read_ip(ipb, payload),
                // An overflow inside PSB+ with tracing on: the status it
                // gave so far first, as libipt reports it, then the OVF
                // (read again: it is two bytes).
                Packet::Ovf if ip.is_some() => {
                    self.rd.pos -= 2;
                    self.rd.mode_bound = false;
                    return Ok(Ev::Psb(ip));
                }
                Packet::Ovf => return self.overflow(),
                // MODE.TSX in PSB+ is status (tracing is on inside a
                // transaction): it binds no FUP, neither PSB+'s own nor the
                // next one, which starts an event of its own.
                Packet::ModeTsx { .. } => {}
                p if self.status(&p) => {}
                _ => return Err(self.fail(PtError::BAD_CONTEXT, None)),
            }
        }
    }

    // ---- where events bind in the flow ----

    /// A disable without IP binds to the instruction just added, which
    /// needed trace.
    pub(super) fn bind_disable<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<(), Halt> {
        self.bind_disable_at(None, f)
    }

    /// Whether the pending TIP.PGD without an IP binds to a direct branch
    /// to `target`: under SKL014 a direct call or jump that leaves the IP
    /// filter's ranges writes its TIP.PGD without the IP, so where the
    /// filter is known the branch out of it is where tracing stopped (as
    /// libipt and perf bind it).
    pub(super) fn skl014_binds(&self, target: u64) -> bool {
        matches!(self.ev, Ev::Pgd(None))
            && self.errata.skl014
            && self.cfg.filter.is_configured()
            && !self.cfg.filter.traces(target)
    }

    /// Binds the pending disable here; `to` is where the flow went, when
    /// the branch that left the filter says (SKL014).
    pub(super) fn bind_disable_at<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        to: Option<u64>,
        f: &mut F,
    ) -> Result<(), Halt> {
        self.end_block(f)?;
        let tsc = self.ev_time();
        self.emit(
            f,
            BlockItem::Disabled {
                ip: to,
                tsc,
                status_update: false,
            },
        )?;
        self.enabled = false;
        self.ip = 0;
        self.consume()
    }

    /// Moves the flow past a single-stepped instruction that needs no
    /// trace: a direct call or jump ends its block.
    /// The trace ended after `pips` PIPs ([`Ev::Cr3`]): the flow runs on
    /// through as many MOV CR3s, where libipt binds them (a block ends at
    /// each), and stops after the last, at an instruction that needs trace
    /// the trace no longer has, or where the code is not there (an error,
    /// as libipt's).
    pub(super) fn proceed_through_cr3<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        mut pips: u32,
        f: &mut F,
    ) -> Result<(), Halt> {
        let mut steps: u32 = 0;
        while pips > 0 {
            steps += 1;
            if steps > MAX_STEP_INSNS {
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            let insn = self.insn_here()?;
            if insn.class.needs_trace() {
                break;
            }
            self.add(insn.last, 1, insn.last, insn.class);
            self.step_past(&insn, f)?;
            if insn.class == Class::MovCr3 {
                pips -= 1;
                self.end_block(f)?;
            }
        }
        Err(Halt::End)
    }

    fn step_past<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        insn: &Run,
        f: &mut F,
    ) -> Result<(), Halt> {
        match insn.class {
            Class::Call => {
                push_call(self, insn.next, insn.target);
                self.ip = insn.target;
                self.end_block(f)
            }
            Class::Jump => {
                self.ip = insn.target;
                self.end_block(f)
            }
            _ => {
                self.ip = insn.next;
                Ok(())
            }
        }
    }

    /// Tracing is on at a PSB whose FUP says the flow is at `target`: the
    /// instructions from where the flow is to there need no packets and
    /// ran before the PSB, so they are this side of it (a walk that stops
    /// at the PSB, as a fine pass's segment or a chunk does, keeps them,
    /// and one that syncs there starts after them). Where the code does
    /// not get there without trace (a damaged trace), the flow moves to
    /// the PSB's address, as perf does and as a walk syncing there would.
    pub(super) fn proceed_to_psb<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        target: u64,
        f: &mut F,
    ) -> Result<(), Halt> {
        let mut steps = 0;
        while self.ip != target && steps < MAX_PSB_STEP_INSNS {
            steps += 1;
            let Some(cur) = self.cur else { break };
            let Ok(insn) = decode_one(self.images[cur], self.ip, self.rd.bitness) else {
                break;
            };
            if insn.class.needs_trace() {
                break;
            }
            self.add(insn.last, 1, insn.last, insn.class);
            self.step_past(&insn, f)?;
        }
        self.ip = target;
        Ok(())
    }

    /// Whether the code from the flow's IP gets to `to` without a branch,
    /// within as many instructions as libipt looks at.
    fn contiguous(&self, to: u64) -> bool {
        let Some(cur) = self.cur else { return false };
        let mut ip = self.ip;
        for _ in 0..0x100 {
            if ip == to {
                return true;
            }
            match decode_one(self.images[cur], ip, self.rd.bitness) {
                Ok(r) if matches!(r.class, Class::Other | Class::MovCr3) => ip = r.next,
                _ => return false,
            }
        }
        false
    }

    /// The VMLAUNCH or VMRESUME at `at`, if that is what is there.
    fn vm_entry_at(&self, at: u64) -> Option<Run> {
        let mem = self.images[self.cur?];
        let bytes = mem.bytes_at(at)?;
        let insn = Decoder::with_ip(self.rd.bitness, bytes, at, DecoderOptions::NONE).decode();
        matches!(insn.mnemonic(), Mnemonic::Vmlaunch | Mnemonic::Vmresume).then(|| one(&insn))
    }

    /// Single-steps to `target`, where the current event binds (its
    /// instruction does not run), then reports the event.
    /// The instruction at the flow's IP, or the flow's failure to read it.
    fn insn_here(&self) -> Result<Run, Halt> {
        let Some(cur) = self.cur else {
            return Err(self.fail_flow(PtError::NOMAP, Some(self.ip)));
        };
        decode_one(self.images[cur], self.ip, self.rd.bitness)
            .map_err(|e| self.fail_flow(e, Some(self.ip)))
    }

    pub(super) fn proceed_to<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        target: u64,
        f: &mut F,
    ) -> Result<(), Halt> {
        // BDM64: a TSX abort right after a branch that needed trace may
        // have corrupted that branch's trace; where the code cannot get to
        // the abort from where the branch led, the branch led there.
        if self.ev_abort
            && self.errata.bdm64
            && self.after_branch
            && self.acc.ninsn == 0
            && !self.contiguous(target)
        {
            self.ip = target;
        }
        let mut steps: u32 = 0;
        while self.ip != target {
            steps += 1;
            if steps > MAX_STEP_INSNS {
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            let insn = self.insn_here()?;
            self.add(insn.last, 1, insn.last, insn.class);
            if insn.class.needs_trace() {
                // A disable with an IP also binds to a branch that needed
                // trace before reaching it.
                if let Ev::Pgd(Some(ip)) = self.ev {
                    self.end_block(f)?;
                    let tsc = self.ev_time();
                    self.emit(
                        f,
                        BlockItem::Disabled {
                            ip: Some(ip),
                            tsc,
                            status_update: false,
                        },
                    )?;
                    self.enabled = false;
                    self.ip = 0;
                    return self.consume();
                }
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            self.step_past(&insn, f)?;
        }
        if let Ev::Bound { after: true, .. } = self.ev {
            // A PTWRITE's FUP names the PTWRITE: it ran.
            let insn = self.insn_here()?;
            self.add(insn.last, 1, insn.last, insn.class);
            self.ip = insn.next;
        }
        self.end_block(f)?;
        let tsc = self.ev_time();
        match self.ev {
            Ev::AsyncBranch { from, to } => {
                self.emit(f, BlockItem::AsyncBranch { from, to, tsc })?;
                self.ip = to;
            }
            Ev::AsyncDisabled { at } => {
                if self.errata.skd022 {
                    if let Some(insn) = self.vm_entry_at(at) {
                        // SKD022: the VM entry ran and disabled tracing.
                        self.add(at, 1, at, insn.class);
                        self.end_block(f)?;
                        let item = BlockItem::Disabled {
                            ip: None,
                            tsc,
                            status_update: false,
                        };
                        self.emit(f, item)?;
                        self.enabled = false;
                        return self.consume();
                    }
                }
                self.emit(f, BlockItem::AsyncDisabled { at, tsc })?;
                self.enabled = false;
            }
            Ev::Pgd(ip) => {
                self.emit(
                    f,
                    BlockItem::Disabled {
                        ip,
                        tsc,
                        status_update: false,
                    },
                )?;
                self.enabled = false;
            }
            // The status event itself is no item of ours.
            Ev::Bound { .. } => {}
            _ => unreachable!("proceed_to is for events bound to an address"),
        }
        self.consume()
    }
}
