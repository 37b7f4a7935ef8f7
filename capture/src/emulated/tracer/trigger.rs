//! The trigger module is the tracer's side of the triggers. A duration
//! becomes a deadline for the run loop. A symbol is resolved against the
//! mappings as they appear and, where the kernel has a breakpoint PMU,
//! armed as a hardware breakpoint on every thread, which also gives the
//! function's first arguments; without one, each step compares its address
//! with the symbol's. Either way the thread that arrives leaves traced
//! code there, as the hardware's trace would end.

use std::time::{Duration, Instant};

use super::Tracer;
use crate::emulated::ptrace;
use crate::perf_event::breakpoint::Breakpoint;
use crate::recording::StopReason;
use crate::trigger::Trigger;

/// When a run under `trigger` starting now has to stop, if it has to.
pub(super) fn deadline(trigger: &Trigger) -> Option<Instant> {
    match trigger {
        Trigger::Duration(ms) => Some(Instant::now() + Duration::from_millis(*ms)),
        _ => None,
    }
}

impl Tracer {
    /// Looks for the symbol trigger in the current mappings; once it is
    /// found, arms it as a hardware breakpoint when the kernel can.
    pub(super) fn resolve_symbol(&mut self) {
        // The slow-call trigger watches every step and needs no breakpoint.
        if let Some(slow) = &mut self.slow {
            slow.sym.resolve(&self.maps);
        }
        if let Some(r) = &mut self.range {
            r.resolve(&self.maps);
        }
        if let Some(sym) = &mut self.symbol {
            sym.resolve(&self.maps);
            if let (Some(addr), None) = (sym.address(), &self.breakpoint) {
                if Breakpoint::available() {
                    self.breakpoint = Some(Breakpoint::new(addr));
                    let tids: Vec<i32> = self.threads.keys().copied().collect();
                    self.arm_breakpoint(&tids);
                }
            }
        }
    }

    /// Arms the hardware breakpoint on `tids`. If the kernel refuses, the
    /// trigger falls back to comparing addresses, with a warning.
    pub(super) fn arm_breakpoint(&mut self, tids: &[i32]) {
        let Some(bp) = &mut self.breakpoint else {
            return;
        };
        for &tid in tids {
            if let Err(e) = bp.arm(tid) {
                self.warnings.push(format!(
                    "hardware breakpoint unavailable, the trigger compares addresses instead: {e}"
                ));
                self.breakpoint = None;
                return;
            }
        }
    }

    /// After a step: whether the breakpoint fired, and if so the trigger.
    pub(super) fn breakpoint_hit(&mut self) -> Option<StopReason> {
        let hit = self.breakpoint.as_mut()?.check()?;
        let tid = hit.tid;
        if !self.armed(tid) {
            self.unarmed += 1;
            return None;
        }
        self.trigger_registers = hit.registers();
        let rip = self.threads.get(&tid).map(|t| t.rip)?;
        let now = self.now;
        if self.thread_tracing(tid) {
            self.unit(tid).interrupt(rip, now);
        }
        let sym = self.symbol.as_ref()?;
        Some(StopReason::Symbol {
            name: sym.name().to_string(),
            address: hit.ip,
            tid,
        })
    }

    /// The address-compare trigger, before `tid` steps the instruction at
    /// `rip`: whether the thread arrived at the symbol. If so it leaves
    /// traced code there, and its first two arguments are kept. A thread
    /// let go past the symbol after a snapshot steps on.
    pub(super) fn symbol_reached(&mut self, tid: i32, rip: u64) -> bool {
        let resume = self.resume_past_symbol == Some(tid);
        self.resume_past_symbol = None;
        let arrived = match (&self.symbol, &self.breakpoint, resume) {
            (Some(sym), None, false) => sym.address() == Some(rip),
            _ => false,
        };
        if !arrived {
            return false;
        }
        if !self.armed(tid) {
            self.unarmed += 1;
            return false;
        }
        if let Ok(regs) = ptrace::regs(tid) {
            self.trigger_registers = vec![("rdi".into(), regs.rdi), ("rsi".into(), regs.rsi)];
        }
        let now = self.now;
        if self.thread_tracing(tid) {
            self.unit(tid).interrupt(rip, now);
        }
        true
    }

