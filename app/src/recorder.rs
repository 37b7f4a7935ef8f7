//! Running a capture: this module chooses the backend, drives it to its
//! trigger or triggers, and writes each snapshot with its metadata.
//!
//! The CLI's `record` and `attach` commands call [`run`]. The window's
//! Capture panel runs those commands as a process of its own and reads
//! their `--json-progress` lines back as [`Report`]s, so a capture behaves
//! the same whichever started it. With `--backend auto` a capture takes
//! the Intel PT hardware when this machine has a usable `intel_pt` PMU;
//! otherwise QEMU with ptscope's plugin for a command QEMU can run, and
//! the single-stepping emulated backend for the rest, saying why.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use ptscope_capture::emulated::settings;
use ptscope_capture::emulated::tracer::{self, TracerOptions};
use ptscope_capture::intel_pt::backend::{self, Status};
use ptscope_capture::intel_pt::Pmu;
use ptscope_capture::recording::{Capture, StopReason, Target};
use ptscope_capture::trigger::Trigger;
use ptscope_capture::PtSetupError;
use ptscope_formats::{snapshot, snapshot::Metadata};

#[derive(Clone, Copy, Debug, clap::ValueEnum, PartialEq, Eq, Default)]
pub enum Backend {
    /// intel-pt when this machine has Intel PT; else qemu for a command
    /// QEMU can run; else emulated.
    #[default]
    Auto,
    /// Real Intel PT hardware through perf_event_open.
    IntelPt,
    /// Run the command under QEMU's user-mode emulator, whose ptscope
    /// plugin writes the packets PT hardware would: no Intel PT needed,
    /// hundreds of millions of instructions per second. Commands only.
    Qemu,
    /// Single-step with ptrace and emit the packets PT hardware would.
    Emulated,
}

/// Which backend runs, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chosen {
    IntelPt,
    Qemu {
        qemu: PathBuf,
        version: String,
        why: String,
    },
    Emulated {
        why: String,
    },
}

impl Chosen {
    /// The backend's name, as snapshots record it.
    pub fn name(&self) -> &'static str {
        match self {
            Chosen::IntelPt => "intel-pt",
            Chosen::Qemu { .. } => "qemu",
            Chosen::Emulated { .. } => "emulated",
        }
    }

    /// Which backend runs and why, in a sentence for the user.
    pub fn why(&self) -> String {
        match self {
            Chosen::IntelPt => "intel-pt backend".into(),
            Chosen::Qemu { why, .. } | Chosen::Emulated { why } => why.clone(),
        }
    }
}

/// Picks the backend for capturing `target`. `auto` takes intel-pt when
/// the PMU is there; else, for a command that is an x86-64 program and
/// with `qemu-x86_64` installed, qemu; else the single-step backend. It
/// says why it took what it took.
pub fn choose(backend: Backend, pmu_dir: &Path, target: &Target) -> Result<Chosen> {
    match backend {
        Backend::Emulated => Ok(Chosen::Emulated {
            why: "the emulated backend was asked for".into(),
        }),
        Backend::IntelPt => Ok(Pmu::read(pmu_dir).map(|_| Chosen::IntelPt)?),
        Backend::Qemu => {
            if let Target::Attach(_) = target {
                bail!("the qemu backend runs a command: QEMU cannot attach to a running process (use --backend emulated)");
            }
            let (qemu, version) =
                ptscope_capture::qemu::probe::usable_qemu().map_err(anyhow::Error::msg)?;
            Ok(Chosen::Qemu {
                why: format!("the qemu backend was asked for (QEMU {version})"),
                qemu,
                version,
            })
        }
        Backend::Auto => {
            let no_pt = match Pmu::read(pmu_dir) {
                Ok(_) => return Ok(Chosen::IntelPt),
                Err(e @ PtSetupError::NoPmu { .. }) => first_sentence(&e.to_string()),
                Err(e) => format!("the intel_pt PMU is unusable: {e}"),
            };
            match qemu_for(target) {
                Ok((qemu, version)) => Ok(Chosen::Qemu {
                    why: format!("auto chose qemu (QEMU {version}): {no_pt}"),
                    qemu,
                    version,
                }),
                Err(not) => Ok(Chosen::Emulated {
                    why: format!("auto chose emulated (single-stepping): {no_pt}; {not}"),
                }),
            }
        }
    }
}

