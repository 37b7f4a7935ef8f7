//! Live progress of a decode, shared with whoever shows it.
//!
//! Decoding runs on a background thread while the GUI draws; the two share
//! only this: counters the decoder bumps and the GUI polls each frame, a
//! cancel flag, and the model so far, so the first threads can be drawn
//! before the last ones are decoded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::model::Model;

/// How often a partial model is published at most: cloning it is not free.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

#[derive(Default)]
pub struct DecodeProgress {
    /// PSB segments decoded so far, and in all.
    pub segments_done: AtomicU64,
    pub segments_total: AtomicU64,
    cancel: AtomicBool,
    partial: Mutex<Partial>,
    /// What the decode waits on besides decoding, if anything: a debug
    /// file coming from a debuginfod server.
    waiting_on: Mutex<Option<String>>,
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

    /// Asks the decode to stop at its next block.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Says what the decode waits on now (`None`: nothing).
    pub fn set_waiting_on(&self, what: Option<String>) {
        *self.waiting_on.lock().unwrap_or_else(|e| e.into_inner()) = what;
    }

    /// What the decode waits on besides decoding, for the window to show.
    pub fn waiting_on(&self) -> Option<String> {
        self.waiting_on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// (segments done, segments in all).
    pub fn segments(&self) -> (u64, u64) {
        (
            self.segments_done.load(Ordering::Relaxed),
            self.segments_total.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn segment_done(&self) {
        self.segments_done.fetch_add(1, Ordering::Relaxed);
    }

    /// Offers the model so far; `build` runs only if it is time to publish.
    /// Publishes `build()` unless one was published too recently; says
    /// whether it did.
    pub(crate) fn offer(&self, build: impl FnOnce() -> Model) -> bool {
        let mut p = self.partial.lock().unwrap_or_else(|e| e.into_inner());
        if p.at.is_some_and(|t| t.elapsed() < PUBLISH_EVERY) {
            return false;
        }
        p.model = Some(Arc::new(build()));
        p.at = Some(Instant::now());
        true
    }

    /// The newest partial model, taken (each is handed out once).
    pub fn take_partial(&self) -> Option<Arc<Model>> {
        self.partial
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .model
            .take()
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
}
