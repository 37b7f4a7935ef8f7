//! This module arms triggers as hardware execute breakpoints: a
//! PERF_TYPE_BREAKPOINT event per thread and address (a function's entry,
//! and for the slow-call trigger its returns too). Each hit writes a sample
//! (ip, thread, time, and the user registers rdi and rsi, a function's
//! first two arguments, and rsp, which pairs a return with its entry) to
//! the event's ring, and the thread runs on: nothing stops or signals the
//! target.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::mmap::DataRing;
use super::sys::Event;
use super::PerfError;
use ptscope_formats::{
    perf_data, perf_data::flag, perf_data::kind, perf_data::sample, perf_data::PerfEventAttr,
};

/// HW_BREAKPOINT_X: break on instruction fetch.
pub const HW_BREAKPOINT_X: u32 = 4;

/// Register numbers of `enum perf_event_x86_regs`.
pub mod reg {
    pub const SI: u32 = 4;
    pub const DI: u32 = 5;
    pub const SP: u32 = 7;
}

pub const SAMPLE_TYPE: u64 = sample::IP | sample::TID | sample::TIME | sample::REGS_USER;

/// The attr of an execute breakpoint at `addr`, sampling every hit with
/// rdi, rsi and rsp, and waking a poller at once; with `inherit`, threads
/// the armed thread creates later carry it too, from their first
/// instruction, their samples written to its ring.
pub fn breakpoint_attr(addr: u64, inherit: bool) -> PerfEventAttr {
    let inherit = if inherit { flag::INHERIT } else { 0 };
    PerfEventAttr {
        kind: perf_data::PERF_TYPE_BREAKPOINT,
        config: 0,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        flags: flag::EXCLUDE_KERNEL | flag::EXCLUDE_HV | inherit,
        wakeup_events: 1,
        bp_type: HW_BREAKPOINT_X,
        config1: addr,
        // An execute breakpoint covers one instruction: sizeof(long).
        config2: 8,
        sample_regs_user: (1 << reg::SI) | (1 << reg::DI) | (1 << reg::SP),
        ..Default::default()
    }
}

/// One hit of the breakpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    pub pid: i32,
    pub tid: i32,
    pub ip: u64,
    /// perf time (the kernel's perf clock).
    pub time: u64,
    /// rdi, rsi and rsp, when the kernel sampled user registers.
    pub rdi: Option<u64>,
    pub rsi: Option<u64>,
    pub rsp: Option<u64>,
}

impl Hit {
    /// Registers for the snapshot's metadata.
    pub fn registers(&self) -> Vec<(String, u64)> {
        let mut r = Vec::new();
        if let Some(v) = self.rdi {
            r.push(("rdi".to_string(), v));
        }
        if let Some(v) = self.rsi {
            r.push(("rsi".to_string(), v));
        }
        r
    }
}

