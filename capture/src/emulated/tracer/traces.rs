//! The traces module turns the tracer's state into a [`Capture`]. A thread
//! that ends hands over its ring at once, so that nothing of it is lost
//! when its tid is reused; a snapshot in the middle of a capture copies
//! every ring and lets tracing go on, and the last one takes the rings
//! for good. In per-CPU mode the CPUs' rings are the trace, and the
//! threads only carry their names and counts.

use std::time::{Duration, Instant};

use super::threads::Thread;
use super::Tracer;
use crate::emulated::hardware::ThreadPt;
use crate::recording::{Capture, CpuTrace, StopReason, ThreadTrace};

/// The bytes a PT unit's ring holds, how many it wrote and whether it
/// wrapped.
fn ring_copy(unit: &ThreadPt) -> (Vec<u8>, u64, bool) {
    let ring = unit.ring();
    (ring.snapshot().to_vec(), ring.head(), ring.wrapped())
}

/// The virtual CPU whose unit has key `key`, in per-CPU mode.
fn unit_cpu(key: i32) -> Option<u32> {
    (key < 0).then(|| (-1 - key) as u32)
}

/// The traces of the CPUs' units in `units`, in CPU order.
fn cpu_traces<'a>(units: impl Iterator<Item = (&'a i32, &'a ThreadPt)>) -> Vec<CpuTrace> {
    let mut cpus: Vec<CpuTrace> = units
        .filter_map(|(&key, u)| {
            let cpu = unit_cpu(key)?;
            let (aux, aux_head, wrapped) = ring_copy(u);
            Some(CpuTrace {
                cpu,
                aux,
                aux_head,
                wrapped,
            })
        })
        .collect();
    cpus.sort_by_key(|c| c.cpu);
    cpus
}

impl Tracer {
    /// Keeps the trace of thread `t`, which is no longer traced.
    pub(super) fn finish_thread(&mut self, mut t: Thread) {
        if self.opts.ip_log {
            self.ip_logs.push((t.tid, std::mem::take(&mut t.log)));
        }
        let (aux, aux_head, wrapped) = match self.units.remove(&t.tid) {
            Some(mut unit) => {
                unit.finish();
                ring_copy(&unit)
            }
            None => (Vec::new(), 0, false),
        };
        self.finished.push(ThreadTrace {
            pid: self.pid,
            tid: t.tid,
            comm: t.comm.clone(),
            aux,
            aux_head,
            wrapped,
            instructions: t.instructions,
        });
    }

    /// A snapshot in the middle of the capture: every thread leaves traced
    /// code (FUP + TIP.PGD, as when the kernel disables PT), the rings are
    /// copied, and tracing resumes with a TSC at each thread's next step.
    pub(super) fn snapshot_now(
        &mut self,
        stop: StopReason,
        cmdline: &[String],
        wall: Duration,
    ) -> Capture {
        let now = self.now;
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for &tid in &tids {
            let rip = self.threads[&tid].rip;
            if self.thread_tracing(tid) {
                self.unit(tid).interrupt(rip, now);
            }
            if let Some(t) = self.threads.get_mut(&tid) {
                t.resync = true;
            }
        }
        if let StopReason::Symbol { tid, .. } = stop {
            self.resume_past_symbol = Some(tid);
        }
        let mut threads: Vec<ThreadTrace> = self.finished.clone();
        for t in self.threads.values() {
            let (aux, aux_head, wrapped) =
                self.units.get(&t.tid).map(ring_copy).unwrap_or_default();
            threads.push(ThreadTrace {
                pid: self.pid,
                tid: t.tid,
                comm: t.comm.clone(),
                aux,
                aux_head,
                wrapped,
                instructions: t.instructions,
            });
        }
        threads.sort_by_key(|t| t.tid);
        let cpus = cpu_traces(self.units.iter());
        let mut ip_log: Vec<(i32, Vec<u64>)> = self.ip_logs.clone();
        ip_log.extend(self.threads.values().map(|t| (t.tid, t.log.clone())));
        ip_log.sort_by_key(|(tid, _)| *tid);
        Capture {
            pid: self.pid,
            threads,
            cpus,
            sideband: self.sideband.clone(),
            vdso: self.vdso.clone(),
            start_time: self.start_time,
            end_time: now,
            stop,
            cmdline: cmdline.to_vec(),
            ip_log,
            wall,
            exit_code: None,
            child: None,
            pt: self.pt_setup(),
            inherit: self.opts.per_cpu && !self.opts.system_wide,
            trigger_registers: std::mem::take(&mut self.trigger_registers),
            warnings: self.warnings.clone(),
        }
    }

