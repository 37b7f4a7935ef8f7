//! CPU lanes: for a per-CPU trace, which thread ran on each CPU and when,
//! from the context-switch sideband, with the marks of that CPU's trace
//! (its frequency and power states). This is what a "time chart by CPU"
//! draws: a slice per stay of a thread on a CPU.

use crate::marks::Marks;

/// One thread's stay on a CPU, from its switch-in to the next switch on
/// that CPU (or the trace's end). The idle task (tid 0) has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuSlice {
    pub start: u64,
    pub end: u64,
    pub pid: i32,
    pub tid: i32,
}

/// One CPU of a per-CPU trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuTrack {
    pub cpu: u32,
    /// In time order, never overlapping.
    pub slices: Vec<CpuSlice>,
    pub marks: Marks,
}

impl CpuTrack {
    /// The slices from `from` to `to`: a binary search, for drawing a
    /// window of a long trace.
    pub fn slices_between(&self, from: u64, to: u64) -> &[CpuSlice] {
        let a = self.slices.partition_point(|s| s.end < from);
        let b = self.slices.partition_point(|s| s.start <= to);
        &self.slices[a..b.max(a)]
    }
}

/// The slices of a CPU from its switch-ins `(time, pid, tid)` and its
/// switch-outs `(time, tid)` (each sorted by time): a stay ends at the
/// next switch-in, or at the thread's own switch-out before it; the last
/// one runs to `end`.
pub fn slices(switches: &[(u64, i32, i32)], outs: &[(u64, i32)], end: u64) -> Vec<CpuSlice> {
    let mut out = Vec::new();
    for (i, &(start, pid, tid)) in switches.iter().enumerate() {
        let next = switches.get(i + 1).map_or(end.max(start), |n| n.0);
        let from = outs.partition_point(|o| o.0 < start);
        let until = outs[from..]
            .iter()
            .take_while(|o| o.0 <= next)
            .find(|o| o.1 == tid)
            .map_or(next, |o| o.0);
        if tid > 0 && until > start {
            out.push(CpuSlice {
                start,
                end: until,
                pid,
                tid,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_per_stay_and_none_for_idle() {
        let s = slices(&[(10, 1, 1), (20, 0, 0), (30, 1, 2), (30, 1, 3)], &[], 50);
        assert_eq!(
            s,
            [
                CpuSlice {
                    start: 10,
                    end: 20,
                    pid: 1,
                    tid: 1
                },
                CpuSlice {
                    start: 30,
                    end: 50,
                    pid: 1,
                    tid: 3
                }
            ]
        );
        let t = CpuTrack {
            cpu: 0,
            slices: s,
            marks: Marks::default(),
        };
        assert_eq!(t.slices_between(21, 29).len(), 0);
        assert_eq!(t.slices_between(0, 100).len(), 2);
        assert_eq!(t.slices_between(15, 31).len(), 2);
        // A switch-out ends a stay before the next switch-in; another
        // thread's does not.
        let s = slices(&[(10, 1, 1), (40, 1, 2)], &[(20, 7), (25, 1), (45, 2)], 50);
        let spans: Vec<(u64, u64, i32)> = s.iter().map(|s| (s.start, s.end, s.tid)).collect();
        assert_eq!(spans, [(10, 25, 1), (40, 45, 2)]);
    }
}
