//! One tab of the window: a file, how it is decoded (a raw dump's
//! binaries and CPU, the search folders), and its state: loading with
//! progress and a partial view, ready, or failed with why.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use eframe::egui;
use ptscope_decoder::ModelCache;
use ptscope_formats::snapshot::TriggerCall;
use ptscope_viewer::TraceView;

use crate::loader::{Decoding, Load, Loaded, Poll};

pub(super) enum TabState {
    /// Decoding; `view` shows the threads decoded so far.
    Loading {
        load: Load,
        view: Option<TraceView>,
    },
    Ready(TraceView),
    Failed(String),
}

pub struct Tab {
    pub path: PathBuf,
    /// `--source-map` pairs for its viewer's Source pane.
    pub(super) source_maps: Vec<(String, String)>,
    /// The snapshot's account of its capture, read once at open.
    pub(super) capture_info: Option<String>,
    /// The call that fired its slow-call trigger, if one did.
    pub trigger_call: Option<TriggerCall>,
    /// What it was last decoded with beyond what it records.
    pub decoding: Decoding,
    /// The file is a raw PT dump: the form that changes its binaries and
    /// CPU.
    pub raw: Option<RawForm>,
    /// Where its decode looks for debug files and binaries.
    pub names: crate::name_dirs::NameDirs,
    /// The app's model cache, which its decodes read and fill.
    pub(super) cache: Option<ModelCache>,
    pub(super) state: TabState,
}

/// The binaries of a raw PT dump, as IMAGE:ADDR pairs the user gives in
/// its tab, and the CPU it ran on (a raw dump records none, and the CPU
/// says which errata to work around); the tab opens the dump again with
/// them.
#[derive(Clone, Debug, Default)]
pub struct RawForm {
    /// The pairs to open it with next.
    pub pending: Vec<(PathBuf, u64)>,
    /// The text box: one IMAGE:ADDR.
    pub text: String,
    /// Why the text was not taken.
    pub error: Option<String>,
    /// The CPU box: FAMILY/MODEL[/STEPPING], or empty for none.
    pub cpu: String,
    /// Why the CPU box was not taken.
    pub cpu_error: Option<String>,
}

