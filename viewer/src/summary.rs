//! A panel that sums up an opened snapshot: its threads and binaries.

use std::path::{Path, PathBuf};

use ptscope_capture::snapshot::Snapshot;

/// What the panel shows; loaded once, drawn every frame.
pub struct SnapshotSummary {
    pub path: PathBuf,
    pub lines: Vec<String>,
    pub error: Option<String>,
}

impl SnapshotSummary {
    pub fn load(path: &Path) -> SnapshotSummary {
        let mut s = SnapshotSummary {
            path: path.to_path_buf(),
            lines: Vec::new(),
            error: None,
        };
        match Snapshot::open(path).and_then(|snap| {
            let trace = snap.trace()?;
            let mut lines = Vec::new();
            if let Some(m) = &snap.metadata {
                lines.push(format!(
                    "Captured with the {} backend; stopped by {}",
                    m.backend, m.stop
                ));
                lines.push(format!("Command: {}", m.command.join(" ")));
            }
            for st in &trace.streams {
                let comm = st
                    .tid
                    .and_then(|t| trace.thread(t))
                    .map(|t| t.comm.clone())
                    .unwrap_or_default();
                lines.push(format!(
                    "Thread {} {comm}: {} bytes of PT",
                    st.tid.unwrap_or(-1),
                    st.data.len()
                ));
            }
            Ok(lines)
        }) {
            Ok(lines) => s.lines = lines,
            Err(e) => s.error = Some(e.to_string()),
        }
        s
    }

    pub fn ui(&self, ui: &mut egui::Ui) {
        ui.heading("ptscope");
        ui.label("The timeline view is not built yet. This window shows what the snapshot holds.");
        ui.separator();
        ui.label(format!("Snapshot: {}", self.path.display()));
        if let Some(e) = &self.error {
            ui.colored_label(egui::Color32::LIGHT_RED, e);
        }
        for l in &self.lines {
            ui.label(l);
        }
    }
}
