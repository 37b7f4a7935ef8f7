//! This module captures with real Intel PT through perf_event_open, with no
//! perf tool in between: it opens the events, maps their buffers and collects
//! the sideband itself.
//!
//! Each traced thread (or each CPU, with `per_cpu`) gets a PT event whose AUX
//! area is mapped read-only, which puts it in overwrite mode: the hardware
//! keeps the newest trace and never stalls. A dummy event sends its sideband
//! records to the PT event's data ring, which a collector thread drains
//! continuously. A snapshot disables the PT events, copies the newest bytes
//! of each AUX area, and enables them again for the next one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::event::{pt_attr, EventOptions};
use super::pmu::{Pmu, SYSFS_PMUS};
use super::range;
use super::slow_call::{self, CallTimer};
use super::timing::{PtConfig, Timing};
use crate::error::CaptureError;
use crate::filter::FilterRange;
use crate::perf_event::aux::AuxCursor;
use crate::perf_event::breakpoint::{Breakpoint, Hit};
use crate::perf_event::mmap::{aux_head, page_size, AuxArea, DataRing};
use crate::perf_event::sideband::{self, Collector};
use crate::perf_event::{online_cpus, sys, Event, PerfError, Privileges, Scope};
use crate::procfs;
use crate::recording::{
    Capture, CpuTrace, PtSetup, Sideband, SidebandEvent, StopReason, Target, ThreadTrace,
};
use crate::tracee;
use crate::trigger::{ArmAfter, Range, RangeSymbols, SymbolTrigger, Trigger};
use ptscope_formats::pt_params::PtParams;

/// Data-ring pages per event: sideband only, drained every millisecond.
const DATA_PAGES: usize = 16;

/// What a refused `--range` breakpoint means.
const REFUSED_RANGE: &str =
    "the kernel refused an AUX pause/resume breakpoint in the PT event's group";

#[derive(Clone, Debug)]
pub struct Options {
    /// The timing asked for; `None`: the backend's default (`normal` on
    /// Intel PT, [`crate::emulated::settings::DEFAULT_TIMING`] emulated).
    pub timing: Option<Timing>,
    /// AUX bytes per thread (or per CPU); rounded down to a power-of-two
    /// number of pages.
    pub size: u64,
    pub trigger: Trigger,
    pub kernel: bool,
    pub per_cpu: bool,
    /// Snapshots to take; after each the trigger is re-armed.
    pub snapshots: usize,
    /// Set by the caller (SIGINT, the GUI's button): snapshot now.
    pub interrupt: Arc<AtomicBool>,
    /// Set by the caller: stop without a snapshot, leave the target alone.
    pub cancel: Arc<AtomicBool>,
    /// The `intel_pt` PMU directory (tests point this at fixtures).
    pub pmu_dir: PathBuf,
    /// IP filter ranges (`--filter`); none traces everything.
    pub filter: Vec<FilterRange>,
    /// When a trigger on a function may start firing.
    pub arm_after: Option<ArmAfter>,
    /// Range capture: the trace runs only from a thread's entry to START
    /// to its entry to STOP (`super::range`).
    pub range: Option<Range>,
}

impl Options {
    pub fn new(trigger: Trigger) -> Options {
        Options {
            timing: None,
            size: 4 << 20,
            trigger,
            kernel: false,
            per_cpu: false,
            snapshots: 1,
            interrupt: Arc::new(AtomicBool::new(false)),
            cancel: Arc::new(AtomicBool::new(false)),
            pmu_dir: PathBuf::from(SYSFS_PMUS).join("intel_pt"),
            filter: Vec::new(),
            arm_after: None,
            range: None,
        }
    }
}

/// What the backend tells its caller while it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Armed {
        threads: usize,
    },
    /// Tracing into `units` buffers holding `buffer_bytes` in all.
    Waiting {
        units: usize,
        buffer_bytes: u64,
    },
    Triggered {
        snapshot: usize,
    },
}

/// The PT event of one thread or CPU, with its buffers.
struct Unit {
    tid: i32,
    cpu: i32,
    pt: Event,
    /// `--range`'s resume and pause breakpoints, in the PT event's group,
    /// once START and STOP are found.
    range: Vec<Event>,
    _dummy: Event,
    ring: Arc<DataRing>,
    aux: AuxArea,
    cursor: AuxCursor,
}

