//! This module emulates one PT unit (a thread's, or in per-CPU mode the one
//! virtual CPU's): it is told of each retired user-space instruction and each
//! trip into the kernel, and writes the packets an Intel PT unit configured
//! as [`PtSettings`] says (the event `settings::emulated_config` resolves
//! from `--timing`: branch tracing, with or without return compression, TSC,
//! MTC and CYC) would write into its ring.
//!
//! The rules it follows (Intel SDM Vol. 3C, "Intel Processor Trace"):
//! - conditional branches and compressed near returns are TNT bits, six to a
//!   short TNT packet; a CYC gives the time of the first bit of each TNT;
//! - indirect jumps and calls, uncompressed returns and far transfers are
//!   TIPs with last-IP compression; pending TNT bits are flushed first;
//! - the compressed-return stack holds 64 entries, drops the oldest when
//!   full, skips zero-length calls, pops on every near RET and is cleared
//!   at every PSB;
//! - leaving user space is TIP.PGD with the IP suppressed, preceded by a FUP
//!   when the exit is asynchronous; coming back is TIP.PGE, preceded by
//!   MODE.Exec when none was sent since the last PSB;
//! - with an IP filter (`--filter`), branches out of its ranges write
//!   TIP.PGD and branches into them TIP.PGE, as `emulated::filter` says;
//! - a taken branch that lands in a TraceStop range (`tracestop`) writes
//!   TIP.PGD as one leaving the filter would (if packets were on), then
//!   TraceStop; nothing at all follows (TriggerEn is 0), PSBs included,
//!   until the thread is scheduled out, where the kernel clears
//!   RTIT_STATUS.Stopped (pt_handle_status), and back in, unless the
//!   events are CPU-wide and never scheduled out;
//! - a PSB+ (PSB, CYC, TSC, CBR, and MODE.Exec plus FUP when tracing, then
//!   PSBEND) starts the trace and follows every `psb_period` bytes, at an
//!   instruction boundary; it resets the last IP to zero;
//! - a CYC with the cycles since the previous one precedes every packet that
//!   marks an instruction's time, and immediately precedes each TSC, so that
//!   perf can anchor cycle counts to it; with a threshold (`cyc_thresh` N >
//!   0) only once 2^(N-1) cycles have passed since the last CYC;
//! - TSC only when enabled (`tsc`), in PSB+ and when tracing resumes after
//!   the thread was off the CPU; with MTC on, a TMA follows every TSC with
//!   the crystal clock's `CTC[15:0]` and the TSC ticks since its last tick
//!   (FastCounter);
//! - an MTC whenever the CTC bits `[mtc_period+7:mtc_period]` change, with
//!   those bits as payload;
//! - at the instruction counts `overflows` lists, the unit's internal
//!   buffer overflows: the packets of the next [`OVERFLOW_INSNS`]
//!   instructions are lost, then OVF, and FUP with the next IP (last IP
//!   reset, so in full) if tracing is on, else the TIP.PGE that re-enables
//!   it; the compressed-return stack starts empty again.
//!
//! One deliberate difference: a return is compressed only if libipt's
//! decoder, which does not pop its stack on uncompressed returns, would also
//! expect that target. Where the hardware and libipt disagree (after a
//! longjmp), we send a TIP, which every decoder reads correctly.

use std::collections::VecDeque;
use std::sync::Arc;

use super::filter::{self, IpFilter};

use super::packets::{self, IpCompression, IpPacket};
use super::ring::Ring;
use crate::insn::{Insn, InsnClass};

/// Depth of the hardware's compressed-return stack.
const RETSTACK_DEPTH: usize = 64;

/// How many instructions' packets an overflow loses.
pub const OVERFLOW_INSNS: u64 = 64;

/// What the emulated PT unit is configured to do.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PtSettings {
    /// Bytes between PSBs (2^(psb_period+11)).
    pub psb_period: u64,
    pub ret_compression: bool,
    pub cyc: bool,
    /// CYC at most every 2^(cyc_thresh-1) cycles; 0: no threshold.
    pub cyc_thresh: u8,
    /// TSC packets (and TMA with them when MTC is on).
    pub tsc: bool,
    /// MTC every 2^n crystal-clock ticks; `None`: no MTC.
    pub mtc_period: Option<u8>,
    /// TSC ticks per crystal-clock tick (CPUID.15H EBX/EAX).
    pub tsc_per_ctc: u64,
    /// Core-to-bus ratio reported in CBR packets.
    pub cbr: u8,
    /// PTW packets for PTWRITE instructions, each with a FUP of its IP
    /// when `fup_on_ptw`.
    pub ptw: bool,
    pub fup_on_ptw: bool,
    pub ring_size: usize,
    /// The unit's instruction counts (its `insn_count`, from 1) at which
    /// its internal buffer overflows, ascending; for tests of decoders.
    pub overflows: Arc<[u64]>,
    /// Write the TIP.PGD of a direct call or jump that leaves the IP
    /// filter without its IP, as Skylakes do (erratum SKL014: decoders
    /// then bind it by the filter); for tests of decoders.
    pub skl014: bool,
    /// A TraceStop lasts to the end of the capture: the unit's event is
    /// CPU-wide (`perf record -a`), so the kernel never switches it out
    /// and never clears RTIT_STATUS.Stopped.
    pub sticky_stop: bool,
}

