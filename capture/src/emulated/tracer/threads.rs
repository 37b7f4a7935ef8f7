//! The threads module keeps what the tracer knows of each traced thread,
//! and the bookkeeping when a thread appears, vanishes or exits. A thread's
//! [`State`] says what its next ptrace stop means and whether the run loop
//! may wait for it, so every transition has to keep it right: a thread
//! marked as stepping that is not would have the loop wait for a stop that
//! never comes.

use nix::sys::signal::Signal;

use super::Tracer;
use crate::error::CaptureError;
use crate::insn::Insn;
use crate::procfs;
use crate::recording::SidebandEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// In a ptrace stop at a user instruction, ready to step.
    Ready,
    /// Stepping one user instruction; we wait for it specifically.
    Stepping,
    /// Stepping over a syscall instruction, which may block.
    InSyscall { since: u64, others: u64 },
    /// Just seen by a clone event, waiting for its first stop.
    Starting,
    /// Gone under a ptrace call (killed, or its process exiting): only its
    /// exit status is still to come.
    Vanished,
}

pub(super) struct Thread {
    pub(super) tid: i32,
    pub(super) ptid: i32,
    pub(super) state: State,
    pub(super) rip: u64,
    /// User instructions it retired.
    pub(super) instructions: u64,
    /// Per-CPU mode: its syscall instruction was already retired into the
    /// CPU's trace when it entered the kernel.
    pub(super) syscall_retired: bool,
    /// The instruction being stepped and where it was.
    pub(super) stepping: Option<(u64, Insn)>,
    pub(super) pending_signal: Option<Signal>,
    /// The next step delivers a caught signal: no instruction retires.
    pub(super) entering_handler: bool,
    /// Resume with a TSC (after a context switch or a long syscall).
    pub(super) resync: bool,
    pub(super) log: Vec<u64>,
    pub(super) comm: String,
    /// Per-CPU mode: the virtual CPU it last ran on.
    pub(super) cpu: Option<u32>,
}

impl Tracer {
    pub(super) fn add_thread(&mut self, tid: i32, ptid: i32, state: State) {
        let comm = procfs::comm(self.pid, tid);
        // Per-CPU mode: the CPUs' units start as threads arrive on them.
        if !self.opts.per_cpu {
            self.unit(tid);
        }
        self.threads.insert(
            tid,
            Thread {
                tid,
                ptid,
                state,
                rip: 0,
                instructions: 0,
                syscall_retired: false,
                stepping: None,
                pending_signal: None,
                entering_handler: false,
                resync: false,
                log: Vec::new(),
                comm,
                cpu: None,
            },
        );
        self.order.push_back(tid);
        self.arm_breakpoint(&[tid]);
        // A CPU's event starts when its first thread arrives (`switch_to`).
        if !self.opts.per_cpu {
            self.emit(SidebandEvent::ItraceStart { pid: self.pid, tid });
        }
    }

    pub(super) fn remove_thread(&mut self, tid: i32) {
        if let Some(t) = self.threads.remove(&tid) {
            if matches!(t.state, State::InSyscall { .. }) {
                self.in_syscall -= 1;
            }
            // On the CPU it ran on last, in per-CPU mode.
            let cpu = self.cpu_of(tid).or(t.cpu).unwrap_or_default();
            self.emit_on(
                cpu,
                SidebandEvent::Exit {
                    pid: self.pid,
                    ppid: self.pid,
                    tid,
                    ptid: t.ptid,
                },
            );
            // A CPU-wide event also sees the dead thread's last switch-out,
            // the idle task coming in; a thread's own inherited event is
            // gone by then (perf_event_exit_task runs first).
            if self.opts.system_wide {
                if let Some(cpu) = self.cpu_of(tid) {
                    self.switch_out(tid, cpu, 0);
                }
            }
            for slot in self.on_cpu.iter_mut().filter(|s| **s == Some(tid)) {
                *slot = None;
            }
            if self.last_switched == Some(tid) {
                self.last_switched = None;
            }
            self.finish_thread(t);
        }
        self.order.retain(|&x| x != tid);
    }