struct Session<'a> {
    opts: &'a Options,
    pmu: Pmu,
    cfg: PtConfig,
    privs: Privileges,
    pid: i32,
    units: Vec<Unit>,
    collector: Collector,
    aux_size: usize,
    breakpoint: Option<Breakpoint>,
    symbol: Option<SymbolTrigger>,
    /// The slow-call trigger: its function and threshold, and once the
    /// function is found, the timer its breakpoints feed.
    slow: Option<(String, u64)>,
    timer: Option<CallTimer>,
    /// When tracing began: `--arm-after` counts from it (the AUX head is
    /// unknown while tracing, so this is the history the ring can hold).
    started: Instant,
    /// Times a trigger would have fired before `--arm-after` armed it.
    unarmed: u64,
    /// Mapped files the slow-call trigger's function was looked for in.
    searched: std::collections::HashSet<String>,
    synthesized: Vec<Sideband>,
    comms: HashMap<i32, String>,
    warnings: Vec<String>,
    /// Threads whose events could not be opened (not retried).
    untraceable: Vec<i32>,
    /// `--range`'s START and STOP, resolved as the mappings appear.
    range: Option<RangeSymbols>,
}

/// The AUX size for `size`: a power-of-two number of pages, at least one.
pub fn aux_size(size: u64) -> usize {
    let pages = (size as usize / page_size()).max(1);
    (1usize << (usize::BITS - 1 - pages.leading_zeros())) * page_size()
}

/// Checks that a capture can start here: the PMU exists, the timing fits
/// its caps, and the privileges allow the scope. Returns the PMU and config.
pub fn prepare(opts: &Options) -> Result<(Pmu, PtConfig, Vec<String>), CaptureError> {
    let pmu = Pmu::read(&opts.pmu_dir)?;
    if opts.range.is_some() {
        let release = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        range::check_kernel(&release).map_err(CaptureError::Invalid)?;
    }
    let mut warnings = Vec::new();
    let timing = opts.timing.clone().unwrap_or_default();
    let cfg = match timing.resolve(&pmu) {
        Ok(cfg) => cfg,
        // A preset this CPU cannot do (no cycle-accurate mode before
        // Skylake) falls back to perf's defaults, as magic-trace does.
        Err(e) if matches!(timing, Timing::Normal | Timing::High) => {
            warnings.push(format!("{e}; using timing `low`"));
            Timing::Low.resolve(&pmu)?
        }
        Err(e) => return Err(e.into()),
    };
    super::filter::kernel_filter(&pmu.caps, &opts.filter, opts.per_cpu)?;
    let privs = Privileges::read();
    for scope in [
        Some(Scope::PerThread),
        opts.kernel.then_some(Scope::Kernel),
        opts.per_cpu.then_some(Scope::PerCpu),
    ]
    .into_iter()
    .flatten()
    {
        if let Err(why) = privs.allows(scope) {
            return Err(CaptureError::Perf(PerfError::Open {
                what: "the Intel PT event".into(),
                errno: nix::errno::Errno::EACCES,
                guidance: format!(
                    "{why}. {}",
                    privs.explain_open(nix::errno::Errno::EACCES, scope)
                ),
            }));
        }
    }
    Ok((pmu, cfg, warnings))
}

/// Whether process `pid` is gone or a zombie.
fn exited(pid: i32) -> bool {
    matches!(procfs::state(pid), None | Some('Z' | 'X'))
}

