//! This module is the emulated PT unit's IP filter (Intel SDM Vol. 3C,
//! "Filtering by IP" and "Filter Enable"): the runtime address ranges the
//! unit traces, and the FilterEn rules the unit in `hardware` follows.
//!
//! - With no range configured FilterEn is always 1.
//! - FilterEn is evaluated where a taken branch, far transfer or return
//!   from the kernel lands, as the hardware detects range entry and exit
//!   ("when a taken branch or event lands in" a range). Execution that
//!   falls through a range's end without a branch changes nothing until the
//!   next branch; decoders (libipt binds TIP.PGD only to branches) expect
//!   exactly that.
//! - A branch out of a range writes TIP.PGD in place of its own packet: with
//!   the target IP, except for a taken conditional branch (its TNT bit is
//!   not written and the IP is suppressed).
//! - A branch into a range writes TIP.PGE with the target IP, preceded by
//!   MODE.Exec when none was sent since the last PSB.
//! - TraceStop ranges ("TraceStop", ADDRn_CFG = 2) are checked where
//!   FilterEn is: a taken branch that lands in one stops the unit
//!   (`hardware` writes the packets).

use crate::filter::{runtime_ranges, FilterAction, FilterRange};
use crate::insn::{Insn, InsnClass};
use crate::procfs::Mapping;

/// The address ranges a PT unit traces (none configured traces
/// everything), and those where it stops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpFilter {
    configured: bool,
    /// [start, end) runtime ranges; empty while the filtered file is not
    /// mapped, when nothing is traced.
    ranges: Vec<(u64, u64)>,
    /// [start, end) runtime TraceStop ranges.
    stops: Vec<(u64, u64)>,
}

impl IpFilter {
    /// A filter of `ranges`, configured even when none is mapped yet.
    pub fn ranges(ranges: Vec<(u64, u64)>) -> IpFilter {
        IpFilter {
            configured: true,
            ranges,
            stops: Vec::new(),
        }
    }

    /// `ranges` (resolved `--filter` ranges of both kinds) where `maps`
    /// place them. Without a `filter` range FilterEn is always 1.
    pub fn placed(ranges: &[FilterRange], maps: &[Mapping]) -> IpFilter {
        let of = |action| -> Vec<FilterRange> {
            ranges
                .iter()
                .filter(|r| r.action == action)
                .cloned()
                .collect()
        };
        let filters = of(FilterAction::Filter);
        IpFilter {
            configured: !filters.is_empty(),
            ranges: runtime_ranges(&filters, maps),
            stops: runtime_ranges(&of(FilterAction::Stop), maps),
        }
    }

    /// Whether a branch landing at `ip` stops the unit.
    pub fn stops_at(&self, ip: u64) -> bool {
        self.stops.iter().any(|&(s, e)| ip >= s && ip < e)
    }

    pub fn is_configured(&self) -> bool {
        self.configured
    }

    /// FilterEn for `ip`.
    pub fn allows(&self, ip: u64) -> bool {
        !self.configured || self.ranges.iter().any(|&(s, e)| ip >= s && ip < e)
    }
}