/// A bounded stack that drops its oldest entry when full, like the hardware's.
#[derive(Debug, Default)]
struct RetStack {
    entries: std::collections::VecDeque<u64>,
}

impl RetStack {
    fn push(&mut self, addr: u64) {
        if self.entries.len() == RETSTACK_DEPTH {
            self.entries.pop_front();
        }
        self.entries.push_back(addr);
    }
    fn top(&self) -> Option<u64> {
        self.entries.back().copied()
    }
    fn pop(&mut self) {
        self.entries.pop_back();
    }
    fn clear(&mut self) {
        self.entries.clear();
    }
}

#[derive(Debug)]
pub struct ThreadPt {
    cfg: PtSettings,
    ring: Ring,
    /// Scratch buffer for the packets of one step.
    out: Vec<u8>,
    last_ip: u64,
    tnt_bits: u64,
    tnt_count: u32,
    retstack: RetStack,
    /// The stack libipt keeps: pops only on compressed returns, never cleared.
    decoder_retstack: RetStack,
    mode_exec_sent: bool,
    /// No IP packet since the last PSB: the next one carries its IP whole.
    /// The SDM resets the last IP at a PSB, so a compressed IP would be
    /// exact, but perf's decoder keeps its last IP across a PSB it walks
    /// through and would extend it with stale bits; hardware writes the
    /// IP of PSB+'s FUP whole too.
    psb_fresh: bool,
    /// PacketEn: user code of this thread is being traced right now.
    packet_en: bool,
    /// RTIT_STATUS.Stopped: a branch landed in a TraceStop range, and the
    /// unit writes nothing until it is cleared.
    stopped: bool,
    /// RTIT_CTL.TraceEn cleared by the kernel's AUX pause (`--range`):
    /// the unit writes nothing until it is resumed.
    paused: bool,
    /// The time of the last CYC (or TSC) packet.
    last_cyc: u64,
    /// The IP filter, and whether user code runs outside it (ContextEn=1,
    /// FilterEn=0): see `emulated::filter`.
    filter: IpFilter,
    filtered_out: bool,
    /// Outside the filter: where the last instruction retired went.
    /// User code resuming anywhere else got there through the kernel
    /// (a signal handler, another thread on the CPU), and FilterEn is
    /// evaluated again there.
    expected_ip: u64,
    since_psb: u64,
    pub psb_count: u64,
    pub insn_count: u64,
    /// CTC >> mtc_period at the last MTC or TMA.
    mtc_seen: u64,
    /// Overflowing: packets are lost until `insn_count` reaches this.
    dropping: Option<u64>,
    /// The next of `cfg.overflows` to come.
    next_overflow: usize,
    pub overflow_count: u64,
    /// Where in the ring (its head count) each PSB still in it starts,
    /// and its time: a decoder syncs at the first, so the ring's history
    /// reaches back to it.
    psbs: VecDeque<(u64, u64)>,
}

