//! From timing anchors to a time for every branch.
//!
//! PT timestamps only some branches (those that carry a TNT or TIP packet
//! right after a CYC, MTC or TSC); the engine (libipt, or our decoder with
//! [`super::packets`]) turns the timing packets into TSC values and reports
//! each as a tick at the branch it binds to. Between
//! two anchors we spread time by instruction count: instructions, not
//! events, are what takes time, so a loop of equal iterations gets equal
//! durations. Items are held until the next anchor is known, then released
//! in order with their times.

use super::mul_div;

/// Anything that needs a time, with its position in retired instructions.
pub(crate) struct Clock<T> {
    pending: Vec<(u64, T)>,
    anchor: Option<(u64, u64)>,
    /// TSC ticks per instruction, as a 32.32 fixed-point fraction, from the
    /// last two anchors: used past the last anchor.
    rate: u64,
    /// TSC ticks and instructions between the last two anchors.
    rate_from: Option<(u64, u64)>,
    /// Time is the instruction count: one tick per instruction.
    counts_insns: bool,
}

impl<T> Default for Clock<T> {
    fn default() -> Self {
        Clock {
            pending: Vec::new(),
            anchor: None,
            rate: 0,
            rate_from: None,
            counts_insns: false,
        }
    }
}

/// What [`Clock::state`] gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClockState {
    pub anchor: Option<(u64, u64)>,
    pub rate_from: Option<(u64, u64)>,
}

impl ClockState {
    /// The same, `by` instructions later.
    pub(crate) fn shifted(self, by: u64) -> ClockState {
        ClockState {
            anchor: self.anchor.map(|(p, t)| (p + by, t)),
            ..self
        }
    }
}

/// A released item's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub tsc: u64,
    /// Read from a timing packet at this very position, not spread.
    pub exact: bool,
}

impl<T> Clock<T> {
    /// A clock for a trace without timing: it has no anchors of its own,
    /// so every item's time is its instruction position (plus the last
    /// anchor's, for a stretch that starts from one).
    pub(crate) fn counting_instructions() -> Clock<T> {
        Clock {
            counts_insns: true,
            ..Clock::default()
        }
    }

    /// A clock for `unit`: [`Clock::counting_instructions`] for
    /// instructions, else one timed by its anchors.
    pub(crate) fn for_unit(unit: ptscope_model::TimeUnit) -> Clock<T> {
        match unit {
            ptscope_model::TimeUnit::Insns => Clock::counting_instructions(),
            ptscope_model::TimeUnit::Ns => Clock::default(),
        }
    }

    /// Whether times count instructions ([`Clock::counting_instructions`]).
    pub(crate) fn counts_instructions(&self) -> bool {
        self.counts_insns
    }

    pub(crate) fn push(&mut self, pos: u64, item: T) {
        self.pending.push((pos, item));
    }

    /// Time is `tsc` at instruction position `pos`: releases every held
    /// item up to here, in order (by reference: items are moved once, into
    /// the clock).
    pub(crate) fn anchor(&mut self, pos: u64, tsc: u64, mut release: impl FnMut(Stamp, &T)) {
        let (p0, t0) = match self.anchor {
            // Time never runs backwards; a smaller TSC is noise.
            Some((p0, t0)) => (p0, t0),
            None => (pos, tsc),
        };
        let tsc = tsc.max(t0);
        let same_place = self.anchor.is_some_and(|(p0, _)| p0 == pos);
        // Before the first anchor there is no rate to back-extrapolate
        // with: what was held is pinned to this one.
        let spread = self.anchor.is_some() && pos > p0;
        let (ticks, insns) = (tsc - t0, pos.wrapping_sub(p0));
        for (p, item) in &self.pending {
            let p = *p;
            let stamp = if same_place && p == pos {
                // Held since the last anchor, at its very position: no
                // instruction retired between the two, yet time passed
                // (untraced code ran, as between a disable and an enable).
                // The item happened at the earlier time.
                Stamp {
                    tsc: t0,
                    exact: true,
                }
            } else if p >= pos {
                Stamp {
                    tsc,
                    exact: p == pos,
                }
            } else if !spread {
                Stamp { tsc, exact: false }
            } else {
                Stamp {
                    tsc: t0 + mul_div(ticks, p.saturating_sub(p0), insns),
                    exact: false,
                }
            };
            release(stamp, item);
        }
        self.pending.clear();
        if let Some((p0, t0)) = self.anchor {
            // Only needed past the last anchor: computed when it is.
            if pos > p0 && tsc >= t0 {
                self.rate_from = Some((tsc - t0, pos - p0));
            }
        }
        if self.anchor.is_none_or(|(p0, _)| pos >= p0) {
            self.anchor = Some((pos, tsc));
        }
    }

