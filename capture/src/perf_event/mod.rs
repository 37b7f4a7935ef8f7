//! This module uses perf_event_open without the perf tool: it opens events,
//! maps their rings, takes AUX snapshots, reads sideband records and
//! breakpoint hits, and explains the permission rules when the kernel says
//! no. The Intel PT backend is built on it, and so are the hardware
//! breakpoints of the symbol trigger both backends use and of the Intel PT
//! backend's slow-call trigger. This file defines [`PerfError`], a
//! failed open, mmap or ioctl with what to do about it.

pub(crate) mod aux;
pub mod breakpoint;
// The ring buffers' mmap: each unsafe block says why it is sound.
#[allow(unsafe_code)]
pub(crate) mod mmap;
pub mod permissions;
pub(crate) mod sideband;
// The perf_event_open FFI: each unsafe block says why it is sound.
#[allow(unsafe_code)]
pub(crate) mod sys;

use nix::errno::Errno;

pub use permissions::{Privileges, Scope};
pub use sys::Event;

pub(crate) use crate::error::PerfError;

impl PerfError {
    /// An open that failed, explained for a per-thread user-space capture.
    pub fn open(what: String, errno: Errno) -> PerfError {
        PerfError::open_in(what, errno, Scope::PerThread)
    }

    pub fn open_in(what: String, errno: Errno, scope: Scope) -> PerfError {
        PerfError::Open {
            guidance: Privileges::read().explain_open(errno, scope),
            what,
            errno,
        }
    }

    /// A mmap of `bytes` (per thread) that failed.
    pub fn mmap(what: String, errno: Errno, bytes: u64) -> PerfError {
        PerfError::mmap_for(what, errno, bytes, 1)
    }

    pub fn mmap_for(what: String, errno: Errno, bytes: u64, threads: u64) -> PerfError {
        PerfError::Mmap {
            guidance: Privileges::read().explain_mmap(errno, bytes, threads),
            what,
            errno,
        }
    }
}

/// The CPUs that are online, from sysfs.
pub fn online_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .map(|s| parse_cpu_list(s.trim()))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as u32).collect()
        })
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    if b >= a && b - a < 4096 {
                        cpus.extend(a..=b);
                    }
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert_eq!(parse_cpu_list("3-1,x"), Vec::<u32>::new());
    }
}