impl ThreadPt {
    /// Turns tracing on (TraceEn 0→1) at `now`, before the thread's first
    /// user-space instruction: a PSB+ without FUP, as the thread is not yet
    /// in traced code.
    pub fn new(cfg: PtSettings, now: u64) -> ThreadPt {
        let mut t = ThreadPt {
            cfg: cfg.clone(),
            ring: Ring::new(cfg.ring_size),
            out: Vec::with_capacity(256),
            last_ip: 0,
            tnt_bits: 0,
            tnt_count: 0,
            retstack: RetStack::default(),
            decoder_retstack: RetStack::default(),
            mode_exec_sent: false,
            psb_fresh: false,
            packet_en: false,
            stopped: false,
            paused: false,
            last_cyc: now,
            filter: IpFilter::default(),
            filtered_out: false,
            expected_ip: 0,
            since_psb: 0,
            psb_count: 0,
            insn_count: 0,
            mtc_seen: 0,
            dropping: None,
            next_overflow: 0,
            overflow_count: 0,
            psbs: VecDeque::new(),
        };
        t.psb_plus(None, now);
        t.commit();
        t
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The time of the oldest PSB the ring still holds whole: what a
    /// snapshot taken now decodes from. `None` before the first.
    pub fn oldest_decodable(&mut self) -> Option<u64> {
        self.prune_psbs();
        self.psbs.front().map(|&(_, time)| time)
    }

    /// Forgets the PSBs the ring has overwritten.
    fn prune_psbs(&mut self) {
        let first_kept = self.ring.head().saturating_sub(self.ring.size() as u64);
        while self.psbs.front().is_some_and(|&(at, _)| at < first_kept) {
            self.psbs.pop_front();
        }
    }

    #[inline]
    pub fn tracing(&self) -> bool {
        self.packet_en
    }

    /// Whether a TraceStop stopped the unit (and it was not restarted).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Starts paused (`aux-action=start-paused`): nothing is traced until
    /// [`ThreadPt::resume`].
    pub fn start_paused(&mut self) {
        self.paused = true;
    }

    /// The kernel paused the trace at a breakpoint on `ip` (aux-action
    /// pause): the debug exception took the thread out of user code (FUP,
    /// TIP.PGD), then TraceEn was cleared.
    pub fn pause(&mut self, ip: u64, now: u64) {
        if !self.paused {
            self.interrupt(ip, now);
            self.paused = true;
        }
    }

    /// The kernel resumed the trace (aux-action resume): tracing restarts
    /// where the thread next runs user code, after a TSC, as when TraceEn
    /// is set again on a context switch.
    pub fn resume(&mut self) {
        self.paused = false;
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    /// The unit's thread was scheduled out: the kernel's pt_event_stop
    /// clears RTIT_STATUS.Stopped (pt_handle_status), so tracing resumes
    /// where the thread next enters user code, unless the unit is
    /// CPU-wide and never scheduled out.
    pub fn scheduled_out(&mut self) {
        if !self.cfg.sticky_stop {
            self.stopped = false;
        }
    }

    /// Another thread's trace may come next in the same buffer: the QEMU
    /// backend's per-CPU layout puts this unit's trace, cut where its
    /// thread entered the kernel, on whichever virtual CPU is free. So
    /// that what follows decodes after anything, the next TIP.PGE comes
    /// with a MODE.Exec (a decoder may have synced at a PSB+ that had
    /// none), the next IP packet carries its IP whole, and the
    /// compressed-return stacks (ours and the one we keep of libipt's)
    /// start empty: a return to a caller from before the cut is a TIP,
    /// which every decoder reads whatever stack it holds.
    pub fn hand_over(&mut self) {
        self.flush_tnt();
        self.commit();
        self.mode_exec_sent = false;
        self.psb_fresh = true;
        self.retstack.clear();
        self.decoder_retstack.clear();
    }

    /// Traces only inside `filter`'s ranges from now on; FilterEn changes
    /// at the next branch.
    pub fn set_filter(&mut self, filter: IpFilter) {
        self.filter = filter;
    }

    /// The thread is about to run user code at `ip`: if it was out of
    /// traced code, tracing resumes with TIP.PGE. `resync` adds a TSC first,
    /// as after a context switch (TraceEn 0→1).
    pub fn enter_user(&mut self, ip: u64, now: u64, resync: bool) {
        if self.stopped || self.paused {
            return;
        }
        if self.packet_en || self.filtered_out && ip == self.expected_ip {
            return;
        }
        self.filtered_out = false;
        if resync {
            self.tsc(now);
        }
        self.mtc(now);
        if !self.filter.allows(ip) {
            self.filtered_out = true;
            self.expected_ip = ip;
            self.commit();
            return;
        }
        self.cyc_now(now);
        if !self.mode_exec_sent {
            packets::mode_exec_64(&mut self.out);
            self.mode_exec_sent = true;
        }
        self.ip_packet(IpPacket::TipPge, Some(ip));
        self.packet_en = true;
        self.commit();
    }

    /// The instruction at `ip` retired at `now`; the next one is `next_ip`.
    pub fn retire(&mut self, ip: u64, insn: &Insn, next_ip: u64, now: u64) {
        if self.stopped || self.paused {
            self.insn_count += 1;
            return;
        }
        if !self.packet_en {
            self.retire_filtered_out(ip, insn, next_ip, now);
            return;
        }
        self.insn_count += 1;
        self.overflow_starts();
        self.mtc(now);
        let fallthrough = insn.next_ip(ip);
        let left = self.leaves_filter(ip, insn, next_ip, now);
        match insn.class {
            _ if left => {}
            InsnClass::Other | InsnClass::DirectJump { .. } => {}
            InsnClass::PtWrite { payload, bytes } => {
                if self.cfg.ptw {
                    self.ptwrite(now, ip, payload, bytes);
                }
            }
            InsnClass::CondBranch { target } => {
                self.tnt(now, next_ip == target && target != fallthrough);
            }
            InsnClass::DirectCall { target } => {
                if target != fallthrough {
                    self.push_return(fallthrough);
                }
            }
            InsnClass::IndirectCall => {
                self.push_return(fallthrough);
                self.tip(now, next_ip);
            }
            InsnClass::IndirectJump | InsnClass::FarTransfer => self.tip(now, next_ip),
            InsnClass::Return => {
                let hw_top = self.retstack.top();
                self.retstack.pop();
                if self.cfg.ret_compression
                    && hw_top == Some(next_ip)
                    && self.decoder_retstack.top() == Some(next_ip)
                {
                    self.decoder_retstack.pop();
                    self.tnt(now, true);
                } else {
                    self.tip(now, next_ip);
                }
            }
            InsnClass::KernelEntry => {
                self.cyc_now(now);
                self.flush_tnt();
                self.ip_packet(IpPacket::TipPgd, None);
                self.packet_en = false;
            }
        }
        if self.since_psb + self.out.len() as u64 >= self.cfg.psb_period && self.dropping.is_none()
        {
            let ip = self.packet_en.then_some(next_ip);
            self.psb_plus(ip, now);
        }
        self.overflow_resolves(next_ip);
        self.commit();
    }

    /// `n` instructions that change no flow retired, the last at `now`;
    /// the next one is at `next_ip`. The same packets as `n` calls of
    /// [`ThreadPt::retire`] with such instructions: they write none of
    /// their own, so only the MTCs of the crystal ticks they span and a
    /// PSB+ they make due can follow. A backend that sees code a block at
    /// a time (QEMU's translation blocks) retires a block's straight-line
    /// body with one call. Emulated overflows (`overflows`) are not
    /// placed inside such a run.
    pub fn retire_straight(&mut self, n: u64, next_ip: u64, now: u64) {
        if n == 0 {
            return;
        }
        self.insn_count += n;
        if self.stopped || self.paused {
            return;
        }
        if !self.packet_en {
            self.expected_ip = next_ip;
            return;
        }
        if self.cfg.mtc_period.is_none() && self.since_psb < self.cfg.psb_period {
            // Nothing to write: the common case.
            return;
        }
        if let Some(period) = self.cfg.mtc_period {
            // One MTC per change of the watched CTC bits, each carrying
            // its own value, as they would have been written one by one.
            let first = now + 1 - n;
            let ratio = self.cfg.tsc_per_ctc.max(1);
            let mut watched = (first / ratio) >> period;
            let last = (now / ratio) >> period;
            if watched == self.mtc_seen {
                watched += 1;
            }
            while watched <= last {
                packets::mtc(&mut self.out, watched as u8);
                self.mtc_seen = watched;
                watched += 1;
            }
        }
        if self.since_psb + self.out.len() as u64 >= self.cfg.psb_period && self.dropping.is_none()
        {
            self.psb_plus(Some(next_ip), now);
        }
        self.commit();
    }

    /// An asynchronous exit to the kernel before the instruction at `ip`
    /// (signal delivery, preemption, the trigger's breakpoint, the end of
    /// the capture): FUP with the interrupted IP, then TIP.PGD.
    pub fn interrupt(&mut self, ip: u64, now: u64) {
        if !self.packet_en {
            // Leaving user code: FilterEn is evaluated again on return.
            self.filtered_out = false;
            return;
        }
        self.mtc(now);
        self.cyc_now(now);
        self.flush_tnt();
        self.ip_packet(IpPacket::Fup, Some(ip));
        self.ip_packet(IpPacket::TipPgd, None);
        self.packet_en = false;
        self.commit();
    }

    /// If the branch at `ip` leaves the filter's ranges or lands in a
    /// TraceStop range, writes TIP.PGD in place of its packet (then
    /// TraceStop) and returns true. The call that leaves is not pushed on
    /// the decoder's stack: libipt skips the call a disable binds to. A
    /// return that leaves is never compressed, as libipt cannot bind the
    /// suppressed TIP.PGD of a compressed return.
    fn leaves_filter(&mut self, ip: u64, insn: &Insn, next_ip: u64, now: u64) -> bool {
        if !filter::is_taken_branch(insn, ip, next_ip) {
            return false;
        }
        let stop = self.filter.stops_at(next_ip);
        if !stop && self.filter.allows(next_ip) {
            return false;
        }
        let fallthrough = insn.next_ip(ip);
        self.cyc_now(now);
        self.flush_tnt();
        let payload = match insn.class {
            InsnClass::CondBranch { .. } => None,
            InsnClass::DirectCall { .. } | InsnClass::DirectJump { .. } if self.cfg.skl014 => {
                if matches!(insn.class, InsnClass::DirectCall { target } if target != fallthrough) {
                    self.retstack.push(fallthrough);
                }
                None
            }
            InsnClass::DirectCall { target } if target == fallthrough => Some(next_ip),
            InsnClass::DirectCall { .. } | InsnClass::IndirectCall => {
                self.retstack.push(fallthrough);
                Some(next_ip)
            }
            InsnClass::Return => {
                self.retstack.pop();
                Some(next_ip)
            }
            _ => Some(next_ip),
        };
        self.ip_packet(IpPacket::TipPgd, payload);
        self.packet_en = false;
        self.filtered_out = true;
        self.expected_ip = next_ip;
        if stop {
            self.trace_stop();
        }
        true
    }

    /// A branch landed in a TraceStop range: TraceStop, and the unit
    /// stops (SDM: RTIT_STATUS.Stopped clears TriggerEn).
    fn trace_stop(&mut self) {
        self.out.extend_from_slice(&packets::TRACE_STOP);
        self.stopped = true;
        self.packet_en = false;
        self.filtered_out = false;
    }

    /// An instruction retired while no packets are written: outside the
    /// filter, a taken branch into a range writes TIP.PGE; a trip into the
    /// kernel leaves user code, and FilterEn is evaluated on return.
    fn retire_filtered_out(&mut self, ip: u64, insn: &Insn, next_ip: u64, now: u64) {
        self.insn_count += 1;
        self.expected_ip = next_ip;
        let taken = filter::is_taken_branch(insn, ip, next_ip);
        if insn.class == InsnClass::KernelEntry {
            self.filtered_out = false;
        } else if taken && self.filter.stops_at(next_ip) {
            // Outside the filter (PacketEn 0, ContextEn 1): TraceStop alone.
            self.trace_stop();
            self.commit();
            return;
        } else if taken && self.filter.allows(next_ip) {
            self.cyc_now(now);
            if !self.mode_exec_sent {
                packets::mode_exec_64(&mut self.out);
                self.mode_exec_sent = true;
            }
            self.ip_packet(IpPacket::TipPge, Some(next_ip));
            self.packet_en = true;
            self.filtered_out = false;
        }
        if self.since_psb + self.out.len() as u64 >= self.cfg.psb_period {
            let ip = self.packet_en.then_some(next_ip);
            self.psb_plus(ip, now);
        }
        self.commit();
    }

    fn push_return(&mut self, addr: u64) {
        self.retstack.push(addr);
        self.decoder_retstack.push(addr);
    }

    fn tnt(&mut self, now: u64, taken: bool) {
        if self.tnt_count == 0 {
            self.cyc_now(now);
        }
        self.tnt_bits = (self.tnt_bits << 1) | taken as u64;
        self.tnt_count += 1;
        if self.tnt_count == packets::TNT8_MAX {
            self.flush_tnt();
        }
    }

    /// CYC then TSC, so decoders anchor cycle counting at the TSC (unless
    /// the CYC threshold holds the CYC back); TMA after it with MTC on.
    fn tsc(&mut self, now: u64) {
        if !self.cfg.tsc {
            return;
        }
        self.flush_tnt();
        if self.cfg.cyc && (self.cfg.cyc_thresh == 0 || self.cyc_due(now)) {
            packets::cyc(&mut self.out, now - self.last_cyc);
            self.last_cyc = now;
        }
        packets::tsc(&mut self.out, now);
        self.tma(now);
    }

    /// A PTWRITE at `ip`: its PTW packet, in order after the branches
    /// before it, then the FUP that binds it to `ip`.
    fn ptwrite(&mut self, now: u64, ip: u64, payload: u64, bytes: u8) {
        self.cyc_now(now);
        self.flush_tnt();
        packets::ptw(&mut self.out, payload, bytes, self.cfg.fup_on_ptw);
        if self.cfg.fup_on_ptw {
            self.ip_packet(IpPacket::Fup, Some(ip));
        }
    }

    fn tip(&mut self, now: u64, target: u64) {
        self.cyc_now(now);
        self.flush_tnt();
        self.ip_packet(IpPacket::Tip, Some(target));
    }

    /// Emits a CYC for the cycles since the last one, if any passed. Pending
    /// TNT bits go first: they belong to the earlier time.
    fn cyc_now(&mut self, now: u64) {
        if self.cfg.cyc && self.cyc_due(now) {
            self.flush_tnt();
            packets::cyc(&mut self.out, now - self.last_cyc);
            self.last_cyc = now;
        }
    }

    fn flush_tnt(&mut self) {
        if self.tnt_count > 0 {
            packets::tnt(&mut self.out, self.tnt_bits, self.tnt_count);
            self.tnt_bits = 0;
            self.tnt_count = 0;
        }
    }

    fn ip_packet(&mut self, kind: IpPacket, ip: Option<u64>) {
        match ip {
            Some(ip) => {
                let comp = match std::mem::take(&mut self.psb_fresh) {
                    true => IpCompression::whole(ip),
                    false => IpCompression::choose(ip, self.last_ip),
                };
                packets::ip_packet(&mut self.out, kind, ip, comp);
                self.last_ip = ip;
            }
            None => packets::ip_packet(&mut self.out, kind, 0, IpCompression::Suppressed),
        }
    }

    /// PSB+ at `now`; `ip` is the next instruction when tracing is on.
    fn psb_plus(&mut self, ip: Option<u64>, now: u64) {
        self.flush_tnt();
        if self.dropping.is_none() {
            self.psbs
                .push_back((self.ring.head() + self.out.len() as u64, now));
            self.prune_psbs();
        }
        self.out.extend_from_slice(&packets::PSB);
        self.last_ip = 0;
        self.psb_fresh = true;
        self.retstack.clear();
        self.tsc(now);
        packets::cbr(&mut self.out, self.cfg.cbr);
        self.mode_exec_sent = ip.is_some();
        if let Some(ip) = ip {
            packets::mode_exec_64(&mut self.out);
            self.ip_packet(IpPacket::Fup, Some(ip));
        }
        self.out.extend_from_slice(&packets::PSBEND);
        self.psb_count += 1;
        self.since_psb = 0;
    }

    fn commit(&mut self) {
        // Most instructions write nothing: the QEMU backend retires tens
        // of millions a second, and an empty write still costs a call.
        if self.out.is_empty() {
            return;
        }
        if self.dropping.is_some() {
            // The internal buffer overflowed: these packets are lost.
            self.out.clear();
            return;
        }
        self.since_psb += self.out.len() as u64;
        self.ring.write(&self.out);
        self.out.clear();
    }

    /// Ends the trace: pending TNT bits are written out.
    pub fn finish(&mut self) {
        self.flush_tnt();
        self.commit();
    }
}

/// Timing packets beyond CYC (TMA, MTC) and overflows.
impl ThreadPt {
    /// Whether a CYC may go out at `now`: cycles have passed, at least as
    /// many as the threshold asks.
    fn cyc_due(&self, now: u64) -> bool {
        let threshold = match self.cfg.cyc_thresh {
            0 => 1,
            n => 1u64 << (n - 1),
        };
        now > self.last_cyc && now - self.last_cyc >= threshold
    }

    /// The crystal clock at `now`, and the TSC ticks since its last tick.
    fn ctc(&self, now: u64) -> (u64, u64) {
        let ratio = self.cfg.tsc_per_ctc.max(1);
        (now / ratio, now % ratio)
    }

    /// TMA after a TSC at `now`, with MTC on: `CTC[15:0]` and FastCounter.
    fn tma(&mut self, now: u64) {
        let Some(period) = self.cfg.mtc_period else {
            return;
        };
        let (ctc, fc) = self.ctc(now);
        packets::tma(&mut self.out, ctc as u16, fc as u16);
        self.mtc_seen = ctc >> period;
    }

    /// An MTC if the watched CTC bits changed by `now`. Pending TNT bits
    /// stay pending, as in hardware: MTC is not a CYC-eligible packet.
    fn mtc(&mut self, now: u64) {
        let Some(period) = self.cfg.mtc_period else {
            return;
        };
        let watched = self.ctc(now).0 >> period;
        if watched != self.mtc_seen {
            self.mtc_seen = watched;
            packets::mtc(&mut self.out, watched as u8);
        }
    }

    /// The instruction just retired is one where the internal buffer
    /// overflows: what is pending goes out, then packets are lost.
    fn overflow_starts(&mut self) {
        let Some(&at) = self.cfg.overflows.get(self.next_overflow) else {
            return;
        };
        if self.insn_count < at || self.dropping.is_some() {
            return;
        }
        self.next_overflow += 1;
        self.flush_tnt();
        self.commit();
        self.dropping = Some(self.insn_count + OVERFLOW_INSNS);
        self.overflow_count += 1;
    }

    /// The overflow resolves after this instruction: its packets are lost
    /// too, then OVF, then FUP at the next instruction if tracing is on
    /// (else the TIP.PGE of [`ThreadPt::enter_user`] follows). Decoders
    /// reset at OVF, so the last IP starts from zero and the
    /// compressed-return stack empty, as after a PSB.
    fn overflow_resolves(&mut self, next_ip: u64) {
        if self.dropping != Some(self.insn_count) {
            return;
        }
        self.dropping = None;
        self.out.clear();
        self.tnt_bits = 0;
        self.tnt_count = 0;
        self.out.extend_from_slice(&packets::OVF);
        self.last_ip = 0;
        self.retstack.clear();
        self.decoder_retstack.clear();
        self.mode_exec_sent = false;
        if self.packet_en {
            self.ip_packet(IpPacket::Fup, Some(next_ip));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The settings the unit's tests start from: user-mode tracing with
    /// return compression and TSC, a 4 KiB PSB period, no CYC or MTC, a
    /// 1 MiB ring and no overflow.
    pub(crate) fn cfg() -> PtSettings {
        PtSettings {
            psb_period: 4096,
            ret_compression: true,
            cyc: false,
            cyc_thresh: 0,
            tsc: true,
            mtc_period: None,
            tsc_per_ctc: 40,
            cbr: 10,
            ptw: true,
            fup_on_ptw: true,
            ring_size: 1 << 20,
            overflows: Arc::from([]),
            skl014: false,
            sticky_stop: false,
        }
    }

    fn nop() -> Insn {
        insn(InsnClass::Other, 1)
    }

    /// The bytes `write` writes with the encoder.
    pub(crate) fn encoded(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        write(&mut v);
        v
    }

    /// MODE.Exec (64-bit) and TIP.PGE `ip`, whole: how user code starts
    /// after a PSB+.
    pub(crate) fn exec_pge(ip: u64) -> Vec<u8> {
        encoded(|v| {
            packets::mode_exec_64(v);
            packets::ip_packet(v, IpPacket::TipPge, ip, IpCompression::Sext48);
        })
    }

    /// FUP `ip` (2-byte update) and TIP.PGD without an IP: tracing off
    /// where the thread left user code.
    fn fup_pgd(ip: u64) -> Vec<u8> {
        encoded(|v| {
            packets::ip_packet(v, IpPacket::Fup, ip, IpCompression::Update16);
            packets::ip_packet(v, IpPacket::TipPgd, 0, IpCompression::Suppressed);
        })
    }

    pub(crate) fn insn(class: InsnClass, len: u8) -> Insn {
        Insn {
            len,
            class,
            repeats: false,
        }
    }

    #[test]
    fn a_ptwrite_follows_the_branches_before_it_and_binds_its_ip() {
        let mut t = ThreadPt::new(cfg(), 100);
        let start = t.ring().snapshot().len();
        t.enter_user(0x401000, 100, false);
        t.retire(
            0x401000,
            &insn(InsnClass::CondBranch { target: 0x401010 }, 2),
            0x401010,
            101,
        );
        let ptw = InsnClass::PtWrite {
            payload: 0x2a,
            bytes: 4,
        };
        t.retire(0x401010, &insn(ptw, 4), 0x401014, 102);
        // Off: the instruction retires with no packet.
        let mut off = cfg();
        off.ptw = false;
        let mut quiet = ThreadPt::new(off, 100);
        let quiet_start = quiet.ring().snapshot().len();
        quiet.enter_user(0x401010, 100, false);
        quiet.retire(0x401010, &insn(ptw, 4), 0x401014, 101);
        quiet.finish();
        t.finish();
        let bytes = &t.ring().snapshot()[start..];
        // MODE.Exec, PGE, TNT(1) flushed first, PTW (4 bytes, IP bit),
        // FUP 0x401010 (2-byte update).
        let mut want = exec_pge(0x401000);
        packets::tnt(&mut want, 1, 1);
        packets::ptw(&mut want, 0x2a, 4, true);
        packets::ip_packet(&mut want, IpPacket::Fup, 0x401010, IpCompression::Update16);
        assert_eq!(bytes, &want[..]);
        assert_eq!(
            &quiet.ring().snapshot()[quiet_start..],
            &exec_pge(0x401010)[..]
        );
    }

    #[test]
    fn a_range_pauses_with_a_disable_and_resumes_with_a_timed_enable() {
        let mut t = ThreadPt::new(cfg(), 100);
        t.start_paused();
        let start = t.ring().snapshot().len();
        // Paused: user code runs, nothing is written.
        t.enter_user(0x401000, 100, true);
        t.retire(0x401000, &nop(), 0x401001, 101);
        assert_eq!(t.ring().snapshot().len(), start);
        // START's breakpoint resumes it; the thread enters user code there.
        t.resume();
        t.enter_user(0x401001, 200, true);
        assert!(t.tracing());
        t.retire(0x401001, &nop(), 0x401002, 201);
        // STOP's breakpoint pauses it: FUP and TIP.PGD, then nothing.
        t.pause(0x401002, 202);
        assert!(t.paused() && !t.tracing());
        t.enter_user(0x401002, 203, true);
        t.retire(0x401002, &nop(), 0x401003, 204);
        t.finish();
        let b = written(&t, start);
        // TSC 200, MODE.Exec, TIP.PGE 0x401001; FUP 0x401002, TIP.PGD.
        assert_eq!(b[0], 0x19);
        assert_eq!(b[8..10], encoded(packets::mode_exec_64)[..]);
        assert_eq!(b[10] & 0x1f, 0x11);
        assert_eq!(b[b.len() - 4..], fup_pgd(0x401002)[..]);
    }

    #[test]
    fn call_and_compressed_return() {
        let mut t = ThreadPt::new(cfg(), 100);
        let start = t.ring().snapshot().len();
        t.enter_user(0x401000, 100, false);
        // call 0x402000; ret back to 0x401005; ret to an unknown caller
        t.retire(
            0x401000,
            &insn(InsnClass::DirectCall { target: 0x402000 }, 5),
            0x402000,
            101,
        );
        t.retire(0x402000, &insn(InsnClass::Return, 1), 0x401005, 102);
        t.retire(0x401005, &insn(InsnClass::Return, 1), 0x403000, 103);
        t.finish();
        let bytes = &t.ring().snapshot()[start..];
        // MODE.Exec, PGE (whole, the first IP after the PSB), TNT(1)
        // flushed before the TIP, TIP 0x403000 (2-byte update).
        let mut want = exec_pge(0x401000);
        packets::tnt(&mut want, 1, 1);
        packets::ip_packet(&mut want, IpPacket::Tip, 0x403000, IpCompression::Update16);
        assert_eq!(bytes, &want[..]);
    }

    #[test]
    fn psb_every_period_and_kernel_trips() {
        let mut t = ThreadPt::new(
            PtSettings {
                psb_period: 64,
                ..cfg()
            },
            0,
        );
        t.enter_user(0x1000, 0, false);
        for i in 0..200u64 {
            // an indirect jump to itself: one TIP each
            t.retire(0x1000, &insn(InsnClass::IndirectJump, 2), 0x1000, i);
        }
        assert!(t.psb_count > 5);
        t.retire(0x1000, &insn(InsnClass::KernelEntry, 2), 0x1002, 300);
        assert!(!t.tracing());
        t.enter_user(0x1002, 400, true);
        t.interrupt(0x1002, 401);
        t.finish();
        let b = t.ring().snapshot();
        // ... TIP.PGD, then TSC + TIP.PGE, then FUP (2-byte update) + PGD.
        assert_eq!(b[b.len() - 4..], fup_pgd(0x1002)[..]);
        // TSC, MODE.Exec (a PSB came between) and the TIP.PGE's IP whole
        // (the first after the PSB): 8 + 2 + 7 + 4 bytes from the end.
        assert_eq!(b[b.len() - 21], 0x19);
        assert_eq!(b[b.len() - 11], 0x71);
    }
    /// The packets after the unit's start (its PSB+).
    fn written(t: &ThreadPt, start: usize) -> Vec<u8> {
        t.ring().snapshot()[start..].to_vec()
    }

    #[test]
    fn tma_follows_tsc_and_mtc_marks_each_watched_ctc_change() {
        let mtc = PtSettings {
            mtc_period: Some(0),
            ..cfg()
        };
        // TSC 1000 = CTC 25 exactly; 1013 is 13 ticks into CTC 25.
        let t = ThreadPt::new(mtc.clone(), 1013);
        let b = t.ring().snapshot();
        // PSB, TSC 1013, TMA (CTC 25, FC 13), CBR, PSBEND.
        assert_eq!(b[16..24], encoded(|v| packets::tsc(v, 1013))[..]);
        assert_eq!(b[24..31], encoded(|v| packets::tma(v, 25, 13))[..]);
        let mut t = ThreadPt::new(mtc, 1013);
        let start = t.ring().snapshot().len();
        t.enter_user(0x1000, 1013, false);
        // 1013..1039 stays in CTC 25; 1040 is CTC 26: one MTC, payload 26.
        for now in 1014..=1040 {
            t.retire(0x1000, &nop(), 0x1001, now);
        }
        let b = written(&t, start);
        assert_eq!(b[b.len() - 2..], encoded(|v| packets::mtc(v, 26))[..]);
        assert_eq!(b.iter().filter(|&&x| x == 0x59).count(), 1);
        // MTC period 3: the payload is CTC[10:3], sent as it changes.
        let mut t = ThreadPt::new(
            PtSettings {
                mtc_period: Some(3),
                ..cfg()
            },
            0,
        );
        let start = t.ring().snapshot().len();
        t.enter_user(0x1000, 0, false);
        for now in 1..=40 * 8 * 3 {
            t.retire(0x1000, &nop(), 0x1001, now);
        }
        let b = written(&t, start);
        let mtcs: Vec<u8> = b
            .windows(2)
            .filter(|w| w[0] == 0x59)
            .map(|w| w[1])
            .collect();
        assert_eq!(mtcs, [1, 2, 3]);
    }

    #[test]
    fn without_tsc_there_is_no_timing_packet() {
        let mut t = ThreadPt::new(
            PtSettings {
                tsc: false,
                ..cfg()
            },
            500,
        );
        let b = t.ring().snapshot();
        // PSB, CBR, PSBEND only.
        assert_eq!(b.len(), 16 + 4 + 2);
        t.enter_user(0x1000, 600, true);
        let after = t.ring().snapshot().len();
        assert!(!t.ring().snapshot()[22..after].contains(&0x19));
    }

    #[test]
    fn cyc_waits_for_its_threshold() {
        // cyc_thresh=3: at most one CYC per 4 cycles.
        let mut t = ThreadPt::new(
            PtSettings {
                cyc: true,
                cyc_thresh: 3,
                ..cfg()
            },
            0,
        );
        let start = t.ring().snapshot().len();
        t.enter_user(0x1000, 0, false);
        // An indirect jump every cycle: each is a TIP, CYC-eligible.
        for now in 1..=8 {
            t.retire(0x1000, &insn(InsnClass::IndirectJump, 2), 0x1000, now);
        }
        let b = written(&t, start);
        // CYC(4) before the 4th TIP, CYC(4) before the 8th.
        let cycs: Vec<u8> = b.iter().copied().filter(|x| x & 3 == 3).collect();
        assert_eq!(cycs, [0x23, 0x23], "{b:x?}");
    }

    #[test]
    fn overflow_loses_packets_then_ovf_and_fup() {
        let mut t = ThreadPt::new(
            PtSettings {
                overflows: Arc::from([3]),
                ..cfg()
            },
            0,
        );
        let start = t.ring().snapshot().len();
        t.enter_user(0x40_1000, 0, false);
        for i in 1..=OVERFLOW_INSNS + 5 {
            t.retire(0x40_1000, &insn(InsnClass::IndirectJump, 2), 0x40_1000, i);
        }
        assert_eq!(t.overflow_count, 1);
        let b = written(&t, start);
        // MODE.Exec, PGE, TIP, TIP (the 1st and 2nd jumps); then OVF and
        // FUP 0x401000 against a last IP of zero (decoders reset it at
        // OVF too), then the TIPs of the two jumps after the overflow.
        let tip = |v: &mut Vec<u8>| {
            packets::ip_packet(v, IpPacket::Tip, 0x40_1000, IpCompression::Update16);
        };
        let mut want = exec_pge(0x40_1000);
        tip(&mut want);
        tip(&mut want);
        want.extend(packets::OVF);
        packets::ip_packet(&mut want, IpPacket::Fup, 0x40_1000, IpCompression::Update32);
        tip(&mut want);
        tip(&mut want);
        assert_eq!(b, want);
        // An overflow that resolves in the kernel: OVF alone, and TIP.PGE
        // (with MODE.Exec) re-enables.
        let mut t = ThreadPt::new(
            PtSettings {
                overflows: Arc::from([1]),
                ..cfg()
            },
            0,
        );
        t.enter_user(0x1000, 0, false);
        for i in 1..OVERFLOW_INSNS + 1 {
            t.retire(0x1000, &nop(), 0x1001, i);
        }
        let start = t.ring().snapshot().len();
        t.retire(0x1000, &insn(InsnClass::KernelEntry, 2), 0x1002, 100);
        t.enter_user(0x1002, 101, false);
        let mut want = packets::OVF.to_vec();
        packets::mode_exec_64(&mut want);
        packets::ip_packet(&mut want, IpPacket::TipPge, 0x1002, IpCompression::Update16);
        assert_eq!(written(&t, start), want);
    }
}
