//! How line detail reaches whoever draws it: the [`DetailSource`] trait.
//!
//! The model holds no engine. Re-decoding a segment down to instructions
//! and lines needs the trace, the code and the symbols, which live in the
//! decoder; the viewer must not compile any of that. So this crate says
//! what the viewer may ask for, and the decoder answers: the app builds the
//! decoder's implementation for each model and hands it to the viewer
//! beside the model. Every request is asynchronous: the implementation
//! runs it on its own worker threads and the viewer picks up results on a
//! later frame, so no widget ever decodes or spawns a thread.

use std::sync::Arc;

use crate::calls::compare_lines::LineComparison;
use crate::calls::Call;
use crate::model::Model;
use crate::segment::{FineError, Segment};

/// A segment: (thread index in the model, checkpoint index).
pub type SegmentKey = (u32, u32);

/// What the fine pass's worker and its cache have done, for the status
/// line and the benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerFigures {
    pub decoded: u64,
    pub cancelled: u64,
    pub evicted: u64,
    /// Time spent decoding, ns.
    pub decode_ns: u64,
    /// Of `decode_ns`, the time the segments' walks took: what the coarse
    /// pass does over the same trace, before the instructions, their lines
    /// and the line spans are built.
    pub walk_ns: u64,
    pub cached: usize,
    pub cached_bytes: usize,
    /// The most the cache ever held.
    pub peak_bytes: usize,
    /// The line lookups of every module the model's code ran in wait for
    /// nothing: idle workers prepared them (or found them prepared).
    pub lines_prepared: bool,
}

impl WorkerFigures {
    /// Adds another worker's counts (segments decoded, cancelled and
    /// evicted, and the time their decodes and walks took) to these. The
    /// cache's figures, and whether the lines are prepared, say what one
    /// worker holds, not how much work was done: they stay as they are.
    pub fn add_counts(&mut self, other: &WorkerFigures) {
        self.decoded += other.decoded;
        self.cancelled += other.cancelled;
        self.evicted += other.evicted;
        self.decode_ns += other.decode_ns;
        self.walk_ns += other.walk_ns;
    }
}

/// Called once with the result of a line comparison.
pub type CompareDone = Box<dyn FnOnce(Result<LineComparison, FineError>) + Send>;

/// Line detail on demand for one model: segment decodes behind a bounded
/// cache, disassembly, and the line comparison of two calls.
pub trait DetailSource: Send + Sync {
    /// The model it serves.
    fn model(&self) -> &Arc<Model>;

    /// The segments wanted now, most wanted first. Replaces what was
    /// wanted before; a decode no longer wanted is cancelled.
    fn want(&self, keys: &[SegmentKey]);

    /// A decoded segment, if ready.
    fn get(&self, key: SegmentKey) -> Option<Arc<Segment>>;

    /// Why a segment could not be decoded, if it could not.
    fn error(&self, key: SegmentKey) -> Option<FineError>;

    /// Wanted segments not decoded yet.
    fn pending(&self) -> usize;

    /// What the worker has done so far.
    fn figures(&self) -> WorkerFigures;

    /// Blocks until every wanted segment is decoded or failed: for tests
    /// and batch use, never for a frame.
    fn wait(&self);

    /// The instruction at `ip` of process `pid` in Intel syntax, decoded
    /// as `bitness`-bit code; `None` where its bytes are not at hand.
    fn disassemble(&self, pid: i32, ip: u64, bitness: u8) -> Option<String>;

    /// Re-decodes calls `a` and `b` line by line, in the background, and
    /// calls `done` with the comparison.
    fn compare_lines(&self, a: Call, b: Call, done: CompareDone);

    /// The segments of thread `thread` covering `[from, to]`.
    fn keys(&self, thread: usize, from: u64, to: u64) -> Vec<SegmentKey> {
        match self.model().threads.get(thread) {
            Some(t) => t
                .segments_in(from, to)
                .map(|i| (thread as u32, i as u32))
                .collect(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WorkerFigures;

    #[test]
    fn adding_counts_sums_the_work_and_keeps_the_cache() {
        let mut a = WorkerFigures {
            decoded: 2,
            cancelled: 1,
            evicted: 0,
            decode_ns: 500,
            walk_ns: 200,
            cached: 2,
            cached_bytes: 4096,
            peak_bytes: 8192,
            lines_prepared: true,
        };
        let b = WorkerFigures {
            decoded: 3,
            cancelled: 0,
            evicted: 4,
            decode_ns: 700,
            walk_ns: 300,
            cached: 9,
            cached_bytes: 1,
            peak_bytes: 1 << 20,
            lines_prepared: false,
        };
        a.add_counts(&b);
        assert_eq!(
            a,
            WorkerFigures {
                decoded: 5,
                cancelled: 1,
                evicted: 4,
                decode_ns: 1200,
                walk_ns: 500,
                cached: 2,
                cached_bytes: 4096,
                peak_bytes: 8192,
                lines_prepared: true,
            }
        );
    }
}