/// Parses a PERF_RECORD_SAMPLE body laid out by [`SAMPLE_TYPE`].
pub fn parse_sample(body: &[u8]) -> Option<Hit> {
    let u64_at = |i: usize| -> Option<u64> {
        body.get(i..i + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let ip = u64_at(0)?;
    let ids = u64_at(8)?;
    let time = u64_at(16)?;
    let abi = u64_at(24)?;
    // ABI 0: no user registers (the hit was not in user space).
    let (rsi, rdi, rsp) = if abi != 0 {
        // Registers come in mask-bit order: SI (4), DI (5), SP (7).
        (Some(u64_at(32)?), Some(u64_at(40)?), Some(u64_at(48)?))
    } else {
        (None, None, None)
    };
    Some(Hit {
        pid: ids as u32 as i32,
        tid: (ids >> 32) as u32 as i32,
        ip,
        time,
        rdi,
        rsi,
        rsp,
    })
}

/// Hits in a stream of ring records.
pub fn parse_hits(bytes: &[u8]) -> Vec<Hit> {
    parse_records(bytes).0
}

/// Hits in a stream of ring records, and whether the kernel says it lost
/// some (a PERF_RECORD_LOST: the ring was full).
pub fn parse_records(bytes: &[u8]) -> (Vec<Hit>, bool) {
    let mut hits = Vec::new();
    let mut lost = false;
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let kind_ = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        let size =
            u16::from_le_bytes(bytes[at + 6..at + 8].try_into().unwrap_or_default()) as usize;
        if size < 8 || at + size > bytes.len() {
            break;
        }
        if kind_ == kind::SAMPLE {
            hits.extend(parse_sample(&bytes[at + 8..at + size]));
        }
        lost |= kind_ == kind::LOST;
        at += size;
    }
    (hits, lost)
}

struct Armed {
    tid: i32,
    /// Which of the addresses (0: the first, a function's entry).
    addr: usize,
    event: Event,
    ring: Arc<DataRing>,
}

/// Breakpoints at one or more addresses, armed on some threads of a
/// process.
pub struct Breakpoint {
    addrs: Vec<u64>,
    /// Data pages of each event's ring.
    pages: usize,
    /// Threads an armed thread creates inherit its events.
    inherit: bool,
    armed: Vec<Armed>,
}

/// The hits of every armed event since the last look, in time order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hits {
    pub hits: Vec<Hit>,
    /// Some ring overflowed: hits are missing, and a pairing of entries
    /// with returns must start over.
    pub lost: bool,
}

impl Breakpoint {
    /// A breakpoint at `addr` (a symbol trigger: one hit is all it needs).
    pub fn new(addr: u64) -> Breakpoint {
        Breakpoint::at(vec![addr], 1)
    }

    /// Breakpoints at every address of `addrs`, each event's ring
    /// `pages` pages long (a slow-call trigger samples every call).
    pub fn at(addrs: Vec<u64>, pages: usize) -> Breakpoint {
        Breakpoint {
            addrs,
            pages,
            inherit: false,
            armed: Vec::new(),
        }
    }

    /// The same, inherited by every thread an armed thread creates, from
    /// its first instruction: a thread that reaches the function at once
    /// is not missed while the caller has yet to notice it. Its samples
    /// come from the creator's rings. (A tracer that stops each new thread
    /// before it runs, as the emulated backend does, arms it instead.)
    pub fn inherited(mut self) -> Breakpoint {
        self.inherit = true;
        self
    }

    /// The first address (the entry).
    pub fn address(&self) -> u64 {
        self.addrs.first().copied().unwrap_or(0)
    }

    /// Whether this kernel has the breakpoint PMU at all.
    pub fn available() -> bool {
        std::path::Path::new("/sys/bus/event_source/devices/breakpoint").exists()
    }

    pub fn is_armed(&self, tid: i32) -> bool {
        self.armed.iter().any(|a| a.tid == tid)
    }

    /// Arms the breakpoints on thread `tid`: all of them, or none (the
    /// ones opened are closed again when one fails).
    pub fn arm(&mut self, tid: i32) -> Result<(), PerfError> {
        if self.is_armed(tid) {
            return Ok(());
        }
        // The kernel maps no ring of an inherited event bound to a thread
        // alone (all its descendants would write to one ring from every
        // CPU): an inherited breakpoint is one event per CPU, as perf
        // record's are.
        let cpus: Vec<i32> = match self.inherit {
            true => super::online_cpus().into_iter().map(|c| c as i32).collect(),
            false => vec![-1],
        };
        let mut opened = Vec::with_capacity(self.addrs.len() * cpus.len());
        for (index, &addr) in self.addrs.iter().enumerate() {
            for &cpu in &cpus {
                let what = || format!("a breakpoint at {addr:#x} on thread {tid}");
                let event = Event::open(&breakpoint_attr(addr, self.inherit), tid, cpu)
                    .map_err(|errno| PerfError::open(what(), errno))?;
                let ring = DataRing::map(&event, self.pages)
                    .map_err(|errno| PerfError::mmap(what(), errno, 0))?;
                opened.push(Armed {
                    tid,
                    addr: index,
                    event,
                    ring: Arc::new(ring),
                });
            }
        }
        self.armed.extend(opened);
        Ok(())
    }

