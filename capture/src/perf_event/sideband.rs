//! This module collects the sideband, what the kernel says about the traced
//! process while PT runs (mappings, names, threads coming and going, context
//! switches), from a dummy software event whose records go to the PT event's
//! data ring.
//!
//! The data ring is small and the kernel drops records when it is full,
//! so a [`Collector`] thread drains every ring continuously; any LOST
//! record is counted and reported.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use super::mmap::DataRing;
use crate::procfs::Mapping;
use crate::recording::{Sideband, SidebandEvent};
use ptscope_formats::{
    perf_data, perf_data::flag, perf_data::kind, perf_data::sample, perf_data::PerfEventAttr,
    perf_data::Record,
};

/// The sample-id layout of every record we ask for.
pub(crate) const SAMPLE_TYPE: u64 = sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER;

/// The tracking event: a dummy that counts nothing and reports mmap2,
/// comm (with exec), fork/exit and, for CPU-wide tracing, context switches.
/// Opened disabled: enable it once its output is set (or at exec).
pub(crate) fn dummy_attr(kernel: bool, switches: bool, enable_on_exec: bool) -> PerfEventAttr {
    PerfEventAttr {
        kind: perf_data::PERF_TYPE_SOFTWARE,
        config: perf_data::PERF_COUNT_SW_DUMMY,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        flags: flag::EXCLUDE_HV
            | flag::EXCLUDE_GUEST
            | flag::MMAP
            | flag::COMM
            | flag::TASK
            | flag::MMAP2
            | flag::COMM_EXEC
            | flag::SAMPLE_ID_ALL
            | if kernel { 0 } else { flag::EXCLUDE_KERNEL }
            | if switches { flag::CONTEXT_SWITCH } else { 0 }
            | if enable_on_exec {
                flag::DISABLED | flag::ENABLE_ON_EXEC
            } else {
                flag::DISABLED
            },
        ..Default::default()
    }
}

/// What the rings held, besides the sideband events.
#[derive(Clone, Debug, Default)]
pub(crate) struct Collected {
    pub events: Vec<Sideband>,
    /// Records the kernel dropped (LOST records' counts).
    pub lost: u64,
    /// AUX records flagged truncated (the AUX area filled, in full-trace mode).
    pub aux_truncated: u64,
    /// AUX records flagged partial or collision: trace the hardware lost.
    pub aux_damaged: u64,
    /// Breakpoint samples that came through a sideband ring.
    pub samples: u64,
    /// Records that did not parse.
    pub bad_records: Vec<String>,
}

impl Collected {
    /// Sorts records from several rings into time order.
    pub(crate) fn sort(&mut self) {
        self.events.sort_by_key(|e| e.time);
    }

    /// Parses the records in `bytes` (whole records, as the kernel wrote
    /// them), appending what matters to `self`.
    pub(crate) fn parse(&mut self, bytes: &[u8], sample_type: u64) {
        let mut at = 0usize;
        while at + 8 <= bytes.len() {
            let kind_ = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
            let misc = u16::from_le_bytes(bytes[at + 4..at + 6].try_into().unwrap_or_default());
            let size =
                u16::from_le_bytes(bytes[at + 6..at + 8].try_into().unwrap_or_default()) as usize;
            if size < 8 || at + size > bytes.len() {
                self.bad_records.push(format!(
                    "record of type {kind_} at ring offset {at} claims {size} bytes, {} remain",
                    bytes.len() - at
                ));
                return;
            }
            let body = &bytes[at + 8..at + size];
            at += size;
            if kind_ == kind::SAMPLE {
                self.samples += 1;
                continue;
            }
            match Record::decode(kind_, misc, body, &[], sample_type, 0) {
                Ok((rec, _)) => self.add(rec),
                Err(e) => self.bad_records.push(e.to_string()),
            }
        }
    }

