//! This module defines [`CaptureError`], the error the crate's operations
//! return, and the errors of the layers below it that convert into it:
//! [`PtSetupError`] (Intel PT's set-up), [`PerfError`] (perf_event_open)
//! and [`FilterError`] (`--filter`). They live here, not in their layers,
//! so that this module depends on none of them and every module can
//! return a [`CaptureError`] without a cycle of imports; the layers
//! re-export theirs and say how each is made. Every error
//! says its cause once, in its message, and an error that concerns a file
//! names it, so that a caller can show the message as it is.

use std::path::{Path, PathBuf};

use nix::errno::Errno;
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
    Filter(#[from] FilterError),
    #[error(transparent)]
    Pt(#[from] PtSetupError),
    #[error(transparent)]
    Perf(#[from] PerfError),
}

impl CaptureError {
    pub fn io(path: &Path, error: std::io::Error) -> CaptureError {
        CaptureError::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}

/// What is wrong with a `--filter`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("bad filter `{filter}`: {why}")]
    Syntax { filter: String, why: String },
    #[error("filter action `{0}` is not one Intel PT has: it has `filter` and `tracestop`")]
    Action(String),
    #[error("filter symbol `{symbol}` was not found in {file}")]
    UnknownSymbol { symbol: String, file: String },
    #[error("cannot read {file} for the filter: {why}")]
    File { file: String, why: String },
    #[error("{given} filter ranges given, but the CPU has {max} address ranges")]
    TooMany { given: usize, max: usize },
    #[error("the filter `{0}` has a size of zero")]
    Empty(String),
}

/// A perf_event_open, mmap or ioctl that failed, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("cannot open {what}: {errno}. {guidance}")]
    Open {
        what: String,
        errno: Errno,
        guidance: String,
    },
    #[error("cannot map the buffer of {what}: {errno}. {guidance}")]
    Mmap {
        what: String,
        errno: Errno,
        guidance: String,
    },
    #[error("{op} failed on {what}: {errno}")]
    Ioctl {
        op: &'static str,
        what: String,
        errno: Errno,
    },
}

/// What can go wrong setting up Intel PT.
#[derive(Debug, thiserror::Error)]
pub enum PtSetupError {
    #[error(
        "no Intel PT on this machine: {} does not exist ({cpu}). Intel PT needs an Intel CPU \
         from Broadwell on, not virtualised away, and a kernel with CONFIG_PERF_EVENTS_INTEL_PT; \
         use the emulated backend (--backend emulated) instead",
        dir.display()
    )]
    NoPmu { dir: PathBuf, cpu: String },
    #[error("{}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {problem}", path.display())]
    BadSysfs { path: PathBuf, problem: String },
    #[error("{}: the intel_pt PMU has no `{term}` term in format/", dir.display())]
    NoTerm { dir: PathBuf, term: String },
    #[error("timing `{timing}`: {problem}")]
    Timing { timing: String, problem: String },
}