    /// Stops watching a thread that exited.
    pub fn forget(&mut self, tid: i32) {
        self.armed.retain(|a| a.tid != tid);
    }

    /// A hit, if any thread has one waiting: cheap enough to call after
    /// every single step.
    pub fn check(&mut self) -> Option<Hit> {
        let mut buf = Vec::new();
        for a in &self.armed {
            if a.ring.pending() {
                buf.clear();
                a.ring.drain(&mut buf);
                if let Some(hit) = parse_hits(&buf).into_iter().next() {
                    return Some(hit);
                }
            }
        }
        None
    }

    /// Every hit waiting in any ring, in time order.
    ///
    /// The rings of the other addresses are read before the first's: a
    /// return read now then always comes with its entry (written before
    /// it, so read after it at the latest), while an entry read without
    /// its return gets it in a later look.
    pub fn hits(&mut self) -> Hits {
        let mut out = Hits::default();
        let mut buf = Vec::new();
        let later = self.armed.iter().filter(|a| a.addr != 0);
        for a in later.chain(self.armed.iter().filter(|a| a.addr == 0)) {
            if a.ring.pending() {
                buf.clear();
                a.ring.drain(&mut buf);
                let (hits, lost) = parse_records(&buf);
                out.hits.extend(hits);
                out.lost |= lost;
            }
        }
        out.hits.sort_by_key(|h| h.time);
        out
    }

    /// Waits up to `timeout` for hits, and takes every hit waiting.
    pub fn wait_for_hits(&mut self, timeout: Duration) -> Result<Hits, Errno> {
        if !self.armed.iter().any(|a| a.ring.pending()) {
            let gone = self.wait_readable(timeout)?;
            let hits = self.hits();
            for tid in gone {
                self.forget(tid);
            }
            return Ok(hits);
        }
        Ok(self.hits())
    }