    fn add(&mut self, rec: Record<'_>) {
        let fork = matches!(rec, Record::Fork { .. });
        let mut push = |time: u64, cpu: u32, event: SidebandEvent| {
            self.events.push(Sideband { time, cpu, event })
        };
        match rec {
            Record::Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                prot,
                filename,
                sample_id,
                ..
            } => {
                if prot & libc::PROT_EXEC as u32 == 0 {
                    return;
                }
                push(
                    sample_id.time,
                    sample_id.cpu,
                    SidebandEvent::Mmap {
                        pid: pid as i32,
                        tid: tid as i32,
                        mapping: Mapping {
                            start: addr,
                            end: addr.saturating_add(len),
                            read: prot & libc::PROT_READ as u32 != 0,
                            write: prot & libc::PROT_WRITE as u32 != 0,
                            exec: true,
                            offset: pgoff,
                            dev_major: maj,
                            dev_minor: min,
                            inode: ino,
                            path: filename.to_string(),
                        },
                    },
                )
            }
            Record::Comm {
                pid,
                tid,
                exec,
                comm,
                sample_id,
            } => push(
                sample_id.time,
                sample_id.cpu,
                SidebandEvent::Comm {
                    pid: pid as i32,
                    tid: tid as i32,
                    comm: comm.to_string(),
                    exec,
                },
            ),
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
                let (pid, ppid, tid, ptid) = (pid as i32, ppid as i32, tid as i32, ptid as i32);
                let event = if fork {
                    SidebandEvent::Fork {
                        pid,
                        ppid,
                        tid,
                        ptid,
                    }
                } else {
                    SidebandEvent::Exit {
                        pid,
                        ppid,
                        tid,
                        ptid,
                    }
                };
                push(time, sample_id.cpu, event)
            }
            Record::ItraceStart {
                pid,
                tid,
                sample_id,
            } => push(
                sample_id.time,
                sample_id.cpu,
                SidebandEvent::ItraceStart {
                    pid: pid as i32,
                    tid: tid as i32,
                },
            ),
            Record::Switch {
                out,
                preempt,
                sample_id,
            } => push(
                sample_id.time,
                sample_id.cpu,
                SidebandEvent::Switch {
                    pid: sample_id.pid as i32,
                    tid: sample_id.tid as i32,
                    out,
                    preempt,
                    next_prev: (0, 0),
                },
            ),
            Record::SwitchCpuWide {
                out,
                preempt,
                next_prev_pid,
                next_prev_tid,
                sample_id,
            } => push(
                sample_id.time,
                sample_id.cpu,
                SidebandEvent::Switch {
                    pid: sample_id.pid as i32,
                    tid: sample_id.tid as i32,
                    out,
                    preempt,
                    next_prev: (next_prev_pid as i32, next_prev_tid as i32),
                },
            ),
            Record::Aux { flags, .. } => {
                if flags & perf_data::aux_flag::TRUNCATED != 0 {
                    self.aux_truncated += 1;
                }
                if flags & (perf_data::aux_flag::PARTIAL | perf_data::aux_flag::COLLISION) != 0 {
                    self.aux_damaged += 1;
                }
            }
            Record::Lost { lost, .. } => self.lost += lost,
            _ => {}
        }
    }

    /// Warnings a user should see about this sideband.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.lost > 0 {
            w.push(format!(
                "the kernel dropped {} sideband records (mappings or thread events may be missing)",
                self.lost
            ));
        }
        if self.aux_damaged > 0 {
            w.push(format!(
                "{} AUX records report trace lost by the hardware (partial or collided)",
                self.aux_damaged
            ));
        }
        if !self.bad_records.is_empty() {
            w.push(format!(
                "{} sideband records did not parse; first: {}",
                self.bad_records.len(),
                self.bad_records[0]
            ));
        }
        w
    }
}

struct Source {
    ring: Arc<DataRing>,
    sample_type: u64,
}

struct Shared {
    sources: Mutex<Vec<Source>>,
    collected: Mutex<Collected>,
    stop: AtomicBool,
}

