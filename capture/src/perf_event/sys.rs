//! This module makes the perf_event_open system call and its ioctls, and
//! reads CPUID and the TSC. It is the FFI edge of the perf_event layer, which
//! is why it is one of the modules allowed to hold `unsafe`. An [`Event`]
//! owns its file descriptor, so the event closes when it is dropped.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use perf_event_open_sys as sys;

use ptscope_formats::{perf_data::PerfEventAttr, perf_data::ATTR_SIZE};

/// An open perf event.
#[derive(Debug)]
pub struct Event {
    fd: OwnedFd,
    /// The kernel's id for its records (`PERF_EVENT_IOC_ID`).
    pub id: u64,
}

impl Event {
    /// Opens `attr` on thread `pid` (or -1 for every thread) and CPU `cpu`
    /// (or -1 for any). The attr is passed at the size ptscope writes.
    pub fn open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> Result<Event, Errno> {
        Event::open_in_group(attr, pid, cpu, None)
    }

    /// [`Event::open`], as a member of `leader`'s group.
    pub fn open_in_group(
        attr: &PerfEventAttr,
        pid: i32,
        cpu: i32,
        leader: Option<&Event>,
    ) -> Result<Event, Errno> {
        let group = leader.map_or(-1, |l| l.fd.as_raw_fd());
        let mut bytes = Vec::with_capacity(ATTR_SIZE as usize);
        attr.encode(&mut bytes);
        // The kernel may write a size back into the attr on E2BIG, so it
        // gets a buffer larger than any attr it knows.
        let mut buf = [0u64; 64];
        for (i, chunk) in bytes.chunks(8).enumerate() {
            buf[i] = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        }
        // SAFETY: `buf` is 512 zero-padded, 8-aligned bytes holding a valid
        // perf_event_attr whose size field (128) is within the buffer; the
        // kernel reads at most that size and may write back the size field.
        let fd = unsafe {
            sys::perf_event_open(
                buf.as_mut_ptr().cast::<sys::bindings::perf_event_attr>(),
                pid,
                cpu,
                group,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer.
        let r = unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) };
        if r < 0 {
            return Err(Errno::last());
        }
        Ok(Event { fd, id })
    }

    pub fn enable(&self) -> Result<(), Errno> {
        // SAFETY: ENABLE takes no pointer; the fd is a live perf event.
        Errno::result(unsafe { sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) }).map(drop)
    }

    pub fn disable(&self) -> Result<(), Errno> {
        // SAFETY: DISABLE takes no pointer; the fd is a live perf event.
        Errno::result(unsafe { sys::ioctls::DISABLE(self.fd.as_raw_fd(), 0) }).map(drop)
    }

    /// Sets the event's address filters (`PERF_EVENT_IOC_SET_FILTER`), in
    /// the kernel's syntax: `filter 0x<offset>/0x<size>@<file>`, ...
    pub fn set_filter(&self, filter: &std::ffi::CStr) -> Result<(), Errno> {
        // SAFETY: SET_FILTER reads a NUL-terminated string through the
        // pointer, which `filter` keeps alive for the call; the kernel
        // copies it and never writes through it.
        Errno::result(unsafe {
            sys::ioctls::SET_FILTER(self.fd.as_raw_fd(), filter.as_ptr().cast_mut())
        })
        .map(drop)
    }

    /// Sends this event's records to `target`'s ring.
    pub fn set_output(&self, target: &Event) -> Result<(), Errno> {
        // SAFETY: SET_OUTPUT takes another perf event fd by value.
        Errno::result(unsafe {
            sys::ioctls::SET_OUTPUT(self.fd.as_raw_fd(), target.fd.as_raw_fd())
        })
        .map(drop)
    }
}

impl AsFd for Event {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// CPUID leaf `leaf`, subleaf 0: (eax, ebx, ecx, edx); None past the
/// highest leaf the CPU reports.
#[cfg(target_arch = "x86_64")]
pub(crate) fn cpuid(leaf: u32) -> Option<[u32; 4]> {
    use std::arch::x86_64::__cpuid_count;
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86_64 CPU and has no side effects.
    let max = unsafe { __cpuid_count(0, 0) }.eax;
    if leaf > max {
        return None;
    }
    #[allow(unused_unsafe)]
    // SAFETY: as above, for a leaf the CPU reports.
    let r = unsafe { __cpuid_count(leaf, 0) };
    Some([r.eax, r.ebx, r.ecx, r.edx])
}

#[cfg(not(target_arch = "x86_64"))]
pub fn cpuid(_leaf: u32) -> Option<[u32; 4]> {
    None
}

/// The time-stamp counter, in the units PT's TSC packets carry.
#[cfg(target_arch = "x86_64")]
pub(crate) fn rdtsc() -> u64 {
    #[allow(unused_unsafe)]
    // SAFETY: RDTSC reads a counter; user space may run it unless the
    // kernel set CR4.TSD, which Linux does not for normal processes.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub fn rdtsc() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PERF_EVENT_IOC_SET_FILTER` is `_IOW('$', 6, char *)`: write
    /// direction, an 8-byte pointer argument, type '$', number 6.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_set_filter_request_is_the_kernels() {
        let request = (1u64 << 30) | (8 << 16) | (u64::from(b'$') << 8) | 6;
        assert_eq!(u64::from(sys::bindings::SET_FILTER), request);
    }

    /// A descriptor that is not a perf event refuses the filter, and the
    /// error comes back instead of a crash.
    #[test]
    fn set_filter_on_a_non_event_is_an_error() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let event = Event {
            fd: OwnedFd::from(file),
            id: 0,
        };
        let filter = std::ffi::CString::new("filter 0x1000/0x10@/bin/true").unwrap();
        assert!(event.set_filter(&filter).is_err());
    }
}
