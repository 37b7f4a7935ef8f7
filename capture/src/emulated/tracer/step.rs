//! The step module moves one thread by one instruction. Before the step it
//! decodes the instruction and tells the PT unit that user code runs; after
//! the step it retires what actually executed, which is not always the
//! instruction stepped: a REP string instruction retires one iteration at
//! a time, a trap can be reported before an instruction ran, and a step
//! that delivers a signal runs no user instruction at all. Getting this
//! right keeps the instruction count and the virtual clock exact.

use super::threads::State;
use super::Tracer;
use crate::emulated::ptrace;
use crate::error::CaptureError;
use crate::insn::InsnClass;
use crate::procfs;

impl Tracer {
    /// Steps thread `tid` over its next instruction. Returns `true` when the
    /// trigger fired instead.
    pub(super) fn step(&mut self, tid: i32) -> Result<bool, CaptureError> {
        let (rip, signal) = {
            let t = &self.threads[&tid];
            (t.rip, t.pending_signal)
        };
        self.switch_to(tid);
        self.range_step(tid, rip);
        if self.symbol_reached(tid, rip) {
            return Ok(true);
        }
        self.threads.get_mut(&tid).unwrap().pending_signal = None;
        if let Some(sig) = signal {
            if procfs::signal_caught(tid, sig as i32) {
                // The kernel builds the handler frame and stops at the
                // handler's first instruction: an async exit from user space.
                let now = self.now;
                if self.thread_tracing(tid) {
                    self.unit(tid).interrupt(rip, now);
                }
                let t = self.threads.get_mut(&tid).unwrap();
                t.entering_handler = true;
                t.stepping = None;
                t.state = State::Stepping;
                ptrace::step(tid, Some(sig))?;
                return Ok(false);
            }
        }
        let insn = self.decode_at(tid, rip)?;
        let insn = self.with_ptwrite_operand(tid, rip, insn)?;
        let now = self.now;
        // A syscall stepped again after a stop that came before it ran was
        // already written into the CPU's trace.
        let again = self.threads[&tid].syscall_retired;
        let resync = std::mem::take(&mut self.threads.get_mut(&tid).unwrap().resync);
        if !again {
            self.unit(tid).enter_user(rip, now, resync);
        }
        if self.opts.per_cpu && insn.class == InsnClass::KernelEntry && !again {
            // Other threads may run while this one is in the kernel: its
            // TIP.PGD goes into the CPU's trace now, not on return.
            self.now += 1;
            self.steps_total += 1;
            let now = self.now;
            self.unit(tid).retire(rip, &insn, insn.next_ip(rip), now);
        }
        let per_cpu = self.opts.per_cpu;
        let t = self.threads.get_mut(&tid).unwrap();
        t.stepping = Some((rip, insn));
        if insn.class == InsnClass::KernelEntry {
            if per_cpu && !again {
                t.instructions += 1;
                t.syscall_retired = true;
                if self.opts.ip_log {
                    t.log.push(rip);
                }
            }
            t.state = State::InSyscall {
                since: now,
                others: self.steps_total,
            };
            self.in_syscall += 1;
        } else {
            t.state = State::Stepping;
        }
        ptrace::step(tid, signal)?;
        Ok(false)
    }