/// Captures `target`, calling `on_snapshot` with each snapshot. The target
/// is never stopped or killed: an attached process runs on, a spawned one
/// is handed back in the last capture's `child` to be waited for.
pub fn capture(
    target: Target,
    opts: &Options,
    mut status: impl FnMut(Status),
    mut on_snapshot: impl FnMut(Capture) -> Result<(), CaptureError>,
) -> Result<(), CaptureError> {
    if opts.arm_after == Some(ArmAfter::Full) {
        return Err(CaptureError::Unsupported(
            "--arm-after full: the Intel PT backend cannot see its ring fill while it \
             traces; give a duration (how much history to wait for) instead"
                .into(),
        ));
    }
    let (pmu, cfg, warnings) = prepare(opts)?;
    let wall = Instant::now();
    let (pid, child, cmdline) = match &target {
        Target::Spawn { argv, cwd } => {
            let pid = tracee::spawn_stopped(argv, cwd.as_deref())?;
            // The child stops itself before exec; its events are opened now
            // and enabled by the kernel at the exec.
            let stopped = loop {
                match nix::sys::wait::waitpid(
                    nix::unistd::Pid::from_raw(pid),
                    Some(nix::sys::wait::WaitPidFlag::WUNTRACED),
                ) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other,
                }
            };
            if !matches!(stopped, Ok(nix::sys::wait::WaitStatus::Stopped(..))) {
                // Whatever happened, it is not left stopped.
                tracee::kill(pid, Signal::SIGCONT);
                tracee::reap_later(pid);
                return Err(CaptureError::Invalid(format!(
                    "`{}` did not start: {stopped:?}",
                    argv[0]
                )));
            }
            (pid, Some(pid), argv.clone())
        }
        Target::Attach(pid) => {
            if procfs::threads(*pid).is_err() {
                return Err(CaptureError::Invalid(format!("no process {pid}")));
            }
            (*pid, None, procfs::cmdline(*pid))
        }
    };
    let spawned = child.is_some();
    let mut s = Session {
        opts,
        aux_size: aux_size(opts.size),
        pmu,
        cfg,
        privs: Privileges::read(),
        pid,
        units: Vec::new(),
        collector: Collector::start(),
        breakpoint: None,
        symbol: match &opts.trigger {
            Trigger::Symbol(name) => Some(SymbolTrigger::new(name)),
            _ => None,
        },
        slow: match &opts.trigger {
            Trigger::SlowCall {
                symbol,
                slower_than,
            } => Some((symbol.clone(), *slower_than)),
            _ => None,
        },
        timer: None,
        started: Instant::now(),
        unarmed: 0,
        searched: std::collections::HashSet::new(),
        synthesized: Vec::new(),
        comms: HashMap::new(),
        warnings,
        untraceable: Vec::new(),
        range: opts.range.as_ref().map(RangeSymbols::new),
    };
    s.fit_aux_size();
    let mut setup = s.open_all(spawned);
    if spawned {
        if setup.is_ok() {
            setup = tracee::run_to_exec(pid, &cmdline[0]).and_then(|()| s.resolve_symbol());
        }
        // Let it run in any case: on error it runs untraced to its end.
        let _ = tracee::detach(pid, None);
        tracee::kill(pid, Signal::SIGCONT);
    }
    if let Err(e) = setup {
        if spawned {
            tracee::reap_later(pid);
        }
        return Err(e);
    }
    s.started = Instant::now();
    status(Status::Armed {
        threads: s.units.len(),
    });
    let mut child = child;
    let result = s.run(&mut child, &cmdline, wall, &mut status, &mut on_snapshot);
    // A spawned command not handed to the caller runs on; reap it then.
    if let Some(pid) = child {
        tracee::reap_later(pid);
    }
    result
}