    /// `r` failed because its thread is gone (ESRCH: a tracee can be killed
    /// at any time): the thread is no longer driven, and its exit status,
    /// which waitpid still gives, removes it. Other failures stay errors.
    pub(super) fn vanished<T>(&mut self, r: &Result<T, CaptureError>) -> bool {
        let Err(CaptureError::Ptrace {
            tid,
            errno: nix::errno::Errno::ESRCH,
            ..
        }) = r
        else {
            return false;
        };
        if let Some(t) = self.threads.get_mut(tid) {
            if let State::InSyscall { .. } = t.state {
                self.in_syscall -= 1;
            }
            t.state = State::Vanished;
            t.stepping = None;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::ThreadTrace;
    use nix::errno::Errno;

    fn ptrace_error(tid: i32, errno: Errno) -> Result<(), CaptureError> {
        Err(CaptureError::Ptrace {
            op: "singlestep",
            tid,
            errno,
        })
    }

    #[test]
    fn each_new_thread_starts_its_own_trace_per_thread() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Starting);
        assert_eq!(tr.order, [10, 11]);
        assert_eq!(tr.units.len(), 2);
        assert_eq!(tr.threads[&11].state, State::Starting);
        assert_eq!(tr.threads[&11].ptid, 10);
        let starts: Vec<_> = tr
            .sideband
            .iter()
            .filter_map(|s| match s.event {
                SidebandEvent::ItraceStart { tid, .. } => Some(tid),
                _ => None,
            })
            .collect();
        assert_eq!(starts, [10, 11]);
    }

    #[test]
    fn per_cpu_threads_start_no_unit_of_their_own() {
        let mut tr = Tracer::for_tests(true);
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Starting);
        // The CPUs' units and trace starts come as threads run on them.
        assert!(tr.units.is_empty());
        assert!(!tr
            .sideband
            .iter()
            .any(|s| matches!(s.event, SidebandEvent::ItraceStart { .. })));
    }

    #[test]
    fn a_removed_thread_exits_and_leaves_its_trace() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Ready);
        {
            let t = tr.threads.get_mut(&11).unwrap();
            t.state = State::InSyscall {
                since: 0,
                others: 0,
            };
            t.instructions = 7;
        }
        tr.in_syscall = 1;
        tr.on_cpu = vec![Some(11)];
        tr.remove_thread(11);
        assert_eq!(tr.in_syscall, 0);
        assert_eq!(tr.on_cpu, [None]);
        assert_eq!(tr.order, [10]);
        assert!(!tr.units.contains_key(&11));
        assert!(matches!(
            tr.sideband.last().unwrap().event,
            SidebandEvent::Exit {
                tid: 11,
                ptid: 10,
                ..
            }
        ));
        let [ThreadTrace {
            tid: 11,
            instructions: 7,
            aux,
            ..
        }] = &tr.finished[..]
        else {
            panic!("{:?}", tr.finished);
        };
        // The unit's PSB+ at least.
        assert!(!aux.is_empty());
        // A thread not known is only taken out of the order.
        tr.remove_thread(99);
        assert_eq!(tr.finished.len(), 1);
    }

    #[test]
    fn only_esrch_means_a_thread_vanished() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        tr.threads.get_mut(&10).unwrap().state = State::InSyscall {
            since: 0,
            others: 0,
        };
        tr.in_syscall = 1;
        assert!(!tr.vanished(&Ok(())));
        assert!(!tr.vanished(&ptrace_error(10, Errno::EPERM)));
        assert_eq!(
            tr.threads[&10].state,
            State::InSyscall {
                since: 0,
                others: 0
            }
        );
        assert!(tr.vanished(&ptrace_error(10, Errno::ESRCH)));
        assert_eq!(tr.threads[&10].state, State::Vanished);
        assert_eq!(tr.in_syscall, 0);
        // A thread already gone from the table vanished as well.
        assert!(tr.vanished(&ptrace_error(99, Errno::ESRCH)));
    }
}
