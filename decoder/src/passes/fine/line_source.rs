//! The [`LineSource`] and its engine: what a decoded snapshot keeps for
//! the fine pass (the trace queues, the process code and symbols, the
//! per-CPU slots), and [`LineSource::decode_segment`], which re-walks one
//! segment and hands the result to the walk's replay and the line
//! attribution. It is separate because it owns the shared state the other
//! parts borrow.
//!
//! A decode builds the engine as it walks. A model re-opened from the
//! model cache has its engine built on a thread of its own, since reading
//! every binary's symbols again took most of a re-open: the model is
//! shown at once, and the first request for lines waits for the engine.

use crate::pt::timing::ToNs;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use crate::names::resolve::ProcessSymbols;
use crate::names::symbols::ModuleSymbols;
use crate::passes::coarse::{walk_queue, NoSink, Observe, QueueWalk};
use crate::passes::event::FuncTable;
use crate::progress::DecodeProgress;
use crate::pt::block::DecoderConfig;
use crate::pt::flow::FlowDecoder;
use crate::pt::memory::Memory;
use ptscope_model::Call;
use ptscope_model::LineComparison;
use ptscope_model::{Model, ThreadModel, TimeUnit};

use super::attribution::build_lines;
use super::walk::Recorder;
use super::MAX_SEGMENT_INSNS;
use super::{Chain, FineError, Segment};

/// An AUX queue as the fine pass needs it.
struct Queue {
    idx: u32,
    tid: Option<i32>,
    data: ptscope_formats::SharedBytes,
    /// Its PSB offsets, ascending.
    psbs: Vec<u64>,
    /// Per-CPU queues: who runs when, as (perf ns, slot).
    schedule: Vec<(u64, usize)>,
}

/// Everything a per-CPU walk needs to divide a queue among threads.
#[derive(Default)]
pub(crate) struct CpuSlots {
    /// Thread id → slot.
    pub slot_of: HashMap<i32, usize>,
    /// Slot → index into the processes.
    pub thread_procs: Vec<usize>,
}

/// Resolvers and the function table a walk interns into; line frames by
/// address, looked up once.
#[derive(Clone)]
pub(super) struct State {
    funcs: FuncTable,
    pub(super) resolvers: Vec<ProcessSymbols>,
    pub(super) frames: FxHashMap<(usize, u64), Option<Chain>>,
    pub(super) strings: HashMap<Arc<str>, ()>,
    /// Every chain met, one `Arc` per content.
    pub(super) chains: HashMap<Chain, ()>,
}

/// What the fine pass re-decodes from: the trace, the code and the symbols
/// of a decoded snapshot, kept beside its [`Model`](ptscope_model::Model).
/// Built at once, or still being built on a thread of its own (a model
/// re-opened from the model cache): what needs it then waits for it.
pub struct LineSource {
    engine: OnceLock<Result<LineEngine, String>>,
    building: Mutex<Option<std::thread::JoinHandle<Result<LineEngine, String>>>>,
}

impl std::fmt::Debug for LineSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.engine.get() {
            Some(Ok(e)) => e.fmt(f),
            Some(Err(e)) => write!(f, "LineSource(unavailable: {e})"),
            None => f.write_str("LineSource(being built)"),
        }
    }
}

impl LineSource {
    /// The source of a decode, built from what its walk set up.
    pub(crate) fn new(
        cfg: DecoderConfig,
        clock: (ToNs, TimeUnit),
        queues: Vec<QueueParts>,
        procs: Vec<(i32, Memory, ProcessSymbols)>,
        cpu: CpuSlots,
        funcs: FuncTable,
    ) -> LineSource {
        LineSource {
            engine: OnceLock::from(Ok(LineEngine::new(cfg, clock, queues, procs, cpu, funcs))),
            building: Mutex::new(None),
        }
    }

    /// The same source, knowing the files its names came from.
    pub(crate) fn with_sources(mut self, sources: Vec<String>) -> LineSource {
        if let Some(Ok(e)) = self.engine.get_mut() {
            e.sources = sources;
        }
        self
    }

    /// A source that `build` makes on a thread of its own, started now;
    /// an error it returns is what every request for lines gets.
    pub(crate) fn later(
        build: impl FnOnce() -> Result<LineSource, String> + Send + 'static,
    ) -> LineSource {
        let thread = std::thread::Builder::new()
            .name("ptscope-line-source".into())
            .spawn(move || build().and_then(LineSource::into_engine));
        match thread {
            Ok(t) => LineSource {
                engine: OnceLock::new(),
                building: Mutex::new(Some(t)),
            },
            Err(e) => LineSource {
                engine: OnceLock::from(Err(format!("no thread could be started: {e}"))),
                building: Mutex::new(None),
            },
        }
    }

