//! The stops module interprets what waitpid reports about a traced thread.
//! One kind of stop means several things: a SIGTRAP can end a single step
//! or be a signal for the program, a stop without movement can be a fault
//! before the instruction ran, and ptrace events announce new threads, an
//! exec and exits. Each is turned into the right state change, retired
//! instruction or sideband record, so that the trace matches what the
//! program did.

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;

use super::threads::State;
use super::Tracer;
use crate::emulated::ptrace;
use crate::error::CaptureError;
use crate::insn::InsnClass;
use crate::procfs;
use crate::recording::SidebandEvent;
use crate::tracee;

/// The `si_code` of a signal the kernel raised itself (SI_KERNEL); the
/// TRAP_* codes of a step's own trap are below it.
const SI_KERNEL: i32 = 0x80;

/// What a SIGTRAP stop is, by its `si_code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trap {
    /// A TRAP_* code: the end of a single step.
    Step,
    /// SI_KERNEL: not the end of a step, and not passed on to the thread.
    Kernel,
    /// Sent by a process (`si_code <= 0`): the program's own signal.
    Signal,
}

impl Trap {
    pub(super) fn of(si_code: i32) -> Trap {
        if si_code > 0 && si_code < SI_KERNEL {
            Trap::Step
        } else if si_code == SI_KERNEL {
            Trap::Kernel
        } else {
            Trap::Signal
        }
    }
}

/// Where a thread resumes whose registers hold `rip`, `rax` and
/// `orig_rax`: a thread stopped inside an interrupted syscall (its
/// `orig_rax` a syscall number, its `rax` a -ERESTART* code) goes back
/// to its two-byte `syscall` instruction to run it again.
fn resume_ip(rip: u64, rax: u64, orig_rax: u64) -> u64 {
    // -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK.
    let restarts = orig_rax as i64 >= 0 && (-516..=-512).contains(&(rax as i64));
    if restarts {
        rip - 2
    } else {
        rip
    }
}

/// SIGILL's `si_code` for an illegal opcode, as the kernel sends it for a
/// #UD (`<asm-generic/siginfo.h>`; the libc crate has no Linux constant).
const ILL_ILLOPN: i32 = 2;

/// Where a thread seen for the first time (new, or just attached) resumes.
/// One stopped inside an interrupted syscall goes back to its `syscall`
/// instruction when resumed, to run it again: stepping it blocks in the
/// kernel, which the tracer must know not to wait for.
fn first_rip(tid: i32) -> Result<u64, CaptureError> {
    let regs = ptrace::regs(tid)?;
    Ok(resume_ip(regs.rip, regs.rax, regs.orig_rax))
}

