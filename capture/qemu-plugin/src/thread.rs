//! Each guest thread's PT unit and virtual clock, and the retirement of
//! blocks as they run. A thread keeps its state in thread-local storage
//! while it runs guest code, so the hot path takes no lock; it lends the
//! state to [`crate::process::Shared::parked`] while in a system call, so
//! that a snapshot can read it there.
//!
//! The clock: one instruction is one nanosecond of the thread's own
//! virtual time. A block's last instruction is retired when the next
//! block starts, since only then is it known where it went.
//!
//! A running thread takes part in snapshots (it asks for one at a
//! trigger, and hands its trace over when one is asked for), which the
//! coordinator gathers from the threads' states. This module reaches the
//! coordinator through [`Snapshots`], which the crate root fills with the
//! coordinator's functions, rather than by name: the coordinator names
//! this module and the process state, which names this module too, so
//! naming the coordinator back would tie the three into one cycle.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use ptscope_capture::emulated::hardware::ThreadPt;
use ptscope_capture::insn::InsnClass;
use ptscope_capture::qemu::per_cpu::{Piece, ThreadPieces, KERNEL_NS};
use ptscope_capture::recording::{SidebandEvent, StopReason, ThreadTrace};
use ptscope_capture::trigger::{ArmAfter, Trigger};

use crate::blocks::{Block, AT_RANGE_START, AT_RANGE_STOP, AT_TRIGGER};
use crate::process::{plugin, Plugin};

/// A rise of the stack pointer larger than this (a thread's default
/// stack, 8 MiB) is a switch to another stack, not a return.
const STACK_SWITCH: u64 = 8 << 20;

/// One guest thread.
pub struct ThreadState {
    pub tid: i32,
    /// Its name when last read (a thread that ended has none to read).
    pub comm: String,
    pub unit: ThreadPt,
    /// Virtual time: perf ns of the last retired instruction.
    pub now: u64,
    /// The block that ran last, whose last instruction is not retired yet.
    pending: Option<&'static Block>,
    /// The snapshot epoch this thread last answered.
    pub epoch: u64,
    /// Tracing resumes with a TSC (after a snapshot), as after a switch.
    resync: bool,
    pub instructions: u64,
    /// Every executed instruction, with `ip_log`.
    pub log: Vec<u64>,
    /// Slow-call trigger: the calls open, innermost last (the address of
    /// their return address, and their start).
    open_calls: Vec<(u64, u64)>,
    /// Where the last call pushed its return address.
    call_sp: Option<u64>,
    /// A slow call returned: fire at the next block.
    fire: Option<StopReason>,
    /// The IP filter generation the unit has.
    filter_generation: u64,
    /// Per-CPU mode: the trace is cut into pieces at each entry to the
    /// kernel (see `ptscope_capture::qemu::per_cpu`).
    per_cpu: bool,
    /// The pieces whose bytes the ring may still hold, oldest first.
    pieces: VecDeque<Piece>,
    /// Where the current piece starts in the stream, and when.
    piece_from: u64,
    piece_start: u64,
}

/// Asks for a snapshot (see [`Snapshots::request`]).
pub type Request = fn(&Plugin, StopReason, bool, Option<(&mut ThreadState, u64)>) -> Option<usize>;
/// Hands a running thread's trace over (see [`Snapshots::answer`]).
pub type Answer = fn(&Plugin, &mut ThreadState, u64);

/// What a running thread needs of the coordinator, as plain function
/// pointers kept in [`Plugin::snapshots`]: reading them takes no lock,
/// and calling one costs an indirect call, on paths that the per-block
/// hot path takes only when a snapshot is under way or the trace is over.
pub struct Snapshots {
    /// Asks for a snapshot that stops for the reason given; the flag
    /// makes it the last. The thread hands its own trace over, taken at
    /// the block it is about to run. Returns the snapshot's number, or
    /// `None` if another is being gathered or the last was taken.
    pub request: Request,
    /// The thread saw the snapshot epoch change: it hands its trace
    /// over, taken at the block (its address) it is about to run.
    pub answer: Answer,
    /// Once the last snapshot is written, removes the plugin's callbacks
    /// (once, from a guest thread).
    pub reset_once: fn(&Plugin),
}

/// What a thread hands over for a snapshot.
pub struct Handed {
    pub trace: ThreadTrace,
    pub log: Vec<u64>,
    pub pieces: ThreadPieces,
}

thread_local! {
    static THREAD: RefCell<Option<ThreadState>> = const { RefCell::new(None) };
}