/// QEMU and its version when it can run `target`, else why not.
fn qemu_for(target: &Target) -> Result<(PathBuf, String), String> {
    use ptscope_capture::qemu::probe::{self, ProgramKind};
    let Target::Spawn { argv, cwd } = target else {
        return Err("QEMU cannot attach".into());
    };
    let found = usable_qemu_cached()?;
    let program = argv.first().ok_or("there is no command")?;
    let path = match program.contains('/') {
        true => cwd.as_deref().unwrap_or(Path::new(".")).join(program),
        false => {
            probe::find_on_path(program).ok_or_else(|| format!("{program} is not on the PATH"))?
        }
    };
    match probe::program_kind(&path) {
        Ok(ProgramKind::X86_64) => Ok(found),
        Ok(ProgramKind::Other(what)) => Err(format!(
            "{} is {what}, which the qemu backend does not run",
            path.display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// [`ptscope_capture::qemu::probe::usable_qemu`], asked once per process.
fn usable_qemu_cached() -> Result<(PathBuf, String), String> {
    static FOUND: std::sync::OnceLock<Result<(PathBuf, String), String>> =
        std::sync::OnceLock::new();
    FOUND
        .get_or_init(ptscope_capture::qemu::probe::usable_qemu)
        .clone()
}

fn first_sentence(s: &str) -> String {
    s.split(". ").next().unwrap_or(s).to_string()
}

/// Virtual CPUs of the emulated backend's per-CPU mode unless asked.
pub const DEFAULT_CPUS: u32 = 2;

/// Everything a capture needs: what to trace, which backend, and the
/// settings both backends share (the intel-pt backend's options; the
/// emulated backend takes the trigger, size, snapshots and flags).
#[derive(Clone, Debug)]
pub struct Request {
    pub target: Target,
    pub backend: Backend,
    pub opts: backend::Options,
    /// Record every retired IP (emulated only; for tests).
    pub ip_log: bool,
    pub progress: bool,
    /// The emulated backend's virtual CPUs in per-CPU mode.
    pub cpus: u32,
    /// Per-CPU mode as `perf record -a` writes it (CPU-wide events) rather
    /// than inherited by the process. The intel-pt backend's per-CPU mode
    /// is always system-wide; this is for the emulated backend.
    pub system_wide: bool,
    /// Instruction counts at which the emulated PT unit's buffer
    /// overflows (emulated only; for tests of decoders).
    pub overflow_at: Vec<u64>,
    /// The emulated PT unit writes as erratum SKL014 makes Skylakes write
    /// (emulated only; for tests of decoders).
    pub emulate_skl014: bool,
    /// Store in the snapshot the debug file of each mapped binary that
    /// lacks its own symbols (off with `--no-debug-info`).
    pub debug_info: bool,
}

impl Request {
    pub fn new(target: Target, trigger: Trigger) -> Request {
        Request {
            target,
            backend: Backend::Auto,
            opts: backend::Options::new(trigger),
            ip_log: false,
            progress: false,
            cpus: DEFAULT_CPUS,
            system_wide: false,
            overflow_at: Vec::new(),
            emulate_skl014: false,
            debug_info: true,
        }
    }

    /// The `ptscope record`/`attach` arguments that make this capture,
    /// writing to `output`, reporting as JSON lines ([`Report`]) on
    /// stdout. A spawned command's working directory is the capture
    /// process's own.
    pub fn cli_args(&self, output: &Path) -> Vec<std::ffi::OsString> {
        use clap::ValueEnum;
        use std::ffi::OsString;
        // `--name=value`, so that a value starting with `-` stays a value.
        let opt = |name: &str, value: &dyn AsRef<std::ffi::OsStr>| {
            let mut a = OsString::from(format!("--{name}="));
            a.push(value.as_ref());
            a
        };
        let mut args: Vec<OsString> = Vec::new();
        match &self.target {
            Target::Attach(pid) => {
                args.push("attach".into());
                args.push(opt("pid", &pid.to_string()));
            }
            Target::Spawn { .. } => args.push("record".into()),
        }
        match &self.opts.trigger {
            Trigger::Symbol(name) => args.push(opt("trigger", name)),
            Trigger::SlowCall {
                symbol,
                slower_than,
            } => {
                args.push(opt("trigger", symbol));
                args.push(opt(
                    "slower-than",
                    &crate::durations::format_duration(*slower_than),
                ));
            }
            Trigger::Duration(ms) => args.push(opt("duration", &ms.to_string())),
            Trigger::Manual => args.push("--manual".into()),
            // Without a trigger a capture ends at the exit or on SIGINT.
            Trigger::ProcessExit => {}
        }
        if let Some(b) = self.backend.to_possible_value() {
            args.push(opt("backend", &b.get_name()));
        }
        args.push(opt("size", &self.opts.size.to_string()));
        if let Some(timing) = &self.opts.timing {
            args.push(opt("timing", &timing.to_string()));
        }
        args.push(opt("snapshots", &self.opts.snapshots.to_string()));
        // Only a trigger on a function waits to be armed.
        if let (Some(a), Some(_)) = (self.opts.arm_after, self.opts.trigger.symbol()) {
            args.push(opt("arm-after", &crate::durations::format_arm_after(a)));
        }
        if let Some(r) = &self.opts.range {
            args.push("--range".into());
            args.push(r.start.clone().into());
            args.push(r.stop.clone().into());
        }
        if self.opts.kernel {
            args.push("--kernel".into());
        }
        if !self.debug_info {
            args.push("--no-debug-info".into());
        }
        if self.opts.per_cpu {
            args.push("--per-cpu".into());
            args.push(opt("cpus", &self.cpus.to_string()));
            if self.system_wide {
                args.push("--system-wide".into());
            }
        }
        if !self.opts.filter.is_empty() {
            // The resolved form (file offsets and files) reads back as is.
            let text = ptscope_capture::filter::kernel_string(&self.opts.filter);
            args.push(opt("filter", &text));
        }
        args.push(opt("output", &output));
        args.push("--json-progress".into());
        if let Target::Spawn { argv, .. } = &self.target {
            args.push("--".into());
            args.extend(argv.iter().map(OsString::from));
        }
        args
    }
}

/// One line of `--json-progress` output: how a capture process tells the
/// window what happens.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Report {
    Progress(Progress),
    /// Every snapshot is written; a recorded command may run on.
    Done {
        saved: Vec<PathBuf>,
    },
    /// The recorded command ended (`None`: killed by a signal).
    CommandExited {
        code: Option<i32>,
    },
    /// The capture failed; nothing more comes.
    Failed {
        error: String,
    },
}

impl Report {
    /// The report as one line of JSON. A path JSON cannot carry (not
    /// UTF-8) is reported as a failure to report, never a panic: the
    /// capture process may be tracing.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            let failed = Report::Failed {
                error: format!("cannot report {self:?}: {e}"),
            };
            serde_json::to_string(&failed).unwrap_or_default()
        })
    }

    /// A line of a capture process's output: a report, or `None` for other
    /// text.
    pub fn parse(line: &str) -> Option<Report> {
        serde_json::from_str(line).ok()
    }
}

