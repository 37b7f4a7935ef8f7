//! The decode driver: from a snapshot (or a raw PT dump, or perf-script
//! text) to a [`Model`]. It builds each process's image and resolver from
//! the sideband, runs the coarse pass over every AUX queue (in chunks on
//! every core, or one walk), and collects spans, checkpoints and warnings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ptscope_formats::snapshot::{Snapshot, Trace};
use ptscope_formats::FileError;

use crate::block::decoder_config;
use crate::block::{DecoderConfig, PtError};
use crate::coarse::chunks::{decode_queue_chunked, Parallel};
use crate::coarse::{
    decode_queue, decode_thread, scheduled, QueueThread, QueueWalk, ThreadBuilders, TimedItems,
};
use crate::cpus::CpuTrack;
use crate::decoded::Decoded;
use crate::event::FuncTable;
use crate::ffi::{BlockDecoder, Image, SectionCache};
use crate::fine::{CpuSlots, LineSource, QueueParts};
use crate::flow::FlowDecoder;
use crate::image::{sections_with, Section};
use crate::mark_scan;
use crate::marks::{Mark, Marks};
use crate::memory::{FileCache, Memory};
use crate::model::{Model, ThreadModel, TimeUnit};
use crate::packet::{find_psb, psb_offsets};
use crate::progress::DecodeProgress;
use crate::resolve::{ProcessSymbols, SymbolCache};

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
    /// A binary of the input (`path`) could not be read; `error` names it.
    #[error("{path}: cannot read one of its binaries: {error}")]
    Binary { path: PathBuf, error: FileError },
    /// libipt could not map the binary at `path` into its image.
    #[error("{path}: libipt cannot map it: {error}")]
    LibiptMap { path: PathBuf, error: PtError },
    #[error("{path}: {problem}")]
    Input { path: PathBuf, problem: String },
    #[error("{path}: decoding was cancelled")]
    Cancelled { path: PathBuf },
    /// `perf script` text that could not be imported; the error names it.
    #[error(transparent)]
    Script(#[from] crate::perf_script::ScriptError),
}

/// Which threads to decode, and how.
///
/// What it serializes to is every option that changes the model a decode
/// gives (the model cache's key): how the work spreads over cores, and
/// where progress goes, change nothing and are skipped. A field added here
/// is part of the key unless it says otherwise.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DecodeOptions {
    pub threads: Option<Vec<i32>>,
    /// Counters to report to, a cancel flag, and partial models.
    #[serde(skip)]
    pub progress: Option<Arc<DecodeProgress>>,
    pub engine: Engine,
    /// How the flow engine's coarse pass spreads over cores.
    #[serde(skip)]
    pub parallel: Parallel,
    /// The CPU whose errata to work around, over the trace's cpuid.
    pub cpu: Option<crate::block::Cpu>,
    /// The IP filter the trace was written under, over the one it records.
    pub ip_filter: Option<crate::ip_filter::IpFilter>,
    /// Where names come from beyond the snapshot and the binaries.
    pub names: crate::names::NameOptions,
}

/// What walks the trace in the coarse pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Engine {
    /// Our own flow decoder ([`crate::flow`]): the fast one.
    #[default]
    Flow,
    /// libipt's block decoder: the reference.
    Libipt,
}

