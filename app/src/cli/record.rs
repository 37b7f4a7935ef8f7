//! `ptscope record` and `ptscope attach`: the capture, run in a child
//! process that survives the one the user started, with its progress on
//! stderr or as JSON lines for a front end.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use ptscope::recorder::{self, Progress, Request};
use ptscope_capture::recording::Target;
use ptscope_capture::supervise;
use ptscope_capture::tracee;
use ptscope_capture::trigger::Trigger;

use super::args::CaptureOpts;

/// Where `--json-progress` reports go: a private copy of stdout, which a
/// recorded command does not inherit.
struct Reports(Option<std::fs::File>);

impl Reports {
    /// With `json`, keeps stdout for reports and points fd 1 at stderr, so
    /// that a command started later writes there and not into the reports.
    fn new(json: bool) -> Result<Reports> {
        if !json {
            return Ok(Reports(None));
        }
        use std::os::fd::AsFd;
        // try_clone_to_owned dups with FD_CLOEXEC: no command inherits it.
        let out = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .context("cannot keep stdout for reports")?;
        nix::unistd::dup2_stdout(std::io::stderr()).context("cannot redirect stdout")?;
        Ok(Reports(Some(out.into())))
    }

    fn send(&self, r: recorder::Report) {
        if let Some(mut f) = self.0.as_ref() {
            // A front end that went away is told nothing more.
            let _ = writeln!(f, "{}", r.to_line());
        }
    }
}

pub(super) fn capture(target: Target, opts: CaptureOpts) -> Result<ExitCode> {
    // The capture runs in a child that survives us: see `supervise`.
    if !supervise::adopt().context("cannot start the capture")? {
        let code = supervise::supervise(std::env::args_os().skip(1))
            .context("cannot start the capture process")?;
        return Ok(ExitCode::from(code.clamp(0, 255) as u8));
    }
    let reports = Reports::new(opts.json_progress)?;
    let result = capture_here(target, opts, &reports);
    if let Err(e) = &result {
        reports.send(recorder::Report::Failed {
            error: format!("{e:#}"),
        });
    }
    result
}