/// What a running capture reports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Progress {
    /// Which backend runs, and why.
    Backend(String),
    Armed {
        threads: usize,
    },
    /// Tracing into `units` buffers (threads or CPUs) of `buffer_bytes` in all.
    Waiting {
        units: usize,
        buffer_bytes: u64,
    },
    Triggered {
        snapshot: usize,
    },
    Saved {
        path: PathBuf,
        stop: String,
    },
    Warning(String),
}

/// A finished snapshot, written.
#[derive(Clone, Debug)]
pub struct Saved {
    pub path: PathBuf,
    pub metadata: Metadata,
    pub threads: usize,
    pub instructions: u64,
    pub wall: std::time::Duration,
    pub exit_code: Option<i32>,
    /// A spawned command still running; wait for it with
    /// [`ptscope_capture::tracee::wait_child`].
    pub child: Option<i32>,
}

/// The path of snapshot `n` of `count` for `output`: the name itself for a
/// single snapshot, `name-N.ptscope` for several.
pub fn numbered(output: &Path, n: usize, count: usize) -> PathBuf {
    if count <= 1 {
        return output.to_path_buf();
    }
    let stem = output
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "snapshot".into());
    let ext = output
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "ptscope".into());
    output.with_file_name(format!("{stem}-{n}.{ext}"))
}