/// Drains data rings on a thread of its own, every millisecond.
pub(crate) struct Collector {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Default for Collector {
    fn default() -> Collector {
        Collector::start()
    }
}

impl Collector {
    pub(crate) fn start() -> Collector {
        let shared = Arc::new(Shared {
            sources: Mutex::new(Vec::new()),
            collected: Mutex::new(Collected::default()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ptscope-sideband".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Acquire) {
                    drain_all(&s);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .ok();
        Collector { shared, thread }
    }

    /// Starts draining `ring`, whose records carry `sample_type` ids.
    pub(crate) fn add(&self, ring: Arc<DataRing>, sample_type: u64) {
        self.shared
            .sources
            .lock()
            .push(Source { ring, sample_type });
    }

    /// Drains every ring now and returns a copy of all that came so far.
    pub(crate) fn collected(&self) -> Collected {
        drain_all(&self.shared);
        let mut c = self.shared.collected.lock().clone();
        c.sort();
        c
    }

    /// Stops the thread, drains once more and returns everything.
    #[cfg(test)]
    pub(crate) fn finish(mut self) -> Collected {
        self.stop_thread();
        self.collected()
    }

    fn stop_thread(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

fn drain_all(shared: &Shared) {
    let sources = shared.sources.lock();
    let mut buf = Vec::new();
    for src in sources.iter() {
        buf.clear();
        if src.ring.drain(&mut buf) > 0 {
            shared.collected.lock().parse(&buf, src.sample_type);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_event::Event;
    use crate::tracee;

    /// A real dummy event on a real process: the kernel's records come
    /// through the ring and the collector as sideband events.
    #[test]
    fn real_dummy_event_reports_exec_mappings_and_exit() {
        let argv = vec!["/bin/true".to_string()];
        let pid = tracee::spawn_stopped(&argv, None).unwrap();
        let stopped = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WUNTRACED),
        );
        assert!(matches!(
            stopped,
            Ok(nix::sys::wait::WaitStatus::Stopped(..))
        ));
        let event = Event::open(&dummy_attr(false, false, true), pid, -1).unwrap();
        let ring = Arc::new(DataRing::map(&event, 8).unwrap());
        let collector = Collector::start();
        collector.add(ring, SAMPLE_TYPE);
        tracee::kill(pid, nix::sys::signal::Signal::SIGCONT);
        assert_eq!(tracee::wait_child(pid), Some(0));
        let got = collector.finish();
        assert_eq!(got.lost, 0);
        assert!(got.bad_records.is_empty(), "{:?}", got.bad_records);
        let exec = got.events.iter().find_map(|e| match &e.event {
            SidebandEvent::Comm {
                pid: p,
                comm,
                exec: true,
                ..
            } if *p == pid => Some(comm.clone()),
            _ => None,
        });
        assert_eq!(exec.as_deref(), Some("true"), "{:#?}", got.events);
        let true_path = std::fs::canonicalize("/bin/true").unwrap();
        let mapped: Vec<&Mapping> = got
            .events
            .iter()
            .filter_map(|e| match &e.event {
                SidebandEvent::Mmap {
                    pid: p, mapping, ..
                } if *p == pid => Some(mapping),
                _ => None,
            })
            .collect();
        assert!(
            mapped
                .iter()
                .any(|m| std::path::Path::new(&m.path) == true_path && m.exec),
            "{mapped:#?}"
        );
        // The dynamic loader maps libc: more than one executable mapping.
        assert!(
            mapped.iter().any(|m| m.path.contains("libc")),
            "{mapped:#?}"
        );
        assert!(got
            .events
            .iter()
            .any(|e| matches!(e.event, SidebandEvent::Exit { pid: p, .. } if p == pid)));
        // Sample ids carry real times and CPUs.
        assert!(got.events.windows(2).all(|w| w[0].time <= w[1].time));
        assert!(got.events.iter().all(|e| e.time > 0));
        let cpus = std::thread::available_parallelism().unwrap().get() as u32;
        assert!(got.events.iter().all(|e| e.cpu < cpus));
    }

    #[test]
    fn malformed_ring_bytes_are_reported_not_trusted() {
        let mut c = Collected::default();
        // A header claiming 4000 bytes with 16 present.
        let mut bytes = vec![10u8, 0, 0, 0, 0, 0];
        bytes.extend_from_slice(&4000u16.to_le_bytes());
        bytes.extend_from_slice(&[0; 8]);
        c.parse(&bytes, SAMPLE_TYPE);
        assert_eq!(c.bad_records.len(), 1);
        assert!(
            c.bad_records[0].contains("claims 4000 bytes"),
            "{:?}",
            c.bad_records
        );
        // A LOST record is counted and turned into a warning.
        let mut lost = vec![2u8, 0, 0, 0, 0, 0];
        lost.extend_from_slice(&((8 + 16 + 32) as u16).to_le_bytes());
        lost.extend_from_slice(&7u64.to_le_bytes());
        lost.extend_from_slice(&42u64.to_le_bytes());
        lost.extend_from_slice(&[0; 32]);
        let mut c = Collected::default();
        c.parse(&lost, SAMPLE_TYPE);
        assert_eq!(c.lost, 42);
        assert!(c.warnings()[0].contains("dropped 42 sideband records"));
    }
}
