//! Typed errors of the capture crate. Every error that concerns a file names it.

use std::path::{Path, PathBuf};

use crate::perf_data::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a valid {kind}: {problem}", path.display())]
    BadFile {
        path: PathBuf,
        kind: &'static str,
        problem: String,
    },
    #[error("{}: {source}", path.display())]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
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
    Pt(crate::intel_pt::PtError),
    #[error(transparent)]
    Perf(#[from] crate::perf_event::PerfError),
}

impl CaptureError {
    pub fn io(path: &Path, source: std::io::Error) -> CaptureError {
        CaptureError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn format(path: &Path, source: FormatError) -> CaptureError {
        CaptureError::Format {
            path: path.to_path_buf(),
            source,
        }
    }
}
