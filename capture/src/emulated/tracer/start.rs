//! Starting a capture gets the target under the tracer before any of its
//! code is traced: a spawned command is seized while it is stopped before
//! its exec and run to the exec ([`crate::tracee::run_to_exec`]), so that
//! the trace starts at the new image's first instruction; an attached
//! process has every thread seized and interrupted, each to be stepped
//! from wherever it stopped.

use nix::sys::wait::WaitStatus;

use super::threads::State;
use super::{monotonic_ns, Tracer, TracerOptions};
use crate::emulated::ptrace;
use crate::error::CaptureError;
use crate::procfs;
use crate::recording::{SidebandEvent, Target};
use crate::tracee;

impl Tracer {
    /// Gets `target` under a new tracer. Returns the tracer, the pid of a
    /// spawned command (`None` when attached) and the command line.
    pub(super) fn start(
        target: Target,
        opts: TracerOptions,
    ) -> Result<(Tracer, Option<i32>, Vec<String>), CaptureError> {
        let (pid, child, cmdline) = match &target {
            Target::Spawn { argv, cwd } => {
                let pid = tracee::spawn_stopped(argv, cwd.as_deref())?;
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
                tracee::run_to_exec(pid, &argv[0])?;
                (pid, Some(pid), argv.clone())
            }
            Target::Attach(pid) => (*pid, None, procfs::cmdline(*pid)),
        };
        let mut tracer = Tracer::new(opts, pid);
        tracer.open_mem();
        match target {
            Target::Spawn { .. } => {
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
                    tracee::seize(tid)?;
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
        Ok((tracer, child, cmdline))
    }
}
