//! Where the files a trace names but does not hold are found: a binary's
//! separate debug file, and a binary that is not at its recorded path.
//!
//! The decoder reads files; it does not decide where on a machine (or on
//! which debuginfod server) to look for them. Its caller supplies a
//! [`FileLookup`], as samply-symbols takes a `FileAndPathHelper`: the app
//! passes `ptscope_debuginfo::Search` (the debug directories, perf's
//! build-id cache, the user's directories and debuginfod, with progress
//! reported where the app shows it). The trait lives here, with the
//! build-id layouts, because both sides read the formats crate and neither
//! should depend on the other.

use std::path::PathBuf;

/// A debug file found for a binary, and where it came from (said in
/// notes: "from debuginfod https://…").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugFile {
    pub path: PathBuf,
    pub origin: String,
}

/// Finds the files a trace names but does not carry.
pub trait FileLookup: Send + Sync + std::fmt::Debug {
    /// The separate debug file of the binary whose bytes are `binary`,
    /// which the trace mapped as `mapped_path` with `build_id`. What went
    /// wrong on the way (a server down) is added to `notes`. The bytes,
    /// not a path: a snapshot's binary is read in its archive before it is
    /// unpacked anywhere.
    fn debug_file(
        &self,
        binary: &[u8],
        mapped_path: &str,
        build_id: Option<&[u8]>,
        notes: &mut Vec<String>,
    ) -> Option<DebugFile>;

    /// A binary the trace mapped at `mapped_path` (with `build_id`) that is
    /// not there, or is another build there. What went wrong on the way is
    /// added to `notes`.
    fn binary(
        &self,
        build_id: Option<&[u8]>,
        mapped_path: &str,
        notes: &mut Vec<String>,
    ) -> Option<PathBuf>;

    /// Everything that decides what this lookup finds, as text: two
    /// lookups with the same key find the same files. Part of the model
    /// cache's key.
    fn key(&self) -> String;
}
