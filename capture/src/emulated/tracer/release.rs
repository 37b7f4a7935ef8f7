//! The release module lets the process go when a capture ends, however it
//! ends. Each thread is detached from the state it is in: a ready thread
//! at once, a stepping one once its step is over. A step's trap must not
//! outlive the detach, since an untraced thread dies of a SIGTRAP; and a
//! signal meant for the program must still reach it.

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;

use super::stops::Trap;
use super::threads::State;
use super::Tracer;
use crate::emulated::ptrace;
use crate::procfs;
use crate::tracee;

impl Tracer {
    /// Stops tracing every live thread and lets it go on untraced.
    pub(super) fn release(&mut self) {
        if let Some(bp) = &mut self.breakpoint {
            bp.disarm();
        }
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            let t = self.threads.remove(&tid).unwrap();
            let now = self.now;
            match t.state {
                State::Ready => {
                    if self.thread_tracing(tid) {
                        self.unit(tid).interrupt(t.rip, now);
                    }
                    let _ = tracee::detach(tid, t.pending_signal);
                }
                State::Starting => {
                    let _ = ptrace::interrupt(tid);
                    let _ = tracee::wait(Some(tid), false);
                    let _ = tracee::detach(tid, None);
                }
                State::Stepping | State::InSyscall { .. } => {
                    // Wait for the step to end, then let go.
                    let _ = ptrace::interrupt(tid);
                    let mut pending = t.pending_signal;
                    if let Ok(Some(WaitStatus::Stopped(_, sig))) = tracee::wait(Some(tid), false) {
                        if sig != Signal::SIGTRAP {
                            pending = Some(sig);
                        }
                    }
                    swallow_step_trap(tid);
                    let _ = tracee::detach(tid, pending);
                }
                // Reap its exit status (it may still be a traced zombie).
                State::Vanished => {
                    let _ = tracee::wait(Some(tid), true);
                }
            }
            self.finish_thread(t);
        }
        self.order.clear();
    }
}

/// A step into a syscall that our interrupt ended queues the step's
/// SIGTRAP for when the syscall returns; left pending past the detach it
/// would kill the process. Let it arrive now, as a signal-delivery stop
/// the detach then discards (a SIGTRAP of the program's own is kept).
fn swallow_step_trap(tid: i32) {
    if !procfs::signal_pending(tid, Signal::SIGTRAP as i32) {
        return;
    }
    if tracee::cont(tid, None).is_err() {
        return;
    }
    loop {
        match tracee::wait(Some(tid), false) {
            Ok(Some(WaitStatus::Stopped(_, Signal::SIGTRAP))) => {
                if Trap::of(ptrace::si_code(tid).unwrap_or(0)) != Trap::Step {
                    let _ = tracee::detach(tid, Some(Signal::SIGTRAP));
                }
                return;
            }
            // Another signal first: hold it for the detach, keep going.
            Ok(Some(WaitStatus::Stopped(_, sig))) => {
                if tracee::cont(tid, Some(sig)).is_err() {
                    return;
                }
            }
            Ok(Some(WaitStatus::PtraceEvent(..))) => {
                if tracee::cont(tid, None).is_err() {
                    return;
                }
            }
            _ => return,
        }
    }
}
