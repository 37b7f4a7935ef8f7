//! Reading Intel PT packets: our parser, independent of libipt, beside
//! the encoder ([`super::write`]) the emulated unit and the QEMU plugin
//! write packets with. The decoder's flow decoder reads every packet of
//! the trace through it (its hot
//! loop inlines the most common ones, short TNT and CYC, and leaves the
//! rest to [`Packet`]); PSB indexing, which cuts a trace into chunks and
//! segments, the `ptscope packets` listing and trace statistics use it too.
//! It is bounds-checked: it never reads past the buffer, and reports a
//! truncated or unknown packet as such.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    Pad,
    Psb,
    PsbEnd,
    Ovf,
    /// `count` bits, oldest in the most significant of the low `count` bits.
    Tnt {
        bits: u64,
        count: u8,
        long: bool,
    },
    Tip {
        kind: IpKind,
        ipb: u8,
        payload: u64,
    },
    Tsc(u64),
    Cbr(u8),
    Tma {
        ctc: u16,
        fc: u16,
    },
    Mtc(u8),
    Cyc(u64),
    /// `iflag`: RFLAGS.IF, which MODE.Exec carries with Event Trace.
    ModeExec {
        csl: bool,
        csd: bool,
        iflag: bool,
    },
    ModeTsx {
        intx: bool,
        abort: bool,
    },
    Pip {
        cr3: u64,
        nr: bool,
    },
    Vmcs(u64),
    Mnt(u64),
    /// A PTWRITE's operand, `bytes` (4 or 8) wide; `ipb` 1: a FUP with
    /// the instruction's IP follows.
    Ptw {
        ipb: u8,
        bytes: u8,
        payload: u64,
    },
    /// `ip`: a FUP with the IP follows.
    Exstop {
        ip: bool,
    },
    /// MWAIT's operands: `hints` (EAX\[7:0\]: the requested C-state
    /// minus one in bits 7:4, its sub-state in 3:0) and `ext` (ECX\[1:0\]).
    Mwait {
        hints: u8,
        ext: u8,
    },
    /// Power entry: the thread's resolved C-state and sub-state; `hw` when
    /// the hardware chose it (rather than MWAIT).
    Pwre {
        hw: bool,
        cstate: u8,
        sub: u8,
    },
    /// Power exit: the deepest and the last core C-state of the stay, and
    /// why it woke (a bit set of `PWRX_WAKE_*`).
    Pwrx {
        deepest: u8,
        last: u8,
        wake: u8,
    },
    Stop,
    /// Event Trace's control-flow event: `kind` (interrupt 1, iret 2, ...,
    /// as in libipt's `pt_cfe_type`), its vector; `ip`: a FUP with the IP
    /// follows.
    Cfe {
        ip: bool,
        kind: u8,
        vector: u8,
    },
    /// Event Trace's event data for the CFE after it: `kind` 0 is a page
    /// fault's CR2, 1 and 2 a VM exit's qualification and reason.
    Evd {
        kind: u8,
        payload: u64,
    },
    /// A trigger (TRIG, SDM "Trigger Packet"): `trbv` says which trigger
    /// units fired; `ip` says a FUP with the IP follows; `icnt` is the
    /// instruction count when valid; `mult` says more triggers fired.
    Trig {
        trbv: u8,
        ip: bool,
        mult: bool,
        icnt: Option<u16>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpKind {
    Tip,
    TipPge,
    TipPgd,
    Fup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// The packet runs past the end of the buffer.
    Truncated,
    /// No packet starts with these bytes.
    Unknown(u8),
    /// Bytes an erratum corrupted ([`parse_with`]): `skip` of them are
    /// no packet, and the next one follows.
    Erratum { name: &'static str, skip: usize },
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketError::Truncated => write!(f, "truncated packet"),
            PacketError::Unknown(b) => write!(f, "unknown packet (opcode {b:#04x})"),
            PacketError::Erratum { name, skip } => {
                write!(f, "{name}: {skip} corrupted byte(s) skipped")
            }
        }
    }
}

