//! The single-stepping tracer runs every thread of one process under ptrace
//! one instruction at a time and feeds each retired instruction to an
//! emulated PT unit, so that a machine without Intel PT still gets the
//! trace the hardware would have written.
//!
//! Threads run one at a time, except that a thread inside a syscall is left
//! running while others are stepped, so a thread blocked on a futex cannot
//! stall the ones that would wake it.
//!
//! The virtual clock counts one cycle per retired user instruction at a
//! nominal 1 GHz (so 1 cycle = 1 ns), shared by all threads; when every
//! thread is in the kernel the clock advances by the wall time spent
//! waiting. TSC values are perf timestamps (ns of CLOCK_MONOTONIC at the
//! start plus the clock).
//!
//! This file holds the options, the tracer's state and the entry points
//! ([`capture`], [`capture_each`]); the work is split by domain into the
//! files of `tracer/`:
//! - `start` gets a spawned or attached process under the tracer;
//! - `run` is the loop that steps threads until a trigger or the exit;
//! - `schedule` puts one thread at a time on a virtual CPU, migrates
//!   threads between CPUs, and keeps the PT units (one per thread, or one
//!   per CPU);
//! - `step` starts a single step and retires what it executed;
//! - `stops` interprets each wait status: step traps, signals, clone, exec
//!   and exit events;
//! - `threads` holds the per-thread state and its bookkeeping;
//! - `memory` reads the process's memory and mappings and emits their
//!   sideband;
//! - `trigger` arms and checks the duration and symbol triggers, and
//!   `--arm-after`;
//! - `slow_call` times every call of the slow-call trigger's function;
//! - `traces` copies the PT rings into a [`Capture`];
//! - `release` lets every thread go when the capture ends.

mod memory;
mod release;
mod run;
mod schedule;
mod slow_call;
mod start;
mod step;
mod stops;
mod threads;
mod traces;
mod trigger;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::filter::IpFilter;
use super::hardware::{PtSettings, ThreadPt};
use crate::error::CaptureError;
use crate::filter::{self, FilterRange};
use crate::insn::Insn;
use crate::perf_event::breakpoint::Breakpoint;
use crate::procfs::Mapping;
use crate::trigger::{ArmAfter, Range, RangeSymbols, SymbolTrigger, Trigger};
use threads::Thread;

use crate::recording::{
    Capture, PtSetup, Sideband, SidebandEvent, StopReason, Target, ThreadTrace,
};
use crate::tracee::reap_later;

pub struct TracerOptions {
    pub settings: PtSettings,
    /// The PT event the snapshot claims: the config `settings` came from.
    pub pt: PtSetup,
    pub trigger: Trigger,
    pub ip_log: bool,
    pub progress: bool,
    /// Set by the caller's SIGINT handler: take the snapshot now.
    pub interrupt: Arc<AtomicBool>,
    /// One PT unit per virtual CPU, as `perf record -e intel_pt//u CMD`
    /// traces by default (per-CPU buffers, events inherited by every
    /// thread), instead of one per thread: threads run on `cpus` virtual
    /// CPUs and migrate between them.
    pub per_cpu: bool,
    /// How many virtual CPUs per-CPU mode has (at least 1).
    pub cpus: u32,
    /// Per-CPU mode as `perf record -a` writes it (system-wide, CPU-wide
    /// events) instead of inherited by the process: AUXTRACE records name
    /// no thread, and every switch on a CPU is a SWITCH_CPU_WIDE record,
    /// the idle task's (pid 0) included.
    pub system_wide: bool,
    /// How many snapshots to take; the trigger re-arms after each.
    pub snapshots: usize,
    /// Set by the caller: stop now, save nothing, let the process go.
    pub cancel: Arc<AtomicBool>,
    /// IP filter ranges (`--filter`); none traces everything.
    pub filter: Vec<FilterRange>,
    /// When a trigger on a function may start firing.
    pub arm_after: Option<ArmAfter>,
    /// Range capture: traced only from a thread's entry to START to its
    /// entry to STOP.
    pub range: Option<Range>,
}

