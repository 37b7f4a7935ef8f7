//! The Source tab: it shows the file of a clicked line span, scrolled to
//! the line, with a heat column saying how often each line ran and for how
//! long, over the view or over the range selection. Its Disassembly view
//! interleaves the function's source lines with the instructions it ran.
//!
//! Files are found from their DWARF path through remappings (`FROM=TO`,
//! from `--source-map` or typed into the pane), and failing that next to
//! the opened snapshot, so a snapshot and its sources can move together.
//! While the view moves, the heat tables are rebuilt at most every 100 ms,
//! because a wide window's tables take a few milliseconds to build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use egui::{pos2, vec2, Align2, Color32, FontId, Rect, Sense, Ui, WidgetInfo};
use ptscope_model::{insn_heat, line_heat, Chain, InsnHeat, LineHeat, Segment};
use ptscope_model::{DetailSource, SegmentKey};

use crate::timeline::axis::{format_duration, format_duration_f};
use crate::timeline::line_detail::{file_name, Disasm};

/// Source files larger than this are not shown.
const MAX_FILE_BYTES: u64 = 16 << 20;
/// Heat is built from at most this many segments.
pub(crate) const MAX_HEAT_SEGMENTS: usize = 16;
/// Directory levels of a DWARF path tried next to the snapshot.
const NEAR_LEVELS: usize = 4;
/// Columns of a source row, px from its left.
const COUNT_X: f32 = 64.0;
const TIME_X: f32 = 140.0;
const LINE_X: f32 = 190.0;
const TEXT_X: f32 = 200.0;
/// The heat bar's color at full heat.
const HEAT: Color32 = Color32::from_rgb(0xe0, 0x70, 0x20);

/// A `FROM=TO` remapping, as typed.
pub fn parse_map(s: &str) -> Result<(String, String), String> {
    match s.trim().split_once('=') {
        Some((from, to)) if !from.trim().is_empty() => {
            Ok((from.trim().to_string(), to.trim().to_string()))
        }
        _ => Err(format!("`{}` is not FROM=TO", s.trim())),
    }
}

/// `path` with prefix `from` replaced by `to`, if `from` is a whole-
/// component prefix of it.
fn remap(path: &str, from: &str, to: &str) -> Option<PathBuf> {
    let rest = path.strip_prefix(from)?;
    let boundary = from.ends_with('/') || rest.is_empty() || rest.starts_with('/');
    if !boundary {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    Some(if rest.is_empty() {
        PathBuf::from(to)
    } else {
        Path::new(to).join(rest)
    })
}

/// Where to look for the file of DWARF path `dwarf`, in order: each
/// remapping that applies, the path itself, then its last few components
/// under `near` (the snapshot's directory).
pub(crate) fn candidates(
    dwarf: &str,
    maps: &[(String, String)],
    near: Option<&Path>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for (from, to) in maps {
        out.extend(remap(dwarf, from, to));
    }
    let own = Path::new(dwarf);
    if own.is_absolute() {
        out.push(own.to_path_buf());
    }
    if let Some(dir) = near {
        let parts: Vec<&str> = dwarf
            .split(['/', '\\'])
            .filter(|p| !p.is_empty() && *p != "." && *p != "..")
            .collect();
        let keep = parts.len().min(NEAR_LEVELS);
        for k in (1..=keep).rev() {
            out.push(dir.join(parts[parts.len() - k..].join("/")));
        }
    }
    if !own.is_absolute() {
        out.push(own.to_path_buf());
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// The first candidate that `exists`, and every candidate tried.
pub(crate) fn resolve(
    dwarf: &str,
    maps: &[(String, String)],
    near: Option<&Path>,
    exists: impl Fn(&Path) -> bool,
) -> (Option<PathBuf>, Vec<PathBuf>) {
    let tried = candidates(dwarf, maps, near);
    let found = tried.iter().find(|p| exists(p)).cloned();
    (found, tried)
}

/// A source file as the pane shows it.
#[derive(Debug)]
pub enum Loaded {
    Text { path: PathBuf, lines: Vec<String> },
    Missing { tried: Vec<PathBuf>, why: String },
}

impl Loaded {
    pub fn lines(&self) -> &[String] {
        match self {
            Loaded::Text { lines, .. } => lines,
            Loaded::Missing { .. } => &[],
        }
    }
}

/// Reads and splits a text file for display (tabs to spaces).
fn read_lines(path: &Path) -> Result<Vec<String>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("{} bytes is too large to show", meta.len()));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(text
        .split('\n')
        .map(|l| l.trim_end_matches('\r').replace('\t', "    "))
        .collect())
}

fn load(dwarf: &str, maps: &[(String, String)], near: Option<&Path>) -> Loaded {
    if dwarf.is_empty() || dwarf == "??" {
        return Loaded::Missing {
            tried: Vec::new(),
            why: "the debug info names no source file for this line".into(),
        };
    }
    let (found, tried) = resolve(dwarf, maps, near, |p| p.is_file());
    match found {
        Some(path) => match read_lines(&path) {
            Ok(lines) => Loaded::Text { path, lines },
            Err(e) => Loaded::Missing {
                tried,
                why: format!("{}: {e}", path.display()),
            },
        },
        None => Loaded::Missing {
            tried,
            why: format!("{dwarf} is not on this machine"),
        },
    }
}

/// Heat of one file's lines, indexed by line number.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FileHeat {
    pub lines: Vec<LineHeat>,
    pub max_count: u64,
    pub max_time: u64,
}

