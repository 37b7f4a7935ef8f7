//! The ptscope application: the window and the command line, wiring the
//! capture, decoder and viewer crates together.
//!
//! It is a library as well as the `ptscope` binary so that the GUI tests
//! (`tests/gui.rs`) drive the real application state.

pub mod capture_panel;
pub mod fuzzy;
pub mod gui;
pub mod loader;
pub mod recorder;
pub mod report;
pub mod scale;
