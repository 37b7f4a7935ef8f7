//! This module wraps the ptrace calls only the emulated backend makes:
//! single-stepping a thread, interrupting it, and reading its registers,
//! signal and event message at a stop. Each wrapper turns a failure into a
//! [`CaptureError::Ptrace`] naming the call and the thread, because a
//! tracee can vanish at any time and the tracer must tell that (ESRCH)
//! from a real failure. Seizing, resuming, detaching and waiting, which
//! the Intel PT backend needs as well, are in [`crate::tracee`].

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::error::CaptureError;
use crate::tracee::ptrace_error as err;

pub(crate) fn interrupt(tid: i32) -> Result<(), CaptureError> {
    ptrace::interrupt(Pid::from_raw(tid)).map_err(err("interrupt", tid))
}

pub(crate) fn step(tid: i32, sig: Option<Signal>) -> Result<(), CaptureError> {
    ptrace::step(Pid::from_raw(tid), sig).map_err(err("singlestep", tid))
}

pub(crate) fn rip(tid: i32) -> Result<u64, CaptureError> {
    Ok(regs(tid)?.rip)
}

pub(crate) fn regs(tid: i32) -> Result<libc::user_regs_struct, CaptureError> {
    ptrace::getregs(Pid::from_raw(tid)).map_err(err("getregs", tid))
}

/// Moves `tid` (whose registers are `regs`) on to `rip`.
pub(crate) fn set_rip(
    tid: i32,
    mut regs: libc::user_regs_struct,
    rip: u64,
) -> Result<(), CaptureError> {
    regs.rip = rip;
    ptrace::setregs(Pid::from_raw(tid), regs).map_err(err("setregs", tid))
}

/// The `si_code` of the signal that stopped `tid`.
pub(crate) fn si_code(tid: i32) -> Result<i32, CaptureError> {
    ptrace::getsiginfo(Pid::from_raw(tid))
        .map(|i| i.si_code)
        .map_err(err("getsiginfo", tid))
}

pub(crate) fn event_msg(tid: i32) -> Result<u64, CaptureError> {
    ptrace::getevent(Pid::from_raw(tid))
        .map(|v| v as u64)
        .map_err(err("geteventmsg", tid))
}
