//! Line detail on demand: the fine pass on a background thread, behind a
//! bounded cache.
//!
//! The viewer says which segments it would like to draw ([`SegmentWorker::want`])
//! every frame, and draws whatever is ready ([`SegmentWorker::get`]). Workers,
//! one per core, decode the wanted segments in order, each taking the next
//! one no other has; a decode the user has zoomed or panned away from is
//! cancelled. Decoded segments stay in a
//! least-recently-used cache held under a byte budget, so exploring for
//! hours never grows the cache past it. While nothing is wanted, the
//! workers prepare the line lookups of the modules the model's code ran
//! in (addr2line's index of each one's DWARF: some 20 MB for a
//! distribution's libpython), which the module keeps, outside that
//! budget, as the first zoom into its code would have built them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::passes::fine::{FineError, LineSource, Segment};
use crate::progress::DecodeProgress;
use ptscope_model::compare_lines;
use ptscope_model::Call;
use ptscope_model::Model;
pub(crate) use ptscope_model::{CompareDone, DetailSource, SegmentKey, WorkerFigures};

/// Default cache budget.
pub const DEFAULT_BUDGET: usize = 256 << 20;

struct Entry {
    seg: Arc<Segment>,
    bytes: usize,
    used: u64,
}

#[derive(Default)]
struct State {
    wanted: Vec<SegmentKey>,
    cache: HashMap<SegmentKey, Entry>,
    failed: HashMap<SegmentKey, FineError>,
    in_flight: Vec<(SegmentKey, Arc<DecodeProgress>)>,
    /// The worker preparing a module's line lookups, if one is.
    preparing: Option<std::thread::ThreadId>,
    shutdown: bool,
    figures: WorkerFigures,
}

/// What a worker does next.
enum Job {
    Decode(SegmentKey, Arc<DecodeProgress>),
    /// Nothing is wanted: prepare the line lookups of one more module the
    /// model's code ran in, so that the first zoom there waits for nothing.
    PrepareLines,
}

struct Shared {
    model: Arc<Model>,
    source: Arc<LineSource>,
    budget: usize,
    state: Mutex<State>,
    work: Condvar,
    idle: Condvar,
    clock: AtomicU64,
    notify: Box<dyn Fn() + Send + Sync>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }
}

/// The background fine pass of one model.
pub struct SegmentWorker {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

/// The most workers one model gets: a window wants a handful of segments.
const MAX_WORKERS: usize = 4;

impl SegmentWorker {
    /// Workers re-decoding `model`'s segments from `source`, one per core
    /// (at most four), caching up to `budget` bytes; `notify`
    /// runs whenever a segment is ready (to repaint). `None` if no thread
    /// could be had for it.
    pub fn new(
        model: Arc<Model>,
        source: Arc<LineSource>,
        budget: usize,
        notify: impl Fn() + Send + Sync + 'static,
    ) -> Option<SegmentWorker> {
        let shared = Arc::new(Shared {
            model,
            source,
            budget,
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            idle: Condvar::new(),
            clock: AtomicU64::new(0),
            notify: Box::new(notify),
        });
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut workers = Vec::new();
        for _ in 0..cores.clamp(1, MAX_WORKERS) {
            let s = shared.clone();
            match std::thread::Builder::new()
                .name("ptscope-lines".into())
                .spawn(move || work(&s))
            {
                Ok(w) => workers.push(w),
                // Fewer workers than cores still decode every segment.
                Err(_) => break,
            }
        }
        if workers.is_empty() {
            return None;
        }
        Some(SegmentWorker { shared, workers })
    }

    pub fn source(&self) -> &Arc<LineSource> {
        &self.shared.source
    }
}

impl DetailSource for SegmentWorker {
    fn model(&self) -> &Arc<Model> {
        &self.shared.model
    }

    /// The segments wanted now, most wanted first. Replaces what was
    /// wanted before; a decode no longer wanted is cancelled.
    fn want(&self, keys: &[SegmentKey]) {
        let mut st = self.shared.lock();
        if st.wanted == keys {
            return;
        }
        st.wanted = keys.to_vec();
        for (k, p) in &st.in_flight {
            if !keys.contains(k) {
                p.cancel();
            }
        }
        drop(st);
        self.shared.work.notify_all();
    }

    /// A decoded segment, if ready.
    fn get(&self, key: SegmentKey) -> Option<Arc<Segment>> {
        let mut st = self.shared.lock();
        let used = self.shared.tick();
        let e = st.cache.get_mut(&key)?;
        e.used = used;
        Some(e.seg.clone())
    }

    /// Why a segment could not be decoded, if it could not.
    fn error(&self, key: SegmentKey) -> Option<FineError> {
        self.shared.lock().failed.get(&key).cloned()
    }