pub fn stop_text(stop: &StopReason) -> String {
    match stop {
        StopReason::ProcessExit => "process exit".to_string(),
        StopReason::Symbol { name, address, tid } => {
            format!("thread {tid} entered {name} at {address:#x}")
        }
        StopReason::SlowCall {
            name,
            tid,
            start,
            end,
        } => format!(
            "thread {tid}'s call to {name} took {} ns",
            end.saturating_sub(*start)
        ),
        StopReason::Duration => "duration elapsed".to_string(),
        StopReason::Interrupted => "manual snapshot".to_string(),
    }
}

/// What a QEMU capture's clock means, as its snapshot says.
pub const QEMU_CLOCK: &str = "virtual: 1 ns per instruction per thread; a thread starts at the clone that made it, a futex wake comes before the woken thread goes on, system calls take no time";

/// The CPU model QEMU runs programs on: every feature its TCG emulates,
/// the nearest it comes to a modern host.
pub const QEMU_CPU: &str = "max";

fn metadata(cap: &Capture, req: &Request, backend: &str) -> Metadata {
    let emulated = backend == "emulated";
    Metadata {
        format: snapshot::FORMAT_VERSION,
        backend: backend.into(),
        trigger: req.opts.trigger.to_string(),
        stop: stop_text(&cap.stop),
        ring_size: req.opts.size,
        pt_config: cap.pt.event.clone(),
        cpu: cap.pt.cpuid.clone(),
        clock: if emulated {
            "virtual: 1 cycle per user instruction at 1 GHz; kernel time is wall time".into()
        } else if backend == "qemu" && req.opts.per_cpu {
            // Per CPU, a system call takes the time of a context switch.
            QEMU_CLOCK.replace(
                "system calls take no time",
                &format!(
                    "a system call takes {} ns (room for a context switch)",
                    ptscope_capture::qemu::per_cpu::KERNEL_NS
                ),
            )
        } else if backend == "qemu" {
            QEMU_CLOCK.into()
        } else {
            format!(
                "TSC, timing {}",
                req.opts.timing.clone().unwrap_or_default()
            )
        },
        command: cap.cmdline.clone(),
        pid: cap.pid,
        capture_wall_ms: cap.wall.as_millis() as u64,
        instructions: cap.threads.iter().map(|t| t.instructions).sum(),
        trigger_registers: cap.trigger_registers.clone(),
        trigger_call: match &cap.stop {
            StopReason::SlowCall {
                name,
                tid,
                start,
                end,
            } => Some(snapshot::TriggerCall {
                function: name.clone(),
                tid: *tid,
                start: *start,
                end: *end,
                duration: end.saturating_sub(*start),
            }),
            _ => None,
        },
        warnings: cap.warnings.clone(),
        ..Metadata::default()
    }
}

struct Saver<'a> {
    req: &'a Request,
    output: &'a Path,
    backend: &'static str,
    /// The CPU QEMU ran the program on.
    guest_cpu: Option<String>,
    saved: Vec<Saved>,
    error: Option<anyhow::Error>,
}

