//! Marks: what a trace says besides the control flow. The program's own
//! PTWRITE values, the core's frequency (CBR), and its power states
//! (MWAIT, PWRE, EXSTOP, PWRX) are packets that change no branch, so they
//! are read by a scan of the packets alone, with the time each packet
//! stands for ([`Time`]), independently of the engine that decodes the
//! flow. A PTWRITE or EXSTOP with its IP bit set binds the FUP after it,
//! which gives the instruction's address.
//!
//! [`scan`] reads one AUX queue into [`Mark`]s in trace order, by a quick
//! pass that reads the sizes of nearly all packets and nothing else when
//! the trace marks no more than the frequency its PSB+s restate (most
//! traces), else by [`scan_full`], which times every packet; the types
//! ([`Mark`], `Marks`) are the model's data, in `ptscope_model`.

use crate::pt::block::DecoderConfig;
use crate::pt::packet::{self, IpKind, Packet, PacketError};
use crate::pt::timing::{Time, ToNs};
use ptscope_model::{Mark, MarkKind};

/// Marks found by [`scan`], and how many could not be placed in time.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    pub marks: Vec<Mark>,
    /// Marks before the trace's first timing packet (or in a trace
    /// without any), which have no time and are left out.
    pub untimed: u64,
}

/// Reads `trace` (one AUX queue) for its marks, timed by its timing
/// packets as the flow decoder times them and converted by `to_ns`. A
/// packet that cannot be read skips to the next PSB.
///
/// Most traces mark nothing but the frequency every PSB+ restates right
/// after its TSC: those are read by a quick pass, which needs no more of
/// nearly every packet than its size. Any other trace, found so on the
/// way, is read again by the scan that times every packet ([`scan_full`]),
/// with the same result.
pub fn scan(trace: &[u8], cfg: &DecoderConfig, to_ns: &ToNs) -> Scan {
    quick(trace, cfg, to_ns).unwrap_or_else(|| scan_full(trace, cfg, to_ns))
}

/// [`scan`] of a trace whose only marks are frequencies read where the
/// time is a TSC's as it came (after a TSC, before any CYC or MTC moved
/// it: a PSB+'s CBR): then no other timing packet needs reading, nor any
/// IP. `None` at the first packet that could make another mark (a
/// PTWRITE, a power event, a frequency after the time moved) or that does
/// not read: the trace needs [`scan_full`].
fn quick(trace: &[u8], cfg: &DecoderConfig, to_ns: &ToNs) -> Option<Scan> {
    let mut out = Scan::default();
    let mut pos = packet::find_psb(trace)?;
    let errata = crate::pt::errata::of(cfg);
    // What `Time::tsc` would give: the last TSC since the last PSB, unless
    // a CYC or an MTC may have moved it since (a TMA alone does not).
    let mut tsc: Option<u64> = None;
    let mut moved = false;
    while pos < trace.len() {
        pos += one_byte_run(&trace[pos..]);
        let Some(rest) = trace.get(pos..).filter(|r| !r.is_empty()) else {
            break;
        };
        if let Some(n) = packet::common_len(rest) {
            // A CYC moves the time; an IP packet changes nothing here.
            moved |= rest[0] & 0x03 == 0x03;
            pos += n;
            continue;
        }
        let (p, n) = packet::parse_with(rest, &errata).ok()?;
        pos += n;
        match p {
            Packet::Psb => (tsc, moved) = (None, false),
            Packet::Tsc(v) => (tsc, moved) = (Some(v), false),
            Packet::Cyc(_) | Packet::Mtc(_) => moved = true,
            Packet::Cbr(ratio) => match tsc {
                Some(_) if moved => return None,
                Some(t) => out.marks.push(Mark {
                    time: to_ns.at(t),
                    ip: None,
                    kind: MarkKind::Cbr { ratio },
                }),
                // As the full scan: a frequency before any time is no loss
                // worth a word.
                None => {}
            },
            Packet::Ptw { .. }
            | Packet::Mwait { .. }
            | Packet::Pwre { .. }
            | Packet::Exstop { .. }
            | Packet::Pwrx { .. } => return None,
            _ => {}
        }
    }
    Some(out)
}

