//! A tracee is the process a capture traces, and this module starts it and
//! lets it go for both backends. A command is spawned stopped before its
//! exec, so that the capture can seize it and run it to the exec: then its
//! new image is mapped, and the trigger is resolved and tracing armed
//! before any of its code runs. The ptrace calls that seize, resume,
//! detach and wait for a tracee (a spawned command, or any thread of an
//! attached process) are here too, and so is waiting for a spawned command
//! once the capture has let it go, or reaping it in the background.
//!
//! Forking and exec'ing a command is raw FFI, which is why this is one of
//! the modules allowed to hold `unsafe`; the emulated backend's stepping
//! and register reads stay in `emulated::ptrace`, which needs none.

use nix::sys::ptrace::{self, Options};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::error::CaptureError;

/// The events a seized tracee stops at: new threads, exec and exits.
pub const OPTIONS: Options = Options::PTRACE_O_TRACECLONE
    .union(Options::PTRACE_O_TRACEEXEC)
    .union(Options::PTRACE_O_TRACEEXIT);

/// A failed ptrace `op` on thread `tid`, as a [`CaptureError`].
pub(crate) fn ptrace_error(
    op: &'static str,
    tid: i32,
) -> impl FnOnce(nix::errno::Errno) -> CaptureError {
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

/// The file `name` runs: a path (relative to `cwd`), or a name on the PATH.
/// Either must be an executable regular file, as execvp takes it: a
/// directory or a file without execute permission of that name earlier on
/// the PATH is passed over for a later one. Whatever resolves a program
/// the user names (the capture's spawn, the filter's default binary, the
/// window's Capture panel) resolves it here, so all agree on which file
/// runs.
pub fn resolve_program(name: &str, cwd: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    resolve_program_on(name, cwd, std::env::var_os("PATH").as_deref())
}

/// [`resolve_program`] over the search path `path` (the PATH's value;
/// `None` when it is unset, and then only paths resolve).
fn resolve_program_on(
    name: &str,
    cwd: Option<&std::path::Path>,
    path: Option<&std::ffi::OsStr>,
) -> Option<std::path::PathBuf> {
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
    std::env::split_paths(path?)
        .map(|d| d.join(name))
        .find(|p| is_exec(p))
}

/// Lets a command stopped before its exec (by [`spawn_stopped`]) run to
/// the exec, seized with [`OPTIONS`]: then its executable is mapped, and
/// the trigger can be resolved before any of its code runs. Returns with
/// the command stopped at the exec event; `program` names it in errors.
pub fn run_to_exec(pid: i32, program: &str) -> Result<(), CaptureError> {
    seize(pid)?;
    kill(pid, Signal::SIGCONT);
    // The first stops are the group-stop and SIGCONT.
    loop {
        match wait(Some(pid), false)? {
            Some(WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_EXEC)) => return Ok(()),
            Some(WaitStatus::Exited(_, code)) => {
                return Err(CaptureError::Invalid(format!(
                    "`{program}` exited with {code} before it started (is it an executable?)"
                )))
            }
            Some(WaitStatus::Stopped(_, Signal::SIGCONT | Signal::SIGSTOP)) => cont(pid, None)?,
            Some(WaitStatus::Stopped(_, sig)) => cont(pid, Some(sig))?,
            Some(_) => cont(pid, None)?,
            None => {}
        }
    }
}

pub fn seize(tid: i32) -> Result<(), CaptureError> {
    ptrace::seize(Pid::from_raw(tid), OPTIONS).map_err(ptrace_error("seize", tid))
}

pub fn cont(tid: i32, sig: Option<Signal>) -> Result<(), CaptureError> {
    ptrace::cont(Pid::from_raw(tid), sig).map_err(ptrace_error("cont", tid))
}

pub fn detach(tid: i32, sig: Option<Signal>) -> Result<(), CaptureError> {
    ptrace::detach(Pid::from_raw(tid), sig).map_err(ptrace_error("detach", tid))
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
            Err(e) => return Err(ptrace_error("waitpid", tid.unwrap_or(-1))(e)),
        }
    }
}

