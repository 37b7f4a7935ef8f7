//! The desktop window: tabs of open snapshots, each a
//! [`TraceView`](ptscope_viewer::TraceView); [`tab`] holds one tab: its
//! file, how it decodes, and its state.
//!
//! Files open from the command line, File > Open, the recent-files list
//! (kept in eframe's storage) and drag-and-drop. Each file decodes on a
//! background thread ([`Load`]); its tab shows progress and a Cancel
//! button, and draws the threads decoded so far as soon as there are any.
//! A file that cannot be read gets a tab saying why; the rest of the app
//! carries on. A raw PT dump records no binaries: its tab has a form to
//! give them as IMAGE:ADDR pairs and open it again (as `--raw` does on the
//! command line). A file whose binaries are missing gets a notice naming
//! them with the remedies and a folder picker ([`crate::missing`]); the
//! file is decoded again with the folder searched, and Save as adds what
//! was found there to the snapshot.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use eframe::egui;
use ptscope_formats::snapshot::TriggerCall;

use crate::export::ExportFormat;
use crate::loader::{Decoding, Load};
use ptscope_decoder::ModelCache;

pub mod tab;

use tab::TabState;
pub use tab::{capture_info, RawForm, Tab};

/// How many recent files the File menu keeps.
const RECENT_MAX: usize = 10;
const RECENT_KEY: &str = "ptscope.recent";