/// [`scan`], every packet read and every timing packet timed. Public for
/// the fuzz target that holds [`scan`]'s quick path to it.
#[doc(hidden)]
pub fn scan_full(trace: &[u8], cfg: &DecoderConfig, to_ns: &ToNs) -> Scan {
    let mut out = Scan::default();
    let mut time = Time::default();
    let mut last_ip = 0u64;
    // A mark waiting for its FUP.
    let mut bound: Option<Mark> = None;
    let push = |out: &mut Scan, m: Mark| out.marks.push(m);
    let Some(mut pos) = packet::find_psb(trace) else {
        return out;
    };
    // The packet-level errata, worked around as the walk does.
    let errata = crate::pt::errata::of(cfg);
    while pos < trace.len() {
        if bound.is_none() {
            // A run of one-byte packets (short TNTs, PADs): nearly every
            // packet of a trace, and none of them makes a mark, moves the
            // time or sets an IP. Only a mark waiting for its FUP would
            // need them (a TNT tells it the FUP is not coming).
            pos += one_byte_run(&trace[pos..]);
            if pos >= trace.len() {
                break;
            }
        }
        let (p, n) = match packet::parse_with(&trace[pos..], &errata) {
            Ok(x) => x,
            Err(PacketError::Truncated) => break,
            Err(PacketError::Erratum { skip, .. }) => {
                pos += skip;
                continue;
            }
            Err(PacketError::Unknown(_)) => match packet::find_psb(&trace[pos + 1..]) {
                Some(next) => {
                    pos += 1 + next;
                    bound = None;
                    continue;
                }
                None => break,
            },
        };
        pos += n;
        // A mark waiting for its FUP gets it from the next packet but for
        // timing and padding; anything else (a PSB+, a branch) means the
        // FUP is not there, and the mark keeps no IP.
        let keeps_waiting = matches!(
            p,
            Packet::Tip {
                kind: IpKind::Fup,
                ..
            } | Packet::Pad
                | Packet::Cyc(_)
                | Packet::Mtc(_)
                | Packet::Tsc(_)
                | Packet::Tma { .. }
        );
        if !keeps_waiting {
            if let Some(b) = bound.take() {
                push(&mut out, b);
            }
        }
        // The time, for a packet that makes a mark: converting it is most of
        // a scan's cost, and nearly every packet makes none.
        let makes_mark = matches!(
            p,
            Packet::Cbr(_)
                | Packet::Ptw { .. }
                | Packet::Mwait { .. }
                | Packet::Pwre { .. }
                | Packet::Exstop { .. }
                | Packet::Pwrx { .. }
        );
        let now = if makes_mark {
            time.tsc().map(|t| to_ns.at(t))
        } else {
            None
        };
        let mut mark = |out: &mut Scan, ip_follows: bool, kind: MarkKind| {
            let Some(t) = now else {
                // A frequency before any time (every PSB+ of a trace without
                // timing restates one) is no loss worth a word.
                if !matches!(kind, MarkKind::Cbr { .. }) {
                    out.untimed += 1;
                }
                return;
            };
            let m = Mark {
                time: t,
                ip: None,
                kind,
            };
            if ip_follows {
                if let Some(b) = bound.replace(m) {
                    push(out, b);
                }
            } else {
                push(out, m);
            }
        };
        match p {
            Packet::Psb => {
                time.on_psb();
                last_ip = 0;
            }
            Packet::Tsc(v) => time.on_tsc(v),
            Packet::Mtc(v) => time.on_mtc(v, cfg),
            Packet::Tma { ctc, fc } => time.on_tma(ctc, fc, cfg),
            Packet::Cyc(v) => time.on_cyc(v, cfg),
            Packet::Cbr(ratio) => {
                time.on_cbr(ratio);
                mark(&mut out, false, MarkKind::Cbr { ratio });
            }
            Packet::Ptw {
                ipb,
                bytes,
                payload,
            } => mark(&mut out, ipb != 0, MarkKind::PtWrite { payload, bytes }),
            Packet::Mwait { hints, ext } => mark(&mut out, false, MarkKind::Mwait { hints, ext }),
            Packet::Pwre { hw, cstate, sub } => {
                mark(&mut out, false, MarkKind::Pwre { hw, cstate, sub })
            }
            Packet::Exstop { ip } => mark(&mut out, ip, MarkKind::Exstop),
            Packet::Pwrx {
                deepest,
                last,
                wake,
            } => mark(
                &mut out,
                false,
                MarkKind::Pwrx {
                    deepest,
                    last,
                    wake,
                },
            ),
            Packet::Tip { kind, ipb, payload } => {
                let ip = packet::expand_ip(last_ip, ipb, payload);
                if let Some(ip) = ip {
                    last_ip = ip;
                }
                if kind == IpKind::Fup {
                    if let Some(mut b) = bound.take() {
                        b.ip = ip;
                        push(&mut out, b);
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(b) = bound {
        out.marks.push(b);
    }
    out
}

/// How many of the first bytes of `trace` are one-byte packets: PAD
/// (zero) and short TNT (bit 0 clear, any byte but the extended opcode 02).
fn one_byte_run(trace: &[u8]) -> usize {
    trace
        .iter()
        .position(|&b| b & 1 != 0 || b == 0x02)
        .unwrap_or(trace.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_formats::pt::write::{self, IpCompression, IpPacket, PSB, PSBEND};
    use ptscope_model::{Marks, Sleep};

    fn cfg() -> DecoderConfig {
        DecoderConfig::default()
    }

    /// PSB, TSC `time`, CBR 10, PSBEND.
    fn start(time: u64) -> Vec<u8> {
        let mut t = PSB.to_vec();
        write::tsc(&mut t, time);
        write::cbr(&mut t, 10);
        t.extend_from_slice(&PSBEND);
        t
    }

    /// A FUP with `ip` in 48 bits, sign-extended.
    fn fup(t: &mut Vec<u8>, ip: u64) {
        write::ip_packet(t, IpPacket::Fup, ip, IpCompression::Sext48);
    }

    #[test]
    fn a_ptwrite_takes_the_ip_of_its_fup_and_its_width() {
        let mut t = start(1000);
        // PTW, 8 bytes, IP bit; then FUP with a full 6-byte IP.
        write::ptw(&mut t, 0x1122_3344_5566_7788, 8, true);
        fup(&mut t, 0x40_1234);
        write::tsc(&mut t, 2000);
        // PTW, 4 bytes, no IP.
        write::ptw(&mut t, 0x2a, 4, false);
        let s = scan(&t, &cfg(), &ToNs::IDENTITY);
        assert_eq!(s.untimed, 0);
        let m = Marks::new(s.marks);
        let ptw: Vec<(u64, Option<u64>, u64)> =
            m.ptwrites().map(|(m, p)| (m.time, m.ip, p)).collect();
        assert_eq!(
            ptw,
            [
                (1000, Some(0x40_1234), 0x1122_3344_5566_7788),
                (2000, None, 0x2a)
            ]
        );
        assert!(matches!(
            m.all()[1].kind,
            MarkKind::PtWrite { bytes: 8, .. }
        ));
        assert!(matches!(
            m.all()[2].kind,
            MarkKind::PtWrite { bytes: 4, .. }
        ));
    }

    #[test]
    fn frequency_steps_and_sleeps() {
        let mut t = start(1000);
        write::cbr(&mut t, 10);
        write::tsc(&mut t, 1100);
        write::cbr(&mut t, 24);
        write::tsc(&mut t, 1200);
        // MWAIT C3 (hints 0x20), PWRE C3 (state 2), EXSTOP (no IP).
        write::mwait(&mut t, 0x20, 1);
        write::pwre(&mut t, false, 2, 0);
        write::exstop(&mut t, false);
        write::tsc(&mut t, 5200);
        // PWRX: deepest C6 (5), last C3 (2), woken by an interrupt.
        write::pwrx(&mut t, 5, 2, 1);
        let m = Marks::new(scan(&t, &cfg(), &ToNs::IDENTITY).marks);
        assert_eq!(m.frequency(), [(1000, 10), (1100, 24)]);
        // The restated CBR 10 is dropped.
        assert_eq!(m.all().len(), 6, "{:?}", m.all());
        assert_eq!(m.frequency_between(1050, 1060), [(1000, 10)]);
        assert_eq!(m.frequency_between(1050, 2000), [(1000, 10), (1100, 24)]);
        assert_eq!(m.sleeps_between(5300, 6000), []);
        assert_eq!(m.sleeps_between(5000, 6000).len(), 1);
        assert_eq!(
            m.sleeps(),
            [Sleep {
                start: 1200,
                end: 5200,
                cstate: 3,
                deepest: 6,
                wake: 1
            }]
        );
        assert_eq!(
            m.all()[2].describe(100.0),
            "mwait C3.1 (hints 0x20, extensions 0x1)"
        );
        assert_eq!(m.all()[3].describe(100.0), "power entry C3.1");
        assert!(m.all()[5].describe(100.0).contains("an interrupt"));
        assert_eq!(m.between(1100, 1200).len(), 4);
    }

    #[test]
    fn a_ptwrite_whose_fup_does_not_follow_keeps_no_ip() {
        let mut t = start(1000);
        // PTW with its IP bit, then a TNT (not its FUP), then a FUP.
        write::ptw(&mut t, 1, 4, true);
        write::tnt(&mut t, 1, 1);
        fup(&mut t, 0x40_1234);
        // And one cut off by the next PSB+, whose FUP is not its.
        write::ptw(&mut t, 2, 4, true);
        t.extend(start(2000));
        fup(&mut t, 0x40_5678);
        let m = Marks::new(scan(&t, &cfg(), &ToNs::IDENTITY).marks);
        let ptw: Vec<(u64, Option<u64>)> = m.ptwrites().map(|(m, p)| (p, m.ip)).collect();
        assert_eq!(ptw, [(1, None), (2, None)]);
    }

    /// The bytes the scan steps over unparsed are exactly those the
    /// parser reads as a one-byte PAD or short TNT.
    #[test]
    fn one_byte_runs_are_pads_and_short_tnts() {
        for b in 0..=255u8 {
            let one = matches!(
                packet::parse(&[b, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                Ok((Packet::Pad | Packet::Tnt { long: false, .. }, 1))
            );
            assert_eq!(
                one_byte_run(&[b, b, 0x02]),
                if one { 2 } else { 0 },
                "{b:#04x}"
            );
        }
        assert_eq!(one_byte_run(&[]), 0);
    }

    #[test]
    fn marks_before_any_time_are_counted_not_placed() {
        let mut t = PSB.to_vec();
        t.extend_from_slice(&PSBEND);
        write::ptw(&mut t, 1, 4, false);
        let s = scan(&t, &cfg(), &ToNs::IDENTITY);
        assert!(s.marks.is_empty());
        assert_eq!(s.untimed, 1);
        // PSB+'s frequency in a trace without timing is not counted.
        let mut t = PSB.to_vec();
        write::cbr(&mut t, 10);
        t.extend_from_slice(&PSBEND);
        assert_eq!(scan(&t, &cfg(), &ToNs::IDENTITY).untimed, 0);
    }

    #[test]
    fn garbage_skips_to_the_next_psb() {
        let mut t = start(10);
        // No packet starts 02 ff: garbage on purpose, which no encoder writes.
        t.extend_from_slice(&[0x02, 0xff, 0xff]);
        t.extend(start(20));
        write::ptw(&mut t, 7, 4, false);
        let s = scan(&t, &cfg(), &ToNs::IDENTITY);
        let m = Marks::new(s.marks);
        assert_eq!(
            m.ptwrites().map(|(m, p)| (m.time, p)).collect::<Vec<_>>(),
            [(20, 7)]
        );
    }

    /// PSB+ (TSC, TMA, CBR) every so often, with the packets a trace is
    /// made of between: CYCs (some of several bytes), TNTs, TIPs and FUPs,
    /// MTCs, PADs.
    fn plain_trace(rng: &mut fastrand::Rng, psbs: usize) -> Vec<u8> {
        let mut t = Vec::new();
        let mut time = 1000;
        for _ in 0..psbs {
            t.extend_from_slice(&PSB);
            write::tsc(&mut t, time);
            write::tma(&mut t, rng.u16(..), rng.u16(..512));
            write::cbr(&mut t, rng.u8(1..40));
            t.extend_from_slice(&PSBEND);
            for _ in 0..rng.usize(..40) {
                match rng.u8(..6) {
                    0 => {
                        let bits = rng.u32(1..20);
                        write::cyc(&mut t, rng.u64(..1 << bits));
                    }
                    1 => write::tnt(&mut t, rng.u64(..64), rng.u32(1..7)),
                    2 => write::ip_packet(
                        &mut t,
                        IpPacket::Tip,
                        rng.u64(..1 << 47),
                        IpCompression::Sext48,
                    ),
                    3 => fup(&mut t, rng.u64(..1 << 47)),
                    4 => write::mtc(&mut t, rng.u8(..)),
                    _ => t.push(0),
                }
            }
            time += rng.u64(1..10_000);
        }
        t
    }

    /// The quick scan reads a trace whose only marks are its PSB+'s
    /// frequencies, and gives what the full scan gives.
    #[test]
    fn the_quick_scan_reads_plain_traces_as_the_full_scan() {
        let mut rng = fastrand::Rng::with_seed(41);
        let cfg = DecoderConfig {
            nom_freq: 24,
            mtc_freq: 3,
            cpuid_0x15_eax: 2,
            cpuid_0x15_ebx: 100,
            ..cfg()
        };
        for _ in 0..200 {
            let psbs = rng.usize(1..8);
            let t = plain_trace(&mut rng, psbs);
            let q = quick(&t, &cfg, &ToNs::IDENTITY).expect("a plain trace");
            assert!(!q.marks.is_empty());
            assert_eq!(q, scan_full(&t, &cfg, &ToNs::IDENTITY));
        }
    }

    /// A PTWRITE, a power event, or a frequency read after a CYC moved the
    /// time: the quick scan leaves the trace to the full one, which reads
    /// it as before.
    #[test]
    fn the_quick_scan_gives_up_on_any_other_mark() {
        let mut rng = fastrand::Rng::with_seed(7);
        let others: [fn(&mut Vec<u8>); 4] = [
            |t| write::ptw(t, 0x2a, 4, false),
            |t| write::mwait(t, 0x20, 1),
            |t| write::exstop(t, false),
            |t| {
                write::cyc(t, 12);
                write::cbr(t, 30);
            },
        ];
        for add in others {
            let mut t = plain_trace(&mut rng, 2);
            add(&mut t);
            t.extend(plain_trace(&mut rng, 2));
            assert_eq!(quick(&t, &cfg(), &ToNs::IDENTITY), None, "{t:02x?}");
            let full = scan_full(&t, &cfg(), &ToNs::IDENTITY);
            assert_eq!(scan(&t, &cfg(), &ToNs::IDENTITY), full);
            assert!(full.marks.len() > 4, "{full:?}");
        }
    }

    /// Damaged traces: wherever the quick scan reads one to its end, it
    /// gives what the full scan gives.
    #[test]
    fn the_quick_scan_agrees_with_the_full_scan_on_damaged_traces() {
        let mut rng = fastrand::Rng::with_seed(99);
        let mut quick_ones = 0;
        for _ in 0..2000 {
            let psbs = rng.usize(1..6);
            let mut t = plain_trace(&mut rng, psbs);
            for _ in 0..rng.usize(..4) {
                let i = rng.usize(..t.len());
                t[i] = rng.u8(..);
            }
            t.truncate(rng.usize(t.len() / 2..=t.len()));
            let c = cfg();
            if let Some(q) = quick(&t, &c, &ToNs::IDENTITY) {
                quick_ones += 1;
                assert_eq!(q, scan_full(&t, &c, &ToNs::IDENTITY), "{t:02x?}");
            }
        }
        assert!(quick_ones > 200, "{quick_ones}");
    }
}