    fn into_engine(self) -> Result<LineEngine, String> {
        let _ = self.engine();
        self.engine
            .into_inner()
            .unwrap_or_else(|| Err("never built".into()))
    }

    /// The engine, waiting for it if it is still being built.
    pub(super) fn engine(&self) -> Result<&LineEngine, FineError> {
        let built = self.engine.get_or_init(|| {
            let thread = self.building.lock().take();
            match thread.map(std::thread::JoinHandle::join) {
                Some(Ok(built)) => built,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => Err("never built".into()),
            }
        });
        built
            .as_ref()
            .map_err(|e| FineError::Unavailable(e.clone()))
    }

    /// Waits until the source is built; whether it could be.
    pub fn wait(&self) -> Result<(), FineError> {
        self.engine().map(|_| ())
    }

    /// What this source was built from besides the snapshot, for the
    /// model cache (`FineRecipe`); `None` if it could not be built.
    pub fn recipe(&self) -> Option<FineRecipe> {
        self.engine().ok().map(LineEngine::recipe)
    }

    /// Re-decodes the segment of `thread` that starts at its checkpoint
    /// `index`. `cancel` stops it early.
    pub fn decode_segment(
        &self,
        thread: &ThreadModel,
        index: usize,
        cancel: Option<&DecodeProgress>,
    ) -> Result<Segment, FineError> {
        self.decode_segment_timed(thread, index, cancel)
            .map(|(seg, _)| seg)
    }

    /// [`LineSource::decode_segment`], and how long its walk took: the
    /// coarse pass's work over the same trace, which the rest (the
    /// instructions, their lines, the line spans) is measured against.
    pub(crate) fn decode_segment_timed(
        &self,
        thread: &ThreadModel,
        index: usize,
        cancel: Option<&DecodeProgress>,
    ) -> Result<(Segment, Duration), FineError> {
        self.engine()?.decode_segment(thread, index, cancel)
    }

    /// Re-decodes calls `a` and `b` of `model` (the model this source came
    /// with) and counts every line that ran under each, here and now.
    pub fn compare_lines(
        &self,
        model: &Model,
        a: &Call,
        b: &Call,
    ) -> Result<LineComparison, FineError> {
        let decode = |t: usize, i: usize| self.decode_segment(&model.threads[t], i, None);
        ptscope_model::compare_lines(&decode, model, a, b)
    }

    /// Prepares the line lookups of the next module the model's code ran
    /// in that waits for them (see [`ModuleSymbols::prepare_lines`]), the
    /// modules most of the model's functions are in first: what an idle
    /// worker does, so that the first zoom into any of them waits for
    /// nothing. False once none waits (or the source could not be built).
    ///
    /// [`ModuleSymbols::prepare_lines`]: crate::names::symbols::ModuleSymbols::prepare_lines
    pub(crate) fn prepare_next_lines(&self) -> bool {
        let Ok(engine) = self.engine() else {
            return false;
        };
        match engine.ran_in().iter().find(|m| !m.lines_prepared()) {
            Some(m) => {
                m.prepare_lines();
                true
            }
            None => false,
        }
    }

    /// Whether the line lookups of every module the model's code ran in
    /// wait for nothing ([`LineSource::prepare_next_lines`]).
    #[cfg(test)]
    pub(crate) fn lines_prepared(&self) -> bool {
        self.engine()
            .is_ok_and(|e| e.ran_in().iter().all(|m| m.lines_prepared()))
    }

    /// Intel-syntax disassembly of the instruction at `ip` in process
    /// `pid`'s code, decoded in `bitness`-bit mode (an [`Insn`](super::Insn)'s).
    pub fn disassemble(&self, pid: i32, ip: u64, bitness: u8) -> Option<String> {
        self.engine().ok()?.disassemble(pid, ip, bitness)
    }
}

