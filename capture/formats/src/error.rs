//! The error of opening, reading or writing a file in one of our formats.
//! Every variant names the file, and says its cause once, in its message.

use std::path::{Path, PathBuf};

use crate::perf_data::FormatError;

/// Why a snapshot or perf.data file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file system refused: the file is missing, unreadable, or the
    /// disk is full.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file is not what it claims to be, at the archive level.
    #[error("{}: not a valid {kind}: {problem}", path.display())]
    BadFile {
        path: PathBuf,
        kind: &'static str,
        problem: String,
    },
    /// The perf.data inside is malformed.
    #[error("{}: {error}", path.display())]
    Format { path: PathBuf, error: FormatError },
}

impl FileError {
    pub fn io(path: &Path, error: std::io::Error) -> FileError {
        FileError::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    pub fn format(path: &Path, error: FormatError) -> FileError {
        FileError::Format {
            path: path.to_path_buf(),
            error,
        }
    }

    /// The file this error is about.
    pub fn path(&self) -> &Path {
        match self {
            FileError::Io { path, .. }
            | FileError::BadFile { path, .. }
            | FileError::Format { path, .. } => path,
        }
    }
}
