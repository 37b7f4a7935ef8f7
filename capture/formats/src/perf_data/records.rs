//! The records of the data section that matter for Intel PT: sideband
//! (MMAP2, COMM, FORK/EXIT, ITRACE_START, SWITCH, AUX) and the user records
//! perf synthesizes (AUXTRACE_INFO, AUXTRACE, TIME_CONV, ID_INDEX).

use super::{cstr, kind, misc, padded_len, sample, Bytes, FormatError, Put};

/// The `sample_id_all` trailer of a non-sample record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub id: u64,
    pub cpu: u32,
}

impl SampleId {
    pub(crate) fn encode(&self, sample_type: u64, out: &mut Vec<u8>) {
        if sample_type & sample::TID != 0 {
            out.put_u32(self.pid);
            out.put_u32(self.tid);
        }
        if sample_type & sample::TIME != 0 {
            out.put_u64(self.time);
        }
        if sample_type & sample::ID != 0 {
            out.put_u64(self.id);
        }
        if sample_type & sample::STREAM_ID != 0 {
            out.put_u64(self.id);
        }
        if sample_type & sample::CPU != 0 {
            out.put_u32(self.cpu);
            out.put_u32(0);
        }
        if sample_type & sample::IDENTIFIER != 0 {
            out.put_u64(self.id);
        }
    }

    pub(crate) fn size(sample_type: u64) -> usize {
        [
            sample::TID,
            sample::TIME,
            sample::ID,
            sample::STREAM_ID,
            sample::CPU,
            sample::IDENTIFIER,
        ]
        .iter()
        .filter(|&&b| sample_type & b != 0)
        .count()
            * 8
    }

    pub(crate) fn decode(
        raw: &[u8],
        sample_type: u64,
        offset: u64,
    ) -> Result<SampleId, FormatError> {
        let mut b = Bytes::new(raw, offset);
        let w = "sample id";
        let mut s = SampleId::default();
        if sample_type & sample::TID != 0 {
            s.pid = b.u32(w)?;
            s.tid = b.u32(w)?;
        }
        if sample_type & sample::TIME != 0 {
            s.time = b.u64(w)?;
        }
        if sample_type & sample::ID != 0 {
            s.id = b.u64(w)?;
        }
        if sample_type & sample::STREAM_ID != 0 {
            b.u64(w)?;
        }
        if sample_type & sample::CPU != 0 {
            s.cpu = b.u32(w)?;
            b.u32(w)?;
        }
        if sample_type & sample::IDENTIFIER != 0 {
            s.id = b.u64(w)?;
        }
        Ok(s)
    }
}

/// PERF_RECORD_AUXTRACE_INFO: the PMU's decoding parameters (`priv` words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxtraceInfo {
    /// PERF_AUXTRACE_* (1 = Intel PT).
    pub kind: u32,
    pub words: Vec<u64>,
}

/// What MMAP and MMAP2 records share: which thread mapped which piece
/// (`pgoff`, `len`) of which file at `addr`. Both records begin with these
/// numbers, and whoever reads mappings out of a file reads them here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmapFields<'r> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub filename: &'r str,
    pub sample_id: &'r SampleId,
}

