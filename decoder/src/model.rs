//! From snapshot to model: every thread's trace through the coarse pass,
//! with one section cache and one symbol table per binary shared by all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ptscope_formats::snapshot::{Snapshot, Trace};

use crate::chunks::{decode_queue_chunked, Parallel};
use crate::coarse::{
    decode_queue, decode_thread, Checkpoint, QueueThread, QueueWalk, Resolve, Resolved,
    ThreadBuilders, ThreadDecode, TimedItems, WalkFigures,
};
use crate::event::{FuncId, FuncTable, SpanKind, UNKNOWN};
use crate::ffi::{BlockDecoder, DecoderConfig, Image, PtError, SectionCache};
use crate::fine::{CpuSlots, LineSource, QueueParts};
use crate::flow::FlowDecoder;
use crate::image::{sections, Section};
use crate::insn::decoder_config;
use crate::memory::{FileCache, Memory};
use crate::packet::{find_psb, psb_offsets};
use crate::progress::DecodeProgress;
use crate::stack::StackStats;
use crate::store::ThreadSpans;
use crate::symbols::ModuleSymbols;

/// Why a snapshot could not be decoded at all. Problems inside a trace
/// (decode errors, missing binaries) are not errors: they become labelled
/// spans.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The file could not be read; the error names it.
    #[error(transparent)]
    File(ptscope_formats::FileError),
    #[error("{path}: libipt could not set up a decoder: {error}")]
    Libipt { path: PathBuf, error: PtError },
    #[error("{path}: {problem}")]
    Input { path: PathBuf, problem: String },
    #[error("{path}: decoding was cancelled")]
    Cancelled { path: PathBuf },
}

/// One thread's decoded trace.
#[derive(Clone)]
pub struct ThreadModel {
    pub spans: ThreadSpans,
    pub stack: StackStats,
    pub walk: WalkFigures,
    pub checkpoints: Vec<Checkpoint>,
    pub checkpoint_frames: Vec<(FuncId, u64)>,
    /// Index of the AUX stream it came from, if any.
    pub stream: Option<u32>,
}

impl ThreadModel {
    fn new(d: ThreadDecode, stream: Option<u32>) -> ThreadModel {
        ThreadModel {
            spans: d.spans,
            stack: d.stack,
            walk: d.walk,
            checkpoints: d.checkpoints,
            checkpoint_frames: d.stacks,
            stream,
        }
    }
}

/// The decoded snapshot: what the viewer draws.
pub struct Model {
    pub funcs: FuncTable,
    pub threads: Vec<ThreadModel>,
    /// Mapped binaries that were not in the snapshot or on this machine.
    pub missing_binaries: Vec<String>,
    /// What the user should know about the input that no span shows: trace
    /// that could not be decoded at all, data the kernel lost.
    pub warnings: Vec<String>,
    /// What the fine pass re-decodes from; `None` for inputs without an
    /// instruction trace (perf-script text) and for partial models.
    pub lines: Option<Arc<LineSource>>,
}

impl Model {
    /// First start and last end over all threads.
    pub fn time_range(&self) -> Option<(u64, u64)> {
        self.threads
            .iter()
            .filter_map(|t| t.spans.time_range())
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
    }

    pub fn span_count(&self) -> usize {
        self.threads.iter().map(|t| t.spans.span_count()).sum()
    }

    /// The model as text, function ids replaced by names: every span with
    /// its times and flags, every checkpoint and its stack, the counters.
    /// Two decodes agree exactly when these lines do (tests and fuzzing
    /// compare them).
    pub fn canonical(&self) -> Vec<String> {
        let name = |f: FuncId| {
            let f = self.funcs.get(f);
            format!("{}@{:x}/{:?}", f.name, f.entry, f.kind)
        };
        let mut out = Vec::new();
        for t in &self.threads {
            let s = &t.spans;
            out.push(format!("thread {} {} {:?}", s.pid, s.tid, t.walk));
            for (depth, lane) in s.lanes() {
                for (i, sp) in lane.iter().enumerate() {
                    out.push(format!(
                        "{depth} {} {} {} {:x}",
                        name(sp.func()),
                        sp.start,
                        s.end(depth, i),
                        sp.flags()
                    ));
                }
            }
            for c in &t.checkpoints {
                let frames = &t.checkpoint_frames
                    [c.stack_start as usize..(c.stack_start + c.stack_len) as usize];
                let frames: Vec<String> = frames
                    .iter()
                    .map(|&(f, t)| format!("{}:{t}", name(f)))
                    .collect();
                out.push(format!(
                    "cp {} {} {} {:x} {} {} {} {} {frames:?}",
                    c.offset, c.time, c.tsc, c.ip, c.insn, c.queue, c.begins, c.depth
                ));
            }
        }
        out
    }
}

/// Which threads to decode, and how.
#[derive(Clone, Debug, Default)]
pub struct DecodeOptions {
    pub threads: Option<Vec<i32>>,
    /// Counters to report to, a cancel flag, and partial models.
    pub progress: Option<Arc<DecodeProgress>>,
    pub engine: Engine,
    /// How the flow engine's coarse pass spreads over cores.
    pub parallel: Parallel,
}

/// What walks the trace in the coarse pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// Our own flow decoder ([`crate::flow`]): the fast one.
    #[default]
    Flow,
    /// libipt's block decoder: the reference.
    Libipt,
}

/// Symbols of every binary, loaded once.
#[derive(Default)]
pub struct SymbolCache {
    modules: HashMap<PathBuf, Option<Arc<ModuleSymbols>>>,
}

impl SymbolCache {
    pub fn get(&mut self, file: &Path) -> Option<Arc<ModuleSymbols>> {
        self.modules
            .entry(file.to_path_buf())
            .or_insert_with(|| shared_symbols(file))
            .clone()
    }
}

/// A file's identity: the same inode, unchanged.
type FileId = (u64, u64, u64, i64, i64);

