//! Span references and call-tree queries: this module names one span of a
//! model ([`SpanRef`]) and answers what the panels ask of the call tree
//! (self time, call paths, calls per function).
//!
//! The store keeps no parent links, because 16 bytes a span is the budget,
//! except for the few calls whose times do not place them. The tree is
//! therefore recovered with binary searches in neighbouring lanes, through
//! the store's [`ThreadSpans::parent`] and [`ThreadSpans::children`].

use ptscope_decoder::model::Model;
use ptscope_decoder::store::{Span, ThreadSpans};

/// One span of a model: thread index, depth, index in its lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanRef {
    pub thread: u32,
    pub depth: u32,
    pub index: u32,
}

impl SpanRef {
    pub fn new(thread: usize, depth: usize, index: usize) -> SpanRef {
        SpanRef {
            thread: thread as u32,
            depth: depth as u32,
            index: index as u32,
        }
    }

    /// The thread's spans, if the reference is valid in `model`.
    pub fn thread<'m>(&self, model: &'m Model) -> Option<&'m ThreadSpans> {
        let t = &model.threads.get(self.thread as usize)?.spans;
        ((self.index as usize) < t.lane(self.depth as usize).len()).then_some(t)
    }

    pub fn span(&self, model: &Model) -> Option<Span> {
        let t = self.thread(model)?;
        Some(t.lane(self.depth as usize)[self.index as usize])
    }

    /// (start, end) in ns.
    pub fn times(&self, model: &Model) -> Option<(u64, u64)> {
        let t = self.thread(model)?;
        let (d, i) = (self.depth as usize, self.index as usize);
        Some((t.lane(d)[i].start, t.end(d, i)))
    }
}

/// Duration less the time of direct children.
pub fn self_time(t: &ThreadSpans, depth: usize, index: usize) -> u64 {
    let dur = t.duration(depth, index);
    let end = t.end(depth, index);
    let kids: u64 = t
        .children(depth, index)
        .map(|c| t.end(depth + 1, c).min(end) - t.lane(depth + 1)[c].start)
        .sum();
    dur.saturating_sub(kids)
}

/// The call path to `r`, outermost first, `r` last.
pub fn call_path(model: &Model, r: SpanRef) -> Vec<SpanRef> {
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

/// The deepest span of thread `thread` at `depth` that contains `time`.
pub fn at_time(t: &ThreadSpans, depth: usize, time: u64) -> Option<usize> {
    let lane = t.lane(depth);
    let p = lane.partition_point(|s| s.start <= time);
    (p > 0 && t.end(depth, p - 1) > time).then(|| p - 1)
}

/// Calls per function over every span of `model`.
pub fn calls_per_func(model: &Model) -> Vec<u64> {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ptscope_decoder::event::{FuncTable, SpanKind};
    use ptscope_decoder::model::ThreadModel;

    pub(crate) fn thread_model(spans: ThreadSpans) -> ThreadModel {
        ThreadModel {
            spans,
            stack: Default::default(),
            walk: Default::default(),
            checkpoints: Vec::new(),
            checkpoint_frames: Vec::new(),
            stream: None,
        }
    }

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
        Model {
            funcs,
            threads: vec![thread_model(t)],
            missing_binaries: Vec::new(),
            warnings: Vec::new(),
            lines: None,
            unit: Default::default(),
        }
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
        assert_eq!(at_time(t, 1, 55), Some(1));
        assert_eq!(at_time(t, 1, 45), None);
        let calls = calls_per_func(&m);
        assert_eq!(calls[3..], [2, 2, 1]);
    }
}
