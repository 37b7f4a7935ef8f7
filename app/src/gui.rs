//! The desktop window. Until the timeline lands, it shows what the snapshot
//! holds.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

pub fn run(file: Option<PathBuf>) -> Result<ExitCode> {
    let path = file.unwrap_or_else(demo_path);
    let summary = ptscope_viewer::summary::SnapshotSummary::load(&path);
    let options = eframe::NativeOptions {
        viewport: eframe::egui::ViewportBuilder::default()
            .with_title("ptscope")
            .with_inner_size([1100.0, 700.0]),
        ..Default::default()
    };
    eframe::run_native(
        "ptscope",
        options,
        Box::new(move |_cc| Ok(Box::new(App { summary }))),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// The bundled demo: next to the executable's workspace, or installed.
pub fn demo_path() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.join("../assets/demo/demo.ptscope")
}

struct App {
    summary: ptscope_viewer::summary::SnapshotSummary,
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut eframe::egui::Ui, _frame: &mut eframe::Frame) {
        eframe::egui::CentralPanel::default().show(ui, |ui| {
            self.summary.ui(ui);
        });
    }
}
