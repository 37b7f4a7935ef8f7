//! The slow-call trigger on the emulated backend, which sees every
//! instruction and so measures every call exactly. A call opens when a
//! thread arrives at the function's entry, with the stack pointer there
//! (pointing at its return address), and closes on the first step that
//! leaves that frame: a `ret` pops it, and a longjmp or an exception
//! unwinds past it. A tail call out of the function keeps the frame, so the
//! call lasts until the callee returns, as its span does. Recursion nests.
//!
//! The trigger fires as the slow call returns, so the snapshot ends with
//! the whole call in it, but only if the ring still holds its entry (from
//! the first PSB a decoder syncs at) and, with `--arm-after`, holds that
//! much history. A slow call the ring could not hold whole is counted and
//! told in a warning instead.

use std::collections::HashMap;

use super::Tracer;
use crate::recording::StopReason;
use crate::trigger::{ArmAfter, SymbolTrigger};

/// A rise of the stack pointer larger than this (a thread's default stack,
/// 8 MiB) is a switch to another stack, not a return.
const STACK_SWITCH: u64 = 8 << 20;

/// The state of a slow-call trigger.
pub(super) struct SlowCalls {
    pub(super) sym: SymbolTrigger,
    /// Calls slower than this (ns) fire.
    threshold: u64,
    /// Per thread, the calls still open, innermost last: the stack pointer
    /// at entry and the time.
    open: HashMap<i32, Vec<(u64, u64)>>,
    /// Slow calls the ring no longer held whole when they returned, and
    /// the longest of them.
    pub(super) missed: u64,
    pub(super) missed_longest: u64,
    fired: Option<StopReason>,
}

impl SlowCalls {
    pub(super) fn new(symbol: &str, threshold: u64) -> SlowCalls {
        SlowCalls {
            sym: SymbolTrigger::new(symbol),
            threshold,
            open: HashMap::new(),
            missed: 0,
            missed_longest: 0,
            fired: None,
        }
    }
}

impl Tracer {
    /// After thread `tid` stepped to `rip` with its stack pointer at `rsp`:
    /// closes the calls whose frames the step left, fires on a slow one
    /// the ring holds whole, and opens a call at the function's entry.
    pub(super) fn watch_slow_calls(&mut self, tid: i32, rip: u64, rsp: u64) {
        let now = self.now;
        let Some(slow) = &mut self.slow else {
            return;
        };
        let open = slow.open.entry(tid).or_default();
        // The outermost call the step left: a longjmp may leave several.
        // A stack pointer that leaps further than a stack is deep moved to
        // another stack (a coroutine's, a signal's alternate stack), which
        // returns from nothing.
        let mut left = None;
        while let Some(&(sp, start)) = open.last() {
            if rsp <= sp || rsp - sp > STACK_SWITCH {
                break;
            }
            open.pop();
            left = Some(start);
        }
        if slow.sym.address() == Some(rip) {
            // A frame at this address or deeper is gone, however it went:
            // the new call occupies it.
            while open.last().is_some_and(|&(sp, _)| sp <= rsp) {
                open.pop();
            }
            open.push((rsp, now));
        }
        let Some(start) = left.filter(|&s| now - s > slow.threshold) else {
            return;
        };
        let name = slow.sym.name().to_string();
        let oldest = self.unit(tid).oldest_decodable();
        let whole = oldest.is_some_and(|t| t <= start);
        if !whole {
            let slow = self.slow.as_mut().expect("checked above");
            slow.missed += 1;
            slow.missed_longest = slow.missed_longest.max(now - start);
            return;
        }
        if !self.armed(tid) {
            self.unarmed += 1;
            return;
        }
        if self.thread_tracing(tid) {
            self.unit(tid).interrupt(rip, now);
        }
        self.slow.as_mut().expect("checked above").fired = Some(StopReason::SlowCall {
            name,
            tid,
            start,
            end: now,
        });
    }

    /// The slow call that fired since the last look, if one did.
    pub(super) fn slow_call_fired(&mut self) -> Option<StopReason> {
        self.slow.as_mut()?.fired.take()
    }

    /// Whether a trigger may fire on thread `tid`: always, or with
    /// `--arm-after`, once its ring holds that much history, or has filled.
    pub(super) fn armed(&mut self, tid: i32) -> bool {
        let now = self.now;
        match self.opts.arm_after {
            None => true,
            Some(ArmAfter::Full) => self.unit(tid).ring().wrapped(),
            Some(ArmAfter::History(wanted)) => self
                .unit(tid)
                .oldest_decodable()
                .is_some_and(|t| now.saturating_sub(t) >= wanted),
        }
    }

