//! Live progress of a decode, shared with whoever shows it.
//!
//! Decoding runs on a background thread while the GUI draws; the two share
//! only this: counters the decoder bumps and the GUI polls each frame, a
//! cancel flag, and the model so far, so the first threads can be drawn
//! before the last ones are decoded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use ptscope_model::Model;

use crate::pt::flow::MemoFigures;

/// How often a partial model is published at most: cloning it is not free.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

#[derive(Default)]
pub struct DecodeProgress {
    /// PSB segments decoded so far, and in all.
    pub segments_done: AtomicU64,
    pub segments_total: AtomicU64,
    /// Bytes of trace the decode walks in all, and when it began walking.
    bytes_total: AtomicU64,
    began: Mutex<Option<Instant>>,
    /// Whether anyone takes partial models (the window); the command line
    /// only counts, and building them would cost it time.
    no_partials: bool,
    cancel: AtomicBool,
    partial: Mutex<Partial>,
    /// What the decode waits on besides decoding, if anything: a debug
    /// file coming from a debuginfod server.
    waiting_on: Mutex<Option<String>>,
    /// How the flow decoder's memo fared, over every walk so far.
    memo: Mutex<MemoFigures>,
    /// Chunks whose walkers built their own stacks, by how it went.
    chunks: [AtomicU64; 3],
}

/// How the chunks of a decode on several cores built their stacks (see
/// `passes::stack::speculate`), for the benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkFigures {
    /// Chunks whose walker built their stacks, and the replay filed them.
    pub stitched: u64,
    /// Chunks whose walker could not, and walked again, recording.
    pub gave_up: u64,
    /// Chunks whose stacks did not fit the stack before them: walked again
    /// by the replay.
    pub refused: u64,
}

/// What became of one chunk's own stacks.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ChunkFate {
    Stitched,
    GaveUp,
    Refused,
}

#[derive(Default)]
struct Partial {
    model: Option<Arc<Model>>,
    at: Option<Instant>,
}

impl std::fmt::Debug for DecodeProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeProgress")
            .field("segments_done", &self.segments_done)
            .field("segments_total", &self.segments_total)
            .field("cancel", &self.cancel)
            .finish_non_exhaustive()
    }
}

impl DecodeProgress {
    pub fn new() -> Arc<DecodeProgress> {
        Arc::new(DecodeProgress::default())
    }

    /// Progress that only counts: no partial models are built.
    pub fn counting() -> Arc<DecodeProgress> {
        Arc::new(DecodeProgress {
            no_partials: true,
            ..DecodeProgress::default()
        })
    }

    /// Asks the decode to stop at its next block.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Adds one walk's memo figures.
    pub fn add_memo(&self, figures: &MemoFigures) {
        self.memo.lock().add(figures);
    }

    /// How the flow decoder's memo fared over every walk so far: its hit
    /// rate and memory, for the benchmarks.
    pub fn memo(&self) -> MemoFigures {
        *self.memo.lock()
    }