impl RawForm {
    /// Takes the text box's IMAGE:ADDR into the pending pairs, or says
    /// why not.
    pub fn add(&mut self) -> bool {
        match crate::report::parse_raw(self.text.trim()) {
            Ok((file, _)) if !file.is_file() => {
                self.error = Some(format!("{}: no such file", file.display()));
                false
            }
            Ok(pair) => {
                if !self.pending.contains(&pair) {
                    self.pending.push(pair);
                }
                self.text.clear();
                self.error = None;
                true
            }
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    /// The CPU the box names; `Err` says why the box is not a CPU.
    pub fn parsed_cpu(&self) -> Result<Option<ptscope_decoder::Cpu>, String> {
        match self.cpu.trim() {
            "" => Ok(None),
            text => text.parse().map(Some).map_err(|e| format!("CPU: {e}")),
        }
    }

    /// Draws the form; true when the user asks to open the dump again with
    /// binaries or a CPU other than those it was `opened` with.
    pub(super) fn ui(&mut self, ui: &mut egui::Ui, opened: &Decoding) -> bool {
        let mut reopen = false;
        ui.label(
            "A raw PT dump records no binaries: give each binary it ran and its load address, \
             as on the command line (--raw IMAGE:ADDR).",
        );
        let mut remove = None;
        for (i, (file, addr)) in self.pending.iter().enumerate() {
            ui.horizontal(|ui| {
                ui.monospace(format!("{}:{addr:#x}", file.display()));
                if ui.small_button("×").on_hover_text("Remove").clicked() {
                    remove = Some(i);
                }
            });
        }
        if let Some(i) = remove {
            self.pending.remove(i);
        }
        ui.horizontal(|ui| {
            let r = ui.add(
                egui::TextEdit::singleline(&mut self.text)
                    .hint_text("IMAGE:ADDR, e.g. ./prog.bin:0x400000")
                    .desired_width(360.0),
            );
            ui.ctx()
                .accesskit_node_builder(r.id, |b| b.set_label("Raw image (IMAGE:ADDR)"));
            let enter = r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            if ui.button("Add").clicked() || enter {
                self.add();
            }
        });
        ui.horizontal(|ui| {
            ui.label("CPU");
            let r = ui.add(
                egui::TextEdit::singleline(&mut self.cpu)
                    .hint_text(
                        "FAMILY/MODEL[/STEPPING], e.g. 6/0x8e/9: its errata are worked around",
                    )
                    .desired_width(360.0),
            );
            ui.ctx()
                .accesskit_node_builder(r.id, |b| b.set_label("CPU (FAMILY/MODEL[/STEPPING])"));
            if r.changed() {
                self.cpu_error = None;
            }
            let changed = self.pending != opened.raw_images || self.parsed_cpu() != Ok(opened.cpu);
            let ready = !self.pending.is_empty() && changed;
            if ui
                .add_enabled(ready, egui::Button::new("Open with these binaries"))
                .clicked()
            {
                reopen = true;
            }
        });
        for e in [&self.error, &self.cpu_error].into_iter().flatten() {
            ui.colored_label(ui.visuals().error_fg_color, e);
        }
        reopen
    }
}

/// A viewer of `model`, the file at `path`: source files are looked for
/// through `maps`, then next to the file.
pub(super) fn new_view(
    path: &Path,
    maps: &[(String, String)],
    capture_info: Option<String>,
    model: Arc<ptscope_model::Model>,
) -> TraceView {
    let mut v = TraceView::new(model);
    v.set_source_maps(maps.to_vec());
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    v.set_source_dir(Some(dir.to_path_buf()));
    v.set_capture_info(capture_info);
    v
}

/// The snapshot's own account of its capture: trigger, stop, registers.
pub fn capture_info(path: &Path) -> Option<String> {
    let m = ptscope_formats::snapshot::Snapshot::read_metadata(path).ok()??;
    let mut s = format!("{} capture, trigger {}: {}", m.backend, m.trigger, m.stop);
    for (reg, v) in &m.trigger_registers {
        s.push_str(&format!(", {reg}={v:#x}"));
    }
    Some(s)
}

impl Tab {
    pub(super) fn title(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }

    /// The viewer, once there is something to view.
    pub fn view(&self) -> Option<&TraceView> {
        match &self.state {
            TabState::Ready(v) => Some(v),
            TabState::Loading { view, .. } => view.as_ref(),
            TabState::Failed(_) => None,
        }
    }

    pub fn view_mut(&mut self) -> Option<&mut TraceView> {
        match &mut self.state {
            TabState::Ready(v) => Some(v),
            TabState::Loading { view, .. } => view.as_mut(),
            TabState::Failed(_) => None,
        }
    }

    /// Why the file could not be opened, if it could not.
    pub fn error(&self) -> Option<&str> {
        match &self.state {
            TabState::Failed(e) => Some(e),
            _ => None,
        }
    }

    pub fn is_loading(&self) -> bool {
        matches!(self.state, TabState::Loading { .. })
    }

    /// Takes in what the background decode has produced since last time.
    pub(super) fn poll(&mut self) {
        let TabState::Loading { load, view } = &mut self.state else {
            return;
        };
        match load.poll() {
            Poll::Pending(Some(partial)) => match view {
                Some(v) => v.set_model(partial),
                None => {
                    *view = Some(new_view(
                        &self.path,
                        &self.source_maps,
                        self.capture_info.clone(),
                        partial,
                    ))
                }
            },
            Poll::Pending(None) => {}
            Poll::Done(r) => self.finish(r),
        }
    }

    fn finish(&mut self, r: Result<Loaded, String>) {
        let old = std::mem::replace(&mut self.state, TabState::Failed(String::new()));
        let view = match old {
            TabState::Loading { view, .. } => view,
            _ => None,
        };
        self.state = match r {
            Ok(Loaded { model, detail }) => {
                let mut v = match view {
                    Some(mut v) => {
                        v.set_model(model);
                        v
                    }
                    None => new_view(
                        &self.path,
                        &self.source_maps,
                        self.capture_info.clone(),
                        model,
                    ),
                };
                if let Some(d) = detail {
                    v.set_detail(d);
                }
                TabState::Ready(v)
            }
            Err(e) => TabState::Failed(e),
        };
    }

    /// Opens the raw dump again with the binaries and the CPU its form
    /// holds; a CPU box that names no CPU says why and opens nothing.
    pub fn reopen_raw(&mut self, ctx: &egui::Context) {
        let Some(form) = &mut self.raw else { return };
        let cpu = match form.parsed_cpu() {
            Ok(cpu) => cpu,
            Err(e) => {
                form.cpu_error = Some(e);
                return;
            }
        };
        self.decoding.raw_images = form.pending.clone();
        self.decoding.cpu = cpu;
        let load = self.load(ctx);
        self.state = TabState::Loading { load, view: None };
    }

    /// Decodes the tab's file again as it now says (its binaries, CPU and
    /// search folders), waking the window when done.
    pub(super) fn load(&self, ctx: &egui::Context) -> Load {
        let ctx = ctx.clone();
        Load::start(
            &self.path,
            &self.decoding,
            &self.names,
            self.cache.clone(),
            move || ctx.request_repaint(),
        )
    }

    /// Searches `dir` too for missing binaries and debug files, and decodes
    /// the file again; the view stays (and keeps its zoom) meanwhile.
    pub fn add_search_folder(&mut self, dir: &Path, ctx: &egui::Context) {
        self.names.add_folder(dir);
        let load = self.load(ctx);
        let old = std::mem::replace(&mut self.state, TabState::Failed(String::new()));
        let view = match old {
            TabState::Ready(v) | TabState::Loading { view: Some(v), .. } => Some(v),
            _ => None,
        };
        self.state = TabState::Loading { load, view };
    }

    /// Blocks until the tab's file is decoded (the GUI tests).
    pub fn wait(&mut self) {
        if let TabState::Loading { load, .. } = &mut self.state {
            let r = load.wait();
            self.finish(r);
        }
    }
}
