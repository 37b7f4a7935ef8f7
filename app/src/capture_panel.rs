//! The Capture panel: it lets the user pick a target (a command to run, or
//! a process to attach to), a trigger (a function, now, a duration, the
//! exit) and the settings, and then captures with live status.
//!
//! The capture runs in a `ptscope record` or `ptscope attach` process of
//! its own, not in the window, because a tracer that dies takes its
//! single-stepped tracees with it, and a tracer's wait for any child would
//! reap the window's other children (`supervise_capture` says more). Each
//! snapshot is written under the panel's output folder and handed to the
//! window, which opens it in a new tab. Cancel stops tracing and leaves
//! the target running untouched. The process and function pickers list
//! the best matches first, through the viewer's fuzzy matcher
//! ([`ptscope_viewer::fuzzy_filter`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use eframe::egui;
use ptscope_capture::intel_pt::Timing;
use ptscope_capture::procfs::{self, ProcessInfo};
use ptscope_capture::recording::Target;
use ptscope_capture::trigger::{self, FunctionSymbol, Trigger};
use ptscope_viewer::fuzzy_filter;

use crate::recorder::{self, Backend, Chosen, Progress, Request};

/// Rows a picker shows at most.
const LIST_MAX: usize = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    Command,
    Attach,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerKind {
    Function,
    Manual,
    Duration,
    Exit,
}

enum Message {
    Progress(Progress),
    Done(Result<Vec<PathBuf>, String>),
}

struct Running {
    rx: Receiver<Message>,
    request: Request,
}

pub struct CapturePanel {
    pub open: bool,
    pub target: TargetKind,
    pub program: String,
    pub args: String,
    pub cwd: String,
    pub process_filter: String,
    pub pid: Option<i32>,
    processes: Vec<ProcessInfo>,
    pub trigger: TriggerKind,
    pub symbol_filter: String,
    pub symbol: Option<String>,
    /// The functions of the current target, and what they were read from.
    symbols: Vec<FunctionSymbol>,
    symbols_of: Option<String>,
    /// The last symbol search: its filter and the matching indices.
    symbol_matches: Option<(String, Vec<usize>)>,
    /// What `auto` (or the chosen backend) means here: per backend and
    /// target (the program, or none to attach), and the note.
    backend_note: Option<(Backend, Option<String>, String)>,
    pub duration_ms: u64,
    /// With a function trigger: fire only on a call slower than this
    /// (a duration as typed; empty fires on entry).
    pub slower_than: String,
    /// Fire only once the ring holds this much history (empty: at once).
    pub arm_after: String,
    pub size: String,
    pub timing: Timing,
    pub backend: Backend,
    pub snapshots: usize,
    /// Where snapshots are written.
    pub output_dir: PathBuf,
    running: Option<Running>,
    /// Captures that are done but whose recorded command runs on: what
    /// they say when it ends.
    tails: Vec<Receiver<Message>>,
    /// The `ptscope` program that runs captures (this one, normally).
    pub exe: PathBuf,
    /// What happened, newest last.
    pub log: Vec<String>,
    pub state: String,
    /// Snapshots saved since the window last took them.
    saved: Vec<PathBuf>,
}

impl Default for CapturePanel {
    fn default() -> CapturePanel {
        CapturePanel::new()
    }
}

impl CapturePanel {
    pub fn new() -> CapturePanel {
        CapturePanel {
            open: false,
            target: TargetKind::Attach,
            program: String::new(),
            args: String::new(),
            cwd: String::new(),
            process_filter: String::new(),
            pid: None,
            processes: Vec::new(),
            trigger: TriggerKind::Function,
            symbol_filter: String::new(),
            symbol: None,
            symbols: Vec::new(),
            symbols_of: None,
            symbol_matches: None,
            backend_note: None,
            duration_ms: 1000,
            slower_than: String::new(),
            arm_after: String::new(),
            size: "4M".into(),
            timing: Timing::Normal,
            backend: Backend::Auto,
            snapshots: 1,
            output_dir: std::env::temp_dir().join("ptscope-captures"),
            running: None,
            tails: Vec::new(),
            exe: std::env::current_exe().unwrap_or_else(|_| "ptscope".into()),
            log: Vec::new(),
            state: "idle".into(),
            saved: Vec::new(),
        }
    }

