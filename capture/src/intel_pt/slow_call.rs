//! The slow-call trigger on Intel PT. The trace itself is only readable
//! after the snapshot, so calls are timed beside it: hardware execute
//! breakpoints on the function's entry and on each of its `ret`
//! instructions sample the thread, the time and the stack pointer. At the
//! entry the stack pointer points at the return address, and at the `ret`
//! of the same frame it points there again, so entries and returns pair
//! exactly, recursion included, without trusting a count of calls.
//!
//! The CPU has four debug registers per thread: the entry and at most
//! three returns. A function with more returns (or none: it only
//! tail-calls) cannot be timed this way, and the error says to use the
//! emulated backend. A call that leaves by a tail call or a longjmp is
//! closed when an outer call of the function returns past it.
//!
//! Each hit is a debug exception and a sample written by the kernel, some
//! microseconds (the `slow_call` benchmark prints the figure on this
//! machine): calls shorter than that are distorted, and a function called
//! millions of times a second slows the program down.

use std::collections::HashMap;
use std::path::Path;

use crate::insn::{classify, InsnClass};
use crate::perf_event::breakpoint::Hits;
use crate::procfs::Mapping;
use crate::CaptureError;

/// Debug registers per thread (DR0 to DR3).
pub const DEBUG_REGISTERS: usize = 4;

/// Where a function's calls begin and end, at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSites {
    pub entry: u64,
    pub returns: Vec<u64>,
}

impl CallSites {
    /// Every address to break on: the entry first.
    pub fn addresses(&self) -> Vec<u64> {
        std::iter::once(self.entry)
            .chain(self.returns.iter().copied())
            .collect()
    }
}

/// Offsets (from `code`'s start) of the `ret` instructions of a function
/// whose code is `code`, found by decoding it from its entry to its end.
/// Bytes that do not decode (data, padding) are stepped over one at a time.
pub fn return_offsets(code: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < code.len() {
        match classify(at as u64, &code[at..]) {
            Some(insn) => {
                if insn.class == InsnClass::Return {
                    out.push(at);
                }
                at += (insn.len as usize).max(1);
            }
            None => at += 1,
        }
    }
    out
}

/// Finds function `name` in the process's executable mappings, with its
/// returns; `None` while no mapped file defines it.
pub fn call_sites(maps: &[Mapping], name: &str) -> Result<Option<CallSites>, CaptureError> {
    for m in maps.iter().filter(|m| m.exec && m.is_file()) {
        let path = Path::new(&m.path);
        let Ok(Some((offset, size))) = crate::filter::symbol_in_file(path, name) else {
            continue;
        };
        if offset < m.offset || offset >= m.offset + m.len() {
            continue;
        }
        let code = read_at(path, offset, size).map_err(|e| CaptureError::io(path, e))?;
        let entry = m.start + (offset - m.offset);
        let returns: Vec<u64> = return_offsets(&code)
            .into_iter()
            .map(|r| entry + r as u64)
            .collect();
        if returns.is_empty() {
            return Err(CaptureError::Unsupported(format!(
                "{name} has no return instruction (it ends in tail calls), so \
                 breakpoints cannot time its calls: use --backend emulated"
            )));
        }
        if returns.len() >= DEBUG_REGISTERS {
            return Err(CaptureError::Unsupported(format!(
                "{name} has {} return instructions; the CPU's {DEBUG_REGISTERS} debug \
                 registers watch its entry and at most {} returns: use --backend emulated",
                returns.len(),
                DEBUG_REGISTERS - 1
            )));
        }
        return Ok(Some(CallSites { entry, returns }));
    }
    Ok(None)
}

fn read_at(path: &Path, offset: u64, size: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    // A symbol's size comes from the file: never trust it past 1 MiB.
    let mut code = vec![0; size.min(1 << 20) as usize];
    let n = f.read(&mut code)?;
    code.truncate(n);
    Ok(code)
}

/// A call that took longer than the threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowCall {
    pub tid: i32,
    /// perf time of its entry and of its `ret`.
    pub start: u64,
    pub end: u64,
}

