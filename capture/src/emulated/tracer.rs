//! The single-stepping tracer: runs every thread of one process under
//! ptrace one instruction at a time and feeds each retired instruction to
//! that thread's emulated PT unit.
//!
//! Threads run one at a time, except that a thread inside a syscall is left
//! running while others are stepped, so a thread blocked on a futex cannot
//! stall the ones that would wake it.
//!
//! The virtual clock: one cycle per retired user instruction at a nominal
//! 1 GHz (so 1 cycle = 1 ns), shared by all threads; when every thread is in
//! the kernel the clock advances by the wall time spent waiting. TSC values
//! are perf timestamps (ns of CLOCK_MONOTONIC at the start plus the clock).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;

use super::hardware::{PtSettings, ThreadPt};
use super::insn::{classify, Insn, InsnClass};
use super::ptrace;
use crate::error::CaptureError;
use crate::perf_event::breakpoint::Breakpoint;
use crate::procfs::{self, Mapping};
use crate::trigger::{SymbolTrigger, Trigger};

pub use crate::recording::{
    Capture, CpuTrace, PtSetup, Sideband, SidebandEvent, StopReason, Target, ThreadTrace,
};

pub struct TracerOptions {
    pub settings: PtSettings,
    pub trigger: Trigger,
    pub ip_log: bool,
    pub progress: bool,
    /// Set by the caller's SIGINT handler: take the snapshot now.
    pub interrupt: Arc<AtomicBool>,
    /// One PT unit for the one virtual CPU all threads run on, as
    /// `perf record -a` traces, instead of one per thread.
    pub per_cpu: bool,
    /// How many snapshots to take; the trigger re-arms after each.
    pub snapshots: usize,
    /// Set by the caller: stop now, save nothing, let the process go.
    pub cancel: Arc<AtomicBool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In a ptrace stop at a user instruction, ready to step.
    Ready,
    /// Stepping one user instruction; we wait for it specifically.
    Stepping,
    /// Stepping over a syscall instruction, which may block.
    InSyscall { since: u64, others: u64 },
    /// Just seen by a clone event, waiting for its first stop.
    Starting,
    /// Gone under a ptrace call (killed, or its process exiting): only its
    /// exit status is still to come.
    Vanished,
}

struct Thread {
    tid: i32,
    ptid: i32,
    state: State,
    rip: u64,
    /// User instructions it retired.
    instructions: u64,
    /// Per-CPU mode: its syscall instruction was already retired into the
    /// CPU's trace when it entered the kernel.
    syscall_retired: bool,
    /// The instruction being stepped and where it was.
    stepping: Option<(u64, Insn)>,
    pending_signal: Option<Signal>,
    /// The next step delivers a caught signal: no instruction retires.
    entering_handler: bool,
    /// Resume with a TSC (after a context switch or a long syscall).
    resync: bool,
    log: Vec<u64>,
    comm: String,
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
    /// The PT units: one per thread, keyed by tid, or one keyed by
    /// [`CPU_UNIT`] in per-CPU mode.
    units: HashMap<i32, ThreadPt>,
    /// Per-CPU mode: the thread whose user code the CPU last ran.
    on_cpu: Option<i32>,
}

/// Virtual time a context switch takes in per-CPU mode.
const CONTEXT_SWITCH_NS: u64 = 500;

/// The key of the one PT unit in per-CPU mode.
const CPU_UNIT: i32 = -1;

/// Instructions a thread runs while others are ready before it is preempted
/// (20 µs of virtual time): short, so that a thread spinning on another one
/// lets it run within a fraction of a second of wall time.
const TIME_SLICE: u64 = 20_000;

/// perf timestamps are CLOCK_MONOTONIC nanoseconds.
pub fn monotonic_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64,
        Err(_) => 0,
    }
}

impl Tracer {
    fn new(opts: TracerOptions, pid: i32) -> Tracer {
        let now = monotonic_ns();
        let symbol = match &opts.trigger {
            Trigger::Symbol(name) => Some(SymbolTrigger::new(name)),
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
            on_cpu: None,
        }
    }

    fn unit_key(&self, tid: i32) -> i32 {
        if self.opts.per_cpu {
            CPU_UNIT
        } else {
            tid
        }
    }

    fn unit(&mut self, tid: i32) -> &mut ThreadPt {
        let key = self.unit_key(tid);
        let (settings, now) = (self.opts.settings, self.now);
        self.units
            .entry(key)
            .or_insert_with(|| ThreadPt::new(settings, now))
    }

    /// Whether `tid`'s user code is being traced right now.
    fn thread_tracing(&self, tid: i32) -> bool {
        if self.opts.per_cpu && self.on_cpu != Some(tid) {
            return false;
        }
        self.units
            .get(&self.unit_key(tid))
            .is_some_and(|u| u.tracing())
    }

