//! Runs a command under `qemu-x86_64` with ptscope's plugin and collects
//! the snapshots the plugin writes. QEMU runs in a process group of its
//! own, so that a Ctrl-C at the terminal reaches ptscope (which asks the
//! plugin for a snapshot) and not the program. If ptscope goes away, the
//! plugin's next report fails and it stops tracing: the program runs on,
//! never stopped.

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::wire::{self, Command, PluginConfig, Report};
use crate::error::CaptureError;
use crate::recording::{Capture, Target};
use crate::trigger::Trigger;

/// How a capture under QEMU is set up.
pub struct QemuOptions {
    /// The `qemu-x86_64` to run.
    pub qemu: PathBuf,
    /// The plugin library (the app unpacks the one it embeds).
    pub plugin: PathBuf,
    /// What the plugin is told; its `cmdline` and `start_time` are filled
    /// in here.
    pub config: PluginConfig,
    /// Set by the caller's SIGINT handler: take a snapshot now.
    pub interrupt: Arc<AtomicBool>,
    /// Set by the caller: stop now, save nothing, let the program go.
    pub cancel: Arc<AtomicBool>,
}

/// Runs `target` under QEMU, handing each snapshot to `on_snapshot` as
/// the plugin writes it. Returns once the last one is handed over (the
/// program may run on: its pid is the last capture's `child`), or with an
/// error if QEMU ended before any.
pub fn capture_each(
    target: Target,
    opts: QemuOptions,
    mut on_snapshot: impl FnMut(Capture),
) -> Result<(), CaptureError> {
    let Target::Spawn { argv, cwd } = target else {
        return Err(CaptureError::Unsupported(
            "the qemu backend runs a command; QEMU cannot attach to a running process (use --backend emulated)".into(),
        ));
    };
    let program = argv
        .first()
        .ok_or_else(|| CaptureError::Invalid("no command to run".into()))?;
    // QEMU does not search the PATH; the program keeps the argv[0] it
    // was given (`-0`).
    let path = super::probe::find_on_path(program).ok_or_else(|| CaptureError::Spawn {
        program: program.clone(),
        error: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    match super::probe::program_kind(&path)? {
        super::probe::ProgramKind::X86_64 => {}
        super::probe::ProgramKind::Other(what) => {
            return Err(CaptureError::Unsupported(format!(
                "{} is {what}: the qemu backend runs x86-64 programs only (--backend emulated runs the rest)",
                path.display()
            )))
        }
    }
    if opts.plugin.to_string_lossy().contains(',') {
        return Err(CaptureError::Invalid(format!(
            "the plugin's path {} holds a comma, which QEMU's -plugin option cannot take",
            opts.plugin.display()
        )));
    }
    let wall = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("ptscope-qemu")
        .tempdir()
        .map_err(|error| CaptureError::Io {
            path: std::env::temp_dir(),
            error,
        })?;
    let fifo = |name: &str| -> Result<PathBuf, CaptureError> {
        let path = dir.path().join(name);
        nix::unistd::mkfifo(
            &path,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .map_err(|e| CaptureError::Io {
            path: path.clone(),
            error: e.into(),
        })?;
        Ok(path)
    };
    let reports_path = fifo(wire::REPORTS_FIFO)?;
    let commands_path = fifo(wire::COMMANDS_FIFO)?;
    let io_err = |path: &PathBuf| {
        let path = path.clone();
        move |error| CaptureError::Io { path, error }
    };
    // Opened before QEMU starts, neither open waits for the other side:
    // the reports end without blocking, the commands end read and write.
    let reports = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&reports_path)
            .map_err(io_err(&reports_path))?
    };
    let mut commands = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&commands_path)
        .map_err(io_err(&commands_path))?;
    let config = PluginConfig {
        cmdline: argv.clone(),
        start_time: crate::emulated::tracer::monotonic_ns(),
        ..opts.config.clone()
    };
    config.write(&dir.path().join(wire::CONFIG_FILE))?;

    let mut cmd = std::process::Command::new(&opts.qemu);
    cmd.arg("-cpu")
        .arg(&config.cpu_model)
        .arg("-plugin")
        .arg(format!(
            "{},dir={}",
            opts.plugin.display(),
            dir.path().display()
        ))
        .arg("-0")
        .arg(program)
        .arg(&path)
        .args(&argv[1..])
        .process_group(0);
    if let Some(cwd) = &cwd {
        cmd.current_dir(cwd);
    }
    let child = cmd.spawn().map_err(|error| CaptureError::Spawn {
        program: opts.qemu.display().to_string(),
        error,
    })?;
    let pid = child.id() as i32;
    // The child is waited for by whoever takes the last capture (its
    // `child`), or below when QEMU ends before tracing.
    drop(child);

    let mut reader = BufReader::new(reports);
    let mut line = String::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut checkpoint: Option<PathBuf> = None;
    let mut started: Option<Instant> = None;
    let mut delivered = 0usize;
    let mut duration_sent = false;
    let hand_over = |path: &PathBuf,
                     warnings: &mut Vec<String>,
                     on_snapshot: &mut dyn FnMut(Capture)|
     -> Result<(), CaptureError> {
        let snapshot = wire::read_snapshot(path)?;
        let mut cap = match &config.per_cpu {
            Some(layout) => super::per_cpu::onto_cpus(
                snapshot.capture,
                &snapshot.pieces,
                layout,
                &config.settings,
            ),
            None => snapshot.capture,
        };
        cap.wall = wall.elapsed();
        cap.child = Some(pid);
        cap.warnings.append(warnings);
        let _ = std::fs::remove_file(path);
        on_snapshot(cap);
        Ok(())
    };
    loop {
        if opts.cancel.load(Ordering::Relaxed) {
            let _ = send(&mut commands, Command::Stop);
            return Ok(());
        }
        if opts.interrupt.swap(false, Ordering::Relaxed) {
            let _ = send(&mut commands, Command::Interrupt);
        }
        if let (Trigger::Duration(ms), Some(t0), false) = (&config.trigger, started, duration_sent)
        {
            if t0.elapsed() >= Duration::from_millis(*ms) {
                duration_sent = true;
                let _ = send(&mut commands, Command::Duration);
            }
        }
        let mut fds = [PollFd::new(reader.get_ref().as_fd(), PollFlags::POLLIN)];
        let _ = nix::poll::poll(&mut fds, PollTimeout::from(50u16));
        let hangup = fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLHUP));
        // Read every whole line there is; a line read in part stays in
        // `line` until its end comes.
        loop {
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) if !line.ends_with('\n') => continue,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(CaptureError::Io {
                        path: reports_path,
                        error,
                    })
                }
            }
            let report = Report::parse(line.trim_end());
            line.clear();
            match report {
                Some(Report::Started) => started = Some(Instant::now()),
                Some(Report::Snapshot { path, .. }) => {
                    checkpoint = None;
                    delivered += 1;
                    hand_over(&path, &mut warnings, &mut on_snapshot)?;
                }
                Some(Report::Checkpoint { path }) => checkpoint = Some(path),
                Some(Report::Retract) => checkpoint = None,
                Some(Report::Warning(w)) => warnings.push(w),
                Some(Report::Done) if delivered > 0 => return Ok(()),
                Some(Report::Done) | None => {}
            }
        }
        if hangup {
            break;
        }
    }
    // QEMU closed the reports: it ended, or the program exec'd into a
    // native one.
    if let Some(path) = checkpoint {
        return hand_over(&path, &mut warnings, &mut on_snapshot);
    }
    if delivered > 0 {
        return Ok(());
    }
    let status = crate::tracee::wait_child(pid);
    Err(CaptureError::Invalid(match (started, status) {
        (None, Some(code)) => format!(
            "{} exited with status {code} before the program started (its message is above): it could not load the plugin or run {program}",
            opts.qemu.display()
        ),
        (_, Some(code)) => format!(
            "the program ended with status {code} without a snapshot: QEMU was killed, or the plugin failed (its message is above); nothing was saved"
        ),
        (_, None) => format!(
            "the program under {} was killed by a signal before a snapshot was taken; nothing was saved",
            opts.qemu.display()
        ),
    }))
}

fn send(commands: &mut std::fs::File, c: Command) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(commands, "{}", c.to_line())
}
