//! Captures run in a child process that the ptscope a user started only
//! supervises.
//!
//! Why: ptrace single-stepping leaves the trap flag set in a stopped
//! tracee, and when a tracer dies without detaching (SIGKILL, a crash) the
//! kernel lets its tracees run on with it set: each dies of SIGTRAP at its
//! next instruction. A process cannot outlive its own SIGKILL, so the
//! tracer must not be the process that gets it. The supervisor forwards
//! signals and passes on the exit status; the capture child asks the
//! kernel for SIGTERM when the supervisor dies, and SIGTERM cancels a
//! capture cleanly (tracees detached, nothing written).
//!
//! The capture child runs in a process group of its own, so a terminal's
//! Ctrl-C reaches it once, through the supervisor. A command it starts is
//! put back in the supervisor's (the terminal's) group, where Ctrl-C
//! reaches it as it would without ptscope.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Set in a capture child's environment: the supervisor's pid.
pub const ENV: &str = "PTSCOPE_SUPERVISOR";

/// The process group a started command joins (0: its parent's).
static TARGET_GROUP: AtomicI32 = AtomicI32::new(0);

/// The group [`crate::tracee::spawn_stopped`] puts commands in.
pub(crate) fn target_group() -> i32 {
    TARGET_GROUP.load(Ordering::Relaxed)
}

/// Signals the supervisor passes on.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Runs this program again with `args` as a capture child and waits for
/// it, passing on SIGINT, SIGTERM and SIGHUP. Returns its exit code
/// (128 + the signal if one ended it).
pub fn supervise(args: impl IntoIterator<Item = OsString>) -> std::io::Result<i32> {
    let flags: Vec<(Signal, Arc<AtomicBool>)> = FORWARDED
        .iter()
        .map(|&s| (s, Arc::new(AtomicBool::new(false))))
        .collect();
    for (s, f) in &flags {
        signal_hook::flag::register(*s as i32, f.clone())?;
    }
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(args)
        .env(ENV, std::process::id().to_string())
        .process_group(0)
        .spawn()?;
    let pid = Pid::from_raw(child.id() as i32);
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)));
        }
        for (s, f) in &flags {
            if f.swap(false, Ordering::Relaxed) {
                let _ = kill(pid, *s);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// In a capture child: asks for SIGTERM when the supervisor dies, and
/// puts started commands in its process group. Returns false outside a
/// capture child; fails if the supervisor is already gone.
pub fn adopt() -> std::io::Result<bool> {
    let Some(sup) = std::env::var_os(ENV) else {
        return Ok(false);
    };
    let sup: i32 = sup
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad {ENV}")))?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
    // Died before the request was made: nobody would tell us.
    if nix::unistd::getppid() != Pid::from_raw(sup) {
        return Err(std::io::Error::other("the supervising ptscope is gone"));
    }
    let group = nix::unistd::getpgid(Some(Pid::from_raw(sup))).map_err(std::io::Error::from)?;
    TARGET_GROUP.store(group.as_raw(), Ordering::Relaxed);
    Ok(true)
}
