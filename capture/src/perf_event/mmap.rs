//! This module maps the buffers of a perf event: the data ring (records) and
//! the AUX area (the PT trace). The kernel writes both while we read, so
//! every access to the control page goes through atomics with the barriers
//! the perf ABI asks for: an acquire load of `data_head`/`aux_head` before
//! reading data, a release store of `data_tail` after. Mapping memory and
//! reading it through raw pointers is why this is one of the modules allowed
//! to hold `unsafe`.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use perf_event_open_sys::bindings::perf_event_mmap_page;

use super::sys::Event;
use ptscope_formats::perf_data::TimeConv;

pub(crate) fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |v| v as usize)
}

/// Offsets of the control-page fields we touch.
mod field {
    use super::perf_event_mmap_page as P;
    use std::mem::offset_of;
    pub(super) const DATA_HEAD: usize = offset_of!(P, data_head);
    pub(super) const DATA_TAIL: usize = offset_of!(P, data_tail);
    pub(super) const DATA_OFFSET: usize = offset_of!(P, data_offset);
    pub(super) const DATA_SIZE: usize = offset_of!(P, data_size);
    pub(super) const AUX_HEAD: usize = offset_of!(P, aux_head);
    pub(super) const AUX_OFFSET: usize = offset_of!(P, aux_offset);
    pub(super) const AUX_SIZE: usize = offset_of!(P, aux_size);
}

/// A mapping we own.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(event: &Event, len: usize, offset: i64, write: bool) -> Result<Mapping, Errno> {
        let prot = if write {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        let size = std::num::NonZeroUsize::new(len).ok_or(Errno::EINVAL)?;
        // SAFETY: a fresh shared mapping of a perf event fd at a kernel-chosen
        // address; the kernel validates length and offset.
        let base = unsafe { mmap(None, size, prot, MapFlags::MAP_SHARED, event, offset)? };
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range and hand out no references
        // that outlive `self`.
        let _ = unsafe { munmap(self.base.cast(), self.len) };
    }
}

// SAFETY: the mapping is plain shared memory; all concurrent access goes
// through atomics or copies taken while the producer is stopped.
unsafe impl Send for Mapping {}
// SAFETY: shared references only load control words atomically or read
// data; the one writer of `data_tail` is whoever drains, and each ring has
// one drainer (the sideband collector or the breakpoint poller).
unsafe impl Sync for Mapping {}

/// The control page plus data ring of one event.
pub(crate) struct DataRing {
    map: Mapping,
    data_offset: usize,
    data_size: usize,
}