/// A data-section record. Borrowed fields point into the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// PERF_RECORD_MMAP: a mapping without device or protection fields.
    /// perf synthesizes the kernel (`[kernel.kallsyms]_text`) and its
    /// modules this way, with pid -1 and a kernel cpumode in `misc`.
    Mmap {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        /// The header's misc bits: the cpumode, and [`misc::MMAP_DATA`]
        /// for a data mapping.
        misc: u16,
        filename: &'a str,
        sample_id: SampleId,
    },
    Mmap2 {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        /// Device and inode, or a build id when perf recorded one.
        build_id: Option<Vec<u8>>,
        maj: u32,
        min: u32,
        ino: u64,
        prot: u32,
        flags: u32,
        filename: &'a str,
        sample_id: SampleId,
    },
    Comm {
        pid: u32,
        tid: u32,
        exec: bool,
        comm: &'a str,
        sample_id: SampleId,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
        sample_id: SampleId,
    },
    Exit {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
        sample_id: SampleId,
    },
    ItraceStart {
        pid: u32,
        tid: u32,
        sample_id: SampleId,
    },
    Switch {
        out: bool,
        preempt: bool,
        sample_id: SampleId,
    },
    /// A context switch on a CPU-wide event: who comes in (on a switch-out)
    /// or who went out (on a switch-in).
    SwitchCpuWide {
        out: bool,
        preempt: bool,
        next_prev_pid: u32,
        next_prev_tid: u32,
        sample_id: SampleId,
    },
    Aux {
        offset: u64,
        size: u64,
        flags: u64,
        sample_id: SampleId,
    },
    Lost {
        id: u64,
        lost: u64,
        sample_id: SampleId,
    },
    FinishedRound,
    IdIndex(Vec<IdIndexEntry>),
    AuxtraceInfo(AuxtraceInfo),
    Auxtrace {
        offset: u64,
        reference: u64,
        idx: u32,
        tid: u32,
        cpu: u32,
        data: &'a [u8],
    },
    TimeConv(TimeConv),
    /// Anything else, kept raw (header type, misc, body after the header).
    Other {
        kind: u32,
        misc: u16,
        body: &'a [u8],
    },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdIndexEntry {
    pub id: u64,
    pub idx: u64,
    pub cpu: u64,
    pub tid: u64,
}

/// PERF_RECORD_TIME_CONV: the TSC to perf-time conversion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeConv {
    pub time_shift: u64,
    pub time_mult: u64,
    pub time_zero: u64,
    pub time_cycles: u64,
    pub time_mask: u64,
    pub cap_user_time_zero: bool,
    pub cap_user_time_short: bool,
}

impl TimeConv {
    /// perf's `tsc_to_perf_time`.
    #[inline]
    pub fn tsc_to_perf_time(&self, tsc: u64) -> u64 {
        let mut cyc = tsc;
        if self.cap_user_time_short {
            cyc = self.time_cycles + ((cyc.wrapping_sub(self.time_cycles)) & self.time_mask);
        }
        let shift = self.time_shift.min(63);
        let quot = cyc >> shift;
        let rem = cyc & ((1u64 << shift) - 1);
        self.time_zero
            .wrapping_add(quot.wrapping_mul(self.time_mult))
            .wrapping_add(rem.wrapping_mul(self.time_mult) >> shift)
    }
}

const HEADER: usize = 8;

