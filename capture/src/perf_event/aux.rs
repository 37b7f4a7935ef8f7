//! This module takes a snapshot of an overwrite-mode AUX area.
//!
//! In overwrite mode the PT driver writes round the buffer forever and
//! reports `aux_head` as where it writes next (an offset in the buffer;
//! some kernels let it run free, so it is taken modulo the size). Whether
//! the buffer has wrapped is not reported, so it is detected as perf does:
//! the kernel hands out the area zeroed, so any non-zero byte in its last
//! 4 KiB means the hardware has been there; and a head that moved backwards
//! since the last snapshot has wrapped too. Once wrapped, always wrapped.

/// How much of the area's end is checked for a first wrap: its last 512
/// words, as perf checks.
pub(crate) const WRAP_PROBE: usize = 4096;

/// One AUX area's state across snapshots.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuxCursor {
    wrapped: bool,
    last_pos: Option<usize>,
}

/// The trace a snapshot took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AuxSnapshot {
    /// The newest bytes, oldest first.
    pub data: Vec<u8>,
    /// Whether older trace was overwritten (the start is mid-stream).
    pub wrapped: bool,
    /// A position for the end of `data` in the stream the area has held,
    /// never less than `data.len()`: the offset for perf's AUX records.
    pub end: u64,
}

/// Whether a zero-initialised buffer has been written to its end.
pub(crate) fn first_wrap(buf: &[u8]) -> bool {
    let probe = WRAP_PROBE.min(buf.len());
    buf[buf.len() - probe..].iter().any(|&b| b != 0)
}

impl AuxCursor {
    pub(crate) fn new() -> AuxCursor {
        AuxCursor::default()
    }

    /// Copies the newest `max` bytes of `buf` whose write position is
    /// `head`. Call with the event disabled, so the bytes hold still.
    pub(crate) fn snapshot(&mut self, buf: &[u8], head: u64, max: usize) -> AuxSnapshot {
        let len = buf.len();
        if len == 0 {
            return AuxSnapshot {
                data: Vec::new(),
                wrapped: false,
                end: 0,
            };
        }
        let pos = (head % len as u64) as usize;
        if !self.wrapped && (self.last_pos.is_some_and(|p| pos < p) || first_wrap(buf)) {
            self.wrapped = true;
        }
        self.last_pos = Some(pos);
        // Oldest first: after a wrap, what follows the head is older.
        let (older, newer) = if self.wrapped {
            (&buf[pos..], &buf[..pos])
        } else {
            (&buf[..0], &buf[..pos])
        };
        let total = older.len() + newer.len();
        let keep = total.min(max);
        let mut data = Vec::with_capacity(keep);
        let skip = total - keep;
        if skip < older.len() {
            data.extend_from_slice(&older[skip..]);
            data.extend_from_slice(newer);
        } else {
            data.extend_from_slice(&newer[skip - older.len()..]);
        }
        AuxSnapshot {
            data,
            wrapped: self.wrapped || skip > 0,
            end: pos as u64 + if self.wrapped { len as u64 } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zeroed area of `len` bytes after the hardware wrote `written`
    /// bytes of a counting stream (1, 2, 3, ... never 0).
    fn area(len: usize, written: usize) -> (Vec<u8>, u64) {
        let mut buf = vec![0u8; len];
        for i in 0..written {
            buf[i % len] = (i % 255) as u8 + 1;
        }
        (buf, (written % len) as u64)
    }

    const AREA: usize = 1 << 16;

    fn stream(from: usize, to: usize) -> Vec<u8> {
        (from..to).map(|i| (i % 255) as u8 + 1).collect()
    }

    #[test]
    fn without_wrap_takes_what_was_written() {
        let (buf, head) = area(AREA, 1000);
        let snap = AuxCursor::new().snapshot(&buf, head, 1 << 20);
        assert_eq!(snap.data, stream(0, 1000));
        assert!(!snap.wrapped);
        assert_eq!(snap.end, 1000);
        // A smaller snapshot keeps the newest bytes.
        let snap = AuxCursor::new().snapshot(&buf, head, 100);
        assert_eq!(snap.data, stream(900, 1000));
        assert!(snap.wrapped);
    }

    #[test]
    fn after_wrap_returns_the_newest_in_order() {
        let (buf, head) = area(AREA, AREA * 3 + 700);
        let snap = AuxCursor::new().snapshot(&buf, head, 1 << 20);
        assert_eq!(snap.data, stream(AREA * 2 + 700, AREA * 3 + 700));
        assert!(snap.wrapped);
        assert!(snap.end >= snap.data.len() as u64);
        let snap = AuxCursor::new().snapshot(&buf, head, 1000);
        assert_eq!(snap.data, stream(AREA * 3 - 300, AREA * 3 + 700));
    }

    #[test]
    fn wrap_is_seen_from_a_head_that_moved_back() {
        // The end of the area is still zero, yet the head went backwards
        // between two snapshots.
        let mut cursor = AuxCursor::new();
        let (buf, head) = area(AREA, 3000);
        assert!(!cursor.snapshot(&buf, head, AREA).wrapped);
        let mut buf2 = buf.clone();
        for b in &mut buf2[..200] {
            *b = 7;
        }
        let snap = cursor.snapshot(&buf2, 200, AREA);
        assert!(snap.wrapped);
        assert_eq!(snap.data.len(), AREA);
        assert_eq!(&snap.data[snap.data.len() - 200..], &[7u8; 200][..]);
    }

    #[test]
    fn free_running_head_is_taken_modulo_the_size() {
        let (buf, _) = area(AREA, AREA + 10);
        let a = AuxCursor::new().snapshot(&buf, (AREA + 10) as u64, 64);
        let b = AuxCursor::new().snapshot(&buf, 10, 64);
        assert_eq!(a, b);
        assert_eq!(a.data, stream(AREA + 10 - 64, AREA + 10));
    }
}
