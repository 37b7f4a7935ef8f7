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

    /// The last item held since the last anchor, and its position: an
    /// item that stands for a run of positions may grow by the next ones.
    pub(crate) fn last_held(&mut self) -> Option<&mut (u64, T)> {
        self.pending.last_mut()
    }

    /// Time is `tsc` at instruction position `pos`: releases every held
    /// item up to here, in order (by reference: items are moved once, into
    /// the clock).
    #[inline]
    pub(crate) fn anchor(&mut self, pos: u64, tsc: u64, mut release: impl FnMut(Stamp, &T)) {
        self.anchor_with(pos, tsc, |stamps, p, item| release(stamps.at(p), item));
    }

    /// [`Clock::anchor`], handing each held item the [`Stamps`] that time
    /// it, for an item that stands for a run of positions (the fine pass
    /// holds a block's instructions as one).
    pub(crate) fn anchor_with(
        &mut self,
        pos: u64,
        tsc: u64,
        mut release: impl FnMut(&Stamps, u64, &T),
    ) {
        let (p0, t0) = match self.anchor {
            // Time never runs backwards; a smaller TSC is noise.
            Some((p0, t0)) => (p0, t0),
            None => (pos, tsc),
        };
        let tsc = tsc.max(t0);
        let stamps = Stamps::Anchor {
            pos,
            tsc,
            p0,
            t0,
            same_place: self.anchor.is_some_and(|(p0, _)| p0 == pos),
            // Before the first anchor there is no rate to back-extrapolate
            // with: what was held is pinned to this one.
            spread: self.anchor.is_some() && pos > p0,
        };
        for (p, item) in &self.pending {
            release(&stamps, *p, item);
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
    #[inline]
    pub(crate) fn finish(&mut self, mut release: impl FnMut(Stamp, &T)) {
        self.finish_with(|stamps, p, item| release(stamps.at(p), item));
    }

    /// [`Clock::finish`], as [`Clock::anchor_with`] is [`Clock::anchor`].
    pub(crate) fn finish_with(&mut self, mut release: impl FnMut(&Stamps, u64, &T)) {
        let (p0, t0) = self.anchor.unwrap_or((0, 0));
        if let Some((span, n)) = self.rate_from {
            self.rate = ((span as u128) << 32).div_ceil(n as u128) as u64;
        }
        if self.counts_insns {
            self.rate = 1 << 32;
        }
        let stamps = Stamps::Past {
            p0,
            t0,
            rate: self.rate,
        };
        for (p, item) in &self.pending {
            release(&stamps, *p, item);
        }
        self.pending.clear();
    }
}

/// The times of what one anchor (or the end) releases: a pure function
/// of an item's position, so that an item standing for a run of positions
/// is timed as that many items would be.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stamps {
    /// Up to the anchor at `pos` (TSC `tsc`), from the one before at `p0`
    /// (`t0`).
    Anchor {
        pos: u64,
        tsc: u64,
        p0: u64,
        t0: u64,
        /// The two anchors are at one position.
        same_place: bool,
        /// There was an anchor before, and instructions between.
        spread: bool,
    },
    /// Past the last anchor (`p0`, `t0`), at `rate` ticks per instruction
    /// (32.32 fixed point).
    Past { p0: u64, t0: u64, rate: u64 },
}

