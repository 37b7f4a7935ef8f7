//! Span references and call-tree queries: this module names one span of a
//! model ([`SpanRef`]) and answers what the panels ask of the call tree
//! (self time, call paths, calls per function, which spans are calls).
//!
//! The store keeps no parent links, because 16 bytes a span is the budget,
//! except for the few calls whose times do not place them. The tree is
//! therefore recovered with binary searches in neighbouring lanes, through
//! the store's [`ThreadSpans::parent`] and [`ThreadSpans::children`].

use ptscope_model::Model;
pub use ptscope_model::SpanRef;
use ptscope_model::ThreadSpans;

/// Duration less the time of direct children.
pub(crate) fn self_time(t: &ThreadSpans, depth: usize, index: usize) -> u64 {
    let dur = t.duration(depth, index);
    let end = t.end(depth, index);
    let kids: u64 = t
        .children(depth, index)
        .map(|c| t.end(depth + 1, c).min(end) - t.lane(depth + 1)[c].start)
        .sum();
    dur.saturating_sub(kids)
}

/// The call path to `r`, outermost first, `r` last.
pub(crate) fn call_path(model: &Model, r: SpanRef) -> Vec<SpanRef> {
    let mut out = vec![r];
    let Some(t) = r.thread(model) else {
        return Vec::new();
    };
    let (mut d, mut i) = (r.depth as usize, r.index as usize);
    while let Some(p) = t.parent(d, i) {
        d -= 1;
        i = p;
        out.push(SpanRef::new(r.thread as usize, d, i));
    }
    out.reverse();
    out
}

/// Calls per function, from `spans` per function ([`spans_per_func`]):
/// the pseudo-functions' spans are no calls.
pub(crate) fn calls_of(model: &Model, spans: &[u64]) -> Vec<u64> {
    spans
        .iter()
        .enumerate()
        .map(|(f, &n)| if model.funcs.is_call(f as u32) { n } else { 0 })
        .collect()
}

/// Spans per function over every span of `model`, pseudo-spans included.
pub(crate) fn spans_per_func(model: &Model) -> Vec<u64> {
    let mut out = vec![0u64; model.funcs.len()];
    for t in &model.threads {
        for (_, lane) in t.spans.lanes() {
            for s in lane {
                if let Some(c) = out.get_mut(s.func() as usize) {
                    *c += 1;
                }
            }
        }
    }
    out
}

/// Where the pseudo-spans are: per thread and depth, the sorted indices of
/// the spans that are not calls. Pseudo-spans are few, so this is small,
/// and a run of spans (a merged box) counts its calls with two binary
/// searches instead of reading its spans.
#[derive(Clone, Debug, Default)]
pub(crate) struct PseudoIndex {
    lanes: Vec<Vec<Vec<u32>>>,
}

impl PseudoIndex {
    pub(crate) fn new(model: &Model) -> PseudoIndex {
        // One flag per function, so the scan reads no function records.
        let call: Vec<bool> = (0..model.funcs.len())
            .map(|f| model.funcs.is_call(f as u32))
            .collect();
        let lanes = model
            .threads
            .iter()
            .map(|t| {
                t.spans
                    .lanes()
                    .map(|(_, lane)| {
                        lane.iter()
                            .enumerate()
                            .filter(|(_, s)| !call.get(s.func() as usize).copied().unwrap_or(true))
                            .map(|(i, _)| i as u32)
                            .collect()
                    })
                    .collect()
            })
            .collect();
        PseudoIndex { lanes }
    }

    /// Of the spans `first..first + count` of lane `depth` of thread
    /// `thread`: (calls, pseudo-spans).
    pub(crate) fn split(&self, thread: u32, depth: u32, first: u32, count: u32) -> (u32, u32) {
        let pseudo = self
            .lanes
            .get(thread as usize)
            .and_then(|t| t.get(depth as usize))
            .map_or(0, |l| {
                let a = l.partition_point(|&i| i < first);
                let b = l.partition_point(|&i| i < first.saturating_add(count));
                (b - a) as u32
            });
        (count - pseudo.min(count), pseudo.min(count))
    }
}

