//! This module emulates one PT unit (a thread's, or in per-CPU mode the one
//! virtual CPU's): it is told of each retired user-space instruction and each
//! trip into the kernel, and writes the packets an Intel PT unit configured
//! as [`PtSettings`] says (the emulated event, `settings::EMULATED_CONFIG_STR`:
//! branch tracing, return compression on, CYC) would write into its ring.
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
//! - a PSB+ (PSB, CYC, TSC, CBR, and MODE.Exec plus FUP when tracing, then
//!   PSBEND) starts the trace and follows every `psb_period` bytes, at an
//!   instruction boundary; it resets the last IP to zero;
//! - a CYC with the cycles since the previous one precedes every packet that
//!   marks an instruction's time, and immediately precedes each TSC, so that
//!   perf can anchor cycle counts to it.
//!
//! One deliberate difference: a return is compressed only if libipt's
//! decoder, which does not pop its stack on uncompressed returns, would also
//! expect that target. Where the hardware and libipt disagree (after a
//! longjmp), we send a TIP, which every decoder reads correctly.

use super::filter::{self, IpFilter};
use super::insn::{Insn, InsnClass};
use super::packets::{self, IpCompression, IpPacket};
use super::ring::Ring;

/// Depth of the hardware's compressed-return stack.
const RETSTACK_DEPTH: usize = 64;

/// What the emulated PT unit is configured to do.
#[derive(Clone, Copy, Debug)]
pub struct PtSettings {
    /// Bytes between PSBs (2^(psb_period+11)).
    pub psb_period: u64,
    pub ret_compression: bool,
    pub cyc: bool,
    /// Core-to-bus ratio reported in CBR packets.
    pub cbr: u8,
    pub ring_size: usize,
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
    /// PacketEn: user code of this thread is being traced right now.
    packet_en: bool,
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
}

impl ThreadPt {
    /// Turns tracing on (TraceEn 0→1) at `now`, before the thread's first
    /// user-space instruction: a PSB+ without FUP, as the thread is not yet
    /// in traced code.
    pub fn new(cfg: PtSettings, now: u64) -> ThreadPt {
        let mut t = ThreadPt {
            cfg,
            ring: Ring::new(cfg.ring_size),
            out: Vec::with_capacity(256),
            last_ip: 0,
            tnt_bits: 0,
            tnt_count: 0,
            retstack: RetStack::default(),
            decoder_retstack: RetStack::default(),
            mode_exec_sent: false,
            packet_en: false,
            last_cyc: now,
            filter: IpFilter::default(),
            filtered_out: false,
            expected_ip: 0,
            since_psb: 0,
            psb_count: 0,
            insn_count: 0,
        };
        t.psb_plus(None, now);
        t.commit();
        t
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    pub fn tracing(&self) -> bool {
        self.packet_en
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
        if self.packet_en || self.filtered_out && ip == self.expected_ip {
            return;
        }
        self.filtered_out = false;
        if resync {
            self.tsc(now);
        }
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
        if !self.packet_en {
            self.retire_filtered_out(ip, insn, next_ip, now);
            return;
        }
        self.insn_count += 1;
        let fallthrough = insn.next_ip(ip);
        let left = self.leaves_filter(ip, insn, next_ip, now);
        match insn.class {
            _ if left => {}
            InsnClass::Other | InsnClass::DirectJump { .. } => {}
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
        if self.since_psb + self.out.len() as u64 >= self.cfg.psb_period {
            let ip = self.packet_en.then_some(next_ip);
            self.psb_plus(ip, now);
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
        self.cyc_now(now);
        self.flush_tnt();
        self.ip_packet(IpPacket::Fup, Some(ip));
        self.ip_packet(IpPacket::TipPgd, None);
        self.packet_en = false;
        self.commit();
    }

    /// If the branch at `ip` leaves the filter's ranges, writes TIP.PGD in
    /// place of its packet and returns true. The call that leaves is not
    /// pushed on the decoder's stack: libipt skips the call a disable binds
    /// to. A return that leaves is never compressed, as libipt cannot bind
    /// the suppressed TIP.PGD of a compressed return.
    fn leaves_filter(&mut self, ip: u64, insn: &Insn, next_ip: u64, now: u64) -> bool {
        if !self.filter.is_configured()
            || !filter::is_taken_branch(insn, ip, next_ip)
            || self.filter.allows(next_ip)
        {
            return false;
        }
        let fallthrough = insn.next_ip(ip);
        self.cyc_now(now);
        self.flush_tnt();
        let payload = match insn.class {
            InsnClass::CondBranch { .. } => None,
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
        true
    }

    /// An instruction retired while no packets are written: outside the
    /// filter, a taken branch into a range writes TIP.PGE; a trip into the
    /// kernel leaves user code, and FilterEn is evaluated on return.
    fn retire_filtered_out(&mut self, ip: u64, insn: &Insn, next_ip: u64, now: u64) {
        self.insn_count += 1;
        self.expected_ip = next_ip;
        if insn.class == InsnClass::KernelEntry {
            self.filtered_out = false;
        } else if filter::is_taken_branch(insn, ip, next_ip) && self.filter.allows(next_ip) {
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

    /// CYC then TSC, so decoders anchor cycle counting at the TSC.
    fn tsc(&mut self, now: u64) {
        self.flush_tnt();
        if self.cfg.cyc {
            packets::cyc(&mut self.out, now - self.last_cyc);
        }
        packets::tsc(&mut self.out, now);
        self.last_cyc = now;
    }

    fn tip(&mut self, now: u64, target: u64) {
        self.cyc_now(now);
        self.flush_tnt();
        self.ip_packet(IpPacket::Tip, Some(target));
    }

    /// Emits a CYC for the cycles since the last one, if any passed. Pending
    /// TNT bits go first: they belong to the earlier time.
    fn cyc_now(&mut self, now: u64) {
        if self.cfg.cyc && now > self.last_cyc {
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
                let comp = IpCompression::choose(ip, self.last_ip);
                packets::ip_packet(&mut self.out, kind, ip, comp);
                self.last_ip = ip;
            }
            None => packets::ip_packet(&mut self.out, kind, 0, IpCompression::Suppressed),
        }
    }

    /// PSB+ at `now`; `ip` is the next instruction when tracing is on.
    fn psb_plus(&mut self, ip: Option<u64>, now: u64) {
        self.flush_tnt();
        self.out.extend_from_slice(&packets::PSB);
        self.last_ip = 0;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PtSettings {
        PtSettings {
            psb_period: 4096,
            ret_compression: true,
            cyc: false,
            cbr: 10,
            ring_size: 1 << 20,
        }
    }

    fn insn(class: InsnClass, len: u8) -> Insn {
        Insn {
            len,
            class,
            repeats: false,
        }
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
        // MODE.Exec, PGE (4-byte update against last IP 0), TNT(1) flushed
        // before the TIP, TIP 0x403000 (2-byte update).
        assert_eq!(
            bytes,
            &[
                0x99,
                0x01,
                0x51,
                0x00,
                0x10,
                0x40,
                0,
                0b0000_0110,
                0x2d,
                0x00,
                0x30
            ]
        );
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
        // ... TIP.PGD, then TSC + TIP.PGE (2-byte update), then FUP + PGD.
        assert_eq!(&b[b.len() - 4..], &[0x3d, 0x02, 0x10, 0x01]);
        assert_eq!(b[b.len() - 15], 0x19);
    }
}