/// Symbols any live model in the process already loaded from the same
/// unchanged file: a re-decode (another engine, other threads) or a second
/// model of the same snapshot shares them instead of parsing libc again.
/// Weak, so they go with the last model that uses them.
fn shared_symbols(path: &Path) -> Option<Arc<ModuleSymbols>> {
    use std::os::unix::fs::MetadataExt;
    use std::sync::{Mutex, Weak};
    static SHARED: Mutex<Option<HashMap<FileId, Weak<ModuleSymbols>>>> = Mutex::new(None);
    // Identified and read through one open file: a file replaced in
    // between cannot be cached under the other's identity.
    let file = std::fs::File::open(path).ok()?;
    let m = file.metadata().ok()?;
    let id = (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let map = shared.get_or_insert_with(HashMap::new);
    if let Some(m) = map.get(&id).and_then(Weak::upgrade) {
        return Some(m);
    }
    map.retain(|_, w| w.strong_count() > 0);
    drop(shared);
    let m = Arc::new(ModuleSymbols::load_file(path, &file).ok()?);
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared
        .get_or_insert_with(HashMap::new)
        .insert(id, Arc::downgrade(&m));
    Some(m)
}

#[derive(Clone)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    path: String,
    module: Option<Arc<ModuleSymbols>>,
    /// The binary is missing: `[no binary: path]`.
    missing: bool,
}

impl Mapping {
    /// The file offset of `addr`, which lies in this mapping. Saturating:
    /// the page offset comes from a record a damaged file can set to
    /// anything, and must give a wrong answer there, not a panic.
    fn file_offset(&self, addr: u64) -> u64 {
        self.pgoff.saturating_add(addr - self.start)
    }

    /// The module's extent `(lo, hi)` around `svma` (which is `addr`) as
    /// addresses in this mapping, holding `addr`.
    fn extent(&self, addr: u64, svma: u64, (lo, hi): (u64, u64)) -> (u64, u64) {
        let lo = addr.saturating_sub(svma.saturating_sub(lo)).max(self.start);
        let hi = addr.saturating_add(hi.saturating_sub(svma)).min(self.end);
        (lo.min(addr), hi.max(addr + 1))
    }
}

/// A process's mappings with their symbols: the coarse pass's resolver.
#[derive(Clone)]
pub struct ProcessSymbols {
    maps: Vec<Mapping>,
    /// Function ids by (mapping, entry svma), so lookups intern once.
    ids: HashMap<(usize, u64), FuncId>,
    /// Call targets in code no symbol covers: each starts a function that
    /// runs to the next one, named `[unknown] module+0xoffset`.
    learned: std::collections::BTreeMap<u64, FuncId>,
}

impl ProcessSymbols {
    pub fn new(
        sections: &[Section],
        missing: &[(u64, u64, String)],
        symbols: &mut SymbolCache,
    ) -> ProcessSymbols {
        let mut maps: Vec<Mapping> = sections
            .iter()
            .map(|s| Mapping {
                start: s.vaddr,
                end: s.vaddr.saturating_add(s.size),
                pgoff: s.offset,
                path: s.mapped_path.clone(),
                module: symbols.get(&s.file),
                missing: false,
            })
            .chain(missing.iter().map(|(start, len, path)| Mapping {
                start: *start,
                end: start.saturating_add(*len),
                pgoff: 0,
                path: path.clone(),
                module: None,
                missing: true,
            }))
            .collect();
        maps.sort_by_key(|m| m.start);
        // Where a later mapping overlaps one (a damaged or reused range),
        // addresses from its start on are the later one's: the earlier
        // ends there, so that no range handed out (and cached by the walk)
        // crosses into it.
        for i in 1..maps.len() {
            let next = maps[i].start;
            let m = &mut maps[i - 1];
            m.end = m.end.min(next).max(m.start);
        }
        ProcessSymbols {
            maps,
            ids: HashMap::new(),
            learned: std::collections::BTreeMap::new(),
        }
    }

    fn mapping(&self, addr: u64) -> Option<usize> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        (i > 0 && addr < self.maps[i - 1].end).then(|| i - 1)
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Resolve for ProcessSymbols {
    fn resolve(&mut self, addr: u64, funcs: &mut FuncTable) -> Resolved {
        let Some(mi) = self.mapping(addr) else {
            // Unmapped: one unknown function up to the next mapping.
            let i = self.maps.partition_point(|m| m.start <= addr);
            let lo = if i > 0 { self.maps[i - 1].end } else { 0 };
            let hi = self.maps.get(i).map_or(u64::MAX, |m| m.start);
            return Resolved {
                func: UNKNOWN,
                lo,
                hi,
                entry: 0,
                provisional: false,
            };
        };
        let m = &self.maps[mi];
        if m.missing {
            return Resolved {
                func: funcs.no_binary(&m.path),
                lo: m.start,
                hi: m.end,
                entry: 0,
                provisional: false,
            };
        }
        let file_off = m.file_offset(addr);
        if let Some(r) = self.symbol(mi, addr, funcs) {
            return r;
        }
        let m = &self.maps[mi];
        // The unnamed code around `addr`, between the known functions.
        let (gap_lo, gap_hi) = match (&m.module, self.svma(mi, addr)) {
            (Some(md), Some(svma)) => m.extent(addr, svma, md.extent(svma)),
            // The module knows its functions, but not this address (no
            // section holds it): how far its unnamed code runs is unknown,
            // and the whole mapping would take in the known functions too.
            (Some(_), None) => (addr, addr + 1),
            (None, _) => (m.start, m.end),
        };
        // A function learned from a call into unnamed code.
        if let Some((&start, &func)) = self.learned.range(gap_lo..=addr).next_back() {
            let hi = self
                .learned
                .range(addr + 1..gap_hi)
                .next()
                .map_or(gap_hi, |(&s, _)| s);
            return Resolved {
                func,
                lo: start,
                hi,
                entry: start,
                provisional: true,
            };
        }
        // Code no symbol covers: one `[unknown]` per module, named by the
        // module offset where we first met it.
        let id = *self.ids.entry((mi, u64::MAX)).or_insert_with(|| {
            funcs.intern(
                &format!("[unknown] {}+{:#x}", basename(&m.path), file_off),
                &m.path,
                0,
                SpanKind::Call,
            )
        });
        Resolved {
            func: id,
            lo: addr,
            hi: addr + 1,
            entry: 0,
            provisional: true,
        }
    }

    fn learn_entry(&mut self, addr: u64, funcs: &mut FuncTable) -> bool {
        let Some(mi) = self.mapping(addr) else {
            return false;
        };
        if self.maps[mi].missing
            || self.learned.contains_key(&addr)
            || self.symbol(mi, addr, funcs).is_some()
        {
            return false;
        }
        let m = &self.maps[mi];
        let off = m.file_offset(addr);
        let id = funcs.intern(
            &format!("[unknown] {}+{:#x}", basename(&m.path), off),
            &m.path,
            addr,
            SpanKind::Call,
        );
        self.learned.insert(addr, id);
        true
    }

    fn error_func(&mut self, ip: Option<u64>, error: PtError, funcs: &mut FuncTable) -> FuncId {
        if let Some(mi) = ip.and_then(|ip| self.mapping(ip)) {
            if self.maps[mi].missing {
                return funcs.no_binary(&self.maps[mi].path);
            }
        }
        funcs.decode_error(&error.message())
    }
}

impl ProcessSymbols {
    /// The module mapped at `addr` and the address there as the module
    /// sees it (its svma), for line lookups.
    pub fn module_at(&self, addr: u64) -> Option<(&Arc<ModuleSymbols>, u64)> {
        let m = &self.maps[self.mapping(addr)?];
        let md = m.module.as_ref()?;
        let svma = md.file_offset_to_svma(m.file_offset(addr))?;
        Some((md, svma))
    }

