//! Writing Intel PT packets, byte by byte, beside the parser that reads
//! them ([`super::read`]): the emulated PT unit, the QEMU plugin and the
//! tests write their packets with it.
//!
//! Layouts follow the Intel SDM, Vol. 3C, chapter "Intel Processor Trace",
//! section "Packet Definitions". Every function appends one whole packet.

/// How many bytes of a target IP a TIP/FUP packet carries (the IPBytes field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpCompression {
    /// IPBytes=000: the IP is out of context (suppressed).
    Suppressed,
    /// IPBytes=001: bits 15:0, the rest from the last IP.
    Update16,
    /// IPBytes=010: bits 31:0, the rest from the last IP.
    Update32,
    /// IPBytes=011: bits 47:0, sign-extended.
    Sext48,
    /// IPBytes=100: bits 47:0, bits 63:48 from the last IP.
    Update48,
    /// IPBytes=110: all 64 bits.
    Full,
}

impl IpCompression {
    /// The form that carries `ip` whole, needing no last IP: 48 bits
    /// sign-extended where that gives it back, else all 64.
    pub fn whole(ip: u64) -> IpCompression {
        let top = ip >> 47;
        if top == 0 || top == (1 << 17) - 1 {
            IpCompression::Sext48
        } else {
            IpCompression::Full
        }
    }

    fn ip_bytes(self) -> u8 {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 1,
            IpCompression::Update32 => 2,
            IpCompression::Sext48 => 3,
            IpCompression::Update48 => 4,
            IpCompression::Full => 6,
        }
    }

    fn payload_len(self) -> usize {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 2,
            IpCompression::Update32 => 4,
            IpCompression::Sext48 | IpCompression::Update48 => 6,
            IpCompression::Full => 8,
        }
    }

    /// The shortest encoding of `ip` given the decoder's `last_ip`, as the
    /// hardware chooses it.
    pub fn choose(ip: u64, last_ip: u64) -> IpCompression {
        if ip >> 16 == last_ip >> 16 {
            IpCompression::Update16
        } else if ip >> 32 == last_ip >> 32 {
            IpCompression::Update32
        } else if sext48(ip) == ip {
            IpCompression::Sext48
        } else if ip >> 48 == last_ip >> 48 {
            IpCompression::Update48
        } else {
            IpCompression::Full
        }
    }
}

fn sext48(ip: u64) -> u64 {
    (((ip << 16) as i64) >> 16) as u64
}

/// The opcode byte (bits 4:0) of the IP-carrying packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpPacket {
    Tip = 0x0d,
    TipPge = 0x11,
    TipPgd = 0x01,
    Fup = 0x1d,
}

pub const PSB: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];
pub const PSBEND: [u8; 2] = [0x02, 0x23];
pub const OVF: [u8; 2] = [0x02, 0xf3];
/// TraceStop: a branch landed in a TraceStop range.
pub const TRACE_STOP: [u8; 2] = [0x02, 0x83];
/// Most TNT bits a short TNT packet holds.
pub const TNT8_MAX: u32 = 6;
/// Most TNT bits a long TNT packet holds.
pub const TNT64_MAX: u32 = 47;

pub fn ip_packet(out: &mut Vec<u8>, kind: IpPacket, ip: u64, comp: IpCompression) {
    out.push((comp.ip_bytes() << 5) | kind as u8);
    out.extend_from_slice(&ip.to_le_bytes()[..comp.payload_len()]);
}

/// A TNT packet of `count` bits; `bits` holds them with the oldest branch in
/// the most significant of the `count` low bits, as the hardware orders them.
pub fn tnt(out: &mut Vec<u8>, bits: u64, count: u32) {
    debug_assert!((1..=TNT64_MAX).contains(&count));
    if count <= TNT8_MAX {
        let payload = (1u64 << count) | (bits & ((1 << count) - 1));
        out.push((payload << 1) as u8);
    } else {
        let payload = (1u64 << count) | (bits & ((1 << count) - 1));
        out.extend_from_slice(&[0x02, 0xa3]);
        out.extend_from_slice(&payload.to_le_bytes()[..6]);
    }
}

pub fn tsc(out: &mut Vec<u8>, tsc: u64) {
    out.push(0x19);
    out.extend_from_slice(&tsc.to_le_bytes()[..7]);
}

