//! The ptscope application: the window and the command line, wiring the
//! capture, decoder and viewer crates together. Every input opens through
//! the decoder's one way in (`ptscope_decoder::open`), from the CLI and the
//! window alike.
//!
//! - [`gui`]: the window (tabs, open/recent/drop, the title) and [`loader`],
//!   which decodes a file off the UI thread and starts the fine pass the
//!   view asks for line detail;
//! - [`missing`]: binaries a trace maps that cannot be found, the remedies
//!   `info` and the window offer, and what Save as adds of what the user
//!   supplied;
//! - [`capture_panel`]: the window's Capture panel, and [`recorder`], the
//!   capture both it and `ptscope record`/`attach` run;
//! - [`report`]: `ptscope decode` and `stats`, and [`outlier`]: `stats
//!   --histogram` and `compare`, the outlier hunt;
//! - [`export`]: `ptscope export`, the spans for other tools (Perfetto,
//!   Fuchsia's FXT and Chrome's JSON trace events);
//! - [`name_dirs`]: the flags that say where debug files and binaries
//!   not at their paths are found;
//! - [`scale`]: `ptscope grow`, large genuine snapshots for benchmarks;
//! - [`demo`]: the demo snapshot, and [`qemu_plugin`]: the QEMU backend's
//!   plugin, both built into the binary;
//! - [`size`]: byte sizes as users type them, and [`durations`]: durations;
//! - [`allocator`]: the one setting made of glibc's malloc, so that a
//!   decode's growing buffers leave no resident holes.
//!
//! It is a library as well as the `ptscope` binary so that the GUI tests
//! (`tests/gui.rs`) drive the real application state.

// FFI: `mallopt`, one call.
#[allow(unsafe_code)]
pub mod allocator;
pub mod capture_panel;
pub mod demo;
pub mod durations;
pub mod export;
pub mod gui;
pub mod loader;
pub mod missing;
pub mod name_dirs;
pub mod outlier;
pub mod qemu_plugin;
pub mod recorder;
pub mod report;
pub mod scale;
pub mod size;

#[cfg(test)]
mod tests {
    use anyhow::Context;

    /// Library errors say their cause once, in their message, so the
    /// chain anyhow prints (`{:#}`) repeats nothing.
    #[test]
    fn causes_are_said_once() {
        let path = std::path::Path::new("x.data");
        let format = ptscope_formats::perf_data::PerfDataFile::parse(b"PERFILE2")
            .map_err(|e| ptscope_formats::FileError::format(path, e))
            .context("cannot open the snapshot")
            .unwrap_err();
        let text = format!("{format:#}");
        assert!(
            text.starts_with("cannot open the snapshot: x.data: "),
            "{text}"
        );
        assert_eq!(text.matches("x.data").count(), 1, "{text}");
        let io = Err::<(), _>(std::io::Error::other("disk on fire"))
            .context("cannot save")
            .unwrap_err();
        assert_eq!(format!("{io:#}"), "cannot save: disk on fire");
    }
}