    /// The thread stopped after a step: retire what it executed.
    pub(super) fn retire(&mut self, tid: i32, new_rip: u64) {
        let now = self.now;
        let steps_total = self.steps_total;
        let ip_log = self.opts.ip_log;
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let mut blocked = false;
        let mut entered = None;
        if let State::InSyscall { since, others } = t.state {
            entered = Some(since);
            self.in_syscall -= 1;
            blocked = others != steps_total;
            if blocked || now > since + 1 {
                t.resync = true;
            }
        }
        t.state = State::Ready;
        if blocked && !self.opts.per_cpu {
            // Other threads ran meanwhile: it was scheduled out. (Per CPU,
            // switch_to says when.)
            self.unit(tid).scheduled_out();
        }
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        t.rip = new_rip;
        if std::mem::take(&mut t.entering_handler) {
            return;
        }
        let Some((ip, insn)) = t.stepping.take() else {
            return;
        };
        if new_rip == ip && !insn.targets(ip) {
            // Not retired: one iteration of a REP string instruction, or a
            // trap reported on the way out of a syscall (after exec, attach
            // or clone) before the instruction ran.
            t.stepping = Some((ip, insn));
            if insn.repeats {
                self.now += 1;
            }
            return;
        }
        if std::mem::take(&mut t.syscall_retired) {
            return;
        }
        self.now += 1;
        self.steps_total += 1;
        let next = if insn.class == InsnClass::KernelEntry {
            insn.next_ip(ip)
        } else {
            new_rip
        };
        t.instructions += 1;
        if ip_log {
            t.log.push(ip);
        }
        // A syscall retires as it enters the kernel: its TIP.PGD (and the
        // CYC before it) count the cycles up to the entry, not the time
        // the kernel then took, which the TSC on return to user code
        // tells, as on the hardware.
        let now = match entered {
            Some(since) if insn.class == InsnClass::KernelEntry => since + 1,
            _ => self.now,
        };
        self.unit(tid).retire(ip, &insn, next, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::classify;

    const NOP: &[u8] = &[0x90];
    const REP_MOVSB: &[u8] = &[0xf3, 0xa4];
    const SYSCALL: &[u8] = &[0x0f, 0x05];
    const IP: u64 = 0x40_1000;

    /// A tracer with thread 10 being stepped over `bytes` at [`IP`], as
    /// [`Tracer::step`] leaves it.
    fn stepping(bytes: &[u8]) -> Tracer {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        let insn = classify(IP, bytes).unwrap();
        let now = tr.now;
        tr.unit(10).enter_user(IP, now, false);
        let t = tr.threads.get_mut(&10).unwrap();
        t.rip = IP;
        t.stepping = Some((IP, insn));
        if insn.class == InsnClass::KernelEntry {
            t.state = State::InSyscall {
                since: now,
                others: 0,
            };
            tr.in_syscall = 1;
        } else {
            t.state = State::Stepping;
        }
        tr
    }

    #[test]
    fn an_instruction_retires_once_and_takes_a_cycle() {
        let mut tr = stepping(NOP);
        let now = tr.now;
        tr.retire(10, IP + 1);
        let t = &tr.threads[&10];
        assert_eq!((t.state, t.rip, t.instructions), (State::Ready, IP + 1, 1));
        assert!(t.stepping.is_none());
        assert_eq!(t.log, [IP]);
        assert_eq!((tr.now, tr.steps_total), (now + 1, 1));
        assert_eq!(tr.units[&10].insn_count, 1);
        // A stop of a thread that is no longer known retires nothing.
        tr.retire(99, IP);
        assert_eq!(tr.steps_total, 1);
    }

    #[test]
    fn a_rep_iteration_takes_time_but_does_not_retire() {
        let mut tr = stepping(REP_MOVSB);
        let now = tr.now;
        tr.retire(10, IP);
        let t = &tr.threads[&10];
        assert_eq!((t.state, t.instructions), (State::Ready, 0));
        assert!(t.stepping.is_some(), "still being executed");
        assert_eq!((tr.now, tr.steps_total), (now + 1, 0));
        tr.retire(10, IP + 2);
        assert_eq!(tr.threads[&10].instructions, 1);
    }

    #[test]
    fn a_trap_before_the_instruction_ran_retires_nothing() {
        let mut tr = stepping(NOP);
        let now = tr.now;
        tr.retire(10, IP);
        assert_eq!(tr.threads[&10].instructions, 0);
        assert!(tr.threads[&10].stepping.is_some());
        assert_eq!((tr.now, tr.steps_total), (now, 0));
    }

    #[test]
    fn entering_a_signal_handler_retires_nothing() {
        let mut tr = stepping(NOP);
        tr.threads.get_mut(&10).unwrap().entering_handler = true;
        tr.retire(10, 0x50_0000);
        let t = &tr.threads[&10];
        assert_eq!((t.rip, t.instructions), (0x50_0000, 0));
        assert!(!t.entering_handler);
        assert_eq!(tr.steps_total, 0);
    }

    #[test]
    fn a_quick_syscall_resumes_without_a_tsc() {
        let mut tr = stepping(SYSCALL);
        tr.retire(10, IP + 2);
        let t = &tr.threads[&10];
        assert_eq!((t.state, t.instructions), (State::Ready, 1));
        assert!(!t.resync);
        assert_eq!(tr.in_syscall, 0);
        // The syscall left user space: TIP.PGD.
        assert!(!tr.thread_tracing(10));
    }

    #[test]
    fn a_syscall_others_ran_during_resumes_with_a_tsc() {
        let mut tr = stepping(SYSCALL);
        tr.steps_total = 5;
        tr.retire(10, IP + 2);
        assert!(tr.threads[&10].resync);
        let mut tr = stepping(SYSCALL);
        tr.now += 2;
        tr.retire(10, IP + 2);
        assert!(tr.threads[&10].resync);
    }

    #[test]
    fn a_syscall_retired_on_entry_is_not_retired_again() {
        let mut tr = stepping(SYSCALL);
        {
            let t = tr.threads.get_mut(&10).unwrap();
            t.syscall_retired = true;
            t.instructions = 1;
        }
        tr.retire(10, IP + 2);
        let t = &tr.threads[&10];
        assert_eq!(t.instructions, 1);
        assert!(!t.syscall_retired);
        assert_eq!(tr.steps_total, 0);
    }
}