/// PTW: a PTWRITE's operand, 4 or 8 bytes; `ip`: a FUP with the
/// instruction's IP follows.
pub fn ptw(out: &mut Vec<u8>, payload: u64, bytes: u8, ip: bool) {
    let wide = bytes == 8;
    out.extend_from_slice(&[0x02, 0x12 | ((wide as u8) << 5) | ((ip as u8) << 7)]);
    out.extend_from_slice(&payload.to_le_bytes()[..if wide { 8 } else { 4 }]);
}

pub fn cbr(out: &mut Vec<u8>, ratio: u8) {
    out.extend_from_slice(&[0x02, 0x03, ratio, 0x00]);
}

/// TMA: the CTC value (bits 15:0) and fast counter (9 bits) at the last TSC.
pub fn tma(out: &mut Vec<u8>, ctc: u16, fast_counter: u16) {
    let c = ctc.to_le_bytes();
    let f = (fast_counter & 0x1ff).to_le_bytes();
    out.extend_from_slice(&[0x02, 0x73, c[0], c[1], 0x00, f[0], f[1]]);
}

pub fn mtc(out: &mut Vec<u8>, ctc: u8) {
    out.extend_from_slice(&[0x59, ctc]);
}

/// CYC: cycles since the last CYC, in a variable-length little-endian form
/// (5 bits in the first byte, 7 in each following one, bit 2/bit 0 = "more").
pub fn cyc(out: &mut Vec<u8>, cycles: u64) {
    let mut rest = cycles >> 5;
    let mut byte = 0x03 | (((cycles & 0x1f) as u8) << 3);
    if rest != 0 {
        byte |= 0x04;
    }
    out.push(byte);
    while rest != 0 {
        let mut b = ((rest & 0x7f) as u8) << 1;
        rest >>= 7;
        if rest != 0 {
            b |= 1;
        }
        out.push(b);
    }
}

/// MODE.Exec for 64-bit code (CS.L=1, CS.D=0), with IF set as user code runs.
pub fn mode_exec_64(out: &mut Vec<u8>) {
    mode_exec(out, 64);
}

/// MODE.Exec for code of `bits` (64: CS.L=1; 32: CS.D=1; 16: neither).
pub fn mode_exec(out: &mut Vec<u8>, bits: u32) {
    mode_exec_if(out, bits, false);
}

/// MODE.Exec for code of `bits`, with the RFLAGS.IF bit that Event Trace adds.
pub fn mode_exec_if(out: &mut Vec<u8>, bits: u32, iflag: bool) {
    let payload = match bits {
        64 => 0x01,
        32 => 0x02,
        _ => 0x00,
    };
    out.extend_from_slice(&[0x99, payload | ((iflag as u8) << 2)]);
}

/// MODE.TSX: inside a transaction (`intx`), or one just aborted.
pub fn mode_tsx(out: &mut Vec<u8>, intx: bool, abort: bool) {
    out.extend_from_slice(&[0x99, 0x20 | intx as u8 | (abort as u8) << 1]);
}

/// PAD: a byte of padding, which decoders skip.
pub fn pad(out: &mut Vec<u8>) {
    out.push(0x00);
}

/// PIP: a new CR3 (bits 51:5 of it) and NR, set when not in VMX root.
pub fn pip(out: &mut Vec<u8>, cr3: u64, nr: bool) {
    let payload = ((cr3 >> 5) << 1) | (nr as u64);
    out.extend_from_slice(&[0x02, 0x43]);
    out.extend_from_slice(&payload.to_le_bytes()[..6]);
}

/// VMCS: the base address VMPTRLD loaded (bits 51:12 of it).
pub fn vmcs(out: &mut Vec<u8>, base: u64) {
    out.extend_from_slice(&[0x02, 0xc8]);
    out.extend_from_slice(&(base >> 12).to_le_bytes()[..5]);
}

/// MNT: a maintenance packet with its 8-byte model-specific payload.
pub fn mnt(out: &mut Vec<u8>, payload: u64) {
    out.extend_from_slice(&[0x02, 0xc3, 0x88]);
    out.extend_from_slice(&payload.to_le_bytes());
}