impl Saver<'_> {
    fn save(
        &mut self,
        cap: Capture,
        progress: &mut dyn FnMut(Progress),
        ip_log: &mut dyn FnMut(&Capture) -> Result<()>,
    ) {
        if self.error.is_some() {
            return;
        }
        let path = numbered(self.output, self.saved.len() + 1, self.req.opts.snapshots);
        let mut meta = metadata(&cap, self.req, self.backend);
        meta.guest_cpu = self.guest_cpu.clone();
        let opts = ptscope_capture::save::SaveOptions {
            debug_info: self.req.debug_info,
            ..Default::default()
        };
        let written = ptscope_capture::save::write_snapshot(&path, &cap, &meta, &opts)
            .context("cannot write the snapshot");
        let notes = match written.and_then(|notes| ip_log(&cap).map(|()| notes)) {
            Ok(notes) => notes,
            Err(e) => {
                self.error = Some(e);
                return;
            }
        };
        for w in cap.warnings.iter().chain(&notes) {
            progress(Progress::Warning(w.clone()));
        }
        progress(Progress::Saved {
            path: path.clone(),
            stop: meta.stop.clone(),
        });
        self.saved.push(Saved {
            path,
            threads: cap.threads.len(),
            instructions: meta.instructions,
            metadata: meta,
            wall: cap.wall,
            exit_code: cap.exit_code,
            child: cap.child,
        });
    }
}

/// The option of `req` that the QEMU backend does not take, if any.
fn qemu_refuses(req: &Request) -> Option<&'static str> {
    let refused = [
        (req.opts.kernel, "--kernel (QEMU runs user space only)"),
        (!req.overflow_at.is_empty(), "--overflow-at"),
        (req.emulate_skl014, "--emulate-skl014"),
    ];
    refused.iter().find(|(on, _)| *on).map(|(_, what)| *what)
}

/// The QEMU backend's options for `req`, refusing what it does not do.
fn qemu_options(req: &Request, qemu: PathBuf) -> Result<ptscope_capture::qemu::QemuOptions> {
    if let Some(what) = qemu_refuses(req) {
        bail!("the qemu backend does not take {what} yet; use --backend emulated for it");
    }
    ptscope_capture::filter::check_count(&req.opts.filter, settings::cpu::NUM_ADDRESS_RANGES)
        .context("the emulated CPU's IP filter")?;
    let cfg = settings::emulated_config(req.opts.timing.as_ref())?;
    let ring_size = req.opts.size as usize;
    // Per CPU, a thread's own buffer holds twice a CPU's ring, so that
    // what it wrote on one CPU outlives what it wrote since on others.
    let thread_ring = match req.opts.per_cpu {
        true => ring_size.saturating_mul(2),
        false => ring_size,
    };
    let settings = settings::pt_settings(&cfg, thread_ring, Arc::from([]));
    let mut pt = settings::pt_setup(&cfg);
    pt.params.filter = ptscope_capture::filter::kernel_string(&req.opts.filter);
    Ok(ptscope_capture::qemu::QemuOptions {
        qemu,
        plugin: crate::qemu_plugin::path()?,
        config: ptscope_capture::qemu::wire::PluginConfig {
            settings,
            pt,
            trigger: req.opts.trigger.clone(),
            arm_after: req.opts.arm_after,
            snapshots: req.opts.snapshots,
            ip_log: req.ip_log,
            cmdline: Vec::new(),
            start_time: 0,
            cpu_model: QEMU_CPU.into(),
            range: req.opts.range.clone(),
            filter: req.opts.filter.clone(),
            per_cpu: req
                .opts
                .per_cpu
                .then_some(ptscope_capture::qemu::per_cpu::Layout {
                    cpus: req.cpus,
                    system_wide: req.system_wide,
                    ring_size,
                }),
        },
        interrupt: req.opts.interrupt.clone(),
        cancel: req.opts.cancel.clone(),
    })
}