    /// `addr` of mapping `mi` as its module sees it.
    fn svma(&self, mi: usize, addr: u64) -> Option<u64> {
        let m = &self.maps[mi];
        m.module.as_ref()?.file_offset_to_svma(m.file_offset(addr))
    }

    /// The symbol (or unwind-table function) at `addr` of mapping `mi`.
    fn symbol(&mut self, mi: usize, addr: u64, funcs: &mut FuncTable) -> Option<Resolved> {
        let m = &self.maps[mi];
        let file_off = m.file_offset(addr);
        let module = m.module.as_ref();
        let svma = module.and_then(|md| md.file_offset_to_svma(file_off));
        if let (Some(md), Some(svma)) = (module, svma) {
            if let Some(f) = md.function(svma) {
                let entry = addr.saturating_sub(svma.saturating_sub(f.entry));
                let (lo, hi) = m.extent(addr, svma, md.extent(svma));
                let id = *self.ids.entry((mi, f.entry)).or_insert_with(|| {
                    // Unwind-table functions are named after the module
                    // as mapped, not the cached file's name.
                    if f.source == crate::symbols::SymbolSource::Unwind {
                        let off = m.pgoff.saturating_add(entry.saturating_sub(m.start));
                        let name = format!("[unknown] {}+{off:#x}", basename(&m.path));
                        funcs.intern(&name, &m.path, entry, SpanKind::Call)
                    } else {
                        let id = funcs.intern(f.name, &m.path, entry, SpanKind::Call);
                        // Once per function, so the tooltip can say where
                        // it is without a lookup per frame.
                        if let Some(loc) = md.location(f.entry) {
                            let line = loc.line.map(|l| format!(":{l}")).unwrap_or_default();
                            funcs.set_source(id, format!("{}{line}", loc.file));
                        }
                        id
                    }
                });
                return Some(Resolved {
                    func: id,
                    lo,
                    hi,
                    entry,
                    provisional: false,
                });
            }
        }
        None
    }
}

/// Decodes every thread of `snap` (or those `opts` selects).
pub fn decode_snapshot(snap: &Snapshot, opts: &DecodeOptions) -> Result<Model, DecodeError> {
    let trace = snap.trace().map_err(DecodeError::File)?;
    decode_trace(snap, &trace, opts)
}

/// A process's code, as the engine reads it.
enum ProcImage {
    /// Section ids in libipt's section cache.
    Libipt(Vec<i32>),
    Flow(Memory),
}

/// A process's image and resolver.
type Proc = (ProcImage, ProcessSymbols);

/// Where a process's code comes from: libipt's section cache or our files.
struct Loaders {
    engine: Engine,
    cache: SectionCache,
    files: FileCache,
}

/// Builds the image and resolver of process `pid`, once.
fn add_proc<'p>(
    procs: &'p mut HashMap<i32, Proc>,
    pid: i32,
    (snap, trace): (&Snapshot, &Trace),
    loaders: &mut Loaders,
    symbols: &mut SymbolCache,
    missing_binaries: &mut Vec<String>,
) -> Result<&'p mut Proc, DecodeError> {
    if let std::collections::hash_map::Entry::Vacant(e) = procs.entry(pid) {
        let (secs, missing) = sections(snap, trace, Some(pid));
        let image = match loaders.engine {
            Engine::Libipt => {
                let mut isids = Vec::new();
                for sec in &secs {
                    isids.push(
                        loaders
                            .cache
                            .add_file(&sec.file, sec.offset, sec.size, sec.vaddr)
                            .map_err(|error| DecodeError::Libipt {
                                path: sec.file.clone(),
                                error,
                            })?,
                    );
                }
                ProcImage::Libipt(isids)
            }
            Engine::Flow => {
                ProcImage::Flow(Memory::new(&secs, &mut loaders.files).map_err(|e| {
                    DecodeError::Input {
                        path: snap.path.clone(),
                        problem: format!("cannot read a bundled binary: {e}"),
                    }
                })?)
            }
        };
        let missing_maps: Vec<(u64, u64, String)> = trace
            .mmaps
            .iter()
            .filter(|m| m.pid == pid && missing.contains(&m.path))
            .map(|m| (m.start, m.len, m.path.clone()))
            .collect();
        for m in missing {
            if !missing_binaries.contains(&m) {
                missing_binaries.push(m);
            }
        }
        let resolver = ProcessSymbols::new(&secs, &missing_maps, symbols);
        e.insert((image, resolver));
    }
    Ok(procs.get_mut(&pid).expect("inserted above"))
}

fn new_image<'c>(cache: &'c SectionCache, isids: &[i32]) -> Result<Image<'c>, PtError> {
    let mut image = Image::new(cache)?;
    for &isid in isids {
        image.add(isid)?;
    }
    Ok(image)
}

/// What no span of the model will show: a queue with trace but no PSB
/// (nothing to synchronize on, so none of it decodes), and data the
/// kernel reported lost.
fn input_warnings(trace: &Trace, wanted: &dyn Fn(i32) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for s in &trace.streams {
        if s.data.is_empty() || s.tid.is_some_and(|t| !wanted(t)) || find_psb(&s.data).is_some() {
            continue;
        }
        let whose = match (s.tid, s.cpu) {
            (Some(tid), _) => format!("thread {tid}"),
            (None, Some(cpu)) => format!("CPU {cpu}"),
            (None, None) => format!("queue {}", s.idx),
        };
        out.push(format!(
            "the {} bytes of trace of {whose} hold no PSB packet to synchronize on: none of it can be decoded",
            s.data.len()
        ));
    }
    if trace.truncated_aux > 0 {
        out.push(format!(
            "{} trace buffer(s) were truncated by the kernel: trace was lost there",
            trace.truncated_aux
        ));
    }
    if trace.lost_records > 0 {
        out.push(format!(
            "the kernel lost {} sideband record(s): mappings or thread names may be missing",
            trace.lost_records
        ));
    }
    out
}

