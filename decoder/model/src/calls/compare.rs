//! Two calls side by side at call level. Each call's subtree is folded by
//! call path (the calls a path makes are one node, with their count and
//! total time), the two trees are aligned on those paths, and the nodes are
//! ranked by how much of the difference between the calls they explain:
//! a node's own difference in inclusive time, as a share of the whole.
//! A path that only one call took stands out, since it is usually the
//! answer ("the slow one called `rebuild`").

use std::collections::HashMap;

use super::Call;
use crate::funcs::FuncId;
use crate::model::Model;

/// What one call spent under one call path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PathFigures {
    /// Spans on the path (calls, or pseudo-spans such as `[syscall]`).
    pub count: u64,
    /// Their inclusive time, and that time less their children's.
    pub total: u64,
    pub self_time: u64,
}

/// One call path, from the compared function down, in both calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub path: Vec<FuncId>,
    /// In the call being explained (`a`, usually the slow one) and in the
    /// one it is compared with (`b`, usually a typical one).
    pub a: PathFigures,
    pub b: PathFigures,
}

impl Node {
    /// Inclusive time in `a` less that in `b`.
    pub fn diff(&self) -> i128 {
        self.a.total as i128 - self.b.total as i128
    }

    /// Self time in `a` less that in `b`.
    pub fn self_diff(&self) -> i128 {
        self.a.self_time as i128 - self.b.self_time as i128
    }

    /// Which call alone took this path, if only one did.
    pub fn only_in(&self) -> Option<Side> {
        match (self.a.count, self.b.count) {
            (_, 0) => Some(Side::A),
            (0, _) => Some(Side::B),
            _ => None,
        }
    }
}

/// One of the two calls compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// Two calls' trees aligned by call path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comparison {
    pub a: Call,
    pub b: Call,
    /// The calls themselves first (the whole difference), then every other
    /// path, the one that explains most of the difference first.
    pub nodes: Vec<Node>,
}

impl Comparison {
    /// The whole difference, `a`'s duration less `b`'s.
    pub fn diff(&self) -> i128 {
        self.a.duration as i128 - self.b.duration as i128
    }

    /// The share of the whole difference a node explains (0 when the calls
    /// took the same time).
    pub fn share(&self, node: &Node) -> f64 {
        match self.diff() {
            0 => 0.0,
            d => node.diff() as f64 / d as f64,
        }
    }
}

/// Folds both calls' subtrees into one table of call paths.
struct Folder {
    nodes: Vec<Node>,
    /// (parent node, function) to node; the root's parent is `u32::MAX`.
    index: HashMap<(u32, FuncId), u32>,
}

impl Folder {
    fn node(&mut self, parent: u32, func: FuncId) -> u32 {
        if let Some(&n) = self.index.get(&(parent, func)) {
            return n;
        }
        let mut path = match self.nodes.get(parent as usize) {
            Some(p) => p.path.clone(),
            None => Vec::new(),
        };
        path.push(func);
        let n = self.nodes.len() as u32;
        self.nodes.push(Node {
            path,
            a: PathFigures::default(),
            b: PathFigures::default(),
        });
        self.index.insert((parent, func), n);
        n
    }

    /// Adds `call`'s subtree on `side`.
    fn add(&mut self, model: &Model, call: &Call, side: Side) {
        let Some(t) = call.span.thread(model) else {
            return;
        };
        let mut stack = vec![(call.span.depth as usize, call.span.index as usize, u32::MAX)];
        while let Some((d, i, parent)) = stack.pop() {
            let s = t.lane(d)[i];
            let n = self.node(parent, s.func());
            let (start, end) = (s.start, t.end(d, i));
            let kids = if d + 1 < t.depth() {
                t.children(d, i)
            } else {
                0..0
            };
            let mut under = 0u64;
            for c in kids {
                let k = t.lane(d + 1)[c];
                under += t.end(d + 1, c).min(end).saturating_sub(k.start.max(start));
                stack.push((d + 1, c, n));
            }
            let f = match side {
                Side::A => &mut self.nodes[n as usize].a,
                Side::B => &mut self.nodes[n as usize].b,
            };
            let dur = t.duration_of(d, i, &s);
            f.count += 1;
            f.total += dur;
            f.self_time += dur.saturating_sub(under);
        }
    }
}

/// Aligns the subtrees of calls `a` and `b` by call path. The two calls
/// need not be of the same function: their own nodes are then two roots.
pub fn compare_calls(model: &Model, a: &Call, b: &Call) -> Comparison {
    let mut f = Folder {
        nodes: Vec::new(),
        index: HashMap::new(),
    };
    f.add(model, a, Side::A);
    f.add(model, b, Side::B);
    let mut nodes = f.nodes;
    let whole = a.duration as i128 - b.duration as i128;
    let sign = if whole < 0 { -1 } else { 1 };
    // The roots first, then by the share explained, then by path (so the
    // order does not depend on the walk).
    nodes.sort_by(|x, y| {
        (x.path.len() > 1)
            .cmp(&(y.path.len() > 1))
            .then((y.diff() * sign).cmp(&(x.diff() * sign)))
            .then(x.path.cmp(&y.path))
    });
    Comparison {
        a: *a,
        b: *b,
        nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::requests;
    use super::super::{calls_of, funcs_named, Pick};
    use super::*;

    #[test]
    fn the_path_only_the_slow_call_took_explains_most() {
        let m = requests();
        let calls = calls_of(&m, &funcs_named(&m.funcs, "handle"));
        let slow = Pick::Slowest.of(&calls, None).unwrap();
        let typical = Pick::Median.of(&calls, Some(slow)).unwrap();
        let c = compare_calls(&m, &calls[slow], &calls[typical]);
        let name = |n: &Node| -> Vec<&str> { n.path.iter().map(|&f| m.funcs.name(f)).collect() };
        assert_eq!(c.diff(), 1000 - 100);
        let root = &c.nodes[0];
        assert_eq!(name(root), ["handle"]);
        assert_eq!(root.diff(), c.diff());
        assert_eq!((root.a.self_time, root.b.self_time), (1000 - 890 - 80, 20));
        let first = &c.nodes[1];
        assert_eq!(name(first), ["handle", "rebuild"]);
        assert_eq!(first.only_in(), Some(Side::A));
        assert_eq!(
            first.a,
            PathFigures {
                count: 1,
                total: 890,
                self_time: 890 - 680
            }
        );
        assert!((c.share(first) - 890.0 / 900.0).abs() < 1e-9);
        let direct = c
            .nodes
            .iter()
            .find(|n| name(n) == ["handle", "probe"])
            .unwrap();
        assert_eq!((direct.a.total, direct.b.total), (80, 80));
        assert_eq!(direct.only_in(), None);
        let under = c
            .nodes
            .iter()
            .find(|n| name(n) == ["handle", "rebuild", "probe"])
            .unwrap();
        assert_eq!((under.a.count, under.a.total), (2, 680));
        // Self-time differences add up to the whole difference.
        let selves: i128 = c.nodes.iter().map(Node::self_diff).sum();
        assert_eq!(selves, c.diff());
    }

    #[test]
    fn a_call_compared_with_itself_differs_nowhere() {
        let m = requests();
        let calls = calls_of(&m, &funcs_named(&m.funcs, "handle"));
        let c = compare_calls(&m, &calls[3], &calls[3]);
        assert_eq!(c.diff(), 0);
        assert!(c
            .nodes
            .iter()
            .all(|n| n.diff() == 0 && n.only_in().is_none()));
        assert_eq!(c.share(&c.nodes[0]), 0.0);
    }
}
