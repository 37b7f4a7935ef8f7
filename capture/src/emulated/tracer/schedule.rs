//! The schedule module decides which thread runs on the one virtual CPU
//! and which PT unit sees it. Threads take turns in time slices, so that a
//! thread spinning on another one cannot starve it; each change of thread
//! is a context switch, which the trace shows as the hardware would: the
//! thread going out leaves traced code, and the one coming in resumes with
//! a TSC. In per-CPU mode the switch also becomes sideband, since one PT
//! unit then traces every thread.

use super::threads::State;
use super::Tracer;
use crate::emulated::hardware::ThreadPt;
use crate::recording::SidebandEvent;

/// Virtual time a context switch takes in per-CPU mode.
const CONTEXT_SWITCH_NS: u64 = 500;

/// The key of the one PT unit in per-CPU mode.
pub(super) const CPU_UNIT: i32 = -1;

/// Instructions a thread runs while others are ready before it is preempted
/// (20 µs of virtual time): short, so that a thread spinning on another one
/// lets it run within a fraction of a second of wall time.
const TIME_SLICE: u64 = 20_000;

impl Tracer {
    fn unit_key(&self, tid: i32) -> i32 {
        if self.opts.per_cpu {
            CPU_UNIT
        } else {
            tid
        }
    }

    pub(super) fn unit(&mut self, tid: i32) -> &mut ThreadPt {
        let key = self.unit_key(tid);
        let (settings, now) = (&self.opts.settings, self.now);
        self.units
            .entry(key)
            .or_insert_with(|| ThreadPt::new(settings.clone(), now))
    }

    /// Whether `tid`'s user code is being traced right now.
    pub(super) fn thread_tracing(&self, tid: i32) -> bool {
        if self.opts.per_cpu && self.on_cpu != Some(tid) {
            return false;
        }
        self.units
            .get(&self.unit_key(tid))
            .is_some_and(|u| u.tracing())
    }

    /// Per-CPU mode: puts `tid` on the CPU. The previous thread is already
    /// out of user space (syscall, preemption, signal); the switch records
    /// fall between its TIP.PGD and the new thread's TIP.PGE, which comes
    /// with a TSC as after any context switch.
    pub(super) fn switch_to(&mut self, tid: i32) {
        if !self.opts.per_cpu || self.on_cpu == Some(tid) {
            return;
        }
        let prev = self.on_cpu.replace(tid);
        // The kernel's share of a switch: the records fall strictly after
        // the last instruction of the thread going out.
        self.now += CONTEXT_SWITCH_NS;
        if let Some(p) = prev {
            if let Some(rip) = self.threads.get(&p).map(|t| t.rip) {
                if self.units.get(&CPU_UNIT).is_some_and(|u| u.tracing()) {
                    let now = self.now;
                    self.unit(p).interrupt(rip, now);
                }
            }
        }
        let pid = self.pid;
        let (prev_pid, prev_tid) = match prev {
            Some(p) => (pid, p),
            None => (0, 0),
        };
        if prev.is_some() {
            self.emit(SidebandEvent::Switch {
                pid,
                tid: prev_tid,
                out: true,
                preempt: self
                    .threads
                    .get(&prev_tid)
                    .is_some_and(|t| t.state == State::Ready),
                next_prev: (pid, tid),
            });
        }
        self.emit(SidebandEvent::Switch {
            pid,
            tid,
            out: false,
            preempt: false,
            next_prev: (prev_pid, prev_tid),
        });
        if let Some(t) = self.threads.get_mut(&tid) {
            t.resync = true;
        }
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

    #[test]
    fn per_cpu_switches_are_recorded_both_ways() {
        let mut tr = Tracer::for_tests(true);
        let pid = tr.pid;
        tr.add_thread(10, 10, State::Ready);
        tr.add_thread(11, 10, State::Ready);
        let now = tr.now;
        tr.switch_to(10);
        assert_eq!(tr.now, now + CONTEXT_SWITCH_NS);
        assert_eq!(switches(&tr), [(10, false, false, (0, 0))]);
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
        assert_eq!(tr.on_cpu, Some(11));
        assert!(!tr.units[&CPU_UNIT].tracing());
    }
}
