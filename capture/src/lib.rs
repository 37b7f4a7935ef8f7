//! The capture crate gets raw Intel PT traces and everything a decoder needs
//! to read them. Nothing here decodes: the decoder and the viewer read what
//! this crate records. The file formats (perf.data, the `.ptscope` snapshot,
//! build ids, the PT parameters perf stores) live in the `ptscope-formats`
//! crate, so that the decoder and the viewer read them without compiling
//! ptrace or perf_event_open.
//!
//! - [`intel_pt`] captures real Intel PT through perf_event_open, with no perf tool.
//! - [`emulated`] single-steps a process and writes the packets PT hardware would.
//! - [`qemu`] runs a command under QEMU's user-mode emulator, whose ptscope plugin
//!   writes those packets at near-native speed (the plugin is `capture/qemu-plugin`).
//! - [`perf_event`] opens perf events and reads their rings, sideband and breakpoints.
//! - [`tracee`] spawns, seizes, resumes, detaches and waits for traced processes.
//! - [`filter`] reads and resolves IP filters (`--filter`), in perf's syntax.
//! - [`trigger`] says when a capture takes its snapshot and finds a symbol's address.
//! - [`procfs`] reads processes, threads, mappings and signal masks from `/proc`.
//! - `kernel_symbols` copies `/proc/kallsyms` and `/proc/modules` for a kernel trace.
//! - [`recording`] holds what a capture recorded, whichever backend took it.
//! - [`save`] writes a recording, from either backend, as a `.ptscope` snapshot.
//! - [`supervise`] runs captures in a child process, so a killed ptscope kills no tracee.
//! - [`insn`] classifies x86 instructions by the PT packets they produce, for the
//!   emulated unit and the slow-call trigger alike.
//! - `error` defines [`CaptureError`], the error the crate's operations return, and
//!   the errors of the layers below it, so that it depends on no other module.

// What is `pub` is exported; everything else says `pub(crate)`.
#![warn(unreachable_pub)]

// The backends, and the parts of a capture their users drive, are
// namespaces (`intel_pt::backend::capture`, `trigger::Trigger`,
// `procfs::threads`): their functions are named for the namespace they sit
// in. Inside each backend, what only the backend uses is private.
pub mod emulated;
mod error;
pub mod filter;
pub mod insn;
pub mod intel_pt;
mod kernel_symbols;
pub mod perf_event;
pub mod procfs;
pub mod qemu;
pub mod recording;
pub mod save;
pub mod supervise;
// Forks and execs the traced process: each unsafe block says why it is sound.
#[allow(unsafe_code)]
pub mod tracee;
pub mod trigger;

pub use error::{CaptureError, PerfError, PtSetupError};