pub struct Tracer {
    opts: TracerOptions,
    pid: i32,
    threads: HashMap<i32, Thread>,
    order: VecDeque<i32>,
    finished: Vec<ThreadTrace>,
    sideband: Vec<Sideband>,
    now: u64,
    start_time: u64,
    insn_cache: HashMap<u64, Insn>,
    mem: Option<File>,
    maps: Vec<Mapping>,
    vdso: Option<(u64, Vec<u8>)>,
    symbol: Option<SymbolTrigger>,
    /// The slow-call trigger, which watches every step.
    slow: Option<slow_call::SlowCalls>,
    /// Times a trigger would have fired before `--arm-after` armed it.
    unarmed: u64,
    /// The symbol trigger as a hardware breakpoint, when the breakpoint PMU
    /// takes it; else the trigger compares each step's address.
    breakpoint: Option<Breakpoint>,
    trigger_registers: Vec<(String, u64)>,
    warnings: Vec<String>,
    /// After a snapshot taken at this thread's arrival at the symbol (the
    /// address-compare trigger), its next step goes ahead.
    resume_past_symbol: Option<i32>,
    steps_total: u64,
    /// The thread on the (virtual) CPU and `steps_total` when it got it.
    current: Option<i32>,
    slice_start: u64,
    in_syscall: usize,
    ip_logs: Vec<(i32, Vec<u64>)>,
    exit_code: Option<i32>,
    /// The PT units: one per thread, keyed by tid, or one per virtual CPU
    /// keyed by [`schedule::cpu_unit`] in per-CPU mode.
    units: HashMap<i32, ThreadPt>,
    /// Per-CPU mode: per virtual CPU, the thread switched in on it.
    on_cpu: Vec<Option<i32>>,
    /// Per-CPU mode: the thread last put on a CPU; another thread coming
    /// next is a context switch, and it migrates.
    last_switched: Option<i32>,
    /// `opts.filter` placed in the process's current mappings.
    ip_filter: IpFilter,
    /// `--range`'s START and STOP, resolved as the mappings appear.
    range: Option<RangeSymbols>,
    /// Times a thread entered the range (tracing resumed).
    range_entries: u64,
}

/// perf timestamps are CLOCK_MONOTONIC nanoseconds.
pub fn monotonic_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64,
        Err(_) => 0,
    }
}

impl Tracer {
    fn new(mut opts: TracerOptions, pid: i32) -> Tracer {
        let now = monotonic_ns();
        // CPU-wide events are never switched out, so nothing clears a
        // TraceStop.
        opts.settings.sticky_stop = opts.system_wide;
        // A configured filter traces nothing until its file is mapped.
        let ip_filter = match opts.filter.is_empty() {
            true => IpFilter::default(),
            false => IpFilter::placed(&opts.filter, &[]),
        };
        let symbol = match &opts.trigger {
            Trigger::Symbol(name) => Some(SymbolTrigger::new(name)),
            _ => None,
        };
        let range = opts.range.as_ref().map(RangeSymbols::new);
        let slow = match &opts.trigger {
            Trigger::SlowCall {
                symbol,
                slower_than,
            } => Some(slow_call::SlowCalls::new(symbol, *slower_than)),
            _ => None,
        };
        Tracer {
            opts,
            pid,
            threads: HashMap::new(),
            order: VecDeque::new(),
            finished: Vec::new(),
            sideband: Vec::new(),
            now,
            start_time: now,
            insn_cache: HashMap::new(),
            mem: None,
            maps: Vec::new(),
            vdso: None,
            symbol,
            slow,
            unarmed: 0,
            breakpoint: None,
            trigger_registers: Vec::new(),
            warnings: Vec::new(),
            resume_past_symbol: None,
            steps_total: 0,
            current: None,
            slice_start: 0,
            in_syscall: 0,
            ip_logs: Vec::new(),
            exit_code: None,
            units: HashMap::new(),
            on_cpu: Vec::new(),
            last_switched: None,
            ip_filter,
            range,
            range_entries: 0,
        }
    }

    /// Places the filter in the current mappings and gives it to every PT
    /// unit, as the kernel reprograms address filters on each mmap.
    fn resolve_filter(&mut self) {
        if self.opts.filter.is_empty() {
            return;
        }
        let filter = IpFilter::placed(&self.opts.filter, &self.maps);
        if filter != self.ip_filter {
            for unit in self.units.values_mut() {
                unit.set_filter(filter.clone());
            }
            self.ip_filter = filter;
        }
    }