    /// Per-CPU mode: puts `tid` on the CPU. The previous thread is already
    /// out of user space (syscall, preemption, signal); the switch records
    /// fall between its TIP.PGD and the new thread's TIP.PGE, which comes
    /// with a TSC as after any context switch.
    fn switch_to(&mut self, tid: i32) {
        if !self.opts.per_cpu || self.on_cpu == Some(tid) {
            return;
        }
        let prev = self.on_cpu.replace(tid);
        // The kernel's share of a switch: the records fall strictly after
        // the last instruction of the thread going out.
        self.now += CONTEXT_SWITCH_NS;
        if let Some(p) = prev {
            if let Some(rip) = self.threads.get(&p).map(|t| t.rip) {
                if self.units.get(&CPU_UNIT).is_some_and(|u| u.tracing()) {
                    let now = self.now;
                    self.unit(p).interrupt(rip, now);
                }
            }
        }
        let pid = self.pid;
        let (prev_pid, prev_tid) = match prev {
            Some(p) => (pid, p),
            None => (0, 0),
        };
        if prev.is_some() {
            self.emit(SidebandEvent::Switch {
                pid,
                tid: prev_tid,
                out: true,
                preempt: self
                    .threads
                    .get(&prev_tid)
                    .is_some_and(|t| t.state == State::Ready),
                next_prev: (pid, tid),
            });
        }
        self.emit(SidebandEvent::Switch {
            pid,
            tid,
            out: false,
            preempt: false,
            next_prev: (prev_pid, prev_tid),
        });
        if let Some(t) = self.threads.get_mut(&tid) {
            t.resync = true;
        }
    }

    fn emit(&mut self, event: SidebandEvent) {
        self.sideband.push(Sideband {
            time: self.now,
            cpu: 0,
            event,
        });
    }

    fn add_thread(&mut self, tid: i32, ptid: i32, state: State) {
        let comm = procfs::comm(self.pid, tid);
        let first = self.units.is_empty();
        self.unit(tid);
        self.threads.insert(
            tid,
            Thread {
                tid,
                ptid,
                state,
                rip: 0,
                instructions: 0,
                syscall_retired: false,
                stepping: None,
                pending_signal: None,
                entering_handler: false,
                resync: false,
                log: Vec::new(),
                comm,
            },
        );
        self.order.push_back(tid);
        self.arm_breakpoint(&[tid]);
        // A CPU-wide event starts once; later threads arrive by switches.
        if !self.opts.per_cpu || first {
            self.emit(SidebandEvent::ItraceStart { pid: self.pid, tid });
        }
    }

    /// Re-reads the mappings and emits MMAP2 events for new executable ones.
    fn refresh_maps(&mut self, tid: i32) {
        let Ok(maps) = procfs::read_maps(self.pid) else {
            return;
        };
        let new: Vec<Mapping> = maps
            .iter()
            .filter(|m| m.exec && (m.is_file() || m.is_vdso()) && !self.maps.contains(m))
            .cloned()
            .collect();
        if maps != self.maps {
            self.insn_cache.clear();
        }
        for m in new {
            if m.is_vdso() && self.vdso.is_none() {
                let mut buf = vec![0u8; m.len() as usize];
                if let Some(mem) = &self.mem {
                    if mem.read_exact_at(&mut buf, m.start).is_ok() {
                        self.vdso = Some((m.start, buf));
                    }
                }
            }
            self.emit(SidebandEvent::Mmap {
                pid: self.pid,
                tid,
                mapping: m,
            });
        }
        self.maps = maps;
        if let Some(sym) = &mut self.symbol {
            sym.resolve(&self.maps);
            if let (Some(addr), None) = (sym.address(), &self.breakpoint) {
                if Breakpoint::available() {
                    self.breakpoint = Some(Breakpoint::new(addr));
                    let tids: Vec<i32> = self.threads.keys().copied().collect();
                    self.arm_breakpoint(&tids);
                }
            }
        }
    }

    /// Arms the hardware breakpoint on `tids`. If the kernel refuses, the
    /// trigger falls back to comparing addresses, with a warning.
    fn arm_breakpoint(&mut self, tids: &[i32]) {
        let Some(bp) = &mut self.breakpoint else {
            return;
        };
        for &tid in tids {
            if let Err(e) = bp.arm(tid) {
                self.warnings.push(format!(
                    "hardware breakpoint unavailable, the trigger compares addresses instead: {e}"
                ));
                self.breakpoint = None;
                return;
            }
        }
    }

    /// After a step: whether the breakpoint fired, and if so the trigger.
    fn breakpoint_hit(&mut self) -> Option<StopReason> {
        let hit = self.breakpoint.as_mut()?.check()?;
        let tid = hit.tid;
        self.trigger_registers = hit.registers();
        let rip = self.threads.get(&tid).map(|t| t.rip)?;
        let now = self.now;
        if self.thread_tracing(tid) {
            self.unit(tid).interrupt(rip, now);
        }
        let sym = self.symbol.as_ref()?;
        Some(StopReason::Symbol {
            name: sym.name().to_string(),
            address: hit.ip,
            tid,
        })
    }

