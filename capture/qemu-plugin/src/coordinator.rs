//! Snapshots across threads, and the conversation with ptscope.
//!
//! A snapshot is asked for by a thread at a trigger, by ptscope (Ctrl-C,
//! `--duration`) or by the exit. The asker hands over its own trace and
//! those of the threads in system calls, whose states are parked in
//! [`crate::process::Shared`]; every other thread hands its own over at
//! its next block, where it sees the snapshot epoch change. Once all have
//! (or after [`ANSWER_TIMEOUT`], for a thread stuck in QEMU), the
//! coordinator thread writes the snapshot into the capture directory and
//! reports it. Nothing here blocks a guest thread, except the exit, which
//! waits for its snapshot to be written before QEMU ends the process.
//!
//! A running thread reaches [`request`], [`answer`] and [`reset_once`]
//! through the [`crate::thread::Snapshots`] that the crate root's
//! `install` makes of them, not by name (see `thread`'s documentation);
//! the snapshot being gathered, [`Pending`], is defined in `process`,
//! whose state holds it, and has its methods here.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ptscope_capture::qemu::wire::{self, Command, Report, Snapshot, COMMANDS_FIFO, REPORTS_FIFO};
use ptscope_capture::recording::{Capture, StopReason, ThreadTrace};

use crate::process::{plugin, Pending, Plugin, Shared};
use crate::thread::ThreadState;

/// How long a snapshot waits for a running thread to hand its trace over.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the exit waits for its snapshot to be written.
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

impl Pending {
    fn take_from(&mut self, pid: i32, t: &mut ThreadState, at: Option<u64>, epoch: u64) {
        let handed = t.trace(pid, at, self.last);
        self.end_time = self.end_time.max(t.now);
        self.traces.push(handed.trace);
        self.logs.push((t.tid, handed.log));
        self.pieces.push(handed.pieces);
        self.waiting.remove(&t.tid);
        t.epoch = epoch;
    }

    /// Thread `tid` ended and handed its trace to the finished ones.
    pub fn forget(&mut self, tid: i32) {
        self.waiting.remove(&tid);
    }
}

/// Asks for a snapshot that stops for `stop`. `me` is the asking thread's
/// state, with the block it is about to run (`None`: it is in a system
/// call). Does nothing while another snapshot is being gathered, or once
/// the last was taken. Returns the snapshot's number.
pub fn request(
    plugin: &Plugin,
    stop: StopReason,
    last: bool,
    me: Option<(&mut ThreadState, u64)>,
) -> Option<usize> {
    let me = me.map(|(t, at)| (t, Some(at)));
    request_with(plugin, stop, last, false, me)
}

/// [`request`] for a thread in a system call, or for a checkpoint.
pub fn request_with(
    plugin: &Plugin,
    stop: StopReason,
    last: bool,
    checkpoint: bool,
    me: Option<(&mut ThreadState, Option<u64>)>,
) -> Option<usize> {
    let mut sh = plugin.shared();
    crate::process::debug(&format!(
        "request {stop:?} last {last} pending {} done {} me {}",
        sh.pending.is_some(),
        plugin.done.load(Ordering::Acquire),
        me.is_some()
    ));
    if sh.pending.is_some() || plugin.done.load(Ordering::Acquire) {
        return None;
    }
    sh.asked += 1;
    let n = sh.asked;
    let last = last || (!checkpoint && n >= plugin.config.snapshots.max(1));
    let epoch = plugin.epoch.load(Ordering::Acquire) + 1;
    let mut p = Pending {
        n,
        stop,
        last,
        checkpoint,
        traces: Vec::new(),
        logs: Vec::new(),
        pieces: Vec::new(),
        waiting: sh.running.clone(),
        since: Instant::now(),
        end_time: plugin.config.start_time,
    };
    if let Some((t, at)) = me {
        p.take_from(plugin.pid, t, at, epoch);
    }
    for t in sh.parked.values_mut() {
        p.take_from(plugin.pid, t, None, epoch);
    }
    sh.pending = Some(p);
    settle(&mut sh);
    plugin.epoch.store(epoch, Ordering::Release);
    if last {
        plugin.done.store(true, Ordering::Release);
    }
    plugin.changed.notify_all();
    Some(n)
}

/// A running thread saw the epoch change: it hands its trace over, taken
/// at the block it is about to run.
pub fn answer(plugin: &Plugin, t: &mut ThreadState, at: u64) {
    let mut sh = plugin.shared();
    let epoch = plugin.epoch.load(Ordering::Acquire);
    if let Some(p) = sh.pending.as_mut().filter(|p| p.waiting.contains(&t.tid)) {
        p.take_from(plugin.pid, t, Some(at), epoch);
        settle(&mut sh);
        plugin.changed.notify_all();
    }
    t.epoch = epoch;
}

/// A thread in a system call hands its trace over, if the snapshot being
/// gathered waits for it.
pub fn answer_in_kernel(plugin: &Plugin, t: &mut ThreadState) {
    let mut sh = plugin.shared();
    let epoch = plugin.epoch.load(Ordering::Acquire);
    if let Some(p) = sh.pending.as_mut().filter(|p| p.waiting.contains(&t.tid)) {
        p.take_from(plugin.pid, t, None, epoch);
        settle(&mut sh);
        plugin.changed.notify_all();
    }
}