    /// The last anchor (position, TSC as clamped) and the span of TSC
    /// ticks and instructions between the last two: all a clock carries
    /// from one anchor to the next besides what it holds.
    pub(crate) fn state(&self) -> ClockState {
        ClockState {
            anchor: self.anchor,
            rate_from: self.rate_from,
        }
    }

    /// Goes on from `state` (a clock that timed the stretch since on its
    /// own), holding nothing.
    pub(crate) fn resume(&mut self, state: ClockState) {
        debug_assert!(self.pending.is_empty());
        self.anchor = state.anchor;
        if state.rate_from.is_some() {
            self.rate_from = state.rate_from;
        }
    }

    /// Holds nothing and knows no anchor, as new, keeping its buffer.
    pub(crate) fn reset(&mut self) {
        self.pending.clear();
        self.anchor = None;
        self.rate = 0;
        self.rate_from = None;
    }

    /// What it holds, untimed, in order.
    pub(crate) fn take_pending(&mut self) -> std::vec::Drain<'_, (u64, T)> {
        self.pending.drain(..)
    }

    /// Releases what is left, extrapolating from the last anchor.
    pub(crate) fn finish(&mut self, mut release: impl FnMut(Stamp, &T)) {
        let (p0, t0) = self.anchor.unwrap_or((0, 0));
        if let Some((span, n)) = self.rate_from {
            self.rate = ((span as u128) << 32).div_ceil(n as u128) as u64;
        }
        if self.counts_insns {
            self.rate = 1 << 32;
        }
        for (p, item) in &self.pending {
            let dt = ((p.saturating_sub(p0) as u128 * self.rate as u128) >> 32) as u64;
            release(
                Stamp {
                    tsc: t0 + dt,
                    exact: false,
                },
                item,
            );
        }
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(c: &mut Clock<u32>, pos: u64, tsc: u64, out: &mut Vec<(u32, u64, bool)>) {
        c.anchor(pos, tsc, |s, i| out.push((*i, s.tsc, s.exact)));
    }

    #[test]
    fn spreads_by_instruction_count_between_anchors() {
        let mut c = Clock::default();
        let mut out = Vec::new();
        run(&mut c, 100, 1000, &mut out);
        c.push(110, 1);
        c.push(150, 2);
        c.push(200, 3);
        run(&mut c, 200, 2000, &mut out);
        assert_eq!(out, [(1, 1100, false), (2, 1500, false), (3, 2000, true)]);
    }

    #[test]
    fn extrapolates_past_the_last_anchor_at_the_last_rate() {
        let mut c = Clock::default();
        let mut out = Vec::new();
        run(&mut c, 0, 0, &mut out);
        run(&mut c, 10, 20, &mut out);
        c.push(15, 7);
        c.finish(|s, i| out.push((*i, s.tsc, s.exact)));
        assert_eq!(out, [(7, 30, false)]);
    }

    /// A disable and an enable at one position (nothing traced between
    /// them): what was held after the first anchor keeps its time, so the
    /// untraced gap between them lasts.
    #[test]
    fn items_between_two_anchors_at_one_position_keep_the_first_time() {
        let mut c = Clock::default();
        let mut out = Vec::new();
        run(&mut c, 0, 0, &mut out);
        run(&mut c, 10, 100, &mut out);
        c.push(10, 1);
        run(&mut c, 10, 700, &mut out);
        c.push(10, 2);
        run(&mut c, 20, 800, &mut out);
        assert_eq!(out, [(1, 100, true), (2, 700, false)]);
    }

    #[test]
    fn without_timing_an_item_is_timed_by_its_instruction_position() {
        // The coarse pass: no anchor at all.
        let mut c = Clock::counting_instructions();
        c.push(0, 1);
        c.push(17, 2);
        let mut out = Vec::new();
        c.finish(|s, i| out.push((*i, s.tsc, s.exact)));
        assert_eq!(out, [(1, 0, false), (2, 17, false)]);
        // The fine pass: from a checkpoint at instruction 1000.
        let mut c = Clock::counting_instructions();
        let mut out = Vec::new();
        run(&mut c, 4, 1000, &mut out);
        c.push(4, 1);
        c.push(9, 2);
        c.finish(|s, i| out.push((*i, s.tsc, s.exact)));
        assert_eq!(out, [(1, 1000, false), (2, 1005, false)]);
    }

    #[test]
    fn time_never_runs_backwards() {
        let mut c = Clock::default();
        let mut out = Vec::new();
        run(&mut c, 0, 500, &mut out);
        c.push(5, 1);
        run(&mut c, 10, 400, &mut out);
        assert_eq!(out, [(1, 500, false)]);
    }
}