/// Whether the instruction at `ip`, retired with `next_ip` next, transferred
/// control: the only instructions at which FilterEn changes.
pub fn is_taken_branch(insn: &Insn, ip: u64, next_ip: u64) -> bool {
    match insn.class {
        InsnClass::Other | InsnClass::KernelEntry | InsnClass::PtWrite { .. } => false,
        InsnClass::CondBranch { target } => next_ip == target && target != insn.next_ip(ip),
        InsnClass::DirectJump { .. }
        | InsnClass::DirectCall { .. }
        | InsnClass::IndirectJump
        | InsnClass::IndirectCall
        | InsnClass::Return
        | InsnClass::FarTransfer => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::hardware::tests::{encoded, exec_pge};
    use crate::emulated::packets::{self, IpCompression, IpPacket};

    /// The IP packet of `kind` for `ip` in the form `comp`.
    fn ip_packet(kind: IpPacket, ip: u64, comp: IpCompression) -> Vec<u8> {
        encoded(|v| packets::ip_packet(v, kind, ip, comp))
    }

    #[test]
    fn an_unconfigured_filter_traces_everything() {
        let none = IpFilter::default();
        assert!(none.allows(0) && none.allows(u64::MAX));
        let unmapped = IpFilter::ranges(Vec::new());
        assert!(!unmapped.allows(0x1000));
        let f = IpFilter::ranges(vec![(0x1000, 0x1100)]);
        assert!(f.allows(0x1000) && f.allows(0x10ff));
        assert!(!f.allows(0x1100) && !f.allows(0xfff));
    }

    #[test]
    fn only_taken_branches_move_filter_en() {
        let i = |class| Insn {
            len: 2,
            class,
            repeats: false,
        };
        let jcc = i(InsnClass::CondBranch { target: 0x50 });
        assert!(is_taken_branch(&jcc, 0x10, 0x50));
        assert!(!is_taken_branch(&jcc, 0x10, 0x12));
        assert!(!is_taken_branch(&i(InsnClass::Other), 0x10, 0x12));
        assert!(is_taken_branch(&i(InsnClass::Return), 0x10, 0x12));
    }

    /// The packets of a call through the PLT out of the traced range and
    /// its return: TIP.PGD with the target at the PLT's indirect jump,
    /// nothing while outside, TIP.PGE with the return address on the way
    /// back; a conditional branch out leaves a suppressed TIP.PGD.
    #[test]
    fn leaving_and_reentering_the_range() {
        use crate::emulated::hardware::tests::{cfg, insn as i};
        use crate::emulated::hardware::{PtSettings, ThreadPt};
        let settings = PtSettings {
            psb_period: 1 << 20,
            ..cfg()
        };
        let mut t = ThreadPt::new(settings, 0);
        t.set_filter(IpFilter::ranges(vec![(0x40_1000, 0x40_2000)]));
        let start = t.ring().snapshot().len();
        t.enter_user(0x40_1000, 0, false);
        // call plt; plt: jmp *got -> libc; libc: call/ret inside; ret back.
        t.retire(
            0x40_1000,
            &i(InsnClass::DirectCall { target: 0x40_1800 }, 5),
            0x40_1800,
            1,
        );
        t.retire(
            0x40_1800,
            &i(InsnClass::IndirectJump, 6),
            0x7f00_0000_1000,
            2,
        );
        assert!(!t.tracing());
        t.retire(
            0x7f00_0000_1000,
            &i(
                InsnClass::DirectCall {
                    target: 0x7f00_0000_2000,
                },
                5,
            ),
            0x7f00_0000_2000,
            3,
        );
        t.retire(
            0x7f00_0000_2000,
            &i(InsnClass::Return, 1),
            0x7f00_0000_1005,
            4,
        );
        t.retire(
            0x7f00_0000_1005,
            &i(InsnClass::Other, 1),
            0x7f00_0000_1006,
            5,
        );
        // Going on outside changes nothing.
        t.enter_user(0x7f00_0000_1006, 5, false);
        assert!(!t.tracing());
        t.retire(0x7f00_0000_1006, &i(InsnClass::Return, 1), 0x40_1005, 6);
        assert!(t.tracing());
        t.retire(
            0x40_1005,
            &i(InsnClass::CondBranch { target: 0x50_0000 }, 2),
            0x50_0000,
            7,
        );
        assert!(!t.tracing());
        // A signal handler inside the range, entered through the kernel
        // from outside: FilterEn is evaluated where user code resumes.
        t.enter_user(0x40_1100, 9, false);
        assert!(t.tracing());
        t.finish();
        let bytes = &t.ring().snapshot()[start..];
        let want = [
            // MODE.Exec, TIP.PGE 0x401000 (whole, after the PSB)
            exec_pge(0x40_1000),
            ip_packet(IpPacket::TipPgd, 0x7f00_0000_1000, IpCompression::Sext48),
            ip_packet(IpPacket::TipPge, 0x40_1005, IpCompression::Sext48),
            ip_packet(IpPacket::TipPgd, 0, IpCompression::Suppressed),
            ip_packet(IpPacket::TipPge, 0x40_1100, IpCompression::Update16),
        ]
        .concat();
        assert_eq!(bytes, &want[..]);
    }

    /// With erratum SKL014 a direct call or jump out of the range writes
    /// its TIP.PGD without the IP; an indirect one still names it.
    #[test]
    fn skl014_suppresses_the_ip_of_a_direct_branch_out() {
        use crate::emulated::hardware::{tests::cfg, PtSettings, ThreadPt};
        let i = |class, len| Insn {
            len,
            class,
            repeats: false,
        };
        let exits = |skl014: bool| {
            let mut t = ThreadPt::new(PtSettings { skl014, ..cfg() }, 0);
            t.set_filter(IpFilter::ranges(vec![(0x40_1000, 0x40_2000)]));
            let start = t.ring().snapshot().len();
            t.enter_user(0x40_1000, 0, false);
            let call = InsnClass::DirectCall { target: 0x50_0000 };
            t.retire(0x40_1000, &i(call, 5), 0x50_0000, 1);
            t.retire(0x50_0000, &i(InsnClass::Return, 1), 0x40_1005, 2);
            let jump = InsnClass::DirectJump { target: 0x50_0000 };
            t.retire(0x40_1005, &i(jump, 5), 0x50_0000, 3);
            t.enter_user(0x40_1100, 4, false);
            t.retire(0x40_1100, &i(InsnClass::IndirectJump, 2), 0x50_0000, 5);
            t.ring().snapshot()[start..].to_vec()
        };
        let pgd_50 = ip_packet(IpPacket::TipPgd, 0x50_0000, IpCompression::Update32);
        let suppressed = ip_packet(IpPacket::TipPgd, 0, IpCompression::Suppressed);
        let want = [
            exec_pge(0x40_1000),
            suppressed.clone(), // the call's TIP.PGD
            ip_packet(IpPacket::TipPge, 0x40_1005, IpCompression::Update16),
            suppressed, // the jump's
            ip_packet(IpPacket::TipPge, 0x40_1100, IpCompression::Update16),
            pgd_50.clone(), // the indirect jump's, with its IP
        ]
        .concat();
        assert_eq!(exits(true), want);
        let plain = exits(false);
        assert_eq!(
            plain.windows(5).filter(|w| *w == &pgd_50[..]).count(),
            3,
            "{plain:x?}"
        );
    }

    /// A direct call that lands in a TraceStop range writes TIP.PGD with
    /// its target, then TraceStop, and nothing follows, not even PSBs,
    /// until the thread is scheduled out and back in (not after a mere
    /// trip to the kernel); a CPU-wide unit stays stopped. Outside the
    /// filter's ranges (packets off) the stop is a bare TraceStop.
    #[test]
    fn a_branch_into_a_tracestop_range_stops_the_unit() {
        use crate::emulated::hardware::{tests::cfg, PtSettings, ThreadPt};
        let i = |class, len| Insn {
            len,
            class,
            repeats: false,
        };
        let stop = |sticky_stop: bool| {
            let settings = PtSettings {
                psb_period: 64,
                sticky_stop,
                ..cfg()
            };
            let mut t = ThreadPt::new(settings, 0);
            t.set_filter(IpFilter {
                configured: false,
                ranges: Vec::new(),
                stops: vec![(0x50_0000, 0x50_0100)],
            });
            let start = t.ring().snapshot().len();
            t.enter_user(0x40_1000, 0, false);
            let call = InsnClass::DirectCall { target: 0x50_0000 };
            t.retire(0x40_1000, &i(call, 5), 0x50_0000, 1);
            assert!(t.stopped() && !t.tracing());
            // Far past a PSB period: nothing.
            for n in 0..200 {
                t.retire(0x50_0000, &i(InsnClass::IndirectJump, 2), 0x40_1000, 2 + n);
            }
            t.interrupt(0x40_1000, 300);
            t.enter_user(0x40_1000, 301, true);
            assert!(t.stopped());
            t.scheduled_out();
            t.enter_user(0x40_1000, 400, true);
            t.finish();
            (t.ring().snapshot()[start..].to_vec(), t.stopped())
        };
        let want = [
            exec_pge(0x40_1000),
            ip_packet(IpPacket::TipPgd, 0x50_0000, IpCompression::Update32),
            packets::TRACE_STOP.to_vec(),
        ]
        .concat();
        let (sticky, stopped) = stop(true);
        assert_eq!(sticky, want);
        assert!(stopped);
        let (restarted, stopped) = stop(false);
        assert!(!stopped);
        assert_eq!(restarted[..want.len()], want[..]);
        // Restarted: TSC, then TIP.PGE 0x401000.
        assert_eq!(restarted[want.len()], 0x19, "{restarted:x?}");
        assert_eq!(
            restarted[restarted.len() - 5..],
            ip_packet(IpPacket::TipPge, 0x40_1000, IpCompression::Update32)[..]
        );

        // Packets off outside the filter: the stop is TraceStop alone.
        let mut t = ThreadPt::new(cfg(), 0);
        t.set_filter(IpFilter {
            configured: true,
            ranges: vec![(0x40_1000, 0x40_2000)],
            stops: vec![(0x50_0000, 0x50_0100)],
        });
        t.enter_user(0x60_0000, 0, false);
        let start = t.ring().snapshot().len();
        let jump = InsnClass::DirectJump { target: 0x50_0000 };
        t.retire(0x60_0000, &i(jump, 5), 0x50_0000, 1);
        t.retire(0x50_0000, &i(InsnClass::IndirectJump, 2), 0x40_1000, 2);
        t.finish();
        assert_eq!(t.ring().snapshot()[start..], packets::TRACE_STOP);
    }
}