/// Threads whose call stack outgrew what the store keeps: their timeline
/// starts over at the top there, which no span says.
fn stack_warnings(threads: &[ThreadModel]) -> Vec<String> {
    threads
        .iter()
        .filter(|t| t.stack.depth_resets > 0)
        .map(|t| {
            format!(
                "thread {}: its calls nested more than {} levels deep {} time(s), counting callers the trace began inside (runaway recursion, or a damaged trace); its timeline starts over at the top there",
                t.spans.tid,
                crate::stack::MAX_DEPTH,
                t.stack.depth_resets
            )
        })
        .collect()
}

pub fn decode_trace(
    snap: &Snapshot,
    trace: &Trace,
    opts: &DecodeOptions,
) -> Result<Model, DecodeError> {
    let libipt = |error| DecodeError::Libipt {
        path: snap.path.clone(),
        error,
    };
    let cfg = decoder_config(trace);
    let mut loaders = Loaders {
        engine: opts.engine,
        cache: SectionCache::new().map_err(libipt)?,
        files: FileCache::default(),
    };
    let mut symbols = SymbolCache::default();
    let mut funcs = FuncTable::default();
    let mut missing_binaries = Vec::new();
    let mut procs: HashMap<i32, Proc> = HashMap::new();
    let pid_of = |tid: i32| trace.thread(tid).map_or(tid, |t| t.pid);
    let wanted = |tid: i32| opts.threads.as_ref().is_none_or(|t| t.contains(&tid));
    let comm_of = |tid: i32| {
        trace
            .thread(tid)
            .map(|t| t.comm.clone())
            .unwrap_or_default()
    };
    let params = trace.params.clone();
    let to_ns = move |tsc: u64| params.tsc_to_ns(tsc);
    let mut threads = Vec::new();
    let progress = opts.progress.as_deref();
    let psbs_of =
        |data: &[u8]| -> Vec<u64> { psb_offsets(data).into_iter().map(|o| o as u64).collect() };
    let queue_psbs: Vec<Vec<u64>> = trace.streams.iter().map(|s| psbs_of(&s.data)).collect();
    if let Some(p) = progress {
        let total: usize = trace
            .streams
            .iter()
            .zip(&queue_psbs)
            .filter(|(s, _)| s.tid.is_none_or(wanted))
            .map(|(_, p)| p.len())
            .sum();
        p.segments_total
            .store(total as u64, std::sync::atomic::Ordering::Relaxed);
    }
    let cancelled = || {
        progress
            .is_some_and(|p| p.is_cancelled())
            .then(|| DecodeError::Cancelled {
                path: snap.path.clone(),
            })
    };

    // Per-thread queues.
    for (s, psbs) in trace.streams.iter().zip(&queue_psbs) {
        let Some(tid) = s.tid else { continue };
        if !wanted(tid) {
            continue;
        }
        let pid = pid_of(tid);
        let (image, resolver) = add_proc(
            &mut procs,
            pid,
            (snap, trace),
            &mut loaders,
            &mut symbols,
            &mut missing_binaries,
        )?;
        let thread = (pid, tid, comm_of(tid));
        let d = match image {
            ProcImage::Libipt(isids) => {
                let image = new_image(&loaders.cache, isids).map_err(libipt)?;
                let dec = BlockDecoder::new(&s.data, &cfg).map_err(libipt)?;
                decode_thread(
                    dec, s.idx, &image, resolver, &mut funcs, &to_ns, psbs, thread, progress,
                )
            }
            ProcImage::Flow(mem) => {
                let queue_threads = [QueueThread {
                    pid: thread.0,
                    tid: thread.1,
                    comm: thread.2,
                    proc: 0,
                }];
                let mut sink = ThreadBuilders::new(&queue_threads);
                let walk = QueueWalk {
                    queue: s.idx,
                    images: &[&*mem],
                    thread_procs: &[0],
                    schedule: &[],
                    to_ns: &to_ns,
                    psbs,
                    stop_at_psb: false,
                    progress,
                };
                // First spans as soon as the first chunk is in; then a new
                // partial model each time the spans double (a copy each).
                let mut offered = 0;
                let on_chunk = |b: &ThreadBuilders, funcs: &FuncTable| {
                    let Some(p) = progress else { return };
                    let n = b.span_count();
                    if n == 0 || n < offered * 2 {
                        return;
                    }
                    let published = p.offer(|| {
                        let mut partial = threads.clone();
                        partial.extend(
                            b.snapshot()
                                .into_iter()
                                .map(|d| ThreadModel::new(d, Some(s.idx))),
                        );
                        Model {
                            funcs: funcs.clone(),
                            threads: partial,
                            missing_binaries: missing_binaries.clone(),
                            warnings: Vec::new(),
                            lines: None,
                        }
                    });
                    if published {
                        offered = n;
                    }
                };
                decode_queue_chunked(
                    &s.data,
                    &cfg,
                    walk,
                    std::slice::from_mut(resolver),
                    &mut funcs,
                    &mut sink,
                    &opts.parallel,
                    on_chunk,
                )
                .map(|figures| {
                    sink.add_figures(figures);
                    sink.finish().pop().expect("one thread in, one out")
                })
            }
        }
        .map_err(libipt)?;
        if let Some(e) = cancelled() {
            return Err(e);
        }
        threads.push(ThreadModel::new(d, Some(s.idx)));
        if let Some(p) = progress {
            p.offer(|| Model {
                funcs: funcs.clone(),
                threads: threads.clone(),
                missing_binaries: missing_binaries.clone(),
                warnings: Vec::new(),
                lines: None,
            });
        }
    }

    // Per-CPU queues: divided among threads by the switch sideband, decoded
    // per CPU, then merged in time order into one stack per thread.
    let mut schedules: HashMap<u32, Vec<(u64, usize)>> = HashMap::new();
    let mut cpu_slots = CpuSlots::default();
    let mut cpu_pids: Vec<i32> = Vec::new();
    if trace.streams.iter().any(|s| s.tid.is_none()) {
        let mut slot_of: HashMap<i32, usize> = HashMap::new();
        let mut queue_threads: Vec<QueueThread> = Vec::new();
        let mut pids: Vec<i32> = Vec::new();
        for sw in &trace.switches {
            // tid 0 is the idle task: no user code of its own.
            if sw.tid <= 0 || slot_of.contains_key(&sw.tid) {
                continue;
            }
            let pid = if sw.pid > 0 { sw.pid } else { pid_of(sw.tid) };
            let proc = match pids.iter().position(|&p| p == pid) {
                Some(i) => i,
                None => {
                    pids.push(pid);
                    pids.len() - 1
                }
            };
            slot_of.insert(sw.tid, queue_threads.len());
            queue_threads.push(QueueThread {
                pid,
                tid: sw.tid,
                comm: comm_of(sw.tid),
                proc,
            });
        }
        if queue_threads.is_empty() {
            return Err(DecodeError::Input {
                path: snap.path.clone(),
                problem: "its trace is per CPU but it has no context-switch records to tell \
                          the threads apart (record with `perf record --switch-events`)"
                    .into(),
            });
        }
        for &pid in &pids {
            add_proc(
                &mut procs,
                pid,
                (snap, trace),
                &mut loaders,
                &mut symbols,
                &mut missing_binaries,
            )?;
        }
        let mut taken: Vec<(i32, Proc)> = pids
            .iter()
            .map(|p| (*p, procs.remove(p).expect("added above")))
            .collect();
        let (proc_images, mut resolvers): (Vec<&ProcImage>, Vec<&mut ProcessSymbols>) =
            taken.iter_mut().map(|(_, p)| (&p.0, &mut p.1)).unzip();
        let mut libipt_images = Vec::new();
        let mut memories: Vec<&Memory> = Vec::new();
        for image in &proc_images {
            match image {
                ProcImage::Libipt(isids) => {
                    libipt_images.push(new_image(&loaders.cache, isids).map_err(libipt)?)
                }
                ProcImage::Flow(mem) => memories.push(mem),
            }
        }
        let libipt_refs: Vec<&Image> = libipt_images.iter().collect();
        let thread_procs: Vec<usize> = queue_threads.iter().map(|t| t.proc).collect();
        let mut builders = ThreadBuilders::new(&queue_threads);
        let mut queues = Vec::new();
        for (s, psbs) in trace.streams.iter().zip(&queue_psbs) {
            if s.tid.is_some() {
                continue;
            }
            let cpu = s.cpu.unwrap_or(0);
            let schedule: Vec<(u64, usize)> = trace
                .switches
                .iter()
                .filter(|sw| sw.cpu == cpu)
                .filter_map(|sw| slot_of.get(&sw.tid).map(|&slot| (sw.time, slot)))
                .collect();
            let mut items = TimedItems::default();
            let figures = match opts.engine {
                Engine::Libipt => decode_queue(
                    BlockDecoder::new(&s.data, &cfg).map_err(libipt)?,
                    s.idx,
                    &libipt_refs,
                    &mut resolvers,
                    &thread_procs,
                    &schedule,
                    &mut funcs,
                    &to_ns,
                    psbs,
                    &mut items,
                    progress,
                ),
                Engine::Flow => {
                    let mut owned: Vec<ProcessSymbols> =
                        resolvers.iter().map(|r| (**r).clone()).collect();
                    let walk = QueueWalk {
                        queue: s.idx,
                        images: &memories,
                        thread_procs: &thread_procs,
                        schedule: &schedule,
                        to_ns: &to_ns,
                        psbs,
                        stop_at_psb: false,
                        progress,
                    };
                    decode_queue_chunked(
                        &s.data,
                        &cfg,
                        walk,
                        &mut owned,
                        &mut funcs,
                        &mut items,
                        &opts.parallel,
                        |_, _| {},
                    )
                    .inspect(|_| {
                        // What the walk learned, for the fine pass.
                        for (r, o) in resolvers.iter_mut().zip(owned) {
                            **r = o;
                        }
                    })
                }
            }
            .map_err(libipt)?;
            if let Some(e) = cancelled() {
                return Err(e);
            }
            builders.add_figures(figures);
            queues.push(items);
            schedules.insert(s.idx, schedule);
        }
        TimedItems::merge_into(queues, &mut builders, &funcs);
        drop(resolvers);
        drop(libipt_refs);
        drop(libipt_images);
        drop(memories);
        drop(proc_images);
        procs.extend(taken);
        cpu_slots = CpuSlots {
            slot_of: slot_of.clone(),
            thread_procs: thread_procs.clone(),
        };
        cpu_pids = pids.clone();
        for (t, d) in queue_threads.iter().zip(builders.finish()) {
            if !wanted(t.tid) || (d.spans.span_count() == 0 && d.walk.blocks == 0) {
                continue;
            }
            threads.push(ThreadModel::new(d, None));
        }
    }
    threads.sort_by_key(|t| (t.spans.pid, t.spans.tid));

    // What the fine pass needs later: per-CPU processes first, in the
    // order their slots name them.
    let mut order: Vec<i32> = cpu_pids;
    let mut rest: Vec<i32> = procs
        .keys()
        .copied()
        .filter(|p| !order.contains(p))
        .collect();
    rest.sort_unstable();
    order.extend(rest);
    let mut fine_procs = Vec::new();
    for pid in order {
        let Some((image, resolver)) = procs.remove(&pid) else {
            continue;
        };
        let memory = match image {
            ProcImage::Flow(mem) => mem,
            ProcImage::Libipt(_) => {
                let (secs, _) = sections(snap, trace, Some(pid));
                Memory::new(&secs, &mut loaders.files).unwrap_or_default()
            }
        };
        fine_procs.push((pid, memory, resolver));
    }
    let fine_queues = trace
        .streams
        .iter()
        .zip(queue_psbs)
        .filter(|(s, _)| s.tid.is_none_or(wanted))
        .map(|(s, psbs)| QueueParts {
            idx: s.idx,
            tid: s.tid,
            data: s.data.to_vec(),
            psbs,
            schedule: schedules.remove(&s.idx).unwrap_or_default(),
        })
        .collect();
    let params = trace.params.clone();
    let lines = LineSource::new(
        cfg,
        Box::new(move |tsc| params.tsc_to_ns(tsc)),
        fine_queues,
        fine_procs,
        cpu_slots,
        funcs.clone(),
    );
    // Keep the section cache alive until every image is gone.
    drop(procs);
    drop(loaders);
    Ok(Model {
        funcs,
        missing_binaries,
        warnings: [input_warnings(trace, &wanted), stack_warnings(&threads)].concat(),
        threads,
        lines: Some(Arc::new(lines)),
    })
}

