//! Finding a binary's debug info where the tools of the ecosystem (perf,
//! gdb, addr2line, elfutils) find it. Distributions strip their binaries
//! and ship the symbols apart; a trace through a system library names its
//! functions only with them.
//!
//! [`Search`] looks, in order, for the debug file of a binary (identified
//! by its build id and its `.gnu_debuglink`):
//! 1. the build-id caches a snapshot carries (what was found at capture);
//! 2. the debug directories (`/usr/lib/debug`, then the user's
//!    `--debug-dir`s) by build id: `.build-id/xx/yyyy.debug`;
//! 3. `.gnu_debuglink`, its CRC checked, in the binary's directory, its
//!    `.debug/`, and each debug directory under the binary's own path;
//! 4. perf's build-id cache (`~/.debug/.build-id/xx/yyyy/debug`);
//! 5. debuginfod, through `DEBUGINFOD_URLS`, with its cache
//!    ([`debuginfod`]).
//!
//! It also finds binaries that are not at their recorded paths, by build
//! id and by name, in the user's `--binaries` directories, and last from
//! debuginfod (its `executable`).
//!
//! The parts, one file each:
//! - `search`: [`Search`], the order above, and what it found
//!   ([`Found`], [`Origin`]);
//! - `debuglink`: the `.gnu_debuglink` section and its CRC;
//! - [`debuginfod`]: the debuginfod client (HTTP through `ureq`), its
//!   cache (elfutils' layout, shared with gdb and perf), timeouts and
//!   progress reports.
//!
//! What it finds serves the decoder (`ptscope_decoder`'s names:
//! lines and inline frames from the debug file, code from the binary), the
//! capture, which stores it in the snapshot so that another machine names
//! what this one named, and the app's `info` and missing-binaries notice.

// What is `pub` is exported; everything else says `pub(crate)`.
#![warn(unreachable_pub)]

// The client is a namespace of its own (its `Client`, `Progress` and
// errors); the rest is private, its items exported here.
pub mod debuginfod;
mod debuglink;
mod search;

pub use search::{Found, Origin, Search};