/// The engine of a [`LineSource`].
pub(crate) struct LineEngine {
    cfg: DecoderConfig,
    /// TSC to perf time.
    to_ns: ToNs,
    /// What times count: instructions for a trace without timing.
    unit: TimeUnit,
    queues: Vec<Queue>,
    /// Processes by index: pid and code.
    pids: Vec<i32>,
    memories: Vec<Memory>,
    cpu: CpuSlots,
    /// The state of the decode: what its walk learned, kept in the model
    /// cache's recipe.
    state: Mutex<State>,
    /// States for segments decoded while `state` is busy with another
    /// (segments are decoded on every core), made from `fresh` when none
    /// is free and kept for the next. What a segment gives does not depend
    /// on the state it was decoded with: its frames are looked up by
    /// address, its depths from its checkpoint.
    spares: Mutex<Vec<State>>,
    fresh: State,
    /// The files the names came from, for the model cache.
    sources: Vec<String>,
    /// [`LineEngine::ran_in`], made once.
    ran_in: OnceLock<Vec<Arc<ModuleSymbols>>>,
}

/// A [`State`] lent to one segment's decode; a spare goes back to the
/// pool when the decode is done.
enum Lease<'a> {
    Own(parking_lot::MutexGuard<'a, State>),
    Spare {
        state: Option<Box<State>>,
        pool: &'a Mutex<Vec<State>>,
    },
}

impl std::ops::Deref for Lease<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        match self {
            Lease::Own(s) => s,
            Lease::Spare { state, .. } => state.as_ref().expect("held until dropped"),
        }
    }
}

impl std::ops::DerefMut for Lease<'_> {
    fn deref_mut(&mut self) -> &mut State {
        match self {
            Lease::Own(s) => s,
            Lease::Spare { state, .. } => state.as_mut().expect("held until dropped"),
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Lease::Spare { state, pool } = self {
            if let Some(s) = state.take() {
                pool.lock().push(*s);
            }
        }
    }
}

impl std::fmt::Debug for LineEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineEngine")
            .field("queues", &self.queues.len())
            .field("pids", &self.pids)
            .finish_non_exhaustive()
    }
}

/// What a [`LineSource`] is built from besides the snapshot itself, which
/// the model cache keeps so that a re-opened model zooms down to lines as
/// the decode did: the processes in order, with the functions their walk
/// learned; each per-CPU queue's schedule; and the per-CPU slots.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FineRecipe {
    pub(crate) pids: Vec<i32>,
    pub(crate) learned: Vec<Vec<(u64, crate::passes::event::FuncId)>>,
    pub(crate) schedules: Vec<(u32, Vec<(u64, u64)>)>,
    pub(crate) slot_of: Vec<(i32, u64)>,
    pub(crate) thread_procs: Vec<u64>,
    /// The files the names came from ([`crate::names::resolve::SymbolCache::sources`]):
    /// if they change, the cached names are stale.
    pub(crate) sources: Vec<String>,
}

impl FineRecipe {
    /// Whether the recipe, read back from a file, holds together: slots
    /// and schedules name processes and slots that exist, learned
    /// functions are in the table of `funcs` functions.
    pub(crate) fn check(&self, funcs: usize) -> Result<(), String> {
        let procs = self.pids.len() as u64;
        let slots = self.thread_procs.len() as u64;
        if self.learned.len() != self.pids.len() {
            return Err("the learned functions are not per process".into());
        }
        if self.thread_procs.iter().any(|&p| p >= procs)
            || self.slot_of.iter().any(|&(_, s)| s >= slots)
            || self.schedules.iter().any(|(_, s)| {
                s.iter()
                    .any(|&(_, slot)| slot >= slots && slot != usize::MAX as u64)
            })
        {
            return Err("a CPU slot names no process or slot".into());
        }
        if self
            .learned
            .iter()
            .flatten()
            .any(|&(_, f)| f as usize >= funcs)
        {
            return Err("a learned function is not in the table".into());
        }
        Ok(())
    }

    /// The CPU slots it keeps.
    pub(crate) fn cpu_slots(&self) -> CpuSlots {
        CpuSlots {
            slot_of: self.slot_of.iter().map(|&(t, s)| (t, s as usize)).collect(),
            thread_procs: self.thread_procs.iter().map(|&p| p as usize).collect(),
        }
    }

    /// The schedules it keeps, by queue.
    pub(crate) fn schedules(&self) -> HashMap<u32, Vec<(u64, usize)>> {
        self.schedules
            .iter()
            .map(|(q, s)| (*q, s.iter().map(|&(t, slot)| (t, slot as usize)).collect()))
            .collect()
    }
}

/// One AUX queue handed to [`LineSource::new`].
pub(crate) struct QueueParts {
    pub idx: u32,
    pub tid: Option<i32>,
    pub data: ptscope_formats::SharedBytes,
    pub psbs: Vec<u64>,
    pub schedule: Vec<(u64, usize)>,
}

