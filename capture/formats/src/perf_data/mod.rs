//! The perf.data file format: the records and header features that a
//! `perf record -e intel_pt//u` file holds, with a streaming writer and a
//! bounds-checked, zero-copy reader.
//!
//! Layouts follow the kernel's `include/uapi/linux/perf_event.h` and perf's
//! `tools/perf/Documentation/perf.data-file-format.txt`. Only little-endian
//! files are produced and accepted.

mod attr;
mod features;
mod reader;
mod records;
mod writer;

pub use attr::{EventAttr, PerfEventAttr, ATTR_SIZE};
pub use features::{BuildIdEntry, Features};
pub use reader::{PerfDataFile, RecordIter};
pub use records::{AuxtraceInfo, IdIndexEntry, MmapFields, Record, SampleId, TimeConv};
pub use writer::PerfDataWriter;

/// `PERFILE2`, read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PERFILE2");
pub const HEADER_SIZE: u64 = 104;

/// perf_event_attr.type values.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_BREAKPOINT: u32 = 5;
pub const PERF_COUNT_SW_DUMMY: u64 = 9;

/// perf_event_attr.sample_type bits.
pub mod sample {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const REGS_USER: u64 = 1 << 12;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const IDENTIFIER: u64 = 1 << 16;
}

/// perf_event_attr's aux-action bits (Linux 6.13): the AUX event starts
/// paused, or an overflow of a sibling pauses or resumes it.
pub mod aux_action {
    pub const START_PAUSED: u32 = 1 << 0;
    pub const PAUSE: u32 = 1 << 1;
    pub const RESUME: u32 = 1 << 2;
}

/// perf_event_attr flag bits (the bitfield word at offset 40).
pub mod flag {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const EXCLUDE_GUEST: u64 = 1 << 20;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
}

/// perf_event_header.type values.
pub mod kind {
    pub const MMAP: u32 = 1;
    pub const LOST: u32 = 2;
    pub const COMM: u32 = 3;
    pub const EXIT: u32 = 4;
    pub const FORK: u32 = 7;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const AUX: u32 = 11;
    pub const ITRACE_START: u32 = 12;
    pub const SWITCH: u32 = 14;
    pub const SWITCH_CPU_WIDE: u32 = 15;
    pub const FINISHED_ROUND: u32 = 68;
    pub const ID_INDEX: u32 = 69;
    pub const AUXTRACE_INFO: u32 = 70;
    pub const AUXTRACE: u32 = 71;
    pub const TIME_CONV: u32 = 79;
    pub const HEADER_BUILD_ID: u32 = 67;
}

/// perf_event_header.misc bits.
pub mod misc {
    /// The bits that hold a record's cpumode (PERF_RECORD_MISC_CPUMODE_MASK).
    pub const CPUMODE_MASK: u16 = 7;
    /// The cpumode of a record from the kernel (PERF_RECORD_MISC_KERNEL).
    pub const KERNEL: u16 = 1;
    pub const USER: u16 = 2;
    /// An MMAP record of a data (not executable) mapping.
    pub const MMAP_DATA: u16 = 1 << 13;
    pub const COMM_EXEC: u16 = 1 << 13;
    pub const SWITCH_OUT: u16 = 1 << 13;
    pub const SWITCH_OUT_PREEMPT: u16 = 1 << 14;
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    pub const BUILD_ID_SIZE: u16 = 1 << 15;
}

/// PERF_RECORD_AUX flags.
pub mod aux_flag {
    pub const TRUNCATED: u64 = 1;
    pub const OVERWRITE: u64 = 2;
    pub const PARTIAL: u64 = 4;
    pub const COLLISION: u64 = 8;
}

/// What is wrong with a perf.data file, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("file is empty")]
    Empty,
    #[error("not a perf.data file (bad magic at offset 0)")]
    BadMagic,
    #[error("big-endian perf.data files are not supported")]
    BigEndian,
    #[error("truncated: {what} needs bytes {start}..{end} but the file has {len}")]
    Truncated {
        what: &'static str,
        start: u64,
        end: u64,
        len: u64,
    },
    #[error("{what} at offset {offset}: {problem}")]
    Invalid {
        what: &'static str,
        offset: u64,
        problem: String,
    },
}

/// Bounds-checked little-endian reads over a byte slice. Every length comes
/// from the file, so nothing here trusts one.
#[derive(Clone, Copy)]
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
    /// Offset of `data[0]` in the file, for error messages.
    base: u64,
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub(crate) fn new(data: &'a [u8], base: u64) -> Self {
        Bytes { data, base, pos: 0 }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FormatError> {
        if n > self.remaining() {
            return Err(FormatError::Truncated {
                what,
                start: self.offset(),
                end: self.offset() + n as u64,
                len: self.base + self.data.len() as u64,
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, FormatError> {
        Ok(self.take(1, what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }

    /// A NUL-terminated string inside a fixed-size, padded field.
    pub(crate) fn padded_str(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a str, FormatError> {
        let offset = self.offset();
        let raw = self.take(n, what)?;
        cstr(raw, what, offset)
    }
}

pub(crate) fn cstr<'a>(
    raw: &'a [u8],
    what: &'static str,
    offset: u64,
) -> Result<&'a str, FormatError> {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    std::str::from_utf8(&raw[..end]).map_err(|_| FormatError::Invalid {
        what,
        offset,
        problem: "string is not UTF-8".into(),
    })
}

/// Little-endian appends to a byte vector.
pub(crate) trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    /// A NUL-terminated string padded with zeros to a multiple of `align`.
    fn put_padded_str(&mut self, s: &str, align: usize);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_padded_str(&mut self, s: &str, align: usize) {
        let len = padded_len(s.len() + 1, align);
        self.extend_from_slice(s.as_bytes());
        self.resize(self.len() + len - s.len(), 0);
    }
}

pub(crate) fn padded_len(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}