impl FileHeat {
    /// Picks `file`'s lines out of `line_heat`'s table.
    pub(crate) fn build(table: &HashMap<(Arc<str>, u32), LineHeat>, file: &str) -> FileHeat {
        let mut out = FileHeat::default();
        for ((f, line), h) in table {
            if &**f != file {
                continue;
            }
            let i = *line as usize;
            if out.lines.len() <= i {
                out.lines.resize(i + 1, LineHeat::default());
            }
            out.lines[i] = *h;
            out.max_count = out.max_count.max(h.count);
            out.max_time = out.max_time.max(h.time_ns);
        }
        out
    }

    pub(crate) fn get(&self, line: u32) -> Option<LineHeat> {
        self.lines
            .get(line as usize)
            .copied()
            .filter(|h| h.insns > 0)
    }

    /// The lines that ran, in order.
    pub(crate) fn ran(&self) -> impl Iterator<Item = u32> + '_ {
        self.lines
            .iter()
            .enumerate()
            .filter(|(_, h)| h.insns > 0)
            .map(|(i, _)| i as u32)
    }

    /// How hot `h` is, 0..1, by time.
    pub(crate) fn level(&self, h: &LineHeat) -> f32 {
        if self.max_time == 0 {
            0.0
        } else {
            h.time_ns as f32 / self.max_time as f32
        }
    }
}

/// One row of the Disassembly view.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum DisasmRow {
    /// The source line the following instructions belong to (innermost
    /// frame: inlined code shows its own line).
    Source {
        file: Arc<str>,
        line: u32,
    },
    Insn {
        ip: u64,
        heat: InsnHeat,
    },
}

/// The executed instructions of `function` (their outermost frame), by
/// address, each run of them under its source line.
pub(crate) fn disasm_rows(
    heat: &HashMap<u64, (InsnHeat, Option<Chain>)>,
    function: &str,
) -> Vec<DisasmRow> {
    let mut insns: Vec<(u64, InsnHeat, &Chain)> = heat
        .iter()
        .filter_map(|(ip, (h, c))| {
            let c = c.as_ref()?;
            (&*c.first()?.function == function).then_some((*ip, *h, c))
        })
        .collect();
    insns.sort_by_key(|i| i.0);
    let mut out = Vec::with_capacity(insns.len() * 2);
    let mut at: Option<(&str, u32)> = None;
    for (ip, h, chain) in insns {
        if let Some(f) = chain.last() {
            if at != Some((&f.file, f.line)) {
                at = Some((&f.file, f.line));
                out.push(DisasmRow::Source {
                    file: f.file.clone(),
                    line: f.line,
                });
            }
        }
        out.push(DisasmRow::Insn { ip, heat: h });
    }
    out
}