/// What `ptscope` with no command does: opens the window on `files` (or
/// the demo). With `screenshot`, saves a PNG of the window once the first
/// file is drawn, then exits (the Xvfb test and the README's images).
/// `decoding` is what the files are decoded with beyond what they record:
/// with `--raw IMAGE:ADDR` pairs they are raw PT dumps decoded with those
/// binaries, and `--cpu` and `--ip-filter` apply to each as `decode`
/// applies them. `names` says where debug files and binaries not at their
/// paths are looked for.
pub fn run(
    files: Vec<PathBuf>,
    screenshot: Option<PathBuf>,
    on_load: Option<OnLoad>,
    source_maps: Vec<(String, String)>,
    capture: bool,
    decoding: Decoding,
    names: crate::name_dirs::NameDirs,
) -> Result<ExitCode> {
    let files = if files.is_empty() {
        vec![crate::demo::path()?]
    } else {
        files
    };
    let title = files
        .first()
        .map(|f| window_title(f))
        .unwrap_or_else(|| "ptscope".into());
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title(title)
            .with_app_id("ptscope")
            .with_inner_size([1280.0, 800.0])
            .with_drag_and_drop(true),
        ..Default::default()
    };
    let failed = Arc::new(parking_lot::Mutex::new(None::<String>));
    let failed2 = failed.clone();
    eframe::run_native(
        "ptscope",
        options,
        Box::new(move |cc| {
            let mut app = App::new(cc.storage);
            // Before opening: each tab's viewer takes the maps.
            app.source_maps = source_maps;
            app.names = names;
            app.decoding = decoding;
            for f in &files {
                app.open(f, &cc.egui_ctx);
            }
            app.screenshot = screenshot.map(|path| Screenshot {
                path,
                frames_drawn: 0,
                requested: false,
                failed: failed2,
            });
            app.on_load = on_load;
            app.capture.open = capture;
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))?;
    if let Some(e) = failed.lock().take() {
        anyhow::bail!("{e}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The window's title for a file: its name (not the path it was opened
/// by, which may be long or relative) and the app's.
pub fn window_title(path: &Path) -> String {
    match path.file_name() {
        Some(name) => format!("{} — ptscope", name.to_string_lossy()),
        None => "ptscope".into(),
    }
}

struct Screenshot {
    path: PathBuf,
    frames_drawn: u32,
    requested: bool,
    failed: Arc<parking_lot::Mutex<Option<String>>>,
}

/// What the window shows of the first file once it is decoded
/// (`--select`, `--explain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnLoad {
    /// The first call of this function, fitted.
    Select(String),
    /// The slowest call of this function against a typical one.
    Explain(String),
}

/// The application state: every open tab and the recent files.
pub struct App {
    pub tabs: Vec<Tab>,
    pub active: usize,
    pub recent: Vec<PathBuf>,
    screenshot: Option<Screenshot>,
    /// What to show of the first file once it is decoded.
    pub on_load: Option<OnLoad>,
    /// A session's trigger call to zoom to, in tab `.0`, once it loads.
    pending_call: Option<(usize, TriggerCall)>,
    /// `--source-map` prefix rewrites for source files: (DWARF prefix,
    /// local prefix).
    pub source_maps: Vec<(String, String)>,
    /// The Capture panel (opened from the menu bar).
    pub capture: crate::capture_panel::CapturePanel,
    /// Where files opened from now on look for debug files and binaries
    /// (`--debug-dir`, `--binaries`, `--no-debuginfod`).
    pub names: crate::name_dirs::NameDirs,
    /// What files opened from now on are decoded with beyond what they
    /// record (`--raw`, `--cpu`, `--ip-filter`).
    pub decoding: Decoding,
    /// The window title last asked for, so it is sent only on a change.
    title: String,
    /// Asks the user for a folder of binaries or debug files: a native
    /// dialog; the GUI tests put a closure that answers in its place.
    pub pick_folder: Box<dyn FnMut() -> Option<PathBuf>>,
    /// Asks where to export the active tab in a format (File >
    /// Export…): a native dialog, or the GUI tests' closure.
    pub pick_export: Box<dyn FnMut(ExportFormat) -> Option<PathBuf>>,
    /// Exports running in the background: each says how it ended.
    exports: Vec<std::sync::mpsc::Receiver<String>>,
    /// Decoded models kept on disk (the user's cache, if there is one):
    /// every tab's decode reads and fills it, and the entries still being
    /// written when the window closes are waited for as the app goes.
    pub cache: Option<ModelCache>,
}

impl App {
    pub fn new(storage: Option<&dyn eframe::Storage>) -> App {
        let recent = storage
            .and_then(|s| s.get_string(RECENT_KEY))
            .map(|s| {
                s.lines()
                    .filter(|l| !l.is_empty())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default();
        App {
            tabs: Vec::new(),
            active: 0,
            recent,
            screenshot: None,
            on_load: None,
            pending_call: None,
            title: String::new(),
            source_maps: Vec::new(),
            capture: crate::capture_panel::CapturePanel::new(),
            names: crate::name_dirs::NameDirs::default(),
            decoding: Decoding::default(),
            pick_folder: Box::new(|| {
                rfd::FileDialog::new()
                    .set_title("A folder of binaries or debug files")
                    .pick_folder()
            }),
            pick_export: Box::new(|format| {
                rfd::FileDialog::new()
                    .set_title(format!("Export as a {}", format.title()))
                    .add_filter(format.title(), &[format.extension()])
                    .set_file_name(format!("trace.{}", format.extension()))
                    .save_file()
            }),
            exports: Vec::new(),
            cache: ModelCache::user(),
        }
    }

    /// Exports the active tab's model to `dest` in `format`, on a thread
    /// of its own (a large trace takes a while); the log says when it is
    /// written, or why not. With a range selected, only the range.
    pub fn export_active(&mut self, format: ExportFormat, dest: &Path) {
        let Some(t) = self.active_tab() else {
            return;
        };
        let Some(view) = t.view() else {
            self.capture.log.push(format!(
                "{}: not decoded yet: nothing to export",
                t.path.display()
            ));
            return;
        };
        let model = view.model().clone();
        let input = t.path.clone();
        let base = model.time_range().map_or(0, |r| r.0);
        let sel = match view.range() {
            Some((a, b)) => crate::export::Selection {
                from: Some(a.saturating_sub(base)),
                to: Some(b.saturating_sub(base)),
                ..Default::default()
            },
            None => crate::export::Selection::default(),
        };
        let dest = dest.to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        self.capture
            .log
            .push(format!("exporting to {}…", dest.display()));
        std::thread::spawn(move || {
            let said =
                match crate::export::export(&model, None, &input, &sel, format, &dest, |_| {}) {
                    Ok(n) => format!("exported {n} spans to {}", dest.display()),
                    Err(e) => format!("export failed: {e:#}"),
                };
            let _ = tx.send(said);
        });
        self.exports.push(rx);
    }

    /// Whether an export is still running.
    pub fn exporting(&self) -> bool {
        !self.exports.is_empty()
    }

    /// Logs the exports that ended.
    fn poll_exports(&mut self, ctx: &egui::Context) {
        let mut done = Vec::new();
        self.exports.retain(|rx| match rx.try_recv() {
            Ok(said) => {
                done.push(said);
                false
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => true,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => false,
        });
        self.capture.log.extend(done);
        if !self.exports.is_empty() {
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
        }
    }

    /// Saves a copy of the active tab's file at `dest` (File > Save as),
    /// as a snapshot that carries the binaries and debug files found in
    /// the folders the user chose for it. Returns what could not be
    /// carried, for the log.
    pub fn save_active_as(&self, dest: &Path) -> std::io::Result<Vec<String>> {
        let Some(t) = self.active_tab() else {
            return Err(std::io::Error::other("no open file"));
        };
        let mut notes = Vec::new();
        if !t.names.is_empty()
            && crate::missing::save_with_found(&t.path, dest, &t.names, &mut notes)
                .map_err(std::io::Error::other)?
        {
            return Ok(notes);
        }
        if t.path != dest {
            std::fs::copy(&t.path, dest)?;
        }
        Ok(notes)
    }

    /// Opens `path` in a new tab (or shows its tab if it is open already)
    /// and starts decoding it in the background, with [`App::decoding`]:
    /// with raw images there, it is a raw PT dump decoded with those
    /// binaries. A file that starts like a raw dump gets the form for its
    /// binaries and CPU either way.
    pub fn open(&mut self, path: &Path, ctx: &egui::Context) {
        if let Some(i) = self.tabs.iter().position(|t| t.path == path) {
            self.active = i;
            return;
        }
        use ptscope_decoder::{input_kind, InputKind};
        let decoding = self.decoding.clone();
        let raw = (!decoding.raw_images.is_empty()
            || input_kind(path, false).is_ok_and(|k| k == InputKind::RawPt))
        .then(|| RawForm {
            pending: decoding.raw_images.clone(),
            cpu: decoding.cpu.map(|c| c.to_string()).unwrap_or_default(),
            ..RawForm::default()
        });
        let ctx = ctx.clone();
        let load = Load::start(
            path,
            &decoding,
            &self.names,
            self.cache.clone(),
            move || ctx.request_repaint(),
        );
        self.tabs.push(Tab {
            path: path.to_path_buf(),
            decoding,
            names: self.names.clone(),
            cache: self.cache.clone(),
            source_maps: self.source_maps.clone(),
            capture_info: capture_info(path),
            trigger_call: ptscope_formats::snapshot::Snapshot::read_metadata(path)
                .ok()
                .flatten()
                .and_then(|m| m.trigger_call),
            raw,
            state: TabState::Loading { load, view: None },
        });
        self.active = self.tabs.len() - 1;
        self.recent.retain(|p| p != path);
        self.recent.insert(0, path.to_path_buf());
        self.recent.truncate(RECENT_MAX);
    }

    pub fn close(&mut self, i: usize) {
        if i < self.tabs.len() {
            self.tabs.remove(i);
            if self.active >= self.tabs.len() {
                self.active = self.tabs.len().saturating_sub(1);
            }
        }
    }

    pub fn active_tab(&self) -> Option<&Tab> {
        self.tabs.get(self.active)
    }

    pub fn active_tab_mut(&mut self) -> Option<&mut Tab> {
        self.tabs.get_mut(self.active)
    }

    /// Draws the whole window into `ui`.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        for t in &mut self.tabs {
            t.poll();
        }
        self.poll_exports(&ctx);
        if self.tabs.iter().any(Tab::is_loading) {
            // Progress and partial models arrive without input events.
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
        }
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        });
        for p in dropped {
            self.open(&p, &ctx);
        }
        let title = self
            .tabs
            .get(self.active)
            .map(|t| window_title(&t.path))
            .unwrap_or_else(|| "ptscope".into());
        if title != self.title {
            ctx.send_viewport_cmd(egui::ViewportCommand::Title(title.clone()));
            self.title = title;
        }

        egui::Panel::top("menu").show(ui, |ui| {
            egui::MenuBar::new().ui(ui, |ui| self.menu(ui));
        });
        if self.tabs.len() > 1 {
            egui::Panel::top("tabs").show(ui, |ui| self.tab_strip(ui));
        }
        if self
            .tabs
            .iter()
            .filter(|t| t.trigger_call.is_some())
            .count()
            >= 2
        {
            egui::Panel::left("session")
                .resizable(true)
                .default_size(220.0)
                .show(ui, |ui| self.session_list(ui));
        }
        egui::CentralPanel::default().show(ui, |ui| self.body(ui));
        self.show_pending_call();
        self.capture.ui(&ctx);
        for p in self.capture.take_saved() {
            self.open(&p, &ctx);
        }
        // After the view has drawn once (and fitted itself to the trace).
        if let Some(on_load) = &self.on_load {
            if let Some(t) = self.tabs.get_mut(self.active).filter(|t| !t.is_loading()) {
                if let Some(v) = t.view_mut() {
                    match on_load {
                        OnLoad::Select(name) => {
                            if let Some(r) = v.find_span(name) {
                                v.select(Some(r));
                                v.zoom_to_selection();
                            }
                        }
                        OnLoad::Explain(name) => {
                            v.explain(name);
                        }
                    }
                }
                self.on_load = None;
                ctx.request_repaint();
            }
        }
        self.screenshot_step(&ctx);
    }

    fn menu(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        ui.menu_button("File", |ui| {
            if ui.button("Open…").clicked() {
                ui.close();
                if let Some(p) = rfd::FileDialog::new()
                    .set_title("Open a snapshot or perf.data")
                    .add_filter("ptscope snapshot", &["ptscope"])
                    .add_filter("perf.data", &["data"])
                    .add_filter("perf script text", &["txt"])
                    .add_filter("raw PT dump", &["pt", "bin"])
                    .add_filter("any file", &["*"])
                    .pick_file()
                {
                    self.open(&p, &ctx);
                }
            }
            ui.menu_button("Open recent", |ui| {
                if self.recent.is_empty() {
                    ui.label("(none yet)");
                }
                let mut pick = None;
                for p in &self.recent {
                    if ui.button(p.display().to_string()).clicked() {
                        pick = Some(p.clone());
                    }
                }
                if let Some(p) = pick {
                    ui.close();
                    self.open(&p, &ctx);
                }
            });
            if ui
                .add_enabled(!self.tabs.is_empty(), egui::Button::new("Save as…"))
                .clicked()
            {
                ui.close();
                if let Some(dest) = rfd::FileDialog::new()
                    .set_title("Save the snapshot as")
                    .add_filter("ptscope snapshot", &["ptscope"])
                    .save_file()
                {
                    match self.save_active_as(&dest) {
                        Ok(notes) => self.capture.log.extend(notes),
                        Err(e) => self
                            .capture
                            .log
                            .push(format!("{}: cannot save: {e}", dest.display())),
                    }
                }
            }
            ui.add_enabled_ui(!self.tabs.is_empty(), |ui| {
                ui.menu_button("Export…", |ui| {
                    for format in [
                        ExportFormat::Perfetto,
                        ExportFormat::Fxt,
                        ExportFormat::Chrome,
                    ] {
                        let label = format!("{} (.{})…", format.title(), format.extension());
                        if ui.button(label).clicked() {
                            ui.close();
                            if let Some(dest) = (self.pick_export)(format) {
                                self.export_active(format, &dest);
                            }
                        }
                    }
                    ui.weak("The selected range only, when there is one");
                });
            });
            if ui.button("Open the demo").clicked() {
                ui.close();
                match crate::demo::path() {
                    Ok(demo) => self.open(&demo, &ctx),
                    Err(e) => self.capture.log.push(format!("{e:#}")),
                }
            }
            if ui
                .add_enabled(!self.tabs.is_empty(), egui::Button::new("Close tab"))
                .clicked()
            {
                ui.close();
                self.close(self.active);
            }
            if ui.button("Quit").clicked() {
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            }
        });
        if ui
            .button("Capture…")
            .on_hover_text("Capture a trace: attach to a process or run a command")
            .clicked()
        {
            self.capture.open = !self.capture.open;
        }
        ui.menu_button("Help", |ui| {
            if ui.button("Keyboard and mouse (?)").clicked() {
                ui.close();
                if let Some(v) = self.active_tab_mut().and_then(Tab::view_mut) {
                    v.show_help(true);
                }
            }
        });
        if let Some(t) = self.tabs.get(self.active) {
            ui.separator();
            ui.label(egui::RichText::new(t.path.display().to_string()).weak());
        }
    }

    /// The session: every open snapshot a slow-call trigger took, by the
    /// call that fired it, the slowest first. A click opens its tab at
    /// that call.
    fn session_list(&mut self, ui: &mut egui::Ui) {
        ui.heading("Slow calls");
        ui.label("one per snapshot, slowest first");
        let mut calls: Vec<(usize, &TriggerCall)> = self
            .tabs
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((i, t.trigger_call.as_ref()?)))
            .collect();
        calls.sort_by_key(|(i, c)| (std::cmp::Reverse(c.duration), *i));
        let mut picked = None;
        for (i, c) in calls {
            let text = format!(
                "{}  {}  (thread {}, {})",
                ptscope_viewer::format_duration(c.duration),
                c.function,
                c.tid,
                self.tabs[i].title()
            );
            if ui.selectable_label(i == self.active, text).clicked() {
                picked = Some((i, c.clone()));
            }
        }
        if let Some((i, c)) = picked {
            self.active = i;
            self.pending_call = Some((i, c));
        }
    }

    /// Zooms the active tab to the trigger call picked in the session, once
    /// its model is there.
    fn show_pending_call(&mut self) {
        let Some((i, c)) = &self.pending_call else {
            return;
        };
        if *i != self.active {
            self.pending_call = None;
            return;
        }
        let Some(t) = self.tabs.get_mut(*i).filter(|t| !t.is_loading()) else {
            return;
        };
        if let Some(v) = t.view_mut() {
            v.show_call(c.tid, &c.function, c.start, c.end);
        }
        self.pending_call = None;
    }

    fn tab_strip(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            let mut close = None;
            for (i, t) in self.tabs.iter().enumerate() {
                let mut title = t.title();
                if t.is_loading() {
                    title.push_str(" …");
                }
                if ui.selectable_label(i == self.active, title).clicked() {
                    self.active = i;
                }
                if ui
                    .small_button("×")
                    .on_hover_text("Close this tab")
                    .clicked()
                {
                    close = Some(i);
                }
                ui.separator();
            }
            if let Some(i) = close {
                self.close(i);
            }
        });
    }

    fn body(&mut self, ui: &mut egui::Ui) {
        let pick_folder = &mut self.pick_folder;
        let Some(tab) = self.tabs.get_mut(self.active) else {
            ui.centered_and_justified(|ui| {
                ui.label("Open a snapshot with File > Open, or drop one on the window.");
            });
            return;
        };
        if let TabState::Loading { load, view } = &tab.state {
            let (done, total) = load.segments();
            let mut cancel = false;
            ui.horizontal(|ui| {
                ui.spinner();
                let frac = if total > 0 {
                    done as f32 / total as f32
                } else {
                    0.0
                };
                ui.add(
                    egui::ProgressBar::new(frac)
                        .desired_width(240.0)
                        .text(match load.rate() {
                            Some(r) => format!("decoding: {done} of {total} segments, {r}"),
                            None => format!("decoding: {done} of {total} segments"),
                        }),
                );
                cancel = ui.button("Cancel").clicked();
                if view.is_some() {
                    ui.label("showing the threads decoded so far");
                }
            });
            if let Some(what) = load.waiting_on() {
                ui.label(what);
            }
            if cancel {
                load.cancel();
            }
        }
        let mut reopen = false;
        let mut pick = false;
        match &mut tab.state {
            TabState::Failed(e) => {
                ui.add_space(20.0);
                ui.heading("Cannot open this file");
                ui.label(egui::RichText::new(e.as_str()).color(ui.visuals().error_fg_color));
                ui.add_space(8.0);
                ui.label("ptscope opens .ptscope snapshots, perf.data files recorded with intel_pt, `perf script` branch text, and raw PT dumps with their binaries.");
                if let Some(form) = &mut tab.raw {
                    ui.add_space(8.0);
                    reopen = form.ui(ui, &tab.decoding);
                }
            }
            TabState::Ready(v) | TabState::Loading { view: Some(v), .. } => {
                if let Some(form) = &mut tab.raw {
                    let opened = &tab.decoding;
                    egui::Panel::top("ptscope-raw-form").show(ui, |ui| {
                        let n = opened.raw_images.len();
                        let cpu = match opened.cpu {
                            Some(c) => format!(", as on CPU {c}"),
                            None => String::new(),
                        };
                        egui::CollapsingHeader::new(format!(
                            "Raw PT dump decoded with {n} binar{}{cpu}",
                            if n == 1 { "y" } else { "ies" }
                        ))
                        .id_salt("ptscope-raw-form")
                        .show(ui, |ui| reopen = form.ui(ui, opened));
                    });
                }
                let missing = &v.model().missing_binaries;
                if !missing.is_empty() {
                    egui::Panel::top("ptscope-missing-binaries").show(ui, |ui| {
                        pick = crate::missing::notice_ui(ui, missing, &tab.names);
                    });
                }
                v.ui(ui)
            }
            TabState::Loading { view: None, .. } => {}
        }
        if reopen {
            tab.reopen_raw(ui.ctx());
        }
        if pick {
            if let Some(dir) = pick_folder() {
                tab.add_search_folder(&dir, ui.ctx());
            }
        }
    }

    fn screenshot_step(&mut self, ctx: &egui::Context) {
        let Some(s) = &mut self.screenshot else {
            return;
        };
        let ready = self.tabs.get(self.active).is_some_and(|t| !t.is_loading());
        if !ready {
            return;
        }
        if let Some(e) = self.tabs.get(self.active).and_then(Tab::error) {
            *s.failed.lock() = Some(e.to_string());
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            return;
        }
        // Line detail the view asked for is part of the picture.
        let lines_pending = self
            .tabs
            .get(self.active)
            .and_then(Tab::view)
            .is_some_and(|v| v.line_frame().pending > 0);
        if lines_pending {
            ctx.request_repaint();
            return;
        }
        // A few frames first, so layout and fonts have settled.
        s.frames_drawn += 1;
        if s.frames_drawn < 5 {
            ctx.request_repaint();
            return;
        }
        if s.requested {
            // Keep frames coming until the image arrives.
            ctx.request_repaint();
            return;
        }
        s.requested = true;
        let path = s.path.clone();
        let failed = s.failed.clone();
        let ctx2 = ctx.clone();
        ctx.request_screenshot(move |image| {
            if let Err(e) = save_png(&path, &image) {
                *failed.lock() = Some(format!(
                    "{}: cannot write the screenshot: {e}",
                    path.display()
                ));
            }
            ctx2.send_viewport_cmd(egui::ViewportCommand::Close);
            ctx2.request_repaint();
        });
        ctx.request_repaint();
    }
}

fn save_png(path: &Path, image: &egui::ColorImage) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let [w, h] = image.size;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w as u32, h as u32);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(std::io::Error::other)?;
    let bytes: Vec<u8> = image.pixels.iter().flat_map(|c| c.to_array()).collect();
    writer
        .write_image_data(&bytes)
        .map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        let list: Vec<String> = self
            .recent
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        storage.set_string(RECENT_KEY, list.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_title_names_the_file_not_its_path() {
        assert_eq!(
            window_title(Path::new("app/../assets/demo/demo.ptscope")),
            "demo.ptscope — ptscope"
        );
        assert_eq!(window_title(Path::new("/")), "ptscope");
    }
}