impl Stamps {
    /// The time of an item at position `p`.
    #[inline(always)]
    pub(crate) fn at(&self, p: u64) -> Stamp {
        match *self {
            Stamps::Anchor {
                pos,
                tsc,
                p0,
                t0,
                same_place,
                spread,
            } => {
                if same_place && p == pos {
                    // Held since the last anchor, at its very position: no
                    // instruction retired between the two, yet time passed
                    // (untraced code ran, as between a disable and an
                    // enable). The item happened at the earlier time.
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
                        tsc: t0 + mul_div(tsc - t0, p.saturating_sub(p0), pos - p0),
                        exact: false,
                    }
                }
            }
            Stamps::Past { p0, t0, rate } => {
                let dt = ((p.saturating_sub(p0) as u128 * rate as u128) >> 32) as u64;
                Stamp {
                    tsc: t0 + dt,
                    exact: false,
                }
            }
        }
    }

    /// The times of the `n` positions from `first`, in order, as
    /// [`Stamps::at`] gives them: where they are spread between two
    /// anchors, by adding each position's share to the last rather than
    /// dividing anew (a segment's instructions are tens of thousands).
    #[inline]
    pub(crate) fn each(&self, first: u64, n: u32, mut f: impl FnMut(u32, Stamp)) {
        let mut k = 0;
        if let Stamps::Anchor {
            pos,
            tsc,
            p0,
            t0,
            spread: true,
            ..
        } = *self
        {
            // The positions before the anchor, from the last one on:
            // `t0 + ticks * d / insns` for d = p - p0, kept as a quotient
            // and a remainder that grow by `ticks / insns` and
            // `ticks % insns` a step.
            while k < n && first + u64::from(k) < p0 {
                f(k, self.at(first + u64::from(k)));
                k += 1;
            }
            let (ticks, insns) = (tsc - t0, pos - p0);
            let (step_q, step_r) = (ticks / insns, ticks % insns);
            let d = (first + u64::from(k)).saturating_sub(p0);
            let mut q = mul_div(ticks, d, insns);
            // `ticks * d - q * insns` is below `insns`: exact in wrapping
            // arithmetic, whatever the product.
            let mut r = ticks.wrapping_mul(d).wrapping_sub(q.wrapping_mul(insns));
            while k < n && first + u64::from(k) < pos {
                f(
                    k,
                    Stamp {
                        tsc: t0 + q,
                        exact: false,
                    },
                );
                // Past the last position before the anchor, the sums are
                // not used: they may wrap.
                // `r + step_r` compared without forming it: both are below
                // `insns`, whose double need not fit.
                q = q.wrapping_add(step_q);
                if r >= insns - step_r {
                    r -= insns - step_r;
                    q = q.wrapping_add(1);
                } else {
                    r += step_r;
                }
                k += 1;
            }
        }
        while k < n {
            f(k, self.at(first + u64::from(k)));
            k += 1;
        }
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

    /// A run of positions is timed as its positions one by one, wherever
    /// it starts and ends against the two anchors, with any ticks and
    /// instructions between them (up to nearly 2^64).
    #[test]
    fn a_run_is_timed_as_its_positions_one_by_one() {
        let mut rng = fastrand::Rng::with_seed(41);
        for round in 0..20_000 {
            let p0 = rng.u64(0..1000);
            // Some with more instructions between the anchors than twice
            // fits in 64 bits, where the remainder's sum must not be formed.
            let pos = match round % 10 {
                0 => u64::MAX - rng.u64(0..1000),
                _ => p0 + rng.u64(0..300),
            };
            let t0 = rng.u64(..1 << 62) >> rng.u32(0..63);
            let tsc = t0 + (rng.u64(..1 << 62) >> rng.u32(0..63));
            let spread = pos > p0 && rng.bool();
            let all = [
                Stamps::Anchor {
                    pos,
                    tsc,
                    p0,
                    t0,
                    same_place: !spread && rng.bool(),
                    spread,
                },
                Stamps::Past {
                    p0,
                    t0,
                    rate: rng.u64(..1 << 40) >> rng.u32(0..41),
                },
            ];
            for stamps in all {
                let first = rng.u64(0..1400);
                let n = rng.u32(0..400);
                let mut got = Vec::new();
                stamps.each(first, n, |k, s| got.push((k, s)));
                let want: Vec<_> = (0..n)
                    .map(|k| (k, stamps.at(first + u64::from(k))))
                    .collect();
                assert_eq!(got, want, "{stamps:?} from {first}, {n} of them");
            }
        }
    }
}