impl Record<'_> {
    /// Encodes the record with its header. For AUXTRACE the trace bytes
    /// follow the fixed part and are padded to 8 bytes; they are not counted
    /// in the header's size, as perf writes them.
    pub(crate) fn encode(&self, sample_type: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + HEADER, 0);
        // MMAP and MMAP2 begin alike; each writes the rest below.
        if let Some(m) = self.mmap_fields() {
            out.put_u32(m.pid);
            out.put_u32(m.tid);
            out.put_u64(m.addr);
            out.put_u64(m.len);
            out.put_u64(m.pgoff);
        }
        let (kind, misc_bits, with_id) = match self {
            Record::Mmap {
                misc,
                filename,
                sample_id,
                ..
            } => {
                out.put_padded_str(filename, 8);
                (kind::MMAP, *misc, Some(sample_id))
            }
            Record::Mmap2 {
                build_id,
                maj,
                min,
                ino,
                prot,
                flags,
                filename,
                sample_id,
                ..
            } => {
                let mut m = misc::USER;
                match build_id {
                    Some(id) => {
                        m |= misc::MMAP_BUILD_ID;
                        let n = id.len().min(20);
                        out.put_u8(n as u8);
                        out.put_u8(0);
                        out.put_u16(0);
                        let mut buf = [0u8; 20];
                        buf[..n].copy_from_slice(&id[..n]);
                        out.extend_from_slice(&buf);
                    }
                    None => {
                        out.put_u32(*maj);
                        out.put_u32(*min);
                        out.put_u64(*ino);
                        out.put_u64(0);
                    }
                }
                out.put_u32(*prot);
                out.put_u32(*flags);
                out.put_padded_str(filename, 8);
                (kind::MMAP2, m, Some(sample_id))
            }
            Record::Comm {
                pid,
                tid,
                exec,
                comm,
                sample_id,
            } => {
                out.put_u32(*pid);
                out.put_u32(*tid);
                out.put_padded_str(comm, 8);
                let m = if *exec {
                    misc::USER | misc::COMM_EXEC
                } else {
                    misc::USER
                };
                (kind::COMM, m, Some(sample_id))
            }
            Record::Fork {
                pid,
                ppid,
                tid,
                ptid,
                time,
                sample_id,
            }
            | Record::Exit {
                pid,
                ppid,
                tid,
                ptid,
                time,
                sample_id,
            } => {
                out.put_u32(*pid);
                out.put_u32(*ppid);
                out.put_u32(*tid);
                out.put_u32(*ptid);
                out.put_u64(*time);
                let k = if matches!(self, Record::Fork { .. }) {
                    kind::FORK
                } else {
                    kind::EXIT
                };
                (k, 0, Some(sample_id))
            }
            Record::ItraceStart {
                pid,
                tid,
                sample_id,
            } => {
                out.put_u32(*pid);
                out.put_u32(*tid);
                (kind::ITRACE_START, 0, Some(sample_id))
            }
            Record::Switch {
                out: o,
                preempt,
                sample_id,
            } => (kind::SWITCH, switch_misc(*o, *preempt), Some(sample_id)),
            Record::SwitchCpuWide {
                out: o,
                preempt,
                next_prev_pid,
                next_prev_tid,
                sample_id,
            } => {
                out.put_u32(*next_prev_pid);
                out.put_u32(*next_prev_tid);
                (
                    kind::SWITCH_CPU_WIDE,
                    switch_misc(*o, *preempt),
                    Some(sample_id),
                )
            }
            Record::Aux {
                offset,
                size,
                flags,
                sample_id,
            } => {
                out.put_u64(*offset);
                out.put_u64(*size);
                out.put_u64(*flags);
                (kind::AUX, 0, Some(sample_id))
            }
            Record::Lost {
                id,
                lost,
                sample_id,
            } => {
                out.put_u64(*id);
                out.put_u64(*lost);
                (kind::LOST, 0, Some(sample_id))
            }
            Record::FinishedRound => (kind::FINISHED_ROUND, 0, None),
            Record::IdIndex(entries) => {
                out.put_u64(entries.len() as u64);
                for e in entries {
                    out.put_u64(e.id);
                    out.put_u64(e.idx);
                    out.put_u64(e.cpu);
                    out.put_u64(e.tid);
                }
                (kind::ID_INDEX, 0, None)
            }
            Record::AuxtraceInfo(info) => {
                out.put_u32(info.kind);
                out.put_u32(0);
                for w in &info.words {
                    out.put_u64(*w);
                }
                (kind::AUXTRACE_INFO, 0, None)
            }
            Record::Auxtrace {
                offset,
                reference,
                idx,
                tid,
                cpu,
                data,
            } => {
                let padded = padded_len(data.len(), 8);
                out.put_u64(padded as u64);
                out.put_u64(*offset);
                out.put_u64(*reference);
                out.put_u32(*idx);
                out.put_u32(*tid);
                out.put_u32(*cpu);
                out.put_u32(0);
                let fixed = out.len() - start;
                write_header(out, start, kind::AUXTRACE, 0, fixed);
                out.extend_from_slice(data);
                out.resize(out.len() + padded - data.len(), 0);
                return;
            }
            Record::TimeConv(t) => {
                out.put_u64(t.time_shift);
                out.put_u64(t.time_mult);
                out.put_u64(t.time_zero);
                out.put_u64(t.time_cycles);
                out.put_u64(t.time_mask);
                out.put_u8(t.cap_user_time_zero as u8);
                out.put_u8(t.cap_user_time_short as u8);
                out.extend_from_slice(&[0; 6]);
                (kind::TIME_CONV, 0, None)
            }
            Record::Other { kind, misc, body } => {
                out.extend_from_slice(body);
                (*kind, *misc, None)
            }
        };
        if let Some(id) = with_id {
            id.encode(sample_type, out);
        }
        let size = out.len() - start;
        write_header(out, start, kind, misc_bits, size);
    }

    /// Decodes one record whose header says `kind`/`misc`; `body` is what
    /// follows the 8-byte header, `tail` what follows the record (for the
    /// AUXTRACE payload). Returns the record and how many bytes of `tail`
    /// it consumed.
    pub fn decode<'a>(
        kind_: u32,
        misc_: u16,
        body: &'a [u8],
        tail: &'a [u8],
        sample_type: u64,
        offset: u64,
    ) -> Result<(Record<'a>, usize), FormatError> {
        let mut b = Bytes::new(body, offset + HEADER as u64);
        let id_len = SampleId::size(sample_type);
        let trailer = |b: &Bytes<'a>| -> Result<SampleId, FormatError> {
            if b.remaining() >= id_len && id_len > 0 {
                let at = body.len() - id_len;
                SampleId::decode(&body[at..], sample_type, offset + (HEADER + at) as u64)
            } else {
                Ok(SampleId::default())
            }
        };
        let rec = match kind_ {
            kind::MMAP => {
                let w = "MMAP record";
                let (pid, tid, addr, len, pgoff) = mapping_start(&mut b, w)?;
                let filename = name_before_trailer(&mut b, id_len, w)?;
                Record::Mmap {
                    pid,
                    tid,
                    addr,
                    len,
                    pgoff,
                    misc: misc_,
                    filename,
                    sample_id: trailer(&b)?,
                }
            }
            kind::MMAP2 => {
                let w = "MMAP2 record";
                let (pid, tid, addr, len, pgoff) = mapping_start(&mut b, w)?;
                let ids = b.take(24, w)?;
                let (build_id, maj, min, ino) = if misc_ & misc::MMAP_BUILD_ID != 0 {
                    let n = (ids[0] as usize).min(20);
                    (Some(ids[4..4 + n].to_vec()), 0, 0, 0)
                } else {
                    let le32 = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap());
                    let ino = u64::from_le_bytes(ids[8..16].try_into().unwrap());
                    (None, le32(&ids[0..4]), le32(&ids[4..8]), ino)
                };
                let prot = b.u32(w)?;
                let flags = b.u32(w)?;
                let filename = name_before_trailer(&mut b, id_len, w)?;
                Record::Mmap2 {
                    pid,
                    tid,
                    addr,
                    len,
                    pgoff,
                    build_id,
                    maj,
                    min,
                    ino,
                    prot,
                    flags,
                    filename,
                    sample_id: trailer(&b)?,
                }
            }
            kind::COMM => {
                let w = "COMM record";
                let pid = b.u32(w)?;
                let tid = b.u32(w)?;
                let comm = name_before_trailer(&mut b, id_len, w)?;
                Record::Comm {
                    pid,
                    tid,
                    exec: misc_ & misc::COMM_EXEC != 0,
                    comm,
                    sample_id: trailer(&b)?,
                }
            }
            kind::FORK | kind::EXIT => {
                let w = "FORK/EXIT record";
                let (pid, ppid, tid, ptid, time) =
                    (b.u32(w)?, b.u32(w)?, b.u32(w)?, b.u32(w)?, b.u64(w)?);
                let sample_id = trailer(&b)?;
                if kind_ == kind::FORK {
                    Record::Fork {
                        pid,
                        ppid,
                        tid,
                        ptid,
                        time,
                        sample_id,
                    }
                } else {
                    Record::Exit {
                        pid,
                        ppid,
                        tid,
                        ptid,
                        time,
                        sample_id,
                    }
                }
            }
            kind::ITRACE_START => {
                let w = "ITRACE_START record";
                Record::ItraceStart {
                    pid: b.u32(w)?,
                    tid: b.u32(w)?,
                    sample_id: trailer(&b)?,
                }
            }
            kind::SWITCH => Record::Switch {
                out: misc_ & misc::SWITCH_OUT != 0,
                preempt: misc_ & misc::SWITCH_OUT_PREEMPT != 0,
                sample_id: trailer(&b)?,
            },
            kind::SWITCH_CPU_WIDE => {
                let w = "SWITCH_CPU_WIDE record";
                Record::SwitchCpuWide {
                    out: misc_ & misc::SWITCH_OUT != 0,
                    preempt: misc_ & misc::SWITCH_OUT_PREEMPT != 0,
                    next_prev_pid: b.u32(w)?,
                    next_prev_tid: b.u32(w)?,
                    sample_id: trailer(&b)?,
                }
            }
            kind::AUX => {
                let w = "AUX record";
                Record::Aux {
                    offset: b.u64(w)?,
                    size: b.u64(w)?,
                    flags: b.u64(w)?,
                    sample_id: trailer(&b)?,
                }
            }
            kind::LOST => {
                let w = "LOST record";
                Record::Lost {
                    id: b.u64(w)?,
                    lost: b.u64(w)?,
                    sample_id: trailer(&b)?,
                }
            }
            kind::FINISHED_ROUND => Record::FinishedRound,
            kind::ID_INDEX => {
                let w = "ID_INDEX record";
                let nr = b.u64(w)?;
                if nr > (b.remaining() / 32) as u64 {
                    return Err(FormatError::Invalid {
                        what: w,
                        offset,
                        problem: format!("{nr} entries do not fit in {} bytes", b.remaining()),
                    });
                }
                let mut entries = Vec::with_capacity(nr as usize);
                for _ in 0..nr {
                    entries.push(IdIndexEntry {
                        id: b.u64(w)?,
                        idx: b.u64(w)?,
                        cpu: b.u64(w)?,
                        tid: b.u64(w)?,
                    });
                }
                Record::IdIndex(entries)
            }
            kind::AUXTRACE_INFO => {
                let w = "AUXTRACE_INFO record";
                let k = b.u32(w)?;
                b.u32(w)?;
                let mut words = Vec::with_capacity(b.remaining() / 8);
                while b.remaining() >= 8 {
                    words.push(b.u64(w)?);
                }
                Record::AuxtraceInfo(AuxtraceInfo { kind: k, words })
            }
            kind::AUXTRACE => {
                let w = "AUXTRACE record";
                let size = b.u64(w)?;
                let off = b.u64(w)?;
                let reference = b.u64(w)?;
                let idx = b.u32(w)?;
                let tid = b.u32(w)?;
                let cpu = b.u32(w)?;
                if size > tail.len() as u64 {
                    return Err(FormatError::Truncated {
                        what: "AUXTRACE data",
                        start: offset + body.len() as u64 + HEADER as u64,
                        end: offset + body.len() as u64 + HEADER as u64 + size,
                        len: offset + (body.len() + HEADER + tail.len()) as u64,
                    });
                }
                let data = &tail[..size as usize];
                return Ok((
                    Record::Auxtrace {
                        offset: off,
                        reference,
                        idx,
                        tid,
                        cpu,
                        data,
                    },
                    size as usize,
                ));
            }
            kind::TIME_CONV => {
                let w = "TIME_CONV record";
                let mut t = TimeConv {
                    time_shift: b.u64(w)?,
                    time_mult: b.u64(w)?,
                    time_zero: b.u64(w)?,
                    ..Default::default()
                };
                if b.remaining() >= 24 {
                    t.time_cycles = b.u64(w)?;
                    t.time_mask = b.u64(w)?;
                    t.cap_user_time_zero = b.u8(w)? != 0;
                    t.cap_user_time_short = b.u8(w)? != 0;
                }
                Record::TimeConv(t)
            }
            _ => Record::Other {
                kind: kind_,
                misc: misc_,
                body,
            },
        };
        Ok((rec, 0))
    }

    /// The fields of the mapping an MMAP or MMAP2 record describes; `None`
    /// for any other record.
    pub fn mmap_fields(&self) -> Option<MmapFields<'_>> {
        match *self {
            Record::Mmap {
                pid,
                tid,
                addr,
                len,
                pgoff,
                filename,
                ref sample_id,
                ..
            }
            | Record::Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                filename,
                ref sample_id,
                ..
            } => Some(MmapFields {
                pid,
                tid,
                addr,
                len,
                pgoff,
                filename,
                sample_id,
            }),
            _ => None,
        }
    }

    /// The sample-id trailer, where the record has one.
    pub fn sample_id(&self) -> Option<&SampleId> {
        match self {
            Record::Mmap { sample_id, .. }
            | Record::Mmap2 { sample_id, .. }
            | Record::Comm { sample_id, .. }
            | Record::Fork { sample_id, .. }
            | Record::Exit { sample_id, .. }
            | Record::ItraceStart { sample_id, .. }
            | Record::Switch { sample_id, .. }
            | Record::SwitchCpuWide { sample_id, .. }
            | Record::Aux { sample_id, .. }
            | Record::Lost { sample_id, .. } => Some(sample_id),
            _ => None,
        }
    }
}