impl Tracer {
    /// Handles one wait status. Returns `true` when the process is gone.
    pub(super) fn handle(&mut self, status: WaitStatus) -> Result<bool, CaptureError> {
        match status {
            WaitStatus::Exited(pid, code) => {
                if pid.as_raw() == self.pid {
                    self.exit_code = Some(code);
                }
                self.remove_thread(pid.as_raw());
                return Ok(self.threads.is_empty());
            }
            WaitStatus::Signaled(pid, sig, _) => {
                if pid.as_raw() == self.pid {
                    self.exit_code = Some(128 + sig as i32);
                }
                self.remove_thread(pid.as_raw());
                return Ok(self.threads.is_empty());
            }
            WaitStatus::Stopped(pid, sig) => {
                let tid = pid.as_raw();
                let Some(t) = self.threads.get(&tid) else {
                    return Ok(false);
                };
                if t.state == State::Starting {
                    // A new thread's first stop.
                    let rip = first_rip(tid)?;
                    let t = self.threads.get_mut(&tid).unwrap();
                    t.rip = rip;
                    t.state = State::Ready;
                    t.comm = procfs::comm(self.pid, tid);
                    return Ok(false);
                }
                let regs = ptrace::regs(tid)?;
                let mut rip = regs.rip;
                let prev = t.stepping.map(|(ip, _)| ip);
                // A PTWRITE on a CPU without it (#UD, SIGILL): the tracer
                // is the PT unit, so it runs it as the CPU would, a no-op
                // that writes a packet, and the program never sees the
                // fault.
                let mut sig = Some(sig);
                if let (Some(Signal::SIGILL), Some((ip, insn))) = (sig, t.stepping) {
                    // The #UD the CPU raises, not a SIGILL sent by a process.
                    if ip == rip
                        && matches!(insn.class, InsnClass::PtWrite { .. })
                        && ptrace::si_code(tid)? == ILL_ILLOPN
                    {
                        rip = insn.next_ip(ip);
                        ptrace::set_rip(tid, regs, rip)?;
                        sig = Some(Signal::SIGTRAP);
                    }
                }
                let entering_handler = t.entering_handler;
                // A step ends in a SIGTRAP with a TRAP_* code; a SIGTRAP sent
                // by the kernel or a process (si_code <= 0 or SI_KERNEL) is a
                // signal, not the end of a step. When the step moved the IP it
                // is the step's own trap, which spares the hot path a syscall.
                let mut step_trap = false;
                if sig == Some(Signal::SIGTRAP) && prev.is_some() && Some(rip) != prev {
                    step_trap = true;
                    sig = None;
                } else if sig == Some(Signal::SIGTRAP) {
                    let trap = Trap::of(ptrace::si_code(tid)?);
                    step_trap = trap == Trap::Step;
                    if trap != Trap::Signal {
                        sig = None;
                    }
                }
                if step_trap || Some(rip) != prev || entering_handler {
                    self.retire(tid, rip);
                    self.watch_slow_calls(tid, rip, regs.rsp);
                } else {
                    // A signal before the instruction ran (a fault).
                    let t = self.threads.get_mut(&tid).unwrap();
                    if let State::InSyscall { .. } = t.state {
                        self.in_syscall -= 1;
                    }
                    t.state = State::Ready;
                    t.stepping = None;
                    t.syscall_retired = false;
                }
                if let Some(sig) = sig {
                    self.threads.get_mut(&tid).unwrap().pending_signal = Some(sig);
                }
                self.after_syscall(tid, regs.orig_rax);
            }
            WaitStatus::PtraceEvent(pid, _, event) => {
                let tid = pid.as_raw();
                match event {
                    libc::PTRACE_EVENT_CLONE => {
                        let new = ptrace::event_msg(tid)? as i32;
                        if procfs::tgid(new).is_some_and(|g| g != self.pid) {
                            // Not a thread of ours (clone without CLONE_THREAD).
                            let _ = tracee::detach(new, None);
                        } else if !self.threads.contains_key(&new) {
                            self.emit(SidebandEvent::Fork {
                                pid: self.pid,
                                ppid: self.pid,
                                tid: new,
                                ptid: tid,
                            });
                            self.add_thread(new, tid, State::Starting);
                            let comm = procfs::comm(self.pid, new);
                            self.emit(SidebandEvent::Comm {
                                pid: self.pid,
                                tid: new,
                                comm,
                                exec: false,
                            });
                        }
                        // The clone syscall is still being stepped.
                        ptrace::step(tid, None)?;
                        // The new thread's first stop is on its way: take it
                        // now, so that when the thread may first run does
                        // not depend on how busy the machine is (under load
                        // the parent stepped whole time slices before it).
                        if self.threads.get(&new).map(|t| t.state) == Some(State::Starting) {
                            if let Some(st) = tracee::wait(Some(new), false)? {
                                if self.handle(st)? {
                                    return Ok(true);
                                }
                            }
                        }
                    }
                    libc::PTRACE_EVENT_EXEC => {
                        // The exec syscall retired; a new image is mapped.
                        let rip = ptrace::rip(tid)?;
                        if let Some(t) = self.threads.get_mut(&tid) {
                            if let Some((ip, insn)) = t.stepping {
                                self.retire(tid, insn.next_ip(ip));
                            }
                        }
                        if let Some(t) = self.threads.get_mut(&tid) {
                            t.rip = rip;
                            t.state = State::Ready;
                            t.comm = procfs::comm(self.pid, tid);
                            t.resync = true;
                        }
                        self.exec_sideband(tid);
                    }
                    libc::PTRACE_EVENT_EXIT => {
                        if let Some(t) = self.threads.get(&tid) {
                            if let Some((ip, insn)) = t.stepping {
                                if insn.class == InsnClass::KernelEntry {
                                    self.retire(tid, insn.next_ip(ip));
                                }
                            }
                        }
                        self.remove_thread(tid);
                        let _ = tracee::cont(tid, None);
                        return Ok(self.threads.is_empty());
                    }
                    _ => {
                        // PTRACE_EVENT_STOP (group stop or our interrupt).
                        if let Some(t) = self.threads.get_mut(&tid) {
                            if t.state == State::Starting {
                                t.rip = first_rip(tid)?;
                                t.state = State::Ready;
                            } else {
                                let _ = ptrace::step(tid, None);
                            }
                        } else {
                            let _ = tracee::cont(tid, None);
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::Pid;

    #[test]
    fn trap_codes_tell_a_step_from_a_signal() {
        // TRAP_TRACE, TRAP_BRKPT, TRAP_HWBKPT.
        assert_eq!(Trap::of(2), Trap::Step);
        assert_eq!(Trap::of(1), Trap::Step);
        assert_eq!(Trap::of(4), Trap::Step);
        assert_eq!(Trap::of(0x80), Trap::Kernel);
        // SI_USER (kill), SI_TKILL (tgkill, raise).
        assert_eq!(Trap::of(0), Trap::Signal);
        assert_eq!(Trap::of(-6), Trap::Signal);
    }

    #[test]
    fn an_interrupted_syscall_resumes_at_its_syscall_instruction() {
        let rip = 0x7f00_0000_1234;
        for errno in 512..=516 {
            assert_eq!(resume_ip(rip, (-errno as i64) as u64, 202), rip - 2);
        }
        // A syscall that returned (here -EINTR) or no syscall at all.
        assert_eq!(resume_ip(rip, (-4i64) as u64, 202), rip);
        assert_eq!(resume_ip(rip, 0, 202), rip);
        assert_eq!(resume_ip(rip, (-512i64) as u64, u64::MAX), rip);
    }

    #[test]
    fn exits_end_threads_and_the_leaders_status_is_kept() {
        let mut tr = Tracer::for_tests(false);
        let pid = tr.pid;
        tr.add_thread(pid, pid, State::Ready);
        tr.add_thread(pid + 1, pid, State::Ready);
        // A stop of a thread the tracer does not know is ignored.
        let stopped = WaitStatus::Stopped(Pid::from_raw(pid + 7), Signal::SIGSTOP);
        assert!(!tr.handle(stopped).unwrap());
        let thread_exit = WaitStatus::Exited(Pid::from_raw(pid + 1), 3);
        assert!(!tr.handle(thread_exit).unwrap());
        assert_eq!(tr.exit_code, None, "only the leader's status counts");
        let killed = WaitStatus::Signaled(Pid::from_raw(pid), Signal::SIGKILL, false);
        assert!(tr.handle(killed).unwrap(), "the last thread is gone");
        assert_eq!(tr.exit_code, Some(128 + 9));
        assert_eq!(tr.finished.len(), 2);
        let exits = tr
            .sideband
            .iter()
            .filter(|s| matches!(s.event, SidebandEvent::Exit { .. }))
            .count();
        assert_eq!(exits, 2);
    }

    #[test]
    fn the_leaders_exit_code_is_its_status() {
        let mut tr = Tracer::for_tests(false);
        let pid = tr.pid;
        tr.add_thread(pid, pid, State::Ready);
        assert!(tr
            .handle(WaitStatus::Exited(Pid::from_raw(pid), 3))
            .unwrap());
        assert_eq!(tr.exit_code, Some(3));
    }
}