    pub(crate) fn chunk(&self, fate: ChunkFate) {
        self.chunks[fate as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How the chunks built their stacks, over every decode so far.
    pub fn chunks(&self) -> ChunkFigures {
        let [stitched, gave_up, refused] = &self.chunks;
        ChunkFigures {
            stitched: stitched.load(Ordering::Relaxed),
            gave_up: gave_up.load(Ordering::Relaxed),
            refused: refused.load(Ordering::Relaxed),
        }
    }

    /// Says what the decode waits on now (`None`: nothing).
    pub fn set_waiting_on(&self, what: Option<String>) {
        *self.waiting_on.lock() = what;
    }

    /// What the decode waits on besides decoding, for the window to show.
    pub fn waiting_on(&self) -> Option<String> {
        self.waiting_on.lock().clone()
    }

    /// Sets what the decode is to walk: `segments` PSB segments holding
    /// `bytes` of trace; the clock for [`DecodeProgress::rate`] starts.
    pub(crate) fn begin(&self, segments: u64, bytes: u64) {
        self.segments_total.store(segments, Ordering::Relaxed);
        self.bytes_total.store(bytes, Ordering::Relaxed);
        *self.began.lock() = Some(Instant::now());
    }

    /// How fast the decode goes and how long it has left, once it has
    /// walked some of the trace. A PSB comes every fixed number of bytes
    /// (the PSB period), so the share of segments done is the share of
    /// bytes done.
    pub fn rate(&self) -> Option<Rate> {
        let began = (*self.began.lock())?;
        let (done, total) = self.segments();
        let bytes = self.bytes_total.load(Ordering::Relaxed);
        let elapsed = began.elapsed().as_secs_f64();
        if done == 0 || total == 0 || elapsed <= 0.0 {
            return None;
        }
        let done_bytes = bytes as f64 * done.min(total) as f64 / total as f64;
        let per_s = done_bytes / elapsed;
        let left = (bytes as f64 - done_bytes).max(0.0);
        Some(Rate {
            bytes_per_s: per_s,
            left: (per_s > 0.0).then(|| Duration::from_secs_f64(left / per_s)),
        })
    }

    /// (segments done, segments in all).
    pub fn segments(&self) -> (u64, u64) {
        (
            self.segments_done.load(Ordering::Relaxed),
            self.segments_total.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn segment_done(&self) {
        self.segments_walked(1);
    }

    /// `n` more PSB segments decoded.
    pub(crate) fn segments_walked(&self, n: u64) {
        self.segments_done.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether anyone takes partial models: building one is wasted on the
    /// command line.
    pub(crate) fn wants_partials(&self) -> bool {
        !self.no_partials
    }

    /// Offers the model so far; `build` runs only if it is time to publish.
    /// Publishes `build()` unless one was published too recently; says
    /// whether it did.
    pub(crate) fn offer(&self, build: impl FnOnce() -> Model) -> bool {
        if self.no_partials {
            return false;
        }
        let mut p = self.partial.lock();
        if p.at.is_some_and(|t| t.elapsed() < PUBLISH_EVERY) {
            return false;
        }
        p.model = Some(Arc::new(build()));
        p.at = Some(Instant::now());
        true
    }

    /// The newest partial model, taken (each is handed out once).
    pub fn take_partial(&self) -> Option<Arc<Model>> {
        self.partial.lock().model.take()
    }
}

/// A decode's speed, from [`DecodeProgress::rate`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Trace bytes walked per second so far.
    pub bytes_per_s: f64,
    /// The time left at that speed.
    pub left: Option<Duration>,
}

impl std::fmt::Display for Rate {
    /// `12.3 MB/s, 4 s left`, as the window and the command line show it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} MB/s", self.bytes_per_s / 1e6)?;
        match self.left {
            Some(d) if d.as_secs() >= 1 => write!(f, ", {} s left", d.as_secs()),
            Some(_) => write!(f, ", under a second left"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_models_are_throttled_and_taken_once() {
        let p = DecodeProgress::new();
        p.offer(Model::default);
        assert!(p.take_partial().is_some());
        assert!(p.take_partial().is_none());
        // Too soon after the last one: not even built.
        p.offer(|| unreachable!("throttled"));
        assert!(p.take_partial().is_none());
        assert!(!p.is_cancelled());
        p.cancel();
        assert!(p.is_cancelled());
    }

    #[test]
    fn the_rate_follows_the_segments_done() {
        let p = DecodeProgress::new();
        assert_eq!(p.rate(), None);
        p.begin(4, 4_000_000);
        assert_eq!(p.rate(), None, "nothing walked yet");
        std::thread::sleep(Duration::from_millis(20));
        p.segment_done();
        let r = p.rate().unwrap();
        // A million bytes in at least 20 ms: at most 50 MB/s, and three
        // times as long again to go.
        assert!(r.bytes_per_s > 0.0 && r.bytes_per_s <= 50e6, "{r:?}");
        let left = r.left.unwrap().as_secs_f64();
        let spent = 1e6 / r.bytes_per_s;
        assert!((left - 3.0 * spent).abs() < 1e-6 * spent.max(1.0), "{r:?}");
        assert!(r.to_string().contains(" MB/s"), "{r}");
    }
}