/// The numbers MMAP and MMAP2 records begin with: pid, tid, addr, len and
/// pgoff (see [`MmapFields`]).
fn mapping_start(
    b: &mut Bytes<'_>,
    what: &'static str,
) -> Result<(u32, u32, u64, u64, u64), FormatError> {
    Ok((
        b.u32(what)?,
        b.u32(what)?,
        b.u64(what)?,
        b.u64(what)?,
        b.u64(what)?,
    ))
}

/// The NUL-padded name that ends an MMAP, MMAP2 or COMM record's body,
/// before its `id_len`-byte sample-id trailer.
fn name_before_trailer<'a>(
    b: &mut Bytes<'a>,
    id_len: usize,
    what: &'static str,
) -> Result<&'a str, FormatError> {
    let name_len = b.remaining().saturating_sub(id_len);
    let name_off = b.offset();
    cstr(b.take(name_len, what)?, what, name_off)
}

/// The header misc bits of a SWITCH or SWITCH_CPU_WIDE record.
fn switch_misc(out: bool, preempt: bool) -> u16 {
    let mut m = 0;
    if out {
        m |= misc::SWITCH_OUT;
    }
    if preempt {
        m |= misc::SWITCH_OUT_PREEMPT;
    }
    m
}

fn write_header(out: &mut [u8], start: usize, kind: u32, misc: u16, size: usize) {
    out[start..start + 4].copy_from_slice(&kind.to_le_bytes());
    out[start + 4..start + 6].copy_from_slice(&misc.to_le_bytes());
    out[start + 6..start + 8].copy_from_slice(&(size as u16).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rec` encoded with its header and decoded again.
    fn round_trip<'a>(rec: &Record<'_>, sample_type: u64, buf: &'a mut Vec<u8>) -> Record<'a> {
        rec.encode(sample_type, buf);
        let kind_ = u32::from_le_bytes(buf[0..4].try_into().unwrap());
        let misc_ = u16::from_le_bytes(buf[4..6].try_into().unwrap());
        let size = u16::from_le_bytes(buf[6..8].try_into().unwrap()) as usize;
        assert_eq!(size, buf.len());
        Record::decode(kind_, misc_, &buf[HEADER..], &[], sample_type, 0)
            .unwrap()
            .0
    }

    #[test]
    fn mapping_records_round_trip_and_share_their_fields() {
        let sample_type = sample::TID | sample::TIME;
        let sample_id = SampleId {
            pid: 7,
            tid: 8,
            time: 99,
            ..SampleId::default()
        };
        let mmap = Record::Mmap {
            pid: 7,
            tid: 8,
            addr: 0x40_0000,
            len: 0x1000,
            pgoff: 0x2000,
            misc: misc::KERNEL,
            filename: "[kernel.kallsyms]_text",
            sample_id,
        };
        let mmap2 = |build_id: Option<Vec<u8>>, (maj, min, ino)| Record::Mmap2 {
            pid: 7,
            tid: 8,
            addr: 0x40_0000,
            len: 0x1000,
            pgoff: 0x2000,
            build_id,
            maj,
            min,
            ino,
            prot: 5,
            flags: 2,
            filename: "/bin/prog",
            sample_id,
        };
        let comm = Record::Comm {
            pid: 7,
            tid: 8,
            exec: true,
            comm: "prog",
            sample_id,
        };
        for rec in [
            mmap.clone(),
            mmap2(Some(vec![0xab; 20]), (0, 0, 0)),
            mmap2(None, (8, 1, 1234)),
            comm.clone(),
        ] {
            let mut buf = Vec::new();
            assert_eq!(round_trip(&rec, sample_type, &mut buf), rec);
        }
        let want = MmapFields {
            pid: 7,
            tid: 8,
            addr: 0x40_0000,
            len: 0x1000,
            pgoff: 0x2000,
            filename: "[kernel.kallsyms]_text",
            sample_id: &sample_id,
        };
        assert_eq!(mmap.mmap_fields(), Some(want));
        assert_eq!(
            mmap2(None, (0, 0, 0)).mmap_fields(),
            Some(MmapFields {
                filename: "/bin/prog",
                ..want
            })
        );
        assert_eq!(comm.mmap_fields(), None);
    }
}
