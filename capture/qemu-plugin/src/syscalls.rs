//! System calls, as QEMU reports them on entry and return. The thread's
//! `syscall` instruction retires on entry (TIP.PGD: the kernel is not
//! traced), and its state is parked for the call's length. Some calls
//! matter beyond that:
//! - `clone` of a thread: the new thread's clock starts at the clone;
//! - `futex` wakes: a woken thread's clock moves past its waker's;
//! - `mmap`, `mprotect`, `munmap`, `mremap`: new code mappings become
//!   sideband, and the trigger is looked for in them;
//! - `exit` of a thread: its trace is final;
//! - `exit_group`: the last snapshot, written before QEMU exits;
//! - `execve`: QEMU 7.2 hands the new program to the host, which runs it
//!   natively, so the trace ends there; a checkpoint is written, and
//!   retracted if the call fails;
//! - `fork` (a clone without CLONE_VM): the child is not traced.

use std::sync::atomic::Ordering;

use ptscope_capture::qemu::wire::Report;
use ptscope_capture::recording::{SidebandEvent, StopReason};

use crate::coordinator;
use crate::process::plugin;
use crate::thread;

const SYS_MMAP: i64 = 9;
const SYS_MPROTECT: i64 = 10;
const SYS_MUNMAP: i64 = 11;
const SYS_MREMAP: i64 = 25;
const SYS_CLONE: i64 = 56;
const SYS_FORK: i64 = 57;
const SYS_VFORK: i64 = 58;
const SYS_EXECVE: i64 = 59;
const SYS_EXIT: i64 = 60;
const SYS_FUTEX: i64 = 202;
const SYS_EXIT_GROUP: i64 = 231;
const SYS_EXECVEAT: i64 = 322;
const SYS_CLONE3: i64 = 435;

const CLONE_VM: u64 = 0x100;

const FUTEX_WAIT: u64 = 0;
const FUTEX_WAKE: u64 = 1;
const FUTEX_REQUEUE: u64 = 3;
const FUTEX_CMP_REQUEUE: u64 = 4;
const FUTEX_WAKE_OP: u64 = 5;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_WAKE_BITSET: u64 = 10;
const FUTEX_CMD_MASK: u64 = 0x7f;