    fn open_mem(&mut self) {
        self.mem = File::open(format!("/proc/{}/mem", self.pid)).ok();
    }

    fn decode_at(&mut self, tid: i32, ip: u64) -> Result<Insn, CaptureError> {
        if let Some(insn) = self.insn_cache.get(&ip) {
            return Ok(*insn);
        }
        let mut buf = [0u8; 16];
        let mem = self.mem.as_ref().ok_or_else(|| {
            CaptureError::Invalid(format!("cannot read the memory of process {}", self.pid))
        })?;
        let mut n = 0;
        // A read may stop at the end of a mapping; take what is there.
        while n < buf.len() {
            match mem.read_at(&mut buf[n..], ip + n as u64) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        let insn = classify(ip, &buf[..n]).ok_or_else(|| {
            CaptureError::Invalid(format!(
                "thread {tid}: undecodable instruction at {ip:#x} ({:02x?})",
                &buf[..n]
            ))
        })?;
        self.insn_cache.insert(ip, insn);
        Ok(insn)
    }

    fn ready_thread(&mut self) -> Option<i32> {
        // Stay on the current thread while it is ready, for at most a time
        // slice while others wait: a thread switch is a context switch.
        if self.steps_total - self.slice_start >= TIME_SLICE {
            self.preempt_current();
        }
        for _ in 0..self.order.len() {
            let tid = *self.order.front()?;
            if self
                .threads
                .get(&tid)
                .is_some_and(|t| t.state == State::Ready)
            {
                if self.current != Some(tid) {
                    self.current = Some(tid);
                    self.slice_start = self.steps_total;
                }
                return Some(tid);
            }
            self.order.rotate_left(1);
        }
        None
    }

    /// Ends the current thread's time slice if another thread is ready: a
    /// timer interrupt (FUP, TIP.PGD), and a TSC when it resumes.
    fn preempt_current(&mut self) {
        self.slice_start = self.steps_total;
        let Some(cur) = self.current else { return };
        let others_ready = self
            .threads
            .values()
            .any(|t| t.tid != cur && t.state == State::Ready);
        if !others_ready || self.order.front() != Some(&cur) {
            return;
        }
        let now = self.now;
        if let Some(t) = self
            .threads
            .get_mut(&cur)
            .filter(|t| t.state == State::Ready)
        {
            t.resync = true;
            let rip = t.rip;
            self.order.rotate_left(1);
            if self.thread_tracing(cur) {
                self.unit(cur).interrupt(rip, now);
            }
        }
    }

    /// Steps thread `tid` over its next instruction. Returns `true` when the
    /// trigger fired instead.
    fn step(&mut self, tid: i32) -> Result<bool, CaptureError> {
        let (rip, signal) = {
            let t = &self.threads[&tid];
            (t.rip, t.pending_signal)
        };
        self.switch_to(tid);
        let resume = self.resume_past_symbol == Some(tid);
        self.resume_past_symbol = None;
        if let (Some(sym), None, false) = (&self.symbol, &self.breakpoint, resume) {
            if sym.address() == Some(rip) {
                if let Ok(regs) = ptrace::regs(tid) {
                    self.trigger_registers =
                        vec![("rdi".into(), regs.rdi), ("rsi".into(), regs.rsi)];
                }
                let now = self.now;
                if self.thread_tracing(tid) {
                    self.unit(tid).interrupt(rip, now);
                }
                return Ok(true);
            }
        }
        self.threads.get_mut(&tid).unwrap().pending_signal = None;
        if let Some(sig) = signal {
            if procfs::signal_caught(tid, sig as i32) {
                // The kernel builds the handler frame and stops at the
                // handler's first instruction: an async exit from user space.
                let now = self.now;
                if self.thread_tracing(tid) {
                    self.unit(tid).interrupt(rip, now);
                }
                let t = self.threads.get_mut(&tid).unwrap();
                t.entering_handler = true;
                t.stepping = None;
                t.state = State::Stepping;
                ptrace::step(tid, Some(sig))?;
                return Ok(false);
            }
        }
        let insn = self.decode_at(tid, rip)?;
        let now = self.now;
        // A syscall stepped again after a stop that came before it ran was
        // already written into the CPU's trace.
        let again = self.threads[&tid].syscall_retired;
        let resync = std::mem::take(&mut self.threads.get_mut(&tid).unwrap().resync);
        if !again {
            self.unit(tid).enter_user(rip, now, resync);
        }
        if self.opts.per_cpu && insn.class == InsnClass::KernelEntry && !again {
            // Other threads may run while this one is in the kernel: its
            // TIP.PGD goes into the CPU's trace now, not on return.
            self.now += 1;
            self.steps_total += 1;
            let now = self.now;
            self.unit(tid).retire(rip, &insn, insn.next_ip(rip), now);
        }
        let per_cpu = self.opts.per_cpu;
        let t = self.threads.get_mut(&tid).unwrap();
        t.stepping = Some((rip, insn));
        if insn.class == InsnClass::KernelEntry {
            if per_cpu && !again {
                t.instructions += 1;
                t.syscall_retired = true;
                if self.opts.ip_log {
                    t.log.push(rip);
                }
            }
            t.state = State::InSyscall {
                since: now,
                others: self.steps_total,
            };
            self.in_syscall += 1;
        } else {
            t.state = State::Stepping;
        }
        ptrace::step(tid, signal)?;
        Ok(false)
    }

    /// The thread stopped after a step: retire what it executed.
    fn retire(&mut self, tid: i32, new_rip: u64) {
        let now = self.now;
        let steps_total = self.steps_total;
        let ip_log = self.opts.ip_log;
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        if let State::InSyscall { since, others } = t.state {
            self.in_syscall -= 1;
            if others != steps_total || now > since + 1 {
                t.resync = true;
            }
        }
        t.state = State::Ready;
        t.rip = new_rip;
        if std::mem::take(&mut t.entering_handler) {
            return;
        }
        let Some((ip, insn)) = t.stepping.take() else {
            return;
        };
        if new_rip == ip && !insn.targets(ip) {
            // Not retired: one iteration of a REP string instruction, or a
            // trap reported on the way out of a syscall (after exec, attach
            // or clone) before the instruction ran.
            t.stepping = Some((ip, insn));
            if insn.repeats {
                self.now += 1;
            }
            return;
        }
        if std::mem::take(&mut t.syscall_retired) {
            return;
        }
        self.now += 1;
        self.steps_total += 1;
        let next = if insn.class == InsnClass::KernelEntry {
            insn.next_ip(ip)
        } else {
            new_rip
        };
        t.instructions += 1;
        if ip_log {
            t.log.push(ip);
        }
        let now = self.now;
        self.unit(tid).retire(ip, &insn, next, now);
    }

    fn remove_thread(&mut self, tid: i32) {
        if let Some(t) = self.threads.remove(&tid) {
            if matches!(t.state, State::InSyscall { .. }) {
                self.in_syscall -= 1;
            }
            if self.on_cpu == Some(tid) {
                self.on_cpu = None;
            }
            self.emit(SidebandEvent::Exit {
                pid: self.pid,
                ppid: self.pid,
                tid,
                ptid: t.ptid,
            });
            self.finish_thread(t);
        }
        self.order.retain(|&x| x != tid);
    }

    fn finish_thread(&mut self, mut t: Thread) {
        if self.opts.ip_log {
            self.ip_logs.push((t.tid, std::mem::take(&mut t.log)));
        }
        let (aux, aux_head, wrapped) = match self.units.remove(&t.tid) {
            Some(mut unit) => {
                unit.finish();
                let ring = unit.ring();
                (ring.snapshot().to_vec(), ring.head(), ring.wrapped())
            }
            None => (Vec::new(), 0, false),
        };
        self.finished.push(ThreadTrace {
            pid: self.pid,
            tid: t.tid,
            comm: t.comm.clone(),
            aux,
            aux_head,
            wrapped,
            instructions: t.instructions,
        });
    }

    /// Handles one wait status. Returns `true` when the process is gone.
    fn handle(&mut self, status: WaitStatus) -> Result<bool, CaptureError> {
        match status {
            WaitStatus::Exited(pid, code) => {
                if pid.as_raw() == self.pid {
                    self.exit_code = Some(code);
                }
                self.remove_thread(pid.as_raw());
                return Ok(self.threads.is_empty());
            }
            WaitStatus::Signaled(pid, sig, _) => {
                if pid.as_raw() == self.pid {
                    self.exit_code = Some(128 + sig as i32);
                }
                self.remove_thread(pid.as_raw());
                return Ok(self.threads.is_empty());
            }
            WaitStatus::Stopped(pid, sig) => {
                let tid = pid.as_raw();
                let Some(t) = self.threads.get(&tid) else {
                    return Ok(false);
                };
                if t.state == State::Starting {
                    // A new thread's first stop.
                    let rip = first_rip(tid)?;
                    let t = self.threads.get_mut(&tid).unwrap();
                    t.rip = rip;
                    t.state = State::Ready;
                    t.comm = procfs::comm(self.pid, tid);
                    return Ok(false);
                }
                let regs = ptrace::regs(tid)?;
                let rip = regs.rip;
                let prev = t.stepping.map(|(ip, _)| ip);
                let entering_handler = t.entering_handler;
                // A step ends in a SIGTRAP with a TRAP_* code; a SIGTRAP sent
                // by the kernel or a process (si_code <= 0 or SI_KERNEL) is a
                // signal, not the end of a step. When the step moved the IP it
                // is the step's own trap, which spares the hot path a syscall.
                let mut sig = Some(sig);
                let mut step_trap = false;
                if sig == Some(Signal::SIGTRAP) && prev.is_some() && Some(rip) != prev {
                    step_trap = true;
                    sig = None;
                } else if sig == Some(Signal::SIGTRAP) {
                    let code = ptrace::si_code(tid)?;
                    step_trap = code > 0 && code < 0x80;
                    if step_trap || code == 0x80 {
                        sig = None;
                    }
                }
                if step_trap || Some(rip) != prev || entering_handler {
                    self.retire(tid, rip);
                } else {
                    // A signal before the instruction ran (a fault).
                    let t = self.threads.get_mut(&tid).unwrap();
                    if let State::InSyscall { .. } = t.state {
                        self.in_syscall -= 1;
                    }
                    t.state = State::Ready;
                    t.stepping = None;
                    t.syscall_retired = false;
                }
                if let Some(sig) = sig {
                    self.threads.get_mut(&tid).unwrap().pending_signal = Some(sig);
                }
                self.after_syscall(tid, regs.orig_rax);
            }
            WaitStatus::PtraceEvent(pid, _, event) => {
                let tid = pid.as_raw();
                match event {
                    libc::PTRACE_EVENT_CLONE => {
                        let new = ptrace::event_msg(tid)? as i32;
                        if procfs::tgid(new).is_some_and(|g| g != self.pid) {
                            // Not a thread of ours (clone without CLONE_THREAD).
                            let _ = ptrace::detach(new, None);
                        } else if !self.threads.contains_key(&new) {
                            self.emit(SidebandEvent::Fork {
                                pid: self.pid,
                                ppid: self.pid,
                                tid: new,
                                ptid: tid,
                            });
                            self.add_thread(new, tid, State::Starting);
                            let comm = procfs::comm(self.pid, new);
                            self.emit(SidebandEvent::Comm {
                                pid: self.pid,
                                tid: new,
                                comm,
                                exec: false,
                            });
                        }
                        // The clone syscall is still being stepped.
                        ptrace::step(tid, None)?;
                        // The new thread's first stop is on its way: take it
                        // now, so that when the thread may first run does
                        // not depend on how busy the machine is (under load
                        // the parent stepped whole time slices before it).
                        if self.threads.get(&new).map(|t| t.state) == Some(State::Starting) {
                            if let Some(st) = ptrace::wait(Some(new), false)? {
                                if self.handle(st)? {
                                    return Ok(true);
                                }
                            }
                        }
                    }
                    libc::PTRACE_EVENT_EXEC => {
                        // The exec syscall retired; a new image is mapped.
                        let rip = ptrace::rip(tid)?;
                        if let Some(t) = self.threads.get_mut(&tid) {
                            if let Some((ip, insn)) = t.stepping {
                                self.retire(tid, insn.next_ip(ip));
                            }
                        }
                        if let Some(t) = self.threads.get_mut(&tid) {
                            t.rip = rip;
                            t.state = State::Ready;
                            t.comm = procfs::comm(self.pid, tid);
                            t.resync = true;
                        }
                        self.exec_sideband(tid);
                    }
                    libc::PTRACE_EVENT_EXIT => {
                        if let Some(t) = self.threads.get(&tid) {
                            if let Some((ip, insn)) = t.stepping {
                                if insn.class == InsnClass::KernelEntry {
                                    self.retire(tid, insn.next_ip(ip));
                                }
                            }
                        }
                        self.remove_thread(tid);
                        let _ = ptrace::cont(tid, None);
                        return Ok(self.threads.is_empty());
                    }
                    _ => {
                        // PTRACE_EVENT_STOP (group stop or our interrupt).
                        if let Some(t) = self.threads.get_mut(&tid) {
                            if t.state == State::Starting {
                                t.rip = first_rip(tid)?;
                                t.state = State::Ready;
                            } else {
                                let _ = ptrace::step(tid, None);
                            }
                        } else {
                            let _ = ptrace::cont(tid, None);
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(false)
    }

    fn exec_sideband(&mut self, tid: i32) {
        self.maps.clear();
        self.insn_cache.clear();
        self.vdso = None;
        self.open_mem();
        let comm = procfs::comm(self.pid, tid);
        self.emit(SidebandEvent::Comm {
            pid: self.pid,
            tid,
            comm,
            exec: true,
        });
        self.refresh_maps(tid);
    }

    /// After a syscall retired (the thread is out of traced code): pick up
    /// mapping changes. `orig_rax` is the syscall number.
    fn after_syscall(&mut self, tid: i32, orig_rax: u64) {
        if !self.threads.contains_key(&tid) || self.thread_tracing(tid) {
            return;
        }
        // Only re-read the maps after memory-management calls.
        const MMAP: u64 = libc::SYS_mmap as u64;
        const MPROTECT: u64 = libc::SYS_mprotect as u64;
        const MUNMAP: u64 = libc::SYS_munmap as u64;
        const MREMAP: u64 = libc::SYS_mremap as u64;
        if matches!(orig_rax, MMAP | MPROTECT | MUNMAP | MREMAP) {
            self.refresh_maps(tid);
        }
    }

    fn run(&mut self, deadline: Option<Instant>) -> Result<StopReason, CaptureError> {
        let wall_start = Instant::now();
        let mut last_report = Instant::now();
        loop {
            if self.opts.interrupt.load(Ordering::Relaxed)
                || self.opts.cancel.load(Ordering::Relaxed)
            {
                return Ok(StopReason::Interrupted);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(StopReason::Duration);
            }
            if self.opts.progress && last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                self.report(wall_start.elapsed());
            }
            // Collect events from threads in syscalls now and then.
            if self.in_syscall > 0 && self.steps_total.is_multiple_of(64) {
                while let Some(status) = ptrace::wait(None, true)? {
                    let handled = self.handle(status);
                    if !self.vanished(&handled) && handled? {
                        return Ok(StopReason::ProcessExit);
                    }
                }
            }
            if let Some(tid) = self.ready_thread() {
                let stepped = self.step(tid);
                if self.vanished(&stepped) {
                    continue;
                }
                if stepped? {
                    let address = self.symbol.as_ref().and_then(|s| s.address()).unwrap_or(0);
                    let name = self
                        .symbol
                        .as_ref()
                        .map(|s| s.name().to_string())
                        .unwrap_or_default();
                    return Ok(StopReason::Symbol { name, address, tid });
                }
                if self.threads[&tid].state == State::Stepping {
                    let status = ptrace::wait(Some(tid), false)?;
                    if let Some(status) = status {
                        let handled = self.handle(status);
                        if !self.vanished(&handled) && handled? {
                            return Ok(StopReason::ProcessExit);
                        }
                    }
                }
                if let Some(stop) = self.breakpoint_hit() {
                    return Ok(stop);
                }
                continue;
            }
            if self.threads.is_empty() {
                return Ok(StopReason::ProcessExit);
            }
            // Everyone is in the kernel: wait, and let the clock run.
            let t0 = Instant::now();
            let status = if deadline.is_some() {
                // Poll so that a deadline passes even while the process sleeps.
                match ptrace::wait(None, true)? {
                    Some(s) => Some(s),
                    None => {
                        std::thread::sleep(Duration::from_micros(200));
                        None
                    }
                }
            } else {
                self.wait_interruptible()?
            };
            self.now += t0.elapsed().as_nanos() as u64;
            if let Some(status) = status {
                let handled = self.handle(status);
                if !self.vanished(&handled) && handled? {
                    return Ok(StopReason::ProcessExit);
                }
            }
        }
    }

    /// `r` failed because its thread is gone (ESRCH: a tracee can be killed
    /// at any time): the thread is no longer driven, and its exit status,
    /// which waitpid still gives, removes it. Other failures stay errors.
    fn vanished<T>(&mut self, r: &Result<T, CaptureError>) -> bool {
        let Err(CaptureError::Ptrace {
            tid,
            errno: nix::errno::Errno::ESRCH,
            ..
        }) = r
        else {
            return false;
        };
        if let Some(t) = self.threads.get_mut(tid) {
            if let State::InSyscall { .. } = t.state {
                self.in_syscall -= 1;
            }
            t.state = State::Vanished;
            t.stepping = None;
        }
        true
    }

    /// A blocking wait that still notices Ctrl-C promptly.
    fn wait_interruptible(&mut self) -> Result<Option<WaitStatus>, CaptureError> {
        loop {
            if let Some(s) = ptrace::wait(None, true)? {
                return Ok(Some(s));
            }
            if self.opts.interrupt.load(Ordering::Relaxed) {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn report(&self, elapsed: Duration) {
        let fill = self
            .units
            .values()
            .map(|u| u.ring().fill())
            .fold(0.0f64, f64::max);
        eprintln!(
            "ptscope: {} instructions traced ({:.0}k/s), {} threads, ring {:.0}% full",
            self.steps_total,
            self.steps_total as f64 / elapsed.as_secs_f64().max(1e-9) / 1e3,
            self.threads.len(),
            fill * 100.0
        );
    }

    /// Stops tracing every live thread and lets it go on untraced.
    /// A snapshot in the middle of the capture: every thread leaves traced
    /// code (FUP + TIP.PGD, as when the kernel disables PT), the rings are
    /// copied, and tracing resumes with a TSC at each thread's next step.
    fn snapshot_now(&mut self, stop: StopReason, cmdline: &[String], wall: Duration) -> Capture {
        let now = self.now;
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for &tid in &tids {
            let rip = self.threads[&tid].rip;
            if self.thread_tracing(tid) {
                self.unit(tid).interrupt(rip, now);
            }
            if let Some(t) = self.threads.get_mut(&tid) {
                t.resync = true;
            }
        }
        if let StopReason::Symbol { tid, .. } = stop {
            self.resume_past_symbol = Some(tid);
        }
        let copy = |unit: &ThreadPt| {
            let ring = unit.ring();
            (ring.snapshot().to_vec(), ring.head(), ring.wrapped())
        };
        let mut threads: Vec<ThreadTrace> = self
            .finished
            .iter()
            .map(|t| ThreadTrace {
                pid: t.pid,
                tid: t.tid,
                comm: t.comm.clone(),
                aux: t.aux.clone(),
                aux_head: t.aux_head,
                wrapped: t.wrapped,
                instructions: t.instructions,
            })
            .collect();
        for t in self.threads.values() {
            let (aux, aux_head, wrapped) = self.units.get(&t.tid).map(copy).unwrap_or_default();
            threads.push(ThreadTrace {
                pid: self.pid,
                tid: t.tid,
                comm: t.comm.clone(),
                aux,
                aux_head,
                wrapped,
                instructions: t.instructions,
            });
        }
        threads.sort_by_key(|t| t.tid);
        let cpus = self
            .units
            .get(&CPU_UNIT)
            .map(|u| {
                let (aux, aux_head, wrapped) = copy(u);
                vec![CpuTrace {
                    cpu: 0,
                    aux,
                    aux_head,
                    wrapped,
                }]
            })
            .unwrap_or_default();
        let mut ip_log: Vec<(i32, Vec<u64>)> = self.ip_logs.clone();
        ip_log.extend(self.threads.values().map(|t| (t.tid, t.log.clone())));
        ip_log.sort_by_key(|(tid, _)| *tid);
        Capture {
            pid: self.pid,
            threads,
            cpus,
            sideband: self.sideband.clone(),
            vdso: self.vdso.clone(),
            start_time: self.start_time,
            end_time: now,
            stop,
            cmdline: cmdline.to_vec(),
            ip_log,
            wall,
            exit_code: None,
            child: None,
            pt: PtSetup::emulated(),
            trigger_registers: std::mem::take(&mut self.trigger_registers),
            warnings: self.warnings.clone(),
        }
    }

    fn release(&mut self) {
        if let Some(bp) = &mut self.breakpoint {
            bp.disarm();
        }
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            let t = self.threads.remove(&tid).unwrap();
            let now = self.now;
            match t.state {
                State::Ready => {
                    if self.thread_tracing(tid) {
                        self.unit(tid).interrupt(t.rip, now);
                    }
                    let _ = ptrace::detach(tid, t.pending_signal);
                }
                State::Starting => {
                    let _ = ptrace::interrupt(tid);
                    let _ = ptrace::wait(Some(tid), false);
                    let _ = ptrace::detach(tid, None);
                }
                State::Stepping | State::InSyscall { .. } => {
                    // Wait for the step to end, then let go.
                    let _ = ptrace::interrupt(tid);
                    let mut pending = t.pending_signal;
                    if let Ok(Some(WaitStatus::Stopped(_, sig))) = ptrace::wait(Some(tid), false) {
                        if sig != Signal::SIGTRAP {
                            pending = Some(sig);
                        }
                    }
                    swallow_step_trap(tid);
                    let _ = ptrace::detach(tid, pending);
                }
                // Reap its exit status (it may still be a traced zombie).
                State::Vanished => {
                    let _ = ptrace::wait(Some(tid), true);
                }
            }
            self.finish_thread(t);
        }
        self.order.clear();
    }
}

/// A step into a syscall that our interrupt ended queues the step's
/// SIGTRAP for when the syscall returns; left pending past the detach it
/// would kill the process. Let it arrive now, as a signal-delivery stop
/// the detach then discards (a SIGTRAP of the program's own is kept).
fn swallow_step_trap(tid: i32) {
    if !procfs::signal_pending(tid, Signal::SIGTRAP as i32) {
        return;
    }
    if ptrace::cont(tid, None).is_err() {
        return;
    }
    loop {
        match ptrace::wait(Some(tid), false) {
            Ok(Some(WaitStatus::Stopped(_, Signal::SIGTRAP))) => {
                let code = ptrace::si_code(tid).unwrap_or(0);
                if !(code > 0 && code < 0x80) {
                    let _ = ptrace::detach(tid, Some(Signal::SIGTRAP));
                }
                return;
            }
            // Another signal first: hold it for the detach, keep going.
            Ok(Some(WaitStatus::Stopped(_, sig))) => {
                if ptrace::cont(tid, Some(sig)).is_err() {
                    return;
                }
            }
            Ok(Some(WaitStatus::PtraceEvent(..))) => {
                if ptrace::cont(tid, None).is_err() {
                    return;
                }
            }
            _ => return,
        }
    }
}

/// Where a thread seen for the first time (new, or just attached) resumes.
/// One stopped inside an interrupted syscall goes back to its `syscall`
/// instruction when resumed, to run it again: stepping it blocks in the
/// kernel, which the tracer must know not to wait for.
fn first_rip(tid: i32) -> Result<u64, CaptureError> {
    let regs = ptrace::regs(tid)?;
    // -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK.
    let restarts = regs.orig_rax as i64 >= 0 && (-516..=-512).contains(&(regs.rax as i64));
    Ok(if restarts { regs.rip - 2 } else { regs.rip })
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
    let deadline = |trigger: &Trigger| match trigger {
        Trigger::Duration(ms) => Some(Instant::now() + Duration::from_millis(*ms)),
        _ => None,
    };
    let wall = Instant::now();
    let (pid, child, cmdline) = match &target {
        Target::Spawn { argv, cwd } => {
            let pid = ptrace::spawn_stopped(argv, cwd.as_deref())?;
            // Wait for the child's SIGSTOP, seize it, and let it exec.
            match nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(pid),
                Some(nix::sys::wait::WaitPidFlag::WUNTRACED),
            ) {
                Ok(WaitStatus::Stopped(_, _)) => {}
                other => {
                    return Err(CaptureError::Invalid(format!(
                        "`{}` did not start: {other:?}",
                        argv[0]
                    )))
                }
            }
            ptrace::seize(pid)?;
            ptrace::kill(pid, Signal::SIGCONT);
            (pid, Some(pid), argv.clone())
        }
        Target::Attach(pid) => (*pid, None, procfs::cmdline(*pid)),
    };
    let mut tracer = Tracer::new(opts, pid);
    tracer.open_mem();
    match target {
        Target::Spawn { .. } => {
            // Run to the exec: the first stops are the group-stop and SIGCONT.
            loop {
                match ptrace::wait(Some(pid), false)? {
                    Some(WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_EXEC)) => break,
                    Some(WaitStatus::Exited(_, code)) => {
                        return Err(CaptureError::Invalid(format!(
                            "`{}` exited with {code} before it started (is it an executable?)",
                            cmdline[0]
                        )))
                    }
                    Some(WaitStatus::Stopped(_, Signal::SIGCONT))
                    | Some(WaitStatus::Stopped(_, Signal::SIGSTOP)) => ptrace::cont(pid, None)?,
                    Some(WaitStatus::Stopped(_, sig)) => ptrace::cont(pid, Some(sig))?,
                    Some(_) => ptrace::cont(pid, None)?,
                    None => {}
                }
            }
            tracer.now = monotonic_ns();
            tracer.start_time = tracer.now;
            tracer.add_thread(pid, pid, State::Ready);
            tracer.threads.get_mut(&pid).unwrap().rip = ptrace::rip(pid)?;
            tracer.exec_sideband(pid);
        }
        Target::Attach(pid) => {
            let tids = procfs::threads(pid)?;
            tracer.now = monotonic_ns();
            tracer.start_time = tracer.now;
            for &tid in &tids {
                ptrace::seize(tid)?;
                ptrace::interrupt(tid)?;
            }
            for &tid in &tids {
                tracer.emit(SidebandEvent::Comm {
                    pid,
                    tid,
                    comm: procfs::comm(pid, tid),
                    exec: false,
                });
                tracer.add_thread(tid, pid, State::Starting);
            }
            tracer.refresh_maps(pid);
        }
    }
    let wanted = tracer.opts.snapshots.max(1);
    let mut taken = 0;
    let stop = loop {
        let stop = match tracer.run(deadline(&tracer.opts.trigger)) {
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
    let exit_code = tracer.exit_code;
    let child = if exit_code.is_some() { None } else { child };
    let mut threads = std::mem::take(&mut tracer.finished);
    threads.sort_by_key(|t| t.tid);
    let cpus = match tracer.units.remove(&CPU_UNIT) {
        Some(mut unit) => {
            unit.finish();
            let ring = unit.ring();
            vec![CpuTrace {
                cpu: 0,
                aux: ring.snapshot().to_vec(),
                aux_head: ring.head(),
                wrapped: ring.wrapped(),
            }]
        }
        None => Vec::new(),
    };
    let mut ip_log = std::mem::take(&mut tracer.ip_logs);
    ip_log.sort_by_key(|(tid, _)| *tid);
    on_snapshot(Capture {
        pid,
        threads,
        cpus,
        sideband: tracer.sideband,
        vdso: tracer.vdso,
        start_time: tracer.start_time,
        end_time,
        stop,
        cmdline,
        ip_log,
        wall: wall.elapsed(),
        exit_code,
        child,
        pt: PtSetup::emulated(),
        trigger_registers: std::mem::take(&mut tracer.trigger_registers),
        warnings: std::mem::take(&mut tracer.warnings),
    });
    Ok(())
}

/// Waits for a spawned command to end; its exit status (128+signal when
/// killed by one).
pub fn wait_child(pid: i32) -> Option<i32> {
    loop {
        match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, code)) => return Some(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Some(128 + sig as i32),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
}

/// Reaps a spawned command nobody waits for, when it ends on its own.
pub fn reap_later(pid: i32) {
    std::thread::spawn(move || wait_child(pid));
}

/// A spawned command's exit status if it has ended, without waiting.
pub fn try_wait_child(pid: i32) -> Option<i32> {
    use nix::sys::wait::WaitPidFlag;
    match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Some(code),
        Ok(WaitStatus::Signaled(_, sig, _)) => Some(128 + sig as i32),
        Err(nix::errno::Errno::ECHILD) => Some(-1),
        _ => None,
    }
}
