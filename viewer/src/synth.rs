//! Synthetic models: this module builds call trees shaped like real traces
//! (deep chains, bursts of tiny leaf calls, a few pseudo-spans) of any
//! size, with no capture needed.
//!
//! The frame benchmark (`benches/frame.rs`) draws ten million such spans.
//! A given seed always builds the same model, so figures from two runs
//! compare.

use ptscope_model::{flag, ThreadSpans};
use ptscope_model::{FuncId, FuncTable, SpanKind, SYSCALL, UNTRACED};
use ptscope_model::{Model, ThreadModel};

/// fastrand's generator, seeded: deterministic, good enough for shapes.
struct Rng(fastrand::Rng);

impl Rng {
    fn seeded(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n.max(1))
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub threads: usize,
    /// Spans per thread (about; the last tree is cut at the budget).
    pub spans_per_thread: usize,
    /// Deepest call depth.
    pub max_depth: usize,
    /// Time of the first span.
    pub base_ns: u64,
    pub functions: usize,
    pub seed: u64,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            threads: 4,
            spans_per_thread: 10_000,
            max_depth: 20,
            base_ns: 1_000_000,
            functions: 500,
            seed: 1,
        }
    }
}

struct Gen<'a> {
    rng: Rng,
    t: &'a mut ThreadSpans,
    budget: usize,
    funcs: &'a [FuncId],
    max_depth: usize,
}

impl Gen<'_> {
    /// A call at `depth` over `[start, end)`, then its children inside.
    fn call(&mut self, depth: usize, start: u64, end: u64, func: FuncId) {
        if self.budget == 0 {
            return;
        }
        self.budget -= 1;
        let flags = if self.rng.below(50) == 0 {
            flag::START_ESTIMATED
        } else {
            0
        };
        self.t.push(depth, start, end, func, flags);
        let dur = end - start;
        if depth + 1 >= self.max_depth || dur < 20 {
            return;
        }
        // Mostly chains (one child filling most of the parent), sometimes
        // a burst of many tiny calls, sometimes a few siblings.
        let roll = self.rng.below(100);
        let n = match roll {
            0..=54 => 1,
            55..=84 => 2 + self.rng.below(3),
            _ => (dur / 12).clamp(2, 200),
        };
        let slot = dur / n;
        if slot < 4 {
            return;
        }
        for k in 0..n {
            let s0 = start + k * slot;
            let fill = if n == 1 {
                60 + self.rng.below(35)
            } else {
                30 + self.rng.below(60)
            };
            let len = (slot * fill / 100).max(1);
            let off = self.rng.below(slot - len + 1);
            let f = self.funcs[self.rng.below(self.funcs.len() as u64) as usize];
            self.call(depth + 1, s0 + off, s0 + off + len, f);
            if self.budget == 0 {
                return;
            }
        }
    }
}

/// Builds a model per `spec`.
pub fn synthetic_model(spec: &SynthSpec) -> Model {
    let mut funcs = FuncTable::default();
    let modules = [
        "/usr/bin/server",
        "/usr/lib/libc.so.6",
        "/usr/lib/libssl.so",
    ];
    let ids: Vec<FuncId> = (0..spec.functions)
        .map(|i| {
            let name = match i % 5 {
                0 => format!("server::handle_request_{i}"),
                1 => format!("parse_packet_{i}"),
                2 => format!("memcpy_{i}"),
                3 => format!("std::collections::HashMap::insert_{i}"),
                _ => format!("worker_loop_{i}"),
            };
            funcs.intern(
                &name,
                modules[i % 3],
                0x40_0000 + i as u64 * 64,
                SpanKind::Call,
            )
        })
        .collect();
    let err = funcs.decode_error("overflow");
    let mut rng = Rng::seeded(spec.seed);
    let mut threads = Vec::new();
    for ti in 0..spec.threads {
        let tid = 1000 + ti as i32;
        let mut t = ThreadSpans::new(1000, tid, format!("worker-{ti}"));
        let mut now = spec.base_ns + rng.below(1000);
        let mut g = Gen {
            rng: Rng::seeded(rng.next()),
            t: &mut t,
            budget: spec.spans_per_thread,
            funcs: &ids,
            max_depth: spec.max_depth,
        };
        while g.budget > 0 {
            // Root calls of 1 µs to 2 ms, with pseudo-spans between.
            let dur = 1_000 + g.rng.below(2_000_000);
            let root = ids[g.rng.below(ids.len() as u64) as usize];
            g.call(0, now, now + dur, root);
            now += dur;
            let gap = g.rng.below(20_000);
            if g.budget > 0 && gap > 0 {
                let pseudo = match g.rng.below(20) {
                    0 => err,
                    1..=8 => SYSCALL,
                    _ => UNTRACED,
                };
                g.budget -= 1;
                g.t.push(0, now, now + gap, pseudo, 0);
            }
            now += gap;
        }
        t.shrink_to_fit();
        threads.push(ThreadModel::from_spans(t));
    }
    Model {
        funcs,
        threads,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_deep_sorted_lanes() {
        let m = synthetic_model(&SynthSpec {
            threads: 2,
            spans_per_thread: 20_000,
            ..SynthSpec::default()
        });
        assert_eq!(m.threads.len(), 2);
        for t in &m.threads {
            assert_eq!(t.spans.span_count(), 20_000);
            assert!(t.spans.depth() >= 10, "depth {}", t.spans.depth());
            for (d, lane) in t.spans.lanes() {
                for (i, s) in lane.iter().enumerate().skip(1) {
                    assert!(t.spans.end(d, i - 1) <= s.start);
                }
            }
        }
    }
}