    /// The PT event the snapshot records, with the filter perf reads.
    fn pt_setup(&self) -> crate::recording::PtSetup {
        let mut setup = self.opts.pt.clone();
        setup.params.filter = filter::kernel_string(&self.opts.filter);
        setup
    }

    /// Records `event` on the CPU of the thread being run (CPU 0 in
    /// per-thread mode, whose records carry no CPU).
    fn emit(&mut self, event: SidebandEvent) {
        let cpu = self
            .current
            .and_then(|tid| self.cpu_of(tid))
            .unwrap_or_default();
        self.emit_on(cpu, event);
    }

    fn emit_on(&mut self, cpu: u32, event: SidebandEvent) {
        self.sideband.push(Sideband {
            time: self.now,
            cpu,
            event,
        });
    }
}

/// Runs a capture to its trigger and returns what was recorded. The process
/// is left running (attach) or running to its end (spawn), never stopped.
pub fn capture(target: Target, opts: TracerOptions) -> Result<Capture, CaptureError> {
    let mut out = None;
    capture_each(
        target,
        TracerOptions {
            snapshots: 1,
            ..opts
        },
        |cap| out = Some(cap),
    )?;
    out.ok_or_else(|| CaptureError::Invalid("the capture was cancelled".into()))
}

/// Runs a capture, handing each of up to `opts.snapshots` snapshots to
/// `on_snapshot` as its trigger fires; the trigger re-arms in between.
/// The last snapshot is the one at the process's exit if it comes first.
pub fn capture_each(
    target: Target,
    opts: TracerOptions,
    mut on_snapshot: impl FnMut(Capture),
) -> Result<(), CaptureError> {
    let wall = Instant::now();
    let (mut tracer, child, cmdline) = Tracer::start(target, opts)?;
    let wanted = tracer.opts.snapshots.max(1);
    let mut taken = 0;
    let stop = loop {
        let stop = match tracer.run(trigger::deadline(&tracer.opts.trigger)) {
            Ok(s) => s,
            Err(e) => {
                tracer.release();
                if let Some(pid) = child.filter(|_| tracer.exit_code.is_none()) {
                    reap_later(pid);
                }
                return Err(e);
            }
        };
        if tracer.opts.cancel.load(Ordering::Relaxed) {
            tracer.release();
            if let Some(pid) = child.filter(|_| tracer.exit_code.is_none()) {
                reap_later(pid);
            }
            return Ok(());
        }
        taken += 1;
        if taken >= wanted || stop == StopReason::ProcessExit {
            break stop;
        }
        on_snapshot(tracer.snapshot_now(stop, &cmdline, wall.elapsed()));
        tracer.opts.interrupt.store(false, Ordering::Relaxed);
    };
    if tracer.opts.progress {
        tracer.report(wall.elapsed());
    }
    let end_time = tracer.now;
    tracer.release();
    // The leader's exit was reaped by the tracer; a child still running is
    // handed to the caller.
    let child = if tracer.exit_code.is_some() {
        None
    } else {
        child
    };
    on_snapshot(tracer.take_capture(stop, end_time, cmdline, wall, child));
    Ok(())
}

#[cfg(test)]
impl Tracer {
    /// A tracer of a process that cannot exist (pids stay below 2^22), for
    /// the tests of its bookkeeping: nothing it does reaches a process.
    fn for_tests(per_cpu: bool) -> Tracer {
        Tracer::for_tests_on(per_cpu, 1)
    }