/// [`parse`] with the packet-level errata of `errata` worked around, as
/// libipt's packet decoder does: SKD007, a CYC whose second byte an OVF
/// overwrote (its first byte is skipped, the OVF follows); SKZ84, a TMA
/// with reserved bits set (its 8 bytes are skipped). Either is
/// [`PacketError::Erratum`].
pub fn parse_with(
    buf: &[u8],
    errata: &super::errata::Errata,
) -> Result<(Packet, usize), PacketError> {
    match parse(buf) {
        Ok((Packet::Cyc(_), 2)) if errata.skd007 && buf.get(1..3) == Some(&[0x02, 0xf3]) => {
            Err(PacketError::Erratum {
                name: "SKD007",
                skip: 1,
            })
        }
        Err(PacketError::Unknown(_))
            if errata.skz84 && buf.len() >= 8 && buf[..2] == [0x02, 0x73] =>
        {
            Err(PacketError::Erratum {
                name: "SKZ84",
                skip: 8,
            })
        }
        other => other,
    }
}

/// A C-state from its hint encoding, as MWAIT's hints, PWRE and PWRX
/// carry it (and as libipt prints it): the value plus one, so 0 is C1, and
/// 0xf is C0. The model's marks keep the hint encoding and read it with
/// the same function (`ptscope_model::c_state`).
pub use ptscope_model::c_state;

pub const PSB_BYTES: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];

fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |acc, &b| (acc << 8) | b as u64)
}

fn ip_len(ipb: u8) -> Option<usize> {
    match ipb {
        0 => Some(0),
        1 => Some(2),
        2 => Some(4),
        3 | 4 => Some(6),
        6 => Some(8),
        _ => None,
    }
}

/// The size of the packet at the start of `buf` if it is of the kinds
/// nearly every trace is made of besides one-byte TNTs and PADs: a CYC of
/// one byte, or an IP packet (TIP, TIP.PGE, TIP.PGD, FUP). Exactly the
/// size [`parse`] gives them; `None` for any other packet and for one
/// [`parse`] would not read. For a scan that needs nothing of them but
/// their size, and reads the rest with [`parse`].
#[inline]
pub fn common_len(buf: &[u8]) -> Option<usize> {
    let b0 = *buf.first()?;
    if b0 & 0x07 == 0x03 {
        return Some(1);
    }
    if matches!(b0 & 0x1f, 0x0d | 0x11 | 0x01 | 0x1d) {
        let n = 1 + ip_len(b0 >> 5)?;
        return (buf.len() >= n).then_some(n);
    }
    None
}

