//! Inputs that are not a trace to walk: `perf script` text, and models
//! decoded before and kept on disk.
//!
//! - [`perf_script`]: `perf script` text imported as branch events;
//! - [`cache`]: decoded models kept on disk, read back in place.

pub(crate) mod cache;
pub(crate) mod perf_script;
