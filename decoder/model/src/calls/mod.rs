//! One function's calls, for the outlier hunt: is a function slow because
//! it ran ten times more often than expected, or because one call took ten
//! times longer? This module answers from a decoded model, for the command
//! line (`ptscope stats --histogram`, `ptscope compare`) and the viewer's
//! Details panel alike.
//!
//! - here: every call of a function in time order ([`calls_of`]), and the
//!   calls a comparison picks ([`Pick`]: the slowest, the one nearest the
//!   median, or the n-th);
//! - [`distribution`]: the calls' durations as log-scaled buckets and
//!   percentiles;
//! - [`compare`]: two calls' subtrees aligned by call path, each node's
//!   share of the difference;
//! - [`compare_lines`]: the same two calls re-decoded by the fine pass, line by
//!   line: what ran in one and not the other, and loops whose trip counts
//!   differ.

pub(crate) mod compare;
pub(crate) mod compare_lines;
pub(crate) mod distribution;

use crate::funcs::{FuncId, FuncTable};
use crate::model::{Model, SpanRef};

/// One call: where it is and how long it took (in the model's unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub span: SpanRef,
    pub start: u64,
    pub duration: u64,
}

/// Every function id named `name`: one name can have several (the same
/// function in two modules, or a static function of two files).
pub fn funcs_named(funcs: &FuncTable, name: &str) -> Vec<FuncId> {
    funcs
        .iter()
        .filter(|(_, f)| f.name == name)
        .map(|(id, _)| id)
        .collect()
}

/// Every span of any of `funcs` over all threads, in time order (start,
/// then thread, depth and index: the order "next call" steps in).
pub fn calls_of(model: &Model, funcs: &[FuncId]) -> Vec<Call> {
    let mut out = calls_unordered(model, funcs);
    out.sort_unstable_by_key(|c| (c.start, c.span));
    out
}

/// [`calls_of`] in the store's order (by thread, depth, then time): for
/// callers that sort them their own way.
pub fn calls_unordered(model: &Model, funcs: &[FuncId]) -> Vec<Call> {
    let wanted = |f: FuncId| funcs.contains(&f);
    let mut out = Vec::new();
    for (ti, t) in model.threads.iter().enumerate() {
        let t = &t.spans;
        for (d, lane) in t.lanes() {
            for (i, s) in lane.iter().enumerate() {
                if wanted(s.func()) {
                    out.push(Call {
                        span: SpanRef::new(ti, d, i),
                        start: s.start,
                        duration: t.duration_of(d, i, s),
                    });
                }
            }
        }
    }
    out
}

/// The call of `calls` on thread `tid` whose times are nearest `start` and
/// `end`: a call timed outside the trace (a trigger's) found in it. Times
/// measured apart can differ by the last timing packet's distance.
pub fn nearest(model: &Model, calls: &[Call], tid: i32, start: u64, end: u64) -> Option<usize> {
    let off = |c: &Call| c.start.abs_diff(start) + c.start.saturating_add(c.duration).abs_diff(end);
    calls
        .iter()
        .enumerate()
        .filter(|(_, c)| model.threads[c.span.thread as usize].spans.tid == tid)
        .min_by_key(|(_, c)| off(c))
        .map(|(i, _)| i)
}

/// Which call a comparison takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The longest (the first of equals in time order).
    Slowest,
    /// The one whose duration is the median's (the middle of the calls
    /// sorted by duration, then time): a typical call.
    Median,
    /// The n-th in time order, from 0.
    Nth(usize),
}

impl Pick {
    /// The call of `calls` (in time order) this picks, never `not` (the
    /// other side of a comparison) when another call is left.
    pub fn of(self, calls: &[Call], not: Option<usize>) -> Option<usize> {
        let others = || (0..calls.len()).filter(move |&i| Some(i) != not);
        match self {
            Pick::Nth(n) => (n < calls.len()).then_some(n),
            Pick::Slowest => others()
                .min_by_key(|&i| (std::cmp::Reverse(calls[i].duration), i))
                .or(not),
            Pick::Median => {
                let mut by: Vec<usize> = others().collect();
                by.sort_unstable_by_key(|&i| (calls[i].duration, i));
                by.get(by.len().saturating_sub(1) / 2).copied().or(not)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::funcs::SpanKind;

    use crate::store::ThreadSpans;

    /// `handle` called five times on one thread, the fourth slow because
    /// it runs `rebuild` (which calls `probe` twice); every call runs
    /// `probe` once directly.
    pub(crate) fn requests() -> Model {
        let mut funcs = FuncTable::default();
        let main = funcs.intern("main", "/bin/app", 0x1000, SpanKind::Call);
        let handle = funcs.intern("handle", "/bin/app", 0x2000, SpanKind::Call);
        let probe = funcs.intern("probe", "/bin/app", 0x3000, SpanKind::Call);
        let rebuild = funcs.intern("rebuild", "/bin/app", 0x4000, SpanKind::Call);
        let mut t = ThreadSpans::new(1, 1, "app".into());
        t.push(0, 0, 10_000, main, 0);
        let mut at = 100;
        for (k, len) in [100, 110, 90, 1000, 105].into_iter().enumerate() {
            t.push(1, at, at + len, handle, 0);
            if k == 3 {
                t.push(2, at + 10, at + 900, rebuild, 0);
                t.push(3, at + 20, at + 300, probe, 0);
                t.push(3, at + 400, at + 800, probe, 0);
                t.push(2, at + 910, at + 990, probe, 0);
            } else {
                t.push(2, at + 10, at + len - 10, probe, 0);
            }
            at += 2000;
        }
        Model::of(funcs, [t])
    }

    #[test]
    fn calls_come_in_time_order_with_their_durations() {
        let m = requests();
        let handle = funcs_named(&m.funcs, "handle");
        assert_eq!(handle.len(), 1);
        let calls = calls_of(&m, &handle);
        let d: Vec<u64> = calls.iter().map(|c| c.duration).collect();
        assert_eq!(d, [100, 110, 90, 1000, 105]);
        assert!(calls.windows(2).all(|w| w[0].start < w[1].start));
        assert!(funcs_named(&m.funcs, "nope").is_empty());
    }

    #[test]
    fn picks_the_slowest_the_median_and_the_nth() {
        let m = requests();
        let calls = calls_of(&m, &funcs_named(&m.funcs, "handle"));
        assert_eq!(Pick::Slowest.of(&calls, None), Some(3));
        // Sorted: 90, 100, 105, 110, 1000: the median is 105.
        assert_eq!(Pick::Median.of(&calls, None), Some(4));
        // Without the slowest: 90, 100, 105, 110: the lower middle, 100.
        assert_eq!(Pick::Median.of(&calls, Some(3)), Some(0));
        assert_eq!(Pick::Nth(2).of(&calls, None), Some(2));
        assert_eq!(Pick::Nth(5).of(&calls, None), None);
        assert_eq!(Pick::Slowest.of(&calls, Some(3)), Some(1));
        // One call: it is compared with itself.
        assert_eq!(Pick::Median.of(&calls[..1], Some(0)), Some(0));
        assert_eq!(Pick::Slowest.of(&[], None), None);
    }
}