/// Decodes every thread of `snap` (or those `opts` selects).
pub fn decode_snapshot(snap: &Snapshot, opts: &DecodeOptions) -> Result<Decoded, DecodeError> {
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
        let mut notes = Vec::new();
        let (secs, missing) =
            crate::image::sections_noting(snap, trace, Some(pid), symbols.search(), &mut notes);
        notes.into_iter().for_each(|n| symbols.note(n));
        let image = match loaders.engine {
            Engine::Libipt => {
                let mut isids = Vec::new();
                for sec in &secs {
                    isids.push(
                        loaders
                            .cache
                            .add_file(&sec.file, sec.offset, sec.size, sec.vaddr)
                            .map_err(|error| DecodeError::LibiptMap {
                                path: sec.file.clone(),
                                error,
                            })?,
                    );
                }
                ProcImage::Libipt(isids)
            }
            Engine::Flow => {
                ProcImage::Flow(Memory::new(&secs, &mut loaders.files).map_err(|error| {
                    DecodeError::Binary {
                        path: snap.path.clone(),
                        error,
                    }
                })?)
            }
        };
        // The kernel and its modules (pid -1) are mapped in every process,
        // and no image of theirs is ever at hand.
        let missing_maps: Vec<(u64, u64, String)> = trace
            .mmaps
            .iter()
            .filter(|m| (m.pid == pid && missing.contains(&m.path)) || (m.kernel && m.pid == -1))
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

/// What a trace's times can count: nanoseconds when it has TSC packets,
/// else instructions. The recorded config says; where it cannot (no TSC
/// bit is known), the packets do, as for a raw dump.
pub fn time_unit(trace: &Trace) -> TimeUnit {
    let tsc_bit = trace.params.tsc_bit;
    if tsc_bit != 0 {
        return match trace.pt_attr.config & tsc_bit {
            0 => TimeUnit::Insns,
            _ => TimeUnit::Ns,
        };
    }
    match trace.streams.iter().any(|s| has_timing(&s.data)) {
        true => TimeUnit::Ns,
        false => TimeUnit::Insns,
    }
}

/// Whether `pt` holds a packet that tells time (TSC, MTC or CYC). A trace
/// with none is laid out on the instruction axis: instructions retired,
/// counted exactly by the walk. Any timing keeps nanoseconds.
pub fn has_timing(pt: &[u8]) -> bool {
    crate::packet::Packets::new(pt).any(|(_, p)| {
        matches!(
            p,
            Ok(crate::packet::Packet::Tsc(_)
                | crate::packet::Packet::Mtc(_)
                | crate::packet::Packet::Cyc(_))
        )
    })
}

/// What every decode of a trace sets up before it walks: the decoder's
/// configuration, the code loaders and the symbols, and what the user
/// should hear of setting them up.
struct Prepared {
    cfg: DecoderConfig,
    loaders: Loaders,
    symbols: SymbolCache,
    filter_warning: Vec<String>,
    kernel_warning: Option<String>,
}

fn prepare(snap: &Snapshot, trace: &Trace, opts: &DecodeOptions) -> Result<Prepared, DecodeError> {
    let libipt = |error| DecodeError::Libipt {
        path: snap.path.clone(),
        error,
    };
    let mut cfg = decoder_config(trace);
    if let Some(cpu) = opts.cpu {
        cfg = cfg.with_cpu(cpu);
    }
    let mut filter_warning = Vec::new();
    match (opts.ip_filter, crate::ip_filter::IpFilter::recorded(trace)) {
        (Some(f), _) => cfg = cfg.with_filter(f),
        (None, Err(e)) => filter_warning.push(format!(
            "{e}; SKL014 is not worked around (give the ranges with --ip-filter)"
        )),
        (None, Ok(_)) => {}
    }
    let loaders = Loaders {
        engine: opts.engine,
        cache: SectionCache::new().map_err(libipt)?,
        files: FileCache::default(),
    };
    let mut search = crate::names::search(
        Some(snap),
        &opts.names.debug_dirs,
        &opts.names.binary_dirs,
        opts.names.debuginfod,
    );
    search.debuginfod = search.debuginfod.map(|c| {
        crate::names::reporting(c, opts.names.debuginfod_on_stderr, opts.progress.clone())
    });
    let mut symbols = SymbolCache::new(search);
    let (kernel, kernel_warning) = crate::symbols::kallsyms::for_trace(
        snap,
        trace,
        opts.names.kallsyms.as_deref(),
        opts.names.vmlinux.as_deref(),
    );
    symbols.kernel = kernel;
    Ok(Prepared {
        cfg,
        loaders,
        symbols,
        filter_warning,
        kernel_warning,
    })
}

/// perf time of a TSC value, and what the model's times count.
fn clock_of(trace: &Trace) -> (impl Fn(u64) -> u64 + Send + Sync + 'static, TimeUnit) {
    let unit = time_unit(trace);
    let params = trace.params.clone();
    let to_ns = move |tsc: u64| match unit {
        TimeUnit::Ns => params.tsc_to_ns(tsc),
        TimeUnit::Insns => tsc,
    };
    (to_ns, unit)
}

fn psbs_of(data: &[u8]) -> Vec<u64> {
    psb_offsets(data).into_iter().map(|o| o as u64).collect()
}

pub fn decode_trace(
    snap: &Snapshot,
    trace: &Trace,
    opts: &DecodeOptions,
) -> Result<Decoded, DecodeError> {
    let libipt = |error| DecodeError::Libipt {
        path: snap.path.clone(),
        error,
    };
    let Prepared {
        cfg,
        mut loaders,
        mut symbols,
        filter_warning,
        kernel_warning,
    } = prepare(snap, trace, opts)?;
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
    let (to_ns, unit) = clock_of(trace);
    let mut threads = Vec::new();
    let progress = opts.progress.as_deref();
    let queue_psbs: Vec<Vec<u64>> = trace.streams.iter().map(|s| psbs_of(&s.data)).collect();
    if let Some(p) = progress {
        let total: usize = trace
            .streams
            .iter()
            .zip(&queue_psbs)
            .filter(|(s, _)| s.tid.is_none_or(wanted))
            .map(|(_, p)| p.len())
            .sum();
        let bytes: usize = trace
            .streams
            .iter()
            .filter(|s| s.tid.is_none_or(wanted))
            .map(|s| s.data.len())
            .sum();
        p.begin(total as u64, bytes as u64);
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
        // Its debug files are in hand (or not to be had): no transfer is
        // waited on any more, even one that failed midway.
        if let Some(p) = progress {
            p.set_waiting_on(None);
        }
        let thread = (pid, tid, comm_of(tid));
        let d = match image {
            ProcImage::Libipt(isids) => {
                let image = new_image(&loaders.cache, isids).map_err(libipt)?;
                let dec = BlockDecoder::new(&s.data, &cfg).map_err(libipt)?;
                decode_thread(
                    dec,
                    s.idx,
                    &image,
                    resolver,
                    &mut funcs,
                    (&to_ns, unit),
                    psbs,
                    thread,
                    progress,
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
                    unit,
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
                            unit,
                            ..Model::default()
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
                unit,
                ..Model::default()
            });
        }
    }

    // Per-CPU queues: divided among threads by the switch sideband, decoded
    // per CPU, then merged in time order into one stack per thread.
    let mut schedules: HashMap<u32, Vec<(u64, usize)>> = HashMap::new();
    let mut cpu_slots = CpuSlots::default();
    let mut cpu_pids: Vec<i32> = Vec::new();
    let mut cpu_slot_tids: Vec<i32> = Vec::new();
    if trace.streams.iter().any(|s| s.tid.is_none()) {
        let mut slot_of: HashMap<i32, usize> = HashMap::new();
        let mut queue_threads: Vec<QueueThread> = Vec::new();
        let mut pids: Vec<i32> = Vec::new();
        // Who runs on a CPU with no switch (nor ITRACE_START) record at
        // all: the thread its AUXTRACE records name, as perf takes it.
        let fallback = |cpu: u32| {
            let named = trace.switches.iter().any(|sw| sw.cpu == cpu);
            trace
                .streams
                .iter()
                .filter(|s| s.tid.is_none() && s.cpu.unwrap_or(0) == cpu && !named)
                .find_map(|s| s.recorded_tid)
        };
        let fallbacks: Vec<(i32, i32)> = trace
            .streams
            .iter()
            .filter(|s| s.tid.is_none())
            .filter_map(|s| fallback(s.cpu.unwrap_or(0)).map(|tid| (pid_of(tid), tid)))
            .collect();
        let runners = trace
            .switches
            .iter()
            .map(|sw| (sw.pid, sw.tid))
            .chain(fallbacks);
        // Events bound to a task (per-CPU buffers whose AUXTRACE records
        // name it, as `perf record CMD` or `-p PID` writes them): only the
        // tasks they follow run traced code, the task's process and those
        // the sideband saw it create. A switch to any other task is the
        // traced thread leaving, and the FUP and TIP.PGD it writes as it
        // goes are its own; it owns no other packet until one comes back.
        let bound = trace
            .streams
            .iter()
            .filter(|s| s.tid.is_none())
            .find_map(|s| s.recorded_tid)
            .filter(|&t| t > 0);
        let follows = |pid: i32, tid: i32| match bound {
            None => true,
            Some(b) => tid == b || pid == pid_of(b) || trace.thread(tid).is_some(),
        };
        for (sw_pid, sw_tid) in runners {
            // tid 0 is the idle task: no user code of its own.
            if sw_tid <= 0 || slot_of.contains_key(&sw_tid) {
                continue;
            }
            if !follows(if sw_pid > 0 { sw_pid } else { pid_of(sw_tid) }, sw_tid) {
                continue;
            }
            let pid = if sw_pid > 0 { sw_pid } else { pid_of(sw_tid) };
            let proc = match pids.iter().position(|&p| p == pid) {
                Some(i) => i,
                None => {
                    pids.push(pid);
                    pids.len() - 1
                }
            };
            slot_of.insert(sw_tid, queue_threads.len());
            queue_threads.push(QueueThread {
                pid,
                tid: sw_tid,
                comm: comm_of(sw_tid),
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
        if let Some(p) = progress {
            p.set_waiting_on(None);
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
            let mut schedule: Vec<(u64, usize)> = trace
                .switches
                .iter()
                .filter(|sw| sw.cpu == cpu)
                .filter_map(|sw| slot_of.get(&sw.tid).map(|&slot| (sw.time, slot)))
                .collect();
            if let Some(&slot) = fallback(cpu).and_then(|tid| slot_of.get(&tid)) {
                schedule.push((0, slot));
            }
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
                    (&to_ns, unit),
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
                        unit,
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
        cpu_slot_tids = queue_threads.iter().map(|t| t.tid).collect();
        for (t, d) in queue_threads.iter().zip(builders.finish()) {
            if !wanted(t.tid) || (d.spans.span_count() == 0 && d.walk.blocks == 0) {
                continue;
            }
            threads.push(ThreadModel::new(d, None));
        }
    }
    threads.sort_by_key(|t| (t.spans.pid, t.spans.tid));
    let (cpus, untimed) = add_marks(
        trace,
        &cfg,
        &to_ns,
        &mut threads,
        (&schedules, &cpu_slot_tids),
    );
    let marks_warning = (untimed > 0).then(|| {
        format!(
            "{untimed} PTWRITE, frequency or power packets came before any timing packet \
             (or the trace has none) and are not shown"
        )
    });

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
    let lines = line_source(
        (snap, trace),
        cfg,
        (Box::new(to_ns), unit),
        (order, &mut procs),
        (&mut loaders, &symbols),
        (queue_psbs, &wanted, schedules),
        cpu_slots,
        funcs.clone(),
    );
    // Keep the section cache alive until every image is gone.
    drop(procs);
    drop(loaders);
    let model = Model {
        funcs,
        missing_binaries,
        warnings: [
            filter_warning,
            kernel_warning.into_iter().collect(),
            input_warnings(trace, &wanted),
            symbols.notes().to_vec(),
            stack_warnings(&threads),
            marks_warning.into_iter().collect(),
            libipt_resync_warning(opts.engine, &threads)
                .into_iter()
                .collect(),
        ]
        .concat(),
        threads,
        unit,
        cpus,
        cbr_mhz: cbr_mhz(&trace.params),
    };
    Ok(Decoded {
        model,
        lines: Some(Arc::new(lines)),
    })
}

/// MHz per unit of CBR ratio, as perf takes it: the TSC's frequency (from
/// the perf time conversion) over the maximum non-turbo ratio; 0 when
/// either is unknown.
fn cbr_mhz(params: &ptscope_formats::pt_params::PtParams) -> f64 {
    if params.time_mult == 0 || params.max_nonturbo_ratio == 0 {
        return 0.0;
    }
    let tsc_hz = 1e9 * (1u64 << params.time_shift.min(63)) as f64 / params.time_mult as f64;
    tsc_hz / params.max_nonturbo_ratio as f64 / 1e6
}

/// Reads every queue's marks ([`crate::marks`]): a per-thread queue's go
/// to its thread; a per-CPU queue's to its CPU's track and, by its
/// schedule, to the thread that ran (`slot_tids` names each slot's
/// thread). Returns the CPU tracks, and how many marks had no time.
fn add_marks(
    trace: &Trace,
    cfg: &DecoderConfig,
    to_ns: &dyn Fn(u64) -> u64,
    threads: &mut [ThreadModel],
    (schedules, slot_tids): (&Schedules, &[i32]),
) -> (Vec<CpuTrack>, u64) {
    let mut untimed = 0;
    let mut per_tid: HashMap<i32, Vec<Mark>> = HashMap::new();
    let mut cpus = Vec::new();
    let end = threads
        .iter()
        .filter_map(|t| t.spans.time_range())
        .map(|r| r.1)
        .max()
        .unwrap_or(0);
    for s in &trace.streams {
        if let Some(tid) = s.tid {
            if !threads.iter().any(|t| t.spans.tid == tid) {
                continue;
            }
            let scan = mark_scan::scan(&s.data, cfg, to_ns);
            untimed += scan.untimed;
            per_tid.entry(tid).or_default().extend(scan.marks);
            continue;
        }
        let cpu = s.cpu.unwrap_or(0);
        let scan = mark_scan::scan(&s.data, cfg, to_ns);
        untimed += scan.untimed;
        let schedule = schedules.get(&s.idx).map(Vec::as_slice).unwrap_or(&[]);
        for m in &scan.marks {
            if let Some(&tid) = scheduled(schedule, m.time).and_then(|slot| slot_tids.get(slot)) {
                per_tid.entry(tid).or_default().push(*m);
            }
        }
        let switches: Vec<(u64, i32, i32)> = trace
            .switches
            .iter()
            .filter(|sw| sw.cpu == cpu)
            .map(|sw| (sw.time, sw.pid, sw.tid))
            .collect();
        let outs: Vec<(u64, i32)> = trace
            .switch_outs
            .iter()
            .filter(|sw| sw.cpu == cpu)
            .map(|sw| (sw.time, sw.tid))
            .collect();
        let last = scan.marks.iter().map(|m| m.time).max().unwrap_or(0);
        let marks = Marks::new(scan.marks);
        cpus.push(CpuTrack {
            cpu,
            slices: crate::cpus::slices(&switches, &outs, end.max(last)),
            marks,
        });
    }
    for t in threads.iter_mut() {
        if let Some(m) = per_tid.remove(&t.spans.tid) {
            t.marks = Marks::new(m);
        }
    }
    cpus.sort_by_key(|c| c.cpu);
    (cpus, untimed)
}

/// Per-CPU queue, who ran when: (perf ns, slot).
type Schedules = HashMap<u32, Vec<(u64, usize)>>;

/// The fine pass's source: the processes in `order` (taken out of
/// `procs`), each queue's trace, PSBs and schedule.
#[allow(clippy::too_many_arguments)]
fn line_source(
    (snap, trace): (&Snapshot, &Trace),
    cfg: DecoderConfig,
    clock: (Box<dyn Fn(u64) -> u64 + Send + Sync>, TimeUnit),
    (order, procs): (Vec<i32>, &mut HashMap<i32, Proc>),
    (loaders, symbols): (&mut Loaders, &SymbolCache),
    (queue_psbs, wanted, mut schedules): (Vec<Vec<u64>>, &dyn Fn(i32) -> bool, Schedules),
    cpu_slots: CpuSlots,
    funcs: FuncTable,
) -> LineSource {
    let mut fine_procs = Vec::new();
    for pid in order {
        let Some((image, resolver)) = procs.remove(&pid) else {
            continue;
        };
        let memory = match image {
            ProcImage::Flow(mem) => mem,
            ProcImage::Libipt(_) => {
                let (secs, _) = sections_with(snap, trace, Some(pid), symbols.search());
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
    LineSource::new(cfg, clock, fine_queues, fine_procs, cpu_slots, funcs)
        .with_sources(symbols.sources())
}

/// The model of `snap` from what the model cache kept of an earlier
/// decode with the same options: its spans as they were, and a fine-pass
/// source built again from the snapshot and the cached recipe, without
/// walking the trace. `None` if the cached model is stale: the binaries
/// or debug files its names came from are not those found now.
pub(crate) fn reopen(
    snap: &Snapshot,
    opts: &DecodeOptions,
    cached: crate::cache::Cached,
) -> Result<Option<Decoded>, DecodeError> {
    let trace = snap.trace().map_err(DecodeError::File)?;
    let trace = &trace;
    let Prepared {
        cfg,
        mut loaders,
        mut symbols,
        ..
    } = prepare(snap, trace, opts)?;
    let recipe = cached.recipe;
    let mut procs: HashMap<i32, Proc> = HashMap::new();
    let mut missing_binaries = Vec::new();
    for (&pid, learned) in recipe.pids.iter().zip(&recipe.learned) {
        let (_, resolver) = add_proc(
            &mut procs,
            pid,
            (snap, trace),
            &mut loaders,
            &mut symbols,
            &mut missing_binaries,
        )?;
        resolver.relearn(learned.iter().copied());
    }
    let mut missing_then = cached.model.missing_binaries.clone();
    missing_then.sort();
    missing_binaries.sort();
    if symbols.sources() != recipe.sources || missing_binaries != missing_then {
        return Ok(None);
    }
    let (to_ns, unit) = clock_of(trace);
    let wanted = |tid: i32| opts.threads.as_ref().is_none_or(|t| t.contains(&tid));
    let queue_psbs: Vec<Vec<u64>> = trace.streams.iter().map(|s| psbs_of(&s.data)).collect();
    let lines = line_source(
        (snap, trace),
        cfg,
        (Box::new(to_ns), unit),
        (recipe.pids.clone(), &mut procs),
        (&mut loaders, &symbols),
        (queue_psbs, &wanted, recipe.schedules()),
        recipe.cpu_slots(),
        cached.model.funcs.clone(),
    );
    drop(procs);
    drop(loaders);
    Ok(Some(Decoded {
        model: cached.model,
        lines: Some(Arc::new(lines)),
    }))
}

/// Decodes a raw PT dump against raw binary images loaded at fixed
/// addresses, like ptxed's `--raw FILE:ADDR`. Times are TSC ticks.
pub fn decode_raw(
    pt_path: &Path,
    pt: &[u8],
    images: &[(PathBuf, u64)],
    cfg: &DecoderConfig,
    engine: Engine,
) -> Result<Decoded, DecodeError> {
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
    // A dump without timing packets counts instructions, as a snapshot
    // recorded with tsc=0 does; else times are TSC ticks.
    let unit = match has_timing(pt) {
        true => TimeUnit::Ns,
        false => TimeUnit::Insns,
    };
    let mut symbols = SymbolCache::default();
    let mut resolver = ProcessSymbols::new(&secs, &[], &mut symbols);
    let mut funcs = FuncTable::default();
    let thread = (0, 0, "raw".to_string());
    let mem =
        Memory::new(&secs, &mut FileCache::default()).map_err(|error| DecodeError::Binary {
            path: pt_path.to_path_buf(),
            error,
        })?;
    let d = match engine {
        Engine::Libipt => {
            let mut cache = SectionCache::new().map_err(libipt)?;
            let mut isids = Vec::new();
            for s in &secs {
                isids.push(cache.add_file(&s.file, s.offset, s.size, s.vaddr).map_err(
                    |error| DecodeError::LibiptMap {
                        path: s.file.clone(),
                        error,
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
                (&|tsc| tsc, unit),
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
                (&|tsc| tsc, unit),
                &psbs,
                thread,
                None,
            )
        }
    }
    .map_err(libipt)?;
    let lines = LineSource::new(
        *cfg,
        (Box::new(|tsc| tsc), unit),
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
    let mut thread = ThreadModel::new(d, None);
    let scan = mark_scan::scan(pt, cfg, &|tsc| tsc);
    thread.marks = Marks::new(scan.marks);
    let threads = vec![thread];
    let mut warnings = stack_warnings(&threads);
    warnings.extend(no_cpu_warning(cfg, &threads));
    warnings.extend(libipt_resync_warning(engine, &threads));
    Ok(Decoded {
        model: Model {
            funcs,
            missing_binaries: Vec::new(),
            warnings,
            threads,
            unit,
            ..Model::default()
        },
        lines: Some(Arc::new(lines)),
    })
}

/// libipt can resume only at a PSB after a decode error, where ptscope's
/// engine resumes at the next packet that gives the flow's IP (as perf
/// does): the trace between is decoded by one and not the other. Said
/// when the libipt engine met errors.
fn libipt_resync_warning(engine: Engine, threads: &[ThreadModel]) -> Option<String> {
    let errors: usize = threads.iter().map(|t| t.walk.errors.len()).sum();
    (engine == Engine::Libipt && errors > 0).then(|| {
        format!(
            "the libipt engine met {errors} decode error(s), and libipt resumes only at the next PSB \
             after one: the trace up to it is not decoded here; ptscope's engine (the default) \
             resumes at the next packet that gives an IP, as perf does"
        )
    })
}

/// A raw dump records no CPU: decoded without `--cpu`, neither engine
/// works around an erratum (both assume the same: no CPU, no errata), and
/// errors that are an erratum's look like damage. Said when there are
/// errors to explain.
fn no_cpu_warning(cfg: &DecoderConfig, threads: &[ThreadModel]) -> Option<String> {
    let errors: usize = threads.iter().map(|t| t.walk.errors.len()).sum();
    (cfg.family == 0 && errors > 0).then(|| {
        format!(
            "{errors} decode error(s), and the dump records no CPU: errata are not worked around, \
             and a CPU erratum's errors (BDM70, SKD022, SKL014, SKZ84, ...) look like these; \
             give the CPU it ran on with --cpu FAMILY/MODEL[/STEPPING]"
        )
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
                stack,
                ..ThreadModel::from_spans(spans)
            }
        })
        .collect::<Vec<_>>();
    Model {
        funcs,
        missing_binaries: Vec::new(),
        warnings: stack_warnings(&threads),
        threads,
        unit: TimeUnit::Ns,
        ..Model::default()
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

    /// The span lines of a canonical model.
    fn span_lines(m: &Model) -> Vec<String> {
        m.canonical()
            .into_iter()
            .filter(|l| !l.starts_with("cp ") && !l.starts_with("thread "))
            .collect()
    }

    /// A queue recorded on a CPU is per CPU even when its AUXTRACE records
    /// name a thread, as `perf record CMD` writes them: with no switch
    /// record the thread they name ran there (it was an error: no switch
    /// records), and with only an ITRACE_START, the thread that names.
    #[test]
    fn a_per_cpu_queue_without_switches_is_its_named_or_started_threads() {
        let snap = demo();
        let per_thread = decode_snapshot(&snap, &DecodeOptions::default()).unwrap();
        let mut trace = snap.trace().unwrap();
        let tid = trace.streams[0].tid.unwrap();
        let pid = trace.thread(tid).unwrap().pid;
        trace.streams[0].tid = None;
        trace.streams[0].recorded_tid = Some(tid);
        trace.streams[0].cpu = Some(3);
        trace.switches.clear();
        let check = |trace: &Trace| {
            let m = decode_trace(&snap, trace, &DecodeOptions::default()).unwrap();
            let tids: Vec<i32> = m.threads.iter().map(|t| t.spans.tid).collect();
            assert_eq!(tids, [tid]);
            assert_same(&span_lines(&per_thread), &span_lines(&m));
        };
        check(&trace);
        trace.streams[0].recorded_tid = None;
        trace.switches = vec![ptscope_formats::snapshot::CpuSwitch {
            time: 0,
            cpu: 3,
            pid,
            tid,
        }];
        check(&trace);
        // Neither: nothing says whose trace it is.
        trace.switches.clear();
        let err = decode_trace(&snap, &trace, &DecodeOptions::default())
            .err()
            .expect("an error");
        assert!(err.to_string().contains("context-switch"), "{err}");
    }

    /// A trace whose config has no TSC (`tsc=0`) is placed by instruction
    /// count, by both engines, in one walk and in chunks: every span
    /// within the instructions walked, and the model says so.
    #[test]
    fn a_trace_without_tsc_counts_instructions() {
        let snap = demo();
        let timed = decode_snapshot(&snap, &DecodeOptions::default()).unwrap();
        assert_eq!(timed.unit, TimeUnit::Ns);
        let mut trace = snap.trace().unwrap();
        trace.pt_attr.config &= !trace.params.tsc_bit;
        assert_eq!(time_unit(&trace), TimeUnit::Insns);
        let mut canon = Vec::new();
        for (engine, parallel) in [
            (Engine::Flow, Parallel::sequential()),
            (Engine::Flow, Parallel::default()),
            (Engine::Libipt, Parallel::sequential()),
        ] {
            let opts = DecodeOptions {
                engine,
                parallel,
                ..DecodeOptions::default()
            };
            let m = decode_trace(&snap, &trace, &opts).unwrap();
            assert_eq!(m.unit, TimeUnit::Insns);
            assert_eq!(m.span_count(), timed.span_count());
            let t = &m.threads[0];
            let (lo, hi) = m.time_range().unwrap();
            assert!(lo < 10 && hi > t.walk.instructions / 2, "{lo}..{hi}");
            assert!(hi <= t.walk.instructions, "{hi} > {}", t.walk.instructions);
            // The fine pass counts the same instructions.
            let lines = m.lines.as_ref().unwrap();
            let seg = lines.decode_segment(t, 1, None).unwrap();
            let first = seg.insns.first().unwrap();
            let last = seg.insns.last().unwrap();
            assert_eq!(first.start, t.checkpoints[1].time);
            assert_eq!(last.start - first.start, seg.insns.len() as u64 - 1);
            canon.push(m.canonical());
        }
        assert_same(&canon[0], &canon[1]);
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
            for (a, b) in one.threads.iter().zip(&many.threads) {
                assert_eq!(a.checkpoints, b.checkpoints);
                assert_eq!(a.checkpoint_frames, b.checkpoint_frames);
            }
        }
    }

    /// `trace` decoded in one walk, and in chunks cut at every PSB.
    fn one_walk_and_chunks(snap: &Snapshot, trace: &Trace) -> (Model, Model) {
        let decode = |parallel| {
            let opts = DecodeOptions {
                parallel,
                ..DecodeOptions::default()
            };
            decode_trace(snap, trace, &opts).unwrap().model
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

    /// A PSB+ cut short by the next PSB (damaged, or the buffer wrapped)
    /// with tracing on: one walk reads both as one PSB+ and checkpoints
    /// both at once, owing no trace-begin. A chunk that starts at the
    /// first owes the begin its sync asks for at both, and mended only
    /// its first checkpoint; a chunk that holds that PSB alone told the
    /// next that tracing was off.
    #[test]
    fn a_psb_plus_cut_short_by_a_psb_at_a_seam_begins_nothing() {
        let snap = demo();
        let mut trace = snap.trace().unwrap();
        let s = &mut trace.streams[0];
        let psbs = psb_offsets(&s.data);
        assert!(psbs.len() > 4);
        let at = psbs[psbs.len() / 2];
        let mut data = s.data[..at].to_vec();
        // PSB, PAD (a PSB right after a PSB is where the pattern ends).
        data.extend_from_slice(&crate::packet::PSB_BYTES);
        data.push(0);
        let real = data.len();
        data.extend_from_slice(&s.data[at..]);
        s.data = data.into();
        let (cut, real) = (at as u64, real as u64);
        let decode = |parallel| {
            let opts = DecodeOptions {
                parallel,
                ..DecodeOptions::default()
            };
            decode_trace(&snap, &trace, &opts).unwrap()
        };
        let one = decode(Parallel::sequential());
        let begins = |m: &Model, off| {
            let c = m.threads.iter().flat_map(|t| &t.checkpoints);
            let c = c.filter(|c| c.queue == 0).find(|c| c.offset == off);
            c.expect("a checkpoint at each PSB").begins
        };
        assert!(!begins(&one, cut) && !begins(&one, real));
        // Chunks cut at both PSBs, and at the first alone.
        for bytes in [1, (real - cut + 1) as usize] {
            let many = decode(Parallel {
                workers: 2,
                chunk_bytes: bytes,
                first_chunk_bytes: bytes,
                retime: false,
                in_order: true,
            });
            assert_same(&one.canonical(), &many.canonical());
        }
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

    /// After a flow error the walk resumes at the next TIP, not at the
    /// next PSB (as perf does), and chunks still give what one walk gives.
    #[test]
    fn chunks_resume_after_flow_errors_as_one_walk_does() {
        use crate::packet::{IpKind, Packet, Packets};
        let snap = demo();
        let mut trace = snap.trace().unwrap();
        let mut damaged = 0;
        for s in &mut trace.streams {
            let mut data = s.data.to_vec();
            let tips: Vec<(usize, u8)> = Packets::new(&s.data)
                .filter_map(|(at, p)| match p {
                    Ok(Packet::Tip {
                        kind: IpKind::Tip,
                        ipb: ipb @ (2 | 3 | 4 | 6),
                        ..
                    }) => Some((at, ipb)),
                    _ => None,
                })
                .collect();
            // Every third far TIP goes to 0x10, where nothing is mapped.
            for &(at, ipb) in tips.iter().step_by(3) {
                let len = [0, 2, 4, 6, 6, 0, 8][ipb as usize];
                data[at + 1..at + 1 + len].fill(0);
                data[at + 1] = 0x10;
                damaged += 1;
            }
            s.data = data.into();
        }
        assert!(damaged > 3, "{damaged}");
        let (one, many) = one_walk_and_chunks(&snap, &trace);
        let errors: usize = one.threads.iter().map(|t| t.walk.errors.len()).sum();
        assert!(errors >= damaged, "{errors} errors for {damaged} bad TIPs");
        assert_same(&one.canonical(), &many.canonical());
    }

    /// Decoded for real: a raw dump whose code lies outside the one image
    /// given decodes to no call, and the thread says why.
    #[test]
    fn a_decode_that_finds_no_code_says_why() {
        use crate::block::DecoderConfig;
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("code");
        std::fs::write(&image, [0x90u8; 0x20]).unwrap();
        // PSB+, then TIP.PGE to 0x5000, where no image is, and a TIP
        // that only decoding the code there could bind.
        let mut pt = crate::packet::PSB_BYTES.to_vec();
        pt.extend([0x02, 0x23]);
        pt.push(0x11 | (6 << 5));
        pt.extend(0x5000u64.to_le_bytes());
        pt.push(0x0d | (6 << 5));
        pt.extend(0x5010u64.to_le_bytes());
        pt.push(0x00);
        for engine in [Engine::Flow, Engine::Libipt] {
            let m = decode_raw(
                std::path::Path::new("raw.pt"),
                &pt,
                &[(image.clone(), 0x1000)],
                &DecoderConfig::default(),
                engine,
            )
            .unwrap();
            let why = m.threads[0].diagnosis(&m.funcs).unwrap_or_default();
            assert!(
                why.starts_with("0 calls: ") && why.contains("decode error"),
                "{engine:?}: {why} {:?}",
                m.canonical()
            );
        }
    }
}
