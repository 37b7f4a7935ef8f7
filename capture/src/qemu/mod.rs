//! The QEMU backend captures a program on a machine without Intel PT at
//! near-native speed: QEMU's user-mode emulator (`qemu-x86_64`) runs the
//! program, and ptscope's plugin inside it (the `ptscope-qemu-plugin`
//! crate) writes the packets a PT unit would have written, with the
//! emulated backend's own unit ([`crate::emulated::hardware`]). The
//! result is the same [`Capture`](crate::recording::Capture) the other
//! backends make.
//!
//! - [`probe`] finds QEMU, reads its version, and checks that a program
//!   is one it can run.
//! - [`wire`] is what ptscope and the plugin say to each other.
//! - [`per_cpu`] lays a capture out per CPU (`--per-cpu`,
//!   `--system-wide`) from the pieces the plugin cuts each thread's trace
//!   into.
//! - `run` starts QEMU with the plugin and collects the snapshots
//!   ([`capture_each`]).

pub mod per_cpu;
pub mod probe;
mod run;
pub mod wire;

pub use run::{capture_each, QemuOptions};
