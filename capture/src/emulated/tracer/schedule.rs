//! The schedule module decides which thread runs, on which virtual CPU,
//! and which PT unit sees it. Threads take turns in time slices, so that a
//! thread spinning on another one cannot starve it; each change of thread
//! is a context switch, which the trace shows as the hardware would: the
//! thread going out leaves traced code, and the one coming in resumes with
//! a TSC.
//!
//! In per-CPU mode there is one PT unit per virtual CPU, as perf's default
//! `perf record -e intel_pt//u CMD` opens one event per CPU, inherited by
//! every thread of the command. A thread that comes back after another one
//! ran migrates to the next CPU, so the trace of one thread is spread over
//! the CPUs' buffers as on a real machine: the CPU it leaves records its
//! switch-out (its unit has already written the TIP.PGD), the CPU it
//! arrives on records the switch-in and its unit resumes with a TIP.PGE
//! after a TSC. Each CPU's first thread also gets the ITRACE_START record
//! the kernel writes when the CPU's event first starts tracing.
//!
//! System-wide (`perf record -a`), the events are the CPUs' own: the
//! kernel records every switch on a CPU, so a CPU that goes idle records
//! the idle task (pid 0, tid 0) switching in, and one that leaves idle
//! records it switching out; its event starts tracing while the idle task
//! runs, so ITRACE_START names that task.

use super::threads::State;
use super::Tracer;
use crate::emulated::hardware::ThreadPt;
use crate::recording::SidebandEvent;

/// Virtual time a context switch takes in per-CPU mode.
const CONTEXT_SWITCH_NS: u64 = 500;

/// The key of virtual CPU `cpu`'s PT unit in per-CPU mode (tids, the keys
/// in per-thread mode, are positive).
pub(super) fn cpu_unit(cpu: u32) -> i32 {
    -1 - cpu as i32
}

/// Instructions a thread runs while others are ready before it is preempted
/// (20 µs of virtual time): short, so that a thread spinning on another one
/// lets it run within a fraction of a second of wall time.
const TIME_SLICE: u64 = 20_000;

impl Tracer {
    /// The virtual CPU `tid` is switched in on, in per-CPU mode.
    pub(super) fn cpu_of(&self, tid: i32) -> Option<u32> {
        self.on_cpu
            .iter()
            .position(|&t| t == Some(tid))
            .map(|c| c as u32)
    }

    fn unit_key(&self, tid: i32) -> i32 {
        if self.opts.per_cpu {
            cpu_unit(self.cpu_of(tid).unwrap_or_default())
        } else {
            tid
        }
    }

    /// The PT unit that traces `tid` now: its own, or its CPU's.
    pub(super) fn unit(&mut self, tid: i32) -> &mut ThreadPt {
        let key = self.unit_key(tid);
        let (settings, now, filter) = (&self.opts.settings, self.now, &self.ip_filter);
        let paused = self.range.is_some();
        self.units.entry(key).or_insert_with(|| {
            let mut unit = ThreadPt::new(settings.clone(), now);
            unit.set_filter(filter.clone());
            if paused {
                unit.start_paused();
            }
            unit
        })
    }

    /// Whether `tid`'s user code is being traced right now.
    pub(super) fn thread_tracing(&self, tid: i32) -> bool {
        if self.opts.per_cpu && self.cpu_of(tid).is_none() {
            return false;
        }
        self.units
            .get(&self.unit_key(tid))
            .is_some_and(|u| u.tracing())
    }

