//! This module defines [`CaptureError`], the error the crate's operations
//! return; the Intel PT and perf_event layers' own errors
//! ([`PtSetupError`](crate::intel_pt::PtSetupError),
//! [`PerfError`](crate::perf_event::PerfError)) convert into it. Every error
//! says its cause once, in its message, and an error that concerns a file
//! names it, so that a caller can show the message as it is.

use std::path::{Path, PathBuf};

use ptscope_formats::FileError;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Writing or reading one of our files failed.
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{0}")]
    Unsupported(String),
    #[error("cannot start `{program}`: {error}")]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    #[error("ptrace {op} on thread {tid} failed: {errno}")]
    Ptrace {
        op: &'static str,
        tid: i32,
        errno: nix::errno::Errno,
    },
    #[error("trigger symbol `{0}` was not found in the program or its libraries")]
    SymbolNotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Filter(#[from] crate::filter::FilterError),
    #[error(transparent)]
    Pt(#[from] crate::intel_pt::PtSetupError),
    #[error(transparent)]
    Perf(#[from] crate::perf_event::PerfError),
}

impl CaptureError {
    pub fn io(path: &Path, error: std::io::Error) -> CaptureError {
        CaptureError::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}