thread_local! {
    /// The futex word a thread waits on, from entry to return.
    static WAITING_ON: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
    /// The warning an `execve` in progress added, taken back if it fails.
    static EXEC_WARNING: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Whether a clone with these arguments makes a thread (shares memory).
fn clone_flags(num: i64, args: &[u64; 6]) -> Option<u64> {
    match num {
        SYS_CLONE => Some(args[0]),
        SYS_CLONE3 => {
            // struct clone_args starts with its u64 flags.
            let mut flags = [0u8; 8];
            crate::api::read_guest(args[0], &mut flags).then(|| u64::from_le_bytes(flags))
        }
        SYS_FORK | SYS_VFORK => Some(0),
        _ => None,
    }
}

/// A thread enters system call `num`.
pub fn on_entry(num: i64, args: [u64; 6]) {
    let Some(plugin) = plugin() else { return };
    if plugin.done.load(Ordering::Acquire) {
        if plugin.foreign() {
            return;
        }
        // The last snapshot may still wait for this thread's trace.
        if let Some(mut t) = thread::take() {
            t.enter_kernel();
            coordinator::answer_in_kernel(plugin, &mut t);
            thread::put(t);
        }
        if num == SYS_EXIT_GROUP {
            coordinator::wait_all_written(plugin);
        }
        return;
    }
    let Some(mut t) = thread::take() else {
        crate::process::debug(&format!("syscall {num} without state"));
        return;
    };
    t.enter_kernel();
    let pid = plugin.pid;
    let tid = t.tid;
    match num {
        SYS_EXIT => {
            let mut sh = plugin.shared();
            sh.running.remove(&tid);
            let handed = t.trace(pid, None, true);
            sh.finished.push(handed.trace);
            sh.finished_logs.push((tid, handed.log));
            sh.finished_pieces.push(handed.pieces);
            sh.emit(
                t.now,
                SidebandEvent::Exit {
                    pid,
                    ppid: pid,
                    tid,
                    ptid: pid,
                },
            );
            if let Some(p) = sh.pending.as_mut() {
                p.forget(tid);
            }
            coordinator::settle(&mut sh);
            plugin.changed.notify_all();
            return;
        }
        SYS_EXIT_GROUP => {
            let n = coordinator::request_with(
                plugin,
                StopReason::ProcessExit,
                true,
                false,
                Some((&mut t, None)),
            );
            thread::put(t);
            if n.is_some() || plugin.done.load(Ordering::Acquire) {
                coordinator::wait_all_written(plugin);
            }
            return;
        }
        SYS_EXECVE | SYS_EXECVEAT => {
            let mut sh = plugin.shared();
            let path = read_c_string(if num == SYS_EXECVE { args[0] } else { args[1] });
            let warning = format!(
                "the program called execve({path}) at {} ns: QEMU runs the new program natively, out of the trace",
                t.now.saturating_sub(plugin.config.start_time)
            );
            sh.warnings.push(warning.clone());
            EXEC_WARNING.with(|w| w.replace(Some(warning)));
            drop(sh);
            let n = coordinator::request_with(
                plugin,
                StopReason::ProcessExit,
                false,
                true,
                Some((&mut t, None)),
            );
            if let Some(n) = n {
                coordinator::wait_written(plugin, n);
            }
        }
        SYS_FUTEX => {
            let (uaddr, op) = (args[0], args[1] & FUTEX_CMD_MASK);
            match op {
                FUTEX_WAKE | FUTEX_WAKE_BITSET | FUTEX_WAKE_OP | FUTEX_REQUEUE
                | FUTEX_CMP_REQUEUE => {
                    let mut sh = plugin.shared();
                    let now = t.now;
                    let w = sh.wakes.entry(uaddr).or_default();
                    *w = (*w).max(now);
                    if matches!(op, FUTEX_WAKE_OP | FUTEX_REQUEUE | FUTEX_CMP_REQUEUE) {
                        // The second word's waiters are woken (or moved) too.
                        let w = sh.wakes.entry(args[4]).or_default();
                        *w = (*w).max(now);
                    }
                }
                FUTEX_WAIT | FUTEX_WAIT_BITSET => WAITING_ON.with(|w| w.set(Some(uaddr))),
                _ => {}
            }
        }
        _ => {
            if let Some(flags) = clone_flags(num, &args) {
                if flags & CLONE_VM != 0 {
                    plugin.clone_clock.fetch_max(t.now, Ordering::AcqRel);
                }
            }
        }
    }
    let mut sh = plugin.shared();
    coordinator::park(plugin, &mut sh, t);
}

/// A thread returns from system call `num` with `ret`.
pub fn on_return(num: i64, ret: i64) {
    let Some(plugin) = plugin() else { return };
    let forking = matches!(num, SYS_CLONE | SYS_CLONE3 | SYS_FORK | SYS_VFORK);
    if forking && ret == 0 && plugin.foreign() {
        // The child of a fork: a copy of this plugin in another process,
        // which nobody reads. It traces nothing.
        plugin.done.store(true, Ordering::Release);
        return;
    }
    let tid = nix::unistd::gettid().as_raw();
    let mut sh = plugin.shared();
    let Some(mut t) = sh.parked.remove(&tid) else {
        return;
    };
    if plugin.done.load(Ordering::Acquire) {
        drop(sh);
        thread::put(t);
        return;
    }
    sh.running.insert(tid);
    let pid = plugin.pid;
    match num {
        SYS_MMAP | SYS_MPROTECT | SYS_MUNMAP | SYS_MREMAP if ret >= 0 || num == SYS_MMAP => {
            let trigger = sh.refresh_maps(pid, tid, t.now);
            sh.publish(plugin, trigger);
        }
        SYS_CLONE | SYS_CLONE3 if ret > 0 => {
            let child = ret as i32;
            sh.emit(
                t.now,
                SidebandEvent::Fork {
                    pid,
                    ppid: pid,
                    tid: child,
                    ptid: tid,
                },
            );
        }
        SYS_FUTEX => {
            if let Some(uaddr) = WAITING_ON.with(|w| w.take()) {
                if let Some(&woken) = sh.wakes.get(&uaddr) {
                    t.wait_until(woken);
                }
            }
        }
        SYS_EXECVE | SYS_EXECVEAT => {
            // The program is still ours: the checkpoint does not stand.
            plugin.report(&mut sh, Report::Retract);
            if let Some(w) = EXEC_WARNING.with(|w| w.take()) {
                sh.warnings.retain(|x| *x != w);
            }
        }
        _ => {}
    }
    drop(sh);
    thread::put(t);
}

/// The NUL-terminated string at guest address `addr`, for messages.
fn read_c_string(addr: u64) -> String {
    let mut out = Vec::new();
    let mut chunk = [0u8; 64];
    while out.len() < 4096 {
        if !crate::api::read_guest(addr + out.len() as u64, &mut chunk[..1]) {
            break;
        }
        if chunk[0] == 0 {
            break;
        }
        out.push(chunk[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}