impl DataRing {
    /// Maps one control page and `pages` data pages (a power of two).
    pub(crate) fn map(event: &Event, pages: usize) -> Result<DataRing, Errno> {
        if !pages.is_power_of_two() {
            return Err(Errno::EINVAL);
        }
        let len = (pages + 1) * page_size();
        let map = Mapping::new(event, len, 0, true)?;
        let mut ring = DataRing {
            map,
            data_offset: page_size(),
            data_size: pages * page_size(),
        };
        // Kernels since 4.1 say where the data is; older ones put it after
        // the control page.
        let (off, size) = (ring.load(field::DATA_OFFSET), ring.load(field::DATA_SIZE));
        if size != 0 && off as usize + size as usize <= len {
            ring.data_offset = off as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is one of the control page's u64 fields, inside the
        // mapping and 8-aligned (the page is page-aligned).
        unsafe { &*self.map.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn load(&self, offset: usize) -> u64 {
        self.word(offset).load(Ordering::Acquire)
    }

    fn page(&self) -> perf_event_mmap_page {
        // SAFETY: the control page is mapped and readable; a volatile copy
        // of it is a snapshot of plain integers.
        unsafe { std::ptr::read_volatile(self.map.base.as_ptr().cast::<perf_event_mmap_page>()) }
    }

    /// The TSC to perf-time conversion the kernel publishes for this event.
    pub(crate) fn time_conv(&self) -> TimeConv {
        let page = self.page();
        // SAFETY: reading the capabilities word of the union; both views
        // are the same u64.
        let caps = unsafe { page.__bindgen_anon_1.capabilities };
        TimeConv {
            time_shift: page.time_shift as u64,
            time_mult: page.time_mult as u64,
            time_zero: page.time_zero,
            time_cycles: page.time_cycles,
            time_mask: page.time_mask,
            // cap_user_time_zero is bit 4, cap_user_time_short bit 5.
            cap_user_time_zero: caps & (1 << 4) != 0,
            cap_user_time_short: caps & (1 << 5) != 0,
        }
    }

    /// Appends every byte the kernel wrote since the last call to `out`
    /// and hands the space back. Returns how many bytes came.
    pub(crate) fn drain(&self, out: &mut Vec<u8>) -> usize {
        let head = self.load(field::DATA_HEAD);
        let tail = self.word(field::DATA_TAIL).load(Ordering::Relaxed);
        // SAFETY: the data area lies within the mapping (checked in `map`).
        let data = unsafe {
            std::slice::from_raw_parts(self.map.base.as_ptr().add(self.data_offset), self.data_size)
        };
        let n = copy_ring(data, tail, head, out);
        self.word(field::DATA_TAIL)
            .store(tail.wrapping_add(n as u64), Ordering::Release);
        n
    }

    /// Whether records are waiting.
    pub(crate) fn pending(&self) -> bool {
        self.load(field::DATA_HEAD) != self.word(field::DATA_TAIL).load(Ordering::Relaxed)
    }
}

/// Copies ring bytes `[tail, head)` (free-running counters) out of `data`,
/// in order, at most one ring's worth. Returns how many bytes were taken.
pub(crate) fn copy_ring(data: &[u8], tail: u64, head: u64, out: &mut Vec<u8>) -> usize {
    let size = data.len();
    if size == 0 {
        return 0;
    }
    let avail = head.wrapping_sub(tail).min(size as u64) as usize;
    let start = (tail % size as u64) as usize;
    let first = avail.min(size - start);
    out.extend_from_slice(&data[start..start + first]);
    out.extend_from_slice(&data[..avail - first]);
    avail
}

/// The AUX area of a PT event. Mapped read-only, which puts the kernel's
/// PT driver in overwrite (snapshot) mode: it keeps writing round the
/// buffer and never waits for us.
pub(crate) struct AuxArea {
    map: Mapping,
}

impl AuxArea {
    /// Maps `size` bytes (a power-of-two number of pages) of AUX after the
    /// data ring of `ring`, read-only for overwrite mode.
    pub(crate) fn map(event: &Event, ring: &DataRing, size: usize) -> Result<AuxArea, Errno> {
        if size < page_size() || !(size / page_size()).is_power_of_two() {
            return Err(Errno::EINVAL);
        }
        let offset = ring.map.len;
        ring.word(field::AUX_OFFSET)
            .store(offset as u64, Ordering::SeqCst);
        ring.word(field::AUX_SIZE)
            .store(size as u64, Ordering::SeqCst);
        let map = Mapping::new(event, size, offset as i64, false)?;
        Ok(AuxArea { map })
    }

    /// The bytes of the area. Read them only while the event is disabled,
    /// or accept that the hardware may be overwriting the oldest ones.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the area is mapped readable for `len` bytes while `self` lives.
        unsafe { std::slice::from_raw_parts(self.map.base.as_ptr(), self.map.len) }
    }
}

/// `aux_head` of `ring`: in overwrite mode, where the hardware writes next.
pub(crate) fn aux_head(ring: &DataRing) -> u64 {
    ring.load(field::AUX_HEAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_copy_handles_wrap() {
        let data: Vec<u8> = (0..16).collect();
        let mut out = Vec::new();
        assert_eq!(copy_ring(&data, 4, 10, &mut out), 6);
        assert_eq!(out, [4, 5, 6, 7, 8, 9]);
        out.clear();
        // Counters run past the ring size: tail 30 is offset 14.
        assert_eq!(copy_ring(&data, 30, 36, &mut out), 6);
        assert_eq!(out, [14, 15, 0, 1, 2, 3]);
        out.clear();
        // Never more than one ring, even if the counters say so.
        assert_eq!(copy_ring(&data, 0, 100, &mut out), 16);
        assert_eq!(copy_ring(&data, 5, 5, &mut out), 0);
    }
}