/// Decodes the packet at the start of `buf`: the packet and its size.
pub fn parse(buf: &[u8]) -> Result<(Packet, usize), PacketError> {
    let need = |n: usize| {
        if buf.len() >= n {
            Ok(&buf[..n])
        } else {
            Err(PacketError::Truncated)
        }
    };
    let b0 = *buf.first().ok_or(PacketError::Truncated)?;
    if b0 == 0 {
        return Ok((Packet::Pad, 1));
    }
    if b0 & 1 == 0 && b0 != 0x02 {
        // Short TNT: the highest set bit is the stop bit.
        let payload = (b0 >> 1) as u64;
        let count = 63 - payload.leading_zeros() as u8;
        return Ok((
            Packet::Tnt {
                bits: payload & ((1 << count) - 1),
                count,
                long: false,
            },
            1,
        ));
    }
    if b0 & 0x03 == 0x03 {
        // CYC: 5 bits, then 7 per extension byte.
        let mut value = (b0 >> 3) as u64;
        let mut len = 1;
        let mut more = b0 & 0x04 != 0;
        let mut shift = 5;
        while more {
            let b = *buf.get(len).ok_or(PacketError::Truncated)?;
            if shift < 64 {
                value |= ((b >> 1) as u64) << shift;
            }
            shift += 7;
            more = b & 1 != 0;
            len += 1;
            if len > 15 {
                return Err(PacketError::Unknown(b0));
            }
        }
        return Ok((Packet::Cyc(value), len));
    }
    let low5 = b0 & 0x1f;
    if matches!(low5, 0x0d | 0x11 | 0x01 | 0x1d) {
        let kind = match low5 {
            0x0d => IpKind::Tip,
            0x11 => IpKind::TipPge,
            0x01 => IpKind::TipPgd,
            _ => IpKind::Fup,
        };
        let ipb = b0 >> 5;
        let n = ip_len(ipb).ok_or(PacketError::Unknown(b0))?;
        let bytes = need(1 + n)?;
        return Ok((
            Packet::Tip {
                kind,
                ipb,
                payload: le(&bytes[1..]),
            },
            1 + n,
        ));
    }
    match b0 {
        0x19 => Ok((Packet::Tsc(le(&need(8)?[1..])), 8)),
        0xd9 => {
            // TRIG: a flags byte (IP, ICNTV, MULT in its top bits), the
            // trigger bits, then a 16-bit instruction count if ICNTV.
            let b = need(3)?;
            let (flags, trbv) = (b[1], b[2]);
            let icnt = if flags & 0x40 != 0 {
                let c = need(5)?;
                Some(u16::from_le_bytes([c[3], c[4]]))
            } else {
                None
            };
            let len = if icnt.is_some() { 5 } else { 3 };
            Ok((
                Packet::Trig {
                    trbv,
                    ip: flags & 0x80 != 0,
                    mult: flags & 0x20 != 0,
                    icnt,
                },
                len,
            ))
        }
        0x59 => Ok((Packet::Mtc(need(2)?[1]), 2)),
        0x99 => {
            let p = need(2)?[1];
            match p >> 5 {
                0 => Ok((
                    Packet::ModeExec {
                        csl: p & 1 != 0,
                        csd: p & 2 != 0,
                        iflag: p & 4 != 0,
                    },
                    2,
                )),
                1 => Ok((
                    Packet::ModeTsx {
                        intx: p & 1 != 0,
                        abort: p & 2 != 0,
                    },
                    2,
                )),
                _ => Err(PacketError::Unknown(b0)),
            }
        }
        0x02 => {
            let b1 = *buf.get(1).ok_or(PacketError::Truncated)?;
            match b1 {
                0x82 => {
                    let bytes = need(16)?;
                    if bytes == PSB_BYTES {
                        Ok((Packet::Psb, 16))
                    } else {
                        Err(PacketError::Unknown(b0))
                    }
                }
                0x23 => Ok((Packet::PsbEnd, 2)),
                0xf3 => Ok((Packet::Ovf, 2)),
                0xa3 => {
                    let payload = le(&need(8)?[2..8]);
                    if payload == 0 {
                        return Err(PacketError::Unknown(b0));
                    }
                    let count = 63 - payload.leading_zeros() as u8;
                    Ok((
                        Packet::Tnt {
                            bits: payload & ((1 << count) - 1),
                            count,
                            long: true,
                        },
                        8,
                    ))
                }
                0x03 => Ok((Packet::Cbr(need(4)?[2]), 4)),
                0x73 => {
                    let b = need(7)?;
                    // Reserved bits set: libipt rejects it (bad packet),
                    // or skips it on CPUs with erratum SKZ84.
                    if b[4] != 0 || b[6] & !1 != 0 {
                        return Err(PacketError::Unknown(b0));
                    }
                    Ok((
                        Packet::Tma {
                            ctc: u16::from_le_bytes([b[2], b[3]]),
                            fc: u16::from_le_bytes([b[5], b[6] & 1]),
                        },
                        7,
                    ))
                }
                0x43 => {
                    let b = need(8)?;
                    let v = le(&b[2..8]);
                    Ok((
                        Packet::Pip {
                            cr3: (v >> 1) << 5,
                            nr: v & 1 != 0,
                        },
                        8,
                    ))
                }
                0xc8 => Ok((Packet::Vmcs(le(&need(7)?[2..7]) << 12), 7)),
                0xc3 => {
                    let b = need(11)?;
                    if b[2] != 0x88 {
                        return Err(PacketError::Unknown(b0));
                    }
                    Ok((Packet::Mnt(le(&b[3..11])), 11))
                }
                0x62 | 0xe2 => Ok((Packet::Exstop { ip: b1 == 0xe2 }, 2)),
                0xc2 => need(10).map(|b| {
                    (
                        Packet::Mwait {
                            hints: b[2],
                            ext: b[6] & 3,
                        },
                        10,
                    )
                }),
                0x22 => need(4).map(|b| {
                    (
                        Packet::Pwre {
                            hw: b[2] & 0x80 != 0,
                            cstate: b[3] >> 4,
                            sub: b[3] & 0xf,
                        },
                        4,
                    )
                }),
                0xa2 => need(7).map(|b| {
                    (
                        Packet::Pwrx {
                            deepest: b[2] & 0xf,
                            last: b[2] >> 4,
                            wake: b[3] & 0xf,
                        },
                        7,
                    )
                }),
                0x83 => Ok((Packet::Stop, 2)),
                0x13 => need(4).map(|b| {
                    (
                        Packet::Cfe {
                            ip: b[2] & 0x80 != 0,
                            kind: b[2] & 0x1f,
                            vector: b[3],
                        },
                        4,
                    )
                }),
                0x53 => need(11).map(|b| {
                    (
                        Packet::Evd {
                            kind: b[2] & 0x1f,
                            payload: le(&b[3..11]),
                        },
                        11,
                    )
                }),
                b if b & 0x1f == 0x12 => {
                    let plc = (b >> 5) & 3;
                    let n = if plc == 0 {
                        4
                    } else if plc == 1 {
                        8
                    } else {
                        return Err(PacketError::Unknown(b0));
                    };
                    let bytes = need(2 + n)?;
                    Ok((
                        Packet::Ptw {
                            ipb: b >> 7,
                            bytes: n as u8,
                            payload: le(&bytes[2..]),
                        },
                        2 + n,
                    ))
                }
                _ => Err(PacketError::Unknown(b0)),
            }
        }
        _ => Err(PacketError::Unknown(b0)),
    }
}