impl LineEngine {
    pub(crate) fn new(
        cfg: DecoderConfig,
        (to_ns, unit): (ToNs, TimeUnit),
        queues: Vec<QueueParts>,
        procs: Vec<(i32, Memory, ProcessSymbols)>,
        cpu: CpuSlots,
        funcs: FuncTable,
    ) -> LineEngine {
        let mut pids = Vec::new();
        let mut memories = Vec::new();
        let mut resolvers = Vec::new();
        for (pid, mem, res) in procs {
            pids.push(pid);
            memories.push(mem);
            resolvers.push(res);
        }
        let fresh = State {
            funcs,
            resolvers,
            frames: FxHashMap::default(),
            strings: HashMap::new(),
            chains: HashMap::new(),
        };
        LineEngine {
            cfg,
            to_ns,
            unit,
            queues: queues
                .into_iter()
                .map(|q| Queue {
                    idx: q.idx,
                    tid: q.tid,
                    data: q.data,
                    psbs: q.psbs,
                    schedule: q.schedule,
                })
                .collect(),
            pids,
            memories,
            cpu,
            state: Mutex::new(fresh.clone()),
            spares: Mutex::new(Vec::new()),
            fresh,
            sources: Vec::new(),
            ran_in: OnceLock::new(),
        }
    }

    /// The modules the model's code ran in (those some of its functions
    /// are named from), most such functions first, each once.
    pub(super) fn ran_in(&self) -> &[Arc<ModuleSymbols>] {
        self.ran_in.get_or_init(|| {
            let mut named: HashMap<&str, usize> = HashMap::new();
            for (_, f) in self.fresh.funcs.iter() {
                *named.entry(f.module.as_str()).or_default() += 1;
            }
            let mut ran: Vec<(usize, Arc<ModuleSymbols>)> = Vec::new();
            for (path, m) in self.fresh.resolvers.iter().flat_map(|r| r.modules()) {
                let n = named.get(path).copied().unwrap_or(0);
                match ran.iter_mut().find(|(_, r)| Arc::ptr_eq(r, m)) {
                    Some((k, _)) => *k = (*k).max(n),
                    None if n > 0 => ran.push((n, m.clone())),
                    None => {}
                }
            }
            // Stable: modules as many functions are in keep the order met.
            ran.sort_by_key(|&(n, _)| std::cmp::Reverse(n));
            ran.into_iter().map(|(_, m)| m).collect()
        })
    }

    fn recipe(&self) -> FineRecipe {
        let state = self.state.lock();
        let mut slot_of: Vec<(i32, u64)> = self
            .cpu
            .slot_of
            .iter()
            .map(|(&t, &s)| (t, s as u64))
            .collect();
        slot_of.sort_unstable();
        FineRecipe {
            pids: self.pids.clone(),
            learned: state
                .resolvers
                .iter()
                .map(|r| r.learned().collect())
                .collect(),
            schedules: self
                .queues
                .iter()
                .filter(|q| !q.schedule.is_empty())
                .map(|q| {
                    (
                        q.idx,
                        q.schedule.iter().map(|&(t, s)| (t, s as u64)).collect(),
                    )
                })
                .collect(),
            slot_of,
            thread_procs: self.cpu.thread_procs.iter().map(|&p| p as u64).collect(),
            sources: self.sources.clone(),
        }
    }

