//! A [`Ring`] stands for the AUX area of an emulated PT unit (a thread's, or
//! the one virtual CPU's) in overwrite (snapshot) mode.
//!
//! The hardware writes into an N-byte ring and wraps, so at the trigger the
//! ring holds the last N bytes written, which may start mid-packet. We keep a
//! buffer of up to 2N bytes and drop the older half when it fills, so a write
//! is an amortized memcpy and no byte is moved twice on average.

#[derive(Debug)]
pub struct Ring {
    size: usize,
    buf: Vec<u8>,
    /// Total bytes ever written (perf's `aux_head`).
    head: u64,
}

impl Ring {
    pub fn new(size: usize) -> Ring {
        assert!(size > 0, "ring size must be positive");
        Ring {
            size,
            buf: Vec::with_capacity(size.min(1 << 20)),
            head: 0,
        }
    }

    pub fn write(&mut self, bytes: &[u8]) {
        self.head += bytes.len() as u64;
        if bytes.len() >= self.size {
            self.buf.clear();
            self.buf
                .extend_from_slice(&bytes[bytes.len() - self.size..]);
            return;
        }
        if self.buf.len() + bytes.len() > 2 * self.size {
            let keep_from = self.buf.len() - (self.size - bytes.len());
            self.buf.drain(..keep_from);
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Total bytes written since the start.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Whether older data has been overwritten.
    pub fn wrapped(&self) -> bool {
        self.head > self.size as u64
    }

    /// The bytes a snapshot takes now: the last `size` bytes written.
    pub fn snapshot(&self) -> &[u8] {
        let n = self.buf.len().min(self.size);
        &self.buf[self.buf.len() - n..]
    }

    /// How full the ring is, 0.0..=1.0.
    pub fn fill(&self) -> f64 {
        self.head.min(self.size as u64) as f64 / self.size as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_last_n_bytes() {
        let mut r = Ring::new(10);
        let all: Vec<u8> = (0..=255).collect();
        let mut written = Vec::new();
        for chunk in all.chunks(3) {
            r.write(chunk);
            written.extend_from_slice(chunk);
            let n = written.len().min(10);
            assert_eq!(r.snapshot(), &written[written.len() - n..]);
        }
        assert_eq!(r.head(), 256);
        assert!(r.wrapped());
        r.write(&all);
        assert_eq!(r.snapshot(), &all[246..]);
    }

    #[test]
    fn small_trace_is_whole() {
        let mut r = Ring::new(100);
        r.write(b"abc");
        assert_eq!(r.snapshot(), b"abc");
        assert!(!r.wrapped());
    }
}