/// Runs `req`, writing snapshots to `output` (numbered when several), and
/// reporting through `progress`. `ip_log` sees each capture before it is
/// dropped. Returns what was saved.
pub fn run(
    req: &Request,
    output: &Path,
    mut progress: impl FnMut(Progress),
    mut ip_log: impl FnMut(&Capture) -> Result<()>,
) -> Result<Vec<Saved>> {
    if req.opts.snapshots == 0 {
        bail!("--snapshots must be at least 1");
    }
    let mut chosen = choose(req.backend, &req.opts.pmu_dir, &req.target)?;
    if let (Backend::Auto, Chosen::Qemu { .. }, Some(what)) =
        (req.backend, &chosen, qemu_refuses(req))
    {
        chosen = Chosen::Emulated {
            why: format!(
                "auto chose emulated (single-stepping): the qemu backend does not take {what} yet"
            ),
        };
    }
    let mut saver = Saver {
        req,
        output,
        backend: "emulated",
        guest_cpu: None,
        saved: Vec::new(),
        error: None,
    };
    match chosen {
        Chosen::IntelPt => {
            progress(Progress::Backend("intel-pt backend".into()));
            saver.backend = "intel-pt";
            let progress = std::cell::RefCell::new(&mut progress);
            backend::capture(
                req.target.clone(),
                &req.opts,
                |s| {
                    (progress.borrow_mut())(match s {
                        Status::Armed { threads } => Progress::Armed { threads },
                        Status::Waiting {
                            units,
                            buffer_bytes,
                        } => Progress::Waiting {
                            units,
                            buffer_bytes,
                        },
                        Status::Triggered { snapshot } => Progress::Triggered { snapshot },
                    })
                },
                |cap| {
                    saver.save(cap, *progress.borrow_mut(), &mut ip_log);
                    Ok(())
                },
            )?;
        }
        Chosen::Qemu { qemu, version, why } => {
            progress(Progress::Backend(why));
            saver.backend = "qemu";
            saver.guest_cpu = Some(format!("qemu-x86_64 {version}, -cpu {QEMU_CPU}"));
            let opts = qemu_options(req, qemu)?;
            progress(Progress::Armed { threads: 1 });
            ptscope_capture::qemu::capture_each(req.target.clone(), opts, |cap| {
                progress(Progress::Triggered {
                    snapshot: saver.saved.len() + 1,
                });
                saver.save(cap, &mut progress, &mut ip_log);
            })?;
        }
        Chosen::Emulated { why } => {
            progress(Progress::Backend(why));
            if req.opts.kernel {
                bail!("--kernel needs the intel-pt backend: the emulated backend single-steps user space only");
            }
            ptscope_capture::filter::check_count(
                &req.opts.filter,
                settings::cpu::NUM_ADDRESS_RANGES,
            )
            .context("the emulated CPU's IP filter")?;
            let cfg = settings::emulated_config(req.opts.timing.as_ref())?;
            let overflows = req.overflow_at.iter().copied().collect();
            let mut settings = settings::pt_settings(&cfg, req.opts.size as usize, overflows);
            settings.skl014 = req.emulate_skl014;
            let opts = TracerOptions {
                settings,
                pt: settings::pt_setup(&cfg),
                trigger: req.opts.trigger.clone(),
                ip_log: req.ip_log,
                progress: req.progress,
                interrupt: req.opts.interrupt.clone(),
                per_cpu: req.opts.per_cpu,
                cpus: req.cpus,
                system_wide: req.system_wide,
                snapshots: req.opts.snapshots,
                cancel: req.opts.cancel.clone(),
                filter: req.opts.filter.clone(),
                arm_after: req.opts.arm_after,
                range: req.opts.range.clone(),
            };
            let threads = match &req.target {
                Target::Attach(pid) => {
                    ptscope_capture::procfs::threads(*pid).map_or(0, |t| t.len())
                }
                Target::Spawn { .. } => 1,
            };
            progress(Progress::Armed { threads });
            tracer::capture_each(req.target.clone(), opts, |cap| {
                progress(Progress::Triggered {
                    snapshot: saver.saved.len() + 1,
                });
                saver.save(cap, &mut progress, &mut ip_log);
            })?;
        }
    }
    if let Some(e) = saver.error {
        return Err(e);
    }
    if req.opts.cancel.load(Ordering::Relaxed) && saver.saved.is_empty() {
        bail!("capture cancelled; the target was left running");
    }
    Ok(saver.saved)
}