    /// A state to decode a segment with: the decode's own if it is free,
    /// else a spare one.
    fn lease(&self) -> Lease<'_> {
        if let Some(own) = self.state.try_lock() {
            return Lease::Own(own);
        }
        let spare = self.spares.lock().pop();
        Lease::Spare {
            state: Some(Box::new(spare.unwrap_or_else(|| self.fresh.clone()))),
            pool: &self.spares,
        }
    }

    fn proc_of(&self, pid: i32) -> Option<usize> {
        self.pids.iter().position(|&p| p == pid)
    }

    fn decode_segment(
        &self,
        thread: &ThreadModel,
        index: usize,
        cancel: Option<&DecodeProgress>,
    ) -> Result<(Segment, Duration), FineError> {
        let (pid, tid) = (thread.spans.pid, thread.spans.tid);
        let cp = *thread
            .checkpoints
            .get(index)
            .ok_or(FineError::NoCheckpoint { tid, index })?;
        let queue = self
            .queues
            .iter()
            .find(|q| q.idx == cp.queue)
            .ok_or(FineError::NoQueue {
                tid,
                queue: cp.queue,
            })?;
        let proc = self.proc_of(pid).ok_or(FineError::NoProcess { tid, pid })?;
        let start = (cp.offset as usize).min(queue.data.len());
        let stop: Vec<u64> = queue
            .psbs
            .iter()
            .find(|&&o| o > cp.offset)
            .map(|&o| o - cp.offset)
            .into_iter()
            .collect();
        let frames_at = {
            let s = cp.stack_start as usize;
            let e = s + cp.stack_len as usize;
            thread.checkpoint_frames.get(s..e).unwrap_or(&[])
        };
        let to_ns = self.to_ns;
        let mut state = self.lease();
        let State {
            funcs, resolvers, ..
        } = &mut *state;
        let mut rec = Recorder::default();
        let dec = FlowDecoder::new(&queue.data[start..], &self.cfg);
        let per_thread = queue.tid.is_some();
        let (slot, images, procs, thread_procs): (usize, Vec<&Memory>, &mut [ProcessSymbols], _) =
            if per_thread {
                (
                    0,
                    vec![&self.memories[proc]],
                    &mut resolvers[proc..proc + 1],
                    vec![0],
                )
            } else {
                (
                    self.cpu.slot_of.get(&tid).copied().unwrap_or(usize::MAX),
                    self.memories.iter().collect(),
                    &mut resolvers[..],
                    self.cpu.thread_procs.clone(),
                )
            };
        rec.slot = slot;
        let walk = QueueWalk {
            queue: cp.queue,
            images: &images,
            thread_procs: &thread_procs,
            schedule: &queue.schedule,
            to_ns: &to_ns,
            unit: self.unit,
            psbs: &stop,
            stop_at_psb: true,
            progress: cancel,
        };
        let walking = Instant::now();
        let figures = walk_queue(dec, walk, procs, funcs, &mut NoSink, &mut rec).map_err(|e| {
            FineError::Image {
                tid,
                error: e.message(),
            }
        })?;
        let walked = walking.elapsed();
        if cancel.is_some_and(|c| c.is_cancelled()) {
            return Err(FineError::Cancelled);
        }
        let mut errors = figures
            .get(if per_thread { 0 } else { slot })
            .map(|f| f.errors.clone())
            .unwrap_or_default();
        let cut = rec.full();
        if cut {
            // Offsets are from the segment's PSB: this is about all of it.
            errors.push((
                0,
                format!(
                    "more than {MAX_SEGMENT_INSNS} instructions in this segment: only the first are shown"
                ),
            ));
        }
        // Where the coarse pass's clock put this checkpoint and the next:
        // the segment's times line up with its neighbours' (unless it was
        // cut short of the next). Checked, as a model from a damaged file
        // may hold a thread's checkpoints out of trace order.
        let next = thread.checkpoints.get(index + 1).filter(|n| {
            !cut && n.queue == cp.queue
                && n.offset
                    .checked_sub(cp.offset)
                    .is_some_and(|d| stop.first() == Some(&d))
        });
        let ends = (
            (0, cp.tsc),
            next.and_then(|n| Some((n.insn.checked_sub(cp.insn)?, n.tsc))),
        );
        let mut seg = rec.finish(
            &cp,
            ends,
            frames_at,
            funcs,
            &self.memories[proc],
            (&to_ns, self.unit),
            (pid, tid),
        );
        seg.checkpoint = index;
        seg.errors = errors;
        seg.cut = cut;
        self.attach_lines(&mut state, proc, &mut seg);
        build_lines(&mut seg);
        Ok((seg, walked))
    }

    fn disassemble(&self, pid: i32, ip: u64, bitness: u8) -> Option<String> {
        let mem = &self.memories[self.proc_of(pid)?];
        crate::pt::flow::disassemble(mem, ip, u32::from(bitness))
    }
}

#[cfg(test)]
mod tests {
    fn demo() -> crate::decoded::Decoded {
        crate::testing::demo_decoded()
    }