/// The capture child's work: trace, snapshot, and wait for a recorded
/// command to end.
fn capture_here(target: Target, opts: CaptureOpts, reports: &Reports) -> Result<ExitCode> {
    let trigger = match (&opts.trigger, opts.duration) {
        (Some(_), Some(_)) => bail!("use either --trigger or --duration, not both"),
        (Some(s), None) => match opts.slower_than {
            Some(ns) => Trigger::SlowCall {
                symbol: s.clone(),
                slower_than: ns,
            },
            None => Trigger::Symbol(s.clone()),
        },
        (None, Some(ms)) => Trigger::Duration(ms),
        (None, None) if opts.manual => Trigger::Manual,
        (None, None) => Trigger::ProcessExit,
    };
    let mut req = Request::new(target, trigger.clone());
    req.backend = opts.backend;
    req.opts.size = opts.size;
    req.opts.timing = opts.timing.clone();
    req.overflow_at = opts.overflow_at.clone();
    req.emulate_skl014 = opts.emulate_skl014;
    req.opts.kernel = opts.kernel;
    req.debug_info = !opts.no_debug_info;
    req.opts.per_cpu = opts.per_cpu || opts.system_wide;
    req.system_wide = opts.system_wide;
    match opts.cpus {
        Some(n) if !req.opts.per_cpu => bail!("--cpus {n} needs --per-cpu or --system-wide"),
        Some(n) => req.cpus = n,
        None => {}
    }
    req.opts.snapshots = opts.snapshots;
    req.opts.arm_after = opts.arm_after;
    if let Some(r) = &opts.range {
        if r[0] == r[1] {
            bail!(
                "--range: START and STOP are both `{}`; they must differ",
                r[0]
            );
        }
        req.opts.range = Some(ptscope_capture::trigger::Range {
            start: r[0].clone(),
            stop: r[1].clone(),
        });
    }
    if let Some(text) = &opts.filter {
        use ptscope_capture::filter;
        let specs = filter::parse(text)?;
        let program = filter::target_program(&req.target);
        req.opts.filter = filter::resolve(&specs, program.as_deref())?;
    }
    req.ip_log = opts.ip_log.is_some();
    req.progress = !opts.quiet && !opts.json_progress;
    signal_hook::flag::register(signal_hook::consts::SIGINT, req.opts.interrupt.clone())
        .context("cannot install the Ctrl-C handler")?;
    // SIGTERM (also when the supervising ptscope dies) and SIGHUP cancel:
    // tracees are detached and left running, nothing is written.
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, req.opts.cancel.clone())
            .context("cannot install the signal handlers")?;
    }
    let quiet = opts.quiet || opts.json_progress;
    let json = opts.json_progress;
    let report = |r: recorder::Report| reports.send(r);
    let mut last_log: Vec<(i32, Vec<u64>)> = Vec::new();
    let saved = recorder::run(
        &req,
        &opts.output,
        |p| match p {
            p if json => report(recorder::Report::Progress(p)),
            Progress::Backend(why) if !quiet => eprintln!("ptscope: {why}"),
            Progress::Warning(w) => eprintln!("ptscope: warning: {w}"),
            Progress::Armed { threads } if !quiet => {
                eprintln!("ptscope: tracing {threads} thread(s); Ctrl-C takes a snapshot now")
            }
            _ => {}
        },
        |cap| {
            // Each snapshot's log holds everything before it: keep the last.
            if !cap.ip_log.is_empty() {
                last_log = cap.ip_log.clone();
            }
            Ok(())
        },
    )?;
    if let Some(path) = &opts.ip_log {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        );
        for (tid, ips) in &last_log {
            for ip in ips {
                writeln!(out, "{tid} {ip:x}")?;
            }
        }
        out.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let (Some(name), Some(last)) = (trigger.symbol(), saved.last()) {
        if last.metadata.stop == "process exit" {
            let w = match &trigger {
                Trigger::SlowCall { slower_than, .. } => format!(
                    "no call to {name} longer than {} fired the trigger; the snapshot ends at the process's exit",
                    ptscope::durations::format_duration(*slower_than)
                ),
                _ => format!(
                    "the process exited before entering {name}; the snapshot ends at its exit"
                ),
            };
            if json {
                report(recorder::Report::Progress(Progress::Warning(w)));
            } else {
                eprintln!("ptscope: warning: {w}");
            }
        }
    }
    if !quiet {
        for s in &saved {
            let secs = s.wall.as_secs_f64().max(1e-9);
            eprintln!(
                "ptscope: {} ({}): {} threads, {} instructions in {:.2} s ({:.0}k steps/s)",
                s.path.display(),
                s.metadata.stop,
                s.threads,
                s.instructions,
                secs,
                s.instructions as f64 / secs / 1e3,
            );
        }
        if saved.len() > 1 && saved.iter().any(|s| s.metadata.trigger_call.is_some()) {
            let files: Vec<String> = saved.iter().map(|s| s.path.display().to_string()).collect();
            eprintln!(
                "ptscope: open them as one session, their slow calls listed slowest first: ptscope {}",
                files.join(" ")
            );
        }
    }
    if json {
        report(recorder::Report::Done {
            saved: saved.iter().map(|s| s.path.clone()).collect(),
        });
    }
    let Some(last) = saved.last() else {
        return Ok(ExitCode::SUCCESS);
    };
    // A recorded command runs to its end after the snapshot; SIGTERM stops
    // waiting for it (it runs on).
    let code = match last.child {
        Some(pid) => loop {
            if let Some(code) = tracee::try_wait_child(pid) {
                break Some(code);
            }
            if req.opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        },
        None => last.exit_code,
    };
    if json && last.child.is_some() && !req.opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
        report(recorder::Report::CommandExited { code });
    }
    if let Some(c) = code.filter(|&c| c != 0 && !quiet) {
        eprintln!("ptscope: the traced command exited with status {c}");
    }
    Ok(ExitCode::SUCCESS)
}