/// Decodes a raw PT dump against raw binary images loaded at fixed
/// addresses, like ptxed's `--raw FILE:ADDR`. Times are TSC ticks.
pub fn decode_raw(
    pt_path: &Path,
    pt: &[u8],
    images: &[(PathBuf, u64)],
    cfg: &DecoderConfig,
    engine: Engine,
) -> Result<Model, DecodeError> {
    let libipt = |error| DecodeError::Libipt {
        path: pt_path.to_path_buf(),
        error,
    };
    let mut secs = Vec::new();
    for (file, addr) in images {
        let len = std::fs::metadata(file)
            .map_err(|e| DecodeError::Input {
                path: file.clone(),
                problem: format!("cannot read the raw image: {e}"),
            })?
            .len();
        if len == 0 {
            return Err(DecodeError::Input {
                path: file.clone(),
                problem: "the raw image is empty".into(),
            });
        }
        secs.push(Section {
            file: file.clone(),
            offset: 0,
            size: len,
            vaddr: *addr,
            mapped_path: file.display().to_string(),
        });
    }
    let psbs: Vec<u64> = psb_offsets(pt).into_iter().map(|o| o as u64).collect();
    if psbs.is_empty() {
        return Err(DecodeError::Input {
            path: pt_path.to_path_buf(),
            problem: "no PSB packet: this is not Intel PT data".into(),
        });
    }
    let mut symbols = SymbolCache::default();
    let mut resolver = ProcessSymbols::new(&secs, &[], &mut symbols);
    let mut funcs = FuncTable::default();
    let thread = (0, 0, "raw".to_string());
    let mem = Memory::new(&secs, &mut FileCache::default()).map_err(|e| DecodeError::Input {
        path: pt_path.to_path_buf(),
        problem: format!("cannot read a raw image: {e}"),
    })?;
    let d =
        match engine {
            Engine::Libipt => {
                let mut cache = SectionCache::new().map_err(libipt)?;
                let mut isids = Vec::new();
                for s in &secs {
                    isids.push(cache.add_file(&s.file, s.offset, s.size, s.vaddr).map_err(
                        |e| DecodeError::Input {
                            path: s.file.clone(),
                            problem: format!("libipt cannot map it: {e}"),
                        },
                    )?);
                }
                let image = new_image(&cache, &isids).map_err(libipt)?;
                let dec = BlockDecoder::new(pt, cfg).map_err(libipt)?;
                decode_thread(
                    dec,
                    0,
                    &image,
                    &mut resolver,
                    &mut funcs,
                    &|tsc| tsc,
                    &psbs,
                    thread,
                    None,
                )
            }
            Engine::Flow => {
                let dec = FlowDecoder::new(pt, cfg);
                decode_thread(
                    dec,
                    0,
                    &mem,
                    &mut resolver,
                    &mut funcs,
                    &|tsc| tsc,
                    &psbs,
                    thread,
                    None,
                )
            }
        }
        .map_err(libipt)?;
    let lines = LineSource::new(
        *cfg,
        Box::new(|tsc| tsc),
        vec![QueueParts {
            idx: 0,
            tid: Some(0),
            data: pt.to_vec(),
            psbs,
            schedule: Vec::new(),
        }],
        vec![(0, mem, resolver)],
        CpuSlots::default(),
        funcs.clone(),
    );
    let threads = vec![ThreadModel::new(d, None)];
    Ok(Model {
        funcs,
        missing_binaries: Vec::new(),
        warnings: stack_warnings(&threads),
        threads,
        lines: Some(Arc::new(lines)),
    })
}