/// What the pane shows: the clicked line.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceTarget {
    pub file: Arc<str>,
    pub line: u32,
    /// The function the line is in (for inlined code, the inlined one).
    pub function: Arc<str>,
    /// The real function it was compiled into: whose instructions the
    /// Disassembly view lists.
    pub outer: Arc<str>,
    pub pid: i32,
    /// A clicked instruction, highlighted in the Disassembly view.
    pub ip: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SourceMode {
    #[default]
    Source,
    Disassembly,
}

/// Heat tables over one span of time, rebuilt when it or the decoded
/// segments change.
#[derive(Default)]
struct HeatCache {
    scope: Option<(u64, u64)>,
    /// Segments the tables hold, and those covering the scope.
    ready: Vec<SegmentKey>,
    covering: usize,
    too_wide: bool,
    segs: Vec<Arc<Segment>>,
    lines: HashMap<(Arc<str>, u32), LineHeat>,
    insns: Option<HashMap<u64, (InsnHeat, Option<Chain>)>>,
    file: Option<(Arc<str>, FileHeat)>,
    rows: Option<(Arc<str>, Arc<[DisasmRow]>)>,
    built: Option<std::time::Instant>,
}

/// While the view moves, the tables are rebuilt at most this often: a
/// 100k-instruction window costs a few ms, too much for every frame.
const HEAT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl HeatCache {
    /// Rebuilds the tables if the scope or the ready segments changed.
    /// Returns true when it kept stale tables (the view is moving; a range
    /// selection is not throttled): ask for a frame after [`HEAT_EVERY`].
    fn refresh(
        &mut self,
        detail: Option<&dyn DetailSource>,
        threads: &[usize],
        (scope, is_range): ((u64, u64), bool),
    ) -> bool {
        let Some(detail) = detail else {
            *self = HeatCache::default();
            return false;
        };
        let mut keys: Vec<SegmentKey> = Vec::new();
        for &t in threads {
            keys.extend(detail.keys(t, scope.0, scope.1));
        }
        let too_wide = keys.len() > MAX_HEAT_SEGMENTS;
        let mut ready = Vec::new();
        let mut segs = Vec::new();
        if !too_wide {
            for k in &keys {
                if let Some(s) = detail.get(*k) {
                    ready.push(*k);
                    segs.push(s);
                }
            }
        }
        if self.scope == Some(scope) && self.ready == ready && self.too_wide == too_wide {
            self.covering = keys.len();
            return false;
        }
        let moving = !is_range && self.scope.is_some_and(|s| s != scope);
        if moving && self.built.is_some_and(|t| t.elapsed() < HEAT_EVERY) {
            return true;
        }
        *self = HeatCache {
            built: Some(std::time::Instant::now()),
            scope: Some(scope),
            covering: keys.len(),
            too_wide,
            lines: line_heat(segs.iter().map(|s| &**s), scope.0, scope.1),
            ready,
            segs,
            ..HeatCache::default()
        };
        false
    }

    fn file(&mut self, file: &Arc<str>) -> &FileHeat {
        if self.file.as_ref().is_none_or(|(f, _)| f != file) {
            self.file = Some((file.clone(), FileHeat::build(&self.lines, file)));
        }
        &self.file.as_ref().expect("just set").1
    }

    fn rows(&mut self, function: &Arc<str>) -> Arc<[DisasmRow]> {
        if self.rows.as_ref().is_none_or(|(f, _)| f != function) {
            let (from, to) = self.scope.unwrap_or((0, 0));
            let insns = self
                .insns
                .get_or_insert_with(|| insn_heat(self.segs.iter().map(|s| &**s), from, to));
            self.rows = Some((function.clone(), disasm_rows(insns, function).into()));
        }
        self.rows.as_ref().expect("just set").1.clone()
    }
}

/// What the pane needs from the view each frame.
pub struct SourceEnv<'a> {
    pub detail: Option<&'a dyn DetailSource>,
    pub source: Option<&'a dyn DetailSource>,
    pub disasm: &'a mut Disasm,
    /// Threads whose lines count (the visible ones).
    pub threads: &'a [usize],
    /// The span of time the heat covers, and whether it is the range
    /// selection (else the view).
    pub scope: (u64, u64),
    pub is_range: bool,
}