/// MWAIT: its hints (EAX\[7:0\]) and extensions (ECX\[1:0\]), the rest zero.
pub fn mwait(out: &mut Vec<u8>, hints: u8, ext: u8) {
    out.extend_from_slice(&[0x02, 0xc2, hints, 0, 0, 0, ext & 0x3, 0, 0, 0]);
}

/// PWRE: the C-state and sub-state entered, `hw` when the hardware chose it.
pub fn pwre(out: &mut Vec<u8>, hw: bool, cstate: u8, sub: u8) {
    let state = (cstate << 4) | (sub & 0xf);
    out.extend_from_slice(&[0x02, 0x22, (hw as u8) << 7, state]);
}

/// PWRX: the deepest and the last core C-state of the stay, and the wake reason.
pub fn pwrx(out: &mut Vec<u8>, deepest: u8, last: u8, wake: u8) {
    let states = (last << 4) | (deepest & 0xf);
    out.extend_from_slice(&[0x02, 0xa2, states, wake & 0xf, 0, 0, 0]);
}

/// EXSTOP: execution stopped; `ip`: a FUP with the IP follows.
pub fn exstop(out: &mut Vec<u8>, ip: bool) {
    out.extend_from_slice(&[0x02, 0x62 | ((ip as u8) << 7)]);
}

/// CFE: Event Trace's control-flow event, `kind` and vector; `ip`: a FUP follows.
pub fn cfe(out: &mut Vec<u8>, ip: bool, kind: u8, vector: u8) {
    out.extend_from_slice(&[0x02, 0x13, ((ip as u8) << 7) | (kind & 0x1f), vector]);
}

/// EVD: Event Trace's event data of `kind` for the CFE after it, 8 bytes.
pub fn evd(out: &mut Vec<u8>, kind: u8, payload: u64) {
    out.extend_from_slice(&[0x02, 0x53, kind & 0x1f]);
    out.extend_from_slice(&payload.to_le_bytes());
}