impl ThreadState {
    /// A thread starting at virtual time `now`: its unit writes PSB+.
    fn new(plugin: &Plugin, tid: i32, now: u64) -> ThreadState {
        let mut unit = ThreadPt::new(plugin.config.settings.clone(), now);
        if plugin.config.range.is_some() {
            unit.start_paused();
        }
        ThreadState {
            tid,
            comm: crate::process::comm(plugin.pid, tid),
            unit,
            now,
            pending: None,
            epoch: plugin.epoch.load(Ordering::Acquire),
            resync: false,
            instructions: 0,
            log: Vec::new(),
            open_calls: Vec::new(),
            call_sp: None,
            fire: None,
            filter_generation: 0,
            per_cpu: plugin.config.per_cpu.is_some(),
            pieces: VecDeque::new(),
            piece_from: 0,
            piece_start: now,
        }
    }

    /// Per-CPU mode: the piece so far ends here (out of traced code), and
    /// the next one starts `kernel_ns` later, ready to follow another
    /// thread's trace in a CPU's buffer.
    fn cut(&mut self, kernel_ns: u64) {
        if !self.per_cpu {
            return;
        }
        self.unit.hand_over();
        let ring = self.unit.ring();
        let to = ring.head();
        if to > self.piece_from {
            self.pieces.push_back(Piece {
                from: self.piece_from,
                to,
                start: self.piece_start,
                end: self.now,
            });
        }
        // Pieces the ring no longer holds whole are of no use.
        let kept_from = to - ring.snapshot().len() as u64;
        while self.pieces.front().is_some_and(|p| p.from < kept_from) {
            self.pieces.pop_front();
        }
        self.now += kernel_ns;
        self.piece_from = to;
        self.piece_start = self.now;
        // Tracing resumes with a TSC, as after a context switch.
        self.resync = true;
    }

    /// Retires the last instruction of the block before, which went on to
    /// `next`. A successor its last instruction cannot reach means the
    /// kernel stepped in after it (a signal): the unit then writes the
    /// asynchronous exit (FUP, TIP.PGD) at the instruction it would have
    /// run, and tracing resumes where the thread did.
    fn retire_pending(&mut self, next: u64) {
        let Some(p) = self.pending.take() else {
            return;
        };
        self.now += 1;
        self.instructions += 1;
        if p.may_go_to(next) {
            self.unit.retire(p.last_ip, &p.last, next, self.now);
        } else {
            let fallthrough = p.last.next_ip(p.last_ip);
            let resumed = match p.last.class {
                InsnClass::DirectJump { target } | InsnClass::DirectCall { target } => target,
                _ => fallthrough,
            };
            self.unit.retire(p.last_ip, &p.last, resumed, self.now);
            self.unit.interrupt(resumed, self.now);
        }
        if matches!(p.last.class, InsnClass::Return) {
            if let Some(sp) = self.call_sp.take() {
                self.returned(sp);
            }
        }
    }

    /// A return popped its address from `sp`: every call whose frame is
    /// at or below it is over, and the outermost of them may fire.
    fn returned(&mut self, sp: u64) {
        let mut left = None;
        while let Some(&(frame, start)) = self.open_calls.last() {
            if sp < frame || sp - frame > STACK_SWITCH {
                break;
            }
            self.open_calls.pop();
            left = Some(start);
        }
        if let Some(start) = left {
            self.call_over(start);
        }
    }

    /// A call of the slow-call trigger's function that started at `start`
    /// just ended.
    fn call_over(&mut self, start: u64) {
        let Some(plugin) = plugin() else { return };
        let Trigger::SlowCall {
            symbol,
            slower_than,
        } = &plugin.config.trigger
        else {
            return;
        };
        let took = self.now - start;
        if took <= *slower_than {
            return;
        }
        let whole = self.unit.oldest_decodable().is_some_and(|t| t <= start);
        if !whole {
            let mut sh = plugin.shared();
            sh.missed += 1;
            sh.missed_longest = sh.missed_longest.max(took);
            return;
        }
        if !self.armed(plugin) {
            plugin.shared().unarmed += 1;
            return;
        }
        self.fire = Some(StopReason::SlowCall {
            name: symbol.clone(),
            tid: self.tid,
            start,
            end: self.now,
        });
    }

    /// Whether a trigger may fire: always, or with `--arm-after`, once the
    /// ring holds that much history, or has filled.
    fn armed(&mut self, plugin: &Plugin) -> bool {
        match plugin.config.arm_after {
            None => true,
            Some(ArmAfter::Full) => self.unit.ring().wrapped(),
            Some(ArmAfter::History(wanted)) => self
                .unit
                .oldest_decodable()
                .is_some_and(|t| self.now.saturating_sub(t) >= wanted),
        }
    }