/// Moves the snapshot being gathered to the coordinator's queue once
/// every thread has handed its trace over.
pub fn settle(sh: &mut Shared) {
    if sh.pending.as_ref().is_some_and(|p| p.waiting.is_empty()) {
        let p = sh.pending.take().expect("checked");
        sh.ready.push_back(p);
    }
}

/// A thread parks its state for a system call: a snapshot waiting for it
/// takes its trace now.
pub fn park(plugin: &Plugin, sh: &mut Shared, mut t: ThreadState) {
    sh.running.remove(&t.tid);
    let epoch = plugin.epoch.load(Ordering::Acquire);
    if let Some(p) = sh.pending.as_mut().filter(|p| p.waiting.contains(&t.tid)) {
        p.take_from(plugin.pid, &mut t, None, epoch);
        settle(sh);
        plugin.changed.notify_all();
    }
    t.epoch = epoch;
    sh.parked.insert(t.tid, t);
}

/// Waits until snapshot `n` is written (the exit, an `execve`).
pub fn wait_written(plugin: &Plugin, n: usize) {
    crate::process::debug(&format!("waiting for snapshot {n} to be written"));
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let mut sh = plugin.shared();
    while sh.written < n && !sh.quit {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        plugin.changed.wait_for(&mut sh, left);
    }
}

/// Waits until every snapshot asked for is written: the process must not
/// end with one still in the coordinator's hands.
pub fn wait_all_written(plugin: &Plugin) {
    let asked = plugin.shared().asked;
    wait_written(plugin, asked);
}

/// The process is ending (QEMU's atexit): the last snapshot, if not taken.
pub fn on_exit() {
    let Some(plugin) = plugin() else { return };
    if plugin.foreign() {
        return;
    }
    if plugin.done.load(Ordering::Acquire) {
        wait_all_written(plugin);
        return;
    }
    let mut me = crate::thread::take();
    let n = request_with(
        plugin,
        StopReason::ProcessExit,
        true,
        false,
        me.as_mut().map(|t| (t, None)),
    );
    if let Some(n) = n {
        wait_written(plugin, n);
    }
}

static RESET: AtomicBool = AtomicBool::new(false);

/// Once the last snapshot is written, removes the plugin's callbacks
/// (from a guest thread, where QEMU can do it safely), so that the
/// program runs on at QEMU's own speed. Not before: the exit must still
/// be seen, to wait for the writing.
pub fn reset_once(plugin: &Plugin) {
    if plugin.finished.load(Ordering::Acquire) && !RESET.swap(true, Ordering::AcqRel) {
        crate::api::reset();
    }
}