/// Pairs entry and return hits into calls, per thread.
pub struct CallTimer {
    sites: CallSites,
    threshold: u64,
    /// Per thread, the calls still open, innermost last: stack pointer at
    /// entry and time.
    open: HashMap<i32, Vec<(u64, u64)>>,
    /// Calls timed so far.
    pub calls: u64,
}

impl CallTimer {
    pub fn new(sites: CallSites, threshold: u64) -> CallTimer {
        CallTimer {
            sites,
            threshold,
            open: HashMap::new(),
            calls: 0,
        }
    }

    pub fn sites(&self) -> &CallSites {
        &self.sites
    }

    /// Feeds hits in time order; every call slower than the threshold
    /// that returned among them, in order. A batch with lost hits starts
    /// every pairing over.
    pub fn feed(&mut self, hits: &Hits) -> Vec<SlowCall> {
        let mut slow = Vec::new();
        if hits.lost {
            self.open.clear();
        }
        for h in &hits.hits {
            let Some(sp) = h.rsp else { continue };
            let open = self.open.entry(h.tid).or_default();
            if h.ip == self.sites.entry {
                // A frame at this address or deeper is gone, whether or
                // not a watched return said so (a longjmp, a lost hit): a
                // new call now occupies it.
                while open.last().is_some_and(|&(s, _)| s <= sp) {
                    open.pop();
                }
                open.push((sp, h.time));
                continue;
            }
            if !self.sites.returns.contains(&h.ip) {
                continue;
            }
            // Frames below this one (deeper, at lower addresses) were left
            // without a watched return.
            while open.last().is_some_and(|&(s, _)| s < sp) {
                open.pop();
            }
            if open.last().is_some_and(|&(s, _)| s == sp) {
                let (_, start) = open.pop().expect("checked");
                self.calls += 1;
                if h.time.saturating_sub(start) > self.threshold {
                    slow.push(SlowCall {
                        tid: h.tid,
                        start,
                        end: h.time,
                    });
                }
            }
        }
        slow
    }

