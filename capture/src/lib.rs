//! Getting raw Intel PT traces.
//!
//! This crate holds everything before decoding: the capture backends (the
//! emulated one, which single-steps a process with ptrace and writes the
//! packets PT hardware would write), the triggers, process and symbol
//! discovery, and the snapshot file, which is a standard perf.data plus the
//! binaries it maps. The decoder reads what this crate writes; nothing here
//! depends on decoding.

pub mod emulated;
pub mod error;
pub mod intel_pt;
pub mod perf_event;
pub mod procfs;
pub mod recording;
pub mod supervise;
#[allow(unsafe_code)] // SAFETY comments on each block.
pub mod tracee;

pub use error::CaptureError;
pub mod trigger;