/// The Source pane's state.
#[derive(Default)]
pub struct SourcePane {
    /// From `--source-map`.
    base_maps: Vec<(String, String)>,
    /// Typed into the pane; tried first.
    user_maps: Vec<(String, String)>,
    /// The snapshot's directory.
    near: Option<PathBuf>,
    map_text: String,
    map_error: Option<String>,
    target: Option<SourceTarget>,
    files: HashMap<Arc<str>, Arc<Loaded>>,
    pub mode: SourceMode,
    scroll_pending: bool,
    heat: HeatCache,
}

impl SourcePane {
    pub fn set_base_maps(&mut self, maps: Vec<(String, String)>) {
        if self.base_maps != maps {
            self.base_maps = maps;
            self.files.clear();
        }
    }

    pub fn set_near(&mut self, dir: Option<PathBuf>) {
        if self.near != dir {
            self.near = dir;
            self.files.clear();
        }
    }

    /// Adds a remapping (tried before the others) and reloads.
    pub fn add_map(&mut self, from: String, to: String) {
        self.user_maps.retain(|m| m.0 != from);
        self.user_maps.insert(0, (from, to));
        self.files.clear();
        self.scroll_pending = true;
    }

    /// Every remapping, in the order they are tried.
    pub fn maps(&self) -> Vec<(String, String)> {
        self.user_maps
            .iter()
            .chain(&self.base_maps)
            .cloned()
            .collect()
    }

    /// Shows `t`, scrolled to its line.
    pub fn open(&mut self, t: SourceTarget) {
        self.target = Some(t);
        self.scroll_pending = true;
    }

    pub fn target(&self) -> Option<&SourceTarget> {
        self.target.as_ref()
    }

    /// The loaded (or missing) file of DWARF path `dwarf`.
    pub fn file(&mut self, dwarf: &Arc<str>) -> Arc<Loaded> {
        if let Some(f) = self.files.get(dwarf) {
            return f.clone();
        }
        let f = Arc::new(load(dwarf, &self.maps(), self.near.as_deref()));
        self.files.insert(dwarf.clone(), f.clone());
        f
    }

    /// The target file's heat at `line`, as last built.
    pub fn heat_at(&mut self, line: u32) -> Option<LineHeat> {
        let file = self.target.as_ref()?.file.clone();
        self.heat.file(&file).get(line)
    }

    /// The span of time the heat was last built over.
    pub fn heat_scope(&self) -> Option<(u64, u64)> {
        self.heat.scope
    }

    /// Draws the pane.
    pub fn ui(&mut self, ui: &mut Ui, env: SourceEnv) {
        let Some(target) = self.target.clone() else {
            ui.label("Zoom in until source lines show under the calls, then click one.");
            return;
        };
        if self
            .heat
            .refresh(env.detail, env.threads, (env.scope, env.is_range))
        {
            ui.ctx().request_repaint_after(HEAT_EVERY);
        }
        let file = self.file(&target.file);
        self.header(ui, &target, &file, &env);
        ui.separator();
        match self.mode {
            SourceMode::Source => self.source_rows(ui, &target, &file),
            SourceMode::Disassembly => self.disasm_view(ui, &target, env),
        }
    }

    fn header(&mut self, ui: &mut Ui, t: &SourceTarget, file: &Loaded, env: &SourceEnv) {
        ui.horizontal(|ui| {
            for (mode, label) in [
                (SourceMode::Source, "Source"),
                (SourceMode::Disassembly, "Disassembly"),
            ] {
                let r = ui.selectable_label(self.mode == mode, label);
                r.widget_info(|| {
                    WidgetInfo::selected(egui::Role::RadioButton, true, self.mode == mode, label)
                });
                if r.clicked() {
                    self.mode = mode;
                    self.scroll_pending = true;
                }
            }
            ui.separator();
            ui.strong(format!("{}:{}", file_name(&t.file), t.line));
            ui.label(format!("in {}", t.function));
            ui.separator();
            let (a, b) = env.scope;
            let what = if env.is_range { "range" } else { "view" };
            let mut s = format!(
                "heat over the {what} ({})",
                format_duration_f(b.saturating_sub(a) as f64)
            );
            if self.heat.too_wide {
                s = format!(
                    "no heat: the {what} spans {} trace segments (at most {MAX_HEAT_SEGMENTS}); zoom in or select a shorter range",
                    self.heat.covering
                );
            } else if self.heat.ready.len() < self.heat.covering {
                s.push_str(&format!(
                    ", {} of {} segments decoded…",
                    self.heat.ready.len(),
                    self.heat.covering
                ));
            }
            ui.weak(s);
        });
        match file {
            Loaded::Text { path, .. } => {
                if path.as_os_str() != Path::new(&*t.file).as_os_str() {
                    ui.weak(format!("{} read from {}", t.file, path.display()));
                } else {
                    ui.weak(path.display().to_string());
                }
            }
            Loaded::Missing { tried, why } => {
                let err = ui.visuals().error_fg_color;
                ui.colored_label(err, format!("Source file not found: {why}."));
                if !tried.is_empty() {
                    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
                    ui.label(format!("Tried: {}", list.join(", ")));
                }
                ui.label(
                    "Add a remapping below (FROM=TO: the DWARF path's prefix and where those files are here), or start ptscope with --source-map FROM=TO.",
                );
            }
        }
        self.map_editor(ui, matches!(file, Loaded::Missing { .. }));
    }