    /// Range capture: thread `tid` is about to run the instruction at
    /// `rip`. At START's entry the kernel's breakpoint resumes the trace,
    /// which restarts there; at STOP's it pauses it.
    pub(super) fn range_step(&mut self, tid: i32, rip: u64) {
        let Some(r) = &self.range else {
            return;
        };
        let (start, stop) = (r.start.address(), r.stop.address());
        let now = self.now;
        if start == Some(rip) {
            if self.unit(tid).paused() {
                self.unit(tid).resume();
                self.range_entries += 1;
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.resync = true;
                }
            }
        } else if stop == Some(rip) {
            self.unit(tid).pause(rip, now);
        }
    }

    /// What the capture should say about its range: a START or STOP never
    /// found, or a START never reached (nothing was traced).
    pub(super) fn range_warnings(&self) -> Vec<String> {
        self.range
            .as_ref()
            .map_or_else(Vec::new, |r| r.warnings(self.range_entries))
    }

    /// Why the capture stops when thread `tid` reached the symbol by
    /// address compare.
    pub(super) fn symbol_stop(&self, tid: i32) -> StopReason {
        let address = self.symbol.as_ref().and_then(|s| s.address()).unwrap_or(0);
        let name = self
            .symbol
            .as_ref()
            .map(|s| s.name().to_string())
            .unwrap_or_default();
        StopReason::Symbol { name, address, tid }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::tracer::threads::State;
    use crate::procfs;
    use crate::trigger::{functions_in, SymbolTrigger};

    #[test]
    fn only_a_duration_has_a_deadline() {
        let before = Instant::now();
        let d = deadline(&Trigger::Duration(50)).unwrap();
        assert!(d >= before + Duration::from_millis(50));
        assert!(d <= Instant::now() + Duration::from_millis(50));
        for t in [
            Trigger::ProcessExit,
            Trigger::Manual,
            Trigger::Symbol("main".into()),
        ] {
            assert_eq!(deadline(&t), None, "{t}");
        }
    }

    /// A tracer whose symbol trigger is resolved to a function of this
    /// test program, compared by address (no breakpoint).
    fn at_symbol() -> (Tracer, u64) {
        let me = std::env::current_exe().unwrap();
        let name = functions_in(&me)
            .into_iter()
            .find(|f| f.name.ends_with("symbol_matches"))
            .unwrap()
            .name;
        let mut sym = SymbolTrigger::new(&name);
        sym.resolve(&procfs::read_maps(std::process::id() as i32).unwrap());
        let address = sym.address().expect("resolved in this process");
        let mut tr = Tracer::for_tests(false);
        tr.symbol = Some(sym);
        (tr, address)
    }

    #[test]
    fn arriving_at_the_symbol_fires_the_address_compare() {
        let (mut tr, address) = at_symbol();
        tr.add_thread(10, 10, State::Ready);
        let now = tr.now;
        tr.unit(10).enter_user(address - 4, now, false);
        assert!(!tr.symbol_reached(10, address - 4));
        assert!(tr.symbol_reached(10, address));
        // The thread left traced code at the symbol.
        assert!(!tr.thread_tracing(10));
        let StopReason::Symbol {
            name,
            address: at,
            tid: 10,
        } = tr.symbol_stop(10)
        else {
            panic!()
        };
        assert!(name.ends_with("symbol_matches"));
        assert_eq!(at, address);
    }

    #[test]
    fn a_thread_let_go_after_a_snapshot_steps_past_the_symbol() {
        let (mut tr, address) = at_symbol();
        tr.add_thread(10, 10, State::Ready);
        tr.resume_past_symbol = Some(10);
        assert!(!tr.symbol_reached(10, address));
        assert_eq!(tr.resume_past_symbol, None);
        // The next arrival fires again.
        assert!(tr.symbol_reached(10, address));
    }

    #[test]
    fn without_a_symbol_nothing_fires() {
        let mut tr = Tracer::for_tests(false);
        assert!(!tr.symbol_reached(10, 0x1000));
        assert_eq!(
            tr.symbol_stop(10),
            StopReason::Symbol {
                name: String::new(),
                address: 0,
                tid: 10
            }
        );
        assert_eq!(tr.breakpoint_hit(), None);
    }
}