    /// [`Tracer::for_tests`] with `cpus` virtual CPUs in per-CPU mode.
    fn for_tests_on(per_cpu: bool, cpus: u32) -> Tracer {
        use crate::emulated::settings;
        let cfg = settings::emulated_config(None).unwrap();
        let opts = TracerOptions {
            settings: settings::pt_settings(&cfg, 1 << 16, Arc::from([])),
            pt: settings::pt_setup(&cfg),
            trigger: Trigger::ProcessExit,
            ip_log: true,
            progress: false,
            interrupt: Arc::new(AtomicBool::new(false)),
            per_cpu,
            cpus,
            system_wide: false,
            snapshots: 1,
            cancel: Arc::new(AtomicBool::new(false)),
            filter: Vec::new(),
            arm_after: None,
            range: None,
        };
        Tracer::new(opts, 1 << 30)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest program there is, a static ELF of one segment whose
    /// three instructions are `exit(3)`: `mov edi, 3; mov eax, 60; syscall`.
    fn exit3_elf() -> Vec<u8> {
        const BASE: u64 = 0x40_0000;
        const CODE: [u8; 12] = [
            0xbf, 0x03, 0x00, 0x00, 0x00, 0xb8, 0x3c, 0x00, 0x00, 0x00, 0x0f, 0x05,
        ];
        let len = (64 + 56 + CODE.len()) as u64;
        let mut elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
        elf.extend(2u16.to_le_bytes()); // ET_EXEC
        elf.extend(0x3eu16.to_le_bytes()); // x86-64
        elf.extend(1u32.to_le_bytes());
        elf.extend((BASE + 120).to_le_bytes()); // entry: the code
        elf.extend(64u64.to_le_bytes()); // program headers
        elf.extend(0u64.to_le_bytes()); // no section headers
        elf.extend(0u32.to_le_bytes());
        for half in [64u16, 56, 1, 64, 0, 0] {
            elf.extend(half.to_le_bytes());
        }
        elf.extend(1u32.to_le_bytes()); // PT_LOAD
        elf.extend(5u32.to_le_bytes()); // R+X
        elf.extend(0u64.to_le_bytes());
        for word in [BASE, BASE, len, len, 0x1000] {
            elf.extend(word.to_le_bytes());
        }
        elf.extend(CODE);
        assert_eq!(elf.len() as u64, len);
        elf
    }

    fn options() -> TracerOptions {
        Tracer::for_tests(false).opts
    }

    /// A real command, single-stepped from its exec to its exit.
    #[test]
    fn a_real_program_is_traced_from_exec_to_exit() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exit3");
        std::fs::write(&path, exit3_elf()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let argv = vec![path.to_string_lossy().into_owned()];
        // Another test's child, forked while the file was open for writing
        // and stopped before its exec, holds it open: the exec fails with
        // ETXTBSY (exit 127) until that child goes on. Try again then.
        let mut tries = 0;
        let cap = loop {
            let target = Target::Spawn {
                argv: argv.clone(),
                cwd: None,
            };
            match capture(target, options()) {
                Err(CaptureError::Invalid(e)) if e.contains("exited with 127") && tries < 20 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => break other.unwrap(),
            }
        };
        assert_eq!(cap.stop, StopReason::ProcessExit);
        // The tracer saw the last thread exit; the exit status is the
        // caller's to wait for.
        assert_eq!((cap.exit_code, cap.child), (None, Some(cap.pid)));
        assert_eq!(crate::tracee::wait_child(cap.pid), Some(3));
        assert_eq!(cap.cmdline, argv);
        let [t] = &cap.threads[..] else {
            panic!("{:?}", cap.threads)
        };
        assert_eq!((t.tid, t.instructions), (cap.pid, 3));
        assert!(!t.aux.is_empty());
        let entry = 0x40_0000 + 120;
        assert_eq!(cap.ip_log, [(cap.pid, vec![entry, entry + 5, entry + 10])]);
        let events: Vec<&SidebandEvent> = cap.sideband.iter().map(|s| &s.event).collect();
        assert!(matches!(events[0], SidebandEvent::ItraceStart { .. }));
        assert!(matches!(
            events[1],
            SidebandEvent::Comm { exec: true, comm, .. } if comm == "exit3"
        ));
        assert!(events.iter().any(|e| matches!(
            e,
            SidebandEvent::Mmap { mapping, .. } if mapping.start == 0x40_0000 && mapping.path == argv[0]
        )));
        assert!(matches!(events.last().unwrap(), SidebandEvent::Exit { .. }));
        assert!(cap.start_time < cap.end_time);
    }

    #[test]
    fn a_missing_program_is_an_error_before_anything_runs() {
        let target = Target::Spawn {
            argv: vec!["/nonexistent/ptscope-test".into()],
            cwd: None,
        };
        let err = capture(target, options()).unwrap_err();
        assert!(matches!(err, CaptureError::Spawn { .. }), "{err}");
    }
}