    /// Per-CPU mode: puts `tid` on a CPU, unless it was the last thread put
    /// on one. A thread coming back after another one ran migrates to the
    /// CPU after the one it last ran on (a new thread to the one after the
    /// last thread's), so threads move between CPUs as they do on a real
    /// machine. The thread there before it is switched out, and so is `tid`
    /// from the CPU it leaves; each was already out of user space
    /// (syscall, preemption, signal) or leaves it now. The switch records
    /// fall between the TIP.PGD and the new thread's TIP.PGE, which comes
    /// with a TSC as after any context switch.
    pub(super) fn switch_to(&mut self, tid: i32) {
        if !self.opts.per_cpu || self.last_switched == Some(tid) {
            return;
        }
        let n = self.opts.cpus.max(1);
        if self.on_cpu.len() != n as usize {
            self.on_cpu.resize(n as usize, None);
        }
        let from = self.threads.get(&tid).and_then(|t| t.cpu);
        let after = from.or_else(|| self.last_switched.and_then(|p| self.cpu_of(p)));
        let cpu = after.map_or(0, |c| (c + 1) % n);
        self.last_switched = Some(tid);
        if self.cpu_of(tid) == Some(cpu) {
            return;
        }
        // The kernel's share of a switch: the records fall strictly after
        // the last instruction of the thread going out.
        self.now += CONTEXT_SWITCH_NS;
        let pid = self.pid;
        let prev = self.on_cpu[cpu as usize];
        if let Some(p) = prev {
            self.switch_out(p, cpu, tid);
        }
        if let Some(old) = self.cpu_of(tid) {
            self.switch_out(tid, old, 0);
        }
        if self.units.contains_key(&cpu_unit(cpu)) {
            // Not the CPU's first thread: its event is already tracing.
        } else {
            let mut unit = ThreadPt::new(self.opts.settings.clone(), self.now);
            unit.set_filter(self.ip_filter.clone());
            self.units.insert(cpu_unit(cpu), unit);
            let (pid, tid) = if self.opts.system_wide {
                (0, 0)
            } else {
                (pid, tid)
            };
            self.emit_on(cpu, SidebandEvent::ItraceStart { pid, tid });
        }
        self.on_cpu[cpu as usize] = Some(tid);
        if self.opts.system_wide && prev.is_none() {
            self.emit_on(
                cpu,
                SidebandEvent::Switch {
                    pid: 0,
                    tid: 0,
                    out: true,
                    preempt: false,
                    next_prev: (pid, tid),
                },
            );
        }
        let (prev_pid, prev_tid) = prev.map_or((0, 0), |p| (pid, p));
        self.emit_on(
            cpu,
            SidebandEvent::Switch {
                pid,
                tid,
                out: false,
                preempt: false,
                next_prev: (prev_pid, prev_tid),
            },
        );
        if let Some(t) = self.threads.get_mut(&tid) {
            t.resync = true;
            t.cpu = Some(cpu);
        }
    }

    /// Per-CPU mode: `tid` leaves `cpu` for `next` (0: none, the CPU goes
    /// idle). Its trace there ends first if it was still in user code.
    pub(super) fn switch_out(&mut self, tid: i32, cpu: u32, next: i32) {
        if let Some(rip) = self.threads.get(&tid).map(|t| t.rip) {
            if self.thread_tracing(tid) {
                let now = self.now;
                self.unit(tid).interrupt(rip, now);
            }
        }
        if let Some(unit) = self.units.get_mut(&cpu_unit(cpu)) {
            unit.scheduled_out();
        }
        let pid = self.pid;
        let preempt = self
            .threads
            .get(&tid)
            .is_some_and(|t| t.state == State::Ready);
        self.emit_on(
            cpu,
            SidebandEvent::Switch {
                pid,
                tid,
                out: true,
                preempt,
                next_prev: if next > 0 { (pid, next) } else { (0, 0) },
            },
        );
        if self.opts.system_wide && next == 0 {
            self.emit_on(
                cpu,
                SidebandEvent::Switch {
                    pid: 0,
                    tid: 0,
                    out: false,
                    preempt: false,
                    next_prev: (pid, tid),
                },
            );
        }
        self.on_cpu[cpu as usize] = None;
    }

    pub(super) fn ready_thread(&mut self) -> Option<i32> {
        // Stay on the current thread while it is ready, for at most a time
        // slice while others wait: a thread switch is a context switch.
        if self.steps_total - self.slice_start >= TIME_SLICE {
            self.preempt_current();
        }
        for _ in 0..self.order.len() {
            let tid = *self.order.front()?;
            if self
                .threads
                .get(&tid)
                .is_some_and(|t| t.state == State::Ready)
            {
                if self.current != Some(tid) {
                    self.current = Some(tid);
                    self.slice_start = self.steps_total;
                }
                return Some(tid);
            }
            self.order.rotate_left(1);
        }
        None
    }