    /// Forgets every open call: after hits were thrown away (while a
    /// snapshot was taken), their returns may be gone.
    pub fn forget_open(&mut self) {
        self.open.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_event::breakpoint::Hit;

    fn hit(tid: i32, ip: u64, time: u64, sp: u64) -> Hit {
        Hit {
            pid: 1,
            tid,
            ip,
            time,
            rdi: Some(0),
            rsi: Some(0),
            rsp: Some(sp),
        }
    }

    fn timer() -> CallTimer {
        CallTimer::new(
            CallSites {
                entry: 0x1000,
                returns: vec![0x1040, 0x1080],
            },
            100,
        )
    }

    #[test]
    fn entries_and_returns_pair_by_stack_pointer() {
        let mut t = timer();
        let batch = |hits| Hits { hits, lost: false };
        // A fast call, then a recursion whose outer call is slow: the inner
        // return pairs with the inner entry.
        assert_eq!(
            t.feed(&batch(vec![
                hit(7, 0x1000, 10, 0x7f00),
                hit(7, 0x1040, 60, 0x7f00),
                hit(7, 0x1000, 100, 0x7f00),
                hit(7, 0x1000, 110, 0x7e00),
                hit(7, 0x1080, 150, 0x7e00),
            ])),
            []
        );
        assert_eq!(t.calls, 2);
        // Another thread's hits do not pair with these.
        assert_eq!(t.feed(&batch(vec![hit(8, 0x1040, 900, 0x7f00)])), []);
        assert_eq!(
            t.feed(&batch(vec![hit(7, 0x1040, 300, 0x7f00)])),
            [SlowCall {
                tid: 7,
                start: 100,
                end: 300
            }]
        );
    }

    #[test]
    fn a_frame_left_without_a_return_is_dropped_and_lost_hits_reset() {
        let mut t = timer();
        // The inner call left by a longjmp: the outer return closes it.
        let hits = vec![
            hit(7, 0x1000, 0, 0x7f00),
            hit(7, 0x1000, 10, 0x7e00),
            hit(7, 0x1040, 500, 0x7f00),
        ];
        assert_eq!(
            t.feed(&Hits { hits, lost: false }),
            [SlowCall {
                tid: 7,
                start: 0,
                end: 500
            }]
        );
        t.feed(&Hits {
            hits: vec![hit(7, 0x1000, 600, 0x7f00)],
            lost: false,
        });
        // Hits were lost: the open entry may have lost its return.
        assert_eq!(
            t.feed(&Hits {
                hits: vec![hit(7, 0x1040, 900, 0x7f00)],
                lost: true
            }),
            []
        );
        // An entry whose return was never seen is replaced by the next
        // call at the same stack address, not paired with its return.
        t.feed(&Hits {
            hits: vec![hit(7, 0x1000, 1000, 0x7f00)],
            lost: false,
        });
        assert_eq!(
            t.feed(&Hits {
                hits: vec![hit(7, 0x1000, 5000, 0x7f00), hit(7, 0x1040, 5050, 0x7f00)],
                lost: false
            }),
            []
        );
        assert_eq!(t.calls, 2);
    }

    /// Spins `n` rounds: a call whose length the caller picks.
    #[inline(never)]
    extern "C" fn ptscope_timed_for_tests(n: u64) -> u64 {
        let mut h = 0u64;
        for i in 0..n {
            h = std::hint::black_box(h.wrapping_mul(31).wrapping_add(i));
        }
        h
    }

    /// Real breakpoints on a real thread of this process: its function's
    /// returns are found in this test binary, and its calls are timed by
    /// pairing entry and return hits, the slow one told apart.
    #[test]
    fn real_breakpoints_time_a_threads_calls() {
        use crate::perf_event::breakpoint::Breakpoint;
        use std::time::Duration;
        assert!(
            Breakpoint::available(),
            "the breakpoint PMU is missing: /sys/bus/event_source/devices/breakpoint"
        );
        let me = std::env::current_exe().unwrap();
        let name = crate::trigger::functions_in(&me)
            .into_iter()
            .find(|f| f.name.ends_with("ptscope_timed_for_tests"))
            .expect("the test function's symbol")
            .name;
        let maps = crate::procfs::read_maps(std::process::id() as i32).unwrap();
        let sites = call_sites(&maps, &name)
            .unwrap()
            .expect("found in this test binary");
        assert_eq!(sites.entry, ptscope_timed_for_tests as *const () as u64);
        assert!(!sites.returns.is_empty());
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            go_rx.recv().unwrap();
            // Fast, fast, slow (milliseconds), fast.
            for n in [10, 100, 20_000_000, 10] {
                std::hint::black_box(ptscope_timed_for_tests(n));
            }
        });
        let tid = tid_rx.recv().unwrap();
        let mut bp = Breakpoint::at(sites.addresses(), 16);
        bp.arm(tid).unwrap();
        go_tx.send(()).unwrap();
        worker.join().unwrap();
        let hits = bp.wait_for_hits(Duration::from_secs(5)).unwrap();
        assert!(!hits.lost);
        assert_eq!(hits.hits.len(), 8, "{hits:?}");
        assert!(hits.hits.iter().all(|h| h.tid == tid && h.rsp.is_some()));
        let mut timer = CallTimer::new(sites, 1_000_000);
        let slow = timer.feed(&hits);
        assert_eq!(slow.len(), 1, "{slow:?}");
        let slow = slow[0];
        assert_eq!(slow.tid, tid);
        assert!(slow.end - slow.start > 1_000_000);
        assert_eq!(timer.calls, 4, "every call paired");
        bp.disarm();
    }

    #[test]
    fn returns_are_found_by_decoding_the_function() {
        // push rbp; test edi, edi; je +2; pop rbp; ret; pop rbp; ret (c3
        // inside an immediate must not count: mov eax, 0xc3c3c3c3).
        let code = [
            0x55, 0x85, 0xff, 0x74, 0x02, 0x5d, 0xc3, 0x5d, 0xc3, 0xb8, 0xc3, 0xc3, 0xc3, 0xc3,
            0xc3,
        ];
        assert_eq!(return_offsets(&code), vec![6, 8, 14]);
        assert!(return_offsets(&[]).is_empty());
    }
}
