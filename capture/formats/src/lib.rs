//! The file formats ptscope reads and writes, apart from any capture
//! machinery, so that the decoder and the viewer read a file without
//! compiling ptrace or perf_event_open.
//!
//! - [`perf_data`]: perf's `perf.data` format, a bounds-checked zero-copy
//!   reader and a writer: header, attrs, records, feature sections.
//! - [`snapshot`]: the `.ptscope` snapshot, a tar of a standard perf.data,
//!   the binaries it maps as perf's build-id cache, and [`Metadata`]; also
//!   opens a plain perf.data by content. [`Trace`] is its PT view: AUX
//!   streams per thread or CPU, sideband and parameters.
//! - [`pt`]: the Intel PT packet format: [`pt::read`], the parser;
//!   [`pt::write`], the encoder; [`pt::errata`], which CPUs write which
//!   packets wrong.
//! - [`pt_params`]: the Intel PT parameters perf stores for decoders
//!   (AUXTRACE_INFO) and the PMU term bits they refer to.
//! - [`filter`]: IP filters in perf's syntax, as `--filter` takes them and
//!   AUXTRACE_INFO records them, and where they land in a process.
//! - [`buildid`]: ELF build ids and perf's build-id cache layout.
//! - `lookup`: [`FileLookup`], how the decoder's caller tells it
//!   where debug files and binaries not at their paths are found.
//! - [`demangle()`]: mangled symbol names (Rust, C++, OCaml) made readable;
//!   the one demangler of ptscope, so a name shown is a name a trigger takes.
//! - `mapped`: file bytes read in place ([`FileBytes`]) (a snapshot's perf.data is
//!   mapped, not copied), and parts of them shared ([`SharedBytes`]); the
//!   crate's one module allowed `unsafe`.
//! - [`FileError`]: what can go wrong, naming the file.
//!
//! [`Metadata`]: snapshot::Metadata
//! [`Trace`]: snapshot::Trace

// What is `pub` is exported; everything else says `pub(crate)`.
#![warn(unreachable_pub)]

// Each format is a namespace, as object's `read::elf` is; the files
// inside one are private, and its `mod.rs` lists what it offers. A part
// with one thing to offer is private, its item exported here.
pub mod buildid;
mod demangle;
mod error;
pub mod filter;
mod lookup;
#[allow(unsafe_code)]
mod mapped;
pub mod perf_data;
pub mod pt;
pub mod pt_params;
pub mod snapshot;

pub use demangle::demangle;
pub use error::FileError;
pub use lookup::{DebugFile, FileLookup};
pub use mapped::{FileBytes, SharedBytes};
pub use snapshot::Snapshot;