    /// Snapshots saved since the last call, to open as tabs.
    pub fn take_saved(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.saved)
    }

    /// Re-reads the process list.
    pub fn refresh_processes(&mut self) {
        self.processes = procfs::processes();
    }

    fn process_text(p: &ProcessInfo) -> String {
        format!("{} {} {}", p.pid, p.name, p.cmdline)
    }

    /// Matching processes, best first.
    pub fn matching_processes(&self) -> Vec<&ProcessInfo> {
        fuzzy_filter(&self.processes, &self.process_filter, Self::process_text)
            .into_iter()
            .map(|i| &self.processes[i])
            .collect()
    }

    /// The file the command's program names, found as the capture will
    /// find it when it runs the command.
    fn program_path(&self) -> Option<PathBuf> {
        let prog = self.program.trim();
        if prog.is_empty() {
            return None;
        }
        let cwd = Some(self.cwd.trim())
            .filter(|d| !d.is_empty())
            .map(Path::new);
        ptscope_capture::tracee::resolve_program(prog, cwd)
    }

    /// Loads the target's functions when the target changed.
    fn refresh_symbols(&mut self) {
        let key = match self.target {
            TargetKind::Attach => self.pid.map(|p| format!("pid {p}")),
            TargetKind::Command => self.program_path().map(|p| p.display().to_string()),
        };
        if key == self.symbols_of {
            return;
        }
        self.symbols = match (self.target, self.pid, self.program_path()) {
            (TargetKind::Attach, Some(pid), _) => trigger::functions_of_process(pid),
            (TargetKind::Command, _, Some(path)) => trigger::functions_in(&path),
            _ => Vec::new(),
        };
        self.symbols_of = key;
        self.symbol_matches = None;
    }

    /// Matching functions of the target, best first.
    pub fn matching_symbols(&mut self) -> Vec<FunctionSymbol> {
        self.refresh_symbols();
        // Searched again only when the filter or the target changes, not
        // every frame: a target with large libraries has many thousands.
        if self
            .symbol_matches
            .as_ref()
            .is_none_or(|(f, _)| *f != self.symbol_filter)
        {
            let hits = fuzzy_filter(&self.symbols, &self.symbol_filter, |f| f.name.clone());
            self.symbol_matches = Some((self.symbol_filter.clone(), hits));
        }
        self.symbol_matches
            .as_ref()
            .map(|(_, hits)| {
                hits.iter()
                    .take(LIST_MAX)
                    .map(|&i| self.symbols[i].clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The request the panel's fields describe, or why they do not.
    pub fn request(&self) -> Result<Request, String> {
        let target = match self.target {
            TargetKind::Attach => Target::Attach(self.pid.ok_or("pick a process to attach to")?),
            TargetKind::Command => {
                let mut argv = vec![self.program.trim().to_string()];
                if argv[0].is_empty() {
                    return Err("enter a program to run".into());
                }
                argv.extend(self.args.split_whitespace().map(str::to_string));
                let cwd = Some(self.cwd.trim())
                    .filter(|c| !c.is_empty())
                    .map(PathBuf::from);
                Target::Spawn { argv, cwd }
            }
        };
        let optional = |text: &str| -> Result<Option<u64>, String> {
            match text.trim() {
                "" => Ok(None),
                t => crate::durations::parse_duration(t).map(Some),
            }
        };
        let trigger = match self.trigger {
            TriggerKind::Function => {
                let symbol = self
                    .symbol
                    .clone()
                    .ok_or("pick the function that triggers the snapshot")?;
                match optional(&self.slower_than)? {
                    Some(ns) => Trigger::SlowCall {
                        symbol,
                        slower_than: ns,
                    },
                    None => Trigger::Symbol(symbol),
                }
            }
            TriggerKind::Manual => Trigger::Manual,
            TriggerKind::Duration => Trigger::Duration(self.duration_ms),
            TriggerKind::Exit => Trigger::ProcessExit,
        };
        let mut req = Request::new(target, trigger);
        req.opts.size = crate::size::parse_ring_size(&self.size)?;
        req.opts.timing = Some(self.timing.clone());
        req.backend = self.backend;
        req.opts.snapshots = self.snapshots.max(1);
        if req.opts.trigger.symbol().is_some() && !self.arm_after.trim().is_empty() {
            req.opts.arm_after = Some(crate::durations::parse_arm_after(&self.arm_after)?);
        }
        Ok(req)
    }

    /// Starts the capture the fields describe.
    pub fn start(&mut self) {
        if self.running.is_some() {
            return;
        }
        let req = match self.request() {
            Ok(r) => r,
            Err(e) => {
                self.state = "not started".into();
                self.log.push(e);
                return;
            }
        };
        if let Err(e) = std::fs::create_dir_all(&self.output_dir) {
            self.log
                .push(format!("{}: cannot create: {e}", self.output_dir.display()));
            return;
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let name = match &req.target {
            Target::Attach(pid) => format!("pid{pid}"),
            Target::Spawn { argv, .. } => Path::new(&argv[0])
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "capture".into()),
        };
        let output = self.output_dir.join(format!("{name}-{stamp}.ptscope"));
        let args = req.cli_args(&output);
        let cwd = match &req.target {
            Target::Spawn { cwd, .. } => cwd.clone(),
            Target::Attach(_) => None,
        };
        let (tx, rx) = channel();
        let exe = self.exe.clone();
        let flags = (req.opts.interrupt.clone(), req.opts.cancel.clone());
        // The thread that starts the capture process lives as long as it:
        // the process's parent-death signal is tied to this thread.
        let thread = std::thread::Builder::new()
            .name("ptscope-capture".into())
            .spawn(move || supervise_capture(&exe, &args, cwd.as_deref(), flags, &tx));
        match thread {
            Ok(_) => {
                self.state = "starting".into();
                self.log
                    .push(format!("capturing to {}", self.output_dir.display()));
                self.running = Some(Running { rx, request: req });
            }
            Err(e) => self
                .log
                .push(format!("cannot start the capture thread: {e}")),
        }
    }

    /// Takes a snapshot now (the manual trigger).
    pub fn snapshot_now(&mut self) {
        if let Some(r) = &self.running {
            r.request.opts.interrupt.store(true, Ordering::Relaxed);
        }
    }

    /// Stops without a snapshot; the target runs on untouched.
    pub fn cancel(&mut self) {
        if let Some(r) = &self.running {
            r.request.opts.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// Takes the capture thread's news.
    pub fn poll(&mut self) {
        self.tails.retain(|rx| loop {
            match rx.try_recv() {
                Ok(Message::Progress(Progress::Warning(w))) => self.log.push(w),
                Ok(_) => {}
                Err(std::sync::mpsc::TryRecvError::Empty) => break true,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break false,
            }
        });
        let Some(run) = &mut self.running else {
            return;
        };
        let mut done = None;
        while let Ok(m) = run.rx.try_recv() {
            match m {
                Message::Progress(p) => match p {
                    Progress::Backend(why) => self.log.push(why),
                    Progress::Armed { threads } => {
                        self.state =
                            format!("armed: tracing {threads} thread(s), waiting for the trigger")
                    }
                    Progress::Waiting {
                        units,
                        buffer_bytes,
                    } => {
                        self.state = format!(
                            "waiting for the trigger: tracing {units} thread(s) or CPU(s) into {} KiB of ring buffers",
                            buffer_bytes / 1024
                        )
                    }
                    Progress::Triggered { snapshot } => {
                        self.state = format!("triggered: taking snapshot {snapshot}")
                    }
                    Progress::Saved { path, stop } => {
                        self.log.push(format!("saved {} ({stop})", path.display()));
                        self.saved.push(path);
                    }
                    Progress::Warning(w) => self.log.push(w),
                },
                Message::Done(r) => done = Some(r),
            }
        }
        if let Some(r) = done {
            if let Some(run) = self.running.take() {
                self.tails.push(run.rx);
            }
            match r {
                Ok(saved) => self.state = format!("done: {} snapshot(s)", saved.len()),
                Err(e) => {
                    self.state = "failed".into();
                    self.log.push(e);
                }
            }
        }
    }

    /// Waits for the running capture to end (tests).
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        while self.running.is_some() && std::time::Instant::now() < end {
            self.poll();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.poll();
        self.running.is_none()
    }

    /// Draws the panel's window.
    pub fn ui(&mut self, ctx: &egui::Context) {
        self.poll();
        if self.running.is_some() {
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
        }
        let mut open = self.open;
        egui::Window::new("Capture")
            .open(&mut open)
            .default_width(560.0)
            .default_height(620.0)
            .show(ctx, |ui| {
                // The actions stay in view below the settings, which scroll:
                // a long process or function list must never hide "Start".
                let actions =
                    2.0 * ui.spacing().interact_size.y + 3.0 * ui.spacing().item_spacing.y;
                egui::ScrollArea::vertical()
                    .max_height((ui.available_height() - actions).max(120.0))
                    .show(ui, |ui| self.contents(ui));
                ui.separator();
                self.actions(ui);
            });
        self.open = open;
    }

    fn contents(&mut self, ui: &mut egui::Ui) {
        let busy = self.running.is_some();
        ui.add_enabled_ui(!busy, |ui| {
            ui.heading("Target");
            ui.horizontal(|ui| {
                ui.radio_value(&mut self.target, TargetKind::Attach, "Attach to a process");
                ui.radio_value(&mut self.target, TargetKind::Command, "Run a command");
            });
            match self.target {
                TargetKind::Command => self.command_fields(ui),
                TargetKind::Attach => self.process_picker(ui),
            }
            ui.separator();
            ui.heading("Trigger");
            ui.horizontal_wrapped(|ui| {
                ui.radio_value(
                    &mut self.trigger,
                    TriggerKind::Function,
                    "When a function is entered",
                );
                ui.radio_value(
                    &mut self.trigger,
                    TriggerKind::Manual,
                    "Snapshot now (button)",
                );
                ui.radio_value(&mut self.trigger, TriggerKind::Duration, "After a duration");
                ui.radio_value(&mut self.trigger, TriggerKind::Exit, "On exit");
            });
            match self.trigger {
                TriggerKind::Function => {
                    self.symbol_picker(ui);
                    ui.horizontal(|ui| {
                        ui.label("Only a call slower than");
                        let r = ui.add(
                            egui::TextEdit::singleline(&mut self.slower_than)
                                .hint_text("e.g. 50us; empty: on entry")
                                .desired_width(160.0),
                        );
                        ui.ctx().accesskit_node_builder(r.id, |b| {
                            b.set_label("Only a call slower than")
                        });
                    });
                }
                TriggerKind::Duration => {
                    ui.horizontal(|ui| {
                        ui.label("Milliseconds");
                        ui.add(egui::DragValue::new(&mut self.duration_ms).range(1..=3_600_000));
                    });
                }
                _ => {}
            }
            ui.separator();
            self.settings(ui);
        });
        // A line each, the whole of it on hover, so that a long message
        // arriving mid-capture does not move the buttons under the pointer.
        for line in self.log.iter().rev().take(8) {
            ui.add(egui::Label::new(egui::RichText::new(line).small()).truncate())
                .on_hover_text(line);
        }
    }

    /// The buttons that start, snapshot and cancel a capture, and its status.
    fn actions(&mut self, ui: &mut egui::Ui) {
        let busy = self.running.is_some();
        ui.horizontal(|ui| {
            if ui
                .add_enabled(!busy, egui::Button::new("Start capture"))
                .clicked()
            {
                self.start();
            }
            if ui
                .add_enabled(busy, egui::Button::new("Snapshot now"))
                .on_hover_text("Take the snapshot at once, whatever the trigger")
                .clicked()
            {
                self.snapshot_now();
            }
            if ui
                .add_enabled(busy, egui::Button::new("Cancel capture"))
                .on_hover_text("Stop tracing and save nothing; the target runs on untouched")
                .clicked()
            {
                self.cancel();
            }
            if busy {
                ui.spinner();
            }
        });
        // One line, whatever the message (a backend's reasons can be
        // long): the actions above it must stay where they are. The whole
        // message shows on hover.
        let status = format!("Status: {}", self.state);
        ui.add(egui::Label::new(&status).truncate())
            .on_hover_text(status);
    }

    fn command_fields(&mut self, ui: &mut egui::Ui) {
        egui::Grid::new("command").num_columns(2).show(ui, |ui| {
            ui.label("Program");
            ui.add(egui::TextEdit::singleline(&mut self.program).hint_text("/path/to/program"));
            ui.end_row();
            ui.label("Arguments");
            ui.text_edit_singleline(&mut self.args);
            ui.end_row();
            ui.label("Working directory");
            ui.add(egui::TextEdit::singleline(&mut self.cwd).hint_text("(this one)"));
            ui.end_row();
        });
    }

    fn process_picker(&mut self, ui: &mut egui::Ui) {
        if self.processes.is_empty() {
            self.refresh_processes();
        }
        ui.horizontal(|ui| {
            let label = ui.label("Process filter");
            ui.add(
                egui::TextEdit::singleline(&mut self.process_filter)
                    .hint_text("pid, name or command line"),
            )
            .labelled_by(label.id);
            if ui.button("Refresh").clicked() {
                self.refresh_processes();
            }
        });
        let list: Vec<(i32, String, bool)> = self
            .matching_processes()
            .into_iter()
            .take(LIST_MAX)
            .map(|p| {
                let cmd: String = p.cmdline.chars().take(80).collect();
                (p.pid, format!("{} {} — {}", p.pid, p.name, cmd), p.own)
            })
            .collect();
        egui::ScrollArea::vertical()
            .id_salt("processes")
            .max_height(160.0)
            .show(ui, |ui| {
                for (pid, text, own) in list {
                    let text = if own {
                        egui::RichText::new(text)
                    } else {
                        egui::RichText::new(format!("{text} (another user's)")).weak()
                    };
                    let item = egui::Button::selectable(self.pid == Some(pid), text).truncate();
                    if ui.add(item).clicked() {
                        self.pid = Some(pid);
                    }
                }
            });
    }

    fn symbol_picker(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            let label = ui.label("Function filter");
            ui.add(
                egui::TextEdit::singleline(&mut self.symbol_filter)
                    .hint_text("fuzzy search over the target's functions"),
            )
            .labelled_by(label.id);
        });
        let list = self.matching_symbols();
        if self.symbols.is_empty() {
            ui.label(
                egui::RichText::new("pick a target to list its functions; or type a name below")
                    .weak(),
            );
        }
        egui::ScrollArea::vertical()
            .id_salt("symbols")
            .max_height(160.0)
            .show(ui, |ui| {
                for f in list {
                    let text = format!("{}  ({})", f.name, f.module);
                    if ui
                        .selectable_label(self.symbol.as_deref() == Some(&f.name), text)
                        .clicked()
                    {
                        self.symbol = Some(f.name.clone());
                    }
                }
            });
        ui.horizontal(|ui| {
            ui.label("Trigger function:");
            let mut name = self.symbol.clone().unwrap_or_default();
            if ui.text_edit_singleline(&mut name).changed() {
                self.symbol = Some(name).filter(|n| !n.trim().is_empty());
            }
        });
    }

    fn settings(&mut self, ui: &mut egui::Ui) {
        ui.heading("Settings");
        egui::Grid::new("settings").num_columns(2).show(ui, |ui| {
            ui.label("Snapshot size (per thread)");
            ui.text_edit_singleline(&mut self.size);
            ui.end_row();
            ui.label("Timing");
            ui.horizontal(|ui| {
                for t in [Timing::Low, Timing::Normal, Timing::High] {
                    let label = t.to_string();
                    ui.radio_value(&mut self.timing, t, label);
                }
            });
            ui.end_row();
            ui.label("Backend");
            ui.horizontal(|ui| {
                ui.radio_value(&mut self.backend, Backend::Auto, "auto");
                ui.radio_value(&mut self.backend, Backend::IntelPt, "intel-pt");
                ui.radio_value(&mut self.backend, Backend::Qemu, "qemu");
                ui.radio_value(&mut self.backend, Backend::Emulated, "emulated");
            });
            ui.end_row();
            ui.label("Snapshots");
            ui.add(egui::DragValue::new(&mut self.snapshots).range(1..=100));
            ui.end_row();
            ui.label("Arm after");
            let r = ui.add(
                egui::TextEdit::singleline(&mut self.arm_after)
                    .hint_text("a function trigger waits: 1ms of history, or full"),
            );
            ui.ctx()
                .accesskit_node_builder(r.id, |b| b.set_label("Arm after"));
            ui.end_row();
        });
        // Reading the PMU from sysfs and the program's header once per
        // backend and target, not per frame.
        let program = match self.target {
            TargetKind::Command => Some(self.program.trim().to_string()),
            TargetKind::Attach => None,
        };
        if self
            .backend_note
            .as_ref()
            .is_none_or(|(b, p, _)| *b != self.backend || *p != program)
        {
            let pmu_dir = Request::new(Target::Attach(0), Trigger::Manual)
                .opts
                .pmu_dir;
            let target = match &program {
                Some(p) => Target::Spawn {
                    argv: vec![p.clone()],
                    cwd: Some(self.cwd.trim())
                        .filter(|c| !c.is_empty())
                        .map(PathBuf::from),
                },
                None => Target::Attach(0),
            };
            let note = match recorder::choose(self.backend, &pmu_dir, &target) {
                Ok(Chosen::IntelPt) => "Intel PT hardware, through perf_event_open".to_string(),
                Ok(chosen) => chosen.why(),
                Err(e) => format!("{e:#}"),
            };
            self.backend_note = Some((self.backend, program, note));
        }
        if let Some((_, _, note)) = &self.backend_note {
            // One line, the whole reason on hover: a long one must not
            // push the panel's actions out of the window.
            ui.add(egui::Label::new(egui::RichText::new(note.as_str()).small()).truncate())
                .on_hover_text(note.as_str());
        }
    }
}

/// Runs one capture as a `ptscope record`/`attach --json-progress`
/// process and passes on what it reports; forwards Snapshot now (SIGINT)
/// and Cancel (SIGTERM).
///
/// Why a process: the window must not be the tracer. A tracer that dies
/// (the window killed or crashing) takes its single-stepped tracees with
/// it, and a tracer waits for any child, which would reap the window's
/// other children. The capture process is told (SIGTERM) when this thread
/// ends, however the window ends, and then detaches and leaves the target
/// running (see `ptscope_capture::supervise`). Its reports come on a pipe
/// of their own; a recorded command writes to the window's stderr.
fn supervise_capture(
    exe: &Path,
    args: &[std::ffi::OsString],
    cwd: Option<&Path>,
    (interrupt, cancel): (Arc<AtomicBool>, Arc<AtomicBool>),
    tx: &Sender<Message>,
) {
    use std::io::BufRead;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args)
        .env(
            ptscope_capture::supervise::ENV,
            std::process::id().to_string(),
        )
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let where_ = cwd.map_or(String::new(), |d| format!(" in {}", d.display()));
            let _ = tx.send(Message::Done(Err(format!(
                "cannot start the capture process {}{where_}: {e}",
                exe.display()
            ))));
            return;
        }
    };
    let stdout = child.stdout.take().expect("piped");
    // Its signal handlers are in place once it reports.
    let ready = Arc::new(AtomicBool::new(false));
    let reports = {
        let tx = tx.clone();
        let ready = ready.clone();
        std::thread::spawn(move || {
            let mut ended = false;
            let mut input = std::io::BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match input.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let Some(report) = recorder::Report::parse(&String::from_utf8_lossy(&line)) else {
                    continue;
                };
                ready.store(true, Ordering::Relaxed);
                let message = match report {
                    recorder::Report::Progress(p) => Message::Progress(p),
                    recorder::Report::Done { saved } => {
                        ended = true;
                        Message::Done(Ok(saved))
                    }
                    recorder::Report::Failed { error } => {
                        ended = true;
                        Message::Done(Err(error))
                    }
                    recorder::Report::CommandExited { code } => {
                        Message::Progress(Progress::Warning(format!(
                            "the command exited with status {}",
                            code.map_or("?".into(), |c| c.to_string())
                        )))
                    }
                };
                let _ = tx.send(message);
            }
            ended
        })
    };
    use nix::sys::signal::{kill, Signal};
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let mut cancelled = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(_) => break None,
        }
        // Cancel before it is ready ends it before it touched the target.
        // Snapshot now waits for its handlers: before them, SIGINT would
        // just kill it.
        if cancel.swap(false, Ordering::Relaxed) {
            cancelled = true;
            let _ = kill(pid, Signal::SIGTERM);
        }
        if ready.load(Ordering::Relaxed) && interrupt.swap(false, Ordering::Relaxed) {
            let _ = kill(pid, Signal::SIGINT);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // The report pipe is its alone (no command inherits it): it is at its
    // end once the process is.
    if reports.join().unwrap_or(false) {
        return;
    }
    let why = if cancelled && status.and_then(|s| s.signal()) == Some(Signal::SIGTERM as i32) {
        "capture cancelled; the target was left running".into()
    } else {
        format!(
            "the capture process ended ({}) without a snapshot; its stderr says why",
            status.map_or("status unknown".into(), |s| s.to_string())
        )
    };
    let _ = tx.send(Message::Done(Err(why)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panel_finds_the_program_the_capture_will_run() {
        let mut panel = CapturePanel::new();
        panel.program = " bin/sh ".into();
        panel.cwd = "/".into();
        assert_eq!(panel.program_path(), Some(PathBuf::from("/bin/sh")));
        // A file that cannot run is no program, so its functions are not
        // offered as triggers.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data"), "").unwrap();
        panel.program = "./data".into();
        panel.cwd = dir.path().display().to_string();
        assert_eq!(panel.program_path(), None);
        panel.program = "sh".into();
        assert_eq!(
            panel.program_path(),
            ptscope_capture::tracee::resolve_program("sh", None)
        );
    }
}