    fn map_editor(&mut self, ui: &mut Ui, open: bool) {
        let id = ui.make_persistent_id("ptscope-source-maps");
        egui::CollapsingHeader::new(format!("Path remapping ({})", self.maps().len()))
            .id_salt(id)
            .open(open.then_some(true))
            .show(ui, |ui| {
                let mut remove = None;
                for (i, (from, to)) in self.user_maps.iter().enumerate() {
                    ui.horizontal(|ui| {
                        ui.monospace(format!("{from} = {to}"));
                        if ui.small_button("×").on_hover_text("Remove").clicked() {
                            remove = Some(i);
                        }
                    });
                }
                for (from, to) in &self.base_maps {
                    ui.horizontal(|ui| {
                        ui.monospace(format!("{from} = {to}"));
                        ui.weak("(--source-map)");
                    });
                }
                if let Some(i) = remove {
                    self.user_maps.remove(i);
                    self.files.clear();
                }
                ui.horizontal(|ui| {
                    let r = ui.add(
                        egui::TextEdit::singleline(&mut self.map_text)
                            .hint_text("/build/dir=/home/me/src")
                            .desired_width(320.0),
                    );
                    ui.ctx()
                        .accesskit_node_builder(r.id, |b| b.set_label("Source path remapping"));
                    let enter = r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
                    if ui.button("Add").clicked() || enter {
                        match parse_map(&self.map_text) {
                            Ok((from, to)) => {
                                self.add_map(from, to);
                                self.map_text.clear();
                                self.map_error = None;
                            }
                            Err(e) => self.map_error = Some(e),
                        }
                    }
                });
                if let Some(e) = &self.map_error {
                    ui.colored_label(ui.visuals().error_fg_color, e);
                }
            });
    }

    /// Scroll offset that puts row `i` in the middle of a view `h` tall.
    fn offset_for(i: usize, row_h: f32, h: f32) -> f32 {
        (i as f32 * row_h - h / 2.0 + row_h).max(0.0)
    }

    fn source_rows(&mut self, ui: &mut Ui, t: &SourceTarget, file: &Loaded) {
        let heat = self.heat.file(&t.file);
        // Every line of the text; without it, still the lines that ran.
        let ran: Vec<u32> = match file {
            Loaded::Text { .. } => Vec::new(),
            Loaded::Missing { .. } => heat.ran().collect(),
        };
        let text = file.lines();
        let count = if ran.is_empty() {
            text.len()
        } else {
            ran.len()
        };
        let number = |i: usize| ran.get(i).copied().unwrap_or(i as u32 + 1);
        let row_h = ui.text_style_height(&egui::TextStyle::Monospace) + 2.0;
        let mut area = egui::ScrollArea::vertical()
            .id_salt("ptscope-source")
            .auto_shrink([false, false]);
        if self.scroll_pending {
            let at = if ran.is_empty() {
                t.line.saturating_sub(1) as usize
            } else {
                ran.partition_point(|&n| n < t.line)
            };
            let full = row_h + ui.spacing().item_spacing.y;
            area = area.vertical_scroll_offset(Self::offset_for(at, full, ui.available_height()));
            self.scroll_pending = false;
        }
        let mut clicked = None;
        area.show_rows(ui, row_h, count, |ui, range| {
            for n in range.map(number) {
                let src = (n as usize)
                    .checked_sub(1)
                    .and_then(|i| text.get(i))
                    .map_or("", |s| s.as_str());
                let row = Row {
                    heat: heat.get(n),
                    level: heat.get(n).map_or(0.0, |h| heat.level(&h)),
                    number: Some(n),
                    text: src,
                    selected: n == t.line,
                    label: format!("{}:{n}", file_name(&t.file)),
                };
                if row.show(ui, row_h).clicked() {
                    clicked = Some(n);
                }
            }
        });
        if let (Some(n), Some(t)) = (clicked, &mut self.target) {
            t.line = n;
        }
    }