/// The IP an IP packet gives, from its compression `ipb` and `payload`
/// over the last IP (SDM "IP Compression"); `None` when it gives none
/// (IP suppressed).
pub fn expand_ip(last: u64, ipb: u8, payload: u64) -> Option<u64> {
    Some(match ipb {
        0 => return None,
        1 => (last & !0xffff) | payload,
        2 => (last & !0xffff_ffff) | payload,
        3 => ((payload << 16) as i64 >> 16) as u64,
        4 => (last & 0xffff_0000_0000_0000) | payload,
        _ => payload,
    })
}

/// Offsets of every PSB in `buf`.
pub fn psb_offsets(buf: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(pos) = find_psb(&buf[i..]) {
        out.push(i + pos);
        i += pos + 16;
    }
    out
}

/// The offset of the first PSB in `buf`. The packets before a PSB can end
/// in bytes of its pattern (a CYC's `02` and a TNT's `82`, say), so the
/// PSB is the last 16 bytes of a run of `02 82` pairs, not the first: the
/// packet after it starts `02` too, but never `02 82`.
pub fn find_psb(buf: &[u8]) -> Option<usize> {
    // A PSB's 16 bytes hold a whole 8-byte word of `buf` at a multiple of
    // 8 (from its start), which reads as one of two values: the scan
    // compares words, and looks closer only around a word that matches.
    // The first PSB is found at its first such word or earlier.
    const EVEN: u64 = u64::from_le_bytes([0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82]);
    const ODD: u64 = u64::from_le_bytes([0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02]);
    let psb_word = |bytes: &[u8]| {
        let word = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        (word == EVEN) | (word == ODD)
    };
    let words = buf.len() / 8;
    let mut k = 0;
    let mut found = None;
    while k < words {
        // Four words a test, without a branch between them: nearly every
        // block of a trace holds none, and the scan of a whole trace
        // (its chunks' bounds) is on the decode's serial path.
        if let Some(block) = buf.get(k * 8..k * 8 + 32) {
            let any = psb_word(&block[..8])
                | psb_word(&block[8..16])
                | psb_word(&block[16..24])
                | psb_word(&block[24..]);
            if !any {
                k += 4;
                continue;
            }
        }
        if psb_word(&buf[k * 8..k * 8 + 8]) {
            let lo = (k * 8).saturating_sub(15);
            let hi = (k * 8 + 8 + 15).min(buf.len());
            if let Some(near) = buf[lo..hi].windows(16).position(|w| w == PSB_BYTES) {
                found = Some(lo + near);
                break;
            }
        }
        k += 1;
    }
    let mut at = found?;
    while buf.get(at + 16..at + 18) == Some(&PSB_BYTES[..2]) {
        at += 2;
    }
    Some(at)
}

