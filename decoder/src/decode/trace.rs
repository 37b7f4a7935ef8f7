//! Decoding a snapshot's trace, stage by stage: every per-thread queue,
//! then every per-CPU queue divided among threads by the switch sideband,
//! then the marks, the fine pass's source and the warnings.

use crate::decoded::Decoded;
#[cfg(feature = "libipt")]
use crate::names::image::sections_with;
use crate::names::resolve::{ProcessSymbols, SymbolCache};
use crate::passes::coarse::chunks::decode_queue_chunked;
#[cfg(feature = "libipt")]
use crate::passes::coarse::{decode_queue, decode_thread};
use crate::passes::coarse::{scheduled, QueueThread, QueueWalk, ThreadBuilders, TimedItems};
use crate::passes::event::FuncTable;
use crate::passes::fine::{CpuSlots, LineSource, QueueParts};
use crate::passes::mark_scan;
use crate::pt::block::DecoderConfig;
#[cfg(feature = "libipt")]
use crate::pt::ffi::{BlockDecoder, Image};
use crate::pt::memory::Memory;
use crate::pt::timing::ToNs;
use ptscope_formats::{snapshot::Snapshot, snapshot::Trace};
use ptscope_model::CpuTrack;
use ptscope_model::{Mark, Marks};
use ptscope_model::{Model, ThreadModel, TimeUnit};
use std::collections::HashMap;
use std::sync::Arc;

use super::*;

/// One decode of a trace: what every stage reads (the input, its options
/// and what [`prepare`] set up) and what the stages add to (functions,
/// processes with their images, threads). Each stage is a method taking
/// the run as it stands.
struct Run<'a> {
    snap: &'a Snapshot,
    trace: &'a Trace<'a>,
    opts: &'a DecodeOptions,
    cfg: DecoderConfig,
    loaders: Loaders,
    symbols: SymbolCache,
    /// What setting up told the user.
    setup_warnings: Vec<String>,
    /// perf time of a TSC value (or the instruction count itself), for
    /// every stage and, afterwards, the fine pass.
    clock: ToNs,
    unit: TimeUnit,
    /// Each queue's PSB offsets, in `trace.streams` order.
    queue_psbs: Vec<Vec<u64>>,
    funcs: FuncTable,
    missing_binaries: Vec<String>,
    procs: HashMap<i32, Proc>,
    threads: Vec<ThreadModel>,
}

/// What the per-CPU stage learned that the later ones need: who ran on
/// each CPU when, and which thread and process each slot is.
#[derive(Default)]
struct CpuQueues {
    schedules: Schedules,
    slots: CpuSlots,
    pids: Vec<i32>,
    slot_tids: Vec<i32>,
}

/// The process of thread `tid` (a thread the sideband does not know is
/// taken for a process of its own).
fn pid_of(trace: &Trace, tid: i32) -> i32 {
    trace.thread(tid).map_or(tid, |t| t.pid)
}

fn comm_of(trace: &Trace, tid: i32) -> String {
    trace
        .thread(tid)
        .map(|t| t.comm.clone())
        .unwrap_or_default()
}

/// Whether the options ask for thread `tid`.
fn wanted(opts: &DecodeOptions, tid: i32) -> bool {
    opts.threads.as_ref().is_none_or(|t| t.contains(&tid))
}

/// The engine's `error` in starting on `snap`.
fn setup(snap: &Snapshot) -> impl Fn(PtError) -> DecodeError + '_ {
    |error| DecodeError::Setup {
        path: snap.path.clone(),
        error,
    }
}

/// The error to stop with if the user cancelled.
fn cancelled(snap: &Snapshot, progress: Option<&DecodeProgress>) -> Result<(), DecodeError> {
    match progress.is_some_and(|p| p.is_cancelled()) {
        true => Err(DecodeError::Cancelled {
            path: snap.path.clone(),
        }),
        false => Ok(()),
    }
}