/// Starts the coordinator and the command reader, once
/// [`crate::process::start`] has set the shared state up.
pub fn spawn() -> Result<(), String> {
    let Some(plugin) = plugin() else {
        return Err("not installed".into());
    };
    let reports = std::fs::OpenOptions::new()
        .write(true)
        .open(plugin.dir.join(REPORTS_FIFO))
        .map_err(|e| {
            format!(
                "cannot open {}: {e}",
                plugin.dir.join(REPORTS_FIFO).display()
            )
        })?;
    let commands = File::open(plugin.dir.join(COMMANDS_FIFO)).map_err(|e| {
        format!(
            "cannot open {}: {e}",
            plugin.dir.join(COMMANDS_FIFO).display()
        )
    })?;
    std::thread::Builder::new()
        .name("ptscope-coord".into())
        .spawn(move || {
            crate::process::block_signals();
            coordinate(plugin, reports)
        })
        .map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("ptscope-cmd".into())
        .spawn(move || {
            crate::process::block_signals();
            read_commands(plugin, commands)
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn read_commands(plugin: &'static Plugin, commands: File) {
    for line in BufReader::new(commands).lines() {
        let Ok(line) = line else { break };
        let stop = match Command::parse(&line) {
            Some(Command::Interrupt) => StopReason::Interrupted,
            Some(Command::Duration) => StopReason::Duration,
            Some(Command::Stop) => break,
            None => continue,
        };
        request_with(plugin, stop, false, false, None);
    }
    // ptscope said stop, or is gone: trace no more, the program runs on.
    plugin.done.store(true, Ordering::Release);
    let mut sh = plugin.shared();
    sh.quit = true;
    plugin.changed.notify_all();
}

/// What the coordinator found to do.
struct Work {
    reports: Vec<Report>,
    snapshot: Option<(Pending, Snapshot)>,
}

fn coordinate(plugin: &'static Plugin, mut reports: File) {
    loop {
        let work = next_work(plugin);
        let Some(work) = work else { return };
        let mut ok = true;
        for r in &work.reports {
            ok &= writeln!(reports, "{}", r.to_line()).is_ok();
        }
        if let Some((p, snapshot)) = work.snapshot {
            crate::process::debug(&format!("writing snapshot {} waiting {:?}", p.n, p.waiting));
            let name = match p.checkpoint {
                true => "checkpoint".to_string(),
                false => format!("snapshot-{}", p.n),
            };
            let path = plugin.dir.join(name);
            let report = match wire::write_snapshot(&path, &snapshot) {
                Ok(()) if p.checkpoint => Report::Checkpoint { path },
                Ok(()) => Report::Snapshot { n: p.n, path },
                Err(e) => Report::Warning(format!("snapshot {} was lost: {e}", p.n)),
            };
            ok &= writeln!(reports, "{}", report.to_line()).is_ok();
            if p.last {
                ok &= writeln!(reports, "{}", Report::Done.to_line()).is_ok();
            }
            crate::process::debug(&format!("wrote snapshot {} ok {ok}", p.n));
            let mut sh = plugin.shared();
            sh.written = sh.written.max(p.n);
            if p.last {
                plugin.finished.store(true, Ordering::Release);
            }
            plugin.changed.notify_all();
        }
        if !ok {
            // ptscope is gone: nobody reads the trace, so stop writing it
            // and let the program run on.
            plugin.done.store(true, Ordering::Release);
            let mut sh = plugin.shared();
            sh.quit = true;
            plugin.changed.notify_all();
            return;
        }
    }
}

/// Waits for reports to send or a snapshot to write; `None` to stop.
fn next_work(plugin: &'static Plugin) -> Option<Work> {
    let mut sh = plugin.shared();
    loop {
        // A thread stuck in QEMU does not hold the snapshot up for long.
        if sh
            .pending
            .as_ref()
            .is_some_and(|p| p.since.elapsed() > ANSWER_TIMEOUT)
        {
            let p = sh.pending.take().expect("checked");
            sh.ready.push_back(p);
        }
        let next = sh.ready.pop_front();
        if next.is_some() || !sh.outbox.is_empty() {
            let reports = std::mem::take(&mut sh.outbox);
            let snapshot = next.map(|p| finish(plugin, &mut sh, p));
            return Some(Work { reports, snapshot });
        }
        if sh.quit {
            return None;
        }
        plugin.changed.wait_for(&mut sh, Duration::from_millis(100));
    }
}

/// The capture of a gathered snapshot.
fn finish(plugin: &Plugin, sh: &mut Shared, mut p: Pending) -> (Pending, Snapshot) {
    let mut warnings = sh.warnings.clone();
    if !p.waiting.is_empty() {
        let mut tids: Vec<i32> = p.waiting.iter().copied().collect();
        tids.sort_unstable();
        warnings.push(format!(
            "threads {tids:?} did not hand their traces over within {} s; the snapshot lacks them",
            ANSWER_TIMEOUT.as_secs()
        ));
    }
    warnings.extend(trigger_warnings(plugin, sh));
    let mut threads: Vec<ThreadTrace> = sh.finished.clone();
    threads.append(&mut p.traces);
    threads.sort_by_key(|t| t.tid);
    let mut pieces = sh.finished_pieces.clone();
    pieces.append(&mut p.pieces);
    if plugin.config.per_cpu.is_none() {
        pieces.clear();
    }
    let mut ip_log = sh.finished_logs.clone();
    ip_log.append(&mut p.logs);
    ip_log.retain(|(_, log)| !log.is_empty() || plugin.config.ip_log);
    ip_log.sort_by_key(|(tid, _)| *tid);
    if !plugin.config.ip_log {
        ip_log.clear();
    }
    let end_time = p.end_time;
    let cap = Capture {
        pid: plugin.pid,
        threads,
        cpus: Vec::new(),
        sideband: sh.sideband.clone(),
        vdso: None,
        start_time: plugin.config.start_time,
        end_time,
        stop: p.stop.clone(),
        cmdline: plugin.config.cmdline.clone(),
        ip_log,
        wall: Duration::ZERO,
        exit_code: None,
        child: None,
        pt: plugin.config.pt.clone(),
        inherit: false,
        trigger_registers: Vec::new(),
        warnings,
    };
    (
        p,
        Snapshot {
            capture: cap,
            pieces,
        },
    )
}

/// What the capture says of triggers that could not fire, and of its
/// range, in the emulated backend's words.
fn trigger_warnings(plugin: &Plugin, sh: &Shared) -> Vec<String> {
    use ptscope_capture::trigger::{missed_slow_calls_warning, unarmed_warning};
    let mut out = Vec::new();
    if let Some(sym) = &sh.symbol {
        if sym.address().is_none() {
            out.push(ptscope_capture::CaptureError::SymbolNotFound(sym.name().into()).to_string());
        }
    }
    if let (Some(wanted), true) = (plugin.config.arm_after, sh.unarmed > 0) {
        out.push(unarmed_warning(wanted, sh.unarmed));
    }
    if let (
        ptscope_capture::trigger::Trigger::SlowCall {
            symbol,
            slower_than,
        },
        true,
    ) = (&plugin.config.trigger, sh.missed > 0)
    {
        out.push(missed_slow_calls_warning(
            sh.missed,
            symbol,
            *slower_than,
            sh.missed_longest,
        ));
    }
    if let Some(r) = &sh.range {
        out.extend(r.warnings(sh.range_entries));
    }
    out
}