    fn disasm_view(&mut self, ui: &mut Ui, t: &SourceTarget, env: SourceEnv) {
        let Some(src) = env.source else {
            ui.label("No instruction trace to disassemble.");
            return;
        };
        let rows = self.heat.rows(&t.outer);
        if rows.is_empty() {
            ui.label(format!(
                "No instruction of {} ran in the {}.",
                t.outer,
                if env.is_range { "range" } else { "view" }
            ));
            return;
        }
        let max_time = rows
            .iter()
            .filter_map(|r| match r {
                DisasmRow::Insn { heat, .. } => Some(heat.time_ns),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            .max(1);
        let row_h = ui.text_style_height(&egui::TextStyle::Monospace) + 2.0;
        let mut area = egui::ScrollArea::vertical()
            .id_salt("ptscope-disasm")
            .auto_shrink([false, false]);
        if self.scroll_pending {
            let at = rows
                .iter()
                .position(|r| match r {
                    DisasmRow::Insn { ip, .. } => Some(*ip) == t.ip,
                    DisasmRow::Source { file, line } => {
                        t.ip.is_none() && *file == t.file && *line == t.line
                    }
                })
                .unwrap_or(0);
            let full = row_h + ui.spacing().item_spacing.y;
            area = area.vertical_scroll_offset(Self::offset_for(at, full, ui.available_height()));
            self.scroll_pending = false;
        }
        let mut line_of_row = (t.file.clone(), 0u32);
        area.show_rows(ui, row_h, rows.len(), |ui, range| {
            // The source line the first visible row is under.
            if let Some(DisasmRow::Source { file, line }) = rows[..range.start]
                .iter()
                .rev()
                .find(|r| matches!(r, DisasmRow::Source { .. }))
            {
                line_of_row = (file.clone(), *line);
            }
            for r in &rows[range] {
                match r {
                    DisasmRow::Source { file, line } => {
                        line_of_row = (file.clone(), *line);
                        let loaded = self.file(file);
                        let text = loaded
                            .lines()
                            .get((*line as usize).wrapping_sub(1))
                            .map_or("", |s| s.as_str());
                        let heat = self.heat.lines.get(&(file.clone(), *line)).copied();
                        let label = format!("{}:{line}", file_name(file));
                        let shown = format!("{label}  {}", text.trim());
                        Row {
                            heat,
                            level: 0.0,
                            number: None,
                            text: &shown,
                            selected: *file == t.file && *line == t.line && t.ip.is_none(),
                            label,
                        }
                        .show(ui, row_h);
                    }
                    DisasmRow::Insn { ip, heat } => {
                        let dis = env.disasm.get(src, t.pid, *ip, heat.bitness);
                        let text = format!("    {ip:#x}  {}", dis.as_deref().unwrap_or("??"));
                        let on_line = line_of_row.0 == t.file && line_of_row.1 == t.line;
                        Row {
                            heat: Some(LineHeat {
                                count: heat.count,
                                insns: heat.count,
                                time_ns: heat.time_ns,
                            }),
                            level: heat.time_ns as f32 / max_time as f32,
                            number: None,
                            text: &text,
                            selected: t.ip == Some(*ip) || (t.ip.is_none() && on_line),
                            label: format!("{ip:#x}"),
                        }
                        .show(ui, row_h);
                    }
                }
            }
        });
    }
}

/// One painted row of the source or disassembly view.
struct Row<'a> {
    heat: Option<LineHeat>,
    /// Heat bar fill, 0..1.
    level: f32,
    number: Option<u32>,
    text: &'a str,
    selected: bool,
    /// What the row is, for its accessible name.
    label: String,
}

impl Row<'_> {
    fn show(self, ui: &mut Ui, h: f32) -> egui::Response {
        let w = ui.available_width().max(TEXT_X + 100.0);
        let (rect, resp) = ui.allocate_exact_size(vec2(w, h), Sense::click());
        let heat_text = self.heat.map(|h| {
            (
                format!("{}", h.count),
                format_duration(h.time_ns),
                format!("ran {}×, {}", h.count, format_duration(h.time_ns)),
            )
        });
        let name = match &heat_text {
            Some((_, _, s)) => format!("{}: {s}: {}", self.label, self.text.trim()),
            None => format!("{}: did not run: {}", self.label, self.text.trim()),
        };
        resp.widget_info(|| WidgetInfo::labeled(egui::Role::Row, true, &name));
        if !ui.is_rect_visible(rect) {
            return resp;
        }
        let p = ui.painter_at(rect);
        let v = ui.visuals();
        if self.selected {
            p.rect_filled(rect, 0.0, v.selection.bg_fill.gamma_multiply(0.6));
        } else if resp.hovered() {
            p.rect_filled(rect, 0.0, v.widgets.hovered.weak_bg_fill);
        }
        let font = FontId::monospace(12.0);
        let y = rect.center().y;
        if let Some((count, time, _)) = heat_text {
            let bar = Rect::from_min_max(
                rect.min,
                pos2(
                    rect.left() + TIME_X * self.level.clamp(0.0, 1.0),
                    rect.bottom(),
                ),
            );
            p.rect_filled(bar, 0.0, HEAT.gamma_multiply(0.4));
            p.text(
                pos2(rect.left() + COUNT_X, y),
                Align2::RIGHT_CENTER,
                count,
                font.clone(),
                v.strong_text_color(),
            );
            p.text(
                pos2(rect.left() + TIME_X, y),
                Align2::RIGHT_CENTER,
                time,
                font.clone(),
                v.text_color(),
            );
        }
        if let Some(n) = self.number {
            p.text(
                pos2(rect.left() + LINE_X, y),
                Align2::RIGHT_CENTER,
                n.to_string(),
                font.clone(),
                v.weak_text_color(),
            );
        }
        let color = if self.selected {
            v.strong_text_color()
        } else {
            v.text_color()
        };
        p.text(
            pos2(rect.left() + TEXT_X, y),
            Align2::LEFT_CENTER,
            self.text,
            font,
            color,
        );
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_model::LineFrame;

    fn maps(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn remapping_replaces_whole_components() {
        assert_eq!(
            remap("/build/x/src/a.c", "/build/x", "/home/me/x"),
            Some(PathBuf::from("/home/me/x/src/a.c"))
        );
        assert_eq!(
            remap("/build/x/src/a.c", "/build/x/", "/y"),
            Some(PathBuf::from("/y/src/a.c"))
        );
        // Not a component boundary.
        assert_eq!(remap("/build/xy/a.c", "/build/x", "/y"), None);
        assert_eq!(remap("/other/a.c", "/build", "/y"), None);
        assert_eq!(parse_map(" /a = /b "), Ok(("/a".into(), "/b".into())));
        assert!(parse_map("=/b").is_err());
        assert!(parse_map("nothing").is_err());
    }

    #[test]
    fn candidates_try_maps_then_the_path_then_next_to_the_snapshot() {
        let near = Path::new("/snap");
        let c = candidates(
            "/build/proj/src/demo.c",
            &maps(&[("/build/proj", "/home/me/proj"), ("/nomatch", "/x")]),
            Some(near),
        );
        let want: Vec<PathBuf> = [
            "/home/me/proj/src/demo.c",
            "/build/proj/src/demo.c",
            "/snap/build/proj/src/demo.c",
            "/snap/proj/src/demo.c",
            "/snap/src/demo.c",
            "/snap/demo.c",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(c, want);
        // A relative DWARF path: next to the snapshot first.
        let c = candidates("src/a.c", &[], Some(near));
        assert_eq!(
            c,
            vec![
                PathBuf::from("/snap/src/a.c"),
                PathBuf::from("/snap/a.c"),
                PathBuf::from("src/a.c")
            ]
        );
        let (found, tried) = resolve("/gone/demo.c", &[], Some(near), |p| {
            p == Path::new("/snap/demo.c")
        });
        assert_eq!(found, Some(PathBuf::from("/snap/demo.c")));
        assert_eq!(tried.len(), 3);
        let (found, tried) = resolve("/gone/demo.c", &[], None, |_| false);
        assert_eq!((found, tried.len()), (None, 1));
    }

    #[test]
    fn loading_reports_what_it_tried() {
        let dir = std::env::temp_dir().join(format!("ptscope-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("x.c"), "int a;\r\n\tint b;\n").unwrap();
        match load("/nowhere/x.c", &[], Some(&dir)) {
            Loaded::Text { path, lines } => {
                assert_eq!(path, dir.join("x.c"));
                assert_eq!(lines[..2], ["int a;", "    int b;"]);
            }
            other => panic!("{other:?}"),
        }
        match load("/nowhere/y.c", &[], Some(&dir)) {
            Loaded::Missing { tried, why } => {
                assert_eq!(
                    tried,
                    vec![
                        PathBuf::from("/nowhere/y.c"),
                        dir.join("nowhere/y.c"),
                        dir.join("y.c")
                    ]
                );
                assert!(why.contains("/nowhere/y.c"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(load("??", &[], None), Loaded::Missing { .. }));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn heat(count: u64, insns: u64, time_ns: u64) -> LineHeat {
        LineHeat {
            count,
            insns,
            time_ns,
        }
    }

    #[test]
    fn file_heat_picks_one_files_lines() {
        let mut t: HashMap<(Arc<str>, u32), LineHeat> = HashMap::new();
        t.insert(("a.c".into(), 3), heat(300, 2700, 2750));
        t.insert(("a.c".into(), 5), heat(1, 6, 6));
        t.insert(("b.h".into(), 9), heat(7, 7, 99_999));
        let f = FileHeat::build(&t, "a.c");
        assert_eq!(f.get(3), Some(heat(300, 2700, 2750)));
        assert_eq!(f.get(4), None);
        assert_eq!(f.get(9), None);
        assert_eq!(f.get(1000), None);
        assert_eq!((f.max_count, f.max_time), (300, 2750));
        assert_eq!(f.ran().collect::<Vec<_>>(), vec![3, 5]);
        assert_eq!(f.level(&heat(0, 0, 2750)), 1.0);
        assert_eq!(FileHeat::build(&t, "c.c"), FileHeat::default());
    }

    #[test]
    fn disassembly_rows_interleave_lines_by_address() {
        let chain = |f: &str, lines: &[(&str, u32)]| -> Option<Chain> {
            let v: Vec<LineFrame> = lines
                .iter()
                .enumerate()
                .map(|(k, (file, line))| LineFrame {
                    function: if k == 0 { f.into() } else { "inl".into() },
                    file: (*file).into(),
                    line: *line,
                })
                .collect();
            Some(Chain::from(v))
        };
        let h = |count| InsnHeat {
            count,
            time_ns: 1,
            bitness: 64,
        };
        let mut t = HashMap::new();
        t.insert(0x30, (h(300), chain("f", &[("a.c", 30)])));
        t.insert(0x10, (h(1), chain("f", &[("a.c", 29)])));
        t.insert(0x20, (h(300), chain("f", &[("a.c", 30)])));
        t.insert(0x38, (h(300), chain("f", &[("a.c", 30), ("v.h", 4)])));
        t.insert(0x40, (h(2), chain("g", &[("a.c", 50)])));
        t.insert(0x50, (h(2), None));
        let rows = disasm_rows(&t, "f");
        let src = |file: &str, line| DisasmRow::Source {
            file: file.into(),
            line,
        };
        let ins = |ip, count| DisasmRow::Insn { ip, heat: h(count) };
        assert_eq!(
            rows,
            vec![
                src("a.c", 29),
                ins(0x10, 1),
                src("a.c", 30),
                ins(0x20, 300),
                ins(0x30, 300),
                src("v.h", 4),
                ins(0x38, 300),
            ]
        );
        assert!(disasm_rows(&t, "nobody").is_empty());
    }
}