    #[test]
    fn segments_of_the_demo_hold_every_instruction_once_under_their_function_span() {
        let model = demo();
        let src = model.lines.clone().unwrap();
        for t in &model.threads {
            let mut total = 0u64;
            let mut checked = 0;
            for i in 0..t.checkpoints.len() {
                let seg = src.decode_segment(t, i, None).unwrap();
                assert!(seg.errors.is_empty(), "{:?}", seg.errors);
                // A fresh sync starts where the coarse pass's checkpoint is,
                // at the time the coarse pass gave it.
                assert_eq!(seg.insns.first().map(|x| x.ip), Some(t.checkpoints[i].ip));
                assert_eq!(seg.insns[0].start, t.checkpoints[i].time);
                if let Some(next) = t.checkpoints.get(i + 1) {
                    assert!(seg.insns.last().unwrap().end <= next.time);
                }
                total += seg.insns.len() as u64;
                // Each instruction runs in the span at its depth, named
                // after its outermost source frame.
                for insn in &seg.insns {
                    let Some(chain) = seg.chains.get(insn.chain as usize) else {
                        continue;
                    };
                    let lane = t.spans.lane(insn.depth as usize);
                    let k = lane.partition_point(|s| s.start <= insn.start);
                    assert!(k > 0, "no span at depth {} at {}", insn.depth, insn.start);
                    let span = &lane[k - 1];
                    assert!(t.spans.end(insn.depth as usize, k - 1) >= insn.start);
                    let name = &model.funcs.get(span.func()).name;
                    if name.as_str() != &*chain[0].function {
                        let near: Vec<_> = (insn.depth.saturating_sub(1)..insn.depth + 2)
                            .map(|d| {
                                let lane = t.spans.lane(d as usize);
                                let k = lane.partition_point(|s| s.start <= insn.start);
                                (
                                    d,
                                    lane[k.saturating_sub(2)..(k + 1).min(lane.len())]
                                        .iter()
                                        .map(|s| (model.funcs.get(s.func()).name.clone(), s.start))
                                        .collect::<Vec<_>>(),
                                )
                            })
                            .collect();
                        panic!(
                            "seg {i} insn {:#x} {:?} chain {} near {near:#?}",
                            insn.ip, insn, chain[0].function
                        );
                    }
                    checked += 1;
                }
            }
            assert!(checked > 50_000, "{checked}");
            // The trace starts at a PSB: the first segment starts with it.
            assert_eq!(t.checkpoints[0].insn, 0);
            let before = t.checkpoints.first().map_or(0, |c| c.insn);
            assert_eq!(total, t.walk.instructions - before, "tid {}", t.spans.tid);
        }
    }

    #[test]
    fn checkpoints_out_of_trace_order_still_decode() {
        // A damaged file's model can hold them so (round 11's perf_data
        // crash): each segment still decodes, just not lined up with the
        // next one.
        let model = demo();
        let src = model.lines.clone().unwrap();
        let mut t = model.threads[0].clone();
        t.checkpoints.reverse();
        for i in 0..t.checkpoints.len() {
            let seg = src.decode_segment(&t, i, None).unwrap();
            assert_eq!(seg.insns.first().map(|x| x.ip), Some(t.checkpoints[i].ip));
        }
    }

    #[test]
    fn a_source_built_later_decodes_as_one_built_at_once() {
        use super::LineSource;
        let model = demo();
        let at_once = model.lines.clone().unwrap();
        let t = &model.threads[0];
        let want = at_once.decode_segment(t, 0, None).unwrap();
        // The same engine, handed over by a thread of its own.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let fresh = demo().lines.unwrap();
        let later = LineSource::later(move || {
            // Not ready until the test says so: requests wait for it.
            rx.recv().unwrap();
            Ok(std::sync::Arc::into_inner(fresh).expect("the only handle"))
        });
        assert!(format!("{later:?}").contains("being built"));
        tx.send(()).unwrap();
        let got = later.decode_segment(t, 0, None).unwrap();
        assert_eq!(got.insns, want.insns);
        assert_eq!(later.recipe(), at_once.recipe());
        assert!(later
            .disassemble(t.spans.pid, want.insns[0].ip, 64)
            .is_some());
    }

    #[test]
    fn a_source_that_could_not_be_built_says_why_to_every_request() {
        use super::LineSource;
        use ptscope_model::FineError;
        let model = demo();
        let later = LineSource::later(|| Err("/bin/prog: gone".into()));
        let t = &model.threads[0];
        for _ in 0..2 {
            match later.decode_segment(t, 0, None) {
                Err(FineError::Unavailable(why)) => assert_eq!(why, "/bin/prog: gone"),
                other => panic!("{:?}", other.map(|s| s.insns.len())),
            }
        }
        assert!(later.wait().is_err());
        assert_eq!(later.recipe(), None);
        assert_eq!(later.disassemble(t.spans.pid, 0x1000, 64), None);
    }
}