    /// Runs `block`.
    fn run(&mut self, plugin: &'static Plugin, block: &'static Block) {
        if let Some(p) = self.pending {
            if p.repeats_into(block) {
                // Another iteration of a REP string instruction: PT
                // retires it once.
                return;
            }
        }
        if plugin.epoch.load(Ordering::Acquire) != self.epoch {
            (plugin.snapshots.answer)(plugin, self, block.vaddr);
        }
        if plugin.done.load(Ordering::Relaxed) {
            return;
        }
        if plugin.no_encode {
            // Callbacks only, for the capture benchmark: the clock runs,
            // no packet is written.
            self.pending = None;
            self.now += block.n as u64;
            self.instructions += block.n as u64;
            return;
        }
        self.retire_pending(block.vaddr);
        if let Some(stop) = self.fire.take() {
            (plugin.snapshots.request)(plugin, stop, false, Some((self, block.vaddr)));
            if plugin.done.load(Ordering::Relaxed) {
                return;
            }
        }
        if block.flags & AT_TRIGGER != 0 {
            self.at_trigger(plugin, block);
            if plugin.done.load(Ordering::Relaxed) {
                return;
            }
        }
        if block.flags & (AT_RANGE_START | AT_RANGE_STOP) != 0 {
            self.at_range(plugin, block);
        }
        let generation = plugin.filter_generation.load(Ordering::Acquire);
        if generation != self.filter_generation {
            self.filter_generation = generation;
            self.unit.set_filter(plugin.shared().filter.clone());
        }
        if !self.unit.tracing() {
            self.unit
                .enter_user(block.vaddr, self.now, std::mem::take(&mut self.resync));
        }
        let straight = block.n as u64 - 1;
        if straight > 0 {
            self.now += straight;
            self.instructions += straight;
            self.unit.retire_straight(straight, block.last_ip, self.now);
        }
        self.pending = Some(block);
    }

    /// Range capture: at START's entry the trace resumes (with a TSC, as
    /// when the kernel's breakpoint resumes it), at STOP's it pauses.
    fn at_range(&mut self, plugin: &Plugin, block: &Block) {
        if block.flags & AT_RANGE_START != 0 && self.unit.paused() {
            self.unit.resume();
            self.resync = true;
            plugin.shared().range_entries += 1;
        } else if block.flags & AT_RANGE_STOP != 0 {
            self.unit.pause(block.vaddr, self.now);
        }
    }

    /// The block starts at the trigger's function.
    fn at_trigger(&mut self, plugin: &'static Plugin, block: &'static Block) {
        match &plugin.config.trigger {
            Trigger::Symbol(name) => {
                if self.armed(plugin) {
                    let stop = StopReason::Symbol {
                        name: name.clone(),
                        address: block.vaddr,
                        tid: self.tid,
                    };
                    (plugin.snapshots.request)(plugin, stop, false, Some((self, block.vaddr)));
                } else {
                    plugin.shared().unarmed += 1;
                }
            }
            Trigger::SlowCall { .. } => {
                // Entered by a call, the frame is where that call pushed
                // its return address; by a jump (a tail call), it is the
                // frame of the function that jumped, which this call will
                // return through.
                let frame = self
                    .call_sp
                    .take()
                    .or_else(|| self.open_calls.last().map(|&(f, _)| f));
                if let Some(frame) = frame {
                    while self.open_calls.last().is_some_and(|&(f, _)| f <= frame) {
                        self.open_calls.pop();
                    }
                    self.open_calls.push((frame, self.now + 1));
                }
            }
            _ => {}
        }
    }

    /// The trace this thread has now, for a snapshot: taken at block start
    /// `at` (the thread leaves traced code there, as when the kernel
    /// disables PT), or in a system call (`None`, out of traced code
    /// already).
    pub fn trace(&mut self, pid: i32, at: Option<u64>, last: bool) -> Handed {
        if let Some(at) = at {
            self.retire_pending(at);
            if self.unit.tracing() {
                self.unit.interrupt(at, self.now);
            }
        }
        self.resync = true;
        self.unit.finish();
        self.cut(0);
        let comm = crate::process::comm(pid, self.tid);
        if !comm.is_empty() {
            self.comm = comm;
        }
        let ring = self.unit.ring();
        let trace = ThreadTrace {
            pid,
            tid: self.tid,
            comm: self.comm.clone(),
            aux: ring.snapshot().to_vec(),
            aux_head: ring.head(),
            wrapped: ring.wrapped(),
            instructions: self.instructions,
        };
        if std::env::var_os("PTSCOPE_PLUGIN_DEBUG").is_some() {
            eprintln!(
                "trace tid {} at {at:?} last {last} log {}",
                self.tid,
                self.log.len()
            );
        }
        let log = match last {
            true => std::mem::take(&mut self.log),
            false => self.log.clone(),
        };
        let pieces = ThreadPieces {
            tid: self.tid,
            pieces: self.pieces.iter().copied().collect(),
        };
        Handed { trace, log, pieces }
    }
}