pub fn kill(pid: i32, sig: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
}

/// Waits for a spawned command to end: its exit code (128 + the signal if
/// killed by one).
pub fn wait_child(pid: i32) -> Option<i32> {
    loop {
        if let Some(code) = try_wait_child(pid) {
            return (code >= 0).then_some(code);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Reaps a spawned command nobody waits for, when it ends on its own.
pub fn reap_later(pid: i32) {
    std::thread::spawn(move || wait_child(pid));
}

/// A spawned command's exit status if it has ended, without waiting
/// (-1 if it is not our child).
pub fn try_wait_child(pid: i32) -> Option<i32> {
    release_threads(pid);
    let all = WaitPidFlag::WNOHANG | WaitPidFlag::__WALL;
    loop {
        match waitpid(Pid::from_raw(pid), Some(all)) {
            Ok(WaitStatus::Exited(_, code)) => return Some(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Some(128 + sig as i32),
            Ok(status) => {
                let _ = let_go(status);
                return None;
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::ECHILD) => return Some(-1),
            Err(_) => return None,
        }
    }
}

/// Lets go of the threads of `pid` that are still traced by us once a
/// capture has ended: a thread that exited just as the capture stopped
/// stays a traced zombie until its tracer reaps it, and until then the
/// whole command cannot be reaped (its leader waits for every thread); a
/// thread in a ptrace stop would stay stopped. Each is reaped or detached.
fn release_threads(pid: i32) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    let all = WaitPidFlag::WNOHANG | WaitPidFlag::__WALL;
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if tid != pid {
            if let Ok(status) = waitpid(Pid::from_raw(tid), Some(all)) {
                let _ = let_go(status);
            }
        }
    }
}

/// Detaches the thread a wait found in a ptrace stop, passing on the
/// signal that stopped it unless it is ours (the attach's SIGSTOP, a
/// step's SIGTRAP). Whether it was one.
fn let_go(status: WaitStatus) -> bool {
    match status {
        WaitStatus::Stopped(p, sig) => {
            let pass = (sig != Signal::SIGSTOP && sig != Signal::SIGTRAP).then_some(sig);
            let _ = ptrace::detach(p, pass);
            true
        }
        WaitStatus::PtraceEvent(p, _, _) | WaitStatus::PtraceSyscall(p) => {
            let _ = ptrace::detach(p, None);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn spawn_error(argv: &[&str], cwd: Option<&Path>) -> CaptureError {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        spawn_stopped(&argv, cwd).unwrap_err()
    }

    /// Spawns `argv` stopped, as the backends do, and waits for its stop.
    fn spawned(argv: &[&str], cwd: Option<&Path>) -> i32 {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let pid = spawn_stopped(&argv, cwd).unwrap();
        let stopped = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WUNTRACED));
        assert!(
            matches!(stopped, Ok(WaitStatus::Stopped(..))),
            "{stopped:?}"
        );
        pid
    }

    #[test]
    fn programs_are_found_as_a_shell_would() {
        let sh = resolve_program("sh", None).expect("sh is on the PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            resolve_program("/bin/sh", None),
            Some(Path::new("/bin/sh").into())
        );
        // A relative path is taken from the working directory.
        assert_eq!(
            resolve_program("bin/sh", Some(Path::new("/"))),
            Some(Path::new("/bin/sh").into())
        );
        assert_eq!(
            resolve_program("bin/sh", Some(Path::new("/nonexistent"))),
            None
        );
        // Neither a file without execute permission nor a directory runs.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data"), "").unwrap();
        assert_eq!(resolve_program("./data", Some(dir.path())), None);
        assert_eq!(resolve_program("/bin", None), None);
        assert_eq!(resolve_program("ptscope-no-such-program", None), None);
    }

    #[test]
    fn a_name_on_the_path_is_the_first_executable_regular_file_of_that_name() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<_> = ["dir", "data", "exec", "later"]
            .iter()
            .map(|d| {
                let d = root.path().join(d);
                std::fs::create_dir(&d).unwrap();
                d
            })
            .collect();
        // Passed over: a directory of the name, and a file without
        // execute permission.
        std::fs::create_dir(dirs[0].join("tool")).unwrap();
        std::fs::write(dirs[1].join("tool"), "#!/bin/sh\n").unwrap();
        // Taken: the first executable one; a later one is shadowed.
        for d in &dirs[2..] {
            let f = d.join("tool");
            std::fs::write(&f, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths(&dirs).unwrap();
        assert_eq!(
            resolve_program_on("tool", None, Some(&path)),
            Some(dirs[2].join("tool"))
        );
        // Without an executable one there is none, and without a PATH only
        // paths resolve.
        let path = std::env::join_paths(&dirs[..2]).unwrap();
        assert_eq!(resolve_program_on("tool", None, Some(&path)), None);
        assert_eq!(resolve_program_on("tool", None, None), None);
        let exec = dirs[2].join("tool");
        assert_eq!(
            resolve_program_on(exec.to_str().unwrap(), None, None),
            Some(exec)
        );
    }

    #[test]
    fn a_command_that_cannot_start_is_an_error_here() {
        let e = spawn_error(&[], None);
        assert!(matches!(e, CaptureError::Invalid(_)), "{e}");
        let e = spawn_error(&["/nonexistent/prog"], None);
        let CaptureError::Spawn { program, error } = e else {
            panic!("{e}")
        };
        assert_eq!(program, "/nonexistent/prog");
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        let e = spawn_error(&["/bin/sh", "a\0b"], None);
        assert!(matches!(e, CaptureError::Spawn { .. }), "{e}");
        let e = spawn_error(&["/bin/sh"], Some(Path::new("/nonexistent")));
        assert!(e.to_string().contains("/nonexistent does not exist"), "{e}");
    }

    #[test]
    fn a_spawned_command_waits_for_sigcont_in_its_directory() {
        let pid = spawned(
            &["/bin/sh", "-c", "[ \"$(pwd -P)\" = / ] && exit 7"],
            Some(Path::new("/")),
        );
        assert_eq!(try_wait_child(pid), None, "stopped before its exec");
        kill(pid, Signal::SIGCONT);
        assert_eq!(wait_child(pid), Some(7));
        // Reaped: there is no such child any more.
        assert_eq!(try_wait_child(pid), Some(-1));
    }

    #[test]
    fn a_spawned_command_runs_to_its_exec_and_on_when_let_go() {
        let pid = spawned(&["/bin/sh", "-c", "exit 5"], None);
        run_to_exec(pid, "/bin/sh").unwrap();
        // Stopped at the exec: the new image is mapped.
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert!(exe.ends_with("sh") || exe.ends_with("dash") || exe.ends_with("bash"));
        detach(pid, None).unwrap();
        kill(pid, Signal::SIGCONT);
        assert_eq!(wait_child(pid), Some(5));
    }

    #[test]
    fn a_command_whose_exec_fails_exits_before_it_starts() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-a-program");
        std::fs::write(&path, "\x01\x02\x03\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = path.to_string_lossy().into_owned();
        let pid = spawned(&[&path], None);
        let e = run_to_exec(pid, &path).unwrap_err();
        assert!(
            e.to_string().contains("exited with 127 before it started"),
            "{e}"
        );
    }

    #[test]
    fn ptrace_failures_name_the_call_and_the_thread() {
        // Nobody traces this process's own thread 1 << 30: it does not exist.
        let e = cont(1 << 30, None).unwrap_err();
        assert!(matches!(
            e,
            CaptureError::Ptrace {
                op: "cont",
                tid: 1073741824,
                errno: nix::errno::Errno::ESRCH
            }
        ));
        let e = wait(Some(1 << 30), true).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("ptrace waitpid on thread 1073741824"),
            "{e}"
        );
    }
}