    /// Wanted segments not decoded yet.
    fn pending(&self) -> usize {
        let st = self.shared.lock();
        st.wanted
            .iter()
            .filter(|k| !st.cache.contains_key(k) && !st.failed.contains_key(k))
            .count()
    }

    fn figures(&self) -> WorkerFigures {
        self.shared.lock().figures
    }

    /// Blocks until every wanted segment is decoded or failed (tests and
    /// the CLI).
    fn wait(&self) {
        let mut st = self.shared.lock();
        while st
            .wanted
            .iter()
            .any(|k| !st.cache.contains_key(k) && !st.failed.contains_key(k))
        {
            self.shared.idle.wait(&mut st);
        }
    }

    fn disassemble(&self, pid: i32, ip: u64, bitness: u8) -> Option<String> {
        self.shared.source.disassemble(pid, ip, bitness)
    }

    /// On a thread of its own, so that a comparison (two calls' segments
    /// decoded afresh) never waits behind the segments the timeline wants,
    /// nor they behind it. The thread holds what it reads; a comparison
    /// still running when the worker goes finishes and is dropped.
    fn compare_lines(&self, a: Call, b: Call, done: CompareDone) {
        let model = self.shared.model.clone();
        let source = self.shared.source.clone();
        // Shared, so that `done` is still at hand if no thread can be had.
        let done = Arc::new(Mutex::new(Some(done)));
        let theirs = done.clone();
        let job = move || {
            let decode = |t: usize, i: usize| source.decode_segment(&model.threads[t], i, None);
            let result = compare_lines(&decode, &model, &a, &b);
            if let Some(done) = theirs.lock().take() {
                done(result);
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("ptscope-compare".into())
            .spawn(job)
        {
            if let Some(done) = done.lock().take() {
                done(Err(FineError::NoThread(e.to_string())));
            }
        }
    }
}

impl Drop for SegmentWorker {
    /// Stops the workers: a decode in flight is cancelled and waited for.
    /// A module's line lookups being prepared cannot be cancelled (the
    /// engine of a re-opened model may still be being built first, then
    /// one module's DWARF read: seconds for a large one), so the worker
    /// preparing them is left to finish on its own, holding what it shares
    /// with the others, and closing a model never waits for it.
    fn drop(&mut self) {
        let preparing = {
            let mut st = self.shared.lock();
            st.shutdown = true;
            for (_, p) in &st.in_flight {
                p.cancel();
            }
            // Final: no job is taken once `shutdown` is set.
            st.preparing
        };
        self.shared.work.notify_all();
        for w in self.workers.drain(..) {
            if Some(w.thread().id()) != preparing {
                let _ = w.join();
            }
        }
    }
}

/// A worker: decodes the first wanted segment not yet cached nor taken by
/// another worker, until the model is closed. While nothing is wanted, one
/// worker at a time prepares the line lookups of the modules the model's
/// code ran in, a module at a time, between requests: a request waits for
/// at most the module being prepared, and only if it has no other worker.
fn work(s: &Shared) {
    loop {
        let job = {
            let mut st = s.lock();
            loop {
                if st.shutdown {
                    return;
                }
                let next = st
                    .wanted
                    .iter()
                    .find(|k| {
                        !st.cache.contains_key(k)
                            && !st.failed.contains_key(k)
                            && !st.in_flight.iter().any(|(f, _)| f == *k)
                    })
                    .copied();
                match next {
                    Some(k) => {
                        let p = DecodeProgress::new();
                        st.in_flight.push((k, p.clone()));
                        break Job::Decode(k, p);
                    }
                    None if !st.figures.lines_prepared && st.preparing.is_none() => {
                        st.preparing = Some(std::thread::current().id());
                        break Job::PrepareLines;
                    }
                    None => {
                        s.idle.notify_all();
                        s.work.wait(&mut st);
                    }
                }
            }
        };
        let (key, progress) = match job {
            Job::Decode(key, progress) => (key, progress),
            Job::PrepareLines => {
                let more = s.source.prepare_next_lines();
                let mut st = s.lock();
                st.preparing = None;
                st.figures.lines_prepared = !more;
                continue;
            }
        };
        let t0 = Instant::now();
        let result = match s.model.threads.get(key.0 as usize) {
            Some(t) => s
                .source
                .decode_segment_timed(t, key.1 as usize, Some(&progress)),
            None => Err(FineError::NoCheckpoint {
                tid: -1,
                index: key.1 as usize,
            }),
        };
        let took = t0.elapsed().as_nanos() as u64;
        let mut st = s.lock();
        st.in_flight.retain(|(k, _)| *k != key);
        match result {
            Ok((seg, walked)) => {
                st.figures.decoded += 1;
                st.figures.decode_ns += took;
                st.figures.walk_ns += walked.as_nanos() as u64;
                let bytes = seg.memory_bytes();
                let used = s.tick();
                st.cache.insert(
                    key,
                    Entry {
                        seg: Arc::new(seg),
                        bytes,
                        used,
                    },
                );
                evict(&mut st, s.budget, key);
            }
            Err(FineError::Cancelled) => st.figures.cancelled += 1,
            Err(e) => {
                st.failed.insert(key, e);
            }
        }
        let bytes: usize = st.cache.values().map(|e| e.bytes).sum();
        st.figures.cached = st.cache.len();
        st.figures.cached_bytes = bytes;
        st.figures.peak_bytes = st.figures.peak_bytes.max(bytes);
        drop(st);
        s.idle.notify_all();
        (s.notify)();
    }
}

/// Drops the least recently used segments until the cache fits `budget`,
/// keeping the one just decoded.
fn evict(st: &mut State, budget: usize, keep: SegmentKey) {
    let mut total: usize = st.cache.values().map(|e| e.bytes).sum();
    while total > budget {
        let Some((&k, _)) = st
            .cache
            .iter()
            .filter(|(k, _)| **k != keep)
            .min_by_key(|(_, e)| e.used)
        else {
            break;
        };
        if let Some(e) = st.cache.remove(&k) {
            total -= e.bytes;
            st.figures.evicted += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's model and its fine pass.
    fn demo() -> (Arc<Model>, Arc<LineSource>) {
        let d = crate::testing::demo_decoded();
        (Arc::new(d.model), d.lines.unwrap())
    }

    #[test]
    fn wanted_segments_get_decoded_and_the_cache_stays_in_budget() {
        let (model, src) = demo();
        let t = &model.threads[0];
        let n = t.checkpoints.len() as u32;
        assert!(n >= 4);
        // Room for about two segments.
        let one = src.decode_segment(t, 0, None).unwrap().memory_bytes();
        let d = SegmentWorker::new(model.clone(), src, one * 5 / 2, || {}).unwrap();
        for i in 0..n {
            d.want(&[(0, i)]);
            d.wait();
            assert!(d.get((0, i)).is_some());
            let f = d.figures();
            assert!(f.cached_bytes <= one * 5 / 2 + one / 2, "{f:?}");
        }
        let f = d.figures();
        assert_eq!(f.decoded, n as u64);
        // Each decode's walk is timed, within the decode's time.
        assert!(f.walk_ns > 0 && f.walk_ns < f.decode_ns, "{f:?}");
        assert!(f.evicted >= n as u64 - 3, "{f:?}");
        assert!(f.cached <= 3);
        // The most recent stays; the first is long gone.
        assert!(d.get((0, n - 1)).is_some());
        assert!(d.get((0, 0)).is_none());
    }

    #[test]
    fn a_decode_no_longer_wanted_is_cancelled_and_bad_keys_fail() {
        let (model, src) = demo();
        let d = SegmentWorker::new(model, src, DEFAULT_BUDGET, || {}).unwrap();
        d.want(&[(0, 99_999)]);
        d.wait();
        assert!(matches!(
            d.error((0, 99_999)),
            Some(FineError::NoCheckpoint { .. })
        ));
        // Supersede quickly, many times: only what is wanted at the end
        // must be decoded.
        for i in 0..50 {
            d.want(&[(0, i % 3)]);
        }
        d.want(&[(0, 4)]);
        d.wait();
        assert!(d.get((0, 4)).is_some());
        assert_eq!(d.pending(), 0);
    }

    /// Left idle, the workers prepare the line lookups of every module the
    /// demo's code ran in (its program's DWARF), which the coarse pass
    /// never builds, so that the first zoom there waits for nothing.
    #[test]
    fn idle_workers_prepare_the_lines_of_the_code_that_ran() {
        let (model, src) = demo();
        // The demo is unpacked afresh for each decode: its binaries are
        // read anew, not shared with another test's.
        assert!(!src.lines_prepared(), "prepared by the coarse pass");
        let d = SegmentWorker::new(model, src.clone(), DEFAULT_BUDGET, || {}).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        while !d.figures().lines_prepared {
            assert!(Instant::now() < deadline, "lines never prepared");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(src.lines_prepared());
        assert!(!src.prepare_next_lines(), "a module still waits");
        // The demo's own program has DWARF: a module was there to prepare.
        let engine = src.engine().unwrap();
        assert!(!engine.ran_in().is_empty());
        assert!(engine.ran_in().iter().any(|m| m.has_debug_info()));
    }
}