    /// The last snapshot, once every thread is released: the rings, the
    /// sideband and the rest are taken out of the tracer. `child` is a
    /// spawned command still running, for the caller to wait for.
    pub(super) fn take_capture(
        &mut self,
        stop: StopReason,
        end_time: u64,
        cmdline: Vec<String>,
        wall: Instant,
        child: Option<i32>,
    ) -> Capture {
        let mut threads = std::mem::take(&mut self.finished);
        threads.sort_by_key(|t| t.tid);
        let mut units = std::mem::take(&mut self.units);
        units
            .iter_mut()
            .filter(|(&key, _)| unit_cpu(key).is_some())
            .for_each(|(_, u)| u.finish());
        let cpus = cpu_traces(units.iter());
        let mut ip_log = std::mem::take(&mut self.ip_logs);
        ip_log.sort_by_key(|(tid, _)| *tid);
        Capture {
            pid: self.pid,
            threads,
            cpus,
            sideband: std::mem::take(&mut self.sideband),
            vdso: self.vdso.take(),
            start_time: self.start_time,
            end_time,
            stop,
            cmdline,
            ip_log,
            wall: wall.elapsed(),
            exit_code: self.exit_code,
            child,
            pt: self.pt_setup(),
            inherit: self.opts.per_cpu && !self.opts.system_wide,
            trigger_registers: std::mem::take(&mut self.trigger_registers),
            warnings: {
                let mut w = std::mem::take(&mut self.warnings);
                w.extend(self.trigger_warnings());
                w
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::tracer::threads::State;

    fn tids(cap: &Capture) -> Vec<i32> {
        cap.threads.iter().map(|t| t.tid).collect()
    }

    /// Threads 12 and 10 (in that order) running, 11 gone.
    /// In per-CPU mode on two CPUs, each has run one of them.
    fn three_threads(per_cpu: bool) -> Tracer {
        let mut tr = Tracer::for_tests_on(per_cpu, 2);
        for tid in [12, 11, 10] {
            tr.add_thread(tid, 10, State::Ready);
            let t = tr.threads.get_mut(&tid).unwrap();
            t.rip = 0x1000 + tid as u64;
            t.log = vec![t.rip];
            t.instructions = tid as u64;
        }
        tr.switch_to(12);
        tr.switch_to(11);
        tr.remove_thread(11);
        tr
    }

    #[test]
    fn a_snapshot_copies_every_ring_and_tracing_resumes_after_it() {
        let mut tr = three_threads(false);
        let now = tr.now;
        tr.unit(12).enter_user(0x100c, now, false);
        tr.trigger_registers = vec![("rdi".into(), 1)];
        let stop = StopReason::Symbol {
            name: "f".into(),
            address: 0x100c,
            tid: 12,
        };
        let cap = tr.snapshot_now(stop.clone(), &["prog".into()], Duration::from_secs(1));
        assert_eq!(tids(&cap), [10, 11, 12]);
        assert_eq!(
            cap.threads
                .iter()
                .map(|t| t.instructions)
                .collect::<Vec<_>>(),
            [10, 11, 12]
        );
        assert!(cap.threads.iter().all(|t| !t.aux.is_empty()));
        assert!(cap.cpus.is_empty());
        assert_eq!(
            cap.ip_log.iter().map(|l| l.0).collect::<Vec<_>>(),
            [10, 11, 12]
        );
        assert_eq!((cap.stop, cap.exit_code, cap.child), (stop, None, None));
        assert_eq!(cap.cmdline, ["prog"]);
        assert_eq!(cap.end_time, now);
        assert_eq!(cap.trigger_registers, [("rdi".to_string(), 1)]);
        // The tracer goes on: threads are kept, out of traced code, and
        // resume with a TSC; the one at the symbol steps past it.
        assert!(tr.trigger_registers.is_empty());
        assert!(!tr.thread_tracing(12));
        assert!(tr.threads.values().all(|t| t.resync));
        assert_eq!(tr.resume_past_symbol, Some(12));
        assert_eq!(tr.units.len(), 2);
    }

    #[test]
    fn a_per_cpu_snapshot_has_a_trace_per_cpu() {
        let mut tr = three_threads(true);
        let cap = tr.snapshot_now(StopReason::Interrupted, &[], Duration::ZERO);
        assert_eq!(tids(&cap), [10, 11, 12]);
        assert!(cap.threads.iter().all(|t| t.aux.is_empty()));
        assert_eq!(cap.cpus.iter().map(|c| c.cpu).collect::<Vec<_>>(), [0, 1]);
        assert!(cap.cpus.iter().all(|c| !c.aux.is_empty()));
        assert!(cap.inherit);
        assert_eq!(tr.resume_past_symbol, None);
    }

    #[test]
    fn the_last_capture_takes_what_the_tracer_kept() {
        let mut tr = three_threads(true);
        tr.remove_thread(10);
        tr.remove_thread(12);
        tr.exit_code = Some(0);
        let sideband = tr.sideband.len();
        let cap = tr.take_capture(
            StopReason::ProcessExit,
            tr.now,
            vec!["prog".into()],
            Instant::now(),
            Some(5),
        );
        assert_eq!(tids(&cap), [10, 11, 12]);
        assert_eq!(cap.cpus.len(), 2);
        assert_eq!(
            cap.ip_log.iter().map(|l| l.0).collect::<Vec<_>>(),
            [10, 11, 12]
        );
        assert_eq!(cap.sideband.len(), sideband);
        assert_eq!((cap.exit_code, cap.child), (Some(0), Some(5)));
        assert!(tr.finished.is_empty() && tr.units.is_empty() && tr.sideband.is_empty());
    }
}