    /// What the capture should say about triggers that could not fire:
    /// before `--arm-after` armed them, or on slow calls the ring could
    /// not keep whole.
    pub(super) fn trigger_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let (Some(wanted), true) = (self.opts.arm_after, self.unarmed > 0) {
            out.push(crate::trigger::unarmed_warning(wanted, self.unarmed));
        }
        out.extend(self.slow_call_warning());
        out.extend(self.range_warnings());
        out
    }

    fn slow_call_warning(&self) -> Option<String> {
        let slow = self.slow.as_ref()?;
        (slow.missed > 0).then(|| {
            crate::trigger::missed_slow_calls_warning(
                slow.missed,
                slow.sym.name(),
                slow.threshold,
                slow.missed_longest,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::tracer::threads::State;

    /// A tracer watching calls to a function at 0x1000, slower than 50 ns.
    fn watching() -> Tracer {
        let mut tr = Tracer::for_tests(false);
        let mut slow = SlowCalls::new("f", 50);
        slow.sym.set_address_for_tests(0x1000);
        tr.slow = Some(slow);
        tr.add_thread(10, 10, State::Ready);
        let now = tr.now;
        tr.unit(10).enter_user(0x500, now, false);
        tr
    }

    #[test]
    fn a_call_that_returns_in_time_does_not_fire() {
        let mut tr = watching();
        tr.watch_slow_calls(10, 0x1000, 0x7ff0);
        tr.now += 50;
        tr.watch_slow_calls(10, 0x1010, 0x7fe0);
        tr.watch_slow_calls(10, 0x520, 0x7ff8);
        assert_eq!(tr.slow_call_fired(), None);
    }

    #[test]
    fn a_slow_call_fires_as_it_returns_and_nested_calls_pair_by_frame() {
        let mut tr = watching();
        let t0 = tr.now;
        // f recurses: the inner call is fast, the outer one slow.
        tr.watch_slow_calls(10, 0x1000, 0x7ff0);
        tr.now += 10;
        tr.watch_slow_calls(10, 0x1000, 0x7fd0);
        tr.now += 10;
        tr.watch_slow_calls(10, 0x1040, 0x7fd8);
        assert_eq!(tr.slow_call_fired(), None);
        tr.now += 100;
        tr.watch_slow_calls(10, 0x520, 0x7ff8);
        assert_eq!(
            tr.slow_call_fired(),
            Some(StopReason::SlowCall {
                name: "f".into(),
                tid: 10,
                start: t0,
                end: t0 + 120,
            })
        );
        // The thread left traced code where the call returned.
        assert!(!tr.thread_tracing(10));
        assert_eq!(tr.slow_call_fired(), None);
    }

    #[test]
    fn arm_after_full_waits_for_the_ring_to_wrap() {
        let mut tr = watching();
        tr.opts.arm_after = Some(ArmAfter::Full);
        assert!(!tr.armed(10), "an empty ring");
        // Fill the (64 KiB) ring with indirect jumps, a TIP packet each.
        let jmp = crate::insn::classify(0x600, &[0xff, 0xe0]).unwrap();
        for i in 0..1_000_000u64 {
            if tr.unit(10).ring().wrapped() {
                break;
            }
            tr.now += 1;
            let now = tr.now;
            tr.unit(10).retire(0x600, &jmp, 0x10_0000 + (i << 16), now);
        }
        assert!(tr.unit(10).ring().wrapped());
        assert!(tr.armed(10));
    }

    #[test]
    fn a_switch_to_another_stack_closes_no_call() {
        let mut tr = watching();
        tr.watch_slow_calls(10, 0x1000, 0x7ff0_0000);
        tr.now += 100;
        // A coroutine's stack, far above.
        tr.watch_slow_calls(10, 0x2000, 0x7ff0_0000 + (64 << 20));
        assert_eq!(tr.slow_call_fired(), None);
        assert_eq!(tr.slow.as_ref().unwrap().open[&10].len(), 1);
        // Back, and returning.
        tr.watch_slow_calls(10, 0x1010, 0x7fef_fff0);
        tr.watch_slow_calls(10, 0x520, 0x7ff0_0008);
        assert!(tr.slow_call_fired().is_some());
    }

    #[test]
    fn a_longjmp_out_of_nested_calls_closes_them_all_at_once() {
        let mut tr = watching();
        let t0 = tr.now;
        tr.watch_slow_calls(10, 0x1000, 0x7ff0);
        tr.watch_slow_calls(10, 0x1000, 0x7f00);
        tr.now += 80;
        tr.watch_slow_calls(10, 0x600, 0x7ff8);
        let Some(StopReason::SlowCall { start, .. }) = tr.slow_call_fired() else {
            panic!("no slow call");
        };
        assert_eq!(start, t0, "the outermost call");
        assert!(tr.slow.as_ref().unwrap().open[&10].is_empty());
    }

    #[test]
    fn arm_after_waits_for_history_and_a_call_the_ring_lost_is_counted() {
        let mut tr = watching();
        tr.opts.arm_after = Some(ArmAfter::History(1_000_000));
        tr.watch_slow_calls(10, 0x1000, 0x7ff0);
        tr.now += 100;
        tr.watch_slow_calls(10, 0x520, 0x7ff8);
        assert_eq!(tr.slow_call_fired(), None, "not armed yet");
        assert_eq!(tr.unarmed, 1);
        // A call that started before the ring's oldest PSB, unarmed or
        // not.
        tr.slow.as_mut().unwrap().open.insert(10, vec![(0x7ff0, 0)]);
        tr.watch_slow_calls(10, 0x520, 0x7ff8);
        assert_eq!(tr.slow_call_fired(), None);
        assert_eq!(tr.slow.as_ref().unwrap().missed, 1);
        let w = tr.trigger_warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("--arm-after") && w[1].contains("a larger --size"),
            "{w:?}"
        );
    }
}