/// What a run of merged spans holds, as the timeline labels it: "9 calls",
/// "7 calls, 2 other spans", or "2 other spans" when none is a call.
pub(crate) fn merged_label(calls: u32, pseudo: u32) -> String {
    let other = |n: u32| format!("{n} other span{}", if n == 1 { "" } else { "s" });
    match (calls, pseudo) {
        (c, 0) => format!("{c} calls"),
        (0, p) => other(p),
        (c, p) => format!("{c} calls, {}", other(p)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ptscope_model::{FuncTable, SpanKind};

    /// main(0-100) { a(10-40) { b(20-30) } a(50-60) }, main(200-300).
    pub(crate) fn small_model() -> Model {
        let mut funcs = FuncTable::default();
        let main = funcs.intern("main", "/bin/prog", 0x1000, SpanKind::Call);
        let a = funcs.intern("a", "/bin/prog", 0x1100, SpanKind::Call);
        let b = funcs.intern("b", "/bin/prog", 0x1200, SpanKind::Call);
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        t.push(0, 0, 100, main, 0);
        t.push(0, 200, 300, main, 0);
        t.push(1, 10, 40, a, 0);
        t.push(1, 50, 60, a, 0);
        t.push(2, 20, 30, b, 0);
        Model::of(funcs, [t])
    }

    #[test]
    fn tree_queries() {
        let m = small_model();
        let t = &m.threads[0].spans;
        assert_eq!(t.parent(2, 0), Some(0));
        assert_eq!(t.parent(1, 1), Some(0));
        assert_eq!(t.parent(0, 0), None);
        assert_eq!(t.children(0, 0), 0..2);
        assert!(t.children(0, 1).is_empty());
        assert_eq!(self_time(t, 0, 0), 60);
        assert_eq!(self_time(t, 1, 0), 20);
        let path = call_path(&m, SpanRef::new(0, 2, 0));
        assert_eq!(
            path,
            [
                SpanRef::new(0, 0, 0),
                SpanRef::new(0, 1, 0),
                SpanRef::new(0, 2, 0)
            ]
        );
        let calls = calls_of(&m, &spans_per_func(&m));
        assert_eq!(calls[3..], [2, 2, 1]);
    }

    #[test]
    fn pseudo_spans_are_not_calls() {
        use ptscope_model::{SYSCALL, UNTRACED};
        let mut funcs = FuncTable::default();
        let f = funcs.intern("f", "/bin/prog", 0x1000, SpanKind::Call);
        let err = funcs.decode_error("Overflow packet");
        let gone = funcs.no_binary("/lib/libgone.so");
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        for (i, func) in [f, UNTRACED, f, err, gone, SYSCALL, f]
            .into_iter()
            .enumerate()
        {
            let at = i as u64 * 10;
            t.push(0, at, at + 5, func, 0);
        }
        let m = Model::of(funcs, [t]);
        let spans = spans_per_func(&m);
        let calls = calls_of(&m, &spans);
        assert_eq!(calls[f as usize], 3);
        for p in [UNTRACED, SYSCALL, err, gone] {
            assert_eq!(calls[p as usize], 0);
            assert!(spans[p as usize] > 0);
        }
        let idx = PseudoIndex::new(&m);
        assert_eq!(idx.split(0, 0, 0, 7), (3, 4));
        assert_eq!(idx.split(0, 0, 2, 3), (1, 2));
        assert_eq!(idx.split(0, 0, 6, 1), (1, 0));
        assert_eq!(idx.split(9, 9, 0, 4), (4, 0));
        assert_eq!(merged_label(9, 0), "9 calls");
        assert_eq!(merged_label(7, 2), "7 calls, 2 other spans");
        assert_eq!(merged_label(0, 1), "1 other span");
    }
}