impl Session<'_> {
    /// Waits for each trigger and takes its snapshot. A spawned command
    /// goes out in the last snapshot's `child`.
    fn run(
        &mut self,
        child: &mut Option<i32>,
        cmdline: &[String],
        wall: Instant,
        status: &mut impl FnMut(Status),
        on_snapshot: &mut impl FnMut(Capture) -> Result<(), CaptureError>,
    ) -> Result<(), CaptureError> {
        let opts = self.opts;
        let wanted = opts.snapshots.max(1);
        let mut exit_code = None;
        for taken in 1..=wanted {
            let (stop, hit) = self.wait_for_trigger(child, &mut exit_code, status)?;
            if stop == StopReason::Interrupted && opts.cancel.load(Ordering::Relaxed) {
                return Ok(());
            }
            let end_tsc = sys::rdtsc();
            for u in &self.units {
                let _ = u.pt.disable();
            }
            status(Status::Triggered { snapshot: taken });
            let last = taken == wanted || stop == StopReason::ProcessExit;
            let mut cap = self.snapshot(stop, hit, end_tsc, cmdline)?;
            cap.wall = wall.elapsed();
            cap.exit_code = exit_code;
            if last {
                cap.child = child.take();
            }
            on_snapshot(cap)?;
            if last {
                break;
            }
            // Hits while the snapshot was taken are stale, and the calls
            // they would have closed are forgotten with them.
            if let Some(bp) = &mut self.breakpoint {
                bp.discard();
            }
            if let Some(timer) = &mut self.timer {
                timer.forget_open();
            }
            for u in &self.units {
                let _ = u.pt.enable();
            }
            opts.interrupt.store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    fn event_options(&self, enable_on_exec: bool) -> EventOptions {
        EventOptions {
            kernel: self.opts.kernel,
            per_cpu: self.opts.per_cpu,
            enable_on_exec,
            start_paused: self.opts.range.is_some(),
        }
    }

    fn open_all(&mut self, spawned: bool) -> Result<(), CaptureError> {
        if self.opts.per_cpu {
            for cpu in online_cpus() {
                self.open_unit(-1, cpu as i32, false)?;
            }
        } else {
            for tid in procfs::threads(self.pid)? {
                self.open_unit(tid, -1, spawned)?;
            }
        }
        if !spawned {
            self.synthesize_existing();
            // A spawned child is resolved at its exec (`run_to_exec`):
            // before it, its maps are ptscope's own.
            self.resolve_symbol()?;
        }
        Ok(())
    }

    /// Shrinks the AUX size to what locked memory allows, with a warning,
    /// rather than failing at the first mmap.
    fn fit_aux_size(&mut self) {
        if self.privs.ipc_lock() {
            return;
        }
        let units = if self.opts.per_cpu {
            online_cpus().len()
        } else {
            procfs::threads(self.pid).map_or(1, |t| t.len())
        } as u64;
        let data = ((DATA_PAGES + 1) * page_size()) as u64;
        let fits = self.privs.aux_size_that_fits(units, data) as usize;
        if fits >= page_size() && fits < self.aux_size {
            self.warnings.push(format!(
                "the trace size per thread is {} KiB, not the {} KiB asked for: that is what locked memory allows for {units} threads (raise it with `ulimit -l`, kernel.perf_event_mlock_kb or CAP_IPC_LOCK)",
                fits / 1024,
                self.aux_size / 1024
            ));
            self.aux_size = fits;
        }
    }

    /// Opens the PT and sideband events of a thread (`cpu` -1) or a CPU
    /// (`tid` -1).
    fn open_unit(&mut self, tid: i32, cpu: i32, enable_on_exec: bool) -> Result<(), CaptureError> {
        let scope = if self.opts.per_cpu {
            Scope::PerCpu
        } else if self.opts.kernel {
            Scope::Kernel
        } else {
            Scope::PerThread
        };
        let what = if cpu >= 0 {
            format!("the Intel PT event on CPU {cpu}")
        } else {
            format!("the Intel PT event of thread {tid}")
        };
        let attr = pt_attr(&self.pmu, &self.cfg, self.event_options(enable_on_exec));
        let pid = if cpu >= 0 { -1 } else { tid };
        let pt = Event::open(&attr, pid, cpu).map_err(|e| PerfError::Open {
            guidance: self.privs.explain_open(e, scope),
            what: what.clone(),
            errno: e,
        })?;
        if let Some(filter) =
            super::filter::kernel_filter(&self.pmu.caps, &self.opts.filter, self.opts.per_cpu)?
        {
            pt.set_filter(&filter).map_err(|errno| PerfError::Ioctl {
                op: "PERF_EVENT_IOC_SET_FILTER",
                what: what.clone(),
                errno,
            })?;
        }
        let threads = (self.units.len() + 1) as u64;
        let ring = DataRing::map(&pt, DATA_PAGES).map_err(|e| PerfError::Mmap {
            guidance: self.privs.explain_mmap(e, self.aux_size as u64, threads),
            what: what.clone(),
            errno: e,
        })?;
        let aux = AuxArea::map(&pt, &ring, self.aux_size).map_err(|e| PerfError::Mmap {
            guidance: self.privs.explain_mmap(e, self.aux_size as u64, threads),
            what: what.clone(),
            errno: e,
        })?;
        let dummy_attr = sideband::dummy_attr(self.opts.kernel, self.opts.per_cpu, enable_on_exec);
        let dummy = Event::open(&dummy_attr, pid, cpu).map_err(|e| PerfError::Open {
            guidance: self.privs.explain_open(e, scope),
            what: format!("the sideband event for {what}"),
            errno: e,
        })?;
        dummy.set_output(&pt).map_err(|errno| PerfError::Ioctl {
            op: "PERF_EVENT_IOC_SET_OUTPUT",
            what: format!("the sideband event for {what}"),
            errno,
        })?;
        if !enable_on_exec {
            // Opened disabled: enabled only now that its buffers exist.
            for (ev, name) in [(&dummy, "sideband"), (&pt, "PT")] {
                ev.enable().map_err(|errno| PerfError::Ioctl {
                    op: "PERF_EVENT_IOC_ENABLE",
                    what: format!("the {name} event for {what}"),
                    errno,
                })?;
            }
        }
        let ring = Arc::new(ring);
        // Non-sample records of both events end in the same sample-id
        // trailer (IP is not part of it).
        self.collector.add(ring.clone(), sideband::SAMPLE_TYPE);
        if tid > 0 {
            if let Some(bp) = &mut self.breakpoint {
                bp.arm(tid)?;
            }
        }
        self.units.push(Unit {
            tid,
            cpu,
            pt,
            range: Vec::new(),
            _dummy: dummy,
            ring,
            aux,
            cursor: AuxCursor::new(),
        });
        Ok(())
    }

    /// What perf synthesizes for a process already running: its threads'
    /// names and its executable mappings, at the attach time.
    fn synthesize_existing(&mut self) {
        // Time 0, as perf stamps what it synthesizes: valid from the start.
        let time = 0;
        let pid = self.pid;
        if let Ok(tids) = procfs::threads(pid) {
            for tid in tids {
                let comm = procfs::comm(pid, tid);
                self.comms.insert(tid, comm.clone());
                self.synthesized.push(Sideband {
                    time,
                    cpu: 0,
                    event: SidebandEvent::Comm {
                        pid,
                        tid,
                        comm,
                        exec: false,
                    },
                });
            }
        }
        if let Ok(maps) = procfs::read_maps(pid) {
            for m in maps
                .into_iter()
                .filter(|m| m.exec && (m.is_file() || m.is_vdso()))
            {
                self.synthesized.push(Sideband {
                    time,
                    cpu: 0,
                    event: SidebandEvent::Mmap {
                        pid,
                        tid: pid,
                        mapping: m,
                    },
                });
            }
        }
    }

    fn tsc_to_perf(&self, tsc: u64) -> u64 {
        match self.units.first() {
            Some(u) => u.ring.time_conv().tsc_to_perf_time(tsc),
            None => 0,
        }
    }

    /// Resolves the trigger symbol once its library is mapped, and arms the
    /// breakpoint on every traced thread.
    fn resolve_symbol(&mut self) -> Result<(), CaptureError> {
        if let (Some((name, threshold)), None) = (&self.slow, &self.timer) {
            if let Ok(maps) = procfs::read_maps(self.pid) {
                // Files searched in vain are not read again every scan.
                let fresh: Vec<_> = maps
                    .into_iter()
                    .filter(|m| !self.searched.contains(&m.path))
                    .collect();
                self.searched.extend(fresh.iter().map(|m| m.path.clone()));
                if let Some(sites) = slow_call::call_sites(&fresh, name)? {
                    // Each call is two samples: a ring of 16 pages holds
                    // some 500 calls between two polls.
                    self.breakpoint = Some(Breakpoint::at(sites.addresses(), 16).inherited());
                    self.timer = Some(CallTimer::new(sites, *threshold));
                }
            }
        }
        if let Some(sym) = &mut self.symbol {
            if sym.address().is_none() {
                if let Ok(maps) = procfs::read_maps(self.pid) {
                    sym.resolve(&maps);
                }
            }
            if let (Some(addr), None) = (sym.address(), &self.breakpoint) {
                self.breakpoint = Some(Breakpoint::new(addr).inherited());
            }
        }
        self.arm_range()?;
        if let Some(bp) = &mut self.breakpoint {
            let tids: Vec<i32> = match procfs::threads(self.pid) {
                Ok(t) => t,
                Err(_) => return Ok(()),
            };
            for tid in tids {
                if let Err(e) = bp.arm(tid) {
                    let w = format!("the trigger's breakpoints are not armed on thread {tid}: {e}");
                    if !self.warnings.contains(&w) {
                        self.warnings.push(w);
                    }
                }
            }
        }
        Ok(())
    }

    /// `--range`: once START and STOP are found, gives every unit without
    /// them its resume and pause breakpoints, in its PT event's group (a
    /// thread's unit for that thread, a CPU's for that CPU).
    fn arm_range(&mut self) -> Result<(), CaptureError> {
        let Some(r) = &mut self.range else {
            return Ok(());
        };
        if r.addresses().is_none() {
            if let Ok(maps) = procfs::read_maps(self.pid) {
                r.resolve(&maps);
            }
        }
        let Some((start, stop)) = r.addresses() else {
            return Ok(());
        };
        for u in self.units.iter_mut().filter(|u| u.range.is_empty()) {
            let pid = if u.cpu >= 0 { -1 } else { u.tid };
            for (addr, resume) in [(start, true), (stop, false)] {
                let what = format!(
                    "the --range {} breakpoint at {addr:#x}",
                    if resume { "resume" } else { "pause" }
                );
                let attr = range::breakpoint(addr, resume);
                match Event::open_in_group(&attr, pid, u.cpu, Some(&u.pt)) {
                    Ok(ev) => u.range.push(ev),
                    // The thread is gone: its unit is drained as any other.
                    Err(nix::errno::Errno::ESRCH) => break,
                    Err(errno) => {
                        return Err(PerfError::Open {
                            guidance: REFUSED_RANGE.into(),
                            what,
                            errno,
                        }
                        .into())
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a trigger may fire: always, or once `--arm-after` has
    /// passed since tracing began.
    fn armed(&mut self) -> bool {
        // `Full` is refused before tracing starts (`capture`).
        let ok = match self.opts.arm_after {
            Some(ArmAfter::History(ns)) => self.started.elapsed() >= Duration::from_nanos(ns),
            _ => true,
        };
        if !ok {
            self.unarmed += 1;
        }
        ok
    }

    /// Follows new threads: any thread of the process without a unit gets
    /// one (per-thread mode). The trigger's breakpoints need no arming
    /// here: they are inherited by every thread an armed thread creates,
    /// from its first instruction, while this scan comes every 10 ms, too
    /// late for a thread that calls the function at once (and arming again
    /// would take a second debug register for the same address).
    fn follow_threads(&mut self) -> Result<(), CaptureError> {
        let Ok(tids) = procfs::threads(self.pid) else {
            return Ok(());
        };
        for tid in tids {
            if !self.opts.per_cpu
                && !self.units.iter().any(|u| u.tid == tid)
                && !self.untraceable.contains(&tid)
            {
                match self.open_unit(tid, -1, false) {
                    Ok(()) => {}
                    // It may have exited already.
                    Err(CaptureError::Perf(PerfError::Open {
                        errno: nix::errno::Errno::ESRCH,
                        ..
                    })) => {}
                    // Out of locked memory, fds or PT slots: the capture
                    // goes on without this thread.
                    Err(e) => {
                        let w = format!("thread {tid} is not traced: {e}");
                        if !self.warnings.contains(&w) {
                            self.warnings.push(w);
                        }
                        self.untraceable.push(tid);
                    }
                }
            }
        }
        Ok(())
    }

    fn wait_for_trigger(
        &mut self,
        child: &mut Option<i32>,
        exit_code: &mut Option<i32>,
        status: &mut impl FnMut(Status),
    ) -> Result<(StopReason, Option<Hit>), CaptureError> {
        let deadline = match self.opts.trigger {
            Trigger::Duration(ms) => Some(Instant::now() + Duration::from_millis(ms)),
            _ => None,
        };
        let mut last_scan = Instant::now();
        loop {
            if self.opts.interrupt.load(Ordering::Relaxed)
                || self.opts.cancel.load(Ordering::Relaxed)
            {
                return Ok((StopReason::Interrupted, None));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((StopReason::Duration, None));
            }
            if let (Some(bp), Some(timer)) = (&mut self.breakpoint, &mut self.timer) {
                let hits = bp
                    .wait_for_hits(Duration::from_millis(5))
                    .unwrap_or_default();
                for call in timer.feed(&hits) {
                    if self.armed() {
                        let name = self.slow.as_ref().map(|s| s.0.clone()).unwrap_or_default();
                        return Ok((
                            StopReason::SlowCall {
                                name,
                                tid: call.tid,
                                start: call.start,
                                end: call.end,
                            },
                            None,
                        ));
                    }
                }
            } else if let Some(bp) = &mut self.breakpoint {
                if let Some(hit) = bp.wait(Duration::from_millis(5)).ok().flatten() {
                    let address = bp.address();
                    if self.armed() {
                        let name = self
                            .symbol
                            .as_ref()
                            .map(|s| s.name().to_string())
                            .unwrap_or_default();
                        return Ok((
                            StopReason::Symbol {
                                name,
                                address,
                                tid: hit.tid,
                            },
                            Some(hit),
                        ));
                    }
                }
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
            if let Some(pid) = *child {
                if let Some(code) = tracee::try_wait_child(pid) {
                    *child = None;
                    *exit_code = Some(code);
                    return Ok((StopReason::ProcessExit, None));
                }
            } else if exited(self.pid) {
                return Ok((StopReason::ProcessExit, None));
            }
            if last_scan.elapsed() >= Duration::from_millis(10) {
                last_scan = Instant::now();
                self.follow_threads()?;
                if self.breakpoint.is_none() {
                    self.resolve_symbol()?;
                }
                // START and STOP may be in a library mapped later, and new
                // threads' units need their breakpoints.
                self.arm_range()?;
                // aux_head only moves when an event stops, so what is
                // known while tracing is the buffers' capacity.
                status(Status::Waiting {
                    units: self.units.len(),
                    buffer_bytes: (self.units.len() * self.aux_size) as u64,
                });
            }
        }
    }

    fn params(&self) -> PtParams {
        let conv = self
            .units
            .first()
            .map(|u| u.ring.time_conv())
            .unwrap_or_default();
        // CPUID.15H: TSC/crystal ratio, which MTC timing needs.
        let (n, d) = match sys::cpuid(0x15) {
            Some([eax, ebx, ..]) if eax != 0 && ebx != 0 => (ebx as u64, eax as u64),
            _ => (0, 0),
        };
        PtParams {
            pmu_type: self.pmu.kind as u64,
            time_shift: conv.time_shift,
            time_mult: conv.time_mult,
            time_zero: conv.time_zero,
            cap_user_time_zero: conv.cap_user_time_zero,
            tsc_bit: self.pmu.mask("tsc"),
            noretcomp_bit: self.pmu.mask("noretcomp"),
            have_sched_switch: if self.opts.per_cpu { 3 } else { 0 },
            snapshot_mode: true,
            per_cpu_mmaps: self.opts.per_cpu,
            mtc_bit: self.pmu.mask("mtc"),
            mtc_freq_bits: self.pmu.mask("mtc_period"),
            tsc_ctc_ratio_n: n,
            tsc_ctc_ratio_d: d,
            cyc_bit: self.pmu.mask("cyc"),
            max_nonturbo_ratio: self.pmu.max_nonturbo_ratio.unwrap_or(0) as u64,
            filter: crate::filter::kernel_string(&self.opts.filter),
            cap_event_trace: self.pmu.caps.event_trace,
        }
    }

    fn snapshot(
        &mut self,
        stop: StopReason,
        hit: Option<Hit>,
        end_tsc: u64,
        cmdline: &[String],
    ) -> Result<Capture, CaptureError> {
        let collected = self.collector.collected();
        let mut sideband = self.synthesized.clone();
        // CPU-wide sideband covers every process: keep the target's, and
        // every switch (they say who ran when on each CPU).
        let pid = self.pid;
        sideband.extend(
            collected
                .events
                .iter()
                .filter(|e| match &e.event {
                    SidebandEvent::Switch { .. } => true,
                    SidebandEvent::Mmap { pid: p, .. }
                    | SidebandEvent::Comm { pid: p, .. }
                    | SidebandEvent::Fork { pid: p, .. }
                    | SidebandEvent::Exit { pid: p, .. }
                    | SidebandEvent::ItraceStart { pid: p, .. } => *p == pid,
                })
                .cloned(),
        );
        sideband.sort_by_key(|s| s.time);
        for sb in &sideband {
            if let SidebandEvent::Comm { tid, comm, .. } = &sb.event {
                self.comms.insert(*tid, comm.clone());
            }
        }
        let max = self.aux_size;
        let mut threads = Vec::new();
        let mut cpus = Vec::new();
        for u in &mut self.units {
            let snap = u.cursor.snapshot(u.aux.bytes(), aux_head(&u.ring), max);
            if u.cpu >= 0 {
                cpus.push(CpuTrace {
                    cpu: u.cpu as u32,
                    aux: snap.data,
                    aux_head: snap.end,
                    wrapped: snap.wrapped,
                });
            } else {
                threads.push(ThreadTrace {
                    pid: self.pid,
                    tid: u.tid,
                    comm: self.comms.get(&u.tid).cloned().unwrap_or_default(),
                    aux: snap.data,
                    aux_head: snap.end,
                    wrapped: snap.wrapped,
                    instructions: 0,
                });
            }
        }
        if self.opts.per_cpu {
            // The threads named in the sideband, for the snapshot's list.
            let mut tids: Vec<i32> = procfs::threads(self.pid).unwrap_or_default();
            tids.extend(sideband.iter().filter_map(|s| match &s.event {
                SidebandEvent::Comm { pid, tid, .. } if *pid == self.pid => Some(*tid),
                _ => None,
            }));
            tids.sort_unstable();
            tids.dedup();
            for tid in tids {
                threads.push(ThreadTrace {
                    pid: self.pid,
                    tid,
                    comm: self.comms.get(&tid).cloned().unwrap_or_default(),
                    aux: Vec::new(),
                    aux_head: 0,
                    wrapped: false,
                    instructions: 0,
                });
            }
        }
        let vdso = sideband.iter().find_map(|s| match &s.event {
            SidebandEvent::Mmap { mapping, .. } if mapping.is_vdso() => {
                own_vdso().map(|bytes| (mapping.start, bytes))
            }
            _ => None,
        });
        let end_time = self.tsc_to_perf(end_tsc);
        let start_time = sideband.first().map_or(end_time, |s| s.time);
        let mut warnings = self.warnings.clone();
        warnings.extend(collected.warnings());
        if let (Some(ArmAfter::History(ns)), true) = (self.opts.arm_after, self.unarmed > 0) {
            warnings.push(format!(
                "the trigger was reached {} time(s) in the first {ns} ns of tracing \
                 (--arm-after)",
                self.unarmed
            ));
        }
        let params = self.params();
        if !params.cap_user_time_zero {
            warnings.push(
                "the kernel does not publish a TSC conversion (cap_user_time_zero is 0: an unstable TSC?); times are not reliable".into(),
            );
        }
        if let Some(bp) = &self.breakpoint {
            if hit.is_none() && matches!(stop, StopReason::ProcessExit) {
                warnings.push(format!(
                    "the process exited before reaching the breakpoint at {:#x}",
                    bp.address()
                ));
            }
        }
        Ok(Capture {
            pid: self.pid,
            threads,
            cpus,
            sideband,
            vdso,
            start_time,
            end_time,
            stop,
            cmdline: cmdline.to_vec(),
            ip_log: Vec::new(),
            wall: Duration::ZERO,
            exit_code: None,
            child: None,
            pt: PtSetup {
                pmu_type: self.pmu.kind,
                config: self.cfg.config,
                event: self.cfg.event_string(self.opts.kernel),
                params,
                cpuid: cpuid_string(),
                cpu_desc: cpu_model_name(),
                kernel: self.opts.kernel,
            },
            inherit: false,
            trigger_registers: hit.map(|h| h.registers()).unwrap_or_default(),
            warnings,
        })
    }
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .take_while(|l| !l.trim().is_empty())
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
}

/// perf's CPUID string: `GenuineIntel,family,model,stepping`.
pub fn cpuid_string() -> String {
    format!(
        "{},{},{},{}",
        cpuinfo_field("vendor_id").unwrap_or_default(),
        cpuinfo_field("cpu family").unwrap_or_default(),
        cpuinfo_field("model").unwrap_or_default(),
        cpuinfo_field("stepping").unwrap_or_default()
    )
}

fn cpu_model_name() -> String {
    cpuinfo_field("model name").unwrap_or_default()
}

/// The vdso image, which is the same in every process of this kernel:
/// read from our own address space.
fn own_vdso() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let me = std::process::id() as i32;
    let m = procfs::read_maps(me)
        .ok()?
        .into_iter()
        .find(|m| m.is_vdso())?;
    let mem = std::fs::File::open("/proc/self/mem").ok()?;
    let mut buf = vec![0u8; m.len() as usize];
    mem.read_exact_at(&mut buf, m.start).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring's fill is unknown while Intel PT traces: `--arm-after full`
    /// is refused at once, before anything is opened or attached.
    #[test]
    fn arm_after_full_is_refused_up_front() {
        let mut opts = Options::new(Trigger::Symbol("main".into()));
        opts.arm_after = Some(ArmAfter::Full);
        let err = capture(Target::Attach(i32::MAX), &opts, |_| {}, |_| Ok(())).unwrap_err();
        assert!(err.to_string().contains("--arm-after full"), "{err}");
    }

    #[test]
    fn aux_sizes_are_power_of_two_pages() {
        let p = page_size();
        assert_eq!(aux_size(4 << 20), 4 << 20);
        assert_eq!(aux_size(3 << 20), 2 << 20);
        assert_eq!(aux_size(1), p);
    }

    #[test]
    fn no_pmu_is_a_clear_error_before_anything_runs() {
        let mut opts = Options::new(Trigger::ProcessExit);
        opts.pmu_dir = PathBuf::from("/nonexistent/intel_pt");
        let err = capture(
            Target::Spawn {
                argv: vec!["/bin/true".into()],
                cwd: None,
            },
            &opts,
            |_| {},
            |_| Ok(()),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("no Intel PT"), "{msg}");
        assert!(msg.contains("--backend emulated"), "{msg}");
    }
}