/// Decodes every thread of `trace` (of `snap`), or those `opts` selects:
/// the per-thread queues, then the per-CPU queues, then what needs them
/// all (marks, the fine pass's source, the warnings).
pub fn decode_trace(
    snap: &Snapshot,
    trace: &Trace,
    opts: &DecodeOptions,
) -> Result<Decoded, DecodeError> {
    let mut run = Run::new(snap, trace, opts)?;
    if opts.parallel.workers <= 1 {
        run.thread_queues()?;
        let cpu = run.cpu_queues()?;
        return Ok(run.finish(cpu, Vec::new()));
    }
    // The marks need the packets alone, not the flow: on more than one
    // core they are read while the flow is decoded, rather than after it
    // on one core.
    let (cfg, clock) = (run.cfg, run.clock);
    std::thread::scope(|s| {
        let scans = s.spawn(move || {
            trace
                .streams
                .iter()
                .map(|st| {
                    st.tid
                        .is_none_or(|t| wanted(opts, t))
                        .then(|| mark_scan::scan(&st.data, &cfg, &clock))
                })
                .collect::<Vec<_>>()
        });
        let decoded = run.thread_queues().and_then(|()| run.cpu_queues());
        let scans = scans
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok(run.finish(decoded?, scans))
    })
}

impl<'a> Run<'a> {
    /// Sets the decode up and tells the window how much there is to do.
    fn new(
        snap: &'a Snapshot,
        trace: &'a Trace<'a>,
        opts: &'a DecodeOptions,
    ) -> Result<Run<'a>, DecodeError> {
        let Prepared {
            cfg,
            loaders,
            symbols,
            filter_warning,
            kernel_warning,
        } = prepare(snap, trace, opts)?;
        let (to_ns, unit) = clock_of(trace);
        let queue_psbs: Vec<Vec<u64>> = trace.streams.iter().map(|s| psbs_of(&s.data)).collect();
        if let Some(p) = opts.progress.as_deref() {
            let chosen = || {
                trace
                    .streams
                    .iter()
                    .zip(&queue_psbs)
                    .filter(|(s, _)| s.tid.is_none_or(|t| wanted(opts, t)))
            };
            let total: usize = chosen().map(|(_, p)| p.len()).sum();
            let bytes: usize = chosen().map(|(s, _)| s.data.len()).sum();
            p.begin(total as u64, bytes as u64);
        }
        Ok(Run {
            snap,
            trace,
            opts,
            cfg,
            loaders,
            symbols,
            setup_warnings: filter_warning.into_iter().chain(kernel_warning).collect(),
            clock: to_ns,
            unit,
            queue_psbs,
            funcs: FuncTable::default(),
            missing_binaries: Vec::new(),
            procs: HashMap::new(),
            threads: Vec::new(),
        })
    }

    /// Stage one: every per-thread queue, decoded on its own, each thread
    /// offered to the window as soon as it is done.
    fn thread_queues(&mut self) -> Result<(), DecodeError> {
        let (snap, trace, opts) = (self.snap, self.trace, self.opts);
        let progress = opts.progress.as_deref();
        let unit = self.unit;
        let to_ns: &ToNs = &self.clock;
        for (s, psbs) in trace.streams.iter().zip(&self.queue_psbs) {
            let Some(tid) = s.tid else { continue };
            if !wanted(opts, tid) {
                continue;
            }
            let pid = pid_of(trace, tid);
            let (image, resolver) = add_proc(
                &mut self.procs,
                pid,
                (snap, trace),
                &mut self.loaders,
                &mut self.symbols,
                &mut self.missing_binaries,
                opts.parallel.workers,
            )?;
            // Its debug files are in hand (or not to be had): no transfer is
            // waited on any more, even one that failed midway.
            if let Some(p) = progress {
                p.set_waiting_on(None);
            }
            let thread = (pid, tid, comm_of(trace, tid));
            let funcs = &mut self.funcs;
            let d = match image {
                #[cfg(feature = "libipt")]
                ProcImage::Libipt(isids) => {
                    let image = new_image(&self.loaders.cache, isids).map_err(setup(snap))?;
                    let dec = BlockDecoder::new(&s.data, &self.cfg).map_err(setup(snap))?;
                    decode_thread(
                        dec,
                        s.idx,
                        &image,
                        resolver,
                        funcs,
                        (to_ns, unit),
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
                        to_ns,
                        unit,
                        psbs,
                        stop_at_psb: false,
                        progress,
                    };
                    // First spans as soon as the first chunk is in; then a
                    // new partial model each time the spans double (a copy
                    // each).
                    let (threads, missing) = (&self.threads, &self.missing_binaries);
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
                            partial_model(partial, funcs, missing, unit)
                        });
                        if published {
                            offered = n;
                        }
                    };
                    decode_queue_chunked(
                        &s.data,
                        &self.cfg,
                        walk,
                        std::slice::from_mut(resolver),
                        funcs,
                        &mut sink,
                        &opts.parallel,
                        on_chunk,
                    )
                    .map(|figures| {
                        sink.add_figures(figures);
                        sink.finish_on(opts.parallel.workers)
                            .pop()
                            .expect("one thread in, one out")
                    })
                }
            }
            .map_err(setup(snap))?;
            cancelled(snap, progress)?;
            self.threads.push(ThreadModel::new(d, Some(s.idx)));
            if let Some(p) = progress {
                p.offer(|| {
                    partial_model(
                        self.threads.clone(),
                        &self.funcs,
                        &self.missing_binaries,
                        unit,
                    )
                });
            }
        }
        Ok(())
    }

    /// Who runs traced code on the CPUs of a per-CPU trace: one slot per
    /// thread the switch sideband (or, without any, the AUXTRACE records)
    /// names, with the processes they belong to. An error if the trace
    /// cannot tell its threads apart.
    fn cpu_threads(&self) -> Result<(Vec<QueueThread>, HashMap<i32, usize>), DecodeError> {
        let trace = self.trace;
        let mut queue_threads: Vec<QueueThread> = Vec::new();
        let mut slot_of: HashMap<i32, usize> = HashMap::new();
        let mut pids: Vec<i32> = Vec::new();
        let fallbacks: Vec<(i32, i32)> = trace
            .streams
            .iter()
            .filter(|s| s.tid.is_none())
            .filter_map(|s| {
                fallback(trace, s.cpu.unwrap_or(0)).map(|tid| (pid_of(trace, tid), tid))
            })
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
            Some(b) => tid == b || pid == pid_of(trace, b) || trace.thread(tid).is_some(),
        };
        for (sw_pid, sw_tid) in runners {
            // tid 0 is the idle task: no user code of its own.
            if sw_tid <= 0 || slot_of.contains_key(&sw_tid) {
                continue;
            }
            let pid = if sw_pid > 0 {
                sw_pid
            } else {
                pid_of(trace, sw_tid)
            };
            if !follows(pid, sw_tid) {
                continue;
            }
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
                comm: comm_of(trace, sw_tid),
                proc,
            });
        }
        if queue_threads.is_empty() {
            return Err(DecodeError::Input {
                path: self.snap.path.clone(),
                problem: "its trace is per CPU but it has no context-switch records to tell \
                          the threads apart (record with `perf record --switch-events`)"
                    .into(),
            });
        }
        Ok((queue_threads, slot_of))
    }

    /// Stage two: every per-CPU queue, divided among threads by the switch
    /// sideband, decoded per CPU, then merged in time order into one stack
    /// per thread.
    fn cpu_queues(&mut self) -> Result<CpuQueues, DecodeError> {
        let (snap, trace, opts) = (self.snap, self.trace, self.opts);
        if trace.streams.iter().all(|s| s.tid.is_some()) {
            return Ok(CpuQueues::default());
        }
        let progress = opts.progress.as_deref();
        let unit = self.unit;
        let to_ns: &ToNs = &self.clock;
        let (queue_threads, slot_of) = self.cpu_threads()?;
        // The processes, in the order the slots first name them.
        let mut pids: Vec<i32> = Vec::new();
        for t in &queue_threads {
            if !pids.contains(&t.pid) {
                pids.push(t.pid);
            }
        }
        for &pid in &pids {
            add_proc(
                &mut self.procs,
                pid,
                (snap, trace),
                &mut self.loaders,
                &mut self.symbols,
                &mut self.missing_binaries,
                opts.parallel.workers,
            )?;
        }
        if let Some(p) = progress {
            p.set_waiting_on(None);
        }
        let mut taken: Vec<(i32, Proc)> = pids
            .iter()
            .map(|p| (*p, self.procs.remove(p).expect("added above")))
            .collect();
        let (proc_images, mut resolvers): (Vec<&ProcImage>, Vec<&mut ProcessSymbols>) =
            taken.iter_mut().map(|(_, p)| (&p.0, &mut p.1)).unzip();
        #[cfg(feature = "libipt")]
        let mut libipt_images = Vec::new();
        let mut memories: Vec<&Memory> = Vec::new();
        for image in &proc_images {
            match image {
                #[cfg(feature = "libipt")]
                ProcImage::Libipt(isids) => {
                    libipt_images.push(new_image(&self.loaders.cache, isids).map_err(setup(snap))?)
                }
                ProcImage::Flow(mem) => memories.push(mem),
            }
        }
        #[cfg(feature = "libipt")]
        let libipt_refs: Vec<&Image> = libipt_images.iter().collect();
        let thread_procs: Vec<usize> = queue_threads.iter().map(|t| t.proc).collect();
        let mut builders = ThreadBuilders::new(&queue_threads);
        let mut queues = Vec::new();
        let mut schedules = Schedules::new();
        for (s, psbs) in trace.streams.iter().zip(&self.queue_psbs) {
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
            if let Some(&slot) = fallback(trace, cpu).and_then(|tid| slot_of.get(&tid)) {
                schedule.push((0, slot));
            }
            let mut items = TimedItems::default();
            let figures = match opts.engine {
                #[cfg(feature = "libipt")]
                Engine::Libipt => decode_queue(
                    BlockDecoder::new(&s.data, &self.cfg).map_err(setup(snap))?,
                    s.idx,
                    &libipt_refs,
                    &mut resolvers,
                    &thread_procs,
                    &schedule,
                    &mut self.funcs,
                    (to_ns, unit),
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
                        to_ns,
                        unit,
                        psbs,
                        stop_at_psb: false,
                        progress,
                    };
                    decode_queue_chunked(
                        &s.data,
                        &self.cfg,
                        walk,
                        &mut owned,
                        &mut self.funcs,
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
            .map_err(setup(snap))?;
            cancelled(snap, progress)?;
            builders.add_figures(figures);
            queues.push(items);
            schedules.insert(s.idx, schedule);
        }
        TimedItems::merge_into(queues, &mut builders, &self.funcs);
        drop(resolvers);
        #[cfg(feature = "libipt")]
        {
            drop(libipt_refs);
            drop(libipt_images);
        }
        drop(memories);
        drop(proc_images);
        self.procs.extend(taken);
        for (t, d) in queue_threads.iter().zip(builders.finish()) {
            if !wanted(opts, t.tid) || (d.spans.span_count() == 0 && d.walk.blocks == 0) {
                continue;
            }
            self.threads.push(ThreadModel::new(d, None));
        }
        Ok(CpuQueues {
            schedules,
            slots: CpuSlots {
                slot_of,
                thread_procs,
            },
            pids,
            slot_tids: queue_threads.iter().map(|t| t.tid).collect(),
        })
    }

    /// Stage three: what needs every thread decoded: the marks and CPU
    /// lanes, the fine pass's source, and the warnings.
    /// `scans`: the queues' marks, by stream, where they were read already.
    fn finish(mut self, cpu: CpuQueues, scans: Vec<Option<mark_scan::Scan>>) -> Decoded {
        let (snap, trace, opts) = (self.snap, self.trace, self.opts);
        self.threads.sort_by_key(|t| (t.spans.pid, t.spans.tid));
        let (cpus, untimed) = add_marks(
            trace,
            (&self.cfg, &self.clock),
            &mut self.threads,
            (&cpu.schedules, &cpu.slot_tids),
            scans,
        );
        let marks_warning = (untimed > 0).then(|| {
            format!(
                "{untimed} PTWRITE, frequency or power packets came before any timing packet \
                 (or the trace has none) and are not shown"
            )
        });
        // What the fine pass needs later: per-CPU processes first, in the
        // order their slots name them.
        let mut order: Vec<i32> = cpu.pids;
        let mut rest: Vec<i32> = self
            .procs
            .keys()
            .copied()
            .filter(|p| !order.contains(p))
            .collect();
        rest.sort_unstable();
        order.extend(rest);
        let lines = line_source(
            (snap, trace),
            self.cfg,
            (self.clock, self.unit),
            (order, &mut self.procs),
            (&mut self.loaders, &self.symbols),
            (
                std::mem::take(&mut self.queue_psbs),
                &|t| wanted(opts, t),
                cpu.schedules,
            ),
            cpu.slots,
            self.funcs.clone(),
        );
        // Keep the section cache alive until every image is gone.
        drop(self.procs);
        drop(self.loaders);
        let warnings = [
            self.setup_warnings,
            input_warnings(trace, &|t| wanted(opts, t)),
            self.symbols.notes().to_vec(),
            stack_warnings(&self.threads),
            marks_warning.into_iter().collect(),
            libipt_resync_warning(opts.engine, &self.threads)
                .into_iter()
                .collect(),
        ]
        .concat();
        Decoded {
            model: Model {
                funcs: self.funcs,
                missing_binaries: self.missing_binaries,
                warnings,
                threads: self.threads,
                unit: self.unit,
                cpus,
                cbr_mhz: cbr_mhz(&trace.params),
            },
            lines: Some(Arc::new(lines)),
        }
    }
}

/// The model so far, for a window to show while the rest decodes.
fn partial_model(
    threads: Vec<ThreadModel>,
    funcs: &FuncTable,
    missing_binaries: &[String],
    unit: TimeUnit,
) -> Model {
    Model {
        funcs: funcs.clone(),
        threads,
        missing_binaries: missing_binaries.to_vec(),
        warnings: Vec::new(),
        unit,
        ..Model::default()
    }
}

/// Who runs on CPU `cpu` if no switch (nor ITRACE_START) record names
/// anyone there at all: the thread its AUXTRACE records name, as perf
/// takes it.
fn fallback(trace: &Trace, cpu: u32) -> Option<i32> {
    let named = trace.switches.iter().any(|sw| sw.cpu == cpu);
    trace
        .streams
        .iter()
        .filter(|s| s.tid.is_none() && s.cpu.unwrap_or(0) == cpu && !named)
        .find_map(|s| s.recorded_tid)
}

/// Reads every queue's marks ([`crate::marks`]): a per-thread queue's go
/// to its thread; a per-CPU queue's to its CPU's track and, by its
/// schedule, to the thread that ran (`slot_tids` names each slot's
/// thread). `scans` has the marks of the streams read already, by stream.
/// Returns the CPU tracks, and how many marks had no time.
pub(super) fn add_marks(
    trace: &Trace,
    (cfg, to_ns): (&DecoderConfig, &ToNs),
    threads: &mut [ThreadModel],
    (schedules, slot_tids): (&Schedules, &[i32]),
    mut scans: Vec<Option<mark_scan::Scan>>,
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
    for (i, s) in trace.streams.iter().enumerate() {
        let mut scan = || {
            scans
                .get_mut(i)
                .and_then(Option::take)
                .unwrap_or_else(|| mark_scan::scan(&s.data, cfg, to_ns))
        };
        if let Some(tid) = s.tid {
            if !threads.iter().any(|t| t.spans.tid == tid) {
                continue;
            }
            let scan = scan();
            untimed += scan.untimed;
            per_tid.entry(tid).or_default().extend(scan.marks);
            continue;
        }
        let cpu = s.cpu.unwrap_or(0);
        let scan = scan();
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
            slices: ptscope_model::slices(&switches, &outs, end.max(last)),
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
pub(super) type Schedules = HashMap<u32, Vec<(u64, usize)>>;

/// The fine pass's source: the processes in `order` (taken out of
/// `procs`), each queue's trace, PSBs and schedule.
#[allow(clippy::too_many_arguments)]
// Without libipt, every process's code is already in memory: the snapshot,
// loaders and symbols are only needed to read libipt's processes'.
#[cfg_attr(
    not(feature = "libipt"),
    allow(unused_variables, clippy::infallible_destructuring_match)
)]
pub(super) fn line_source(
    (snap, trace): (&Snapshot, &Trace),
    cfg: DecoderConfig,
    clock: (ToNs, TimeUnit),
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
            #[cfg(feature = "libipt")]
            ProcImage::Libipt(_) => {
                let (secs, _) = sections_with(snap, trace, Some(pid), symbols.lookup());
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
            // The trace as the snapshot holds it (mapped), not a copy,
            // unless the queue joined several buffers into bytes of its
            // own.
            data: snap
                .perf_data
                .share(&s.data)
                .unwrap_or_else(|| s.data.to_vec().into()),
            psbs,
            schedule: schedules.remove(&s.idx).unwrap_or_default(),
        })
        .collect();
    LineSource::new(cfg, clock, fine_queues, fine_procs, cpu_slots, funcs)
        .with_sources(symbols.sources())
}