    /// Waits up to `timeout` for a hit.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Hit>, Errno> {
        if let Some(hit) = self.check() {
            return Ok(Some(hit));
        }
        let gone = self.wait_readable(timeout)?;
        let hit = self.check();
        for tid in gone {
            self.forget(tid);
        }
        Ok(hit)
    }

    /// Polls the events for up to `timeout`; the threads whose events hung
    /// up (they exited), which the caller forgets once their last hits are
    /// read, or a wait would spin on them.
    fn wait_readable(&mut self, timeout: Duration) -> Result<Vec<i32>, Errno> {
        if self.armed.is_empty() {
            std::thread::sleep(timeout);
            return Ok(Vec::new());
        }
        let mut fds: Vec<PollFd> = self
            .armed
            .iter()
            .map(|a| PollFd::new(a.event.as_fd(), PollFlags::POLLIN))
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        Ok(fds
            .iter()
            .zip(&self.armed)
            .filter(|(fd, _)| {
                fd.revents()
                    .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
            })
            .map(|(_, a)| a.tid)
            .collect())
    }

    /// Throws away hits already in the rings (from while a snapshot was
    /// being taken), so the next wait sees only new ones.
    pub fn discard(&mut self) {
        let mut buf = Vec::new();
        for a in &self.armed {
            buf.clear();
            a.ring.drain(&mut buf);
        }
    }

    /// Disables every armed event (they close when dropped).
    pub fn disarm(&mut self) {
        for a in &self.armed {
            let _ = a.event.disable();
        }
        self.armed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    extern "C" fn target(a: u64, b: u64) -> u64 {
        std::hint::black_box(a.wrapping_mul(3) ^ b)
    }

    /// A real hardware breakpoint on a real thread of this process: the hit
    /// carries the thread, the address and the first two arguments.
    #[test]
    fn real_breakpoint_hits_with_arguments() {
        if !Breakpoint::available() {
            panic!("the breakpoint PMU is missing: /sys/bus/event_source/devices/breakpoint");
        }
        let addr = target as *const () as u64;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            rx.recv().unwrap();
            // Not hit yet: the breakpoint is on this thread only after arm.
            target(0x1234, 0x5678)
        });
        let tid = tid_rx.recv().unwrap();
        let mut bp = Breakpoint::new(addr);
        bp.arm(tid).unwrap();
        assert!(bp.is_armed(tid));
        // This thread is not armed: calling here does not hit.
        target(1, 2);
        tx.send(()).unwrap();
        worker.join().unwrap();
        let hit = bp.wait(Duration::from_secs(5)).unwrap().expect("a hit");
        assert_eq!(hit.tid, tid);
        assert_eq!(hit.pid, std::process::id() as i32);
        assert_eq!(hit.ip, addr);
        assert_eq!(hit.rdi, Some(0x1234));
        assert_eq!(hit.rsi, Some(0x5678));
        assert!(hit.time > 0);
        assert_eq!(bp.check(), None, "one hit, one sample");
        bp.disarm();
    }

    /// An inherited breakpoint armed on one thread fires on a thread that
    /// thread creates afterwards, before anyone could arm it: the hit says
    /// the new thread, and comes through the creator's ring.
    #[test]
    fn inherited_breakpoints_fire_on_threads_created_later() {
        let addr = target as *const () as u64;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (late_tx, late_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            go_rx.recv().unwrap();
            // Created after the arming, calling at once.
            std::thread::spawn(move || {
                late_tx.send(nix::unistd::gettid().as_raw()).unwrap();
                target(7, 8)
            })
            .join()
            .unwrap()
        });
        let tid = tid_rx.recv().unwrap();
        let mut bp = Breakpoint::new(addr).inherited();
        bp.arm(tid).unwrap();
        go_tx.send(()).unwrap();
        worker.join().unwrap();
        let late = late_rx.recv().unwrap();
        assert_ne!(late, tid);
        let hit = bp.wait(Duration::from_secs(5)).unwrap().expect("a hit");
        assert_eq!((hit.tid, hit.ip, hit.rdi), (late, addr, Some(7)));
        bp.disarm();
    }

    /// A thread that exited hangs up its event: the wait forgets it instead
    /// of spinning, and stale hits are discarded.
    #[test]
    fn exited_threads_are_forgotten() {
        let addr = target as *const () as u64;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            go_rx.recv().unwrap();
            target(1, 2);
        });
        let tid = tid_rx.recv().unwrap();
        let mut bp = Breakpoint::new(addr);
        bp.arm(tid).unwrap();
        go_tx.send(()).unwrap();
        worker.join().unwrap();
        // Its one hit is in the ring; discard it.
        bp.discard();
        assert_eq!(bp.check(), None);
        // The wait returns (its timeout, not a hang on the exited
        // thread's event) with nothing, and the thread is forgotten.
        assert_eq!(bp.wait(Duration::from_millis(200)).unwrap(), None);
        assert!(!bp.is_armed(tid), "the exited thread is forgotten");
    }

    #[test]
    fn parses_a_sample_with_registers() {
        let mut body = Vec::new();
        for v in [
            0x401000u64,
            (7u64 << 32) | 5,
            123_456,
            2,
            0xaa,
            0xbb,
            0x7ff0,
        ] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        let hit = parse_sample(&body).unwrap();
        assert_eq!(
            hit,
            Hit {
                pid: 5,
                tid: 7,
                ip: 0x401000,
                time: 123_456,
                rsi: Some(0xaa),
                rdi: Some(0xbb),
                rsp: Some(0x7ff0),
            }
        );
        assert_eq!(
            hit.registers(),
            vec![("rdi".into(), 0xbb), ("rsi".into(), 0xaa)]
        );
        // Truncated bodies are refused, not read past.
        assert_eq!(parse_sample(&body[..48]), None);
        // Record framing: a bad size stops the walk.
        let mut rec = vec![9u8, 0, 0, 0, 0, 0];
        rec.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
        rec.extend_from_slice(&body);
        assert_eq!(parse_hits(&rec).len(), 1);
        rec[6] = 200;
        assert!(parse_hits(&rec).is_empty());
    }
}