impl fmt::Display for Packet {
    /// ptdump-style name and payload.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Packet::Pad => write!(f, "pad"),
            Packet::Psb => write!(f, "psb"),
            Packet::PsbEnd => write!(f, "psbend"),
            Packet::Ovf => write!(f, "ovf"),
            Packet::Tnt { bits, count, long } => {
                write!(f, "{:<10} ", if long { "tnt.64" } else { "tnt.8" })?;
                for i in (0..count).rev() {
                    f.write_str(if bits >> i & 1 != 0 { "!" } else { "." })?;
                }
                Ok(())
            }
            Packet::Tip { kind, ipb, payload } => {
                let name = match kind {
                    IpKind::Tip => "tip",
                    IpKind::TipPge => "tip.pge",
                    IpKind::TipPgd => "tip.pgd",
                    IpKind::Fup => "fup",
                };
                match ipb {
                    0 => write!(f, "{name:<10} 0: ????????????????"),
                    1 => write!(f, "{name:<10} 1: ????????????{payload:04x}"),
                    2 => write!(f, "{name:<10} 2: ????????{payload:08x}"),
                    4 => write!(f, "{name:<10} 4: ????{payload:012x}"),
                    3 => {
                        let ip = (((payload << 16) as i64) >> 16) as u64;
                        write!(f, "{name:<10} 3: {ip:016x}")
                    }
                    _ => write!(f, "{name:<10} {ipb}: {payload:016x}"),
                }
            }
            Packet::Tsc(v) => write!(f, "{:<10} {v:x}", "tsc"),
            Packet::Cbr(v) => write!(f, "{:<10} {v:x}", "cbr"),
            Packet::Tma { ctc, fc } => write!(f, "{:<10} {ctc:x}, {fc:x}", "tma"),
            Packet::Mtc(v) => write!(f, "{:<10} {v:x}", "mtc"),
            Packet::Cyc(v) => write!(f, "{:<10} {v:x}", "cyc"),
            Packet::ModeExec { csl, csd, iflag } => {
                // As libipt's ptdump lists them: "cs.d, cs.l, if".
                let bits: Vec<&str> = [(csd, "cs.d"), (csl, "cs.l"), (iflag, "if")]
                    .into_iter()
                    .filter_map(|(on, name)| on.then_some(name))
                    .collect();
                write!(f, "{:<10} {}", "mode.exec", bits.join(", "))
            }
            Packet::ModeTsx { intx, abort } => {
                let s = if abort {
                    "abrt"
                } else if intx {
                    "intx"
                } else {
                    ""
                };
                write!(f, "{:<10} {s}", "mode.tsx")
            }
            Packet::Pip { cr3, nr } => {
                write!(f, "{:<10} {cr3:x}{}", "pip", if nr { ", nr" } else { "" })
            }
            Packet::Vmcs(v) => write!(f, "{:<10} {v:x}", "vmcs"),
            Packet::Mnt(v) => write!(f, "{:<10} {v:x}", "mnt"),
            Packet::Ptw { payload, .. } => write!(f, "{:<10} {payload:x}", "ptw"),
            Packet::Exstop { ip } => write!(f, "exstop{}", if ip { " ip" } else { "" }),
            Packet::Mwait { hints, ext } => write!(f, "{:<10} {hints:#x} {ext:#x}", "mwait"),
            // C-states decoded, as libipt's ptdump lists them.
            Packet::Pwre { hw, cstate, sub } => write!(
                f,
                "{:<10} c{}.{}{}",
                "pwre",
                c_state(cstate),
                c_state(sub),
                if hw { ", hw" } else { "" }
            ),
            Packet::Pwrx {
                deepest,
                last,
                wake,
            } => {
                // The wake reason: an interrupt, a store to the monitored
                // range, or the hardware's own (one of them).
                let why = match wake & 0b1101 {
                    1 => "int",
                    4 => "st",
                    8 => "hw",
                    _ => "bad",
                };
                write!(
                    f,
                    "{:<10} {why}: c{}, c{}",
                    "pwrx",
                    c_state(last),
                    c_state(deepest)
                )
            }
            Packet::Stop => write!(f, "stop"),
            Packet::Cfe { ip, kind, vector } => {
                write!(f, "{:<10} {kind}: {vector:x}", "cfe")?;
                f.write_str(if ip { ", ip" } else { "" })
            }
            Packet::Evd { kind, payload } => write!(f, "{:<10} {kind}: {payload:x}", "evd"),
            Packet::Trig {
                trbv,
                ip,
                mult,
                icnt,
            } => {
                write!(f, "{:<10} {trbv:02x}", "trig")?;
                if let Some(n) = icnt {
                    write!(f, ", icnt: {n:x}")?;
                }
                if ip {
                    f.write_str(", ip")?;
                }
                if mult {
                    f.write_str(", mult")?;
                }
                Ok(())
            }
        }
    }
}

