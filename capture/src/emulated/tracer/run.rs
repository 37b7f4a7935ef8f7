//! The run module is the tracer's main loop: it steps the ready threads
//! one instruction at a time and collects the stops of threads in
//! syscalls, until a trigger fires, the caller interrupts, or the process
//! exits. When every thread is in the kernel it waits, and the virtual
//! clock advances by the wall time waited, so that time spent blocked
//! shows in the trace.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::sys::wait::WaitStatus;

use super::threads::State;
use super::Tracer;
use crate::error::CaptureError;
use crate::recording::StopReason;
use crate::tracee;

impl Tracer {
    /// Runs until a trigger, an interruption, `deadline` or the process's
    /// end, and says which it was.
    pub(super) fn run(&mut self, deadline: Option<Instant>) -> Result<StopReason, CaptureError> {
        let wall_start = Instant::now();
        let mut last_report = Instant::now();
        loop {
            if self.opts.interrupt.load(Ordering::Relaxed)
                || self.opts.cancel.load(Ordering::Relaxed)
            {
                return Ok(StopReason::Interrupted);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(StopReason::Duration);
            }
            if self.opts.progress && last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                self.report(wall_start.elapsed());
            }
            // Collect events from threads in syscalls now and then.
            if self.in_syscall > 0 && self.steps_total.is_multiple_of(64) {
                while let Some(status) = tracee::wait(None, true)? {
                    let handled = self.handle(status);
                    if !self.vanished(&handled) && handled? {
                        return Ok(StopReason::ProcessExit);
                    }
                }
            }
            if let Some(tid) = self.ready_thread() {
                let stepped = self.step(tid);
                if self.vanished(&stepped) {
                    continue;
                }
                if stepped? {
                    return Ok(self.symbol_stop(tid));
                }
                if self.threads[&tid].state == State::Stepping {
                    let status = tracee::wait(Some(tid), false)?;
                    if let Some(status) = status {
                        let handled = self.handle(status);
                        if !self.vanished(&handled) && handled? {
                            return Ok(StopReason::ProcessExit);
                        }
                    }
                }
                if let Some(stop) = self.breakpoint_hit().or_else(|| self.slow_call_fired()) {
                    return Ok(stop);
                }
                continue;
            }
            if self.threads.is_empty() {
                return Ok(StopReason::ProcessExit);
            }
            // Everyone is in the kernel: wait, and let the clock run.
            let t0 = Instant::now();
            let status = if deadline.is_some() {
                // Poll so that a deadline passes even while the process sleeps.
                match tracee::wait(None, true)? {
                    Some(s) => Some(s),
                    None => {
                        std::thread::sleep(Duration::from_micros(200));
                        None
                    }
                }
            } else {
                self.wait_interruptible()?
            };
            self.now += t0.elapsed().as_nanos() as u64;
            if let Some(status) = status {
                let handled = self.handle(status);
                if !self.vanished(&handled) && handled? {
                    return Ok(StopReason::ProcessExit);
                }
            }
        }
    }

    /// A blocking wait that still notices Ctrl-C promptly.
    fn wait_interruptible(&mut self) -> Result<Option<WaitStatus>, CaptureError> {
        loop {
            if let Some(s) = tracee::wait(None, true)? {
                return Ok(Some(s));
            }
            if self.opts.interrupt.load(Ordering::Relaxed) {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Prints the progress line: instructions, rate, threads and how full
    /// the fullest ring is.
    pub(super) fn report(&self, elapsed: Duration) {
        let fill = self
            .units
            .values()
            .map(|u| u.ring().fill())
            .fold(0.0f64, f64::max);
        eprintln!(
            "ptscope: {} instructions traced ({:.0}k/s), {} threads, ring {:.0}% full",
            self.steps_total,
            self.steps_total as f64 / elapsed.as_secs_f64().max(1e-9) / 1e3,
            self.threads.len(),
            fill * 100.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interruption_or_cancel_stops_before_any_step() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        tr.opts.interrupt.store(true, Ordering::Relaxed);
        assert_eq!(tr.run(None).unwrap(), StopReason::Interrupted);
        tr.opts.interrupt.store(false, Ordering::Relaxed);
        tr.opts.cancel.store(true, Ordering::Relaxed);
        assert_eq!(tr.run(None).unwrap(), StopReason::Interrupted);
        assert_eq!(tr.steps_total, 0);
    }

    #[test]
    fn a_passed_deadline_stops_the_run() {
        let mut tr = Tracer::for_tests(false);
        tr.add_thread(10, 10, State::Ready);
        assert_eq!(tr.run(Some(Instant::now())).unwrap(), StopReason::Duration);
    }

    #[test]
    fn a_process_without_threads_has_exited() {
        let mut tr = Tracer::for_tests(false);
        assert_eq!(tr.run(None).unwrap(), StopReason::ProcessExit);
    }
}
