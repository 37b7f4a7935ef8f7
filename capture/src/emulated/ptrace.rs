//! Thin wrappers over ptrace(2) and the few raw calls the tracer needs.
//! This is one of the modules allowed to hold `unsafe`.

use nix::sys::ptrace::{self, Options};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::error::CaptureError;

pub const OPTIONS: Options = Options::PTRACE_O_TRACECLONE
    .union(Options::PTRACE_O_TRACEEXEC)
    .union(Options::PTRACE_O_TRACEEXIT);

fn err(op: &'static str, tid: i32) -> impl FnOnce(nix::errno::Errno) -> CaptureError {
    move |errno| CaptureError::Ptrace { op, tid, errno }
}

/// Spawns `argv` stopped before its exec, so that the tracer can seize it
/// and see the exec: the child stops itself with SIGSTOP, then execs.
pub fn spawn_stopped(argv: &[String], cwd: Option<&std::path::Path>) -> Result<i32, CaptureError> {
    use std::ffi::CString;
    let spawn_err = |error| CaptureError::Spawn {
        program: argv[0].clone(),
        error,
    };
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| spawn_err(std::io::Error::other("argument contains a NUL byte")))?;
    // Resolve the program first, so that "not found" is an error here and
    // not an exit status of the child.
    if argv.is_empty() {
        return Err(CaptureError::Invalid("no command to run".into()));
    }
    let cdir = match cwd {
        Some(d) => {
            if !d.is_dir() {
                return Err(CaptureError::Invalid(format!(
                    "working directory {} does not exist",
                    d.display()
                )));
            }
            Some(
                CString::new(d.as_os_str().as_encoded_bytes())
                    .map_err(|_| spawn_err(std::io::Error::other("bad directory")))?,
            )
        }
        None => None,
    };
    let program = resolve_program(&argv[0], cwd).ok_or_else(|| {
        spawn_err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such program",
        ))
    })?;
    let cprog = CString::new(program.as_os_str().as_encoded_bytes())
        .map_err(|_| spawn_err(std::io::Error::other("bad path")))?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let group = crate::supervise::target_group();
    // SAFETY: the child only calls async-signal-safe functions (chdir,
    // setpgid, raise, execv, _exit) on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(spawn_err(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: see above; `ptrs` is NUL-terminated and outlives execv.
        unsafe {
            if let Some(d) = &cdir {
                if libc::chdir(d.as_ptr()) != 0 {
                    libc::_exit(127);
                }
            }
            // The terminal's group, where Ctrl-C reaches it.
            if group > 0 {
                libc::setpgid(0, group);
            }
            libc::raise(libc::SIGSTOP);
            libc::execv(cprog.as_ptr(), ptrs.as_ptr());
            libc::_exit(127);
        }
    }
    Ok(pid)
}

fn resolve_program(name: &str, cwd: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &std::path::Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = std::path::PathBuf::from(name);
        // A relative path is relative to the working directory it runs in.
        let p = match cwd {
            Some(d) if p.is_relative() => d.join(p),
            _ => p,
        };
        return is_exec(&p).then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| is_exec(p))
    })
}

pub fn seize(tid: i32) -> Result<(), CaptureError> {
    ptrace::seize(Pid::from_raw(tid), OPTIONS).map_err(err("seize", tid))
}

pub fn interrupt(tid: i32) -> Result<(), CaptureError> {
    ptrace::interrupt(Pid::from_raw(tid)).map_err(err("interrupt", tid))
}

pub fn step(tid: i32, sig: Option<Signal>) -> Result<(), CaptureError> {
    ptrace::step(Pid::from_raw(tid), sig).map_err(err("singlestep", tid))
}

pub fn cont(tid: i32, sig: Option<Signal>) -> Result<(), CaptureError> {
    ptrace::cont(Pid::from_raw(tid), sig).map_err(err("cont", tid))
}

pub fn detach(tid: i32, sig: Option<Signal>) -> Result<(), CaptureError> {
    ptrace::detach(Pid::from_raw(tid), sig).map_err(err("detach", tid))
}

pub fn rip(tid: i32) -> Result<u64, CaptureError> {
    Ok(regs(tid)?.rip)
}

pub fn regs(tid: i32) -> Result<libc::user_regs_struct, CaptureError> {
    ptrace::getregs(Pid::from_raw(tid)).map_err(err("getregs", tid))
}

/// The `si_code` of the signal that stopped `tid`.
pub fn si_code(tid: i32) -> Result<i32, CaptureError> {
    ptrace::getsiginfo(Pid::from_raw(tid))
        .map(|i| i.si_code)
        .map_err(err("getsiginfo", tid))
}

pub fn event_msg(tid: i32) -> Result<u64, CaptureError> {
    ptrace::getevent(Pid::from_raw(tid))
        .map(|v| v as u64)
        .map_err(err("geteventmsg", tid))
}

/// Waits for a stop of `tid` (or of any traced thread with `None`).
/// Returns `Ok(None)` when `nohang` is set and nothing is pending.
pub fn wait(tid: Option<i32>, nohang: bool) -> Result<Option<WaitStatus>, CaptureError> {
    let mut flags = WaitPidFlag::__WALL;
    if nohang {
        flags |= WaitPidFlag::WNOHANG;
    }
    let pid = tid.map(Pid::from_raw);
    loop {
        match waitpid(pid, Some(flags)) {
            Ok(WaitStatus::StillAlive) => return Ok(None),
            Ok(s) => return Ok(Some(s)),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(err("waitpid", tid.unwrap_or(-1))(e)),
        }
    }
}

pub fn kill(pid: i32, sig: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
}