    /// Ends the current thread's time slice if another thread is ready: a
    /// timer interrupt (FUP, TIP.PGD), and a TSC when it resumes.
    fn preempt_current(&mut self) {
        self.slice_start = self.steps_total;
        let Some(cur) = self.current else { return };
        let others_ready = self
            .threads
            .values()
            .any(|t| t.tid != cur && t.state == State::Ready);
        if !others_ready || self.order.front() != Some(&cur) {
            return;
        }
        let now = self.now;
        if let Some(t) = self
            .threads
            .get_mut(&cur)
            .filter(|t| t.state == State::Ready)
        {
            t.resync = true;
            let rip = t.rip;
            self.order.rotate_left(1);
            if self.thread_tracing(cur) {
                self.unit(cur).interrupt(rip, now);
            }
            if !self.opts.per_cpu {
                // Per CPU, switch_to schedules it out when the next runs.
                self.unit(cur).scheduled_out();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switches(tr: &Tracer) -> Vec<(i32, bool, bool, (i32, i32))> {
        tr.sideband
            .iter()
            .filter_map(|s| match s.event {
                SidebandEvent::Switch {
                    tid,
                    out,
                    preempt,
                    next_prev,
                    ..
                } => Some((tid, out, preempt, next_prev)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_first_ready_thread_in_turn_runs() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Starting);
        tr.add_thread(11, 10, State::Ready);
        tr.add_thread(12, 10, State::Ready);
        assert_eq!(tr.ready_thread(), Some(11));
        assert_eq!(tr.current, Some(11));
        // It keeps the CPU while its slice lasts.
        tr.steps_total = TIME_SLICE - 1;
        assert_eq!(tr.ready_thread(), Some(11));
        tr.threads.get_mut(&11).unwrap().state = State::Stepping;
        tr.threads.get_mut(&12).unwrap().state = State::Stepping;
        assert_eq!(tr.ready_thread(), None);
    }

    #[test]
    fn a_full_slice_is_preempted_only_for_another_ready_thread() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Stepping);
        tr.threads.get_mut(&10).unwrap().rip = 0x1000;
        let now = tr.now;
        tr.unit(10).enter_user(0x1000, now, false);
        assert_eq!(tr.ready_thread(), Some(10));
        // Nobody else is ready: a new slice on the same thread.
        tr.steps_total = TIME_SLICE;
        assert_eq!(tr.ready_thread(), Some(10));
        assert_eq!(tr.slice_start, TIME_SLICE);
        assert!(tr.thread_tracing(10));
        // Now another thread waits: a timer interrupt ends the slice.
        tr.threads.get_mut(&11).unwrap().state = State::Ready;
        tr.steps_total = 2 * TIME_SLICE;
        assert_eq!(tr.ready_thread(), Some(11));
        assert!(tr.threads[&10].resync);
        assert!(!tr.thread_tracing(10));
        assert_eq!(tr.order, [11, 10]);
    }

    #[test]
    fn per_thread_mode_has_no_switch_records() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        let now = tr.now;
        tr.switch_to(10);
        assert!(switches(&tr).is_empty());
        assert_eq!(tr.now, now);
        assert!(!tr.threads[&10].resync);
    }

    /// (cpu, tid) of each ITRACE_START record.
    fn itrace_starts(tr: &Tracer) -> Vec<(u32, i32)> {
        tr.sideband
            .iter()
            .filter_map(|s| match s.event {
                SidebandEvent::ItraceStart { tid, .. } => Some((s.cpu, tid)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn per_cpu_switches_are_recorded_both_ways_on_one_cpu() {
        let mut tr = Tracer::for_tests(true);
        let pid = tr.pid;
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Ready);
        assert!(tr.units.is_empty() && itrace_starts(&tr).is_empty());
        let now = tr.now;
        tr.switch_to(10);
        assert_eq!(tr.now, now + CONTEXT_SWITCH_NS);
        assert_eq!(switches(&tr), [(10, false, false, (0, 0))]);
        assert_eq!(itrace_starts(&tr), [(0, 10)]);
        assert!(tr.threads[&10].resync);
        let now = tr.now;
        tr.unit(10).enter_user(0x1000, now, true);
        assert!(tr.thread_tracing(10));
        // Another thread is not traced while it is off the CPU.
        assert!(!tr.thread_tracing(11));
        // Putting the same thread on again changes nothing.
        tr.switch_to(10);
        assert_eq!(switches(&tr).len(), 1);
        // 10 is still ready: it was preempted.
        tr.switch_to(11);
        assert_eq!(
            switches(&tr)[1..],
            [(10, true, true, (pid, 11)), (11, false, false, (pid, 10))]
        );
        assert_eq!(tr.on_cpu, [Some(11)]);
        assert!(!tr.units[&cpu_unit(0)].tracing());
        assert_eq!(itrace_starts(&tr).len(), 1);
    }

    /// Two CPUs: a thread that runs again after another one did moves to
    /// the other CPU; the CPU it leaves records its switch-out, its trace
    /// there ends (TIP.PGD) and resumes on the new CPU's unit; each CPU's
    /// first thread starts that CPU's trace.
    #[test]
    fn per_cpu_threads_migrate_between_cpus() {
        let mut tr = Tracer::for_tests_on(true, 2);
        let pid = tr.pid;
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Ready);
        tr.threads.get_mut(&10).unwrap().rip = 0x1000;
        tr.switch_to(10);
        let now = tr.now;
        tr.unit(10).enter_user(0x1000, now, true);
        tr.switch_to(11);
        // Both run, each on its CPU: 10 was not switched out.
        assert_eq!(tr.on_cpu, [Some(10), Some(11)]);
        assert_eq!(itrace_starts(&tr), [(0, 10), (1, 11)]);
        assert!(tr.thread_tracing(10));
        let cpus = |tr: &Tracer| -> Vec<(u32, i32, bool)> {
            tr.sideband
                .iter()
                .filter_map(|s| match s.event {
                    SidebandEvent::Switch { tid, out, .. } => Some((s.cpu, tid, out)),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(cpus(&tr), [(0, 10, false), (1, 11, false)]);
        // 10 comes back: it moves to CPU 1, where 11 goes out, and leaves
        // CPU 0, whose trace of it ends there.
        tr.switch_to(10);
        assert_eq!(tr.on_cpu, [None, Some(10)]);
        assert_eq!(
            cpus(&tr)[2..],
            [(1, 11, true), (0, 10, true), (1, 10, false)]
        );
        assert_eq!(
            switches(&tr)[2..],
            [
                (11, true, true, (pid, 10)),
                (10, true, true, (0, 0)),
                (10, false, false, (pid, 11))
            ]
        );
        assert!(!tr.units[&cpu_unit(0)].tracing());
        assert!(!tr.thread_tracing(10));
        assert!(tr.threads[&10].resync);
        assert_eq!(tr.threads[&10].cpu, Some(1));
        // It resumes in CPU 1's trace; 11 comes back on CPU 0.
        let now = tr.now;
        tr.unit(10).enter_user(0x1000, now, true);
        assert!(tr.units[&cpu_unit(1)].tracing());
        tr.switch_to(11);
        assert_eq!(tr.on_cpu, [Some(11), Some(10)]);
        assert_eq!(itrace_starts(&tr).len(), 2);
    }

    /// System-wide (`perf record -a`): each CPU's event starts under the
    /// idle task, and every switch on a CPU is recorded, the idle task
    /// going out when a thread arrives on an idle CPU and coming in when
    /// the last thread leaves one, or exits on it.
    #[test]
    fn system_wide_switches_name_the_idle_task() {
        let mut tr = Tracer::for_tests_on(true, 2);
        tr.opts.system_wide = true;
        let pid = tr.pid;
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Ready);
        tr.switch_to(10);
        tr.switch_to(11);
        assert_eq!(itrace_starts(&tr), [(0, 0), (1, 0)]);
        let on = |tr: &Tracer| -> Vec<(u32, i32, bool, (i32, i32))> {
            tr.sideband
                .iter()
                .filter_map(|s| match s.event {
                    SidebandEvent::Switch {
                        tid,
                        out,
                        next_prev,
                        ..
                    } => Some((s.cpu, tid, out, next_prev)),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            on(&tr),
            [
                (0, 0, true, (pid, 10)),
                (0, 10, false, (0, 0)),
                (1, 0, true, (pid, 11)),
                (1, 11, false, (0, 0)),
            ]
        );
        // 10 moves to CPU 1: CPU 0 goes idle.
        tr.switch_to(10);
        assert_eq!(
            on(&tr)[4..],
            [
                (1, 11, true, (pid, 10)),
                (0, 10, true, (0, 0)),
                (0, 0, false, (pid, 10)),
                (1, 10, false, (pid, 11)),
            ]
        );
        // 10 exits on CPU 1: its switch-out follows its EXIT record.
        tr.remove_thread(10);
        assert_eq!(
            on(&tr)[8..],
            [(1, 10, true, (0, 0)), (1, 0, false, (pid, 10))]
        );
        assert!(matches!(
            tr.sideband[tr.sideband.len() - 3].event,
            SidebandEvent::Exit { tid: 10, .. }
        ));
        assert_eq!(tr.on_cpu, [None, None]);
    }
}