/// TRIG: the trigger units that fired, IP and MULT, and the count if valid.
pub fn trig(out: &mut Vec<u8>, trbv: u8, ip: bool, mult: bool, icnt: Option<u16>) {
    let flags = ((ip as u8) << 7) | ((icnt.is_some() as u8) << 6) | ((mult as u8) << 5);
    out.extend_from_slice(&[0xd9, flags, trbv]);
    if let Some(n) = icnt {
        out.extend_from_slice(&n.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::read::{parse, Packet};

    /// `write` writes one packet, which the parser reads back whole as `want`.
    fn round_trips(write: impl FnOnce(&mut Vec<u8>), want: Packet) {
        let mut v = Vec::new();
        write(&mut v);
        assert_eq!(parse(&v), Ok((want, v.len())), "{v:02x?}");
    }

    #[test]
    fn ip_compression_picks_shortest() {
        let last = 0x0000_7f12_3456_0000;
        assert_eq!(
            IpCompression::choose(0x0000_7f12_3456_1234, last),
            IpCompression::Update16
        );
        assert_eq!(
            IpCompression::choose(0x0000_7f12_9999_1234, last),
            IpCompression::Update32
        );
        assert_eq!(
            IpCompression::choose(0x0000_5555_9999_1234, last),
            IpCompression::Sext48
        );
        assert_eq!(
            IpCompression::choose(0xffff_8000_0000_0000, 0),
            IpCompression::Sext48
        );
        assert_eq!(
            IpCompression::choose(0x1234_5555_9999_1234, 0),
            IpCompression::Full
        );
    }

    #[test]
    fn encodes_known_bytes() {
        let mut v = Vec::new();
        ip_packet(&mut v, IpPacket::Tip, 0x401000, IpCompression::Sext48);
        assert_eq!(v, [0x6d, 0x00, 0x10, 0x40, 0, 0, 0]);
        v.clear();
        tnt(&mut v, 0b101, 3);
        // stop bit at bit 4 of the payload, payload shifted left by one.
        assert_eq!(v, [0b0001_1010]);
        v.clear();
        tnt(&mut v, 1, 7);
        assert_eq!(v, [0x02, 0xa3, 0x81, 0, 0, 0, 0, 0]);
        v.clear();
        cyc(&mut v, 3);
        assert_eq!(v, [0x1b]);
        v.clear();
        cyc(&mut v, 0x20);
        assert_eq!(v, [0x07, 0x02]);
        v.clear();
        tsc(&mut v, 0x0102_0304_0506_0708);
        assert_eq!(v, [0x19, 8, 7, 6, 5, 4, 3, 2]);
    }

    #[test]
    fn power_and_status_packets_have_the_sdms_layout() {
        let mut v = Vec::new();
        mwait(&mut v, 0x20, 1);
        assert_eq!(v, [0x02, 0xc2, 0x20, 0, 0, 0, 1, 0, 0, 0]);
        v.clear();
        pwre(&mut v, true, 2, 1);
        assert_eq!(v, [0x02, 0x22, 0x80, 0x21]);
        v.clear();
        // Last C3 (2) in the high nibble, deepest C6 (5) in the low one.
        pwrx(&mut v, 5, 2, 1);
        assert_eq!(v, [0x02, 0xa2, 0x25, 1, 0, 0, 0]);
        v.clear();
        exstop(&mut v, true);
        assert_eq!(v, [0x02, 0xe2]);
        v.clear();
        // CR3 0xa000: bits 51:5 from bit 1 of the payload, NR in bit 0.
        pip(&mut v, 0xa000, true);
        assert_eq!(v, [0x02, 0x43, 0x01, 0x0a, 0, 0, 0, 0]);
        v.clear();
        mode_exec_if(&mut v, 64, true);
        assert_eq!(v, [0x99, 0x05]);
    }

    #[test]
    fn every_packet_the_parser_reads_back_as_written() {
        round_trips(pad, Packet::Pad);
        for (cr3, nr) in [
            (0, false),
            (0x1234_5000, true),
            (0x000f_ffff_ffff_ffe0, false),
        ] {
            round_trips(|v| pip(v, cr3, nr), Packet::Pip { cr3, nr });
        }
        for base in [0, 0x1234_5000, 0x000f_ffff_ffff_f000] {
            round_trips(|v| vmcs(v, base), Packet::Vmcs(base));
        }
        for payload in [0, 0xa000, u64::MAX] {
            round_trips(|v| mnt(v, payload), Packet::Mnt(payload));
        }
        for (hints, ext) in [(0x20, 1), (0, 0), (0xff, 3)] {
            round_trips(|v| mwait(v, hints, ext), Packet::Mwait { hints, ext });
        }
        for (hw, cstate, sub) in [(false, 2, 0), (true, 0, 0xf), (false, 0xf, 0xf)] {
            round_trips(
                |v| pwre(v, hw, cstate, sub),
                Packet::Pwre { hw, cstate, sub },
            );
        }
        for (deepest, last, wake) in [(5, 2, 1), (0, 0, 8), (0xf, 0xf, 4)] {
            let want = Packet::Pwrx {
                deepest,
                last,
                wake,
            };
            round_trips(|v| pwrx(v, deepest, last, wake), want);
        }
        for ip in [false, true] {
            round_trips(|v| exstop(v, ip), Packet::Exstop { ip });
        }
        for (bits, csl, csd) in [(64, true, false), (32, false, true), (16, false, false)] {
            for iflag in [false, true] {
                let want = Packet::ModeExec { csl, csd, iflag };
                round_trips(|v| mode_exec_if(v, bits, iflag), want);
            }
        }
        for (ip, kind, vector) in [(true, 1, 14), (false, 2, 0), (true, 0x1f, 0xff)] {
            round_trips(
                |v| cfe(v, ip, kind, vector),
                Packet::Cfe { ip, kind, vector },
            );
        }
        for (kind, payload) in [(0, 0xf00b_baaa), (2, u64::MAX)] {
            round_trips(|v| evd(v, kind, payload), Packet::Evd { kind, payload });
        }
        for (trbv, ip, mult, icnt) in [
            (3, false, true, None),
            (1, true, false, Some(0x102)),
            (0xff, true, true, Some(0)),
        ] {
            let want = Packet::Trig {
                trbv,
                ip,
                mult,
                icnt,
            };
            round_trips(|v| trig(v, trbv, ip, mult, icnt), want);
        }
    }
}