/// Runs `f` on this thread's state, made on the thread's first block.
fn with_thread(plugin: &'static Plugin, f: impl FnOnce(&mut ThreadState)) {
    THREAD.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return;
        };
        if slot.is_none() {
            *slot = Some(start_thread(plugin));
        }
        if let Some(t) = slot.as_mut() {
            f(t);
        }
    });
}

/// A thread runs its first block: it gets its unit, its clock
/// (from the clone that made it), and its sideband.
fn start_thread(plugin: &'static Plugin) -> ThreadState {
    let tid = nix::unistd::gettid().as_raw();
    let pid = plugin.pid;
    let now = plugin.clone_clock.load(Ordering::Acquire);
    let mut sh = plugin.shared();
    let mut t = ThreadState::new(plugin, tid, now);
    t.unit.set_filter(sh.filter.clone());
    t.filter_generation = plugin.filter_generation.load(Ordering::Acquire);
    sh.running.insert(tid);
    if sh.seen.insert(tid) {
        let first = !sh.started;
        sh.emit(now, SidebandEvent::ItraceStart { pid, tid });
        if first {
            sh.started = true;
            // QEMU's threads carry its own name; the program's is what a
            // native run would show, and what threads made later inherit.
            crate::process::name_thread(&plugin.config.cmdline);
            let comm = crate::process::comm(pid, tid);
            sh.emit(
                now,
                SidebandEvent::Comm {
                    pid,
                    tid,
                    comm,
                    exec: true,
                },
            );
            let trigger = sh.refresh_maps(pid, tid, now);
            sh.publish(plugin, trigger);
            plugin.report(&mut sh, ptscope_capture::qemu::wire::Report::Started);
        } else {
            sh.emit(
                now,
                SidebandEvent::Comm {
                    pid,
                    tid,
                    comm: t.comm.clone(),
                    exec: false,
                },
            );
        }
    }
    t
}

/// QEMU runs `block` on this thread.
pub fn on_block(block: &'static Block) {
    let Some(plugin) = plugin() else { return };
    if plugin.finished.load(Ordering::Relaxed) {
        (plugin.snapshots.reset_once)(plugin);
        return;
    }
    // After the last snapshot was asked for, a thread still answers it.
    with_thread(plugin, |t| t.run(plugin, block));
}

/// The instruction at `ip` is about to run (`ip_log` only).
pub fn on_insn(ip: u64) {
    THREAD.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            if let Some(t) = slot.as_mut() {
                // QEMU runs each iteration of a REP string instruction as
                // a block of its own; PT retires it once.
                if t.log.last() == Some(&ip)
                    && t.pending.is_some_and(|p| p.last.repeats && p.last_ip == ip)
                {
                    return;
                }
                t.log.push(ip);
            }
        }
    });
}

/// A call or return of this thread accessed the stack at `addr`.
pub fn on_stack_access(addr: u64) {
    THREAD.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            if let Some(t) = slot.as_mut() {
                t.call_sp = Some(addr);
            }
        }
    });
}

/// Takes this thread's state out of thread-local storage (for a system
/// call, or for good when it exits).
pub fn take() -> Option<ThreadState> {
    THREAD.with(|cell| cell.try_borrow_mut().ok()?.take())
}

/// Gives this thread its state back.
pub fn put(t: ThreadState) {
    THREAD.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            *slot = Some(t);
        }
    });
}

impl ThreadState {
    /// The thread enters a system call: the `syscall` instruction retires
    /// (TIP.PGD) before the kernel runs.
    /// In per-CPU mode its piece of trace ends there, and the kernel
    /// takes its share of virtual time.
    pub fn enter_kernel(&mut self) {
        if let Some(p) = self.pending {
            let next = p.last.next_ip(p.last_ip);
            self.retire_pending(next);
        }
        self.cut(KERNEL_NS);
    }

    /// The virtual clock moves to at least `time` (a futex wake, seen in
    /// another thread, must come before what this thread does next).
    pub fn wait_until(&mut self, time: u64) {
        self.now = self.now.max(time);
    }
}