/// Rebuilds the spans of imported `perf script` text.
pub fn from_script(script: crate::perf_script::ScriptTrace) -> Model {
    let crate::perf_script::ScriptTrace { threads, funcs, .. } = script;
    let threads = threads
        .into_iter()
        .map(|t| {
            let mut b = crate::stack::StackBuilder::new(t.pid, t.tid, String::new());
            for ev in &t.events {
                b.event(ev, &funcs);
            }
            let (spans, stack) = b.finish();
            ThreadModel {
                spans,
                stack,
                walk: WalkFigures::default(),
                checkpoints: Vec::new(),
                checkpoint_frames: Vec::new(),
                stream: None,
            }
        })
        .collect::<Vec<_>>();
    Model {
        funcs,
        missing_binaries: Vec::new(),
        warnings: stack_warnings(&threads),
        threads,
        lines: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Snapshot {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo.ptscope");
        Snapshot::open(&path).expect("the bundled demo opens")
    }

    /// The first line where two canonical models differ, with context.
    pub(crate) fn assert_same(a: &[String], b: &[String]) {
        if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
            let ctx = |v: &[String]| v[i.saturating_sub(3)..(i + 3).min(v.len())].join("\n");
            panic!(
                "differ at line {i} of {}/{}:\n-- one walk:\n{}\n-- chunks:\n{}",
                a.len(),
                b.len(),
                ctx(a),
                ctx(b)
            );
        }
    }

    #[test]
    fn symbols_of_an_unchanged_file_are_shared_while_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("demo");
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
        std::fs::copy(&demo, &file).unwrap();
        let a = SymbolCache::default().get(&file).unwrap();
        let b = SymbolCache::default().get(&file).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "a second cache parses again");
        drop((a, b));
        let c = SymbolCache::default().get(&file).unwrap();
        // A changed file is another file.
        std::fs::copy(&demo, dir.path().join("other")).unwrap();
        std::fs::rename(dir.path().join("other"), &file).unwrap();
        let d = SymbolCache::default().get(&file).unwrap();
        assert!(!Arc::ptr_eq(&c, &d), "a replaced file keeps old symbols");
    }

    /// The demo's binary mapped whole at a fixed base, with its known
    /// functions `(entry, end)` in address order and the first padding
    /// between two of them: `(its start, the next entry)`, as svmas.
    struct DemoMapping {
        md: Arc<ModuleSymbols>,
        funcs: Vec<(u64, u64)>,
        gap: (u64, u64),
        base: u64,
        size: u64,
        resolver: ProcessSymbols,
    }

    impl DemoMapping {
        fn new() -> DemoMapping {
            let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
            let mut cache = SymbolCache::default();
            let md = cache.get(&demo).unwrap();
            let mut funcs: Vec<_> = md.functions().map(|f| (f.entry, f.end)).collect();
            funcs.sort();
            let gap = funcs
                .windows(2)
                .find_map(|w| (w[0].1 < w[1].0).then_some((w[0].1, w[1].0)))
                .expect("the demo has padding between two functions");
            let base = 0x5555_0000_0000;
            let size = std::fs::metadata(&demo).unwrap().len();
            let secs = [Section {
                file: demo.clone(),
                offset: 0,
                size,
                vaddr: base,
                mapped_path: "/demo".into(),
            }];
            let resolver = ProcessSymbols::new(&secs, &[], &mut cache);
            DemoMapping {
                md,
                funcs,
                gap,
                base,
                size,
                resolver,
            }
        }

        /// Where `svma` is mapped.
        fn addr(&self, svma: u64) -> u64 {
            self.base + self.md.svma_to_file_offset(svma).unwrap()
        }
    }

    /// A function learned from a call into the padding before a symbol
    /// ends where the symbol starts. Its range ran to the end of the
    /// mapping, so a walk that cached it put the next function's code in
    /// it, and what an address resolved to depended on what came before.
    #[test]
    fn a_learned_function_ends_where_the_next_symbol_starts() {
        let mut m = DemoMapping::new();
        let (gap, next) = m.gap;
        let (gap_at, next_at) = (m.addr(gap), m.addr(next));
        let mut table = FuncTable::default();
        assert!(m.resolver.learn_entry(gap_at, &mut table));
        let learned = m.resolver.resolve(gap_at, &mut table);
        assert!(learned.provisional);
        assert_eq!((learned.lo, learned.hi), (gap_at, next_at));
        let symbol = m.resolver.resolve(next_at, &mut table);
        assert!(!symbol.provisional);
        assert_ne!(symbol.func, learned.func);
        assert_eq!(symbol.lo, next_at);
        // Code after the symbol is not the learned function's either.
        let after = m.funcs.iter().find(|f| f.0 == next).unwrap().1;
        if m.funcs.iter().all(|f| f.0 != after) {
            let after_at = m.addr(after);
            let r = m.resolver.resolve(after_at, &mut table);
            assert_ne!(r.func, learned.func);
        }
    }

    /// An address in the mapping that no section of the file holds (round
    /// 11's open input: code past `.fini` on its page) resolved to the
    /// function learned before it, over the whole mapping: a walk that
    /// cached that range then named the known functions in it after the
    /// learned one, while a chunk, which had learned nothing, named them.
    #[test]
    fn unnamed_code_outside_every_section_does_not_take_in_known_functions() {
        let mut m = DemoMapping::new();
        let gap_off = m.md.svma_to_file_offset(m.gap.0).unwrap();
        let outside = (gap_off..m.size)
            .find(|&off| m.md.file_offset_to_svma(off).is_none())
            .expect("the demo's file has bytes after the gap that no section holds");
        let mut table = FuncTable::default();
        assert!(m.resolver.learn_entry(m.base + gap_off, &mut table));
        let r = m.resolver.resolve(m.base + outside, &mut table);
        assert!(r.lo <= m.base + outside && m.base + outside < r.hi);
        for &(entry, _) in &m.funcs {
            let Some(off) = m.md.svma_to_file_offset(entry) else {
                continue;
            };
            let a = m.base + off;
            assert!(
                !(r.lo <= a && a < r.hi),
                "{:#x}..{:#x} takes in the function at {a:#x}",
                r.lo,
                r.hi
            );
        }
    }

    /// Tracing off at a PSB, then on: the first block's checkpoint is that
    /// PSB's alone, even when the block ends in a TIP right before the next
    /// PSB (the decoder has consumed the trace up to that PSB, not past
    /// it). It also took the next PSB's, at the wrong instruction, and the
    /// next PSB's own status was then skipped. (libipt's engine still
    /// does: its decoder reads the next PSB+ with the TIP, so it cannot
    /// tell.)
    #[test]
    fn a_block_ending_right_before_a_psb_does_not_take_its_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("code");
        // 0x1000: jmp rax. 0x1010: nop; nop; jmp rax.
        let mut code = vec![0x90u8; 0x20];
        code[0..2].copy_from_slice(&[0xff, 0xe0]);
        code[0x12..0x14].copy_from_slice(&[0xff, 0xe0]);
        std::fs::write(&image, code).unwrap();
        let ip = |opcode: u8, ip: u64| {
            let mut p = vec![opcode | (6 << 5)];
            p.extend(ip.to_le_bytes());
            p
        };
        let psb = crate::packet::PSB_BYTES.to_vec();
        let psbend = [0x02, 0x23];
        // PSB+ with tracing off; TIP.PGE 0x1000; TIP 0x1010.
        let mut pt = psb.clone();
        pt.extend(psbend);
        pt.extend(ip(0x11, 0x1000));
        pt.extend(ip(0x0d, 0x1010));
        let second = pt.len() as u64;
        // PSB+ at 0x1010; TIP.PGD, IP suppressed, binds to the jmp.
        pt.extend(&psb);
        pt.extend(ip(0x1d, 0x1010));
        pt.extend(psbend);
        pt.push(0x01);
        let m = decode_raw(
            Path::new("raw.pt"),
            &pt,
            &[(image.clone(), 0x1000)],
            &DecoderConfig::default(),
            Engine::Flow,
        )
        .unwrap();
        let cps: Vec<_> = m.threads[0]
            .checkpoints
            .iter()
            .map(|c| (c.offset, c.ip, c.insn))
            .collect();
        assert_eq!(cps, [(0, 0x1000, 0), (second, 0x1010, 1)]);
    }

    /// A mapping that a later one overlaps ends where that one starts:
    /// what resolved in the earlier one was cached by a range that ran
    /// over the later one, so an address there named the earlier's
    /// function or `[no binary]` depending on what came before.
    #[test]
    fn an_overlapped_mapping_ends_where_the_next_starts() {
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
        let len = std::fs::metadata(&demo).unwrap().len();
        let base = 0x5555_0000_0000;
        let secs = [Section {
            file: demo.clone(),
            offset: 0,
            size: len,
            vaddr: base,
            mapped_path: "/demo".into(),
        }];
        // A binary not on hand, mapped over all of it from before.
        let missing = [(base - 0x1000, len + 0x2000, "/gone".to_string())];
        let mut resolver = ProcessSymbols::new(&secs, &missing, &mut SymbolCache::default());
        let mut table = FuncTable::default();
        let before = resolver.resolve(base - 0x800, &mut table);
        assert_eq!((before.lo, before.hi), (base - 0x1000, base));
        let inside = resolver.resolve(base + 0x10, &mut table);
        assert_ne!(inside.func, before.func);
    }

    #[test]
    fn a_queue_without_a_psb_is_a_warning() {
        let snap = demo();
        assert!(decode_snapshot(&snap, &DecodeOptions::default())
            .unwrap()
            .warnings
            .is_empty());
        let mut trace = snap.trace().unwrap();
        let bytes = trace.streams[0].data.len();
        trace.streams[0].data = vec![0u8; bytes].into();
        let m = decode_trace(&snap, &trace, &DecodeOptions::default()).unwrap();
        assert_eq!(m.span_count(), 0);
        assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
        assert!(m.warnings[0].contains("hold no PSB"), "{:?}", m.warnings);
        // Not a thread we were asked about: not our business.
        let opts = DecodeOptions {
            threads: Some(vec![-5]),
            ..DecodeOptions::default()
        };
        assert!(decode_trace(&snap, &trace, &opts)
            .unwrap()
            .warnings
            .is_empty());
    }

    #[test]
    fn chunks_on_two_cores_give_what_one_walk_gives() {
        let snap = demo();
        let one = decode_snapshot(
            &snap,
            &DecodeOptions {
                parallel: Parallel::sequential(),
                ..DecodeOptions::default()
            },
        )
        .unwrap();
        assert!(one.threads.iter().all(|t| t.checkpoints.len() > 3));
        // A chunk per PSB: every seam there is; timed by the chunks, and
        // by the replay alone; on threads, and in order on this one.
        for (retime, in_order) in [(false, false), (true, false), (false, true)] {
            let many = decode_snapshot(
                &snap,
                &DecodeOptions {
                    parallel: Parallel {
                        workers: 2,
                        chunk_bytes: 1,
                        first_chunk_bytes: 1,
                        retime,
                        in_order,
                    },
                    ..DecodeOptions::default()
                },
            )
            .unwrap();
            assert_same(&one.canonical(), &many.canonical());
        }
    }

    /// `trace` decoded in one walk, and in chunks cut at every PSB.
    fn one_walk_and_chunks(snap: &Snapshot, trace: &Trace) -> (Model, Model) {
        let decode = |parallel| {
            let opts = DecodeOptions {
                parallel,
                ..DecodeOptions::default()
            };
            decode_trace(snap, trace, &opts).unwrap()
        };
        let chunks = Parallel {
            workers: 2,
            chunk_bytes: 1,
            first_chunk_bytes: 1,
            retime: false,
            in_order: false,
        };
        (decode(Parallel::sequential()), decode(chunks))
    }

    /// Timing or padding packets between the last branch and a PSB leave
    /// the decoder short of the PSB when it reports the PSB+ status: the
    /// PSB must still count as reached there, or checkpoints come a
    /// segment late and a chunk walks on into the next chunk.
    #[test]
    fn packets_before_a_psb_neither_delay_its_checkpoint_nor_blur_a_seam() {
        let snap = demo();
        let mut trace = snap.trace().unwrap();
        let mut psbs_total = 0;
        for s in &mut trace.streams {
            let psbs = psb_offsets(&s.data);
            psbs_total += psbs.len();
            let mut padded = Vec::with_capacity(s.data.len() + psbs.len() * 4);
            let mut from = 0;
            for &p in &psbs {
                padded.extend_from_slice(&s.data[from..p]);
                padded.extend_from_slice(&[0; 4]); // PAD packets
                from = p;
            }
            padded.extend_from_slice(&s.data[from..]);
            s.data = padded.into();
        }
        let (one, many) = one_walk_and_chunks(&snap, &trace);
        let checkpoints: usize = one.threads.iter().map(|t| t.checkpoints.len()).sum();
        assert_eq!(checkpoints, psbs_total, "a checkpoint at every PSB");
        assert_same(&one.canonical(), &many.canonical());
    }

    /// An overflow inside a PSB+ where a chunk starts: the chunk before
    /// stops there, and the overflow is reported once, by the next, as
    /// one walk reports it (it was reported by both).
    #[test]
    fn an_overflow_inside_psb_plus_at_a_seam_is_reported_once() {
        let snap = demo();
        let mut trace = snap.trace().unwrap();
        let s = &mut trace.streams[0];
        let psbs = psb_offsets(&s.data);
        assert!(psbs.len() > 4);
        let at = psbs[psbs.len() / 2] + crate::packet::PSB_BYTES.len();
        let (ovf_psb, next_psb) = (psbs[psbs.len() / 2], psbs[psbs.len() / 2 + 1] + 2);
        let mut data = s.data[..at].to_vec();
        data.extend_from_slice(&[0x02, 0xf3]); // OVF
        data.extend_from_slice(&s.data[at..]);
        s.data = data.into();
        let (one, many) = one_walk_and_chunks(&snap, &trace);
        let overflows: u64 = one.threads.iter().map(|t| t.walk.overflows).sum();
        assert_eq!(overflows, 1);
        // That PSB's segment starts where tracing resumed, not at the next.
        let cps = &one.threads[0].checkpoints;
        let insn = |off| cps.iter().find(|c| c.offset == off).unwrap().insn;
        assert!(insn(ovf_psb as u64) < insn(next_psb as u64));
        assert_same(&one.canonical(), &many.canonical());
    }

    #[test]
    fn progress_counts_every_segment_and_publishes_the_model_so_far() {
        let progress = DecodeProgress::new();
        let opts = DecodeOptions {
            threads: None,
            progress: Some(progress.clone()),
            ..DecodeOptions::default()
        };
        let model = decode_snapshot(&demo(), &opts).unwrap();
        let (done, total) = progress.segments();
        assert!(total > 0);
        assert_eq!(done, total);
        let partial = progress.take_partial().expect("a partial model");
        assert!(partial.span_count() > 0);
        assert!(partial.span_count() <= model.span_count());
    }

    #[test]
    fn a_cancelled_decode_stops_with_an_error() {
        let progress = DecodeProgress::new();
        progress.cancel();
        let opts = DecodeOptions {
            threads: None,
            progress: Some(progress.clone()),
            ..DecodeOptions::default()
        };
        let err = decode_snapshot(&demo(), &opts).err().expect("cancelled");
        assert!(matches!(err, DecodeError::Cancelled { .. }), "{err}");
        assert!(err.to_string().contains("demo.ptscope"));
        // It stopped at the first block, not at the end.
        let (done, total) = progress.segments();
        assert!(done < total, "{done} of {total}");
    }
}