/// Walks the packets of a PT buffer from its first PSB. After an unknown
/// or truncated packet it resumes at the next PSB.
pub struct Packets<'a> {
    buf: &'a [u8],
    pos: usize,
    errata: super::errata::Errata,
}

impl<'a> Packets<'a> {
    pub fn new(buf: &'a [u8]) -> Packets<'a> {
        Packets {
            buf,
            pos: find_psb(buf).unwrap_or(buf.len()),
            errata: Default::default(),
        }
    }

    /// The packets with `errata`'s packet-level errata worked around
    /// ([`parse_with`]): the bytes of one come as its
    /// [`PacketError::Erratum`], and the walk goes on after them.
    pub fn with_errata(buf: &'a [u8], errata: super::errata::Errata) -> Packets<'a> {
        Packets {
            errata,
            ..Packets::new(buf)
        }
    }
}

impl Iterator for Packets<'_> {
    /// Offset and the packet, or the error at that offset.
    type Item = (usize, Result<Packet, PacketError>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let at = self.pos;
        match parse_with(&self.buf[at..], &self.errata) {
            Ok((p, n)) => {
                self.pos += n;
                Some((at, Ok(p)))
            }
            Err(e @ PacketError::Erratum { skip, .. }) => {
                self.pos += skip;
                Some((at, Err(e)))
            }
            Err(e) => {
                self.pos = match find_psb(&self.buf[at + 1..]) {
                    Some(p) => at + 1 + p,
                    None => self.buf.len(),
                };
                Some((at, Err(e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_encodings() {
        assert_eq!(
            parse(&[0x06]).unwrap(),
            (
                Packet::Tnt {
                    bits: 1,
                    count: 1,
                    long: false
                },
                1
            )
        );
        assert_eq!(parse(&[0xd4]).unwrap().0.to_string(), "tnt.8      !.!.!.");
        assert_eq!(
            parse(&[0x02, 0xa3, 0, 0, 0, 0, 0, 0x80]).unwrap().0,
            Packet::Tnt {
                bits: 0,
                count: 47,
                long: true
            }
        );
        assert_eq!(parse(&[0xff, 0xfe]).unwrap(), (Packet::Cyc(0xfff), 2));
        assert_eq!(
            parse(&[0x07, 0x01, 0x02]).unwrap(),
            (Packet::Cyc(0x1000), 3)
        );
        assert_eq!(
            parse(&[0x99, 0x01]).unwrap().0,
            Packet::ModeExec {
                csl: true,
                csd: false,
                iflag: false
            }
        );
        assert_eq!(
            parse(&[0x01]).unwrap().0.to_string(),
            "tip.pgd    0: ????????????????"
        );
        assert_eq!(
            parse(&[0x6d, 0x00, 0x10, 0x40, 0, 0, 0])
                .unwrap()
                .0
                .to_string(),
            "tip        3: 0000000000401000"
        );
        assert_eq!(
            parse(&[0x19, 1, 2, 3, 4, 5, 6, 7]).unwrap().0,
            Packet::Tsc(0x07060504030201)
        );
        assert_eq!(parse(&PSB_BYTES).unwrap(), (Packet::Psb, 16));
        assert_eq!(parse(&[0x02, 0x03, 0x0a, 0]).unwrap().0, Packet::Cbr(10));
        assert_eq!(parse(&[0x19, 1, 2]), Err(PacketError::Truncated));
        assert_eq!(parse(&[0xcd, 1, 2]), Err(PacketError::Truncated));
        assert_eq!(parse(&[0xad]), Err(PacketError::Unknown(0xad)));
        assert_eq!(parse(&[]), Err(PacketError::Truncated));
    }

    /// MODE.Exec's IF bit, and PWRE and PWRX with their C-states decoded
    /// and PWRX's wake reason named, as libipt's ptdump lists them.
    #[test]
    fn lists_mode_exec_if_and_power_packets_as_ptdump_does() {
        let text = |b: &[u8]| parse(b).unwrap().0.to_string();
        assert_eq!(text(&[0x99, 0x05]), "mode.exec  cs.l, if");
        assert_eq!(text(&[0x99, 0x06]), "mode.exec  cs.d, if");
        assert_eq!(text(&[0x99, 0x04]), "mode.exec  if");
        // PWRE: C-state 1.0 (encoded 0, 0xf), hardware.
        assert_eq!(text(&[0x02, 0x22, 0x80, 0x0f]), "pwre       c1.0, hw");
        assert_eq!(text(&[0x02, 0x22, 0x00, 0x21]), "pwre       c3.2");
        // PWRX: last C6 (5), deepest C1 (0), woken by an interrupt.
        assert_eq!(
            text(&[0x02, 0xa2, 0x50, 0x01, 0, 0, 0]),
            "pwrx       int: c6, c1"
        );
        assert_eq!(
            text(&[0x02, 0xa2, 0x00, 0x08, 0, 0, 0]),
            "pwrx       hw: c1, c1"
        );
    }

    /// SKD007 and SKZ84 are worked around only for a CPU that has them.
    #[test]
    fn packet_level_errata_skip_what_they_corrupt() {
        let errata = crate::pt::errata::Errata {
            skd007: true,
            skz84: true,
            ..Default::default()
        };
        // A CYC whose second byte an OVF overwrote.
        let cut_cyc = [0x07, 0x02, 0xf3];
        assert_eq!(
            parse_with(&cut_cyc, &errata),
            Err(PacketError::Erratum {
                name: "SKD007",
                skip: 1
            })
        );
        assert!(parse_with(&cut_cyc, &Default::default()).is_ok());
        // A TMA with reserved bits set.
        let bad_tma = [0x02, 0x73, 0x01, 0x02, 0xff, 0x03, 0xff, 0xff];
        assert!(matches!(parse(&bad_tma), Err(PacketError::Unknown(_))));
        assert_eq!(
            parse_with(&bad_tma, &errata),
            Err(PacketError::Erratum {
                name: "SKZ84",
                skip: 8
            })
        );
        let mut buf = PSB_BYTES.to_vec();
        buf.extend(bad_tma);
        buf.extend([0x02, 0x23]);
        let got: Vec<_> = Packets::with_errata(&buf, errata).map(|(o, _)| o).collect();
        assert_eq!(got, [0, 16, 24]);
    }

    #[test]
    fn parses_trig_with_and_without_its_instruction_count() {
        // TRIG(3, mult): flags 0x20, trigger bits 3.
        assert_eq!(
            parse(&[0xd9, 0x20, 0x03]).unwrap(),
            (
                Packet::Trig {
                    trbv: 3,
                    ip: false,
                    mult: true,
                    icnt: None
                },
                3
            )
        );
        assert_eq!(
            parse(&[0xd9, 0x20, 0x03]).unwrap().0.to_string(),
            "trig       03, mult"
        );
        // IP and ICNTV, with a count of 0x102.
        let (p, n) = parse(&[0xd9, 0xc0, 0x01, 0x02, 0x01]).unwrap();
        assert_eq!(n, 5);
        assert_eq!(p.to_string(), "trig       01, icnt: 102, ip");
        assert_eq!(
            parse(&[0xd9, 0x40, 0x01, 0x02]),
            Err(PacketError::Truncated)
        );
    }

    #[test]
    fn parses_event_trace_packets_at_their_sizes() {
        let (p, n) = parse(&[0x02, 0x53, 0x00, 0xaa, 0xba, 0x0b, 0xf0, 0, 0, 0, 0]).unwrap();
        assert_eq!(n, 11);
        assert_eq!(
            p,
            Packet::Evd {
                kind: 0,
                payload: 0xf00b_baaa
            }
        );
        assert_eq!(
            parse(&[0x02, 0x13, 0x81, 14]).unwrap(),
            (
                Packet::Cfe {
                    ip: true,
                    kind: 1,
                    vector: 14
                },
                4
            )
        );
    }

    #[test]
    fn walks_from_first_psb_and_resyncs() {
        let mut buf = vec![0x19, 0x55]; // mid-packet garbage before the PSB
        buf.extend_from_slice(&PSB_BYTES);
        buf.extend_from_slice(&[0x02, 0x23, 0xad, 0x06]);
        buf.extend_from_slice(&PSB_BYTES);
        buf.push(0x00);
        let got: Vec<_> = Packets::new(&buf).collect();
        assert_eq!(got[0], (2, Ok(Packet::Psb)));
        assert_eq!(got[1], (18, Ok(Packet::PsbEnd)));
        assert_eq!(got[2], (20, Err(PacketError::Unknown(0xad))));
        assert_eq!(got[3], (22, Ok(Packet::Psb)));
        assert_eq!(got[4], (38, Ok(Packet::Pad)));
        assert_eq!(psb_offsets(&buf), vec![2, 22]);
    }

    #[test]
    fn a_psb_after_packets_that_end_in_its_pattern_is_found_where_it_is() {
        // A CYC whose second byte is 02 and a TNT.8 that is 82, then the
        // PSB: the first 16 bytes of 02 82 pairs start two bytes early.
        let mut buf = vec![0x0f, 0x02, 0x82];
        buf.extend_from_slice(&PSB_BYTES);
        buf.extend_from_slice(&[0x02, 0x23]);
        assert_eq!(find_psb(&buf), Some(3));
        assert_eq!(psb_offsets(&buf), vec![3]);
        assert_eq!(parse(&buf).unwrap().1, 2, "a two-byte CYC");
        let got: Vec<_> = Packets::new(&buf).collect();
        assert_eq!(got[..2], [(3, Ok(Packet::Psb)), (19, Ok(Packet::PsbEnd))]);
        // Reading from the run's start syncs at the PSB, not inside it.
        assert_eq!(Packets::new(&buf[1..]).next(), Some((2, Ok(Packet::Psb))));
    }

    #[test]
    fn the_word_scan_finds_every_psb_the_plain_search_finds() {
        // The plain search the scan stands for: every window, in order.
        fn plain(buf: &[u8]) -> Vec<usize> {
            let mut out = Vec::new();
            let mut i = 0;
            while let Some(pos) = buf[i..].windows(16).position(|w| w == PSB_BYTES) {
                let mut at = i + pos;
                while buf.get(at + 16..at + 18) == Some(&PSB_BYTES[..2]) {
                    at += 2;
                }
                out.push(at);
                i = at + 16;
            }
            out
        }
        let mut rng = fastrand::Rng::with_seed(27);
        for _ in 0..2000 {
            let len = rng.usize(0..300);
            // Bytes of the pattern, often, so that near misses abound.
            let mut buf: Vec<u8> = (0..len)
                .map(|_| match rng.u8(0..4) {
                    0 => 0x02,
                    1 => 0x82,
                    _ => rng.u8(..),
                })
                .collect();
            for _ in 0..rng.usize(0..4) {
                if buf.len() >= 16 {
                    let at = rng.usize(0..=buf.len() - 16);
                    buf[at..at + 16].copy_from_slice(&PSB_BYTES);
                }
            }
            assert_eq!(psb_offsets(&buf), plain(&buf), "{buf:02x?}");
        }
    }

    /// `common_len` gives a size exactly where `parse` reads a one-byte
    /// CYC or an IP packet, the same size, and nothing for any other
    /// packet: every first byte, with every length of what follows.
    #[test]
    fn common_len_is_parse_on_its_kinds_and_nothing_else() {
        for b0 in 0..=255u8 {
            for len in 0..=9 {
                let mut buf = vec![0x55u8; len];
                if let Some(b) = buf.first_mut() {
                    *b = b0;
                }
                let parsed = parse(&buf);
                let common = matches!(
                    parsed,
                    Ok((Packet::Cyc(_), 1)) | Ok((Packet::Tip { .. }, _))
                );
                match common_len(&buf) {
                    Some(n) => assert!(
                        common && parsed.as_ref().is_ok_and(|p| p.1 == n),
                        "{buf:02x?}: {n} against {parsed:?}"
                    ),
                    None => assert!(!common, "{buf:02x?}: none against {parsed:?}"),
                }
            }
        }
    }
}
